//! The state directory through the real binary (fake NVML): damaged state files are kept
//! as evidence and the agent starts fresh; a state directory that stops taking writes is
//! told once and counted; a `kill -9` loses at most `[state] save_interval` of the engine's
//! history; a health state held after its evidence went survives a restart (SIGTERM, or a
//! `kill -9` after a save) with its `since`, and recovers only once the hold has run.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use common::{Agent, fake_nvml_lib, samples, temp_file, value};

/// A fresh state directory for one test.
fn state_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gs-state-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&dir);
    std::fs::create_dir_all(&dir).expect("state dir");
    dir
}

/// Starts the agent on two fake GPUs with `dir` as its state directory and `extra` config.
fn start(name: &str, dir: &Path, extra: &str, env: &[(&str, &str)]) -> Agent {
    start_playing(name, dir, "[simulation]\ngpus = 2\n", extra, env)
}

/// Starts the agent on the fake NVML playing `scenario`, with `dir` as its state directory
/// and `extra` config.
fn start_playing(
    name: &str,
    dir: &Path,
    scenario: &str,
    extra: &str,
    env: &[(&str, &str)],
) -> Agent {
    let lib = fake_nvml_lib();
    let scenario = temp_file(&format!("{name}-scenario.toml"), scenario);
    let config = temp_file(
        &format!("{name}-config.toml"),
        &format!(
            "[collect]\ninterval = \"200ms\"\nkmsg = \"off\"\n[state]\ndir = \"{}\"\n{extra}",
            dir.display()
        ),
    );
    let args = [
        "--nvml-lib",
        lib.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
    ];
    let mut all_env = vec![("FAKE_NVML_SCENARIO", scenario.to_str().unwrap())];
    all_env.extend_from_slice(env);
    let agent = Agent::start(&args, &all_env);
    agent.metrics();
    agent
}

/// Files in `dir` whose names start with `prefix`.
fn named(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with(prefix))
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn state_files_that_are_not_utf8_are_kept_and_the_agent_starts_fresh() {
    let dir = state_dir("not-utf8");
    let engine_bytes = b"{\"version\":1,\"gpus\":{\"GPU-\xff\xfe\":{}}}".to_vec();
    let alerts_bytes = b"\xc3\x28{\"book\":".to_vec();
    std::fs::write(dir.join("engine.json"), &engine_bytes).unwrap();
    std::fs::write(dir.join("alerts.json"), &alerts_bytes).unwrap();

    let agent = start("not-utf8", &dir, "", &[]);
    let (status, stderr) = agent.stop();
    assert!(status.success(), "{stderr}");

    for (file, bytes) in [
        ("engine.json", &engine_bytes),
        ("alerts.json", &alerts_bytes),
    ] {
        let kept = named(&dir, &format!("{file}.corrupt-"));
        assert_eq!(kept.len(), 1, "{file} kept once: {kept:?}\n{stderr}");
        assert_eq!(
            &std::fs::read(&kept[0]).unwrap(),
            bytes,
            "{file} kept as it was"
        );
        let path = dir.join(file).display().to_string();
        let warnings: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains("WARN") && l.contains(&path))
            .collect();
        assert_eq!(warnings.len(), 1, "one warning naming {path}:\n{stderr}");
        assert!(warnings[0].contains("corrupt-"), "{}", warnings[0]);
    }
    // The fresh engine state was saved at shutdown, beside the evidence.
    let saved = std::fs::read_to_string(dir.join("engine.json")).expect("engine.json saved");
    assert!(saved.contains("\"gpus\""), "{saved}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_state_dir_that_stops_taking_writes_is_told_once_and_counted() {
    let dir = state_dir("unwritable");
    let agent = start(
        "unwritable",
        &dir,
        "save_interval = \"1s\"\n",
        &[("RUST_LOG", "info")],
    );
    let errors = |agent: &Agent| {
        value(
            &agent.get("/metrics").text(),
            "gpu_sentinel_state_save_errors_total",
            "file=\"engine.json\"",
        )
    };
    assert_eq!(errors(&agent), Some(0.0));
    // The directory is replaced by a regular file: every save fails the same way.
    let moved = dir.with_extension("moved");
    let _ = std::fs::remove_dir_all(&moved);
    std::fs::rename(&dir, &moved).unwrap();
    std::fs::write(&dir, "not a directory").unwrap();
    agent.wait_until(Duration::from_secs(30), |a| {
        errors(a).is_some_and(|n| n >= 5.0)
    });
    // The directory comes back: the next save succeeds, and says so.
    std::fs::remove_file(&dir).unwrap();
    std::fs::rename(&moved, &dir).unwrap();
    // A save begun before the directory came back may still count; later ones may not.
    std::thread::sleep(Duration::from_millis(1500));
    let failed = errors(&agent).unwrap_or(0.0);
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(errors(&agent), Some(failed), "saves succeed again");
    let (status, stderr) = agent.stop();
    assert!(status.success(), "{stderr}");
    // Five failures or more, told once. (Twice at most: a save caught mid-write by the
    // swap fails with another error first, which is told, and then the steady one.)
    let told = stderr.matches("cannot save engine state").count();
    assert!((1..=2).contains(&told), "told {told} times:\n{stderr}");
    assert_eq!(
        stderr.matches("engine state saved to").count(),
        1,
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn kill_minus_nine_loses_at_most_the_save_interval() {
    let dir = state_dir("kill9-engine");
    // One currency unit per GPU-second: the cost counter is a clock of observed history.
    let extra = "save_interval = \"1s\"\n[cost]\nhourly_price = 3600.0\n";
    let cost = |text: &str| -> f64 {
        samples(text, "gpu_cost_total")
            .iter()
            .filter(|(labels, _)| labels.contains("gpu=\"0\""))
            .map(|(_, v)| v)
            .sum()
    };
    let mut first = start("kill9-engine", &dir, extra, &[]);
    std::thread::sleep(Duration::from_secs(6));
    let before = cost(&first.get("/metrics").text());
    let killed_at = chrono::Utc::now().timestamp();
    first.kill9();

    // What is on disk is about the save interval (and a collection) old; the bounds leave
    // room for a loaded machine, far below the minute of the default interval.
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("engine.json")).expect("engine.json"))
            .expect("engine.json is whole JSON");
    let last_at = saved["last_at"].as_i64().expect("last_at");
    assert!(
        killed_at - last_at <= 4,
        "engine.json is {}s old at the kill",
        killed_at - last_at
    );

    // The restarted agent resumes from it: the counter lost at most that much.
    let began = Instant::now();
    let second = start("kill9-engine", &dir, extra, &[]);
    let after = cost(&second.get("/metrics").text());
    let restart = began.elapsed().as_secs_f64();
    assert!(before >= 5.0, "cost before the kill: {before}");
    assert!(
        after >= before - 4.0,
        "cost went from {before} to {after} across the kill (restart took {restart:.1}s)"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_second_agent_on_the_same_state_dir_exits_naming_it_and_the_holder() {
    let dir = state_dir("locked");
    let mut first = start("locked-first", &dir, "", &[]);
    // The second agent, same directory: it must stop before serving, not run beside.
    let mut second = Agent::spawn(
        &[
            "--nvml-lib",
            fake_nvml_lib().to_str().unwrap(),
            "--config",
            temp_file(
                "locked-second-config.toml",
                &format!(
                    "[collect]\ninterval = \"200ms\"\nkmsg = \"off\"\n[state]\ndir = \"{}\"\n",
                    dir.display()
                ),
            )
            .to_str()
            .unwrap(),
        ],
        &[(
            "FAKE_NVML_SCENARIO",
            temp_file("locked-second.toml", "[simulation]\ngpus = 2\n")
                .to_str()
                .unwrap(),
        )],
    );
    let began = Instant::now();
    let status = loop {
        if let Some(status) = second.child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "the second agent is still running on a locked state directory"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success(), "{status:?}");
    let mut stderr = String::new();
    use std::io::Read;
    second
        .child
        .stderr
        .take()
        .expect("piped stderr")
        .read_to_string(&mut stderr)
        .expect("stderr");
    assert!(stderr.contains(&dir.display().to_string()), "{stderr}");
    assert!(
        stderr.contains(&format!("PID {}", first.child.id())),
        "{stderr}"
    );
    // The first one still serves, and once it is gone (kill -9: no clean-up) the lock is
    // free again.
    assert_eq!(first.get("/healthz").status, 200);
    first.kill9();
    let third = start("locked-third", &dir, "", &[]);
    assert_eq!(third.get("/healthz").status, 200);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The hold of the test below, short enough to wait out.
const HOLD_SECONDS: i64 = 20;

/// Two GPUs, GPU 1 with a row remap pending for its first `until` seconds (simulated time
/// runs at wall speed from the agent's first NVML call), or never when `None`.
fn remap_pending(until: Option<f64>) -> String {
    let mut text = String::from("[simulation]\ngpus = 2\nfaults = []\n");
    if let Some(until) = until {
        text.push_str(&format!(
            "[[set]]\ngpu = 1\nfrom_seconds = 0.0\nuntil_seconds = {until:.1}\n\
             sample = {{ remapped_rows = {{ correctable = 0, uncorrectable = 1, pending = true, \
             failure = false }} }}\n"
        ));
    }
    text
}

/// GPU 1's memory verdict in `/api/v1/health`: state, reason and since.
fn memory_verdict(agent: &Agent) -> (String, String, DateTime<Utc>) {
    let reply = agent.get("/api/v1/health");
    assert_eq!(reply.status, 200, "{}", reply.text());
    let doc: serde_json::Value = serde_json::from_slice(&reply.body).expect("health is JSON");
    let gpu = (doc["gpus"].as_array().expect("gpus"))
        .iter()
        .find(|g| g["index"] == 1)
        .unwrap_or_else(|| panic!("GPU 1 not in {doc}"));
    let memory = (gpu["components"].as_array().expect("components"))
        .iter()
        .find(|c| c["component"] == "memory")
        .unwrap_or_else(|| panic!("no memory component in {gpu}"));
    let text = |key: &str| memory[key].as_str().unwrap_or_default().to_string();
    let since = text("since")
        .parse()
        .unwrap_or_else(|e| panic!("since {:?}: {e}", memory["since"]));
    (text("state"), text("reason"), since)
}

fn remap_pending_gauge(agent: &Agent) -> Option<f64> {
    value(
        &agent.get("/metrics").text(),
        "gpu_remapped_rows_pending",
        "gpu=\"1\"",
    )
}

/// GPU 1's memory goes degraded (a pending remap), the remap applies, and the agent is
/// stopped while the state holds — by SIGTERM, or by `kill -9` once a save after the
/// evidence went is on disk — and started again on a fleet without the remap: the state
/// is still held with its `since`, and turns healthy only the hold after the evidence went.
fn a_held_state_survives_a_restart(name: &str, kill: bool) {
    let dir = state_dir(name);
    let extra = format!("save_interval = \"1s\"\n[health]\nhold = \"{HOLD_SECONDS}s\"\n");
    let mut first = start_playing(
        &format!("{name}-1"),
        &dir,
        &remap_pending(Some(5.0)),
        &extra,
        &[],
    );
    first.wait_until(Duration::from_secs(20), |a| {
        memory_verdict(a).0 == "degraded"
    });
    let (_, reason, since) = memory_verdict(&first);
    assert!(reason.contains("a row remap is pending"), "{reason}");
    // The remap applied: the gauge is 0 again, the state holds.
    first.wait_until(Duration::from_secs(20), |a| {
        remap_pending_gauge(a) == Some(0.0)
    });
    let cleared = Instant::now();
    let cleared_at = Utc::now();
    let (state, _, held_since) = memory_verdict(&first);
    assert_eq!((state.as_str(), held_since), ("degraded", since), "held");

    if kill {
        // A periodic save newer than the evidence's end, then no shutdown at all.
        let saved_at = |dir: &Path| {
            let bytes = std::fs::read(dir.join("engine.json")).ok()?;
            let saved: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
            saved["last_at"].as_i64()
        };
        let began = Instant::now();
        while saved_at(&dir).is_none_or(|t| t <= cleared_at.timestamp()) {
            assert!(
                began.elapsed() < Duration::from_secs(10),
                "no save of {} after {cleared_at} within 10 s (save_interval 1s)",
                dir.join("engine.json").display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        first.kill9();
    } else {
        let (status, stderr) = first.stop();
        assert!(status.success(), "{stderr}");
    }

    let second = start_playing(
        &format!("{name}-2"),
        &dir,
        &remap_pending(None),
        &extra,
        &[],
    );
    assert_eq!(
        remap_pending_gauge(&second),
        Some(0.0),
        "no remap pending now"
    );
    let (state, reason, resumed_since) = memory_verdict(&second);
    let read_after = cleared.elapsed();
    assert!(
        read_after < Duration::from_secs(HOLD_SECONDS as u64 - 3),
        "the restart took {read_after:?}, too close to the hold of {HOLD_SECONDS}s to test it"
    );
    assert_eq!(
        (state.as_str(), resumed_since),
        ("degraded", since),
        "held across the restart: {reason}"
    );
    assert!(reason.contains("a row remap is pending"), "{reason}");

    second.wait_until(Duration::from_secs(HOLD_SECONDS as u64 + 20), |a| {
        memory_verdict(a).0 == "healthy"
    });
    let (_, _, healthy_since) = memory_verdict(&second);
    let hold = TimeDelta::seconds(HOLD_SECONDS);
    // The evidence was last seen at most a collection and a poll before `cleared_at`.
    assert!(
        healthy_since >= cleared_at + hold - TimeDelta::seconds(3),
        "healthy at {healthy_since}, the remap applied at {cleared_at}: not the hold of {HOLD_SECONDS}s after"
    );
    assert!(
        healthy_since <= cleared_at + hold + TimeDelta::seconds(10),
        "healthy only at {healthy_since}, the remap applied at {cleared_at}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_held_health_state_survives_sigterm_and_a_restart() {
    a_held_state_survives_a_restart("health-hold-term", false);
}

#[test]
fn a_held_health_state_survives_kill_minus_nine_after_a_save() {
    a_held_state_survives_a_restart("health-hold-kill9", true);
}
