//! `replay --prometheus` end to end: simulated multi-host history written by `record
//! --format openmetrics`, loaded by `promtool tsdb create-blocks-from openmetrics`, served
//! by the Debian `prometheus`, and replayed from the store through the real binary, in our
//! metric dialect and in dcgm-exporter's. What it flags on the failing host is checked
//! against the local replay of a JSONL recording of the same simulated host (same seed).

use crate::common;
use common::run_without_env_config as gpu_sentinel;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use chrono::{DateTime, Utc};
use common::http_server::{Answer, HttpServer};
use common::{Prometheus, binary, tool};
use serde_json::Value;

/// What the engine reads, as `record --families` selects it: everything the simulated
/// faults show in, without the engine's own outputs (the replay computes those afresh).
const NATIVE_FAMILIES: &str = "^gpu_(info|up|utilization_ratio|memory_(used|total)_bytes|(memory_)?temperature_celsius|power_watts|clock_event_active|ecc_errors_total|remapped_rows_(total|pending|failure)|pcie_replays_total|pcie_link_(generation|width)|xid_errors_total|process_memory_bytes)$";

/// Alerts compared between the store's replay and the recording's: the hardware ones and
/// idle allocations. Ghost and long-running processes need PID liveness and process
/// runtimes, which no store holds (docs/fleet.md).
const COMPARED: &[&str] = &[
    "GpuFailureRiskHigh",
    "GpuHardwareXid",
    "GpuUncorrectableEccErrors",
    "GpuRowRemapFailure",
    "GpuLost",
    "GpuAllocatedIdle",
];

/// Five minutes: the recordings' interval and the replay's step.
const STEP_SECONDS: i64 = 300;

fn scratch(name: &str) -> PathBuf {
    common::scratch("replay", name)
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Two simulated hosts × two days every five minutes, loaded into TSDB blocks under
/// `dir/data`; returns the period the file covers.
fn backfill(
    promtool: &Path,
    dir: &Path,
    config: Option<&str>,
    families: &str,
) -> (DateTime<Utc>, DateTime<Utc>) {
    let file = dir.join("history.om");
    let mut args = vec![
        "record",
        "--simulate",
        "--hosts",
        "2",
        "--simulated-duration",
        "2d",
        "--interval",
        "5m",
        "--format",
        "openmetrics",
        "--families",
        families,
        "--out",
        path(&file),
    ];
    let config_file = dir.join("config.toml");
    if let Some(text) = config {
        std::fs::write(&config_file, text).expect("config");
        args.extend(["--config", path(&config_file)]);
    }
    let out = gpu_sentinel(&args);
    assert!(
        out.status.success(),
        "record failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&file).expect("recording");
    let stamps = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok());
    let (from, to) = stamps.fold((f64::MAX, f64::MIN), |(a, b), t| (a.min(t), b.max(t)));
    drop(text);
    Prometheus::backfill(promtool, &file, &dir.join("data"));
    let _ = std::fs::remove_file(&file);
    let at = |s: f64| DateTime::from_timestamp(s as i64, 0).expect("in range");
    (at(from), at(to))
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn replay_store(base: &str, from: DateTime<Utc>, to: DateTime<Utc>, json: bool) -> Output {
    let (from, to) = (rfc3339(from), rfc3339(to));
    let mut args = vec![
        "replay",
        "--prometheus",
        base,
        "--from",
        &from,
        "--to",
        &to,
        "--step",
        "5m",
    ];
    if json {
        args.push("--json");
    }
    gpu_sentinel(&args)
}

fn time(value: &Value) -> DateTime<Utc> {
    value
        .as_str()
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_else(|| panic!("not a time: {value}"))
}

/// (alertname, uuid) → seconds from the report's start to the first episode, for the
/// compared alerts of one replay report.
fn flagged(report: &Value) -> BTreeMap<(String, String), i64> {
    let start = time(&report["start"]);
    let mut out = BTreeMap::new();
    for alert in report["alerts"].as_array().expect("alerts") {
        let name = alert["alertname"].as_str().expect("alertname");
        if !COMPARED.contains(&name) {
            continue;
        }
        let uuid = alert["uuid"].as_str().expect("uuid").to_string();
        let offset = (time(&alert["starts_at"]) - start).num_seconds();
        out.entry((name.to_string(), uuid)).or_insert(offset);
    }
    out
}

/// The local replay of a JSONL recording of the simulated fleet with the same seed: what
/// the first simulated host would have been flagged for. With `without_link`, the PCIe
/// link's width and generation are taken out of the recording first: dcgm-exporter does
/// not export them, so a store of its metrics cannot show a link that trained down.
fn local_replay(dir: &Path, without_link: bool) -> BTreeMap<(String, String), i64> {
    let file = dir.join("local.jsonl");
    let out = gpu_sentinel(&[
        "record",
        "--simulate",
        "--simulated-duration",
        "2d",
        "--interval",
        "5m",
        "--out",
        path(&file),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    if without_link {
        let text = std::fs::read_to_string(&file).expect("recording");
        let mut stripped = String::with_capacity(text.len());
        for line in text.lines() {
            let mut value: Value = serde_json::from_str(line).expect("JSON line");
            if let Some(gpus) = value["gpus"].as_array_mut() {
                for gpu in gpus {
                    if let Some(pcie) = gpu["pcie"].as_object_mut() {
                        pcie.retain(|key, _| !key.starts_with("link_"));
                    }
                }
            }
            stripped.push_str(&value.to_string());
            stripped.push('\n');
        }
        std::fs::write(&file, stripped).expect("write recording");
    }
    let out = gpu_sentinel(&["replay", path(&file), "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("replay JSON");
    flagged(&report)
}

/// The store's replay flags the same GPUs of the failing host for the same alerts as the
/// local replay, each first raised within `slack` seconds of the same point in the
/// history; the healthy host has no hardware alert and no GPU at risk.
fn same_as_local(doc: &Value, local: &BTreeMap<(String, String), i64>, slack: i64) {
    let hosts = doc["hosts"].as_array().expect("hosts");
    let names: Vec<&str> = hosts.iter().filter_map(|h| h["host"].as_str()).collect();
    assert_eq!(names, ["sim-node-01", "sim-node-02"]);
    let failing = flagged(&hosts[0]["report"]);
    assert_eq!(
        failing.keys().collect::<BTreeSet<_>>(),
        local.keys().collect::<BTreeSet<_>>(),
        "the store's replay flags what the recording's replay flags"
    );
    for (key, offset) in &failing {
        let expected = local[key];
        assert!(
            (offset - expected).abs() <= slack,
            "{key:?} first raised {offset}s into the history, locally {expected}s"
        );
    }
    for alert in ["GpuFailureRiskHigh", "GpuLost", "GpuHardwareXid"] {
        assert!(
            failing.keys().any(|(name, _)| name == alert),
            "the failing host has {alert}: {failing:?}"
        );
    }
    let report = &hosts[0]["report"];
    assert_eq!(report["gpus"].as_array().map(Vec::len), Some(8));
    assert!(
        report["gpus"]
            .as_array()
            .expect("gpus")
            .iter()
            .any(|g| g["lost"] == true)
    );
    let healthy = &hosts[1]["report"];
    let healthy_alerts = flagged(healthy);
    assert!(
        healthy_alerts
            .keys()
            .all(|(name, _)| name == "GpuAllocatedIdle"),
        "the healthy host has no hardware alert: {healthy_alerts:?}"
    );
    for gpu in healthy["gpus"].as_array().expect("gpus") {
        assert!(gpu["max_risk"].as_f64().expect("risk") < 0.7, "{gpu}");
    }
}

#[test]
fn our_metrics_replayed_from_the_store_flag_what_the_recording_does() {
    let (Some(promtool), Some(prometheus)) = (tool("promtool"), tool("prometheus")) else {
        return;
    };
    let dir = scratch("native");
    let (from, to) = backfill(&promtool, &dir, None, NATIVE_FAMILIES);
    let store = Prometheus::on_blocks(&prometheus, &dir.join("data"));
    let local = local_replay(&dir, false);

    let out = replay_store(&store.base, from, to, true);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "replay failed: {stderr}");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("replay JSON");
    assert_eq!(doc["source"], "gpu-sentinel");
    assert_eq!(doc["from"], rfc3339(from));
    same_as_local(&doc, &local, STEP_SECONDS);
    assert_eq!(
        doc["hosts"][0]["report"]["samples"].as_u64(),
        Some(8 * 576),
        "8 GPUs × two days every 5 minutes"
    );
    // Families left out of the recording are named, once.
    assert!(
        stderr.contains("gpu_power_limit_watts")
            && stderr.matches("engine ran without").count() == 1,
        "{stderr}"
    );

    let out = replay_store(&store.base, from, to, false);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).expect("utf-8");
    assert!(
        text.contains("== sim-node-01 ==") && text.contains("== sim-node-02 =="),
        "{text}"
    );
    assert!(text.contains("GpuLost gpu 4"), "{text}");

    // A period beyond what the store holds: named, with the metric and the URL.
    let long_ago = DateTime::from_timestamp(1_577_836_800, 0).expect("2020");
    let out = replay_store(
        &store.base,
        long_ago,
        long_ago + chrono::TimeDelta::days(1),
        true,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "no partial report");
    assert!(
        stderr.contains("gpu_up") && stderr.contains(&store.base) && stderr.contains("retention"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn dcgm_exporter_metrics_replayed_from_the_store_flag_the_same_gpus() {
    let (Some(promtool), Some(prometheus)) = (tool("promtool"), tool("prometheus")) else {
        return;
    };
    let dir = scratch("dcgm");
    let (from, to) = backfill(
        &promtool,
        &dir,
        Some("[export]\ndcgm_compat = true\n"),
        "^DCGM_FI_.*",
    );
    let store = Prometheus::on_blocks(&prometheus, &dir.join("data"));
    let local = local_replay(&dir, true);

    let out = replay_store(&store.base, from, to, true);
    assert!(
        out.status.success(),
        "replay failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).expect("replay JSON");
    assert_eq!(doc["source"], "dcgm-exporter");
    // dcgm-exporter has no `up` series: a GPU off the bus is lost once its fields have
    // been gone long enough, a step or two later than `gpu_up 0` says it.
    same_as_local(&doc, &local, 2 * STEP_SECONDS);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_wrong_url_an_empty_store_and_a_bad_period_are_named() {
    let port = common::free_port();
    let url = format!("http://127.0.0.1:{port}");
    let out = gpu_sentinel(&[
        "replay",
        "--prometheus",
        &url,
        "--from",
        "2026-01-01T00:00:00Z",
        "--to",
        "2026-01-02T00:00:00Z",
        "--timeout",
        "2s",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(&url) && stderr.contains("cannot reach"),
        "{stderr}"
    );

    let out = gpu_sentinel(&[
        "replay",
        "--prometheus",
        &url,
        "--from",
        "2026-01-02T00:00:00Z",
        "--to",
        "2026-01-01T00:00:00Z",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("is not before --to"), "{stderr}");

    let out = gpu_sentinel(&["replay", "--prometheus", &url]);
    assert!(!out.status.success(), "--from and --to are required");
    let out = gpu_sentinel(&["replay", "x.jsonl", "--from", "2026-01-01T00:00:00Z"]);
    assert!(!out.status.success(), "--from is for --prometheus");

    // Refused credentials: said so, the token never printed.
    let refusing = HttpServer::answering(|_| Answer::status(401).body("Unauthorized"));
    let out = Command::new(binary())
        .args([
            "replay",
            "--prometheus",
            &refusing.url(""),
            "--from",
            "2026-01-01T00:00:00Z",
            "--to",
            "2026-01-02T00:00:00Z",
        ])
        .env("GPU_SENTINEL_PROMETHEUS_TOKEN", "sekrit-token-456")
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("401") && stderr.contains("credentials"),
        "{stderr}"
    );
    assert!(!stderr.contains("sekrit-token-456"), "{stderr}");

    let Some(prometheus) = tool("prometheus") else {
        return;
    };
    let dir = scratch("empty");
    let store = Prometheus::on_blocks(&prometheus, &dir);
    let now = Utc::now();
    let out = replay_store(&store.base, now - chrono::TimeDelta::days(1), now, true);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("gpu_up")
            && stderr.contains("DCGM_FI_DEV_GPU_UTIL")
            && stderr.contains(&store.base),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
