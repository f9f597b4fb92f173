//! Who owns a GPU process: user, command, container, pod, and whether it is still alive.
//!
//! NVML lists the PIDs holding memory on each GPU and nothing else. The host's `/proc`
//! tells the rest: the process name and command line, the user, the container and
//! Kubernetes pod (from its cgroup), how long it has run, and — the raw material of ghost
//! detection — whether the PID is still running, a zombie, an orphan, or gone.
//!
//! The reader sits behind [`ProcessTable`] so tests can use fixture trees and real
//! processes alike; [`ProcFs`] is the implementation over a `/proc`-like directory.
//!
//! What `/proc` cannot tell: a pod's *name* and *namespace* live in the Kubernetes API (or
//! the kubelet's pod-resources socket), not on the host's filesystem, so only the pod UID
//! is given here; `ProcessSample::namespace` is left to whoever can ask the API.

pub mod cgroup;
mod procfs;

pub use procfs::ProcFs;

use std::collections::HashMap;

use crate::model::{Liveness, ProcessSample};

/// Looks up what the host knows about a PID.
pub trait ProcessTable {
    /// Facts about `pid`. Never fails: what cannot be read is `None`, and a PID whose state
    /// cannot be read at all is [`Liveness::Unknown`], never `Gone`.
    fn lookup(&self, pid: u32) -> ProcessInfo;

    /// Whether other users' processes can be read at all (`/proc` mounted with `hidepid`
    /// hides them from an agent without `CAP_SYS_PTRACE`); the error says why not.
    fn others_visible(&self) -> Result<(), String> {
        Ok(())
    }
}

/// What the host says about one process.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessInfo {
    /// Running, zombie, orphaned, gone — or unknown when `/proc` could not be read.
    pub liveness: Liveness,
    /// Short command name (`/proc/PID/comm`).
    pub process: Option<String>,
    /// Command line, truncated; only the program when arguments are hidden.
    pub command: Option<String>,
    /// User name from the passwd file, or the numeric uid when it has no entry there
    /// (directory users, or a container's passwd that is not the host's).
    pub user: Option<String>,
    /// Real user id.
    pub uid: Option<u32>,
    /// Container id (64 hex digits) from the process's cgroup.
    pub container: Option<String>,
    /// Kubernetes pod UID from the process's cgroup.
    pub pod: Option<String>,
    /// Slurm job id from the process's cgroup.
    pub hpc_job: Option<String>,
    /// Seconds since the process started.
    pub runtime_seconds: Option<f64>,
    /// Why the process's entry could not be read although it may well be there (a
    /// permission denied by `hidepid` or a security module); `None` when it could, or when
    /// the process is simply gone.
    pub unreadable: Option<String>,
}

/// What [`enrich`] could not read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Unreadable {
    /// How many of the PIDs looked up could not be read.
    pub pids: usize,
    /// The first of them, and why.
    pub first: Option<(u32, String)>,
}

/// Fills the owner fields (`process`, `user`, `container`, `pod`, `runtime_seconds`) and
/// the liveness of each sample from `table`.
///
/// Values the table cannot give do not overwrite values the sample already has (a replayed
/// recording keeps its owners), and each PID is looked up once even when it holds memory
/// on several GPUs. Returns the PIDs whose entries could not be read.
pub fn enrich(table: &dyn ProcessTable, processes: &mut [ProcessSample]) -> Unreadable {
    let mut seen: HashMap<u32, ProcessInfo> = HashMap::new();
    let mut unreadable = Unreadable::default();
    for sample in processes {
        let info = seen.entry(sample.pid).or_insert_with(|| {
            let info = table.lookup(sample.pid);
            if let Some(why) = &info.unreadable {
                unreadable.pids += 1;
                unreadable
                    .first
                    .get_or_insert_with(|| (sample.pid, why.clone()));
            }
            info
        });
        if info.liveness != Liveness::Unknown {
            sample.liveness = info.liveness;
        }
        fill(&mut sample.process, &info.process);
        fill(&mut sample.command, &info.command);
        fill(&mut sample.user, &info.user);
        fill(&mut sample.container, &info.container);
        fill(&mut sample.pod, &info.pod);
        fill(&mut sample.hpc_job, &info.hpc_job);
        if info.runtime_seconds.is_some() {
            sample.runtime_seconds = info.runtime_seconds;
        }
    }
    unreadable
}

fn fill(field: &mut Option<String>, value: &Option<String>) {
    if value.is_some() {
        field.clone_from(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// A table that answers from a map and counts lookups.
    struct Fixed(HashMap<u32, ProcessInfo>, Cell<u32>);

    impl ProcessTable for Fixed {
        fn lookup(&self, pid: u32) -> ProcessInfo {
            self.1.set(self.1.get() + 1);
            self.0.get(&pid).cloned().unwrap_or_default()
        }
    }

    fn sample(gpu: u32, pid: u32) -> ProcessSample {
        ProcessSample {
            gpu,
            pid,
            ..Default::default()
        }
    }

    #[test]
    fn enrich_fills_owners_and_looks_each_pid_up_once() {
        let info = ProcessInfo {
            liveness: Liveness::Orphaned,
            process: Some("python".into()),
            command: Some("python train.py".into()),
            user: Some("alice".into()),
            uid: Some(1000),
            container: Some("c".repeat(64)),
            pod: Some("0f3d2c1a-5b6e-4c7d-8e9f-0a1b2c3d4e5f".into()),
            hpc_job: Some("4242".into()),
            runtime_seconds: Some(3600.0),
            unreadable: None,
        };
        let table = Fixed(HashMap::from([(42, info)]), Cell::new(0));
        let mut procs = vec![sample(0, 42), sample(1, 42)];
        enrich(&table, &mut procs);
        assert_eq!(table.1.get(), 1);
        for p in &procs {
            assert_eq!(p.liveness, Liveness::Orphaned);
            assert_eq!(p.process.as_deref(), Some("python"));
            assert_eq!(p.user.as_deref(), Some("alice"));
            assert_eq!(p.container.as_deref().map(str::len), Some(64));
            assert!(p.pod.is_some());
            assert_eq!(p.hpc_job.as_deref(), Some("4242"));
            assert_eq!(p.runtime_seconds, Some(3600.0));
        }
    }

    #[test]
    fn unknown_lookups_keep_what_the_sample_had() {
        let table = Fixed(HashMap::new(), Cell::new(0));
        let mut procs = vec![ProcessSample {
            pid: 7,
            user: Some("recorded".into()),
            liveness: Liveness::Running,
            ..Default::default()
        }];
        enrich(&table, &mut procs);
        assert_eq!(procs[0].user.as_deref(), Some("recorded"));
        assert_eq!(procs[0].liveness, Liveness::Running);
    }
}
