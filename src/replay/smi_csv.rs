//! Reading `nvidia-smi --query-gpu=FIELDS --format=csv[,noheader][,nounits] -l N` logs.
//!
//! nvidia-smi writes one row per GPU per polling round, the GPUs of a round one after the
//! other (milliseconds apart), every round in the same GPU order. A round becomes one
//! [`Snapshot`]: a new one starts when a GPU already in the current round appears again.
//! Any subset and order of fields works; fields the model has no place for are ignored
//! with one warning that names them (see [`super::smi_fields`] for the mapping).
//!
//! The reader is built for long logs: the `csv` crate's [`ByteRecord`] is reused for every
//! row, GPU samples are recycled between rounds, and cells are read as bytes, so a row
//! costs no allocation once the first rounds have warmed the buffers.

use std::io::Read;
use std::time::Duration;

use chrono::{DateTime, FixedOffset, Utc};
use csv::ByteRecord;

use super::smi_fields::{Field, TimestampParser, split_header};
use super::smi_row::{self, Column, recycle};
use super::{ReadStats, SnapshotReader, Warnings};
use crate::model::{GpuSample, HostInfo, Snapshot};

/// How to read a log.
#[derive(Debug, Clone)]
pub struct SmiCsvOptions {
    /// The `--query-gpu` list of a log written with `noheader`, comma-separated.
    pub fields: Option<String>,
    /// The zone of the log's timestamps (nvidia-smi writes local time without a zone).
    pub timezone: FixedOffset,
}

/// Rows of one round may be stamped a little apart, in either direction; a row earlier
/// than its round by more than this is out of order.
const ROUND_JITTER: Duration = Duration::from_secs(1);

/// Distinct GPUs one log may name. Hosts have at most a few dozen; a log naming more is
/// garbled, and following every garbled name would grow memory with the file's length.
const MAX_GPUS: usize = 1024;

/// A GPU seen in the log: to notice a GPU changing index, and to recognise the one named
/// in an "Unable to determine the device handle" line by its bus id.
#[derive(Debug, Clone)]
struct KnownGpu {
    uuid: String,
    index: u32,
    pci_bus_id: String,
}

/// Remembers the last byte the CSV parser read, to tell a log cut mid-line from one that
/// ends with its newline.
struct TailWatch<R> {
    inner: R,
    last: Option<u8>,
}

impl<R: Read> Read for TailWatch<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n > 0 {
            self.last = Some(buf[n - 1]);
        }
        Ok(n)
    }
}

/// Streams snapshots out of an nvidia-smi CSV log.
pub struct SmiCsvReader<R: Read> {
    csv: csv::Reader<TailWatch<R>>,
    record: ByteRecord,
    options: SmiCsvOptions,
    columns: Vec<Column>,
    /// The column that tells GPUs apart: uuid, else bus id, else index.
    identity: Option<Field>,
    timestamps: TimestampParser,
    host: HostInfo,
    /// The round being filled.
    current: Snapshot,
    /// Samples to reuse, so that their strings keep their capacity.
    pool: Vec<GpuSample>,
    /// The first row of the next round, read while finding the end of the current one.
    carry: Option<(DateTime<Utc>, GpuSample)>,
    known: Vec<KnownGpu>,
    last_round_at: Option<DateTime<Utc>>,
    /// The last record was too short to be a row (a line cut off).
    last_record_short: bool,
    stats: ReadStats,
}

impl<R: Read> SmiCsvReader<R> {
    pub fn new(reader: R, options: SmiCsvOptions) -> SmiCsvReader<R> {
        let csv = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            // No `Trim::All`: it rebuilds every record. Only the cells replay reads are
            // trimmed, in `fill`.
            .comment(Some(b'#'))
            .from_reader(TailWatch {
                inner: reader,
                last: None,
            });
        SmiCsvReader {
            csv,
            record: ByteRecord::new(),
            timestamps: TimestampParser::new(options.timezone),
            options,
            columns: Vec::new(),
            identity: None,
            host: HostInfo::default(),
            current: Snapshot::default(),
            pool: Vec::new(),
            carry: None,
            known: Vec::new(),
            last_round_at: None,
            last_record_short: false,
            stats: ReadStats::default(),
        }
    }

    /// Maps columns from a header record (or the `--fields` list).
    fn set_columns(&mut self, names: &[&str], warnings: &mut Warnings) -> anyhow::Result<()> {
        let columns: Vec<Column> = names
            .iter()
            .map(|cell| {
                let (name, unit) = split_header(cell);
                Column {
                    name: name.to_string(),
                    field: Field::lookup(name),
                    unit,
                }
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
        match self.csv.read_byte_record(&mut self.record) {
            Ok(more) => Ok(more),
            Err(e) => match e.kind() {
                csv::ErrorKind::Io(_) => Err(anyhow::anyhow!("cannot read the log: {e}")),
                // Not expected with flexible records; treat as an unreadable line.
                _ => Ok(true),
            },
        }
    }

    /// The next GPU row with its timestamp; `None` at the end of the file.
    fn next_row(
        &mut self,
        warnings: &mut Warnings,
    ) -> anyhow::Result<Option<(DateTime<Utc>, GpuSample)>> {
        loop {
            if !self.read_record()? {
                return Ok(None);
            }
            let line = self.record.position().map_or(0, |p| p.line());
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
    fn parse_row(
        &mut self,
        line: u64,
        warnings: &mut Warnings,
    ) -> Option<(DateTime<Utc>, GpuSample)> {
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
                return self.lost_gpu_row(&first);
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
        let mut sample = self.pool.pop().unwrap_or_default();
        recycle(&mut sample);
        let row = smi_row::read(
            &self.record,
            &self.columns,
            &mut self.timestamps,
            &mut self.host,
            &mut sample,
            line,
            warnings,
        );
        let Some(row) = row else {
            self.pool.push(sample);
            return None;
        };
        if !row.has_identity && self.identity.is_some() {
            warnings.at_line(line, "the GPU's identity cell is empty; row skipped");
            self.pool.push(sample);
            return None;
        }
        if !self.follow_identity(&mut sample, line, warnings) {
            self.pool.push(sample);
            return None;
        }
        Some((row.at, sample))
    }

    /// Fills in a UUID when the log has none, and warns when a GPU changes index. False
    /// (with a warning) when the row's GPU cannot be believed: a UUID that is not one, or
    /// one GPU more than a host can have.
    fn follow_identity(
        &mut self,
        sample: &mut GpuSample,
        line: u64,
        warnings: &mut Warnings,
    ) -> bool {
        use std::fmt::Write as _;
        match self.identity {
            Some(Field::Uuid) => {
                if !looks_like_uuid(&sample.uuid) {
                    warnings.at_line(
                        line,
                        format_args!("uuid {:?} is not a GPU UUID; row skipped", sample.uuid),
                    );
                    return false;
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
        let count = self.known.len();
        match self.known.iter_mut().find(|k| k.uuid == sample.uuid) {
            Some(known) => {
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
                return false;
            }
            None => self.known.push(KnownGpu {
                uuid: sample.uuid.clone(),
                index: sample.index,
                pci_bus_id: sample.pci_bus_id.clone(),
            }),
        }
        true
    }

    /// A GPU nvidia-smi reported it could not reach: a sample with `up = false` for the GPU
    /// whose bus id the message names, in the current round.
    fn lost_gpu_row(&mut self, message: &str) -> Option<(DateTime<Utc>, GpuSample)> {
        let at = self.last_round_at?;
        let message = message.to_ascii_uppercase();
        let known = self.known.iter().find(|k| {
            let bus = bus_suffix(&k.pci_bus_id);
            !bus.is_empty() && message.contains(&format!(":{bus}"))
        })?;
        let mut sample = self.pool.pop().unwrap_or_default();
        recycle(&mut sample);
        sample.uuid.clone_from(&known.uuid);
        sample.index = known.index;
        sample.pci_bus_id.clone_from(&known.pci_bus_id);
        sample.name.clear();
        sample.up = false;
        Some((at, sample))
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
fn looks_like_header(record: &ByteRecord) -> bool {
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

impl<R: Read + Send> SnapshotReader for SmiCsvReader<R> {
    fn next_into(&mut self, into: &mut Snapshot, warnings: &mut Warnings) -> anyhow::Result<bool> {
        // The samples of the snapshot being refilled are reused. Reversed, so that `pop`
        // hands the k-th row of this round the k-th sample of that one: usually the same
        // GPU, whose identity strings then need no copy.
        self.pool.extend(into.gpus.drain(..).rev());
        if let Some((at, sample)) = self.carry.take() {
            self.current.at = at;
            self.last_round_at = Some(at);
            self.current.gpus.push(sample);
            self.stats.samples += 1;
        }
        loop {
            let Some((at, sample)) = self.next_row(warnings)? else {
                let tail_cut = self.csv.get_ref().last.is_some_and(|b| b != b'\n');
                self.stats.truncated_tail = self.last_record_short || tail_cut;
                if self.current.gpus.is_empty() {
                    return Ok(false);
                }
                break;
            };
            let line = self.record.position().map_or(0, |p| p.line());
            let repeats = self.current.gpus.iter().any(|g| g.uuid == sample.uuid);
            let starts_round = self.current.gpus.is_empty() || repeats;
            // A row that starts a round must not be older than the last round; one that
            // joins the current round may be stamped a little before it.
            let (reference, floor) = if starts_round {
                (self.last_round_at, self.last_round_at)
            } else {
                let jitter = chrono::TimeDelta::from_std(ROUND_JITTER).unwrap_or_default();
                let round = self.current.at;
                (Some(round), round.checked_sub_signed(jitter))
            };
            let out_of_order = match (reference, floor) {
                (Some(reference), Some(floor)) if at < floor => Some(reference),
                _ => None,
            };
            if let Some(reference) = out_of_order {
                warnings.at_line(
                    line,
                    format_args!(
                        "timestamp {} is before the round at {} (out of order); row skipped",
                        at.format("%Y-%m-%d %H:%M:%S%.3f"),
                        reference.format("%Y-%m-%d %H:%M:%S%.3f")
                    ),
                );
                self.pool.push(sample);
                continue;
            }
            if repeats {
                self.carry = Some((at, sample));
                break;
            }
            if self.current.gpus.is_empty() {
                self.current.at = at;
                self.last_round_at = Some(at);
            }
            self.current.gpus.push(sample);
            self.stats.samples += 1;
        }
        self.current.host.clone_from(&self.host);
        std::mem::swap(&mut self.current, into);
        // `current` now holds `into`'s old content, emptied of samples above.
        self.current.processes.clear();
        self.current.events.clear();
        Ok(true)
    }

    fn stats(&self) -> ReadStats {
        self.stats
    }
}

#[cfg(test)]
#[path = "smi_csv_tests.rs"]
mod tests;
