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
//! team's `namespaces` and `users` patterns both, and its host against `hosts`. A series that
//! already carries a `team` label (the agent matched it) keeps that team.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Datelike, Timelike, Utc};
use serde::Serialize;

use super::prom::{Client, Sample};
use crate::config::{CapacityConfig, CostConfig, Holder, TeamConfig, UNASSIGNED, team_of};
use crate::engine::capacity::{CapacityState, advise};
use crate::engine::cost::hourly_cost;

/// What a report covers and how it prices.
#[derive(Debug, Clone)]
pub struct ReportSpec {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    /// Only this team (all teams when None).
    pub team: Option<String>,
    pub teams: Vec<TeamConfig>,
    pub cost: CostConfig,
    pub capacity: CapacityConfig,
    /// Utilization (0–1) under which a held GPU counts as idle.
    pub idle_threshold: f64,
    /// Resolution of the subqueries (the store's scrape interval is a good choice).
    pub step: Duration,
}

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
    pub energy: Energy,
    /// The GPUs most at risk at the end of the period.
    pub risk: Vec<RiskEntry>,
    /// Mean fleet utilization per UTC day and hour.
    pub heatmap: Vec<HeatCell>,
    /// Mean utilization of each host over time.
    pub node_heatmap: NodeHeatmap,
}

/// Each host's mean GPU utilization in consecutive slices of the period.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NodeHeatmap {
    /// Start of the first slice.
    pub start: Option<DateTime<Utc>>,
    pub step_seconds: u64,
    /// Hosts by name; `utilization[i]` is the slice starting at `start + i × step`, null
    /// where the host had no data.
    pub hosts: Vec<NodeRow>,
}

#[derive(Debug, Clone, Serialize)]
pub struct NodeRow {
    pub host: String,
    pub utilization: Vec<Option<f64>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Scale {
    /// `out`, `in` or `hold`.
    pub direction: String,
    /// GPUs the measured demand needs with the buffer.
    pub gpus: usize,
    pub reason: String,
}

/// Hosts whose GPUs stayed under the idle-utilization line in the night window, and what
/// powering them down for those hours would have saved.
#[derive(Debug, Clone, Serialize)]
pub struct Energy {
    /// UTC hours of the night window, `[start, end)`.
    pub night_window: (u32, u32),
    pub night_idle_hosts: Vec<String>,
    /// Energy the GPUs of those hosts drew in the night window over the period.
    pub kwh: f64,
    pub cost: f64,
    pub note: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct RiskEntry {
    pub host: String,
    pub gpu: String,
    pub uuid: String,
    pub risk: f64,
    pub reasons: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeatCell {
    /// `YYYY-MM-DD`, UTC.
    pub day: String,
    pub hour: u32,
    pub utilization: f64,
}

/// The night window energy advice looks at, UTC hours `[2, 6)`.
pub const NIGHT: (u32, u32) = (2, 6);
/// Idle holdings listed per team.
const TOP_IDLE: usize = 5;
/// GPUs in the risk review.
const TOP_RISK: usize = 10;
/// Reasons shown per GPU at risk.
const TOP_REASONS: usize = 3;

/// The metric every figure needs; its absence means the store has no gpu-sentinel data.
pub const OWNER_METRIC: &str = "gpu_owner_seconds_total";

/// Builds the report by querying `client`.
pub fn build(client: &Client, spec: &ReportSpec) -> anyhow::Result<Report> {
    let window = (spec.to - spec.from).num_seconds().max(1);
    let step = spec.step.as_secs().max(1);
    let gpus = count_gpus(client, spec, window)?;

    let idle_power = client
        .instant(
            &format!(
                "avg(avg_over_time((gpu_power_watts and on(instance, gpu) (gpu_utilization_ratio < {t}))[{window}s:{step}s]))",
                t = spec.idle_threshold
            ),
            spec.to,
        )?
        .first()
        .map(|s| s.value)
        .filter(|v| v.is_finite());
    let hourly = hourly_cost(&spec.cost, idle_power);

    let owners_query =
        format!("sum by (instance, owner, team, state) (increase({OWNER_METRIC}[{window}s]))");
    let current = client.instant(&owners_query, spec.to)?;
    let previous = client.instant(&owners_query, spec.from)?;
    let per_gpu = client.instant(
        &format!(
            "sum by (instance, gpu, owner, team) (increase({OWNER_METRIC}{{state=\"idle\"}}[{window}s]))"
        ),
        spec.to,
    )?;

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
    for row in &per_gpu {
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

    Ok(Report {
        from: spec.from,
        to: spec.to,
        source: "gpu-sentinel",
        currency: spec.cost.currency.clone(),
        teams,
        fleet: FleetReport {
            gpus,
            utilization: fleet_utilization(client, spec, window)?,
            scale: scale(client, spec, window)?,
            energy: energy(client, spec, window, step)?,
            risk: risk(client, spec)?,
            heatmap: heatmap(client, spec)?,
            node_heatmap: node_heatmap(client, spec, window)?,
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

/// The team of one answer row: its own `team` label when the agent set one, else the
/// first `[[teams]]` entry claiming its owner (as namespace or user) or its host.
fn team_for(spec: &ReportSpec, row: &Sample) -> String {
    let labelled = row.label("team");
    if !labelled.is_empty() {
        return labelled.to_string();
    }
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
    if team == UNASSIGNED && owner.is_none() {
        return UNASSIGNED.to_string();
    }
    team.to_string()
}

fn count_gpus(client: &Client, spec: &ReportSpec, window: i64) -> anyhow::Result<usize> {
    let rows = client.instant(
        &format!("count(last_over_time(gpu_utilization_ratio[{window}s]))"),
        spec.to,
    )?;
    let gpus = rows.first().map_or(0.0, |s| s.value);
    anyhow::ensure!(
        gpus > 0.0,
        "{} has no gpu_utilization_ratio between {} and {}: no gpu-sentinel scraped into this store in that period (or it is beyond the store's retention)",
        client.base(),
        spec.from,
        spec.to
    );
    let owners = client.instant(
        &format!("count(last_over_time({OWNER_METRIC}[{window}s]))"),
        spec.to,
    )?;
    anyhow::ensure!(
        owners.first().is_some_and(|s| s.value > 0.0),
        "{} has gpu_utilization_ratio but no {OWNER_METRIC} between {} and {}: the agents predate owner accounting",
        client.base(),
        spec.from,
        spec.to
    );
    Ok(gpus as usize)
}

fn fleet_utilization(client: &Client, spec: &ReportSpec, window: i64) -> anyhow::Result<f64> {
    Ok(client
        .instant(
            &format!("avg(avg_over_time(gpu_utilization_ratio[{window}s]))"),
            spec.to,
        )?
        .first()
        .map_or(0.0, |s| s.value))
}

/// The node rule of `engine::capacity`, applied to every GPU of the fleet at once, on each
/// GPU's mean utilization over the whole period (no hold: the period is the evidence).
fn scale(client: &Client, spec: &ReportSpec, window: i64) -> anyhow::Result<Scale> {
    let means: Vec<Option<f64>> = client
        .instant(
            &format!("avg_over_time(gpu_utilization_ratio[{window}s])"),
            spec.to,
        )?
        .iter()
        .map(|s| Some(s.value).filter(|v| v.is_finite()))
        .collect();
    let config = CapacityConfig {
        hold: Duration::ZERO,
        ..spec.capacity.clone()
    };
    let advice = advise(&mut CapacityState::default(), 0, &means, &config);
    Ok(Scale {
        direction: advice.direction.as_str().to_string(),
        gpus: advice.recommended_gpus,
        reason: advice.reason,
    })
}

fn energy(client: &Client, spec: &ReportSpec, window: i64, step: u64) -> anyhow::Result<Energy> {
    let (start, end) = NIGHT;
    let night = format!("on() (hour() >= {start} < {end})");
    let idle = client.instant(
        &format!(
            "avg by (instance) (avg_over_time((avg by (instance) (gpu_utilization_ratio) and {night})[{window}s:{step}s])) < {}",
            spec.capacity.idle_utilization
        ),
        spec.to,
    )?;
    let mut hosts: Vec<String> = idle
        .iter()
        .map(|s| s.label("instance").to_string())
        .collect();
    hosts.sort();
    let kwh = if hosts.is_empty() {
        0.0
    } else {
        let selector = hosts
            .iter()
            .map(|h| regex::escape(h))
            .collect::<Vec<_>>()
            .join("|");
        client
            .instant(
                &format!(
                    "sum(sum_over_time((sum by (instance) (gpu_power_watts{{instance=~\"{selector}\"}}) and {night})[{window}s:{step}s])) * {step} / 3600 / 1000"
                ),
                spec.to,
            )?
            .first()
            .map_or(0.0, |s| s.value)
    };
    Ok(Energy {
        night_window: NIGHT,
        night_idle_hosts: hosts,
        kwh,
        cost: kwh * spec.cost.power_price_per_kwh,
        note: format!(
            "hosts averaging under {:.0}% GPU utilization between {start:02}:00 and {end:02}:00 UTC; powering them down saves the GPUs' draw only, and waking them costs a boot and the jobs' warm-up",
            spec.capacity.idle_utilization * 100.0
        ),
    })
}

fn risk(client: &Client, spec: &ReportSpec) -> anyhow::Result<Vec<RiskEntry>> {
    let top = format!("topk({TOP_RISK}, last_over_time(gpu_failure_risk_score[1h]))");
    let scores = client.instant(&top, spec.to)?;
    let reasons = client.instant(
        &format!("last_over_time(gpu_failure_risk_contribution[1h]) and on(instance, uuid) {top}"),
        spec.to,
    )?;
    let mut entries: Vec<RiskEntry> = scores
        .iter()
        .map(|s| {
            let mut mine: Vec<&Sample> = reasons
                .iter()
                .filter(|r| {
                    r.label("instance") == s.label("instance") && r.label("uuid") == s.label("uuid")
                })
                .filter(|r| r.value > 0.0)
                .collect();
            mine.sort_by(|a, b| b.value.total_cmp(&a.value));
            RiskEntry {
                host: s.label("instance").to_string(),
                gpu: s.label("gpu").to_string(),
                uuid: s.label("uuid").to_string(),
                risk: s.value,
                reasons: mine
                    .iter()
                    .take(TOP_REASONS)
                    .map(|r| r.label("feature").to_string())
                    .collect(),
            }
        })
        .collect();
    entries.sort_by(|a, b| b.risk.total_cmp(&a.risk));
    Ok(entries)
}

/// Mean fleet utilization of each hour, by day: one range query, one point per hour.
fn heatmap(client: &Client, spec: &ReportSpec) -> anyhow::Result<Vec<HeatCell>> {
    let hour = chrono::TimeDelta::hours(1);
    let series = client.range(
        "avg(avg_over_time(gpu_utilization_ratio[1h]))",
        spec.from + hour,
        spec.to,
        Duration::from_secs(3600),
    )?;
    Ok(series
        .first()
        .map(|s| {
            s.points
                .iter()
                .filter(|(_, v)| v.is_finite())
                .map(|(at, v)| {
                    // Each point averages the hour before it.
                    let start = *at - hour;
                    HeatCell {
                        day: format!(
                            "{:04}-{:02}-{:02}",
                            start.year(),
                            start.month(),
                            start.day()
                        ),
                        hour: start.hour(),
                        utilization: *v,
                    }
                })
                .collect()
        })
        .unwrap_or_default())
}

/// Slices of the node heatmap per period: enough to see days and nights in a week.
const NODE_SLICES: i64 = 84;

/// One range query: each host's mean utilization per slice.
fn node_heatmap(client: &Client, spec: &ReportSpec, window: i64) -> anyhow::Result<NodeHeatmap> {
    let step = (window / NODE_SLICES).max(60);
    let first = spec.from + chrono::TimeDelta::seconds(step);
    let series = client.range(
        &format!("avg by (instance) (avg_over_time(gpu_utilization_ratio[{step}s]))"),
        first,
        spec.to,
        Duration::from_secs(step as u64),
    )?;
    let slices = ((spec.to - first).num_seconds() / step + 1).max(0) as usize;
    let mut hosts: Vec<NodeRow> = series
        .iter()
        .map(|s| {
            let mut utilization = vec![None; slices];
            for (at, value) in &s.points {
                let slot = (*at - first).num_seconds() / step;
                if let Some(cell) = usize::try_from(slot)
                    .ok()
                    .and_then(|i| utilization.get_mut(i))
                {
                    *cell = Some(*value).filter(|v| v.is_finite());
                }
            }
            NodeRow {
                host: s.labels.get("instance").cloned().unwrap_or_default(),
                utilization,
            }
        })
        .collect();
    hosts.sort_by(|a, b| a.host.cmp(&b.host));
    Ok(NodeHeatmap {
        // Each point averages the slice before it.
        start: Some(spec.from),
        step_seconds: step as u64,
        hosts,
    })
}
