//! Compute processes and their utilization samples: the simulator's processes plus the
//! scenario's (real host PIDs, for ghost-process tests).

use std::os::raw::c_uint;

use nvml_wrapper_sys::bindings::*;

use crate::codes::*;
use crate::out::percent;
use crate::state::{FakeProcess, enter, enter_device, mig_of};

/// nvmlProcessInfo_t: "not in a MIG instance".
const NO_INSTANCE: c_uint = 0xFFFF_FFFF;

/// NVML's count protocol: with `*count` too small (or `infos` null), the needed count and
/// INSUFFICIENT_SIZE; an empty list is SUCCESS with 0. On a GPU handle every process, with
/// the MIG instance it runs in; on a MIG device handle only that instance's.
///
/// # Safety
/// `device` is one of ours; `info_count` is null or valid for reading and writing; `infos`
/// is null or valid for `*info_count` writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: nvmlDevice_t,
    info_count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    const NAME: &str = "nvmlDeviceGetComputeRunningProcesses_v3";
    if let Some((index, gi, ci)) = mig_of(device) {
        return enter(NAME, u32::try_from(index).ok(), |state| {
            state.mig_instance(index, gi, ci).ok_or(INVALID_ARGUMENT)?;
            let mut processes = state.processes(index);
            processes.retain(|p| p.instance == Some((gi, ci)));
            // SAFETY: the caller's contract, passed on.
            unsafe { write_processes(&processes, info_count, infos) }
        });
    }
    enter_device(NAME, device, |state, index| {
        let processes = state.processes(index);
        // SAFETY: the caller's contract, passed on.
        unsafe { write_processes(&processes, info_count, infos) }
    })
}

/// Writes `processes` by NVML's count protocol.
///
/// # Safety
/// As [`nvmlDeviceGetComputeRunningProcesses_v3`]'s.
unsafe fn write_processes(
    processes: &[FakeProcess],
    info_count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> Result<(), nvmlReturn_t> {
    if info_count.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    let n = c_uint::try_from(processes.len()).unwrap_or(c_uint::MAX);
    // SAFETY: `info_count` is non-null and valid by the caller's contract; `infos` holds
    // `capacity` entries when non-null.
    unsafe {
        let capacity = *info_count;
        *info_count = n;
        if n == 0 {
            return Ok(());
        }
        if infos.is_null() || capacity < n {
            return Err(INSUFFICIENT_SIZE);
        }
        for (i, p) in processes.iter().enumerate() {
            let (gi, ci) = p.instance.unwrap_or((NO_INSTANCE, NO_INSTANCE));
            infos.add(i).write(nvmlProcessInfo_t {
                pid: p.pid,
                usedGpuMemory: p.used_memory_bytes,
                gpuInstanceId: gi,
                computeInstanceId: ci,
            });
        }
    }
    Ok(())
}

/// One sample per busy process, stamped with the simulated time; none newer than
/// `last_seen_time_stamp` answers NOT_FOUND, as NVML does.
///
/// # Safety
/// `device` is one of ours; `count` is null or valid for reading and writing;
/// `utilization` is null or valid for `*count` writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetProcessUtilization(
    device: nvmlDevice_t,
    utilization: *mut nvmlProcessUtilizationSample_t,
    count: *mut c_uint,
    last_seen_time_stamp: std::os::raw::c_ulonglong,
) -> nvmlReturn_t {
    enter_device("nvmlDeviceGetProcessUtilization", device, |state, index| {
        if count.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        let now_us = u64::try_from(state.fleet.now().timestamp_micros()).unwrap_or(0);
        if now_us <= last_seen_time_stamp {
            return Err(NOT_FOUND);
        }
        // In MIG mode NVML keeps no per-process utilization.
        if state.mig_instances(index).is_some() {
            return Err(NOT_SUPPORTED);
        }
        let busy: Vec<(u32, f64)> = state
            .processes(index)
            .into_iter()
            .filter(|p| p.sm_utilization > 0.0)
            .map(|p| (p.pid, p.sm_utilization))
            .collect();
        if busy.is_empty() {
            return Err(NOT_FOUND);
        }
        let n = c_uint::try_from(busy.len()).unwrap_or(c_uint::MAX);
        // SAFETY: as documented above.
        unsafe {
            let capacity = *count;
            *count = n;
            if utilization.is_null() || capacity < n {
                return Err(INSUFFICIENT_SIZE);
            }
            for (i, (pid, sm)) in busy.iter().enumerate() {
                utilization.add(i).write(nvmlProcessUtilizationSample_t {
                    pid: *pid,
                    timeStamp: now_us,
                    smUtil: percent(*sm),
                    memUtil: 0,
                    encUtil: 0,
                    decUtil: 0,
                });
            }
        }
        Ok(())
    })
}
