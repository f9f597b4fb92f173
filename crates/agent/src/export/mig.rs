//! MIG instances as metric families: `gpu_mig_*`, one series per MIG device (compute
//! instance) of a GPU in MIG mode, from the snapshot (memory, share, GPM activity,
//! processes) and from the engine's findings (allocated, allocated-but-idle, idle time,
//! cost).
//!
//! Every series carries `gpu` and `uuid` (its GPU's), `gpu_instance` and
//! `compute_instance` (NVML's ids, as `nvidia-smi` shows them), `profile` (as `nvidia-smi
//! -L` names the device: `1g.10gb`, or `1c.3g.40gb` for part of a GPU instance) and
//! `mig_uuid`. A GPU not in MIG mode renders none of them. An instance that exists renders
//! its series whether or not anything runs in it (zeros then), and an instance destroyed
//! stops rendering at the next collection.

use super::families::{Families, flag};
use super::metric_def::{MetricDef, counter, gauge};
use crate::engine::Findings;
use crate::model::{MigInstance, Snapshot};

/// Labels of every per-instance series.
const MIG: &[&str] = &[
    "gpu",
    "uuid",
    "gpu_instance",
    "compute_instance",
    "profile",
    "mig_uuid",
];
const MIG_STATE: &[&str] = &[
    "gpu",
    "uuid",
    "gpu_instance",
    "compute_instance",
    "profile",
    "mig_uuid",
    "state",
];

pub(crate) const MIG_MEMORY_TOTAL: MetricDef = gauge(
    "gpu_mig_memory_total_bytes",
    MIG,
    "Frame-buffer memory of the MIG instance's GPU instance (its compute instances share it), in bytes.",
);
pub(crate) const MIG_MEMORY_USED: MetricDef = gauge(
    "gpu_mig_memory_used_bytes",
    MIG,
    "Frame-buffer memory in use in the MIG instance's GPU instance, in bytes.",
);
pub(crate) const MIG_SHARE: MetricDef = gauge(
    "gpu_mig_share_ratio",
    MIG,
    "The MIG instance's share of its GPU: its compute slices over the GPU's (a 1g of an H100 is 1/7); its idle time and cost are charged at it.",
);
pub(crate) const MIG_SM_ACTIVE: MetricDef = gauge(
    "gpu_mig_sm_active_ratio",
    MIG,
    "Fraction of cycles an SM of the MIG instance's GPU instance had a warp assigned (GPM, Hopper and newer).",
);
pub(crate) const MIG_SM_OCCUPANCY: MetricDef = gauge(
    "gpu_mig_sm_occupancy_ratio",
    MIG,
    "Resident warps of the MIG instance's GPU instance as a fraction of the SM maximum (GPM).",
);
pub(crate) const MIG_TENSOR_ACTIVE: MetricDef = gauge(
    "gpu_mig_tensor_active_ratio",
    MIG,
    "Fraction of cycles a tensor pipe of the MIG instance's GPU instance was active (GPM).",
);
pub(crate) const MIG_DRAM_ACTIVE: MetricDef = gauge(
    "gpu_mig_dram_active_ratio",
    MIG,
    "Fraction of cycles the MIG instance's GPU instance's memory interface was busy (GPM).",
);
pub(crate) const MIG_PROCESSES: MetricDef = gauge(
    "gpu_mig_processes",
    MIG,
    "Compute processes running in the MIG instance (0 for one nothing runs in).",
);

/// The per-instance families of the snapshot, in exposition order.
pub(crate) const MIG_NATIVE: &[MetricDef] = &[
    MIG_MEMORY_TOTAL,
    MIG_MEMORY_USED,
    MIG_SHARE,
    MIG_SM_ACTIVE,
    MIG_SM_OCCUPANCY,
    MIG_TENSOR_ACTIVE,
    MIG_DRAM_ACTIVE,
    MIG_PROCESSES,
];

pub(crate) const MIG_ALLOCATED: MetricDef = gauge(
    "gpu_mig_allocated",
    MIG,
    "1 when the MIG instance is allocated: a scheduler gave it to a pod or job, a process holds memory in it, or its GPU instance's memory in use is above [idle] memory_floor_mib while nothing holds any compute instance of that GPU instance (a compute instance beside a held one is not held by its memory).",
);
pub(crate) const MIG_ALLOCATED_IDLE: MetricDef = gauge(
    "gpu_mig_allocated_idle",
    MIG,
    "1 when the MIG instance is allocated and every sample of the idle window stayed under the idle threshold (by its GPU instance's SM activity).",
);
pub(crate) const MIG_IDLE_SECONDS: MetricDef = gauge(
    "gpu_mig_idle_seconds",
    MIG,
    "Consecutive time the MIG instance's SM activity stayed under the idle threshold, in seconds.",
);
pub(crate) const MIG_COST: MetricDef = counter(
    "gpu_mig_cost_total",
    MIG_STATE,
    "Cost of the MIG instance's share of its GPU since gpu-sentinel started keeping state, by state (busy, idle).",
);
pub(crate) const NODE_FREE_MIG_GPUS: MetricDef = gauge(
    "gpu_node_free_mig_gpus",
    &[],
    "Free MIG capacity, in GPUs: the shares of the MIG instances nothing holds (a free 1g of an H100 counts 1/7).",
);

/// The per-instance families of the engine's findings, and the node's free MIG capacity.
pub(crate) const MIG_ANALYSIS: &[MetricDef] = &[
    MIG_ALLOCATED,
    MIG_ALLOCATED_IDLE,
    MIG_IDLE_SECONDS,
    MIG_COST,
    NODE_FREE_MIG_GPUS,
];

/// The labels of one instance's series.
fn labels(gpu: u32, uuid: &str, i: &MigInstance) -> [String; 6] {
    [
        gpu.to_string(),
        uuid.to_string(),
        i.gpu_instance.to_string(),
        i.compute_instance.to_string(),
        i.compute_profile(),
        i.uuid.clone(),
    ]
}

fn refs(labels: &[String; 6]) -> [&str; 6] {
    labels.each_ref().map(String::as_str)
}

/// Renders the snapshot's per-instance families after the native ones.
pub(super) fn render_native(families: &mut Families, snapshot: &Snapshot) {
    let mut gpus: Vec<_> = snapshot
        .gpus
        .iter()
        .filter(|g| g.up && !g.mig_instances.is_empty())
        .collect();
    if gpus.is_empty() {
        return;
    }
    gpus.sort_by_key(|g| g.index);
    type Reading = fn(&MigInstance) -> Option<f64>;
    let readings: [(&MetricDef, Reading); 8] = [
        (&MIG_MEMORY_TOTAL, |i| {
            i.memory.total_bytes.map(|b| b as f64)
        }),
        (&MIG_MEMORY_USED, |i| i.memory.used_bytes.map(|b| b as f64)),
        (&MIG_SHARE, |i| (i.gpu_slices > 0).then(|| i.fraction())),
        (&MIG_SM_ACTIVE, |i| i.gpm.and_then(|g| g.sm_active)),
        (&MIG_SM_OCCUPANCY, |i| i.gpm.and_then(|g| g.sm_occupancy)),
        (&MIG_TENSOR_ACTIVE, |i| i.gpm.and_then(|g| g.tensor_active)),
        (&MIG_DRAM_ACTIVE, |i| i.gpm.and_then(|g| g.dram_active)),
        (&MIG_PROCESSES, |i| Some(f64::from(i.processes))),
    ];
    for (def, reading) in readings {
        let family = families.family(def);
        for g in &gpus {
            for i in &g.mig_instances {
                family.push_some(&refs(&labels(g.index, &g.uuid, i)), reading(i));
            }
        }
    }
}

/// Renders the findings' per-instance families after the analysis ones.
pub(super) fn render_analysis(families: &mut Families, findings: &Findings, currency: &str) {
    let mut gpus: Vec<_> = findings
        .gpus
        .iter()
        .filter(|g| g.up && g.mig.iter().any(|i| i.present))
        .collect();
    gpus.sort_by_key(|g| g.index);
    if !gpus.is_empty() {
        families.family(&MIG_COST).set_help(format!(
            "Cost in {currency} of the MIG instance's share of its GPU since gpu-sentinel started keeping state, by state (busy, idle)."
        ));
    }
    for g in &gpus {
        let index = g.index.to_string();
        for i in g.mig.iter().filter(|i| i.present) {
            let l = [
                index.clone(),
                g.uuid.clone(),
                i.gpu_instance.to_string(),
                i.compute_instance.to_string(),
                i.profile.clone(),
                i.uuid.clone(),
            ];
            let id = refs(&l);
            families.family(&MIG_ALLOCATED).push(&id, flag(i.allocated));
            families
                .family(&MIG_ALLOCATED_IDLE)
                .push(&id, flag(i.allocated_idle));
            families.family(&MIG_IDLE_SECONDS).push(&id, i.idle_seconds);
            let cost = families.family(&MIG_COST);
            for (state, value) in [("busy", i.cost_busy), ("idle", i.cost_idle)] {
                let [a, b, c, d, e, f] = id;
                cost.push(&[a, b, c, d, e, f, state], value);
            }
        }
    }
    let placement = &findings.placement;
    if placement.slots.iter().any(|s| s.mig) {
        families
            .family(&NODE_FREE_MIG_GPUS)
            .push(&[], placement.free_mig_gpus);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::metric_def::MetricKind;
    use crate::export::metrics::{ALERTING, ANALYSIS, NATIVE};
    use crate::model::{Gpm, GpuSample, Memory};

    #[test]
    fn names_are_new_and_follow_the_conventions() {
        for def in MIG_NATIVE.iter().chain(MIG_ANALYSIS) {
            assert!(
                !NATIVE
                    .iter()
                    .chain(ANALYSIS)
                    .chain(ALERTING)
                    .any(|d| d.name == def.name),
                "{} twice",
                def.name
            );
            assert!(def.name.starts_with("gpu_mig_") || def.name.starts_with("gpu_node_"));
            assert_eq!(
                def.kind == MetricKind::Counter,
                def.name.ends_with("_total"),
                "{}",
                def.name
            );
            if def.name.starts_with("gpu_mig_") {
                assert_eq!(&def.labels[..6], MIG, "{}", def.name);
            }
        }
    }

    #[test]
    fn every_instance_has_its_series_and_an_idle_one_its_zeros() {
        let instance = |gi: u32, active: f64, processes: u32| MigInstance {
            gpu_instance: gi,
            uuid: format!("MIG-{gi}"),
            profile: "1g.10gb".into(),
            slices: 1,
            gpu_instance_slices: 1,
            gpu_slices: 7,
            memory: Memory {
                total_bytes: Some(10 << 30),
                used_bytes: Some(9 << 20),
                ..Memory::default()
            },
            gpm: Some(Gpm {
                sm_active: Some(active),
                ..Gpm::default()
            }),
            processes,
            ..MigInstance::default()
        };
        let snapshot = Snapshot {
            gpus: vec![
                GpuSample {
                    index: 3,
                    uuid: "GPU-x".into(),
                    up: true,
                    mig_instances: vec![instance(9, 0.5, 1), instance(10, 0.0, 0)],
                    ..GpuSample::default()
                },
                GpuSample {
                    index: 4,
                    up: true,
                    ..GpuSample::default()
                },
            ],
            ..Snapshot::default()
        };
        let mut families = Families::new(128);
        render_native(&mut families, &snapshot);
        let text = families.encode();
        assert!(text.contains(
            "gpu_mig_processes{gpu=\"3\",uuid=\"GPU-x\",gpu_instance=\"10\",compute_instance=\"0\",profile=\"1g.10gb\",mig_uuid=\"MIG-10\"} 0\n"
        ), "{text}");
        assert!(
            text.contains("gpu_mig_sm_active_ratio{gpu=\"3\",uuid=\"GPU-x\",gpu_instance=\"10\"")
        );
        assert!(text.contains("gpu_mig_share_ratio{gpu=\"3\",uuid=\"GPU-x\",gpu_instance=\"9\",compute_instance=\"0\",profile=\"1g.10gb\",mig_uuid=\"MIG-9\"} 0.14285714285714285\n"));
        assert!(!text.contains("gpu=\"4\""));
        let mut none = Families::new(128);
        render_native(&mut none, &Snapshot::default());
        assert_eq!(none.encode(), "");
    }
}
