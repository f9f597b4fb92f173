//! A real orphaned process holding GPU memory is flagged as a ghost, end to end: the fake
//! NVML reports a real PID holding memory with 0% SM, its parent exits, the agent resolves
//! the PID through /proc, and `/api/v1/gpus` and `/metrics` show the ghost with its owner.

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Agent, samples};

/// Kills the orphan when the test ends, however it ends.
struct Orphan(u32);

impl Drop for Orphan {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.0.to_string()).status();
    }
}

#[test]
fn an_orphan_holding_memory_is_flagged_as_a_ghost() {
    // The shell starts `sleep` in the background, prints its PID and exits: `sleep` is
    // re-parented (orphaned) while it lives on.
    let out = Command::new("sh")
        .args(["-c", "sleep 120 >/dev/null 2>&1 & echo $!"])
        .stdout(Stdio::piped())
        .output()
        .expect("sh runs");
    let pid: u32 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("the shell printed the PID");
    let _orphan = Orphan(pid);

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
