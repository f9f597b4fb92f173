//! The native exposition: one [`Snapshot`] and its [`CollectHealth`] as gpu-sentinel's own
//! metric families (see [`metrics`](super::metrics)).
//!
//! Rules every family follows: a value that is `None` renders no sample (never 0); a GPU
//! with `up = false` renders `gpu_up 0`, its `gpu_info` and its XID counters (the kernel
//! reports XID 79 exactly when a GPU falls off the bus, so hiding it would hide the cause)
//! and nothing else; samples go in GPU index order, then in the fixed label order of the
//! model (`sm, memory, graphics, video`; `corrected/uncorrected × volatile/aggregate`; …).

use super::RenderOptions;
use std::collections::BTreeSet;

use super::families::{Families, flag};
use super::metric_def::MetricDef;
use super::metrics::*;
use super::state::ExportState;
use crate::model::CollectHealth;
use crate::model::{ClockEvents, GpuSample, ProcessSample, Snapshot};

const HERTZ_PER_MHZ: f64 = 1e6;

/// The `gpu` and `uuid` labels of one GPU.
struct GpuLabels<'a> {
    index: String,
    uuid: &'a str,
    sample: &'a GpuSample,
}

/// Renders the native families into `families`, in catalogue order.
pub(super) fn render_native(
    families: &mut Families,
    snapshot: &Snapshot,
    health: &CollectHealth,
    state: &ExportState,
    options: &RenderOptions,
) {
    families.declare(NATIVE);
    let mut all: Vec<&GpuSample> = snapshot.gpus.iter().collect();
    all.sort_by_key(|g| g.index);
    let all: Vec<GpuLabels> = all
        .into_iter()
        .map(|sample| GpuLabels {
            index: sample.index.to_string(),
            uuid: &sample.uuid,
            sample,
        })
        .collect();
    let up: Vec<&GpuLabels> = all.iter().filter(|g| g.sample.up).collect();

    identity(families, &all, snapshot, options);
    readings(families, &up);
    clocks(families, &up);
    health_counters(families, &up, options.nvlink_per_link);
    xids(families, state);
    gpm(families, &up);
    processes(families, snapshot, options);
    self_metrics(families, snapshot, health, state, options);
}

fn identity(
    families: &mut Families,
    gpus: &[GpuLabels],
    snapshot: &Snapshot,
    options: &RenderOptions,
) {
    let hostname = if options.hostname.is_empty() {
        snapshot.host.hostname.as_str()
    } else {
        options.hostname.as_str()
    };
    let driver = snapshot.host.driver_version.as_deref().unwrap_or("");
    let cuda = snapshot.host.cuda_version.as_deref().unwrap_or("");
    let info = families.family(&GPU_INFO);
    for g in gpus {
        let s = g.sample;
        let serial = s.serial.as_deref().unwrap_or("");
        info.push(
            &[
                &g.index,
                g.uuid,
                &s.name,
                &s.pci_bus_id,
                serial,
                driver,
                cuda,
                hostname,
            ],
            1.0,
        );
    }
    let up = families.family(&GPU_UP);
    for g in gpus {
        up.push(&[&g.index, g.uuid], flag(g.sample.up));
    }
}

/// One sample per GPU where `value` gives one.
fn per_gpu(
    families: &mut Families,
    def: &MetricDef,
    gpus: &[&GpuLabels],
    value: impl Fn(&GpuSample) -> Option<f64>,
) {
    let family = families.family(def);
    for g in gpus {
        family.push_some(&[&g.index, g.uuid], value(g.sample));
    }
}

fn float(value: Option<u64>) -> Option<f64> {
    value.map(|v| v as f64)
}

fn readings(families: &mut Families, up: &[&GpuLabels]) {
    per_gpu(families, &UTILIZATION, up, |s| s.utilization.gpu);
    per_gpu(families, &MEMORY_COPY_UTILIZATION, up, |s| {
        s.utilization.memory_copy
    });
    per_gpu(families, &ENCODER_UTILIZATION, up, |s| {
        s.utilization.encoder
    });
    per_gpu(families, &DECODER_UTILIZATION, up, |s| {
        s.utilization.decoder
    });
    per_gpu(families, &MEMORY_TOTAL, up, |s| float(s.memory.total_bytes));
    per_gpu(families, &MEMORY_USED, up, |s| float(s.memory.used_bytes));
    per_gpu(families, &MEMORY_FREE, up, |s| float(s.memory.free_bytes));
    per_gpu(families, &TEMPERATURE, up, |s| s.temperature_celsius);
    per_gpu(families, &MEMORY_TEMPERATURE, up, |s| {
        s.memory_temperature_celsius
    });
    per_gpu(families, &POWER, up, |s| s.power_watts);
    per_gpu(families, &POWER_LIMIT, up, |s| s.power_limit_watts);
    per_gpu(families, &ENERGY, up, |s| s.energy_joules);
    per_gpu(families, &FAN_SPEED, up, |s| s.fan_speed_ratio);
    per_gpu(families, &PERFORMANCE_STATE, up, |s| {
        s.performance_state.map(f64::from)
    });
}

fn clocks(families: &mut Families, up: &[&GpuLabels]) {
    for (def, max) in [(&CLOCK, false), (&CLOCK_MAX, true)] {
        let family = families.family(def);
        for g in up {
            let clocks = if max {
                &g.sample.clocks_max
            } else {
                &g.sample.clocks
            };
            for (clock, mhz) in clocks.labelled() {
                // A datacenter GPU's graphics clock is its SM clock; the video clock has
                // no ceiling worth a series (see CLOCKS_EXPOSED).
                let exposed: &[&str] = if max {
                    &CLOCKS_MAX_EXPOSED
                } else {
                    &CLOCKS_EXPOSED
                };
                if !exposed.contains(&clock) {
                    continue;
                }
                family.push_some(
                    &[&g.index, g.uuid, clock],
                    mhz.map(|mhz| f64::from(mhz) * HERTZ_PER_MHZ),
                );
            }
        }
    }
    let family = families.family(&CLOCK_EVENT);
    for g in up {
        if let Some(events) = g.sample.clock_events {
            for (reason, bit) in ClockEvents::REASONS {
                if CLOCK_EVENTS_EXPOSED.contains(&reason) {
                    family.push(&[&g.index, g.uuid, reason], flag(events.intersects(bit)));
                }
            }
        }
    }
}

/// Clock-event reasons with a series: what holds clocks down that an operator acts on.
/// Left out: `gpu_idle` (utilization says it), `sync_boost` and `display_clock_setting`
/// (no datacenter job meets them); `/api/v1/gpus` and dcgm-exporter's bit mask keep all.
const CLOCK_EVENTS_EXPOSED: [&str; 6] = [
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
];

/// Clocks with a series: sm and memory (clocks stuck low), video (video inference). The
/// graphics clock is the SM clock on datacenter GPUs, and dcgm-exporter leaves it out too.
const CLOCKS_EXPOSED: [&str; 3] = ["sm", "memory", "video"];

/// Maximum clocks with a series: the ceilings clocks stuck low are read against.
const CLOCKS_MAX_EXPOSED: [&str; 2] = ["sm", "memory"];

fn health_counters(families: &mut Families, up: &[&GpuLabels], nvlink_per_link: bool) {
    let family = families.family(&ECC_ERRORS);
    for g in up {
        for (error, scope, count) in g.sample.ecc.labelled() {
            family.push_some(&[&g.index, g.uuid, error, scope], float(count));
        }
    }
    let family = families.family(&RETIRED_PAGES);
    for g in up {
        if let Some(pages) = g.sample.retired_pages {
            family.push(&[&g.index, g.uuid, "sbe"], pages.sbe as f64);
            family.push(&[&g.index, g.uuid, "dbe"], pages.dbe as f64);
        }
    }
    per_gpu(families, &RETIRED_PAGES_PENDING, up, |s| {
        s.retired_pages.map(|p| flag(p.pending))
    });
    let family = families.family(&REMAPPED_ROWS);
    for g in up {
        if let Some(rows) = g.sample.remapped_rows {
            family.push(&[&g.index, g.uuid, "correctable"], rows.correctable as f64);
            family.push(
                &[&g.index, g.uuid, "uncorrectable"],
                rows.uncorrectable as f64,
            );
        }
    }
    per_gpu(families, &REMAPPED_ROWS_PENDING, up, |s| {
        s.remapped_rows.map(|r| flag(r.pending))
    });
    per_gpu(families, &REMAPPED_ROWS_FAILURE, up, |s| {
        s.remapped_rows.map(|r| flag(r.failure))
    });
    per_gpu(families, &PCIE_REPLAYS, up, |s| {
        float(s.pcie.replay_counter)
    });
    per_gpu(families, &PCIE_LINK_GENERATION, up, |s| {
        s.pcie.link_generation.map(f64::from)
    });
    per_gpu(families, &PCIE_LINK_WIDTH, up, |s| {
        s.pcie.link_width.map(f64::from)
    });
    let family = families.family(&PCIE_THROUGHPUT);
    for g in up {
        family.push_some(&[&g.index, g.uuid, "tx"], g.sample.pcie.tx_bytes_per_second);
        family.push_some(&[&g.index, g.uuid, "rx"], g.sample.pcie.rx_bytes_per_second);
    }
    let family = families.family(&NVLINK_ERRORS);
    for g in up {
        if nvlink_per_link {
            for link in &g.sample.nvlink {
                let link_label = link.link.to_string();
                for (error, count) in link.labelled() {
                    family.push(&[&g.index, g.uuid, &link_label, error], count as f64);
                }
            }
        } else if !g.sample.nvlink.is_empty() {
            // Summed per error; the empty `link` value leaves the label out.
            let mut sums = [0u64; 4];
            let mut names = [""; 4];
            for link in &g.sample.nvlink {
                for (i, (error, count)) in link.labelled().into_iter().enumerate() {
                    sums[i] = sums[i].saturating_add(count);
                    names[i] = error;
                }
            }
            for (error, sum) in names.into_iter().zip(sums) {
                family.push(&[&g.index, g.uuid, "", error], sum as f64);
            }
        }
    }
}

fn xids(families: &mut Families, state: &ExportState) {
    let family = families.family(&XID_ERRORS);
    for (key, count) in state.xid_totals() {
        let gpu = key.gpu.map(|i| i.to_string()).unwrap_or_default();
        let xid = key.xid.to_string();
        family.push(
            &[
                &gpu,
                &key.uuid,
                &xid,
                crate::xid::classify(key.xid).as_str(),
            ],
            count as f64,
        );
    }
}

fn gpm(families: &mut Families, up: &[&GpuLabels]) {
    per_gpu(families, &SM_ACTIVE, up, |s| {
        s.gpm.and_then(|g| g.sm_active)
    });
    per_gpu(families, &SM_OCCUPANCY, up, |s| {
        s.gpm.and_then(|g| g.sm_occupancy)
    });
    per_gpu(families, &TENSOR_ACTIVE, up, |s| {
        s.gpm.and_then(|g| g.tensor_active)
    });
    per_gpu(families, &DRAM_ACTIVE, up, |s| {
        s.gpm.and_then(|g| g.dram_active)
    });
}

/// Per-process series, capped at `max_process_series`: the processes holding the most
/// memory are kept (ties broken by GPU, then PID, so the choice is stable).
fn processes(families: &mut Families, snapshot: &Snapshot, options: &RenderOptions) {
    let up: BTreeSet<u32> = snapshot
        .gpus
        .iter()
        .filter(|g| g.up)
        .map(|g| g.index)
        .collect();
    let mut candidates: Vec<&ProcessSample> = snapshot
        .processes
        .iter()
        .filter(|p| up.contains(&p.gpu))
        .collect();
    candidates.sort_by(|a, b| {
        b.used_memory_bytes
            .unwrap_or(0)
            .cmp(&a.used_memory_bytes.unwrap_or(0))
            .then(a.gpu.cmp(&b.gpu))
            .then(a.pid.cmp(&b.pid))
    });
    let dropped = candidates.len().saturating_sub(options.max_process_series);
    candidates.truncate(options.max_process_series);
    candidates.sort_by_key(|p| (p.gpu, p.pid));

    let labels: Vec<[String; 12]> = candidates
        .iter()
        .map(|p| {
            let text = |v: &Option<String>| v.clone().unwrap_or_default();
            let id = |v: Option<u32>| v.map(|v| v.to_string()).unwrap_or_default();
            [
                p.gpu.to_string(),
                p.uuid.clone(),
                p.pid.to_string(),
                text(&p.process),
                text(&p.user),
                text(&p.container),
                text(&p.pod),
                text(&p.namespace),
                text(&p.hpc_job),
                text(&p.team),
                id(p.gpu_instance),
                id(p.compute_instance),
            ]
        })
        .collect();
    let family = families.family(&PROCESS_MEMORY);
    for (p, l) in candidates.iter().zip(&labels) {
        family.push_some(&as_refs(l), float(p.used_memory_bytes));
    }
    let family = families.family(&PROCESS_UTILIZATION);
    for (p, l) in candidates.iter().zip(&labels) {
        family.push_some(&as_refs(l), p.sm_utilization);
    }
    families
        .family(&PROCESS_SERIES_DROPPED)
        .push(&[], dropped as f64);
    allocations(families, snapshot, &up);
}

/// One `gpu_allocation_info` per GPU, MIG instance and holder. Time-sliced replicas of
/// one container name the same holder: it is one series.
fn allocations(families: &mut Families, snapshot: &Snapshot, up: &BTreeSet<u32>) {
    let text = |v: &Option<String>| v.clone().unwrap_or_default();
    let id = |v: Option<u32>| v.map(|v| v.to_string()).unwrap_or_default();
    let holders: BTreeSet<(u32, [String; 9])> = snapshot
        .allocations
        .iter()
        .filter(|a| up.contains(&a.gpu))
        .map(|a| {
            (
                a.gpu,
                [
                    a.uuid.clone(),
                    text(&a.namespace),
                    text(&a.pod),
                    text(&a.container),
                    text(&a.hpc_job),
                    text(&a.user),
                    text(&a.team),
                    id(a.gpu_instance),
                    id(a.compute_instance),
                ],
            )
        })
        .collect();
    let family = families.family(&ALLOCATION_INFO);
    for (gpu, [uuid, namespace, pod, container, job, user, team, gi, ci]) in &holders {
        let gpu = gpu.to_string();
        family.push(
            &[
                &gpu, uuid, namespace, pod, container, job, user, team, gi, ci,
            ],
            1.0,
        );
    }
}

fn self_metrics(
    families: &mut Families,
    snapshot: &Snapshot,
    health: &CollectHealth,
    state: &ExportState,
    options: &RenderOptions,
) {
    families
        .family(&BUILD_INFO)
        .push(&[&options.version, &options.revision], 1.0);
    families
        .family(&SOURCE_UP)
        .push(&[], flag(health.source_up));
    let family = families.family(&COLLECT_DURATION);
    family.push(&["collect"], health.seconds);
    for (stage, seconds) in state.stage_seconds() {
        family.push(&[stage], seconds);
    }
    let at = snapshot.at.timestamp_millis() as f64 / 1000.0;
    families.family(&LAST_COLLECT_TIMESTAMP).push(&[], at);
    let family = families.family(&COLLECT_ERRORS);
    for (call, count) in &health.errors_by_call {
        family.push(&[call], *count as f64);
    }
    let family = families.family(&VALUES_REJECTED);
    for (field, count) in state.rejected_values() {
        family.push(&[field], count as f64);
    }
    let family = families.family(&COLLECTOR_SUCCESS);
    for collector in &health.families {
        family.push(&[collector.name], flag(collector.success));
    }
    let family = families.family(&COLLECTOR_DURATION);
    for collector in &health.families {
        family.push(&[collector.name], collector.seconds);
    }
    let family = families.family(&STATE_SAVE_ERRORS);
    for (file, failures) in state.state_save_errors() {
        family.push(&[file], failures as f64);
    }
    if let Some(at) = super::tls_cert_not_after() {
        families.family(&TLS_CERT_EXPIRY).push(&[], at as f64);
    }
}

fn as_refs<const N: usize>(labels: &[String; N]) -> [&str; N] {
    labels.each_ref().map(String::as_str)
}
