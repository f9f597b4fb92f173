//! A stand-in for `libnvidia-ml.so.1` that answers NVML's C calls from gpu-sentinel's fleet
//! simulator, so the production path (nvml-wrapper, dlopen, symbols, struct layouts, error
//! codes) runs end to end on machines without a GPU.
//!
//! It exports the NVML functions gpu-sentinel's NVML source calls, with the exact versioned
//! names and signatures nvml-wrapper 0.13 uses ([`signatures`] proves the latter at compile
//! time). State is process-wide: the first `nvmlInit_v2` reads the scenario (see
//! [`scenario`] for the file format) and builds the simulated fleet; later inits only count
//! references, so a re-initialising client finds the same GPUs and the same fault clock.
//!
//! Every export goes through [`state::enter`]: it counts the call (readable through
//! [`fake_nvml_call_count`]), applies the scenario's faults, answers GPU_IS_LOST for GPUs the
//! simulator lost, and catches panics so none crosses the C boundary.
//!
//! Besides NVML's functions it exports a few test-only ones, all prefixed `fake_nvml_`.

// The exported functions' safety contract is NVML's own (nvml.h): output pointers are null
// or valid for the documented writes. Each function's doc says which pointers it writes.
#![allow(clippy::missing_safety_doc)]
// Patterns match nvml.h's constants under the names bindgen gave them, as nvml-wrapper does.
#![allow(non_upper_case_globals)]

pub mod codes;
mod device;
mod driver;
mod events;
mod gpm;
mod mig;
mod out;
mod processes;
pub mod scenario;
mod signatures;
mod state;
mod system;

use std::ffi::CStr;
use std::os::raw::c_char;

use nvml_wrapper_sys::bindings::nvmlReturn_t;

use crate::codes::{SUCCESS, UNINITIALIZED};
use crate::scenario::ProcessSpec;

fn name_of(name: *const c_char) -> Option<String> {
    if name.is_null() {
        return None;
    }
    // SAFETY: non-null; the caller passes a NUL-terminated string.
    unsafe { CStr::from_ptr(name) }
        .to_str()
        .ok()
        .map(str::to_string)
}

/// How many times the NVML function `name` was called in this process (on any GPU).
///
/// # Safety
/// `name` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fake_nvml_call_count(name: *const c_char) -> u64 {
    state::guarded_value(|| name_of(name).map_or(0, |n| state::call_count(&n, None)))
}

/// How many times the NVML function `name` was called for GPU `gpu`.
///
/// # Safety
/// `name` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fake_nvml_gpu_call_count(name: *const c_char, gpu: u32) -> u64 {
    state::guarded_value(|| name_of(name).map_or(0, |n| state::call_count(&n, Some(gpu))))
}

/// Forgets every call counted so far.
#[unsafe(no_mangle)]
pub extern "C" fn fake_nvml_reset_call_counts() {
    state::guarded_value(state::reset_call_counts)
}

/// Moves simulated time forward by `seconds` (the way to move it in `mode = "manual"`),
/// delivering the XIDs raised meanwhile. UNINITIALIZED before the first `nvmlInit_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn fake_nvml_advance(seconds: f64) -> nvmlReturn_t {
    state::guarded("fake_nvml_advance", || {
        let mut guard = state::lock();
        match guard.as_mut() {
            Some(state) => {
                if seconds.is_finite() && seconds > 0.0 {
                    state.advance(seconds);
                }
                SUCCESS
            }
            None => UNINITIALIZED,
        }
    })
}

/// Simulated seconds since the fleet started; -1 before the first `nvmlInit_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn fake_nvml_sim_seconds() -> f64 {
    state::guarded_value(|| {
        state::lock()
            .as_ref()
            .map_or(-1.0, |s| s.fleet.elapsed_seconds())
    })
}

/// Makes GPU `gpu` report process `pid` holding `used_memory_bytes` at `sm_utilization`
/// (0–1), replacing an earlier entry for the same PID. UNINITIALIZED before the first init.
#[unsafe(no_mangle)]
pub extern "C" fn fake_nvml_set_process(
    gpu: u32,
    pid: u32,
    used_memory_bytes: u64,
    sm_utilization: f64,
) -> nvmlReturn_t {
    state::guarded("fake_nvml_set_process", || {
        let mut guard = state::lock();
        let Some(state) = guard.as_mut() else {
            return UNINITIALIZED;
        };
        state.extra_processes.retain(|p| p.pid != pid);
        state.extra_processes.push(ProcessSpec {
            gpu,
            pid,
            used_memory_bytes,
            sm_utilization: sm_utilization.clamp(0.0, 1.0),
            gpu_instance: None,
            compute_instance: None,
        });
        SUCCESS
    })
}

/// Stops reporting process `pid` (one added by scenario or [`fake_nvml_set_process`]).
#[unsafe(no_mangle)]
pub extern "C" fn fake_nvml_remove_process(pid: u32) -> nvmlReturn_t {
    state::guarded("fake_nvml_remove_process", || {
        let mut guard = state::lock();
        let Some(state) = guard.as_mut() else {
            return UNINITIALIZED;
        };
        state.extra_processes.retain(|p| p.pid != pid);
        SUCCESS
    })
}
