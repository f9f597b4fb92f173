//! The fleet-wide figures of the report: scaling, capacity plan, own versus rent, idle
//! hosts' energy and the risk review with each GPU's health verdict. Those that read utilization or power are combined
//! from the period's hourly rows ([`super::hourly`]); the capacity plan's months before the
//! period and the risk review are PromQL queries of their own.

use std::time::Duration;

use chrono::{DateTime, Datelike, Timelike, Utc};

use std::collections::{HashMap, HashSet};

use super::hourly::Hourly;
use super::plan::shard::select;
use super::plan::{Query, Shape};
use super::prom::{Sample, joined};
use super::reading::Reading;
use super::report_health::{self, GpuKey, GpuVerdict};
use super::spec::ReportSpec;
use crate::config::{CapacityConfig, CostConfig};
use crate::engine::capacity::{CapacityState, advise};
use crate::engine::cost::hourly_cost;
use serde::Serialize;

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
    pub(crate) monthly_gpu_hours: Vec<f64>,
    /// The demand of the same months: summed utilization (work in whole GPUs), averaged
    /// over the hours with data.
    pub(crate) monthly_demand_gpus: Vec<f64>,
    /// Mean month-over-month growth of the demand (0.1 = 10% a month), over the months with
    /// data; 0 with fewer than two.
    pub growth: f64,
    /// Next month's demand at that growth.
    pub forecast_demand_gpus: f64,
    /// GPUs that carry the forecast with the `[capacity] buffer`.
    pub recommended_gpus: usize,
    /// Recommended GPUs beyond those seen in the period.
    pub(crate) gpus_to_buy: usize,
}

/// Owning versus renting at the measured utilization.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Tco {
    /// Mean utilization the comparison is made at.
    pub utilization: f64,
    /// An owned GPU's hourly cost (depreciation plus mean power) per hour it exists.
    pub(crate) owned_per_gpu_hour: f64,
    /// The same per hour of *work* (divided by utilization): what one useful GPU-hour costs.
    pub(crate) owned_per_used_gpu_hour: f64,
    /// `[cost] cloud_hourly_price`, paid only for the hours used.
    pub(crate) cloud_per_used_gpu_hour: f64,
    /// `own`, `rent`, or `unknown` when a price is missing.
    pub cheaper: String,
    /// What the cheaper choice saves per month at this fleet's busy GPU-hours.
    pub(crate) monthly_saving: f64,
}

/// Hosts whose GPUs stayed under the idle-utilization line in the night window, and what
/// powering them down for those hours would have saved.
#[derive(Debug, Clone, Serialize)]
pub struct Energy {
    /// UTC hours of the night window, `[start, end)`.
    pub(crate) night_window: (u32, u32),
    pub night_idle_hosts: Vec<String>,
    /// Energy the GPUs of those hosts drew in the night window over the period.
    pub kwh: f64,
    pub cost: f64,
    /// The same for Saturdays and Sundays (UTC).
    pub(crate) weekend_idle_hosts: Vec<String>,
    pub(crate) weekend_kwh: f64,
    pub(crate) weekend_cost: f64,
    pub note: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct RiskEntry {
    pub host: String,
    pub gpu: String,
    pub uuid: String,
    pub risk: f64,
    pub reasons: Vec<String>,
    /// Its health verdict at the period's end: `state`, `action`, `since`, `components`.
    #[serde(flatten)]
    pub health: GpuVerdict,
}

/// The night window energy advice looks at, UTC hours `[2, 6)`.
pub const NIGHT: (u32, u32) = (2, 6);

/// GPUs in the risk review.
const TOP_RISK: usize = 10;
/// Reasons shown per GPU at risk.
const TOP_REASONS: usize = 3;

/// The node rule of `engine::capacity`, applied to every GPU of the fleet at once, on each
/// GPU's mean utilization over the whole period (no hold: the period is the evidence).
pub(super) fn scale(means: &[Option<f64>], spec: &ReportSpec) -> Scale {
    let config = CapacityConfig {
        hold: Duration::ZERO,
        ..spec.capacity.clone()
    };
    let advice = advise(&mut CapacityState::default(), 0, means, &config);
    Scale {
        direction: advice.direction.as_str().to_string(),
        gpus: advice.recommended_gpus,
        reason: advice.reason,
    }
}

/// Hosts under `[capacity] idle_utilization` in the night window and at weekends, hour by
/// hour, and what their GPUs drew then.
pub(super) fn energy(hourly: &Hourly, spec: &ReportSpec) -> Energy {
    let (start, end) = NIGHT;
    let line = spec.capacity.idle_utilization;
    let night = hourly.idle_hosts(|at| (start..end).contains(&at.hour()), line);
    // Saturday and Sunday, UTC.
    let weekend = hourly.idle_hosts(
        |at| matches!(at.weekday(), chrono::Weekday::Sat | chrono::Weekday::Sun),
        line,
    );
    let price = spec.cost.power_price_per_kwh;
    Energy {
        night_window: NIGHT,
        night_idle_hosts: night.0,
        kwh: night.1,
        cost: night.1 * price,
        weekend_idle_hosts: weekend.0,
        weekend_kwh: weekend.1,
        weekend_cost: weekend.1 * price,
        note: format!(
            "hosts averaging under {:.0}% GPU utilization between {start:02}:00 and {end:02}:00 UTC, or on Saturdays and Sundays (UTC); powering them down saves the GPUs' draw only (not the host's), and waking them costs a boot and the jobs' warm-up",
            line * 100.0
        ),
    }
}

/// The ten GPUs with the highest score at the period's end, and after them up to ten more
/// that are unhealthy then, each with its largest reasons and its health verdict: each host
/// group's candidates and their reasons, the table chosen from those.
pub(super) fn risk(reading: &Reading<'_>, spec: &ReportSpec) -> anyhow::Result<Vec<RiskEntry>> {
    // The top ten, and every GPU a component of which was unhealthy in the hour (whether it
    // still is at the end, the verdicts tell).
    let candidates = |hosts: &str| {
        let score = format!(
            "last_over_time({}[1h])",
            select("gpu_failure_risk_score", &[hosts])
        );
        format!(
            "topk({TOP_RISK}, {score}) or ({score} and on(instance, uuid) (last_over_time({}[1h]) == 2))",
            select("gpu_health_state", &[hosts])
        )
    };
    let window = std::time::Duration::from_secs(3600);
    let scores_query = Query {
        reads: vec![
            ("gpu_failure_risk_score".to_string(), 1.0),
            ("gpu_health_state".to_string(), 1.0),
        ],
        shape: Shape::At { window },
        by_host: true,
        per_series: false,
        text: Box::new(move |p| candidates(p.hosts)),
    };
    let reasons_query = Query {
        reads: vec![
            ("gpu_failure_risk_contribution".to_string(), 1.0),
            ("gpu_failure_risk_score".to_string(), 1.0),
            ("gpu_health_state".to_string(), 1.0),
        ],
        shape: Shape::At { window },
        by_host: true,
        per_series: false,
        text: Box::new(move |p| {
            format!(
                "last_over_time({}[1h]) and on(instance, uuid) ({})",
                select("gpu_failure_risk_contribution", &[p.hosts]),
                candidates(p.hosts)
            )
        }),
    };
    let (scores, reasons, verdicts) = std::thread::scope(|scope| {
        let scores = scope.spawn(|| reading.planner.rows(&scores_query, spec.to));
        let reasons = scope.spawn(|| reading.planner.rows(&reasons_query, spec.to));
        let verdicts = scope.spawn(|| report_health::current(&reading.planner, spec.to));
        (joined(scores), joined(reasons), joined(verdicts))
    });
    let (mut scores, reasons, mut verdicts) = (scores?, reasons?, verdicts?);
    scores.sort_by(|a, b| b.value.total_cmp(&a.value));
    let key = |s: &Sample| (s.label("instance").to_string(), s.label("uuid").to_string());
    let unhealthy: HashSet<GpuKey> = verdicts.unhealthy().cloned().collect();
    let mut table: Vec<&Sample> = scores.iter().take(TOP_RISK).collect();
    table.extend(
        scores
            .iter()
            .skip(TOP_RISK)
            .filter(|s| unhealthy.contains(&key(s)))
            .take(TOP_RISK),
    );
    let keys: Vec<GpuKey> = table.iter().map(|s| key(s)).collect();
    report_health::date(&mut verdicts, &reading.planner, &keys, spec.from, spec.to)?;
    let mut by_gpu: HashMap<(&str, &str), Vec<&Sample>> = HashMap::new();
    for r in reasons.iter().filter(|r| r.value > 0.0) {
        by_gpu
            .entry((r.label("instance"), r.label("uuid")))
            .or_default()
            .push(r);
    }
    let entries: Vec<RiskEntry> = table
        .iter()
        .map(|s| {
            let mut mine = by_gpu
                .get(&(s.label("instance"), s.label("uuid")))
                .cloned()
                .unwrap_or_default();
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
                health: verdicts.of(s.label("instance"), s.label("uuid")),
            }
        })
        .collect();
    Ok(entries)
}

const MONTH_SECONDS: i64 = 30 * 24 * 3600;
const MONTHS: i64 = 6;

/// The part of the capacity plan the period's own figures do not give: the five months
/// before the last, and the stretch of the last month before the period (the period's are
/// in its usage rows and hourly rows, so the store reads each sample once per report). The
/// last month's GPU-hours are asked for whole when the period is a month or longer: its
/// owner rows cannot be cut at a month's start. Each month is read from the hourly records
/// where the rules cover it and from raw samples elsewhere ([`Reading::over`]).
pub(super) struct EarlierMonths {
    /// Held GPU-hours of the five months before the last, oldest first.
    held: Vec<f64>,
    /// Their demand (whole GPUs of work, averaged over the hours with data).
    demand: Vec<f64>,
    /// The last month: held GPU-hours before the previous period (when the period and the
    /// one before it fit in a month) or before the period, or the whole month.
    last_held: f64,
    /// The last month before the period: summed hourly demand and hours with data.
    last_demand: (f64, usize),
}

/// Which parts of the last month the period's rows cover.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum LastMonth {
    /// The period and the one before it lie in the month; the store adds what is older.
    BothPeriods,
    /// Only the period lies in it.
    Period,
    /// The period covers the month: its GPU-hours are asked for whole.
    Whole,
}

impl LastMonth {
    pub(super) fn of(window: i64) -> LastMonth {
        if 2 * window <= MONTH_SECONDS {
            LastMonth::BothPeriods
        } else if window < MONTH_SECONDS {
            LastMonth::Period
        } else {
            LastMonth::Whole
        }
    }
}

pub(super) fn earlier_months(
    reading: &Reading<'_>,
    spec: &ReportSpec,
    window: i64,
) -> anyhow::Result<EarlierMonths> {
    let month = chrono::TimeDelta::seconds(MONTH_SECONDS);
    let ends: Vec<DateTime<Utc>> = (1..MONTHS)
        .rev()
        .map(|k| spec.to - month * k as i32)
        .collect();
    let period = chrono::TimeDelta::seconds(window);
    let month_start = spec.to - month;
    // The stretch of the last month the store answers for: (start, end), empty when none.
    let (held_span, demand_span) = match LastMonth::of(window) {
        LastMonth::BothPeriods => ((month_start, spec.from - period), (month_start, spec.from)),
        LastMonth::Period => ((month_start, spec.from), (month_start, spec.from)),
        LastMonth::Whole => ((month_start, spec.to), (spec.from, spec.from)),
    };
    let mean = |(sum, hours): (f64, usize)| if hours > 0 { sum / hours as f64 } else { 0.0 };
    std::thread::scope(|scope| {
        // Each month planned by its own census: a month before the store's history has no
        // series, and costs a query a figure.
        let months: Vec<_> = ends
            .iter()
            .map(|&end| {
                scope.spawn(move || -> anyhow::Result<(f64, f64)> {
                    let planner = reading.planner_for(end - month, end)?;
                    let held = reading.held_hours(&planner, end - month, end)?;
                    let demand = reading.demand(&planner, end - month, end)?;
                    Ok((held.max(0.0), mean(demand)))
                })
            })
            .collect();
        let last = scope.spawn(|| -> anyhow::Result<(f64, (f64, usize))> {
            let planner = reading.planner_for(month_start, held_span.1.max(demand_span.1))?;
            let held = match held_span {
                (a, b) if b > a => reading.held_hours(&planner, a, b)?,
                _ => 0.0,
            };
            let demand = match demand_span {
                (a, b) if b > a => reading.demand(&planner, a, b)?,
                _ => (0.0, 0),
            };
            Ok((held, demand))
        });
        let mut held = Vec::with_capacity(months.len());
        let mut demand = Vec::with_capacity(months.len());
        for handle in months {
            let (h, d) = joined(handle)?;
            held.push(h);
            demand.push(d);
        }
        let (last_held, last_demand) = joined(last)?;
        Ok(EarlierMonths {
            held,
            demand,
            last_held,
            last_demand,
        })
    })
}

/// The plan from the earlier months and the period's figures: `held_hours` are the
/// period's and the previous period's GPU-hours held.
pub(super) fn capacity(
    earlier: EarlierMonths,
    hourly: &Hourly,
    held_hours: (f64, f64),
    spec: &ReportSpec,
    window: i64,
) -> Capacity {
    let (current, previous) = held_hours;
    let last_held = match LastMonth::of(window) {
        LastMonth::BothPeriods => earlier.last_held + current + previous,
        LastMonth::Period => earlier.last_held + current,
        LastMonth::Whole => earlier.last_held,
    };
    let (sum, hours) = hourly.demand_since(spec.to - chrono::TimeDelta::seconds(MONTH_SECONDS));
    let (before, before_hours) = earlier.last_demand;
    // Hours counted by the store: a store answering nonsense must not overflow them.
    let all_hours = hours.saturating_add(before_hours);
    let last_demand = if all_hours > 0 {
        (sum + before) / all_hours as f64
    } else {
        0.0
    };
    let mut held = earlier.held;
    held.push(last_held);
    let mut demand = earlier.demand;
    demand.push(last_demand);
    plan_capacity(held, demand, hourly.gpus.len(), spec.capacity.buffer)
}

/// The plan from monthly figures: growth is the mean ratio of consecutive months that both
/// have data (a month with none is before the store's history, not a month of no work).
pub(crate) fn plan_capacity(
    held: Vec<f64>,
    demand: Vec<f64>,
    gpus: usize,
    buffer: f64,
) -> Capacity {
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

/// Own versus rent at the fleet's mean utilization and power over the period.
pub(super) fn tco(hourly: &Hourly, spec: &ReportSpec, window: i64) -> Tco {
    let months = window as f64 / MONTH_SECONDS as f64;
    compare_tco(
        &spec.cost,
        hourly.utilization(),
        hourly.power(),
        hourly.busy_gpu_hours() / months.max(f64::MIN_POSITIVE),
    )
}

/// Owning costs every hour; renting costs the hours used. So owning wins above the
/// utilization where `owned ÷ utilization` drops under the cloud price.
pub(crate) fn compare_tco(
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
mod tests;
