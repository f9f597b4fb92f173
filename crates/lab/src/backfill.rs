//! `record --format openmetrics`: simulated fleet history as OpenMetrics text with
//! timestamps, for `promtool tsdb create-blocks-from openmetrics FILE DIR`.
//!
//! Each simulated host is a [`Fleet`] of its own (its own seed, so its own UUIDs and
//! workloads) with an engine of its own, stepped together through simulated time. At every
//! step each host's collection is rendered exactly as `/metrics` would serve it (the native
//! families and the engine's findings; the agent's own `gpu_sentinel_*` families describe the
//! recorder, not the fleet, and are left out), and every sample gets the host's `instance`
//! label and the step's timestamp — what a Prometheus scraping the fleet would have stored.
//!
//! OpenMetrics forbids interleaving the samples of two metric families, while a step renders
//! all families at once. So each family's samples go to a part file of their own while
//! stepping, and the parts are joined into one file at the end, each family once, in time
//! order within every series. The output is written next to its final name and renamed into
//! place only when complete: an interrupted run never leaves a file that looks whole.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::Receiver;
use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};
use regex::Regex;

use crate::config::Config;
use crate::engine::{Engine, EngineConfig};
use crate::export::{ExportState, RenderInput, RenderOptions};
use crate::model::CollectHealth;
use crate::source::simulate::{Fleet, GpuPlan, WorkloadKind};

/// The families recorded unless `--families` says otherwise: what the fleet report, the
/// fleet review and the dashboards query. Every family is what `/metrics` serves; the rest
/// (clocks, per-link NVLink counters, …) would multiply the file for no reader.
pub const FLEET_FAMILIES: &str = "^gpu_(info|up|utilization_ratio|memory_(used|total)_bytes|power_watts|temperature_celsius|energy_joules_total|failure_risk_(score|contribution|rule)|owner_seconds_total|cost_total|idle_seconds|allocated_idle|allocated|allocation_info|ghost_processes|long_running_processes|process_(memory_bytes|utilization_ratio)|xid_errors_total|health_state|node_health_state|mig_(share_ratio|sm_active_ratio|allocated|allocated_idle|memory_(used|total)_bytes|cost_total)|node_free_mig_gpus)$";

/// What one backfill run wrote.
pub struct Written {
    pub steps: u64,
    pub samples: u64,
    pub families: usize,
}

/// The simulated hosts' names: `sim-node-01`, `sim-node-02`, …
pub(crate) fn host_name(index: usize) -> String {
    format!("sim-node-{:02}", index + 1)
}

/// What history to write.
pub struct History {
    pub hosts: usize,
    /// Simulated time covered, a collection every `interval`, the last one at `end`.
    pub span: Duration,
    pub interval: Duration,
    pub end: DateTime<Utc>,
    /// Families (as `/metrics` names them) to keep.
    pub families: Regex,
}

/// Writes `history` of the simulated hosts to `out`.
pub fn write(
    config: &Config,
    history: &History,
    out: &Path,
    stop: &Receiver<()>,
) -> anyhow::Result<Written> {
    let History {
        hosts,
        span,
        interval,
        end,
        ref families,
    } = *history;
    let steps = u64::try_from(span.as_nanos() / interval.as_nanos()).unwrap_or(u64::MAX);
    anyhow::ensure!(steps > 0, "--simulated-duration is shorter than --interval");
    let start = end
        - chrono::TimeDelta::from_std(interval.saturating_mul(u32::try_from(steps - 1)?))
            .context("--simulated-duration is too long")?;
    let engine_config = EngineConfig::from_config(config)?;
    let mut nodes: Vec<Node> = (0..hosts)
        .map(|i| Node::new(config, &engine_config, i, start))
        .collect();

    // Dropping the parts on an early return removes them: no half-written history.
    let mut parts = Parts::create(out, families.clone())?;
    let mut samples = 0u64;
    for step in 0..steps {
        for node in &mut nodes {
            if step > 0 {
                node.fleet.advance(interval.as_secs_f64());
            }
            samples += node.collect(&mut parts)?;
        }
        if step % 64 == 0 && stop.try_recv().is_ok() {
            anyhow::bail!("stopped by signal; {} not written", out.display());
        }
    }
    let families = parts.join(out)?;
    Ok(Written {
        steps,
        samples,
        families,
    })
}

/// What each host runs. The first is the `[simulation]` fleet, faults included: the fleet's
/// failing GPUs. The others are healthy, so a report's risk review has one host to point
/// at. Of every four hosts the third is a development host, its bursty jobs running
/// 08:00–20:00 UTC on weekdays and paused otherwise (idle nights and weekends: what energy
/// advice looks for), the fourth serves inference, and the rest mix training, inference,
/// bursty jobs, idle allocations and free GPUs, each host starting the mix at another GPU.
fn host_plans(simulation: &crate::config::SimulationConfig, index: usize) -> Vec<GpuPlan> {
    if index == 0 {
        return Fleet::plans(simulation);
    }
    const MIX: [WorkloadKind; 6] = [
        WorkloadKind::Training,
        WorkloadKind::Inference,
        WorkloadKind::Bursty,
        WorkloadKind::AllocatedIdle,
        WorkloadKind::Training,
        WorkloadKind::Unused,
    ];
    (0..simulation.gpus as usize)
        .map(|gpu| {
            let workload = match index % 4 {
                2 => WorkloadKind::Bursty,
                3 => WorkloadKind::Inference,
                _ => MIX[(gpu + index) % MIX.len()],
            };
            GpuPlan {
                horizon_hours: simulation.fault_hours,
                office_hours: index % 4 == 2,
                ..GpuPlan::healthy(workload)
            }
        })
        .collect()
}

/// One simulated host: its fleet, engine and exposition state.
struct Node {
    instance: String,
    fleet: Fleet,
    engine: Engine,
    export: ExportState,
    options: RenderOptions,
}

impl Node {
    fn new(config: &Config, engine: &EngineConfig, index: usize, start: DateTime<Utc>) -> Node {
        let mut simulation = config.simulation.clone();
        // Each host its own stream: distinct UUIDs, workloads and fault timings.
        simulation.seed = simulation
            .seed
            .wrapping_add((index as u64).wrapping_mul(0x2545_F491_4F6C_DD1D));
        let instance = host_name(index);
        // The first host is the `[simulation]` fleet, its first `mig_gpus` GPUs in MIG mode.
        let fleet = match index {
            0 => Fleet::new(&simulation, start),
            _ => Fleet::from_plans(
                simulation.seed,
                &simulation.model,
                start,
                &host_plans(&simulation, index),
            ),
        }
        .with_hostname(&instance);
        let mut options = RenderOptions::from_config(config);
        options.hostname = instance.clone();
        Node {
            instance,
            fleet,
            engine: Engine::new(engine.clone()),
            export: ExportState::default(),
            options,
        }
    }

    /// Collects, analyses and renders one step; returns the samples written.
    fn collect(&mut self, parts: &mut Parts) -> anyhow::Result<u64> {
        let mut snapshot = self.fleet.snapshot();
        // A simulated reading is always in range; sanitising keeps the path the agent's.
        let _ = snapshot.sanitize();
        let findings = self.engine.step(&snapshot);
        let health = CollectHealth {
            source_up: true,
            ..CollectHealth::default()
        };
        let families = crate::export::families(
            &RenderInput {
                findings: Some(&findings),
                ..RenderInput::new(&snapshot, &health)
            },
            &mut self.export,
            &self.options,
        );
        let text = families.encode();
        let millis = snapshot.at.timestamp_millis();
        let timestamp = format!("{}.{:03}", millis.div_euclid(1000), millis.rem_euclid(1000));
        parts.append(&text, &self.instance, &timestamp)
    }
}

/// The part files, one per metric family, under `<out>.parts/`.
struct Parts {
    dir: PathBuf,
    /// Families (text format 0.0.4 names) to keep.
    keep: Regex,
    /// Family name (as text format 0.0.4 spells it) → its slot in `order`.
    files: HashMap<String, usize>,
    /// (OpenMetrics TYPE line, writer) per family, in order of first appearance.
    order: Vec<(String, BufWriter<File>)>,
}

impl Parts {
    fn create(out: &Path, keep: Regex) -> anyhow::Result<Parts> {
        let dir = sibling(out, ".parts");
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .with_context(|| format!("cannot clear {}", dir.display()))?;
        }
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(Parts {
            dir,
            keep,
            files: HashMap::new(),
            order: Vec::new(),
        })
    }

    /// Routes the sample lines of one rendered exposition (text format 0.0.4) to their
    /// families' parts, each with `instance` and the timestamp added.
    fn append(&mut self, exposition: &str, instance: &str, timestamp: &str) -> anyhow::Result<u64> {
        let mut current: Option<usize> = None;
        let mut samples = 0;
        for line in exposition.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap_or((rest, "unknown"));
                current = if name.starts_with("gpu_sentinel_") || !self.keep.is_match(name) {
                    None
                } else {
                    Some(self.part(name, kind)?)
                };
                continue;
            }
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            let Some(slot) = current else { continue };
            let writer = &mut self.order[slot].1;
            write_sample(writer, line, instance, timestamp)?;
            samples += 1;
        }
        Ok(samples)
    }

    fn part(&mut self, name: &str, kind: &str) -> anyhow::Result<usize> {
        if let Some(slot) = self.files.get(name) {
            return Ok(*slot);
        }
        let path = self.dir.join(format!("{}.om", self.order.len()));
        let file =
            File::create(&path).with_context(|| format!("cannot create {}", path.display()))?;
        // OpenMetrics names a counter family without its `_total` suffix.
        let (family, kind) = match (kind, name.strip_suffix("_total")) {
            ("counter", Some(base)) => (base, "counter"),
            ("counter", None) => (name, "unknown"),
            ("gauge", _) => (name, "gauge"),
            _ => (name, "unknown"),
        };
        let type_line = format!("# TYPE {family} {kind}\n");
        self.order
            .push((type_line, BufWriter::with_capacity(16 << 10, file)));
        self.files.insert(name.to_string(), self.order.len() - 1);
        Ok(self.order.len() - 1)
    }

    /// Joins the parts into `out` (via a temporary sibling renamed into place) and removes
    /// them; returns the number of families.
    fn join(mut self, out: &Path) -> anyhow::Result<usize> {
        let partial = sibling(out, ".partial");
        let joined = self.join_into(&partial);
        if joined.is_err() {
            let _ = std::fs::remove_file(&partial);
        }
        let count = joined?;
        std::fs::rename(&partial, out)
            .with_context(|| format!("cannot move {} to {}", partial.display(), out.display()))?;
        Ok(count)
    }

    fn join_into(&mut self, partial: &Path) -> anyhow::Result<usize> {
        let target = File::create(partial)
            .with_context(|| format!("cannot create {}", partial.display()))?;
        let mut target = BufWriter::with_capacity(1 << 20, target);
        let count = self.order.len();
        for (slot, (type_line, writer)) in self.order.iter_mut().enumerate() {
            writer.flush()?;
            target.write_all(type_line.as_bytes())?;
            let path = self.dir.join(format!("{slot}.om"));
            let mut part = BufReader::with_capacity(
                1 << 20,
                File::open(&path).with_context(|| format!("cannot read {}", path.display()))?,
            );
            loop {
                let chunk = part.fill_buf()?;
                if chunk.is_empty() {
                    break;
                }
                target.write_all(chunk)?;
                let used = chunk.len();
                part.consume(used);
            }
        }
        target.write_all(b"# EOF\n")?;
        target
            .into_inner()
            .map_err(|e| e.into_error())
            .and_then(|file| file.sync_all())
            .with_context(|| format!("cannot write {}", partial.display()))?;
        Ok(count)
    }
}

impl Drop for Parts {
    /// The parts are scratch space, whether the run finished or not; so is a partial output.
    fn drop(&mut self) {
        self.order.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `name{labels} value` → `name{instance="…",labels} value timestamp`.
fn write_sample(
    out: &mut impl Write,
    line: &str,
    instance: &str,
    timestamp: &str,
) -> std::io::Result<()> {
    match line.find(['{', ' ']) {
        Some(at) if line.as_bytes()[at] == b'{' => {
            let (name, rest) = line.split_at(at + 1);
            let sep = if rest.starts_with('}') { "" } else { "," };
            writeln!(out, "{name}instance=\"{instance}\"{sep}{rest} {timestamp}")
        }
        Some(at) => {
            let (name, rest) = line.split_at(at);
            writeln!(out, "{name}{{instance=\"{instance}\"}}{rest} {timestamp}")
        }
        None => Ok(()),
    }
}

/// `out` with `suffix` added to its file name.
fn sibling(out: &Path, suffix: &str) -> PathBuf {
    let mut name = out.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    out.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(line: &str) -> String {
        let mut out = Vec::new();
        write_sample(&mut out, line, "sim-node-01", "1700000000.000").expect("in memory");
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn instance_goes_first_and_timestamp_last() {
        assert_eq!(
            sample("gpu_up{gpu=\"0\"} 1"),
            "gpu_up{instance=\"sim-node-01\",gpu=\"0\"} 1 1700000000.000\n"
        );
        assert_eq!(
            sample("gpu_count 8"),
            "gpu_count{instance=\"sim-node-01\"} 8 1700000000.000\n"
        );
        assert_eq!(
            sample("gpu_count{} 8"),
            "gpu_count{instance=\"sim-node-01\"} 8 1700000000.000\n"
        );
    }

    #[test]
    fn label_values_with_spaces_and_braces_are_kept_whole() {
        assert_eq!(
            sample("gpu_process_memory_bytes{process=\"python train.py {x}\"} 5"),
            "gpu_process_memory_bytes{instance=\"sim-node-01\",process=\"python train.py {x}\"} 5 1700000000.000\n"
        );
    }
}
