//! Health verdicts that schedulers act on: for each GPU a state per component, and for the
//! node its own components, each `healthy`, `degraded` (works; watch it or fix it at the
//! next maintenance window) or `unhealthy` (take it out of service), with a reason that
//! names the numbers and one repair action from a small vocabulary.
//!
//! - GPU components ([`GPU_COMPONENTS`]): memory (ECC, remaps pending or failed, retired
//!   pages against their limits), thermal, power (hardware slowdown, power brake, clocks
//!   stuck low), pcie (replays, a link below the generation or width it reached), nvlink
//!   (links down, errors, the fabric registration), xid (by the catalog's class), driver
//!   (not answering, calls failing or slow, persistence mode off) and risk (the score).
//!   [`evidence`] judges each from one step's readings.
//! - Node components ([`NODE_COMPONENTS`]): driver_version (GPUs running different
//!   drivers), kernel_log (the XID log unreadable), pci (an NVIDIA GPU on the PCI bus that
//!   NVML does not list); see [`node`].
//! - Never flapping ([`hold`]): a worse state is taken at once; a better one only once the
//!   evidence of the current one has been gone for `[health] hold`. The holds live in the
//!   engine's state, so they survive restarts like the windows do.
//!
//! Pure like the rest of the engine: no I/O, time from the snapshot, so `replay` and the
//! live agent reach the same verdicts. A GPU's state is its worst component's, and its
//! action the most disruptive one its worst components ask for; the node's the same over
//! its GPUs and its own components.

mod evidence;
mod hold;
mod links;
mod node;
pub mod xid;

use std::borrow::Cow;
use std::collections::VecDeque;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::slots::Scratch;
use super::window::Sums;
use super::{Engine, GpuFindings};
use crate::model::{GpuSample, Snapshot};
pub(crate) use hold::Hold;

/// How well a component, a GPU or the node does. Ordered from best to worst.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum State {
    #[default]
    Healthy,
    /// Works; watch it, or fix it at the next maintenance window.
    Degraded,
    /// Take it out of service.
    Unhealthy,
}

impl State {
    pub const ALL: [State; 3] = [State::Healthy, State::Degraded, State::Unhealthy];

    pub fn as_str(self) -> &'static str {
        match self {
            State::Healthy => "healthy",
            State::Degraded => "degraded",
            State::Unhealthy => "unhealthy",
        }
    }

    /// The value of `gpu_health_state`: 0 healthy, 1 degraded, 2 unhealthy.
    pub fn value(self) -> f64 {
        match self {
            State::Healthy => 0.0,
            State::Degraded => 1.0,
            State::Unhealthy => 2.0,
        }
    }
}

/// The repair a component asks for. Ordered by how much of the node it takes down now,
/// which is how the node's action is chosen among several: a GPU that fell off the bus
/// needs the node drained and rebooted before anything else can be judged, and a GPU
/// bound for repair (`inspect_hardware`, the RMA path) leaves service, where a reset
/// takes one GPU away for seconds.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    #[default]
    None,
    /// The application's fault: restart (or fix) the job; the GPU is fine.
    RestartJob,
    /// Reset the GPU (`nvidia-smi -r`) when it is free: pending remaps apply, links retrain.
    ResetGpu,
    /// Take the GPU out for a hardware check or an RMA.
    InspectHardware,
    /// Drain the node's jobs and reboot it.
    DrainAndReboot,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::None => "none",
            Action::RestartJob => "restart_job",
            Action::ResetGpu => "reset_gpu",
            Action::InspectHardware => "inspect_hardware",
            Action::DrainAndReboot => "drain_and_reboot",
        }
    }
}

/// The components judged for every GPU, in the order the API lists them.
pub(crate) const GPU_COMPONENTS: [&str; 8] = [
    "memory", "thermal", "power", "pcie", "nvlink", "xid", "driver", "risk",
];

/// The node's own components, in the order the API lists them.
pub(crate) const NODE_COMPONENTS: [&str; 3] = ["driver_version", "kernel_log", "pci"];

/// One component's verdict as published.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub component: Cow<'static, str>,
    pub state: State,
    pub reason: String,
    pub action: Action,
    /// When the component entered its state.
    pub since: DateTime<Utc>,
}

impl Verdict {
    /// What makes one verdict worse than another: its state, then its action.
    pub fn rank(&self) -> (State, Action) {
        (self.state, self.action)
    }
}

/// A GPU's verdict: its worst component's state, the action its worst components ask for,
/// and every component.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct GpuHealth {
    pub state: State,
    pub action: Action,
    pub components: Vec<Verdict>,
    /// What each of `components` was written from, so that findings handed back to the
    /// engine ([`Engine::recycle`]) are rewritten without comparing their text and dates
    /// where their holds did not change. Not published, and not part of the value.
    #[serde(skip)]
    written: Vec<Written>,
    /// The GPU's holds these components were last published from, as [`Published::key`]
    /// named them: while the holds say the same, there is nothing to write. Not published.
    #[serde(skip)]
    from: Option<(u64, u64)>,
}

impl PartialEq for GpuHealth {
    fn eq(&self, other: &GpuHealth) -> bool {
        (self.state, self.action) == (other.state, other.action)
            && self.components == other.components
    }
}

/// A verdict's fixed reason (the hold's, by address) and the unix seconds of its start, as
/// [`publish`] last wrote them.
#[derive(Debug, Clone, Copy, Default)]
struct Written {
    reason: Option<&'static str>,
    since: i64,
}

impl Written {
    /// Whether `verdict`, written from `self`, still says what a hold with the fixed text
    /// `fixed` ([`Hold::fixed_reason`]) says from `since`: the same fixed text and the same
    /// start. The length guards against a text written
    /// over in between (the fields are public).
    fn holds(&self, verdict: &Verdict, fixed: Option<&'static str>, since: i64) -> bool {
        match (self.reason, fixed) {
            (Some(was), Some(is)) => {
                std::ptr::eq(was, is) && verdict.reason.len() == is.len() && self.since == since
            }
            _ => false,
        }
    }
}

/// The node's verdict: the worst of its GPUs and of its own components, and those.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeHealth {
    pub state: State,
    pub action: Action,
    /// The node's own components (the GPUs' are on each GPU's findings).
    pub components: Vec<Verdict>,
}

/// The state and action of a set of verdicts: the worst state, and the most disruptive
/// action among the verdicts in that state.
pub fn summarise<'a>(verdicts: impl IntoIterator<Item = &'a Verdict>) -> (State, Action) {
    verdicts
        .into_iter()
        .map(Verdict::rank)
        .max()
        .unwrap_or_default()
}

/// XIDs remembered per GPU for the xid and driver components.
const RECENT_XIDS: usize = 32;

/// What the engine remembers about one GPU's health between steps: a hold per component
/// and what the components compare the readings with.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GpuHealthState {
    pub memory: Hold,
    pub thermal: Hold,
    pub power: Hold,
    pub pcie: Hold,
    pub nvlink: Hold,
    pub xid: Hold,
    pub driver: Hold,
    pub risk: Hold,
    /// The highest PCIe generation and width the link ran at.
    pub(crate) pcie_generation_reached: Option<u32>,
    pub(crate) pcie_width_reached: Option<u32>,
    /// NVLinks seen active, a bit per link.
    pub(crate) nvlinks_seen: u64,
    /// The error counters at the previous sample, for their rates.
    pub last: Option<LastCounters>,
    /// Each NVLink's error total (CRC, replay, recovery) at the previous sample, to name
    /// the link whose errors grew in a reading.
    pub(crate) nvlink_totals: Vec<(u32, u64)>,
    /// Unix seconds since which the SM clock has stayed low under load without a reason.
    pub(crate) clocks_low_since: Option<i64>,
    /// Unix seconds of the last reset seen (the GPU answering again, or its volatile
    /// counters starting over): XIDs from before it are dealt with.
    pub(crate) reset_at: Option<i64>,
    /// Whether the GPU answered at its previous sample.
    pub answered: Option<bool>,
    /// XIDs that ask for something, with their unix time, newest last.
    pub xids: VecDeque<(i64, u32)>,
    /// Which version of the holds findings were published from (not state).
    #[serde(skip)]
    published: Published,
}

/// Names what the GPU's holds publish, so that findings handed back to the engine
/// ([`Engine::recycle`]) and written from the same holds again need no rewriting: a serial
/// that no other GPU state (in this process: a copy, a state read back or a new GPU takes
/// a new one) has, and a version that [`Hold::update`] moves on whenever what a verdict
/// shows of a hold may have changed. The holds change only there (their fields are public
/// for the state file and for tests). Not state: not saved, compared or cloned, as the
/// window memo is not.
#[derive(Default)]
struct Published {
    /// 0 until first asked for.
    serial: u64,
    version: u64,
}

/// Serials of [`Published`], never reused within a process.
static SERIALS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Published {
    /// Moves the version on where the holds may have changed.
    fn note(&mut self, changed: bool) {
        self.version += u64::from(changed);
    }

    /// The serial and version of the holds as they are now.
    fn key(&mut self) -> (u64, u64) {
        if self.serial == 0 {
            self.serial = SERIALS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        (self.serial, self.version)
    }
}

impl Clone for Published {
    /// A copy's holds go their own way: it takes a serial of its own.
    fn clone(&self) -> Self {
        Published::default()
    }
}

impl PartialEq for Published {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for Published {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Published")
    }
}

/// Counters as last read, for rates and to tell a reset.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LastCounters {
    pub at: i64,
    pub pcie_replays: Option<u64>,
    pub(crate) nvlink_crc: Option<u64>,
    pub(crate) nvlink_replay: Option<u64>,
    pub(crate) nvlink_recovery: Option<u64>,
    /// Volatile ECC errors, corrected and uncorrected: they start over at a reset.
    pub(crate) ecc_volatile: Option<u64>,
}

impl GpuHealthState {
    fn holds_mut(&mut self) -> [&mut Hold; GPU_COMPONENTS.len()] {
        [
            &mut self.memory,
            &mut self.thermal,
            &mut self.power,
            &mut self.pcie,
            &mut self.nvlink,
            &mut self.xid,
            &mut self.driver,
            &mut self.risk,
        ]
    }

    fn holds(&self) -> [&Hold; GPU_COMPONENTS.len()] {
        [
            &self.memory,
            &self.thermal,
            &self.power,
            &self.pcie,
            &self.nvlink,
            &self.xid,
            &self.driver,
            &self.risk,
        ]
    }

    fn note_xids(&mut self, now: i64, xids: impl Iterator<Item = u32>) {
        for x in xids {
            if xid::verdict(x) != (State::Healthy, Action::None) {
                self.xids.push_back((now, x));
            }
        }
        while self.xids.len() > RECENT_XIDS {
            self.xids.pop_front();
        }
    }
}

/// The node's holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeHealthState {
    pub driver_version: Hold,
    pub kernel_log: Hold,
    pub pci: Hold,
}

impl NodeHealthState {
    fn holds_mut(&mut self) -> [&mut Hold; NODE_COMPONENTS.len()] {
        [
            &mut self.driver_version,
            &mut self.kernel_log,
            &mut self.pci,
        ]
    }
}

/// Writes the verdicts of `holds` (named by `names`) into `out`, reusing its strings, and
/// what each was written from into `written` where given.
fn publish(
    out: &mut Vec<Verdict>,
    mut written: Option<&mut Vec<Written>>,
    names: &[&'static str],
    holds: &[&Hold],
    now: i64,
) {
    out.truncate(names.len());
    if let Some(written) = written.as_deref_mut() {
        written.resize(out.len(), Written::default());
    }
    let at = |secs: i64| DateTime::from_timestamp(secs, 0).unwrap_or_default();
    for (i, (name, hold)) in names.iter().zip(holds).enumerate() {
        let secs = hold.since.unwrap_or(now);
        // Read once: both the check below and the mark written need it.
        let fixed = hold.fixed_reason();
        let mark = Written {
            reason: fixed,
            since: secs,
        };
        match out.get_mut(i) {
            // The common case, step after step: the verdict of the step before, whose
            // reason and start mostly hold; they are rewritten only where they changed
            // (turning seconds into a date is most of the cost of publishing).
            Some(v) => {
                // The same static name as the step before: compared by address, not text.
                if !matches!(&v.component, Cow::Borrowed(c) if std::ptr::eq(*c, *name)) {
                    v.component = Cow::Borrowed(name);
                }
                v.state = hold.state;
                v.action = hold.action;
                let was = written.as_deref_mut().and_then(|w| w.get_mut(i));
                // Written from the same fixed text and start: nothing to compare.
                if was.as_deref().is_some_and(|w| w.holds(v, fixed, secs)) {
                    continue;
                }
                if v.reason != hold.reason {
                    v.reason.clone_from(&hold.reason);
                }
                if v.since.timestamp() != secs || v.since.timestamp_subsec_nanos() != 0 {
                    v.since = at(secs);
                }
                if let Some(was) = was {
                    *was = mark;
                }
            }
            None => {
                out.push(Verdict {
                    component: Cow::Borrowed(name),
                    state: hold.state,
                    reason: hold.reason.clone(),
                    action: hold.action,
                    since: at(secs),
                });
                if let Some(written) = written.as_deref_mut() {
                    written.push(mark);
                }
            }
        }
    }
}

impl Engine {
    /// Judges every GPU of this step's findings and the node, after the risk is assessed
    /// (the risk component reads it) and before the scratch lists are put away.
    pub(super) fn assess_health(
        &mut self,
        now: i64,
        snapshot: &Snapshot,
        gpus: &mut [GpuFindings],
        scratch: &Scratch,
    ) -> NodeHealth {
        let hold = self.config.health.hold.as_secs() as i64;
        let pci_gpus = snapshot.host.pci_gpus.as_deref();
        // The node's pci component compares the bus with every GPU the engine knows; only
        // a host that read its bus needs the list.
        let mut known_buses = Vec::new();
        let no_hour = Sums::default();
        for (i, (finding, &slot)) in gpus.iter_mut().zip(&scratch.slots).enumerate() {
            let sample = sample_of(snapshot, i, &finding.uuid);
            let state = self.state.gpus.slot_mut(slot);
            if pci_gpus.is_some() {
                known_buses.push(state.pci_bus_id.clone());
            }
            let xids = snapshot.events.iter().filter(|e| match sample {
                Some(s) => e.is_on(s),
                None => e.uuid.as_deref() == Some(finding.uuid.as_str()),
            });
            let health = &mut state.health;
            health.note_xids(now, xids.map(|e| e.xid));
            // Read where it is (a copy of the sums was a tenth of judging a GPU).
            let hour = scratch.summaries.get(i).map_or(&no_hour, |s| &s.hour);
            let input = evidence::Input {
                now,
                sample,
                finding,
                hour,
                risk_threshold: self.config.risk_threshold,
                pci_gpus,
                bus_id: &state.pci_bus_id,
            };
            let found = evidence::judge(&input, health);
            let mut changed = false;
            for (held, found) in health.holds_mut().into_iter().zip(found) {
                changed |= held.update(now, found, hold);
            }
            health.published.note(changed);
            let key = health.published.key();
            let out = &mut finding.health;
            // Findings handed back that were published from these very holds, unchanged
            // since: every verdict, the state and the action are what they say already.
            if out.from == Some(key) && out.components.len() == GPU_COMPONENTS.len() {
                continue;
            }
            let holds = health.holds();
            publish(
                &mut out.components,
                Some(&mut out.written),
                &GPU_COMPONENTS,
                &holds,
                now,
            );
            (out.state, out.action) = summarise(&out.components);
            out.from = Some(key);
        }
        let found = node::judge(snapshot, &known_buses);
        let node = &mut self.state.health;
        for (held, found) in node.holds_mut().into_iter().zip(found) {
            held.update(now, found, hold);
        }
        // Those of a step handed back, written over ([`Engine::recycle`]).
        let mut components = std::mem::take(&mut self.spare_node);
        publish(
            &mut components,
            None,
            &NODE_COMPONENTS,
            &[&node.driver_version, &node.kernel_log, &node.pci],
            now,
        );
        // Each GPU's state and action are the worst of its components' (summarised above;
        // a GPU without components has the least of all), so the worst of those is the
        // worst of every GPU component, without going over all of them again.
        let (state, action) = gpus
            .iter()
            .map(|g| (g.health.state, g.health.action))
            .chain(components.iter().map(Verdict::rank))
            .max()
            .unwrap_or_default();
        NodeHealth {
            state,
            action,
            components,
        }
    }
}

/// The sample of the `position`-th finding, `uuid`: the snapshot lists its GPUs first, in
/// order, so it is nearly always the sample at the same position.
fn sample_of<'a>(snapshot: &'a Snapshot, position: usize, uuid: &str) -> Option<&'a GpuSample> {
    match snapshot.gpus.get(position) {
        Some(s) if crate::text::same(&s.uuid, uuid) => Some(s),
        _ => snapshot.gpu_by_uuid(uuid),
    }
}

#[cfg(test)]
mod tests;
