//! Rendering the dcgm-exporter families ([`super::dcgm`]'s fields) from a snapshot: one
//! series a GPU and holder, and on a GPU in MIG mode one series a GPU instance for the
//! fields MIG divides, as dcgm-exporter monitors GPU instances.
//!
//! dcgm-exporter (in its default "flex" mode) reads a GPU in MIG mode as its GPU instances:
//! their series carry `GPU_I_PROFILE` (the instance's profile, `1g.10gb`) and `GPU_I_ID`
//! (NVML's GPU instance id), and its pod mapper puts the pod holding a MIG device on its
//! instance's series. Here the fields MIG divides (frame buffer, graphics-engine and
//! SM/tensor/DRAM activity) are one series per GPU instance in place of the GPU's, with the
//! labels of the pods that hold that instance and no other; the readings of the whole
//! board (temperatures, power, clocks, ECC, XIDs) stay one series of the GPU, once, rather
//! than repeated per instance with the same value, so sums over a node count each watt and
//! error once. A pod holding a MIG device is on its instance's series only, never on the
//! GPU's.

use std::collections::{BTreeMap, BTreeSet};

use super::dcgm::{FIELDS, HostnameLabel, XID_ERRORS};
use super::families::Families;
use super::state::ExportState;
use crate::model::{Allocation, GpuSample, MigInstance, Snapshot};

const MIB: u64 = 1 << 20;

/// How a per-instance field's value comes out of a MIG instance.
type InstanceReading = fn(&MigInstance) -> Option<f64>;

/// The fields a GPU in MIG mode reports per GPU instance, in place of the GPU's.
pub(crate) const PER_INSTANCE: [(&str, InstanceReading); 8] = [
    ("DCGM_FI_DEV_FB_FREE", |i| mib(i.memory.free_bytes)),
    ("DCGM_FI_DEV_FB_USED", |i| mib(i.memory.used_bytes)),
    ("DCGM_FI_DEV_FB_RESERVED", |i| mib(i.memory.reserved_bytes)),
    // NVML gives no utilization in MIG mode: the GPU instance's GPM graphics activity, as
    // dcgm-exporter reads it per instance.
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", |i| {
        i.gpm.and_then(|g| g.graphics_active)
    }),
    ("DCGM_FI_PROF_SM_ACTIVE", |i| {
        i.gpm.and_then(|g| g.sm_active)
    }),
    ("DCGM_FI_PROF_SM_OCCUPANCY", |i| {
        i.gpm.and_then(|g| g.sm_occupancy)
    }),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", |i| {
        i.gpm.and_then(|g| g.tensor_active)
    }),
    ("DCGM_FI_PROF_DRAM_ACTIVE", |i| {
        i.gpm.and_then(|g| g.dram_active)
    }),
];

fn mib(bytes: Option<u64>) -> Option<f64> {
    bytes.map(|b| (b / MIB) as f64)
}

/// `pod`, `namespace`, `container`, `hpc_job`.
type HolderLabels<'s> = [&'s str; 4];

/// Renders the dcgm-exporter families after whatever `families` already holds. A lost GPU
/// renders only its last XID (dcgm-exporter has no `up` series to say it is gone).
pub(super) fn render_dcgm(
    families: &mut Families,
    snapshot: &Snapshot,
    state: &ExportState,
    hostname: &str,
    hostname_label: HostnameLabel,
) {
    let driver = snapshot.host.driver_version.as_deref().unwrap_or("");
    let mut gpus: Vec<&GpuSample> = snapshot.gpus.iter().collect();
    gpus.sort_by_key(|g| g.index);
    let labels: Vec<[String; 7]> = gpus
        .iter()
        .map(|g| {
            [
                g.index.to_string(),
                g.uuid.clone(),
                g.pci_bus_id.clone(),
                format!("nvidia{}", g.index),
                g.name.clone(),
                hostname.to_string(),
                driver.to_string(),
            ]
        })
        .collect();
    let holders: Vec<Vec<HolderLabels>> = gpus.iter().map(|g| holders(snapshot, g)).collect();
    let instances: Vec<Vec<GpuInstance>> =
        gpus.iter().map(|g| gpu_instances(snapshot, g)).collect();
    for field in FIELDS {
        let family = families.family(&field.def(hostname_label));
        let per_instance = PER_INSTANCE.iter().find(|(name, _)| *name == field.name);
        for (((gpu, labels), holders), instances) in
            gpus.iter().zip(&labels).zip(&holders).zip(&instances)
        {
            let [a, b, c, d, e, f, g] = labels.each_ref().map(String::as_str);
            if let Some((_, reading)) = per_instance.filter(|_| !instances.is_empty()) {
                if !gpu.up {
                    continue;
                }
                for i in instances {
                    let id = i.id.to_string();
                    for [pod, ns, container, job] in &i.holders {
                        let common = [
                            a, b, c, d, e, &i.profile, &id, f, g, pod, ns, container, job,
                        ];
                        family.push_some(&common, reading(i.reading));
                    }
                }
                continue;
            }
            for [pod, ns, container, job] in holders {
                let common = [a, b, c, d, e, "", "", f, g, pod, ns, container, job];
                match field.reading {
                    Some(reading) if gpu.up => family.push_some(&common, reading(gpu)),
                    Some(_) => {}
                    None => {
                        debug_assert_eq!(field.name, XID_ERRORS);
                        let last = state.last_xid(&gpu.uuid);
                        if gpu.up || last.is_some() {
                            let xid = last.unwrap_or(0);
                            let code = xid.to_string();
                            let mut with_code = common.to_vec();
                            with_code.push(&code);
                            family.push(&with_code, f64::from(xid));
                        }
                    }
                }
            }
        }
    }
}

/// One GPU instance of a GPU in MIG mode as dcgm-exporter shows it: its id and profile,
/// the MIG device it is read from (its compute instances share its memory and activity),
/// and the holders of any of its compute instances.
struct GpuInstance<'s> {
    id: u32,
    profile: String,
    reading: &'s MigInstance,
    holders: Vec<HolderLabels<'s>>,
}

fn gpu_instances<'s>(snapshot: &'s Snapshot, gpu: &'s GpuSample) -> Vec<GpuInstance<'s>> {
    let mut by_id: BTreeMap<u32, GpuInstance<'s>> = BTreeMap::new();
    for instance in &gpu.mig_instances {
        let entry = by_id
            .entry(instance.gpu_instance)
            .or_insert_with(|| GpuInstance {
                id: instance.gpu_instance,
                profile: instance.profile.clone(),
                reading: instance,
                holders: Vec::new(),
            });
        let found = holder_labels(
            snapshot
                .allocations
                .iter()
                .filter(|a| a.is_on(gpu) && instance.holds(a)),
        );
        entry.holders.extend(found);
    }
    by_id
        .into_values()
        .map(|mut i| {
            let distinct: BTreeSet<HolderLabels> = i.holders.drain(..).collect();
            i.holders = match distinct.is_empty() {
                true => vec![[""; 4]],
                false => distinct.into_iter().collect(),
            };
            i
        })
        .collect()
}

/// The `pod`, `namespace`, `container`, `hpc_job` label values of a GPU's series, as
/// dcgm-exporter adds them: one series per distinct holder (its `--kubernetes-virtual-gpus`
/// and HPC job mapping write one copy of each series per pod or job sharing the GPU; with a
/// single holder that is its default), and one series without them when no one holds it.
/// On a GPU in MIG mode only the holders of no instance (the whole GPU's) count.
fn holders<'s>(snapshot: &'s Snapshot, gpu: &GpuSample) -> Vec<HolderLabels<'s>> {
    let mig = !gpu.mig_instances.is_empty();
    let found: BTreeSet<HolderLabels> = holder_labels(
        snapshot
            .allocations
            .iter()
            .filter(|a| a.is_on(gpu) && !(mig && a.gpu_instance.is_some())),
    )
    .collect();
    if found.is_empty() {
        vec![[""; 4]]
    } else {
        found.into_iter().collect()
    }
}

fn holder_labels<'s>(
    allocations: impl Iterator<Item = &'s Allocation>,
) -> impl Iterator<Item = HolderLabels<'s>> {
    let text = |v: &'s Option<String>| v.as_deref().unwrap_or("");
    allocations.map(move |a| {
        [
            text(&a.pod),
            text(&a.namespace),
            text(&a.container),
            text(&a.hpc_job),
        ]
    })
}

#[cfg(test)]
mod tests;
