//! The fleet-wide figures of the report: utilization, scaling, capacity plan, own versus
//! rent, idle hosts' energy, the risk review and the heatmaps — each one or two PromQL
//! queries in the store's dialect, finished here.

use std::time::Duration;

use chrono::{DateTime, Datelike, Timelike, Utc};

use super::dialect::Dialect;
use super::dialect::OWNER_METRIC;
use super::prom::{Client, Sample};
use super::spec::ReportSpec;
use crate::config::{CapacityConfig, CostConfig};
use crate::engine::capacity::{CapacityState, advise};
use crate::engine::cost::hourly_cost;
use serde::Serialize;

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

/// GPUs in the risk review.
const TOP_RISK: usize = 10;
/// Reasons shown per GPU at risk.
const TOP_REASONS: usize = 3;

pub(super) fn fleet_utilization(
    client: &Client,
    dialect: Dialect,
    spec: &ReportSpec,
    window: i64,
) -> anyhow::Result<f64> {
    Ok(client
        .instant(
            &format!("avg({})", dialect.utilization_over(&format!("{window}s"))),
            spec.to,
        )?
        .first()
        .map_or(0.0, |s| s.value))
}

/// The node rule of `engine::capacity`, applied to every GPU of the fleet at once, on each
/// GPU's mean utilization over the whole period (no hold: the period is the evidence).
pub(super) fn scale(
    client: &Client,
    dialect: Dialect,
    spec: &ReportSpec,
    window: i64,
) -> anyhow::Result<Scale> {
    let host = dialect.host();
    let means: Vec<Option<f64>> = client
        .instant(
            &format!(
                "avg by ({host}, gpu) ({})",
                dialect.utilization_over(&format!("{window}s"))
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

pub(super) fn energy(
    client: &Client,
    dialect: Dialect,
    spec: &ReportSpec,
    window: i64,
) -> anyhow::Result<Energy> {
    let (start, end) = NIGHT;
    // Each step of the subqueries in `idle_in` stands for the hour before it: the hour
    // that began an hour earlier is the one judged.
    let night = idle_in(
        client,
        dialect,
        spec,
        window,
        &format!("on() (hour(vector(time() - 3600)) >= {start} < {end})"),
    )?;
    // Saturday and Sunday, UTC (day_of_week: 0 is Sunday).
    let weekend = idle_in(
        client,
        dialect,
        spec,
        window,
        "on() (day_of_week(vector(time() - 3600)) == 6 or day_of_week(vector(time() - 3600)) == 0)",
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

/// Hosts whose mean utilization stays under `[capacity] idle_utilization` in the hours
/// `filter` selects, and the energy their GPUs drew then (kWh). Hour by hour: each GPU's
/// hourly means come from its raw samples, and the subquery steps an hour at a time.
pub(super) fn idle_in(
    client: &Client,
    dialect: Dialect,
    spec: &ReportSpec,
    window: i64,
    filter: &str,
) -> anyhow::Result<(Vec<String>, f64)> {
    let host = dialect.host();
    let idle = client.instant(
        &format!(
            "avg by ({host}) (avg_over_time((avg by ({host}) ({}) and {filter})[{window}s:1h])) < {}",
            dialect.utilization_over("1h"),
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
                "sum(sum_over_time((sum by ({host}) (avg_over_time({power}{{{host}=~\"{selector}\"}}[1h])) and {filter})[{window}s:1h])) / 1000",
                power = dialect.power()
            ),
            spec.to,
        )?
        .first()
        .map_or(0.0, |s| s.value);
    Ok((hosts, kwh))
}

pub(super) fn risk(client: &Client, spec: &ReportSpec) -> anyhow::Result<Vec<RiskEntry>> {
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
pub(super) fn heatmap(
    client: &Client,
    dialect: Dialect,
    spec: &ReportSpec,
) -> anyhow::Result<Vec<HeatCell>> {
    let hour = chrono::TimeDelta::hours(1);
    let series = client.range(
        &format!("avg({})", dialect.utilization_over("1h")),
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
pub(super) fn node_heatmap(
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
            "avg by ({host}) ({})",
            dialect.utilization_over(&format!("{step}s"))
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
pub(super) fn capacity(
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

/// Own versus rent at `utilization`, the fleet's mean over the period (asked once, for
/// the report's `utilization`).
pub(super) fn tco(
    client: &Client,
    dialect: Dialect,
    spec: &ReportSpec,
    window: i64,
    utilization: f64,
) -> anyhow::Result<Tco> {
    let one = |query: String| -> anyhow::Result<Option<f64>> {
        Ok(client
            .instant(&query, spec.to)?
            .first()
            .map(|s| s.value)
            .filter(|v| v.is_finite()))
    };
    let power = one(format!(
        "avg(avg_over_time({}[{window}s]))",
        dialect.power()
    ))?;
    // The fleet's work in GPU-hours: its summed utilization over the period, hour by hour.
    let busy_hours = one(format!(
        "sum_over_time(sum({})[{window}s:1h])",
        dialect.utilization_over("1h")
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
#[path = "figures_tests.rs"]
mod tests;
