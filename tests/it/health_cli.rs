//! `gpu-sentinel health` through the real binary against a real agent: exit 0 while the
//! simulated node is healthy, 1 with a line naming the GPU and the action once a GPU falls
//! off the bus (`run --simulate --sim-speed 600`), 2 when the agent is gone, not ready,
//! silent, or wants credentials it was not given; `/api/v1/health` and `gpu_health_state`
//! saying the same.

use crate::common;

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::http_server::{Answer, HttpServer};
use common::{Agent, binary, tool, value};

/// Runs `gpu-sentinel health ARGS` with extra environment.
fn health(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(binary());
    cmd.arg("health")
        .args(args)
        .env("RUST_LOG", "warn")
        .env_remove("GPU_SENTINEL_AGENT_USER")
        .env_remove("GPU_SENTINEL_AGENT_PASSWORD");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("gpu-sentinel health runs")
}

/// The exit status and the one line printed, checked to be one line of at most 80
/// characters.
fn verdict(out: &Output) -> (i32, String) {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let code = out.status.code().expect("an exit status, not a signal");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "one line, got {stdout:?} (stderr {:?})",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        lines[0].chars().count() <= 80,
        "{} characters: {:?}",
        lines[0].chars().count(),
        lines[0]
    );
    (code, lines[0].to_string())
}

#[test]
fn exit_0_at_start_1_once_a_gpu_falls_off_the_bus_and_2_when_the_agent_is_gone() {
    let mut agent = Agent::start(&["--simulate", "--sim-speed", "600"], &[]);
    agent.wait_until(Duration::from_secs(20), |a| a.get("/readyz").status == 200);
    let url = agent.base.clone();
    let (code, line) = verdict(&health(&["--url", &url], &[]));
    assert_eq!(code, 0, "{line}");
    assert!(
        line.starts_with("healthy") || line.starts_with("degraded"),
        "{line}"
    );

    // GPU 4 of the default fleet falls off the bus 8 simulated hours in: 48 s of wall time.
    let began = Instant::now();
    let line = loop {
        let (code, line) = verdict(&health(&["--url", &url], &[]));
        if code == 1 && line.contains("GPU 4") {
            break line;
        }
        assert!(
            began.elapsed() < Duration::from_secs(150),
            "GPU 4 never became the unhealthy one; last: {code} {line}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(line.starts_with("unhealthy: GPU 4 "), "{line}");
    assert!(line.contains("drain_and_reboot"), "{line}");

    // The API lists the GPU's unhealthy component with its reason and action.
    let doc: serde_json::Value =
        serde_json::from_slice(&agent.get("/api/v1/health").body).expect("/api/v1/health is JSON");
    assert_eq!(doc["state"], "unhealthy");
    assert_eq!(doc["action"], "drain_and_reboot");
    let gpu = (doc["gpus"].as_array().expect("gpus").iter())
        .find(|g| g["index"] == 4)
        .expect("GPU 4 listed");
    assert_eq!(gpu["state"], "unhealthy");
    let driver = (gpu["components"].as_array().expect("components").iter())
        .find(|c| c["component"] == "driver")
        .expect("its driver component");
    assert_eq!(driver["state"], "unhealthy");
    assert_eq!(driver["action"], "drain_and_reboot");
    assert!(
        driver["reason"]
            .as_str()
            .unwrap()
            .contains("does not answer NVML"),
        "{driver}"
    );
    assert!(driver["since"].as_str().is_some(), "{driver}");

    // The exposition says the same.
    let metrics = agent.metrics();
    let driver_state = common::samples(&metrics, "gpu_health_state")
        .into_iter()
        .find(|(labels, _)| {
            labels.starts_with("gpu=\"4\"") && labels.contains("component=\"driver\"")
        })
        .map(|(_, v)| v);
    assert_eq!(driver_state, Some(2.0));
    assert_eq!(value(&metrics, "gpu_node_health_state", ""), Some(2.0));

    // Asked about one healthy GPU only, the node's trouble is not its.
    let (code, line) = verdict(&health(&["--url", &url, "--gpu", "0"], &[]));
    assert_eq!(code, 0, "{line}");
    assert!(line.starts_with("healthy: GPU 0"), "{line}");
    let uuid = gpu["uuid"].as_str().expect("a UUID").to_string();
    let (code, line) = verdict(&health(&["--url", &url, "--gpu", &uuid], &[]));
    assert_eq!(code, 1, "{line}");
    let (code, line) = verdict(&health(&["--url", &url, "--gpu", "99"], &[]));
    assert_eq!(code, 2, "{line}");
    assert!(line.starts_with("unknown: GPU 99"), "{line}");

    // --format json: the document, with the same exit status.
    let out = health(&["--url", &url, "--format", "json"], &[]);
    assert_eq!(out.status.code(), Some(1));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(json["state"], "unhealthy");

    agent.kill9();
    let (code, line) = verdict(&health(&["--url", &url], &[]));
    assert_eq!(code, 2, "{line}");
    assert!(line.starts_with("unknown: cannot reach"), "{line}");
}

#[test]
fn not_ready_refused_silent_and_nonsense_are_unknown() {
    let server = HttpServer::answering(|request| match request.path() {
        "/ready/api/v1/health" => Answer::status(503).body("not ready\n"),
        "/slow/api/v1/health" => Answer::json(200, "{}").delay(Duration::from_secs(4)),
        "/nonsense/api/v1/health" => Answer::json(200, "{\"gpus\": 7}"),
        _ => Answer::status(500),
    });
    for (path, expected) in [
        (
            "/ready",
            "unknown: the agent has not finished its first collection",
        ),
        ("/nonsense", "unknown: not a health document"),
        ("/other", "unknown: HTTP 500 from"),
    ] {
        let (code, line) = verdict(&health(&["--url", &server.url(path)], &[]));
        assert_eq!(code, 2, "{path}: {line}");
        assert!(line.contains(expected), "{path}: {line}");
    }
    let began = Instant::now();
    let (code, line) = verdict(&health(
        &["--url", &server.url("/slow"), "--timeout", "1s"],
        &[],
    ));
    assert_eq!(code, 2, "{line}");
    assert!(line.starts_with("unknown: no answer within 1s"), "{line}");
    assert!(
        began.elapsed() < Duration::from_secs(4),
        "gave up after {:?}",
        began.elapsed()
    );
}

/// A CA and a server certificate for 127.0.0.1 signed by it, made with openssl.
fn certificates(dir: &std::path::Path) -> Option<()> {
    let openssl = tool("openssl")?;
    let run = |args: &[&str]| {
        let out = Command::new(&openssl)
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl runs");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=health test CA",
    ]);
    run(&ca);
    let mut csr = vec!["req"];
    csr.extend(ec);
    csr.extend([
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ]);
    run(&csr);
    std::fs::write(dir.join("server.ext"), "subjectAltName=IP:127.0.0.1\n").expect("ext file");
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    ]);
    Some(())
}

#[test]
fn an_agent_behind_tls_and_basic_auth_is_asked_with_its_ca_and_credentials() {
    let dir = std::env::temp_dir().join(format!("gpu-sentinel-health-tls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    if certificates(&dir).is_none() {
        return;
    }
    let hash = bcrypt::hash("health-pass", 5).expect("bcrypt hashes");
    let web = dir.join("web.yml");
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n\
             basic_auth_users:\n  npd: {hash}\n"
        ),
    )
    .expect("web config");
    let agent = Agent::spawn(
        &[
            "--simulate",
            "--web.config.file",
            web.to_str().expect("UTF-8 path"),
        ],
        &[],
    );
    let url = format!("https://127.0.0.1:{}", agent.port());
    let ca = dir.join("ca.crt");
    let ca = ca.to_str().expect("UTF-8 path");
    let creds = [
        ("GPU_SENTINEL_AGENT_USER", "npd"),
        ("GPU_SENTINEL_AGENT_PASSWORD", "health-pass"),
    ];
    // Wait for the first collection, asking as the plugin would.
    let began = Instant::now();
    let (code, line) = loop {
        let (code, line) = verdict(&health(&["--url", &url, "--ca-file", ca], &creds));
        if code != 2 || began.elapsed() > Duration::from_secs(30) {
            break (code, line);
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    assert_eq!(code, 0, "{line}");
    // Without the credentials: unknown, never a verdict; the password is never printed.
    let out = health(&["--url", &url, "--ca-file", ca], &[]);
    let (code, line) = verdict(&out);
    assert_eq!(code, 2, "{line}");
    assert!(line.contains("wants credentials"), "{line}");
    let out = health(
        &["--url", &url, "--ca-file", ca],
        &[
            ("GPU_SENTINEL_AGENT_USER", "npd"),
            ("GPU_SENTINEL_AGENT_PASSWORD", "wrong-pass"),
        ],
    );
    let (code, _) = verdict(&out);
    assert_eq!(code, 2);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("wrong-pass"));
    // Without the CA the certificate is not trusted: unknown.
    let (code, line) = verdict(&health(&["--url", &url], &creds));
    assert_eq!(code, 2, "{line}");
    let _ = std::fs::remove_dir_all(&dir);
}
