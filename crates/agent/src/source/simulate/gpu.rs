//! One simulated GPU: identity, physical state (temperatures lag power; counters integrate),
//! its workload and its fault. By default an H100 SXM5 80GB as `nvidia-smi -q` shows one:
//! 81,559 MiB total with 479 MiB reserved, 700 W limit, ~70 W and ~41 °C idle, 1980 MHz
//! maximum SM clock, 2619 MHz memory clock, no fan, no retired pages (Hopper remaps rows);
//! [`SimGpu::for_sku`] makes one of the other models in [`super::sku`], with the confounders
//! of [`super::quirks`].

use rand::Rng;
use rand::rngs::SmallRng;

use super::fault::{Fault, FaultKind, Wear};
use super::mig::SimMig;
use super::noise::{Counter, Counts};
use super::quirks::Quirks;
use super::sku::{H100, SkuSpec};
use super::workload::{SimProcess, Workload};
use crate::model::ClockEvents;

mod sample;

const MIB: u64 = 1 << 20;
/// Memory a CUDA context takes beyond what the process allocates.
const CONTEXT_BYTES: u64 = 512 * MIB;
/// Thermal time constant of die and heatsink, seconds.
const THERMAL_TAU_S: f64 = 90.0;
/// HBM3 slowdown begins around 95 °C and the hardware clamps hard past ~105 °C.
const MEMORY_SW_SLOWDOWN_C: f64 = 95.0;
const MEMORY_HW_SLOWDOWN_C: f64 = 105.0;
const GPU_SW_SLOWDOWN_C: f64 = 87.0;

/// How the memory temperature follows the die.
#[derive(Debug, Clone, Copy, PartialEq)]
enum MemoryModel {
    /// The built-in fleet's: HBM above the die by a gap that grows with memory traffic.
    Fixed,
    /// Memory minus die moves from `idle` to `loaded` °C with the power drawn, as in
    /// `nvidia-smi` readings of each model; `sensor` false: no memory temperature at all.
    Measured {
        idle: f64,
        loaded: f64,
        sensor: bool,
    },
}

/// A simulated GPU.
#[derive(Debug, Clone)]
pub struct SimGpu {
    pub index: u32,
    pub uuid: String,
    pub pci_bus_id: String,
    pub serial: String,
    pub name: String,
    pub workload: Workload,
    pub fault: Option<Fault>,
    /// Inlet temperature, °C: 20–28 in a normal aisle, higher in a hot one.
    ambient: f64,
    /// Normal HBM-above-die gap under memory load, °C.
    memory_gap: f64,
    /// The model, and how its memory temperature reads.
    spec: &'static SkuSpec,
    memory: MemoryModel,
    /// Confounders, with the stream they draw from; None in the built-in fleet.
    quirks: Option<Box<(Quirks, SmallRng)>>,
    /// Old aggregate ECC errors from before this run that never grow.
    old_corrected: u64,
    rng: SmallRng,
    /// Background noise of a real fleet, drawn from its own stream (see
    /// [`SimGpu::with_background_noise`]); None in the default fleet.
    noise: Option<SmallRng>,
    /// Work only in office hours (see [`SimGpu::in_office_hours`]): the UTC time, in
    /// seconds since the epoch, of simulated time zero. None: work around the clock.
    office_hours: Option<i64>,
    /// The GPU's MIG instances and their workloads, in MIG mode (see [`SimGpu::with_mig`]).
    mig: Option<Box<SimMig>>,
    // Dynamic state.
    util: f64,
    mem_copy: f64,
    decoder: f64,
    tensor: f64,
    temperature: f64,
    memory_temperature: f64,
    power: f64,
    energy_joules: f64,
    clock_events: u64,
    sm_clock: u32,
    wear: Wear,
}

impl SimGpu {
    pub fn new(
        index: u32,
        name: &str,
        workload: Workload,
        fault: Option<Fault>,
        hot_aisle: bool,
        mut rng: SmallRng,
    ) -> SimGpu {
        let ambient = rng.random_range(20.0..28.0) + if hot_aisle { 8.0 } else { 0.0 };
        let uuid = format!(
            "GPU-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            rng.random::<u32>(),
            rng.random::<u16>(),
            rng.random::<u16>(),
            rng.random::<u16>(),
            rng.random::<u64>() & 0xffff_ffff_ffff
        );
        // Bus numbers of an 8-GPU HGX baseboard; larger fleets continue in further domains.
        const BUSES: [u8; 8] = [0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb];
        let pci_bus_id = format!("{:08X}:{:02X}:00.0", index / 8, BUSES[index as usize % 8]);
        let serial = format!("1654922{:06}", rng.random_range(0..1_000_000));
        let old_corrected = if rng.random_bool(0.1) {
            rng.random_range(1..20)
        } else {
            0
        };
        let spec = &H100;
        let temperature = ambient + 10.0 + spec.idle_power_w * spec.degrees_per_watt;
        SimGpu {
            index,
            uuid,
            pci_bus_id,
            serial,
            name: name.to_string(),
            workload,
            fault,
            ambient,
            memory_gap: rng.random_range(3.0..8.0),
            spec,
            memory: MemoryModel::Fixed,
            quirks: None,
            old_corrected,
            util: 0.0,
            mem_copy: 0.0,
            decoder: 0.0,
            tensor: 0.0,
            temperature,
            memory_temperature: temperature + 6.0,
            power: spec.idle_power_w,
            energy_joules: rng.random_range(1.0e8..5.0e9),
            clock_events: ClockEvents::GPU_IDLE,
            sm_clock: spec.idle_sm_mhz,
            wear: Wear {
                link_gen: 5,
                link_width: 16,
                pcie_replays: rng.random_range(0..20),
                ..Wear::default()
            },
            rng,
            noise: None,
            office_hours: None,
            mig: None,
        }
    }

    /// A GPU of model `spec` (see [`super::sku`]), its memory temperature gap drawn from
    /// the model's ranges, with the confounders `quirks` (drawn from `quirk_rng`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn for_sku(
        index: u32,
        spec: &'static SkuSpec,
        workload: Workload,
        fault: Option<Fault>,
        hot_aisle: bool,
        rng: SmallRng,
        quirks: Quirks,
        quirk_rng: SmallRng,
    ) -> SimGpu {
        let mut gpu = SimGpu::new(index, spec.name, workload, fault, hot_aisle, rng);
        gpu.spec = spec;
        let draw = |rng: &mut SmallRng, (lo, hi): (f64, f64)| {
            if hi > lo {
                rng.random_range(lo..hi)
            } else {
                lo
            }
        };
        gpu.memory = MemoryModel::Measured {
            idle: draw(&mut gpu.rng, spec.idle_gap),
            loaded: draw(&mut gpu.rng, spec.loaded_gap),
            sensor: gpu
                .rng
                .random_bool(spec.memory_sensor_share.clamp(0.0, 1.0)),
        };
        gpu.temperature = gpu.ambient + 10.0 + spec.idle_power_w * spec.degrees_per_watt;
        gpu.memory_temperature = gpu.temperature;
        gpu.power = spec.idle_power_w;
        gpu.sm_clock = spec.idle_sm_mhz;
        gpu.wear.link_gen = spec.pcie_gen_max;
        gpu.wear.nvlinks = spec.nvlinks;
        gpu.old_corrected += quirks.old_corrected;
        if quirks != Quirks::default() {
            gpu.quirks = Some(Box::new((quirks, quirk_rng)));
        }
        gpu
    }

    /// The model this GPU is.
    pub fn spec(&self) -> &'static SkuSpec {
        self.spec
    }

    /// The GPU's jobs run 08:00–20:00 UTC on weekdays and pause otherwise, keeping their
    /// memory (a development host: notebooks and debugging sessions left open overnight).
    /// `start` is the UTC time of simulated time zero.
    pub(crate) fn with_office_hours(mut self, start: chrono::DateTime<chrono::Utc>) -> SimGpu {
        self.office_hours = Some(start.timestamp());
        self
    }

    /// Whether simulated time `t` falls in office hours (always true without them).
    fn in_office_hours(&self, t: f64) -> bool {
        let Some(start) = self.office_hours else {
            return true;
        };
        let at = start + t as i64;
        let (day, second) = (at.div_euclid(86_400), at.rem_euclid(86_400));
        // 1970-01-01 was a Thursday: day 0 → weekday 3 (Monday = 0).
        let weekday = (day + 3).rem_euclid(7);
        weekday < 5 && (8 * 3600..20 * 3600).contains(&second)
    }

    /// Adds the background noise healthy GPUs show in the field, none of which predicts a
    /// failure: an isolated corrected ECC error about every ten days, a short PCIe replay burst
    /// about weekly, a few NVLink CRC errors now and then, an application XID (13/31/43)
    /// every few days, and collections that take milliseconds with an occasional slow one.
    /// `rng` is a stream of its own, so the GPU's other draws stay as they were.
    pub(crate) fn with_background_noise(mut self, rng: SmallRng) -> SimGpu {
        self.noise = Some(rng);
        self
    }

    /// Puts the GPU in MIG mode: its work runs in the instances of `mig` instead of on the
    /// whole GPU.
    pub(crate) fn with_mig(mut self, mig: SimMig) -> SimGpu {
        self.mig = Some(Box::new(mig));
        self
    }

    /// The GPU's MIG side, in MIG mode.
    pub fn mig(&self) -> Option<&SimMig> {
        self.mig.as_deref()
    }

    /// Error counts (the fault's, the confounders', the background noise's) arrive as
    /// `counts` says (see [`super::noise`]) instead of Poisson.
    pub(crate) fn with_noise(mut self, counts: Counts) -> SimGpu {
        self.wear.noise = counts;
        self
    }

    pub fn lost(&self) -> bool {
        self.wear.lost
    }

    /// The fault family, when the fault reached its failure point during the last step.
    /// True once per GPU: it is the label a recording gives the failure.
    pub(crate) fn take_failure(&mut self) -> Option<FaultKind> {
        let fault = self.fault.as_mut()?;
        fault.take_failure()
    }

    /// Advances the GPU `dt` seconds to time `t`; returns the XIDs raised meanwhile.
    pub fn step(&mut self, t: f64, dt: f64) -> Vec<u32> {
        if self.wear.lost {
            return Vec::new();
        }
        let quirks = self.quirks.as_deref().map(|(q, _)| q);
        let working = self.in_office_hours(t) && !quirks.is_some_and(|q| q.idle_at(t));
        let inlet = quirks.map_or(0.0, |q| q.inlet(t));
        let spec = self.spec;
        let rng = &mut self.rng;
        let load = match self.mig.as_deref_mut() {
            // In MIG mode the work is the instances': the GPU's own workload does not run.
            Some(mig) => mig.step(t, working),
            None => {
                self.workload.advance(t, rng);
                // Drawn even when not working, so the GPU's later draws stay where they were.
                let load = self.workload.load(t, rng);
                if working { load } else { Default::default() }
            }
        };
        self.util = load.util;
        self.mem_copy = load.mem_copy;
        self.decoder = load.decoder;
        self.tensor = load.tensor;

        let fault_ambient = self.fault.as_ref().map_or(0.0, |f| f.ambient(t));
        let fault_gap = self.fault.as_ref().map_or(0.0, |f| f.memory_gap(t));

        // Slowdown reasons follow last step's temperatures, as the firmware reacts to
        // what it measured; slowdown then cuts power, which cools the die.
        let mut events = 0;
        if self.wear.power_brake {
            events |= ClockEvents::HW_POWER_BRAKE_SLOWDOWN | ClockEvents::HW_SLOWDOWN;
        }
        if self.memory_temperature >= MEMORY_HW_SLOWDOWN_C {
            events |= ClockEvents::HW_THERMAL_SLOWDOWN | ClockEvents::HW_SLOWDOWN;
        } else if self.memory_temperature >= MEMORY_SW_SLOWDOWN_C
            || self.temperature >= GPU_SW_SLOWDOWN_C
        {
            events |= ClockEvents::SW_THERMAL_SLOWDOWN;
        }
        let slowdown = if events
            & (ClockEvents::HW_THERMAL_SLOWDOWN | ClockEvents::HW_POWER_BRAKE_SLOWDOWN)
            != 0
        {
            0.5
        } else if events & ClockEvents::SW_THERMAL_SLOWDOWN != 0 {
            0.8
        } else {
            1.0
        };

        let busy = self.util > 0.01;
        let (idle_w, limit_w) = (spec.idle_power_w, spec.power_limit_w);
        let mut power = idle_w
            + (limit_w - idle_w) * (0.78 * self.util + 0.15 * self.mem_copy) * slowdown
            + rng.random_range(-4.0..4.0)
            + self.wear.power_swing;
        if power >= limit_w * 0.98 {
            events |= ClockEvents::SW_POWER_CAP;
            power = power.min(limit_w);
        }
        if !busy {
            events |= ClockEvents::GPU_IDLE;
        }
        self.power = power.max(idle_w * 0.9);
        self.energy_joules += self.power * dt;
        self.clock_events = events;
        let boost = if events & ClockEvents::SW_POWER_CAP != 0 {
            0.93
        } else {
            1.0
        };
        self.sm_clock = if busy {
            (spec.max_sm_mhz as f64 * boost * slowdown) as u32
        } else {
            spec.idle_sm_mhz
        };

        let relax = 1.0 - (-dt / THERMAL_TAU_S).exp();
        let target =
            self.ambient + inlet + fault_ambient + 10.0 + self.power * spec.degrees_per_watt;
        self.temperature += (target - self.temperature) * relax;
        let gap = match self.memory {
            MemoryModel::Fixed => self.memory_gap * (0.4 + self.mem_copy),
            MemoryModel::Measured { idle, loaded, .. } => {
                let load = ((self.power - idle_w) / (limit_w - idle_w)).clamp(0.0, 1.0);
                idle + (loaded - idle) * load
            }
        };
        let memory_target = target + gap + fault_gap;
        self.memory_temperature += (memory_target - self.memory_temperature) * relax;

        // A healthy link sees a replay now and then.
        let replays = self
            .wear
            .noise
            .draw(Counter::PcieReplays, 0.2 * dt / 3600.0, t, dt, rng);
        self.wear.pcie_replays += replays;
        let mut xids = match self.noise.as_mut() {
            Some(noise) => background_noise(&mut self.wear, spec.nvlinks, t, dt, noise),
            None => Vec::new(),
        };
        if let Some(fault) = self.fault.as_mut() {
            xids.extend(fault.step(t, dt, &mut self.wear, rng));
        }
        if let Some((quirks, rng)) = self.quirks.as_deref_mut() {
            quirks.step(t, dt, &mut self.wear, rng);
        }
        xids
    }

    fn quirks(&self) -> Option<&Quirks> {
        self.quirks.as_deref().map(|(q, _)| q)
    }

    /// Processes on the GPU now (none once it is lost).
    pub fn processes(&self) -> Vec<SimProcess> {
        if self.wear.lost {
            Vec::new()
        } else if let Some(mig) = &self.mig {
            mig.processes()
        } else {
            let mut processes = self.workload.processes(self.util);
            for p in &mut processes {
                p.memory_bytes = self.scaled(p.memory_bytes);
            }
            processes
        }
    }

    /// Bytes a job sized for an 80 GB H100 holds on this model: as much of its memory.
    fn scaled(&self, bytes: u64) -> u64 {
        if self.spec.total_mib == H100.total_mib {
            return bytes;
        }
        let share = self.spec.total_mib as f64 / H100.total_mib as f64;
        // Whole MiB, as the jobs allocate.
        (bytes as f64 * share / MIB as f64).floor() as u64 * MIB
    }

    /// Context memory included: what NVML reports as the process's `usedGpuMemory`.
    pub(crate) fn process_memory(process: &SimProcess) -> u64 {
        process.memory_bytes + CONTEXT_BYTES
    }
}

/// Mean days between the isolated events of [`SimGpu::with_background_noise`].
const NOISE_ECC_DAYS: f64 = 10.0;
const NOISE_PCIE_BURST_DAYS: f64 = 7.0;
const NOISE_NVLINK_DAYS: f64 = 10.0;
const NOISE_APP_XID_DAYS: f64 = 3.0;

/// One step of background noise, `dt` seconds ending at `t`; returns the application XIDs
/// it raised. The error counts draw from the GPU's noise model: corrected errors as counts,
/// replay bursts and NVLink error bursts as events (each already a train).
fn background_noise(
    wear: &mut Wear,
    nvlinks: u32,
    t: f64,
    dt: f64,
    rng: &mut SmallRng,
) -> Vec<u32> {
    let days = dt / 86_400.0;
    wear.corrected += wear
        .noise
        .draw(Counter::Corrected, days / NOISE_ECC_DAYS, t, dt, rng);
    let bursts = wear.noise.events(
        Counter::PcieReplays,
        days / NOISE_PCIE_BURST_DAYS,
        t,
        dt,
        rng,
    );
    for _ in 0..bursts {
        wear.pcie_replays += rng.random_range(10..120);
    }
    let nvlink_bursts =
        wear.noise
            .events(Counter::NvLinkErrors, days / NOISE_NVLINK_DAYS, t, dt, rng);
    for _ in 0..nvlink_bursts {
        let link = wear.nvlink_mut(rng.random_range(0..nvlinks.max(1)));
        let n = rng.random_range(1..20);
        link.crc_flit += n;
        link.replay += n;
    }
    // Milliseconds per collection; one in 500 is held up by the host for a moment.
    wear.collect_seconds = rng.random_range(0.002..0.006);
    if rng.random_bool(0.002) {
        wear.collect_seconds += rng.random_range(0.05..0.3);
    }
    wear.failed_calls = 0;
    (0..super::fault::poisson(days / NOISE_APP_XID_DAYS, rng))
        .map(|_| [13, 31, 43][rng.random_range(0..3)])
        .collect()
}

#[cfg(test)]
mod tests;
