//! The fleet's stored history rebuilt as [`Snapshot`]s, host by host, so that the engine and
//! the alert rules can run over it exactly as `replay FILE` runs them over a recording.
//!
//! The store holds what each host's exporter served: gpu-sentinel's own families
//! ([`native`]) or dcgm-exporter's `DCGM_FI_*` fields ([`dcgm`]); which one is told from what
//! the store has ([`survey`]). Every GPU sample field the engine reads is taken back from the
//! series that carries it, in base units; what a dialect does not carry stays `None` (the
//! engine copes), never invented. docs/fleet.md lists what comes from which metric.
//!
//! Bounded: one host at a time, its history fetched with range queries of at most six hours
//! (and at most [`MAX_POINTS`] steps) each, turned into snapshots and handed on in time order
//! before the next chunk is asked for. Memory holds one chunk of one host, whatever the range.

pub mod dcgm;
pub mod native;
mod survey;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, TimeDelta, Utc};

use super::plan::census::Census;
pub use super::plan::shard::quote;
use super::plan::{Limits, Planner, Query, Shape};
use super::prom::{Client, Series};
use crate::model::{GpuSample, HostInfo, ProcessSample, Snapshot, XidEvent, XidSource};
pub use survey::{Survey, survey};

/// Prometheus refuses a range query of more than 11,000 points per series; stay under it.
pub(crate) const MAX_POINTS: u64 = 10_000;

/// The longest span one range query covers: six hours. The answer arrives as JSON with a
/// string per point, a few times the size of the points themselves; at a 1-minute step and
/// a hundred series per GPU (NVLink counters per link) six hours of a host stay tens of MB.
const CHUNK_SPAN: Duration = Duration::from_secs(6 * 3600);

/// XID events made of one step's counter increase at most: a counter that jumps by
/// millions (a reset misread, a broken exporter) must not flood the engine.
const MAX_XIDS_PER_STEP: u64 = 64;

/// Which exporter's metrics the store holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// gpu-sentinel's own families (`gpu_up`, `gpu_utilization_ratio`, …).
    GpuSentinel,
    /// dcgm-exporter's `DCGM_FI_*` fields.
    DcgmExporter,
}

impl Dialect {
    /// As the fleet report's JSON names it (`source`).
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::GpuSentinel => "gpu-sentinel",
            Dialect::DcgmExporter => "dcgm-exporter",
        }
    }

    /// The selector of every series this dialect's rebuild reads, on one host.
    fn selector(self, host: &str) -> String {
        let names = match self {
            Dialect::GpuSentinel => native::METRICS.join("|"),
            Dialect::DcgmExporter => dcgm::METRICS.join("|"),
        };
        format!("{{__name__=~\"{names}\",instance=\"{}\"}}", quote(host))
    }
}

/// The period replayed and its resolution.
#[derive(Debug, Clone, Copy)]
pub struct Period {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub step: Duration,
}

impl Period {
    /// The survey's window: an hour, or longer where the period has more than
    /// [`MAX_POINTS`] hours.
    fn survey_window(&self) -> TimeDelta {
        let span = (self.to - self.from).num_seconds().max(1);
        let points = i64::try_from(MAX_POINTS).unwrap_or(i64::MAX);
        TimeDelta::seconds(3600.max((span + points - 1) / points))
    }

    /// Steps per range query: six hours' worth, at most [`MAX_POINTS`], at least one.
    fn chunk_steps(&self) -> u64 {
        let step = self.step.as_secs().max(1);
        (CHUNK_SPAN.as_secs() / step).clamp(1, MAX_POINTS)
    }
}

/// One host's history, read chunk by chunk and handed on a snapshot at a time.
pub struct HostHistory<'c> {
    planner: Planner<'c>,
    /// Steps a chunk spans: six hours' worth, fewer where the host's series are too many
    /// for the store to answer six hours of at once.
    chunk_steps: u64,
    host: String,
    dialect: Dialect,
    period: Period,
    /// Start of the next chunk to fetch; `None` once the period is read.
    next_chunk: Option<DateTime<Utc>>,
    ready: VecDeque<Snapshot>,
    xids: XidTracker,
    notes: Notes,
    samples: u64,
}

impl<'c> HostHistory<'c> {
    /// The history of `host`, its chunks planned from its series (the store's index) and
    /// the store's limits (`max_samples` as for the report).
    pub fn open(
        client: &'c Client,
        host: &str,
        dialect: Dialect,
        period: Period,
        max_samples: Option<u64>,
    ) -> anyhow::Result<Self> {
        let families = match dialect {
            Dialect::GpuSentinel => native::METRICS,
            Dialect::DcgmExporter => dcgm::METRICS,
        };
        let census = Census::take_matching(
            client,
            "instance",
            families,
            &format!("instance=\"{}\"", quote(host)),
            period.from,
            period.to,
        )?;
        let planner = Planner::new(client, Limits::of(client, max_samples), census, period.step);
        let query = chunk_query(dialect, host, period.step);
        let planned = planner
            .pieces(&query, period.from, period.to)
            .first()
            .map_or(1, |p| {
                let step = period.step.as_millis().max(1) as i64;
                (p.end - p.start).num_milliseconds() / step + 1
            });
        let chunk_steps = period.chunk_steps().min(planned.max(1).unsigned_abs());
        Ok(HostHistory {
            planner,
            chunk_steps,
            host: host.to_string(),
            dialect,
            period,
            next_chunk: Some(period.from),
            ready: VecDeque::new(),
            xids: XidTracker::new(period.from),
            notes: Notes::default(),
            samples: 0,
        })
    }

    /// The next snapshot in time order; `None` at the end of the period. Steps at which the
    /// host reported no GPU are skipped (the engine sees the gap, as after an agent restart).
    pub fn next_snapshot(&mut self) -> anyhow::Result<Option<Snapshot>> {
        loop {
            if let Some(snapshot) = self.ready.pop_front() {
                self.samples += snapshot.gpus.len() as u64;
                return Ok(Some(snapshot));
            }
            let Some(start) = self.next_chunk else {
                return Ok(None);
            };
            self.fetch_chunk(start)?;
        }
    }

    /// GPU samples handed on so far.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// The metrics of this dialect that never appeared for this host: what the engine ran
    /// without. Families whose absence means "none happened" (XID counters, processes) and
    /// fields stood in for by another name are not listed.
    pub fn missing_metrics(&self) -> Vec<&'static str> {
        let (all, stand_ins) = match self.dialect {
            Dialect::GpuSentinel => (native::METRICS, native::ABSENT_OR_STOOD_IN),
            Dialect::DcgmExporter => (dcgm::METRICS, dcgm::ABSENT_OR_STOOD_IN),
        };
        let seen = |m: &str| self.notes.seen.contains(m);
        all.iter()
            .copied()
            .filter(|m| !seen(m))
            .filter(|m| {
                !stand_ins
                    .iter()
                    .any(|(name, other)| name == m && other.is_none_or(seen))
            })
            .collect()
    }

    /// Series skipped because their labels could not be read, by reason.
    pub fn skipped(&self) -> &BTreeMap<String, u64> {
        &self.notes.skipped
    }

    fn fetch_chunk(&mut self, start: DateTime<Utc>) -> anyhow::Result<()> {
        let step = TimeDelta::from_std(self.period.step).context("--step is too long")?;
        let steps = self.chunk_steps;
        let span = step * i32::try_from(steps - 1).unwrap_or(i32::MAX);
        let end = (start + span).min(self.period.to);
        self.next_chunk = Some(end + step).filter(|next| *next <= self.period.to);
        let query = chunk_query(self.dialect, &self.host, self.period.step);
        // Planned again for the chunk: a store that refuses it gets it in halves.
        let series = self
            .planner
            .range(&query, start, end)
            .with_context(|| format!("history of {} from {start} to {end}", self.host))?;
        let count = usize::try_from((end - start).num_seconds() / step.num_seconds().max(1))
            .unwrap_or(0)
            + 1;
        let snapshots = rebuild(
            self.dialect,
            start,
            step,
            count,
            &series,
            &mut self.xids,
            &mut self.notes,
        );
        self.ready.extend(snapshots);
        Ok(())
    }
}

/// Every series of one host the rebuild reads, stepping `step`: a plain selector, so the
/// store answers (and holds) each series' samples at the steps.
fn chunk_query(dialect: Dialect, host: &str, step: Duration) -> Query<'static> {
    let families = match dialect {
        Dialect::GpuSentinel => native::METRICS,
        Dialect::DcgmExporter => dcgm::METRICS,
    };
    let selector = dialect.selector(host);
    Query {
        reads: families.iter().map(|f| (f.to_string(), 1.0)).collect(),
        shape: Shape::Range {
            step,
            window: Duration::ZERO,
        },
        by_host: false,
        per_series: true,
        text: Box::new(move |_| selector.clone()),
    }
}

/// One step of one host being rebuilt from the chunk's series.
#[derive(Debug, Default)]
pub(crate) struct StepBuild {
    host: HostInfo,
    gpus: Vec<GpuBuild>,
    processes: Vec<ProcessSample>,
    xids: Vec<XidReading>,
}

/// A GPU at one step: its sample, whether a series says it exists, and `gpu_up`.
#[derive(Debug, Default)]
struct GpuBuild {
    sample: GpuSample,
    /// A series that exists exactly while the exporter lists the GPU was seen.
    present: bool,
    up: Option<bool>,
}

/// One XID reading: a native counter's value, or dcgm-exporter's last-XID gauge.
#[derive(Debug, Clone)]
struct XidReading {
    gpu: u32,
    uuid: String,
    xid: u32,
    value: f64,
}

/// Why a series was skipped.
type Skip = &'static str;

impl StepBuild {
    /// The GPU with this index and UUID, added if new. A series without a UUID or with an
    /// index that is not a number cannot be told apart from the others, and is skipped.
    fn gpu(&mut self, index: &str, uuid: &str) -> Result<&mut GpuBuild, Skip> {
        let index: u32 = index.parse().map_err(|_| "gpu label is not an index")?;
        if uuid.is_empty() {
            return Err("no GPU UUID label");
        }
        let at = match self.gpus.iter().position(|g| g.sample.uuid == uuid) {
            Some(at) => at,
            None => {
                self.gpus.push(GpuBuild {
                    sample: GpuSample {
                        index,
                        uuid: uuid.to_string(),
                        ..GpuSample::default()
                    },
                    ..GpuBuild::default()
                });
                self.gpus.len() - 1
            }
        };
        Ok(&mut self.gpus[at])
    }

    /// The process with this PID on this GPU, added if new.
    fn process(&mut self, gpu: u32, uuid: &str, pid: u32) -> &mut ProcessSample {
        let at = match self
            .processes
            .iter()
            .position(|p| p.pid == pid && p.uuid == uuid)
        {
            Some(at) => at,
            None => {
                self.processes.push(ProcessSample {
                    gpu,
                    uuid: uuid.to_string(),
                    pid,
                    ..ProcessSample::default()
                });
                self.processes.len() - 1
            }
        };
        &mut self.processes[at]
    }

    fn xid(&mut self, gpu: u32, uuid: &str, xid: u32, value: f64) {
        self.xids.push(XidReading {
            gpu,
            uuid: uuid.to_string(),
            xid,
            value,
        });
    }

    /// The snapshot of this step, or `None` when the host listed no GPU at it. A GPU that
    /// is not up keeps its identity and nothing else, as the exposition renders it.
    fn finish(
        mut self,
        at: DateTime<Utc>,
        dialect: Dialect,
        xids: &mut XidTracker,
    ) -> Option<Snapshot> {
        let events = xids.events(at, dialect, &self.xids);
        self.gpus.retain(|g| g.present);
        if self.gpus.is_empty() {
            return None;
        }
        let mut gpus: Vec<GpuSample> = self
            .gpus
            .into_iter()
            .map(|g| {
                let up = g.up.unwrap_or(true);
                if up {
                    GpuSample { up, ..g.sample }
                } else {
                    GpuSample {
                        index: g.sample.index,
                        uuid: g.sample.uuid,
                        name: g.sample.name,
                        pci_bus_id: g.sample.pci_bus_id,
                        serial: g.sample.serial,
                        up,
                        ..GpuSample::default()
                    }
                }
            })
            .collect();
        gpus.sort_by(|a, b| a.index.cmp(&b.index).then_with(|| a.uuid.cmp(&b.uuid)));
        if dialect == Dialect::DcgmExporter {
            for g in &mut gpus {
                dcgm::derive_total(g);
            }
        }
        let listed: BTreeSet<&str> = gpus.iter().map(|g| g.uuid.as_str()).collect();
        self.processes.retain(|p| listed.contains(p.uuid.as_str()));
        self.processes.sort_by_key(|p| (p.gpu, p.pid));
        Some(Snapshot {
            at,
            host: self.host,
            gpus,
            processes: self.processes,
            events,
            // Not rebuilt yet: gpu_allocation_info (and dcgm-exporter's pod labels) would
            // name the holders of GPUs without processes; docs/fleet.md says so.
            allocations: Vec::new(),
            scheduled_by: Vec::new(),
        })
    }
}

/// Turns XID readings into events, step by step in time order. Native counters give one
/// event per increase; dcgm-exporter's gauge (the last XID, one series per `err_code`)
/// gives one when a non-zero code appears that the step before did not have, so a repeat
/// of the same XID while its series lives is not seen. At the period's first step nothing
/// is an event: what the readings count happened before it, at a time not known.
#[derive(Debug)]
struct XidTracker {
    first: DateTime<Utc>,
    counters: HashMap<(String, u32), f64>,
    codes: HashMap<String, BTreeSet<u32>>,
}

impl XidTracker {
    fn new(first: DateTime<Utc>) -> XidTracker {
        XidTracker {
            first,
            counters: HashMap::new(),
            codes: HashMap::new(),
        }
    }

    fn events(
        &mut self,
        at: DateTime<Utc>,
        dialect: Dialect,
        readings: &[XidReading],
    ) -> Vec<XidEvent> {
        let baseline = at <= self.first;
        let mut events = Vec::new();
        let event = |r: &XidReading| XidEvent {
            at,
            gpu: Some(r.gpu),
            uuid: Some(r.uuid.clone()),
            pci_bus_id: None,
            xid: r.xid,
            // The store does not say which path (NVML or the kernel log) reported it.
            source: XidSource::Nvml,
            message: None,
        };
        match dialect {
            Dialect::GpuSentinel => {
                for r in readings {
                    let last = self.counters.insert((r.uuid.clone(), r.xid), r.value);
                    let increase = match last {
                        _ if baseline => 0.0,
                        Some(last) if r.value >= last => r.value - last,
                        // A reset (the agent restarted), or a series new since the last
                        // step: the value counts what happened since.
                        _ => r.value,
                    };
                    let count = (increase.round().max(0.0) as u64).min(MAX_XIDS_PER_STEP);
                    events.extend((0..count).map(|_| event(r)));
                }
            }
            Dialect::DcgmExporter => {
                let mut now: HashMap<&str, BTreeSet<u32>> = HashMap::new();
                for r in readings {
                    now.entry(r.uuid.as_str()).or_default().insert(r.xid);
                }
                for r in readings {
                    let before = self.codes.get(&r.uuid);
                    let new = before.is_none_or(|codes| !codes.contains(&r.xid));
                    if !baseline && r.xid != 0 && new {
                        events.push(event(r));
                    }
                }
                // GPUs without a reading this step keep what they had: a gap in the
                // scrapes is not a new XID when the series comes back.
                for (uuid, codes) in now {
                    self.codes.insert(uuid.to_string(), codes);
                }
            }
        }
        events
    }
}

/// A sample value as a count: finite, not negative, rounded.
fn count(value: f64) -> Option<u64> {
    (value.is_finite() && value >= 0.0 && value < u64::MAX as f64).then(|| value.round() as u64)
}

/// A sample value as a small whole number (P-state, PCIe generation, link width).
fn small(value: f64) -> Option<u32> {
    count(value).and_then(|v| u32::try_from(v).ok())
}

/// A sample value as a reading: finite only.
fn finite(value: f64) -> Option<f64> {
    value.is_finite().then_some(value)
}

/// A label value, `None` when empty (the exposition writes absent values as "").
fn text(labels: &BTreeMap<String, String>, name: &str) -> Option<String> {
    labels.get(name).filter(|v| !v.is_empty()).cloned()
}

fn label<'a>(labels: &'a BTreeMap<String, String>, name: &str) -> &'a str {
    labels.get(name).map_or("", String::as_str)
}

/// What reading the series taught beyond the snapshots.
#[derive(Debug, Default)]
struct Notes {
    /// Metric names seen at least once: what was not seen is said at the end.
    seen: BTreeSet<String>,
    /// Series skipped, by reason, with a count.
    skipped: BTreeMap<String, u64>,
}

/// The snapshots of one chunk: `count` steps from `start`, every `step`, rebuilt from the
/// chunk's series (points off the grid are ignored), in time order.
fn rebuild(
    dialect: Dialect,
    start: DateTime<Utc>,
    step: TimeDelta,
    count: usize,
    series: &[Series],
    xids: &mut XidTracker,
    notes: &mut Notes,
) -> Vec<Snapshot> {
    let seconds = step.num_seconds().max(1);
    let mut steps: Vec<StepBuild> = (0..count).map(|_| StepBuild::default()).collect();
    for s in series {
        let name = label(&s.labels, "__name__");
        if !notes.seen.contains(name) {
            notes.seen.insert(name.to_string());
        }
        for &(at, value) in &s.points {
            let offset = (at - start).num_seconds();
            if offset < 0 || offset % seconds != 0 {
                continue;
            }
            let Some(slot) = usize::try_from(offset / seconds)
                .ok()
                .and_then(|k| steps.get_mut(k))
            else {
                continue;
            };
            let applied = match dialect {
                Dialect::GpuSentinel => native::apply(name, &s.labels, value, slot),
                Dialect::DcgmExporter => dcgm::apply(name, &s.labels, value, slot),
            };
            if let Err(why) = applied {
                *notes.skipped.entry(format!("{name}: {why}")).or_default() += 1;
                break;
            }
        }
    }
    steps
        .into_iter()
        .enumerate()
        .filter_map(|(k, build)| {
            let at = start + step * i32::try_from(k).unwrap_or(i32::MAX);
            build.finish(at, dialect, xids)
        })
        .collect()
}
