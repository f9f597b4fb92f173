//! The fleet's GPUs ranked by failure risk, read from the store: what `review` shows for one
//! exporter, for every host the store holds. Each figure is the last value of its series in
//! the hour before `at` (a host that stopped reporting shows what it said last, up to an
//! hour old); series are joined on `instance` and `uuid`.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::plan::census::{Census, scrape_interval};
use super::plan::shard::select;
use super::plan::{Limits, Planner, Query, Shape};
use super::prom::{Client, Sample};

/// The families the review reads.
const FAMILIES: [&str; 7] = [
    "gpu_info",
    "gpu_failure_risk_score",
    "gpu_up",
    "gpu_utilization_ratio",
    "gpu_temperature_celsius",
    "gpu_failure_risk_rule",
    "gpu_failure_risk_contribution",
];

/// One GPU of the fleet, as the store last saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetGpu {
    pub host: String,
    pub gpu: String,
    pub uuid: String,
    pub name: String,
    pub up: bool,
    pub risk: Option<f64>,
    /// A known-bad rule that holds (`gpu_failure_risk_rule`).
    pub rule: Option<String>,
    pub utilization: Option<f64>,
    pub temperature: Option<f64>,
    /// (feature, contribution), largest first, only those above zero.
    pub reasons: Vec<(String, f64)>,
}

type Key = (String, String);

fn key(s: &Sample) -> Key {
    (s.label("instance").to_string(), s.label("uuid").to_string())
}

/// Every GPU with a risk score or an info series in the hour before `at`, most at risk
/// first; `max_samples` as for the report (`None`: the store's flag, else the default).
pub fn rank(
    client: &Client,
    at: DateTime<Utc>,
    max_samples: Option<u64>,
) -> anyhow::Result<Vec<FleetGpu>> {
    let window = std::time::Duration::from_secs(3600);
    let start = at - chrono::TimeDelta::hours(1);
    let census = Census::take(client, "instance", &FAMILIES, start, at)?;
    let interval = scrape_interval(client, &census, "gpu_up", start, at)?
        .unwrap_or(std::time::Duration::from_secs(60));
    let planner = Planner::new(client, Limits::of(client, max_samples), census, interval);
    let last = |metric: &'static str| {
        planner.rows(
            &Query {
                reads: vec![(metric.to_string(), 1.0)],
                shape: Shape::At { window },
                by_host: true,
                per_series: false,
                text: Box::new(move |p| {
                    format!("last_over_time({}[1h])", select(metric, &[p.hosts]))
                }),
            },
            at,
        )
    };
    let info = last("gpu_info")?;
    let scores = last("gpu_failure_risk_score")?;
    anyhow::ensure!(
        !info.is_empty() || !scores.is_empty(),
        "{} has no gpu_info or gpu_failure_risk_score in the hour before {at}: no gpu-sentinel reported into this store then",
        client.base()
    );
    let mut gpus: BTreeMap<Key, FleetGpu> = BTreeMap::new();
    let mut entry = |s: &Sample| -> Key {
        let k = key(s);
        gpus.entry(k.clone()).or_insert_with(|| FleetGpu {
            host: k.0.clone(),
            gpu: s.label("gpu").to_string(),
            uuid: k.1.clone(),
            name: String::new(),
            up: true,
            risk: None,
            rule: None,
            utilization: None,
            temperature: None,
            reasons: Vec::new(),
        });
        k
    };
    let mut keyed: Vec<(Key, &'static str, Sample)> = Vec::new();
    for (metric, rows) in [
        ("info", info),
        ("score", scores),
        ("up", last("gpu_up")?),
        ("util", last("gpu_utilization_ratio")?),
        ("temp", last("gpu_temperature_celsius")?),
        ("rule", last("gpu_failure_risk_rule")?),
        ("reason", last("gpu_failure_risk_contribution")?),
    ] {
        for row in rows {
            keyed.push((entry(&row), metric, row));
        }
    }
    for (k, metric, row) in keyed {
        let Some(gpu) = gpus.get_mut(&k) else {
            continue;
        };
        let value = Some(row.value).filter(|v| v.is_finite());
        match metric {
            "info" => gpu.name = row.label("name").to_string(),
            "score" => gpu.risk = value,
            "up" => gpu.up = row.value >= 1.0,
            "util" => gpu.utilization = value,
            "temp" => gpu.temperature = value,
            "rule" if row.value >= 1.0 => gpu.rule = Some(row.label("rule").to_string()),
            "reason" if row.value > 0.0 => gpu
                .reasons
                .push((row.label("feature").to_string(), row.value)),
            _ => {}
        }
    }
    let mut ranked: Vec<FleetGpu> = gpus.into_values().collect();
    for gpu in &mut ranked {
        gpu.reasons.sort_by(|a, b| b.1.total_cmp(&a.1));
    }
    ranked.sort_by(|a, b| {
        b.risk
            .unwrap_or(0.0)
            .total_cmp(&a.risk.unwrap_or(0.0))
            .then_with(|| a.up.cmp(&b.up))
            .then_with(|| (&a.host, &a.gpu).cmp(&(&b.host, &b.gpu)))
    });
    Ok(ranked)
}
