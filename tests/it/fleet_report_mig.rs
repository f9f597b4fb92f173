//! MIG capacity in the fleet report, in GPU fractions, end to end: `record --sim-mig 2`
//! writes history whose first host has two H100s cut into MIG instances (one created and one
//! destroyed during the run), `promtool` loads it into the Debian `prometheus`, and the
//! report's GPU-hours, GPUs and load are checked against the recording, in gpu-sentinel's
//! metrics and in dcgm-exporter's (per GPU instance, `GPU_I_ID` and `GPU_I_PROFILE`).

use crate::common;
use common::rfc3339;
use common::run_without_env_config as gpu_sentinel;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::history::parse_sample;
use common::{Prometheus, tool};

const INTERVAL: f64 = 900.0;
/// The hourly price of a GPU the reports are asked with.
const PRICE: f64 = 7.0;

fn scratch(name: &str) -> PathBuf {
    common::scratch("fleet-mig", name)
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
    let out = report_as(store, text, config, "json");
    serde_json::from_str(&out).expect("report JSON")
}

/// The report of the whole recording in `format`.
fn report_as(store: &Prometheus, text: &str, config: Option<&Path>, format: &str) -> String {
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
        format,
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
    String::from_utf8(out.stdout).expect("UTF-8 report")
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
    let config = dir.join("price.toml");
    std::fs::write(&config, format!("[cost]\nhourly_price = {PRICE}\n")).expect("config");
    let doc = report(&store, &text, Some(&config));
    let fleet = &doc["fleet"];
    assert_eq!(fleet["gpus"], 16, "the MIG GPUs count, once each");
    // Within 0.02: the report's hourly means against the recording's samples. The MIG GPUs
    // counted at no load, or their instances whole, would be further off.
    let got = fleet["utilization"].as_f64().expect("utilization");
    assert!(
        (got - mean_utilization).abs() <= 0.02,
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
    // Waste is the idle GPU-hours, fractions included, at the hourly price.
    for team in doc["teams"].as_array().expect("teams") {
        let idle = team["idle_gpu_hours"].as_f64().expect("idle");
        let waste = team["waste_cost"].as_f64().expect("waste_cost");
        assert!(close(waste, idle * PRICE, 0.001), "{team}");
    }
    // An owner alone in one MIG instance all day is charged that instance's share of the
    // hours it sat idle: the report's idle holding is that fraction of a GPU (a `1g.10gb`
    // notebook: a seventh), computed here from the instance's own activity and share.
    let expected = sole_instance_idle(&text, &mig_gpus);
    let mut rows = Vec::new();
    for team in doc["teams"].as_array().expect("teams") {
        for holding in team["top_idle"].as_array().expect("top_idle") {
            let key = (
                holding["owner"].as_str().expect("owner").to_string(),
                holding["host"].as_str().expect("host").to_string(),
                holding["gpu"].as_str().expect("gpu").to_string(),
            );
            let Some(&(truth, share)) = expected.get(&key) else {
                continue;
            };
            let got = holding["idle_gpu_hours"].as_f64().expect("idle_gpu_hours");
            assert!(
                close(got, truth, 0.02) && share < 1.0,
                "{key:?} held idle {got} GPU-hours; its instance ({share} of the GPU) {truth}"
            );
            let waste = holding["waste_cost"].as_f64().expect("waste_cost");
            assert!(close(waste, got * PRICE, 0.001), "{holding}");
            rows.push(format!(
                "<td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{got:.1}</td><td class=\"n\">{waste:.2}</td>",
                key.0, key.1, key.2
            ));
        }
    }
    // The HTML form shows the same fractions.
    let html = report_as(&store, &text, Some(&config), "html");
    for row in &rows {
        assert!(
            html.contains(row.as_str()),
            "the HTML has the holding {row}"
        );
    }
    assert!(
        !rows.is_empty(),
        "no idle holding of a sole MIG instance owner in the report: {expected:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Per (owner, host, gpu) of the MIG GPUs: the owner whose processes ran in exactly one
/// instance, alone there, for the whole recording; its idle GPU-hours (the steps after the
/// first where the instance's SM activity was under the idle threshold, at the instance's
/// share) and that share.
fn sole_instance_idle(
    text: &str,
    mig_gpus: &[(String, String)],
) -> BTreeMap<(String, String, String), (f64, f64)> {
    type Instance = (String, String, String, String);
    let mut owners_of: BTreeMap<Instance, std::collections::BTreeSet<String>> = BTreeMap::new();
    let mut instances_of: BTreeMap<(String, String, String), std::collections::BTreeSet<Instance>> =
        BTreeMap::new();
    let mut seen: BTreeMap<(String, String, String), std::collections::BTreeSet<u64>> =
        BTreeMap::new();
    let mut state: BTreeMap<(Instance, u64), (f64, f64)> = BTreeMap::new();
    let mut share: BTreeMap<(Instance, u64), f64> = BTreeMap::new();
    let mut stamps = std::collections::BTreeSet::new();
    for (name, labels, value, at) in text.lines().filter_map(parse_sample) {
        stamps.insert(at as u64);
        let label = |k: &str| labels.get(k).cloned().unwrap_or_default();
        let gpu = (label("instance"), label("gpu"));
        if !mig_gpus.contains(&gpu) {
            continue;
        }
        let instance = (
            gpu.0.clone(),
            gpu.1.clone(),
            label("gpu_instance"),
            label("compute_instance"),
        );
        match name {
            "gpu_process_memory_bytes" => {
                let owner = label("namespace");
                owners_of
                    .entry(instance.clone())
                    .or_default()
                    .insert(owner.clone());
                let key = (owner, gpu.0, gpu.1);
                instances_of
                    .entry(key.clone())
                    .or_default()
                    .insert(instance);
                seen.entry(key).or_default().insert(at as u64);
            }
            "gpu_mig_sm_active_ratio" => {
                state.entry((instance, at as u64)).or_default().0 = value;
            }
            "gpu_mig_allocated" => {
                state.entry((instance, at as u64)).or_default().1 = value;
            }
            "gpu_mig_share_ratio" => {
                share.insert((instance, at as u64), value);
            }
            _ => {}
        }
    }
    let first = stamps.first().copied().unwrap_or_default();
    let mut out = BTreeMap::new();
    for (key, instances) in instances_of {
        let [instance] = &instances.into_iter().collect::<Vec<_>>()[..] else {
            continue;
        };
        // Alone in it, and in it at every step.
        if owners_of[instance].len() != 1 || seen[&key].len() != stamps.len() {
            continue;
        }
        let mut idle = 0.0;
        let mut fraction = 0.0;
        for &at in stamps.iter().filter(|&&at| at != first) {
            let (active, allocated) = state[&(instance.clone(), at)];
            fraction = share[&(instance.clone(), at)];
            if allocated == 1.0 && active < 0.05 {
                idle += fraction * INTERVAL / 3600.0;
            }
        }
        out.insert(key, (idle, fraction));
    }
    out
}

/// Busy and idle GPU-hours per namespace, host and GPU in dcgm-exporter's series, each GPU
/// instance's series at its profile's share (`whole`: at 1, as if MIG were not read): held
/// while its `DCGM_FI_DEV_FB_USED` is above 1 GiB or a pod is on it; busy while held and its
/// `DCGM_FI_PROF_SM_ACTIVE` (a whole GPU: `DCGM_FI_DEV_GPU_UTIL`) is at or above the idle
/// threshold. Also each GPU's mean load: a whole GPU's utilization, a MIG GPU's instances'
/// SM activity at their shares, summed.
#[allow(clippy::type_complexity)]
fn dcgm_truth(
    text: &str,
    whole: bool,
) -> (
    BTreeMap<(String, String, String), (f64, f64)>,
    BTreeMap<(String, String), f64>,
) {
    type At = (String, String, String, u64);
    let mut used: Vec<(At, f64, String, String, f64)> = Vec::new();
    let mut activity: BTreeMap<At, f64> = BTreeMap::new();
    let mut load: BTreeMap<(String, String, u64), f64> = BTreeMap::new();
    let share_of = |profile: &str| match profile {
        "" => 1.0,
        _ if whole => 1.0,
        profile => profile_share(profile, 7),
    };
    for (name, labels, value, at) in text.lines().filter_map(parse_sample) {
        let label = |k: &str| labels.get(k).cloned().unwrap_or_default();
        let key = (
            label("Hostname"),
            label("gpu"),
            label("GPU_I_ID"),
            at as u64,
        );
        let gpu_at = (label("Hostname"), label("gpu"), at as u64);
        match name {
            "DCGM_FI_DEV_FB_USED" => {
                let share = share_of(&label("GPU_I_PROFILE"));
                used.push((key, value, label("namespace"), label("pod"), share));
            }
            "DCGM_FI_DEV_GPU_UTIL" => {
                activity.insert(key, value / 100.0);
                *load.entry(gpu_at).or_default() += value / 100.0;
            }
            "DCGM_FI_PROF_SM_ACTIVE" if !label("GPU_I_ID").is_empty() => {
                activity.insert(key, value);
                *load.entry(gpu_at).or_default() += value * share_of(&label("GPU_I_PROFILE"));
            }
            _ => {}
        }
    }
    let mut out: BTreeMap<(String, String, String), (f64, f64)> = BTreeMap::new();
    for (key, mib, namespace, pod, share) in used {
        if mib <= 1024.0 && pod.is_empty() {
            continue;
        }
        let hours = INTERVAL / 3600.0 * share;
        let entry = out
            .entry((namespace, key.0.clone(), key.1.clone()))
            .or_default();
        if activity.get(&key).copied().unwrap_or(0.0) >= 0.05 {
            entry.0 += hours;
        } else {
            entry.1 += hours;
        }
    }
    let mut per_gpu: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    for ((host, gpu, _), l) in load {
        per_gpu.entry((host, gpu)).or_default().push(l);
    }
    let means = per_gpu
        .into_iter()
        .map(|(gpu, v)| (gpu, v.iter().sum::<f64>() / v.len() as f64))
        .collect();
    (out, means)
}

#[test]
fn dcgm_exporters_gpu_instances_count_at_their_profiles_share() {
    let (Some(promtool), Some(prometheus)) = (tool("promtool"), tool("prometheus")) else {
        return;
    };
    let dir = scratch("dcgm");
    let config = dir.join("dcgm.toml");
    std::fs::write(
        &config,
        format!("[export]\ndcgm_compat = true\n\n[cost]\nhourly_price = {PRICE}\n"),
    )
    .expect("config");
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
    for profile in ["1g.10gb", "2g.20gb", "3g.40gb"] {
        assert!(
            profiles
                .iter()
                .any(|l| l.contains(&format!("GPU_I_PROFILE=\"{profile}\""))),
            "the recording has {profile} GPU instances: {:?}",
            profiles.first()
        );
    }
    let (truth, load) = dcgm_truth(&text, false);
    let (whole, _) = dcgm_truth(&text, true);
    let data = dir.join("data");
    Prometheus::backfill(&promtool, &file, &data);
    let store = Prometheus::on_blocks(&prometheus, &data);
    let doc = report(&store, &text, Some(&config));
    assert_eq!(doc["source"], "dcgm-exporter");
    // Owners are namespaces; with no [[teams]] each keeps no team: compare the totals,
    // and each top idle holding on a MIG GPU against its namespace's truth on that GPU.
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
    // Counted whole, the GPU instances would hold more than the report finds.
    let whole_held: f64 = whole.values().map(|v| v.0 + v.1).sum();
    assert!(
        whole_held > 1.1 * (busy + idle),
        "the recording's instances make a difference: {whole_held} whole, {} by share",
        busy + idle
    );
    assert!(
        close(sum("waste_cost"), sum("idle_gpu_hours") * PRICE, 0.001),
        "waste {} at {PRICE} an idle GPU-hour",
        sum("waste_cost")
    );
    let mut checked = 0;
    for holding in teams
        .iter()
        .flat_map(|t| t["top_idle"].as_array().expect("top_idle"))
    {
        let key = (
            holding["owner"].as_str().expect("owner").to_string(),
            holding["host"].as_str().expect("host").to_string(),
            holding["gpu"].as_str().expect("gpu").to_string(),
        );
        let truth = truth.get(&key).map_or(0.0, |v| v.1);
        let got = holding["idle_gpu_hours"].as_f64().expect("idle_gpu_hours");
        assert!(
            close(got, truth, 0.02),
            "{key:?} held idle {got} GPU-hours, the recording {truth}"
        );
        if key.1 == "sim-node-01" && ["0", "1"].contains(&key.2.as_str()) {
            let counted_whole = whole.get(&key).map_or(0.0, |v| v.1);
            assert!(
                got < counted_whole,
                "{key:?}: {got} by share, {counted_whole} whole"
            );
            checked += 1;
        }
    }
    assert!(checked > 0, "an idle holding on a MIG GPU in the report");
    // Load: a MIG GPU counts once, at its instances' activity by share.
    let fleet = &doc["fleet"];
    assert_eq!(fleet["gpus"], 16, "the MIG GPUs count, once each");
    assert_eq!(load.len(), 16, "the recording's GPUs");
    let mean = load.values().sum::<f64>() / load.len() as f64;
    // Within 0.02 (as above): here the instances counted whole would make it 0.57, and the
    // MIG GPUs at no load 0.41, against 0.44.
    let got = fleet["utilization"].as_f64().expect("utilization");
    assert!(
        (got - mean).abs() <= 0.02,
        "fleet utilization {got}, the recording's {mean}"
    );
    let demand = fleet["capacity"]["forecast_demand_gpus"]
        .as_f64()
        .expect("demand");
    assert!(
        close(demand, got * 16.0, 0.1),
        "demand {demand} GPUs is the summed load ({})",
        got * 16.0
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The owner accounting's rule, from the recording alone: each interval between two
/// samples, every MIG instance with holders charges them its share (`gpu_mig_share_ratio`)
/// of the interval, split evenly, busy or idle by its activity at the interval's end; an
/// instance nothing holds charges nobody. Summed, each owner's counters on a MIG GPU must
/// be exactly that, and `gpu_mig_allocated` must say which instances were held: a
/// compute instance beside a held one in the same GPU instance (GPU 0's `3g` split into a
/// `1c` and a `2c`) shares its memory reading and is still not held by it.
#[test]
fn owner_counters_charge_each_held_mig_instance_its_share_of_every_interval() {
    let dir = scratch("owners");
    let (_, text) = record(&dir, &[]);
    let _ = std::fs::remove_dir_all(&dir);
    let mig_gpus = [
        ("sim-node-01".to_string(), "0".to_string()),
        ("sim-node-01".to_string(), "1".to_string()),
    ];
    // (gpu, gpu instance, compute instance, at) → what the recording says of it.
    type At = (String, String, String, u64);
    #[derive(Default)]
    struct Seen {
        share: f64,
        active: f64,
        allocated: f64,
        used: f64,
        owners: std::collections::BTreeSet<String>,
    }
    let mut seen: BTreeMap<At, Seen> = BTreeMap::new();
    let mut counters: BTreeMap<(String, String, String), f64> = BTreeMap::new();
    let mut stamps = std::collections::BTreeSet::new();
    for (name, labels, value, at) in text.lines().filter_map(parse_sample) {
        stamps.insert(at as u64);
        let label = |k: &str| labels.get(k).cloned().unwrap_or_default();
        if !mig_gpus.contains(&(label("instance"), label("gpu"))) {
            continue;
        }
        if name == "gpu_owner_seconds_total" {
            let key = (label("gpu"), label("owner"), label("state"));
            let last = counters.entry(key).or_default();
            *last = last.max(value);
            continue;
        }
        let key = (
            label("gpu"),
            label("gpu_instance"),
            label("compute_instance"),
            at as u64,
        );
        match name {
            "gpu_mig_share_ratio" => seen.entry(key).or_default().share = value,
            "gpu_mig_sm_active_ratio" => seen.entry(key).or_default().active = value,
            "gpu_mig_allocated" => seen.entry(key).or_default().allocated = value,
            "gpu_mig_memory_used_bytes" => seen.entry(key).or_default().used = value,
            "gpu_process_memory_bytes" => {
                seen.entry(key)
                    .or_default()
                    .owners
                    .insert(label("namespace"));
            }
            _ => {}
        }
    }
    let first = stamps.first().copied().expect("samples");
    let mut expected: BTreeMap<(String, String, String), f64> = BTreeMap::new();
    let mut beside_a_held_one = 0;
    for ((gpu, gi, ci, at), s) in &seen {
        // No scheduler in the recording: held is what runs in it.
        assert_eq!(
            s.allocated == 1.0,
            !s.owners.is_empty(),
            "GPU {gpu} GI {gi} CI {ci} at {at}: allocated {} with owners {:?}",
            s.allocated,
            s.owners
        );
        if s.owners.is_empty() {
            let sibling_held = seen.iter().any(|((g, i, c, t), o)| {
                (g, i, t) == (gpu, gi, at) && c != ci && !o.owners.is_empty()
            });
            if sibling_held && s.used > 1024.0 * 1024.0 * 1024.0 {
                beside_a_held_one += 1;
            }
            continue;
        }
        if *at == first {
            continue;
        }
        let state = if s.active < 0.05 { "idle" } else { "busy" };
        for owner in &s.owners {
            *expected
                .entry((gpu.clone(), owner.clone(), state.to_string()))
                .or_default() += s.share * INTERVAL / s.owners.len() as f64;
        }
    }
    assert!(
        beside_a_held_one > 0,
        "the recording has an empty compute instance beside a held one"
    );
    let counted: BTreeMap<_, _> = counters.into_iter().filter(|(_, v)| *v > 0.0).collect();
    assert_eq!(
        counted.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>(),
        "owners charged"
    );
    for (key, want) in &expected {
        let got = counted[key];
        assert!(
            (got - want).abs() < 1e-6 * want.max(1.0),
            "{key:?}: the counter {got} s, the instances' shares {want} s"
        );
    }
}
