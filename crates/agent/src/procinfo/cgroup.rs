//! Container id and Kubernetes pod UID from `/proc/PID/cgroup`.
//!
//! Container runtimes put each container in a cgroup named after its 64-hex-digit id, and
//! the kubelet nests containers in a cgroup named after their pod's UID. The names differ
//! by runtime, cgroup driver (cgroupfs or systemd) and cgroup version:
//!
//! | runtime / driver            | path segment                                            |
//! |-----------------------------|---------------------------------------------------------|
//! | docker, cgroupfs (v1 or v2) | `/docker/<id>`                                          |
//! | docker, systemd             | `/system.slice/docker-<id>.scope`                       |
//! | containerd, systemd         | `…/cri-containerd-<id>.scope`                           |
//! | cri-o, systemd              | `…/crio-<id>.scope` (`crio-conmon-<id>` is its monitor) |
//! | podman                      | `…/libpod-<id>.scope`                                   |
//! | kubelet, cgroupfs           | `/kubepods/burstable/pod<uid>/<id>`                     |
//! | kubelet, systemd            | `kubepods-burstable-pod<uid_with_underscores>.slice`    |
//!
//! The parser looks at path segments, innermost first, and accepts only exact shapes (64 hex
//! digits; a 36-character UUID or a static pod's 32-hex-digit hash), so a service or
//! session name never passes for a container.

/// What a cgroup file says about a process's container and pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupOwner {
    /// Full 64-hex-digit container id, lowercase.
    pub container: Option<String>,
    /// Kubernetes pod UID, lowercase, with dashes.
    pub pod: Option<String>,
    /// Slurm job id, from the cgroup slurmstepd puts the job's processes in.
    pub hpc_job: Option<String>,
}

/// Reads the content of `/proc/PID/cgroup` (v1: one line per hierarchy; v2: `0::/path`).
/// The first hierarchy that names a container (or pod) wins.
pub fn owner(cgroup_file: &str) -> CgroupOwner {
    let paths = cgroup_file
        .lines()
        .filter_map(|line| line.splitn(3, ':').nth(2));
    let mut found = CgroupOwner::default();
    for path in paths {
        if found.container.is_none() {
            found.container = container_id(path);
        }
        if found.pod.is_none() {
            found.pod = pod_uid(path);
        }
        if found.hpc_job.is_none() {
            found.hpc_job = slurm_job(path);
        }
    }
    found
}

/// Runtime prefixes of systemd scope names that wrap a container id.
const SCOPE_PREFIXES: [&str; 5] = [
    "docker-",
    "cri-containerd-",
    "crio-",
    "containerd-",
    "libpod-",
];

/// The container id in one cgroup path, if it names a container.
pub(crate) fn container_id(path: &str) -> Option<String> {
    path.rsplit('/').find_map(|segment| {
        let name = segment.strip_suffix(".scope").unwrap_or(segment);
        let name = SCOPE_PREFIXES
            .iter()
            .find_map(|p| name.strip_prefix(p))
            .unwrap_or(name);
        (name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| name.to_ascii_lowercase())
    })
}

/// The Kubernetes pod UID in one cgroup path, if it is under `kubepods`.
pub(crate) fn pod_uid(path: &str) -> Option<String> {
    if !path.contains("kubepods") {
        return None;
    }
    path.rsplit('/').find_map(|segment| {
        let uid = if let Some(slice) = segment.strip_suffix(".slice") {
            // systemd driver: kubepods-<qos>-pod<uid>.slice, dashes escaped as underscores.
            slice.rsplit_once("-pod")?.1.replace('_', "-")
        } else {
            segment.strip_prefix("pod")?.to_string()
        };
        is_pod_uid(&uid).then(|| uid.to_ascii_lowercase())
    })
}

/// The Slurm job id in one cgroup path, if slurmstepd made it.
///
/// cgroup v1 (`proctrack/cgroup`): `/slurm/uid_<uid>/job_<id>/step_<step>/…`; cgroup v2:
/// `/system.slice/slurmstepd.scope/job_<id>/step_<step>/…` (the scope may carry the node
/// name: `<node>_slurmstepd.scope`). A `job_<id>` segment elsewhere (a user's own cgroup)
/// names no Slurm job.
pub(crate) fn slurm_job(path: &str) -> Option<String> {
    let mut segments = path.split('/');
    let under_slurm = segments
        .by_ref()
        .any(|s| s == "slurm" || s == "slurmstepd.scope" || s.ends_with("_slurmstepd.scope"));
    if !under_slurm {
        return None;
    }
    segments
        .take(2)
        .find_map(|s| s.strip_prefix("job_"))
        .filter(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
        .map(str::to_string)
}

/// A UUID (`8-4-4-4-12` hex) or a static pod's config hash (32 hex digits).
fn is_pod_uid(s: &str) -> bool {
    let hex = |part: &str| part.bytes().all(|b| b.is_ascii_hexdigit());
    if s.len() == 32 {
        return hex(s);
    }
    let parts: Vec<&str> = s.split('-').collect();
    parts.len() == 5
        && parts.iter().map(|p| p.len()).eq([8, 4, 4, 4, 12])
        && parts.iter().all(|p| hex(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CID: &str = "4c1a6b9f0e2d3c4b5a69788796a5b4c3d2e1f00112233445566778899aabbccd";
    const UID: &str = "0f3d2c1a-5b6e-4c7d-8e9f-0a1b2c3d4e5f";

    fn both(file: &str) -> (Option<String>, Option<String>) {
        let o = owner(file);
        (o.container, o.pod)
    }

    #[test]
    fn slurm_jobs_v1_and_v2() {
        let v1 = "12:devices:/slurm/uid_1000/job_4242/step_0/task_0\n0::/user.slice\n";
        assert_eq!(owner(v1).hpc_job.as_deref(), Some("4242"));
        let v2 = "0::/system.slice/slurmstepd.scope/job_77/step_batch/user/task_0\n";
        assert_eq!(owner(v2).hpc_job.as_deref(), Some("77"));
        let named = "0::/system.slice/node01_slurmstepd.scope/job_9/step_0/user/task_0\n";
        assert_eq!(owner(named).hpc_job.as_deref(), Some("9"));
        // A job_ segment outside slurmstepd's tree, a non-numeric id, a bare scope: no job.
        for path in [
            "0::/user.slice/job_12/x\n",
            "0::/system.slice/slurmstepd.scope/job_x/step_0\n",
            "0::/system.slice/slurmstepd.scope/system\n",
            "0::/slurm\n",
        ] {
            assert_eq!(owner(path).hpc_job, None, "{path}");
        }
    }

    #[test]
    fn docker_cgroupfs_v1() {
        let file = format!(
            "12:pids:/docker/{CID}\n11:memory:/docker/{CID}\n1:name=systemd:/docker/{CID}\n0::/system.slice/containerd.service\n"
        );
        assert_eq!(both(&file), (Some(CID.into()), None));
    }

    #[test]
    fn docker_systemd_v2() {
        let file = format!("0::/system.slice/docker-{CID}.scope\n");
        assert_eq!(both(&file), (Some(CID.into()), None));
    }

    #[test]
    fn kubernetes_containerd_systemd_v2() {
        let file = format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{CID}.scope\n",
            UID.replace('-', "_")
        );
        assert_eq!(both(&file), (Some(CID.into()), Some(UID.into())));
    }

    #[test]
    fn kubernetes_guaranteed_qos_has_no_qos_slice() {
        let file = format!(
            "0::/kubepods.slice/kubepods-pod{}.slice/cri-containerd-{CID}.scope",
            UID.replace('-', "_")
        );
        assert_eq!(both(&file), (Some(CID.into()), Some(UID.into())));
    }

    #[test]
    fn kubernetes_crio_systemd_v2_and_its_conmon() {
        let pod = UID.replace('-', "_");
        let file = format!(
            "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{pod}.slice/crio-{CID}.scope"
        );
        assert_eq!(both(&file), (Some(CID.into()), Some(UID.into())));
        // conmon monitors the container from outside it.
        let file = format!(
            "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{pod}.slice/crio-conmon-{CID}.scope"
        );
        assert_eq!(both(&file), (None, Some(UID.into())));
    }

    #[test]
    fn kubernetes_cgroupfs_v1_with_uppercase_id() {
        let upper = CID.to_uppercase();
        let file = format!(
            "11:memory:/kubepods/burstable/pod{UID}/{upper}\n10:cpu,cpuacct:/kubepods/burstable/pod{UID}/{upper}\n"
        );
        assert_eq!(both(&file), (Some(CID.into()), Some(UID.into())));
    }

    #[test]
    fn static_pod_uid_is_a_hash() {
        let hash = "6d8c5c2e0b8a0c5c6b2d2f0c5d3c9c8e";
        let file = format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{hash}.slice/cri-containerd-{CID}.scope"
        );
        assert_eq!(both(&file).1.as_deref(), Some(hash));
    }

    #[test]
    fn podman_rootless() {
        let file = format!(
            "0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{CID}.scope/container"
        );
        assert_eq!(both(&file), (Some(CID.into()), None));
    }

    #[test]
    fn hosts_processes_are_in_no_container() {
        for file in [
            "0::/user.slice/user-1000.slice/session-3.scope",
            "0::/system.slice/ollama.service",
            "0::/",
            "",
            "garbage",
            "0::/system.slice/docker-notanid.scope",
            "0::/podcast.slice/pod0f3d2c1a-5b6e-4c7d-8e9f-0a1b2c3d4e5f",
            "0::/kubepods.slice/kubepods-burstable.slice",
        ] {
            assert_eq!(both(file), (None, None), "{file:?}");
        }
    }
}
