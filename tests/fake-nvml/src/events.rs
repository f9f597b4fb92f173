//! Event sets: XIDs raised by the simulator (falling off the bus raises 79, memory wear 48,
//! 63, 94, …) are delivered to the sets registered for their GPU, keeping only the last XID
//! per GPU between waits, as NVML does.

use std::os::raw::{c_uint, c_ulonglong};
use std::time::{Duration, Instant};

use nvml_wrapper_sys::bindings::*;

use crate::codes::*;
use crate::out::write;
use crate::state::{self, EventSet, device_handle, enter, enter_device};

/// Event types the simulated GPUs offer.
const SUPPORTED_EVENTS: c_ulonglong = (nvmlEventTypeSingleBitEccError
    | nvmlEventTypeDoubleBitEccError
    | nvmlEventTypePState
    | nvmlEventTypeXidCriticalError
    | nvmlEventTypeClock) as c_ulonglong;
/// How often a waiting call looks for new events.
const POLL: Duration = Duration::from_millis(10);

fn set_handle(id: usize) -> nvmlEventSet_t {
    std::ptr::without_provenance_mut::<nvmlEventSet_st>(id)
}

/// # Safety
/// `set` is null or valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetCreate(set: *mut nvmlEventSet_t) -> nvmlReturn_t {
    enter("nvmlEventSetCreate", None, |state| {
        if set.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        let id = state.new_handle();
        state.event_sets.insert(id, EventSet::default());
        // SAFETY: the caller's output contract, passed on.
        unsafe { write(set, set_handle(id)) }
    })
}

/// # Safety
/// `device` is one of ours; `event_types` is null or valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetSupportedEventTypes(
    device: nvmlDevice_t,
    event_types: *mut c_ulonglong,
) -> nvmlReturn_t {
    enter_device("nvmlDeviceGetSupportedEventTypes", device, |_, _| {
        // SAFETY: the caller's output contract, passed on.
        unsafe { write(event_types, SUPPORTED_EVENTS) }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceRegisterEvents(
    device: nvmlDevice_t,
    event_types: c_ulonglong,
    set: nvmlEventSet_t,
) -> nvmlReturn_t {
    enter_device("nvmlDeviceRegisterEvents", device, |state, index| {
        if event_types & !SUPPORTED_EVENTS != 0 {
            return Err(NOT_SUPPORTED);
        }
        let set = state
            .event_sets
            .get_mut(&set.addr())
            .ok_or(INVALID_ARGUMENT)?;
        *set.devices.entry(index).or_insert(0) |= event_types;
        Ok(())
    })
}

/// Waits up to `timeoutms` for an event of `set`, without holding the fake's lock while
/// waiting. Injected faults (errors, delays) apply on entry.
///
/// # Safety
/// `data` is null or valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetWait_v2(
    set: nvmlEventSet_t,
    data: *mut nvmlEventData_t,
    timeoutms: c_uint,
) -> nvmlReturn_t {
    const NAME: &str = "nvmlEventSetWait_v2";
    let entry = enter(NAME, None, |state| {
        if data.is_null() || !state.event_sets.contains_key(&set.addr()) {
            return Err(INVALID_ARGUMENT);
        }
        Ok(())
    });
    if entry != SUCCESS {
        return entry;
    }
    state::guarded(NAME, || {
        let deadline = Instant::now() + Duration::from_millis(u64::from(timeoutms));
        loop {
            let next = {
                let mut guard = state::lock();
                let Some(state) = guard.as_mut().filter(|s| s.init_refs > 0) else {
                    return UNINITIALIZED;
                };
                state.tick();
                let Some(events) = state.event_sets.get_mut(&set.addr()) else {
                    return INVALID_ARGUMENT; // freed while waiting
                };
                events.pending.pop_front()
            };
            if let Some((gpu, xid)) = next {
                let event = nvmlEventData_t {
                    device: device_handle(gpu),
                    eventType: c_ulonglong::from(nvmlEventTypeXidCriticalError),
                    eventData: xid,
                    gpuInstanceId: 0xFFFF_FFFF,
                    computeInstanceId: 0xFFFF_FFFF,
                };
                // SAFETY: checked non-null on entry; valid by the caller's contract.
                return match unsafe { write(data, event) } {
                    Ok(()) => SUCCESS,
                    Err(code) => code,
                };
            }
            let now = Instant::now();
            if now >= deadline {
                return TIMEOUT;
            }
            std::thread::sleep(POLL.min(deadline - now));
        }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlEventSetFree(set: nvmlEventSet_t) -> nvmlReturn_t {
    enter("nvmlEventSetFree", None, |state| {
        state
            .event_sets
            .remove(&set.addr())
            .map(|_| ())
            .ok_or(INVALID_ARGUMENT)
    })
}
