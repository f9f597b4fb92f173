//! A real orphaned process holding GPU memory is flagged as a ghost, end to end: the fake
//! NVML reports a real PID holding memory with 0% SM, its parent exits, the agent resolves
//! the PID through /proc, and `/api/v1/gpus` and `/metrics` show the ghost with its owner.
//! And where `/proc` hides other users' processes (`hidepid`), the `procfs` collector fails,
//! says so once and again when it recovers, and a hidden process is no ghost.

use crate::common;

use std::time::Duration;

use common::orphan::Orphan;
use common::{Agent, samples, value};

#[test]
fn an_orphan_holding_memory_is_flagged_as_a_ghost() {
    let orphan = Orphan::start();
    let pid = orphan.0;

    let processes = format!("1:{pid}:4294967296:0");
    let agent = Agent::on_fake_nvml(
        "ghost",
        "[simulation]\ngpus = 2\nfaults = []\n",
        "[collect]\ninterval = \"200ms\"\nkmsg = \"off\"\n[idle]\nwindow = \"2s\"\n",
        &[("FAKE_NVML_PROCESSES", processes.as_str())],
    );
    agent.metrics();
    agent.wait_until(Duration::from_secs(30), |a| {
        let doc: serde_json::Value =
            serde_json::from_slice(&a.get("/api/v1/gpus").body).unwrap_or_default();
        doc["gpus"][1]["idle"]["ghosts"]
            .as_array()
            .is_some_and(|g| g.iter().any(|p| p["pid"] == pid))
    });
    let doc: serde_json::Value = serde_json::from_slice(&agent.get("/api/v1/gpus").body).unwrap();
    let ghost = &doc["gpus"][1]["idle"]["ghosts"][0];
    assert_eq!(ghost["liveness"], "orphaned", "{ghost}");
    assert_eq!(ghost["process"], "sleep", "{ghost}");
    assert!(ghost["user"].is_string(), "the owner is resolved: {ghost}");
    assert!(
        doc["gpus"][1]["findings"]
            .to_string()
            .contains("ghost_process")
    );

    let text = agent.get("/metrics").text();
    let ghosts: Vec<_> = samples(&text, "gpu_ghost_processes")
        .into_iter()
        .filter(|(labels, _)| labels.contains("gpu=\"1\""))
        .collect();
    assert_eq!(ghosts.len(), 1);
    assert_eq!(ghosts[0].1, 1.0);
    // The process series carries the owner too.
    assert!(
        samples(&text, "gpu_process_memory_bytes")
            .iter()
            .any(|(labels, _)| labels.contains(&format!("pid=\"{pid}\""))
                && labels.contains("process=\"sleep\"")),
        "{text}"
    );
}

/// `gpu_sentinel_collector_success{collector="procfs"}` of a scrape.
fn procfs_success(agent: &Agent) -> Option<f64> {
    let text = agent.get("/metrics").text();
    value(
        &text,
        "gpu_sentinel_collector_success",
        "collector=\"procfs\"",
    )
}

/// The liveness `/api/v1/gpus` gives the process `pid` on GPU 1.
fn liveness(agent: &Agent, pid: u32) -> String {
    let doc: serde_json::Value =
        serde_json::from_slice(&agent.get("/api/v1/gpus").body).unwrap_or_default();
    doc["gpus"][1]["processes"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["pid"] == pid))
        .map(|p| p["liveness"].as_str().unwrap_or("").to_string())
        .unwrap_or_default()
}

#[test]
fn hidden_processes_fail_the_procfs_collector_and_are_no_ghosts() {
    // A /proc as `hidepid=invisible` shows it to an agent without CAP_SYS_PTRACE: no
    // other user's process, PID 1 included; the GPU's process 4242 is not there either.
    let root = std::env::temp_dir().join(format!("gs-hidepid-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let proc = root.join("proc");
    std::fs::create_dir_all(&proc).expect("proc folder");
    std::fs::write(proc.join("uptime"), "1000.00 900.00\n").expect("uptime");
    let config = format!(
        "[collect]\ninterval = \"200ms\"\nkmsg = \"off\"\nproc_path = {:?}\n\
         [idle]\nwindow = \"1s\"\n",
        proc.display().to_string()
    );
    let agent = Agent::on_fake_nvml(
        "hidepid",
        "[simulation]\ngpus = 2\nfaults = []\n",
        &config,
        &[
            ("FAKE_NVML_PROCESSES", "1:4242:4294967296:0"),
            // Recoveries are said at info.
            ("RUST_LOG", "warn,gpu_sentinel_agent::source=info"),
        ],
    );
    agent.metrics();
    assert_eq!(procfs_success(&agent), Some(0.0));
    assert_eq!(liveness(&agent, 4242), "unknown", "hidden, not gone");
    // Longer than the idle window: a hidden process never becomes a ghost.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(procfs_success(&agent), Some(0.0));
    let doc: serde_json::Value = serde_json::from_slice(&agent.get("/api/v1/gpus").body).unwrap();
    assert_eq!(
        doc["gpus"][1]["idle"]["ghosts"],
        serde_json::json!([]),
        "{doc}"
    );

    // The mount is fixed: PID 1 is seen, and 4242's absence now means it is gone.
    std::fs::create_dir_all(proc.join("1")).expect("pid 1");
    std::fs::write(
        proc.join("1/stat"),
        "1 (systemd) S 0 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 2 0 0\n",
    )
    .expect("pid 1 stat");
    agent.wait_until(Duration::from_secs(20), |a| procfs_success(a) == Some(1.0));
    agent.wait_until(Duration::from_secs(20), |a| liveness(a, 4242) == "gone");

    let (_, stderr) = agent.stop();
    let _ = std::fs::remove_dir_all(&root);
    let failures: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("other users' processes are hidden"))
        .collect();
    assert_eq!(failures.len(), 1, "said once:\n{stderr}");
    assert!(
        failures[0].contains("hidepid")
            && failures[0].contains(&proc.join("1/stat").display().to_string()),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("collector procfs works again").count(),
        1,
        "{stderr}"
    );
}
