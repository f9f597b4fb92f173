//! Replaying recordings through the analysis engine.
//!
//! A recording is either JSONL snapshots written by `gpu-sentinel record` ([`jsonl`]) or a
//! log written by `nvidia-smi --query-gpu=… --format=csv -l N` ([`smi_csv`]). Both are read
//! as a stream — one snapshot in memory at a time, whatever the file's length — and each
//! snapshot is folded into an [`Engine`] exactly as the live agent would fold it, as fast
//! as the CPU allows. What the engine found over the whole recording is summed up in a
//! [`report::Report`], the `replay --json` contract (its keys are fixed by tests/it/replay.rs).
//!
//! Recordings are outside data: a malformed line is a [`Warnings`] entry with its line
//! number, never a panic and never the end of the replay. Only a file that cannot be read
//! at all, or a CSV whose columns cannot be known, stops it. A line repeating a sample
//! already read is skipped (see `smi_round` for what a polling round is), every value
//! passes the model's range checks ([`crate::model::sanitize`]), and both are summed up
//! in one warning each at the end.

pub mod alerts;
pub mod jsonl;
mod read_ahead;
pub mod report;
pub mod smi_csv;
pub mod smi_fields;
mod smi_lines;
mod smi_round;
mod smi_row;
pub mod unpack;

use std::fmt::Display;
use std::io::BufRead;

use crate::engine::{Engine, Findings};
use crate::model::{Checked, RejectedValues, Snapshot};
use report::{ReplayRules, Report, ReportBuilder};

/// What a recording is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `nvidia-smi --query-gpu=… --format=csv[,noheader][,nounits]` output.
    SmiCsv,
    /// One [`Snapshot`] per line, plus `{"failure": …}` label lines (`gpu-sentinel record`).
    Jsonl,
}

impl Format {
    /// Guesses the format from the first bytes of a recording: JSONL lines are objects,
    /// nvidia-smi never writes a `{` first.
    pub fn guess(reader: &mut impl BufRead) -> std::io::Result<Format> {
        let head = reader.fill_buf()?;
        let first = head.iter().find(|b| !b.is_ascii_whitespace());
        Ok(match first {
            Some(b'{') => Format::Jsonl,
            _ => Format::SmiCsv,
        })
    }
}

/// A stream of snapshots read from a recording.
pub trait SnapshotReader: Send {
    /// Reads the next snapshot into `into` (whose allocations the reader may reuse);
    /// false at the end of the recording. Malformed input becomes warnings; only I/O
    /// errors, and a CSV whose columns cannot be known, are errors.
    fn next_into(&mut self, into: &mut Snapshot, warnings: &mut Warnings) -> anyhow::Result<bool>;

    /// What was read so far.
    fn stats(&self) -> ReadStats;
}

/// Counts a reader keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// GPU samples (CSV rows, or entries of `gpus` in JSONL snapshots) handed to the engine.
    pub samples: u64,
    /// Failure label lines skipped (JSONL).
    pub labels: u64,
    /// Rows (CSV) or snapshots (JSONL) skipped as repeats of one already read.
    pub duplicates: u64,
    /// The last snapshot is a polling round the end of the log cut short, kept because a
    /// GPU stopped answering in it: GPUs it lacks were not sampled, not lost (see
    /// `smi_round`).
    pub partial_last_round: bool,
    /// Values the range checks cleared ([`crate::model::sanitize`]).
    pub rejected: RangeTally,
}

/// Values the range checks cleared over a recording, by field, with the line of the
/// first of each.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RangeTally {
    values: RejectedValues,
    first_line: [Option<u64>; Checked::ALL.len()],
}

impl RangeTally {
    /// Adds what the checks cleared in the sample or snapshot read at `line`.
    pub fn note(&mut self, rejected: &RejectedValues, line: u64) {
        if rejected.total() == 0 {
            return;
        }
        for (field, _) in rejected.iter() {
            self.first_line[field.index()].get_or_insert(line);
        }
        self.values.add(rejected);
    }

    /// Values cleared, all fields together.
    pub fn total(&self) -> u64 {
        self.values.total()
    }

    /// `N values out of range, left empty (field: count, first at line L; …)`, or `None`
    /// when every value was in range.
    pub fn summary(&self) -> Option<String> {
        let total = self.values.total();
        if total == 0 {
            return None;
        }
        let fields: Vec<String> = self
            .values
            .iter()
            .map(|(field, count)| match self.first_line[field.index()] {
                Some(line) => format!("{}: {count}, first at line {line}", field.name()),
                None => format!("{}: {count}", field.name()),
            })
            .collect();
        Some(format!(
            "{total} values out of range, left empty ({})",
            fields.join("; ")
        ))
    }
}

/// Warnings about a recording, each with its line number, printed to standard error as
/// they come (up to a limit, so a file of garbage does not bury the report) or collected
/// for tests.
#[derive(Debug)]
pub struct Warnings {
    /// Prefix of every message: the file name.
    origin: String,
    limit: u64,
    total: u64,
    collected: Option<Vec<String>>,
}

/// Warnings printed before the rest are only counted.
const WARNINGS_SHOWN: u64 = 100;

impl Warnings {
    /// Warnings printed to standard error, prefixed with `origin` (the file name).
    pub fn to_stderr(origin: impl Into<String>) -> Warnings {
        Warnings {
            origin: origin.into(),
            limit: WARNINGS_SHOWN,
            total: 0,
            collected: None,
        }
    }

    /// Warnings kept in memory, for tests.
    pub fn collecting() -> Warnings {
        Warnings {
            origin: "input".into(),
            limit: u64::MAX,
            total: 0,
            collected: Some(Vec::new()),
        }
    }

    /// A warning about line `line` (1-based).
    pub(crate) fn at_line(&mut self, line: u64, message: impl Display) {
        self.emit(format_args!("{}:{line}: {message}", self.origin.clone()));
    }

    /// A warning about the recording as a whole.
    pub fn general(&mut self, message: impl Display) {
        self.emit(format_args!("{}: {message}", self.origin.clone()));
    }

    /// A count summed up over the whole recording (duplicates skipped, values out of
    /// range): always shown, however many warnings came before, and not counted among them.
    pub fn summary(&mut self, message: impl Display) {
        let text = format!("{}: {message}", self.origin);
        match &mut self.collected {
            Some(list) => list.push(text),
            None => eprintln!("warning: {text}"),
        }
    }

    fn emit(&mut self, text: std::fmt::Arguments<'_>) {
        self.total += 1;
        match &mut self.collected {
            Some(list) => list.push(text.to_string()),
            None if self.total <= self.limit => eprintln!("warning: {text}"),
            None => {}
        }
    }

    /// How many warnings were raised.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The collected messages (empty unless made with [`Warnings::collecting`]).
    pub fn messages(&self) -> &[String] {
        self.collected.as_deref().unwrap_or_default()
    }

    /// Says how many warnings were not printed, if any.
    pub fn finish(&self) {
        if self.collected.is_none() && self.total > self.limit {
            eprintln!(
                "warning: {}: {} more warnings not shown ({} in all)",
                self.origin,
                self.total - self.limit,
                self.total
            );
        }
    }
}

/// GPU samples handed from one stage of the replay to the next at a time: a batch closes
/// once its snapshots hold this many (or at [`MOST_SNAPSHOTS`]). Counted in samples, not
/// snapshots, so a narrow log of 64 GPUs a round and a wide one of 8 hand over alike. Each
/// hand-over may wake a thread, and four stages share two cores: batches of 8 snapshots
/// cost 25,000 context switches and 0.3–0.5 s of system time on the wide log (1,000,000
/// rows of 8 GPUs), batches of 256 samples 16,000–19,000 on either log, 512 6,000–9,000.
/// The findings of every batch in flight are kept until the report has read them, so the
/// batch is also what the resident memory grows with: 23–25 MiB on both logs at 512
/// (BENCHMARKS.md, replay).
const BATCH_SAMPLES: usize = 512;

/// Snapshots a batch holds at most, whatever their size (a log of one GPU).
const MOST_SNAPSHOTS: usize = 64;

/// Batches in flight between the threads.
const BATCHES_IN_FLIGHT: usize = 4;

/// Runs every snapshot of `reader` through `engine` and sums up what it found. The alert
/// rules see each step's findings and add their alerts to the report.
///
/// Three stages, each on a thread of its own, in a pipeline: reading and parsing; the
/// engine's steps; the report and the alert rules over each step's findings (on this
/// thread). On a long log the engine's step is the largest stage and the others take
/// about half its time or less, so the replay takes about the time of the slowest stage
/// where the machine has the cores, and the stages share them where it has not. Batches of
/// snapshots and of findings go down the pipeline over bounded channels and come back
/// emptied for reuse, so memory stays the same however long the recording is; every stage
/// takes them in order, so the report is the same as stepping them one by one.
pub fn replay(
    reader: &mut dyn SnapshotReader,
    engine: &mut Engine,
    rules: &mut dyn ReplayRules,
    warnings: &mut Warnings,
) -> anyhow::Result<Report> {
    use std::sync::mpsc::{channel, sync_channel};
    let mut report = ReportBuilder::new(engine.config.risk_threshold);
    let (full_tx, full_rx) = sync_channel::<Vec<Snapshot>>(BATCHES_IN_FLIGHT);
    let (empty_tx, empty_rx) = channel::<Vec<Snapshot>>();
    let (found_tx, found_rx) = sync_channel::<Stepped>(BATCHES_IN_FLIGHT);
    let (spent_tx, spent_rx) = channel::<Vec<Findings>>();
    // Lent to the reading thread until the scope ends; the summary is written after.
    let reading_warnings = &mut *warnings;
    let stepping_engine = &mut *engine;
    let read = std::thread::scope(|scope| {
        let reading = std::thread::Builder::new()
            .name("replay-read".into())
            .spawn_scoped(scope, move || {
                behind_the_engine();
                read_batches(reader, reading_warnings, &full_tx, &empty_rx)
            });
        let reading = match reading {
            Ok(handle) => handle,
            Err(e) => return Err(anyhow::Error::new(e).context("cannot start the reading thread")),
        };
        let stepping = std::thread::Builder::new()
            .name("replay-step".into())
            .spawn_scoped(scope, move || {
                step_batches(stepping_engine, full_rx, &found_tx, &spent_rx)
            });
        let stepping = match stepping {
            Ok(handle) => handle,
            Err(e) => {
                return Err(anyhow::Error::new(e).context("cannot start the engine's thread"));
            }
        };
        for (batch, findings) in found_rx {
            for (snapshot, findings) in batch.iter().zip(&findings) {
                report.observe(snapshot, findings);
                rules.step(findings, report.alerts_mut());
            }
            // Back whole for reuse. The other stages may have finished and gone; then
            // nobody needs them back.
            let _ = empty_tx.send(batch);
            let _ = spent_tx.send(findings);
        }
        stepping
            .join()
            .map_err(|_| anyhow::anyhow!("the engine's thread panicked"))?;
        reading
            .join()
            .map_err(|_| anyhow::anyhow!("the reading thread panicked"))?
    });
    let stats = read?;
    if stats.labels > 0 {
        eprintln!(
            "note: skipped {} failure label line(s) (training data, not snapshots)",
            stats.labels
        );
    }
    summarise(&stats, warnings);
    Ok(report.finish(engine, rules, &stats))
}

/// How much lower than the engine's thread the threads that read the log run (a nice
/// value, added to the process's): they work ahead into bounded batches, so yielding to
/// the engine's steps when both want a core costs them nothing but idle time they would
/// spend blocked on a full channel, while the engine's steps, the longest stage, no longer
/// wait behind them.
const READING_NICENESS: i32 = 5;

/// Lowers the calling thread's priority by [`READING_NICENESS`] (Linux keeps a nice value
/// per thread). Where it cannot, the thread runs as it was: only the sharing of the cores
/// changes, never what is read.
pub(crate) fn behind_the_engine() {
    #[cfg(target_os = "linux")]
    // SAFETY: nice(2) takes a plain integer and changes only the calling thread's
    // scheduling priority; its result is not needed.
    unsafe {
        libc::nice(READING_NICENESS);
    }
}

/// A batch of snapshots and the findings of each, in order.
type Stepped = (Vec<Snapshot>, Vec<Findings>);

/// The engine's thread: steps every snapshot of each batch, and hands the batch on with
/// its findings. Findings the report is done with come back, and each step writes over
/// one of them ([`Engine::recycle`]).
fn step_batches(
    engine: &mut Engine,
    full: std::sync::mpsc::Receiver<Vec<Snapshot>>,
    stepped: &std::sync::mpsc::SyncSender<Stepped>,
    spent: &std::sync::mpsc::Receiver<Vec<Findings>>,
) {
    let mut spare: Vec<Findings> = Vec::new();
    let mut containers: Vec<Vec<Findings>> = Vec::new();
    for batch in full {
        while let Ok(mut back) = spent.try_recv() {
            spare.append(&mut back);
            containers.push(back);
        }
        let mut findings = containers
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(MOST_SNAPSHOTS));
        for snapshot in &batch {
            if let Some(old) = spare.pop() {
                engine.recycle(old);
            }
            findings.push(engine.step(snapshot));
        }
        // The report's side only stops listening when it failed; the error is its to tell.
        if stepped.send((batch, findings)).is_err() {
            break;
        }
    }
}

/// The counts a reader kept that each line's warning does not sum up: duplicates skipped
/// and values the range checks cleared (these have no warning of their own, so a log with
/// a bad sensor warns once, not once a row).
fn summarise(stats: &ReadStats, warnings: &mut Warnings) {
    if stats.duplicates > 0 {
        warnings.summary(format_args!(
            "skipped {} duplicate line(s), each a GPU sample read already",
            stats.duplicates
        ));
    }
    if let Some(summary) = stats.rejected.summary() {
        warnings.summary(summary);
    }
}

/// The reading thread: fills batches until the end of the recording, refilling the
/// snapshots of batches the engine sent back.
fn read_batches(
    reader: &mut dyn SnapshotReader,
    warnings: &mut Warnings,
    full: &std::sync::mpsc::SyncSender<Vec<Snapshot>>,
    returned: &std::sync::mpsc::Receiver<Vec<Snapshot>>,
) -> anyhow::Result<ReadStats> {
    let mut spare: Vec<Snapshot> = Vec::new();
    let mut containers: Vec<Vec<Snapshot>> = Vec::new();
    loop {
        while let Ok(mut back) = returned.try_recv() {
            spare.append(&mut back);
            containers.push(back);
        }
        let mut batch = containers
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(MOST_SNAPSHOTS));
        let mut more = true;
        let mut samples = 0;
        while samples < BATCH_SAMPLES && batch.len() < MOST_SNAPSHOTS {
            let mut slot = spare.pop().unwrap_or_default();
            if !reader.next_into(&mut slot, warnings)? {
                more = false;
                break;
            }
            samples += slot.gpus.len().max(1);
            batch.push(slot);
        }
        // The engine side only stops listening when it failed; the error is its to tell.
        if !batch.is_empty() && full.send(batch).is_err() {
            break;
        }
        if !more {
            break;
        }
    }
    Ok(reader.stats())
}

#[cfg(test)]
mod smi_written_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_is_guessed_from_the_first_byte() {
        let mut jsonl: &[u8] = b"\n  {\"at\": 1}\n";
        assert_eq!(Format::guess(&mut jsonl).unwrap(), Format::Jsonl);
        let mut csv: &[u8] = b"timestamp, index\n";
        assert_eq!(Format::guess(&mut csv).unwrap(), Format::SmiCsv);
        let mut empty: &[u8] = b"";
        assert_eq!(Format::guess(&mut empty).unwrap(), Format::SmiCsv);
    }

    #[test]
    fn collected_warnings_carry_origin_and_line() {
        let mut w = Warnings::collecting();
        w.at_line(7, "bad cell");
        w.general("no samples");
        assert_eq!(w.total(), 2);
        assert_eq!(w.messages(), ["input:7: bad cell", "input: no samples"]);
    }
}
