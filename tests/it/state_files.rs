//! The state directory through the real binary (fake NVML): damaged state files are kept
//! as evidence and the agent starts fresh; a state directory that stops taking writes is
//! told once and counted; a `kill -9` loses at most `[state] save_interval` of the engine's
//! history.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

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
    let lib = fake_nvml_lib();
    let scenario = temp_file(&format!("{name}-scenario.toml"), "[simulation]\ngpus = 2\n");
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
