//! What each native family costs the Prometheus that scrapes it, and why it is worth it.
//!
//! At a thousand hosts of eight GPUs, every series a GPU is 8,000 series in the user's
//! Prometheus (head memory, disk, query time). So each family states its cost here, the
//! metrics reference prints it beside the family, and a test on the simulator's exposition
//! (`tests/it/exposition.rs`) holds every family to it and the whole to [`DEFAULT_PER_GPU`]
//! ([`DCGM_COMPAT_PER_GPU`] with the dcgm-exporter names, whose default set is 26 fields).

/// Most series a GPU in the default exposition (not counting the agent's own
/// `gpu_sentinel_*` and the per-process series, which `max_process_series` bounds).
pub const DEFAULT_PER_GPU: u32 = 70;

/// Most series a GPU with `[export] dcgm_compat = true`.
pub const DCGM_COMPAT_PER_GPU: u32 = 110;

/// Risk contributions exposed per GPU: the largest positive ones, what an operator reads
/// as the reasons (`/api/v1/gpus` has every term).
pub(crate) const RISK_REASONS_EXPOSED: usize = 3;

/// How many series a family has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cost {
    /// Exactly this many a GPU that answers (fewer when the GPU lacks the reading).
    PerGpu(u32),
    /// A number a GPU that varies, at most `per_gpu`; `what` says what it counts.
    UpTo { per_gpu: u32, what: &'static str },
    /// This many for the host, whatever its GPUs.
    PerHost(u32),
    /// A number for the host that varies; `what` says with what.
    PerHostVarying(&'static str),
    /// Exactly this many a MIG instance (a GPU in MIG mode has them in place of some of
    /// its own: see docs/metrics.md).
    PerMigInstance(u32),
}

/// One family's cost and the reason to pay it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub family: &'static str,
    pub cost: Cost,
    pub why: &'static str,
}

const fn per_gpu(family: &'static str, n: u32, why: &'static str) -> Budget {
    Budget {
        family,
        cost: Cost::PerGpu(n),
        why,
    }
}

const fn up_to(
    family: &'static str,
    per_gpu: u32,
    what: &'static str,
    why: &'static str,
) -> Budget {
    Budget {
        family,
        cost: Cost::UpTo { per_gpu, what },
        why,
    }
}

const fn per_host(family: &'static str, n: u32, why: &'static str) -> Budget {
    Budget {
        family,
        cost: Cost::PerHost(n),
        why,
    }
}

const fn per_instance(family: &'static str, n: u32, why: &'static str) -> Budget {
    Budget {
        family,
        cost: Cost::PerMigInstance(n),
        why,
    }
}

const fn per_host_varying(family: &'static str, what: &'static str, why: &'static str) -> Budget {
    Budget {
        family,
        cost: Cost::PerHostVarying(what),
        why,
    }
}

/// Every native family's budget, in catalogue order.
pub(crate) const BUDGETS: &[Budget] = &[
    per_gpu(
        "gpu_info",
        1,
        "identity (name, bus id, serial, driver) on one series, joined by every query that names a GPU",
    ),
    per_gpu("gpu_up", 1, "a lost GPU is the first thing to alert on"),
    per_gpu(
        "gpu_utilization_ratio",
        1,
        "busy or idle: the waste accounting's input",
    ),
    per_gpu(
        "gpu_memory_copy_utilization_ratio",
        1,
        "memory-bound jobs look idle by SM utilization alone",
    ),
    per_gpu(
        "gpu_encoder_utilization_ratio",
        1,
        "video inference nodes are busy on NVENC while the SMs idle",
    ),
    per_gpu(
        "gpu_decoder_utilization_ratio",
        1,
        "as the encoder, for NVDEC",
    ),
    per_gpu(
        "gpu_memory_total_bytes",
        1,
        "the denominator of every memory ratio",
    ),
    per_gpu(
        "gpu_memory_used_bytes",
        1,
        "memory held by idle and ghost jobs",
    ),
    per_gpu("gpu_memory_free_bytes", 1, "placement: what still fits"),
    per_gpu(
        "gpu_temperature_celsius",
        1,
        "cooling trouble, the thermal alert",
    ),
    per_gpu(
        "gpu_memory_temperature_celsius",
        1,
        "HBM overheating shows here before the die does",
    ),
    per_gpu(
        "gpu_power_watts",
        1,
        "erratic power precedes failures; energy dashboards",
    ),
    per_gpu(
        "gpu_power_limit_watts",
        1,
        "a capped GPU explains low clocks",
    ),
    per_gpu(
        "gpu_energy_joules_total",
        1,
        "energy and its cost over any range, without sampling error",
    ),
    per_gpu(
        "gpu_clock_hertz",
        3,
        "sm, memory and video clocks: clocks stuck low (graphics is the sm clock on datacenter GPUs)",
    ),
    per_gpu(
        "gpu_clock_max_hertz",
        2,
        "the sm and memory ceilings those clocks are read against",
    ),
    per_gpu(
        "gpu_fan_speed_ratio",
        1,
        "air-cooled GPUs only; absent on passive boards",
    ),
    per_gpu(
        "gpu_performance_state",
        1,
        "P0 under load; P8 with memory held is an idle job",
    ),
    per_gpu(
        "gpu_clock_event_active",
        6,
        "one per clock-event reason an operator acts on: which of power, thermal, slowdown or a clock setting holds clocks down; zeros kept so a reason that clears reads 0, not a gap (the idle, sync-boost and display reasons stay in the API)",
    ),
    per_gpu(
        "gpu_ecc_errors_total",
        4,
        "corrected and uncorrected, volatile and aggregate: worn memory, the risk model's strongest input",
    ),
    per_gpu(
        "gpu_retired_pages",
        2,
        "pre-Ampere memory wear (sbe, dbe); absent on GPUs that remap rows",
    ),
    per_gpu("gpu_retired_pages_pending", 1, "a reset is due"),
    per_gpu(
        "gpu_remapped_rows_total",
        2,
        "Ampere and later memory wear (correctable, uncorrectable)",
    ),
    per_gpu("gpu_remapped_rows_pending", 1, "a reset is due"),
    per_gpu("gpu_remapped_rows_failure", 1, "NVIDIA's RMA signal"),
    per_gpu("gpu_pcie_replays_total", 1, "a failing PCIe link"),
    per_gpu(
        "gpu_pcie_link_generation",
        1,
        "a link trained below its generation (the maximum it is read against is in /api/v1/gpus and the pcie health verdict's reason: it does not change in a slot, so it has no series)",
    ),
    per_gpu("gpu_pcie_link_width", 1, "a link trained below its width"),
    per_gpu(
        "gpu_pcie_throughput_bytes_per_second",
        2,
        "tx and rx: input-bound jobs",
    ),
    per_gpu(
        "gpu_nvlink_errors_total",
        4,
        "one per error kind, summed over the links (72 a GPU with [export] nvlink_per_link on 18 links, nearly all zero); the API and the risk's reasons name the link",
    ),
    up_to(
        "gpu_xid_errors_total",
        8,
        "one per XID number seen on the GPU; none on a healthy one",
        "hardware XIDs page someone",
    ),
    per_gpu(
        "gpu_sm_active_ratio",
        1,
        "GPM: real work rather than a kernel resident",
    ),
    per_gpu("gpu_sm_occupancy_ratio", 1, "GPM: how full the SMs are"),
    per_gpu("gpu_tensor_active_ratio", 1, "GPM: tensor cores in use"),
    per_gpu("gpu_dram_active_ratio", 1, "GPM: memory-bound work"),
    per_host_varying(
        "gpu_process_memory_bytes",
        "one per process holding GPU memory, at most [export] max_process_series a host",
        "who holds the memory, by name",
    ),
    per_host_varying(
        "gpu_process_utilization_ratio",
        "as gpu_process_memory_bytes",
        "which process computes",
    ),
    up_to(
        "gpu_allocation_info",
        4,
        "one per pod or job a scheduler gave the GPU to",
        "the owner of an idle allocation",
    ),
    per_host("gpu_sentinel_build_info", 1, "which version runs where"),
    per_host("gpu_sentinel_source_up", 1, "NVML answers at all"),
    per_host(
        "gpu_sentinel_collect_duration_seconds",
        1,
        "a slow driver before it hangs",
    ),
    per_host(
        "gpu_sentinel_last_collect_timestamp_seconds",
        1,
        "staleness, for an alert",
    ),
    per_host_varying(
        "gpu_sentinel_collect_errors_total",
        "one per NVML call that failed",
        "which call fails",
    ),
    per_host_varying(
        "gpu_sentinel_values_rejected_total",
        "one per field a value was rejected for",
        "a driver reporting nonsense",
    ),
    per_host_varying(
        "gpu_sentinel_collector_success",
        "one per collector",
        "which source is broken",
    ),
    per_host_varying(
        "gpu_sentinel_collector_duration_seconds",
        "one per collector",
        "which source is slow",
    ),
    per_host_varying(
        "gpu_sentinel_state_save_errors_total",
        "one per state file",
        "a state directory that stopped taking writes",
    ),
    per_host(
        "gpu_sentinel_process_series_dropped",
        1,
        "max_process_series is cutting",
    ),
    per_host(
        "gpu_sentinel_tls_cert_expiry_timestamp_seconds",
        1,
        "a serving certificate about to expire, alerted on before scrapes fail (only with TLS)",
    ),
    per_gpu(
        "gpu_failure_risk_score",
        1,
        "the score the risk alert fires on",
    ),
    up_to(
        "gpu_failure_risk_contribution",
        RISK_REASONS_EXPOSED as u32,
        "the three largest positive contributions, as the board and alerts show them; /api/v1/gpus has every term",
        "the reasons behind the score, on the dashboard",
    ),
    up_to(
        "gpu_failure_risk_rule",
        1,
        "the known-bad rule that set the score, when one did",
        "why a score is 0.95 at once",
    ),
    per_gpu("gpu_idle_seconds", 1, "how long a GPU has done nothing"),
    per_gpu("gpu_allocated", 1, "allocated or free"),
    per_gpu("gpu_allocated_idle", 1, "the waste alert"),
    per_gpu(
        "gpu_ghost_processes",
        1,
        "memory held with no job behind it",
    ),
    per_gpu("gpu_long_running_processes", 1, "jobs left running"),
    per_gpu(
        "gpu_outside_scheduler_processes",
        1,
        "work the scheduler does not know",
    ),
    per_gpu(
        "gpu_cost_total",
        2,
        "busy and idle cost: the waste, in money",
    ),
    up_to(
        "gpu_owner_seconds_total",
        8,
        "busy and idle for each owner (pod, job or user) that held the GPU since start",
        "every GPU-second has a name; the weekly team report",
    ),
    per_host(
        "gpu_scale_recommendation",
        3,
        "out, in or hold for the node",
    ),
    per_host("gpu_scale_recommended_gpus", 1, "how many"),
    per_host("gpu_node_free_gpus", 1, "placement"),
    per_host(
        "gpu_node_largest_free_memory_bytes",
        1,
        "placement: the largest job that fits",
    ),
    per_host(
        "gpu_node_fragmentation_ratio",
        1,
        "memory stranded across GPUs",
    ),
    up_to(
        "gpu_health_state",
        8,
        "the components not healthy (none on a healthy GPU), each with its action",
        "what schedulers and alerts act on, and the repair; a healthy component has no series (eight constant zeros a GPU would be 64,000 series at a thousand hosts), so a component that recovers leaves and its alert resolves, and a new action replaces its component's series rather than adding one; the node's verdict below is always there",
    ),
    per_host(
        "gpu_node_health_state",
        1,
        "the node's verdict: drain it or not",
    ),
    per_host_varying(
        "gpu_sentinel_alerts",
        "two per rule (pending, firing)",
        "alerts without the API",
    ),
    per_host_varying(
        "gpu_sentinel_notifications_total",
        "one per receiver and outcome",
        "delivery that fails",
    ),
    per_host("gpu_sentinel_outbox_pending", 1, "notifications waiting"),
    per_host("gpu_sentinel_outbox_durable", 1, "an outbox only in memory"),
    per_host(
        "gpu_sentinel_outbox_store_errors_total",
        1,
        "a failing outbox store",
    ),
    per_host(
        "gpu_sentinel_rate_limit_summaries_total",
        1,
        "a chat receiver being summarised",
    ),
    per_host_varying(
        "gpu_sentinel_delivery_in_flight_seconds",
        "one per receiver with a send in progress",
        "a receiver that hangs",
    ),
    per_host_varying(
        "gpu_sentinel_delivery_retry_after_capped_total",
        "one per receiver",
        "a receiver asking for long waits",
    ),
    per_host_varying(
        "gpu_sentinel_delivery_worker_restarts_total",
        "one per receiver",
        "a delivery worker that crashed",
    ),
    per_host_varying(
        "gpu_sentinel_advice_requests_total",
        "one per outcome",
        "the LLM advisor failing",
    ),
    per_host("gpu_sentinel_advice_cached", 1, "advice held"),
    per_instance(
        "gpu_mig_memory_total_bytes",
        1,
        "the denominator of the instance's memory",
    ),
    per_instance(
        "gpu_mig_memory_used_bytes",
        1,
        "memory held in the instance: the idle notebook's",
    ),
    per_instance(
        "gpu_mig_share_ratio",
        1,
        "what the instance's idle time costs, as a share of the GPU",
    ),
    per_instance(
        "gpu_mig_sm_active_ratio",
        1,
        "busy or idle: the only activity NVML gives per instance",
    ),
    per_instance(
        "gpu_mig_sm_occupancy_ratio",
        1,
        "a busy instance that runs little in parallel",
    ),
    per_instance(
        "gpu_mig_tensor_active_ratio",
        1,
        "whether an inference instance uses its tensor cores",
    ),
    per_instance(
        "gpu_mig_dram_active_ratio",
        1,
        "memory-bound work looks idle by SM activity alone",
    ),
    per_instance(
        "gpu_mig_processes",
        1,
        "an instance with nothing in it, told from one that computes nothing",
    ),
    per_instance("gpu_mig_allocated", 1, "allocated or free, per instance"),
    per_instance("gpu_mig_allocated_idle", 1, "the waste alert, per instance"),
    per_instance(
        "gpu_mig_idle_seconds",
        1,
        "how long an instance has done nothing",
    ),
    per_instance(
        "gpu_mig_cost_total",
        2,
        "busy and idle cost of the instance's share: the waste, in money",
    ),
    per_host(
        "gpu_node_free_mig_gpus",
        1,
        "placement: free MIG capacity in GPUs (only on a node with MIG)",
    ),
];

/// Series a MIG instance adds: every per-instance family's budget.
pub fn per_mig_instance() -> u32 {
    BUDGETS
        .iter()
        .map(|b| match b.cost {
            Cost::PerMigInstance(n) => n,
            _ => 0,
        })
        .sum()
}

/// The budget of family `name`.
pub fn of(name: &str) -> Option<&'static Budget> {
    BUDGETS.iter().find(|b| b.family == name)
}

impl Cost {
    /// As the metrics reference writes it.
    pub fn describe(&self) -> String {
        match self {
            Cost::PerGpu(n) => format!("{n} a GPU"),
            Cost::UpTo { per_gpu, what } => format!("≤ {per_gpu} a GPU: {what}"),
            Cost::PerHost(n) => format!("{n} a host"),
            Cost::PerHostVarying(what) => format!("a host: {what}"),
            Cost::PerMigInstance(n) => format!("{n} a MIG instance"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::metrics::{ALERTING, ANALYSIS, NATIVE};
    use crate::export::mig::{MIG_ANALYSIS, MIG_NATIVE};

    #[test]
    fn every_family_has_one_budget_and_every_budget_a_family() {
        let families: Vec<&str> = NATIVE
            .iter()
            .chain(ANALYSIS)
            .chain(ALERTING)
            .chain(MIG_NATIVE)
            .chain(MIG_ANALYSIS)
            .map(|d| d.name)
            .collect();
        for name in &families {
            assert_eq!(
                BUDGETS.iter().filter(|b| b.family == *name).count(),
                1,
                "{name}: one budget"
            );
        }
        for b in BUDGETS {
            assert!(families.contains(&b.family), "{}: no such family", b.family);
        }
    }

    #[test]
    fn the_families_always_present_fit_the_default_budget() {
        let always: u32 = BUDGETS
            .iter()
            .map(|b| match b.cost {
                Cost::PerGpu(n) => n,
                _ => 0,
            })
            .sum();
        assert!(
            always <= DEFAULT_PER_GPU,
            "{always} series a GPU before any varying family"
        );
    }
}
