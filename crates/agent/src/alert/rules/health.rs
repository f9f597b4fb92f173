//! `GpuUnhealthy` and `GpuDegraded`: one alert per GPU in that state (an unhealthy GPU
//! does not also raise the degraded one), and one per node component in it, each with the
//! repair action as the `action` label (the GPU's: the most disruptive its worst
//! components ask for) and the components behind it, with their reasons, in the
//! description, followed on a GPU in MIG mode by its instances and their holders. The
//! verdicts hold against flapping already; the rule's `for` only keeps short-lived
//! degradations from paging.

use std::fmt::Write as _;

use super::evaluate::{RuleInput, candidate};
use super::{Candidate, Condition, Rule};
use crate::engine::health::{State, Verdict};

/// The components of `verdicts` in `state`, as the summary's value (`memory, xid`) and
/// the description (`memory: … → reset_gpu; xid: … → reset_gpu`).
fn described<'a>(verdicts: impl Iterator<Item = &'a Verdict>, state: State) -> (String, String) {
    let mut names = Vec::new();
    let mut description = String::new();
    for v in verdicts.filter(|v| v.state == state) {
        names.push(v.component.to_string());
        if !description.is_empty() {
            description.push_str("; ");
        }
        let _ = write!(
            description,
            "{}: {} (action {}, since {})",
            v.component,
            v.reason,
            v.action.as_str(),
            v.since.format("%Y-%m-%d %H:%M UTC")
        );
    }
    (names.join(", "), description)
}

pub(super) fn health_rule(rule: &Rule, input: &RuleInput<'_>, out: &mut Vec<Candidate>) {
    let state = match rule.condition {
        Condition::HealthUnhealthy => State::Unhealthy,
        _ => State::Degraded,
    };
    for gpu in input
        .findings
        .gpus
        .iter()
        .filter(|g| g.health.state == state)
    {
        let (value, mut description) = described(gpu.health.components.iter(), state);
        // A GPU's verdict is its MIG instances' too: name what a reset or drain takes down.
        description.push_str(&super::instances::affected(gpu));
        let mut found = candidate(rule, input.hostname, Some(gpu), &value, description);
        found
            .labels
            .insert("action".into(), gpu.health.action.as_str().into());
        out.push(found);
    }
    for component in input
        .findings
        .health
        .components
        .iter()
        .filter(|c| c.state == state)
    {
        let (value, description) = described(std::iter::once(component), state);
        let mut found = candidate(rule, input.hostname, None, &value, description);
        let summary = rule
            .summary
            .replace("GPU {gpu} on ", "The node ")
            .replace("{hostname}", input.hostname)
            .replace("{value}", &value);
        found.annotations.insert("summary".into(), summary);
        found
            .labels
            .insert("action".into(), component.action.as_str().into());
        found
            .labels
            .insert("component".into(), component.component.to_string());
        out.push(found);
    }
}
