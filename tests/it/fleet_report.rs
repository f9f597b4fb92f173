//! The fleet view end to end: `record --format openmetrics` writes simulated multi-host
//! history, `promtool tsdb create-blocks-from openmetrics` loads it into TSDB blocks, the
//! Debian `prometheus` serves them, and `report --prometheus` reads it back; its figures
//! are checked against ground truth computed from the recorded file itself.

use crate::common;
use common::rfc3339;
use common::run_without_env_config as gpu_sentinel;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::history::{Truth, dcgm_ground_truth, ground_truth, parse_sample};
use common::http_server::{Answer, HttpServer};
use common::{Prometheus, binary, tool};

const TEAMS: &str = r#"
[[teams]]
name = "research"
namespaces = ["ml-*"]

[[teams]]
name = "serving"
namespaces = ["inference"]
"#;

fn scratch(name: &str) -> PathBuf {
    common::scratch("fleet", name)
}

/// The recording's interval (`record --interval 15m`), seconds.
const RECORDED_INTERVAL: f64 = 900.0;

fn close(report: f64, truth: f64) -> bool {
    (report - truth).abs() <= 0.01 * truth.abs() + 0.05
}

fn record_history(dir: &Path) -> (PathBuf, String) {
    let file = dir.join("history.om");
    let out = gpu_sentinel(&[
        "record",
        "--simulate",
        "--hosts",
        "3",
        "--simulated-duration",
        "2d",
        "--interval",
        "15m",
        "--format",
        "openmetrics",
        "--out",
        file.to_str().expect("utf-8 path"),
    ]);
    assert!(
        out.status.success(),
        "record failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !dir.join("history.om.parts").exists(),
        "the part files are removed"
    );
    let text = std::fs::read_to_string(&file).expect("recording");
    (file, text)
}

#[test]
fn report_figures_match_the_recording() {
    let (Some(promtool), Some(prometheus)) = (tool("promtool"), tool("prometheus")) else {
        return;
    };
    let dir = scratch("truth");
    let (file, text) = record_history(&dir);

    // OpenMetrics: each family declared once, never interleaved, and the file ends in EOF.
    assert!(text.ends_with("# EOF\n"), "ends with # EOF");
    let mut declared = BTreeSet::new();
    let mut current = String::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let family = rest.split(' ').next().unwrap_or_default().to_string();
            assert!(declared.insert(family.clone()), "{family} declared twice");
            current = family;
        } else if !line.starts_with('#') {
            assert!(
                line.starts_with(&current),
                "{line} is outside its family {current}"
            );
        }
    }
    let instances: BTreeSet<String> = text
        .lines()
        .filter_map(parse_sample)
        .map(|(_, labels, _, _)| labels["instance"].clone())
        .collect();
    assert_eq!(
        instances.into_iter().collect::<Vec<_>>(),
        ["sim-node-01", "sim-node-02", "sim-node-03"]
    );

    let data = dir.join("data");
    Prometheus::backfill(&promtool, &file, &data);
    let store = Prometheus::on_blocks(&prometheus, &data);

    let (
        Truth {
            hours: truth,
            extrapolation,
        },
        from,
        to,
    ) = ground_truth(&text, RECORDED_INTERVAL);
    let config = dir.join("teams.toml");
    std::fs::write(&config, TEAMS).expect("config");
    let (from, to) = (rfc3339(from), rfc3339(to));
    let report = |format: &str| {
        gpu_sentinel(&[
            "report",
            "--prometheus",
            &store.base,
            "--from",
            &from,
            "--to",
            &to,
            "--config",
            config.to_str().expect("utf-8 path"),
            "--step",
            "15m",
            "--format",
            format,
        ])
    };
    let out = report("json");
    assert!(
        out.status.success(),
        "report failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("report JSON");
    assert_eq!(doc["source"], "gpu-sentinel");
    let teams = doc["teams"].as_array().expect("teams");
    let names: BTreeSet<&str> = teams.iter().filter_map(|t| t["team"].as_str()).collect();
    assert_eq!(
        names,
        truth.keys().map(String::as_str).collect::<BTreeSet<_>>(),
        "the teams are those the recording's owners map to"
    );
    for team in teams {
        let name = team["team"].as_str().expect("team name");
        let (busy, idle) = truth[name];
        let (busy_ends, idle_ends) = extrapolation[name];
        let got = |key: &str| team[key].as_f64().expect(key);
        let within =
            |got: f64, truth: f64, ends: f64| close(got, truth) || (got - truth).abs() <= ends;
        assert!(
            within(got("busy_gpu_hours"), busy, busy_ends),
            "{name}: busy {} GPU-h, the recording says {busy} (+{busy_ends} at series' ends)",
            got("busy_gpu_hours")
        );
        assert!(
            within(got("idle_gpu_hours"), idle, idle_ends),
            "{name}: idle {} GPU-h, the recording says {idle} (+{idle_ends} at series' ends)",
            got("idle_gpu_hours")
        );
        assert!(
            within(got("gpu_hours"), busy + idle, busy_ends + idle_ends),
            "{name}: held"
        );
    }
    assert!(
        truth["research"].1 > 1.0,
        "the recording has an idle research allocation to find: {truth:?}"
    );

    let fleet = &doc["fleet"];
    assert_eq!(fleet["gpus"], 24, "3 hosts × 8 GPUs");
    let top = &fleet["risk"][0];
    assert_eq!(
        top["host"], "sim-node-01",
        "the failing GPUs are on the first host"
    );
    assert!(top["risk"].as_f64().expect("risk") > 0.5, "{top}");
    assert!(!top["reasons"].as_array().expect("reasons").is_empty());
    assert_eq!(
        fleet["heatmap"].as_array().expect("heatmap").len(),
        47,
        "one cell per hour of the two days after the first"
    );

    let capacity = &fleet["capacity"];
    let demand = capacity["forecast_demand_gpus"].as_f64().expect("demand");
    let work = fleet["utilization"].as_f64().expect("utilization") * 24.0;
    assert!(
        (demand - work).abs() <= 0.1 * work,
        "demand {demand} GPUs is the fleet's summed utilization ({work})"
    );
    assert_eq!(
        capacity["recommended_gpus"].as_u64(),
        Some((demand * 1.3).ceil() as u64),
        "demand × the default buffer, rounded up"
    );
    assert_eq!(fleet["tco"]["cheaper"], "unknown", "no prices configured");
    assert_eq!(
        fleet["energy"]["night_idle_hosts"],
        serde_json::json!(["sim-node-03"]),
        "the development host, whose jobs pause at night"
    );
    assert!(fleet["energy"]["kwh"].as_f64().expect("kwh") > 0.0);
    let hosts = fleet["node_heatmap"]["hosts"]
        .as_array()
        .expect("node heatmap");
    assert_eq!(hosts.len(), 3);
    // Under 84 hours the host heatmap is drawn hour by hour, from the same hourly rows as
    // the fleet heatmap.
    assert_eq!(fleet["node_heatmap"]["step_seconds"], 3600);
    assert!(
        hosts.iter().all(|h| h["utilization"]
            .as_array()
            .is_some_and(|u| u.len() == 47 && u.iter().all(|v| v.as_f64().is_some()))),
        "{hosts:?}"
    );

    // The fleet review reads the same store: the failing host's GPUs lead, with reasons.
    let review = gpu_sentinel(&["review", "--prometheus", &store.base]);
    assert!(
        review.status.success(),
        "{}",
        String::from_utf8_lossy(&review.stderr)
    );
    let review = String::from_utf8(review.stdout).expect("utf-8");
    assert!(review.contains("— 3 hosts"), "{review}");
    let first = review
        .lines()
        .find(|l| l.trim_start().starts_with("1 "))
        .expect("a ranked row");
    assert!(first.contains("sim-node-01"), "{review}");
    assert!(review.contains("reasons: "), "{review}");
    assert_eq!(
        review.lines().filter(|l| l.contains(" GPU-")).count(),
        24,
        "every GPU of the fleet is ranked"
    );

    let markdown = report("markdown");
    assert!(markdown.status.success());
    let markdown = String::from_utf8(markdown.stdout).expect("utf-8");
    assert!(
        markdown.len() < 3_800,
        "fits a chat message: {}",
        markdown.len()
    );
    assert!(markdown.contains("| research |"), "{markdown}");

    let html = report("html");
    assert!(html.status.success());
    let html = String::from_utf8(html.stdout).expect("utf-8");
    assert!(
        html.contains("<svg") && html.contains("<rect"),
        "heatmap drawn"
    );
    for external in ["src=", "href=", "@import", "url("] {
        assert!(!html.contains(external), "no external asset ({external})");
    }
    if let Some(chromium) = tool("chromium") {
        let page = dir.join("report.html");
        std::fs::write(&page, &html).expect("report file");
        let shot = dir.join("report.png");
        let url = format!("file://{}", page.display());
        let rendered = Command::new(&chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--window-size=1000,1500",
            ])
            .arg(format!("--screenshot={}", shot.display()))
            .arg(&url)
            .output()
            .expect("chromium runs");
        assert!(
            rendered.status.success(),
            "{}",
            String::from_utf8_lossy(&rendered.stderr)
        );
        let png = std::fs::read(&shot).expect("screenshot written");
        assert!(
            png.starts_with(b"\x89PNG") && png.len() > 20_000,
            "a real page was drawn"
        );
        let dom = Command::new(&chromium)
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--dump-dom"])
            .arg(&url)
            .output()
            .expect("chromium runs");
        let dom = String::from_utf8_lossy(&dom.stdout);
        assert!(
            dom.contains("<rect") && dom.contains("sim-node-03"),
            "the browser parsed the heatmaps"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_dcgm_exporter_only_store_gets_the_same_report() {
    let (Some(promtool), Some(prometheus)) = (tool("promtool"), tool("prometheus")) else {
        return;
    };
    let dir = scratch("dcgm");
    let config = dir.join("dcgm.toml");
    std::fs::write(
        &config,
        format!("[export]\ndcgm_compat = true\n{TEAMS}").replace(
            "namespaces = [\"ml-*\"]",
            "namespaces = [\"ml-*\"]\nhosts = [\"sim-node-02\"]",
        ),
    )
    .expect("config");
    let config = config.to_str().expect("utf-8 path");
    let file = dir.join("dcgm.om");
    let out = gpu_sentinel(&[
        "record",
        "--simulate",
        "--config",
        config,
        "--hosts",
        "3",
        "--simulated-duration",
        "2d",
        "--interval",
        "15m",
        "--format",
        "openmetrics",
        "--families",
        "^DCGM_FI_",
        "--out",
        file.to_str().expect("utf-8 path"),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&file).expect("recording");
    assert!(
        !text.contains("\ngpu_"),
        "only dcgm-exporter's families, as at a site without gpu-sentinel"
    );
    let data = dir.join("data");
    Prometheus::backfill(&promtool, &file, &data);
    let store = Prometheus::on_blocks(&prometheus, &data);

    let stamps: Vec<f64> = text
        .lines()
        .filter_map(parse_sample)
        .map(|(_, _, _, at)| at)
        .collect();
    let first = stamps.iter().copied().fold(f64::MAX, f64::min);
    let last = stamps.iter().copied().fold(f64::MIN, f64::max);
    // Half a step before the first sample: the first point is in, whichever way the store
    // treats the range's left edge.
    let out = gpu_sentinel(&[
        "report",
        "--prometheus",
        &store.base,
        "--from",
        &rfc3339(first - 450.0),
        "--to",
        &rfc3339(last),
        "--config",
        config,
        "--step",
        "15m",
        "--format",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("report JSON");
    assert_eq!(doc["source"], "dcgm-exporter");
    let truth = dcgm_ground_truth(&text, 900.0);
    let teams = doc["teams"].as_array().expect("teams");
    assert_eq!(
        teams
            .iter()
            .filter_map(|t| t["team"].as_str())
            .collect::<BTreeSet<_>>(),
        truth.keys().map(String::as_str).collect::<BTreeSet<_>>()
    );
    for team in teams {
        let name = team["team"].as_str().expect("team");
        let (busy, idle) = truth[name];
        let got = |key: &str| team[key].as_f64().expect(key);
        assert!(
            close(got("busy_gpu_hours"), busy),
            "{name}: busy {} vs {busy}",
            got("busy_gpu_hours")
        );
        assert!(
            close(got("idle_gpu_hours"), idle),
            "{name}: idle {} vs {idle}",
            got("idle_gpu_hours")
        );
    }
    assert_eq!(doc["fleet"]["gpus"], 24);
    assert_eq!(
        doc["fleet"]["node_heatmap"]["hosts"]
            .as_array()
            .map(Vec::len),
        Some(3)
    );
    assert_eq!(
        doc["fleet"]["energy"]["night_idle_hosts"],
        serde_json::json!(["sim-node-03"]),
        "the development host is found from dcgm-exporter's series too"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn openmetrics_history_is_simulated_and_written_to_a_file() {
    let dir = scratch("refusals");
    let file = dir.join("h.om");
    let path = file.to_str().expect("utf-8 path");
    for (args, said) in [
        (
            vec!["record", "--format", "openmetrics", "--out", path],
            "give --simulate and --simulated-duration",
        ),
        (
            vec![
                "record",
                "--simulate",
                "--simulated-duration",
                "1h",
                "--format",
                "openmetrics",
                "--out",
                "-",
            ],
            "give --out FILE",
        ),
        (
            vec![
                "record",
                "--simulate",
                "--simulated-duration",
                "1h",
                "--hosts",
                "2",
                "--out",
                path,
            ],
            "--hosts is for --format openmetrics",
        ),
        (
            vec![
                "record",
                "--simulate",
                "--simulated-duration",
                "1h",
                "--format",
                "openmetrics",
                "--families",
                "(",
                "--out",
                path,
            ],
            "--families \"(\" is not a regular expression",
        ),
    ] {
        let out = gpu_sentinel(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(stderr.contains(said), "{args:?}: {stderr}");
        assert!(!file.exists(), "{args:?} left a file");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_wrong_url_an_empty_store_and_refused_credentials_are_named() {
    let dir = scratch("errors");
    let out_file = dir.join("report.json");
    let out_path = out_file.to_str().expect("utf-8 path");

    // Nothing listens there.
    let port = common::free_port();
    let url = format!("http://127.0.0.1:{port}");
    let out = gpu_sentinel(&[
        "report",
        "--prometheus",
        &url,
        "--last",
        "7d",
        "--timeout",
        "2s",
        "--format",
        "json",
        "--out",
        out_path,
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(&url) && stderr.contains("cannot reach"),
        "{stderr}"
    );
    assert!(!out_file.exists(), "no report file after a failure");
    assert!(!dir.join("report.json.partial").exists());

    // A store that refuses the credentials: said so, the token never printed.
    let refusing = HttpServer::answering(|_| Answer::status(401).body("Unauthorized"));
    let out = Command::new(binary())
        .args(["report", "--prometheus", &refusing.url(""), "--last", "7d"])
        .env("GPU_SENTINEL_PROMETHEUS_TOKEN", "sekrit-token-123")
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("401") && stderr.contains("credentials"),
        "{stderr}"
    );
    assert!(!stderr.contains("sekrit-token-123"), "{stderr}");
    let sent = refusing.requests();
    assert_eq!(
        sent.first().and_then(|r| r.header("authorization")),
        Some("Bearer sekrit-token-123"),
        "the token is sent as a bearer token"
    );

    // A store without GPU metrics: the metric and the URL are named.
    let Some(prometheus) = tool("prometheus") else {
        return;
    };
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).expect("empty data dir");
    let store = Prometheus::on_blocks(&prometheus, &empty);
    let out = gpu_sentinel(&["report", "--prometheus", &store.base, "--last", "7d"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("gpu_utilization_ratio") && stderr.contains(&store.base),
        "{stderr}"
    );
    let out = gpu_sentinel(&["review", "--prometheus", &store.base]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("gpu_info") && stderr.contains(&store.base),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The store's index lists the families (the label-values API answers per block, so a
/// name can be listed for a period that holds none of its samples), but every query comes
/// back empty: the report names the metric without samples and the URL, as for an empty
/// store, and leaves no file.
#[test]
fn a_family_listed_without_samples_in_the_period_is_named() {
    let store = HttpServer::answering(|request| match request.path() {
        "/api/v1/label/__name__/values" => Answer::json(
            200,
            r#"{"status":"success","data":["gpu_owner_seconds_total","gpu_utilization_ratio"]}"#,
        ),
        "/api/v1/query_range" => Answer::json(
            200,
            r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#,
        ),
        // The index lists no series of the families (the census the queries are planned by).
        "/api/v1/series" => Answer::json(200, r#"{"status":"success","data":[]}"#),
        _ => Answer::json(
            200,
            r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#,
        ),
    });
    let dir = scratch("listed");
    let out_file = dir.join("report.json");
    let out = gpu_sentinel(&[
        "report",
        "--prometheus",
        &store.url(""),
        "--last",
        "7d",
        "--format",
        "json",
        "--out",
        out_file.to_str().expect("utf-8 path"),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("no samples of gpu_utilization_ratio") && stderr.contains(&store.url("")),
        "{stderr}"
    );
    assert!(!out_file.exists(), "no report file after a failure");
    let requests = store.requests();
    let asked = requests
        .iter()
        .find(|r| r.path() == "/api/v1/label/__name__/values")
        .expect("the dialect is told from the label-values API");
    assert_eq!(asked.method, "GET");
    let matcher = asked
        .query("match[]")
        .or_else(|| asked.query("match%5B%5D"))
        .unwrap_or_default();
    assert!(
        matcher.contains("gpu_utilization_ratio"),
        "{}",
        asked.target
    );
    assert!(
        asked.query("start").is_some() && asked.query("end").is_some(),
        "asked for the period only: {}",
        asked.target
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `report --send`: each team with a receiver gets its report through the notifiers and
/// the outbox; a receiver that is down keeps the report in the outbox, and the next run
/// delivers it.
#[test]
fn send_delivers_each_teams_report_durably() {
    let (Some(promtool), Some(prometheus)) = (tool("promtool"), tool("prometheus")) else {
        return;
    };
    let dir = scratch("send");
    let (file, _) = record_history(&dir);
    let data = dir.join("data");
    Prometheus::backfill(&promtool, &file, &data);
    let store = Prometheus::on_blocks(&prometheus, &data);

    // Down until `up` is set; what it accepted once up is kept in `accepted`.
    let up = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let accepted = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (answer_up, keep) = (std::sync::Arc::clone(&up), std::sync::Arc::clone(&accepted));
    let hook = HttpServer::answering(move |request| {
        if answer_up.load(std::sync::atomic::Ordering::SeqCst) {
            keep.lock().expect("lock").push(request.json());
            Answer::ok()
        } else {
            Answer::status(503)
        }
    });
    let state = dir.join("state");
    let config = dir.join("send.toml");
    std::fs::write(
        &config,
        format!(
            "[state]\ndir = {state:?}\n\n[[alerting.receivers]]\nname = \"research-hook\"\nkind = \"webhook\"\nurl = \"{}\"\n[alerting.route]\nreceiver = \"research-hook\"\n{}",
            hook.url("/hook"),
            TEAMS.replace(
                "namespaces = [\"ml-*\"]",
                "namespaces = [\"ml-*\"]\nreceiver = \"research-hook\""
            )
        ),
    )
    .expect("config");
    // One period for both runs (`--last` moves with the clock).
    let now = chrono::Utc::now();
    let (from, to) = (
        (now - chrono::TimeDelta::days(2)).to_rfc3339(),
        now.to_rfc3339(),
    );
    let send = |timeout: &str| {
        gpu_sentinel(&[
            "report",
            "--prometheus",
            &store.base,
            "--from",
            &from,
            "--to",
            &to,
            "--config",
            config.to_str().expect("utf-8 path"),
            "--send",
            "--send-timeout",
            timeout,
        ])
    };

    // The receiver is down: the report stays in the outbox and the run says so.
    let out = send("3s");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("report-outbox.redb") && stderr.contains("next `report --send`"),
        "{stderr}"
    );
    assert!(
        stderr.contains("team serving: no [[teams]] receiver"),
        "{stderr}"
    );
    assert!(state.join("report-outbox.redb").is_file());
    assert!(!hook.requests().is_empty(), "delivery was tried");

    // Up again: the next run delivers (the newer report of the same period replaces the
    // stored one, so the team gets one message).
    up.store(true, std::sync::atomic::Ordering::SeqCst);
    let out = send("30s");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let delivered = accepted.lock().expect("lock").clone();
    assert_eq!(
        delivered.len(),
        1,
        "one report for the one routed team: {:?}",
        delivered
            .iter()
            .map(|d| (
                d["groupKey"].clone(),
                d["alerts"][0]["startsAt"].clone(),
                d["alerts"][0]["annotations"]["summary"].clone()
            ))
            .collect::<Vec<_>>()
    );
    let body = &delivered[0];
    let alert = &body["alerts"][0];
    assert_eq!(alert["labels"]["alertname"], "GpuTeamReport");
    assert_eq!(alert["labels"]["team"], "research");
    let description = alert["annotations"]["description"]
        .as_str()
        .expect("description");
    assert!(description.contains("| research |"), "{description}");
    assert!(
        !description.contains("| serving |"),
        "only the team's own row"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
