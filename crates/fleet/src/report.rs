//! The fleet report's figures, from the store's answers to a handful of PromQL queries.
//!
//! Every sum over time happens in the store (`sum by`, `increase`, `*_over_time`,
//! subqueries): what comes back is one row per owner, host and GPU, or one point per GPU
//! and hour ([`super::hourly`]) — never raw samples. Here those rows are only matched to
//! teams (`[[teams]]`), combined, priced and ranked. The store reads each family once per
//! period: the owner series for the team totals, the idle holdings and the capacity plan's
//! last month; utilization and power for every fleet figure. The independent queries run
//! side by side, as many at once as the client allows ([`super::prom::CONCURRENT`]).
//!
//! GPU-hours come from `gpu_owner_seconds_total{owner,state}`: the agent charges every
//! collection interval of a held GPU to its owner, as `busy` or `idle` by its idle threshold.
//! So *held* = busy + idle, and efficiency = busy ÷ held. An owner is a namespace where
//! Kubernetes told the agent one, else a user (`[cost] owner`); it is matched against a
//! team's `namespaces` and `users` patterns both, and its host against `hosts`. An owner the
//! report's teams do not claim keeps the `team` label the agent gave it, if any.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::dialect::Dialect;
pub use super::figures::{Capacity, Energy, NIGHT, RiskEntry, Scale, Tco};
use super::figures::{capacity, earlier_months, energy, risk, scale, tco};
use super::hourly::Hourly;
pub(crate) use super::hourly::{HeatCell, NodeHeatmap};
use super::prom::{Client, Sample, joined};
use super::reading::Reading;
pub(crate) use super::reading::StoreUse;
pub use super::spec::ReportSpec;
use crate::config::{Holder, UNASSIGNED, team_of};
use crate::engine::cost::hourly_cost;
use std::thread::scope;

/// The report: the contract of `report --format json` (docs/fleet.md).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    /// Which metric dialect the figures come from.
    pub source: &'static str,
    /// What was read: recording rules' hourly records or raw samples, and what it cost.
    pub store: StoreUse,
    pub currency: String,
    pub teams: Vec<TeamReport>,
    pub fleet: FleetReport,
}

/// GPU time held in a period, split into busy and idle, and what the idle part cost.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Usage {
    pub gpu_hours: f64,
    pub busy_gpu_hours: f64,
    pub idle_gpu_hours: f64,
    /// busy ÷ held; 0 when nothing was held.
    pub(crate) efficiency: f64,
    /// Idle GPU-hours × the hourly cost of a GPU (depreciation or rent, plus the measured
    /// power of idle GPUs at the electricity price).
    pub waste_cost: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct TeamReport {
    pub team: String,
    #[serde(flatten)]
    pub usage: Usage,
    /// The same figures over the period before.
    pub previous: Usage,
    /// The largest idle holdings: owner, host and GPU.
    pub top_idle: Vec<IdleHolding>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IdleHolding {
    pub owner: String,
    pub host: String,
    pub gpu: String,
    pub idle_gpu_hours: f64,
    pub waste_cost: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct FleetReport {
    /// GPUs seen in the period.
    pub gpus: usize,
    /// Mean utilization over the period and the GPUs.
    pub utilization: f64,
    pub scale: Scale,
    pub capacity: Capacity,
    pub tco: Tco,
    pub energy: Energy,
    /// The GPUs most at risk at the end of the period.
    pub risk: Vec<RiskEntry>,
    /// Mean fleet utilization per UTC day and hour.
    pub heatmap: Vec<HeatCell>,
    /// Mean utilization of each host over time.
    pub node_heatmap: NodeHeatmap,
}

/// Idle holdings listed per team.
const TOP_IDLE: usize = 5;

pub(crate) use super::dialect::OWNER_METRIC;

/// Builds the report by querying `client`.
pub fn build(client: &Client, spec: &ReportSpec) -> anyhow::Result<Report> {
    let window = (spec.to - spec.from).num_seconds().max(1);
    let dialect = Dialect::detect(client, spec.from, spec.to, spec.memory_floor_mib)?;
    let reading = Reading::open(client, dialect, spec)?;
    let reading = &reading;
    let previous_from = spec.from - chrono::TimeDelta::seconds(window);
    // Every read below is independent of the others; the slowest are started first.
    let (current, hourly, previous, earlier, risk) = scope(|s| {
        let current = s.spawn(|| reading.usage(spec.from, spec.to, true));
        let hourly = s.spawn(|| Hourly::fetch(reading, spec.from, spec.to));
        let previous = s.spawn(|| reading.usage(previous_from, spec.from, false));
        let earlier = s.spawn(|| earlier_months(reading, spec, window));
        let risk = s.spawn(|| match dialect {
            Dialect::Native => risk(reading, spec),
            // dcgm-exporter's metrics carry no risk score; `replay --prometheus` runs the
            // engine over them.
            Dialect::Dcgm { .. } => Ok(Vec::new()),
        });
        (
            joined(current),
            joined(hourly),
            joined(previous),
            joined(earlier),
            joined(risk),
        )
    });
    // A name the store's index listed may still have no sample in the period.
    let hourly = hourly?;
    if hourly.gpus.is_empty() {
        return Err(Dialect::no_samples(
            dialect.utilization_metric(),
            client,
            spec.from,
            spec.to,
        ));
    }
    let current = current?;
    if dialect == Dialect::Native && current.is_empty() {
        return Err(Dialect::no_samples(
            OWNER_METRIC,
            client,
            spec.from,
            spec.to,
        ));
    }
    let previous = previous?;

    // The power of the GPU-hours whose mean utilization was under the idle threshold.
    let hourly_cost = hourly_cost(&spec.cost, hourly.idle_power(spec.idle_threshold));
    let teams = teams(client, spec, &current, &previous, hourly_cost)?;
    let held = |rows: &[Sample]| -> f64 {
        rows.iter()
            .filter(|r| matches!(r.label("state"), "busy" | "idle"))
            .map(|r| r.value.max(0.0) / 3600.0)
            .sum()
    };
    let capacity = capacity(
        earlier?,
        &hourly,
        (held(&current), held(&previous)),
        spec,
        window,
    );
    let store = reading.store_use(spec.from, spec.to);
    tracing::debug!(?store, "what the report read");
    Ok(Report {
        from: spec.from,
        to: spec.to,
        source: dialect.source(),
        store,
        currency: spec.cost.currency.clone(),
        teams,
        fleet: FleetReport {
            gpus: hourly.gpus.len(),
            utilization: hourly.utilization(),
            scale: scale(&hourly.gpu_means(), spec),
            capacity,
            tco: tco(&hourly, spec, window),
            energy: energy(&hourly, spec),
            risk: risk?,
            heatmap: hourly.heatmap(),
            node_heatmap: hourly.node_heatmap(),
        },
    })
}

/// The teams' figures from the period's rows per GPU and the previous period's.
fn teams(
    client: &Client,
    spec: &ReportSpec,
    current: &[Sample],
    previous: &[Sample],
    hourly: f64,
) -> anyhow::Result<Vec<TeamReport>> {
    let mut teams: BTreeMap<String, TeamReport> = BTreeMap::new();
    for (rows, previous) in [(current, false), (previous, true)] {
        for row in rows {
            let report = entry(&mut teams, team_for(spec, row));
            let usage = if previous {
                &mut report.previous
            } else {
                &mut report.usage
            };
            let hours = row.value.max(0.0) / 3600.0;
            match row.label("state") {
                "busy" => usage.busy_gpu_hours += hours,
                "idle" => usage.idle_gpu_hours += hours,
                _ => continue,
            }
        }
    }
    // The period's idle rows per GPU are the idle holdings.
    for row in current.iter().filter(|row| row.label("state") == "idle") {
        let hours = row.value.max(0.0) / 3600.0;
        if hours <= 0.0 {
            continue;
        }
        entry(&mut teams, team_for(spec, row))
            .top_idle
            .push(IdleHolding {
                owner: row.label("owner").to_string(),
                host: row.label("instance").to_string(),
                gpu: row.label("gpu").to_string(),
                idle_gpu_hours: hours,
                waste_cost: hours * hourly,
            });
    }
    let mut teams: Vec<TeamReport> = teams
        .into_values()
        .filter(|t| spec.team.as_ref().is_none_or(|only| &t.team == only))
        .map(|mut t| {
            t.usage.finish(hourly);
            t.previous.finish(hourly);
            t.top_idle
                .sort_by(|a, b| b.idle_gpu_hours.total_cmp(&a.idle_gpu_hours));
            t.top_idle.truncate(TOP_IDLE);
            t
        })
        .collect();
    teams.sort_by(|a, b| b.usage.gpu_hours.total_cmp(&a.usage.gpu_hours));
    if let Some(only) = &spec.team {
        anyhow::ensure!(
            !teams.is_empty(),
            "team {only:?} held no GPU in {} between {} and {}",
            client.base(),
            spec.from,
            spec.to
        );
    }
    Ok(teams)
}

fn entry(teams: &mut BTreeMap<String, TeamReport>, team: String) -> &mut TeamReport {
    teams.entry(team.clone()).or_insert_with(|| TeamReport {
        team,
        usage: Usage::default(),
        previous: Usage::default(),
        top_idle: Vec::new(),
    })
}

impl Usage {
    fn finish(&mut self, hourly: f64) {
        self.gpu_hours = self.busy_gpu_hours + self.idle_gpu_hours;
        self.efficiency = if self.gpu_hours > 0.0 {
            self.busy_gpu_hours / self.gpu_hours
        } else {
            0.0
        };
        self.waste_cost = self.idle_gpu_hours * hourly;
    }
}

/// The team of one answer row: the first of the report's `[[teams]]` claiming its owner (as
/// namespace or user) or its host; failing that, the `team` label the agent gave it from
/// its own `[[teams]]`; failing that, `unassigned`.
fn team_for(spec: &ReportSpec, row: &Sample) -> String {
    let owner = Some(row.label("owner")).filter(|o| !o.is_empty());
    let host = Some(row.label("instance")).filter(|h| !h.is_empty());
    let team = team_of(
        &spec.teams,
        &Holder {
            namespace: owner,
            user: owner,
            slurm_account: None,
            host,
        },
    );
    if team != UNASSIGNED {
        return team.to_string();
    }
    match row.label("team") {
        "" => UNASSIGNED.to_string(),
        labelled => labelled.to_string(),
    }
}
