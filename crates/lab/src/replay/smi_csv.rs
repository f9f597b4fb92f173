//! Reading `nvidia-smi --query-gpu=FIELDS --format=csv[,noheader][,nounits] -l N` logs.
//!
//! nvidia-smi writes one row per GPU per polling round, the GPUs of a round one after the
//! other (milliseconds apart), every round in the same GPU order. A round becomes one
//! [`Snapshot`]; [`super::smi_round`] holds the rule for where a round ends, which rows are
//! duplicates, and what happens to a round the end of the log cut short. Any subset and
//! order of fields works; fields the model has no place for are ignored with one warning
//! that names them (see [`super::smi_fields`] for the mapping). Every sample passes the
//! model's range checks ([`crate::model::sanitize`]) before it joins a round.
//!
//! The reader is built for long logs: plain lines are split at their commas without the
//! `csv` crate's parser ([`super::smi_lines`]), one record ([`super::smi_lines::Cells`]) is
//! reused for every row, GPU samples are recycled between rounds and each row is read into
//! the place it keeps in its round (no sample is moved), and cells are read as bytes, so a
//! row costs no allocation once the first rounds have warmed the buffers.

use std::io::Read;

use chrono::{DateTime, FixedOffset, Utc};

use super::read_ahead::RecordSource;
use super::smi_fields::{Field, TimestampParser, split_header};
use super::smi_lines::{Cells, Records};
use super::smi_round::{Cut, Rounds, Verdict};
use super::smi_row::{self, Column, recycle};
use super::{ReadStats, SnapshotReader, Warnings};
use crate::model::{GpuSample, HostInfo, RejectedValues, Snapshot};

/// How to read a log.
#[derive(Debug, Clone)]
pub struct SmiCsvOptions {
    /// The `--query-gpu` list of a log written with `noheader`, comma-separated.
    pub fields: Option<String>,
    /// The zone of the log's timestamps (nvidia-smi writes local time without a zone).
    pub timezone: FixedOffset,
}

/// Distinct GPUs one log may name. Hosts have at most a few dozen; a log naming more is
/// garbled, and following every garbled name would grow memory with the file's length.
const MAX_GPUS: usize = 1024;

/// A GPU seen in the log: to notice a GPU changing index, and to recognise the one named
/// in an "Unable to determine the device handle" line by its bus id.
#[derive(Debug, Clone)]
struct KnownGpu {
    uuid: String,
    /// `uuid` is a GPU UUID ([`looks_like_uuid`]): a row naming it needs no check.
    checked_uuid: bool,
    index: u32,
    pci_bus_id: String,
}

/// The GPUs seen in the log, in the order first seen (positions never change).
#[derive(Debug, Default)]
struct KnownGpus {
    list: Vec<KnownGpu>,
    /// Where in `list` the next row's GPU most likely is: after the last row's, as
    /// nvidia-smi writes every round in the same order.
    guess: usize,
}

impl KnownGpus {
    /// Fills in a UUID when the log has none, and warns when a GPU changes index. The
    /// GPU's position among the known ones; `None` (with a warning) when the row's GPU
    /// cannot be believed: a UUID that is not one, or one GPU more than a host can have.
    fn follow(
        &mut self,
        identity: Option<Field>,
        sample: &mut GpuSample,
        line: u64,
        warnings: &mut Warnings,
    ) -> Option<usize> {
        use std::fmt::Write as _;
        match identity {
            Some(Field::Uuid) => {
                // Most rows name the GPU expected next, whose UUID was checked when it was
                // first seen.
                let checked = (self.list.get(self.guess))
                    .is_some_and(|k| k.checked_uuid && k.uuid == sample.uuid);
                if !checked && !looks_like_uuid(&sample.uuid) {
                    warnings.at_line(
                        line,
                        format_args!("uuid {:?} is not a GPU UUID; row skipped", sample.uuid),
                    );
                    return None;
                }
            }
            Some(Field::PciBusId) => {
                sample.uuid.clear();
                let _ = write!(sample.uuid, "pci-{}", sample.pci_bus_id);
            }
            _ => {
                sample.uuid.clear();
                let _ = write!(sample.uuid, "gpu-{}", sample.index);
            }
        }
        let count = self.list.len();
        let found = match self.list.get(self.guess) {
            Some(k) if k.uuid == sample.uuid => Some(self.guess),
            _ => self.list.iter().position(|k| k.uuid == sample.uuid),
        };
        self.guess = found.map_or(0, |at| at + 1);
        match found {
            Some(at) => {
                let known = &mut self.list[at];
                if known.index != sample.index {
                    warnings.at_line(
                        line,
                        format_args!(
                            "{} changed index from {} to {}; following it by its UUID",
                            sample.uuid, known.index, sample.index
                        ),
                    );
                    known.index = sample.index;
                }
                Some(at)
            }
            None if count >= MAX_GPUS => {
                warnings.at_line(
                    line,
                    format_args!(
                        "{} would be GPU number {} of this log; rows of new GPUs past \
                         {MAX_GPUS} are skipped",
                        sample.uuid,
                        MAX_GPUS + 1
                    ),
                );
                None
            }
            None => {
                self.list.push(KnownGpu {
                    uuid: sample.uuid.clone(),
                    // Checked above when the UUID is the identity.
                    checked_uuid: identity == Some(Field::Uuid),
                    index: sample.index,
                    pci_bus_id: sample.pci_bus_id.clone(),
                });
                Some(count)
            }
        }
    }
}

/// Streams snapshots out of an nvidia-smi CSV log.
pub struct SmiCsvReader<R: Read> {
    records: RecordSource<R>,
    record: Cells,
    options: SmiCsvOptions,
    columns: Vec<Column>,
    /// The column that tells GPUs apart: uuid, else bus id, else index.
    identity: Option<Field>,
    timestamps: TimestampParser,
    host: HostInfo,
    /// Rows grouped into rounds; a row is read into the round's staged sample.
    rounds: Rounds,
    /// The first row of the next round, read while finding the end of the current one (its
    /// sample stays staged).
    carry: Option<GpuRow>,
    known: KnownGpus,
    /// The last record was too short to be a row (a line cut off).
    last_record_short: bool,
    /// The end of the log was reached and settled ([`SmiCsvReader::finish`]).
    ended: bool,
    stats: ReadStats,
    /// What the range checks cleared of the row being joined (empty between rows).
    rejected: RejectedValues,
}

/// A row read as one GPU's sample (the rounds' staged sample, [`Rounds::staged`]).
#[derive(Debug, Clone, Copy)]
struct GpuRow {
    at: DateTime<Utc>,
    /// Position of its GPU in [`KnownGpus::list`].
    gpu: usize,
    line: u64,
    /// Stamped by the row itself (not a GPU nvidia-smi could not reach, which borrows the
    /// round's time).
    timed: bool,
}

impl<R: Read + Send + 'static> SmiCsvReader<R> {
    /// [`SmiCsvReader::new`], its records read on a thread of their own
    /// ([`super::read_ahead`]): what `gpu-sentinel replay` reads a log with.
    pub fn reading_ahead(reader: R, options: SmiCsvOptions) -> SmiCsvReader<R> {
        SmiCsvReader::over(RecordSource::ahead(Records::new(reader)), options)
    }
}

impl<R: Read> SmiCsvReader<R> {
    pub fn new(reader: R, options: SmiCsvOptions) -> SmiCsvReader<R> {
        SmiCsvReader::over(RecordSource::Here(Records::new(reader)), options)
    }

    fn over(records: RecordSource<R>, options: SmiCsvOptions) -> SmiCsvReader<R> {
        SmiCsvReader {
            records,
            record: Cells::default(),
            timestamps: TimestampParser::new(options.timezone),
            options,
            columns: Vec::new(),
            identity: None,
            host: HostInfo::default(),
            rounds: Rounds::default(),
            carry: None,
            known: KnownGpus::default(),
            last_record_short: false,
            ended: false,
            stats: ReadStats::default(),
            rejected: RejectedValues::default(),
        }
    }

    /// Maps columns from a header record (or the `--fields` list).
    fn set_columns(&mut self, names: &[&str], warnings: &mut Warnings) -> anyhow::Result<()> {
        let columns: Vec<Column> = names
            .iter()
            .map(|cell| {
                let (name, unit) = split_header(cell);
                Column::new(name, unit)
            })
            .collect();
        anyhow::ensure!(
            columns.iter().any(|c| c.field == Some(Field::Timestamp)),
            "the log has no timestamp column (columns: {}); replay needs nvidia-smi's \
             timestamp field: add `timestamp` to --query-gpu",
            names.join(", ")
        );
        let unused: Vec<&str> = columns
            .iter()
            .filter(|c| c.field.is_none())
            .map(|c| c.name.as_str())
            .collect();
        if !unused.is_empty() {
            warnings.general(format_args!(
                "ignoring {} column(s) gpu-sentinel has no use for: {}",
                unused.len(),
                unused.join(", ")
            ));
        }
        self.identity = [Field::Uuid, Field::PciBusId, Field::Index]
            .into_iter()
            .find(|f| columns.iter().any(|c| c.field == Some(*f)));
        if self.identity.is_none() {
            warnings
                .general("no uuid, pci.bus_id or index column: every row is taken as the same GPU");
        }
        self.columns = columns;
        Ok(())
    }

    /// Reads the next record into `self.record`; false at the end of the file.
    fn read_record(&mut self) -> anyhow::Result<bool> {
        match self.records.read(&mut self.record) {
            Ok(more) => Ok(more),
            Err(e) => match e.kind() {
                csv::ErrorKind::Io(_) => Err(anyhow::Error::new(e).context("cannot read the log")),
                // Not expected with flexible records; treat as an unreadable line.
                _ => Ok(true),
            },
        }
    }

    /// The next GPU row; `None` at the end of the file.
    fn next_row(&mut self, warnings: &mut Warnings) -> anyhow::Result<Option<GpuRow>> {
        loop {
            if !self.read_record()? {
                return Ok(None);
            }
            let line = self.record.line();
            if looks_like_header(&self.record) {
                let names: Vec<String> = self
                    .record
                    .iter()
                    .map(|c| String::from_utf8_lossy(c).into_owned())
                    .collect();
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                let first = self.columns.is_empty();
                if let Err(e) = self.set_columns(&names, warnings) {
                    if first {
                        return Err(e);
                    }
                    warnings.at_line(line, format_args!("{e:#}; header ignored"));
                }
                self.last_record_short = false;
                continue;
            }
            if self.columns.is_empty() {
                let Some(fields) = self.options.fields.clone() else {
                    anyhow::bail!(
                        "line {line}: the log has no header line (written with \
                         --format=csv,noheader?): give its --query-gpu field list with \
                         --fields, e.g. --fields timestamp,index,uuid,utilization.gpu,memory.used"
                    );
                };
                let names: Vec<&str> = fields.split(',').collect();
                self.set_columns(&names, warnings)?;
            }
            if let Some(row) = self.parse_row(line, warnings) {
                return Ok(Some(row));
            }
        }
    }

    /// One data record as a sample; `None` (with a warning) when it cannot be one.
    fn parse_row(&mut self, line: u64, warnings: &mut Warnings) -> Option<GpuRow> {
        let fields = self.record.len();
        let wanted = self.columns.len();
        self.last_record_short = fields < wanted;
        if fields != wanted {
            let first =
                String::from_utf8_lossy(self.record.get(0).unwrap_or_default().trim_ascii())
                    .into_owned();
            if first.contains("Unable to determine the device handle")
                || first.contains("GPU is lost")
            {
                warnings.at_line(
                    line,
                    format_args!("nvidia-smi could not read a GPU: {first}"),
                );
                self.last_record_short = false;
                return self.lost_gpu_row(&first, line);
            }
            let what = if fields < wanted {
                "cut short"
            } else {
                "too long"
            };
            warnings.at_line(
                line,
                format_args!("row {what}: {fields} fields, the header has {wanted}; row skipped"),
            );
            return None;
        }
        let sample = self.rounds.staged();
        recycle(sample);
        let row = smi_row::read(
            &self.record,
            &self.columns,
            &mut self.timestamps,
            &mut self.host,
            sample,
            line,
            warnings,
        )?;
        if !row.has_identity && self.identity.is_some() {
            warnings.at_line(line, "the GPU's identity cell is empty; row skipped");
            return None;
        }
        let gpu = self.known.follow(self.identity, sample, line, warnings)?;
        Some(GpuRow {
            at: row.at,
            gpu,
            line,
            timed: true,
        })
    }

    /// A GPU nvidia-smi reported it could not reach: a sample with `up = false` for the GPU
    /// whose bus id the message names, in the current round.
    fn lost_gpu_row(&mut self, message: &str, line: u64) -> Option<GpuRow> {
        let at = self.rounds.last_round_at()?;
        let message = message.to_ascii_uppercase();
        let gpu = self.known.list.iter().position(|k| {
            let bus = bus_suffix(&k.pci_bus_id);
            !bus.is_empty() && message.contains(&format!(":{bus}"))
        })?;
        let known = &self.known.list[gpu];
        let sample = self.rounds.staged();
        recycle(sample);
        sample.uuid.clone_from(&known.uuid);
        sample.index = known.index;
        sample.pci_bus_id.clone_from(&known.pci_bus_id);
        sample.name.clear();
        sample.up = false;
        Some(GpuRow {
            at,
            gpu,
            line,
            timed: false,
        })
    }
}

/// nvidia-smi's UUIDs: `GPU-` (or `MIG-` for an instance) and hex groups. A cell of
/// anything else in the uuid column is a shifted or garbled row, not a new GPU.
fn looks_like_uuid(uuid: &str) -> bool {
    let rest = uuid
        .strip_prefix("GPU-")
        .or_else(|| uuid.strip_prefix("MIG-"));
    rest.is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-'))
}

/// `3B:00.0` of `00000000:3B:00.0`: the part of a bus id every spelling shares.
fn bus_suffix(bus: &str) -> String {
    let upper = bus.to_ascii_uppercase();
    match upper.split_once(':') {
        Some((_, rest)) if rest.contains(':') => rest.to_string(),
        _ => upper,
    }
}

/// A header (a row of field names, each with an optional ` [unit]`), at the top of the log
/// or where a restarted nvidia-smi appended a new one.
fn looks_like_header(record: &Cells) -> bool {
    // Data rows start with a timestamp or an index, headers with a letter: most rows stop here.
    let starts_with_letter = record
        .get(0)
        .and_then(|c| c.trim_ascii_start().first())
        .is_some_and(u8::is_ascii_alphabetic);
    if !starts_with_letter {
        return false;
    }
    let mut named = false;
    for cell in record.iter() {
        let Ok(cell) = std::str::from_utf8(cell) else {
            return false;
        };
        let (name, _) = split_header(cell);
        let identifier = name.as_bytes().first().is_some_and(u8::is_ascii_alphabetic)
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_');
        if !identifier {
            return false;
        }
        named |= name.contains(['.', '_']) || Field::lookup(name).is_some();
    }
    named
}

impl<R: Read> SmiCsvReader<R> {
    /// Files a row by the round rule; false when it went to the next round (carried).
    fn file_row(&mut self, row: GpuRow, warnings: &mut Warnings) -> bool {
        let describe = |row: &GpuRow| row.at.format("%Y-%m-%d %H:%M:%S%.3f");
        // A row that does not join stays staged, and the next row is read over it.
        match self.rounds.judge(row.at, row.gpu, row.timed) {
            Verdict::Duplicate { of_line } => {
                warnings.at_line(
                    row.line,
                    format_args!(
                        "duplicate of line {of_line} ({} at {}); row skipped",
                        self.rounds.staged().uuid,
                        describe(&row)
                    ),
                );
                self.stats.duplicates += 1;
            }
            Verdict::Stale { of_line, last } => {
                warnings.at_line(
                    row.line,
                    format_args!(
                        "timestamp {} is before {}'s row at {} on line {of_line} (out of \
                         order); row skipped",
                        describe(&row),
                        self.rounds.staged().uuid,
                        last.format("%Y-%m-%d %H:%M:%S%.3f")
                    ),
                );
            }
            Verdict::OutOfOrder { round } => {
                warnings.at_line(
                    row.line,
                    format_args!(
                        "timestamp {} is before the round at {} (out of order); row skipped",
                        describe(&row),
                        round.format("%Y-%m-%d %H:%M:%S%.3f")
                    ),
                );
            }
            Verdict::NextRound => {
                self.carry = Some(row);
                return false;
            }
            Verdict::Join => self.join(row),
        }
        true
    }

    /// Adds a row (the staged sample) to the current round, its values range-checked first.
    fn join(&mut self, row: GpuRow) {
        // Counted into the reader's own, empty but where a row had values cleared.
        self.rounds.staged().sanitize_into(&mut self.rejected);
        if self.rejected.total() > 0 {
            self.stats.rejected.note(&self.rejected, row.line);
            self.rejected = RejectedValues::default();
        }
        self.stats.samples += 1;
        self.rounds.join(row.at, row.gpu, row.line, row.timed);
    }

    /// At the end of the log: warns about a last row without its newline, and settles a
    /// last round cut short. False when nothing is left to hand out.
    fn finish(&mut self, warnings: &mut Warnings) -> bool {
        if std::mem::replace(&mut self.ended, true) {
            return false;
        }
        let tail_cut = self.records.ends_mid_line();
        if tail_cut && !self.last_record_short {
            let line = self.record.line();
            warnings.at_line(
                line,
                "the log ends inside this row (no newline after it): its last value may be cut short",
            );
        }
        if self.rounds.is_empty() {
            return false;
        }
        let Some(Cut { present, expected }) = self.rounds.cut_short() else {
            return true;
        };
        let at = self.rounds.current.at.format("%Y-%m-%d %H:%M:%S%.3f");
        if self.rounds.samples().iter().all(|g| g.up) {
            let dropped = self.rounds.discard();
            self.stats.samples = self.stats.samples.saturating_sub(dropped as u64);
            warnings.general(format_args!(
                "the log ends part-way through the round at {at} ({present} of {expected} \
                 GPUs written): that round is left out, and no GPU is judged on it"
            ));
            return false;
        }
        self.stats.partial_last_round = true;
        warnings.general(format_args!(
            "the log ends part-way through the round at {at} ({present} of {expected} GPUs \
             written): kept for the GPU(s) that stopped answering in it; the others are not \
             judged on it"
        ));
        true
    }
}

impl<R: Read + Send> SnapshotReader for SmiCsvReader<R> {
    fn next_into(&mut self, into: &mut Snapshot, warnings: &mut Warnings) -> anyhow::Result<bool> {
        // The samples of the snapshot being refilled are reused ([`Rounds::take`] made them
        // the spares of this round): the k-th row of this round is read into the k-th sample
        // of an earlier one, usually the same GPU, whose identity strings then need no copy.
        if let Some(row) = self.carry.take() {
            self.join(row);
        }
        loop {
            let row = match self.ended {
                true => None,
                false => self.next_row(warnings)?,
            };
            let Some(row) = row else {
                if !self.finish(warnings) {
                    return Ok(false);
                }
                break;
            };
            if !self.file_row(row, warnings) {
                break;
            }
        }
        self.rounds.current.host.clone_from(&self.host);
        self.rounds.take(into);
        Ok(true)
    }

    fn stats(&self) -> ReadStats {
        self.stats
    }
}

#[cfg(test)]
mod tests;
