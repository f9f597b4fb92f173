//! The fleet commands at the limits of the stores they read. A simulated fleet's history
//! (4 hosts × 8 GPUs × 2 days at 10 minutes, in gpu-sentinel's metrics and in
//! dcgm-exporter's) is loaded into the Debian `prometheus` with `--query.max-samples`
//! scaled down as the history is — so far that the queries the report sent before it
//! planned by the store's limits are refused, which each test shows first — and into the
//! Debian `victoria-metrics` at its default flags. `report`, `review` and `replay
//! --prometheus` must succeed there with the figures the recording says.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use chrono::{DateTime, Utc};
use gpu_sentinel::fleet::dialect::Dialect;
use gpu_sentinel::fleet::plan::Census;
use gpu_sentinel::fleet::prom::{Client, Endpoint, Limit, refusal};
use gpu_sentinel::fleet::recorded::Names;
use serde_json::Value;

use common::history::{dcgm_ground_truth, ground_truth, parse_sample, rules_return_loss};
use common::victoria::Victoria;
use common::{Prometheus, binary, tool};

/// The recordings' interval, seconds.
const INTERVAL: f64 = 600.0;

/// What the report reads, and the review: not every family, to keep the files small.
const NATIVE_FAMILIES: &str = "^gpu_(info|up|utilization_ratio|power_watts|temperature_celsius|owner_seconds_total|failure_risk_(score|contribution|rule))$";
const DCGM_FAMILIES: &str = "^DCGM_FI_DEV_(FB_USED|GPU_UTIL|POWER_USAGE)$";

const TEAMS: &str = "[[teams]]\nname = \"research\"\nnamespaces = [\"ml-*\"]\n\n[[teams]]\nname = \"serving\"\nnamespaces = [\"inference\"]\n";

/// `--query.max-samples` for the report's Prometheus: 5,700 for 32 GPUs over 288 steps is
/// what the default 50,000,000 is for 1,000 hosts × 8 GPUs over a week at a minute
/// (50M × 32 × 288 / (8,000 × 10,080) ≈ 5,700: the same samples a GPU-step).
const MAX_SAMPLES: &str = "5700";

/// A recording of the simulated fleet, shared by the tests of this file.
struct History {
    dir: PathBuf,
    file: PathBuf,
    config: PathBuf,
    text: String,
    first: f64,
    last: f64,
}

fn gpu_sentinel(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(binary())
        .args(args)
        .env_remove("GPU_SENTINEL_CONFIG")
        .envs(env.iter().copied())
        .output()
        .expect("gpu-sentinel runs")
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// The process a scratch directory `gpu-sentinel-limits-PID-…` belongs to, when it has
/// exited: its directory is left over, and nothing reads it any more.
fn exited_owner(name: &str) -> bool {
    let Some(pid) = name
        .strip_prefix("gpu-sentinel-limits-")
        .and_then(|rest| rest.split('-').next())
        .and_then(|pid| pid.parse::<u32>().ok())
    else {
        return false;
    };
    pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists()
}

/// Records once per test process. The directories of earlier processes that have exited
/// are cleared; another test process running beside this one (another checkout's suite)
/// keeps its own — clearing those took the blocks from under its Prometheus.
fn record(dialect: &str) -> &'static History {
    static NATIVE: OnceLock<History> = OnceLock::new();
    static DCGM: OnceLock<History> = OnceLock::new();
    let cell = if dialect == "dcgm" { &DCGM } else { &NATIVE };
    cell.get_or_init(|| {
        let root = std::env::temp_dir();
        if let Ok(entries) = std::fs::read_dir(&root) {
            for entry in entries.flatten() {
                if exited_owner(&entry.file_name().to_string_lossy()) {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
        }
        let dir = root.join(format!(
            "gpu-sentinel-limits-{}-{dialect}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        let config = dir.join("config.toml");
        let (text, families) = if dialect == "dcgm" {
            (
                format!("[export]\ndcgm_compat = true\n{TEAMS}").replace(
                    "namespaces = [\"ml-*\"]",
                    "namespaces = [\"ml-*\"]\nhosts = [\"sim-node-02\"]",
                ),
                DCGM_FAMILIES,
            )
        } else {
            (TEAMS.to_string(), NATIVE_FAMILIES)
        };
        std::fs::write(&config, text).expect("config");
        let file = dir.join("history.om");
        let out = gpu_sentinel(
            &[
                "record",
                "--simulate",
                "--config",
                path(&config),
                "--hosts",
                "4",
                "--simulated-duration",
                "2d",
                "--interval",
                "10m",
                "--format",
                "openmetrics",
                "--families",
                families,
                "--out",
                path(&file),
            ],
            &[],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = std::fs::read_to_string(&file).expect("recording");
        let stamps: Vec<f64> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
            .collect();
        let first = stamps.iter().copied().fold(f64::MAX, f64::min);
        let last = stamps.iter().copied().fold(f64::MIN, f64::max);
        History {
            dir,
            file,
            config,
            text,
            first,
            last,
        }
    })
}

impl History {
    /// TSDB blocks of the history in a directory of the test's own.
    fn blocks(&self, promtool: &Path, name: &str) -> PathBuf {
        let data = self.dir.join(name);
        let _ = std::fs::remove_dir_all(&data);
        Prometheus::backfill(promtool, &self.file, &data);
        data
    }

    /// Where the hourly rules' records begin: the first whole hour 12 hours in.
    fn records_start(&self) -> i64 {
        ((self.first + 12.0 * 3600.0) / 3600.0).ceil() as i64 * 3600
    }

    /// The period of the report: half a step before the first sample (so it is in, however
    /// a store treats a range's left edge) to the last.
    fn period(&self) -> (String, String) {
        (rfc3339(self.first - INTERVAL / 2.0), rfc3339(self.last))
    }
}

fn rfc3339(seconds: f64) -> String {
    DateTime::<Utc>::from_timestamp(seconds as i64, 0)
        .expect("in range")
        .to_rfc3339()
}

/// `report --format json` of the history's period; the document and standard error.
fn report(base: &str, history: &History, extra: &[&str], env: &[(&str, &str)]) -> (Value, String) {
    let (from, to) = history.period();
    let mut args = vec![
        "report",
        "--prometheus",
        base,
        "--from",
        &from,
        "--to",
        &to,
        "--config",
        path(&history.config),
        "--format",
        "json",
    ];
    args.extend_from_slice(extra);
    let out = gpu_sentinel(&args, env);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "report failed: {stderr}");
    let doc = serde_json::from_slice(&out.stdout).expect("report JSON");
    (doc, stderr)
}

/// Each team's held and idle GPU-hours within 2% of the truth (and a twentieth of an hour,
/// for the smallest).
fn assert_teams(doc: &Value, truth: &BTreeMap<String, (f64, f64)>, store: &str) {
    assert_teams_short_by(doc, truth, &BTreeMap::new(), store);
}

/// The same, where a team's busy and idle hours may also come out short by up to `short`
/// (what the records leave out by design).
fn assert_teams_short_by(
    doc: &Value,
    truth: &BTreeMap<String, (f64, f64)>,
    short: &BTreeMap<String, (f64, f64)>,
    store: &str,
) {
    let teams = doc["teams"].as_array().expect("teams");
    let names: BTreeSet<&str> = teams.iter().filter_map(|t| t["team"].as_str()).collect();
    assert_eq!(
        names,
        truth.keys().map(String::as_str).collect::<BTreeSet<_>>(),
        "{store}"
    );
    for team in teams {
        let name = team["team"].as_str().expect("team");
        let (busy, idle) = truth[name];
        let (short_busy, short_idle) = short.get(name).copied().unwrap_or_default();
        let got = |key: &str| team[key].as_f64().expect(key);
        for (key, want, short) in [
            ("gpu_hours", busy + idle, short_busy + short_idle),
            ("idle_gpu_hours", idle, short_idle),
        ] {
            let off = got(key) - want;
            assert!(
                off <= 0.02 * want + 0.05 && off >= -(0.02 * want + 0.05 + short),
                "{store}: {name} {key} {} against {want} in the recording (short by up to {short} by design)",
                got(key)
            );
        }
    }
}

/// The fleet figures every store must give for this history.
fn assert_fleet(doc: &Value, store: &str) {
    let fleet = &doc["fleet"];
    assert_eq!(fleet["gpus"], 32, "{store}: 4 hosts × 8 GPUs");
    // The development host, whose jobs pause at night, is always there. The inference host
    // (sim-node-04) may join it: its daily trough is set by the simulation's start, which is
    // the history's end (now) less its length, and when that falls near midnight UTC the
    // trough is the report's night window and the host sits just under the idle line. The
    // training and mixed hosts never do.
    let night: Vec<&str> = fleet["energy"]["night_idle_hosts"]
        .as_array()
        .map(|hosts| hosts.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    assert!(
        night.contains(&"sim-node-03")
            && night
                .iter()
                .all(|h| *h == "sim-node-03" || *h == "sim-node-04"),
        "{store}: the development host (and at most the inference host) idle at night: {night:?}"
    );
}

/// The native history's truth: the owner counters' increase (with the end effects of
/// `increase` allowed for, as in tests/it/fleet_report.rs).
fn native_truth(text: &str) -> BTreeMap<String, (f64, f64)> {
    ground_truth(text, INTERVAL).0.hours
}

/// Distinct series per family and host (`instance`) in a recording.
fn series_counts(text: &str) -> BTreeMap<String, BTreeMap<String, usize>> {
    let mut seen: BTreeSet<(String, String)> = BTreeSet::new();
    let mut counts: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((name, labels, _, _)) = parse_sample(line) else {
            continue;
        };
        if seen.insert((name.to_string(), format!("{labels:?}"))) {
            let host = labels.get("instance").cloned().unwrap_or_default();
            *counts
                .entry(name.to_string())
                .or_default()
                .entry(host)
                .or_default() += 1;
        }
    }
    counts
}

/// Asks `base` one query with the library's own client: the refusal (if any) it classifies.
fn refused(base: &str, query: &str, at: f64) -> Option<Limit> {
    let client = Client::new(Endpoint {
        base: base.to_string(),
        timeout: std::time::Duration::from_secs(30),
        ..Endpoint::default()
    });
    let at = DateTime::<Utc>::from_timestamp(at as i64, 0).expect("in range");
    match client.instant(query, at) {
        Ok(_) => None,
        Err(error) => Some(
            refusal(&error)
                .unwrap_or_else(|| panic!("not a refusal for size: {error:#}"))
                .limit,
        ),
    }
}

/// The held-time query the report sent before it planned by the store's limits: the whole
/// period in one subquery, every host at once.
fn unsplit_dcgm_usage(window: f64, step: u64) -> String {
    format!(
        "sum by (Hostname, gpu, namespace) (count_over_time(((DCGM_FI_DEV_FB_USED > 1024 or DCGM_FI_DEV_FB_USED{{pod!=\"\"}}) unless on(Hostname, gpu) (DCGM_FI_DEV_GPU_UTIL >= 5))[{}s:{step}s])) * {step}",
        window as i64
    )
}

#[test]
fn dcgm_report_holds_a_scaled_prometheus_limit_and_splits_what_it_refuses() {
    let (Some(promtool), Some(prometheus)) = (tool("promtool"), tool("prometheus")) else {
        return;
    };
    let history = record("dcgm");
    let data = history.blocks(&promtool, "prometheus-dcgm");
    let flag = format!("--query.max-samples={MAX_SAMPLES}");
    let store = Prometheus::on_blocks_with(&prometheus, &data, &[&flag]);
    // What the report asked before: refused, for the samples it would hold.
    let window = history.last - history.first + INTERVAL / 2.0;
    assert_eq!(
        refused(&store.base, &unsplit_dcgm_usage(window, 600), history.last),
        Some(Limit::Samples)
    );
    let truth = dcgm_ground_truth(&history.text, INTERVAL);

    // Planned by the limit the store states in its flags.
    let (doc, _) = report(&store.base, history, &[], &[]);
    assert_eq!(doc["source"], "dcgm-exporter");
    assert_teams(&doc, &truth, "Prometheus, planned");
    assert_fleet(&doc, "Prometheus, planned");
    let used = &doc["store"];
    assert_eq!(used["max_samples"], 5_700);
    assert_eq!(
        used["scrape_interval_seconds"], 600.0,
        "from the samples' spacing"
    );
    assert_eq!(used["read"], "raw samples");
    assert_eq!(used["refused"], 0, "{used}");

    // Told a far larger limit, the report's pieces are refused, and split until they pass.
    let (split, stderr) = report(
        &store.base,
        history,
        &["--max-samples", "1000000000"],
        &[("RUST_LOG", "gpu_sentinel_fleet=debug")],
    );
    assert_split(&split, &stderr, &truth, "Prometheus, split on refusal");
    // No MIG instance in this store: no query asks for instances' activity.
    let answered: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("store answered"))
        .collect();
    assert!(!answered.is_empty(), "{stderr}");
    assert!(
        answered.iter().all(|l| !l.contains("GPU_I_ID!=")),
        "{stderr}"
    );
}

/// A report the store refused pieces of: it says so (the count, a debug line each split)
/// and its figures are the recording's.
fn assert_split(split: &Value, stderr: &str, truth: &BTreeMap<String, (f64, f64)>, store: &str) {
    assert!(
        split["store"]["refused"].as_u64().is_some_and(|n| n > 0),
        "{store}: {}",
        split["store"]
    );
    assert!(
        stderr.contains("asking for it in two halves"),
        "{store}: a debug line says each split: {stderr}"
    );
    assert_teams(split, truth, store);
    assert_fleet(split, store);
}

#[test]
fn native_report_and_review_hold_a_scaled_prometheus_limit() {
    let (Some(promtool), Some(prometheus)) = (tool("promtool"), tool("prometheus")) else {
        return;
    };
    let history = record("native");
    let data = history.blocks(&promtool, "prometheus-native");
    let flag = format!("--query.max-samples={MAX_SAMPLES}");
    let store = Prometheus::on_blocks_with(&prometheus, &data, &[&flag]);
    let (doc, _) = report(&store.base, history, &[], &[]);
    assert_eq!(doc["source"], "gpu-sentinel");
    assert_teams(&doc, &native_truth(&history.text), "Prometheus");
    assert_fleet(&doc, "Prometheus");
    assert_eq!(doc["fleet"]["risk"][0]["host"], "sim-node-01");
    drop(store);

    // The review asks for the last value of each series in an hour, family by family. A
    // limit under a family's series (and a series' samples in the hour) refuses the query
    // as it was; one host's series of any family stay under it.
    let mut counts = series_counts(&history.text);
    counts.retain(|family, _| family != "gpu_owner_seconds_total" && family != "gpu_power_watts");
    let widest = counts
        .values()
        .map(|hosts| hosts.values().sum::<usize>())
        .max()
        .unwrap_or(0);
    let widest_host = counts
        .values()
        .flat_map(|hosts| hosts.values().copied())
        .max()
        .unwrap_or(0);
    let per_series = (3600.0 / INTERVAL) as usize;
    let limit = widest_host + per_series + (widest - widest_host) / 2;
    let data = history.blocks(&promtool, "prometheus-review");
    let flag = format!("--query.max-samples={limit}");
    let store = Prometheus::on_blocks_with(&prometheus, &data, &[&flag]);
    assert_eq!(
        refused(&store.base, "last_over_time(gpu_up[1h])", history.last),
        Some(Limit::Samples),
        "32 series against a limit of {limit}"
    );
    let review = gpu_sentinel(&["review", "--prometheus", &store.base], &[]);
    assert!(
        review.status.success(),
        "{}",
        String::from_utf8_lossy(&review.stderr)
    );
    let review = String::from_utf8(review.stdout).expect("utf-8");
    assert!(review.contains("— 4 hosts"), "{review}");
    assert_eq!(
        review.lines().filter(|l| l.contains(" GPU-")).count(),
        32,
        "{review}"
    );
    let first = review
        .lines()
        .find(|l| l.trim_start().starts_with("1 "))
        .expect("a ranked row");
    assert!(first.contains("sim-node-01"), "{review}");
}

#[test]
fn replay_holds_a_scaled_prometheus_limit() {
    let (Some(promtool), Some(prometheus)) = (tool("promtool"), tool("prometheus")) else {
        return;
    };
    let history = record("native");
    let (from, to) = (rfc3339(history.first), rfc3339(history.last));
    let replay = |base: &str| -> Value {
        let out = gpu_sentinel(
            &[
                "replay",
                "--prometheus",
                base,
                "--from",
                &from,
                "--to",
                &to,
                "--json",
            ],
            &[],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("replay JSON")
    };
    let roomy = Prometheus::on_blocks(&prometheus, &history.blocks(&promtool, "replay-roomy"));
    let expected = replay(&roomy.base);
    drop(roomy);
    // One host's series at six hours of steps, what the replay asked at once before:
    // refused under a limit of a third of that.
    let host_series: usize = series_counts(&history.text)
        .values()
        .filter_map(|hosts| hosts.get("sim-node-01"))
        .sum();
    let limit = host_series * 36 / 3;
    let flag = format!("--query.max-samples={limit}");
    let data = history.blocks(&promtool, "replay-limited");
    let store = Prometheus::on_blocks_with(&prometheus, &data, &[&flag]);
    let client = Client::new(Endpoint {
        base: store.base.clone(),
        timeout: std::time::Duration::from_secs(30),
        ..Endpoint::default()
    });
    let at = |s: f64| DateTime::<Utc>::from_timestamp(s as i64, 0).expect("in range");
    let chunk = client.range(
        "{__name__=~\".+\",instance=\"sim-node-01\"}",
        at(history.first),
        at(history.first + 6.0 * 3600.0),
        std::time::Duration::from_secs(600),
    );
    assert!(
        chunk.as_ref().err().and_then(refusal).is_some(),
        "six hours of one host are refused at {limit}"
    );
    let got = replay(&store.base);
    assert_eq!(got["source"], "gpu-sentinel");
    let hosts = got["hosts"].as_array().expect("hosts");
    assert_eq!(hosts.len(), 4);
    assert!(
        hosts
            .iter()
            .all(|h| h["report"]["samples"].as_u64() > Some(0))
    );
    assert_eq!(
        got, expected,
        "the same replay as from a store without the limit"
    );
}

#[test]
fn victoria_metrics_at_default_flags_gives_both_dialects_reports() {
    let Some(victoria) = tool("victoria-metrics") else {
        return;
    };
    // dcgm-exporter's metrics. The report before counted held time at the default --step
    // of a minute over each 30-day month in one subquery: more points a series than
    // VictoriaMetrics allows.
    let history = record("dcgm");
    let store = Victoria::start(&victoria);
    store.import_openmetrics(&history.file);
    let month = unsplit_dcgm_usage(30.0 * 86_400.0, 60)
        .replace("sum by (Hostname, gpu, namespace) ", "sum");
    assert_eq!(
        refused(&store.base, &month, history.last),
        Some(Limit::Points)
    );
    let truth = dcgm_ground_truth(&history.text, INTERVAL);
    for step in [None, Some("1m")] {
        let extra: Vec<&str> = step.map(|s| vec!["--step", s]).unwrap_or_default();
        let (doc, _) = report(&store.base, history, &extra, &[]);
        let name = format!("VictoriaMetrics, dcgm-exporter, --step {step:?}");
        assert_eq!(doc["source"], "dcgm-exporter", "{name}");
        assert_teams(&doc, &truth, &name);
        assert_fleet(&doc, &name);
    }
    drop(store);

    // gpu-sentinel's metrics: the report and the review.
    let history = record("native");
    let store = Victoria::start(&victoria);
    store.import_openmetrics(&history.file);
    let (doc, _) = report(&store.base, history, &[], &[]);
    assert_eq!(doc["source"], "gpu-sentinel");
    assert_teams(
        &doc,
        &native_truth(&history.text),
        "VictoriaMetrics, gpu-sentinel",
    );
    assert_fleet(&doc, "VictoriaMetrics, gpu-sentinel");
    assert_eq!(doc["fleet"]["risk"][0]["host"], "sim-node-01");
    let review = gpu_sentinel(&["review", "--prometheus", &store.base], &[]);
    assert!(
        review.status.success(),
        "{}",
        String::from_utf8_lossy(&review.stderr)
    );
    let review = String::from_utf8(review.stdout).expect("utf-8");
    assert_eq!(
        review.lines().filter(|l| l.contains(" GPU-")).count(),
        32,
        "{review}"
    );
}

/// The hourly groups of the shipped rules file, alone: what the rules backfill evaluates.
fn hourly_rules(dir: &Path) -> PathBuf {
    let rules = std::fs::read_to_string(common::repo().join("alerts/gpu-sentinel-fleet.rules.yml"))
        .expect("rules file");
    let at = rules
        .find("  - name: gpu-sentinel-fleet-hourly\n")
        .expect("the hourly group");
    let file = dir.join("hourly.rules.yml");
    std::fs::write(&file, format!("groups:\n{}", &rules[at..])).expect("rules");
    file
}

/// The history in Prometheus with the hourly rules' records from 12 hours in to the end
/// (`promtool tsdb create-blocks-from rules` against a Prometheus on the raw blocks), then
/// served under the scaled limit; and the records as VictoriaMetrics imports them.
fn with_records(history: &History, name: &str) -> Option<(Prometheus, String)> {
    let (Some(promtool), Some(prometheus)) = (tool("promtool"), tool("prometheus")) else {
        return None;
    };
    let data = history.blocks(&promtool, name);
    // The records' subqueries step at the server's evaluation interval: the scrape
    // interval, as a Prometheus scraping the fleet would have it.
    let raw = Prometheus::on_blocks_configured(
        &prometheus,
        &data,
        &format!(
            "global:\n  scrape_interval: {0}s\n  evaluation_interval: {0}s\n",
            INTERVAL as u64
        ),
        &[],
    );
    let rules = hourly_rules(&history.dir);
    let recorded = history.dir.join(format!("{name}-rules"));
    let _ = std::fs::remove_dir_all(&recorded);
    // From the first whole hour 12 hours in: promtool 2.42 evaluates an hourly group from
    // --start on, and from a start inside an hour it evaluated every rule, exited 0 and
    // wrote no block at all (seen with a start at 13:40, not at 14:00 or 00:00), so the
    // test failed or passed by the minute it ran. The records fall on the hour, as a
    // Prometheus evaluating the group would place them.
    let start = history.records_start();
    let backfilled = Command::new(&promtool)
        .args(["tsdb", "create-blocks-from", "rules"])
        .arg(format!("--start={start}"))
        .arg(format!("--end={}", history.last as i64))
        .arg(format!("--url={}", raw.base))
        .arg(format!("--output-dir={}", recorded.display()))
        .arg(&rules)
        .output()
        .expect("promtool runs");
    assert!(
        backfilled.status.success(),
        "{}",
        String::from_utf8_lossy(&backfilled.stderr)
    );
    drop(raw);
    let blocks = std::fs::read_dir(&recorded).unwrap_or_else(|error| {
        panic!(
            "{}: {error}; promtool said: {}{}",
            recorded.display(),
            String::from_utf8_lossy(&backfilled.stdout),
            String::from_utf8_lossy(&backfilled.stderr)
        )
    });
    for block in blocks.flatten() {
        if block.path().join("meta.json").exists() {
            std::fs::rename(block.path(), data.join(block.file_name())).expect("block moved");
        }
    }
    let flag = format!("--query.max-samples={MAX_SAMPLES}");
    let store = Prometheus::on_blocks_with(&prometheus, &data, &[&flag]);
    // The records, raw, as VictoriaMetrics's JSON lines.
    let mut lines = String::new();
    for series in
        store.query("{__name__=~\"instance_gpu.*|Hostname_gpu.*|fleet:.*_hourly_rules:.*\"}[7d]")
    {
        let values: Vec<f64> = series["values"]
            .as_array()
            .expect("values")
            .iter()
            .map(|p| p[1].as_str().and_then(|v| v.parse().ok()).expect("a value"))
            .collect();
        let stamps: Vec<i64> = series["values"]
            .as_array()
            .expect("values")
            .iter()
            .map(|p| (p[0].as_f64().expect("a time") * 1000.0).round() as i64)
            .collect();
        let line =
            serde_json::json!({"metric": series["metric"], "values": values, "timestamps": stamps});
        lines.push_str(&format!("{line}\n"));
    }
    assert!(!lines.is_empty(), "the rules recorded");
    Some((store, lines))
}

/// A report that read 36 hours from the records and 12 from raw samples, with the figures
/// of the recording (less, at most, what the records leave out by design: `short`).
fn assert_recorded(
    doc: &Value,
    truth: &BTreeMap<String, (f64, f64)>,
    short: &BTreeMap<String, (f64, f64)>,
    store: &str,
) {
    let used = &doc["store"];
    assert_eq!(
        used["read"], "recording rules and raw samples",
        "{store}: {used}"
    );
    let (recorded, raw) = (
        used["recorded_hours"].as_u64().unwrap_or(0),
        used["raw_hours"].as_u64().unwrap_or(0),
    );
    assert!((34..=36).contains(&recorded), "{store}: {used}");
    assert_eq!(recorded + raw, 48, "{store}: {used}");
    assert_teams_short_by(doc, truth, short, store);
    assert_fleet(doc, store);
}

/// The census the report plans with counts each record it does not list as its raw
/// family's series over a span starting an hour earlier: per host, never fewer series or
/// GPUs than the store lists for the record itself (whole period, and its last 12 hours).
fn assert_records_bounded(base: &str, history: &History, dialect: Dialect) {
    let client = Client::new(Endpoint {
        base: base.to_string(),
        timeout: std::time::Duration::from_secs(30),
        ..Endpoint::default()
    });
    let time = |s: f64| DateTime::<Utc>::from_timestamp(s as i64, 0).expect("in range");
    let bounded = Names::of(dialect).bounded(dialect);
    assert!(!bounded.is_empty());
    let records: Vec<&str> = bounded.iter().map(|(record, _)| *record).collect();
    let raw: Vec<&str> = bounded.iter().map(|(_, raw)| *raw).collect();
    let end = time(history.last);
    for start in [time(history.first), end - chrono::TimeDelta::hours(12)] {
        let listed = Census::take(&client, dialect.host(), &records, start, end).expect("records");
        let since = start - chrono::TimeDelta::hours(1);
        let mut census = Census::take(&client, dialect.host(), &raw, since, end).expect("raw");
        for (record, raw) in &bounded {
            census.bound(record, raw);
        }
        for (record, _) in &bounded {
            assert!(listed.series(record, None, true) > 0, "{record} listed");
            for (i, host) in listed.hosts.iter().enumerate() {
                let j = census
                    .hosts
                    .iter()
                    .position(|h| h == host)
                    .expect("the host");
                let (mine, theirs) = (Some(j..j + 1), Some(i..i + 1));
                assert!(
                    census.series(record, mine.clone(), false)
                        >= listed.series(record, theirs.clone(), false)
                        && census.gpus(record, mine, false) >= listed.gpus(record, theirs, false),
                    "{record} on {host} from {start}"
                );
            }
        }
    }
}

#[test]
fn recorded_hours_are_read_from_the_rules_records_gpu_sentinel() {
    let history = record("native");
    let Some((store, records)) = with_records(history, "rules-native") else {
        return;
    };
    assert_records_bounded(&store.base, history, Dialect::Native);
    let truth = native_truth(&history.text);
    let short = rules_return_loss(&history.text, history.records_start(), history.last as i64);
    let (doc, _) = report(&store.base, history, &[], &[]);
    assert_recorded(&doc, &truth, &short, "Prometheus");
    let markdown = gpu_sentinel(
        &[
            "report",
            "--prometheus",
            &store.base,
            "--from",
            &history.period().0,
            "--to",
            &history.period().1,
            "--config",
            path(&history.config),
        ],
        &[],
    );
    let markdown = String::from_utf8_lossy(&markdown.stdout);
    assert!(
        markdown.contains("recording rules' hourly records for 3"),
        "{markdown}"
    );
    if let Some(victoria) = tool("victoria-metrics") {
        let vm = Victoria::start(&victoria);
        vm.import_openmetrics(&history.file);
        vm.import_json_lines(&records);
        let (doc, _) = report(&vm.base, history, &[], &[]);
        assert_recorded(&doc, &truth, &short, "VictoriaMetrics");
    }
}

#[test]
fn recorded_hours_are_read_from_the_rules_records_dcgm_exporter() {
    let history = record("dcgm");
    let Some((store, records)) = with_records(history, "rules-dcgm") else {
        return;
    };
    let dialect = Dialect::Dcgm {
        memory_floor_mib: 1024,
    };
    assert_records_bounded(&store.base, history, dialect);
    let truth = dcgm_ground_truth(&history.text, INTERVAL);
    let debug = [("RUST_LOG", "gpu_sentinel_fleet::prom=debug")];
    let (doc, stderr) = report(&store.base, history, &[], &debug);
    assert_recorded(&doc, &truth, &BTreeMap::new(), "Prometheus");
    let held = "sum_over_time(Hostname_gpu_namespace_state:DCGM_FI_DEV_FB_USED:held_seconds1h";
    assert!(stderr.contains(held), "the held records read");
    // Counted with another idle threshold than the rules', the held time comes from raw
    // samples (the records say the threshold they were counted with).
    let config = history.dir.join("threshold.toml");
    let text = std::fs::read_to_string(&history.config).expect("config");
    std::fs::write(&config, format!("[idle]\nthreshold = 0.5\n{text}")).expect("config");
    let (from, to) = history.period();
    let out = gpu_sentinel(
        &[
            "report",
            "--prometheus",
            &store.base,
            "--from",
            &from,
            "--to",
            &to,
            "--config",
            path(&config),
            "--format",
            "json",
        ],
        &debug,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("ratio_avg1h") && !stderr.contains(held),
        "the utilization records read, no held record at another threshold"
    );
    if let Some(victoria) = tool("victoria-metrics") {
        let vm = Victoria::start(&victoria);
        vm.import_openmetrics(&history.file);
        vm.import_json_lines(&records);
        let (doc, _) = report(&vm.base, history, &[], &[]);
        assert_recorded(&doc, &truth, &BTreeMap::new(), "VictoriaMetrics");
    }
}

/// A query frontend in front of the store, refusing as Mimir's does: a query that selects
/// more than two hosts' series ("the query exceeded the maximum number of series"), a range
/// query longer than twelve hours ("the query time range exceeds the limit"). The report
/// splits what it refuses, by host groups and by time, and gives the figures the store
/// gives unrefused.
#[test]
fn a_mimir_frontends_series_and_length_refusals_are_split_around() {
    use common::http_server::{Answer, HttpServer};
    let (Some(promtool), Some(prometheus)) = (tool("promtool"), tool("prometheus")) else {
        return;
    };
    let history = record("dcgm");
    let data = history.blocks(&promtool, "prometheus-dcgm-frontend");
    let store = Prometheus::on_blocks(&prometheus, &data);
    let base = store.base.clone();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let windows = regex::Regex::new(r"\[(\d+)s").expect("a regex");
    let frontend = HttpServer::answering(move |request| {
        let path = request.path();
        if let Some(query) = request.form("query") {
            // The hosts a query fetches series of: its host matcher's, else those with
            // series in the span it reads (Mimir counts the series it fetches).
            let span = |name: &str| request.form(name).and_then(|v| v.parse::<f64>().ok());
            let hosts = match query
                .split_once("Hostname=~\"")
                .and_then(|(_, rest)| rest.split_once('"'))
            {
                Some((alternatives, _)) => {
                    alternatives.split('|').filter(|a| !a.is_empty()).count()
                }
                None if query.contains("Hostname=\"") => 1,
                None => {
                    let window = windows
                        .captures_iter(&query)
                        .filter_map(|c| c[1].parse::<f64>().ok())
                        .fold(300.0, f64::max);
                    let (start, end) = match (span("time"), span("start"), span("end")) {
                        (Some(t), _, _) => (t - window, t),
                        (None, Some(s), Some(e)) => (s - window, e),
                        _ => (0.0, f64::from(u32::MAX)),
                    };
                    hosts_with_series(&agent, &base, start, end)
                }
            };
            if hosts > 2 {
                return Answer::json(
                    422,
                    r#"{"status":"error","errorType":"execution","error":"the query exceeded the maximum number of series (limit: 16 series) (err-mimir-max-series-per-query). Consider reducing the time range and/or number of series selected by the query."}"#,
                );
            }
            if path.ends_with("query_range")
                && let (Some(start), Some(end)) = (span("start"), span("end"))
                && end - start > 12.0 * 3600.0
            {
                return Answer::json(
                    422,
                    r#"{"status":"error","errorType":"bad_data","error":"the query time range exceeds the limit (query length: 48h0m0s, limit: 12h0m0s) (err-mimir-max-query-length)"}"#,
                );
            }
        }
        let url = format!("{base}{}", request.target);
        let answer = if request.method == "POST" {
            agent
                .post(&url)
                .header("Content-Type", "application/x-www-form-urlencoded")
                .send(&request.body[..])
        } else {
            agent.get(&url).call()
        };
        match answer {
            Ok(mut response) => {
                let status = response.status().as_u16();
                let body = response.body_mut().read_to_string().unwrap_or_default();
                Answer::json(status, &body)
            }
            Err(e) => Answer::status(502).body(&e.to_string()),
        }
    });
    let truth = dcgm_ground_truth(&history.text, INTERVAL);
    let (direct, _) = report(&store.base, history, &[], &[]);
    let (split, stderr) = report(
        &frontend.url(""),
        history,
        &[],
        &[("RUST_LOG", "gpu_sentinel_fleet=debug")],
    );
    assert_split(&split, &stderr, &truth, "behind the frontend");
    assert_eq!(
        split["teams"], direct["teams"],
        "the same teams as the store unrefused"
    );
    assert_eq!(split["fleet"]["gpus"], direct["fleet"]["gpus"]);
}

/// The hosts with a DCGM series in `(start, end]`, as the store lists them.
fn hosts_with_series(agent: &ureq::Agent, base: &str, start: f64, end: f64) -> usize {
    let listed = agent
        .get(format!("{base}/api/v1/series"))
        .query("match[]", r#"{__name__=~"DCGM_FI_.*"}"#)
        .query("start", format!("{start}"))
        .query("end", format!("{end}"))
        .call()
        .ok()
        .and_then(|mut r| r.body_mut().read_to_string().ok())
        .and_then(|text| serde_json::from_str::<Value>(&text).ok());
    let hosts: BTreeSet<String> = listed
        .as_ref()
        .and_then(|doc| doc["data"].as_array())
        .into_iter()
        .flatten()
        .filter_map(|s| s["Hostname"].as_str().map(str::to_string))
        .collect();
    hosts.len()
}

/// A store that refuses every query for its size, however small: the report splits its
/// pieces a bounded number of times, then fails naming the limit to raise.
#[test]
fn a_store_refusing_everything_costs_a_bounded_number_of_queries() {
    use common::http_server::{Answer, HttpServer};
    let store = HttpServer::answering(|request| match request.path() {
        "/api/v1/label/__name__/values" => Answer::json(
            200,
            r#"{"status":"success","data":["DCGM_FI_DEV_GPU_UTIL","DCGM_FI_DEV_FB_USED"]}"#,
        ),
        "/api/v1/label/Hostname/values" => Answer::json(
            200,
            r#"{"status":"success","data":["a","b","c","d","e","f","g","h"]}"#,
        ),
        // The index lists a GPU's series on each host: the queries have something to read.
        "/api/v1/series" => {
            let series: Vec<String> = ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"]
                .iter()
                .flat_map(|family| {
                    "abcdefgh".chars().map(move |host| {
                        format!(r#"{{"__name__":"{family}","Hostname":"{host}","gpu":"0"}}"#)
                    })
                })
                .collect();
            Answer::json(
                200,
                &format!(r#"{{"status":"success","data":[{}]}}"#, series.join(",")),
            )
        }
        _ => Answer::json(
            422,
            r#"{"status":"error","errorType":"execution","error":"query processing would load too many samples into memory in query execution"}"#,
        ),
    });
    let out = gpu_sentinel(
        &[
            "report",
            "--prometheus",
            &store.url(""),
            "--last",
            "7d",
            "--format",
            "json",
        ],
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("too many samples") && stderr.contains("--query.max-samples"),
        "the error names the store's words and the limit to raise:\n{stderr}"
    );
    let asked = store.requests().len();
    assert!(asked < 2_000, "{asked} requests");
}
