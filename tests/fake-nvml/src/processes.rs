//! Compute processes and their utilization samples: the simulator's processes plus the
//! scenario's (real host PIDs, for ghost-process tests).

use std::os::raw::c_uint;

use nvml_wrapper_sys::bindings::*;

use crate::codes::*;
use crate::out::percent;
use crate::state::enter_device;

/// nvmlProcessInfo_t: "not in a MIG instance".
const NO_INSTANCE: c_uint = 0xFFFF_FFFF;

/// NVML's count protocol: with `*count` too small (or `infos` null), the needed count and
/// INSUFFICIENT_SIZE; an empty list is SUCCESS with 0.
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
    enter_device(
        "nvmlDeviceGetComputeRunningProcesses_v3",
        device,
        |state, index| {
            if info_count.is_null() {
                return Err(INVALID_ARGUMENT);
            }
            let processes = state.processes(index);
            let n = c_uint::try_from(processes.len()).unwrap_or(c_uint::MAX);
            // SAFETY: `info_count` is non-null and valid by the caller's contract; `infos`
            // holds `capacity` entries when non-null.
            unsafe {
                let capacity = *info_count;
                *info_count = n;
                if n == 0 {
                    return Ok(());
                }
                if infos.is_null() || capacity < n {
                    return Err(INSUFFICIENT_SIZE);
                }
                for (i, (pid, bytes, _)) in processes.iter().enumerate() {
                    infos.add(i).write(nvmlProcessInfo_t {
                        pid: *pid,
                        usedGpuMemory: *bytes,
                        gpuInstanceId: NO_INSTANCE,
                        computeInstanceId: NO_INSTANCE,
                    });
                }
            }
            Ok(())
        },
    )
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
        let busy: Vec<(u32, f64)> = state
            .processes(index)
            .into_iter()
            .filter(|(_, _, sm)| *sm > 0.0)
            .map(|(pid, _, sm)| (pid, sm))
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
