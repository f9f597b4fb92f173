//! kill -9 with undelivered notifications: the agent (real binary, fake NVML, a state
//! directory) fires GpuLost toward a receiver that answers 503, is SIGKILLed, and a new
//! agent on the same state directory delivers it once the receiver recovers — from the
//! outbox, since the persisted alert state keeps the new agent from firing it afresh.

use crate::common;

use std::time::Duration;

use common::http_server::{Answer, HttpServer};
use common::{Agent, fake_nvml_lib, temp_file};

#[test]
fn undelivered_notifications_survive_kill_minus_nine() {
    let hook = HttpServer::start(vec![Answer::status(503)]);
    let state = std::env::temp_dir().join(format!("gs-kill9-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    let scenario = temp_file(
        "kill9.toml",
        "[simulation]\ngpus = 2\nfaults = []\n[[fault]]\ngpu = 1\nfunction = \"*\"\nerror = \"GPU_IS_LOST\"\nafter_seconds = 1.0\n",
    );
    let config = temp_file(
        "kill9-config.toml",
        &format!(
            "[collect]\ninterval = \"200ms\"\nkmsg = \"off\"\n[state]\ndir = \"{}\"\n\
             [[alerting.receivers]]\nname = \"ops\"\nkind = \"webhook\"\nurl = \"{}\"\n\
             [alerting.route]\nreceiver = \"ops\"\ngroup_wait = \"0s\"\n",
            state.display(),
            hook.url("/hook")
        ),
    );
    let lib = fake_nvml_lib();
    let args = [
        "--nvml-lib",
        lib.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
    ];
    let env = [("FAKE_NVML_SCENARIO", scenario.to_str().unwrap())];

    let mut first = Agent::start(&args, &env);
    // The receiver has refused GpuLost at least once: it is in the outbox, undelivered.
    let refused = hook.wait_for(1, Duration::from_secs(30));
    assert!(
        refused[0].text().contains("GpuLost"),
        "{}",
        refused[0].text()
    );
    first.kill9();

    hook.then(vec![Answer::ok()]);
    let before = hook.requests().len();
    let _second = Agent::start(&args, &env);
    let delivered = hook.wait_for(before + 1, Duration::from_secs(30));
    let accepted = &delivered[before..];
    assert!(
        accepted.iter().any(|r| r.text().contains("GpuLost")),
        "GpuLost delivered after the restart"
    );
    // Exactly one GpuLost notification was accepted, and it is the one the first agent
    // stored: the same alert (same startsAt), not one the restarted agent fired afresh
    // (that would have superseded it in the outbox with a later start).
    std::thread::sleep(Duration::from_secs(2));
    let lost: Vec<serde_json::Value> = hook.requests()[before..]
        .iter()
        .filter(|r| r.text().contains("\"GpuLost\""))
        .map(|r| r.json())
        .collect();
    assert_eq!(lost.len(), 1);
    let started = |body: &serde_json::Value| body["alerts"][0]["startsAt"].clone();
    assert_eq!(started(&lost[0]), started(&refused[0].json()));
    let _ = std::fs::remove_dir_all(&state);
}
