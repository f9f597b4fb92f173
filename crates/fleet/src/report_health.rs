//! The health verdict of each GPU in the report's risk table at the period's end: its
//! state, the repair its worst components ask for, and since when it has been so — read
//! from what the agents exposed (`gpu_health_state{component,action}` for each component
//! that is not healthy, `gpu_node_health_state` always), never inferred from other series.
//!
//! `gpu_health_state` is sparse: a healthy component has no series, and one that recovers
//! simply stops. So a component series is *current* only if its last sample is from its
//! host's last scrape, told by the node's series (always there); an older last sample is a
//! component that recovered (or changed action: a new series took over). A host whose agent
//! exposed no `gpu_node_health_state` in the period's last hour (an agent without verdicts,
//! or a store of dcgm-exporter's metrics) gives its GPUs no verdict: `unknown`, never
//! `healthy`.
//!
//! Both reads are raw samples planned by the store's limits ([`super::plan`]): the last
//! hour of both families (the node's series is one a host), then, for the table's GPUs
//! that are not healthy only, their component series over the period, from which the start
//! of the current stretch is found.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde::Serialize;

use super::plan::shard::{quote, select};
use super::plan::{Planner, Query, Shape};
use super::prom::Series;
use crate::engine::health::{Action, State};

/// The families the verdicts are read from.
pub(crate) const HEALTH_FAMILIES: [&str; 2] = ["gpu_health_state", "gpu_node_health_state"];

/// How far back the current verdicts are looked for: the risk review's hour.
const LAST: Duration = Duration::from_secs(3600);

/// One component of a GPU that is not healthy at the period's end.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ComponentVerdict {
    pub component: String,
    /// `degraded` or `unhealthy`.
    pub state: &'static str,
    /// The repair it asks for; null where the agent exposed none (before the label existed).
    pub action: Option<String>,
}

/// A GPU's verdict at the period's end.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuVerdict {
    /// `healthy`, `degraded`, `unhealthy`, or `unknown` where its host exposed no verdicts.
    pub state: &'static str,
    /// The repair its worst components ask for (`none` when healthy); null when unknown.
    pub action: Option<String>,
    /// When its current state began: the first sample of the stretch, without a break of
    /// more than two scrapes, in which it was this bad or worse (the period's first sample
    /// when it already was then). Null when healthy or unknown.
    pub since: Option<DateTime<Utc>>,
    /// Its components that are not healthy, worst first.
    pub components: Vec<ComponentVerdict>,
}

impl GpuVerdict {
    pub fn unknown() -> GpuVerdict {
        GpuVerdict {
            state: "unknown",
            action: None,
            since: None,
            components: Vec::new(),
        }
    }

    pub(crate) fn is_unhealthy(&self) -> bool {
        self.state == "unhealthy"
    }
}

/// A GPU in the store: its host (`instance`) and UUID.
pub type GpuKey = (String, String);

/// The verdicts at `to` of the GPUs on hosts that expose them (those absent are unknown, or
/// healthy where their host exposed a verdict: [`Verdicts::of`]).
#[derive(Debug, Default)]
pub struct Verdicts {
    /// Hosts whose agent exposed a node verdict in the last hour.
    reporting: std::collections::HashSet<String>,
    /// GPUs with a current component that is not healthy.
    gpus: HashMap<GpuKey, GpuVerdict>,
}

impl Verdicts {
    /// The verdict of the GPU `uuid` on `host`.
    pub fn of(&self, host: &str, uuid: &str) -> GpuVerdict {
        if let Some(v) = self.gpus.get(&(host.to_string(), uuid.to_string())) {
            return v.clone();
        }
        if self.reporting.contains(host) {
            GpuVerdict {
                state: "healthy",
                action: Some("none".to_string()),
                since: None,
                components: Vec::new(),
            }
        } else {
            GpuVerdict::unknown()
        }
    }

    /// The GPUs unhealthy at the period's end.
    pub fn unhealthy(&self) -> impl Iterator<Item = &GpuKey> {
        self.gpus
            .iter()
            .filter(|(_, v)| v.is_unhealthy())
            .map(|(k, _)| k)
    }

    /// The verdicts from the raw samples of the last hour: `nodes` of
    /// `gpu_node_health_state`, `components` of `gpu_health_state`. A component is current
    /// when its last sample is within `tolerance` of its host's last.
    pub(crate) fn from_series(
        nodes: &[Series],
        components: &[Series],
        tolerance: Duration,
    ) -> Self {
        let mut last_scrape: HashMap<&str, DateTime<Utc>> = HashMap::new();
        for s in nodes {
            let host = label(&s.labels, "instance");
            if let Some(&(at, _)) = s.points.last() {
                let entry = last_scrape.entry(host).or_insert(at);
                *entry = (*entry).max(at);
            }
        }
        let tolerance = TimeDelta::from_std(tolerance).unwrap_or(TimeDelta::zero());
        let mut current: BTreeMap<GpuKey, Vec<ComponentVerdict>> = BTreeMap::new();
        for s in components {
            let host = label(&s.labels, "instance");
            let (Some(&(at, value)), Some(&scrape)) = (s.points.last(), last_scrape.get(host))
            else {
                continue;
            };
            let Some(state) = state_name(value) else {
                continue;
            };
            if at + tolerance < scrape {
                continue;
            }
            let action = Some(label(&s.labels, "action"))
                .filter(|a| !a.is_empty())
                .map(str::to_string);
            current
                .entry((host.to_string(), label(&s.labels, "uuid").to_string()))
                .or_default()
                .push(ComponentVerdict {
                    component: label(&s.labels, "component").to_string(),
                    state,
                    action,
                });
        }
        let gpus = current
            .into_iter()
            .map(|(key, mut components)| {
                components.sort_by_key(|c| std::cmp::Reverse(rank(c.state, c.action.as_deref())));
                let worst = components[0].state;
                let action = components
                    .iter()
                    .filter(|c| c.state == worst)
                    .filter_map(|c| c.action.clone())
                    .max_by_key(|a| action_rank(a));
                let verdict = GpuVerdict {
                    state: worst,
                    action,
                    since: None,
                    components,
                };
                (key, verdict)
            })
            .collect();
        Verdicts {
            reporting: last_scrape.keys().map(|h| h.to_string()).collect(),
            gpus,
        }
    }

    /// Sets each listed GPU's `since` from its component series over the period, `gap` the
    /// longest break between samples of one stretch.
    pub fn date(&mut self, history: &[Series], gap: Duration) {
        let gap = TimeDelta::from_std(gap).unwrap_or(TimeDelta::MAX);
        // The GPU's worst value at each instant any of its component series has a sample.
        let mut worst: HashMap<GpuKey, BTreeMap<DateTime<Utc>, f64>> = HashMap::new();
        for s in history {
            let key = (
                label(&s.labels, "instance").to_string(),
                label(&s.labels, "uuid").to_string(),
            );
            let timeline = worst.entry(key).or_default();
            for &(at, v) in &s.points {
                let w = timeline.entry(at).or_insert(v);
                *w = w.max(v);
            }
        }
        for (key, verdict) in &mut self.gpus {
            let Some(timeline) = worst.get(key) else {
                continue;
            };
            let floor = if verdict.is_unhealthy() { 2.0 } else { 1.0 };
            let mut since = None;
            let mut next: Option<DateTime<Utc>> = None;
            for (&at, &v) in timeline.iter().rev() {
                if v < floor || next.is_some_and(|n| n - at > gap) {
                    break;
                }
                since = Some(at);
                next = Some(at);
            }
            verdict.since = since;
        }
    }

    /// The GPUs of `keys` that are not healthy, for the history read.
    fn dated(&self, keys: &[GpuKey]) -> Vec<GpuKey> {
        keys.iter()
            .filter(|k| self.gpus.contains_key(*k))
            .cloned()
            .collect()
    }
}

/// The verdicts at `to` (`tolerance`: half the scrape interval), every read planned.
pub fn current(planner: &Planner<'_>, to: DateTime<Utc>) -> anyhow::Result<Verdicts> {
    let every = planner.interval;
    let raw = |family: &'static str| Query {
        reads: vec![(family.to_string(), 1.0)],
        shape: Shape::Raw {
            every,
            phase: Duration::ZERO,
        },
        by_host: true,
        per_series: true,
        text: Box::new(move |p| format!("{}[{}]", select(family, &[p.hosts]), p.window)),
    };
    let from = to - TimeDelta::from_std(LAST).unwrap_or(TimeDelta::hours(1));
    let (nodes, components) = std::thread::scope(|scope| {
        let nodes = scope.spawn(|| planner.raw(&raw("gpu_node_health_state"), from, to));
        let components = scope.spawn(|| planner.raw(&raw("gpu_health_state"), from, to));
        (super::prom::joined(nodes), super::prom::joined(components))
    });
    Ok(Verdicts::from_series(&nodes?, &components?, every / 2))
}

/// Dates the verdicts of the GPUs `keys` that are not healthy from their component series
/// over `(from, to]`.
pub fn date(
    verdicts: &mut Verdicts,
    planner: &Planner<'_>,
    keys: &[GpuKey],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> anyhow::Result<()> {
    let keys = verdicts.dated(keys);
    if keys.is_empty() {
        return Ok(());
    }
    let uuids: Vec<String> = keys.iter().map(|(_, u)| regex::escape(u)).collect();
    let uuids = format!("uuid=~\"{}\"", quote(&uuids.join("|")));
    let every = planner.interval;
    let query = Query {
        reads: vec![("gpu_health_state".to_string(), 1.0)],
        shape: Shape::Raw {
            every,
            phase: Duration::ZERO,
        },
        by_host: true,
        per_series: true,
        text: Box::new(move |p| {
            format!(
                "{}[{}]",
                select("gpu_health_state", &[&uuids, p.hosts]),
                p.window
            )
        }),
    };
    let history = planner.raw(&query, from, to)?;
    // A stretch survives up to two missed scrapes.
    verdicts.date(&history, every * 5 / 2);
    Ok(())
}

fn label<'s>(labels: &'s BTreeMap<String, String>, name: &str) -> &'s str {
    labels.get(name).map_or("", String::as_str)
}

/// The state a sample of `gpu_health_state` says (its values are the agent's
/// [`State::value`]); a healthy component has no series, so 0 is not a verdict here.
fn state_name(value: f64) -> Option<&'static str> {
    if value >= State::Unhealthy.value() - 0.5 {
        Some(State::Unhealthy.as_str())
    } else if value >= State::Degraded.value() - 0.5 {
        Some(State::Degraded.as_str())
    } else {
        None
    }
}

/// How much of the node an action takes down now, as the agent orders them
/// ([`Action`]'s order); an action this version does not know ranks lowest.
fn action_rank(action: &str) -> Option<Action> {
    [
        Action::None,
        Action::RestartJob,
        Action::ResetGpu,
        Action::InspectHardware,
        Action::DrainAndReboot,
    ]
    .into_iter()
    .find(|a| a.as_str() == action)
}

fn rank(state: &str, action: Option<&str>) -> (Option<State>, Option<Action>) {
    let state = State::ALL.into_iter().find(|s| s.as_str() == state);
    (state, action.and_then(action_rank))
}

#[cfg(test)]
mod tests;
