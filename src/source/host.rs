//! What the host adds to a GPU source: process owners from `/proc`, the kernel log's
//! XIDs merged with NVML's, and the NVIDIA GPUs the PCI bus lists.
//!
//! [`HostSource`] wraps the NVML source. NVML knows which PIDs hold memory; only `/proc`
//! knows whose they are and whether they still live (the raw material of ghost detection).
//! NVML's XID event reports only the last of several XIDs; the kernel log has all of them,
//! so both streams go through one [`XidDeduper`] and each error counts once.

use std::path::PathBuf;
use std::sync::mpsc::{Receiver, channel};
use std::time::Instant;

use super::hpc_jobs::HpcJobFiles;
use super::kmsg::{KmsgEvent, KmsgFollower, XidDeduper, resolve_gpu};
use super::kubelet::KubeletReader;
use super::slurm_accounts::SlurmAccounts;
use super::{Collection, Source};
use crate::config::CollectConfig;
use crate::model::{FamilyHealth, KernelLog, XidEvent};
use crate::procinfo::{self, ProcFs};

/// A GPU source with the host's view added.
pub struct HostSource {
    inner: Box<dyn Source>,
    procfs: Option<ProcFs>,
    /// Pods holding GPUs, from the kubelet (`None` when `[collect] kubelet_socket` is off).
    kubelet: Option<KubeletReader>,
    /// Slurm jobs holding GPUs, from mapping files (`None` when none is configured).
    hpc_jobs: Option<HpcJobFiles>,
    slurm_accounts: Option<SlurmAccounts>,
    kmsg: Option<(KmsgFollower, Receiver<KmsgEvent>)>,
    /// Why the kernel log is not followed, when it should be; reported as failed health.
    kmsg_problem: Option<String>,
    /// How the kernel log fares, as the health verdicts read it (`None`: turned off).
    kernel_log: Option<KernelLog>,
    /// sysfs's PCI device folder, read each collection (`None`: turned off).
    pci_devices: Option<PathBuf>,
    /// The PCI bus could not be read last time (logged once until it can).
    pci_failing: bool,
    dedup: XidDeduper,
    /// Kernel-log XIDs from before this start seen so far (logged, not counted).
    backlog_seen: usize,
}

/// Backlog XIDs logged one by one before the rest are only counted.
const BACKLOG_LOGGED: usize = 20;

impl HostSource {
    pub fn new(inner: Box<dyn Source>, config: &CollectConfig) -> HostSource {
        let procfs = config
            .processes
            .then(|| ProcFs::host().hide_arguments(!config.show_arguments));
        let (kmsg, kmsg_problem) = match config.kmsg_path() {
            None => (None, None),
            Some(path) => {
                let (tx, rx) = channel();
                match KmsgFollower::spawn(path, tx) {
                    Ok(follower) => (Some((follower, rx)), None),
                    Err(e) => {
                        // Not fatal: NVML's own XID events still arrive, and an agent that
                        // refuses to start in a container without CAP_SYSLOG helps nobody.
                        tracing::warn!("XIDs from the kernel log are off: {e}");
                        (None, Some(e.to_string()))
                    }
                }
            }
        };
        let kernel_log = config.kmsg_path().map(|path| KernelLog {
            path: path.display().to_string(),
            readable: kmsg_problem.is_none(),
            problem: kmsg_problem.clone(),
        });
        let pci_devices = match config.pci_devices.as_str() {
            "" | "off" => None,
            path => Some(PathBuf::from(path)),
        };
        let kubelet = config
            .kubelet_socket_path()
            .map(|socket| KubeletReader::new(socket, &config.gpu_resource_names, config.interval));
        let (mapping_dir, gpustat_dir) = config.hpc_job_dirs();
        HostSource {
            inner,
            procfs,
            kubelet,
            hpc_jobs: HpcJobFiles::new(mapping_dir, gpustat_dir),
            slurm_accounts: config
                .scontrol_program()
                .map(|program| SlurmAccounts::new(program.to_owned())),
            kmsg,
            kmsg_problem,
            kernel_log,
            pci_devices,
            pci_failing: false,
            dedup: XidDeduper::default(),
            backlog_seen: 0,
        }
    }

    /// Kernel-log XIDs since the last tick. The backlog from before this start is logged
    /// (an operator should hear of yesterday's XID 79) but not passed on: a restart must
    /// not count, or alert on, the same errors again.
    fn kernel_events(&mut self) -> Vec<XidEvent> {
        let Some((_, rx)) = &self.kmsg else {
            return Vec::new();
        };
        let mut fresh = Vec::new();
        for KmsgEvent { event, backlog } in rx.try_iter() {
            if !backlog {
                fresh.push(event);
                continue;
            }
            self.backlog_seen += 1;
            if self.backlog_seen <= BACKLOG_LOGGED {
                tracing::warn!(
                    "kernel log before start: XID {} ({}) on {} at {}",
                    event.xid,
                    crate::xid::description(event.xid),
                    event.pci_bus_id.as_deref().unwrap_or("an unknown GPU"),
                    event.at
                );
            } else if self.backlog_seen == BACKLOG_LOGGED + 1 {
                tracing::warn!("kernel log before start: more XIDs, not logged one by one");
            }
        }
        fresh
    }
}

impl HostSource {
    /// Lists the NVIDIA GPUs on the PCI bus into the snapshot, for the health verdicts'
    /// `pci` component; a bus that cannot be read fails the `pci` collector, said once.
    fn read_pci_bus(&mut self, snapshot: &mut crate::model::Snapshot) -> Option<FamilyHealth> {
        let root = self.pci_devices.as_ref()?;
        let began = Instant::now();
        let read = super::pci::nvidia_gpus(root);
        let success = read.is_ok();
        match read {
            Ok(list) => {
                if std::mem::take(&mut self.pci_failing) {
                    tracing::info!(path = %root.display(), "the PCI bus can be read again");
                }
                snapshot.host.pci_gpus = Some(list);
            }
            Err(e) => {
                if !std::mem::replace(&mut self.pci_failing, true) {
                    tracing::warn!(
                        path = %root.display(),
                        error = %e,
                        "cannot read the PCI bus: GPUs missing from NVML go unnoticed \
                         ([collect] pci_devices; not said again until it can be read)"
                    );
                }
            }
        }
        Some(FamilyHealth {
            name: "pci",
            seconds: began.elapsed().as_secs_f64(),
            success,
        })
    }
}

impl Source for HostSource {
    fn collect(&mut self) -> Collection {
        let mut collection = self.inner.collect();
        let snapshot = &mut collection.snapshot;

        let host_began = Instant::now();
        let began = Instant::now();
        if let Some(procfs) = &self.procfs {
            procinfo::enrich(procfs, &mut snapshot.processes);
            collection.health.families.push(FamilyHealth {
                name: "procfs",
                seconds: began.elapsed().as_secs_f64(),
                success: true,
            });
        }
        // After /proc: the join to pods starts from the pod UIDs the cgroups gave.
        if let Some(kubelet) = &mut self.kubelet
            && let Some(family) = kubelet.read(snapshot)
        {
            collection.health.families.push(family);
        }
        if let Some(jobs) = &mut self.hpc_jobs {
            let family = jobs.read(snapshot, self.procfs.as_ref());
            collection.health.families.push(family);
        }
        // After the jobs of processes (cgroups) and of GPUs (mapping files) are known.
        if let Some(accounts) = &mut self.slurm_accounts
            && let Some(family) = accounts.fill(snapshot)
        {
            collection.health.families.push(family);
        }

        let began = Instant::now();
        for event in std::mem::take(&mut snapshot.events) {
            self.dedup.push(event);
        }
        for event in self.kernel_events() {
            self.dedup.push(event);
        }
        snapshot.events = self.dedup.drain(snapshot.at);
        for event in &mut snapshot.events {
            resolve_gpu(event, &snapshot.gpus);
        }
        collection.health.families.push(FamilyHealth {
            name: "kmsg",
            seconds: began.elapsed().as_secs_f64(),
            success: self.kmsg_problem.is_none(),
        });
        snapshot.host.kernel_log.clone_from(&self.kernel_log);
        if let Some(family) = self.read_pci_bus(snapshot) {
            collection.health.families.push(family);
        }
        // The host's part is part of the collection.
        collection.health.seconds += host_began.elapsed().as_secs_f64();
        collection
    }

    fn describe(&self) -> String {
        let kmsg = match &self.kmsg {
            Some((follower, _)) => format!("XIDs also from {}", follower.path().display()),
            None => "kernel log off".to_string(),
        };
        format!("{}; {kmsg}", self.inner.describe())
    }
}
