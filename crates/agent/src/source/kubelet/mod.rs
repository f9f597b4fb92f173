//! Who a GPU is allocated to on a Kubernetes node: the kubelet's PodResources API.
//!
//! Each collection calls `v1.PodResourcesLister/List` on the kubelet's Unix socket
//! (`[collect] kubelet_socket`) once, bounded by a timeout, on a small single-threaded
//! runtime owned by this reader: the collection thread is not async, and one call per
//! tick needs no more. The GPU devices of every pod's containers become
//! [`Allocation`]s ([`devices`] maps the device ids to GPUs) and the processes' pod UIDs
//! are joined to pod names ([`join`]).
//!
//! Failure degrades the `kubelet` collector only: a missing, refusing, hanging or vanished
//! socket leaves the allocations empty and
//! `gpu_sentinel_collector_success{collector="kubelet"}` 0 (the collector loop says why
//! once per outage, and again when it answers), and everything else is collected as
//! before. A host where the socket's directory has never existed is not a
//! Kubernetes node: the family is absent there, as node_exporter treats hardware a host
//! does not have, and the agent says so once at start.

pub mod devices;
pub mod join;
pub mod proto;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::collector::{Collected, Collector};
use crate::model::{Allocation, Snapshot};

/// The collector family's name in `gpu_sentinel_collector_success`.
pub(crate) const FAMILY: &str = "kubelet";

/// Longest wait for the kubelet, whatever the interval: a hung kubelet must not hold the
/// collection of everything else for long.
const MAX_TIMEOUT: Duration = Duration::from_secs(5);

/// Device ids that could not be mapped to a GPU are logged once each, up to this many.
const MAX_LOGGED_DEVICES: usize = 64;

/// Reads the kubelet's PodResources API once per collection.
pub struct KubeletReader {
    socket: PathBuf,
    resource_names: Vec<String>,
    timeout: Duration,
    /// The runtime its calls run on, or why it could not be started.
    runtime: Result<tokio::runtime::Runtime, String>,
    /// The socket or its directory was there at some point: from then on its absence is a
    /// failure, not "not a Kubernetes node".
    expected: bool,
    unmapped_logged: BTreeSet<String>,
    join: join::PodJoin,
}

impl KubeletReader {
    /// A reader of `socket` that counts `resource_names` (besides `nvidia.com/gpu` and
    /// `nvidia.com/mig-*`) as GPUs, waiting at most half the collection `interval`.
    pub fn new(socket: &Path, resource_names: &[String], interval: Duration) -> KubeletReader {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build();
        let mut reader = KubeletReader {
            socket: socket.to_owned(),
            resource_names: resource_names.to_vec(),
            timeout: (interval / 2).clamp(Duration::from_millis(100), MAX_TIMEOUT),
            runtime: runtime.map_err(|e| e.to_string()),
            expected: false,
            unmapped_logged: BTreeSet::new(),
            join: join::PodJoin::default(),
        };
        reader.expected = reader.socket_dir_exists();
        if !reader.expected {
            tracing::info!(
                socket = %reader.socket.display(),
                "no kubelet pod-resources directory: not a Kubernetes node, pods are not attributed \
                 (set [collect] kubelet_socket = \"off\" to stop looking)"
            );
        }
        reader
    }

    fn socket_dir_exists(&self) -> bool {
        self.socket.exists() || self.socket.parent().is_some_and(Path::exists)
    }
}

impl Collector for KubeletReader {
    fn name(&self) -> &'static str {
        FAMILY
    }

    /// Lists the pods, adds their GPU allocations to `snapshot` and names the pods of its
    /// processes. Absent while this is not a Kubernetes node.
    fn collect(&mut self, snapshot: &mut Snapshot) -> anyhow::Result<Collected> {
        if !self.expected {
            self.expected = self.socket_dir_exists();
            if !self.expected {
                return Ok(Collected::Absent);
            }
        }
        let outcome = match &self.runtime {
            Err(e) => Err(format!("its I/O runtime did not start: {e}")),
            // The timer is made inside the runtime: tokio's timers need one to exist.
            Ok(rt) => rt
                .block_on(async {
                    tokio::time::timeout(self.timeout, proto::list(&self.socket)).await
                })
                .map_err(|_| format!("no answer within {:?}", self.timeout))
                .and_then(|answer| answer.map_err(|e| e.to_string())),
        };
        match outcome {
            Ok(answer) => {
                self.allocate(snapshot, &answer);
                snapshot.scheduled_by.push("kubernetes".into());
                self.join
                    .apply(&mut snapshot.processes, &snapshot.allocations);
                Ok(Collected::Done)
            }
            Err(reason) => anyhow::bail!(
                "kubelet pod resources at {}: {reason}; GPUs are not attributed to pods \
                 until it answers",
                self.socket.display()
            ),
        }
    }
}

impl KubeletReader {
    /// One allocation per (GPU device, container) of the answer.
    fn allocate(&mut self, snapshot: &mut Snapshot, answer: &proto::ListPodResourcesResponse) {
        let mut found = BTreeSet::new();
        for pod in &answer.pod_resources {
            for container in &pod.containers {
                for devices in &container.devices {
                    if !devices::is_gpu_resource(&devices.resource_name, &self.resource_names) {
                        continue;
                    }
                    for id in &devices.device_ids {
                        let Some(gpu) = devices::resolve(id, &snapshot.gpus) else {
                            self.note_unmapped(
                                id,
                                &devices.resource_name,
                                &pod.namespace,
                                &pod.name,
                            );
                            continue;
                        };
                        let instance = devices::instance(id, gpu);
                        found.insert(Allocation {
                            gpu: gpu.index,
                            uuid: gpu.uuid.clone(),
                            device: (*id != gpu.uuid).then(|| id.clone()),
                            namespace: Some(pod.namespace.clone()),
                            pod: Some(pod.name.clone()),
                            container: Some(container.name.clone()),
                            gpu_instance: instance.map(|(gi, _)| gi),
                            compute_instance: instance.and_then(|(_, ci)| ci),
                            ..Allocation::default()
                        });
                    }
                }
            }
        }
        snapshot.allocations.extend(found);
    }

    fn note_unmapped(&mut self, id: &str, resource: &str, namespace: &str, pod: &str) {
        if self.unmapped_logged.len() < MAX_LOGGED_DEVICES
            && self.unmapped_logged.insert(id.to_string())
        {
            tracing::warn!(
                "kubelet: device {id:?} ({resource}) of pod {namespace}/{pod} matches no GPU \
                 NVML lists; not attributed"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_without_the_kubelet_directory_reports_no_family() {
        let socket = std::env::temp_dir()
            .join(format!("gpu-sentinel-no-kubelet-{}", std::process::id()))
            .join("pod-resources/kubelet.sock");
        let mut reader = KubeletReader::new(&socket, &[], Duration::from_secs(5));
        let mut snapshot = Snapshot::default();
        assert!(matches!(
            reader.collect(&mut snapshot),
            Ok(Collected::Absent)
        ));
        assert!(snapshot.allocations.is_empty());
    }

    #[test]
    fn the_wait_is_half_the_interval_within_bounds() {
        let at =
            |interval| KubeletReader::new(Path::new("/nonexistent/k.sock"), &[], interval).timeout;
        assert_eq!(at(Duration::from_secs(5)), Duration::from_millis(2500));
        assert_eq!(at(Duration::from_millis(50)), Duration::from_millis(100));
        assert_eq!(at(Duration::from_secs(60)), MAX_TIMEOUT);
    }
}
