//! The HTTP surface of `gpu-sentinel run --simulate`, through the real binary.

mod common;

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
