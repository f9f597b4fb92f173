//! The HTTP surface of `gpu-sentinel run --simulate`, through the real binary.

use crate::common;

use std::io::Read;

use common::Agent;

#[test]
fn serves_metrics_plain_and_gzip() {
    let agent = Agent::start(&["--simulate"], &[]);
    let text = agent.metrics();
    let plain = agent.get("/metrics");
    assert_eq!(plain.status, 200);
    assert_eq!(
        plain.content_type.as_deref(),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    assert!(text.contains("gpu_up"), "{text}");

    let zipped = agent
        .request("/metrics", &[("Accept-Encoding", "gzip, deflate")])
        .unwrap();
    assert_eq!(zipped.content_encoding.as_deref(), Some("gzip"));
    let mut unzipped = String::new();
    flate2::read::GzDecoder::new(&zipped.body[..])
        .read_to_string(&mut unzipped)
        .expect("valid gzip");
    assert!(unzipped.contains("gpu_up"));

    let refused = agent
        .request("/metrics", &[("Accept-Encoding", "gzip;q=0")])
        .unwrap();
    assert_eq!(refused.content_encoding, None);
}

#[test]
fn api_gpus_lists_every_gpu_with_its_processes() {
    let agent = Agent::start(&["--simulate", "--sim-gpus", "4"], &[]);
    agent.metrics();
    let reply = agent.get("/api/v1/gpus");
    assert_eq!(reply.status, 200);
    assert_eq!(reply.content_type.as_deref(), Some("application/json"));
    let doc: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
    let gpus = doc["gpus"].as_array().expect("gpus array");
    assert_eq!(gpus.len(), 4);
    assert!(gpus[0]["uuid"].as_str().unwrap().starts_with("GPU-"));
    assert!(gpus[0]["processes"].is_array());
}

#[test]
fn health_landing_and_errors() {
    let agent = Agent::start(&["--simulate", "--sim-gpus", "1"], &[]);
    agent.metrics();
    assert_eq!(agent.get("/healthz").status, 200);
    assert_eq!(agent.get("/readyz").status, 200);
    let landing = agent.get("/");
    assert_eq!(landing.status, 200);
    assert!(landing.text().contains("href=\"/metrics\""));
    assert_eq!(agent.get("/nope").status, 404);
}

/// The paths README.md's "What each endpoint reveals" lists, in order, one entry per path
/// named at the head of a list item (`- `/healthz`, `/readyz`: …`).
fn readme_endpoints() -> Vec<String> {
    let readme = std::fs::read_to_string(common::repo().join("README.md")).expect("README.md");
    let section = readme
        .split("\n## What each endpoint reveals\n")
        .nth(1)
        .expect("README.md has a section \"What each endpoint reveals\"");
    let section = section.split("\n#").next().unwrap_or(section);
    let mut listed = Vec::new();
    for item in section.lines().filter_map(|l| l.strip_prefix("- `")) {
        let head = item.split("`:").next().unwrap_or(item);
        listed.extend(
            head.split('`')
                .filter(|p| p.starts_with('/'))
                .map(str::to_string),
        );
    }
    listed
}

/// The paths the agent's router serves: the arms of `route` in the server's source.
fn routed_paths() -> Vec<String> {
    let source = std::fs::read_to_string(common::repo().join("crates/agent/src/server.rs"))
        .expect("crates/agent/src/server.rs");
    let body = source
        .split("\nfn route(")
        .nth(1)
        .expect("server.rs has fn route");
    let body = body.split("\n}\n").next().unwrap_or(body);
    body.lines()
        .filter_map(|l| l.trim().strip_prefix('"'))
        .filter_map(|l| l.split_once("\" =>").map(|(path, _)| path.to_string()))
        .filter(|p| p.starts_with('/'))
        .collect()
}

#[test]
fn the_readme_lists_each_served_endpoint_once() {
    let listed = readme_endpoints();
    let mut once = listed.clone();
    once.sort();
    once.dedup();
    assert_eq!(once.len(), listed.len(), "a path listed twice: {listed:?}");
    let mut routed = routed_paths();
    routed.sort();
    assert!(
        routed.len() >= 8,
        "the router's table was not read: {routed:?}"
    );
    assert_eq!(once, routed, "README.md's endpoints against the router's");
    // And the running agent serves each of them, and nothing beside them.
    let agent = Agent::start(&["--simulate", "--sim-gpus", "1"], &[]);
    agent.metrics();
    for path in &listed {
        assert_eq!(agent.get(path).status, 200, "{path}");
    }
    for unlisted in ["/api/v1", "/api/v1/gpu", "/index.html", "/metrics/"] {
        assert_eq!(agent.get(unlisted).status, 404, "{unlisted}");
    }
}

#[test]
fn stops_cleanly_on_sigterm() {
    let agent = Agent::start(&["--simulate", "--sim-gpus", "2"], &[]);
    agent.metrics();
    let (status, stderr) = agent.stop();
    assert!(status.success(), "exit {status:?}: {stderr}");
}

#[test]
fn live_exposition_passes_promtool_and_has_every_simulated_family() {
    let agent = Agent::start(&["--simulate"], &[]);
    let text = agent.metrics();
    if let Some(promtool) = common::tool("promtool") {
        let (ok, printed) = common::promtool_check(&promtool, &[], &text);
        assert!(ok && printed.trim().is_empty(), "promtool:\n{printed}");
    }
    for family in [
        "gpu_info",
        "gpu_up",
        "gpu_utilization_ratio",
        "gpu_memory_used_bytes",
        "gpu_temperature_celsius",
        "gpu_memory_temperature_celsius",
        "gpu_power_watts",
        "gpu_energy_joules_total",
        "gpu_clock_hertz",
        "gpu_clock_event_active",
        "gpu_ecc_errors_total",
        "gpu_remapped_rows_total",
        "gpu_pcie_replays_total",
        "gpu_nvlink_errors_total",
        "gpu_sm_active_ratio",
        "gpu_process_memory_bytes",
        "gpu_sentinel_build_info",
        "gpu_sentinel_collect_duration_seconds",
    ] {
        assert!(
            !common::samples(&text, family).is_empty(),
            "{family} missing from /metrics"
        );
    }
    assert_eq!(common::samples(&text, "gpu_up").len(), 8);
}

#[test]
fn analysis_shows_risk_reasons_idle_and_ghosts_on_the_accelerated_simulator() {
    // At 600x with faults due after two simulated hours, every default family shows
    // within seconds.
    let config = common::temp_file("fast-faults.toml", "[simulation]\nfault_hours = 2.0\n");
    let agent = Agent::start(
        &[
            "--simulate",
            "--sim-speed",
            "600",
            "--config",
            config.to_str().unwrap(),
        ],
        &[],
    );
    agent.metrics();
    agent.wait_until(std::time::Duration::from_secs(90), |a| {
        let doc: serde_json::Value =
            serde_json::from_slice(&a.get("/api/v1/gpus").body).unwrap_or_default();
        let gpu = |i: usize| &doc["gpus"][i];
        let findings = |i: usize| gpu(i)["findings"].to_string();
        findings(1).contains("failure_risk")
            && findings(4).contains("lost")
            && findings(5).contains("allocated_idle")
            && findings(6).contains("ghost_process")
    });
    let doc: serde_json::Value = serde_json::from_slice(&agent.get("/api/v1/gpus").body).unwrap();
    let worn = &doc["gpus"][1];
    assert!(worn["risk"]["score"].as_f64().unwrap() >= 0.7);
    assert!(
        worn["risk"]["contributions"][0]["feature"]
            .as_str()
            .is_some_and(|f| f.starts_with("ecc_") || f.starts_with("remap")),
        "{}",
        worn["risk"]
    );
    let ghost = &doc["gpus"][6]["idle"]["ghosts"][0];
    assert!(
        ghost["user"].is_string() && ghost["pid"].is_u64(),
        "{ghost}"
    );
    assert_eq!(doc["risk_threshold"], 0.7);

    let text = agent.get("/metrics").text();
    for family in [
        "gpu_failure_risk_score",
        "gpu_failure_risk_contribution",
        "gpu_idle_seconds",
        "gpu_allocated_idle",
        "gpu_ghost_processes",
        "gpu_cost_total",
        "gpu_owner_seconds_total",
        "gpu_scale_recommendation",
        "gpu_node_free_gpus",
        "gpu_node_fragmentation_ratio",
    ] {
        assert!(
            !common::samples(&text, family).is_empty(),
            "{family} missing"
        );
    }
    if let Some(promtool) = common::tool("promtool") {
        let (ok, printed) = common::promtool_check(&promtool, &[], &text);
        assert!(ok && printed.trim().is_empty(), "promtool:\n{printed}");
    }

    // The same faults as alerts, with the labels the README promises (alertname, severity, hostname, gpu, uuid).
    let alerts: serde_json::Value =
        serde_json::from_slice(&agent.get("/api/v1/alerts").body).unwrap();
    let lost = alerts["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["labels"]["alertname"] == "GpuLost")
        .expect("GpuLost");
    assert_eq!(lost["state"], "firing");
    for label in ["severity", "hostname", "gpu", "uuid"] {
        assert!(lost["labels"][label].is_string(), "{label}: {lost}");
    }
    assert!(
        common::samples(&text, "gpu_sentinel_alerts")
            .iter()
            .any(|(l, v)| l.contains("alertname=\"GpuLost\",state=\"firing\"") && *v == 1.0)
            || common::samples(&agent.get("/metrics").text(), "gpu_sentinel_alerts")
                .iter()
                .any(|(l, v)| l.contains("alertname=\"GpuLost\",state=\"firing\"") && *v == 1.0)
    );
}

#[test]
fn recommendations_advise_and_fit_jobs() {
    let agent = Agent::start(&["--simulate"], &[]);
    agent.metrics();
    let doc: serde_json::Value =
        serde_json::from_slice(&agent.get("/api/v1/recommendations").body).unwrap();
    assert!(doc["scaling"]["direction"].is_string(), "{doc}");
    assert!(doc["placement"]["free_gpus"].is_u64(), "{doc}");
    assert!(doc.get("job").is_none());

    // Every GPU of the default fleet holds a job, but several have a GiB to spare; no
    // node has nine GPUs.
    let fit: serde_json::Value = serde_json::from_slice(
        &agent
            .get("/api/v1/recommendations?gpus=1&memory_gib=1")
            .body,
    )
    .unwrap();
    assert_eq!(fit["job"]["fits"], true, "{fit}");
    let too_big: serde_json::Value = serde_json::from_slice(
        &agent
            .get("/api/v1/recommendations?gpus=9&memory_gib=1")
            .body,
    )
    .unwrap();
    assert_eq!(too_big["job"]["fits"], false);
    assert_eq!(agent.get("/api/v1/recommendations?gpus=two").status, 400);
    assert_eq!(agent.get("/api/v1/recommendations?color=red").status, 400);
}

/// GET `path` on a fresh connection: the status, 0 when no answer came within `limit`.
fn get_within(port: u16, path: &str, limit: std::time::Duration) -> u16 {
    use std::io::Write as _;
    let Ok(mut tcp) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return 0;
    };
    tcp.set_read_timeout(Some(limit)).ok();
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    if tcp.write_all(request.as_bytes()).is_err() {
        return 0;
    }
    let mut answer = Vec::new();
    let _ = tcp.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer)
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// `count` connections that send nothing.
fn idle_sockets(port: u16, count: usize) -> Vec<std::net::TcpStream> {
    (0..count)
        .filter_map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).ok())
        .collect()
}

#[test]
fn past_max_connections_the_oldest_idle_ones_go_and_a_scrape_is_answered() {
    use std::time::{Duration, Instant};
    let config = common::temp_file("max-connections.toml", "[server]\nmax_connections = 8\n");
    let agent = Agent::start(&["--simulate", "--config", config.to_str().unwrap()], &[]);
    agent.metrics();
    let port = agent.port();
    let idle = idle_sockets(port, 60);
    assert_eq!(idle.len(), 60);
    for _ in 0..5 {
        let began = Instant::now();
        assert_eq!(get_within(port, "/metrics", Duration::from_secs(5)), 200);
        assert!(
            began.elapsed() < Duration::from_secs(1),
            "{:?}",
            began.elapsed()
        );
    }
    // The oldest idle sockets were closed by the server: reading them ends at once.
    let mut first = idle.into_iter().next().expect("a socket");
    first.set_read_timeout(Some(Duration::from_secs(5))).ok();
    let mut buf = [0u8; 16];
    assert!(
        matches!(first.read(&mut buf), Ok(0)),
        "the oldest is closed"
    );
}

#[test]
fn max_connections_of_zero_is_refused_by_run() {
    let config = common::temp_file("no-connections.toml", "[server]\nmax_connections = 0\n");
    let out = common::run(&[
        "run",
        "--simulate",
        "--listen",
        "127.0.0.1:0",
        "--config",
        config.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(":2: server.max_connections: must be at least 1"),
        "{stderr}"
    );
}

#[test]
fn out_of_file_descriptors_a_scrape_is_still_answered_and_the_log_stays_quiet() {
    use std::time::{Duration, Instant};
    let port = common::free_port();
    // `ulimit -n` in sh sets the hard limit too: the agent cannot raise it.
    let mut child = simulated_agent_under(port, "ulimit -n 64");
    let idle = idle_sockets(port, 200);
    std::thread::sleep(Duration::from_millis(500));
    let mut slow = Vec::new();
    for _ in 0..5 {
        let began = Instant::now();
        let status = get_within(port, "/metrics", Duration::from_secs(10));
        slow.push((status, began.elapsed()));
    }
    // Probes too: a kubelet must not restart an agent that is only busy.
    let began = Instant::now();
    let health = get_within(port, "/healthz", Duration::from_secs(10));
    let health_took = began.elapsed();
    std::thread::sleep(Duration::from_secs(1));
    drop(idle);
    let _ = child.kill();
    let _ = child.wait();
    let mut stderr = String::new();
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut stderr);
    }
    assert!(
        slow.iter()
            .all(|(s, t)| *s == 200 && *t < Duration::from_secs(2)),
        "{slow:?}\n{stderr}"
    );
    assert_eq!(health, 200, "{stderr}");
    assert!(health_took < Duration::from_secs(1), "{health_took:?}");
    let accept_lines = stderr
        .lines()
        .filter(|l| l.contains("accept failed"))
        .count();
    assert!(accept_lines <= 1, "{accept_lines} lines:\n{stderr}");
    assert!(
        stderr.contains("max_connections = 512 lowered to 48"),
        "{stderr}"
    );
}

/// The open-file limits of process `pid`, from /proc: (soft, hard).
fn open_file_limits(pid: &str) -> (u64, u64) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/limits: {e}"));
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap_or_else(|| panic!("no open-file limit in /proc/{pid}/limits:\n{limits}"));
    let numbers: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    match numbers[..] {
        [soft, hard] => (soft, hard),
        _ => panic!("/proc/{pid}/limits: {line}"),
    }
}

#[test]
fn the_soft_open_file_limit_is_raised_to_the_hard_one_at_start() {
    let (_, ours) = open_file_limits("self");
    let hard = ours.min(4096);
    assert!(
        hard > 128,
        "the test needs a hard open-file limit above 128, has {ours}"
    );
    let port = common::free_port();
    let mut child = simulated_agent_under(port, &format!("ulimit -Sn 64 && ulimit -Hn {hard}"));
    // sh exec'd the agent: the child's PID is the agent's.
    let limits = open_file_limits(&child.id().to_string());
    let _ = child.kill();
    let _ = child.wait();
    let mut stderr = String::new();
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut stderr);
    }
    assert_eq!(
        limits,
        (hard, hard),
        "(soft, hard) while serving:\n{stderr}"
    );
    assert!(
        !stderr.contains("max_connections = 512 lowered"),
        "the cap was lowered to the soft limit:\n{stderr}"
    );
}

/// `run --simulate` on `port`, started by `sh` after `limits` (ulimit commands), once it is
/// ready; sh execs the agent, so the child's PID is the agent's.
fn simulated_agent_under(port: u16, limits: &str) -> std::process::Child {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let child = Command::new("sh")
        .args(["-c", &format!("{limits} && exec \"$0\" \"$@\"")])
        .arg(common::binary())
        .args([
            "run",
            "--simulate",
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sh starts the agent");
    let began = Instant::now();
    while get_within(port, "/readyz", Duration::from_secs(2)) != 200 {
        assert!(began.elapsed() < Duration::from_secs(30), "not ready");
        std::thread::sleep(Duration::from_millis(100));
    }
    child
}
