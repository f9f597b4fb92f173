//! The replay report: what the engine found over a whole recording, per GPU, plus the
//! alerts the rules raised (`replay --json`, a contract whose keys tests/it/replay.rs fixes).
//!
//! Per GPU it keeps the highest and the last risk score, the first time the score reached
//! the `[risk]` threshold, whether the GPU was lost at the end, and every finding that
//! held at some step. The alert rules push into [`Report::alerts`] through [`ReplayRules`]
//! (the default rules: `replay::alerts`).
//!
//! A GPU whose rows stop before the end of the log is lost. The engine only calls a GPU
//! lost after it has been missing for [`VANISHED_AFTER_SECONDS`], so when a log ends sooner
//! than that after a GPU's last row, the report asks a copy of the engine what it would say
//! once that time has passed with the GPU still missing (see [`ReportBuilder::finish`]).

use std::fmt::Write as _;

use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use serde::Serialize;

use super::ReadStats;
use crate::engine::{Engine, Findings, GpuFindings, VANISHED_AFTER_SECONDS, kinds_in};
use crate::model::Snapshot;
use crate::text::same;

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// GPU samples read (CSV rows, or GPU entries of JSONL snapshots).
    pub samples: u64,
    /// Time of the first and last snapshot; null for a recording without any.
    pub start: Option<String>,
    pub end: Option<String>,
    /// By index, then UUID.
    pub gpus: Vec<GpuReport>,
    pub alerts: Vec<ReportAlert>,
}

/// What the replay found about one GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuReport {
    pub uuid: String,
    pub index: u32,
    pub name: String,
    pub max_risk: f64,
    pub final_risk: f64,
    /// When the risk score first reached the threshold (RFC 3339), or null.
    pub first_risk_warning: Option<String>,
    /// Lost at the end of the recording.
    pub lost: bool,
    /// Every finding that held at some step, in [`GpuFindings::kinds`] order.
    pub findings: Vec<&'static str>,
}

/// An alert raised during the replay, with its lifecycle.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReportAlert {
    pub alertname: String,
    pub uuid: String,
    /// NVML index, as the `gpu` label carries it.
    pub gpu: String,
    pub severity: String,
    pub starts_at: String,
    /// Null while the alert still fires at the end of the recording.
    pub ends_at: Option<String>,
}

/// What the alert rules do during a replay: see each step's findings and record the
/// alerts that fire and resolve.
pub trait ReplayRules {
    fn step(&mut self, findings: &Findings, alerts: &mut Vec<ReportAlert>);
    /// The recording ended at `end` (alerts still firing keep `ends_at` null).
    fn finish(&mut self, _end: DateTime<Utc>, _alerts: &mut Vec<ReportAlert>) {}
}

/// RFC 3339 as the report writes it: UTC, `Z`, milliseconds only where present.
pub fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

/// Per GPU while the replay runs.
#[derive(Debug, Clone)]
struct Track {
    uuid: String,
    index: u32,
    name: String,
    max_risk: f64,
    final_risk: f64,
    first_warning: Option<DateTime<Utc>>,
    lost: bool,
    /// Every finding seen, as a mask over [`FINDING_KINDS`](crate::engine::FINDING_KINDS).
    kinds: u32,
    /// Ordinal of the last snapshot that listed this GPU.
    last_listed: u64,
}

/// Sums up findings step by step.
#[derive(Debug)]
pub(crate) struct ReportBuilder {
    threshold: f64,
    tracks: Vec<Track>,
    snapshots: u64,
    samples: u64,
    start: Option<DateTime<Utc>>,
    end: Option<DateTime<Utc>>,
    alerts: Vec<ReportAlert>,
}

impl ReportBuilder {
    pub fn new(risk_threshold: f64) -> ReportBuilder {
        ReportBuilder {
            threshold: risk_threshold,
            tracks: Vec::new(),
            snapshots: 0,
            samples: 0,
            start: None,
            end: None,
            alerts: Vec::new(),
        }
    }

    /// Where the alert rules record their alerts.
    pub(crate) fn alerts_mut(&mut self) -> &mut Vec<ReportAlert> {
        &mut self.alerts
    }

    /// Folds one step in: the snapshot the engine saw and what it found.
    pub fn observe(&mut self, snapshot: &Snapshot, findings: &Findings) {
        self.snapshots += 1;
        self.samples += snapshot.gpus.len() as u64;
        self.start.get_or_insert(snapshot.at);
        self.end = Some(snapshot.at);
        for (i, gpu) in findings.gpus.iter().enumerate() {
            let listed = snapshot
                .gpus
                .get(i)
                .is_some_and(|s| same(&s.uuid, &gpu.uuid))
                || snapshot.gpus.iter().any(|s| same(&s.uuid, &gpu.uuid));
            let (seq, threshold) = (self.snapshots, self.threshold);
            let track = self.track(i, gpu);
            if listed {
                track.last_listed = seq;
            }
            Self::fold(track, gpu, findings.at, threshold);
        }
    }

    /// The track of `gpu`, found where it was last time (findings keep their order).
    fn track(&mut self, hint: usize, gpu: &GpuFindings) -> &mut Track {
        let at = match self.tracks.get(hint) {
            Some(t) if same(&t.uuid, &gpu.uuid) => Some(hint),
            _ => self.tracks.iter().position(|t| same(&t.uuid, &gpu.uuid)),
        };
        let at = at.unwrap_or_else(|| {
            self.tracks.push(Track {
                uuid: gpu.uuid.clone(),
                index: gpu.index,
                name: gpu.name.clone(),
                max_risk: 0.0,
                final_risk: 0.0,
                first_warning: None,
                lost: false,
                kinds: 0,
                last_listed: 0,
            });
            self.tracks.len() - 1
        });
        &mut self.tracks[at]
    }

    fn fold(track: &mut Track, gpu: &GpuFindings, at: DateTime<Utc>, threshold: f64) {
        track.index = gpu.index;
        if !gpu.name.is_empty() && !same(&track.name, &gpu.name) {
            track.name.clone_from(&gpu.name);
        }
        let score = gpu.risk.score;
        track.max_risk = track.max_risk.max(score);
        track.final_risk = score;
        if score >= threshold && track.first_warning.is_none() {
            track.first_warning = Some(at);
        }
        track.lost = gpu.lost;
        track.kinds |= gpu.kind_mask(threshold);
    }

    /// The report, once the recording is read. GPUs whose rows stopped before the end but
    /// that the engine does not call lost yet (they stopped less than
    /// [`VANISHED_AFTER_SECONDS`] before the end) are assessed by a copy of the engine
    /// stepped past that time with an empty snapshot: exactly what the live agent would
    /// report once the GPU had stayed away that long. A last round the end of the file cut
    /// short and the reader kept anyway ([`ReadStats::partial_last_round`]) does not count
    /// as the end: a GPU missing only from it is not lost.
    pub fn finish(
        mut self,
        engine: &Engine,
        rules: &mut dyn ReplayRules,
        stats: &ReadStats,
    ) -> Report {
        if let Some(end) = self.end {
            let last = if stats.partial_last_round {
                self.snapshots.saturating_sub(1)
            } else {
                self.snapshots
            };
            let stopped: Vec<usize> = (0..self.tracks.len())
                .filter(|&i| !self.tracks[i].lost && self.tracks[i].last_listed < last)
                .collect();
            let later_at = end.checked_add_signed(TimeDelta::seconds(VANISHED_AFTER_SECONDS + 1));
            if let (false, Some(at)) = (stopped.is_empty(), later_at) {
                let mut later = engine.clone();
                let findings = later.step(&Snapshot {
                    at,
                    ..Snapshot::default()
                });
                for i in stopped {
                    let track = &mut self.tracks[i];
                    if let Some(gpu) = findings.gpus.iter().find(|g| same(&g.uuid, &track.uuid)) {
                        // Stamped at the end of the log: nothing after it is known.
                        Self::fold(track, gpu, end, self.threshold);
                    }
                }
            }
            rules.finish(end, &mut self.alerts);
        }
        let mut gpus: Vec<GpuReport> = self
            .tracks
            .into_iter()
            .map(|t| GpuReport {
                findings: kinds_in(t.kinds),
                uuid: t.uuid,
                index: t.index,
                name: t.name,
                max_risk: t.max_risk,
                final_risk: t.final_risk,
                first_risk_warning: t.first_warning.map(rfc3339),
                lost: t.lost,
            })
            .collect();
        gpus.sort_by(|a, b| a.index.cmp(&b.index).then_with(|| a.uuid.cmp(&b.uuid)));
        Report {
            samples: self.samples,
            start: self.start.map(rfc3339),
            end: self.end.map(rfc3339),
            gpus,
            alerts: self.alerts,
        }
    }
}

impl Report {
    /// The report for a person: GPUs most at risk first, then the alerts.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let span = match (&self.start, &self.end) {
            (Some(s), Some(e)) => format!("from {s} to {e}"),
            _ => "(no snapshots)".to_string(),
        };
        let _ = writeln!(
            out,
            "Replayed {} GPU samples of {} GPUs {span}",
            self.samples,
            self.gpus.len()
        );
        if self.gpus.is_empty() {
            return out;
        }
        let _ = writeln!(
            out,
            "\n{:>3}  {:<26} {:<24} {:>8} {:>6}  {:<24} {:<4}  FINDINGS",
            "GPU", "UUID", "NAME", "MAX RISK", "FINAL", "FIRST RISK WARNING", "LOST"
        );
        let mut order: Vec<&GpuReport> = self.gpus.iter().collect();
        order.sort_by(|a, b| {
            b.max_risk
                .total_cmp(&a.max_risk)
                .then_with(|| a.index.cmp(&b.index))
        });
        for g in order {
            let uuid: String = g.uuid.chars().take(26).collect();
            let name: String = g.name.chars().take(24).collect();
            let findings = if g.findings.is_empty() {
                "-".to_string()
            } else {
                g.findings.join(", ")
            };
            let _ = writeln!(
                out,
                "{:>3}  {:<26} {:<24} {:>8.2} {:>6.2}  {:<24} {:<4}  {}",
                g.index,
                uuid,
                name,
                g.max_risk,
                g.final_risk,
                g.first_risk_warning.as_deref().unwrap_or("-"),
                if g.lost { "yes" } else { "no" },
                findings
            );
        }
        if self.alerts.is_empty() {
            let _ = writeln!(out, "\nNo alerts.");
        } else {
            let _ = writeln!(out, "\nAlerts:");
            for a in &self.alerts {
                let _ = writeln!(
                    out,
                    "  {} gpu {} ({}) {} from {} to {}",
                    a.alertname,
                    a.gpu,
                    a.uuid,
                    a.severity,
                    a.starts_at,
                    a.ends_at.as_deref().unwrap_or("the end (still firing)")
                );
            }
        }
        out
    }
}
