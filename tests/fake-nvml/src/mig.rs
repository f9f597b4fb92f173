//! MIG: a GPU in MIG mode (its mode, its MIG devices and GPU instances), answered from
//! the simulator's MIG GPUs (`[simulation] mig_gpus`) and the scenario's `[[mig]]` GPUs.
//!
//! MIG device handles name (GPU, GPU instance, compute instance), so a handle keeps naming
//! the same device while it exists and answers INVALID_ARGUMENT once it was destroyed. The
//! GPU-instance profiles are the simulator's tables for the GPU's model.

use std::os::raw::c_uint;

use gpu_sentinel::model::MigInstance;
use gpu_sentinel::source::simulate::mig_profiles::table_for;
use nvml_wrapper_sys::bindings::*;

use crate::codes::*;
use crate::out::{fill_array, write};
use crate::state::{
    MAX_MIG_DEVICES, State, enter, enter_device, gpu_instance_handle, gpu_instance_of, mig_handle,
    mig_of,
};

/// Answers a call on a MIG device handle with `body`'s value from the device.
fn on_mig(
    function: &'static str,
    device: nvmlDevice_t,
    body: impl FnOnce(&mut State, MigInstance) -> Result<(), nvmlReturn_t>,
) -> nvmlReturn_t {
    let Some((index, gi, ci)) = mig_of(device) else {
        // A GPU handle: what it does not have (a MIG device's ids, its attributes).
        return enter_device(function, device, |_, _| Err(INVALID_ARGUMENT));
    };
    enter(function, u32::try_from(index).ok(), |state| {
        let instance = state.mig_instance(index, gi, ci).ok_or(INVALID_ARGUMENT)?;
        body(state, instance)
    })
}

/// # Safety
/// `device` is one of ours; `id` is null or valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceId(
    device: nvmlDevice_t,
    id: *mut c_uint,
) -> nvmlReturn_t {
    on_mig("nvmlDeviceGetGpuInstanceId", device, |_, i| {
        // SAFETY: the caller's output contract, passed on.
        unsafe { write(id, i.gpu_instance) }
    })
}

/// # Safety
/// `device` is one of ours; `id` is null or valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeInstanceId(
    device: nvmlDevice_t,
    id: *mut c_uint,
) -> nvmlReturn_t {
    on_mig("nvmlDeviceGetComputeInstanceId", device, |_, i| {
        // SAFETY: the caller's output contract, passed on.
        unsafe { write(id, i.compute_instance) }
    })
}

/// A MIG device's attributes: its slices, SMs and its GPU instance's memory.
///
/// # Safety
/// `device` is one of ours; `attributes` is null or valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetAttributes_v2(
    device: nvmlDevice_t,
    attributes: *mut nvmlDeviceAttributes_t,
) -> nvmlReturn_t {
    on_mig("nvmlDeviceGetAttributes_v2", device, |_, i| {
        let value = nvmlDeviceAttributes_t {
            multiprocessorCount: i.multiprocessors.unwrap_or(0),
            sharedCopyEngineCount: i.gpu_instance_slices,
            sharedDecoderCount: i.gpu_instance_slices,
            sharedEncoderCount: 0,
            sharedJpegCount: i.gpu_instance_slices,
            sharedOfaCount: 0,
            gpuInstanceSliceCount: i.gpu_instance_slices,
            computeInstanceSliceCount: i.slices,
            memorySizeMB: i.memory.total_bytes.unwrap_or(0) >> 20,
        };
        // SAFETY: the caller's output contract, passed on.
        unsafe { write(attributes, value) }
    })
}

/// A GPU-instance profile of the GPU's model by NVML profile index; one the model does not
/// offer answers NOT_SUPPORTED, a GPU not in MIG mode NOT_SUPPORTED too.
///
/// # Safety
/// `device` is one of ours; `info` is null or valid for reading and writing one struct.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceProfileInfoV(
    device: nvmlDevice_t,
    profile: c_uint,
    info: *mut nvmlGpuInstanceProfileInfo_v2_t,
) -> nvmlReturn_t {
    enter_device(
        "nvmlDeviceGetGpuInstanceProfileInfoV",
        device,
        |state, index| {
            if info.is_null() {
                return Err(INVALID_ARGUMENT);
            }
            let expected =
                (std::mem::size_of::<nvmlGpuInstanceProfileInfo_v2_t>() | (2 << 24)) as c_uint;
            // SAFETY: non-null and valid for reads by the caller's contract.
            if unsafe { (*info).version } != expected {
                return Err(ARGUMENT_VERSION_MISMATCH);
            }
            if profile >= NVML_GPU_INSTANCE_PROFILE_COUNT {
                return Err(INVALID_ARGUMENT);
            }
            state.mig_instances(index).ok_or(NOT_SUPPORTED)?;
            let table = table_for(&state.sample(index)?.name).ok_or(NOT_SUPPORTED)?;
            let p = table.by_index(profile).ok_or(NOT_SUPPORTED)?;
            // SAFETY: a plain C struct, all-zero is a valid value.
            let mut value: nvmlGpuInstanceProfileInfo_v2_t = unsafe { std::mem::zeroed() };
            value.version = expected;
            value.id = p.id;
            value.sliceCount = p.slices;
            value.instanceCount = p.instances;
            value.multiprocessorCount = p.multiprocessors;
            value.copyEngineCount = p.slices;
            value.memorySizeMB = p.memory_mib;
            fill_array(&mut value.name, &format!("MIG {}", p.name));
            // SAFETY: the caller's output contract, passed on.
            unsafe { write(info, value) }
        },
    )
}

/// # Safety
/// `device` is one of ours; `instance` is null or valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceById(
    device: nvmlDevice_t,
    id: c_uint,
    instance: *mut nvmlGpuInstance_t,
) -> nvmlReturn_t {
    enter_device("nvmlDeviceGetGpuInstanceById", device, |state, index| {
        let instances = state.mig_instances(index).ok_or(NOT_SUPPORTED)?;
        if !instances.iter().any(|i| i.gpu_instance == id) {
            return Err(NOT_FOUND);
        }
        let handle =
            std::ptr::without_provenance_mut::<nvmlGpuInstance_st>(gpu_instance_handle(index, id));
        // SAFETY: the caller's output contract, passed on.
        unsafe { write(instance, handle) }
    })
}

/// A GPU instance's profile id and placement.
///
/// # Safety
/// `instance` is null or a handle from `nvmlDeviceGetGpuInstanceById`; `info` is null or
/// valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpuInstanceGetInfo(
    instance: nvmlGpuInstance_t,
    info: *mut nvmlGpuInstanceInfo_t,
) -> nvmlReturn_t {
    let Some((index, gi)) = gpu_instance_of(instance.addr()) else {
        return enter("nvmlGpuInstanceGetInfo", None, |_| Err(INVALID_ARGUMENT));
    };
    enter(
        "nvmlGpuInstanceGetInfo",
        u32::try_from(index).ok(),
        |state| {
            let instances = state.mig_instances(index).ok_or(INVALID_ARGUMENT)?;
            let found = instances
                .iter()
                .find(|i| i.gpu_instance == gi)
                .ok_or(INVALID_ARGUMENT)?;
            let table = table_for(&state.sample(index)?.name).ok_or(INVALID_ARGUMENT)?;
            let placement = found.placement.unwrap_or_default();
            let profile = table
                .profile(found.gpu_instance_slices, placement.size)
                .ok_or(INVALID_ARGUMENT)?;
            let value = nvmlGpuInstanceInfo_t {
                device: crate::state::device_handle(index),
                id: gi,
                profileId: profile.id,
                placement: nvmlGpuInstancePlacement_t {
                    start: placement.start,
                    size: placement.size,
                },
            };
            // SAFETY: the caller's output contract, passed on.
            unsafe { write(info, value) }
        },
    )
}

/// # Safety
/// `device` is one of ours; `count` is null or valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(
    device: nvmlDevice_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    enter_device("nvmlDeviceGetMaxMigDeviceCount", device, |state, index| {
        state.mig_instances(index).ok_or(NOT_SUPPORTED)?;
        // SAFETY: the caller's output contract, passed on.
        unsafe { write(count, MAX_MIG_DEVICES as c_uint) }
    })
}

/// # Safety
/// `device` is one of ours; `mig` is null or valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: nvmlDevice_t,
    slot: c_uint,
    mig: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    enter_device(
        "nvmlDeviceGetMigDeviceHandleByIndex",
        device,
        |state, index| {
            let devices = state.mig_instances(index).ok_or(NOT_SUPPORTED)?;
            // Empty slots answer NOT_FOUND, as the real call does.
            let found = devices
                .iter()
                .take(MAX_MIG_DEVICES)
                .find(|d| d.device_index == slot)
                .ok_or(NOT_FOUND)?;
            let handle = mig_handle(index, found.gpu_instance, found.compute_instance);
            // SAFETY: the caller's output contract, passed on.
            unsafe { write(mig, handle) }
        },
    )
}

/// # Safety
/// `device` is one of ours; both outputs are null or valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: nvmlDevice_t,
    current_mode: *mut c_uint,
    pending_mode: *mut c_uint,
) -> nvmlReturn_t {
    enter_device("nvmlDeviceGetMigMode", device, |state, index| {
        let mode = if state.mig_instances(index).is_some() {
            1
        } else {
            c_uint::from(state.sample(index)?.mig_enabled.ok_or(NOT_SUPPORTED)?)
        };
        // SAFETY: the caller's output contract, passed on.
        unsafe {
            write(current_mode, mode)?;
            write(pending_mode, mode)
        }
    })
}
