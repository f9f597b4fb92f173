//! Each GPU's hourly mean utilization and power, read from the store once per report, and
//! every fleet figure that needs utilization or power combined from those rows.
//!
//! Two range queries, `avg by (host, gpu) (avg_over_time(…[1h]))` stepping an hour from the
//! period's start: the hours tile the period, so Prometheus reads each utilization and power
//! sample once, and the answer is one point per GPU and hour (512 GPUs × 168 hours for a
//! week), not the samples. Where the recording rules cover the period, their hourly records
//! are those points already, and the store reads nothing else (`super::recorded`). The averaging within each hour is the store's; here hours and GPUs
//! are only combined — mean utilization, scaling, idle power, night- and weekend-idle hosts
//! and their energy, both heatmaps, own-versus-rent's power and busy GPU-hours, and the
//! capacity plan's demand in the period. Before, each of those figures was its own query,
//! and the store read the same samples about six times (BENCHMARKS.md, "The fleet report
//! against one Prometheus pass").

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Datelike, TimeDelta, Timelike, Utc};
use serde::Serialize;

use super::plan::shard::select;
use super::plan::{Query, Shape};
use super::prom::{Series, joined};
use super::reading::Reading;

/// Slices of the node heatmap per period: enough to see days and nights in a week.
pub(crate) const NODE_SLICES: usize = 84;

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

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeatCell {
    /// `YYYY-MM-DD`, UTC.
    pub day: String,
    pub hour: u32,
    pub utilization: f64,
}

/// The period hour by hour.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hourly {
    /// The end of the first slice: point `i` averages the slice that ends at
    /// `first + i × slice`.
    pub first: DateTime<Utc>,
    /// An hour, or the whole period when it is shorter.
    pub slice: TimeDelta,
    pub slices: usize,
    /// By host, then GPU; only GPUs with utilization in the period.
    pub gpus: Vec<GpuHours>,
}

/// One GPU's slices (`None`: no sample in that slice).
#[derive(Debug, Clone, PartialEq)]
pub struct GpuHours {
    pub host: String,
    pub gpu: String,
    /// 0–1.
    pub utilization: Vec<Option<f64>>,
    /// Watts.
    pub power: Vec<Option<f64>>,
}

impl Hourly {
    /// Asks the store for the period's hourly utilization and power, the two side by side:
    /// the hours the recording rules cover from their records, the others from raw samples
    /// (`avg_over_time(…[1h])` stepping an hour), each query planned into pieces the store
    /// allows.
    pub fn fetch(
        reading: &Reading<'_>,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> anyhow::Result<Hourly> {
        let slice = TimeDelta::hours(1)
            .min(to - from)
            .max(TimeDelta::seconds(1));
        let first = from + slice;
        let slices = usize::try_from((to - first).num_seconds() / slice.num_seconds() + 1)
            .unwrap_or(0)
            .max(1);
        let dialect = reading.dialect;
        let range = format!("{}s", slice.num_seconds());
        let step = Duration::from_secs(slice.num_seconds().unsigned_abs());
        // The slices the records cover: each evaluation's hour, placed at the nearest slice.
        let mut recorded = vec![false; slices];
        let runs = if slice == TimeDelta::hours(1) {
            reading.coverage.runs(from, to)
        } else {
            Vec::new()
        };
        for run in &runs {
            for e in reading
                .coverage
                .evaluations
                .iter()
                .filter(|e| (run.first..=run.last).contains(e))
            {
                if let Some(cell) = slot(first, slice, *e).and_then(|i| recorded.get_mut(i)) {
                    *cell = true;
                }
            }
        }
        let raw_slices = unrecorded(&recorded);
        let raw_query = |family: &'static str, text: Box<dyn Fn(&str) -> String + Sync>| Query {
            reads: vec![(family.to_string(), 1.0)],
            shape: Shape::Range { step, window: step },
            by_host: true,
            per_series: false,
            text: Box::new(move |p| text(p.hosts)),
        };
        let (utilization_range, power_range) = (range.clone(), range);
        let raw_utilization = raw_query(
            dialect.utilization_metric(),
            Box::new(move |hosts| {
                dialect.per_gpu(&dialect.utilization_over(hosts, &utilization_range))
            }),
        );
        let raw_power = raw_query(
            dialect.families()[1],
            Box::new(move |hosts| dialect.per_gpu(&dialect.power_over(hosts, &power_range))),
        );
        let recorded_query = |family: &'static str| Query {
            reads: vec![(family.to_string(), 1.0)],
            shape: reading.recorded_raw_shape(),
            by_host: true,
            per_series: false,
            text: Box::new(move |p| format!("{}[{}]", select(family, &[p.hosts]), p.window)),
        };
        let (recorded_utilization, recorded_power) = (
            recorded_query(reading.names.utilization),
            recorded_query(reading.names.power),
        );
        let at = |i: usize| first + slice * i as i32;
        let fetch = |raw: &Query<'_>, recorded: &Query<'_>| -> anyhow::Result<Vec<Series>> {
            let mut all = Vec::new();
            for (a, b) in &raw_slices {
                all.extend(reading.planner.range(raw, at(*a), at(*b))?);
            }
            for run in &runs {
                let (start, end) = run.reads();
                all.extend(reading.planner.raw(recorded, start, end)?);
            }
            Ok(all)
        };
        // A GPU in MIG mode has no utilization series: its load is its instances' activity
        // by share, read from raw samples for every slice (the rules do not record it).
        let mig_range = format!("{}s", slice.num_seconds());
        let mig = Query {
            reads: dialect
                .mig_families()
                .into_iter()
                .map(|f| (f.to_string(), 1.0))
                .collect(),
            shape: Shape::Range { step, window: step },
            by_host: true,
            per_series: false,
            text: Box::new(move |p| dialect.mig_load(p.hosts, &mig_range)),
        };
        let (utilization, power, mig) = std::thread::scope(|scope| {
            let utilization = scope.spawn(|| fetch(&raw_utilization, &recorded_utilization));
            let power = scope.spawn(|| fetch(&raw_power, &recorded_power));
            let mig = scope.spawn(|| match reading.asks_mig_load() {
                true => reading.planner.range(&mig, at(0), at(slices - 1)),
                false => Ok(Vec::new()),
            });
            (joined(utilization), joined(power), joined(mig))
        });
        let mut utilization = utilization?;
        utilization.extend(mig?);
        Ok(Hourly::from_series(
            first,
            slice,
            slices,
            dialect.host(),
            utilization,
            power?,
        ))
    }

    /// The rows of the two answers, matched by host and GPU; where a GPU has several
    /// series (a replaced card under the same index, dcgm-exporter's series per pod), each
    /// slice is the mean of theirs.
    pub(crate) fn from_series(
        first: DateTime<Utc>,
        slice: TimeDelta,
        slices: usize,
        host: &str,
        utilization: Vec<Series>,
        power: Vec<Series>,
    ) -> Hourly {
        type Sums = Vec<(f64, u32)>;
        let mut sums: BTreeMap<(String, String), (Sums, Sums)> = BTreeMap::new();
        let key = |s: &Series| {
            let label = |name: &str| s.labels.get(name).cloned().unwrap_or_default();
            (label(host), label("gpu"))
        };
        for s in &utilization {
            let row = sums
                .entry(key(s))
                .or_insert_with(|| (vec![(0.0, 0); slices], vec![(0.0, 0); slices]));
            add(&mut row.0, &s.points, first, slice);
        }
        for s in &power {
            // Power of a GPU without utilization is no GPU the report counts.
            if let Some(row) = sums.get_mut(&key(s)) {
                add(&mut row.1, &s.points, first, slice);
            }
        }
        let means = |cells: Sums| -> Vec<Option<f64>> {
            cells
                .into_iter()
                .map(|(sum, n)| (n > 0).then(|| sum / f64::from(n)))
                .collect()
        };
        let gpus: Vec<GpuHours> = sums
            .into_iter()
            .map(|((host, gpu), (utilization, power))| GpuHours {
                host,
                gpu,
                utilization: means(utilization),
                power: means(power),
            })
            .filter(|g| g.utilization.iter().any(Option::is_some))
            .collect();
        Hourly {
            first,
            slice,
            slices,
            gpus,
        }
    }

    /// The start of slice `i`.
    fn start_of(&self, i: usize) -> DateTime<Utc> {
        self.first + self.slice * (i as i32) - self.slice
    }

    /// Hours a slice lasts.
    fn hours(&self) -> f64 {
        self.slice.num_seconds() as f64 / 3600.0
    }

    /// Each GPU's mean utilization over its slices with data.
    pub(crate) fn gpu_means(&self) -> Vec<Option<f64>> {
        self.gpus.iter().map(|g| mean(&g.utilization)).collect()
    }

    /// The fleet's mean utilization: the mean of the GPUs' means.
    pub fn utilization(&self) -> f64 {
        mean(&self.gpu_means()).unwrap_or(0.0)
    }

    /// The fleet's mean power draw, watts: the mean of the GPUs' means.
    pub fn power(&self) -> Option<f64> {
        mean(&self.gpus.iter().map(|g| mean(&g.power)).collect::<Vec<_>>())
    }

    /// The mean power of the GPU-hours whose mean utilization was under `threshold`: each
    /// GPU's mean over its idle hours, then the mean over the GPUs that had any.
    pub(crate) fn idle_power(&self, threshold: f64) -> Option<f64> {
        let per_gpu: Vec<Option<f64>> = self
            .gpus
            .iter()
            .map(|g| {
                let idle: Vec<Option<f64>> = g
                    .utilization
                    .iter()
                    .zip(&g.power)
                    .map(|(u, p)| p.filter(|_| u.is_some_and(|u| u < threshold)))
                    .collect();
                mean(&idle)
            })
            .collect();
        mean(&per_gpu)
    }

    /// The fleet's work in GPU-hours: summed utilization, slice by slice.
    pub fn busy_gpu_hours(&self) -> f64 {
        let hours = self.hours();
        self.gpus
            .iter()
            .flat_map(|g| g.utilization.iter().flatten())
            .map(|u| u * hours)
            .sum()
    }

    /// The fleet's demand in the slices that end after `since`: the sum of the slices'
    /// summed utilization (whole GPUs of work), and how many slices had data.
    pub(crate) fn demand_since(&self, since: DateTime<Utc>) -> (f64, usize) {
        (0..self.slices)
            .filter(|i| self.start_of(*i) + self.slice > since)
            .filter_map(|i| {
                let values: Vec<f64> = self.gpus.iter().filter_map(|g| g.utilization[i]).collect();
                (!values.is_empty()).then(|| values.iter().sum::<f64>())
            })
            .fold((0.0, 0), |(sum, n), v| (sum + v, n + 1))
    }

    /// Mean fleet utilization of each slice, by UTC day and hour of its start.
    pub fn heatmap(&self) -> Vec<HeatCell> {
        (0..self.slices)
            .filter_map(|i| {
                let values: Vec<Option<f64>> = self.gpus.iter().map(|g| g.utilization[i]).collect();
                let start = self.start_of(i);
                mean(&values).map(|utilization| HeatCell {
                    day: format!(
                        "{:04}-{:02}-{:02}",
                        start.year(),
                        start.month(),
                        start.day()
                    ),
                    hour: start.hour(),
                    utilization,
                })
            })
            .collect()
    }

    /// Each host's mean utilization in consecutive runs of whole slices, at most
    /// [`NODE_SLICES`] of them.
    pub fn node_heatmap(&self) -> NodeHeatmap {
        let per = self.slices.div_ceil(NODE_SLICES).max(1);
        let cells = self.slices.div_ceil(per);
        let hosts = self
            .by_host()
            .into_iter()
            .map(|(host, gpus)| NodeRow {
                host: host.to_string(),
                utilization: (0..cells)
                    .map(|cell| {
                        let range = cell * per..((cell + 1) * per).min(self.slices);
                        let values: Vec<Option<f64>> = gpus
                            .iter()
                            .flat_map(|g| g.utilization[range.clone()].iter().copied())
                            .collect();
                        mean(&values)
                    })
                    .collect(),
            })
            .collect();
        NodeHeatmap {
            start: Some(self.start_of(0)),
            step_seconds: (self.slice.num_seconds() as u64) * per as u64,
            hosts,
        }
    }

    /// Hosts whose mean utilization in the slices `when` selects (by their start) stays
    /// under `line`, and the energy their GPUs drew in those slices, kWh. A host's
    /// utilization in a slice is the mean of its GPUs'.
    pub(crate) fn idle_hosts(
        &self,
        when: impl Fn(DateTime<Utc>) -> bool,
        line: f64,
    ) -> (Vec<String>, f64) {
        let chosen: Vec<usize> = (0..self.slices)
            .filter(|i| when(self.start_of(*i)))
            .collect();
        let hours = self.hours();
        let mut hosts = Vec::new();
        let mut kwh = 0.0;
        for (host, gpus) in self.by_host() {
            let per_slice: Vec<Option<f64>> = chosen
                .iter()
                .map(|i| mean(&gpus.iter().map(|g| g.utilization[*i]).collect::<Vec<_>>()))
                .collect();
            if mean(&per_slice).is_some_and(|u| u < line) {
                hosts.push(host.to_string());
                let watt_hours: f64 = gpus
                    .iter()
                    .flat_map(|g| chosen.iter().filter_map(|i| g.power[*i]))
                    .map(|w| w * hours)
                    .sum();
                kwh += watt_hours / 1000.0;
            }
        }
        (hosts, kwh)
    }

    /// The GPUs of each host, hosts in order.
    fn by_host(&self) -> Vec<(&str, Vec<&GpuHours>)> {
        let mut hosts: Vec<(&str, Vec<&GpuHours>)> = Vec::new();
        for g in &self.gpus {
            match hosts.last_mut() {
                Some((host, gpus)) if *host == g.host => gpus.push(g),
                _ => hosts.push((&g.host, vec![g])),
            }
        }
        hosts
    }
}

/// The slice a point at `at` falls in, rounding to the nearest: the store answers whole
/// seconds, the period's ends carry fractions, and the records sit at the rules' phase.
fn slot(first: DateTime<Utc>, slice: TimeDelta, at: DateTime<Utc>) -> Option<usize> {
    let millis = slice.num_milliseconds().max(1) as f64;
    let slot = ((at - first).num_milliseconds() as f64 / millis).round();
    (slot >= 0.0).then_some(slot as usize)
}

/// The runs of slices not recorded, as (first, last) slice indices.
fn unrecorded(recorded: &[bool]) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    let mut start = None;
    for (i, done) in recorded.iter().enumerate() {
        match (done, start) {
            (false, None) => start = Some(i),
            (true, Some(s)) => {
                runs.push((s, i - 1));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        runs.push((s, recorded.len() - 1));
    }
    runs
}

/// Adds each finite point to its slice's sum and count, rounding to the nearest slice:
/// the store answers whole seconds, the period's ends carry fractions.
fn add(
    cells: &mut [(f64, u32)],
    points: &[(DateTime<Utc>, f64)],
    first: DateTime<Utc>,
    slice: TimeDelta,
) {
    for (at, value) in points {
        if value.is_finite()
            && let Some((sum, n)) = slot(first, slice, *at).and_then(|i| cells.get_mut(i))
        {
            *sum += value;
            *n += 1;
        }
    }
}

/// The mean of the values present.
fn mean(values: &[Option<f64>]) -> Option<f64> {
    let (sum, n) = values
        .iter()
        .flatten()
        .fold((0.0, 0usize), |(sum, n), v| (sum + v, n + 1));
    (n > 0).then(|| sum / n as f64)
}

#[cfg(test)]
mod tests;
