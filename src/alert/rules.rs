//! Alert rules: the default set over the engine's findings, their tuning in config, and the
//! Prometheus-like lifecycle (pending → firing after `for` → resolved).
//!
//! Evaluation is pure: time comes from the findings, so `replay` fires exactly the alerts
//! the live agent would have. Known-bad hardware states (`GpuLost`, `GpuHardwareXid`,
//! `GpuRowRemapFailure`, `GpuUncorrectableEccErrors`) fire at once. A lost GPU inhibits its
//! other alerts, and a ghost process `GpuAllocatedIdle` on its GPU ([`inhibited`]): they
//! keep firing in the book but are not notified.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use super::{Alert, AlertState, LabelSet, fingerprint};
use crate::config::RuleConfig;
use crate::engine::{Findings, GpuFindings};
use crate::model::CollectHealth;

/// What a rule's condition looks at.
#[derive(Debug, Clone, PartialEq)]
enum Condition {
    Lost,
    HardwareXid,
    RowRemapFailure,
    UncorrectableEcc,
    RiskHigh(f64),
    ThermalSlowdown,
    AllocatedIdle,
    GhostProcess,
    LongRunningProcess,
    ScaleOut,
    ScaleIn,
    CollectionFailing,
    /// An added rule: a per-GPU field compared with a value.
    Threshold {
        field: Field,
        op: Op,
        value: f64,
    },
}

/// Per-GPU values added rules may compare.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Field {
    Temperature,
    MemoryTemperature,
    Power,
    Utilization,
    MemoryUsedRatio,
    RiskScore,
    IdleSeconds,
}

impl Field {
    const NAMES: [(&'static str, Field); 7] = [
        ("temperature_celsius", Field::Temperature),
        ("memory_temperature_celsius", Field::MemoryTemperature),
        ("power_watts", Field::Power),
        ("utilization", Field::Utilization),
        ("memory_used_ratio", Field::MemoryUsedRatio),
        ("risk_score", Field::RiskScore),
        ("idle_seconds", Field::IdleSeconds),
    ];

    fn parse(name: &str) -> Option<Field> {
        Field::NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, f)| *f)
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Gt,
    Ge,
    Lt,
    Le,
}

impl Op {
    fn parse(text: &str) -> Option<Op> {
        match text {
            ">" => Some(Op::Gt),
            ">=" => Some(Op::Ge),
            "<" => Some(Op::Lt),
            "<=" => Some(Op::Le),
            _ => None,
        }
    }

    fn holds(self, left: f64, right: f64) -> bool {
        match self {
            Op::Gt => left > right,
            Op::Ge => left >= right,
            Op::Lt => left < right,
            Op::Le => left <= right,
        }
    }
}

/// One alert rule.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub name: String,
    pub severity: String,
    /// How long the condition must hold before the alert fires.
    pub for_: Duration,
    condition: Condition,
    /// Summary template: `{gpu}`, `{uuid}`, `{hostname}`, `{value}` are filled in.
    pub summary: String,
    pub runbook: String,
}

/// Names of the default rules, in evaluation order (DESIGN.md's contract).
pub const DEFAULT_RULES: [&str; 12] = [
    "GpuLost",
    "GpuHardwareXid",
    "GpuRowRemapFailure",
    "GpuUncorrectableEccErrors",
    "GpuFailureRiskHigh",
    "GpuThermalSlowdown",
    "GpuAllocatedIdle",
    "GpuGhostProcess",
    "GpuLongRunningProcess",
    "GpuFleetScaleOut",
    "GpuFleetScaleIn",
    "GpuCollectionFailing",
];

fn rule(
    name: &str,
    severity: &str,
    for_secs: u64,
    condition: Condition,
    summary: &str,
    runbook: &str,
) -> Rule {
    Rule {
        name: name.into(),
        severity: severity.into(),
        for_: Duration::from_secs(for_secs),
        condition,
        summary: summary.into(),
        runbook: runbook.into(),
    }
}

/// The default rules with the risk threshold of `[risk]`.
pub fn defaults(risk_threshold: f64) -> Vec<Rule> {
    vec![
        rule(
            "GpuLost",
            "critical",
            0,
            Condition::Lost,
            "GPU {gpu} on {hostname} is lost (fell off the bus or stopped answering)",
            "Drain the node; check `nvidia-smi` and the kernel log for XID 79; reset the GPU or reboot. A GPU that drops again goes to RMA.",
        ),
        rule(
            "GpuHardwareXid",
            "critical",
            0,
            Condition::HardwareXid,
            "GPU {gpu} on {hostname} raised hardware XID {value}",
            "Look the XID up in NVIDIA's XID catalog; drain jobs before a reset. Repeated hardware XIDs warrant RMA.",
        ),
        rule(
            "GpuRowRemapFailure",
            "critical",
            0,
            Condition::RowRemapFailure,
            "GPU {gpu} on {hostname} failed to remap a memory row",
            "A row-remap failure is NVIDIA's RMA signal: drain the GPU and open an RMA.",
        ),
        rule(
            "GpuUncorrectableEccErrors",
            "critical",
            0,
            Condition::UncorrectableEcc,
            "GPU {gpu} on {hostname} had {value} uncorrectable ECC errors in 24 h",
            "Jobs on this GPU may have crashed. Drain it, reset it so pending remaps apply, and watch for recurrence.",
        ),
        rule(
            "GpuFailureRiskHigh",
            "warning",
            15 * 60,
            Condition::RiskHigh(risk_threshold),
            "GPU {gpu} on {hostname} is at risk of failure (score {value})",
            "Move long jobs off this GPU before the next checkpoint; schedule a maintenance reset and check the reasons.",
        ),
        rule(
            "GpuThermalSlowdown",
            "warning",
            5 * 60,
            Condition::ThermalSlowdown,
            "GPU {gpu} on {hostname} is in thermal slowdown",
            "Check airflow, fans and inlet temperature of the node; a GPU much hotter than its peers points at its cooling.",
        ),
        rule(
            "GpuAllocatedIdle",
            "warning",
            0,
            Condition::AllocatedIdle,
            "GPU {gpu} on {hostname} is allocated but idle for {value}",
            "Ask the owner to release the GPU or scale the job down; consider an idle-reclaim policy.",
        ),
        rule(
            "GpuGhostProcess",
            "warning",
            0,
            Condition::GhostProcess,
            "GPU {gpu} on {hostname} holds memory for {value} dead process(es)",
            "The owning process is gone, a zombie or orphaned: kill it or its parent; if memory stays held, reset the GPU.",
        ),
        rule(
            "GpuLongRunningProcess",
            "info",
            0,
            Condition::LongRunningProcess,
            "GPU {gpu} on {hostname} runs {value} process(es) past the long-running limit",
            "Confirm with the owner that the job is meant to run this long.",
        ),
        rule(
            "GpuFleetScaleOut",
            "info",
            0,
            Condition::ScaleOut,
            "GPUs on {hostname} are saturated: {value} GPUs recommended",
            "Add capacity or queue work elsewhere.",
        ),
        rule(
            "GpuFleetScaleIn",
            "info",
            0,
            Condition::ScaleIn,
            "GPUs on {hostname} are mostly idle: {value} GPUs recommended",
            "Release or consolidate capacity.",
        ),
        rule(
            "GpuCollectionFailing",
            "warning",
            5 * 60,
            Condition::CollectionFailing,
            "GPU collection on {hostname} is failing",
            "Check gpu_sentinel_collector_success and the agent's log; the driver may be wedged.",
        ),
    ]
}

/// The rule set of a configuration: the defaults, tuned, disabled or extended by
/// `[[alerting.rules]]`. Errors name the rule.
pub fn from_config(risk_threshold: f64, tuning: &[RuleConfig]) -> Result<Vec<Rule>, String> {
    let mut rules = defaults(risk_threshold);
    for t in tuning {
        match rules.iter().position(|r| r.name == t.name) {
            Some(i) if t.disabled => {
                rules.remove(i);
            }
            Some(i) => {
                let r = &mut rules[i];
                apply_common(r, t);
                if let (Condition::RiskHigh(threshold), Some(v)) = (&mut r.condition, t.value) {
                    *threshold = v;
                }
            }
            None if t.disabled => {}
            None => {
                let field = t.field.as_deref().ok_or_else(|| {
                    format!(
                        "rule {:?} is not a default rule and has no field to compare",
                        t.name
                    )
                })?;
                let field = Field::parse(field).ok_or_else(|| {
                    let known: Vec<&str> = Field::NAMES.iter().map(|(n, _)| *n).collect();
                    format!(
                        "rule {:?}: field {field:?} is not one of {}",
                        t.name,
                        known.join(", ")
                    )
                })?;
                let op = Op::parse(t.op.as_deref().unwrap_or(">"))
                    .ok_or_else(|| format!("rule {:?}: op must be >, >=, < or <=", t.name))?;
                let value = t
                    .value
                    .ok_or_else(|| format!("rule {:?}: value is missing", t.name))?;
                let mut r = rule(
                    &t.name,
                    "warning",
                    0,
                    Condition::Threshold { field, op, value },
                    &format!("{} on GPU {{gpu}} of {{hostname}}: {{value}}", t.name),
                    "",
                );
                apply_common(&mut r, t);
                rules.push(r);
            }
        }
    }
    Ok(rules)
}

fn apply_common(r: &mut Rule, t: &RuleConfig) {
    if let Some(f) = t.for_ {
        r.for_ = f;
    }
    if let Some(s) = &t.severity {
        r.severity.clone_from(s);
    }
    if let Some(s) = &t.summary {
        r.summary.clone_from(s);
    }
    if let Some(s) = &t.runbook {
        r.runbook.clone_from(s);
    }
}

/// One rule's condition holding for one label set, before the lifecycle.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub labels: LabelSet,
    pub annotations: LabelSet,
    pub for_: Duration,
}

/// What rules read besides findings: collection health (absent in replay) and the host.
pub struct RuleInput<'a> {
    pub findings: &'a Findings,
    pub health: Option<&'a CollectHealth>,
    pub hostname: &'a str,
}

/// Every candidate alert the rules produce now (inhibition comes later: [`inhibited`]).
pub fn evaluate(rules: &[Rule], input: &RuleInput<'_>) -> Vec<Candidate> {
    let mut out = Vec::new();
    for rule in rules {
        match &rule.condition {
            Condition::ScaleOut | Condition::ScaleIn => node_rule(rule, input, &mut out),
            Condition::CollectionFailing => collection_rule(rule, input, &mut out),
            _ => {
                for gpu in &input.findings.gpus {
                    if let Some((value, description)) = gpu_condition(&rule.condition, gpu) {
                        out.push(candidate(
                            rule,
                            input.hostname,
                            Some(gpu),
                            &value,
                            description,
                        ));
                    }
                }
            }
        }
    }
    out
}

/// Value shown in the summary and the description with the numbers, when the condition holds.
fn gpu_condition(condition: &Condition, g: &GpuFindings) -> Option<(String, String)> {
    let reasons = || {
        let top: Vec<String> = g
            .risk
            .top(3)
            .map(|c| format!("{} = {:.2} (+{:.2})", c.feature, c.value, c.contribution))
            .collect();
        let rule = g
            .risk
            .rule
            .as_deref()
            .map(|r| format!("rule {r}; "))
            .unwrap_or_default();
        format!(
            "risk {:.2}: {rule}{}",
            g.risk.score,
            if top.is_empty() {
                "no weighted feature".into()
            } else {
                top.join(", ")
            }
        )
    };
    let processes = |list: &[crate::engine::idle::ProcessFinding]| {
        list.iter()
            .map(|p| {
                let mem = p.memory_bytes.map_or(String::new(), |b| {
                    format!(", {:.1} GiB", b as f64 / f64::from(1u32 << 30))
                });
                format!(
                    "pid {} ({}{}, {:?}, idle {:.0} min)",
                    p.pid,
                    p.owner(),
                    mem,
                    p.liveness,
                    p.idle_seconds / 60.0
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    match condition {
        Condition::Lost => g.lost.then(|| ("lost".into(), format!("The GPU stopped answering NVML. {}", reasons()))),
        Condition::HardwareXid => (!g.hardware_xids_24h.is_empty()).then(|| {
            let xids: Vec<String> = g.hardware_xids_24h.iter().map(u32::to_string).collect();
            let described: Vec<String> = g
                .hardware_xids_24h
                .iter()
                .map(|x| format!("XID {x}: {}", crate::xid::description(*x)))
                .collect();
            (xids.join(", "), format!("Hardware-fault XIDs in the last 24 h: {}.", described.join("; ")))
        }),
        Condition::RowRemapFailure => g.row_remap_failure.then(|| ("failed".into(), format!("Row remapping failed. {}", reasons()))),
        Condition::UncorrectableEcc => (g.uncorrectable_ecc_24h > 0.0).then(|| {
            (format!("{:.0}", g.uncorrectable_ecc_24h), format!("{:.0} uncorrectable ECC errors in 24 h. {}", g.uncorrectable_ecc_24h, reasons()))
        }),
        Condition::RiskHigh(threshold) => (g.up && g.risk.score >= *threshold)
            .then(|| (format!("{:.2}", g.risk.score), reasons())),
        Condition::ThermalSlowdown => g.thermal_slowdown.then(|| ("active".into(), "Clocks are cut by thermal slowdown.".into())),
        Condition::AllocatedIdle => g.idle.allocated_idle.then(|| {
            let minutes = g.idle.allocated_idle_seconds / 60.0;
            (format!("{minutes:.0} min"), format!("Memory is held while utilization stayed under the idle threshold for {minutes:.0} minutes."))
        }),
        Condition::GhostProcess => (!g.idle.ghosts.is_empty()).then(|| {
            (g.idle.ghosts.len().to_string(), format!("Memory held by processes that are gone, zombies or orphans: {}.", processes(&g.idle.ghosts)))
        }),
        Condition::LongRunningProcess => (!g.idle.long_running.is_empty()).then(|| {
            (g.idle.long_running.len().to_string(), format!("Long-running: {}.", processes(&g.idle.long_running)))
        }),
        Condition::Threshold { field, op, value } => {
            let actual = field_value(*field, g)?;
            op.holds(actual, *value).then(|| (format!("{actual:.2}"), format!("value {actual:.2}, threshold {value}")))
        }
        Condition::ScaleOut | Condition::ScaleIn | Condition::CollectionFailing => None,
    }
}

fn field_value(field: Field, g: &GpuFindings) -> Option<f64> {
    let s = &g.readings;
    match field {
        Field::Temperature => s.temperature_celsius,
        Field::MemoryTemperature => s.memory_temperature_celsius,
        Field::Power => s.power_watts,
        Field::Utilization => s.utilization,
        Field::MemoryUsedRatio => s.memory_used_ratio,
        Field::RiskScore => Some(g.risk.score),
        Field::IdleSeconds => Some(g.idle.idle_seconds),
    }
}

fn node_rule(rule: &Rule, input: &RuleInput<'_>, out: &mut Vec<Candidate>) {
    use crate::engine::capacity::Direction;
    let advice = &input.findings.capacity;
    let wanted = match rule.condition {
        Condition::ScaleOut => Direction::Out,
        _ => Direction::In,
    };
    if advice.direction == wanted {
        out.push(candidate(
            rule,
            input.hostname,
            None,
            &advice.recommended_gpus.to_string(),
            advice.reason.clone(),
        ));
    }
}

fn collection_rule(rule: &Rule, input: &RuleInput<'_>, out: &mut Vec<Candidate>) {
    let Some(health) = input.health else {
        return;
    };
    let failing: Vec<&str> = health
        .families
        .iter()
        .filter(|f| !f.success)
        .map(|f| f.name)
        .collect();
    if !health.source_up || !failing.is_empty() {
        let description = if health.source_up {
            format!("Collector families failing: {}.", failing.join(", "))
        } else {
            "NVML is unavailable; re-initialisation is being retried.".to_string()
        };
        out.push(candidate(
            rule,
            input.hostname,
            None,
            "failing",
            description,
        ));
    }
}

fn candidate(
    rule: &Rule,
    hostname: &str,
    gpu: Option<&GpuFindings>,
    value: &str,
    description: String,
) -> Candidate {
    let mut labels = LabelSet::new();
    labels.insert("alertname".into(), rule.name.clone());
    labels.insert("severity".into(), rule.severity.clone());
    labels.insert("hostname".into(), hostname.to_string());
    let (index, uuid) = gpu.map_or((String::new(), String::new()), |g| {
        (g.index.to_string(), g.uuid.clone())
    });
    if let Some(g) = gpu {
        labels.insert("gpu".into(), index.clone());
        labels.insert("uuid".into(), g.uuid.clone());
    }
    let summary = rule
        .summary
        .replace("{gpu}", &index)
        .replace("{uuid}", &uuid)
        .replace("{hostname}", hostname)
        .replace("{value}", value);
    let mut annotations = LabelSet::new();
    annotations.insert("summary".into(), summary);
    annotations.insert("description".into(), description);
    if !rule.runbook.is_empty() {
        annotations.insert("runbook".into(), rule.runbook.clone());
    }
    Candidate {
        labels,
        annotations,
        for_: rule.for_,
    }
}

/// Fingerprints of the alerts that are muted, as Alertmanager's inhibit rules would: every
/// other alert of a GPU while its `GpuLost` fires (the one that matters is that it is
/// gone), and `GpuAllocatedIdle` while a `GpuGhostProcess` of the same GPU fires (the
/// ghost explains the idle allocation). Muted alerts keep their lifecycle; they are only
/// not notified, so a GPU that comes back does not re-fire what was already known.
pub fn inhibited(book: &AlertBook) -> std::collections::BTreeSet<u64> {
    let firing_on = |name: &str| -> Vec<&str> {
        book.alerts
            .values()
            .filter(|a| a.state == AlertState::Firing && a.name() == name)
            .filter_map(|a| a.labels.get("uuid").map(String::as_str))
            .collect()
    };
    let lost = firing_on("GpuLost");
    let ghosts = firing_on("GpuGhostProcess");
    book.alerts
        .iter()
        .filter(|(_, a)| {
            let Some(uuid) = a.labels.get("uuid").map(String::as_str) else {
                return false;
            };
            (a.name() != "GpuLost" && lost.contains(&uuid))
                || (a.name() == "GpuAllocatedIdle" && ghosts.contains(&uuid))
        })
        .map(|(fp, _)| *fp)
        .collect()
}

/// Every alert's state, keyed by fingerprint: what survives a restart.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AlertBook {
    pub alerts: BTreeMap<u64, Alert>,
}

impl AlertBook {
    /// Advances every alert's lifecycle to `now` given the candidates that hold; resolved
    /// alerts are kept for `retention` (Alertmanager receivers are re-sent them).
    pub fn update(&mut self, now: DateTime<Utc>, candidates: Vec<Candidate>, retention: Duration) {
        let mut holding = BTreeMap::new();
        for c in candidates {
            let fp = fingerprint(&c.labels);
            let due = |active_at: DateTime<Utc>| {
                now - active_at >= TimeDelta::from_std(c.for_).unwrap_or(TimeDelta::MAX)
            };
            let alert = match self.alerts.remove(&fp) {
                Some(mut a) if a.state != AlertState::Resolved => {
                    a.annotations = c.annotations;
                    if a.state == AlertState::Pending && due(a.active_at) {
                        a.state = AlertState::Firing;
                        a.starts_at = Some(now);
                    }
                    a
                }
                // New, or back after resolving: a new alert.
                _ => {
                    let firing = c.for_.is_zero();
                    Alert {
                        labels: c.labels,
                        annotations: c.annotations,
                        state: if firing {
                            AlertState::Firing
                        } else {
                            AlertState::Pending
                        },
                        active_at: now,
                        starts_at: firing.then_some(now),
                        ends_at: None,
                    }
                }
            };
            holding.insert(fp, alert);
        }
        let keep_resolved = TimeDelta::from_std(retention).unwrap_or(TimeDelta::MAX);
        for (fp, mut a) in std::mem::take(&mut self.alerts) {
            match a.state {
                // Never fired: it just goes away.
                AlertState::Pending => {}
                AlertState::Firing => {
                    a.state = AlertState::Resolved;
                    a.ends_at = Some(now);
                    holding.insert(fp, a);
                }
                AlertState::Resolved => {
                    if a.ends_at.is_some_and(|e| now - e < keep_resolved) {
                        holding.insert(fp, a);
                    }
                }
            }
        }
        self.alerts = holding;
    }

    /// Alerts in a state, ordered by fingerprint.
    pub fn in_state(&self, state: AlertState) -> impl Iterator<Item = &Alert> {
        self.alerts.values().filter(move |a| a.state == state)
    }
}

#[cfg(test)]
mod tests;
