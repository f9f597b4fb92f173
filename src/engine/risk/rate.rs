//! Error counters read as noisy rates: "did this GPU's rate go up, and stay up?"
//!
//! Every error counter the risk model reads (corrected ECC, PCIe replays, NVLink errors,
//! hardware XIDs, failed NVML calls, and hours of unstable power) is one [`RateTest`]: the
//! counts of each clock hour, capped, against the GPU's own baseline rate, scanned over
//! windows of six hours to eight days with a Poisson likelihood ratio.
//!
//! - **Hours, capped.** An hour counts at most what gives [`BAD_HOUR_NATS`] of evidence
//!   against the baseline (and at least one event): a one-hour burst of 200 corrected
//!   errors, or a train of replays, is one bad hour, a climb is many. Comparing days with
//!   days (each day above the one before) misread Poisson noise — a climb from 0 to 12 a
//!   day reads 3, 1, 4, 6, 5, 9 — and could not see a link that goes from healthy to dead
//!   in two days.
//! - **The GPU's own baseline.** The mean hourly count over a warm-up of a day, less the
//!   hours that stand ten times above the rest (a burst in the warm-up is not the normal;
//!   trains of replays all day are), then an exponentially weighted mean (e-fold a week) that may grow by at
//!   most [`GROWTH_PER_DAY`] a day, so a fault that builds over days stays visible instead
//!   of becoming the new normal, while a link that always replayed at 120 an hour is its
//!   own normal. Below a floor per counter (a prior: what a healthy GPU may show) the
//!   floor is the expectation. Before the warm-up ends the test gives nothing, never a
//!   guess.
//! - **Noise.** Counts are over-dispersed in the field (replays come in trains, ECC errors
//!   in clusters), and a Poisson test on a high rate would call a rise of a fifth
//!   significant. Counts are therefore scaled to units of the larger of one count, the
//!   baseline's hourly rate over [`UNIT_RATE`], and the baseline's own index of dispersion
//!   (variance over mean of its hourly counts): at high rates only relative rises count.
//! - **The test.** For each window (exponentially weighted, e-fold 6 h, 12 h, 1, 2, 4 and
//!   8 days) the counted units `n` and the expected units `e`; the statistic is the largest
//!   `n ln(n/e) − (n − e)` over the windows where `n > e`: the log-likelihood ratio, in
//!   nats, of "the rate in this window is n/e times the baseline" against "it is the
//!   baseline". A sudden ramp shows in the short windows, a slow one in the long ones.
//!
//! Constant work per sample: a few additions, and once an hour the windows' update.

use serde::{Deserialize, Serialize};

const HOUR: f64 = 3600.0;

/// Scan windows (e-fold), hours.
const WINDOW_HOURS: [f64; 6] = [6.0, 12.0, 24.0, 48.0, 96.0, 192.0];

/// `exp(−1 h / window)`: the windows' decay over the one hour between a close and the open
/// hour, the usual case (a unit test checks it against `exp`).
const HOUR_DECAY: [f64; 6] = [
    0.846_481_724_890_614_1,
    0.920_044_414_629_323_3,
    0.959_189_457_109_138_2,
    0.979_382_181_331_240_1,
    0.989_637_398_914_996_6,
    0.994_805_206_517_837_1,
];

/// Observed hours before the baseline is trusted.
const WARM_UP_HOURS: f64 = 24.0;

/// An hour observed for less than this is not counted (a gap, the agent's first minutes).
const MIN_HOUR_SECONDS: f64 = 600.0;

/// The most evidence one hour can give, nats (about what one corrected error gives
/// against a healthy GPU's floor): a burst is one bad hour, a climb is many.
pub const BAD_HOUR_NATS: f64 = 2.5;

/// A warm-up hour this many times above the mean of the others (or the floor) is a burst,
/// left out of the baseline; at most [`MOST_BURSTS`] of the hours are.
const BURST_FACTOR: f64 = 10.0;
const MOST_BURSTS: f64 = 0.1;

/// An hour's observed share counts up to this: samples that straddle its end stand for
/// more than the hour, and their counts with them.
const MOST_SHARE: f64 = 2.0;

/// How far the baseline may grow in a day, relative (plus the same share of the floor,
/// so that a baseline at zero can grow at all).
pub const GROWTH_PER_DAY: f64 = 0.25;

/// E-fold of the baseline's mean once warm, hours.
const BASELINE_HOURS: f64 = 7.0 * 24.0;

/// A rate of this many counts an hour is one unit of evidence per hour: above it, counts
/// are scaled down so that only relative rises count.
pub const UNIT_RATE: f64 = 1.0;

/// What one counter's test remembers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RateTest {
    /// Start of the open hour (Unix seconds, a multiple of 3600); 0 before any sample.
    hour: i64,
    /// Counts and observed seconds of the open hour.
    count: f64,
    seconds: f64,
    /// Baseline: mean capped count per full hour, and mean square, over `hours` observed.
    mean: f64,
    square: f64,
    hours: f64,
    /// During the warm-up, each hour's count per full hour and its observed share.
    warming: Vec<[f64; 2]>,
    /// Per window: counted units and expected units, decayed to the last closed hour.
    counted: [f64; WINDOW_HOURS.len()],
    expected: [f64; WINDOW_HOURS.len()],
    /// Start of the last hour closed.
    closed: i64,
    /// The statistic after the last hour closed, nats.
    llr: f64,
    /// The floor the last sample was read against (the open hour's expectation), and the
    /// open hour's cap as a multiple of its expectation ([`bad_hour_multiple`], 0 until
    /// computed at a close).
    floor: f64,
    multiple: f64,
}

impl RateTest {
    /// Folds in `count` new events over `seconds` of a sample at `at`; `floor` is the rate
    /// per hour a healthy GPU may show on this counter. Negative or non-finite counts (a
    /// reset counter, a damaged reading) count as none.
    pub fn observe(&mut self, at: i64, count: f64, seconds: f64, floor: f64) {
        let hour = at.div_euclid(HOUR as i64) * HOUR as i64;
        if hour > self.hour {
            if self.hour != 0 {
                self.close(floor);
            }
            self.hour = hour;
            self.count = 0.0;
            self.seconds = 0.0;
        }
        // A late sample of an hour already closed falls into the open one.
        if count.is_finite() && count > 0.0 {
            self.count += count;
        }
        if seconds.is_finite() && seconds > 0.0 {
            self.seconds += seconds;
        }
        self.floor = if floor.is_finite() {
            floor.max(0.0)
        } else {
            0.0
        };
    }

    /// The statistic: the largest log-likelihood ratio over the windows, nats; 0 while the
    /// baseline warms up. It is the last closed hour's, or more where the open hour as
    /// observed so far (its counts, capped, against its expectation so far) says more: a
    /// climb's evidence moves as its counts arrive, not only at the close of a clock hour,
    /// while a quiet stretch of the open hour lowers it only at the close, as before.
    pub fn llr(&self) -> f64 {
        self.open_statistic()
            .map_or(self.llr, |open| open.max(self.llr))
    }

    /// The statistic as if the open hour closed now; `None` while it has been observed
    /// for less than [`MIN_HOUR_SECONDS`], before the baseline is warm, or in a state
    /// that is not sane (the last close's statistic stands).
    fn open_statistic(&self) -> Option<f64> {
        let observed = self.seconds.min(MOST_SHARE * HOUR);
        if observed < MIN_HOUR_SECONDS
            || self.hours < WARM_UP_HOURS
            || self.closed == 0
            || !self.is_sane()
        {
            return None;
        }
        let elapsed_hours = (self.hour.saturating_sub(self.closed).max(0) as f64 / HOUR).min(1e4);
        let (capped, expected, unit) = self.open_hour(observed / HOUR, self.multiple);
        let (counted, expected) = (capped / unit, expected / unit);
        let best = WINDOW_HOURS
            .iter()
            .enumerate()
            .map(|(w, tau)| {
                let decay = if elapsed_hours == 1.0 {
                    HOUR_DECAY[w]
                } else {
                    (-elapsed_hours / tau).exp()
                };
                poisson_llr(
                    self.counted[w] * decay + counted,
                    self.expected[w] * decay + expected,
                )
            })
            .fold(0.0, f64::max);
        best.is_finite().then_some(best)
    }

    /// The open hour, observed for `share` of an hour: its count capped at what gives
    /// [`BAD_HOUR_NATS`] × `share` (at least one event), its expected count, and the
    /// counts a unit stands for. `multiple` is the cap's multiple if known (else 0).
    fn open_hour(&self, share: f64, multiple: f64) -> (f64, f64, f64) {
        let rate = self.mean.max(self.floor);
        let unit = self.unit(rate);
        let expected = rate * share;
        let multiple = if multiple > 0.0 {
            multiple
        } else {
            bad_hour_multiple(rate / unit)
        };
        let most = (multiple * expected).max(1.0);
        (self.count.min(most), expected, unit)
    }

    /// The cap's multiple for the hour that opens after a close.
    fn remember_multiple(&mut self) {
        let rate = self.mean.max(self.floor);
        self.multiple = bad_hour_multiple(rate / self.unit(rate));
    }

    fn close(&mut self, floor: f64) {
        let floor = if floor.is_finite() {
            floor.max(0.0)
        } else {
            0.0
        };
        // A damaged state file could hold anything: such a test starts afresh.
        if !self.is_sane() {
            *self = RateTest {
                hour: self.hour,
                count: self.count,
                seconds: self.seconds,
                ..RateTest::default()
            };
        }
        let observed = self.seconds.min(MOST_SHARE * HOUR);
        let elapsed_hours = if self.closed == 0 {
            0.0
        } else {
            (self.hour.saturating_sub(self.closed).max(0) as f64 / HOUR).min(1e4)
        };
        for (w, tau) in WINDOW_HOURS.iter().enumerate() {
            let decay = (-elapsed_hours / tau).exp();
            self.counted[w] *= decay;
            self.expected[w] *= decay;
        }
        self.closed = self.hour;
        if observed < MIN_HOUR_SECONDS {
            self.llr = self.statistic();
            return;
        }
        let share = observed / HOUR;
        if self.hours < WARM_UP_HOURS {
            self.warm_up(self.count / share, share, floor);
            self.floor = floor;
            self.remember_multiple();
            self.llr = 0.0;
            return;
        }
        self.floor = floor;
        let (capped, expected, unit) = self.open_hour(share, 0.0);
        for w in 0..WINDOW_HOURS.len() {
            self.counted[w] += capped / unit;
            self.expected[w] += expected / unit;
        }
        self.learn(capped / share, share, floor);
        self.remember_multiple();
        self.llr = self.statistic();
    }

    /// One hour of the warm-up; at its end the baseline is the mean of the hours less the
    /// bursts among them (each [`BURST_FACTOR`] times above the rest).
    fn warm_up(&mut self, x: f64, share: f64, floor: f64) {
        self.warming.push([x, share]);
        self.hours += share;
        if self.hours < WARM_UP_HOURS {
            return;
        }
        self.warming.sort_by(|a, b| a[0].total_cmp(&b[0]));
        let (mut sum, mut squares, mut weight) = (0.0, 0.0, 0.0);
        for [x, share] in &self.warming {
            sum += x * share;
            squares += x * x * share;
            weight += share;
        }
        let most = (self.warming.len() as f64 * MOST_BURSTS) as usize;
        for [x, share] in self.warming.iter().rev().take(most) {
            let rest = weight - share;
            let others = if rest > 0.0 {
                (sum - x * share) / rest
            } else {
                0.0
            };
            if *x <= BURST_FACTOR * others.max(floor) {
                break;
            }
            sum -= x * share;
            squares -= x * x * share;
            weight = rest;
        }
        self.warming.clear();
        if weight > 0.0 {
            self.mean = sum / weight;
            self.square = squares / weight;
        }
    }

    /// The counts one unit of evidence stands for at baseline `rate`.
    fn unit(&self, rate: f64) -> f64 {
        let dispersion = if self.mean > 0.0 {
            (self.square - self.mean * self.mean).max(0.0) / self.mean
        } else {
            0.0
        };
        (rate / UNIT_RATE).max(dispersion).max(1.0)
    }

    /// Moves the warm baseline towards an hour's capped count `x` (per full hour), observed
    /// for `share` of the hour.
    fn learn(&mut self, x: f64, share: f64, floor: f64) {
        self.hours += share;
        let k = share / BASELINE_HOURS;
        let growth = GROWTH_PER_DAY * share / 24.0;
        let mean = self.mean + (x - self.mean) * k;
        self.mean = mean.min(self.mean * (1.0 + growth) + floor * growth);
        let square = self.square + (x * x - self.square) * k;
        let most = self.square * (1.0 + growth) + floor * floor * growth;
        self.square = square.min(most).max(self.mean * self.mean);
    }

    fn statistic(&self) -> f64 {
        self.counted
            .iter()
            .zip(&self.expected)
            .map(|(&n, &e)| poisson_llr(n, e))
            .fold(0.0, f64::max)
    }

    fn is_sane(&self) -> bool {
        let finite = |x: f64| x.is_finite() && x >= 0.0;
        finite(self.mean)
            && finite(self.square)
            && finite(self.hours)
            && finite(self.llr)
            && self.warming.len() <= (WARM_UP_HOURS * HOUR / MIN_HOUR_SECONDS) as usize + 1
            && self.warming.iter().flatten().all(|x| finite(*x))
            && self
                .counted
                .iter()
                .chain(&self.expected)
                .all(|x| finite(*x))
    }
}

/// The multiple `c` of an hour's expected `rate` (in units) at which the hour's evidence,
/// `rate (c ln c − c + 1)`, reaches [`BAD_HOUR_NATS`]: the cap of one hour's count. At a
/// rate of one unit an hour it is about 4; at one a day, where one event is already that
/// much, the cap is the one event.
pub fn bad_hour_multiple(rate: f64) -> f64 {
    if rate.is_nan() || rate <= 0.0 {
        return 1.0;
    }
    let evidence = |c: f64| rate * (c * c.ln() - c + 1.0);
    // Increasing in c above 1: bisect on a log scale.
    let (mut lo, mut hi) = (0.0f64, 30.0f64);
    if evidence(hi.exp()) < BAD_HOUR_NATS {
        return hi.exp();
    }
    for _ in 0..50 {
        let mid = (lo + hi) / 2.0;
        if evidence(mid.exp()) < BAD_HOUR_NATS {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi.exp()
}

/// `n ln(n/e) − (n − e)` where `n > e > 0`, else 0: the log-likelihood ratio of a Poisson
/// count `n` under rate `n` against rate `e`.
pub fn poisson_llr(n: f64, e: f64) -> f64 {
    if n > e && e > 0.0 {
        n * (n / e).ln() - (n - e)
    } else {
        0.0
    }
}

/// The floors: rates per hour that a healthy GPU may show on each counter, the prior under
/// its own baseline.
pub mod floor {
    /// Corrected ECC errors: one every two days. A healthy GPU shows an isolated error now
    /// and then (a few a month in field data), and operators read a handful a day for a
    /// few days as no cause for alarm; worn HBM errs several times a day and more.
    pub const ECC_CORRECTED: f64 = 0.5 / 24.0;
    /// PCIe replays: a dozen a day; healthy links replay now and then in short trains.
    pub const PCIE_REPLAYS: f64 = 0.5;
    /// NVLink CRC, replay and recovery errors: one an hour.
    pub const NVLINK_ERRORS: f64 = 1.0;
    /// Hardware-fault XIDs: one a month.
    pub const XID_HARDWARE: f64 = 1.0 / (30.0 * 24.0);
    /// Failed NVML calls: one an hour (a driver busy at a moment).
    pub const FAILED_CALLS: f64 = 1.0;
    /// Hours of unstable power: one every two days.
    pub const UNSTABLE_HOURS: f64 = 1.0 / 48.0;
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};
    use rand_distr::{Distribution, Poisson};

    const DAY: i64 = 86_400;

    /// A test fed one sample a minute for `days`, `rate(t)` events per hour at `t` (days)
    /// drawn as Poisson counts; returns the statistic at the end of each hour.
    fn run(days: f64, floor: f64, seed: u64, rate: impl Fn(f64) -> f64) -> Vec<f64> {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut test = RateTest::default();
        let mut out = Vec::new();
        let start = 1_700_000_000 / 3600 * 3600;
        let minutes = (days * 1440.0) as i64;
        for m in 0..minutes {
            let at = start + m * 60;
            let lambda = rate(m as f64 / 1440.0) / 60.0;
            let count = if lambda > 0.0 {
                Poisson::new(lambda).map_or(0.0, |p| p.sample(&mut rng))
            } else {
                0.0
            };
            test.observe(at, count, 60.0, floor);
            if (m + 1) % 60 == 0 {
                out.push(test.llr());
            }
        }
        out
    }

    fn at_day(series: &[f64], day: f64) -> f64 {
        series[((day * 24.0) as usize).min(series.len() - 1)]
    }

    #[test]
    fn a_one_hour_burst_is_one_bad_hour() {
        let mut test = RateTest::default();
        let start = 1_700_000_000 / 3600 * 3600;
        let mut peak: f64 = 0.0;
        for m in 0..(10 * 1440) {
            let at = start + m * 60;
            // 200 corrected errors within an hour on day 4, nothing else.
            let burst = (4 * 1440..4 * 1440 + 60).contains(&m);
            test.observe(
                at,
                if burst { 200.0 / 60.0 } else { 0.0 },
                60.0,
                floor::ECC_CORRECTED,
            );
            peak = peak.max(test.llr());
        }
        // One capped event against 0.0625 expected in six hours: ln 16 − 1 ≈ 1.8 nats.
        assert!(peak > 1.0 && peak < 2.5, "{peak}");
        // And an isolated error reads the same: the burst's size does not count.
    }

    #[test]
    fn a_noisy_climb_from_nothing_to_a_dozen_a_day_is_evidence_within_days() {
        // 0 → 12 a day over six days from day 3, Poisson: days read 3, 1, 4, 6, 5, 9, …
        let (mut at_8, mut at_9) = (vec![], vec![]);
        for seed in 0..8 {
            let s = run(12.0, floor::ECC_CORRECTED, seed, |t| {
                12.0 / 24.0 * ((t - 3.0) / 6.0).clamp(0.0, 1.0)
            });
            assert!(at_day(&s, 3.0) < 3.0, "seed {seed}: before the climb");
            at_8.push(at_day(&s, 8.0));
            at_9.push(at_day(&s, 9.0));
        }
        // Ten a day, five days in: 8 to 38 nats over these seeds; twelve a day, past 19.
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        assert!(at_8.iter().all(|x| *x > 6.0), "{at_8:?}");
        assert!(median(&mut at_8) > 15.0, "{at_8:?}");
        assert!(at_9.iter().all(|x| *x > 15.0), "{at_9:?}");
    }

    #[test]
    fn three_a_day_from_nothing_stands_out_within_a_week() {
        // The lowest rate the test must see: a step to 3 a day on day 3. Poisson noise
        // spreads the evidence widely (3 to 18 nats after a week over these seeds, the
        // baseline growing towards the new rate meanwhile); most pass what years of a
        // healthy GPU's isolated errors ever give.
        let mut ends = vec![];
        for seed in 0..8 {
            let s = run(10.0, floor::ECC_CORRECTED, seed, |t| {
                if t >= 3.0 { 3.0 / 24.0 } else { 0.0 }
            });
            assert!(at_day(&s, 3.0) < 3.0, "seed {seed}: before the step");
            ends.push(at_day(&s, 10.0));
        }
        ends.sort_by(f64::total_cmp);
        assert!(ends[ends.len() / 4] > 4.5, "{ends:?}");
        assert!(ends[ends.len() / 2] > 7.0, "{ends:?}");
    }

    #[test]
    fn a_link_ramping_to_a_thousand_an_hour_in_a_day_is_evidence_early() {
        // From 0.3/h to 1,000/h exponentially over one day, from day 3.
        let s = run(4.5, floor::PCIE_REPLAYS, 1, |t| {
            if t < 3.0 {
                0.3
            } else {
                0.3 * (1000.0f64 / 0.3).powf(((t - 3.0) / 1.0).min(1.0))
            }
        });
        assert!(at_day(&s, 3.0) < 2.0);
        // Half way, at ~17/h, each hour is a bad hour; six hours later (~130/h) they have
        // added up past 10 nats, a quarter of a day before the peak.
        assert!(at_day(&s, 3.5) > 5.0, "{}", at_day(&s, 3.5));
        assert!(at_day(&s, 3.75) > 10.0, "{}", at_day(&s, 3.75));
    }

    #[test]
    fn a_ten_day_ramp_stays_visible_against_a_baseline_that_may_grow() {
        // 0.5/h → 20/h linearly over ten days: the baseline's growth cap keeps it from
        // becoming the normal.
        let s = run(14.0, floor::PCIE_REPLAYS, 2, |t| {
            0.5 + 19.5 * ((t - 2.0) / 10.0).clamp(0.0, 1.0)
        });
        for day in [8.0, 10.0, 12.0] {
            assert!(at_day(&s, day) > 12.0, "day {day}: {}", at_day(&s, day));
        }
    }

    #[test]
    fn a_steady_rate_is_its_own_normal_and_a_rise_of_a_fifth_is_not_a_fault() {
        for (rate, seed) in [(120.0, 3), (20.0, 4), (1000.0, 5)] {
            let s = run(20.0, floor::PCIE_REPLAYS, seed, |t| {
                if t < 10.0 { rate } else { 1.2 * rate }
            });
            let peak = s.iter().copied().fold(0.0, f64::max);
            assert!(peak < 3.0, "{rate}/h: {peak}");
        }
        // Four times the steady rate is.
        let s = run(14.0, floor::PCIE_REPLAYS, 6, |t| {
            if t < 10.0 { 120.0 } else { 480.0 }
        });
        assert!(at_day(&s, 11.0) > 12.0, "{}", at_day(&s, 11.0));
    }

    #[test]
    fn healthy_gpus_stay_quiet_for_years() {
        // Isolated corrected errors every two weeks, clustered in twos and threes now and
        // then: 3 years of GPU-days per seed, never near a warning (10 nats).
        let mut rng = SmallRng::seed_from_u64(9);
        let mut worst: f64 = 0.0;
        for _ in 0..3 {
            let mut test = RateTest::default();
            let start = 1_700_000_000 / 3600 * 3600;
            for h in 0..(365 * 24) {
                let at = start + h * 3600;
                let count = if rng.random::<f64>() < 1.0 / (14.0 * 24.0) {
                    rng.random_range(1..=3) as f64
                } else {
                    0.0
                };
                test.observe(at, count, 3600.0, floor::ECC_CORRECTED);
                worst = worst.max(test.llr());
            }
        }
        assert!(worst < 6.0, "{worst}");
    }

    #[test]
    fn nothing_is_said_before_the_baseline_warms_up() {
        let s = run(0.9, floor::PCIE_REPLAYS, 7, |_| 500.0);
        assert!(s.iter().all(|x| *x == 0.0));
    }

    #[test]
    fn gaps_and_damaged_state_are_read_safely() {
        let mut test = RateTest::default();
        let start = 1_700_000_000 / 3600 * 3600;
        for h in 0..48 {
            test.observe(start + h * 3600, 0.0, 3600.0, 1.0);
        }
        // Ten days of silence, then a sample: the windows decay, nothing breaks.
        test.observe(start + 10 * DAY, f64::NAN, f64::INFINITY, f64::NAN);
        test.observe(start + 10 * DAY + 3600, -5.0, 60.0, 1.0);
        assert!(test.llr().is_finite());
        test.mean = f64::NAN;
        test.observe(start + 11 * DAY, 1.0, 3600.0, 1.0);
        test.observe(start + 11 * DAY + 3600, 1.0, 3600.0, 1.0);
        assert!(test.mean.is_finite() && test.llr() == 0.0);
    }

    #[test]
    fn a_bad_hour_is_worth_the_same_evidence_at_any_rate() {
        for rate in [0.01, 0.5, 1.0, 3.0] {
            let c = bad_hour_multiple(rate);
            let nats = rate * (c * c.ln() - c + 1.0);
            assert!(
                (nats - BAD_HOUR_NATS).abs() < 1e-6,
                "{rate}: {c} gives {nats}"
            );
        }
        assert!((3.5..4.5).contains(&bad_hour_multiple(1.0)));
        assert_eq!(bad_hour_multiple(0.0), 1.0);
        assert_eq!(bad_hour_multiple(f64::NAN), 1.0);
    }

    #[test]
    fn a_burst_in_the_warm_up_is_not_the_normal() {
        // 500 replays in the third hour of a quiet link's first day, then quiet: the
        // baseline stays at the floor, and a later rise still shows.
        let s = run(6.0, floor::PCIE_REPLAYS, 8, |t| {
            if (2.0 / 24.0..3.0 / 24.0).contains(&t) {
                500.0
            } else if t >= 4.0 {
                20.0
            } else {
                0.2
            }
        });
        assert!(at_day(&s, 3.9) < 2.0, "{}", at_day(&s, 3.9));
        assert!(at_day(&s, 4.5) > 10.0, "{}", at_day(&s, 4.5));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 256, ..Default::default() })]

        /// Any samples — times out of order or far apart, counts negative, huge or not a
        /// number, spans of any length, any floor — leave a finite, non-negative statistic.
        #[test]
        fn any_samples_give_a_finite_statistic(
            samples in proptest::collection::vec(
                (
                    -2_000_000i64..2_000_000,
                    proptest::prelude::any::<f64>(),
                    proptest::prelude::any::<f64>(),
                    proptest::prelude::prop_oneof![
                        proptest::prelude::Just(floor::ECC_CORRECTED),
                        proptest::prelude::Just(floor::PCIE_REPLAYS),
                        proptest::prelude::any::<f64>(),
                    ],
                ),
                0..400,
            )
        ) {
            let mut test = RateTest::default();
            let mut at = 1_700_000_000i64;
            for (step, count, seconds, floor) in samples {
                at = at.saturating_add(step);
                test.observe(at, count, seconds, floor);
                let llr = test.llr();
                proptest::prop_assert!(llr.is_finite() && llr >= 0.0, "{llr}");
            }
        }
    }

    #[test]
    fn the_open_hour_counts_as_its_events_arrive() {
        // A quiet link at the floor for two days, then 6 replays in each ten minutes:
        // in the fourth hour the statistic rises within the hour, before it closes, and
        // the close gives what the open hour said at its last sample.
        let mut test = RateTest::default();
        let start = 1_700_000_000 / 3600 * 3600;
        for m in 0..(2 * 1440 + 180) {
            let count = if m >= 2 * 1440 && m % 10 == 0 {
                6.0
            } else {
                0.0
            };
            test.observe(start + m * 60, count, 60.0, floor::PCIE_REPLAYS);
        }
        let hour = start + 2 * DAY + 3 * 3600;
        test.observe(hour, 6.0, 60.0, floor::PCIE_REPLAYS);
        let before = test.llr();
        let mut seen = vec![];
        for m in 1..60 {
            let count = if m % 10 == 0 { 6.0 } else { 0.0 };
            test.observe(hour + m * 60, count, 60.0, floor::PCIE_REPLAYS);
            seen.push(test.llr());
        }
        assert!(seen[30] > before + 0.5, "{before} then {seen:?}");
        let last = seen[58];
        test.observe(hour + 3600, 0.0, 60.0, floor::PCIE_REPLAYS);
        assert!(
            (test.llr() - last).abs() < 0.05,
            "{last} then {}",
            test.llr()
        );
        // A quiet open hour never lowers it below the last close's.
        let closed = test.llr();
        for m in 1..59 {
            test.observe(hour + 3600 + m * 60, 0.0, 60.0, floor::PCIE_REPLAYS);
            assert!(test.llr() >= closed);
        }
    }

    #[test]
    fn the_hour_decays_are_the_windows_exponentials() {
        for (tau, decay) in WINDOW_HOURS.iter().zip(HOUR_DECAY) {
            assert!(((-1.0 / tau).exp() - decay).abs() < 1e-15, "{tau}");
        }
    }

    #[test]
    fn the_likelihood_ratio_is_zero_at_or_below_the_expectation() {
        assert_eq!(poisson_llr(1.0, 2.0), 0.0);
        assert_eq!(poisson_llr(2.0, 2.0), 0.0);
        assert_eq!(poisson_llr(3.0, 0.0), 0.0);
        assert!((poisson_llr(2.0, 1.0) - (2.0 * 2f64.ln() - 1.0)).abs() < 1e-12);
    }
}
