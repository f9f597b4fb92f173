//! The hourly aggregates the recording rules in `alerts/gpu-sentinel-fleet.rules.yml` keep,
//! and which hours of a period they cover.
//!
//! Per GPU and hour the rules record mean utilization, mean power and the GPU-seconds held
//! per owner and state (busy, idle), for each metric dialect, and each evaluation stamps a
//! marker series with its own time. The report reads the marker's samples — one an hour, a
//! few thousand for half a year — to know which hours the records cover: every hour `(e −
//! 1h, e]` ending at an evaluation `e` with data. It reads those hours from the records (a
//! point per GPU and hour instead of every scrape) and every other hour of the period from
//! the raw samples, so a report is whole whether the rules were loaded a year ago, last week
//! or never.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use super::dialect::Dialect;
use super::plan::shard::select;

/// How often the rules evaluate: every record covers the hour before it.
pub const EVERY: Duration = Duration::from_secs(3600);

/// The names of one dialect's recorded series (as the rules file writes them).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Names {
    /// Each GPU's mean utilization (0–1) in the hour.
    pub utilization: &'static str,
    /// Each GPU's mean power draw (W) in the hour.
    pub power: &'static str,
    /// GPU-seconds held in the hour, by GPU, owner and `state` (busy, idle).
    pub held: &'static str,
    /// One sample per evaluation with data, its value the evaluation time.
    pub evaluated: &'static str,
}

const NATIVE: Names = Names {
    utilization: "instance_gpu:gpu_utilization_ratio:avg1h",
    power: "instance_gpu:gpu_power_watts:avg1h",
    held: "instance_gpu_owner_state:gpu_owner_seconds:increase1h",
    evaluated: "fleet:gpu_hourly_rules:evaluation_timestamp",
};

const DCGM: Names = Names {
    utilization: "Hostname_gpu:DCGM_FI_DEV_GPU_UTIL:ratio_avg1h",
    power: "Hostname_gpu:DCGM_FI_DEV_POWER_USAGE:avg1h",
    held: "Hostname_gpu_namespace_state:DCGM_FI_DEV_FB_USED:held_seconds1h",
    evaluated: "fleet:dcgm_hourly_rules:evaluation_timestamp",
};

impl Names {
    pub fn of(dialect: Dialect) -> Names {
        match dialect {
            Dialect::Native => NATIVE,
            Dialect::Dcgm { .. } => DCGM,
        }
    }

    pub fn all(&self) -> [&'static str; 4] {
        [self.utilization, self.power, self.held, self.evaluated]
    }

    /// The held records this report may add up: dcgm-exporter's are counted with the
    /// rules' memory floor and idle threshold (labels on each record), which must be the
    /// report's.
    pub(crate) fn held_selector(
        &self,
        dialect: Dialect,
        idle_threshold: f64,
        hosts: &str,
    ) -> String {
        match dialect {
            Dialect::Native => select(self.held, &[hosts]),
            Dialect::Dcgm { memory_floor_mib } => {
                let floor = format!("memory_floor_mib=\"{memory_floor_mib}\"");
                let threshold = format!("idle_threshold=\"{}\"", threshold_label(idle_threshold));
                select(self.held, &[&floor, &threshold, hosts])
            }
        }
    }
}

impl Names {
    /// The records whose series a census need not list, each with the raw family whose
    /// series bound its own: `avg_over_time` keeps each raw series' labels, and the native
    /// held record sums by labels every `gpu_owner_seconds_total` series carries, so an
    /// hour's records are at most the raw series of the hour before. dcgm-exporter's held
    /// record is not among them: one raw series gives a record per rule variant (memory
    /// floor, idle threshold) the store holds.
    pub fn bounded(&self, dialect: Dialect) -> Vec<(&'static str, &'static str)> {
        let [utilization, power, owner] = dialect.families();
        let mut bounded = vec![(self.utilization, utilization), (self.power, power)];
        if dialect == Dialect::Native {
            bounded.push((self.held, owner));
        }
        bounded
    }
}

/// An idle threshold as the rules' label writes it (`0.05`).
pub fn threshold_label(threshold: f64) -> String {
    format!("{threshold}")
}

/// The evaluations of the hourly rules, in time order.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Coverage {
    pub(crate) evaluations: Vec<DateTime<Utc>>,
}

/// A run of evaluations an hour apart: the records cover `(first − 1h, last]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Run {
    pub first: DateTime<Utc>,
    pub last: DateTime<Utc>,
}

impl Run {
    /// The stretch of time the run's records cover.
    pub fn covers(&self) -> (DateTime<Utc>, DateTime<Utc>) {
        (self.first - hour(), self.last)
    }

    /// The stretch its records are read over: half an hour either side of its evaluations,
    /// so neither a neighbour's record nor the edge of a range selector can count twice.
    pub fn reads(&self) -> (DateTime<Utc>, DateTime<Utc>) {
        let half = hour() / 2;
        (self.first - half, self.last + half)
    }

    /// Hours the run covers.
    pub fn hours(&self) -> usize {
        ((self.last - self.first).num_seconds() / 3600 + 1).max(0) as usize
    }
}

fn hour() -> TimeDelta {
    TimeDelta::seconds(EVERY.as_secs() as i64)
}

/// Evaluations further apart than an hour and this are not one run.
const SLACK: TimeDelta = TimeDelta::seconds(5);

impl Coverage {
    /// The runs whose hours lie wholly in `(from, to]`.
    pub fn runs(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<Run> {
        let mut runs: Vec<Run> = Vec::new();
        for &e in &self.evaluations {
            if e - hour() < from || e > to {
                continue;
            }
            match runs.last_mut() {
                Some(run) if e - run.last <= hour() + SLACK && e > run.last => run.last = e,
                _ => runs.push(Run { first: e, last: e }),
            }
        }
        runs
    }

    /// The stretches of `(from, to]` no run covers, in time order.
    pub fn gaps(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Vec<(DateTime<Utc>, DateTime<Utc>)> {
        let mut gaps = Vec::new();
        let mut at = from;
        for run in self.runs(from, to) {
            let (start, end) = run.covers();
            if start > at {
                gaps.push((at, start));
            }
            at = end;
        }
        if to > at {
            gaps.push((at, to));
        }
        gaps
    }

    /// Hours of `(from, to]` the records cover.
    pub fn hours(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> usize {
        self.runs(from, to).iter().map(Run::hours).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(h: i64, m: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(h * 3600 + m * 60, 0).expect("in range")
    }

    #[test]
    fn runs_and_gaps_tile_the_period() {
        // Evaluations at 20 past each hour from 4:20 to 8:20, then 11:20 and 12:20.
        let coverage = Coverage {
            evaluations: [4, 5, 6, 7, 8, 11, 12].iter().map(|h| at(*h, 20)).collect(),
        };
        // From 3:40: the 4:20 record covers 3:20–4:20, partly before the period.
        let (from, to) = (at(3, 40), at(13, 0));
        let runs = coverage.runs(from, to);
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0].covers(), (at(4, 20), at(8, 20)));
        assert_eq!(runs[0].hours(), 4);
        assert_eq!(runs[1].hours(), 2);
        assert_eq!(
            coverage.gaps(from, to),
            vec![(from, at(4, 20)), (at(8, 20), at(10, 20)), (at(12, 20), to)]
        );
        assert_eq!(coverage.hours(from, to), 6);
        assert!(Coverage::default().runs(from, to).is_empty());
        assert_eq!(Coverage::default().gaps(from, to), vec![(from, to)]);
    }
}
