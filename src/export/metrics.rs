//! The metric catalogue: every family gpu-sentinel exposes under its own names, with its
//! type, labels and help text (unit included).
//!
//! The catalogue is the single source of three things: the `# HELP`/`# TYPE` lines of the
//! exposition, the order families appear in (catalogue order, so golden files are stable),
//! and the metrics reference `docs/metrics.md` ([`reference_markdown`]), which a test keeps
//! in sync. Names follow DESIGN.md's table: base units (bytes, seconds, watts, joules,
//! hertz, degrees Celsius), ratios 0–1, `_total` on counters only. [`NATIVE`] comes from
//! the snapshot and collection health, [`ANALYSIS`] from the engine's findings, and
//! [`ALERTING`] from alerting and delivery.

use std::fmt::Write as _;

/// Prometheus metric type. Only the two kinds gpu-sentinel emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    Gauge,
    Counter,
}

impl MetricKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MetricKind::Gauge => "gauge",
            MetricKind::Counter => "counter",
        }
    }
}

/// One metric family: its name, type, label names in exposition order, and help text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricDef {
    pub name: &'static str,
    pub kind: MetricKind,
    /// Label names in the order samples carry them. An empty label value is left out of
    /// the sample, which Prometheus treats exactly like an absent label.
    pub labels: &'static [&'static str],
    pub help: &'static str,
}

const fn gauge(
    name: &'static str,
    labels: &'static [&'static str],
    help: &'static str,
) -> MetricDef {
    MetricDef {
        name,
        kind: MetricKind::Gauge,
        labels,
        help,
    }
}

const fn counter(
    name: &'static str,
    labels: &'static [&'static str],
    help: &'static str,
) -> MetricDef {
    MetricDef {
        name,
        kind: MetricKind::Counter,
        labels,
        help,
    }
}

/// Labels of every per-GPU series.
const GPU: &[&str] = &["gpu", "uuid"];
const PROCESS: &[&str] = &[
    "gpu",
    "uuid",
    "pid",
    "process",
    "user",
    "container",
    "pod",
    "namespace",
];

pub const GPU_INFO: MetricDef = gauge(
    "gpu_info",
    &[
        "gpu",
        "uuid",
        "name",
        "pci_bus_id",
        "serial",
        "driver_version",
        "cuda_version",
        "hostname",
    ],
    "GPU identity; always 1. Join on gpu and uuid to attach names to other series.",
);
pub const GPU_UP: MetricDef = gauge(
    "gpu_up",
    GPU,
    "1 when the GPU answered this collection, 0 when it is lost or unreachable.",
);
pub const UTILIZATION: MetricDef = gauge(
    "gpu_utilization_ratio",
    GPU,
    "Fraction of the sample period in which a kernel ran on the GPU (0-1).",
);
pub const MEMORY_COPY_UTILIZATION: MetricDef = gauge(
    "gpu_memory_copy_utilization_ratio",
    GPU,
    "Fraction of the sample period in which device memory was read or written (0-1).",
);
pub const ENCODER_UTILIZATION: MetricDef = gauge(
    "gpu_encoder_utilization_ratio",
    GPU,
    "Video encoder utilization (0-1).",
);
pub const DECODER_UTILIZATION: MetricDef = gauge(
    "gpu_decoder_utilization_ratio",
    GPU,
    "Video decoder utilization (0-1).",
);
pub const MEMORY_TOTAL: MetricDef = gauge(
    "gpu_memory_total_bytes",
    GPU,
    "Frame-buffer memory installed, in bytes.",
);
pub const MEMORY_USED: MetricDef = gauge(
    "gpu_memory_used_bytes",
    GPU,
    "Frame-buffer memory allocated by processes, in bytes.",
);
pub const MEMORY_FREE: MetricDef = gauge(
    "gpu_memory_free_bytes",
    GPU,
    "Frame-buffer memory free for allocation, in bytes.",
);
pub const MEMORY_RESERVED: MetricDef = gauge(
    "gpu_memory_reserved_bytes",
    GPU,
    "Frame-buffer memory reserved by the driver and firmware, in bytes.",
);
pub const TEMPERATURE: MetricDef = gauge(
    "gpu_temperature_celsius",
    GPU,
    "GPU die temperature, in degrees Celsius.",
);
pub const MEMORY_TEMPERATURE: MetricDef = gauge(
    "gpu_memory_temperature_celsius",
    GPU,
    "HBM memory temperature (NVML field 82), in degrees Celsius.",
);
pub const POWER: MetricDef = gauge("gpu_power_watts", GPU, "Power draw, in watts.");
pub const POWER_LIMIT: MetricDef = gauge(
    "gpu_power_limit_watts",
    GPU,
    "Power management limit, in watts.",
);
pub const ENERGY: MetricDef = counter(
    "gpu_energy_joules_total",
    GPU,
    "Energy consumed since the driver was loaded, in joules.",
);
pub const CLOCK: MetricDef = gauge(
    "gpu_clock_hertz",
    &["gpu", "uuid", "clock"],
    "Current clock frequency, in hertz; clock is sm, memory, graphics or video.",
);
pub const CLOCK_MAX: MetricDef = gauge(
    "gpu_clock_max_hertz",
    &["gpu", "uuid", "clock"],
    "Maximum clock frequency, in hertz; clock is sm, memory, graphics or video.",
);
pub const FAN_SPEED: MetricDef = gauge(
    "gpu_fan_speed_ratio",
    GPU,
    "Fan speed as a fraction of its maximum (0-1).",
);
pub const PERFORMANCE_STATE: MetricDef = gauge(
    "gpu_performance_state",
    GPU,
    "Performance state (P-state): 0 is full performance, 15 the lowest.",
);
pub const CLOCK_EVENT: MetricDef = gauge(
    "gpu_clock_event_active",
    &["gpu", "uuid", "reason"],
    "1 while the clock-event (throttle) reason holds clocks down, else 0.",
);
pub const ECC_ERRORS: MetricDef = counter(
    "gpu_ecc_errors_total",
    &["gpu", "uuid", "error", "scope"],
    "ECC errors; error is corrected or uncorrected, scope volatile (since driver load) \
     or aggregate (lifetime).",
);
pub const RETIRED_PAGES: MetricDef = gauge(
    "gpu_retired_pages",
    &["gpu", "uuid", "cause"],
    "Memory pages retired (pre-Ampere); cause is sbe (multiple single-bit) or dbe (double-bit).",
);
pub const RETIRED_PAGES_PENDING: MetricDef = gauge(
    "gpu_retired_pages_pending",
    GPU,
    "1 when a page retirement waits for the next driver reload, else 0.",
);
pub const REMAPPED_ROWS: MetricDef = counter(
    "gpu_remapped_rows_total",
    &["gpu", "uuid", "error"],
    "Memory rows remapped (Ampere and newer); error is correctable or uncorrectable.",
);
pub const REMAPPED_ROWS_PENDING: MetricDef = gauge(
    "gpu_remapped_rows_pending",
    GPU,
    "1 when a row remap waits for a GPU reset, else 0.",
);
pub const REMAPPED_ROWS_FAILURE: MetricDef = gauge(
    "gpu_remapped_rows_failure",
    GPU,
    "1 when a row remap failed (NVIDIA's RMA signal), else 0.",
);
pub const PCIE_REPLAYS: MetricDef = counter(
    "gpu_pcie_replays_total",
    GPU,
    "PCIe replays (link-level retransmissions) since the driver was loaded.",
);
pub const PCIE_LINK_GENERATION: MetricDef = gauge(
    "gpu_pcie_link_generation",
    GPU,
    "Current PCIe link generation.",
);
pub const PCIE_LINK_WIDTH: MetricDef = gauge(
    "gpu_pcie_link_width",
    GPU,
    "Current PCIe link width, in lanes.",
);
pub const PCIE_THROUGHPUT: MetricDef = gauge(
    "gpu_pcie_throughput_bytes_per_second",
    &["gpu", "uuid", "direction"],
    "PCIe throughput, in bytes per second; direction is tx or rx.",
);
pub const NVLINK_ERRORS: MetricDef = counter(
    "gpu_nvlink_errors_total",
    &["gpu", "uuid", "link", "error"],
    "NVLink errors per link; error is replay, recovery, crc_flit or crc_data.",
);
pub const XID_ERRORS: MetricDef = counter(
    "gpu_xid_errors_total",
    &["gpu", "uuid", "xid", "class"],
    "XID errors seen since gpu-sentinel started; class from the XID catalog: application, memory, nvlink, hardware, firmware, driver or unknown.",
);
pub const SM_ACTIVE: MetricDef = gauge(
    "gpu_sm_active_ratio",
    GPU,
    "Fraction of cycles an SM had a warp assigned, averaged over SMs (GPM, Hopper and newer).",
);
pub const SM_OCCUPANCY: MetricDef = gauge(
    "gpu_sm_occupancy_ratio",
    GPU,
    "Resident warps as a fraction of the SM maximum (GPM, Hopper and newer).",
);
pub const TENSOR_ACTIVE: MetricDef = gauge(
    "gpu_tensor_active_ratio",
    GPU,
    "Fraction of cycles a tensor pipe was active (GPM, Hopper and newer).",
);
pub const DRAM_ACTIVE: MetricDef = gauge(
    "gpu_dram_active_ratio",
    GPU,
    "Fraction of cycles the memory interface was sending or receiving (GPM, Hopper and newer).",
);
pub const PROCESS_MEMORY: MetricDef = gauge(
    "gpu_process_memory_bytes",
    PROCESS,
    "GPU memory held by a process, in bytes (the largest holders, up to max_process_series).",
);
pub const PROCESS_UTILIZATION: MetricDef = gauge(
    "gpu_process_utilization_ratio",
    PROCESS,
    "Share of SM time a process used since the previous collection (0-1).",
);
pub const BUILD_INFO: MetricDef = gauge(
    "gpu_sentinel_build_info",
    &["version", "revision"],
    "gpu-sentinel build; always 1.",
);
pub const SOURCE_UP: MetricDef = gauge(
    "gpu_sentinel_source_up",
    &[],
    "1 when the telemetry source (NVML, simulator, recording) is available, else 0.",
);
pub const COLLECT_DURATION: MetricDef = gauge(
    "gpu_sentinel_collect_duration_seconds",
    &["stage"],
    "Wall time of the last collection stage, in seconds; stage is collect or render.",
);
pub const LAST_COLLECT_TIMESTAMP: MetricDef = gauge(
    "gpu_sentinel_last_collect_timestamp_seconds",
    &[],
    "When the rendered collection ran, in seconds since the Unix epoch.",
);
pub const COLLECT_ERRORS: MetricDef = counter(
    "gpu_sentinel_collect_errors_total",
    &["call"],
    "Failed calls since start, by NVML function or source operation.",
);
pub const VALUES_REJECTED: MetricDef = counter(
    "gpu_sentinel_values_rejected_total",
    &["field"],
    "Values the source reported that no GPU can have (a negative temperature, a ratio above 1, used memory above total), cleared before use, by snapshot field, since start.",
);

pub const STATE_SAVE_ERRORS: MetricDef = counter(
    "gpu_sentinel_state_save_errors_total",
    &["file"],
    "Failed saves of a state file (engine.json, alerts.json) since start; the log tells only the first of a kind.",
);
pub const COLLECTOR_SUCCESS: MetricDef = gauge(
    "gpu_sentinel_collector_success",
    &["collector"],
    "1 when every call of the collector family succeeded this collection, else 0.",
);
pub const COLLECTOR_DURATION: MetricDef = gauge(
    "gpu_sentinel_collector_duration_seconds",
    &["collector"],
    "Wall time of the collector family this collection, across all GPUs, in seconds.",
);
pub const PROCESS_SERIES_DROPPED: MetricDef = gauge(
    "gpu_sentinel_process_series_dropped",
    &[],
    "Processes left out of gpu_process_* this collection by the max_process_series cap.",
);

pub const RISK_SCORE: MetricDef = gauge(
    "gpu_failure_risk_score",
    GPU,
    "Failure-risk score 0-1 (logistic model over the GPU's windows; at least 0.95 while a known-bad rule holds).",
);
pub const RISK_CONTRIBUTION: MetricDef = gauge(
    "gpu_failure_risk_contribution",
    &["gpu", "uuid", "feature"],
    "Log-odds a feature adds to the failure-risk score (weight x value); the score's reasons.",
);
pub const RISK_RULE: MetricDef = gauge(
    "gpu_failure_risk_rule",
    &["gpu", "uuid", "rule"],
    "1 while a known-bad rule holds (fell_off_bus, row_remap_failure, uncorrectable_memory_error).",
);
pub const IDLE_SECONDS: MetricDef = gauge(
    "gpu_idle_seconds",
    GPU,
    "Consecutive time the GPU's utilization stayed under the idle threshold, in seconds.",
);
pub const ALLOCATED_IDLE: MetricDef = gauge(
    "gpu_allocated_idle",
    GPU,
    "1 when memory is held and every sample of the idle window stayed under the threshold.",
);
pub const GHOST_PROCESSES: MetricDef = gauge(
    "gpu_ghost_processes",
    GPU,
    "Processes holding memory with 0% SM for the idle window whose PID is gone, a zombie or orphaned.",
);
pub const LONG_RUNNING_PROCESSES: MetricDef = gauge(
    "gpu_long_running_processes",
    GPU,
    "Processes running longer than [idle] long_running.",
);
pub const COST: MetricDef = counter(
    "gpu_cost_total",
    &["gpu", "uuid", "state"],
    "Cost of the GPU's time since gpu-sentinel started keeping state, by state (busy, idle).",
);
pub const OWNER_SECONDS: MetricDef = counter(
    "gpu_owner_seconds_total",
    &["gpu", "uuid", "owner", "state"],
    "GPU-seconds charged to an owner (namespace, user or pod per [cost] owner), by state (busy, idle).",
);
pub const SCALE_RECOMMENDATION: MetricDef = gauge(
    "gpu_scale_recommendation",
    &["scope", "direction"],
    "1 on the advised scaling direction (out, in, hold) for the scope (node).",
);
pub const SCALE_RECOMMENDED_GPUS: MetricDef = gauge(
    "gpu_scale_recommended_gpus",
    &["scope"],
    "GPUs the measured demand needs with the configured buffer.",
);
pub const NODE_FREE_GPUS: MetricDef = gauge(
    "gpu_node_free_gpus",
    &[],
    "GPUs answering with nothing allocated on them.",
);
pub const NODE_LARGEST_FREE_MEMORY: MetricDef = gauge(
    "gpu_node_largest_free_memory_bytes",
    &[],
    "Largest free memory on one GPU, in bytes.",
);
pub const NODE_FRAGMENTATION: MetricDef = gauge(
    "gpu_node_fragmentation_ratio",
    &[],
    "Share of free GPU memory stranded on partly used GPUs (0-1).",
);

/// Families of the analysis engine, in exposition order after [`NATIVE`].
pub const ANALYSIS: &[MetricDef] = &[
    RISK_SCORE,
    RISK_CONTRIBUTION,
    RISK_RULE,
    IDLE_SECONDS,
    ALLOCATED_IDLE,
    GHOST_PROCESSES,
    LONG_RUNNING_PROCESSES,
    COST,
    OWNER_SECONDS,
    SCALE_RECOMMENDATION,
    SCALE_RECOMMENDED_GPUS,
    NODE_FREE_GPUS,
    NODE_LARGEST_FREE_MEMORY,
    NODE_FRAGMENTATION,
];

pub const ALERTS: MetricDef = gauge(
    "gpu_sentinel_alerts",
    &["alertname", "state"],
    "Alerts of each rule by state (pending, firing).",
);

pub const NOTIFICATIONS: MetricDef = counter(
    "gpu_sentinel_notifications_total",
    &["receiver", "outcome"],
    "Notifications by receiver and outcome: sent, retried, dropped (a receiver refused it), superseded (a newer one of its group replaced it), evicted (the outbox was full).",
);
pub const OUTBOX_PENDING: MetricDef = gauge(
    "gpu_sentinel_outbox_pending",
    &[],
    "Notifications in the outbox waiting for delivery.",
);
pub const OUTBOX_DURABLE: MetricDef = gauge(
    "gpu_sentinel_outbox_durable",
    &[],
    "1 when the outbox is on disk; 0 when its store failed and it runs in memory.",
);
pub const OUTBOX_STORE_ERRORS: MetricDef = counter(
    "gpu_sentinel_outbox_store_errors_total",
    &[],
    "Writes to the outbox's store that failed (the notification was kept in memory).",
);
pub const RATE_LIMIT_SUMMARIES: MetricDef = counter(
    "gpu_sentinel_rate_limit_summaries_total",
    &[],
    "Summary messages sent in place of several notifications to rate-limited receivers.",
);
pub const DELIVERY_IN_FLIGHT: MetricDef = gauge(
    "gpu_sentinel_delivery_in_flight_seconds",
    &["receiver"],
    "How long the send in progress to a receiver has run, in seconds; absent when idle.",
);
pub const DELIVERY_RETRY_AFTER_CAPPED: MetricDef = counter(
    "gpu_sentinel_delivery_retry_after_capped_total",
    &["receiver"],
    "Waits a receiver asked for (Retry-After, a chat service's rate-limit code) longer than its max_backoff, cut to it.",
);
pub const DELIVERY_WORKER_RESTARTS: MetricDef = counter(
    "gpu_sentinel_delivery_worker_restarts_total",
    &["receiver"],
    "Times a receiver's delivery worker panicked and was started again (it is reported on /healthz while down).",
);
pub const ADVICE_CACHED: MetricDef = gauge(
    "gpu_sentinel_advice_cached",
    &[],
    "Alert groups whose LLM advice is held in the cache.",
);
pub const ADVICE_REQUESTS: MetricDef = counter(
    "gpu_sentinel_advice_requests_total",
    &["outcome"],
    "Requests to the LLM advice API by outcome (ok, incomplete, timeout, rate_limited, ...).",
);

/// Families of the alerting stage, after [`ANALYSIS`].
pub const ALERTING: &[MetricDef] = &[
    ALERTS,
    NOTIFICATIONS,
    OUTBOX_PENDING,
    OUTBOX_DURABLE,
    OUTBOX_STORE_ERRORS,
    RATE_LIMIT_SUMMARIES,
    DELIVERY_IN_FLIGHT,
    DELIVERY_RETRY_AFTER_CAPPED,
    DELIVERY_WORKER_RESTARTS,
    ADVICE_REQUESTS,
    ADVICE_CACHED,
];

/// Every native family, in exposition order.
pub const NATIVE: &[MetricDef] = &[
    GPU_INFO,
    GPU_UP,
    UTILIZATION,
    MEMORY_COPY_UTILIZATION,
    ENCODER_UTILIZATION,
    DECODER_UTILIZATION,
    MEMORY_TOTAL,
    MEMORY_USED,
    MEMORY_FREE,
    MEMORY_RESERVED,
    TEMPERATURE,
    MEMORY_TEMPERATURE,
    POWER,
    POWER_LIMIT,
    ENERGY,
    CLOCK,
    CLOCK_MAX,
    FAN_SPEED,
    PERFORMANCE_STATE,
    CLOCK_EVENT,
    ECC_ERRORS,
    RETIRED_PAGES,
    RETIRED_PAGES_PENDING,
    REMAPPED_ROWS,
    REMAPPED_ROWS_PENDING,
    REMAPPED_ROWS_FAILURE,
    PCIE_REPLAYS,
    PCIE_LINK_GENERATION,
    PCIE_LINK_WIDTH,
    PCIE_THROUGHPUT,
    NVLINK_ERRORS,
    XID_ERRORS,
    SM_ACTIVE,
    SM_OCCUPANCY,
    TENSOR_ACTIVE,
    DRAM_ACTIVE,
    PROCESS_MEMORY,
    PROCESS_UTILIZATION,
    BUILD_INFO,
    SOURCE_UP,
    COLLECT_DURATION,
    LAST_COLLECT_TIMESTAMP,
    COLLECT_ERRORS,
    VALUES_REJECTED,
    COLLECTOR_SUCCESS,
    COLLECTOR_DURATION,
    STATE_SAVE_ERRORS,
    PROCESS_SERIES_DROPPED,
];

/// The metrics reference (`docs/metrics.md`): native families, then the dcgm-exporter
/// compatible ones. Generated; edit the catalogue, not the file.
pub fn reference_markdown() -> String {
    let mut out = String::new();
    out.push_str(
        "# Metrics reference\n\n\
         <!-- Generated from src/export/metrics.rs and src/export/dcgm.rs by \
         `UPDATE_DOCS=1 cargo test --test metrics_doc`. Do not edit by hand. -->\n\n\
         Every series of a GPU carries `gpu` (the NVML index) and `uuid`; identity \
         (name, PCI bus id, serial, driver) lives on `gpu_info` only. A value the GPU did not \
         give renders no sample rather than 0. A lost GPU renders `gpu_up 0`, its `gpu_info` \
         and its XID counters, nothing else.\n\n\
         ## gpu-sentinel metrics\n\n",
    );
    table(&mut out, NATIVE);
    out.push_str(
        "\n## Analysis metrics\n\n\
         From the analysis engine: failure risk with its reasons, idle and ghost findings, \
         cost and owner time, scaling and placement advice. Counters of cost and owner time \
         continue across restarts (the engine's state is persisted).\n\n",
    );
    table(&mut out, ANALYSIS);
    out.push_str("\n## Alerting metrics\n\n");
    table(&mut out, ALERTING);
    out.push_str(
        "\n## dcgm-exporter compatible metrics (`[export] dcgm_compat = true`)\n\n\
         Rendered in addition to the metrics above, with dcgm-exporter's names, units and \
         labels so its Grafana dashboard and existing alert rules keep working. Every series \
         carries `gpu`, `UUID`, `pci_bus_id`, `device` (`nvidia<index>`), `modelName`, \
         `Hostname` (the spelling of dcgm-exporter up to 4.7; 4.8.3 and later write \
         `hostname`) and `DCGM_FI_DRIVER_VERSION`; the labels column lists only the ones beyond those. Units \
         are dcgm-exporter's: MHz, °C, W, mJ, MiB, %.\n\n",
    );
    table(&mut out, &super::dcgm::reference_defs());
    out.push_str(
        "\nNot rendered, from dcgm-exporter's default counter set and its commented-out \
         defaults:\n\n| field | why |\n|---|---|\n",
    );
    for (field, why) in super::dcgm::NOT_COVERED {
        let _ = writeln!(out, "| `{field}` | {why} |");
    }
    out
}

fn table(out: &mut String, defs: &[MetricDef]) {
    out.push_str("| metric | type | labels | help |\n|---|---|---|---|\n");
    for def in defs {
        let labels: Vec<String> = def.labels.iter().map(|l| format!("`{l}`")).collect();
        // Writing to a String cannot fail.
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} |",
            def.name,
            def.kind.as_str(),
            labels.join(", "),
            def.help.replace('|', "\\|")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn names_are_unique_and_follow_the_conventions() {
        let mut seen = BTreeSet::new();
        for def in NATIVE.iter().chain(ANALYSIS).chain(ALERTING) {
            assert!(seen.insert(def.name), "{} twice", def.name);
            assert!(
                def.name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                "{} is not snake_case",
                def.name
            );
            assert_eq!(
                def.kind == MetricKind::Counter,
                def.name.ends_with("_total"),
                "{}: counters, and only counters, end in _total",
                def.name
            );
            assert!(!def.help.is_empty(), "{} has no help", def.name);
        }
    }

    #[test]
    fn reference_lists_every_family() {
        let doc = reference_markdown();
        for def in NATIVE.iter().chain(ANALYSIS).chain(ALERTING) {
            assert!(doc.contains(&format!("| `{}` |", def.name)), "{}", def.name);
        }
    }
}
