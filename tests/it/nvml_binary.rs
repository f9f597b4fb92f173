//! The real binary on the real NVML code path, through the fake NVML library: what an
//! operator sees on `/metrics` when NVML is missing, slow, failing, or loses a GPU.

use crate::common;

use std::time::{Duration, Instant};

use common::{Agent, fake_nvml_lib, run, samples, temp_file, value};

/// Starts `run --nvml-lib <fake>` with a scenario and the kernel log off (the host's
/// /dev/kmsg has nothing to do with the simulated GPUs).
fn start(name: &str, scenario: &str) -> Agent {
    Agent::on_fake_nvml(
        name,
        scenario,
        "[collect]\ninterval = \"500ms\"\nkmsg = \"off\"\n",
        &[],
    )
}

#[test]
fn without_nvml_run_exits_quickly_and_says_how_to_proceed() {
    let began = Instant::now();
    let out = run(&["run", "--nvml-lib", "/nonexistent/libnvidia-ml.so.1"]);
    assert!(!out.status.success());
    assert!(began.elapsed() < Duration::from_secs(10));
    let err = String::from_utf8_lossy(&out.stderr);
    for needle in [
        "NVML",
        "/nonexistent/libnvidia-ml.so.1",
        "--nvml-lib",
        "--simulate",
    ] {
        assert!(err.contains(needle), "{needle:?} missing from:\n{err}");
    }
}

#[test]
fn serves_every_gpu_through_the_nvml_path() {
    let agent = start("plain", "[simulation]\ngpus = 4\n");
    let text = agent.metrics();
    assert_eq!(samples(&text, "gpu_up").len(), 4);
    assert!(samples(&text, "gpu_up").iter().all(|(_, v)| *v == 1.0));
    assert_eq!(value(&text, "gpu_sentinel_source_up", ""), Some(1.0));
    assert!(!samples(&text, "gpu_memory_temperature_celsius").is_empty());
    assert!(!samples(&text, "gpu_remapped_rows_total").is_empty());
    // The simulated H100 has no fan: asked once, then left out, without failing anything.
    assert!(samples(&text, "gpu_fan_speed_ratio").is_empty());
    assert!(
        samples(&text, "gpu_sentinel_collector_success")
            .iter()
            .all(|(_, v)| *v == 1.0)
    );
}

#[test]
fn metrics_answer_503_until_the_first_collection_completes() {
    let agent = start(
        "slow",
        "[simulation]\ngpus = 2\n[[fault]]\nfunction = \"nvmlDeviceGetPowerUsage\"\ndelay_ms = 3000\nuntil_seconds = 3.0\n",
    );
    let early = agent.get("/metrics");
    assert_eq!(early.status, 503, "{}", early.text());
    assert_eq!(agent.get("/readyz").status, 503);
    assert_eq!(agent.get("/healthz").status, 200);
    let text = agent.metrics();
    assert_eq!(samples(&text, "gpu_up").len(), 2);
}

#[test]
fn a_failing_call_degrades_one_family_and_is_counted() {
    let agent = start(
        "failing",
        "[simulation]\ngpus = 2\n[[fault]]\ngpu = 1\nfunction = \"nvmlDeviceGetTotalEccErrors\"\nerror = \"UNKNOWN\"\n",
    );
    let text = agent.metrics();
    assert_eq!(
        value(&text, "gpu_sentinel_collector_success", "collector=\"ecc\""),
        Some(0.0)
    );
    assert_eq!(
        value(
            &text,
            "gpu_sentinel_collector_success",
            "collector=\"memory\""
        ),
        Some(1.0)
    );
    assert!(
        value(
            &text,
            "gpu_sentinel_collect_errors_total",
            "nvmlDeviceGetTotalEccErrors"
        )
        .is_some_and(|n| n >= 1.0),
        "{text}"
    );
    // GPU 0 still has its ECC counters; GPU 1 has none; both are up.
    assert!(value(&text, "gpu_ecc_errors_total", "gpu=\"0\"").is_some());
    assert!(value(&text, "gpu_ecc_errors_total", "gpu=\"1\"").is_none());
    assert!(samples(&text, "gpu_up").iter().all(|(_, v)| *v == 1.0));
}

#[test]
fn a_gpu_lost_mid_run_is_down_and_the_others_keep_reporting() {
    let agent = start(
        "lost",
        "[simulation]\ngpus = 3\n[[fault]]\ngpu = 2\nfunction = \"*\"\nerror = \"GPU_IS_LOST\"\nafter_seconds = 2.0\n",
    );
    let before = agent.metrics();
    assert_eq!(value(&before, "gpu_up", "gpu=\"2\""), Some(1.0));
    agent.wait_until(Duration::from_secs(20), |a| {
        value(&a.get("/metrics").text(), "gpu_up", "gpu=\"2\"") == Some(0.0)
    });
    let after = agent.get("/metrics").text();
    assert_eq!(value(&after, "gpu_up", "gpu=\"0\""), Some(1.0));
    assert_eq!(value(&after, "gpu_up", "gpu=\"1\""), Some(1.0));
    // The lost GPU keeps its identity on gpu_info, and loses its readings.
    assert!(value(&after, "gpu_info", "gpu=\"2\"").is_some());
    assert!(value(&after, "gpu_temperature_celsius", "gpu=\"2\"").is_none());
    assert!(value(&after, "gpu_temperature_celsius", "gpu=\"1\"").is_some());
}

#[test]
fn nvml_vanishing_marks_the_source_down_and_serving_goes_on() {
    let agent = start(
        "vanish",
        "[simulation]\ngpus = 2\n[[fault]]\nfunction = \"*\"\nerror = \"UNINITIALIZED\"\nafter_seconds = 2.0\nuntil_seconds = 6.0\n",
    );
    agent.metrics();
    agent.wait_until(Duration::from_secs(20), |a| {
        value(&a.get("/metrics").text(), "gpu_sentinel_source_up", "") == Some(0.0)
    });
    assert_eq!(agent.get("/healthz").status, 200);
    agent.wait_until(Duration::from_secs(30), |a| {
        let text = a.get("/metrics").text();
        value(&text, "gpu_sentinel_source_up", "") == Some(1.0)
            && value(&text, "gpu_up", "gpu=\"1\"") == Some(1.0)
    });
}

#[test]
fn analysis_state_survives_a_restart() {
    let lib = fake_nvml_lib();
    let state_dir = std::env::temp_dir().join(format!("gs-state-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state_dir);
    let scenario = temp_file("restart.toml", "[simulation]\ngpus = 2\n");
    let config = temp_file(
        "restart-config.toml",
        &format!(
            "[collect]\ninterval = \"200ms\"\nkmsg = \"off\"\n[state]\ndir = \"{}\"\n\
             [cost]\nhourly_price = 3600.0\n",
            state_dir.display()
        ),
    );
    let args = [
        "--nvml-lib",
        lib.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
    ];
    let env = [("FAKE_NVML_SCENARIO", scenario.to_str().unwrap())];
    let cost = |text: &str| -> f64 {
        samples(text, "gpu_cost_total")
            .iter()
            .filter(|(labels, _)| labels.contains("gpu=\"0\""))
            .map(|(_, v)| v)
            .sum()
    };

    let first = Agent::start(&args, &env);
    first.metrics();
    std::thread::sleep(Duration::from_secs(3));
    let before = cost(&first.get("/metrics").text());
    let (status, stderr) = first.stop();
    assert!(status.success(), "{stderr}");
    let saved =
        std::fs::read_to_string(state_dir.join("engine.json")).expect("state saved at shutdown");
    assert!(saved.contains("\"gpus\""));

    // One currency unit per GPU-second: the counter resumes near where it stopped.
    assert!(before >= 2.0, "cost before the restart: {before}");
    let second = Agent::start(&args, &env);
    let after = cost(&second.metrics());
    assert!(after >= before, "cost went from {before} back to {after}");
    let _ = std::fs::remove_dir_all(&state_dir);
}

#[test]
fn a_collector_stuck_in_a_driver_call_fails_liveness_but_keeps_serving() {
    let agent = start(
        "stuck",
        "[simulation]\ngpus = 1\n[[fault]]\nfunction = \"nvmlDeviceGetPowerUsage\"\ndelay_ms = 60000\nafter_seconds = 2.0\n",
    );
    agent.metrics();
    assert_eq!(agent.get("/healthz").status, 200);
    agent.wait_until(Duration::from_secs(30), |a| a.get("/healthz").status == 503);
    assert!(agent.get("/healthz").text().starts_with("stale"));
    // The last exposition is still served: Prometheus sees old data, and the stale health.
    assert_eq!(agent.get("/metrics").status, 200);
}
