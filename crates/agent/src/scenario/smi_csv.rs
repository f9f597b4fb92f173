//! Writing snapshots as `nvidia-smi --query-gpu=FIELDS --format=csv[,nounits] -l N` logs.
//!
//! The shape follows what `nvidia-smi` writes (tests/fixtures/smi/README.md describes it):
//! `, ` between cells, `YYYY/MM/DD HH:MM:SS.mmm` timestamps, units after values (`81559
//! MiB`, `620.50 W`, `90 %`) or, with `nounits`, only in the header (`memory.used [MiB]`);
//! temperatures without a unit either way; `clocks_event_reasons.active` as a 64-bit hex
//! mask and each reason as `Active` / `Not Active`; `[N/A]` for a value the GPU or its mode
//! lacks (utilization and row remaps in MIG mode, ECC counters with ECC off, retired pages
//! after Volta, remapped rows before Ampere), a bare `N/A` for a memory temperature the
//! board has no sensor for; and `[GPU is lost]` in every value cell of a GPU that fell off
//! the bus, its identity cells kept. A driver reload restarts the log: the header again.

use std::io::Write;

use crate::model::{ClockEvents, GpuSample, Snapshot};

/// With units after values, or only in the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Units {
    Units,
    NoUnits,
}

/// A cell before formatting.
enum Cell {
    Text(String),
    /// A number and its unit (written after it unless `nounits`).
    Number(String, &'static str),
    /// `[N/A]`.
    Missing,
    /// A bare `N/A` (what `temperature.memory` reads without a sensor).
    BareMissing,
}

type Getter = fn(&Snapshot, &GpuSample) -> Cell;

/// One `--query-gpu` field: its name, its unit in the header, and its cell.
struct Column {
    name: &'static str,
    unit: Option<&'static str>,
    /// Identity cells are kept on the row of a lost GPU.
    identity: bool,
    get: Getter,
}

fn num<T: ToString>(v: Option<T>, unit: &'static str) -> Cell {
    v.map_or(Cell::Missing, |v| Cell::Number(v.to_string(), unit))
}

fn yes_no(v: Option<bool>) -> Cell {
    v.map_or(Cell::Missing, |b| {
        Cell::Text(if b { "Yes" } else { "No" }.into())
    })
}

fn percent(v: Option<f64>) -> Cell {
    num(v.map(|r| (r * 100.0).round() as i64), "%")
}

fn mib(v: Option<u64>) -> Cell {
    num(v.map(|b| b >> 20), "MiB")
}

fn watts(v: Option<f64>) -> Cell {
    v.map_or(Cell::Missing, |w| Cell::Number(format!("{w:.2}"), "W"))
}

fn reason(s: &GpuSample, bit: u64) -> Cell {
    s.clock_events.map_or(Cell::Missing, |e| {
        Cell::Text(
            if e.0 & bit != 0 {
                "Active"
            } else {
                "Not Active"
            }
            .into(),
        )
    })
}

macro_rules! col {
    ($name:expr, $unit:expr, $identity:expr, $get:expr) => {
        Column {
            name: $name,
            unit: $unit,
            identity: $identity,
            get: $get,
        }
    };
}

/// The fields written, in the order of a typical `--query-gpu` list.
const COLUMNS: &[Column] = &[
    col!("timestamp", None, true, |snap, s| {
        // nvidia-smi reads each GPU a few milliseconds after the previous one.
        let at = snap.at + chrono::TimeDelta::milliseconds(3 + 2 * i64::from(s.index));
        Cell::Text(at.format("%Y/%m/%d %H:%M:%S%.3f").to_string())
    }),
    col!("index", None, true, |_, s| Cell::Text(s.index.to_string())),
    col!("uuid", None, true, |_, s| Cell::Text(s.uuid.clone())),
    col!("name", None, true, |_, s| Cell::Text(s.name.clone())),
    col!("pci.bus_id", None, true, |_, s| Cell::Text(
        s.pci_bus_id.clone()
    )),
    col!("driver_version", None, true, |snap, _| {
        snap.host
            .driver_version
            .clone()
            .map_or(Cell::Missing, Cell::Text)
    }),
    col!("pstate", None, false, |_, s| {
        s.performance_state
            .map_or(Cell::Missing, |p| Cell::Text(format!("P{p}")))
    }),
    col!("pcie.link.gen.current", None, false, |_, s| num(
        s.pcie.link_generation,
        ""
    )),
    col!("pcie.link.gen.max", None, false, |_, s| num(
        s.pcie.link_generation_max,
        ""
    )),
    col!("pcie.link.width.current", None, false, |_, s| num(
        s.pcie.link_width,
        ""
    )),
    col!("pcie.link.width.max", None, false, |_, s| num(
        s.pcie.link_width_max,
        ""
    )),
    col!("temperature.gpu", None, false, |_, s| num(
        s.temperature_celsius,
        ""
    )),
    col!("temperature.memory", None, false, |_, s| {
        s.memory_temperature_celsius
            .map_or(Cell::BareMissing, |t| Cell::Number(t.to_string(), ""))
    }),
    col!("utilization.gpu", Some("%"), false, |_, s| percent(
        s.utilization.gpu
    )),
    col!("utilization.memory", Some("%"), false, |_, s| percent(
        s.utilization.memory_copy
    )),
    col!("memory.total", Some("MiB"), false, |_, s| mib(s
        .memory
        .total_bytes)),
    col!("memory.reserved", Some("MiB"), false, |_, s| mib(s
        .memory
        .reserved_bytes)),
    col!("memory.used", Some("MiB"), false, |_, s| mib(s
        .memory
        .used_bytes)),
    col!("memory.free", Some("MiB"), false, |_, s| mib(s
        .memory
        .free_bytes)),
    col!("power.draw", Some("W"), false, |_, s| watts(s.power_watts)),
    col!("enforced.power.limit", Some("W"), false, |_, s| watts(
        s.power_limit_watts
    )),
    col!("clocks.current.sm", Some("MHz"), false, |_, s| num(
        s.clocks.sm,
        "MHz"
    )),
    col!("clocks.current.memory", Some("MHz"), false, |_, s| num(
        s.clocks.memory,
        "MHz"
    )),
    col!("clocks.max.sm", Some("MHz"), false, |_, s| num(
        s.clocks_max.sm,
        "MHz"
    )),
    col!("fan.speed", Some("%"), false, |_, s| percent(
        s.fan_speed_ratio
    )),
    col!("mig.mode.current", None, false, |_, s| {
        s.mig_enabled.map_or(Cell::Missing, |m| {
            Cell::Text(if m { "Enabled" } else { "Disabled" }.into())
        })
    }),
    col!("clocks_event_reasons.active", None, false, |_, s| {
        s.clock_events
            .map_or(Cell::Missing, |e| Cell::Text(format!("0x{:016X}", e.0)))
    }),
    col!("clocks_event_reasons.gpu_idle", None, false, |_, s| reason(
        s,
        ClockEvents::GPU_IDLE
    )),
    col!("clocks_event_reasons.sw_power_cap", None, false, |_, s| {
        reason(s, ClockEvents::SW_POWER_CAP)
    }),
    col!("clocks_event_reasons.hw_slowdown", None, false, |_, s| {
        reason(s, ClockEvents::HW_SLOWDOWN)
    }),
    col!(
        "clocks_event_reasons.hw_thermal_slowdown",
        None,
        false,
        |_, s| { reason(s, ClockEvents::HW_THERMAL_SLOWDOWN) }
    ),
    col!(
        "clocks_event_reasons.hw_power_brake_slowdown",
        None,
        false,
        |_, s| { reason(s, ClockEvents::HW_POWER_BRAKE_SLOWDOWN) }
    ),
    col!(
        "clocks_event_reasons.sw_thermal_slowdown",
        None,
        false,
        |_, s| { reason(s, ClockEvents::SW_THERMAL_SLOWDOWN) }
    ),
    col!(
        "ecc.errors.corrected.volatile.total",
        None,
        false,
        |_, s| { num(s.ecc.corrected_volatile, "") }
    ),
    col!(
        "ecc.errors.corrected.aggregate.total",
        None,
        false,
        |_, s| { num(s.ecc.corrected_aggregate, "") }
    ),
    col!(
        "ecc.errors.uncorrected.volatile.total",
        None,
        false,
        |_, s| { num(s.ecc.uncorrected_volatile, "") }
    ),
    col!(
        "ecc.errors.uncorrected.aggregate.total",
        None,
        false,
        |_, s| { num(s.ecc.uncorrected_aggregate, "") }
    ),
    col!("retired_pages.single_bit_ecc.count", None, false, |_, s| {
        num(s.retired_pages.map(|r| r.sbe), "")
    }),
    col!("retired_pages.double_bit.count", None, false, |_, s| {
        num(s.retired_pages.map(|r| r.dbe), "")
    }),
    col!("retired_pages.pending", None, false, |_, s| {
        yes_no(s.retired_pages.map(|r| r.pending))
    }),
    col!("remapped_rows.correctable", None, false, |_, s| {
        num(s.remapped_rows.map(|r| r.correctable), "")
    }),
    col!("remapped_rows.uncorrectable", None, false, |_, s| {
        num(s.remapped_rows.map(|r| r.uncorrectable), "")
    }),
    col!("remapped_rows.pending", None, false, |_, s| {
        yes_no(s.remapped_rows.map(|r| r.pending))
    }),
    col!("remapped_rows.failure", None, false, |_, s| {
        yes_no(s.remapped_rows.map(|r| r.failure))
    }),
];

/// Writes rounds of GPU rows.
pub struct SmiCsvWriter<W: Write> {
    out: W,
    units: Units,
    rows: u64,
}

impl<W: Write> SmiCsvWriter<W> {
    pub fn new(out: W, units: Units) -> SmiCsvWriter<W> {
        SmiCsvWriter {
            out,
            units,
            rows: 0,
        }
    }

    /// The header line: at the top, and again each time the log restarts.
    pub fn header(&mut self) -> std::io::Result<()> {
        let mut line = String::new();
        for (i, c) in COLUMNS.iter().enumerate() {
            if i > 0 {
                line.push_str(", ");
            }
            line.push_str(c.name);
            if let Some(unit) = c.unit {
                line.push_str(&format!(" [{unit}]"));
            }
        }
        line.push('\n');
        self.out.write_all(line.as_bytes())
    }

    /// One row per GPU of `snapshot`.
    pub fn round(&mut self, snapshot: &Snapshot) -> std::io::Result<()> {
        let mut line = String::new();
        for gpu in &snapshot.gpus {
            line.clear();
            for (i, c) in COLUMNS.iter().enumerate() {
                if i > 0 {
                    line.push_str(", ");
                }
                if !gpu.up && !c.identity {
                    line.push_str("[GPU is lost]");
                    continue;
                }
                match (c.get)(snapshot, gpu) {
                    Cell::Text(text) => line.push_str(&text),
                    Cell::Number(value, unit) => {
                        line.push_str(&value);
                        if self.units == Units::Units && !unit.is_empty() {
                            line.push(' ');
                            line.push_str(unit);
                        }
                    }
                    Cell::Missing => line.push_str("[N/A]"),
                    Cell::BareMissing => line.push_str("N/A"),
                }
            }
            line.push('\n');
            self.out.write_all(line.as_bytes())?;
            self.rows += 1;
        }
        Ok(())
    }

    /// GPU rows written so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}

/// Cells in a header or row line as this writer separates them.
pub fn cells(line: &str) -> usize {
    line.split(", ").count()
}
