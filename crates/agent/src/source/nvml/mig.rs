//! A GPU in MIG mode, read each collection: every MIG device (compute instance) NVML lists
//! now, with its GPU instance's profile, placement, memory and GPM activity, and the
//! processes running in it.
//!
//! The devices are enumerated afresh every collection (`nvmlDeviceGetMaxMigDeviceCount`,
//! then `nvmlDeviceGetMigDeviceHandleByIndex` over every slot, empty ones answering
//! NOT_FOUND), so an instance created or destroyed since the last collection appears or
//! disappears in this one, and one with nothing running still reports its zeros. What
//! cannot change while the GPU stays in MIG mode, the profiles the GPU offers, is read once
//! ([`MigSlot`]) and forgotten when the mode changes or another GPU takes the index.
//!
//! Per MIG device: UUID, GPU and compute instance ids, attributes (slices, SMs), memory
//! (the GPU instance's, as NVML answers it on the MIG handle) and running processes; per
//! GPU instance, once: its profile and placement and a GPM sample.

use std::collections::BTreeMap;

use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::NVML_GPU_INSTANCE_PROFILE_COUNT;

use super::calls::Calls;
use super::gpm::GpmSamples;
use super::mig_raw::{self, GpuInstanceInfo, ProfileInfo};
use crate::model::{Memory, MigInstance, MigPlacement, ProcessSample};

const PROFILE_INFO: &str = "nvmlDeviceGetGpuInstanceProfileInfoV";

/// What is remembered of one GPU's MIG side between collections.
#[derive(Debug, Default)]
pub(crate) struct MigSlot {
    /// The GPU-instance profiles the GPU offers, once read.
    profiles: Option<Vec<ProfileInfo>>,
}

impl MigSlot {
    /// Forgets what was learnt: the GPU changed mode, or another GPU took its index.
    pub fn reset(&mut self) {
        self.profiles = None;
    }
}

/// A process NVML lists on one MIG device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MigProcess {
    pub gpu_instance: u32,
    pub compute_instance: u32,
    pub pid: u32,
    pub used_memory_bytes: Option<u64>,
}

/// One collection of a GPU's MIG side.
#[derive(Debug, Default)]
pub(crate) struct MigRead {
    pub instances: Vec<MigInstance>,
    pub processes: Vec<MigProcess>,
}

/// Reads every MIG device of GPU `index` (in MIG mode) now.
pub fn read(
    nvml: &Nvml,
    dev: &Device<'_>,
    index: usize,
    slot: &mut MigSlot,
    gpm: &mut GpmSamples,
    c: &mut Calls<'_>,
) -> MigRead {
    if slot.profiles.is_none() {
        slot.profiles = profiles(nvml, dev, c);
    }
    let profiles = slot.profiles.as_deref().unwrap_or(&[]);
    // The whole GPU's compute slices: those of its largest profile (7 on A100/H100/H200).
    let gpu_slices = profiles.iter().map(|p| p.slices).max().unwrap_or(0);
    let mut out = MigRead::default();
    let Some(count) = c.call("nvmlDeviceGetMaxMigDeviceCount", "", || {
        dev.mig_device_count()
    }) else {
        return out;
    };
    let mut gpu_instances: BTreeMap<u32, Option<GpuInstanceInfo>> = BTreeMap::new();
    for device_index in 0..count {
        let mig = match dev.mig_device_by_index(device_index) {
            // An empty slot: no device there, not a failure.
            Err(NvmlError::NotFound) => continue,
            result => c.settle("nvmlDeviceGetMigDeviceHandleByIndex", "", result),
        };
        let Some(mig) = mig else { continue };
        let uuid = c.call("nvmlDeviceGetUUID", "mig", || mig.uuid());
        let gi = c.call("nvmlDeviceGetGpuInstanceId", "", || {
            mig_raw::gpu_instance_id(nvml, &mig)
        });
        let ci = c.call("nvmlDeviceGetComputeInstanceId", "", || {
            mig_raw::compute_instance_id(nvml, &mig)
        });
        // Without its identity the device cannot be told from another: left out.
        let (Some(uuid), Some(gi), Some(ci)) = (uuid, gi, ci) else {
            continue;
        };
        let info = *gpu_instances.entry(gi).or_insert_with(|| {
            c.call("nvmlGpuInstanceGetInfo", "", || {
                mig_raw::gpu_instance_info(nvml, dev, gi)
            })
        });
        let profile = info.and_then(|i| profiles.iter().find(|p| p.id == i.profile_id));
        let attributes = c.call("nvmlDeviceGetAttributes_v2", "mig", || mig.attributes());
        let memory = c.call("nvmlDeviceGetMemoryInfo_v2", "mig", || mig.memory_info());
        let running = c
            .call("nvmlDeviceGetComputeRunningProcesses_v3", "mig", || {
                mig.running_compute_processes()
            })
            .unwrap_or_default();
        let gpu_instance_slices = attributes
            .as_ref()
            .map(|a| a.gpu_instance_slice_count)
            .or(profile.map(|p| p.slices))
            .unwrap_or(0);
        let slices = attributes
            .as_ref()
            .map(|a| a.compute_instance_slice_count)
            .unwrap_or(gpu_instance_slices);
        let name = match (profile, &attributes) {
            (Some(p), _) => p.name.clone(),
            (None, Some(a)) => {
                mig_raw::name_from_size(a.gpu_instance_slice_count, a.memory_size_mb)
            }
            (None, None) => String::new(),
        };
        for p in &running {
            out.processes.push(MigProcess {
                gpu_instance: gi,
                compute_instance: ci,
                pid: p.pid,
                used_memory_bytes: match p.used_gpu_memory {
                    UsedGpuMemory::Used(bytes) => Some(bytes),
                    UsedGpuMemory::Unavailable => None,
                },
            });
        }
        out.instances.push(MigInstance {
            gpu_instance: gi,
            compute_instance: ci,
            uuid,
            device_index,
            profile: name,
            slices,
            gpu_instance_slices,
            gpu_slices,
            placement: info.map(|i| MigPlacement {
                start: i.start,
                size: i.size,
            }),
            multiprocessors: attributes.as_ref().map(|a| a.multiprocessor_count),
            memory: memory.map_or_else(Memory::default, |m| Memory {
                total_bytes: Some(m.total),
                used_bytes: Some(m.used),
                free_bytes: Some(m.free),
                reserved_bytes: Some(m.reserved),
            }),
            gpm: None,
            processes: running.len() as u32,
        });
    }
    // One GPM sample per GPU instance, shared by its compute instances.
    let present: Vec<u32> = gpu_instances.keys().copied().collect();
    for gi in &present {
        let ratios = gpm.read_mig(nvml, dev, index, *gi, c);
        for instance in out.instances.iter_mut().filter(|i| i.gpu_instance == *gi) {
            instance.gpm = ratios;
        }
    }
    gpm.keep_mig(nvml, index, &present);
    out
}

/// The GPU-instance profiles GPU `dev` offers, by asking for each profile index; `None`
/// when none could be read (the next collection asks again, unless the call is missing).
fn profiles(nvml: &Nvml, dev: &Device<'_>, c: &mut Calls<'_>) -> Option<Vec<ProfileInfo>> {
    if c.skip(PROFILE_INFO, "") {
        return None;
    }
    let mut found = Vec::new();
    for profile in 0..NVML_GPU_INSTANCE_PROFILE_COUNT {
        match mig_raw::profile_info(nvml, dev, profile) {
            Ok(info) => found.push(info),
            // A profile this GPU does not offer.
            Err(NvmlError::NotSupported | NvmlError::InvalidArg | NvmlError::NotFound) => {}
            Err(error) => {
                c.error(PROFILE_INFO, "", &error);
                break;
            }
        }
    }
    (!found.is_empty()).then_some(found)
}

/// Names the MIG instance of each of GPU `gpu`'s processes (`uuid`), from the processes
/// NVML lists on its MIG devices; a process listed only there (the whole-GPU list needs
/// privileges in MIG mode) is added.
pub fn attribute(processes: &mut Vec<ProcessSample>, mig: &[MigProcess], gpu: u32, uuid: &str) {
    for m in mig {
        match processes.iter_mut().find(|p| p.pid == m.pid) {
            Some(p) => {
                p.gpu_instance = Some(m.gpu_instance);
                p.compute_instance = Some(m.compute_instance);
                if p.used_memory_bytes.is_none() {
                    p.used_memory_bytes = m.used_memory_bytes;
                }
            }
            None => processes.push(ProcessSample {
                gpu,
                uuid: uuid.to_string(),
                pid: m.pid,
                used_memory_bytes: m.used_memory_bytes,
                gpu_instance: Some(m.gpu_instance),
                compute_instance: Some(m.compute_instance),
                ..ProcessSample::default()
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processes_are_named_by_their_instance_and_none_is_lost() {
        let mut processes = vec![ProcessSample {
            pid: 10,
            used_memory_bytes: None,
            ..ProcessSample::default()
        }];
        let mig = [
            MigProcess {
                gpu_instance: 9,
                compute_instance: 0,
                pid: 10,
                used_memory_bytes: Some(1 << 30),
            },
            MigProcess {
                gpu_instance: 2,
                compute_instance: 1,
                pid: 11,
                used_memory_bytes: Some(2 << 30),
            },
        ];
        attribute(&mut processes, &mig, 3, "GPU-x");
        assert_eq!(processes.len(), 2);
        assert_eq!(
            (processes[0].gpu_instance, processes[0].compute_instance),
            (Some(9), Some(0))
        );
        assert_eq!(processes[0].used_memory_bytes, Some(1 << 30));
        assert_eq!((processes[1].gpu, processes[1].uuid.as_str()), (3, "GPU-x"));
        assert_eq!(processes[1].compute_instance, Some(1));
    }
}
