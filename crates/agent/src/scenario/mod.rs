//! The scenario library: seeded, deterministic fleets whose failures do not all look alike,
//! with the healthy GPUs that look like failing ones, and the ground truth to score a risk
//! model against.
//!
//! A [`Library`] is a set of nodes of eight GPUs (one GPU model per node). Each GPU is
//! failing (one of [`FaultKind::EVERY`], its precursors drawn with a curve, rate, growth and
//! span; see [`crate::source::simulate::shape`]), a confounder (healthy but noisy: see
//! [`Confounder`]), or plainly healthy, and its error counts arrive by a noise model of its
//! own ([`crate::source::simulate::noise`]). Nodes may have a node-wide cooling event or
//! driver reloads on top, are collected at an interval of their own ([`Polling`]) and have
//! gaps in their logs. Every GPU carries its [`GpuTruth`]: family or confounders, the
//! variant labels an evaluator holds out ([`Variants`]: curve, SKU, workload, rate class,
//! link mode, noise model), the precursor start and the failure time.
//!
//! Emission: [`NodeScenario::run`] steps a node's simulated fleet and hands over each
//! snapshot (in-process, for an engine stepped directly), [`smi_csv`] writes snapshots as
//! `nvidia-smi --query-gpu` logs, and `gpu-sentinel scenarios` writes a library to disk
//! (docs/detection.md, "The scenario library").

pub mod anchors;
mod draw;
pub mod emit;
#[cfg(test)]
mod library_props;
pub mod smi_csv;
pub mod visible;

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use crate::source::simulate::{FaultKind, Fleet, GpuSpec, NoiseModel, Sku, WorkloadKind};

pub use draw::draw;

const DAY: f64 = 86_400.0;

/// What a library is drawn from.
#[derive(Debug, Clone, PartialEq)]
pub struct LibraryOptions {
    pub seed: u64,
    /// Nodes of eight GPUs.
    pub nodes: usize,
    /// Simulated days each node is run for; failures fall inside them.
    pub days: f64,
    /// Simulated time zero.
    pub start: DateTime<Utc>,
}

impl LibraryOptions {
    /// `nodes` nodes over `days` days from Monday 2026-01-05 00:00 UTC.
    pub fn new(seed: u64, nodes: usize, days: f64) -> LibraryOptions {
        LibraryOptions {
            seed,
            nodes,
            days,
            start: DateTime::from_timestamp(1_767_571_200, 0).unwrap_or_default(),
        }
    }
}

/// A drawn library.
#[derive(Debug, Clone)]
pub struct Library {
    pub options: LibraryOptions,
    pub nodes: Vec<NodeScenario>,
}

/// One node of a library: its GPUs and what happens to all of them.
#[derive(Debug, Clone)]
pub struct NodeScenario {
    pub hostname: String,
    pub sku: Sku,
    /// The node fleet's seed.
    pub seed: u64,
    pub gpus: Vec<GpuSpec>,
    /// Per GPU, in index order: everything about it but its identity (which the fleet draws).
    pub labels: Vec<GpuLabel>,
    /// Simulated seconds at which the driver is reloaded (volatile counters reset, the
    /// `nvidia-smi` log restarts with a header).
    pub driver_reloads: Vec<f64>,
    /// A node-wide cooling event: (start, end) in simulated seconds.
    pub cooling: Option<(f64, f64)>,
    /// Where the node's collection interval lies between the shortest and the longest of a
    /// [`Polling`], 0 to 1 on a log scale.
    pub(crate) interval_share: f64,
    /// Spans of simulated seconds without a collection (the collector down, the node
    /// unreachable): no rows from `.0` to `.1`. None comes near a failure.
    pub gaps: Vec<(f64, f64)>,
}

/// How often the nodes of a library are collected: each node at an interval of its own,
/// from `shortest` to `longest` seconds (log-uniform by the node's
/// [`NodeScenario::interval_share`], whole seconds). A plain number of seconds is that
/// interval for every node.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Polling {
    pub shortest: f64,
    pub longest: f64,
}

impl Polling {
    /// Every node every `seconds`.
    pub fn every(seconds: f64) -> Polling {
        Polling {
            shortest: seconds,
            longest: seconds,
        }
    }

    /// Each node at its own interval from `shortest` to `longest` seconds (`shortest` is
    /// capped at `longest`).
    pub fn between(shortest: f64, longest: f64) -> Polling {
        Polling {
            shortest: shortest.min(longest),
            longest,
        }
    }
}

impl From<f64> for Polling {
    fn from(seconds: f64) -> Polling {
        Polling::every(seconds)
    }
}

/// The ground truth of one GPU before its identity is known.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuLabel {
    pub kind: TruthKind,
    /// The failure family (`memory_wear`, …) of a failing GPU.
    pub family: Option<String>,
    /// Every confounder the GPU shows, its own and its node's.
    pub confounders: Vec<Confounder>,
    pub variants: Variants,
    /// Simulated seconds from start to the first sign of the fault.
    pub precursor_start_s: Option<f64>,
    /// Simulated seconds from start to the failure point.
    pub failure_s: Option<f64>,
    /// Whether anything measurable precedes the failure (false for bus drops).
    pub predictable: bool,
    /// Whether the failure takes the GPU off the bus (from then on it is lost).
    pub lost_at_failure: bool,
}

/// What a GPU is in the library.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TruthKind {
    Failing,
    /// Healthy, with at least one confounder of its own.
    Confounder,
    /// Healthy (node-wide events aside).
    Healthy,
}

/// A reason a healthy GPU may look unhealthy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Confounder {
    /// 100–400 corrected ECC errors in one hour, then silence.
    EccBurst,
    /// The GPU is reset: its volatile counters go back to zero.
    GpuReset,
    /// The node's driver is reloaded: every GPU's volatile counters go back to zero.
    DriverReload,
    /// Hundreds to thousands of aggregate ECC errors from before the recording.
    OldAggregateErrors,
    /// 8–14 °C warmer inlet all the time, steady.
    HotStable,
    /// Every GPU of the node at 84–91 °C for hours (CDU or room trouble).
    NodeCooling,
    /// 80–160 PCIe replays an hour, steady for weeks.
    NoisyLink,
    /// No work for days.
    IdleDays,
    /// MIG mode: whole-GPU utilization and row-remap counters read `[N/A]`.
    Mig,
    /// ECC off: no ECC, remap or retirement counters.
    EccDisabled,
}

impl Confounder {
    /// The confounders a single GPU is drawn with (node-wide ones are drawn per node).
    pub(crate) const PER_GPU: [Confounder; 8] = [
        Confounder::EccBurst,
        Confounder::GpuReset,
        Confounder::OldAggregateErrors,
        Confounder::HotStable,
        Confounder::NoisyLink,
        Confounder::IdleDays,
        Confounder::Mig,
        Confounder::EccDisabled,
    ];
}

/// The labels an evaluator can hold out whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Variants {
    pub sku: Sku,
    /// `training`, `inference` (diurnal), `bursty` or `idle`.
    pub workload: String,
    /// The precursor curve (none for healthy GPUs and bus drops).
    pub curve: Option<String>,
    /// `low`, `medium` or `high`: the precursor's rate against the family's base rate.
    pub rate_class: Option<String>,
    /// How a PCIe fault shows: `replays`, `train_down` or `both`.
    pub(crate) link_mode: Option<String>,
    /// How the GPU's error counts arrive (failing and healthy GPUs alike): `poisson`,
    /// `overdispersed` or `diurnal`.
    #[serde(default = "poisson")]
    pub noise: String,
}

fn poisson() -> String {
    NoiseModel::Poisson.name().to_string()
}

impl Variants {
    /// The value of variant axis `axis` (`family` is not one: see [`GpuLabel::family`]):
    /// `sku`, `workload`, `curve`, `rate_class`, `link_mode`, `noise`; None for an unknown
    /// axis or a GPU without that variant.
    pub fn axis(&self, axis: &str) -> Option<String> {
        match axis {
            "sku" => Some(self.sku.name().to_string()),
            "workload" => Some(self.workload.clone()),
            "curve" => self.curve.clone(),
            "rate_class" => self.rate_class.clone(),
            "link_mode" => self.link_mode.clone(),
            "noise" => Some(self.noise.clone()),
            _ => None,
        }
    }
}

/// The workload names of the library.
pub(crate) fn workload_name(kind: WorkloadKind) -> &'static str {
    match kind {
        WorkloadKind::Training => "training",
        WorkloadKind::Inference => "inference",
        WorkloadKind::Bursty => "bursty",
        WorkloadKind::Unused => "idle",
        WorkloadKind::AllocatedIdle => "allocated_idle",
        WorkloadKind::Ghost => "ghost",
    }
}

/// The ground truth of a library, as `gpu-sentinel scenarios` writes it (`truth.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroundTruth {
    pub seed: u64,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub nodes: Vec<NodeTruth>,
    pub gpus: Vec<GpuTruth>,
}

/// A node's events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeTruth {
    pub hostname: String,
    pub sku: Sku,
    pub driver_reloads: Vec<DateTime<Utc>>,
    pub cooling: Option<(DateTime<Utc>, DateTime<Utc>)>,
    /// Spans without a collection.
    #[serde(default)]
    pub gaps: Vec<(DateTime<Utc>, DateTime<Utc>)>,
    /// Seconds between the node's collections, where the library was run (written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_s: Option<f64>,
}

/// One GPU's ground truth.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuTruth {
    pub hostname: String,
    pub index: u32,
    pub uuid: String,
    #[serde(flatten)]
    pub label: GpuLabel,
    pub(crate) precursor_start: Option<DateTime<Utc>>,
    pub(crate) failure_at: Option<DateTime<Utc>>,
    /// Whether the failure's precursor shows something to warn on a day before it
    /// ([`NodeScenario::shows_a_day_ahead`]), where the library was run at a known interval
    /// (written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shows_a_day_ahead: Option<bool>,
}

/// `start` plus `seconds`, saturating.
pub fn at(start: DateTime<Utc>, seconds: f64) -> DateTime<Utc> {
    start
        .checked_add_signed(TimeDelta::milliseconds((seconds * 1000.0) as i64))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

impl Library {
    /// The library `options` describe (see [`draw`]).
    pub fn new(options: LibraryOptions) -> Library {
        draw(options)
    }

    /// Every GPU's ground truth, identities included.
    pub fn truth(&self) -> GroundTruth {
        let start = self.options.start;
        let mut gpus = Vec::new();
        for node in &self.nodes {
            let fleet = node.fleet(start);
            for (i, label) in node.labels.iter().enumerate() {
                let uuid = fleet.gpu(i).map(|g| g.uuid.clone()).unwrap_or_default();
                gpus.push(GpuTruth {
                    hostname: node.hostname.clone(),
                    index: i as u32,
                    uuid,
                    label: label.clone(),
                    precursor_start: label.precursor_start_s.map(|s| at(start, s)),
                    failure_at: label.failure_s.map(|s| at(start, s)),
                    shows_a_day_ahead: None,
                });
            }
        }
        GroundTruth {
            seed: self.options.seed,
            start,
            end: at(start, self.options.days * DAY),
            nodes: self
                .nodes
                .iter()
                .map(|n| NodeTruth {
                    hostname: n.hostname.clone(),
                    sku: n.sku,
                    driver_reloads: n.driver_reloads.iter().map(|&s| at(start, s)).collect(),
                    cooling: n.cooling.map(|(a, b)| (at(start, a), at(start, b))),
                    gaps: n
                        .gaps
                        .iter()
                        .map(|&(a, b)| (at(start, a), at(start, b)))
                        .collect(),
                    interval_s: None,
                })
                .collect(),
            gpus,
        }
    }
}

impl NodeScenario {
    /// The node's simulated fleet at time zero.
    pub fn fleet(&self, start: DateTime<Utc>) -> Fleet {
        Fleet::from_specs(self.seed, start, &self.gpus).with_hostname(&self.hostname)
    }

    /// Seconds between the node's collections under `polling`.
    pub fn interval(&self, polling: impl Into<Polling>) -> f64 {
        let Polling { shortest, longest } = polling.into();
        let longest = if longest.is_finite() {
            longest.max(1.0)
        } else {
            1.0
        };
        let shortest = if shortest.is_finite() {
            shortest.clamp(1.0, longest)
        } else {
            longest
        };
        if shortest >= longest {
            return longest;
        }
        let share = self.interval_share.clamp(0.0, 1.0);
        (shortest * (longest / shortest).powf(share))
            .round()
            .clamp(shortest, longest)
    }

    /// Whether a collection at `t` falls in one of the node's gaps.
    pub(crate) fn in_gap(&self, t: f64) -> bool {
        self.gaps.iter().any(|&(a, b)| t > a && t < b)
    }

    /// The failure family of GPU `index`, if it fails.
    pub fn family(&self, index: usize) -> Option<FaultKind> {
        self.gpus.get(index).and_then(|g| g.plan.fault)
    }
}
