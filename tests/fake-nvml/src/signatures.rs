//! Compile-time proof that every export has exactly the C signature nvml-wrapper calls it
//! with: each one is assigned to the matching function-pointer field of nvml-wrapper-sys's
//! `NvmlLib`, which only compiles when parameter and return types agree.

use nvml_wrapper_sys::bindings::NvmlLib;

use crate::{device, driver, events, gpm, mig, processes, system};

/// Never called; its body is the check.
#[allow(dead_code)]
fn exports_match_nvml_wrapper(lib: &mut NvmlLib) {
    lib.nvmlInit_v2 = Ok(system::nvmlInit_v2);
    lib.nvmlShutdown = Ok(system::nvmlShutdown);
    lib.nvmlSystemGetDriverVersion = Ok(system::nvmlSystemGetDriverVersion);
    lib.nvmlSystemGetCudaDriverVersion_v2 = Ok(system::nvmlSystemGetCudaDriverVersion_v2);
    lib.nvmlDeviceGetCount_v2 = Ok(system::nvmlDeviceGetCount_v2);
    lib.nvmlDeviceGetHandleByIndex_v2 = Ok(system::nvmlDeviceGetHandleByIndex_v2);
    lib.nvmlDeviceGetUUID = Ok(device::nvmlDeviceGetUUID);
    lib.nvmlDeviceGetName = Ok(device::nvmlDeviceGetName);
    lib.nvmlDeviceGetSerial = Ok(device::nvmlDeviceGetSerial);
    lib.nvmlDeviceGetPciInfo_v3 = Ok(device::nvmlDeviceGetPciInfo_v3);
    lib.nvmlDeviceGetMigMode = Ok(mig::nvmlDeviceGetMigMode);
    lib.nvmlDeviceGetMaxMigDeviceCount = Ok(mig::nvmlDeviceGetMaxMigDeviceCount);
    lib.nvmlDeviceGetMigDeviceHandleByIndex = Ok(mig::nvmlDeviceGetMigDeviceHandleByIndex);
    lib.nvmlDeviceGetUtilizationRates = Ok(device::nvmlDeviceGetUtilizationRates);
    lib.nvmlDeviceGetEncoderUtilization = Ok(device::nvmlDeviceGetEncoderUtilization);
    lib.nvmlDeviceGetDecoderUtilization = Ok(device::nvmlDeviceGetDecoderUtilization);
    lib.nvmlDeviceGetMemoryInfo_v2 = Ok(device::nvmlDeviceGetMemoryInfo_v2);
    lib.nvmlDeviceGetMemoryInfo = Ok(device::nvmlDeviceGetMemoryInfo);
    lib.nvmlDeviceGetTemperature = Ok(device::nvmlDeviceGetTemperature);
    lib.nvmlDeviceGetFieldValues = Ok(device::nvmlDeviceGetFieldValues);
    lib.nvmlDeviceGetFanSpeed_v2 = Ok(device::nvmlDeviceGetFanSpeed_v2);
    lib.nvmlDeviceGetPowerUsage = Ok(device::nvmlDeviceGetPowerUsage);
    lib.nvmlDeviceGetEnforcedPowerLimit = Ok(device::nvmlDeviceGetEnforcedPowerLimit);
    lib.nvmlDeviceGetTotalEnergyConsumption = Ok(device::nvmlDeviceGetTotalEnergyConsumption);
    lib.nvmlDeviceGetClockInfo = Ok(device::nvmlDeviceGetClockInfo);
    lib.nvmlDeviceGetMaxClockInfo = Ok(device::nvmlDeviceGetMaxClockInfo);
    lib.nvmlDeviceGetPerformanceState = Ok(device::nvmlDeviceGetPerformanceState);
    lib.nvmlDeviceGetCurrentClocksThrottleReasons =
        Ok(device::nvmlDeviceGetCurrentClocksThrottleReasons);
    lib.nvmlDeviceGetTotalEccErrors = Ok(device::nvmlDeviceGetTotalEccErrors);
    lib.nvmlDeviceGetRetiredPages = Ok(device::nvmlDeviceGetRetiredPages);
    lib.nvmlDeviceGetRetiredPagesPendingStatus = Ok(device::nvmlDeviceGetRetiredPagesPendingStatus);
    lib.nvmlDeviceGetPcieReplayCounter = Ok(device::nvmlDeviceGetPcieReplayCounter);
    lib.nvmlDeviceGetCurrPcieLinkGeneration = Ok(device::nvmlDeviceGetCurrPcieLinkGeneration);
    lib.nvmlDeviceGetCurrPcieLinkWidth = Ok(device::nvmlDeviceGetCurrPcieLinkWidth);
    lib.nvmlDeviceGetMaxPcieLinkGeneration = Ok(device::nvmlDeviceGetMaxPcieLinkGeneration);
    lib.nvmlDeviceGetMaxPcieLinkWidth = Ok(device::nvmlDeviceGetMaxPcieLinkWidth);
    lib.nvmlDeviceGetPcieThroughput = Ok(device::nvmlDeviceGetPcieThroughput);
    lib.nvmlDeviceGetNvLinkState = Ok(device::nvmlDeviceGetNvLinkState);
    lib.nvmlDeviceGetNvLinkErrorCounter = Ok(device::nvmlDeviceGetNvLinkErrorCounter);
    lib.nvmlDeviceGetPersistenceMode = Ok(driver::nvmlDeviceGetPersistenceMode);
    lib.nvmlDeviceGetGspFirmwareVersion = Ok(driver::nvmlDeviceGetGspFirmwareVersion);
    lib.nvmlDeviceGetGpuFabricInfo = Ok(driver::nvmlDeviceGetGpuFabricInfo);
    lib.nvmlDeviceGetComputeRunningProcesses_v3 =
        Ok(processes::nvmlDeviceGetComputeRunningProcesses_v3);
    lib.nvmlDeviceGetProcessUtilization = Ok(processes::nvmlDeviceGetProcessUtilization);
    lib.nvmlEventSetCreate = Ok(events::nvmlEventSetCreate);
    lib.nvmlDeviceGetSupportedEventTypes = Ok(events::nvmlDeviceGetSupportedEventTypes);
    lib.nvmlDeviceRegisterEvents = Ok(events::nvmlDeviceRegisterEvents);
    lib.nvmlEventSetWait_v2 = Ok(events::nvmlEventSetWait_v2);
    lib.nvmlEventSetFree = Ok(events::nvmlEventSetFree);
    lib.nvmlGpmQueryDeviceSupport = Ok(gpm::nvmlGpmQueryDeviceSupport);
    lib.nvmlGpmSampleAlloc = Ok(gpm::nvmlGpmSampleAlloc);
    lib.nvmlGpmSampleFree = Ok(gpm::nvmlGpmSampleFree);
    lib.nvmlGpmSampleGet = Ok(gpm::nvmlGpmSampleGet);
    lib.nvmlGpmMetricsGet = Ok(gpm::nvmlGpmMetricsGet);
    lib.nvmlGpmMigSampleGet = Ok(gpm::nvmlGpmMigSampleGet);
    lib.nvmlDeviceGetGpuInstanceId = Ok(mig::nvmlDeviceGetGpuInstanceId);
    lib.nvmlDeviceGetComputeInstanceId = Ok(mig::nvmlDeviceGetComputeInstanceId);
    lib.nvmlDeviceGetAttributes_v2 = Ok(mig::nvmlDeviceGetAttributes_v2);
    lib.nvmlDeviceGetGpuInstanceProfileInfoV = Ok(mig::nvmlDeviceGetGpuInstanceProfileInfoV);
    lib.nvmlDeviceGetGpuInstanceById = Ok(mig::nvmlDeviceGetGpuInstanceById);
    lib.nvmlGpuInstanceGetInfo = Ok(mig::nvmlGpuInstanceGetInfo);
}
