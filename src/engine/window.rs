//! Rolling windows of one GPU's history, kept as downsampled aggregates.
//!
//! Three rings of buckets cover the last hour (1-minute buckets), day (15-minute buckets)
//! and week (2-hour buckets). Each sample is folded into the current bucket of every ring,
//! so memory is fixed — 240 buckets of 288 bytes, about 68 KiB per GPU, whatever the
//! collection interval — and a window summary merges at most 96 buckets. Counters enter as
//! deltas (see [`Deltas`]), gauges as running statistics, durations as seconds.
//!
//! Only a ring's newest bucket ever changes (samples, even out-of-order ones, land in it),
//! so the merge of a run of older, closed buckets stays valid until a bucket opens or falls
//! out of the window. Each ring remembers a few such merges ([`Memo`]): a summary then
//! costs two merges instead of up to 96, which is what lets `replay` run the engine over a
//! week-long nvidia-smi log in seconds. The memo is not state: it is not persisted, compared
//! or cloned, and a summary comes out the same whether it was remembered or not.

use std::collections::VecDeque;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// Running statistics of a gauge: count, sum, sum of squares, extremes (0 while empty,
/// so the state stays plain JSON numbers).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Stat {
    pub n: u32,
    pub sum: f64,
    pub sumsq: f64,
    pub min: f64,
    pub max: f64,
}

impl Stat {
    pub fn add(&mut self, value: f64) {
        // Gauges are temperatures, watts, ratios and seconds: far below this. A value past
        // it (a corrupt recording) would overflow the sum of squares into infinity, which
        // JSON cannot hold, and cost the whole saved state on the next load.
        if !value.is_finite() || value.abs() > 1e12 {
            return;
        }
        if self.n == 0 {
            self.min = value;
            self.max = value;
        } else {
            self.min = self.min.min(value);
            self.max = self.max.max(value);
        }
        self.n += 1;
        self.sum += value;
        self.sumsq += value * value;
    }

    pub fn add_opt(&mut self, value: Option<f64>) {
        if let Some(v) = value {
            self.add(v);
        }
    }

    pub fn merge(&mut self, other: &Stat) {
        if other.n == 0 {
            return;
        }
        if self.n == 0 {
            *self = *other;
            return;
        }
        self.n += other.n;
        self.sum += other.sum;
        self.sumsq += other.sumsq;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    pub fn mean(&self) -> Option<f64> {
        (self.n > 0).then(|| self.sum / f64::from(self.n))
    }

    /// Population standard deviation.
    pub fn std_dev(&self) -> Option<f64> {
        let mean = self.mean()?;
        Some(
            (self.sumsq / f64::from(self.n) - mean * mean)
                .max(0.0)
                .sqrt(),
        )
    }

    pub fn max(&self) -> Option<f64> {
        (self.n > 0).then_some(self.max)
    }
}

/// What one sample adds to the counters, already turned into non-negative deltas.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Deltas {
    pub ecc_corrected: f64,
    pub ecc_uncorrected: f64,
    pub pcie_replays: f64,
    pub nvlink_errors: f64,
    pub xid_hardware: f64,
    pub failed_calls: f64,
}

impl Deltas {
    fn add(&mut self, o: &Deltas) {
        self.ecc_corrected += o.ecc_corrected;
        self.ecc_uncorrected += o.ecc_uncorrected;
        self.pcie_replays += o.pcie_replays;
        self.nvlink_errors += o.nvlink_errors;
        self.xid_hardware += o.xid_hardware;
        self.failed_calls += o.failed_calls;
    }
}

/// One sample as the windows see it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Point {
    /// Unix seconds.
    pub at: i64,
    /// Seconds this sample stands for (time since the previous one, capped).
    pub seconds: f64,
    pub utilization: Option<f64>,
    pub temperature: Option<f64>,
    pub memory_temperature: Option<f64>,
    pub power: Option<f64>,
    pub thermal_slowdown: bool,
    /// The external power brake is asserted (HW power-brake slowdown): unlike the software
    /// power cap, a sign of trouble in power delivery rather than of a busy GPU.
    pub power_brake: bool,
    pub collect_seconds: Option<f64>,
    pub deltas: Deltas,
}

/// The aggregate of every sample in a span of time.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Bucket {
    /// Unix seconds at which the bucket starts (a multiple of its width).
    pub start: i64,
    pub samples: u32,
    /// Seconds covered by samples, up or not.
    pub seconds: f64,
    pub utilization: Stat,
    pub temperature: Stat,
    /// Memory minus GPU temperature, where both are known.
    pub memory_gap: Stat,
    pub power: Stat,
    pub collect_seconds: Stat,
    pub thermal_slowdown_seconds: f64,
    /// Seconds under the external power brake; absent from state saved before it existed.
    #[serde(default)]
    pub power_brake_seconds: f64,
    pub deltas: Deltas,
}

impl Bucket {
    fn add(&mut self, p: &Point) {
        self.samples += 1;
        self.seconds += p.seconds;
        self.utilization.add_opt(p.utilization);
        self.temperature.add_opt(p.temperature);
        if let (Some(m), Some(g)) = (p.memory_temperature, p.temperature) {
            self.memory_gap.add(m - g);
        }
        self.power.add_opt(p.power);
        self.collect_seconds.add_opt(p.collect_seconds);
        if p.thermal_slowdown {
            self.thermal_slowdown_seconds += p.seconds;
        }
        if p.power_brake {
            self.power_brake_seconds += p.seconds;
        }
        self.deltas.add(&p.deltas);
    }

    /// Folds `other` into `self` (the start of `self` is kept).
    pub fn merge(&mut self, other: &Bucket) {
        self.samples += other.samples;
        self.seconds += other.seconds;
        self.utilization.merge(&other.utilization);
        self.temperature.merge(&other.temperature);
        self.memory_gap.merge(&other.memory_gap);
        self.power.merge(&other.power);
        self.collect_seconds.merge(&other.collect_seconds);
        self.thermal_slowdown_seconds += other.thermal_slowdown_seconds;
        self.power_brake_seconds += other.power_brake_seconds;
        self.deltas.add(&other.deltas);
    }

    /// Events per day at this bucket's rate, from the seconds it covers.
    pub fn per_day(&self, count: f64) -> f64 {
        if self.seconds <= 0.0 {
            0.0
        } else {
            count * 86_400.0 / self.seconds
        }
    }
}

/// A ring of equal-width buckets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ring {
    width: i64,
    capacity: usize,
    buckets: VecDeque<Bucket>,
    #[serde(skip)]
    memo: Memo,
}

/// Merges of runs of closed buckets, keyed by the starts of the run's first and last
/// bucket (closed buckets never change, so the key names the content). Behind a mutex
/// because summaries take `&self`; it is never contended (one engine, one thread).
#[derive(Default)]
struct Memo(Mutex<MemoSlots>);

/// Runs a ring is summarised over per step: `last_hour` and the capacity window share one,
/// `last_week` and `baseline` need two.
const MEMO_SLOTS: usize = 4;

#[derive(Default)]
struct MemoSlots {
    slots: [Option<(i64, i64, Bucket)>; MEMO_SLOTS],
    next: usize,
}

impl Clone for Memo {
    /// A copy starts with an empty memo: remembering is an optimisation, not state.
    fn clone(&self) -> Self {
        Memo::default()
    }
}

impl PartialEq for Memo {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for Memo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Memo")
    }
}

impl Ring {
    pub fn new(width_seconds: i64, capacity: usize) -> Ring {
        Ring {
            width: width_seconds.max(1),
            capacity: capacity.max(1),
            buckets: VecDeque::with_capacity(capacity),
            memo: Memo::default(),
        }
    }

    /// Width of one bucket, seconds.
    pub fn width(&self) -> i64 {
        self.width.max(1)
    }

    /// Span the ring covers, seconds.
    pub fn span(&self) -> i64 {
        self.width * self.capacity as i64
    }

    fn add(&mut self, p: &Point) {
        // A ring read back from a damaged state file could say 0.
        let width = self.width.max(1);
        let start = p.at.div_euclid(width) * width;
        match self.buckets.back_mut() {
            Some(last) if last.start == start => last.add(p),
            // A sample older than the newest bucket (clock stepped back, out-of-order input)
            // is folded into the newest bucket rather than rewriting history.
            Some(last) if start < last.start => last.add(p),
            _ => {
                let mut bucket = Bucket {
                    start,
                    ..Bucket::default()
                };
                bucket.add(p);
                self.buckets.push_back(bucket);
                while self.buckets.len() > self.capacity {
                    self.buckets.pop_front();
                }
            }
        }
    }

    /// Everything from the buckets that start within `span` seconds before `now`: the
    /// newest bucket, then the merge of the closed ones before it.
    pub fn summary(&self, now: i64, span: i64) -> Bucket {
        let mut out = Bucket::default();
        self.summary_into(now, span, &mut out);
        out
    }

    /// [`Ring::summary`] written over `out`, so that a step's summaries are made where they
    /// are kept rather than copied there.
    pub fn summary_into(&self, now: i64, span: i64, out: &mut Bucket) {
        let since = now - span;
        let first = self
            .buckets
            .partition_point(|b| b.start + self.width <= since);
        match self.split_newest(first, self.buckets.len()) {
            Some((newest, closed)) => {
                // Merging into an empty bucket copies: every count and sum a bucket holds
                // starts at +0.0 and only adds non-negative whole seconds and counts, so
                // `0.0 + x` is `x` to the bit, and an empty statistic takes the other's.
                out.clone_from(newest);
                out.start = since;
                if let Some(closed) = closed {
                    self.merge_closed(closed, out);
                }
            }
            None => {
                *out = Bucket {
                    start: since,
                    ..Bucket::default()
                }
            }
        }
    }

    /// The newest bucket of `from..to` if it is the ring's newest, and the closed run
    /// before it; or, when `to` stops short of the newest, no newest and the whole run.
    #[allow(clippy::type_complexity)]
    fn split_newest(
        &self,
        from: usize,
        to: usize,
    ) -> Option<(&Bucket, Option<std::ops::Range<usize>>)> {
        if from >= to {
            return None;
        }
        let newest = self.buckets.get(to - 1)?;
        let closed = (from < to - 1).then_some(from..to - 1);
        Some((newest, closed))
    }

    /// Merges into `out` the buckets of `range` merged oldest first (remembered);
    /// `range` must hold closed buckets only.
    fn merge_closed(&self, range: std::ops::Range<usize>, out: &mut Bucket) {
        let (Some(first), Some(last)) = (
            self.buckets.get(range.start),
            self.buckets.get(range.end.saturating_sub(1)),
        ) else {
            return;
        };
        let key = (first.start, last.start);
        let Ok(mut memo) = self.memo.0.lock() else {
            out.merge(&self.fold(range));
            return;
        };
        if let Some((_, _, bucket)) = memo
            .slots
            .iter()
            .flatten()
            .find(|(a, b, _)| (*a, *b) == key)
        {
            out.merge(bucket);
            return;
        }
        let bucket = self.fold(range);
        out.merge(&bucket);
        let next = memo.next;
        memo.slots[next] = Some((key.0, key.1, bucket));
        memo.next = (next + 1) % MEMO_SLOTS;
    }

    fn fold(&self, range: std::ops::Range<usize>) -> Bucket {
        let mut out = Bucket::default();
        for b in self.buckets.range(range) {
            out.merge(b);
        }
        out
    }

    pub fn buckets(&self) -> impl Iterator<Item = &Bucket> {
        self.buckets.iter()
    }
}

/// The spans risk features and findings read, summarised once per GPU per step.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summaries {
    pub hour: Bucket,
    pub day: Bucket,
    pub week: Bucket,
    /// The week before the last day.
    pub baseline: Bucket,
}

/// The three windows of one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Windows {
    pub hour: Ring,
    pub day: Ring,
    pub week: Ring,
}

pub const HOUR: i64 = 3600;
pub const DAY: i64 = 86_400;
pub const WEEK: i64 = 7 * DAY;

impl Default for Windows {
    fn default() -> Self {
        Windows {
            hour: Ring::new(60, 60),
            day: Ring::new(15 * 60, 96),
            week: Ring::new(2 * HOUR, 84),
        }
    }
}

impl Windows {
    pub fn add(&mut self, p: &Point) {
        self.hour.add(p);
        self.day.add(p);
        self.week.add(p);
    }

    /// The last hour, from 1-minute buckets.
    pub fn last_hour(&self, now: i64) -> Bucket {
        self.hour.summary(now, HOUR)
    }

    /// The last day, from 15-minute buckets.
    pub fn last_day(&self, now: i64) -> Bucket {
        self.day.summary(now, DAY)
    }

    /// The last week, from 2-hour buckets.
    pub fn last_week(&self, now: i64) -> Bucket {
        self.week.summary(now, WEEK)
    }

    /// The last hour, day and week, and the baseline, at `now`.
    pub fn summaries(&self, now: i64) -> Summaries {
        let mut out = Summaries::default();
        self.summaries_into(now, &mut out);
        out
    }

    /// [`Windows::summaries`] written over `out` (a step keeps one per GPU, round to round).
    pub fn summaries_into(&self, now: i64, out: &mut Summaries) {
        self.hour.summary_into(now, HOUR, &mut out.hour);
        self.day.summary_into(now, DAY, &mut out.day);
        self.week.summary_into(now, WEEK, &mut out.week);
        out.baseline = self.baseline(now);
    }

    /// The last `span` seconds, from the finest ring that covers them.
    pub fn last(&self, now: i64, span: i64) -> Bucket {
        if span <= self.hour.span() {
            self.hour.summary(now, span)
        } else if span <= self.day.span() {
            self.day.summary(now, span)
        } else {
            self.week.summary(now, span)
        }
    }

    /// The week before the last day: the baseline a GPU's recent behaviour is compared to.
    pub fn baseline(&self, now: i64) -> Bucket {
        let week = &self.week;
        let from = week.buckets.partition_point(|b| b.start <= now - WEEK);
        let to = week
            .buckets
            .partition_point(|b| b.start + 2 * HOUR <= now - DAY)
            .max(from);
        let mut out = Bucket::default();
        if from >= to {
            return out;
        }
        // Oldest first, the newest bucket (which may still change) last and never remembered.
        if to == week.buckets.len() {
            if to - 1 > from {
                week.merge_closed(from..to - 1, &mut out);
            }
            if let Some(newest) = week.buckets.back() {
                out.merge(newest);
            }
        } else {
            week.merge_closed(from..to, &mut out);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(at: i64, util: f64, corrected: f64) -> Point {
        Point {
            at,
            seconds: 60.0,
            utilization: Some(util),
            temperature: Some(60.0),
            memory_temperature: Some(70.0),
            deltas: Deltas {
                ecc_corrected: corrected,
                ..Deltas::default()
            },
            ..Point::default()
        }
    }

    #[test]
    fn bucket_size_is_as_documented() {
        // The module docs and BENCHMARKS.md quote this size; change them with it.
        assert_eq!(std::mem::size_of::<Bucket>(), 288);
    }

    #[test]
    fn windows_forget_what_falls_out_of_them() {
        let mut w = Windows::default();
        let start = 1_700_000_000 / DAY * DAY;
        for i in 0..(2 * 24 * 60) {
            let corrected = if i < 24 * 60 { 1.0 } else { 0.0 };
            w.add(&point(start + i * 60, 0.5, corrected));
        }
        let now = start + 2 * DAY;
        assert_eq!(w.last_hour(now).deltas.ecc_corrected, 0.0);
        assert_eq!(w.last_day(now).deltas.ecc_corrected, 0.0);
        assert_eq!(w.last_week(now).deltas.ecc_corrected, 1440.0);
        assert_eq!(w.last_hour(now).samples, 60);
        assert!((w.last_day(now).seconds - 86_400.0).abs() < 1.0);
    }

    #[test]
    fn memory_is_bounded_whatever_the_interval() {
        let mut w = Windows::default();
        for i in 0..(30 * 24 * 720) {
            w.add(&point(i * 5, 0.9, 0.0));
        }
        assert_eq!(w.hour.buckets().count(), 60);
        assert_eq!(w.day.buckets().count(), 96);
        assert_eq!(w.week.buckets().count(), 84);
    }

    #[test]
    fn stats_and_rates() {
        let mut w = Windows::default();
        for i in 0..60 {
            w.add(&point(i * 60, if i % 2 == 0 { 0.0 } else { 1.0 }, 0.5));
        }
        let h = w.last_hour(3600);
        assert_eq!(h.utilization.mean(), Some(0.5));
        assert_eq!(h.utilization.std_dev(), Some(0.5));
        assert_eq!(h.memory_gap.mean(), Some(10.0));
        assert!((h.per_day(h.deltas.ecc_corrected) - 720.0).abs() < 1e-9);
    }

    #[test]
    fn out_of_order_samples_do_not_rewrite_history() {
        let mut w = Windows::default();
        w.add(&point(10_000, 0.5, 1.0));
        w.add(&point(5_000, 0.5, 1.0));
        assert_eq!(w.hour.buckets().count(), 1);
        assert_eq!(w.last_hour(10_000).deltas.ecc_corrected, 2.0);
    }
}
