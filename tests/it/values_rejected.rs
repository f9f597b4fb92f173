//! The live agent's range checks, end to end: the fake NVML reports a process holding
//! 2^60 bytes (an exabyte, what a garbled driver answer looks like), and the agent clears
//! it before the engine and the exposition read it, counts it in
//! `gpu_sentinel_values_rejected_total{field}` and logs it once at warn.

use crate::common;

use std::time::Duration;

use common::{Agent, samples};

const FIELD: &str = "processes.used_memory_bytes";

fn rejected(text: &str) -> f64 {
    samples(text, "gpu_sentinel_values_rejected_total")
        .into_iter()
        .find(|(labels, _)| labels.contains(&format!("field=\"{FIELD}\"")))
        .map_or(0.0, |(_, v)| v)
}

#[test]
fn an_impossible_value_from_nvml_is_cleared_counted_and_logged_once() {
    let exabyte = (1u64 << 60).to_string();
    let processes = format!("1:4242:{exabyte}:0");
    let agent = Agent::on_fake_nvml(
        "rejected",
        "[simulation]\ngpus = 2\nfaults = []\n",
        "[collect]\ninterval = \"200ms\"\nkmsg = \"off\"\n",
        &[("FAKE_NVML_PROCESSES", processes.as_str())],
    );
    let text = agent.metrics();
    assert!(
        text.contains("# HELP gpu_sentinel_values_rejected_total "),
        "no values_rejected family:\n{text}"
    );
    // One more value each collection: wait for a few.
    agent.wait_until(Duration::from_secs(20), |a| {
        rejected(&a.get("/metrics").text()) >= 3.0
    });

    // Neither the exposition nor the API shows the exabyte.
    let text = agent.get("/metrics").text();
    let shown: Vec<_> = samples(&text, "gpu_process_memory_bytes")
        .into_iter()
        .filter(|(labels, _)| labels.contains("pid=\"4242\""))
        .collect();
    assert!(shown.is_empty(), "the cleared value is rendered: {shown:?}");
    let doc: serde_json::Value =
        serde_json::from_slice(&agent.get("/api/v1/gpus").body).expect("gpus JSON");
    let process = doc["gpus"][1]["processes"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["pid"] == 4242))
        .unwrap_or_else(|| panic!("the process is still listed: {doc:#}"));
    assert!(process.get("used_memory_bytes").is_none(), "{process}");

    let (_, stderr) = agent.stop();
    let logged: Vec<&str> = stderr.lines().filter(|l| l.contains(FIELD)).collect();
    assert_eq!(
        logged.len(),
        1,
        "logged once, not once a collection:\n{stderr}"
    );
    assert!(logged[0].contains("WARN"), "{stderr}");
    assert!(!stderr.contains(&exabyte), "{stderr}");
}
