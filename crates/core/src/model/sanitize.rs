//! Range checks on every number a source hands in: a value no GPU can report is cleared
//! (made "not available", the same `None` as an unsupported field) and counted by field.
//!
//! Sources are outside data: a driver glitch, a garbled nvidia-smi cell, a hand-edited
//! recording. An impossible reading is worse than none — `-5 °C` on every row made the
//! risk model score 1.0 — so [`Snapshot::sanitize`] runs on every snapshot before the
//! engine sees it, in the live agent (counted in `gpu_sentinel_values_rejected_total`) and
//! in `replay` (counted in its warnings). The bounds are generous on purpose: they reject
//! only what cannot be real (below physical zero, beyond any GPU made or announced by a
//! wide margin), never what is merely unusual, so a sick GPU's extreme readings still
//! reach the engine.

use super::{GpuSample, ProcessSample, Snapshot};

/// Counts and byte sizes above this are not believed: 2^53 is where an f64 stops holding
/// every integer, far beyond any real GPU, and keeping counters under it means the
/// engine's sums of them cannot overflow.
pub const LARGEST_COUNT: u64 = 1 << 53;

/// Frame-buffer memory of one GPU: 1 PiB, thousands of times today's largest.
pub(super) const LARGEST_MEMORY_BYTES: u64 = 1 << 50;

/// Degrees Celsius. NVML reports temperatures unsigned, so nothing below 0 °C is a
/// reading; silicon is destroyed long before 150 °C (GPUs shut down near 100 °C).
const TEMPERATURE: (f64, f64) = (0.0, 150.0);

/// Watts of one GPU board or module: the largest modules draw under 3 kW.
const POWER: (f64, f64) = (0.0, 10_000.0);

/// MHz, current or maximum: GPU clocks are under 3 GHz, GDDR memory clocks as nvidia-smi
/// writes them under 20 GHz.
const CLOCK_MHZ: u32 = 100_000;

/// Fan speed as a ratio of the board's rated speed; NVML documents that it may exceed
/// 100 %, so the bound is twice that.
const FAN: (f64, f64) = (0.0, 2.0);

/// Highest P-state (NVML's "unknown" is 32, not a state).
const PSTATE: u32 = 15;

/// PCIe: generation 6 exists and 7 is specified; x32 is the widest link.
const PCIE_GENERATION: u32 = 16;
const PCIE_WIDTH: u32 = 32;

/// PCIe throughput per direction: a gen-7 x16 link moves about 256 GB/s.
const PCIE_BYTES_PER_SECOND: f64 = 1e12;

/// One collection of one GPU taking a day is not a measurement.
const COLLECT_SECONDS: f64 = 86_400.0;

/// A process older than a century.
const RUNTIME_SECONDS: f64 = 100.0 * 365.25 * 86_400.0;

/// Joules since the driver loaded: 2^53 J is 10 kW for 28 000 years.
const ENERGY_JOULES: f64 = LARGEST_COUNT as f64;

/// A numeric input that is range-checked, named as in JSONL recordings (dotted for the
/// nested ones). Names are the `field` label of `gpu_sentinel_values_rejected_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Checked {
    Temperature,
    MemoryTemperature,
    Power,
    PowerLimit,
    Energy,
    UtilizationGpu,
    UtilizationMemoryCopy,
    UtilizationEncoder,
    UtilizationDecoder,
    MemoryTotal,
    MemoryUsed,
    MemoryFree,
    MemoryReserved,
    Clock,
    ClockMax,
    FanSpeed,
    PerformanceState,
    Ecc,
    RetiredPages,
    RemappedRows,
    PcieReplays,
    PcieGeneration,
    PcieWidth,
    PcieThroughput,
    NvLink,
    Gpm,
    CollectSeconds,
    ProcessMemory,
    ProcessUtilization,
    ProcessRuntime,
    MigSlices,
}

impl Checked {
    /// Every checked input, in counting order.
    pub const ALL: [Checked; 31] = [
        Checked::Temperature,
        Checked::MemoryTemperature,
        Checked::Power,
        Checked::PowerLimit,
        Checked::Energy,
        Checked::UtilizationGpu,
        Checked::UtilizationMemoryCopy,
        Checked::UtilizationEncoder,
        Checked::UtilizationDecoder,
        Checked::MemoryTotal,
        Checked::MemoryUsed,
        Checked::MemoryFree,
        Checked::MemoryReserved,
        Checked::Clock,
        Checked::ClockMax,
        Checked::FanSpeed,
        Checked::PerformanceState,
        Checked::Ecc,
        Checked::RetiredPages,
        Checked::RemappedRows,
        Checked::PcieReplays,
        Checked::PcieGeneration,
        Checked::PcieWidth,
        Checked::PcieThroughput,
        Checked::NvLink,
        Checked::Gpm,
        Checked::CollectSeconds,
        Checked::ProcessMemory,
        Checked::ProcessUtilization,
        Checked::ProcessRuntime,
        Checked::MigSlices,
    ];

    /// The field's name in a JSONL snapshot.
    pub fn name(self) -> &'static str {
        match self {
            Checked::Temperature => "temperature_celsius",
            Checked::MemoryTemperature => "memory_temperature_celsius",
            Checked::Power => "power_watts",
            Checked::PowerLimit => "power_limit_watts",
            Checked::Energy => "energy_joules",
            Checked::UtilizationGpu => "utilization.gpu",
            Checked::UtilizationMemoryCopy => "utilization.memory_copy",
            Checked::UtilizationEncoder => "utilization.encoder",
            Checked::UtilizationDecoder => "utilization.decoder",
            Checked::MemoryTotal => "memory.total_bytes",
            Checked::MemoryUsed => "memory.used_bytes",
            Checked::MemoryFree => "memory.free_bytes",
            Checked::MemoryReserved => "memory.reserved_bytes",
            Checked::Clock => "clocks",
            Checked::ClockMax => "clocks_max",
            Checked::FanSpeed => "fan_speed_ratio",
            Checked::PerformanceState => "performance_state",
            Checked::Ecc => "ecc",
            Checked::RetiredPages => "retired_pages",
            Checked::RemappedRows => "remapped_rows",
            Checked::PcieReplays => "pcie.replay_counter",
            Checked::PcieGeneration => "pcie.link_generation",
            Checked::PcieWidth => "pcie.link_width",
            Checked::PcieThroughput => "pcie.throughput",
            Checked::NvLink => "nvlink",
            Checked::Gpm => "gpm",
            Checked::CollectSeconds => "collect_seconds",
            Checked::ProcessMemory => "processes.used_memory_bytes",
            Checked::ProcessUtilization => "processes.utilization",
            Checked::ProcessRuntime => "processes.runtime_seconds",
            Checked::MigSlices => "mig_instances.slices",
        }
    }

    /// Position in [`Checked::ALL`], for tallies kept in arrays.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// How many values a check cleared, per [`Checked`] field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RejectedValues {
    counts: [u64; Checked::ALL.len()],
}

impl RejectedValues {
    /// Values cleared, all fields together.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Values cleared of one field.
    pub fn count(&self, field: Checked) -> u64 {
        self.counts[field.index()]
    }

    /// The fields with a value cleared, with their counts, in [`Checked::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = (Checked, u64)> + '_ {
        Checked::ALL
            .into_iter()
            .map(|f| (f, self.counts[f.index()]))
            .filter(|(_, n)| *n > 0)
    }

    /// Adds another tally to this one.
    pub fn add(&mut self, other: &RejectedValues) {
        for (mine, theirs) in self.counts.iter_mut().zip(other.counts) {
            *mine = mine.saturating_add(theirs);
        }
    }

    pub(super) fn reject(&mut self, field: Checked) {
        self.counts[field.index()] += 1;
    }

    /// Clears `value` (and counts it) unless it lies in `lo..=hi`. NaN is never in range.
    fn real(&mut self, field: Checked, value: &mut Option<f64>, (lo, hi): (f64, f64)) {
        if let Some(v) = *value
            && !(lo..=hi).contains(&v)
        {
            *value = None;
            self.reject(field);
        }
    }

    pub(super) fn ratio(&mut self, field: Checked, value: &mut Option<f64>) {
        self.real(field, value, (0.0, 1.0));
    }

    /// Clears a whole number above `hi`.
    pub(super) fn whole<T: PartialOrd + Copy>(
        &mut self,
        field: Checked,
        value: &mut Option<T>,
        hi: T,
    ) {
        if value.is_some_and(|v| v > hi) {
            *value = None;
            self.reject(field);
        }
    }
}

impl Snapshot {
    /// Clears every value of the snapshot no GPU can report (see the module's bounds) and
    /// says how many of each field it cleared. Identity, flags and the time are not
    /// numbers to check; everything else the engine or the exposition reads is.
    pub fn sanitize(&mut self) -> RejectedValues {
        let mut rejected = RejectedValues::default();
        for gpu in &mut self.gpus {
            rejected.add(&gpu.sanitize());
        }
        for process in &mut self.processes {
            process.sanitize_into(&mut rejected);
        }
        rejected
    }
}

impl GpuSample {
    /// [`Snapshot::sanitize`] for one GPU.
    pub fn sanitize(&mut self) -> RejectedValues {
        let mut r = RejectedValues::default();
        self.sanitize_into(&mut r);
        r
    }

    /// [`GpuSample::sanitize`], what it clears added to `r` (a reader of millions of rows
    /// keeps one, rather than a new one filled in and handed back for every row).
    pub fn sanitize_into(&mut self, r: &mut RejectedValues) {
        r.real(
            Checked::Temperature,
            &mut self.temperature_celsius,
            TEMPERATURE,
        );
        r.real(
            Checked::MemoryTemperature,
            &mut self.memory_temperature_celsius,
            TEMPERATURE,
        );
        r.real(Checked::Power, &mut self.power_watts, POWER);
        r.real(Checked::PowerLimit, &mut self.power_limit_watts, POWER);
        r.real(
            Checked::Energy,
            &mut self.energy_joules,
            (0.0, ENERGY_JOULES),
        );
        let u = &mut self.utilization;
        r.ratio(Checked::UtilizationGpu, &mut u.gpu);
        r.ratio(Checked::UtilizationMemoryCopy, &mut u.memory_copy);
        r.ratio(Checked::UtilizationEncoder, &mut u.encoder);
        r.ratio(Checked::UtilizationDecoder, &mut u.decoder);
        self.sanitize_memory(r);
        for (field, clocks) in [
            (Checked::Clock, &mut self.clocks),
            (Checked::ClockMax, &mut self.clocks_max),
        ] {
            for mhz in [
                &mut clocks.sm,
                &mut clocks.memory,
                &mut clocks.graphics,
                &mut clocks.video,
            ] {
                r.whole(field, mhz, CLOCK_MHZ);
            }
        }
        r.real(Checked::FanSpeed, &mut self.fan_speed_ratio, FAN);
        r.whole(
            Checked::PerformanceState,
            &mut self.performance_state,
            PSTATE,
        );
        let ecc = &mut self.ecc;
        for count in [
            &mut ecc.corrected_volatile,
            &mut ecc.uncorrected_volatile,
            &mut ecc.corrected_aggregate,
            &mut ecc.uncorrected_aggregate,
        ] {
            r.whole(Checked::Ecc, count, LARGEST_COUNT);
        }
        if self
            .retired_pages
            .is_some_and(|p| p.sbe > LARGEST_COUNT || p.dbe > LARGEST_COUNT)
        {
            self.retired_pages = None;
            r.reject(Checked::RetiredPages);
        }
        if self
            .remapped_rows
            .is_some_and(|m| m.correctable > LARGEST_COUNT || m.uncorrectable > LARGEST_COUNT)
        {
            self.remapped_rows = None;
            r.reject(Checked::RemappedRows);
        }
        let pcie = &mut self.pcie;
        r.whole(
            Checked::PcieReplays,
            &mut pcie.replay_counter,
            LARGEST_COUNT,
        );
        r.whole(
            Checked::PcieGeneration,
            &mut pcie.link_generation,
            PCIE_GENERATION,
        );
        r.whole(Checked::PcieWidth, &mut pcie.link_width, PCIE_WIDTH);
        // The maxima are checked as the current values are: one bound for both.
        r.whole(
            Checked::PcieGeneration,
            &mut pcie.link_generation_max,
            PCIE_GENERATION,
        );
        r.whole(Checked::PcieWidth, &mut pcie.link_width_max, PCIE_WIDTH);
        let throughput = (0.0, PCIE_BYTES_PER_SECOND);
        r.real(
            Checked::PcieThroughput,
            &mut pcie.tx_bytes_per_second,
            throughput,
        );
        r.real(
            Checked::PcieThroughput,
            &mut pcie.rx_bytes_per_second,
            throughput,
        );
        let links = self.nvlink.len();
        self.nvlink.retain(|l| {
            [l.replay, l.recovery, l.crc_flit, l.crc_data]
                .iter()
                .all(|&n| n <= LARGEST_COUNT)
        });
        for _ in self.nvlink.len()..links {
            r.reject(Checked::NvLink);
        }
        if let Some(gpm) = &mut self.gpm {
            for ratio in [
                &mut gpm.sm_active,
                &mut gpm.sm_occupancy,
                &mut gpm.tensor_active,
                &mut gpm.dram_active,
                &mut gpm.graphics_active,
            ] {
                r.ratio(Checked::Gpm, ratio);
            }
        }
        // A MIG instance's memory and activity are checked as its GPU's are.
        for instance in &mut self.mig_instances {
            instance.sanitize_into(r);
        }
        if !(0.0..=COLLECT_SECONDS).contains(&self.collect_seconds) {
            // Not optional in the model: zero is "nothing measured".
            self.collect_seconds = 0.0;
            r.reject(Checked::CollectSeconds);
        }
    }

    /// Byte counts beyond any GPU, and parts larger than the whole (used, free or
    /// reserved above total: the total is the one reading the others are compared with).
    fn sanitize_memory(&mut self, r: &mut RejectedValues) {
        let m = &mut self.memory;
        r.whole(
            Checked::MemoryTotal,
            &mut m.total_bytes,
            LARGEST_MEMORY_BYTES,
        );
        let most = m.total_bytes.unwrap_or(LARGEST_MEMORY_BYTES);
        r.whole(Checked::MemoryUsed, &mut m.used_bytes, most);
        r.whole(Checked::MemoryFree, &mut m.free_bytes, most);
        r.whole(Checked::MemoryReserved, &mut m.reserved_bytes, most);
    }
}

impl ProcessSample {
    fn sanitize_into(&mut self, r: &mut RejectedValues) {
        r.whole(
            Checked::ProcessMemory,
            &mut self.used_memory_bytes,
            LARGEST_MEMORY_BYTES,
        );
        r.ratio(Checked::ProcessUtilization, &mut self.sm_utilization);
        r.ratio(Checked::ProcessUtilization, &mut self.memory_utilization);
        r.real(
            Checked::ProcessRuntime,
            &mut self.runtime_seconds,
            (0.0, RUNTIME_SECONDS),
        );
    }
}

#[cfg(test)]
mod tests;
