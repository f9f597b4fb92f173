//! Evaluation: which rules' conditions hold for which GPU (or the host) now, each as a
//! [`Candidate`] with the labels that identify it and annotations that explain it (the
//! numbers and reasons behind a risk score, the processes behind a ghost).

use std::time::Duration;

use super::{Condition, Field, Rule};
use crate::alert::LabelSet;
use crate::engine::idle::ProcessFinding;
use crate::engine::{Findings, GpuFindings};
use crate::model::{Allocation, CollectHealth};

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

/// Every candidate alert the rules produce now (inhibition comes later, in the book:
/// [`crate::alert::book::AlertBook::inhibited`]).
pub fn evaluate(rules: &[Rule], input: &RuleInput<'_>) -> Vec<Candidate> {
    let mut out = Vec::new();
    // The GPUs no finding-based condition can hold for (most, at most steps), told once a
    // step rather than by each rule in turn.
    let lowest_risk = (rules.iter())
        .filter_map(|r| match r.condition {
            Condition::RiskHigh(threshold) => Some(threshold),
            _ => None,
        })
        .fold(f64::INFINITY, f64::min);
    let quiet: Vec<bool> = (input.findings.gpus.iter())
        .map(|g| quiet(g, lowest_risk))
        .collect();
    for rule in rules {
        match &rule.condition {
            Condition::ScaleOut | Condition::ScaleIn => node_rule(rule, input, &mut out),
            Condition::CollectionFailing => collection_rule(rule, input, &mut out),
            Condition::HealthUnhealthy | Condition::HealthDegraded => {
                super::health::health_rule(rule, input, &mut out)
            }
            _ => {
                let skips_quiet = !matches!(rule.condition, Condition::Threshold { .. });
                for (gpu, &quiet) in input.findings.gpus.iter().zip(&quiet) {
                    if quiet && skips_quiet {
                        continue;
                    }
                    if let Some((value, mut description)) = gpu_condition(&rule.condition, gpu) {
                        // A GPU's health is its MIG instances' too: name what it takes down.
                        if rule.condition != Condition::AllocatedIdle {
                            description.push_str(&super::instances::affected(gpu));
                        }
                        let mut found =
                            candidate(rule, input.hostname, Some(gpu), &value, description);
                        if rule.condition == Condition::AllocatedIdle {
                            add_holder_labels(&mut found.labels, &gpu.idle.holders);
                        }
                        out.push(found);
                    }
                    if rule.condition == Condition::AllocatedIdle {
                        super::instances::allocated_idle(rule, input.hostname, gpu, &mut out);
                    }
                    if rule.condition == Condition::GhostProcess {
                        super::instances::ghosts(rule, input.hostname, gpu, &mut out);
                    }
                }
            }
        }
    }
    out
}

/// Whether none of the conditions [`gpu_condition`] and the MIG instances' rules read of a
/// GPU's findings can hold for `g`: `RiskHigh` at `lowest_risk` or above included, the
/// added rules' thresholds not (they read any value).
fn quiet(g: &GpuFindings, lowest_risk: f64) -> bool {
    let idle = &g.idle;
    !(g.lost
        || !g.hardware_xids_24h.is_empty()
        || g.row_remap_failure
        || g.uncorrectable_ecc_24h > 0.0
        || (g.up && g.risk.score >= lowest_risk)
        || g.thermal_slowdown
        || idle.allocated_idle
        || !idle.ghosts.is_empty()
        || !idle.outside_scheduler.is_empty()
        || !idle.long_running.is_empty()
        || !g.mig.is_empty())
}

/// Value shown in the summary and the description with the numbers, when the condition holds.
fn gpu_condition(condition: &Condition, g: &GpuFindings) -> Option<(String, String)> {
    let reasons = || {
        let top: Vec<String> = g
            .risk
            .top(3)
            .map(|c| {
                // The risk reads the links' sum; the description names the link.
                let link = match g.failing_nvlink {
                    Some(l) if c.feature.starts_with("nvlink_") => {
                        format!(" on link {} ({} errors while watched)", l.link, l.errors)
                    }
                    _ => String::new(),
                };
                format!(
                    "{} = {:.2} (+{:.2}){link}",
                    c.feature, c.value, c.contribution
                )
            })
            .collect();
        let rule = g
            .risk
            .rule
            .as_deref()
            .map(|r| format!("rule {r}; "))
            .unwrap_or_default();
        format!(
            "risk {:.2}: {rule}{}{}",
            g.risk.score,
            evidence(&g.risk.evidence),
            if top.is_empty() {
                "no weighted feature".into()
            } else {
                top.join(", ")
            }
        )
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
            let held = if g.idle.holders.is_empty() {
                "Memory is held".to_string()
            } else {
                format!("Allocated to {}", holders(&g.idle.holders))
            };
            (format!("{minutes:.0} min"), format!("{held} while utilization stayed under the idle threshold for {minutes:.0} minutes."))
        }),
        // Ghosts in MIG instances are alerts of their instances ([`super::instances::ghosts`]).
        Condition::GhostProcess => {
            // Asked of every GPU at every step, nearly always of none.
            if g.idle.ghosts.is_empty() {
                return None;
            }
            let ghosts: Vec<ProcessFinding> = g.idle.ghosts.iter().filter(|p| p.mig_uuid.is_none()).cloned().collect();
            (!ghosts.is_empty()).then(|| {
                (ghosts.len().to_string(), format!("Memory held by processes that are gone, zombies or orphans: {}.", processes(&ghosts)))
            })
        }
        Condition::OutsideScheduler => (!g.idle.outside_scheduler.is_empty()).then(|| {
            (g.idle.outside_scheduler.len().to_string(), format!("Running although no pod or job holds the GPU: {}.", processes(&g.idle.outside_scheduler)))
        }),
        Condition::LongRunningProcess => (!g.idle.long_running.is_empty()).then(|| {
            (g.idle.long_running.len().to_string(), format!("Long-running: {}.", processes(&g.idle.long_running)))
        }),
        Condition::Threshold { field, op, value } => {
            let actual = field_value(*field, g)?;
            op.holds(actual, *value).then(|| (format!("{actual:.2}"), format!("value {actual:.2}, threshold {value}")))
        }
        Condition::ScaleOut
        | Condition::ScaleIn
        | Condition::CollectionFailing
        | Condition::HealthUnhealthy
        | Condition::HealthDegraded => None,
    }
}

/// Processes for a description: `pid 4242 (research/trainer-0, 8.0 GiB, Gone, idle 60
/// min)`, joined with `; `.
pub(super) fn processes(list: &[ProcessFinding]) -> String {
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
}

/// The evidence behind a risk score and when it started: `memory errors (…) for 3 d 4 h
/// since 2026-11-28 14:00 UTC; `, or nothing when no family's evidence holds.
fn evidence(list: &[crate::engine::risk::Evidence]) -> String {
    list.iter()
        .map(|e| {
            let since = chrono::DateTime::from_timestamp(e.since, 0).map_or_else(
                || e.since.to_string(),
                |t| t.format("%Y-%m-%d %H:%M UTC").to_string(),
            );
            let hours = e.lasted_seconds.max(0) / 3600;
            let lasted = if hours >= 24 {
                format!("{} d {} h", hours / 24, hours % 24)
            } else {
                format!("{hours} h {} min", e.lasted_seconds.max(0) % 3600 / 60)
            };
            format!("{} for {lasted} since {since}; ", e.family)
        })
        .collect()
}

/// The holders a scheduler gave a GPU to, for a description: `pod ml/train-0 (container
/// trainer, team ml)`, `Slurm job 4242 (user alice, team hpc)`.
pub(super) fn holders(list: &[Allocation]) -> String {
    let mut described: Vec<String> = list
        .iter()
        .map(|a| {
            let what = match (&a.namespace, &a.pod, &a.hpc_job) {
                (Some(ns), Some(pod), _) => format!("pod {ns}/{pod}"),
                (_, _, Some(job)) => format!("Slurm job {job}"),
                _ => "an unnamed holder".to_string(),
            };
            let details: Vec<String> = [
                ("container", &a.container),
                ("user", &a.user),
                ("team", &a.team),
            ]
            .into_iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k} {v}")))
            .collect();
            if details.is_empty() {
                what
            } else {
                format!("{what} ({})", details.join(", "))
            }
        })
        .collect();
    described.dedup();
    described.join("; ")
}

/// `namespace`, `pod`, `hpc_job` and `team` labels naming who holds an allocated GPU:
/// several holders' distinct values joined with commas, in order.
pub(super) fn add_holder_labels(labels: &mut LabelSet, list: &[Allocation]) {
    type Field = fn(&Allocation) -> &Option<String>;
    let fields: [(&str, Field); 4] = [
        ("namespace", |a| &a.namespace),
        ("pod", |a| &a.pod),
        ("hpc_job", |a| &a.hpc_job),
        ("team", |a| &a.team),
    ];
    for (label, field) in fields {
        let values: std::collections::BTreeSet<&str> =
            list.iter().filter_map(|a| field(a).as_deref()).collect();
        if !values.is_empty() {
            let joined: Vec<&str> = values.into_iter().collect();
            labels.insert(label.into(), joined.join(","));
        }
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

pub(super) fn candidate(
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
    let summary = fill(
        &rule.summary,
        [
            ("{gpu}", &index),
            ("{uuid}", &uuid),
            ("{hostname}", hostname),
            ("{value}", value),
            ("{instance}", ""),
        ],
    );
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

/// `template` with each placeholder replaced by its value, in one pass: a `{` that begins
/// no placeholder is copied as it is, and a value is never searched for placeholders (a
/// host named `a{gpu}` stays so). A firing alert's summary is filled at every step: a chain
/// of `str::replace` allocated and searched the text once a placeholder.
pub(super) fn fill(template: &str, placeholders: [(&str, &str); 5]) -> String {
    let mut out = String::with_capacity(template.len() + 64);
    let mut rest = template;
    while let Some(at) = rest.find('{') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        match placeholders.iter().find(|(from, _)| tail.starts_with(from)) {
            Some((from, to)) => {
                out.push_str(to);
                rest = &tail[from.len()..];
            }
            None => {
                out.push('{');
                rest = &tail[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::FailingLink;
    use crate::engine::risk::Contribution;

    #[test]
    fn a_risk_from_nvlink_errors_names_the_failing_link() {
        let mut g = GpuFindings {
            up: true,
            ..GpuFindings::default()
        };
        g.risk.score = 0.9;
        g.risk.contributions = vec![
            Contribution {
                feature: "nvlink_errors_rate".into(),
                value: 12.0,
                contribution: 3.0,
            },
            Contribution {
                feature: "temperature_level".into(),
                value: 0.2,
                contribution: 0.1,
            },
        ];
        g.failing_nvlink = Some(FailingLink {
            link: 11,
            errors: 4200,
        });
        let (_, description) =
            gpu_condition(&Condition::RiskHigh(0.7), &g).expect("the condition holds");
        assert!(
            description.contains("nvlink_errors_rate = 12.00 (+3.00) on link 11 (4200 errors"),
            "{description}"
        );
        assert!(
            !description.contains("temperature_level = 0.20 (+0.10) on link"),
            "{description}"
        );
    }

    #[test]
    fn a_summary_is_filled_as_the_chain_of_replacements_fills_it() {
        let chain = |template: &str, p: [(&str, &str); 5]| {
            p.iter()
                .fold(template.to_string(), |s, (from, to)| s.replace(from, to))
        };
        let templates = [
            "GPU {gpu} ({uuid}) on {hostname}: risk {value}{instance}",
            "no placeholder at all",
            "",
            "{gpu}{gpu}{value}",
            "braces { alone } and {unknown} and {gpu}",
            "{{gpu}}",
            "ends with {",
            "{instance}{hostname}",
        ];
        // Values without braces: the one pass and the chain agree.
        let values = [
            ["3", "GPU-1", "node-1", "0.93", ""],
            ["", "", "", "", ""],
            ["2", "u", "host}", "}", ""],
        ];
        for template in templates {
            for v in values {
                let p = [
                    ("{gpu}", v[0]),
                    ("{uuid}", v[1]),
                    ("{hostname}", v[2]),
                    ("{value}", v[3]),
                    ("{instance}", v[4]),
                ];
                assert_eq!(fill(template, p), chain(template, p), "{template:?} {v:?}");
            }
        }
        // A value is not searched for placeholders, where the chain replaced in it too.
        let p = [
            ("{gpu}", "1"),
            ("{uuid}", "GPU-{value}"),
            ("{hostname}", "a{gpu}"),
            ("{value}", "v"),
            ("{instance}", ""),
        ];
        assert_eq!(fill("{uuid} on {hostname}", p), "GPU-{value} on a{gpu}");
        assert_eq!(fill("{host{gpu}name}", p), "{host1name}");
    }
}
