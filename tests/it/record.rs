//! `gpu-sentinel record` through the real binary: the simulator stepped fast with failure
//! labels, paced by the wall clock, stopped by a signal, and its refusals.

use crate::common;

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use common::{binary, fake_nvml_lib, run, temp_file};
use gpu_sentinel::model::Snapshot;
use serde_json::Value;

/// Each line of a recording: a snapshot, or a failure label as (uuid, at, family).
enum Line {
    Snapshot(Box<Snapshot>),
    Failure(String, DateTime<Utc>, String),
}

fn lines(text: &str) -> Vec<Line> {
    text.lines()
        .enumerate()
        .map(|(i, line)| {
            let value: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("line {} is not JSON ({e}): {line}", i + 1));
            if let Some(failure) = value.get("failure") {
                // The exact label shape `train` reads.
                let object = value.as_object().unwrap();
                assert_eq!(object.len(), 1, "{line}");
                let keys: BTreeSet<&str> = failure
                    .as_object()
                    .expect("failure is an object")
                    .keys()
                    .map(String::as_str)
                    .collect();
                assert_eq!(keys, BTreeSet::from(["uuid", "at", "family"]), "{line}");
                let at = DateTime::parse_from_rfc3339(failure["at"].as_str().unwrap())
                    .unwrap_or_else(|e| panic!("label time is not RFC 3339 ({e}): {line}"));
                Line::Failure(
                    failure["uuid"].as_str().unwrap().to_string(),
                    at.with_timezone(&Utc),
                    failure["family"].as_str().unwrap().to_string(),
                )
            } else {
                Line::Snapshot(Box::new(
                    serde_json::from_value(value)
                        .unwrap_or_else(|e| panic!("line {} is not a snapshot ({e})", i + 1)),
                ))
            }
        })
        .collect()
}

#[test]
fn simulated_time_is_recorded_fast_with_failure_labels() {
    let out_file = temp_file("fast.jsonl", "");
    let began = Instant::now();
    let out = run(&[
        "record",
        "--simulate",
        "--simulated-duration",
        "10h",
        "--interval",
        "60s",
        "--out",
        out_file.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // Ten simulated hours take nowhere near ten hours (nor ten hours / any speed-up).
    assert!(began.elapsed() < Duration::from_secs(30));
    assert!(
        stderr.contains("recorded 600 snapshots and 4 failure labels"),
        "{stderr}"
    );

    let text = std::fs::read_to_string(&out_file).unwrap();
    assert!(text.ends_with('\n'));
    let lines = lines(&text);
    let snapshots: Vec<&Snapshot> = lines
        .iter()
        .filter_map(|l| match l {
            Line::Snapshot(s) => Some(s.as_ref()),
            Line::Failure(..) => None,
        })
        .collect();
    assert_eq!(snapshots.len(), 600);
    assert!(snapshots.iter().all(|s| s.gpus.len() == 8));
    for pair in snapshots.windows(2) {
        assert_eq!((pair[1].at - pair[0].at).num_seconds(), 60);
    }
    // One label per hardware fault of the default mix, each after the snapshot of its step.
    let mut families = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if let Line::Failure(uuid, at, family) = line {
            families.push(family.as_str());
            let before = lines[..i]
                .iter()
                .rev()
                .find_map(|l| match l {
                    Line::Snapshot(s) => Some(s),
                    Line::Failure(..) => None,
                })
                .unwrap_or_else(|| panic!("label {i} does not follow a snapshot"));
            assert!(before.gpus.iter().any(|g| &g.uuid == uuid));
            assert!(*at <= before.at, "label at {at}, snapshot at {}", before.at);
        }
    }
    families.sort_unstable();
    assert_eq!(
        families,
        ["fell_off_bus", "memory_wear", "pcie_link", "thermal"]
    );
}

#[test]
fn live_recording_follows_the_wall_clock_for_the_duration() {
    let out_file = temp_file("live.jsonl", "");
    let began = Instant::now();
    let out = run(&[
        "record",
        "--simulate",
        "--sim-gpus",
        "2",
        "--duration",
        "1500ms",
        "--interval",
        "250ms",
        "--out",
        out_file.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let elapsed = began.elapsed();
    assert!(elapsed >= Duration::from_millis(1200), "{elapsed:?}");
    let text = std::fs::read_to_string(&out_file).unwrap();
    let n = lines(&text).len();
    // A tick every 250 ms for 1.5 s; a loaded machine may skip one.
    assert!((5..=6).contains(&n), "{n} lines");
}

#[test]
fn a_signal_ends_recording_with_a_complete_last_line() {
    let out_file = temp_file("signal.jsonl", "");
    let child = Command::new(binary())
        .args([
            "record",
            "--simulate",
            "--interval",
            "100ms",
            "--out",
            out_file.to_str().unwrap(),
        ])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("record starts");
    // Flushed after every collection: lines appear while it runs.
    let began = Instant::now();
    while std::fs::read_to_string(&out_file)
        .map(|t| t.lines().count())
        .unwrap_or(0)
        < 5
    {
        assert!(
            began.elapsed() < Duration::from_secs(20),
            "no lines appeared"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid = child.id().to_string();
    Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .expect("kill runs");
    let out = child.wait_with_output().expect("record exits");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("stopped by signal"), "{stderr}");
    let text = std::fs::read_to_string(&out_file).unwrap();
    assert!(text.ends_with('\n'), "the last line is cut");
    assert!(lines(&text).len() >= 5);
}

#[test]
fn nonsense_combinations_are_refused() {
    let out_file = temp_file("refused.jsonl", "");
    let path = out_file.to_str().unwrap();
    for args in [
        vec!["record", "--simulated-duration", "1h", "--out", path],
        vec![
            "record",
            "--simulate",
            "--simulated-duration",
            "1h",
            "--duration",
            "1m",
            "--out",
            path,
        ],
        vec!["record", "--simulate", "--interval", "0s", "--out", path],
        vec!["record", "--simulate", "--duration", "soon", "--out", path],
    ] {
        let out = run(&args);
        assert!(!out.status.success(), "{args:?} was accepted");
    }
}

#[test]
fn without_nvml_and_without_simulate_it_says_so() {
    let out_file = temp_file("nvml.jsonl", "");
    let out = run(&[
        "record",
        "--nvml-lib",
        "/nonexistent/libnvidia-ml.so.1",
        "--duration",
        "1s",
        "--out",
        out_file.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("NVML"), "{stderr}");
}

#[test]
fn nvml_is_recorded_through_the_production_path() {
    // The fake NVML library answers from the simulator; the kernel log is off (the host's
    // has nothing to do with the simulated GPUs).
    let lib = fake_nvml_lib();
    let scenario = temp_file("record-nvml.toml", "[simulation]\ngpus = 2\n");
    let config = temp_file("record-nvml-config.toml", "[collect]\nkmsg = \"off\"\n");
    let out_file = temp_file("nvml.jsonl", "");
    let out = Command::new(binary())
        .args([
            "record",
            "--nvml-lib",
            lib.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
            "--duration",
            "1s",
            "--interval",
            "250ms",
            "--out",
            out_file.to_str().unwrap(),
        ])
        .env("RUST_LOG", "warn")
        .env("FAKE_NVML_SCENARIO", &scenario)
        .output()
        .expect("record runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&out_file).unwrap();
    let lines = lines(&text);
    assert!((3..=4).contains(&lines.len()), "{} lines", lines.len());
    for line in &lines {
        let Line::Snapshot(s) = line else {
            panic!("NVML recordings carry no failure labels");
        };
        assert_eq!(s.gpus.len(), 2);
        assert!(s.gpus.iter().all(|g| g.up && g.uuid.starts_with("GPU-")));
    }
}
