//! How a report reads the store: what the store holds (the census its queries are planned
//! by, the scrape interval, which hours the recording rules cover), and each quantity that
//! adds up over time — GPU-seconds held, work done, hours with data — read from the rules'
//! hourly records where they cover the period and from raw samples elsewhere, every query
//! planned into pieces the store's limits allow ([`super::plan`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde::Serialize;

use super::dialect::{Counted, Dialect};
use super::plan::census::{Census, scrape_interval};
use super::plan::merge::Sums;
use super::plan::shard::select;
use super::plan::{Limits, Planner, Query, Shape};
use super::prom::{Client, Sample, misunderstood, refusal};
use super::recorded::{Coverage, EVERY, Names, threshold_label};
use super::spec::ReportSpec;

/// The span the capacity plan looks back over: six 30-day months.
pub const HISTORY: TimeDelta = TimeDelta::days(180);

/// GPU-seconds below which a row taken down by another ([`Counted::less`]) is rounding.
const LEAST_SECONDS: f64 = 1e-3;

/// The scrape interval assumed where the store's samples do not tell it: Prometheus's
/// default `scrape_interval`.
const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);

/// The families of the risk review (gpu-sentinel's metrics only).
pub(crate) const RISK_FAMILIES: [&str; 2] =
    ["gpu_failure_risk_score", "gpu_failure_risk_contribution"];

/// What the report read, for its readers (`store` in the JSON).
#[derive(Debug, Clone, Default, Serialize)]
pub struct StoreUse {
    /// `recording rules`, `raw samples`, or `recording rules and raw samples`.
    pub read: &'static str,
    /// Hours of the period read from the hourly records.
    pub recorded_hours: usize,
    /// Hours of the period read from raw samples.
    pub raw_hours: usize,
    /// The interval the store's samples were scraped at (the spacing of its raw samples).
    pub scrape_interval_seconds: f64,
    /// The resolution dcgm-exporter's held GPU-seconds were counted at.
    pub step_seconds: f64,
    /// Samples one query may load in the store, as the plan assumed.
    pub max_samples: u64,
    /// Requests sent to the store, retries included.
    pub queries: usize,
    /// Pieces the store refused for their size, asked for again in halves.
    pub refused: usize,
}

/// One report's reading of the store.
pub struct Reading<'c> {
    pub dialect: Dialect,
    /// The planner of the period and the one before it; other spans get their own
    /// ([`Reading::planner_for`]).
    pub planner: Planner<'c>,
    /// The families the censuses count.
    families: Vec<&'static str>,
    /// The records among them counted by a raw family's series ([`Names::bounded`]).
    bounded: Vec<(&'static str, &'static str)>,
    limits: Limits,
    refusals: Arc<AtomicUsize>,
    /// The subquery resolution of dcgm-exporter's held GPU-seconds.
    pub step: Duration,
    pub names: Names,
    /// Evaluations of the hourly rules (empty: none in the store).
    pub(crate) coverage: Coverage,
    /// Whether the held records may be added up: dcgm-exporter's must have been counted
    /// with this report's memory floor and idle threshold.
    pub(crate) held_recorded: bool,
    /// Whether the store holds dcgm-exporter's MIG instances (`GPU_I_ID`) in its history.
    gpu_instances: bool,
    pub idle_threshold: f64,
    pub max_samples: u64,
}

impl<'c> Reading<'c> {
    /// What the store holds for `spec`'s report, in `dialect`.
    pub fn open(client: &'c Client, dialect: Dialect, spec: &ReportSpec) -> anyhow::Result<Self> {
        let start = spec.to - HISTORY;
        let names = Names::of(dialect);
        let listed = client.label_values(
            "__name__",
            &format!("{{__name__=~\"{}\"}}", names.all().join("|")),
            start,
            spec.to,
        )?;
        let has = |family: &str| listed.iter().any(|n| n == family);
        let recorded = has(names.evaluated) && has(names.utilization) && has(names.power);
        let mut families: Vec<&str> = dialect.families().to_vec();
        if dialect == Dialect::Native {
            families.extend(RISK_FAMILIES);
            families.extend(super::report_health::HEALTH_FAMILIES);
        }
        families.extend(dialect.mig_families());
        let mut bounded = Vec::new();
        if recorded {
            families.extend(names.all().into_iter().filter(|f| has(f)));
            bounded = names.bounded(dialect);
            bounded.retain(|(record, _)| has(record));
        }
        let period_start = spec.from - (spec.to - spec.from);
        let census = take_census(
            client,
            dialect.host(),
            &families,
            &bounded,
            period_start,
            spec.to,
        )?;
        let interval = scrape_interval(
            client,
            &census,
            dialect.utilization_metric(),
            spec.from,
            spec.to,
        )?
        .unwrap_or_else(|| {
            tracing::warn!(
                "{}: no two samples of {} a scrape apart near the period's end, middle or start; planning with a {}s scrape interval",
                crate::redact::url(client.base()),
                dialect.utilization_metric(),
                DEFAULT_INTERVAL.as_secs()
            );
            DEFAULT_INTERVAL
        });
        let limits = Limits::of(client, spec.max_samples);
        let max_samples = limits.peak_samples * 2;
        let refusals = Arc::<AtomicUsize>::default();
        let planner =
            Planner::new(client, limits.clone(), census, interval).counting_into(refusals.clone());
        // dcgm-exporter's MIG instances carry `GPU_I_ID`: their activity is read as well,
        // and where the store's index does not say, as if there were some.
        let gpu_instances = match dialect {
            Dialect::Native => false,
            Dialect::Dcgm { .. } => {
                match client.label_values("GPU_I_ID", "DCGM_FI_DEV_FB_USED", start, spec.to) {
                    Ok(ids) => ids.iter().any(|id| !id.is_empty()),
                    Err(error) if misunderstood(&error) || refusal(&error).is_some() => {
                        tracing::debug!("{error:#}; reading MIG instances' activity as well");
                        true
                    }
                    Err(error) => return Err(error),
                }
            }
        };
        let held_recorded = recorded
            && has(names.held)
            && match dialect {
                Dialect::Native => true,
                Dialect::Dcgm { memory_floor_mib } => {
                    client
                        .label_values(
                            "idle_threshold",
                            &select(
                                names.held,
                                &[&format!("memory_floor_mib=\"{memory_floor_mib}\"")],
                            ),
                            start,
                            spec.to,
                        )?
                        .contains(&threshold_label(spec.idle_threshold))
                        // The held records count a MIG instance as a whole GPU: a store
                        // with GPU instances is read from raw samples, each at its share.
                        && !gpu_instances
                }
            };
        let mut reading = Reading {
            dialect,
            planner,
            families,
            bounded,
            limits,
            refusals,
            step: spec.step.unwrap_or(interval).max(Duration::from_secs(1)),
            names,
            coverage: Coverage::default(),
            held_recorded,
            gpu_instances,
            idle_threshold: spec.idle_threshold,
            max_samples,
        };
        if recorded {
            reading.coverage = reading.evaluations(start, spec.to)?;
        }
        Ok(reading)
    }

    /// The hourly rules' evaluations between `start` and `end`: the marker's samples.
    fn evaluations(&self, start: DateTime<Utc>, end: DateTime<Utc>) -> anyhow::Result<Coverage> {
        let marker = self.names.evaluated;
        let query = Query {
            reads: vec![(marker.to_string(), 1.0)],
            shape: Shape::Raw {
                every: EVERY,
                phase: Duration::ZERO,
            },
            by_host: false,
            per_series: false,
            text: Box::new(move |p| format!("{marker}[{}]", p.window)),
        };
        let mut evaluations: Vec<DateTime<Utc>> = self
            .planner
            .raw(&query, start, end)?
            .into_iter()
            .flat_map(|s| s.points.into_iter().map(|(at, _)| at))
            .collect();
        evaluations.sort();
        evaluations.dedup();
        Ok(Coverage { evaluations })
    }

    /// The records' sampling: an hour, at the rules' phase.
    pub(crate) fn recorded_shape(&self) -> Shape {
        let phase = self.coverage.evaluations.first().map_or(0, |e| {
            e.timestamp_millis()
                .rem_euclid(EVERY.as_millis() as i64)
                .unsigned_abs()
        });
        Shape::Recorded {
            every: EVERY,
            phase: Duration::from_millis(phase),
        }
    }

    /// The raw samples of the records (the same sampling).
    pub(crate) fn recorded_raw_shape(&self) -> Shape {
        match self.recorded_shape() {
            Shape::Recorded { every, phase } => Shape::Raw { every, phase },
            other => other,
        }
    }

    /// What the report read in `(from, to]`, for its `store` key.
    pub(crate) fn store_use(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> StoreUse {
        let recorded_hours = self.coverage.hours(from, to);
        let period_hours = ((to - from).num_seconds() as f64 / 3600.0).round().max(0.0) as usize;
        let raw_hours = period_hours.saturating_sub(recorded_hours);
        StoreUse {
            read: match (recorded_hours, raw_hours) {
                (0, _) => "raw samples",
                (_, 0) => "recording rules",
                _ => "recording rules and raw samples",
            },
            recorded_hours,
            raw_hours,
            scrape_interval_seconds: self.planner.interval.as_secs_f64(),
            step_seconds: self.step.as_secs_f64(),
            max_samples: self.max_samples,
            queries: self.planner.client.sent(),
            refused: self.refusals.load(Ordering::Relaxed),
        }
    }

    /// A planner for `(start, end]`: a census of that span's series (a month before the
    /// period may hold fewer hosts, or none).
    pub(crate) fn planner_for(
        &self,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
    ) -> anyhow::Result<Planner<'c>> {
        let client = self.planner.client;
        let census = take_census(
            client,
            self.dialect.host(),
            &self.families,
            &self.bounded,
            start,
            end,
        )?;
        Ok(
            Planner::new(client, self.limits.clone(), census, self.planner.interval)
                .counting_into(self.refusals.clone()),
        )
    }

    /// A quantity over `(from, to]` that adds up over time and hosts: `recorded` (when
    /// the records may be used) over the runs of hours the records cover, each of `raw`
    /// over the rest, every row in the report's labels (`raw`'s counted as each says).
    pub fn over(
        &self,
        planner: &Planner<'_>,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        recorded: Option<&Query<'_>>,
        raw: &[(Query<'_>, Counted)],
    ) -> anyhow::Result<Vec<Sample>> {
        let mut sums = Sums::default();
        let normalise = |rows: Vec<Sample>, state| {
            rows.into_iter()
                .map(|row| self.dialect.normalise(row, state))
                .collect::<Vec<_>>()
        };
        let gaps = match recorded {
            Some(recorded) => {
                for run in self.coverage.runs(from, to) {
                    let (start, end) = run.reads();
                    sums.add(normalise(planner.sum(recorded, start, end)?, None));
                }
                self.coverage.gaps(from, to)
            }
            None => vec![(from, to)],
        };
        for (start, end) in gaps {
            for (query, counted) in raw {
                let rows = planner.sum(query, start, end)?;
                if let Some(less) = counted.less {
                    let taken = rows.iter().map(|row| Sample {
                        labels: row.labels.clone(),
                        value: -row.value,
                    });
                    sums.add(normalise(taken.collect(), Some(less)));
                }
                sums.add(normalise(rows, counted.state));
            }
        }
        let mut rows = sums.finish();
        // A state taken down to nothing (a GPU busy whenever held) has no row, as when the
        // store answers it. Nothing there is not always 0.0: MIG shares are applied before
        // the subtraction and pieces are added as they arrive, so held less busy can leave
        // a rounding's worth — and less than nothing where samples arrived between the two
        // queries. A real row is at least a subquery step (a second or more) times a share.
        let less: Vec<&str> = raw.iter().filter_map(|(_, c)| c.less).collect();
        drop_rounding(&mut rows, &less);
        Ok(rows)
    }

    /// GPU-seconds held in `(from, to]` by owner, host, team and state (and GPU when
    /// `per_gpu`).
    pub fn usage(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        per_gpu: bool,
    ) -> anyhow::Result<Vec<Sample>> {
        let (dialect, step, threshold) = (self.dialect, self.step, self.idle_threshold);
        let instances = self.gpu_instances;
        let raw: Vec<(Query<'_>, Counted)> = dialect
            .usage("", "1s", step, threshold, per_gpu, instances)
            .into_iter()
            .enumerate()
            .map(|(k, (_, counted))| {
                let query = Query {
                    reads: dialect.held_reads(),
                    shape: self.raw_window(),
                    by_host: true,
                    per_series: false,
                    text: Box::new(move |p| {
                        dialect.usage(p.hosts, p.window, step, threshold, per_gpu, instances)[k]
                            .0
                            .clone()
                    }),
                };
                (query, counted)
            })
            .collect();
        let by = match (dialect, per_gpu) {
            (Dialect::Native, true) => "instance, gpu, owner, team, state",
            (Dialect::Native, false) => "instance, owner, team, state",
            (Dialect::Dcgm { .. }, true) => "Hostname, gpu, namespace, state",
            (Dialect::Dcgm { .. }, false) => "Hostname, namespace, state",
        };
        let recorded = self.held_query(move |held, window| {
            format!("sum by ({by}) (sum_over_time({held}[{window}]))")
        });
        self.over(&self.planner, from, to, recorded.as_ref(), &raw)
    }

    /// The fleet's GPU-hours held in `(from, to]`, read with `planner`.
    pub(crate) fn held_hours(
        &self,
        planner: &Planner<'_>,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> anyhow::Result<f64> {
        let (dialect, step) = (self.dialect, self.step);
        let raw = Query {
            reads: dialect.held_reads(),
            shape: self.raw_window(),
            by_host: true,
            per_series: false,
            text: Box::new(move |p| dialect.held_seconds(p.hosts, p.window, step)),
        };
        let recorded =
            self.held_query(|held, window| format!("sum(sum_over_time({held}[{window}]))"));
        let rows = self.over(
            planner,
            from,
            to,
            recorded.as_ref(),
            &[(raw, Counted::AS_LABELLED)],
        )?;
        Ok(rows.iter().map(|r| r.value.max(0.0)).sum::<f64>() / 3600.0)
    }

    /// The fleet's work in `(from, to]`: its summed hourly utilization (GPU-hours of work)
    /// and the hours with data, read with `planner`.
    pub fn demand(
        &self,
        planner: &Planner<'_>,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> anyhow::Result<(f64, usize)> {
        let dialect = self.dialect;
        let hourly = move |hosts: &str| dialect.per_gpu(&dialect.utilization_over(hosts, "1h"));
        let reads = vec![(dialect.utilization_metric().to_string(), 1.0)];
        let step = Some(Duration::from_secs(3600));
        let raw_sum = Query {
            reads: reads.clone(),
            shape: Shape::Window { step },
            by_host: true,
            per_series: false,
            text: Box::new(move |p| {
                format!("sum_over_time(sum({})[{}:1h])", hourly(p.hosts), p.window)
            }),
        };
        let raw_hours = Query {
            reads,
            shape: Shape::Window { step },
            // Hours with data anywhere in the fleet: host groups would each count theirs.
            by_host: false,
            per_series: false,
            text: Box::new(move |p| {
                format!("count_over_time(sum({})[{}:1h])", hourly(p.hosts), p.window)
            }),
        };
        let recorded = !self.coverage.evaluations.is_empty();
        let utilization = self.names.utilization;
        let recorded_sum = recorded.then(|| Query {
            reads: vec![(utilization.to_string(), 1.0)],
            shape: self.recorded_shape(),
            by_host: true,
            per_series: false,
            text: Box::new(move |p| {
                format!(
                    "sum(sum_over_time({}[{}]))",
                    select(utilization, &[p.hosts]),
                    p.window
                )
            }),
        });
        let marker = self.names.evaluated;
        let recorded_hours = recorded.then(|| Query {
            reads: vec![(marker.to_string(), 1.0)],
            shape: self.recorded_shape(),
            by_host: false,
            per_series: false,
            text: Box::new(move |p| format!("count_over_time({marker}[{}])", p.window)),
        });
        let total = |rows: Vec<Sample>| {
            rows.iter()
                .map(|r| r.value)
                .filter(|v| v.is_finite())
                .sum::<f64>()
        };
        // MIG GPUs' load (no utilization series in MIG mode), from raw samples: the hourly
        // rules do not record it.
        let mig_sum = Query {
            reads: dialect
                .mig_families()
                .into_iter()
                .map(|f| (f.to_string(), 1.0))
                .collect(),
            shape: Shape::Window { step },
            by_host: true,
            per_series: false,
            text: Box::new(move |p| {
                format!(
                    "sum_over_time(sum({})[{}:1h])",
                    dialect.mig_load(p.hosts, "1h"),
                    p.window
                )
            }),
        };
        let mig = if self.asks_mig_load() {
            total(self.over(planner, from, to, None, &[(mig_sum, Counted::AS_LABELLED)])?)
        } else {
            0.0
        };
        let sum = total(self.over(
            planner,
            from,
            to,
            recorded_sum.as_ref(),
            &[(raw_sum, Counted::AS_LABELLED)],
        )?) + mig;
        let hours = total(self.over(
            planner,
            from,
            to,
            recorded_hours.as_ref(),
            &[(raw_hours, Counted::AS_LABELLED)],
        )?);
        Ok((sum, hours.round().max(0.0) as usize))
    }

    /// Whether MIG GPUs' load is asked for: dcgm-exporter's instances carry `GPU_I_ID`, so
    /// a store without any has none to give.
    pub(crate) fn asks_mig_load(&self) -> bool {
        !matches!(self.dialect, Dialect::Dcgm { .. }) || self.gpu_instances
    }

    /// The shape of a raw held-time query: dcgm-exporter's is a subquery at the step.
    fn raw_window(&self) -> Shape {
        match self.dialect {
            Dialect::Native => Shape::Window { step: None },
            Dialect::Dcgm { .. } => Shape::Window {
                step: Some(self.step),
            },
        }
    }

    /// A query over the held records, when they may be used: `text(selector, window)`.
    fn held_query(
        &self,
        text: impl Fn(&str, &str) -> String + Sync + 'static,
    ) -> Option<Query<'static>> {
        if !self.held_recorded || self.coverage.evaluations.is_empty() {
            return None;
        }
        let (names, dialect, threshold) = (self.names, self.dialect, self.idle_threshold);
        Some(Query {
            reads: vec![(names.held.to_string(), 1.0)],
            shape: self.recorded_shape(),
            by_host: true,
            per_series: false,
            text: Box::new(move |p| {
                text(&names.held_selector(dialect, threshold, p.hosts), p.window)
            }),
        })
    }
}

/// Drops the rows of the states in `less` that hold less than [`LEAST_SECONDS`].
fn drop_rounding(rows: &mut Vec<Sample>, less: &[&str]) {
    rows.retain(|row| {
        row.value >= LEAST_SECONDS
            || !row
                .labels
                .get("state")
                .is_some_and(|state| less.contains(&state.as_str()))
    });
}

/// The census of `families` over `(start, end]`, the records in `bounded` not listed but
/// counted as their raw family's series over a span starting the rules' hour earlier (the
/// raw samples the records of the span were computed from): listing the owner records
/// alone is thousands of series at a few hundred hosts, and the store's index answers in
/// time with the series it lists.
fn take_census(
    client: &Client,
    host_label: &str,
    families: &[&'static str],
    bounded: &[(&'static str, &'static str)],
    start: DateTime<Utc>,
    end: DateTime<Utc>,
) -> anyhow::Result<Census> {
    let listed: Vec<&str> = families
        .iter()
        .copied()
        .filter(|f| !bounded.iter().any(|(record, _)| record == f))
        .collect();
    let since = if bounded.is_empty() {
        start
    } else {
        start - TimeDelta::seconds(EVERY.as_secs() as i64)
    };
    let mut census = Census::take(client, host_label, &listed, since, end)?;
    for (record, raw) in bounded {
        census.bound(record, raw);
    }
    Ok(census)
}

#[cfg(test)]
mod tests;
