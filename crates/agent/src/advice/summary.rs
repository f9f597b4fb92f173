//! What the advisor sends: a compact JSON summary of alerts and engine findings, with the
//! operator's redaction switches applied.
//!
//! Structured fields that name a host, a user (user, pod, namespace, container) or a command
//! (process name, command line) are left out when their switch is on. Free text (alert
//! summaries and descriptions, label values) can quote the same names, so every such name
//! known from the alerts and findings is also replaced in all text by `<host>`, `<user>` or
//! `<command>` — longest first, so a command line is replaced before the process name inside
//! it. Names shorter than two characters are left to the structural removal: replacing one
//! letter everywhere would garble the text without hiding anything.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use crate::config::AdviceConfig;
use crate::engine::idle::ProcessFinding;
use crate::engine::{Findings, GpuFindings};

/// What to leave out of what is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Redaction {
    pub hostnames: bool,
    /// User, pod, namespace and container names.
    pub users: bool,
    /// Process names and command lines.
    pub commands: bool,
}

impl From<&AdviceConfig> for Redaction {
    fn from(c: &AdviceConfig) -> Redaction {
        Redaction {
            hostnames: c.redact_hostnames,
            users: c.redact_users,
            commands: c.redact_commands,
        }
    }
}

/// What the prompt reads of one alert. Alerting implements it for its alerts: advice sits
/// below alerting and knows none of its types, and a trait (rather than a copy of each
/// alert) says exactly what of an alert leaves the host.
pub trait AlertFacts {
    /// Label names to values: `alertname`, `severity`, `hostname`, `gpu`, `uuid`, …
    fn labels(&self) -> &BTreeMap<String, String>;
    /// `pending`, `firing` or `resolved`.
    fn state(&self) -> &str;
    /// The annotation `name` (`summary`, `description`), if the alert has it.
    fn annotation(&self, name: &str) -> Option<&str>;
}

/// Labels that carry a user's identity, and a command's.
const USER_LABELS: [&str; 4] = ["user", "pod", "namespace", "container"];
const COMMAND_LABELS: [&str; 2] = ["process", "command"];

/// How many risk reasons per GPU are sent.
const REASONS: usize = 5;

/// The summary for a group of alerts: the alerts, the GPUs they concern with their numbers
/// and reasons, and the fleet around them.
pub fn alert_summary<A: AlertFacts>(
    alerts: &[A],
    findings: &Findings,
    hostname: &str,
    redaction: Redaction,
) -> Value {
    let concerned: Vec<&GpuFindings> = findings
        .gpus
        .iter()
        .filter(|g| {
            alerts.iter().any(|a| {
                a.labels().get("uuid") == Some(&g.uuid)
                    || a.labels().get("gpu") == Some(&g.index.to_string())
            })
        })
        .collect();
    let labels: Vec<&BTreeMap<String, String>> = alerts.iter().map(AlertFacts::labels).collect();
    let scrub = Scrubber::new(&labels, findings, hostname, redaction);
    let mut out = Map::new();
    if !redaction.hostnames {
        out.insert("host".into(), json!(hostname));
    }
    out.insert("at".into(), json!(findings.at.to_rfc3339()));
    out.insert(
        "alerts".into(),
        alerts.iter().map(|a| alert_json(a, &scrub)).collect(),
    );
    out.insert(
        "gpus".into(),
        concerned
            .iter()
            .map(|g| gpu_json(g, redaction, &scrub))
            .collect(),
    );
    out.insert("fleet".into(), fleet_json(findings));
    Value::Object(out)
}

/// The summary for the periodic digest: every GPU (most at risk first, at most 16), and
/// the fleet's utilization and waste.
pub fn fleet_summary(findings: &Findings, hostname: &str, redaction: Redaction) -> Value {
    let scrub = Scrubber::new(&[], findings, hostname, redaction);
    let mut gpus: Vec<&GpuFindings> = findings.gpus.iter().collect();
    gpus.sort_by(|a, b| b.risk.score.total_cmp(&a.risk.score));
    let mut out = Map::new();
    if !redaction.hostnames {
        out.insert("host".into(), json!(hostname));
    }
    out.insert("at".into(), json!(findings.at.to_rfc3339()));
    out.insert(
        "gpus".into(),
        gpus.iter()
            .take(16)
            .map(|g| gpu_json(g, redaction, &scrub))
            .collect(),
    );
    out.insert("fleet".into(), fleet_json(findings));
    Value::Object(out)
}

fn alert_json(alert: &impl AlertFacts, scrub: &Scrubber) -> Value {
    let r = scrub.redaction;
    let labels: Map<String, Value> = alert
        .labels()
        .iter()
        .filter(|(k, _)| !(r.hostnames && k.as_str() == "hostname"))
        .filter(|(k, _)| !(r.users && USER_LABELS.contains(&k.as_str())))
        .filter(|(k, _)| !(r.commands && COMMAND_LABELS.contains(&k.as_str())))
        .map(|(k, v)| (k.clone(), json!(scrub.text(v))))
        .collect();
    let mut out = Map::new();
    out.insert("labels".into(), Value::Object(labels));
    out.insert("state".into(), json!(alert.state()));
    for key in ["summary", "description"] {
        if let Some(text) = alert.annotation(key) {
            out.insert(key.into(), json!(scrub.text(text)));
        }
    }
    Value::Object(out)
}

fn gpu_json(g: &GpuFindings, redaction: Redaction, scrub: &Scrubber) -> Value {
    let reasons: Vec<Value> = g
        .risk
        .top(REASONS)
        .map(|c| {
            json!({
                "feature": c.feature,
                "value": round(c.value),
                "contribution": round(c.contribution),
            })
        })
        .collect();
    let processes = |list: &[ProcessFinding]| -> Vec<Value> {
        list.iter()
            .take(8)
            .map(|p| process_json(p, redaction, scrub))
            .collect()
    };
    json!({
        "index": g.index,
        "uuid": g.uuid,
        "name": g.name,
        "up": g.up,
        "lost": g.lost,
        "risk": {
            "score": round(g.risk.score),
            "rule": g.risk.rule,
            "reasons": reasons,
        },
        "hardware_xids_24h": g.hardware_xids_24h,
        "new_hardware_xids": g.new_hardware_xids,
        "row_remap_failure": g.row_remap_failure,
        "uncorrectable_ecc_24h": round(g.uncorrectable_ecc_24h),
        "thermal_slowdown": g.thermal_slowdown,
        "idle": {
            "idle_seconds": round(g.idle.idle_seconds),
            "allocated": g.idle.allocated,
            "allocated_idle": g.idle.allocated_idle,
            "allocated_idle_seconds": round(g.idle.allocated_idle_seconds),
        },
        "ghost_processes": processes(&g.idle.ghosts),
        "long_running_processes": processes(&g.idle.long_running),
        "cost": {
            "busy": round(g.cost.busy),
            "idle": round(g.cost.idle),
            "hourly": round(g.cost.hourly),
        },
    })
}

fn process_json(p: &ProcessFinding, redaction: Redaction, scrub: &Scrubber) -> Value {
    let mut out = Map::new();
    out.insert("pid".into(), json!(p.pid));
    out.insert("liveness".into(), json!(p.liveness));
    out.insert("idle_seconds".into(), json!(round(p.idle_seconds)));
    if let Some(m) = p.memory_bytes {
        out.insert("memory_bytes".into(), json!(m));
    }
    if let Some(r) = p.runtime_seconds {
        out.insert("runtime_seconds".into(), json!(round(r)));
    }
    let mut put = |key: &str, value: &Option<String>| {
        if let Some(v) = value {
            out.insert(key.into(), json!(scrub.text(v)));
        }
    };
    if !redaction.users {
        put("user", &p.user);
        put("container", &p.container);
        put("pod", &p.pod);
        put("namespace", &p.namespace);
    }
    if !redaction.commands {
        put("process", &p.process);
        put("command", &p.command);
    }
    Value::Object(out)
}

fn fleet_json(f: &Findings) -> Value {
    let up = f.gpus.iter().filter(|g| g.up).count();
    let lost = f.gpus.iter().filter(|g| g.lost).count();
    let busy: f64 = f.gpus.iter().map(|g| g.cost.busy).sum();
    let idle: f64 = f.gpus.iter().map(|g| g.cost.idle).sum();
    let c = &f.capacity;
    json!({
        "gpus": f.gpus.len(),
        "up": up,
        "lost": lost,
        "mean_utilization": (c.gpus > 0).then(|| round(c.demand_gpus / c.gpus as f64)),
        "busy_share": round(c.busy_share),
        "idle_share": round(c.idle_share),
        "busy_cost": round(busy),
        "idle_cost": round(idle),
        "waste_ratio": (busy + idle > 0.0).then(|| round(idle / (busy + idle))),
        "scaling": {
            "direction": c.direction.as_str(),
            "recommended_gpus": c.recommended_gpus,
            "reason": c.reason,
        },
        "free_gpus": f.placement.free_gpus,
        "fragmentation_ratio": round(f.placement.fragmentation_ratio),
    })
}

/// Three decimals: enough for the model, fewer tokens.
fn round(x: f64) -> f64 {
    if x.is_finite() {
        (x * 1000.0).round() / 1000.0
    } else {
        0.0
    }
}

/// Replaces known sensitive names in free text.
struct Scrubber {
    redaction: Redaction,
    /// `(name, replacement)`, longest name first.
    names: Vec<(String, &'static str)>,
}

impl Scrubber {
    /// Names to hide, from the host, the alerts' label sets and the findings' processes.
    fn new(
        alert_labels: &[&BTreeMap<String, String>],
        findings: &Findings,
        hostname: &str,
        redaction: Redaction,
    ) -> Self {
        let mut names: BTreeSet<(String, &'static str)> = BTreeSet::new();
        let mut add = |value: Option<&String>, replacement: &'static str| {
            if let Some(v) = value.map(|v| v.trim()).filter(|v| v.chars().count() >= 2) {
                names.insert((v.to_string(), replacement));
            }
        };
        if redaction.hostnames {
            add(Some(&hostname.to_string()), "<host>");
            for labels in alert_labels {
                add(labels.get("hostname"), "<host>");
            }
        }
        let processes = findings
            .gpus
            .iter()
            .flat_map(|g| g.idle.ghosts.iter().chain(&g.idle.long_running));
        for p in processes {
            if redaction.users {
                for v in [&p.user, &p.container, &p.pod, &p.namespace] {
                    add(v.as_ref(), "<user>");
                }
            }
            if redaction.commands {
                add(p.command.as_ref(), "<command>");
                add(p.process.as_ref(), "<command>");
            }
        }
        for labels in alert_labels {
            if redaction.users {
                for l in USER_LABELS {
                    add(labels.get(l), "<user>");
                }
            }
            if redaction.commands {
                for l in COMMAND_LABELS {
                    add(labels.get(l), "<command>");
                }
            }
        }
        let mut names: Vec<(String, &'static str)> = names.into_iter().collect();
        names.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        Scrubber { redaction, names }
    }

    fn text(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (name, replacement) in &self.names {
            if out.contains(name.as_str()) {
                out = out.replace(name.as_str(), replacement);
            }
        }
        out
    }
}
