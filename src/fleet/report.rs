//! The fleet report's figures, from the store's answers to a handful of PromQL queries.
//!
//! Every sum over GPUs and time happens in the store (`sum by`, `increase`, `*_over_time`,
//! subqueries): what comes back is one row per owner and host, per GPU for the per-GPU
//! figures, or one point per hour for the heatmap — never raw samples. Here those rows are
//! only matched to teams (`[[teams]]`), priced and ranked.
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
pub use super::figures::{
    Capacity, Energy, HeatCell, NIGHT, NodeHeatmap, NodeRow, RiskEntry, Scale, Tco,
};
use super::figures::{
    capacity, energy, fleet_utilization, heatmap, node_heatmap, risk, scale, tco,
};
use super::prom::{Client, Sample};
pub use super::spec::ReportSpec;
use crate::config::{Holder, UNASSIGNED, team_of};
use crate::engine::cost::hourly_cost;

/// The report: the contract of `report --format json` (docs/fleet.md).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    /// Which metric dialect the figures come from.
    pub source: &'static str,
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
    pub efficiency: f64,
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

pub use super::dialect::OWNER_METRIC;

/// Builds the report by querying `client`.
pub fn build(client: &Client, spec: &ReportSpec) -> anyhow::Result<Report> {
    let window = (spec.to - spec.from).num_seconds().max(1);
    let step = spec.step.as_secs().max(1);
    let dialect = Dialect::detect(client, window, spec.to, spec.memory_floor_mib)?;
    let gpus = count_gpus(client, dialect, spec, window)?;

    let host = dialect.host();
    // Hour by hour: the power of the GPU-hours whose mean utilization was under the idle
    // threshold (a per-minute subquery costs Prometheus sixty times the evaluations).
    let idle_power = client
        .instant(
            &format!(
                "avg(avg_over_time((avg_over_time({power}[1h]) and on({host}, gpu) ({util} < {t}))[{window}s:1h]))",
                power = dialect.power(),
                util = dialect.utilization_over("1h"),
                t = spec.idle_threshold
            ),
            spec.to,
        )?
        .first()
        .map(|s| s.value)
        .filter(|v| v.is_finite());
    let hourly = hourly_cost(&spec.cost, idle_power);

    let usage = |at: DateTime<Utc>,
                 per_gpu: bool,
                 idle_only: bool|
     -> anyhow::Result<Vec<Sample>> {
        let mut rows = Vec::new();
        for (query, state) in dialect.usage(window, step, spec.idle_threshold, per_gpu, idle_only) {
            for row in client.instant(&query, at)? {
                rows.push(dialect.normalise(row, state));
            }
        }
        Ok(rows)
    };
    // The period's rows per GPU serve both the team totals and the idle holdings: the
    // store reads the owner series once for the two.
    let current = usage(spec.to, true, false)?;
    let previous = usage(spec.from, false, false)?;
    let per_gpu: Vec<&Sample> = current
        .iter()
        .filter(|row| row.label("state") == "idle")
        .collect();

    let mut teams: BTreeMap<String, TeamReport> = BTreeMap::new();
    for (rows, previous) in [(&current, false), (&previous, true)] {
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
    for row in per_gpu {
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

    let utilization = fleet_utilization(client, dialect, spec, window)?;
    Ok(Report {
        from: spec.from,
        to: spec.to,
        source: dialect.source(),
        currency: spec.cost.currency.clone(),
        teams,
        fleet: FleetReport {
            gpus,
            utilization,
            scale: scale(client, dialect, spec, window)?,
            capacity: capacity(client, dialect, spec, gpus)?,
            tco: tco(client, dialect, spec, window, utilization)?,
            energy: energy(client, dialect, spec, window)?,
            risk: match dialect {
                Dialect::Native => risk(client, spec)?,
                // dcgm-exporter's metrics carry no risk score; `replay --prometheus` runs
                // the engine over them.
                Dialect::Dcgm { .. } => Vec::new(),
            },
            heatmap: heatmap(client, dialect, spec)?,
            node_heatmap: node_heatmap(client, dialect, spec, window)?,
        },
    })
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

fn count_gpus(
    client: &Client,
    dialect: Dialect,
    spec: &ReportSpec,
    window: i64,
) -> anyhow::Result<usize> {
    let gpus = client
        .instant(&dialect.gpu_count(window), spec.to)?
        .first()
        .map_or(0.0, |s| s.value);
    Ok(gpus as usize)
}
