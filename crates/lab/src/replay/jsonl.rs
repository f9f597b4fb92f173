//! Reading JSONL recordings: one [`Snapshot`] per line, as `gpu-sentinel record` writes.
//!
//! Recordings of the simulator also carry failure labels, `{"failure": {"uuid": …, "at":
//! …, "family": …}}`, the ground truth `train` learns from; replay skips and counts them.
//! A line that is neither is warned about with its number and skipped.
//!
//! The rules of the CSV reader's rounds ([`super::smi_round`]) hold here with a line for a
//! round: a snapshot stamped with exactly the time of the one before is the same snapshot
//! written twice, skipped and counted with a warning naming the line it repeats; one older
//! than the one before is out of order and skipped. A line cut off mid-write at the end of
//! the recording is not JSON, so it is skipped with a warning: every snapshot handed on is
//! whole, and no GPU is missing from one because the file ended. Every snapshot passes the
//! model's range checks ([`crate::model::sanitize`]) before it is handed on.

use anyhow::Context as _;
use std::io::BufRead;

use serde::Deserialize;

use super::{ReadStats, SnapshotReader, Warnings};
use crate::model::Snapshot;

/// Streams snapshots out of a JSONL recording, one line in memory at a time.
pub struct JsonlReader<R: BufRead> {
    input: R,
    line: Vec<u8>,
    number: u64,
    /// Time and line of the last snapshot handed on.
    last: Option<(chrono::DateTime<chrono::Utc>, u64)>,
    stats: ReadStats,
}

/// A failure label line; its content is for `train`, not for replay.
#[derive(Deserialize)]
struct Label {
    #[allow(dead_code)]
    failure: serde::de::IgnoredAny,
}

impl<R: BufRead> JsonlReader<R> {
    pub fn new(input: R) -> JsonlReader<R> {
        JsonlReader {
            input,
            line: Vec::new(),
            number: 0,
            last: None,
            stats: ReadStats::default(),
        }
    }
}

impl<R: BufRead + Send> SnapshotReader for JsonlReader<R> {
    fn next_into(&mut self, into: &mut Snapshot, warnings: &mut Warnings) -> anyhow::Result<bool> {
        loop {
            self.line.clear();
            let n = self
                .input
                .read_until(b'\n', &mut self.line)
                .context("cannot read the recording")?;
            if n == 0 {
                return Ok(false);
            }
            self.number += 1;
            let ends_line = self.line.last() == Some(&b'\n');
            let text = self.line.trim_ascii();
            if text.is_empty() {
                continue;
            }
            let parsed = if text.starts_with(b"{\"failure\"") {
                Err(None)
            } else {
                serde_json::from_slice::<Snapshot>(text).map_err(Some)
            };
            match parsed {
                Ok(mut snapshot) => {
                    if let Some((last, line)) = self.last.filter(|(last, _)| snapshot.at <= *last) {
                        let at = snapshot.at.to_rfc3339();
                        if snapshot.at == last {
                            self.stats.duplicates += 1;
                            warnings.at_line(
                                self.number,
                                format_args!(
                                    "duplicate of line {line} (a snapshot at {at} again); skipped"
                                ),
                            );
                        } else {
                            warnings.at_line(
                                self.number,
                                format_args!(
                                    "snapshot at {at} is before the previous one at {} (out of order); skipped",
                                    last.to_rfc3339()
                                ),
                            );
                        }
                        continue;
                    }
                    self.last = Some((snapshot.at, self.number));
                    let rejected = snapshot.sanitize();
                    self.stats.rejected.note(&rejected, self.number);
                    self.stats.samples += snapshot.gpus.len() as u64;
                    *into = snapshot;
                    return Ok(true);
                }
                Err(error) => {
                    if serde_json::from_slice::<Label>(text).is_ok() {
                        self.stats.labels += 1;
                        continue;
                    }
                    let why = error
                        .map_or_else(|| "malformed failure label".to_string(), |e| e.to_string());
                    // A last line without its newline was cut off mid-write.
                    let cut = if ends_line {
                        ""
                    } else {
                        ", the recording ends part-way through it: cut off mid-write"
                    };
                    warnings.at_line(
                        self.number,
                        format_args!("not a snapshot ({why}{cut}); line skipped"),
                    );
                }
            }
        }
    }

    fn stats(&self) -> ReadStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_labels_and_garbage() {
        let text = concat!(
            "{\"at\":\"2026-01-01T00:00:00Z\",\"gpus\":[{\"index\":0,\"uuid\":\"GPU-a\",\"name\":\"x\",\"up\":true}]}\n",
            "{\"failure\":{\"uuid\":\"GPU-a\",\"at\":\"2026-01-01T00:00:03Z\",\"family\":\"thermal\"}}\n",
            "\n",
            "this is not json\n",
            "{\"at\":\"2025-12-31T00:00:00Z\",\"gpus\":[]}\n",
            "{\"at\":\"2026-01-01T00:00:05Z\",\"gpus\":[{\"index\":0,\"uuid\":\"GPU-a\",\"name\":\"x\",\"up\":false}]}\n",
            "{\"at\":\"2026-01-01T00:00:10Z\",\"gp",
        );
        let mut reader = JsonlReader::new(text.as_bytes());
        let mut warnings = Warnings::collecting();
        let mut snapshot = Snapshot::default();
        assert!(reader.next_into(&mut snapshot, &mut warnings).unwrap());
        assert_eq!(snapshot.gpus[0].uuid, "GPU-a");
        assert!(reader.next_into(&mut snapshot, &mut warnings).unwrap());
        assert!(!snapshot.gpus[0].up);
        assert!(!reader.next_into(&mut snapshot, &mut warnings).unwrap());
        let stats = reader.stats();
        assert_eq!(stats.samples, 2);
        assert_eq!(stats.labels, 1);
        let messages = warnings.messages();
        assert_eq!(messages.len(), 3, "{messages:?}");
        assert!(messages[0].starts_with("input:4: not a snapshot"));
        assert!(messages[1].starts_with("input:5: snapshot at"));
        assert!(messages[2].starts_with("input:7: not a snapshot"));
        assert!(messages[2].contains("cut off mid-write"), "{messages:?}");
    }

    #[test]
    fn a_snapshot_written_twice_is_skipped_and_counted() {
        let line = "{\"at\":\"2026-01-01T00:00:00Z\",\"gpus\":[{\"index\":0,\"uuid\":\"GPU-a\",\"name\":\"x\",\"up\":true}]}\n";
        let later = line.replace("00:00:00Z", "00:01:00Z");
        let text = [line, line, &later, &later, line].concat();
        let mut reader = JsonlReader::new(text.as_bytes());
        let mut warnings = Warnings::collecting();
        let mut snapshot = Snapshot::default();
        let mut read = 0;
        while reader.next_into(&mut snapshot, &mut warnings).unwrap() {
            read += 1;
        }
        assert_eq!(read, 2);
        let stats = reader.stats();
        assert_eq!((stats.samples, stats.duplicates), (2, 2));
        let messages = warnings.messages();
        assert_eq!(messages.len(), 3, "{messages:?}");
        assert!(
            messages[0].starts_with("input:2: duplicate of line 1"),
            "{messages:?}"
        );
        assert!(
            messages[1].starts_with("input:4: duplicate of line 3"),
            "{messages:?}"
        );
        assert!(messages[2].contains("(out of order)"), "{messages:?}");
    }

    #[test]
    fn values_out_of_range_are_cleared_and_tallied_with_their_first_line() {
        let good = "{\"at\":\"2026-01-01T00:00:00Z\",\"gpus\":[{\"index\":0,\"uuid\":\"GPU-a\",\"name\":\"x\",\"up\":true,\"temperature_celsius\":50.0}]}\n";
        let cold = good
            .replace("00:00:00Z", "00:01:00Z")
            .replace("50.0", "-5.0");
        let colder = cold.replace("00:01:00Z", "00:02:00Z");
        let text = [good, &cold, &colder].concat();
        let mut reader = JsonlReader::new(text.as_bytes());
        let mut warnings = Warnings::collecting();
        let mut snapshot = Snapshot::default();
        let mut temperatures = Vec::new();
        while reader.next_into(&mut snapshot, &mut warnings).unwrap() {
            temperatures.push(snapshot.gpus[0].temperature_celsius);
        }
        assert_eq!(temperatures, [Some(50.0), None, None]);
        assert!(warnings.messages().is_empty());
        let summary = reader.stats().rejected.summary().unwrap();
        assert_eq!(
            summary,
            "2 values out of range, left empty (temperature_celsius: 2, first at line 2)"
        );
    }
}
