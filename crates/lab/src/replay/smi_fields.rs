//! nvidia-smi's `--query-gpu` fields and cells: which field maps to what in the model, and
//! how a cell is read.
//!
//! nvidia-smi writes numbers with their unit (`81559 MiB`, `69.85 W`, `100.00 %`) unless
//! `nounits` is given, in which case the unit is only in the header (`memory.used [MiB]`);
//! without a header either, each field's usual unit is assumed. Values it cannot give are
//! bracketed (`[N/A]`, `[Not Supported]`, `[Requested functionality has been deprecated]`,
//! `[Unknown Error]`) or a bare `N/A`: they are absent values, not errors (a row whose every
//! value reads `[Unknown Error]` is a GPU nvidia-smi could not reach: see [`super::smi_row`]).

use crate::model::ClockEvents;

mod timestamp;
pub(crate) use timestamp::TimestampParser;
pub use timestamp::parse_offset;

/// Which clock a clock column reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockKind {
    Sm,
    Memory,
    Graphics,
    Video,
}

/// A `--query-gpu` field the model has a place for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Timestamp,
    Index,
    Uuid,
    Name,
    PciBusId,
    Serial,
    DriverVersion,
    Hostname,
    MigMode,
    UtilGpu,
    UtilMemory,
    UtilEncoder,
    UtilDecoder,
    MemTotal,
    MemUsed,
    MemFree,
    MemReserved,
    TempGpu,
    TempMemory,
    PowerDraw,
    PowerDrawAverage,
    PowerDrawInstant,
    PowerLimit,
    EnforcedPowerLimit,
    Clock(ClockKind),
    ClockMax(ClockKind),
    FanSpeed,
    Pstate,
    /// `clocks_event_reasons.active`: the whole bitmask, in hex.
    EventsActive,
    /// One `clocks_event_reasons.*` column: `Active` / `Not Active`.
    EventBit(u64),
    EccCorrectedVolatile,
    EccCorrectedAggregate,
    EccUncorrectedVolatile,
    EccUncorrectedAggregate,
    RetiredSbe,
    RetiredDbe,
    RetiredPending,
    RemapCorrectable,
    RemapUncorrectable,
    RemapPending,
    RemapFailure,
    PcieGen,
    PcieGenGpu,
    PcieWidth,
    PcieGenMax,
    PcieWidthMax,
}

/// The clock-event reason columns, under either prefix nvidia-smi has used.
const EVENT_REASONS: [(&str, u64); 9] = [
    ("gpu_idle", ClockEvents::GPU_IDLE),
    (
        "applications_clocks_setting",
        ClockEvents::APPLICATIONS_CLOCKS_SETTING,
    ),
    ("sw_power_cap", ClockEvents::SW_POWER_CAP),
    ("hw_slowdown", ClockEvents::HW_SLOWDOWN),
    ("sync_boost", ClockEvents::SYNC_BOOST),
    ("sw_thermal_slowdown", ClockEvents::SW_THERMAL_SLOWDOWN),
    ("hw_thermal_slowdown", ClockEvents::HW_THERMAL_SLOWDOWN),
    (
        "hw_power_brake_slowdown",
        ClockEvents::HW_POWER_BRAKE_SLOWDOWN,
    ),
    ("display_clock_setting", ClockEvents::DISPLAY_CLOCK_SETTING),
];

impl Field {
    /// The field a header name stands for, under any of the names `nvidia-smi
    /// --help-query-gpu` lists for it (older names included).
    pub fn lookup(name: &str) -> Option<Field> {
        use ClockKind::*;
        use Field::*;
        let field = match name {
            "timestamp" => Timestamp,
            "index" => Index,
            "uuid" | "gpu_uuid" => Uuid,
            "name" | "gpu_name" => Name,
            "pci.bus_id" | "gpu_bus_id" => PciBusId,
            "serial" | "gpu_serial" => Serial,
            // Drivers from 610 on deprecate driver_version in favour of kmd_version.
            "driver_version" | "kmd_version" => DriverVersion,
            "hostname" => Hostname,
            "mig.mode.current" => MigMode,
            "utilization.gpu" => UtilGpu,
            "utilization.memory" => UtilMemory,
            "utilization.encoder" => UtilEncoder,
            "utilization.decoder" => UtilDecoder,
            "memory.total" => MemTotal,
            "memory.used" => MemUsed,
            "memory.free" => MemFree,
            "memory.reserved" => MemReserved,
            "temperature.gpu" => TempGpu,
            "temperature.memory" => TempMemory,
            "power.draw" => PowerDraw,
            "power.draw.average" | "gpu.power.draw.average" => PowerDrawAverage,
            "power.draw.instant" | "gpu.power.draw.instant" => PowerDrawInstant,
            "power.limit" | "gpu.power.requested_limit" => PowerLimit,
            "enforced.power.limit" | "gpu.power.current_limit" => EnforcedPowerLimit,
            "clocks.current.sm" | "clocks.sm" => Clock(Sm),
            "clocks.current.memory" | "clocks.mem" => Clock(Memory),
            "clocks.current.graphics" | "clocks.gr" => Clock(Graphics),
            "clocks.current.video" | "clocks.video" => Clock(Video),
            "clocks.max.sm" => ClockMax(Sm),
            "clocks.max.memory" | "clocks.max.mem" => ClockMax(Memory),
            "clocks.max.graphics" | "clocks.max.gr" => ClockMax(Graphics),
            "clocks.max.video" => ClockMax(Video),
            "fan.speed" => FanSpeed,
            "pstate" => Pstate,
            "ecc.errors.corrected.volatile.total" => EccCorrectedVolatile,
            "ecc.errors.corrected.aggregate.total" => EccCorrectedAggregate,
            "ecc.errors.uncorrected.volatile.total" => EccUncorrectedVolatile,
            "ecc.errors.uncorrected.aggregate.total" => EccUncorrectedAggregate,
            "retired_pages.single_bit_ecc.count" | "retired_pages.sbe" => RetiredSbe,
            "retired_pages.double_bit.count" | "retired_pages.dbe" => RetiredDbe,
            "retired_pages.pending" => RetiredPending,
            "remapped_rows.correctable" | "remapped_rows.sbe" => RemapCorrectable,
            "remapped_rows.uncorrectable" | "remapped_rows.dbe" => RemapUncorrectable,
            "remapped_rows.pending" => RemapPending,
            "remapped_rows.failure" => RemapFailure,
            "pcie.link.gen.current" => PcieGen,
            "pcie.link.gen.gpucurrent" => PcieGenGpu,
            "pcie.link.width.current" => PcieWidth,
            // What the link can train to: the risk model compares the current values with
            // these under load (a link that trained down).
            "pcie.link.gen.max" => PcieGenMax,
            "pcie.link.width.max" => PcieWidthMax,
            _ => {
                let reason = name
                    .strip_prefix("clocks_event_reasons.")
                    .or_else(|| name.strip_prefix("clocks_throttle_reasons."))?;
                if reason == "active" {
                    return Some(EventsActive);
                }
                let (_, bit) = EVENT_REASONS.iter().find(|(n, _)| *n == reason)?;
                EventBit(*bit)
            }
        };
        Some(field)
    }

    /// The unit nvidia-smi writes for this field when nothing else says.
    pub(crate) fn default_unit(self) -> Unit {
        use Field::*;
        match self {
            UtilGpu | UtilMemory | UtilEncoder | UtilDecoder | FanSpeed => Unit::Percent,
            MemTotal | MemUsed | MemFree | MemReserved => Unit::Mib,
            PowerDraw | PowerDrawAverage | PowerDrawInstant | PowerLimit | EnforcedPowerLimit => {
                Unit::Watt
            }
            Clock(_) | ClockMax(_) => Unit::Mhz,
            _ => Unit::None,
        }
    }
}

/// Units nvidia-smi writes, in headers (`[MiB]`) or after values (`81559 MiB`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    None,
    Percent,
    Kib,
    Mib,
    Gib,
    Watt,
    Milliwatt,
    Mhz,
    Ghz,
    Celsius,
    Microsecond,
    Other,
}

impl Unit {
    pub fn parse(text: &[u8]) -> Unit {
        // The units a number is written with, told apart by their bytes without comparing
        // slices (a unit is read at most cells of a log).
        match *text {
            [b'%'] => return Unit::Percent,
            [b'W'] => return Unit::Watt,
            [b'M', b'i', b'B'] => return Unit::Mib,
            [b'M', b'H', b'z'] => return Unit::Mhz,
            _ => {}
        }
        match text {
            b"" => Unit::None,
            b"%" => Unit::Percent,
            b"KiB" => Unit::Kib,
            b"MiB" => Unit::Mib,
            b"GiB" => Unit::Gib,
            b"W" => Unit::Watt,
            b"mW" => Unit::Milliwatt,
            b"MHz" => Unit::Mhz,
            b"GHz" => Unit::Ghz,
            b"C" => Unit::Celsius,
            b"us" => Unit::Microsecond,
            _ => Unit::Other,
        }
    }
}

/// Splits a header cell `memory.used [MiB]` into its name and unit.
pub fn split_header(cell: &str) -> (&str, Unit) {
    let cell = cell.trim();
    match cell.split_once(" [") {
        Some((name, rest)) => {
            let unit = rest.strip_suffix(']').unwrap_or(rest);
            (name.trim(), Unit::parse(unit.as_bytes()))
        }
        None => (cell, Unit::None),
    }
}

/// What a cell holds once units and placeholders are dealt with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cell<T> {
    Value(T),
    /// `[N/A]`, `[Not Supported]`, an empty cell, …: nvidia-smi has no value to give.
    Absent,
    /// The GPU could not be reached (`[GPU is lost]`, `[GPU requires reset]`).
    Lost,
    /// Something that is not a value of this field.
    Invalid,
}

impl<T> Cell<T> {
    /// The value checked or converted by `f`; a value `f` refuses is invalid.
    pub fn and_then<U>(self, f: impl FnOnce(T) -> Option<U>) -> Cell<U> {
        match self {
            Cell::Value(v) => f(v).map_or(Cell::Invalid, Cell::Value),
            Cell::Absent => Cell::Absent,
            Cell::Lost => Cell::Lost,
            Cell::Invalid => Cell::Invalid,
        }
    }
}

/// Classifies the placeholders nvidia-smi writes instead of a value.
#[inline]
pub fn placeholder<T>(cell: &[u8]) -> Option<Cell<T>> {
    match cell.first() {
        None => Some(Cell::Absent),
        Some(b'[') => {
            let lost = contains_ignore_case(cell, b"gpu is lost")
                || contains_ignore_case(cell, b"requires reset");
            Some(if lost { Cell::Lost } else { Cell::Absent })
        }
        Some(b'N') if cell == b"N/A" || cell == b"Not Supported" => Some(Cell::Absent),
        _ => None,
    }
}

fn contains_ignore_case(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle))
}

/// Splits `69.85 W` into `69.85` and its unit; a bare number has [`Unit::None`].
fn number_and_unit(cell: &[u8]) -> (&[u8], Unit) {
    match cell.iter().position(|&b| b == b' ') {
        Some(i) => (&cell[..i], Unit::parse(cell[i + 1..].trim_ascii())),
        None => match cell.last() {
            // "41%" without a space has been seen in hand-edited logs.
            Some(b'%') => (&cell[..cell.len() - 1], Unit::Percent),
            _ => (cell, Unit::None),
        },
    }
}

/// A plain decimal number (`41`, `69.85`, `-3`), read without `str::parse` for the
/// digits-and-a-point shape nvidia-smi writes; anything else goes through the standard
/// parser. Up to 15 significant digits the fast path is exact: both integers of
/// `digits / 10^k` are exact in an f64, so the one division rounds correctly, as `parse`.
fn decimal(text: &[u8]) -> Option<f64> {
    let (negative, digits) = match text.first() {
        Some(b'-') => (true, &text[1..]),
        _ => (false, text),
    };
    let mut mantissa = 0u64;
    let mut count = 0usize;
    let mut scale = None;
    for (i, &b) in digits.iter().enumerate() {
        match b {
            b'0'..=b'9' => {
                // Past 15 digits the value is not used (the standard parser takes over).
                mantissa = mantissa.wrapping_mul(10).wrapping_add(u64::from(b - b'0'));
                count += 1;
            }
            b'.' if scale.is_none() && i > 0 => scale = Some(digits.len() - i - 1),
            _ => {
                count = usize::MAX;
                break;
            }
        }
    }
    if (1..=15).contains(&count) && scale != Some(0) {
        let value = mantissa as f64 / POWERS_OF_TEN[scale.unwrap_or(0)];
        return Some(if negative { -value } else { value });
    }
    let value: f64 = std::str::from_utf8(text).ok()?.parse().ok()?;
    value.is_finite().then_some(value)
}

/// The number at the start of `cell` and the index of the byte after it, where it has the
/// shape [`decimal`] reads on its fast path (an optional `-`, 1 to 15 digits, at most one
/// point with a digit either side of it) and `cell` goes on, if at all, with a byte that
/// is neither a digit nor a point: the same value [`decimal`] gives that prefix. `None`
/// for any other shape. The whole part and the fraction are each read in a loop of their
/// own (a cell is read at every row: one pass that asked of each byte whether it is the
/// point cost a third of reading a number).
#[inline]
fn leading_decimal(cell: &[u8]) -> Option<(f64, usize)> {
    let negative = cell.first() == Some(&b'-');
    let start = usize::from(negative);
    let (mut end, mut mantissa) = digits(cell, start, 0);
    let whole = end - start;
    let mut scale = 0;
    // A point after at least one digit; digits must follow it.
    if whole > 0 && cell.get(end) == Some(&b'.') {
        let point = end;
        (end, mantissa) = digits(cell, end + 1, mantissa);
        scale = end - point - 1;
        if scale == 0 {
            return None;
        }
    }
    if !(1..=15).contains(&(whole + scale)) {
        return None;
    }
    let value = mantissa as f64 / POWERS_OF_TEN[scale];
    Some((if negative { -value } else { value }, end))
}

/// The decimal digits of `cell` from `from` on, appended to `mantissa`: where they end and
/// the mantissa with them (wrapping: the caller refuses more than 15 digits).
#[inline(always)]
fn digits(cell: &[u8], from: usize, mut mantissa: u64) -> (usize, u64) {
    let mut end = from;
    while let Some(&b) = cell.get(end) {
        let digit = b.wrapping_sub(b'0');
        if digit > 9 {
            break;
        }
        mantissa = mantissa.wrapping_mul(10).wrapping_add(u64::from(digit));
        end += 1;
    }
    (end, mantissa)
}

const POWERS_OF_TEN: [f64; 16] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
];

/// A number in the cell's own unit, else the header's, else the field's usual one,
/// converted to `want` (the model's base unit for the field). The cell is not a
/// [`placeholder`]: a row's reader classifies each cell once, before its value is read.
pub fn quantity(cell: &[u8], header: Unit, field: Field, want: Unit) -> Cell<f64> {
    quantity_in(cell, bare_unit(header, field), want)
}

/// The unit of a number written without one in a column with the header's unit `header`
/// (`Unit::None` where the header has none) of `field`: the header's, else the field's usual.
pub(crate) fn bare_unit(header: Unit, field: Field) -> Unit {
    match header {
        Unit::None => field.default_unit(),
        unit => unit,
    }
}

/// [`quantity`] with the unit of a bare number, [`bare_unit`], worked out once a column.
/// Inlined into the row's reader, where each of most cells of a log is read.
#[inline(always)]
pub(crate) fn quantity_in(cell: &[u8], bare: Unit, want: Unit) -> Cell<f64> {
    // The shape nvidia-smi writes (`41`, `69.85 W`, `41%`) in one pass over the digits;
    // anything else is split and read as the general path below has it, to the same value.
    let (value, unit) = match leading_decimal(cell) {
        Some((value, end)) if end == cell.len() => (value, Unit::None),
        Some((value, end)) if cell[end] == b' ' => {
            (value, Unit::parse(unit_text(&cell[end + 1..])))
        }
        Some((value, end)) if cell[end] == b'%' && end + 1 == cell.len() => (value, Unit::Percent),
        _ => {
            let (number, unit) = number_and_unit(cell);
            let Some(value) = decimal(number) else {
                return Cell::Invalid;
            };
            (value, unit)
        }
    };
    let unit = match unit {
        Unit::None => bare,
        u => u,
    };
    let converted = match (unit, want) {
        (u, w) if u == w => value,
        (Unit::None, _) => value,
        (Unit::Percent, Unit::None) => value / 100.0,
        (Unit::Kib, Unit::None) => value * 1024.0,
        (Unit::Mib, Unit::None) => value * 1_048_576.0,
        (Unit::Gib, Unit::None) => value * 1_073_741_824.0,
        (Unit::Milliwatt, Unit::Watt) => value / 1000.0,
        (Unit::Ghz, Unit::Mhz) => value * 1000.0,
        (Unit::Celsius, Unit::None) => value,
        _ => return Cell::Invalid,
    };
    Cell::Value(converted)
}

/// `text` without the whitespace around it, looked for only where its first or last byte
/// is whitespace: a unit after a number (`MiB` of `81559 MiB`) has none, as the reader
/// trims each cell.
fn unit_text(text: &[u8]) -> &[u8] {
    match (text.first(), text.last()) {
        (Some(a), Some(b)) if !a.is_ascii_whitespace() && !b.is_ascii_whitespace() => text,
        _ => text.trim_ascii(),
    }
}

/// A yes/no cell in any of nvidia-smi's spellings.
pub fn flag(cell: &[u8]) -> Cell<bool> {
    if let Some(p) = placeholder(cell) {
        return p;
    }
    match cell {
        b"Yes" | b"Active" | b"Enabled" | b"True" | b"1" => Cell::Value(true),
        b"No" | b"Not Active" | b"Disabled" | b"False" | b"0" => Cell::Value(false),
        _ => Cell::Invalid,
    }
}

/// `0x0000000000000001` (or a decimal mask).
pub fn bitmask(cell: &[u8]) -> Cell<u64> {
    if let Some(p) = placeholder(cell) {
        return p;
    }
    // nvidia-smi's shape, `0x` and up to 16 hex digits, without the general parser; any
    // other cell goes through it below.
    if let Some(mask) = (cell.strip_prefix(b"0x"))
        .or_else(|| cell.strip_prefix(b"0X"))
        .and_then(short_hex)
    {
        return Cell::Value(mask);
    }
    let text = std::str::from_utf8(cell).unwrap_or("");
    let parsed = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    };
    parsed.map_or(Cell::Invalid, Cell::Value)
}

/// 1 to 16 hex digits, as `u64::from_str_radix(_, 16)` reads them; `None` for anything
/// else (the caller's general path then reads it).
fn short_hex(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 16 {
        return None;
    }
    let mut value = 0u64;
    for &b in digits {
        let digit = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            b'A'..=b'F' => b - b'A' + 10,
            _ => return None,
        };
        value = (value << 4) | u64::from(digit);
    }
    Some(value)
}

/// `P0` … `P15` (or a bare number).
pub fn pstate(cell: &[u8]) -> Cell<u32> {
    if let Some(p) = placeholder(cell) {
        return p;
    }
    // `P0` … `P9`, `P10` … `P15`: read without the general parser below.
    match cell {
        [b'P', d @ b'0'..=b'9'] => return Cell::Value(u32::from(d - b'0')),
        [b'P', b'1', d @ b'0'..=b'5'] => return Cell::Value(10 + u32::from(d - b'0')),
        _ => {}
    }
    let digits = cell.strip_prefix(b"P").unwrap_or(cell);
    std::str::from_utf8(digits)
        .ok()
        .and_then(|d| d.parse().ok())
        .filter(|&p: &u32| p <= 32)
        .map_or(Cell::Invalid, Cell::Value)
}

/// Text as written; placeholders are absent.
pub fn text(cell: &[u8]) -> Cell<&str> {
    if let Some(p) = placeholder(cell) {
        return p;
    }
    std::str::from_utf8(cell).map_or(Cell::Invalid, Cell::Value)
}

#[cfg(test)]
mod tests;
