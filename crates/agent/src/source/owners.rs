//! The `procfs` collector: who owns each GPU process, and whether it still lives, from
//! `/proc` ([`crate::procinfo`]).
//!
//! It fails when `/proc` cannot tell: other users' processes hidden (`hidepid`), or the
//! entry of a PID the GPU reports unreadable (a permission a security module denies).
//! Those processes keep liveness unknown, never "gone": a hidden process is no ghost.

use std::sync::Arc;

use super::collector::{Collected, Collector};
use crate::model::Snapshot;
use crate::procinfo::{self, ProcFs, ProcessTable};

/// Resolves the owners of a snapshot's processes through a `/proc` tree.
pub(crate) struct ProcessOwners {
    pub table: Arc<ProcFs>,
}

impl Collector for ProcessOwners {
    fn name(&self) -> &'static str {
        "procfs"
    }

    fn collect(&mut self, snapshot: &mut Snapshot) -> anyhow::Result<Collected> {
        let unreadable = procinfo::enrich(self.table.as_ref(), &mut snapshot.processes);
        // Asked each collection, also with no GPU process: an agent that cannot see other
        // users' processes is broken before the first job starts.
        if let Err(hidden) = self.table.others_visible() {
            anyhow::bail!("{hidden}; GPU processes' owners and liveness are unknown");
        }
        if let Some((pid, why)) = unreadable.first {
            anyhow::bail!(
                "{why}; the owner and liveness of {} GPU process{} (PID {pid} first) are \
                 unknown",
                unreadable.pids,
                if unreadable.pids == 1 { "" } else { "es" }
            );
        }
        Ok(Collected::Done)
    }
}
