//! The Prometheus alerting rules shipped in alerts/: valid, and behaving as their unit
//! tests say, checked by Prometheus's own promtool.

mod common;

use std::process::Command;

use common::{repo, tool};

fn promtool(args: &[&str]) -> Option<(bool, String)> {
    let promtool = tool("promtool")?;
    let out = Command::new(promtool)
        .args(args)
        .current_dir(repo().join("alerts"))
        .output()
        .expect("promtool runs");
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some((out.status.success(), printed))
}

#[test]
fn rules_are_valid() {
    if let Some((ok, printed)) = promtool(&["check", "rules", "gpu-sentinel.rules.yml"]) {
        assert!(ok, "{printed}");
        assert!(printed.contains("16 rules found"), "{printed}");
    }
}

#[test]
fn fleet_recording_rules_are_valid_and_pass_their_unit_tests() {
    if let Some((ok, printed)) = promtool(&["check", "rules", "gpu-sentinel-fleet.rules.yml"]) {
        assert!(ok, "{printed}");
        assert!(printed.contains("7 rules found"), "{printed}");
    }
    if let Some((ok, printed)) = promtool(&["test", "rules", "gpu-sentinel-fleet.rules.test.yml"]) {
        assert!(ok, "{printed}");
    }
}

#[test]
fn rule_unit_tests_pass() {
    if let Some((ok, printed)) = promtool(&["test", "rules", "gpu-sentinel.rules.test.yml"]) {
        assert!(ok, "{printed}");
    }
}

#[test]
fn every_default_agent_rule_has_a_prometheus_twin() {
    let rules = std::fs::read_to_string(repo().join("alerts/gpu-sentinel.rules.yml")).unwrap();
    for name in gpu_sentinel::alert::rules::DEFAULT_RULES {
        assert!(
            rules.contains(&format!("alert: {name}\n")),
            "{name} missing"
        );
    }
}
