//! Reading one GPU for one tick: its identity (static parts read once per GPU), then each
//! metric family in order, timed; a lost GPU keeps its last identity and reports nothing else.

use std::collections::{BTreeMap, HashSet};
use std::time::Instant;

use nvml_wrapper::Nvml;

use super::calls::{CallKey, Calls, Families, Family};
use super::gpm::GpmSamples;
use super::mig::{self, MigSlot};
use super::{processes, read};
use crate::model::{GpuSample, ProcessSample};

/// A GPU's static identity.
#[derive(Debug, Clone, PartialEq)]
pub struct Identity {
    pub uuid: String,
    pub name: String,
    pub pci_bus_id: String,
    pub serial: Option<String>,
}

/// What we remember about the GPU at one NVML index.
#[derive(Default)]
pub(crate) struct Slot {
    pub identity: Option<Identity>,
    /// Calls this GPU does not support (or that we may not make), never asked again.
    pub unavailable: HashSet<CallKey>,
    /// NVML's timestamp of the newest per-process utilization sample consumed.
    pub(crate) process_last_seen: u64,
    /// Whether the GPU answered last tick, and ever, to log transitions once.
    pub(crate) was_up: bool,
    pub(crate) ever_up: bool,
    /// MIG mode last tick: what a GPU supports changes with it.
    pub mig_enabled: Option<bool>,
    /// What is known of the GPU's MIG side (its profiles), in MIG mode.
    pub mig: MigSlot,
}

/// What reading one GPU produced.
pub(crate) struct GpuRead {
    pub sample: GpuSample,
    pub processes: Vec<ProcessSample>,
    /// The identity that sat at this index before a different GPU took it.
    pub replaced: Option<Identity>,
    /// NVML itself went away during the read.
    pub gone: Option<String>,
}

pub(crate) fn down_sample(index: u32, identity: Option<&Identity>) -> GpuSample {
    let mut sample = GpuSample {
        index,
        up: false,
        ..GpuSample::default()
    };
    if let Some(id) = identity {
        sample.uuid = id.uuid.clone();
        sample.name = id.name.clone();
        sample.pci_bus_id = id.pci_bus_id.clone();
        sample.serial = id.serial.clone();
    }
    sample
}

pub(crate) fn read_gpu(
    nvml: &Nvml,
    index: u32,
    slot: &mut Slot,
    gpm: &mut GpmSamples,
    errors_by_call: &mut BTreeMap<String, u64>,
    families: &mut Families,
    with_processes: bool,
) -> GpuRead {
    let began = Instant::now();
    let mut calls = Calls::new(index, &mut slot.unavailable, errors_by_call);
    let mut sample = GpuSample {
        index,
        ..GpuSample::default()
    };
    let mut replaced = None;
    let mut processes = Vec::new();

    let device = families
        .run(Family::Identity, &mut calls, |c| {
            let device = c.settle(
                "nvmlDeviceGetHandleByIndex_v2",
                "",
                nvml.device_by_index(index),
            )?;
            let uuid = c.call("nvmlDeviceGetUUID", "", || device.uuid());
            if let Some(uuid) = uuid
                && slot.identity.as_ref().map(|id| id.uuid.as_str()) != Some(uuid.as_str())
            {
                // First sight of this GPU, or a different GPU at this index (after a driver
                // reload): read the static identity once, and start its memory afresh.
                if slot.identity.is_some() {
                    c.forget_unavailable();
                    slot.process_last_seen = 0;
                    slot.mig.reset();
                    gpm.forget(nvml, index as usize);
                }
                let pci = c.call("nvmlDeviceGetPciInfo_v3", "", || device.pci_info());
                let identity = Identity {
                    uuid,
                    name: c
                        .call("nvmlDeviceGetName", "", || device.name())
                        .unwrap_or_default(),
                    pci_bus_id: pci.map(|p| p.bus_id).unwrap_or_default(),
                    serial: c.call("nvmlDeviceGetSerial", "", || device.serial()),
                };
                replaced = slot.identity.replace(identity);
            }
            sample.mig_enabled = c
                .call("nvmlDeviceGetMigMode", "", || device.mig_mode())
                .map(|m| m.current == 1);
            // In MIG mode the whole-GPU utilization calls answer NOT_SUPPORTED; after MIG is
            // turned off they work again, so what was learnt under the other mode is forgotten.
            if sample.mig_enabled.is_some() && slot.mig_enabled != sample.mig_enabled {
                if slot.mig_enabled.is_some() {
                    c.forget_unavailable();
                    slot.mig.reset();
                    gpm.keep_mig(nvml, index as usize, &[]);
                }
                slot.mig_enabled = sample.mig_enabled;
            }
            read::driver_state(&device, c, &mut sample);
            Some(device)
        })
        .flatten();

    if let Some(dev) = &device {
        families.run(Family::Utilization, &mut calls, |c| {
            read::utilization(dev, c, &mut sample)
        });
        families.run(Family::Memory, &mut calls, |c| {
            read::memory(dev, c, &mut sample)
        });
        families.run(Family::Thermal, &mut calls, |c| {
            read::thermal(dev, c, &mut sample)
        });
        families.run(Family::Power, &mut calls, |c| {
            read::power(dev, c, &mut sample)
        });
        families.run(Family::Clocks, &mut calls, |c| {
            read::clocks(dev, c, &mut sample)
        });
        families.run(Family::ClockEvents, &mut calls, |c| {
            read::clock_events(dev, c, &mut sample)
        });
        families.run(Family::Ecc, &mut calls, |c| read::ecc(dev, c, &mut sample));
        families.run(Family::RetiredPages, &mut calls, |c| {
            read::retired_pages(dev, c, &mut sample)
        });
        families.run(Family::RemappedRows, &mut calls, |c| {
            read::remapped_rows(dev, c, &mut sample)
        });
        families.run(Family::Pcie, &mut calls, |c| {
            read::pcie(dev, c, &mut sample)
        });
        families.run(Family::NvLink, &mut calls, |c| {
            read::nvlink(dev, c, &mut sample)
        });
        sample.gpm = families
            .run(Family::Gpm, &mut calls, |c| {
                gpm.read(nvml, dev, index as usize, c)
            })
            .flatten();
        if with_processes {
            let uuid = slot
                .identity
                .as_ref()
                .map(|id| id.uuid.clone())
                .unwrap_or_default();
            let last_seen = &mut slot.process_last_seen;
            processes = families
                .run(Family::Processes, &mut calls, |c| {
                    processes::read(dev, c, index, &uuid, last_seen)
                })
                .unwrap_or_default();
        }
        if sample.mig_enabled == Some(true) {
            let slot_mig = &mut slot.mig;
            let read = families.run(Family::Mig, &mut calls, |c| {
                mig::read(nvml, dev, index as usize, slot_mig, gpm, c)
            });
            if let Some(read) = read {
                sample.mig_devices = read.instances.iter().map(|i| i.uuid.clone()).collect();
                sample.mig_instances = read.instances;
                if with_processes {
                    let uuid = slot.identity.as_ref().map_or("", |id| id.uuid.as_str());
                    mig::attribute(&mut processes, &read.processes, index, uuid);
                }
            }
        }
    }

    let up = device.is_some() && !calls.lost;
    let failed = calls.failed;
    let gone = calls.gone.take();
    drop(calls);
    if !up {
        // A lost GPU's data is empty; it keeps its last identity so its series stay put.
        sample = down_sample(index, slot.identity.as_ref());
        processes.clear();
        gpm.forget(nvml, index as usize);
        if slot.was_up && gone.is_none() {
            tracing::warn!(gpu = index, "GPU is lost or unreachable (reported up = 0)");
        }
    } else {
        if let Some(id) = &slot.identity {
            sample.uuid = id.uuid.clone();
            sample.name = id.name.clone();
            sample.pci_bus_id = id.pci_bus_id.clone();
            sample.serial = id.serial.clone();
        }
        sample.up = true;
        if !slot.was_up && slot.ever_up {
            tracing::info!(gpu = index, "GPU answers again");
        }
    }
    slot.was_up = up;
    slot.ever_up |= up;
    sample.failed_calls = failed;
    sample.collect_seconds = began.elapsed().as_secs_f64();
    GpuRead {
        sample,
        processes,
        replaced,
        gone,
    }
}
