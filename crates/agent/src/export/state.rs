//! [`ExportState`]: what the exposition remembers from one tick to the next.
//!
//! A snapshot carries only the XIDs seen since the previous one, but Prometheus wants
//! counters that only grow, and dcgm-exporter's `DCGM_FI_DEV_XID_ERRORS` shows the last XID
//! of each GPU until another arrives. Both live here, owned by the collection loop and
//! handed to every [`render`](super::render) call, with the time the previous collection's
//! later stages took (which the caller measures, so rendering reads no clock), and the
//! values the range checks cleared since start (`gpu_sentinel_values_rejected_total`).

use std::collections::BTreeMap;

use crate::model::{RejectedValues, Snapshot, XidEvent};

/// State the exposition carries across ticks. Call [`render`](super::render) once per
/// snapshot: each call adds that snapshot's XID events to the counters.
#[derive(Debug, Clone, Default)]
pub struct ExportState {
    /// Cumulative XIDs since start, per GPU and XID number.
    xid_totals: BTreeMap<XidKey, u64>,
    /// The last XID of each GPU, by UUID.
    last_xid: BTreeMap<String, u32>,
    /// Wall time of the previous collection's stages after `collect` (`analyse`,
    /// `render`), as measured by the caller.
    stage_seconds: BTreeMap<&'static str, f64>,
    /// Values cleared by the range checks since start, by field name.
    rejected: BTreeMap<&'static str, u64>,
    /// Failed saves of each state file since start, as the caller counted them.
    state_save_errors: BTreeMap<&'static str, u64>,
}

/// The labels of one `gpu_xid_errors_total` series. Orders by GPU index (unmatched GPUs,
/// `None`, first), then UUID, then XID number.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct XidKey {
    pub gpu: Option<u32>,
    pub uuid: String,
    pub xid: u32,
}

impl ExportState {
    pub fn new() -> ExportState {
        ExportState::default()
    }

    /// Adds the snapshot's XID events to the counters. An event whose GPU the source could
    /// not name is matched to a GPU of the snapshot by UUID or PCI bus id; failing that it
    /// is still counted, with empty `gpu` and `uuid` labels, because a lost XID is worse
    /// than an unlabelled one.
    pub(super) fn absorb_events(&mut self, snapshot: &Snapshot) {
        for event in &snapshot.events {
            let (gpu, uuid) = resolve_gpu(snapshot, event);
            *self
                .xid_totals
                .entry(XidKey {
                    gpu,
                    uuid: uuid.clone(),
                    xid: event.xid,
                })
                .or_insert(0) += 1;
            if !uuid.is_empty() {
                self.last_xid.insert(uuid, event.xid);
            }
        }
    }

    /// Cumulative XID counts, in exposition order.
    pub(crate) fn xid_totals(&self) -> impl Iterator<Item = (&XidKey, u64)> {
        self.xid_totals.iter().map(|(key, count)| (key, *count))
    }

    /// The last XID seen on the GPU with this UUID since start.
    pub(crate) fn last_xid(&self, uuid: &str) -> Option<u32> {
        self.last_xid.get(uuid).copied()
    }

    /// Records how long a stage of the last collection took (`analyse`: the engine and
    /// alerting; `render`: the exposition and the API documents), shown by the next
    /// exposition as `gpu_sentinel_collect_duration_seconds{stage}`. The caller measures
    /// it, so rendering stays free of clock reads and golden files stay exact.
    pub(crate) fn set_stage_seconds(&mut self, stage: &'static str, seconds: f64) {
        self.stage_seconds.insert(stage, seconds);
    }

    /// Adds the values the range checks cleared in one collection
    /// ([`Snapshot::sanitize`]) to `gpu_sentinel_values_rejected_total`. Returns the fields
    /// cleared for the first time since start, for the caller to log once each.
    pub(crate) fn count_rejected(&mut self, rejected: &RejectedValues) -> Vec<&'static str> {
        let mut first = Vec::new();
        for (field, count) in rejected.iter() {
            let total = self.rejected.entry(field.name()).or_insert(0);
            if *total == 0 {
                first.push(field.name());
            }
            *total = total.saturating_add(count);
        }
        first
    }

    /// Values cleared by the range checks since start, by field name.
    pub(crate) fn rejected_values(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.rejected.iter().map(|(f, n)| (*f, *n))
    }

    /// Records how many saves of a state file (`engine.json`, `alerts.json`) failed since
    /// start, shown as `gpu_sentinel_state_save_errors_total{file}`. Files never recorded
    /// (a run that persists nothing) have no series.
    pub(crate) fn set_state_save_errors(&mut self, file: &'static str, failures: u64) {
        self.state_save_errors.insert(file, failures);
    }

    /// Recorded state-file save failures, by file name.
    pub(crate) fn state_save_errors(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.state_save_errors.iter().map(|(f, n)| (*f, *n))
    }

    /// Recorded stage times, by stage.
    pub(crate) fn stage_seconds(&self) -> impl Iterator<Item = (&'static str, f64)> + '_ {
        self.stage_seconds.iter().map(|(s, v)| (*s, *v))
    }
}

fn resolve_gpu(snapshot: &Snapshot, event: &XidEvent) -> (Option<u32>, String) {
    match snapshot.gpu_of(event) {
        Some(gpu) => (Some(gpu.index), gpu.uuid.clone()),
        None => (event.gpu, event.uuid.clone().unwrap_or_default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{GpuSample, XidSource};

    fn event(gpu: Option<u32>, uuid: Option<&str>, bus: Option<&str>, xid: u32) -> XidEvent {
        XidEvent {
            at: Default::default(),
            gpu,
            uuid: uuid.map(str::to_string),
            pci_bus_id: bus.map(str::to_string),
            xid,
            source: XidSource::Kmsg,
            message: None,
        }
    }

    #[test]
    fn events_accumulate_and_unmatched_ones_are_still_counted() {
        let mut snapshot = Snapshot {
            gpus: vec![GpuSample {
                index: 3,
                uuid: "GPU-c".into(),
                pci_bus_id: "00000000:3A:00.0".into(),
                ..Default::default()
            }],
            events: vec![
                event(None, None, Some("00000000:3a:00.0"), 79),
                event(None, None, Some("00000000:FF:00.0"), 13),
            ],
            ..Default::default()
        };
        let mut state = ExportState::new();
        state.absorb_events(&snapshot);
        snapshot.events = vec![event(Some(3), Some("GPU-c"), None, 79)];
        state.absorb_events(&snapshot);
        let totals: Vec<_> = state
            .xid_totals()
            .map(|(k, n)| (k.gpu, k.uuid.as_str(), k.xid, n))
            .collect();
        assert_eq!(totals, [(None, "", 13, 1), (Some(3), "GPU-c", 79, 2)]);
        assert_eq!(state.last_xid("GPU-c"), Some(79));
    }

    #[test]
    fn rejected_values_accumulate_and_each_field_is_new_once() {
        let mut cold = Snapshot {
            gpus: vec![GpuSample {
                temperature_celsius: Some(-5.0),
                ..Default::default()
            }],
            ..Default::default()
        };
        let mut state = ExportState::new();
        assert_eq!(
            state.count_rejected(&cold.clone().sanitize()),
            ["temperature_celsius"]
        );
        assert!(state.count_rejected(&cold.sanitize()).is_empty());
        let totals: Vec<_> = state.rejected_values().collect();
        assert_eq!(totals, [("temperature_celsius", 2)]);
    }
}
