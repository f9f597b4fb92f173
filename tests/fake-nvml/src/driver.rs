//! What the health verdicts read of the driver's view of a GPU: persistence mode, the GSP
//! firmware version, and the NVLink fabric registration, answered from the sample (a value
//! the sample does not have answers NOT_SUPPORTED).

use std::os::raw::c_char;

use gpu_sentinel::model::FabricState;
use nvml_wrapper_sys::bindings::*;

use crate::codes::NOT_SUPPORTED;
use crate::out::{write, write_str};
use crate::state::enter_device;

/// `NVML_GSP_FIRMWARE_VERSION_BUF_SIZE`: the caller's buffer, which carries no length.
const GSP_VERSION_BUFFER: u32 = 0x40;

/// # Safety
/// `device` is one of ours; `mode` is null or valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPersistenceMode(
    device: nvmlDevice_t,
    mode: *mut nvmlEnableState_t,
) -> nvmlReturn_t {
    enter_device("nvmlDeviceGetPersistenceMode", device, |state, index| {
        let on = state.sample(index)?.persistence_mode.ok_or(NOT_SUPPORTED)?;
        let value = if on {
            nvmlEnableState_enum_NVML_FEATURE_ENABLED
        } else {
            nvmlEnableState_enum_NVML_FEATURE_DISABLED
        };
        // SAFETY: the caller's output contract, passed on.
        unsafe { write(mode, value) }
    })
}

/// # Safety
/// `device` is one of ours; `version` is null or valid for 64 bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGspFirmwareVersion(
    device: nvmlDevice_t,
    version: *mut c_char,
) -> nvmlReturn_t {
    enter_device("nvmlDeviceGetGspFirmwareVersion", device, |state, index| {
        let text = state
            .sample(index)?
            .firmware_version
            .clone()
            .ok_or(NOT_SUPPORTED)?;
        // SAFETY: the caller's buffer contract, passed on.
        unsafe { write_str(version, GSP_VERSION_BUFFER, &text) }
    })
}

/// # Safety
/// `device` is one of ours; `info` is null or valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuFabricInfo(
    device: nvmlDevice_t,
    info: *mut nvmlGpuFabricInfo_t,
) -> nvmlReturn_t {
    enter_device("nvmlDeviceGetGpuFabricInfo", device, |state, index| {
        let fabric = state.sample(index)?.fabric.ok_or(NOT_SUPPORTED)?;
        let value = nvmlGpuFabricInfo_t {
            clusterUuid: [0; 16],
            status: fabric.status,
            cliqueId: 0,
            state: match fabric.state {
                FabricState::NotStarted => NVML_GPU_FABRIC_STATE_NOT_STARTED,
                FabricState::InProgress => NVML_GPU_FABRIC_STATE_IN_PROGRESS,
                FabricState::Completed => NVML_GPU_FABRIC_STATE_COMPLETED,
            } as nvmlGpuFabricState_t,
        };
        // SAFETY: the caller's output contract, passed on.
        unsafe { write(info, value) }
    })
}
