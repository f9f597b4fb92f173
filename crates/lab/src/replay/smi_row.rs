//! One nvidia-smi CSV row into one [`GpuSample`].
//!
//! Every mapped cell is read as bytes into the sample; values that several columns can give
//! (`power.draw` or its average; the hex mask or one column per clock-event reason; the
//! retired-page and remapped-row families) are gathered first and settled once the row is
//! read. A cell that is not a value of its field leaves the value empty and is warned about
//! with its line; the row itself is kept. A row that says the GPU is lost (`[GPU is lost]`,
//! `[GPU requires reset]`), or whose every value cell reads `[Unknown Error]` (nvidia-smi keeps
//! the identity of a GPU that fell off the bus), is a sample with `up = false`.

use chrono::{DateTime, Utc};

use super::Warnings;
use super::smi_fields::{
    Cell, ClockKind, Field, TimestampParser, Unit, bare_unit, bitmask, flag, placeholder, pstate,
    quantity_in, text,
};
use super::smi_lines::Cells;
use crate::model::{ClockEvents, GpuSample, HostInfo, RemappedRows, RetiredPages};

/// One column of the log, and what reading its cells needs to know of it, worked out once.
#[derive(Debug, Clone)]
pub struct Column {
    pub name: String,
    pub field: Option<Field>,
    /// The unit of a number without one ([`bare_unit`] of the header's).
    bare: Unit,
    /// A reading of the GPU ([`is_value_field`]).
    value_field: bool,
    /// The unit the field's number is read in, for a field that is a number.
    want: Option<Unit>,
}

impl Column {
    /// The column `name` with the unit its header gave (`Unit::None` where none).
    pub fn new(name: &str, unit: Unit) -> Column {
        let field = Field::lookup(name);
        Column {
            name: name.to_string(),
            field,
            bare: field.map_or(unit, |f| bare_unit(unit, f)),
            value_field: field.is_some_and(is_value_field),
            want: field.and_then(number_unit),
        }
    }
}

/// The unit a field's number is read in (the model's base unit for it); `None` for a field
/// that is not a number.
fn number_unit(field: Field) -> Option<Unit> {
    use Field::*;
    match field {
        PowerDraw | PowerDrawAverage | PowerDrawInstant | PowerLimit | EnforcedPowerLimit => {
            Some(Unit::Watt)
        }
        Clock(_) | ClockMax(_) => Some(Unit::Mhz),
        Index
        | UtilGpu
        | UtilMemory
        | UtilEncoder
        | UtilDecoder
        | FanSpeed
        | MemTotal
        | MemUsed
        | MemFree
        | MemReserved
        | TempGpu
        | TempMemory
        | EccCorrectedVolatile
        | EccCorrectedAggregate
        | EccUncorrectedVolatile
        | EccUncorrectedAggregate
        | RetiredSbe
        | RetiredDbe
        | RemapCorrectable
        | RemapUncorrectable
        | PcieGen
        | PcieGenGpu
        | PcieWidth
        | PcieGenMax
        | PcieWidthMax => Some(Unit::None),
        Timestamp | Uuid | Name | PciBusId | Serial | DriverVersion | Hostname | MigMode
        | Pstate | EventsActive | EventBit(_) | RetiredPending | RemapPending | RemapFailure => {
            None
        }
    }
}

/// Counts and byte sizes above this are not believed (the model's bound for counters:
/// [`crate::model::sanitize::LARGEST_COUNT`]); a cell beyond it is not read at all.
const LARGEST_COUNT: f64 = crate::model::sanitize::LARGEST_COUNT as f64;

/// A whole, non-negative, believable number. In `0.0..=LARGEST_COUNT` (2^53) the whole
/// part as an integer is exact and so is it back as an f64: equal to `v` exactly when
/// `v.fract()` is 0, without the call `fract` (`trunc`) is on a baseline x86-64 target.
fn whole(v: f64) -> Option<u64> {
    let believable = (0.0..=LARGEST_COUNT).contains(&v);
    // Not negative there: the integer is the same as `v as u64`, without that conversion.
    let whole = v as i64;
    (believable && whole as f64 == v).then_some(whole as u64)
}

/// A byte size: believable and non-negative (MiB with decimals round to whole bytes).
fn bytes(v: f64) -> Option<u64> {
    (0.0..=LARGEST_COUNT).contains(&v).then(|| rounded(v))
}

/// `v.round() as u64` for `v` in `0.0..=LARGEST_COUNT`: the whole part, and one more where
/// what is left is a half or more (half away from zero, as `round`; both exact there),
/// without the call `round` is on a baseline x86-64 target.
fn rounded(v: f64) -> u64 {
    let whole = v as i64;
    (whole + i64::from(v - whole as f64 >= 0.5)) as u64
}

/// [`small`] of `v.round()`.
fn small_rounded(v: f64) -> Option<u32> {
    match (0.0..=LARGEST_COUNT).contains(&v) {
        true => u32::try_from(rounded(v)).ok(),
        false => small(v.round()),
    }
}

fn small(v: f64) -> Option<u32> {
    whole(v).and_then(|v| u32::try_from(v).ok())
}

/// Per-row values gathered from several columns, settled once the row is read.
#[derive(Debug, Default)]
struct Gathered {
    power_draw: Option<f64>,
    power_average: Option<f64>,
    power_instant: Option<f64>,
    power_limit: Option<f64>,
    enforced_limit: Option<f64>,
    gen_current: Option<u32>,
    gen_gpu: Option<u32>,
    mask: Option<u64>,
    bits: Option<u64>,
    retired: [Option<u64>; 2],
    retired_pending: Option<bool>,
    remap: [Option<u64>; 2],
    remap_pending: Option<bool>,
    remap_failure: Option<bool>,
    /// Which of uuid, name and bus id the row gave (the others are cleared).
    texts: [bool; 3],
}

/// What reading the cells of one row noticed besides values.
#[derive(Debug, Default)]
struct Flags {
    /// A cell said the GPU is lost or needs a reset.
    lost: bool,
    /// This cell is not a value of its field.
    invalid: bool,
}

impl Flags {
    fn take<T>(&mut self, cell: Cell<T>) -> Option<T> {
        match cell {
            Cell::Value(v) => Some(v),
            Cell::Absent => None,
            Cell::Lost => {
                self.lost = true;
                None
            }
            Cell::Invalid => {
                self.invalid = true;
                None
            }
        }
    }
}

/// What a row was, besides its sample.
#[derive(Debug, Clone, Copy)]
pub struct Row {
    pub at: DateTime<Utc>,
    /// The row named its GPU (uuid, bus id or index cell not empty).
    pub(crate) has_identity: bool,
}

/// Clears a sample for reuse. Its identity strings are kept (and their capacity): the row
/// overwrites them where they differ, and [`read`] clears those the row did not give.
pub fn recycle(sample: &mut GpuSample) {
    let uuid = std::mem::take(&mut sample.uuid);
    let name = std::mem::take(&mut sample.name);
    let bus = std::mem::take(&mut sample.pci_bus_id);
    *sample = GpuSample {
        uuid,
        name,
        pci_bus_id: bus,
        up: true,
        ..GpuSample::default()
    };
}

/// Sets `target` to the cell's text unless it already holds it (the common case: the same
/// GPU's identity, round after round). False when the cell is not UTF-8.
fn set_text(target: &mut String, cell: &[u8]) -> bool {
    if crate::text::same(&target, cell) {
        return true;
    }
    let Ok(value) = std::str::from_utf8(cell) else {
        return false;
    };
    target.clear();
    target.push_str(value);
    true
}

fn set_opt_text(target: &mut Option<String>, value: &str) {
    match target {
        Some(t) if crate::text::same(&t, value) => {}
        _ => *target = Some(value.to_string()),
    }
}

/// Reads a record into a recycled `sample`, and the host-wide cells into `host`. `None`
/// (with a warning) when the row has no usable timestamp.
pub fn read(
    record: &Cells,
    columns: &[Column],
    timestamps: &mut TimestampParser,
    host: &mut HostInfo,
    sample: &mut GpuSample,
    line: u64,
    warnings: &mut Warnings,
) -> Option<Row> {
    let mut at = None;
    let mut has_identity = false;
    let mut got = Gathered::default();
    let mut lost = false;
    let mut value_cells = 0usize;
    let mut unreadable_cells = 0usize;
    for (column, cell) in columns.iter().zip(record.iter()) {
        let Some(field) = column.field else {
            continue;
        };
        // nvidia-smi separates cells with ", ".
        let cell = trimmed(cell);
        let value_field = column.value_field;
        value_cells += usize::from(value_field);
        // A placeholder gives no value to any field but the timestamp (whose absence skips
        // the row, below): the recycled sample and `got` already hold none, and an identity
        // cell not given is cleared when the row is settled. So it is classified once here,
        // and the cells past this point hold something to read.
        if field != Field::Timestamp
            && let Some(absent) = placeholder::<()>(cell)
        {
            let gone = matches!(absent, Cell::Lost);
            lost |= gone;
            if value_field {
                unreadable_cells += usize::from(gone || unknown_error(cell));
            }
            continue;
        }
        let mut flags = Flags::default();
        // Read here, the one place a number is read (the field's own unit is the column's),
        // and taken by the field's arm below.
        let number = match column.want {
            Some(want) => quantity_in(cell, column.bare, want),
            None => Cell::Absent,
        };
        match field {
            Field::Timestamp => match timestamps.parse(cell) {
                Some(t) => at = Some(t),
                None => {
                    warnings.at_line(
                        line,
                        format_args!(
                            "cannot read timestamp {:?}; row skipped",
                            String::from_utf8_lossy(cell)
                        ),
                    );
                    return None;
                }
            },
            Field::Uuid | Field::Name | Field::PciBusId => match placeholder::<()>(cell) {
                None => {
                    let (target, slot) = match field {
                        Field::Uuid => (&mut sample.uuid, 0),
                        Field::Name => (&mut sample.name, 1),
                        _ => (&mut sample.pci_bus_id, 2),
                    };
                    if set_text(target, cell) {
                        got.texts[slot] = true;
                        has_identity |= slot != 1;
                    } else {
                        flags.invalid = true;
                    }
                }
                Some(other) => {
                    flags.take(other);
                }
            },
            Field::Serial => {
                if let Some(t) = flags.take(text(cell)) {
                    set_opt_text(&mut sample.serial, t);
                }
            }
            Field::DriverVersion => {
                if let Cell::Value(t) = text(cell) {
                    set_opt_text(&mut host.driver_version, t);
                }
            }
            Field::Hostname => {
                if let Cell::Value(t) = text(cell) {
                    set_text(&mut host.hostname, t.as_bytes());
                }
            }
            Field::Index => {
                if let Some(i) = flags.take(number.and_then(small)) {
                    sample.index = i;
                    has_identity = true;
                }
            }
            Field::MigMode => sample.mig_enabled = flags.take(flag(cell)),
            Field::UtilGpu => sample.utilization.gpu = flags.take(number),
            Field::UtilMemory => sample.utilization.memory_copy = flags.take(number),
            Field::UtilEncoder => sample.utilization.encoder = flags.take(number),
            Field::UtilDecoder => sample.utilization.decoder = flags.take(number),
            Field::FanSpeed => sample.fan_speed_ratio = flags.take(number),
            Field::MemTotal | Field::MemUsed | Field::MemFree | Field::MemReserved => {
                let value = flags.take(number.and_then(bytes));
                let memory = &mut sample.memory;
                match field {
                    Field::MemTotal => memory.total_bytes = value,
                    Field::MemUsed => memory.used_bytes = value,
                    Field::MemFree => memory.free_bytes = value,
                    _ => memory.reserved_bytes = value,
                }
            }
            Field::TempGpu => sample.temperature_celsius = flags.take(number),
            Field::TempMemory => sample.memory_temperature_celsius = flags.take(number),
            Field::PowerDraw => got.power_draw = flags.take(number),
            Field::PowerDrawAverage => got.power_average = flags.take(number),
            Field::PowerDrawInstant => got.power_instant = flags.take(number),
            Field::PowerLimit => got.power_limit = flags.take(number),
            Field::EnforcedPowerLimit => got.enforced_limit = flags.take(number),
            Field::Clock(kind) | Field::ClockMax(kind) => {
                let mhz = flags.take(number.and_then(small_rounded));
                let clocks = if matches!(field, Field::Clock(_)) {
                    &mut sample.clocks
                } else {
                    &mut sample.clocks_max
                };
                match kind {
                    ClockKind::Sm => clocks.sm = mhz,
                    ClockKind::Memory => clocks.memory = mhz,
                    ClockKind::Graphics => clocks.graphics = mhz,
                    ClockKind::Video => clocks.video = mhz,
                }
            }
            Field::Pstate => sample.performance_state = flags.take(pstate(cell)),
            Field::EventsActive => got.mask = flags.take(bitmask(cell)),
            Field::EventBit(bit) => {
                if let Some(on) = flags.take(flag(cell)) {
                    let bits = got.bits.get_or_insert(0);
                    if on {
                        *bits |= bit;
                    }
                }
            }
            Field::EccCorrectedVolatile
            | Field::EccCorrectedAggregate
            | Field::EccUncorrectedVolatile
            | Field::EccUncorrectedAggregate => {
                let count = flags.take(number.and_then(whole));
                let ecc = &mut sample.ecc;
                match field {
                    Field::EccCorrectedVolatile => ecc.corrected_volatile = count,
                    Field::EccCorrectedAggregate => ecc.corrected_aggregate = count,
                    Field::EccUncorrectedVolatile => ecc.uncorrected_volatile = count,
                    _ => ecc.uncorrected_aggregate = count,
                }
            }
            Field::RetiredSbe => got.retired[0] = flags.take(number.and_then(whole)),
            Field::RetiredDbe => got.retired[1] = flags.take(number.and_then(whole)),
            Field::RetiredPending => got.retired_pending = flags.take(flag(cell)),
            Field::RemapCorrectable => got.remap[0] = flags.take(number.and_then(whole)),
            Field::RemapUncorrectable => got.remap[1] = flags.take(number.and_then(whole)),
            Field::RemapPending => got.remap_pending = flags.take(flag(cell)),
            Field::RemapFailure => got.remap_failure = flags.take(flag(cell)),
            Field::PcieGen => got.gen_current = flags.take(number.and_then(small)),
            Field::PcieGenGpu => got.gen_gpu = flags.take(number.and_then(small)),
            Field::PcieWidth => sample.pcie.link_width = flags.take(number.and_then(small)),
            Field::PcieGenMax => {
                sample.pcie.link_generation_max = flags.take(number.and_then(small))
            }
            Field::PcieWidthMax => sample.pcie.link_width_max = flags.take(number.and_then(small)),
        }
        lost |= flags.lost;
        if flags.invalid {
            warnings.at_line(
                line,
                format_args!(
                    "{}: cannot read {:?}; left empty",
                    column.name,
                    String::from_utf8_lossy(cell)
                ),
            );
        }
    }
    // A GPU that fell off the bus keeps the identity nvidia-smi cached, but every value it
    // is asked for reads `[Unknown Error]` (or `[GPU is lost]`): that row is a lost GPU,
    // not an answering one with no values. One `[N/A]` or value among them says it answers.
    lost |= value_cells > 0 && unreadable_cells == value_cells;
    settle(sample, &got, lost);
    Some(Row {
        at: at?,
        has_identity,
    })
}

/// `cell.trim_ascii()`, looking at no more than its ends where they are not whitespace:
/// nvidia-smi writes one space after each comma and none at a cell's end. ASCII
/// whitespace is at or below the space character, so a byte above it is none.
fn trimmed(cell: &[u8]) -> &[u8] {
    let cell = match cell {
        [b' ', rest @ ..] => rest,
        _ => cell,
    };
    match (cell.first(), cell.last()) {
        (Some(&a), Some(&b)) if a > b' ' && b > b' ' => cell,
        _ => cell.trim_ascii(),
    }
}

/// Whether a field is a reading of the GPU, not its identity, the time or a host-wide cell:
/// the cells that tell a GPU that answers from one nvidia-smi could not read.
fn is_value_field(field: Field) -> bool {
    !matches!(
        field,
        Field::Timestamp
            | Field::Uuid
            | Field::Name
            | Field::PciBusId
            | Field::Index
            | Field::Serial
            | Field::DriverVersion
            | Field::Hostname
    )
}

/// `[Unknown Error]`: nvidia-smi could not read this value from the GPU (unlike `[N/A]` or
/// `[Not Supported]`, which it read as absent). With `[GPU is lost]` and `[GPU requires
/// reset]` (a lost [`placeholder`]), the cells that tell a GPU that fell off the bus.
fn unknown_error(cell: &[u8]) -> bool {
    cell.eq_ignore_ascii_case(b"[Unknown Error]")
}

/// Values given by more than one column, settled once the row is read.
fn settle(sample: &mut GpuSample, got: &Gathered, lost: bool) {
    for (given, text) in
        got.texts
            .iter()
            .zip([&mut sample.uuid, &mut sample.name, &mut sample.pci_bus_id])
    {
        if !given {
            text.clear();
        }
    }
    sample.power_watts = got.power_draw.or(got.power_average).or(got.power_instant);
    // The enforced limit is the one the GPU obeys; the requested one may be above it.
    sample.power_limit_watts = got.enforced_limit.or(got.power_limit);
    sample.pcie.link_generation = got.gen_current.or(got.gen_gpu);
    if got.mask.is_some() || got.bits.is_some() {
        sample.clock_events = Some(ClockEvents(got.mask.unwrap_or(0) | got.bits.unwrap_or(0)));
    }
    if got.retired.iter().any(Option::is_some) || got.retired_pending.is_some() {
        sample.retired_pages = Some(RetiredPages {
            sbe: got.retired[0].unwrap_or(0),
            dbe: got.retired[1].unwrap_or(0),
            pending: got.retired_pending.unwrap_or(false),
        });
    }
    if got.remap.iter().any(Option::is_some)
        || got.remap_pending.is_some()
        || got.remap_failure.is_some()
    {
        sample.remapped_rows = Some(RemappedRows {
            correctable: got.remap[0].unwrap_or(0),
            uncorrectable: got.remap[1].unwrap_or(0),
            pending: got.remap_pending.unwrap_or(false),
            failure: got.remap_failure.unwrap_or(false),
        });
    }
    if lost {
        sample.up = false;
    }
}

#[cfg(test)]
mod tests;
