//! Error counters read as noisy rates: "did this GPU's rate go up, and stay up?"
//!
//! Every error counter the risk model reads (corrected ECC, PCIe replays, NVLink errors,
//! hardware XIDs, failed and slow NVML collections, and hours of unstable power) is one [`RateTest`]: the
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
//!   hours that stand ten times above the rest in the ordinary hours' own units (a burst
//!   in the warm-up is not the normal; trains of replays all day are, and a train is no
//!   burst among hours whose counts come in trains), then an exponentially weighted mean
//!   (e-fold a week) that may grow by at most [`GROWTH_PER_DAY`] a day, so a fault that builds over days stays visible instead
//!   of becoming the new normal, while a link that always replayed at 120 an hour is its
//!   own normal. Below a floor per counter (a prior: what a healthy GPU may show) the
//!   floor is the expectation. Before the warm-up ends the test gives nothing, never a
//!   guess.
//! - **Noise.** Counts are over-dispersed in the field (replays come in trains, ECC errors
//!   in clusters), and a Poisson test on a high rate would call a rise of a fifth
//!   significant. Counts are therefore scaled to units of the larger of one count, the
//!   baseline's hourly rate over [`UNIT_RATE`], and the baseline's own index of dispersion
//!   (variance over mean of its hourly counts, whose growth is held like the mean's but
//!   which does not shrink as a train's hour is cut): at high rates only relative rises
//!   count.
//! - **The test.** For each window (exponentially weighted, e-fold 6 h, 12 h, 1, 2, 4 and
//!   8 days) the counted units `n` and the expected units `e`; the statistic is the largest
//!   `n ln(n/e) − (n − e)` over the windows where `n > e`: the log-likelihood ratio, in
//!   nats, of "the rate in this window is n/e times the baseline" against "it is the
//!   baseline". A sudden ramp shows in the short windows, a slow one in the long ones.
//!   Where the expectation was learnt above the floor, the ratio is divided by the factor
//!   by which the learnt rate's own uncertainty inflates the window count's variance,
//!   `1 + share above the floor × window hours / hours learnt` (a window as long as the
//!   hours learnt counts half where all of the rate was learnt above the floor, more where
//!   less was): a day learnt low by chance, on counts that cluster by the hour, must not
//!   read as days of a rise.
//! - **The open hour.** The statistic is read with the open hour as observed so far (its
//!   count, capped at [`BAD_HOUR_NATS`] times its observed share, against its expectation
//!   so far) wherever that says more than the last close: evidence moves as counts
//!   arrive, not only when a clock hour closes (a warning whose evidence was complete
//!   within an hour landed just after it). A quiet open hour lowers it only at its close.
//!
//! Constant work per sample: a few additions, once an hour the windows' update, and six
//! windows' ratios each time the statistic is read.

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
pub(crate) const BAD_HOUR_NATS: f64 = 2.5;

/// A warm-up hour this many times above the mean of the others (or the floor) is a burst,
/// left out of the baseline; at most [`MOST_BURSTS`] of the hours are.
const BURST_FACTOR: f64 = 10.0;
const MOST_BURSTS: f64 = 0.1;

/// An hour's observed share counts up to this: samples that straddle its end stand for
/// more than the hour, and their counts with them.
const MOST_SHARE: f64 = 2.0;

/// How far the baseline may grow in a day, relative (plus the same share of the floor,
/// so that a baseline at zero can grow at all).
pub(crate) const GROWTH_PER_DAY: f64 = 0.25;

/// E-fold of the baseline's mean once warm, hours.
const BASELINE_HOURS: f64 = 7.0 * 24.0;

/// A rate of this many counts an hour is one unit of evidence per hour: above it, counts
/// are scaled down so that only relative rises count.
pub(crate) const UNIT_RATE: f64 = 1.0;

/// Standard errors of a Poisson count's index of dispersion that the baseline's index must
/// pass before its counts count as clustered ([`RateTest::unit`]).
const CHANCE_SPREADS: f64 = 2.0;

/// A rate the GPU learnt above its floor is known only to within the noise of the days it
/// was learnt on, and those can run high or low for days at a time (counts that cluster
/// by the day, load that shifts): the test expects this share more than what was learnt
/// above the floor before a rise counts, so a link that always replayed at 4 an hour and
/// reads 5 over a week is its own normal, while a climb to several times its rate still
/// adds up within a day (a step from 120 to 480 an hour passes 12 nats the day after). At
/// or below the floor the floor is the expectation, as before.
pub(crate) const LEARNT_RATE_ALLOWANCE: f64 = 0.25;

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
    /// The mean and mean square of the hours, exponentially weighted like the baseline's
    /// but without their growth held: the spread is read from them (absent from state
    /// saved before it existed: taken as the baseline's).
    free: Option<[f64; 2]>,
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

/// The start of the clock hour of unix time `at`.
pub(crate) fn hour_of(at: i64) -> i64 {
    at.div_euclid(HOUR as i64) * HOUR as i64
}

impl RateTest {
    /// Folds in `count` new events over `seconds` of a sample at `at`; `floor` is the rate
    /// per hour a healthy GPU may show on this counter. Negative or non-finite counts (a
    /// reset counter, a damaged reading) count as none.
    pub fn observe(&mut self, at: i64, count: f64, seconds: f64, floor: f64) {
        self.observe_in(hour_of(at), count, seconds, floor);
    }

    /// [`RateTest::observe`] of a sample in the clock hour starting at `hour`
    /// ([`hour_of`] its time): a GPU's counters share one sample's hour. Inlined, with the
    /// floor a constant where the counters call it: a few additions a sample, the hour's
    /// close (once an hour) kept apart.
    #[inline]
    pub(crate) fn observe_in(&mut self, hour: i64, count: f64, seconds: f64, floor: f64) {
        if hour > self.hour {
            self.open(hour, floor);
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
    pub(crate) fn llr(&self) -> f64 {
        // An open hour without counts only lowers every window's ratio (the windows decay
        // and its expectation adds): the last close's statistic stands, with no work.
        if self.count <= 0.0 {
            return self.llr;
        }
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
        let learnt = self.learnt(unit);
        let best = WINDOW_HOURS
            .iter()
            .enumerate()
            .map(|(w, tau)| {
                let decay = if elapsed_hours == 1.0 {
                    HOUR_DECAY[w]
                } else {
                    (-elapsed_hours / tau).exp()
                };
                learnt.llr(
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
        let expected = self.expected_rate() * share;
        let multiple = if multiple > 0.0 {
            multiple
        } else {
            bad_hour_multiple(self.expected_rate() / unit)
        };
        let most = (multiple * expected).max(1.0);
        (self.count.min(most), expected, unit)
    }

    /// The cap's multiple for the hour that opens after a close: an hour capped there gives
    /// [`BAD_HOUR_NATS`] against the hour's expectation.
    fn remember_multiple(&mut self) {
        let rate = self.mean.max(self.floor);
        self.multiple = bad_hour_multiple(self.expected_rate() / self.unit(rate));
    }

    /// Counts an hour is expected to hold: the floor, or the learnt rate with
    /// [`LEARNT_RATE_ALLOWANCE`] on what it learnt above the floor.
    fn expected_rate(&self) -> f64 {
        self.mean.max(self.floor) + LEARNT_RATE_ALLOWANCE * (self.mean - self.floor).max(0.0)
    }

    /// Closes the open hour, if any, and opens the one starting at `hour`.
    #[cold]
    #[inline(never)]
    fn open(&mut self, hour: i64, floor: f64) {
        if self.hour != 0 {
            self.close(floor);
        }
        self.hour = hour;
        self.count = 0.0;
        self.seconds = 0.0;
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
    /// bursts among them (each [`BURST_FACTOR`] times above the rest, in the ordinary
    /// hours' own units: where the hours that cannot be bursts come in trains, as many
    /// times their index of dispersion more, so that a train is not taken for a burst and
    /// left out of a baseline that then reads the next trains as a rise).
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
        // The units bursts are judged in: the clustering of the hours that cannot be
        // bursts (all but the `most` highest). Read from the others of each candidate
        // instead, two bursts would each count the other's spread and both stay in.
        let ordinary = dispersion_of(&self.warming[..self.warming.len() - most]);
        for [x, share] in self.warming.iter().rev().take(most) {
            let rest = weight - share;
            let others = if rest > 0.0 {
                (sum - x * share) / rest
            } else {
                0.0
            };
            if *x <= BURST_FACTOR * others.max(floor) * ordinary.max(1.0) {
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

    /// The variance of the baseline's hourly counts.
    fn variance(&self) -> f64 {
        (self.square - self.mean * self.mean).max(0.0)
    }

    /// The counts one unit of evidence stands for at baseline `rate`.
    fn unit(&self, rate: f64) -> f64 {
        let dispersion = if self.mean > 0.0 {
            // Counts that arrive one by one (Poisson) show an index of 1 give or take
            // about `√(2 / N)` over `N` hours (its standard error); the band used,
            // `√((1/m + 2) / N)` at `m` an hour, is wider where counts are rare, on
            // purpose: at a few a day an hour holds 0 or 1 and one hour with two moves the
            // index by far more than that error says. Only what stands beyond
            // [`CHANCE_SPREADS`] of the band is clustering: a GPU whose first days held one
            // hour with two corrected errors is not one whose errors come in pairs.
            // `N` is the hours the moments weigh, not the hours observed: the warm-up's
            // hours weigh alike, then each hour less as a week's mean moves on.
            let hours = self.hours_learnt().clamp(1.0, 2.0 * BASELINE_HOURS);
            let chance = ((1.0 / self.mean + 2.0) / hours).sqrt();
            self.variance() / self.mean - CHANCE_SPREADS * chance
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
        // The spread comes from moments learnt freely, its growth held like the mean's.
        // Holding the mean square itself each hour cut every hour of a train of counts
        // (one such hour moves a week's mean square by far more than an hour's growth) and
        // kept every quiet hour: on a GPU whose counts come in trains the spread fell
        // towards none within two weeks, the unit to one count, and its own normal read
        // as a rise of many nats.
        let [free_mean, free_square] = self.free.unwrap_or([self.mean, self.square]);
        let free_mean = free_mean + (x - free_mean) * k;
        let free_square = free_square + (x * x - free_square) * k;
        self.free = Some([free_mean, free_square]);
        let variance_was = self.variance();
        let mean = self.mean + (x - self.mean) * k;
        self.mean = mean.min(self.mean * (1.0 + growth) + floor * growth);
        let variance = (free_square - free_mean * free_mean).max(0.0);
        let most = variance_was * (1.0 + growth) + floor * floor * growth;
        self.square = self.mean * self.mean + variance.min(most);
    }

    fn statistic(&self) -> f64 {
        let rate = self.mean.max(self.floor);
        let learnt = self.learnt(self.unit(rate));
        self.counted
            .iter()
            .zip(&self.expected)
            .map(|(&n, &e)| learnt.llr(n, e))
            .fold(0.0, f64::max)
    }

    /// The hours the baseline's mean is worth: the warm-up's mean weighs as its hours, and
    /// fades as the exponentially weighted mean takes over, which is worth about two
    /// e-folds of hours (the inverse of the sum of its squared weights).
    fn hours_learnt(&self) -> f64 {
        if self.hours < WARM_UP_HOURS {
            return 0.0;
        }
        let warm = (-(self.hours - WARM_UP_HOURS) / BASELINE_HOURS).exp();
        1.0 / (warm * warm / WARM_UP_HOURS + (1.0 - warm * warm) / (2.0 * BASELINE_HOURS))
    }

    /// How well the expectation is known, for counts in units of `unit` counts.
    fn learnt(&self, unit: f64) -> Learnt {
        let expected = self.expected_rate();
        let above = (expected - self.floor).max(0.0);
        let hours = self.hours_learnt();
        if above <= 0.0 || expected <= 0.0 || hours <= 0.0 {
            return Learnt::default();
        }
        Learnt {
            share: above / expected,
            units_per_hour: expected / unit,
            hours,
        }
    }

    fn is_sane(&self) -> bool {
        let finite = |x: f64| x.is_finite() && x >= 0.0;
        finite(self.mean)
            && finite(self.square)
            && self.free.is_none_or(|l| l.iter().all(|x| finite(*x)))
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

/// The index of dispersion (variance over mean) of hourly counts `[count, share of the
/// hour observed]`, weighted by their shares; 0 where they hold no count.
fn dispersion_of(hours: &[[f64; 2]]) -> f64 {
    let (sum, squares, weight) = hours.iter().fold((0.0, 0.0, 0.0), |(s, q, w), [x, share]| {
        (s + x * share, q + x * x * share, w + share)
    });
    if weight <= 0.0 || sum <= 0.0 {
        return 0.0;
    }
    let mean = sum / weight;
    (squares / weight - mean * mean).max(0.0) / mean
}

/// What a test's expectation was learnt from: the share of it learnt above the floor (the
/// floor is a prior, known), the expected units an hour, and the hours it was learnt over.
#[derive(Debug, Clone, Copy, Default)]
struct Learnt {
    share: f64,
    units_per_hour: f64,
    hours: f64,
}

impl Learnt {
    /// The evidence of `n` units counted in a window against `e` expected: the Poisson
    /// ratio, divided by the factor by which the learnt rate's own uncertainty inflates
    /// the window count's variance (a quasi-likelihood). A rate learnt over `H` hours is known to within its
    /// standard error, `√(rate × unit / H)`; a window of `W` hours' exposure expects
    /// `W × rate` give or take `W` of those, so its count varies by `1 + share × W / H`
    /// times what Poisson noise alone gives. A window as long as the hours learnt then
    /// counts half where all of the rate was learnt above the floor (`share` 1), more where
    /// less was; a baseline learnt at the floor is not discounted at all.
    fn llr(&self, n: f64, e: f64) -> f64 {
        let plain = poisson_llr(n, e);
        if plain <= 0.0 || self.share <= 0.0 || self.units_per_hour <= 0.0 {
            return plain;
        }
        let window_hours = e / self.units_per_hour;
        plain / (1.0 + self.share * window_hours / self.hours)
    }
}

/// The multiple `c` of an hour's expected `rate` (in units) at which the hour's evidence,
/// `rate (c ln c − c + 1)`, reaches [`BAD_HOUR_NATS`]: the cap of one hour's count. At a
/// rate of one unit an hour it is about 4; at one a day, where one event is already that
/// much, the cap is the one event.
pub(crate) fn bad_hour_multiple(rate: f64) -> f64 {
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
pub(crate) fn poisson_llr(n: f64, e: f64) -> f64 {
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
    pub(crate) const ECC_CORRECTED: f64 = 0.5 / 24.0;
    /// PCIe replays: a dozen a day; healthy links replay now and then in short trains.
    pub(crate) const PCIE_REPLAYS: f64 = 0.5;
    /// NVLink CRC, replay and recovery errors: one every four hours. A healthy link errs
    /// now and then, a burst of a few to a score at a time (one bad hour, however large);
    /// a failing one errs hour after hour, from an error or two an hour. Against one an
    /// hour, a day of 1.5 an hour read 0.3 to 1.7 nats (the unit test
    /// `a_link_erring_hour_after_hour_stands_out_and_a_healthy_links_bursts_do_not`);
    /// against one every eight hours, a healthy link's bursts in clustered hours read 3
    /// in the scenario library.
    pub(crate) const NVLINK_ERRORS: f64 = 0.25;
    /// Hardware-fault XIDs: one a month.
    pub(crate) const XID_HARDWARE: f64 = 1.0 / (30.0 * 24.0);
    /// Failed NVML calls: one an hour (a driver busy at a moment).
    pub(crate) const FAILED_CALLS: f64 = 1.0;
    /// Collections of 0.25 s or more: one a day (a host busy at a moment). An agent that
    /// polls every few seconds learns its own rate above it; at a cadence of minutes a
    /// higher floor would leave an hour of one or two slow reads little to say (each hour
    /// counts at most [`super::BAD_HOUR_NATS`]).
    pub(crate) const SLOW_COLLECTIONS: f64 = 1.0 / 24.0;
    /// Hours of unstable power: one every two days.
    pub(crate) const UNSTABLE_HOURS: f64 = 1.0 / 48.0;
}

#[cfg(test)]
mod tests;
