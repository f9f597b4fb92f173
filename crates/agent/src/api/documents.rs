//! The three `/api/v1` documents, declared once for both directions.
//!
//! Writing: the agent builds each document from the collection's snapshot and the
//! engine's findings without copying them ([`Cow::Borrowed`] throughout) and serialises it
//! once per collection; the JSON is what the exporter has always served, field for field.
//!
//! Reading (`gpu-sentinel review`, or any Rust client of the API): the same types
//! deserialise into owned values. Reading is lenient in two ways, both on purpose:
//! - what a reader ranks GPUs by (identity, state, risk, findings, the document's time,
//!   host and threshold) is read, and a field an older exporter did not write yet
//!   defaults, so a document from before the analysis engine still parses and the reader
//!   can say what is missing instead of failing to parse;
//! - the per-GPU detail records (processes, XID events, idle and cost findings) and the
//!   scaling and placement advice are skipped on reading and come back empty: no reader
//!   uses them, the engine's idle, cost and advice types are write-only (they have no
//!   `Deserialize`), and a change to one of those records must never make the ranking of
//!   a fleet unreadable.

use std::borrow::Cow;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize};

use crate::alert::Alert;
use crate::engine::Findings;
use crate::engine::capacity::{Advice, Placement};
use crate::engine::cost::CostView;
use crate::engine::health::{Action, State, Verdict};
use crate::engine::idle::IdleFindings;
use crate::engine::mig::InstanceFindings;
use crate::engine::risk::Assessment;
use crate::model::{Allocation, GpuSample, ProcessSample, Snapshot, XidEvent};

/// `/api/v1/gpus`: every GPU the engine knows, those missing from the snapshot included.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpusDocument<'a> {
    /// Time of the snapshot. Always written; None when a document read does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<DateTime<Utc>>,
    /// Always written; None when a document read does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<Cow<'a, str>>,
    /// `[risk] threshold`, above which a GPU has the `failure_risk` finding. Always
    /// written; None in documents of exporters that predate it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub risk_threshold: Option<f64>,
    pub gpus: Vec<GpuView<'a>>,
}

/// One GPU as `/api/v1/gpus` shows it: its sample, processes and XIDs, and what the
/// engine found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuView<'a> {
    /// The GPU's latest sample; for a GPU missing from the snapshot, its identity with
    /// `up: false`.
    #[serde(flatten, deserialize_with = "sample_with_defaults")]
    pub sample: Cow<'a, GpuSample>,
    /// Processes on the GPU now. Not read back (see the module's reading rules).
    #[serde(skip_deserializing)]
    pub processes: Vec<Cow<'a, ProcessSample>>,
    /// XID events of this collection on the GPU. Not read back.
    #[serde(skip_deserializing)]
    pub xids: Vec<Cow<'a, XidEvent>>,
    /// Who a scheduler gave the GPU to (pods from the kubelet, Slurm jobs), processes or
    /// not. Not read back.
    #[serde(skip_deserializing)]
    pub holders: Vec<Cow<'a, Allocation>>,
    /// Answered before and does not now.
    #[serde(default)]
    pub lost: bool,
    /// Failure risk and its reasons. Always written; None in documents of exporters that
    /// predate the analysis engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub risk: Option<Cow<'a, Assessment>>,
    /// The findings' names (`failure_risk`, `lost`, `allocated_idle`, …), in the order
    /// the engine lists them.
    #[serde(default)]
    pub findings: Vec<Cow<'a, str>>,
    /// Distinct hardware-fault XIDs of the last 24 hours.
    #[serde(default)]
    pub hardware_xids_24h: Cow<'a, [u32]>,
    /// Idle, ghost and long-running findings. Not read back.
    #[serde(skip_deserializing)]
    pub idle: Cow<'a, IdleFindings>,
    /// Cost and owner time. Not read back.
    #[serde(skip_deserializing)]
    pub cost: Cow<'a, CostView>,
    /// On a GPU in MIG mode, each instance's idle state, holders and cost (its profile,
    /// placement and memory are in `mig_instances`). Not read back.
    #[serde(skip_deserializing, skip_serializing_if = "no_instances")]
    pub mig_findings: Cow<'a, [InstanceFindings]>,
}

fn no_instances(findings: &[InstanceFindings]) -> bool {
    findings.is_empty()
}

/// `/api/v1/alerts`: pending and firing alerts, and resolved ones still kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlertsDocument<'a> {
    pub at: DateTime<Utc>,
    pub alerts: Vec<Cow<'a, Alert>>,
}

/// `/api/v1/recommendations`: scaling advice, placement, and whether a job fits now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recommendations<'a> {
    pub at: DateTime<Utc>,
    /// Not read back (see the module's reading rules).
    #[serde(skip_deserializing)]
    pub scaling: Cow<'a, Advice>,
    /// Not read back.
    #[serde(skip_deserializing)]
    pub placement: Cow<'a, Placement>,
    /// The job asked about (`?gpus=N&memory_gib=M&exclusive=true`) and the GPUs it would get.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<JobFit>,
}

/// `/api/v1/health`: the verdicts schedulers act on, per GPU component and for the node
/// (`gpu-sentinel health` reads it back). `state` and `action` are the node's: its worst
/// GPU's or own component's state, and the most disruptive action asked in that state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HealthDocument<'a> {
    /// Time of the snapshot the verdicts are of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<Cow<'a, str>>,
    pub state: State,
    pub action: Action,
    pub gpus: Vec<GpuHealthView<'a>>,
    /// The node's own components (driver versions, kernel log, PCI bus).
    pub node: Cow<'a, [Verdict]>,
}

/// One GPU's verdict in `/api/v1/health`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuHealthView<'a> {
    pub index: u32,
    pub uuid: Cow<'a, str>,
    pub state: State,
    pub action: Action,
    pub components: Cow<'a, [Verdict]>,
}

impl<'a> HealthDocument<'a> {
    /// The verdicts of `findings`, every GPU the engine knows in its order.
    pub fn new(snapshot: &'a Snapshot, findings: &'a Findings) -> HealthDocument<'a> {
        HealthDocument {
            at: Some(findings.at),
            hostname: Some(Cow::Borrowed(&snapshot.host.hostname)),
            state: findings.health.state,
            action: findings.health.action,
            gpus: findings
                .gpus
                .iter()
                .map(|g| GpuHealthView {
                    index: g.index,
                    uuid: Cow::Borrowed(&g.uuid),
                    state: g.health.state,
                    action: g.health.action,
                    components: Cow::Borrowed(&g.health.components),
                })
                .collect(),
            node: Cow::Borrowed(&findings.health.components),
        }
    }
}

/// Whether a job of `gpus` GPUs needing `memory_bytes` each can start now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobFit {
    pub gpus: usize,
    pub memory_bytes: u64,
    pub(crate) exclusive: bool,
    pub fits: bool,
    /// The GPUs best fit would use.
    pub placement: Vec<u32>,
}

impl<'a> GpusDocument<'a> {
    /// Every GPU of `findings`, with its sample, processes and XID events from `snapshot`;
    /// `risk_threshold` decides the `failure_risk` finding.
    pub fn new(
        snapshot: &'a Snapshot,
        findings: &'a Findings,
        risk_threshold: f64,
    ) -> GpusDocument<'a> {
        let gpus = findings
            .gpus
            .iter()
            .map(|f| {
                let sample = match snapshot.gpu_by_uuid(&f.uuid) {
                    Some(sample) => Cow::Borrowed(sample),
                    None => Cow::Owned(GpuSample {
                        index: f.index,
                        uuid: f.uuid.clone(),
                        name: f.name.clone(),
                        up: false,
                        ..GpuSample::default()
                    }),
                };
                let processes = snapshot
                    .processes
                    .iter()
                    .filter(|p| p.is_on(&sample))
                    .map(Cow::Borrowed)
                    .collect();
                let xids = snapshot
                    .events
                    .iter()
                    .filter(|e| e.is_on(&sample))
                    .map(Cow::Borrowed)
                    .collect();
                let holders = snapshot
                    .allocations
                    .iter()
                    .filter(|a| a.is_on(&sample))
                    .map(Cow::Borrowed)
                    .collect();
                GpuView {
                    sample,
                    processes,
                    xids,
                    holders,
                    lost: f.lost,
                    risk: Some(Cow::Borrowed(&f.risk)),
                    findings: f
                        .kinds(risk_threshold)
                        .into_iter()
                        .map(Cow::Borrowed)
                        .collect(),
                    hardware_xids_24h: Cow::Borrowed(&f.hardware_xids_24h),
                    idle: Cow::Borrowed(&f.idle),
                    cost: Cow::Borrowed(&f.cost),
                    mig_findings: Cow::Borrowed(&f.mig),
                }
            })
            .collect();
        GpusDocument {
            at: Some(snapshot.at),
            hostname: Some(Cow::Borrowed(&snapshot.host.hostname)),
            risk_threshold: Some(risk_threshold),
            gpus,
        }
    }
}

impl<'a> AlertsDocument<'a> {
    /// The alerts as of `at`, in the order given (the alert book's).
    pub fn new(at: DateTime<Utc>, alerts: impl IntoIterator<Item = &'a Alert>) -> Self {
        AlertsDocument {
            at,
            alerts: alerts.into_iter().map(Cow::Borrowed).collect(),
        }
    }
}

impl<'a> Recommendations<'a> {
    /// The advice of `findings`, and whether `job` — (GPUs, memory bytes per GPU, whether
    /// each GPU must be free) — fits on its placement now.
    pub fn new(findings: &'a Findings, job: Option<(usize, u64, bool)>) -> Recommendations<'a> {
        Recommendations {
            at: findings.at,
            scaling: Cow::Borrowed(&findings.capacity),
            placement: Cow::Borrowed(&findings.placement),
            job: job.map(|(gpus, memory_bytes, exclusive)| {
                let chosen = findings.placement.fit(gpus, memory_bytes, exclusive);
                JobFit {
                    gpus,
                    memory_bytes,
                    exclusive,
                    fits: chosen.is_some(),
                    placement: chosen.unwrap_or_default(),
                }
            }),
        }
    }
}

/// A GPU's sample as read from a document: `name` defaults to empty and `up` to true when
/// the document leaves them out (the GPU was listed, so it answered), as `review` has
/// always read them; every other field as [`GpuSample`] reads it.
fn sample_with_defaults<'de, 'a, D>(deserializer: D) -> Result<Cow<'a, GpuSample>, D::Error>
where
    D: Deserializer<'de>,
{
    use serde::de::Error as _;
    let mut fields = serde_json::Map::deserialize(deserializer)?;
    fields
        .entry("name")
        .or_insert_with(|| serde_json::Value::String(String::new()));
    fields.entry("up").or_insert(serde_json::Value::Bool(true));
    GpuSample::deserialize(serde_json::Value::Object(fields))
        .map(Cow::Owned)
        .map_err(D::Error::custom)
}
