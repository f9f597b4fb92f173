//! GPM: samples capture the simulated GPU's (or MIG GPU instance's) GPM state; a metrics
//! request between two samples of the same one answers the ratios of the later one, in
//! NVML's percent.

use std::os::raw::c_uint;

use nvml_wrapper_sys::bindings::*;

use crate::codes::*;
use crate::out::write;
use crate::state::{GpmSnapshot, enter, enter_device};

fn sample_handle(id: usize) -> nvmlGpmSample_t {
    std::ptr::without_provenance_mut::<nvmlGpmSample_st>(id)
}

/// # Safety
/// `device` is one of ours; `gpm_support` is null or valid for reading and writing.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpmQueryDeviceSupport(
    device: nvmlDevice_t,
    gpm_support: *mut nvmlGpmSupport_t,
) -> nvmlReturn_t {
    enter_device("nvmlGpmQueryDeviceSupport", device, |state, index| {
        if gpm_support.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        // SAFETY: non-null and valid for reads by the caller's contract.
        if unsafe { (*gpm_support).version } != NVML_GPM_SUPPORT_VERSION {
            return Err(ARGUMENT_VERSION_MISMATCH);
        }
        let supported = state.sample(index)?.gpm.is_some();
        // SAFETY: the caller's output contract, passed on.
        unsafe {
            write(
                gpm_support,
                nvmlGpmSupport_t {
                    version: NVML_GPM_SUPPORT_VERSION,
                    isSupportedDevice: c_uint::from(supported),
                },
            )
        }
    })
}

/// # Safety
/// `gpm_sample` is null or valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpmSampleAlloc(gpm_sample: *mut nvmlGpmSample_t) -> nvmlReturn_t {
    enter("nvmlGpmSampleAlloc", None, |state| {
        if gpm_sample.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        let id = state.new_handle();
        state.gpm_samples.insert(id, None);
        // SAFETY: the caller's output contract, passed on.
        unsafe { write(gpm_sample, sample_handle(id)) }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlGpmSampleFree(gpm_sample: nvmlGpmSample_t) -> nvmlReturn_t {
    enter("nvmlGpmSampleFree", None, |state| {
        state
            .gpm_samples
            .remove(&gpm_sample.addr())
            .map(|_| ())
            .ok_or(INVALID_ARGUMENT)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlGpmSampleGet(
    device: nvmlDevice_t,
    gpm_sample: nvmlGpmSample_t,
) -> nvmlReturn_t {
    enter_device("nvmlGpmSampleGet", device, |state, index| {
        let gpm = state.sample(index)?.gpm.ok_or(NOT_SUPPORTED)?;
        let slot = state
            .gpm_samples
            .get_mut(&gpm_sample.addr())
            .ok_or(INVALID_ARGUMENT)?;
        *slot = Some(GpmSnapshot {
            gpu: index,
            gpu_instance: None,
            gpm,
        });
        Ok(())
    })
}

/// A sample of one MIG GPU instance: its activity as the simulator reports it.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlGpmMigSampleGet(
    device: nvmlDevice_t,
    gpu_instance_id: c_uint,
    gpm_sample: nvmlGpmSample_t,
) -> nvmlReturn_t {
    enter_device("nvmlGpmMigSampleGet", device, |state, index| {
        let instances = state.mig_instances(index).ok_or(NOT_SUPPORTED)?;
        let gpm = instances
            .iter()
            .find(|i| i.gpu_instance == gpu_instance_id)
            .ok_or(INVALID_ARGUMENT)?
            .gpm
            .ok_or(NOT_SUPPORTED)?;
        let slot = state
            .gpm_samples
            .get_mut(&gpm_sample.addr())
            .ok_or(INVALID_ARGUMENT)?;
        *slot = Some(GpmSnapshot {
            gpu: index,
            gpu_instance: Some(gpu_instance_id),
            gpm,
        });
        Ok(())
    })
}

/// # Safety
/// `metrics_get` is null or valid for reading and writing one request.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpmMetricsGet(metrics_get: *mut nvmlGpmMetricsGet_t) -> nvmlReturn_t {
    enter("nvmlGpmMetricsGet", None, |state| {
        if metrics_get.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        // SAFETY: non-null and valid for reads and writes by the caller's contract.
        let request = unsafe { &mut *metrics_get };
        if request.version != NVML_GPM_METRICS_GET_VERSION {
            return Err(ARGUMENT_VERSION_MISMATCH);
        }
        let taken = |handle: nvmlGpmSample_t| {
            state
                .gpm_samples
                .get(&handle.addr())
                .copied()
                .flatten()
                .ok_or(INVALID_ARGUMENT)
        };
        let first = taken(request.sample1)?;
        let second = taken(request.sample2)?;
        if (first.gpu, first.gpu_instance) != (second.gpu, second.gpu_instance) {
            return Err(INVALID_ARGUMENT);
        }
        let n = request.numMetrics as usize;
        if n > request.metrics.len() {
            return Err(INVALID_ARGUMENT);
        }
        let g = second.gpm;
        for metric in &mut request.metrics[..n] {
            let ratio = match metric.metricId {
                nvmlGpmMetricId_t_NVML_GPM_METRIC_SM_UTIL => g.sm_active,
                nvmlGpmMetricId_t_NVML_GPM_METRIC_SM_OCCUPANCY => g.sm_occupancy,
                nvmlGpmMetricId_t_NVML_GPM_METRIC_ANY_TENSOR_UTIL => g.tensor_active,
                nvmlGpmMetricId_t_NVML_GPM_METRIC_DRAM_BW_UTIL => g.dram_active,
                nvmlGpmMetricId_t_NVML_GPM_METRIC_GRAPHICS_UTIL => g.graphics_active,
                _ => None,
            };
            metric.metricInfo.shortName = std::ptr::null_mut();
            metric.metricInfo.longName = std::ptr::null_mut();
            metric.metricInfo.unit = std::ptr::null_mut();
            match ratio {
                Some(r) => {
                    metric.nvmlReturn = SUCCESS;
                    metric.value = r * 100.0;
                }
                None => {
                    metric.nvmlReturn = NOT_SUPPORTED;
                    metric.value = 0.0;
                }
            }
        }
        Ok(())
    })
}
