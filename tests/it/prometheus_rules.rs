//! The Prometheus alerting rules shipped in alerts/: valid, and behaving as their unit
//! tests say, checked by Prometheus's own promtool.

use crate::common;

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
        // Seven for the dashboards, four hourly for gpu-sentinel's metrics, five for
        // dcgm-exporter's.
        assert!(printed.contains("16 rules found"), "{printed}");
    }
    if let Some((ok, printed)) = promtool(&["test", "rules", "gpu-sentinel-fleet.rules.test.yml"]) {
        assert!(ok, "{printed}");
    }
}

/// The report reads the hourly records by the names and labels the rules write.
#[test]
fn the_reports_hourly_records_are_the_rules_records() {
    use gpu_sentinel::config::Config;
    use gpu_sentinel::fleet::dialect::Dialect;
    use gpu_sentinel::fleet::recorded::{Names, threshold_label};
    let rules = std::fs::read_to_string(repo().join("alerts/gpu-sentinel-fleet.rules.yml"))
        .expect("rules file");
    let defaults = Config::default();
    let dcgm = Dialect::Dcgm {
        memory_floor_mib: defaults.idle.memory_floor_mib,
    };
    for dialect in [Dialect::Native, dcgm] {
        for name in Names::of(dialect).all() {
            assert!(
                rules.contains(&format!("- record: {name}\n")),
                "{name} is not recorded by the rules"
            );
        }
    }
    // dcgm-exporter's held records say the thresholds they were counted with: the
    // defaults, as a report with the default configuration asks for them.
    assert!(rules.contains(&format!(
        "memory_floor_mib: \"{}\"",
        defaults.idle.memory_floor_mib
    )));
    assert!(rules.contains(&format!(
        "idle_threshold: \"{}\"",
        threshold_label(defaults.idle.threshold)
    )));
    assert!(rules.contains(&format!(
        "DCGM_FI_DEV_FB_USED > {} or",
        defaults.idle.memory_floor_mib
    )));
    assert!(rules.contains(&format!(
        "DCGM_FI_DEV_GPU_UTIL >= {})",
        defaults.idle.threshold * 100.0
    )));
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
