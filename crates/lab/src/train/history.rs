//! Reading a labelled history: JSONL snapshots (as `record` writes them) and failure labels,
//! streamed through the engine into one row of risk features per GPU per interval, read
//! back from its findings (see [`super::probe::probe_model`]).
//!
//! A label line is `{"failure": {"uuid": "GPU-…", "at": "RFC3339", "family": "memory_wear"}}`.
//! Labels may come anywhere in the file (a recorder writes one when the failure happens, after
//! the snapshots that preceded it), so rows are labelled only once the whole file is read:
//! the rows, downsampled, are what is held in memory, never the snapshots.

use std::collections::BTreeMap;
use std::io::BufRead;

use chrono::{DateTime, Utc};
use serde::Deserialize;

use crate::engine::risk::FEATURES;
use crate::engine::{Engine, EngineConfig};
use crate::model::Snapshot;

/// A failure label as a history line carries it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct FailureLabel {
    pub uuid: String,
    pub at: DateTime<Utc>,
    #[serde(default)]
    pub family: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LabelLine {
    failure: FailureLabel,
}

/// One GPU at one moment: the engine's features then.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Index into [`History::gpus`].
    pub gpu: usize,
    /// Unix seconds.
    pub at: i64,
    pub x: [f64; FEATURES.len()],
}

/// What the history says about one GPU.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GpuRecord {
    pub uuid: String,
    /// Unix seconds of its first and last sample in which it answered (0 before any).
    pub(crate) first_up: i64,
    pub last_up: i64,
    seen: bool,
    /// Unix seconds and family of its failures, earliest first.
    pub failures: Vec<(i64, String)>,
}

impl GpuRecord {
    /// The first failure, if any: rows from then on describe a broken GPU and are not used.
    pub(crate) fn first_failure(&self) -> Option<i64> {
        self.failures.first().map(|&(at, _)| at)
    }

    /// Days the GPU was observed healthy: from its first sample to its failure or last one.
    pub fn observed_days(&self) -> f64 {
        let end = self
            .first_failure()
            .map_or(self.last_up, |f| f.min(self.last_up));
        (end - self.first_up).max(0) as f64 / 86_400.0
    }
}

/// The rows and labels of a history file.
#[derive(Debug, Clone, Default)]
pub struct History {
    pub gpus: Vec<GpuRecord>,
    pub rows: Vec<Row>,
    pub snapshots: u64,
    /// Lines that were neither a snapshot nor a label, with the first few reasons.
    pub skipped: u64,
    pub warnings: Vec<String>,
}

/// Warnings kept for the report; the rest are only counted.
const MAX_WARNINGS: usize = 10;

impl History {
    /// Streams `reader` through a fresh engine, keeping one row per GPU per `row_every`
    /// seconds while it answers, and every failure label.
    pub fn read(mut reader: impl BufRead, row_every: i64) -> std::io::Result<History> {
        let mut engine = Engine::new(EngineConfig {
            risk_model: super::probe::probe_model(),
            ..EngineConfig::default()
        });
        let mut history = History::default();
        let mut by_uuid: BTreeMap<String, usize> = BTreeMap::new();
        let mut last_row: Vec<Option<i64>> = Vec::new();
        let mut bytes = Vec::new();
        for n in 0.. {
            bytes.clear();
            if reader.read_until(b'\n', &mut bytes)? == 0 {
                break;
            }
            // A damaged line is one line lost, not the whole history.
            let line = String::from_utf8_lossy(&bytes);
            let text = line.trim();
            if text.is_empty() {
                continue;
            }
            if let Ok(label) = serde_json::from_str::<LabelLine>(text) {
                let i = history.gpu(&mut by_uuid, &mut last_row, &label.failure.uuid);
                let record = &mut history.gpus[i];
                record
                    .failures
                    .push((label.failure.at.timestamp(), label.failure.family));
                record.failures.sort();
                continue;
            }
            let snapshot: Snapshot = match serde_json::from_str(text) {
                Ok(s) => s,
                Err(e) => {
                    history.skip(format!(
                        "line {}: neither a snapshot nor a label: {e}",
                        n + 1
                    ));
                    continue;
                }
            };
            let now = snapshot.at.timestamp();
            history.snapshots += 1;
            let findings = engine.step(&snapshot);
            for finding in findings.gpus.iter().filter(|f| f.up) {
                let i = history.gpu(&mut by_uuid, &mut last_row, &finding.uuid);
                let record = &mut history.gpus[i];
                if !record.seen {
                    record.seen = true;
                    record.first_up = now;
                }
                record.last_up = now;
                if last_row[i].is_some_and(|last| now - last < row_every) {
                    continue;
                }
                last_row[i] = Some(now);
                let x = super::probe::features_of(&finding.risk);
                history.rows.push(Row { gpu: i, at: now, x });
            }
        }
        Ok(history)
    }

    fn gpu(
        &mut self,
        by_uuid: &mut BTreeMap<String, usize>,
        last_row: &mut Vec<Option<i64>>,
        uuid: &str,
    ) -> usize {
        if let Some(&i) = by_uuid.get(uuid) {
            return i;
        }
        self.gpus.push(GpuRecord {
            uuid: uuid.to_string(),
            ..GpuRecord::default()
        });
        last_row.push(None);
        by_uuid.insert(uuid.to_string(), self.gpus.len() - 1);
        self.gpus.len() - 1
    }

    fn skip(&mut self, warning: String) {
        self.skipped += 1;
        if self.warnings.len() < MAX_WARNINGS {
            self.warnings.push(warning);
        }
    }

    /// The label of a row: the GPU fails within `horizon` seconds after it. None for rows
    /// at or after the GPU's first failure.
    pub fn label(&self, row: &Row, horizon: i64) -> Option<bool> {
        let record = &self.gpus[row.gpu];
        if record.first_failure().is_some_and(|f| row.at >= f) {
            return None;
        }
        Some(
            record
                .failures
                .iter()
                .any(|&(f, _)| f > row.at && f - row.at <= horizon),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_snapshots_are_told_apart_and_garbage_is_skipped() {
        let text = concat!(
            r#"{"at":"2026-01-01T00:00:00Z","gpus":[{"index":0,"uuid":"GPU-a","name":"x","up":true}]}"#,
            "\n",
            r#"{"at":"2026-01-01T01:00:00Z","gpus":[{"index":0,"uuid":"GPU-a","name":"x","up":true}]}"#,
            "\nnot json\n\n",
            r#"{"failure":{"uuid":"GPU-a","at":"2026-01-01T03:00:00Z","family":"memory_wear"}}"#,
            "\n",
        );
        let h = History::read(text.as_bytes(), 3600).unwrap();
        assert_eq!((h.snapshots, h.skipped, h.rows.len()), (2, 1, 2));
        assert!(h.warnings[0].starts_with("line 3:"), "{:?}", h.warnings);
        assert_eq!(
            h.gpus[0].failures,
            vec![(1_767_236_400, "memory_wear".into())]
        );
        assert_eq!(h.label(&h.rows[0], 2 * 3600), Some(false));
        assert_eq!(h.label(&h.rows[1], 2 * 3600), Some(true));
    }
}
