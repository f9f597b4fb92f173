//! The default rules: known-bad hardware states (`GpuLost`, `GpuHardwareXid`,
//! `GpuRowRemapFailure`, `GpuUncorrectableEccErrors`) fire at once; risk, heat and
//! collection failures after a while; waste and capacity as warnings and information; the
//! health verdicts (`GpuUnhealthy` at once, `GpuDegraded` after a while) with the repair
//! action as a label.
//! Their names are a contract: README.md lists them, `gpu_sentinel_alerts` counts by them,
//! and the Prometheus rules in `alerts/gpu-sentinel.rules.yml` have a twin of each.

use super::{Condition, Rule, rule};

/// Names of the default rules, in evaluation order.
pub const DEFAULT_RULES: [&str; 15] = [
    "GpuLost",
    "GpuHardwareXid",
    "GpuRowRemapFailure",
    "GpuUncorrectableEccErrors",
    "GpuFailureRiskHigh",
    "GpuThermalSlowdown",
    "GpuAllocatedIdle",
    "GpuGhostProcess",
    "GpuOutsideScheduler",
    "GpuLongRunningProcess",
    "GpuFleetScaleOut",
    "GpuFleetScaleIn",
    "GpuCollectionFailing",
    "GpuUnhealthy",
    "GpuDegraded",
];

/// The default rules with the risk threshold of `[risk]`.
pub fn defaults(risk_threshold: f64) -> Vec<Rule> {
    vec![
        rule(
            "GpuLost",
            "critical",
            0,
            Condition::Lost,
            "GPU {gpu} on {hostname} is lost (fell off the bus or stopped answering)",
            "Drain the node; check `nvidia-smi` and the kernel log for XID 79; reset the GPU or reboot. A GPU that drops again goes to RMA.",
        ),
        rule(
            "GpuHardwareXid",
            "critical",
            0,
            Condition::HardwareXid,
            "GPU {gpu} on {hostname} raised hardware XID {value}",
            "Look the XID up in NVIDIA's XID catalog; drain jobs before a reset. Repeated hardware XIDs warrant RMA.",
        ),
        rule(
            "GpuRowRemapFailure",
            "critical",
            0,
            Condition::RowRemapFailure,
            "GPU {gpu} on {hostname} failed to remap a memory row",
            "A row-remap failure is NVIDIA's RMA signal: drain the GPU and open an RMA.",
        ),
        rule(
            "GpuUncorrectableEccErrors",
            "critical",
            0,
            Condition::UncorrectableEcc,
            "GPU {gpu} on {hostname} had {value} uncorrectable ECC errors in 24 h",
            "Jobs on this GPU may have crashed. Drain it, reset it so pending remaps apply, and watch for recurrence.",
        ),
        rule(
            "GpuFailureRiskHigh",
            "warning",
            15 * 60,
            Condition::RiskHigh(risk_threshold),
            "GPU {gpu} on {hostname} is at risk of failure (score {value})",
            "Move long jobs off this GPU before the next checkpoint; schedule a maintenance reset and check the reasons.",
        ),
        rule(
            "GpuThermalSlowdown",
            "warning",
            5 * 60,
            Condition::ThermalSlowdown,
            "GPU {gpu} on {hostname} is in thermal slowdown",
            "Check airflow, fans and inlet temperature of the node; a GPU much hotter than its peers points at its cooling.",
        ),
        rule(
            "GpuAllocatedIdle",
            "warning",
            0,
            Condition::AllocatedIdle,
            "GPU {gpu}{instance} on {hostname} is allocated but idle for {value}",
            "Ask the owner to release the GPU or scale the job down; consider an idle-reclaim policy.",
        ),
        rule(
            "GpuGhostProcess",
            "warning",
            0,
            Condition::GhostProcess,
            "GPU {gpu}{instance} on {hostname} holds memory for {value} dead process(es)",
            "The owning process is gone, a zombie or orphaned: kill it or its parent; if memory stays held, reset the GPU.",
        ),
        rule(
            "GpuOutsideScheduler",
            "warning",
            0,
            Condition::OutsideScheduler,
            "GPU {gpu} on {hostname} runs {value} process(es) no scheduler gave it to",
            "Find who started them (user, container): GPU jobs on this host go through the scheduler, which counts this GPU as free.",
        ),
        rule(
            "GpuLongRunningProcess",
            "info",
            0,
            Condition::LongRunningProcess,
            "GPU {gpu} on {hostname} runs {value} process(es) past the long-running limit",
            "Confirm with the owner that the job is meant to run this long.",
        ),
        rule(
            "GpuFleetScaleOut",
            "info",
            0,
            Condition::ScaleOut,
            "GPUs on {hostname} are saturated: {value} GPUs recommended",
            "Add capacity or queue work elsewhere.",
        ),
        rule(
            "GpuFleetScaleIn",
            "info",
            0,
            Condition::ScaleIn,
            "GPUs on {hostname} are mostly idle: {value} GPUs recommended",
            "Release or consolidate capacity.",
        ),
        rule(
            "GpuCollectionFailing",
            "warning",
            5 * 60,
            Condition::CollectionFailing,
            "GPU collection on {hostname} is failing",
            "Check gpu_sentinel_collector_success and the agent's log; the driver may be wedged.",
        ),
        rule(
            "GpuUnhealthy",
            "critical",
            0,
            Condition::HealthUnhealthy,
            "GPU {gpu} on {hostname} is unhealthy: {value}",
            "Take it out of service and do what the action label says: reset_gpu (nvidia-smi -r once it is free), drain_and_reboot (drain the node's jobs, reboot), inspect_hardware (a hardware check or RMA), restart_job (the application's fault). /api/v1/health has every component.",
        ),
        rule(
            "GpuDegraded",
            "warning",
            15 * 60,
            Condition::HealthDegraded,
            "GPU {gpu} on {hostname} is degraded: {value}",
            "It works; plan the action label's repair for the next maintenance window. /api/v1/health has every component.",
        ),
    ]
}
