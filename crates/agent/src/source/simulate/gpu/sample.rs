//! What NVML would report of a simulated GPU now: [`SimGpu::sample`], from its state,
//! its model's figures and its confounders (MIG mode's missing readings, ECC off), with
//! the MIG instances of a GPU in MIG mode.

use super::super::DRIVER_VERSION;
use super::super::sku::MemoryRepair;
use super::{CONTEXT_BYTES, MIB, MemoryModel, SimGpu};
use crate::model::{
    ClockEvents, Clocks, Ecc, Gpm, GpuSample, Memory, NvLinkErrors, Pcie, RemappedRows,
    RetiredPages, Utilization,
};

impl SimGpu {
    /// What NVML would report now.
    pub fn sample(&self) -> GpuSample {
        let mut sample = GpuSample {
            index: self.index,
            uuid: self.uuid.clone(),
            name: self.name.clone(),
            pci_bus_id: self.pci_bus_id.clone(),
            serial: Some(self.serial.clone()),
            mig_enabled: Some(self.mig.is_some() || self.quirks().is_some_and(|q| q.mig)),
            up: !self.wear.lost,
            ..GpuSample::default()
        };
        if self.wear.lost {
            return sample;
        }
        let used = match &self.mig {
            Some(mig) => mig.used_bytes(),
            None => match self.scaled(self.workload.memory_held()) {
                0 => 0,
                held => held + CONTEXT_BYTES,
            },
        };
        let spec = self.spec;
        // A GPU in MIG mode has its model's memory (the profile table's), whatever model
        // the rest of its behaviour is drawn from.
        let total_mib = self
            .mig
            .as_ref()
            .map_or(spec.total_mib, |m| m.table().total_mib);
        let (total, reserved) = (total_mib * MIB, spec.reserved_mib * MIB);
        let round = |x: f64| (x * 100.0).round() / 100.0;
        sample.utilization = Utilization {
            gpu: Some(round(self.util)),
            memory_copy: Some(round(self.mem_copy)),
            encoder: Some(0.0),
            decoder: Some(round(self.decoder)),
        };
        sample.memory = Memory {
            total_bytes: Some(total),
            used_bytes: Some(used),
            free_bytes: Some(total.saturating_sub(reserved + used)),
            reserved_bytes: Some(reserved),
        };
        sample.temperature_celsius = Some(self.temperature.round());
        sample.memory_temperature_celsius = match self.memory {
            MemoryModel::Measured { sensor: false, .. } => None,
            _ => Some(self.memory_temperature.round()),
        };
        sample.power_watts = Some((self.power * 1000.0).round() / 1000.0);
        sample.power_limit_watts = Some(spec.power_limit_w);
        sample.energy_joules = Some(self.energy_joules.floor());
        let video = if self.decoder > 0.0 {
            spec.max_video_mhz
        } else {
            spec.idle_video_mhz
        };
        sample.clocks = Clocks {
            sm: Some(self.sm_clock),
            memory: Some(spec.memory_mhz),
            graphics: Some(self.sm_clock),
            video: Some(video),
        };
        sample.clocks_max = Clocks {
            sm: Some(spec.max_sm_mhz),
            memory: Some(spec.memory_mhz),
            graphics: Some(spec.max_sm_mhz),
            video: Some(spec.max_video_mhz),
        };
        sample.performance_state = Some(0);
        sample.clock_events = Some(ClockEvents(self.clock_events));
        let w = &self.wear;
        let base = &w.volatile_base;
        let old_uncorrected = self.quirks().map_or(0, |q| q.old_uncorrected);
        sample.ecc = Ecc {
            corrected_volatile: Some(w.corrected - base.corrected),
            uncorrected_volatile: Some(w.uncorrected - base.uncorrected),
            corrected_aggregate: Some(w.corrected + self.old_corrected),
            uncorrected_aggregate: Some(w.uncorrected + old_uncorrected),
        };
        match spec.repair {
            MemoryRepair::RowRemap => {
                sample.remapped_rows = Some(RemappedRows {
                    correctable: w.remap_correctable,
                    uncorrectable: w.remap_uncorrectable,
                    pending: w.remap_pending,
                    failure: w.remap_failure,
                })
            }
            MemoryRepair::PageRetirement => {
                sample.retired_pages = Some(RetiredPages {
                    sbe: w.remap_correctable,
                    dbe: w.remap_uncorrectable,
                    pending: w.remap_pending,
                })
            }
        }
        let traffic = 3.5e5 + 2.0e9 * self.mem_copy;
        sample.pcie = Pcie {
            replay_counter: Some(w.pcie_replays - base.pcie_replays),
            link_generation: Some(match spec.idle_link_gen {
                Some(idle) if self.util <= 0.01 => w.link_gen.min(idle),
                _ => w.link_gen,
            }),
            link_width: Some(w.link_width),
            // The model's link at x16 (an H100 SXM's: Gen5), what a healthy GPU runs at.
            link_generation_max: Some(spec.pcie_gen_max),
            link_width_max: Some(16),
            tx_bytes_per_second: Some(traffic.round()),
            rx_bytes_per_second: Some((traffic * 1.1).round()),
        };
        sample.nvlink = (0..spec.nvlinks)
            .map(|link| {
                w.nvlink
                    .iter()
                    .find(|l| l.link == link)
                    .map(|l| base.nvlink_since(l))
                    .unwrap_or(NvLinkErrors {
                        link,
                        ..NvLinkErrors::default()
                    })
            })
            .collect();
        sample.failed_calls = w.failed_calls;
        sample.collect_seconds = w.collect_seconds;
        // Simulated GPUs run in persistence mode, on the firmware of the fleet's driver.
        sample.persistence_mode = Some(true);
        sample.firmware_version = Some(DRIVER_VERSION.to_string());
        sample.gpm = Some(Gpm {
            sm_active: Some(round(self.util * 0.88)),
            sm_occupancy: Some(round(self.util * 0.45)),
            tensor_active: Some(round(self.tensor)),
            dram_active: Some(round(self.mem_copy * 0.9)),
            graphics_active: None,
        });
        if let Some(quirks) = self.quirks() {
            if quirks.ecc_disabled {
                sample.ecc = Ecc::default();
                sample.remapped_rows = None;
                sample.retired_pages = None;
            }
            if quirks.mig {
                // In MIG mode nvidia-smi and NVML give no whole-GPU utilization, and the
                // row-remap counters read [N/A].
                sample.utilization.gpu = None;
                sample.utilization.memory_copy = None;
                sample.remapped_rows = None;
                sample.gpm = None;
            }
        }
        if let Some(mig) = &self.mig {
            // As on the captured H100 and H200 in MIG mode: no whole-GPU utilization, no
            // row-remap counters, no NVLink queries; activity is per GPU instance.
            sample.utilization = Utilization::default();
            sample.remapped_rows = None;
            sample.gpm = None;
            sample.nvlink.clear();
            sample.mig_instances = mig.instances();
            sample.mig_devices = sample
                .mig_instances
                .iter()
                .map(|i| i.uuid.clone())
                .collect();
        }
        sample
    }
}
