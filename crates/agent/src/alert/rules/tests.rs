//! Unit tests of `alert::rules`: the default table, tuning from config, and evaluation over
//! the simulated fleet (through the book, as the agent runs them).

use chrono::{DateTime, Utc};

use super::*;
use crate::alert::book::AlertBook;
use crate::alert::{Alert, AlertState};
use crate::config::DEFAULT_RISK_THRESHOLD;
use crate::config::SimulationConfig;
use crate::engine::{Engine, EngineConfig};
use crate::model::CollectHealth;
use crate::source::simulate::Fleet;

fn start() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-04-01T00:00:00Z")
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_default()
}

/// Runs the default fleet through engine and rules; returns the book after `hours`.
fn run(hours: f64, rules: &[Rule]) -> AlertBook {
    let mut fleet = Fleet::new(&SimulationConfig::default(), start());
    let mut engine = Engine::new(EngineConfig::default());
    let mut book = AlertBook::default();
    let mut t = 0.0;
    while t < hours * 3600.0 {
        t += 60.0;
        fleet.advance(60.0);
        let findings = engine.step(&fleet.snapshot());
        let candidates = evaluate(
            rules,
            &RuleInput {
                findings: &findings,
                health: None,
                hostname: "node-1",
            },
        );
        book.update(findings.at, candidates, Duration::from_secs(900));
    }
    book
}

#[test]
fn the_default_rules_are_the_listed_names_in_order() {
    let rules = defaults(DEFAULT_RISK_THRESHOLD);
    let names: Vec<&str> = rules.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, DEFAULT_RULES);
}

fn firing<'a>(book: &'a AlertBook, name: &str) -> Vec<&'a Alert> {
    book.in_state(AlertState::Firing)
        .filter(|a| a.name() == name)
        .collect()
}

#[test]
fn default_fleet_fires_the_default_rules_with_their_labels() {
    let book = run(10.0, &defaults(DEFAULT_RISK_THRESHOLD));
    let lost = firing(&book, "GpuLost");
    assert_eq!(lost.len(), 1);
    let l = &lost[0].labels;
    assert_eq!(l["gpu"], "4");
    assert_eq!(l["severity"], "critical");
    assert_eq!(l["hostname"], "node-1");
    assert!(l["uuid"].starts_with("GPU-"));
    assert!(lost[0].annotations["summary"].contains("GPU 4 on node-1"));
    assert!(!lost[0].annotations["runbook"].is_empty());

    let xid = firing(&book, "GpuHardwareXid");
    assert!(
        xid.iter()
            .any(|a| a.labels["gpu"] == "1" && a.annotations["description"].contains("XID 48"))
    );
    assert_eq!(firing(&book, "GpuRowRemapFailure").len(), 1);
    assert_eq!(firing(&book, "GpuUncorrectableEccErrors").len(), 1);
    let risk = firing(&book, "GpuFailureRiskHigh");
    assert!(risk.iter().any(|a| a.labels["gpu"] == "1"));
    assert!(
        risk.iter()
            .all(|a| a.annotations["description"].contains("risk "))
    );
    // The description names the evidence and when it started.
    let worn = risk
        .iter()
        .find(|a| a.labels["gpu"] == "1")
        .map(|a| &a.annotations["description"]);
    assert!(
        worn.is_some_and(|d| d.contains("memory errors (") && d.contains(" since 2026-04-")),
        "{worn:?}"
    );
    let muted = book.inhibited();
    let idle: Vec<&str> = firing(&book, "GpuAllocatedIdle")
        .into_iter()
        .filter(|a| !muted.contains(&a.fingerprint()))
        .map(|a| a.labels["gpu"].as_str())
        .collect();
    assert_eq!(idle, ["5"], "the ghost's GPU says ghost, not idle");
    let ghost = firing(&book, "GpuGhostProcess");
    assert_eq!(ghost[0].labels["gpu"], "6");
    assert!(ghost[0].annotations["description"].contains("pid "));
}

#[test]
fn a_lost_gpu_mutes_its_other_alerts_without_resolving_them() {
    let book = run(10.0, &defaults(DEFAULT_RISK_THRESHOLD));
    let muted = book.inhibited();
    let gpu4: Vec<(&str, bool)> = book
        .alerts
        .iter()
        .filter(|(_, a)| a.labels.get("gpu").map(String::as_str) == Some("4"))
        .filter(|(_, a)| a.state == AlertState::Firing)
        .map(|(fp, a)| (a.name(), muted.contains(fp)))
        .collect();
    // XID 79 and the health verdict fired with the loss: still firing, but only GpuLost
    // is told.
    assert_eq!(
        gpu4,
        [
            ("GpuHardwareXid", true),
            ("GpuLost", false),
            ("GpuUnhealthy", true)
        ]
    );
}

#[test]
fn health_verdicts_alert_with_their_action() {
    let book = run(10.0, &defaults(DEFAULT_RISK_THRESHOLD));
    let unhealthy = firing(&book, "GpuUnhealthy");
    let lost = unhealthy
        .iter()
        .find(|a| a.labels["gpu"] == "4")
        .expect("the lost GPU is unhealthy");
    assert_eq!(lost.labels["action"], "drain_and_reboot");
    assert_eq!(lost.labels["severity"], "critical");
    assert!(
        lost.annotations["summary"].starts_with("GPU 4 on node-1 is unhealthy: xid, driver"),
        "{}",
        lost.annotations["summary"]
    );
    let description = &lost.annotations["description"];
    assert!(
        description.contains("driver: does not answer NVML")
            && description.contains("(action drain_and_reboot, since 2026-04-01"),
        "{description}"
    );
    // GPU 1's memory (an uncorrectable error, a failed remap by 10 h): unhealthy, inspect.
    let worn = unhealthy
        .iter()
        .find(|a| a.labels["gpu"] == "1")
        .expect("GPU 1");
    assert_eq!(worn.labels["action"], "inspect_hardware");
    // Degraded GPUs wait their `for` (15 minutes) and never double an unhealthy one.
    let degraded = firing(&book, "GpuDegraded");
    assert!(
        degraded
            .iter()
            .any(|a| a.labels["gpu"] == "2" && a.labels["action"] == "inspect_hardware"),
        "the PCIe link trained down: {degraded:?}"
    );
    for a in &degraded {
        assert!(
            !unhealthy.iter().any(|u| u.labels["gpu"] == a.labels["gpu"]),
            "{a:?}"
        );
    }
    assert!(
        firing(&book, "GpuUnhealthy")
            .iter()
            .all(|a| a.labels["gpu"] != "0")
    );
}

#[test]
fn a_node_component_alerts_as_the_node() {
    let rules = defaults(DEFAULT_RISK_THRESHOLD);
    let mut findings = crate::engine::Findings {
        at: start(),
        gpus: Vec::new(),
        capacity: Default::default(),
        placement: Default::default(),
        health: Default::default(),
    };
    findings
        .health
        .components
        .push(crate::engine::health::Verdict {
            component: "pci".into(),
            state: crate::engine::health::State::Unhealthy,
            reason: "1 NVIDIA GPU(s) on the PCI bus that NVML does not list: 0000:3b:00.0".into(),
            action: crate::engine::health::Action::DrainAndReboot,
            since: start(),
        });
    let found = evaluate(
        &rules,
        &RuleInput {
            findings: &findings,
            health: None,
            hostname: "node-1",
        },
    );
    let alert = found
        .iter()
        .find(|c| c.labels["alertname"] == "GpuUnhealthy")
        .expect("the node is unhealthy");
    assert_eq!(alert.labels["component"], "pci");
    assert_eq!(alert.labels["action"], "drain_and_reboot");
    assert!(!alert.labels.contains_key("gpu"));
    assert_eq!(
        alert.annotations["summary"],
        "The node node-1 is unhealthy: pci"
    );
    assert!(alert.annotations["description"].contains("0000:3b:00.0"));
    assert!(!found.iter().any(|c| c.labels["alertname"] == "GpuDegraded"));
}

#[test]
fn config_tunes_disables_and_adds_rules() {
    let tuning = vec![
        RuleConfig {
            name: "GpuAllocatedIdle".into(),
            for_: Some(Duration::from_secs(3600)),
            severity: Some("info".into()),
            ..RuleConfig::default()
        },
        RuleConfig {
            name: "GpuLongRunningProcess".into(),
            disabled: true,
            ..RuleConfig::default()
        },
        RuleConfig {
            name: "GpuHot".into(),
            field: Some("temperature_celsius".into()),
            op: Some(">=".into()),
            value: Some(60.0),
            ..RuleConfig::default()
        },
    ];
    let rules = from_config(0.7, &tuning).unwrap();
    let idle = rules.iter().find(|r| r.name == "GpuAllocatedIdle").unwrap();
    assert_eq!(
        (idle.for_.as_secs(), idle.severity.as_str()),
        (3600, "info")
    );
    assert!(rules.iter().all(|r| r.name != "GpuLongRunningProcess"));
    let book = run(2.0, &rules);
    let hot = firing(&book, "GpuHot");
    assert!(!hot.is_empty(), "busy GPUs run above 60 °C");
    assert!(hot[0].annotations["summary"].contains("GpuHot on GPU"));

    let bad = from_config(
        0.7,
        &[RuleConfig {
            name: "Mystery".into(),
            field: Some("vibes".into()),
            value: Some(1.0),
            ..RuleConfig::default()
        }],
    );
    assert!(bad.unwrap_err().to_string().contains("vibes"));
}

#[test]
fn collection_failing_reads_health() {
    let findings = crate::engine::Findings {
        at: start(),
        gpus: Vec::new(),
        capacity: Default::default(),
        placement: Default::default(),
        health: Default::default(),
    };
    let health = CollectHealth {
        source_up: true,
        families: vec![crate::model::FamilyHealth {
            name: "ecc",
            seconds: 0.0,
            success: false,
        }],
        ..CollectHealth::default()
    };
    let input = RuleInput {
        findings: &findings,
        health: Some(&health),
        hostname: "h",
    };
    let c = evaluate(&defaults(DEFAULT_RISK_THRESHOLD), &input);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].labels["alertname"], "GpuCollectionFailing");
    assert!(c[0].annotations["description"].contains("ecc"));
}

#[test]
fn a_gpu_health_verdict_names_the_mig_instances_it_takes_down() {
    use crate::engine::GpuFindings;
    use crate::engine::health::{Action, State, Verdict};
    use crate::engine::mig::InstanceFindings;
    let verdict = |state, component: &'static str| Verdict {
        component: component.into(),
        state,
        reason: format!("{component} fails"),
        action: Action::ResetGpu,
        since: start(),
    };
    let gpu = |index: u32, state, mig: Vec<InstanceFindings>| {
        let mut g = GpuFindings {
            index,
            uuid: format!("GPU-{index}"),
            up: true,
            mig,
            ..GpuFindings::default()
        };
        g.health.state = state;
        g.health.action = Action::ResetGpu;
        g.health.components = vec![verdict(state, "memory")];
        g
    };
    let held = InstanceFindings {
        uuid: "MIG-9".into(),
        gpu_instance: 9,
        profile: "1g.10gb".into(),
        present: true,
        holders: vec![crate::model::Allocation {
            namespace: Some("serving".into()),
            pod: Some("llm-0".into()),
            ..crate::model::Allocation::default()
        }],
        ..InstanceFindings::default()
    };
    let findings = crate::engine::Findings {
        at: start(),
        gpus: vec![
            gpu(0, State::Unhealthy, vec![held.clone()]),
            gpu(1, State::Degraded, vec![held]),
            gpu(2, State::Unhealthy, Vec::new()),
        ],
        capacity: Default::default(),
        placement: Default::default(),
        health: Default::default(),
    };
    let found = evaluate(
        &defaults(DEFAULT_RISK_THRESHOLD),
        &RuleInput {
            findings: &findings,
            health: None,
            hostname: "node-1",
        },
    );
    let description = |name: &str, gpu: &str| {
        found
            .iter()
            .find(|c| {
                c.labels["alertname"] == name
                    && c.labels.get("gpu").map(String::as_str) == Some(gpu)
            })
            .map(|c| c.annotations["description"].clone())
            .unwrap_or_else(|| panic!("{name} of GPU {gpu}: {found:?}"))
    };
    let listed = " MIG instances on it: MIG 1g.10gb (GI 9, CI 0) held by pod serving/llm-0.";
    for (name, gpu) in [("GpuUnhealthy", "0"), ("GpuDegraded", "1")] {
        let text = description(name, gpu);
        assert!(
            text.starts_with("memory: memory fails (action reset_gpu") && text.ends_with(listed),
            "{name}: {text}"
        );
    }
    // A GPU without instances says nothing of them.
    assert!(!description("GpuUnhealthy", "2").contains("MIG"));
}
