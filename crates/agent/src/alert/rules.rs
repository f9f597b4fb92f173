//! Alert rules: the condition language (what a rule looks at, and for added rules a
//! per-GPU field compared with a value), the rules of a configuration (the default table,
//! tuned, disabled or extended by `[[alerting.rules]]`), and their evaluation over the
//! engine's findings.
//!
//! Evaluation is pure: time comes from the findings, so `replay` fires exactly the alerts
//! the live agent would have. What holds becomes [`Candidate`]s; their lifecycle (pending,
//! firing, resolved) and inhibition are the book's ([`super::book`]).
//!
//! - [`defaults`](mod@defaults): the default rule table, whose names are a contract;
//! - [`evaluate`](mod@evaluate): which conditions hold, with the labels and annotations of
//!   each; [`health`](mod@health) for the health verdicts' two rules;
//!   [`instances`](mod@instances): what MIG instances add to them.

mod defaults;
mod evaluate;
mod health;
mod instances;

use std::time::Duration;

pub use defaults::{DEFAULT_RULES, defaults};
pub use evaluate::{Candidate, RuleInput, evaluate};

use crate::config::RuleConfig;

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
    OutsideScheduler,
    LongRunningProcess,
    ScaleOut,
    ScaleIn,
    CollectionFailing,
    /// A GPU's health verdict (or a node component's) is unhealthy.
    HealthUnhealthy,
    /// A GPU's health verdict (or a node component's) is degraded.
    HealthDegraded,
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

    /// The names added rules may use, for messages.
    fn known() -> String {
        let known: Vec<&str> = Field::NAMES.iter().map(|(n, _)| *n).collect();
        known.join(", ")
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

/// A rule from its parts (the default table and added rules build them alike).
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

/// An `[[alerting.rules]]` entry that cannot become a rule.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RuleError {
    #[error("rule {rule:?} is not a default rule and has no field to compare")]
    NoField { rule: String },
    #[error("rule {rule:?}: field {field:?} is not one of {known}", known = Field::known())]
    UnknownField { rule: String, field: String },
    #[error("rule {rule:?}: op must be >, >=, < or <=")]
    Op { rule: String },
    #[error("rule {rule:?}: value is missing")]
    NoValue { rule: String },
}

/// The rule set of a configuration: the defaults, tuned, disabled or extended by
/// `[[alerting.rules]]`.
pub fn from_config(risk_threshold: f64, tuning: &[RuleConfig]) -> Result<Vec<Rule>, RuleError> {
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
                let name = || t.name.clone();
                let field = t
                    .field
                    .as_deref()
                    .ok_or_else(|| RuleError::NoField { rule: name() })?;
                let field = Field::parse(field).ok_or_else(|| RuleError::UnknownField {
                    rule: name(),
                    field: field.to_string(),
                })?;
                let op = Op::parse(t.op.as_deref().unwrap_or(">"))
                    .ok_or_else(|| RuleError::Op { rule: name() })?;
                let value = t.value.ok_or_else(|| RuleError::NoValue { rule: name() })?;
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

#[cfg(test)]
mod tests;
