//! The `kmsg` collector: NVML's XID events and the kernel log's, merged so each error
//! counts once, on every snapshot.
//!
//! NVML's XID event reports only the last of several XIDs; the kernel log has all of them,
//! so both streams go through one [`XidDeduper`]. The collector runs whether or not the
//! kernel log is followed (NVML's events still need merging); it fails while a kernel log
//! that should be followed cannot be.

use std::path::Path;
use std::sync::mpsc::{Receiver, channel};

use super::{KmsgEvent, KmsgFollower, XidDeduper, resolve_gpu};
use crate::model::{KernelLog, Snapshot, XidEvent};
use crate::source::collector::{Collected, Collector};

/// Backlog XIDs logged one by one before the rest are only counted.
const BACKLOG_LOGGED: usize = 20;

/// Merges NVML's XIDs with the kernel log's, following `path` when one is given.
pub(crate) struct KernelLogXids {
    follower: Option<(KmsgFollower, Receiver<KmsgEvent>)>,
    /// Why the kernel log is not followed, when it should be; fails the collector.
    problem: Option<String>,
    /// How the kernel log fares, as the health verdicts read it (`None`: turned off).
    kernel_log: Option<KernelLog>,
    dedup: XidDeduper,
    /// Kernel-log XIDs from before this start seen so far (logged, not counted).
    backlog_seen: usize,
}

impl KernelLogXids {
    /// Starts following `path` (`None`: the kernel log is off). A log that cannot be
    /// opened is not fatal: NVML's own XID events still arrive, and an agent that refuses
    /// to start in a container without `CAP_SYSLOG` helps nobody.
    pub fn new(path: Option<&Path>) -> KernelLogXids {
        let (follower, problem) = match path {
            None => (None, None),
            Some(path) => {
                let (tx, rx) = channel();
                match KmsgFollower::spawn(path, tx) {
                    Ok(follower) => (Some((follower, rx)), None),
                    Err(e) => (None, Some(e.to_string())),
                }
            }
        };
        let kernel_log = path.map(|path| KernelLog {
            path: path.display().to_string(),
            readable: problem.is_none(),
            problem: problem.clone(),
        });
        KernelLogXids {
            follower,
            problem,
            kernel_log,
            dedup: XidDeduper::default(),
            backlog_seen: 0,
        }
    }

    /// For logs and the board: where XIDs come from besides NVML.
    pub fn describe(&self) -> String {
        match &self.follower {
            Some((follower, _)) => format!("XIDs also from {}", follower.path().display()),
            None => "kernel log off".to_string(),
        }
    }

    /// Kernel-log XIDs since the last tick. The backlog from before this start is logged
    /// (an operator should hear of yesterday's XID 79) but not passed on: a restart must
    /// not count, or alert on, the same errors again.
    fn kernel_events(&mut self) -> Vec<XidEvent> {
        let Some((_, rx)) = &self.follower else {
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

impl Collector for KernelLogXids {
    fn name(&self) -> &'static str {
        "kmsg"
    }

    fn collect(&mut self, snapshot: &mut Snapshot) -> anyhow::Result<Collected> {
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
        snapshot.host.kernel_log.clone_from(&self.kernel_log);
        match &self.problem {
            Some(problem) => anyhow::bail!(
                "XIDs from the kernel log are off: {problem}; only NVML's (the last of \
                 several) are seen"
            ),
            None => Ok(Collected::Done),
        }
    }
}
