//! What the host adds to a GPU source: process owners from `/proc`, pods from the kubelet,
//! Slurm jobs and their accounts, the kernel log's XIDs merged with NVML's, and the NVIDIA
//! GPUs the PCI bus lists.
//!
//! [`HostSource`] wraps the NVML source and runs the host's [`Collectors`] over each of its
//! snapshots. NVML's own sixteen families stay inside it: its calls go GPU by GPU, each
//! GPU through every family, and a GPU lost mid-way stops its later families, so they are
//! timed where they run (`source::nvml::calls`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use super::collector::Collectors;
use super::hpc_jobs::HpcJobFiles;
use super::kmsg::KernelLogXids;
use super::kubelet::KubeletReader;
use super::owners::ProcessOwners;
use super::pci::PciBus;
use super::slurm_accounts::SlurmAccounts;
use super::{Collection, Source};
use crate::config::CollectConfig;
use crate::procinfo::ProcFs;

/// A GPU source with the host's view added.
pub struct HostSource {
    inner: Box<dyn Source>,
    collectors: Collectors,
    /// Where XIDs come from besides NVML, for [`Source::describe`].
    kernel_log: String,
}

impl HostSource {
    pub fn new(inner: Box<dyn Source>, config: &CollectConfig) -> HostSource {
        let procfs = config.processes.then(|| {
            Arc::new(ProcFs::host(&config.proc_path).hide_arguments(!config.show_arguments))
        });
        let kmsg = KernelLogXids::new(config.kmsg_path());
        let kernel_log = kmsg.describe();
        // The order they run in: each reads what those before it wrote.
        let mut collectors = Collectors::default();
        if let Some(table) = &procfs {
            collectors.push(Box::new(ProcessOwners {
                table: table.clone(),
            }));
        }
        // After /proc: the join to pods starts from the pod UIDs the cgroups gave.
        if let Some(socket) = config.kubelet_socket_path() {
            collectors.push(Box::new(KubeletReader::new(
                socket,
                &config.gpu_resource_names,
                config.interval,
            )));
        }
        let (mapping_dir, gpustat_dir) = config.hpc_job_dirs();
        if let Some(jobs) = HpcJobFiles::new(mapping_dir, gpustat_dir, procfs) {
            collectors.push(Box::new(jobs));
        }
        // After the jobs of processes (cgroups) and of GPUs (mapping files) are known.
        if let Some(program) = config.scontrol_program() {
            collectors.push(Box::new(SlurmAccounts::new(program.to_owned())));
        }
        collectors.push(Box::new(kmsg));
        match config.pci_devices.as_str() {
            "" | "off" => {}
            path => collectors.push(Box::new(PciBus {
                root: PathBuf::from(path),
            })),
        }
        HostSource {
            inner,
            collectors,
            kernel_log,
        }
    }
}

impl Source for HostSource {
    fn collect(&mut self) -> Collection {
        let mut collection = self.inner.collect();
        let began = Instant::now();
        self.collectors
            .run(&mut collection.snapshot, &mut collection.health.families);
        // The host's part is part of the collection.
        collection.health.seconds += began.elapsed().as_secs_f64();
        collection
    }

    fn describe(&self) -> String {
        format!("{}; {}", self.inner.describe(), self.kernel_log)
    }
}
