//! The fleet report's risk table with each GPU's health verdict at the period's end, end to
//! end: `record --format openmetrics` writes simulated history (the first host's GPUs fail:
//! memory, PCIe, thermal, a GPU off the bus), `promtool tsdb create-blocks-from openmetrics`
//! loads it, the Debian `prometheus` serves it, and each verdict in `report --format json`
//! is checked against the verdicts the recording itself holds. A store whose agents exposed
//! no verdicts gives `unknown`, never `healthy`.

use crate::common;
use common::rfc3339;
use common::run_without_env_config as gpu_sentinel;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::history::parse_sample;
use common::{Prometheus, tool};

/// The recording's interval, seconds.
const INTERVAL: f64 = 900.0;

fn scratch(name: &str) -> PathBuf {
    common::scratch("fleet-health", name)
}

/// Records `hosts` simulated hosts over `duration` (extra arguments after), returns the file.
fn record(dir: &Path, hosts: &str, duration: &str, extra: &[&str]) -> (PathBuf, String) {
    let file = dir.join("history.om");
    let mut args = vec![
        "record",
        "--simulate",
        "--hosts",
        hosts,
        "--simulated-duration",
        duration,
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

/// The report over the whole recording (from half a step before its first sample, so the
/// first is in whichever way the store treats the range's left edge).
fn report(store: &Prometheus, text: &str, format: &str) -> std::process::Output {
    let stamps: Vec<f64> = text
        .lines()
        .filter_map(parse_sample)
        .map(|(_, _, _, at)| at)
        .collect();
    let first = stamps.iter().copied().fold(f64::MAX, f64::min);
    let last = stamps.iter().copied().fold(f64::MIN, f64::max);
    gpu_sentinel(&[
        "report",
        "--prometheus",
        &store.base,
        "--from",
        &rfc3339(first - INTERVAL / 2.0),
        "--to",
        &rfc3339(last),
        "--step",
        "15m",
        "--format",
        format,
    ])
}

/// A GPU's verdict at the recording's end as the recording holds it.
#[derive(Debug, PartialEq)]
struct Verdict {
    state: &'static str,
    action: String,
    /// Seconds.
    since: Option<f64>,
}

const ACTIONS: [&str; 5] = [
    "none",
    "restart_job",
    "reset_gpu",
    "inspect_hardware",
    "drain_and_reboot",
];

/// Every GPU's verdict at the end, by (host, UUID), from the recorded `gpu_health_state`
/// series: current are those sampled at their host's last scrape (`gpu_node_health_state`);
/// the GPU's state is the worst, its action the most disruptive of its worst; `since` the
/// first sample of the last stretch at that state or worse without a gap over two scrapes.
/// GPUs of hosts that recorded a node verdict and no current component are healthy.
fn truth(text: &str) -> BTreeMap<(String, String), Verdict> {
    let mut last_scrape: BTreeMap<String, f64> = BTreeMap::new();
    let mut gpus: BTreeMap<(String, String), ()> = BTreeMap::new();
    type Points = Vec<(f64, f64)>;
    let mut components: BTreeMap<String, (BTreeMap<String, String>, Points)> = BTreeMap::new();
    for (name, labels, value, at) in text.lines().filter_map(parse_sample) {
        let host = labels.get("instance").cloned().unwrap_or_default();
        match name {
            "gpu_node_health_state" => {
                let last = last_scrape.entry(host).or_insert(at);
                *last = last.max(at);
            }
            "gpu_health_state" => {
                components
                    .entry(format!("{labels:?}"))
                    .or_insert_with(|| (labels.clone(), Vec::new()))
                    .1
                    .push((at, value));
            }
            "gpu_failure_risk_score" => {
                gpus.insert((host, labels["uuid"].clone()), ());
            }
            _ => {}
        }
    }
    let mut out = BTreeMap::new();
    for (host, uuid) in gpus.into_keys() {
        let Some(&scrape) = last_scrape.get(&host) else {
            continue;
        };
        let mine: Vec<&(BTreeMap<String, String>, Points)> = components
            .values()
            .filter(|(l, _)| l["instance"] == host && l["uuid"] == uuid)
            .collect();
        let current: Vec<(f64, &str)> = mine
            .iter()
            .filter(|(_, points)| points.last().is_some_and(|(at, _)| *at == scrape))
            .map(|(l, points)| (points.last().expect("a point").1, l["action"].as_str()))
            .collect();
        let worst = current.iter().map(|(v, _)| *v).fold(0.0, f64::max);
        if worst == 0.0 {
            out.insert(
                (host, uuid),
                Verdict {
                    state: "healthy",
                    action: "none".into(),
                    since: None,
                },
            );
            continue;
        }
        let action = current
            .iter()
            .filter(|(v, _)| *v == worst)
            .map(|(_, a)| *a)
            .max_by_key(|a| ACTIONS.iter().position(|k| k == a))
            .expect("an action")
            .to_string();
        let mut timeline: BTreeMap<i64, f64> = BTreeMap::new();
        for (_, points) in &mine {
            for &(at, v) in points {
                let w = timeline.entry(at as i64).or_insert(v);
                *w = w.max(v);
            }
        }
        let mut since = None;
        for (&at, &v) in timeline.iter().rev() {
            if v < worst || since.is_some_and(|s: i64| (s - at) as f64 > 2.5 * INTERVAL) {
                break;
            }
            since = Some(at);
        }
        out.insert(
            (host, uuid),
            Verdict {
                state: if worst >= 2.0 {
                    "unhealthy"
                } else {
                    "degraded"
                },
                action,
                since: since.map(|s| s as f64),
            },
        );
    }
    out
}

#[test]
fn the_risk_table_gives_each_gpus_verdict_at_the_end() {
    let (Some(promtool), Some(prometheus)) = (tool("promtool"), tool("prometheus")) else {
        return;
    };
    let dir = scratch("verdicts");
    let (file, text) = record(&dir, "3", "2d", &[]);
    let data = dir.join("data");
    Prometheus::backfill(&promtool, &file, &data);
    let store = Prometheus::on_blocks(&prometheus, &data);
    let truth = truth(&text);
    assert!(
        truth.values().any(|v| v.state == "unhealthy") && truth.len() == 24,
        "the recording has unhealthy GPUs to find among its 24: {truth:?}"
    );

    let out = report(&store, &text, "json");
    assert!(
        out.status.success(),
        "report failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("report JSON");
    let risk = doc["fleet"]["risk"].as_array().expect("risk table");
    assert!(risk.len() >= 10, "{risk:?}");
    for entry in risk {
        let key = (
            entry["host"].as_str().expect("host").to_string(),
            entry["uuid"].as_str().expect("uuid").to_string(),
        );
        let want = &truth[&key];
        let since = entry["since"].as_str().map(|s| {
            chrono::DateTime::parse_from_rfc3339(s)
                .expect("RFC 3339")
                .timestamp() as f64
        });
        let got = Verdict {
            state: match entry["state"].as_str() {
                Some("healthy") => "healthy",
                Some("degraded") => "degraded",
                Some("unhealthy") => "unhealthy",
                other => panic!("{key:?}: state {other:?}"),
            },
            action: entry["action"].as_str().expect("an action").to_string(),
            since,
        };
        assert_eq!(&got, want, "{key:?}: {entry}");
        let components = entry["components"].as_array().expect("components");
        assert_eq!(
            components.is_empty(),
            want.state == "healthy",
            "{key:?}: {entry}"
        );
    }
    // Every GPU unhealthy at the end is in the table, whatever its score.
    for (key, verdict) in truth.iter().filter(|(_, v)| v.state == "unhealthy") {
        assert!(
            risk.iter()
                .any(|e| e["host"] == key.0.as_str() && e["uuid"] == key.1.as_str()),
            "{key:?} ({verdict:?}) is missing from {risk:?}"
        );
    }

    // The Markdown names the unhealthy GPUs' repair, the HTML table every verdict.
    let markdown = report(&store, &text, "markdown");
    assert!(markdown.status.success());
    let markdown = String::from_utf8(markdown.stdout).expect("utf-8");
    let (key, worst) = truth
        .iter()
        .find(|(_, v)| v.state == "unhealthy")
        .expect("an unhealthy GPU");
    let gpu = risk
        .iter()
        .find(|e| e["uuid"] == key.1.as_str())
        .expect("in the table")["gpu"]
        .as_str()
        .expect("gpu")
        .to_string();
    assert!(
        markdown.contains(&format!("- {} GPU {gpu} (", key.0))
            && markdown.contains(&format!("unhealthy, {}", worst.action)),
        "{markdown}"
    );
    let html = report(&store, &text, "html");
    assert!(html.status.success());
    let html = String::from_utf8(html.stdout).expect("utf-8");
    assert!(
        html.contains("<th>health at the end</th>") && html.contains("class=\"unhealthy\""),
        "{html}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn agents_that_exposed_no_verdict_leave_it_unknown() {
    let (Some(promtool), Some(prometheus)) = (tool("promtool"), tool("prometheus")) else {
        return;
    };
    let dir = scratch("unknown");
    // What an agent from before the verdicts exposed: the risk score, no health families.
    let (file, text) = record(
        &dir,
        "1",
        "1d",
        &[
            "--families",
            "^gpu_(info|up|utilization_ratio|power_watts|owner_seconds_total|failure_risk_(score|contribution))$",
        ],
    );
    assert!(!text.contains("health_state"));
    let data = dir.join("data");
    Prometheus::backfill(&promtool, &file, &data);
    let store = Prometheus::on_blocks(&prometheus, &data);
    let out = report(&store, &text, "json");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("report JSON");
    let risk = doc["fleet"]["risk"].as_array().expect("risk table");
    assert_eq!(risk.len(), 8, "one host's GPUs: {risk:?}");
    for entry in risk {
        assert_eq!(entry["state"], "unknown", "{entry}");
        assert!(
            entry["action"].is_null() && entry["since"].is_null(),
            "{entry}"
        );
    }
    let markdown = report(&store, &text, "markdown");
    let markdown = String::from_utf8(markdown.stdout).expect("utf-8");
    assert!(markdown.contains("health unknown"), "{markdown}");
    let _ = std::fs::remove_dir_all(&dir);
}
