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
use std::time::Duration;

use chrono::{DateTime, Datelike, Timelike, Utc};
use serde::Serialize;

use super::dialect::Dialect;
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
    /// Framebuffer use (MiB) above which dcgm-exporter's GPUs count as held.
    pub memory_floor_mib: u64,
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

/// Six months of GPU-hours and what they say about next month.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Capacity {
    /// GPU-hours held in each of the six 30-day months ending at the period's end, oldest
    /// first (0 for a month before the store's history).
    pub monthly_gpu_hours: Vec<f64>,
    /// The demand of the same months: summed utilization (work in whole GPUs), averaged
    /// over the hours with data.
    pub monthly_demand_gpus: Vec<f64>,
    /// Mean month-over-month growth of the demand (0.1 = 10% a month), over the months with
    /// data; 0 with fewer than two.
    pub growth: f64,
    /// Next month's demand at that growth.
    pub forecast_demand_gpus: f64,
    /// GPUs that carry the forecast with the `[capacity] buffer`.
    pub recommended_gpus: usize,
    /// Recommended GPUs beyond those seen in the period.
    pub gpus_to_buy: usize,
}

/// Owning versus renting at the measured utilization.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Tco {
    /// Mean utilization the comparison is made at.
    pub utilization: f64,
    /// An owned GPU's hourly cost (depreciation plus mean power) per hour it exists.
    pub owned_per_gpu_hour: f64,
    /// The same per hour of *work* (divided by utilization): what one useful GPU-hour costs.
    pub owned_per_used_gpu_hour: f64,
    /// `[cost] cloud_hourly_price`, paid only for the hours used.
    pub cloud_per_used_gpu_hour: f64,
    /// `own`, `rent`, or `unknown` when a price is missing.
    pub cheaper: String,
    /// What the cheaper choice saves per month at this fleet's busy GPU-hours.
    pub monthly_saving: f64,
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
    /// The same for Saturdays and Sundays (UTC).
    pub weekend_idle_hosts: Vec<String>,
    pub weekend_kwh: f64,
    pub weekend_cost: f64,
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

pub use super::dialect::OWNER_METRIC;

/// Builds the report by querying `client`.
pub fn build(client: &Client, spec: &ReportSpec) -> anyhow::Result<Report> {
    let window = (spec.to - spec.from).num_seconds().max(1);
    let step = spec.step.as_secs().max(1);
    let dialect = Dialect::detect(client, window, spec.to, spec.memory_floor_mib)?;
    let gpus = count_gpus(client, dialect, spec, window)?;

    let host = dialect.host();
    let idle_power = client
        .instant(
            &format!(
                "avg(avg_over_time(({power} and on({host}, gpu) ({util} < {t}))[{window}s:{step}s]))",
                power = dialect.power(),
                util = dialect.utilization(),
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
    let current = usage(spec.to, false, false)?;
    let previous = usage(spec.from, false, false)?;
    let per_gpu = usage(spec.to, true, true)?;

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
        source: dialect.source(),
        currency: spec.cost.currency.clone(),
        teams,
        fleet: FleetReport {
            gpus,
            utilization: fleet_utilization(client, dialect, spec, window)?,
            scale: scale(client, dialect, spec, window)?,
            capacity: capacity(client, dialect, spec, gpus)?,
            tco: tco(client, dialect, spec, window)?,
            energy: energy(client, dialect, spec, window, step)?,
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

fn fleet_utilization(
    client: &Client,
    dialect: Dialect,
    spec: &ReportSpec,
    window: i64,
) -> anyhow::Result<f64> {
    Ok(client
        .instant(
            &format!(
                "avg(avg_over_time({}[{window}s:{}s]))",
                dialect.utilization(),
                spec.step.as_secs().max(1)
            ),
            spec.to,
        )?
        .first()
        .map_or(0.0, |s| s.value))
}

/// The node rule of `engine::capacity`, applied to every GPU of the fleet at once, on each
/// GPU's mean utilization over the whole period (no hold: the period is the evidence).
fn scale(
    client: &Client,
    dialect: Dialect,
    spec: &ReportSpec,
    window: i64,
) -> anyhow::Result<Scale> {
    let host = dialect.host();
    let means: Vec<Option<f64>> = client
        .instant(
            &format!(
                "avg by ({host}, gpu) (avg_over_time({}[{window}s:{}s]))",
                dialect.utilization(),
                spec.step.as_secs().max(1)
            ),
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

fn energy(
    client: &Client,
    dialect: Dialect,
    spec: &ReportSpec,
    window: i64,
    step: u64,
) -> anyhow::Result<Energy> {
    let (start, end) = NIGHT;
    let night = idle_in(
        client,
        dialect,
        spec,
        window,
        step,
        &format!("on() (hour() >= {start} < {end})"),
    )?;
    // Saturday and Sunday, UTC (day_of_week: 0 is Sunday).
    let weekend = idle_in(
        client,
        dialect,
        spec,
        window,
        step,
        "on() (day_of_week() == 6 or day_of_week() == 0)",
    )?;
    let price = spec.cost.power_price_per_kwh;
    Ok(Energy {
        night_window: NIGHT,
        night_idle_hosts: night.0,
        kwh: night.1,
        cost: night.1 * price,
        weekend_idle_hosts: weekend.0,
        weekend_kwh: weekend.1,
        weekend_cost: weekend.1 * price,
        note: format!(
            "hosts averaging under {:.0}% GPU utilization between {start:02}:00 and {end:02}:00 UTC, or on Saturdays and Sundays (UTC); powering them down saves the GPUs' draw only (not the host's), and waking them costs a boot and the jobs' warm-up",
            spec.capacity.idle_utilization * 100.0
        ),
    })
}

/// Hosts whose mean utilization stays under `[capacity] idle_utilization` in the times
/// `filter` selects, and the energy their GPUs drew then (kWh).
fn idle_in(
    client: &Client,
    dialect: Dialect,
    spec: &ReportSpec,
    window: i64,
    step: u64,
    filter: &str,
) -> anyhow::Result<(Vec<String>, f64)> {
    let host = dialect.host();
    let idle = client.instant(
        &format!(
            "avg by ({host}) (avg_over_time((avg by ({host}) ({}) and {filter})[{window}s:{step}s])) < {}",
            dialect.utilization(),
            spec.capacity.idle_utilization
        ),
        spec.to,
    )?;
    let mut hosts: Vec<String> = idle.iter().map(|s| s.label(host).to_string()).collect();
    hosts.sort();
    if hosts.is_empty() {
        return Ok((hosts, 0.0));
    }
    // A regular expression inside a PromQL string literal: escaped for both.
    let selector = hosts
        .iter()
        .map(|h| regex::escape(h).replace('\\', "\\\\").replace('"', "\\\""))
        .collect::<Vec<_>>()
        .join("|");
    let kwh = client
        .instant(
            &format!(
                "sum(sum_over_time((sum by ({host}) ({power}{{{host}=~\"{selector}\"}}) and {filter})[{window}s:{step}s])) * {step} / 3600 / 1000",
                power = dialect.power()
            ),
            spec.to,
        )?
        .first()
        .map_or(0.0, |s| s.value);
    Ok((hosts, kwh))
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
fn heatmap(client: &Client, dialect: Dialect, spec: &ReportSpec) -> anyhow::Result<Vec<HeatCell>> {
    let hour = chrono::TimeDelta::hours(1);
    let series = client.range(
        &format!(
            "avg(avg_over_time({}[1h:{}s]))",
            dialect.utilization(),
            spec.step.as_secs().clamp(1, 3600)
        ),
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
fn node_heatmap(
    client: &Client,
    dialect: Dialect,
    spec: &ReportSpec,
    window: i64,
) -> anyhow::Result<NodeHeatmap> {
    let step = (window / NODE_SLICES).max(60);
    let first = spec.from + chrono::TimeDelta::seconds(step);
    let host = dialect.host();
    let series = client.range(
        &format!(
            "avg by ({host}) (avg_over_time({}[{step}s:{}s]))",
            dialect.utilization(),
            spec.step.as_secs().clamp(1, step as u64)
        ),
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
                host: s.labels.get(host).cloned().unwrap_or_default(),
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

const MONTH_SECONDS: i64 = 30 * 24 * 3600;
const MONTHS: i64 = 6;

/// Monthly figures from two range queries stepping a month at a time: GPU-hours held, and
/// the demand — the fleet's summed utilization (work in whole GPUs, as `engine::capacity`
/// counts it) averaged over the hours of the month that have data, so a month the store
/// only partly covers is not mistaken for a month of less work.
fn capacity(
    client: &Client,
    dialect: Dialect,
    spec: &ReportSpec,
    gpus: usize,
) -> anyhow::Result<Capacity> {
    let first = spec.to - chrono::TimeDelta::seconds(MONTH_SECONDS * (MONTHS - 1));
    let monthly = |query: String| -> anyhow::Result<Vec<f64>> {
        let series = client.range(
            &query,
            first,
            spec.to,
            Duration::from_secs(MONTH_SECONDS as u64),
        )?;
        let mut months = vec![0.0; MONTHS as usize];
        if let Some(s) = series.first() {
            for (at, v) in &s.points {
                if let Some(cell) = slot(first, *at, MONTH_SECONDS).and_then(|i| months.get_mut(i))
                {
                    *cell = if v.is_finite() { v.max(0.0) } else { 0.0 };
                }
            }
        }
        Ok(months)
    };
    let held = match dialect {
        Dialect::Native => monthly(format!(
            "sum(increase({OWNER_METRIC}[{MONTH_SECONDS}s])) / 3600"
        ))?,
        // Counted at the report's step, as the period's usage is: a finer resolution than
        // the scrape interval would count points that find no sample.
        Dialect::Dcgm { memory_floor_mib } => {
            let step = spec.step.as_secs().max(1);
            monthly(format!(
                "sum(count_over_time((DCGM_FI_DEV_FB_USED > {memory_floor_mib} or DCGM_FI_DEV_FB_USED{{pod!=\"\"}})[{MONTH_SECONDS}s:{step}s])) * {step} / 3600"
            ))?
        }
    };
    let demand = monthly(format!(
        "avg_over_time(sum({})[{MONTH_SECONDS}s:1h])",
        dialect.utilization()
    ))?;
    Ok(plan_capacity(held, demand, gpus, spec.capacity.buffer))
}

/// Which `step`-long slot after `first` the point at `at` is, rounding to the nearest: the
/// store answers whole seconds, the period's ends carry fractions.
fn slot(first: DateTime<Utc>, at: DateTime<Utc>, step: i64) -> Option<usize> {
    let slots = (at - first).num_milliseconds() as f64 / (step as f64 * 1000.0);
    let slot = slots.round();
    (slot >= 0.0).then_some(slot as usize)
}

/// The plan from monthly figures: growth is the mean ratio of consecutive months that both
/// have data (a month with none is before the store's history, not a month of no work).
pub fn plan_capacity(held: Vec<f64>, demand: Vec<f64>, gpus: usize, buffer: f64) -> Capacity {
    let ratios: Vec<f64> = demand
        .windows(2)
        .filter(|w| w[0] > 0.0 && w[1] > 0.0)
        .map(|w| w[1] / w[0])
        .collect();
    let growth = if ratios.is_empty() {
        0.0
    } else {
        ratios.iter().sum::<f64>() / ratios.len() as f64 - 1.0
    };
    let last = demand
        .iter()
        .rev()
        .find(|v| **v > 0.0)
        .copied()
        .unwrap_or(0.0);
    let forecast = last * (1.0 + growth);
    let recommended = (forecast * buffer).ceil() as usize;
    Capacity {
        monthly_gpu_hours: held,
        monthly_demand_gpus: demand,
        growth,
        forecast_demand_gpus: forecast,
        recommended_gpus: recommended,
        gpus_to_buy: recommended.saturating_sub(gpus),
    }
}

fn tco(client: &Client, dialect: Dialect, spec: &ReportSpec, window: i64) -> anyhow::Result<Tco> {
    let one = |query: String| -> anyhow::Result<Option<f64>> {
        Ok(client
            .instant(&query, spec.to)?
            .first()
            .map(|s| s.value)
            .filter(|v| v.is_finite()))
    };
    let step = spec.step.as_secs().max(1);
    let utilization = one(format!(
        "avg(avg_over_time({}[{window}s:{step}s]))",
        dialect.utilization()
    ))?
    .unwrap_or(0.0);
    let power = one(format!(
        "avg(avg_over_time({}[{window}s:{step}s]))",
        dialect.power()
    ))?;
    // The fleet's work in GPU-hours: its summed utilization over the period.
    let busy_hours = one(format!(
        "sum_over_time(sum({})[{window}s:{step}s]) * {step} / 3600",
        dialect.utilization()
    ))?
    .unwrap_or(0.0);
    let months = window as f64 / MONTH_SECONDS as f64;
    Ok(compare_tco(
        &spec.cost,
        utilization,
        power,
        busy_hours / months.max(f64::MIN_POSITIVE),
    ))
}

/// Owning costs every hour; renting costs the hours used. So owning wins above the
/// utilization where `owned ÷ utilization` drops under the cloud price.
pub fn compare_tco(
    cost: &CostConfig,
    utilization: f64,
    power_watts: Option<f64>,
    busy_hours_per_month: f64,
) -> Tco {
    let owned = CostConfig {
        hourly_price: 0.0,
        ..cost.clone()
    };
    let owned_per_gpu_hour = hourly_cost(&owned, power_watts);
    let owned_per_used = if utilization > 0.0 {
        owned_per_gpu_hour / utilization
    } else {
        f64::INFINITY
    };
    let cloud = cost.cloud_hourly_price;
    let (cheaper, saving) =
        if cloud <= 0.0 || cost.purchase_price <= 0.0 || !owned_per_used.is_finite() {
            ("unknown", 0.0)
        } else if owned_per_used < cloud {
            ("own", (cloud - owned_per_used) * busy_hours_per_month)
        } else {
            ("rent", (owned_per_used - cloud) * busy_hours_per_month)
        };
    Tco {
        utilization,
        owned_per_gpu_hour,
        owned_per_used_gpu_hour: if owned_per_used.is_finite() {
            owned_per_used
        } else {
            0.0
        },
        cloud_per_used_gpu_hour: cloud,
        cheaper: cheaper.to_string(),
        monthly_saving: saving,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_is_the_mean_monthly_ratio_over_months_with_data() {
        let plan = plan_capacity(
            vec![0.0, 0.0, 1000.0, 1100.0, 1210.0, 1331.0],
            vec![0.0, 0.0, 1.0, 1.1, 1.21, 1.331],
            2,
            1.3,
        );
        assert!((plan.growth - 0.1).abs() < 1e-9, "{}", plan.growth);
        assert!((plan.forecast_demand_gpus - 1.4641).abs() < 1e-9);
        // 1.4641 GPUs × 1.3 = 1.90 → 2, as many as there are.
        assert_eq!(plan.recommended_gpus, 2);
        assert_eq!(plan.gpus_to_buy, 0);
        let grown = plan_capacity(vec![0.0; 6], vec![0.0, 0.0, 0.0, 0.0, 5.0, 7.5], 8, 1.3);
        // 7.5 × 1.5 = 11.25 GPUs of work × 1.3 = 14.6 → 15: buy 7.
        assert_eq!((grown.recommended_gpus, grown.gpus_to_buy), (15, 7));
        let empty = plan_capacity(vec![0.0; 6], vec![0.0; 6], 8, 1.3);
        assert_eq!(
            (empty.growth, empty.recommended_gpus, empty.gpus_to_buy),
            (0.0, 0, 0)
        );
    }

    #[test]
    fn owning_wins_at_high_utilization_and_renting_at_low() {
        let cost = CostConfig {
            purchase_price: 4.0 * 365.25 * 24.0, // 1 per hour over 4 years
            cloud_hourly_price: 2.0,
            ..CostConfig::default()
        };
        let busy = compare_tco(&cost, 0.8, None, 100.0);
        assert_eq!(busy.cheaper, "own");
        assert!((busy.owned_per_used_gpu_hour - 1.25).abs() < 1e-9);
        assert!((busy.monthly_saving - 75.0).abs() < 1e-9);
        assert_eq!(compare_tco(&cost, 0.3, None, 100.0).cheaper, "rent");
        let no_cloud = CostConfig {
            cloud_hourly_price: 0.0,
            ..cost
        };
        assert_eq!(compare_tco(&no_cloud, 0.8, None, 100.0).cheaper, "unknown");
    }
}
