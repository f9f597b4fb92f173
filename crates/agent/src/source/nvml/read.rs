//! The per-GPU reads of each metric family, one function per family, each filling its part of
//! a [`GpuSample`] through [`Calls`] so that unsupported and failing calls degrade only the
//! values they carry.
//!
//! Units are converted here, once: NVML reports milliwatts, millijoules, percentages and
//! KB/s; the model holds watts, joules, ratios and bytes/s.

use std::os::raw::c_uint;

use nvml_wrapper::Device;
use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, PcieUtilCounter, PerformanceState, RetirementCause,
    TemperatureSensor,
};
use nvml_wrapper::enum_wrappers::nv_link::ErrorCounter;
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::error::{NvmlError, nvml_sym, nvml_try, nvml_try_count};
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper_sys::bindings::field_id::{
    NVML_FI_DEV_MEMORY_TEMP, NVML_FI_DEV_REMAPPED_COR, NVML_FI_DEV_REMAPPED_FAILURE,
    NVML_FI_DEV_REMAPPED_PENDING, NVML_FI_DEV_REMAPPED_UNC,
};
use nvml_wrapper_sys::bindings::{
    NVML_GPU_FABRIC_STATE_COMPLETED, NVML_GPU_FABRIC_STATE_IN_PROGRESS,
    NVML_GPU_FABRIC_STATE_NOT_STARTED, NVML_NVLINK_MAX_LINKS, nvmlGpuFabricInfo_t, nvmlMemory_t,
};

use super::calls::Calls;
use crate::model::{
    ClockEvents, Clocks, Ecc, Fabric, FabricState, GpuSample, Memory, NvLinkErrors, Pcie,
    RemappedRows, RetiredPages, Utilization,
};

/// NVML's PCIe throughput unit. `nvml.h` says "KB/s"; NVML counts memory in binary units
/// throughout, and nvidia-smi's "KB/s" for this counter is 1024 bytes.
pub const PCIE_THROUGHPUT_UNIT_BYTES: f64 = 1024.0;

const FIELD_VALUES: &str = "nvmlDeviceGetFieldValues";

fn percent(value: u32) -> f64 {
    f64::from(value) / 100.0
}

pub fn utilization(dev: &Device<'_>, c: &mut Calls<'_>, s: &mut GpuSample) {
    let rates = c.call("nvmlDeviceGetUtilizationRates", "", || {
        dev.utilization_rates()
    });
    let encoder = c.call("nvmlDeviceGetEncoderUtilization", "", || {
        dev.encoder_utilization()
    });
    let decoder = c.call("nvmlDeviceGetDecoderUtilization", "", || {
        dev.decoder_utilization()
    });
    s.utilization = Utilization {
        gpu: rates.as_ref().map(|r| percent(r.gpu)),
        memory_copy: rates.as_ref().map(|r| percent(r.memory)),
        encoder: encoder.map(|u| percent(u.utilization)),
        decoder: decoder.map(|u| percent(u.utilization)),
    };
}

pub fn memory(dev: &Device<'_>, c: &mut Calls<'_>, s: &mut GpuSample) {
    // The v2 struct carries `reserved`; drivers before R510 lack it, so fall back to v1.
    if let Some(m) = c.call("nvmlDeviceGetMemoryInfo_v2", "", || dev.memory_info()) {
        s.memory = Memory {
            total_bytes: Some(m.total),
            used_bytes: Some(m.used),
            free_bytes: Some(m.free),
            reserved_bytes: Some(m.reserved),
        };
    } else if c.skip("nvmlDeviceGetMemoryInfo_v2", "")
        && let Some(m) = c.call("nvmlDeviceGetMemoryInfo", "", || memory_info_v1(dev))
    {
        s.memory = Memory {
            total_bytes: Some(m.total),
            used_bytes: Some(m.used),
            free_bytes: Some(m.free),
            reserved_bytes: None,
        };
    }
}

/// `nvmlDeviceGetMemoryInfo` (v1), which nvml-wrapper only offers behind a feature flag.
fn memory_info_v1(dev: &Device<'_>) -> Result<nvmlMemory_t, NvmlError> {
    let sym = nvml_sym(dev.nvml().lib().nvmlDeviceGetMemoryInfo.as_ref())?;
    let mut info = nvmlMemory_t {
        total: 0,
        free: 0,
        used: 0,
    };
    // SAFETY: the handle comes from this NVML instance and stays valid while `dev` borrows
    // it; `info` is a live, correctly laid out nvmlMemory_t that NVML only writes into.
    nvml_try(unsafe { sym(dev.handle(), &mut info) })?;
    Ok(info)
}

pub fn thermal(dev: &Device<'_>, c: &mut Calls<'_>, s: &mut GpuSample) {
    s.temperature_celsius = c
        .call("nvmlDeviceGetTemperature", "gpu", || {
            dev.temperature(TemperatureSensor::Gpu)
        })
        .map(f64::from);
    s.memory_temperature_celsius = fields(dev, c, &[("memory_temp", NVML_FI_DEV_MEMORY_TEMP)])[0];
    // The first fan stands for the board; SXM parts have none and answer NOT_SUPPORTED.
    s.fan_speed_ratio = c
        .call("nvmlDeviceGetFanSpeed_v2", "0", || dev.fan_speed(0))
        .map(percent);
}

pub fn power(dev: &Device<'_>, c: &mut Calls<'_>, s: &mut GpuSample) {
    s.power_watts = c
        .call("nvmlDeviceGetPowerUsage", "", || dev.power_usage())
        .map(|mw| f64::from(mw) / 1000.0);
    s.power_limit_watts = c
        .call("nvmlDeviceGetEnforcedPowerLimit", "", || {
            dev.enforced_power_limit()
        })
        .map(|mw| f64::from(mw) / 1000.0);
    s.energy_joules = c
        .call("nvmlDeviceGetTotalEnergyConsumption", "", || {
            dev.total_energy_consumption()
        })
        .map(|mj| mj as f64 / 1000.0);
}

const CLOCKS: [(Clock, &str); 4] = [
    (Clock::SM, "sm"),
    (Clock::Memory, "memory"),
    (Clock::Graphics, "graphics"),
    (Clock::Video, "video"),
];

pub fn clocks(dev: &Device<'_>, c: &mut Calls<'_>, s: &mut GpuSample) {
    let mut current = [None; 4];
    let mut max = [None; 4];
    for (i, (clock, label)) in CLOCKS.iter().enumerate() {
        current[i] = c.call("nvmlDeviceGetClockInfo", label, || dev.clock_info(*clock));
        max[i] = c.call("nvmlDeviceGetMaxClockInfo", label, || {
            dev.max_clock_info(*clock)
        });
    }
    let clocks = |v: [Option<u32>; 4]| Clocks {
        sm: v[0],
        memory: v[1],
        graphics: v[2],
        video: v[3],
    };
    s.clocks = clocks(current);
    s.clocks_max = clocks(max);
    s.performance_state = c
        .call("nvmlDeviceGetPerformanceState", "", || {
            dev.performance_state()
        })
        .filter(|p| *p != PerformanceState::Unknown)
        .map(|p| p.as_c());
}

pub fn clock_events(dev: &Device<'_>, c: &mut Calls<'_>, s: &mut GpuSample) {
    s.clock_events = c
        .call("nvmlDeviceGetCurrentClocksThrottleReasons", "", || {
            dev.current_throttle_reasons()
        })
        .map(|r| ClockEvents(r.bits()));
}

pub fn ecc(dev: &Device<'_>, c: &mut Calls<'_>, s: &mut GpuSample) {
    const F: &str = "nvmlDeviceGetTotalEccErrors";
    s.ecc = Ecc {
        corrected_volatile: c.call(F, "corrected_volatile", || {
            dev.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile)
        }),
        uncorrected_volatile: c.call(F, "uncorrected_volatile", || {
            dev.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
        }),
        corrected_aggregate: c.call(F, "corrected_aggregate", || {
            dev.total_ecc_errors(MemoryError::Corrected, EccCounter::Aggregate)
        }),
        uncorrected_aggregate: c.call(F, "uncorrected_aggregate", || {
            dev.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Aggregate)
        }),
    };
}

pub fn retired_pages(dev: &Device<'_>, c: &mut Calls<'_>, s: &mut GpuSample) {
    const F: &str = "nvmlDeviceGetRetiredPages";
    let sbe = c.call(F, "sbe", || {
        retired_page_count(dev, RetirementCause::MultipleSingleBitEccErrors)
    });
    let dbe = c.call(F, "dbe", || {
        retired_page_count(dev, RetirementCause::DoubleBitEccError)
    });
    let pending = c.call("nvmlDeviceGetRetiredPagesPendingStatus", "", || {
        dev.are_pages_pending_retired()
    });
    s.retired_pages = match (sbe, dbe, pending) {
        (Some(sbe), Some(dbe), Some(pending)) => Some(RetiredPages {
            sbe: u64::from(sbe),
            dbe: u64::from(dbe),
            pending,
        }),
        _ => None,
    };
}

/// The number of pages retired for `cause`. nvml-wrapper's `retired_pages` fetches every
/// address with a second call; only the count matters here.
fn retired_page_count(dev: &Device<'_>, cause: RetirementCause) -> Result<u32, NvmlError> {
    let sym = nvml_sym(dev.nvml().lib().nvmlDeviceGetRetiredPages.as_ref())?;
    let mut count: c_uint = 0;
    // NVML requires a non-null address buffer even when asking for the count only.
    let mut first_address: u64 = 0;
    // SAFETY: the handle belongs to this NVML instance; with `count` 0 NVML writes nothing
    // to the one-element buffer and answers INSUFFICIENT_SIZE with the count.
    nvml_try_count(unsafe { sym(dev.handle(), cause.as_c(), &mut count, &mut first_address) })?;
    Ok(count)
}

pub fn remapped_rows(dev: &Device<'_>, c: &mut Calls<'_>, s: &mut GpuSample) {
    let v = fields(
        dev,
        c,
        &[
            ("remapped_cor", NVML_FI_DEV_REMAPPED_COR),
            ("remapped_unc", NVML_FI_DEV_REMAPPED_UNC),
            ("remapped_pending", NVML_FI_DEV_REMAPPED_PENDING),
            ("remapped_failure", NVML_FI_DEV_REMAPPED_FAILURE),
        ],
    );
    s.remapped_rows = match (v[0], v[1], v[2], v[3]) {
        (Some(cor), Some(unc), Some(pending), Some(failure)) => Some(RemappedRows {
            correctable: cor.max(0.0) as u64,
            uncorrectable: unc.max(0.0) as u64,
            pending: pending != 0.0,
            failure: failure != 0.0,
        }),
        _ => None,
    };
}

/// Reads NVML field values in one call. Each field is its own entry in the unsupported set,
/// since a driver may know some field ids and not others. Values come back as `f64`
/// whatever type NVML chose for them.
fn fields(dev: &Device<'_>, c: &mut Calls<'_>, wanted: &[(&'static str, u32)]) -> Vec<Option<f64>> {
    let mut out = vec![None; wanted.len()];
    // The whole call unsupported (an old driver) is remembered under the empty variant.
    if c.skip(FIELD_VALUES, "") {
        return out;
    }
    let ask: Vec<usize> = (0..wanted.len())
        .filter(|&i| !c.skip(FIELD_VALUES, wanted[i].0))
        .collect();
    if ask.is_empty() {
        return out;
    }
    let ids: Vec<FieldId> = ask.iter().map(|&i| FieldId(wanted[i].1)).collect();
    let Some(samples) = c.settle(FIELD_VALUES, "", dev.field_values_for(&ids)) else {
        return out;
    };
    for (&i, sample) in ask.iter().zip(samples) {
        let label = wanted[i].0;
        let value = sample.and_then(|s| s.value);
        out[i] = c.settle(FIELD_VALUES, label, value).map(|v| match v {
            SampleValue::F64(x) => x,
            SampleValue::U32(x) => f64::from(x),
            SampleValue::U64(x) => x as f64,
            SampleValue::I64(x) => x as f64,
        });
    }
    out
}

pub fn pcie(dev: &Device<'_>, c: &mut Calls<'_>, s: &mut GpuSample) {
    let throughput = |c: &mut Calls<'_>, counter: PcieUtilCounter, label| {
        c.call("nvmlDeviceGetPcieThroughput", label, || {
            dev.pcie_throughput(counter)
        })
        .map(|kb| f64::from(kb) * PCIE_THROUGHPUT_UNIT_BYTES)
    };
    s.pcie = Pcie {
        replay_counter: c
            .call("nvmlDeviceGetPcieReplayCounter", "", || {
                dev.pcie_replay_counter()
            })
            .map(u64::from),
        link_generation: c.call("nvmlDeviceGetCurrPcieLinkGeneration", "", || {
            dev.current_pcie_link_gen()
        }),
        link_width: c.call("nvmlDeviceGetCurrPcieLinkWidth", "", || {
            dev.current_pcie_link_width()
        }),
        link_generation_max: c.call("nvmlDeviceGetMaxPcieLinkGeneration", "", || {
            dev.max_pcie_link_gen()
        }),
        link_width_max: c.call("nvmlDeviceGetMaxPcieLinkWidth", "", || {
            dev.max_pcie_link_width()
        }),
        tx_bytes_per_second: throughput(c, PcieUtilCounter::Send, "tx"),
        rx_bytes_per_second: throughput(c, PcieUtilCounter::Receive, "rx"),
    };
}

/// Error counters of every active NVLink. Links past the GPU's last answer INVALID_ARGUMENT,
/// which ends the scan rather than counting as a failure.
pub fn nvlink(dev: &Device<'_>, c: &mut Calls<'_>, s: &mut GpuSample) {
    const STATE: &str = "nvmlDeviceGetNvLinkState";
    const COUNTER: &str = "nvmlDeviceGetNvLinkErrorCounter";
    let mut links = Vec::new();
    let mut inactive = Vec::new();
    for link in 0..NVML_NVLINK_MAX_LINKS {
        if c.skip(STATE, "") {
            break;
        }
        let wrapper = dev.link_wrapper_for(link);
        let active = match wrapper.is_active() {
            Err(NvmlError::InvalidArg) if link > 0 => break,
            result => c.settle(STATE, "", result),
        };
        if active != Some(true) {
            // Listed by NVML and not active: down, if it was ever up (the health verdict
            // remembers which were).
            if active == Some(false) {
                inactive.push(link);
            }
            continue;
        }
        let mut counter =
            |which: ErrorCounter, label| c.call(COUNTER, label, || wrapper.error_counter(which));
        let replay = counter(ErrorCounter::DlReplay, "replay");
        let recovery = counter(ErrorCounter::DlRecovery, "recovery");
        let crc_flit = counter(ErrorCounter::DlCrcFlit, "crc_flit");
        let crc_data = counter(ErrorCounter::DlCrcData, "crc_data");
        if let (Some(replay), Some(recovery), Some(crc_flit), Some(crc_data)) =
            (replay, recovery, crc_flit, crc_data)
        {
            links.push(NvLinkErrors {
                link,
                replay,
                recovery,
                crc_flit,
                crc_data,
            });
        }
    }
    s.nvlink = links;
    s.nvlink_inactive = inactive;
    s.fabric = c
        .call("nvmlDeviceGetGpuFabricInfo", "", || fabric_info(dev))
        .flatten();
}

/// The GPU's NVLink fabric registration (`nvmlDeviceGetGpuFabricInfo`, which nvml-wrapper
/// 0.13 does not wrap); `None` where the GPU has no fabric (state NOT_SUPPORTED).
fn fabric_info(dev: &Device<'_>) -> Result<Option<Fabric>, NvmlError> {
    let sym = nvml_sym(dev.nvml().lib().nvmlDeviceGetGpuFabricInfo.as_ref())?;
    let mut info = nvmlGpuFabricInfo_t {
        clusterUuid: [0; 16],
        status: 0,
        cliqueId: 0,
        state: 0,
    };
    // SAFETY: the handle belongs to this NVML instance; `info` is a live, correctly laid
    // out nvmlGpuFabricInfo_t that NVML only writes into.
    nvml_try(unsafe { sym(dev.handle(), &mut info) })?;
    let state = match u32::from(info.state) {
        NVML_GPU_FABRIC_STATE_NOT_STARTED => FabricState::NotStarted,
        NVML_GPU_FABRIC_STATE_IN_PROGRESS => FabricState::InProgress,
        NVML_GPU_FABRIC_STATE_COMPLETED => FabricState::Completed,
        _ => return Ok(None),
    };
    Ok(Some(Fabric {
        state,
        status: info.status,
    }))
}

/// Persistence mode and the firmware (driver) version the GPU runs; an empty version (no
/// GSP firmware in use) is none.
pub fn driver_state(dev: &Device<'_>, c: &mut Calls<'_>, s: &mut GpuSample) {
    s.persistence_mode = c.call("nvmlDeviceGetPersistenceMode", "", || {
        dev.is_in_persistent_mode()
    });
    s.firmware_version = c
        .call("nvmlDeviceGetGspFirmwareVersion", "", || {
            dev.gsp_firmware_version()
        })
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty());
}
