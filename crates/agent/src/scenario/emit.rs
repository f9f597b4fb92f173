//! Running a library: each node's fleet stepped through its days, in-process or to files.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::smi_csv::{SmiCsvWriter, Units};
use super::{DAY, Library, NodeScenario, Polling, TruthKind};
use crate::model::Snapshot;
use crate::source::simulate::Failure;

/// One collection of a node run.
pub struct Step<'a> {
    pub snapshot: &'a Snapshot,
    /// The driver was reloaded since the previous collection (the log restarts).
    pub after_reload: bool,
    /// Failures reached since the previous collection.
    pub failures: &'a [Failure],
}

impl NodeScenario {
    /// Steps the node's fleet from `start` for `days` days, a collection every
    /// [`NodeScenario::interval`] seconds of `polling` (a number: that many seconds), and
    /// hands each to `each`. The collection a driver reload interrupts is skipped (the
    /// monitor was restarting), and so are those in the node's gaps (their XIDs come with
    /// the next collection, as the kernel log keeps them); a collection that reaches a
    /// failure is handed over all the same.
    pub fn run<E>(
        &self,
        start: DateTime<Utc>,
        days: f64,
        polling: impl Into<Polling>,
        mut each: impl FnMut(Step<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut fleet = self.fleet(start);
        let end = days.max(0.0) * DAY;
        let interval = self.interval(polling);
        let mut reload = false;
        let mut t = 0.0;
        while t + interval <= end + 1e-6 {
            t += interval;
            fleet.advance(interval);
            let failures = fleet.take_failures();
            if self
                .driver_reloads
                .iter()
                .any(|&r| r > t - interval && r <= t)
            {
                reload = true;
                // The events of the skipped collection are lost with it, as they would be.
                fleet.take_events();
                if failures.is_empty() {
                    continue;
                }
            }
            if self.in_gap(t) && failures.is_empty() {
                continue;
            }
            let snapshot = fleet.snapshot();
            each(Step {
                snapshot: &snapshot,
                after_reload: std::mem::take(&mut reload),
                failures: &failures,
            })?;
        }
        Ok(())
    }
}

/// What `gpu-sentinel scenarios` writes per node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormat {
    /// An nvidia-smi CSV log with units after values.
    SmiCsv,
    /// The same with `nounits`.
    SmiCsvNoUnits,
    /// JSONL snapshots with failure label lines, as `record` writes them.
    Jsonl,
}

/// A failure label line, in the shape `record` writes and `train` reads.
#[derive(Serialize)]
struct Label<'a> {
    failure: &'a Failure,
}

/// What was written.
#[derive(Debug, Clone, PartialEq)]
pub struct Written {
    pub files: Vec<PathBuf>,
    pub rows: u64,
}

/// Writes every node of `library` into `dir` (one file per node, named after it), each
/// collected as `polling` says, and the ground truth as `truth.json` (with each node's
/// interval).
pub fn write_library(
    library: &Library,
    dir: &Path,
    format: FileFormat,
    polling: impl Into<Polling>,
) -> anyhow::Result<Written> {
    let polling = polling.into();
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut written = Written {
        files: Vec::new(),
        rows: 0,
    };
    for node in &library.nodes {
        let ext = if format == FileFormat::Jsonl {
            "jsonl"
        } else {
            "csv"
        };
        let path = dir.join(format!("{}.{ext}", node.hostname));
        let file = File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        let out = BufWriter::new(file);
        written.rows += write_node(library, node, out, format, polling)
            .with_context(|| format!("writing {}", path.display()))?;
        written.files.push(path);
    }
    let path = dir.join("truth.json");
    let mut truth = library.truth();
    for (node, scenario) in truth.nodes.iter_mut().zip(&library.nodes) {
        let interval = scenario.interval(polling);
        node.interval_s = Some(interval);
        for gpu in truth.gpus.iter_mut() {
            if gpu.hostname == scenario.hostname && gpu.label.kind == TruthKind::Failing {
                gpu.shows_a_day_ahead =
                    Some(scenario.shows_a_day_ahead(gpu.index as usize, interval));
            }
        }
    }
    let truth = serde_json::to_vec_pretty(&truth)?;
    std::fs::write(&path, truth).with_context(|| format!("writing {}", path.display()))?;
    written.files.push(path);
    Ok(written)
}

/// Writes one node's run to `out`; returns the rows (CSV) or snapshots (JSONL) written.
pub(crate) fn write_node(
    library: &Library,
    node: &NodeScenario,
    mut out: impl Write,
    format: FileFormat,
    polling: impl Into<Polling>,
) -> anyhow::Result<u64> {
    let (start, days) = (library.options.start, library.options.days);
    let polling: Polling = polling.into();
    let rows = match format {
        FileFormat::Jsonl => {
            let mut lines = 0;
            node.run(start, days, polling, |step| -> anyhow::Result<()> {
                serde_json::to_writer(&mut out, step.snapshot)?;
                out.write_all(b"\n")?;
                for failure in step.failures {
                    serde_json::to_writer(&mut out, &Label { failure })?;
                    out.write_all(b"\n")?;
                }
                lines += 1;
                Ok(())
            })?;
            lines
        }
        FileFormat::SmiCsv | FileFormat::SmiCsvNoUnits => {
            let units = if format == FileFormat::SmiCsv {
                Units::Units
            } else {
                Units::NoUnits
            };
            let mut csv = SmiCsvWriter::new(&mut out, units);
            csv.header()?;
            node.run(start, days, polling, |step| -> anyhow::Result<()> {
                if step.after_reload {
                    csv.header()?;
                }
                csv.round(step.snapshot)?;
                Ok(())
            })?;
            csv.rows()
        }
    };
    out.flush()?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::LibraryOptions;

    #[test]
    fn a_node_run_hands_over_every_collection_its_restarts_and_its_failures() {
        // Seed 2, node 2: two driver reloads and two failures in three days.
        let library = Library::new(LibraryOptions::new(2, 2, 3.0));
        let node = &library.nodes[1];
        assert_eq!(node.driver_reloads.len(), 2);
        let fleet = node.fleet(library.options.start);
        let interval = 600.0;
        let (mut steps, mut restarts, mut failures) = (0, 0, Vec::new());
        node.run(library.options.start, 3.0, interval, |step| {
            steps += 1;
            restarts += usize::from(step.after_reload);
            assert_eq!(step.snapshot.gpus.len(), 8);
            assert_eq!(step.snapshot.host.hostname, node.hostname);
            failures.extend(step.failures.iter().cloned());
            Ok::<(), ()>(())
        })
        .expect("no errors");
        // One collection a reload interrupts is missing, and those in the node's gaps.
        let in_gaps = (1..=3 * 144)
            .filter(|&k| node.in_gap(k as f64 * interval))
            .count();
        assert_eq!(steps, 3 * 144 - 2 - in_gaps);
        assert_eq!(restarts, 2);
        let mut expected = 0;
        for (i, label) in node.labels.iter().enumerate() {
            let Some(at) = label.failure_s else {
                continue;
            };
            expected += 1;
            let uuid = &fleet.gpu(i).expect("a GPU").uuid;
            let failure = failures
                .iter()
                .find(|f| &f.uuid == uuid)
                .unwrap_or_else(|| panic!("no failure for GPU {i}"));
            assert_eq!(Some(failure.family.as_str()), label.family.as_deref());
            let seconds = (failure.at - library.options.start).num_milliseconds() as f64 / 1e3;
            assert!(
                seconds >= at && seconds < at + interval + 1.0,
                "{seconds} {at}"
            );
        }
        assert_eq!(failures.len(), expected);
        assert!(expected >= 2);
    }

    #[test]
    fn nodes_poll_at_their_own_interval_with_gaps_and_reloads_zero_the_volatile_counters() {
        let library = Library::new(LibraryOptions::new(5, 12, 20.0));
        let start = library.options.start;
        let polling = Polling::between(5.0, 60.0);
        let intervals: Vec<f64> = library.nodes.iter().map(|n| n.interval(polling)).collect();
        assert!(
            intervals
                .iter()
                .all(|&i| (5.0..=60.0).contains(&i) && i.fract() == 0.0)
        );
        assert!(intervals.iter().any(|&i| i < 20.0) && intervals.iter().any(|&i| i > 30.0));
        assert_eq!(library.nodes[0].interval(600.0), 600.0);
        assert!(library.nodes.iter().any(|n| !n.gaps.is_empty()));
        let mut reset = 0;
        for node in library
            .nodes
            .iter()
            .filter(|n| !n.driver_reloads.is_empty())
        {
            for gpu in &node.gpus {
                assert!(
                    node.driver_reloads
                        .iter()
                        .all(|r| gpu.quirks.counter_resets.contains(r))
                );
            }
            let reload = node.driver_reloads[0];
            let (mut before, mut after) = (None, None);
            let mut last = f64::NEG_INFINITY;
            node.run(start, 20.0, 300.0, |step| {
                let t = (step.snapshot.at - start).num_seconds() as f64;
                for &(a, b) in &node.gaps {
                    assert!(!(t > a && t < b), "a row in the gap at {t}");
                    if t >= b && last <= a {
                        assert!(t - last >= b - a, "the gap shows in the log");
                    }
                }
                last = t;
                let ecc: Vec<_> = step.snapshot.gpus.iter().map(|g| g.ecc).collect();
                if t <= reload {
                    before = Some(ecc);
                } else if after.is_none() {
                    after = Some(ecc);
                }
                Ok::<(), ()>(())
            })
            .expect("no errors");
            let (before, after) = (before.expect("before"), after.expect("after"));
            for (b, a) in before.iter().zip(&after) {
                let (Some(vb), Some(va)) = (b.corrected_volatile, a.corrected_volatile) else {
                    continue;
                };
                let (Some(gb), Some(ga)) = (b.corrected_aggregate, a.corrected_aggregate) else {
                    continue;
                };
                // The volatile counter holds only what came after the reload.
                assert!(
                    va <= ga - gb,
                    "volatile {vb} then {va}, aggregate {gb} then {ga}"
                );
                reset += usize::from(vb > va);
            }
        }
        assert!(reset > 0, "some GPU had errors before a reload");
    }
}
