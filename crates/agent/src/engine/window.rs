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
//! out of the window. Each ring remembers a few such merges ([`Memo`]) of the sums a step
//! reads ([`Sums`]: a bucket without its squares and most extremes): a step's summary of a span
//! then costs one merge of a few numbers instead of up to 96 merges of whole buckets, which
//! is what lets `replay` run the engine over a week-long nvidia-smi log in seconds. The
//! memo is not state: it is not persisted, compared or cloned, and a summary comes out the
//! same whether it was remembered or not.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use added::Added;

mod added;

/// Running statistics of a gauge: count, sum, sum of squares, extremes (0 while empty,
/// so the state stays plain JSON numbers).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Stat {
    pub n: u32,
    pub sum: f64,
    pub(crate) sumsq: f64,
    pub min: f64,
    pub max: f64,
}

impl Stat {
    pub fn add(&mut self, value: f64) {
        // Gauges are temperatures, watts, ratios and seconds: far below this. A value past
        // it (a corrupt recording) would overflow the sum of squares into infinity, which
        // JSON cannot hold, and cost the whole saved state on the next load.
        self.add_believable(added::believable(value));
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

    #[cfg(test)]
    /// Population standard deviation.
    pub(crate) fn std_dev(&self) -> Option<f64> {
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
pub(crate) struct Deltas {
    pub(crate) ecc_corrected: f64,
    pub(crate) ecc_uncorrected: f64,
    pub(crate) pcie_replays: f64,
    pub(crate) nvlink_errors: f64,
    pub(crate) xid_hardware: f64,
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
    pub(crate) memory_temperature: Option<f64>,
    pub power: Option<f64>,
    pub thermal_slowdown: bool,
    /// The external power brake is asserted (HW power-brake slowdown): unlike the software
    /// power cap, a sign of trouble in power delivery rather than of a busy GPU.
    pub(crate) power_brake: bool,
    pub collect_seconds: Option<f64>,
    pub(crate) deltas: Deltas,
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
    pub(crate) memory_gap: Stat,
    pub power: Stat,
    pub collect_seconds: Stat,
    pub(crate) thermal_slowdown_seconds: f64,
    /// Seconds under the external power brake; absent from state saved before it existed.
    #[serde(default)]
    pub(crate) power_brake_seconds: f64,
    pub(crate) deltas: Deltas,
}

impl Bucket {
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

    #[cfg(test)]
    /// Events per day at this bucket's rate, from the seconds it covers.
    pub(crate) fn per_day(&self, count: f64) -> f64 {
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

/// What a step reads of a span of a window: a [`Bucket`]'s sums and counts, without the
/// squares and the extremes no feature reads, so that summarising a GPU's windows at every
/// sample adds up a few numbers rather than whole buckets. Each field is what the same
/// merge of [`Bucket`]s holds, to the bit.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sums {
    pub samples: u32,
    /// Seconds covered by samples, up or not.
    pub seconds: f64,
    pub utilization: Mean,
    pub temperature: Mean,
    /// Memory minus GPU temperature, where both are known.
    pub(crate) memory_gap: Mean,
    pub collect_seconds: Mean,
    /// The slowest collection (0 when none): one slow read is no slow hour.
    pub(crate) collect_slowest: f64,
    pub(crate) thermal_slowdown_seconds: f64,
    pub(crate) power_brake_seconds: f64,
    pub(crate) deltas: Deltas,
}

/// A [`Stat`]'s count and sum: its mean.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Mean {
    pub n: u32,
    pub sum: f64,
}

impl Mean {
    /// [`Stat::merge`]'s count and sum.
    fn merge(&mut self, n: u32, sum: f64) {
        if n == 0 {
            return;
        }
        if self.n == 0 {
            (self.n, self.sum) = (n, sum);
            return;
        }
        self.n += n;
        self.sum += sum;
    }

    /// [`Stat::mean`].
    pub fn mean(&self) -> Option<f64> {
        (self.n > 0).then(|| self.sum / f64::from(self.n))
    }
}

impl Sums {
    /// Folds `other` in, as [`Bucket::merge`] does.
    fn merge(&mut self, other: &Sums) {
        self.samples += other.samples;
        self.seconds += other.seconds;
        let stats = [
            (&mut self.utilization, other.utilization),
            (&mut self.temperature, other.temperature),
            (&mut self.memory_gap, other.memory_gap),
            (&mut self.collect_seconds, other.collect_seconds),
        ];
        for (mine, theirs) in stats {
            mine.merge(theirs.n, theirs.sum);
        }
        self.collect_slowest = self.collect_slowest.max(other.collect_slowest);
        self.thermal_slowdown_seconds += other.thermal_slowdown_seconds;
        self.power_brake_seconds += other.power_brake_seconds;
        self.deltas.add(&other.deltas);
    }
}

impl From<&Bucket> for Sums {
    fn from(b: &Bucket) -> Sums {
        let mean = |s: &Stat| Mean { n: s.n, sum: s.sum };
        Sums {
            samples: b.samples,
            seconds: b.seconds,
            utilization: mean(&b.utilization),
            temperature: mean(&b.temperature),
            memory_gap: mean(&b.memory_gap),
            collect_seconds: mean(&b.collect_seconds),
            // Collection times are never negative (the snapshot's range check clamps
            // them), so 0 stands for "none" and the merge's max is the slowest.
            collect_slowest: match b.collect_seconds.n {
                0 => 0.0,
                _ => b.collect_seconds.max,
            },
            thermal_slowdown_seconds: b.thermal_slowdown_seconds,
            power_brake_seconds: b.power_brake_seconds,
            deltas: b.deltas,
        }
    }
}

/// Merges of runs of closed buckets, keyed by the starts of the run's first and last
/// bucket (closed buckets never change, so the key names the content).
#[derive(Default)]
struct Memo {
    slots: [Option<(i64, i64, Sums)>; MEMO_SLOTS],
    next: usize,
    /// The start of the bucket a sample last went into, and the end of its width: a time
    /// from the one up to the other starts there too, without a division by the width
    /// (an integer division at every sample of each ring, the slowest instruction of
    /// adding a sample). Empty at first.
    bucket: (i64, i64),
}

/// Runs a ring is summarised over per step: `last_hour` and the capacity window share one,
/// `last_week` and `baseline` need two.
const MEMO_SLOTS: usize = 4;

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

    /// The start of the bucket a sample at `at` belongs in: `at.div_euclid(width) *
    /// width`, remembered from the last sample added where it is the same.
    pub(crate) fn bucket_start(&self, at: i64) -> i64 {
        let (start, end) = self.memo.bucket;
        if start <= at && at < end {
            return start;
        }
        let width = self.width();
        at.div_euclid(width) * width
    }

    /// Sums the ring covers, seconds.
    pub fn span(&self) -> i64 {
        self.width * self.capacity as i64
    }

    fn add(&mut self, at: i64, p: &Added) {
        // A ring read back from a damaged state file could say 0.
        let width = self.width.max(1);
        let start = self.bucket_start(at);
        self.memo.bucket = (start, start.saturating_add(width));
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

    /// The first bucket that ends after `since`: most steps it is the oldest one, which
    /// one comparison tells without a search.
    fn first_after(&self, since: i64) -> usize {
        let before = |b: &Bucket| b.start + self.width <= since;
        match self.buckets.front() {
            Some(oldest) if before(oldest) => self.buckets.partition_point(before),
            _ => 0,
        }
    }

    /// Everything from the buckets that start within `span` seconds before `now`: the
    /// newest bucket, then the merge of the closed ones before it.
    pub fn summary(&self, now: i64, span: i64) -> Bucket {
        let since = now - span;
        let first = self.first_after(since);
        let Some(newest) = self.buckets.back().filter(|_| first < self.buckets.len()) else {
            return Bucket {
                start: since,
                ..Bucket::default()
            };
        };
        let mut out = newest.clone();
        out.start = since;
        let last = self.buckets.len() - 1;
        if first < last {
            out.merge(&self.fold(first..last));
        }
        out
    }

    /// [`Ring::summary`]'s sums and counts ([`Sums`]), the merge of the closed buckets
    /// remembered: a summary then costs one merge instead of up to 96.
    pub fn sums(&mut self, now: i64, span: i64) -> Sums {
        let mut out = Sums::default();
        self.sums_into(now, span, &mut out);
        out
    }

    /// [`Ring::sums`] written over `out`.
    pub(crate) fn sums_into(&mut self, now: i64, span: i64, out: &mut Sums) {
        let first = self.first_after(now - span);
        let Some(newest) = self.buckets.back().filter(|_| first < self.buckets.len()) else {
            *out = Sums::default();
            return;
        };
        // Merging into an empty bucket copies: every count and sum a bucket holds starts at
        // +0.0 and only adds non-negative whole seconds and counts, so `0.0 + x` is `x` to
        // the bit, and an empty statistic takes the other's.
        *out = Sums::from(newest);
        let last = self.buckets.len() - 1;
        if first < last {
            self.merge_closed(first..last, out);
        }
    }

    /// Merges into `out` the buckets of `range` merged oldest first (remembered); `range`
    /// must hold closed buckets only.
    fn merge_closed(&mut self, range: std::ops::Range<usize>, out: &mut Sums) {
        let (Some(first), Some(last)) = (
            self.buckets.get(range.start),
            self.buckets.get(range.end.saturating_sub(1)),
        ) else {
            return;
        };
        let key = (first.start, last.start);
        let memo = &mut self.memo;
        if let Some((_, _, sums)) = memo
            .slots
            .iter()
            .flatten()
            .find(|(a, b, _)| (*a, *b) == key)
        {
            out.merge(sums);
            return;
        }
        let mut sums = Sums::default();
        for b in self.buckets.range(range) {
            sums.merge(&Sums::from(b));
        }
        out.merge(&sums);
        memo.slots[memo.next] = Some((key.0, key.1, sums));
        memo.next = (memo.next + 1) % MEMO_SLOTS;
    }

    fn fold(&self, range: std::ops::Range<usize>) -> Bucket {
        let mut out = Bucket::default();
        for b in self.buckets.range(range) {
            out.merge(b);
        }
        out
    }

    pub(crate) fn buckets(&self) -> impl Iterator<Item = &Bucket> {
        self.buckets.iter()
    }
}

/// The spans risk features and findings read, summarised once per GPU per step.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summaries {
    pub hour: Sums,
    pub day: Sums,
    pub week: Sums,
    /// The week before the last day.
    pub baseline: Sums,
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
pub(crate) const WEEK: i64 = 7 * DAY;

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
        let added = Added::of(p);
        self.hour.add(p.at, &added);
        self.day.add(p.at, &added);
        self.week.add(p.at, &added);
    }

    #[cfg(test)]
    /// The last hour, from 1-minute buckets.
    pub(crate) fn last_hour(&self, now: i64) -> Bucket {
        self.hour.summary(now, HOUR)
    }

    /// The last day, from 15-minute buckets.
    pub fn last_day(&self, now: i64) -> Bucket {
        self.day.summary(now, DAY)
    }

    #[cfg(test)]
    /// The last week, from 2-hour buckets.
    pub(crate) fn last_week(&self, now: i64) -> Bucket {
        self.week.summary(now, WEEK)
    }

    /// The last hour, day and week, and the baseline, at `now`.
    pub fn summaries(&mut self, now: i64) -> Summaries {
        let mut out = Summaries::default();
        self.summaries_into(now, &mut out);
        out
    }

    /// [`Windows::summaries`] written over `out` (a step keeps one per GPU, round to round).
    pub(crate) fn summaries_into(&mut self, now: i64, out: &mut Summaries) {
        self.hour.sums_into(now, HOUR, &mut out.hour);
        self.day.sums_into(now, DAY, &mut out.day);
        self.week.sums_into(now, WEEK, &mut out.week);
        self.baseline_into(now, &mut out.baseline);
    }

    /// [`Windows::summaries_into`]'s last hour alone.
    pub(crate) fn hour_into(&mut self, now: i64, out: &mut Sums) {
        self.hour.sums_into(now, HOUR, out);
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

    /// [`Windows::last`]'s sums and counts, remembered as [`Windows::summaries`]' are.
    pub(crate) fn last_sums(&mut self, now: i64, span: i64) -> Sums {
        if span <= self.hour.span() {
            self.hour.sums(now, span)
        } else if span <= self.day.span() {
            self.day.sums(now, span)
        } else {
            self.week.sums(now, span)
        }
    }

    /// The week before the last day (the baseline a GPU's recent behaviour is compared
    /// to), written over `out`.
    pub(crate) fn baseline_into(&mut self, now: i64, out: &mut Sums) {
        let week = &mut self.week;
        let from = week.buckets.partition_point(|b| b.start <= now - WEEK);
        let to = week
            .buckets
            .partition_point(|b| b.start + 2 * HOUR <= now - DAY)
            .max(from);
        *out = Sums::default();
        if from >= to {
            return;
        }
        // Oldest first, the newest bucket (which may still change) last and never remembered.
        if to == week.buckets.len() {
            if to - 1 > from {
                week.merge_closed(from..to - 1, out);
            }
            if let Some(newest) = week.buckets.back() {
                out.merge(&Sums::from(newest));
            }
        } else {
            week.merge_closed(from..to, out);
        }
    }
}

#[cfg(test)]
mod tests;
