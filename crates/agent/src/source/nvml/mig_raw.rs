//! The MIG calls nvml-wrapper 0.13 has no safe method for, made through its raw function
//! table (`Nvml::lib`): a MIG device's GPU and compute instance ids, a GPU-instance
//! profile's description, and a GPU instance's profile and placement.
//!
//! Each symbol is looked up before the call, so a driver without it answers
//! `FailedToLoadSymbol` (remembered as unsupported) instead of the panic nvml-wrapper-sys's
//! own call helpers end in. The handles NVML hands back here (GPU instances) belong to
//! NVML and are never freed by the caller.

use std::mem;
use std::os::raw::c_uint;

use nvml_wrapper::error::{NvmlError, nvml_sym, nvml_try};
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::{
    nvmlGpuInstance_t, nvmlGpuInstanceInfo_t, nvmlGpuInstanceProfileInfo_v2_t,
};

/// One GPU-instance profile as the driver describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProfileInfo {
    /// The profile id a GPU instance's info names.
    pub id: u32,
    /// As `nvidia-smi` names it (`1g.10gb`); NVML writes it with a `MIG ` prefix.
    pub name: String,
    pub slices: u32,
    pub memory_mib: u64,
}

/// A GPU instance's profile id and placement (first memory slice, count).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GpuInstanceInfo {
    pub(crate) profile_id: u32,
    pub start: u32,
    pub size: u32,
}

/// `nvmlDeviceGetGpuInstanceId` of a MIG device handle.
pub fn gpu_instance_id(nvml: &Nvml, mig: &Device<'_>) -> Result<u32, NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlDeviceGetGpuInstanceId.as_ref())?;
    let mut id: c_uint = 0;
    // SAFETY: `mig` is a live handle of this `nvml`; NVML writes one unsigned int.
    nvml_try(unsafe { sym(mig.handle(), &mut id) })?;
    Ok(id)
}

/// `nvmlDeviceGetComputeInstanceId` of a MIG device handle.
pub(crate) fn compute_instance_id(nvml: &Nvml, mig: &Device<'_>) -> Result<u32, NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlDeviceGetComputeInstanceId.as_ref())?;
    let mut id: c_uint = 0;
    // SAFETY: as above.
    nvml_try(unsafe { sym(mig.handle(), &mut id) })?;
    Ok(id)
}

/// `nvmlDeviceGetGpuInstanceProfileInfoV` for profile index `index` of a GPU in MIG mode.
/// A profile the GPU does not offer answers `NotSupported` or `InvalidArg`.
pub(crate) fn profile_info(
    nvml: &Nvml,
    gpu: &Device<'_>,
    index: u32,
) -> Result<ProfileInfo, NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlDeviceGetGpuInstanceProfileInfoV.as_ref())?;
    // SAFETY: a plain C struct, all-zero is a valid value.
    let mut info: nvmlGpuInstanceProfileInfo_v2_t = unsafe { mem::zeroed() };
    // NVML_STRUCT_VERSION(GpuInstanceProfileInfo, 2): the size, and the version in the top byte.
    info.version = (mem::size_of::<nvmlGpuInstanceProfileInfo_v2_t>() | (2 << 24)) as u32;
    // SAFETY: a live handle and a struct of the version we declared.
    nvml_try(unsafe { sym(gpu.handle(), index, &mut info) })?;
    let bytes: Vec<u8> = info
        .name
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    let name = String::from_utf8_lossy(&bytes);
    Ok(ProfileInfo {
        id: info.id,
        name: profile_name(&name),
        slices: info.sliceCount,
        memory_mib: info.memorySizeMB,
    })
}

/// `nvmlDeviceGetGpuInstanceById` then `nvmlGpuInstanceGetInfo`: GPU instance `id`'s
/// profile and placement.
pub(crate) fn gpu_instance_info(
    nvml: &Nvml,
    gpu: &Device<'_>,
    id: u32,
) -> Result<GpuInstanceInfo, NvmlError> {
    let by_id = nvml_sym(nvml.lib().nvmlDeviceGetGpuInstanceById.as_ref())?;
    let get_info = nvml_sym(nvml.lib().nvmlGpuInstanceGetInfo.as_ref())?;
    let mut instance: nvmlGpuInstance_t = std::ptr::null_mut();
    // SAFETY: a live handle; NVML writes one handle it owns.
    nvml_try(unsafe { by_id(gpu.handle(), id, &mut instance) })?;
    // SAFETY: a plain C struct, all-zero is a valid value.
    let mut info: nvmlGpuInstanceInfo_t = unsafe { mem::zeroed() };
    // SAFETY: the GPU instance handle NVML just gave; NVML writes the struct.
    nvml_try(unsafe { get_info(instance, &mut info) })?;
    Ok(GpuInstanceInfo {
        profile_id: info.profileId,
        start: info.placement.start,
        size: info.placement.size,
    })
}

/// A profile's name as `nvidia-smi` and the device plugin's resources write it: NVML's
/// without its `MIG ` prefix.
pub(crate) fn profile_name(nvml_name: &str) -> String {
    let name = nvml_name.trim();
    name.strip_prefix("MIG ").unwrap_or(name).trim().to_string()
}

/// A profile's name from its compute slices and memory where the driver gives none:
/// `<slices>g.<GB>gb`, the GB rounded up as the device plugin does.
pub(crate) fn name_from_size(slices: u32, memory_mib: u64) -> String {
    format!("{slices}g.{}gb", memory_mib.div_ceil(1024))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_lose_the_mig_prefix() {
        assert_eq!(profile_name("MIG 1g.10gb"), "1g.10gb");
        assert_eq!(profile_name("MIG 1g.18gb+me "), "1g.18gb+me");
        assert_eq!(profile_name("3g.40gb"), "3g.40gb");
        assert_eq!(name_from_size(1, 9984), "1g.10gb");
        assert_eq!(name_from_size(3, 71_424), "3g.70gb");
    }
}
