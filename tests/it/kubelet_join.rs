//! Processes joined to pods: the PodResources API has pod names but no UIDs, a process's
//! cgroup has the pod UID but no name. Against a test kubelet (tonic on a Unix socket) and
//! the fixture `/proc` tree (tests/fixtures/proc: PID 4242 in pod 0f3d…, PID 9001 in pod
//! 7c2e…), the reader binds each UID to its pod through the GPUs they hold — here one GPU
//! is time-sliced between both pods, and only the other GPU tells them apart.

use crate::kubelet_support;

use std::path::PathBuf;
use std::time::Duration;

use gpu_sentinel::config::Config;
use gpu_sentinel::model::{GpuSample, ProcessSample, Snapshot};
use gpu_sentinel::procinfo::{ProcFs, enrich};
use gpu_sentinel::source::kubelet::KubeletReader;
use kubelet_support::{PodResourcesServer, answer, pod};

const GPU_A: &str = "GPU-0a0a0a0a-1111-2222-3333-444444444444";
const GPU_B: &str = "GPU-0b0b0b0b-1111-2222-3333-444444444444";

/// A process as the join names it: (pid, namespace, pod, container).
type Named<'a> = (u32, Option<&'a str>, Option<&'a str>, Option<&'a str>);

fn process(uuid: &str, gpu: u32, pid: u32) -> ProcessSample {
    ProcessSample {
        gpu,
        uuid: uuid.into(),
        pid,
        used_memory_bytes: Some(1 << 30),
        ..ProcessSample::default()
    }
}

#[test]
fn pod_uids_from_cgroups_are_joined_to_pod_names_through_their_gpus() {
    let dir = std::env::temp_dir().join(format!("gpu-sentinel-join-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let socket = dir.join("kubelet.sock");
    let _server = PodResourcesServer::start(
        &socket,
        answer(vec![
            pod(
                "ml-train",
                "train-0",
                &[(
                    "trainer",
                    "nvidia.com/gpu",
                    &[&format!("{GPU_A}::0"), GPU_B],
                )],
            ),
            pod(
                "ml-serve",
                "serve-0",
                &[("server", "nvidia.com/gpu", &[&format!("{GPU_A}::1")])],
            ),
        ]),
    );
    let gpus = [GPU_A, GPU_B]
        .iter()
        .enumerate()
        .map(|(i, uuid)| GpuSample {
            index: i as u32,
            uuid: (*uuid).into(),
            up: true,
            ..GpuSample::default()
        })
        .collect();
    let mut snapshot = Snapshot {
        gpus,
        processes: vec![
            process(GPU_A, 0, 4242),
            process(GPU_B, 1, 4242),
            process(GPU_A, 0, 9001),
        ],
        ..Snapshot::default()
    };
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let procfs = ProcFs::new(fixtures.join("proc")).with_passwd(fixtures.join("etc/passwd"));
    enrich(&procfs, &mut snapshot.processes);
    assert!(
        snapshot.processes[0]
            .pod
            .as_deref()
            .is_some_and(|p| p.starts_with("0f3d"))
    );

    let mut reader = KubeletReader::new(&socket, &[], Duration::from_secs(2));
    let health = reader
        .read(&mut snapshot)
        .expect("the socket's directory exists");
    assert!(health.success);
    let named: Vec<Named> = snapshot
        .processes
        .iter()
        .map(|p| {
            (
                p.pid,
                p.namespace.as_deref(),
                p.pod.as_deref(),
                p.container.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        named,
        [
            (4242, Some("ml-train"), Some("train-0"), Some("trainer")),
            (4242, Some("ml-train"), Some("train-0"), Some("trainer")),
            (9001, Some("ml-serve"), Some("serve-0"), Some("server")),
        ]
    );
    assert_eq!(snapshot.allocations.len(), 3, "{:?}", snapshot.allocations);

    // Teams then match on the namespace the join found.
    let config =
        Config::parse("[[teams]]\nname = \"ml\"\nnamespaces = [\"ml-*\"]\n").expect("valid config");
    gpu_sentinel::source::teams::assign(&mut snapshot, &config.teams);
    assert!(
        snapshot
            .processes
            .iter()
            .all(|p| p.team.as_deref() == Some("ml"))
    );
}
