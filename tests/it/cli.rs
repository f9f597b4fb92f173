//! The command line of the real binary: config checking and error messages.

use crate::common;

use common::{repo, run, temp_file};

#[test]
fn check_config_accepts_the_shipped_config() {
    let path = repo().join("config.toml");
    let out = run(&["check-config", path.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok"));
}

#[test]
fn check_config_reports_every_problem_with_key_and_line() {
    let path = temp_file(
        "bad.toml",
        "[collect]\ninterval = \"1ms\"\n\n[simulation]\ngpus = 0\nspeed = -1.0\n",
    );
    let out = run(&["check-config", path.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let file = path.display().to_string();
    for expected in [
        format!("{file}:2: collect.interval:"),
        format!("{file}:5: simulation.gpus:"),
        format!("{file}:6: simulation.speed:"),
    ] {
        assert!(err.contains(&expected), "missing {expected:?} in:\n{err}");
    }
}

#[test]
fn check_config_names_an_unknown_key() {
    let path = temp_file(
        "typo.toml",
        "[export]\nlisten = \"127.0.0.1:1\"\ndcgm = true\n",
    );
    let out = run(&["check-config", path.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(":3: export.dcgm:"), "{err}");
    assert!(err.contains("unknown field"), "{err}");
}

#[test]
fn check_config_of_a_missing_file_says_so() {
    let out = run(&["check-config", "/nonexistent/gpu-sentinel.toml"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/nonexistent/gpu-sentinel.toml") && err.contains("cannot read"),
        "{err}"
    );
}

#[test]
fn run_refuses_a_broken_config_before_serving() {
    let path = temp_file("broken.toml", "[collect\n");
    let out = run(&["run", "--simulate", "--config", path.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains(":1:"));
}

#[test]
fn snapshot_json_of_the_simulator_has_every_gpu() {
    let out = run(&["snapshot", "--simulate", "--sim-gpus", "3", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let snap: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(snap["gpus"].as_array().map(Vec::len), Some(3));
    assert_eq!(snap["gpus"][0]["name"], "NVIDIA H100 80GB HBM3");
}

#[test]
fn snapshot_table_lists_gpus_and_processes() {
    let out = run(&["snapshot", "--simulate"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.matches("NVIDIA H100 80GB HBM3").count(), 8, "{text}");
    assert!(text.contains("PID"), "{text}");
}
