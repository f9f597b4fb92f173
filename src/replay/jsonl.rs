//! Reading JSONL recordings: one [`Snapshot`] per line, as `gpu-sentinel record` writes.
//!
//! Recordings of the simulator also carry failure labels, `{"failure": {"uuid": …, "at":
//! …, "family": …}}`, the ground truth `train` learns from; replay skips and counts them.
//! A line that is neither is warned about with its number and skipped.

use std::io::BufRead;

use serde::Deserialize;

use super::{ReadStats, SnapshotReader, Warnings};
use crate::model::Snapshot;

/// Streams snapshots out of a JSONL recording, one line in memory at a time.
pub struct JsonlReader<R: BufRead> {
    input: R,
    line: Vec<u8>,
    number: u64,
    last_at: Option<chrono::DateTime<chrono::Utc>>,
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
            last_at: None,
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
                .map_err(|e| anyhow::anyhow!("cannot read the recording: {e}"))?;
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
                Ok(snapshot) => {
                    self.stats.truncated_tail = false;
                    if let Some(last) = self.last_at.filter(|last| snapshot.at < *last) {
                        warnings.at_line(
                            self.number,
                            format_args!(
                                "snapshot at {} is before the previous one at {} (out of order); skipped",
                                snapshot.at.to_rfc3339(),
                                last.to_rfc3339()
                            ),
                        );
                        continue;
                    }
                    self.last_at = Some(snapshot.at);
                    self.stats.samples += snapshot.gpus.len() as u64;
                    *into = snapshot;
                    return Ok(true);
                }
                Err(error) => {
                    if serde_json::from_slice::<Label>(text).is_ok() {
                        self.stats.labels += 1;
                        continue;
                    }
                    // A last line without its newline was cut off mid-write.
                    self.stats.truncated_tail = !ends_line;
                    let why = error
                        .map_or_else(|| "malformed failure label".to_string(), |e| e.to_string());
                    warnings.at_line(
                        self.number,
                        format_args!("not a snapshot ({why}); line skipped"),
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
        assert!(stats.truncated_tail);
        let messages = warnings.messages();
        assert_eq!(messages.len(), 3, "{messages:?}");
        assert!(messages[0].starts_with("input:4: not a snapshot"));
        assert!(messages[1].starts_with("input:5: snapshot at"));
        assert!(messages[2].starts_with("input:7: not a snapshot"));
    }
}
