//! The analysis engine's findings as metric families: risk with its reasons, idle and
//! ghost findings, cost and owner time, scaling and placement advice, health verdicts.

use super::RenderOptions;
use super::families::{Families, flag};
use super::metrics::*;
use std::collections::BTreeMap;

use crate::advice::AdviceStats;
use crate::alert::AlertState;
use crate::alert::deliver::DeliveryStats;
use crate::engine::Findings;
use crate::engine::capacity::Direction;

/// Renders `findings` into `families` (declared after the native ones).
pub(super) fn render_analysis(
    families: &mut Families,
    findings: &Findings,
    options: &RenderOptions,
) {
    families.declare(ANALYSIS);
    families.family(&COST).set_help(format!(
        "Cost of the GPU's time in {} since gpu-sentinel started keeping state, by state (busy, idle).",
        options.currency
    ));
    let mut gpus: Vec<_> = findings.gpus.iter().collect();
    gpus.sort_by_key(|g| g.index);
    for g in &gpus {
        let index = g.index.to_string();
        let id: [&str; 2] = [&index, &g.uuid];
        // A GPU that does not answer has no score to speak of beyond its rule.
        if g.up || g.risk.rule.is_some() {
            families.family(&RISK_SCORE).push(&id, g.risk.score);
        }
        let contributions = families.family(&RISK_CONTRIBUTION);
        // The reasons, not every term: each feature would be a series a GPU.
        for c in g.risk.top(super::budget::RISK_REASONS_EXPOSED) {
            contributions.push(&[&index, &g.uuid, &*c.feature], c.contribution);
        }
        if let Some(rule) = &g.risk.rule {
            families
                .family(&RISK_RULE)
                .push(&[&index, &g.uuid, rule], 1.0);
        }
        if g.up {
            families
                .family(&IDLE_SECONDS)
                .push(&id, g.idle.idle_seconds);
            families
                .family(&ALLOCATED)
                .push(&id, flag(g.idle.allocated));
            families
                .family(&ALLOCATED_IDLE)
                .push(&id, flag(g.idle.allocated_idle));
            families
                .family(&GHOST_PROCESSES)
                .push(&id, g.idle.ghosts.len() as f64);
            families
                .family(&LONG_RUNNING_PROCESSES)
                .push(&id, g.idle.long_running.len() as f64);
            families
                .family(&OUTSIDE_SCHEDULER_PROCESSES)
                .push(&id, g.idle.outside_scheduler.len() as f64);
        }
        let cost = families.family(&COST);
        cost.push(&[&index, &g.uuid, "busy"], g.cost.busy);
        cost.push(&[&index, &g.uuid, "idle"], g.cost.idle);
        let owners = families.family(&OWNER_SECONDS);
        let exposed = g
            .cost
            .exposed
            .iter()
            .copied()
            .chain(std::iter::repeat(true));
        for ((owner, team, busy, idle), _) in g.cost.owners.iter().zip(exposed).filter(|(_, e)| *e)
        {
            owners.push(&[&index, &g.uuid, owner, team, "busy"], *busy);
            owners.push(&[&index, &g.uuid, owner, team, "idle"], *idle);
        }
    }
    let advice = &findings.capacity;
    let scale = families.family(&SCALE_RECOMMENDATION);
    for direction in Direction::ALL {
        scale.push(
            &["node", direction.as_str()],
            flag(advice.direction == direction),
        );
    }
    families
        .family(&SCALE_RECOMMENDED_GPUS)
        .push(&["node"], advice.recommended_gpus as f64);
    let placement = &findings.placement;
    families
        .family(&NODE_FREE_GPUS)
        .push(&[], placement.free_gpus as f64);
    families
        .family(&NODE_LARGEST_FREE_MEMORY)
        .push(&[], placement.largest_free_memory_bytes as f64);
    families
        .family(&NODE_FRAGMENTATION)
        .push(&[], placement.fragmentation_ratio);
    render_health(families, &gpus, findings);
}

/// `gpu_health_state`: the components of each GPU that are not healthy, with the repair
/// each asks for (a healthy fleet costs no series: the series budget has no room for eight
/// constant zeros a GPU, and only the sparse series carry the action, so a new action only
/// replaces a series); a component that recovers leaves, which Prometheus marks stale at the
/// next scrape, so its alert resolves. `gpu_node_health_state`, always present, is the node's verdict: 0 is
/// there to read when every GPU is healthy.
fn render_health(
    families: &mut Families,
    gpus: &[&crate::engine::GpuFindings],
    findings: &Findings,
) {
    let family = families.family(&HEALTH_STATE);
    for g in gpus {
        let index = g.index.to_string();
        for c in g
            .health
            .components
            .iter()
            .filter(|c| c.state != crate::engine::health::State::Healthy)
        {
            family.push(
                &[&index, &g.uuid, &c.component, c.action.as_str()],
                c.state.value(),
            );
        }
    }
    families
        .family(&NODE_HEALTH_STATE)
        .push(&[], findings.health.state.value());
}

/// `gpu_sentinel_alerts{alertname,state}`: every state of every rule, zeros included, so
/// a rule that stops firing shows 0 rather than vanishing.
pub(super) fn render_alerts(
    families: &mut Families,
    alerts: &BTreeMap<(String, AlertState), usize>,
) {
    families.declare(ALERTING);
    let family = families.family(&ALERTS);
    for name in crate::alert::rules::DEFAULT_RULES {
        for state in [AlertState::Pending, AlertState::Firing] {
            let n = alerts.get(&(name.to_string(), state)).copied().unwrap_or(0);
            family.push(&[name, state.as_str()], n as f64);
        }
    }
    for ((name, state), n) in alerts {
        let default = crate::alert::rules::DEFAULT_RULES.contains(&name.as_str());
        if !default && *state != AlertState::Resolved {
            family.push(&[name, state.as_str()], *n as f64);
        }
    }
}

/// Delivery counters and the outbox backlog.
pub(super) fn render_delivery(families: &mut Families, stats: &DeliveryStats) {
    families.declare(ALERTING);
    let family = families.family(&NOTIFICATIONS);
    for ((receiver, outcome), n) in &stats.notifications {
        family.push(&[receiver, outcome.as_str()], *n as f64);
    }
    families
        .family(&OUTBOX_PENDING)
        .push(&[], stats.pending as f64);
    families
        .family(&OUTBOX_DURABLE)
        .push(&[], flag(stats.durable));
    families
        .family(&OUTBOX_STORE_ERRORS)
        .push(&[], stats.store_errors as f64);
    families
        .family(&RATE_LIMIT_SUMMARIES)
        .push(&[], stats.summaries as f64);
    // A send stuck in a receiver shows here rather than silently.
    let in_flight = families.family(&DELIVERY_IN_FLIGHT);
    for (receiver, running) in &stats.in_flight {
        in_flight.push(&[receiver], running.as_secs_f64());
    }
    let capped = families.family(&DELIVERY_RETRY_AFTER_CAPPED);
    for (receiver, n) in &stats.retry_after_capped {
        capped.push(&[receiver], *n as f64);
    }
    let restarts = families.family(&DELIVERY_WORKER_RESTARTS);
    for (receiver, n) in &stats.worker_restarts {
        restarts.push(&[receiver], *n as f64);
    }
}

/// LLM advice request outcomes.
pub(super) fn render_advice(families: &mut Families, stats: &AdviceStats) {
    families.declare(ALERTING);
    let family = families.family(&ADVICE_REQUESTS);
    for (outcome, n) in &stats.requests {
        family.push(&[outcome], *n as f64);
    }
    families
        .family(&ADVICE_CACHED)
        .push(&[], stats.cached as f64);
}
