//! MIG capacity in the fleet report, in GPU fractions, end to end: `record --sim-mig 2`
//! writes history whose first host has two H100s cut into MIG instances (one created and one
//! destroyed during the run), `promtool` loads it into the Debian `prometheus`, and the
//! report's GPU-hours, GPUs and load are checked against the recording, in gpu-sentinel's
//! metrics and in dcgm-exporter's (per GPU instance, `GPU_I_ID` and `GPU_I_PROFILE`).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::history::parse_sample;
use common::{Prometheus, binary, tool};

const INTERVAL: f64 = 900.0;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "gpu-sentinel-fleet-mig-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

fn gpu_sentinel(args: &[&str]) -> std::process::Output {
    Command::new(binary())
        .args(args)
        .env_remove("GPU_SENTINEL_CONFIG")
        .output()
        .expect("gpu-sentinel runs")
}

fn rfc3339(seconds: f64) -> String {
    chrono::DateTime::from_timestamp(seconds as i64, 0)
        .expect("in range")
        .to_rfc3339()
}

/// Two hosts × a day, the first host's GPUs 0 and 1 in MIG mode; `extra` after.
fn record(dir: &Path, extra: &[&str]) -> (PathBuf, String) {
    let file = dir.join("mig.om");
    let mut args = vec![
        "record",
        "--simulate",
        "--sim-mig",
        "2",
        "--hosts",
        "2",
        "--simulated-duration",
        "1d",
        "--interval",
        "15m",
        "--format",
        "openmetrics",
        "--out",
        file.to_str().expect("utf-8 path"),
    ];
    args.extend(extra);
    let out = gpu_sentinel(&args);
    assert!(
        out.status.success(),
        "record failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&file).expect("recording");
    (file, text)
}

fn report(store: &Prometheus, text: &str, config: Option<&Path>) -> serde_json::Value {
    let stamps: Vec<f64> = text
        .lines()
        .filter_map(parse_sample)
        .map(|(_, _, _, at)| at)
        .collect();
    let first = stamps.iter().copied().fold(f64::MAX, f64::min);
    let last = stamps.iter().copied().fold(f64::MIN, f64::max);
    let (from, to) = (rfc3339(first - INTERVAL / 2.0), rfc3339(last));
    let mut args = vec![
        "report",
        "--prometheus",
        &store.base,
        "--from",
        &from,
        "--to",
        &to,
        "--step",
        "15m",
        "--format",
        "json",
    ];
    if let Some(config) = config {
        args.extend(["--config", config.to_str().expect("utf-8 path")]);
    }
    let out = gpu_sentinel(&args);
    assert!(
        out.status.success(),
        "report failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("report JSON")
}

/// A GPU instance's share from its profile's `Ng` slice count (`1c.3g.40gb`: 3) over the
/// GPU's `total` slices.
fn profile_share(profile: &str, total: u32) -> f64 {
    let slices: u32 = profile
        .split('.')
        .find_map(|p| p.strip_suffix('g').and_then(|n| n.parse().ok()))
        .unwrap_or_else(|| panic!("profile {profile:?} names no slices"));
    f64::from(slices) / f64::from(total)
}

fn close(got: f64, truth: f64, within: f64) -> bool {
    (got - truth).abs() <= within * truth.abs() + 0.05
}

#[test]
fn mig_instances_count_at_their_share_in_gpu_sentinels_metrics() {
    let (Some(promtool), Some(prometheus)) = (tool("promtool"), tool("prometheus")) else {
        return;
    };
    let dir = scratch("native");
    let (file, text) = record(&dir, &[]);
    // The recording: MIG GPUs report instances and no utilization of their own.
    let mut load: BTreeMap<(String, String, u64), f64> = BTreeMap::new();
    let mut share: BTreeMap<(String, u64), f64> = BTreeMap::new();
    let mut active: BTreeMap<(String, u64), (String, String, f64)> = BTreeMap::new();
    let mut utilization: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    // Each owner series' first and last value, by its GPU.
    type Counter = ((String, String), f64, f64);
    let mut owners: BTreeMap<String, Counter> = BTreeMap::new();
    for (name, labels, value, at) in text.lines().filter_map(parse_sample) {
        let label = |k: &str| labels.get(k).cloned().unwrap_or_default();
        let gpu = (label("instance"), label("gpu"));
        match name {
            "gpu_mig_share_ratio" => {
                share.insert((labels["mig_uuid"].clone(), at as u64), value);
            }
            "gpu_mig_sm_active_ratio" => {
                active.insert(
                    (labels["mig_uuid"].clone(), at as u64),
                    (gpu.0.clone(), gpu.1.clone(), value),
                );
            }
            "gpu_utilization_ratio" => utilization.entry(gpu).or_default().push(value),
            "gpu_owner_seconds_total" => {
                owners
                    .entry(format!("{labels:?}"))
                    .or_insert((gpu, value, value))
                    .2 = value;
            }
            _ => {}
        }
    }
    assert!(!share.is_empty(), "the recording has MIG instances");
    let mig_gpus = [
        ("sim-node-01".to_string(), "0".to_string()),
        ("sim-node-01".to_string(), "1".to_string()),
    ];
    for gpu in &mig_gpus {
        assert!(
            !utilization.contains_key(gpu),
            "a GPU in MIG mode has no utilization series: {gpu:?}"
        );
    }
    for ((mig, at), (host, gpu, a)) in &active {
        let s = share[&(mig.clone(), *at)];
        *load.entry((host.clone(), gpu.clone(), *at)).or_default() += a * s;
    }
    let mut per_gpu: BTreeMap<(String, String), Vec<f64>> = utilization;
    for ((host, gpu, _), l) in &load {
        per_gpu
            .entry((host.clone(), gpu.clone()))
            .or_default()
            .push(*l);
    }
    assert_eq!(per_gpu.len(), 16, "2 hosts × 8 GPUs, MIG ones included");
    let mean_utilization = per_gpu
        .values()
        .map(|v| v.iter().sum::<f64>() / v.len() as f64)
        .sum::<f64>()
        / per_gpu.len() as f64;

    let data = dir.join("data");
    Prometheus::backfill(&promtool, &file, &data);
    let store = Prometheus::on_blocks(&prometheus, &data);
    let doc = report(&store, &text, None);
    let fleet = &doc["fleet"];
    assert_eq!(fleet["gpus"], 16, "the MIG GPUs count, once each");
    let got = fleet["utilization"].as_f64().expect("utilization");
    assert!(
        close(got, mean_utilization, 0.05),
        "fleet utilization {got}, the recording's {mean_utilization}"
    );
    let demand = fleet["capacity"]["forecast_demand_gpus"]
        .as_f64()
        .expect("demand");
    assert!(
        close(demand, got * 16.0, 0.1),
        "demand {demand} GPUs is the summed load, MIG instances by share ({})",
        got * 16.0
    );
    // Held time: the agent charged each instance's holders its share; summed over a MIG
    // GPU's owners it stays within the GPU's own hours, and the report's per-GPU idle
    // holdings add up to the recording's counters.
    let hours = 24.0;
    let mig_held: f64 = owners
        .values()
        .filter(|(gpu, _, _)| mig_gpus.contains(gpu))
        .map(|(_, first, last)| (last - first) / 3600.0)
        .sum();
    assert!(
        mig_held > 0.5 && mig_held <= 2.0 * hours + 0.5,
        "two MIG GPUs held {mig_held} GPU-hours: at most their own 48, at their instances' shares"
    );
    let report_held: f64 = doc["teams"]
        .as_array()
        .expect("teams")
        .iter()
        .map(|t| t["gpu_hours"].as_f64().expect("gpu_hours"))
        .sum();
    let truth_held: f64 = owners.values().map(|(_, a, b)| (b - a) / 3600.0).sum();
    assert!(
        close(report_held, truth_held, 0.02),
        "held {report_held} GPU-hours, the recording {truth_held}"
    );
    assert!(report_held <= 16.0 * hours + 0.5, "{report_held}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Held, busy and idle GPU-hours per namespace in dcgm-exporter's series, each GPU
/// instance's series at its profile's share: held while its `DCGM_FI_DEV_FB_USED` is above
/// 1 GiB or a pod is on it; busy while held and its `DCGM_FI_PROF_SM_ACTIVE` (a whole GPU:
/// `DCGM_FI_DEV_GPU_UTIL`) is at or above the idle threshold.
fn dcgm_truth(text: &str) -> BTreeMap<String, (f64, f64)> {
    type At = (String, String, String, u64);
    let mut used: Vec<(At, f64, String, String, f64)> = Vec::new();
    let mut activity: BTreeMap<At, f64> = BTreeMap::new();
    for (name, labels, value, at) in text.lines().filter_map(parse_sample) {
        let label = |k: &str| labels.get(k).cloned().unwrap_or_default();
        let key = (
            label("Hostname"),
            label("gpu"),
            label("GPU_I_ID"),
            at as u64,
        );
        match name {
            "DCGM_FI_DEV_FB_USED" => {
                let share = match label("GPU_I_PROFILE").as_str() {
                    "" => 1.0,
                    profile => profile_share(profile, 7),
                };
                used.push((key, value, label("namespace"), label("pod"), share));
            }
            "DCGM_FI_DEV_GPU_UTIL" => {
                activity.insert(key, value / 100.0);
            }
            "DCGM_FI_PROF_SM_ACTIVE" if !label("GPU_I_ID").is_empty() => {
                activity.insert(key, value);
            }
            _ => {}
        }
    }
    let mut out: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for (key, mib, namespace, pod, share) in used {
        if mib <= 1024.0 && pod.is_empty() {
            continue;
        }
        let hours = INTERVAL / 3600.0 * share;
        let entry = out.entry(namespace).or_default();
        if activity.get(&key).copied().unwrap_or(0.0) >= 0.05 {
            entry.0 += hours;
        } else {
            entry.1 += hours;
        }
    }
    out
}

#[test]
fn dcgm_exporters_gpu_instances_count_at_their_profiles_share() {
    let (Some(promtool), Some(prometheus)) = (tool("promtool"), tool("prometheus")) else {
        return;
    };
    let dir = scratch("dcgm");
    let config = dir.join("dcgm.toml");
    std::fs::write(&config, "[export]\ndcgm_compat = true\n").expect("config");
    let (file, text) = record(
        &dir,
        &[
            "--config",
            config.to_str().expect("utf-8 path"),
            "--families",
            "^DCGM_FI_",
        ],
    );
    let profiles: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("DCGM_FI_DEV_FB_USED{") && l.contains("GPU_I_PROFILE=\""))
        .collect();
    assert!(
        profiles
            .iter()
            .any(|l| l.contains("GPU_I_PROFILE=\"1g.10gb\"")),
        "the recording has GPU instances: {:?}",
        profiles.first()
    );
    let truth = dcgm_truth(&text);
    let data = dir.join("data");
    Prometheus::backfill(&promtool, &file, &data);
    let store = Prometheus::on_blocks(&prometheus, &data);
    let doc = report(&store, &text, Some(&config));
    assert_eq!(doc["source"], "dcgm-exporter");
    // Owners are namespaces; with no [[teams]] each keeps no team: compare the totals,
    // and each top idle holding against its namespace's truth.
    let teams = doc["teams"].as_array().expect("teams");
    let sum = |key: &str| -> f64 { teams.iter().map(|t| t[key].as_f64().expect(key)).sum() };
    let busy: f64 = truth.values().map(|v| v.0).sum();
    let idle: f64 = truth.values().map(|v| v.1).sum();
    assert!(
        close(sum("busy_gpu_hours"), busy, 0.02),
        "busy {} vs {busy}",
        sum("busy_gpu_hours")
    );
    assert!(
        close(sum("idle_gpu_hours"), idle, 0.02),
        "idle {} vs {idle}",
        sum("idle_gpu_hours")
    );
    // Counted whole, the instances would hold more GPU-hours than the fleet has.
    assert!(busy + idle <= 16.0 * 24.0 + 0.5, "{busy} + {idle}");
    assert_eq!(doc["fleet"]["gpus"], 16, "the MIG GPUs count, once each");
    let _ = std::fs::remove_dir_all(&dir);
}
