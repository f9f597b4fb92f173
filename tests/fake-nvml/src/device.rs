//! Per-device queries, answered from the simulated GPU's current sample. A value the sample
//! does not have (`None`) answers NVML_ERROR_NOT_SUPPORTED, as the real call does on a GPU
//! without that feature.

use std::os::raw::{c_char, c_int, c_uint, c_ulonglong};

use gpu_sentinel::model::GpuSample;
use nvml_wrapper_sys::bindings::field_id::*;
use nvml_wrapper_sys::bindings::*;

use crate::codes::*;
use crate::out::{fill_array, percent, write, write_str};
use crate::state::{State, enter, enter_device, mig_of};

/// NVML's PCIe throughput unit (see gpu-sentinel's `PCIE_THROUGHPUT_UNIT_BYTES`).
const PCIE_KB: f64 = gpu_sentinel::source::nvml::PCIE_THROUGHPUT_UNIT_BYTES;
/// nvml.h: sampling period of the encoder/decoder utilization, microseconds.
const CODEC_SAMPLING_US: c_uint = 167_000;
/// PCI ids of an H100 SXM5 (device 0x2330, vendor 0x10DE; board 0x16C1).
const PCI_DEVICE_ID: c_uint = 0x2330_10DE;
const PCI_SUBSYSTEM_ID: c_uint = 0x16C1_10DE;

fn sample(state: &mut State, index: usize) -> Result<&GpuSample, nvmlReturn_t> {
    state.sample(index)
}

fn supported<T>(value: Option<T>) -> Result<T, nvmlReturn_t> {
    value.ok_or(NOT_SUPPORTED)
}

/// Answers a device call with one value read from the sample.
macro_rules! device_value {
    ($name:ident, $out_ty:ty, |$s:ident| $value:expr) => {
        /// # Safety
        /// `device` is a handle from `nvmlDeviceGetHandleByIndex_v2`; `out` is null or
        /// valid for one write.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(device: nvmlDevice_t, out: *mut $out_ty) -> nvmlReturn_t {
            enter_device(stringify!($name), device, |state, index| {
                let $s = sample(state, index)?;
                let value: $out_ty = $value;
                // SAFETY: the caller's output contract, passed on.
                unsafe { write(out, value) }
            })
        }
    };
}

device_value!(nvmlDeviceGetPowerUsage, c_uint, |s| {
    (supported(s.power_watts)? * 1000.0).round() as c_uint
});
device_value!(nvmlDeviceGetEnforcedPowerLimit, c_uint, |s| {
    (supported(s.power_limit_watts)? * 1000.0).round() as c_uint
});
device_value!(nvmlDeviceGetTotalEnergyConsumption, c_ulonglong, |s| {
    (supported(s.energy_joules)? * 1000.0).round() as c_ulonglong
});
device_value!(nvmlDeviceGetPerformanceState, nvmlPstates_t, |s| {
    supported(s.performance_state)?
});
device_value!(
    nvmlDeviceGetCurrentClocksThrottleReasons,
    c_ulonglong,
    |s| { supported(s.clock_events)?.0 }
);
device_value!(nvmlDeviceGetPcieReplayCounter, c_uint, |s| {
    c_uint::try_from(supported(s.pcie.replay_counter)?).unwrap_or(c_uint::MAX)
});
device_value!(nvmlDeviceGetCurrPcieLinkGeneration, c_uint, |s| {
    supported(s.pcie.link_generation)?
});
device_value!(nvmlDeviceGetCurrPcieLinkWidth, c_uint, |s| {
    supported(s.pcie.link_width)?
});
device_value!(nvmlDeviceGetMaxPcieLinkGeneration, c_uint, |s| {
    supported(s.pcie.link_generation_max)?
});
device_value!(nvmlDeviceGetMaxPcieLinkWidth, c_uint, |s| {
    supported(s.pcie.link_width_max)?
});
device_value!(
    nvmlDeviceGetRetiredPagesPendingStatus,
    nvmlEnableState_t,
    |s| {
        if supported(s.retired_pages)?.pending {
            nvmlEnableState_enum_NVML_FEATURE_ENABLED
        } else {
            nvmlEnableState_enum_NVML_FEATURE_DISABLED
        }
    }
);

/// Answers a device call with a string from the sample.
macro_rules! device_string {
    ($name:ident, |$s:ident| $value:expr) => {
        /// # Safety
        /// `device` is a handle from `nvmlDeviceGetHandleByIndex_v2`; `buffer` is null or
        /// valid for `length` bytes.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            device: nvmlDevice_t,
            buffer: *mut c_char,
            length: c_uint,
        ) -> nvmlReturn_t {
            enter_device(stringify!($name), device, |state, index| {
                let $s = sample(state, index)?;
                let text: String = $value;
                // SAFETY: the caller's buffer contract, passed on.
                unsafe { write_str(buffer, length, &text) }
            })
        }
    };
}

/// # Safety
/// `device` is a GPU handle or a MIG device handle of ours; `buffer` is null or valid for
/// `length` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    device: nvmlDevice_t,
    buffer: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    if let Some((index, gi, ci)) = mig_of(device) {
        return enter("nvmlDeviceGetUUID", u32::try_from(index).ok(), |state| {
            let uuid = state
                .mig_instance(index, gi, ci)
                .ok_or(INVALID_ARGUMENT)?
                .uuid;
            // SAFETY: the caller's buffer contract, passed on.
            unsafe { write_str(buffer, length, &uuid) }
        });
    }
    enter_device("nvmlDeviceGetUUID", device, |state, index| {
        let uuid = sample(state, index)?.uuid.clone();
        // SAFETY: the caller's buffer contract, passed on.
        unsafe { write_str(buffer, length, &uuid) }
    })
}

device_string!(nvmlDeviceGetName, |s| s.name.clone());
device_string!(nvmlDeviceGetSerial, |s| supported(s.serial.clone())?);

/// # Safety
/// `device` is one of ours; `pci` is null or valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(
    device: nvmlDevice_t,
    pci: *mut nvmlPciInfo_t,
) -> nvmlReturn_t {
    enter_device("nvmlDeviceGetPciInfo_v3", device, |state, index| {
        let s = sample(state, index)?;
        // The simulator writes NVML's form, "00000000:18:00.0".
        let mut parts = s.pci_bus_id.split([':', '.']);
        let mut next = || u32::from_str_radix(parts.next().unwrap_or("0"), 16).unwrap_or(0);
        let (domain, bus, dev) = (next(), next(), next());
        let mut info = nvmlPciInfo_t {
            busIdLegacy: [0; 16],
            domain,
            bus,
            device: dev,
            pciDeviceId: PCI_DEVICE_ID,
            pciSubSystemId: PCI_SUBSYSTEM_ID,
            busId: [0; 32],
        };
        fill_array(&mut info.busId, &s.pci_bus_id);
        fill_array(
            &mut info.busIdLegacy,
            &format!("{:04X}:{bus:02X}:{dev:02X}.0", domain & 0xffff),
        );
        // SAFETY: the caller's output contract, passed on.
        unsafe { write(pci, info) }
    })
}

/// # Safety
/// `device` is one of ours; `utilization` is null or valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(
    device: nvmlDevice_t,
    utilization: *mut nvmlUtilization_t,
) -> nvmlReturn_t {
    enter_device("nvmlDeviceGetUtilizationRates", device, |state, index| {
        let u = sample(state, index)?.utilization;
        let rates = nvmlUtilization_t {
            gpu: percent(supported(u.gpu)?),
            memory: percent(supported(u.memory_copy)?),
        };
        // SAFETY: the caller's output contract, passed on.
        unsafe { write(utilization, rates) }
    })
}

macro_rules! codec_utilization {
    ($name:ident, $field:ident) => {
        /// # Safety
        /// `device` is one of ours; both outputs are null or valid for one write.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            device: nvmlDevice_t,
            utilization: *mut c_uint,
            sampling_period_us: *mut c_uint,
        ) -> nvmlReturn_t {
            enter_device(stringify!($name), device, |state, index| {
                let value = percent(supported(sample(state, index)?.utilization.$field)?);
                // SAFETY: the caller's output contract, passed on.
                unsafe {
                    write(utilization, value)?;
                    write(sampling_period_us, CODEC_SAMPLING_US)
                }
            })
        }
    };
}

codec_utilization!(nvmlDeviceGetEncoderUtilization, encoder);
codec_utilization!(nvmlDeviceGetDecoderUtilization, decoder);

/// Checks the struct version the way NVML does: size in the low bits, version in the top byte.
///
/// # Safety
/// `device` is one of ours; `memory` is null or valid for reading and writing one struct.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: nvmlDevice_t,
    memory: *mut nvmlMemory_v2_t,
) -> nvmlReturn_t {
    const NAME: &str = "nvmlDeviceGetMemoryInfo_v2";
    let answer = |m: gpu_sentinel::model::Memory| {
        if memory.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        let expected = (std::mem::size_of::<nvmlMemory_v2_t>() | (2 << 24)) as c_uint;
        // SAFETY: non-null and valid for reads by the caller's contract.
        if unsafe { (*memory).version } != expected {
            return Err(ARGUMENT_VERSION_MISMATCH);
        }
        let info = nvmlMemory_v2_t {
            version: expected,
            total: supported(m.total_bytes)?,
            reserved: supported(m.reserved_bytes)?,
            free: supported(m.free_bytes)?,
            used: supported(m.used_bytes)?,
        };
        // SAFETY: the caller's output contract, passed on.
        unsafe { write(memory, info) }
    };
    // On a MIG device handle: its GPU instance's memory.
    if let Some((index, gi, ci)) = mig_of(device) {
        return enter(NAME, u32::try_from(index).ok(), |state| {
            answer(
                state
                    .mig_instance(index, gi, ci)
                    .ok_or(INVALID_ARGUMENT)?
                    .memory,
            )
        });
    }
    enter_device(NAME, device, |state, index| {
        let m = sample(state, index)?.memory;
        answer(m)
    })
}

/// # Safety
/// `device` is one of ours; `memory` is null or valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(
    device: nvmlDevice_t,
    memory: *mut nvmlMemory_t,
) -> nvmlReturn_t {
    enter_device("nvmlDeviceGetMemoryInfo", device, |state, index| {
        let m = sample(state, index)?.memory;
        let info = nvmlMemory_t {
            total: supported(m.total_bytes)?,
            free: supported(m.free_bytes)?,
            used: supported(m.used_bytes)?,
        };
        // SAFETY: the caller's output contract, passed on.
        unsafe { write(memory, info) }
    })
}

/// # Safety
/// `device` is one of ours; `temp` is null or valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTemperature(
    device: nvmlDevice_t,
    sensor_type: nvmlTemperatureSensors_t,
    temp: *mut c_uint,
) -> nvmlReturn_t {
    enter_device("nvmlDeviceGetTemperature", device, |state, index| {
        if sensor_type != nvmlTemperatureSensors_enum_NVML_TEMPERATURE_GPU {
            return Err(INVALID_ARGUMENT);
        }
        let celsius = supported(sample(state, index)?.temperature_celsius)?;
        // SAFETY: the caller's output contract, passed on.
        unsafe { write(temp, celsius.round().max(0.0) as c_uint) }
    })
}

/// # Safety
/// `device` is one of ours; `speed` is null or valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetFanSpeed_v2(
    device: nvmlDevice_t,
    fan: c_uint,
    speed: *mut c_uint,
) -> nvmlReturn_t {
    enter_device("nvmlDeviceGetFanSpeed_v2", device, |state, index| {
        let ratio = supported(sample(state, index)?.fan_speed_ratio)?;
        if fan != 0 {
            return Err(INVALID_ARGUMENT);
        }
        // SAFETY: the caller's output contract, passed on.
        unsafe { write(speed, percent(ratio)) }
    })
}

fn clock_of(
    s: &gpu_sentinel::model::Clocks,
    clock: nvmlClockType_t,
) -> Result<c_uint, nvmlReturn_t> {
    let value = match clock {
        nvmlClockType_enum_NVML_CLOCK_GRAPHICS => s.graphics,
        nvmlClockType_enum_NVML_CLOCK_SM => s.sm,
        nvmlClockType_enum_NVML_CLOCK_MEM => s.memory,
        nvmlClockType_enum_NVML_CLOCK_VIDEO => s.video,
        _ => return Err(INVALID_ARGUMENT),
    };
    supported(value)
}

/// # Safety
/// `device` is one of ours; `clock` is null or valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetClockInfo(
    device: nvmlDevice_t,
    type_: nvmlClockType_t,
    clock: *mut c_uint,
) -> nvmlReturn_t {
    enter_device("nvmlDeviceGetClockInfo", device, |state, index| {
        let mhz = clock_of(&sample(state, index)?.clocks, type_)?;
        // SAFETY: the caller's output contract, passed on.
        unsafe { write(clock, mhz) }
    })
}

/// # Safety
/// `device` is one of ours; `clock` is null or valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMaxClockInfo(
    device: nvmlDevice_t,
    type_: nvmlClockType_t,
    clock: *mut c_uint,
) -> nvmlReturn_t {
    enter_device("nvmlDeviceGetMaxClockInfo", device, |state, index| {
        let mhz = clock_of(&sample(state, index)?.clocks_max, type_)?;
        // SAFETY: the caller's output contract, passed on.
        unsafe { write(clock, mhz) }
    })
}

/// # Safety
/// `device` is one of ours; `ecc_counts` is null or valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTotalEccErrors(
    device: nvmlDevice_t,
    error_type: nvmlMemoryErrorType_t,
    counter_type: nvmlEccCounterType_t,
    ecc_counts: *mut c_ulonglong,
) -> nvmlReturn_t {
    enter_device("nvmlDeviceGetTotalEccErrors", device, |state, index| {
        let e = sample(state, index)?.ecc;
        let corrected = error_type == nvmlMemoryErrorType_enum_NVML_MEMORY_ERROR_TYPE_CORRECTED;
        let uncorrected = error_type == nvmlMemoryErrorType_enum_NVML_MEMORY_ERROR_TYPE_UNCORRECTED;
        let volatile = counter_type == nvmlEccCounterType_enum_NVML_VOLATILE_ECC;
        let aggregate = counter_type == nvmlEccCounterType_enum_NVML_AGGREGATE_ECC;
        let value = match (corrected, uncorrected, volatile, aggregate) {
            (true, _, true, _) => e.corrected_volatile,
            (_, true, true, _) => e.uncorrected_volatile,
            (true, _, _, true) => e.corrected_aggregate,
            (_, true, _, true) => e.uncorrected_aggregate,
            _ => return Err(INVALID_ARGUMENT),
        };
        // SAFETY: the caller's output contract, passed on.
        unsafe { write(ecc_counts, supported(value)?) }
    })
}

/// Count semantics as in NVML: with too small a buffer, the needed count and
/// INSUFFICIENT_SIZE; otherwise the addresses (made up, distinct) and the count.
///
/// # Safety
/// `device` is one of ours; `page_count` is null or valid for reading and writing;
/// `addresses` is null or valid for `*page_count` writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetRetiredPages(
    device: nvmlDevice_t,
    cause: nvmlPageRetirementCause_t,
    page_count: *mut c_uint,
    addresses: *mut c_ulonglong,
) -> nvmlReturn_t {
    enter_device("nvmlDeviceGetRetiredPages", device, |state, index| {
        let pages = supported(sample(state, index)?.retired_pages)?;
        let n = match cause {
            nvmlPageRetirementCause_enum_NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS => {
                pages.sbe
            }
            nvmlPageRetirementCause_enum_NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR => {
                pages.dbe
            }
            _ => return Err(INVALID_ARGUMENT),
        };
        let n = c_uint::try_from(n).unwrap_or(c_uint::MAX);
        if page_count.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        // SAFETY: non-null, valid for reads and writes by the caller's contract; `addresses`
        // holds `capacity` entries when non-null.
        unsafe {
            let capacity = *page_count;
            *page_count = n;
            if capacity < n || addresses.is_null() {
                return if n == 0 {
                    Ok(())
                } else {
                    Err(INSUFFICIENT_SIZE)
                };
            }
            for i in 0..n as usize {
                addresses
                    .add(i)
                    .write(0x1_0000_0000 + 0x1000 * i as c_ulonglong);
            }
        }
        Ok(())
    })
}

/// Field values: memory temperature (82) and remapped rows (142–145); other ids answer
/// NOT_SUPPORTED in their own entry, as NVML does.
///
/// # Safety
/// `device` is one of ours; `values` is null or valid for `values_count` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetFieldValues(
    device: nvmlDevice_t,
    values_count: c_int,
    values: *mut nvmlFieldValue_t,
) -> nvmlReturn_t {
    enter_device("nvmlDeviceGetFieldValues", device, |state, index| {
        if values.is_null() || values_count < 0 {
            return Err(INVALID_ARGUMENT);
        }
        let now_us = state.fleet.now().timestamp_micros();
        let s = sample(state, index)?;
        let remap = s.remapped_rows;
        for i in 0..values_count as usize {
            // SAFETY: `values` holds `values_count` entries by the caller's contract.
            let entry = unsafe { &mut *values.add(i) };
            let value: Option<u64> = match entry.fieldId {
                NVML_FI_DEV_MEMORY_TEMP => s
                    .memory_temperature_celsius
                    .map(|t| t.round().max(0.0) as u64),
                NVML_FI_DEV_REMAPPED_COR => remap.map(|r| r.correctable),
                NVML_FI_DEV_REMAPPED_UNC => remap.map(|r| r.uncorrectable),
                NVML_FI_DEV_REMAPPED_PENDING => remap.map(|r| u64::from(r.pending)),
                NVML_FI_DEV_REMAPPED_FAILURE => remap.map(|r| u64::from(r.failure)),
                _ => None,
            };
            entry.timestamp = now_us;
            entry.latencyUsec = 0;
            entry.valueType = nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_INT;
            match value {
                Some(v) => {
                    entry.nvmlReturn = SUCCESS;
                    entry.value = nvmlValue_t {
                        uiVal: c_uint::try_from(v).unwrap_or(c_uint::MAX),
                    };
                }
                None => entry.nvmlReturn = NOT_SUPPORTED,
            }
        }
        Ok(())
    })
}

/// Throughput in NVML's KB/s.
///
/// # Safety
/// `device` is one of ours; `value` is null or valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPcieThroughput(
    device: nvmlDevice_t,
    counter: nvmlPcieUtilCounter_t,
    value: *mut c_uint,
) -> nvmlReturn_t {
    enter_device("nvmlDeviceGetPcieThroughput", device, |state, index| {
        let p = sample(state, index)?.pcie;
        let bytes = match counter {
            nvmlPcieUtilCounter_enum_NVML_PCIE_UTIL_TX_BYTES => p.tx_bytes_per_second,
            nvmlPcieUtilCounter_enum_NVML_PCIE_UTIL_RX_BYTES => p.rx_bytes_per_second,
            _ => return Err(INVALID_ARGUMENT),
        };
        let kb = (supported(bytes)? / PCIE_KB).round() as c_uint;
        // SAFETY: the caller's output contract, passed on.
        unsafe { write(value, kb) }
    })
}

/// # Safety
/// `device` is one of ours; `is_active` is null or valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkState(
    device: nvmlDevice_t,
    link: c_uint,
    is_active: *mut nvmlEnableState_t,
) -> nvmlReturn_t {
    enter_device("nvmlDeviceGetNvLinkState", device, |state, index| {
        let s = sample(state, index)?;
        if s.nvlink.is_empty() {
            return Err(NOT_SUPPORTED);
        }
        if link >= NVML_NVLINK_MAX_LINKS {
            return Err(INVALID_ARGUMENT);
        }
        // Links the GPU does not have answer INVALID_ARGUMENT, as past a real GPU's last.
        let active = if s.nvlink.iter().any(|l| l.link == link) {
            nvmlEnableState_enum_NVML_FEATURE_ENABLED
        } else if s.nvlink_inactive.contains(&link) {
            nvmlEnableState_enum_NVML_FEATURE_DISABLED
        } else {
            return Err(INVALID_ARGUMENT);
        };
        // SAFETY: the caller's output contract, passed on.
        unsafe { write(is_active, active) }
    })
}

/// # Safety
/// `device` is one of ours; `counter_value` is null or valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkErrorCounter(
    device: nvmlDevice_t,
    link: c_uint,
    counter: nvmlNvLinkErrorCounter_t,
    counter_value: *mut c_ulonglong,
) -> nvmlReturn_t {
    enter_device("nvmlDeviceGetNvLinkErrorCounter", device, |state, index| {
        let s = sample(state, index)?;
        if s.nvlink.is_empty() {
            return Err(NOT_SUPPORTED);
        }
        let errors = s
            .nvlink
            .iter()
            .find(|l| l.link == link)
            .ok_or(INVALID_ARGUMENT)?;
        let value = match counter {
            nvmlNvLinkErrorCounter_enum_NVML_NVLINK_ERROR_DL_REPLAY => errors.replay,
            nvmlNvLinkErrorCounter_enum_NVML_NVLINK_ERROR_DL_RECOVERY => errors.recovery,
            nvmlNvLinkErrorCounter_enum_NVML_NVLINK_ERROR_DL_CRC_FLIT => errors.crc_flit,
            nvmlNvLinkErrorCounter_enum_NVML_NVLINK_ERROR_DL_CRC_DATA => errors.crc_data,
            _ => return Err(NOT_SUPPORTED),
        };
        // SAFETY: the caller's output contract, passed on.
        unsafe { write(counter_value, value) }
    })
}
