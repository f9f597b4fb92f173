//! Initialisation, shutdown, system-wide queries and device enumeration.

use std::os::raw::{c_char, c_int, c_uint};

use nvml_wrapper_sys::bindings::{nvmlDevice_t, nvmlReturn_t};

use crate::codes::*;
use crate::out::{write, write_str};
use crate::scenario::Scenario;
use crate::state::{self, State, device_handle, enter, guarded, record_call};

/// Initialises the fake: on the first call, reads the scenario and builds the fleet. A bad
/// scenario fails with NVML_ERROR_UNKNOWN and says why on stderr. Reference-counted like NVML.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlInit_v2() -> nvmlReturn_t {
    const NAME: &str = "nvmlInit_v2";
    guarded(NAME, || {
        record_call(NAME, None);
        let mut guard = state::lock();
        if guard.is_none() {
            match Scenario::from_env() {
                Ok(scenario) => *guard = Some(State::new(scenario)),
                Err(why) => {
                    eprintln!("fake-nvml: nvmlInit_v2 fails: {why}");
                    return UNKNOWN;
                }
            }
        }
        let Some(state) = guard.as_mut() else {
            return UNKNOWN;
        };
        let (error, delay) = state::init_fault(state);
        if let Some(code) = error {
            return code;
        }
        state.init_refs += 1;
        drop(guard);
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        SUCCESS
    })
}

/// Releases one reference. Faults do not apply: a shutdown always counts, so that
/// re-initialisation cycles under an injected outage keep the reference count honest.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlShutdown() -> nvmlReturn_t {
    const NAME: &str = "nvmlShutdown";
    guarded(NAME, || {
        record_call(NAME, None);
        let mut guard = state::lock();
        match guard.as_mut() {
            Some(state) if state.init_refs > 0 => {
                state.init_refs -= 1;
                SUCCESS
            }
            _ => UNINITIALIZED,
        }
    })
}

/// # Safety
/// `version` is null or valid for `length` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(
    version: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    enter("nvmlSystemGetDriverVersion", None, |state| {
        let text = state
            .fleet
            .host()
            .driver_version
            .clone()
            .unwrap_or_default();
        // SAFETY: the caller's buffer contract, passed on.
        unsafe { write_str(version, length, &text) }
    })
}

/// # Safety
/// `cuda_driver_version` is null or valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(
    cuda_driver_version: *mut c_int,
) -> nvmlReturn_t {
    enter("nvmlSystemGetCudaDriverVersion_v2", None, |state| {
        // "12.8" → 12080, CUDA's encoding (major × 1000 + minor × 10).
        let text = state.fleet.host().cuda_version.clone().unwrap_or_default();
        let mut parts = text.split('.').map(|p| p.parse::<c_int>().unwrap_or(0));
        let major = parts.next().unwrap_or(0);
        let minor = parts.next().unwrap_or(0);
        // SAFETY: the caller's output contract, passed on.
        unsafe { write(cuda_driver_version, major * 1000 + minor * 10) }
    })
}

/// # Safety
/// `device_count` is null or valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(device_count: *mut c_uint) -> nvmlReturn_t {
    enter("nvmlDeviceGetCount_v2", None, |state| {
        let count = c_uint::try_from(state.listed_count()).unwrap_or(c_uint::MAX);
        // SAFETY: the caller's output contract, passed on.
        unsafe { write(device_count, count) }
    })
}

/// A lost GPU answers GPU_IS_LOST here already, as a GPU that fell off the bus does. After a
/// `[[vanish]]`, NVML index `index` names the `index`-th GPU still listed; faults and call
/// counts keep following the simulated GPU (its index in the fleet).
///
/// # Safety
/// `device` is null or valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    const NAME: &str = "nvmlDeviceGetHandleByIndex_v2";
    let listed = state::lock()
        .as_ref()
        .and_then(|s| s.listed(index as usize));
    let Some(gpu) = listed else {
        // Past the end of the list (or uninitialised, which the common path answers).
        return enter(NAME, None, |_| Err(INVALID_ARGUMENT));
    };
    enter(NAME, u32::try_from(gpu).ok(), |_| {
        // SAFETY: the caller's output contract, passed on.
        unsafe { write(device, device_handle(gpu)) }
    })
}
