//! Which dialect the store holds over a period, which hosts (`instance`) report in it,
//! and the interval their samples were scraped at: the survey `replay --prometheus` starts
//! with.

use std::collections::BTreeSet;
use std::time::Duration;

use super::{Dialect, Period, label};
use crate::plan::census::{Census, scrape_interval};
use crate::plan::shard::select;
use crate::plan::{Limits, Planner, Query, Shape};
use crate::prom::Client;

/// What the store holds over the period: the dialect, the hosts (`instance`) reporting,
/// and the interval their samples were scraped at (when two samples a scrape apart tell).
#[derive(Debug, Clone, PartialEq)]
pub struct Survey {
    pub dialect: Dialect,
    pub hosts: Vec<String>,
    pub interval: Option<Duration>,
}

/// Finds which dialect the store holds over `period` and which hosts report in it, and
/// the interval its samples were scraped at. An empty store, a period beyond its
/// retention, or a store with GPUs but no utilization is an error naming the metric and
/// the URL. `max_samples` as for the report (`None`: the store's flag, else the default).
pub fn survey(
    client: &Client,
    period: &Period,
    max_samples: Option<u64>,
) -> anyhow::Result<Survey> {
    // Asked in windows, one point each, rather than over the whole period at once, and in
    // host groups where the fleet is large: a store limits the samples one evaluation may
    // load. Windows end at `to` and go back until they cover `from`; the first may reach up
    // to one window before it (a host seen only there replays no snapshot and is left out).
    let window = period.survey_window();
    let windows = (period.to - period.from).num_seconds() / window.num_seconds().max(1);
    let start = period.to - window * i32::try_from(windows).unwrap_or(i32::MAX);
    const FAMILIES: [&str; 4] = [
        "gpu_up",
        "gpu_utilization_ratio",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    ];
    let census = Census::take(client, "instance", &FAMILIES, start - window, period.to)?;
    let mut interval = None;
    for family in [
        "gpu_up",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    ] {
        interval = scrape_interval(client, &census, family, period.from, period.to)?;
        if interval.is_some() {
            break;
        }
    }
    let planner = Planner::new(
        client,
        Limits::of(client, max_samples),
        census,
        interval.unwrap_or(Duration::from_secs(60)),
    );
    let step = window.to_std().unwrap_or(Duration::from_secs(3600));
    let hosts_of = |metric: &'static str| -> anyhow::Result<Vec<String>> {
        let query = Query {
            reads: vec![(metric.to_string(), 1.0)],
            shape: Shape::Range { step, window: step },
            by_host: true,
            per_series: false,
            text: Box::new(move |p| {
                format!(
                    "group by (instance) (last_over_time({}[{}s]))",
                    select(metric, &[p.hosts]),
                    step.as_secs() + 1
                )
            }),
        };
        let hosts: BTreeSet<String> = planner
            .range(&query, start, period.to)?
            .iter()
            .map(|s| label(&s.labels, "instance").to_string())
            .collect();
        Ok(hosts.into_iter().collect())
    };
    let (from, to) = (period.from.to_rfc3339(), period.to.to_rfc3339());
    let hosts = hosts_of("gpu_up")?;
    if !hosts.is_empty() {
        anyhow::ensure!(
            !hosts_of("gpu_utilization_ratio")?.is_empty(),
            "{} holds gpu_up but no gpu_utilization_ratio from {from} to {to}: the engine needs \
             utilization (were the scrapes relabelled or the family dropped?)",
            crate::redact::url(client.base())
        );
        return Ok(Survey {
            dialect: Dialect::GpuSentinel,
            hosts,
            interval,
        });
    }
    let mut hosts = hosts_of("DCGM_FI_DEV_GPU_UTIL")?;
    if hosts.is_empty() {
        hosts = hosts_of("DCGM_FI_PROF_GR_ENGINE_ACTIVE")?;
    }
    if !hosts.is_empty() {
        return Ok(Survey {
            dialect: Dialect::DcgmExporter,
            hosts,
            interval,
        });
    }
    anyhow::bail!(
        "{} has no gpu_up (gpu-sentinel) and no DCGM_FI_DEV_GPU_UTIL or \
         DCGM_FI_PROF_GR_ENGINE_ACTIVE (dcgm-exporter) sample from {from} to {to}: the period \
         is beyond the store's retention, or no GPU exporter was scraped into it then",
        crate::redact::url(client.base())
    )
}
