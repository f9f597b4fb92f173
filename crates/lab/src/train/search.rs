//! Fitting by direct search on what is judged: the weights under which the most training
//! failures are warned a full lead ahead, the warning held to the failure, while the
//! healthy training GPUs raise (almost) no warning.
//!
//! A logistic fit scores rows one by one: it rewards a row a week before a failure as much
//! as the one a day before, and does not see that a warning which dips for an hour is worth
//! nothing to an operator. The search judges a weight vector the way the evaluation does
//! (docs/detection.md, "How it is judged"): per failing GPU, the lowest score over the last
//! day before the failure must stay above the threshold; per healthy GPU, every rise across
//! the threshold counts. Rows are the engine's held features (the probe model's read-back),
//! and a held term is homogeneous in its weight (`hold(w × v) = w × hold(v)` for `w ≥ 0`),
//! so the score of any weights at any row follows from `wᵢ × xᵢ`, summed by family and
//! combined as the engine combines them, without rerunning the engine.
//!
//! The bias stays where the starting model puts it (a healthy GPU with nothing to report at
//! 0.011): the search moves weights only. It starts from given weights (the hand-set ones,
//! models/hand-set-risk.toml, for `train --scenarios`) and moves one weight at a time (coordinate ascent over multiplicative and additive steps), keeping a
//! move only when the objective improves. A feature that never varies in the training rows
//! keeps its starting weight: the data says nothing about it, the hand-set reason still
//! holds.
//!
//! The operators' anchors ([`super::anchors`]) come in as constraints, not as tracks: a
//! move that leaves any anchor further from its checks than before is refused, whatever it
//! gains on the library, and from a start that misses one the search first moves towards
//! meeting it (the objective is compared only between weights that fall equally short).

use super::anchors::{Constraint, shortfall};
use super::evaluate::{LEAD, SHORT_LEAD};
use super::fit::Fitted;
use crate::engine::risk::{FAMILIES, FEATURES, combine_families, family_of};

const N: usize = FEATURES.len();

/// What the objective gives each outcome, in "failures warned a day ahead".
const WARNED_LEAD: f64 = 1.0;
const WARNED_SHORT_LEAD: f64 = 0.4;
/// A false warning costs more than a failure warned gains: the search adds one only when it
/// buys at least two failures.
const FALSE_WARNING: f64 = 1.2;
/// Beyond the budget, a false warning costs more than any failure gains.
const OVER_BUDGET: f64 = 10.0;
/// Pull towards the threshold for a failure not yet warned (how close its lowest score of
/// the day came), and push away from it for a healthy GPU whose peak came within
/// [`NEAR_MISS`] of it: both give the search a slope where the counts are flat, and the
/// second keeps a margin for GPUs the search never saw.
const CLOSENESS: f64 = 0.1;
const NEAR_MISS: f64 = 0.7;
const HEALTHY_NEAR_MISS: f64 = 0.1;

/// Largest weight the search may give a feature: features are in e-folds, days or shares,
/// so more than this on one unit would let a trace of one signal warn alone.
const MAX_WEIGHT: f64 = 8.0;
/// Largest weight of a rate test's log-likelihood ratio, evidence in nats already: above
/// one a fit would count more evidence than the counts hold.
const MAX_LIKELIHOOD_WEIGHT: f64 = 1.0;

/// The largest weight of feature `j`.
fn max_weight(j: usize) -> f64 {
    if crate::engine::risk::is_likelihood_ratio(j) {
        MAX_LIKELIHOOD_WEIGHT
    } else {
        MAX_WEIGHT
    }
}
const MAX_SWEEPS: usize = 30;

/// One GPU's rows for the search.
#[derive(Debug, Clone)]
pub struct Track {
    /// Indices into the rows, in time order.
    pub rows: Vec<usize>,
    /// When it fails, for a failure with precursors; None for a healthy GPU.
    pub failure: Option<f64>,
}

/// The search's settings.
#[derive(Debug, Clone, Copy)]
pub struct SearchOptions {
    /// The bias kept (the starting model's).
    pub bias: f64,
    /// Score at which a warning is raised.
    pub threshold: f64,
    /// Seconds between two rows of a GPU: the row before a lead's start stands for it.
    pub row_every: f64,
    /// False warnings allowed per 1,000 healthy training GPU-days.
    pub false_per_1000_days: f64,
}

/// Rows as the search reads them.
pub struct Rows<'a> {
    pub times: &'a [f64],
    pub features: &'a [[f64; N]],
}

/// The weights that do best on `tracks` within `constraints`, starting from `start`,
/// moving the weights in index order.
pub fn search(
    rows: &Rows<'_>,
    tracks: &[Track],
    constraints: &[Constraint],
    start: &[f64; N],
    options: &SearchOptions,
) -> Fitted {
    let order: Vec<usize> = (0..N).collect();
    search_in_order(rows, tracks, constraints, start, options, &order)
}

/// [`search`], moving the weights in `order` each sweep: where two weights can buy the
/// same failure, the first moved takes it, so the order matters ([`super::ensemble`]
/// draws it at random per bag).
pub(crate) fn search_in_order(
    rows: &Rows<'_>,
    tracks: &[Track],
    constraints: &[Constraint],
    start: &[f64; N],
    options: &SearchOptions,
    order: &[usize],
) -> Fitted {
    let margin = (options.threshold / (1.0 - options.threshold)).ln() - options.bias;
    let healthy_days: f64 = tracks
        .iter()
        .filter(|t| t.failure.is_none())
        .map(|t| span(rows.times, &t.rows) / 86_400.0)
        .sum();
    let judge = Judge {
        times: rows.times,
        tracks,
        margin,
        lead_from: LEAD + options.row_every,
        short_from: SHORT_LEAD + options.row_every,
        budget: (options.false_per_1000_days * healthy_days / 1000.0).floor(),
        constraints,
        features: rows.features,
        bias: options.bias,
    };
    // Per feature, its non-zero rows: a move of one weight touches only those.
    let mut columns: Vec<Vec<(usize, f64)>> = vec![Vec::new(); N];
    for (r, x) in rows.features.iter().enumerate() {
        for (j, &v) in x.iter().enumerate() {
            if v != 0.0 {
                columns[j].push((r, v));
            }
        }
    }
    let mut weights = *start;
    for (j, w) in weights.iter_mut().enumerate() {
        *w = w.clamp(0.0, max_weight(j));
    }
    // Per row, each family's held sum, and the log-odds they combine to.
    let mut families: Vec<[f64; FAMILIES.len()]> = rows
        .features
        .iter()
        .map(|x| {
            let mut by_family = [0.0; FAMILIES.len()];
            for (j, (w, v)) in weights.iter().zip(x).enumerate() {
                by_family[family_of(j).index()] += w * v;
            }
            by_family
        })
        .collect();
    let mut scores: Vec<f64> = families.iter().map(combine_families).collect();
    let mut best = judge.value(&scores, &weights);
    let mut trial = scores.clone();
    for _ in 0..MAX_SWEEPS {
        let mut moved = false;
        for &j in order.iter().filter(|&&j| j < N) {
            if columns[j].is_empty() {
                continue;
            }
            let family = family_of(j).index();
            let w = weights[j];
            let mut chosen: Option<(f64, Value)> = None;
            for candidate in candidates(w, max_weight(j)) {
                let delta = candidate - w;
                trial.copy_from_slice(&scores);
                for &(r, v) in &columns[j] {
                    let mut by_family = families[r];
                    by_family[family] += delta * v;
                    trial[r] = combine_families(&by_family);
                }
                let mut trial_weights = weights;
                trial_weights[j] = candidate;
                let to_beat = chosen.map_or(best, |(_, v)| v);
                let value = judge.value_against(&trial, &trial_weights, &to_beat);
                if value.beats(&to_beat) {
                    chosen = Some((candidate, value));
                }
            }
            if let Some((candidate, value)) = chosen {
                let delta = candidate - w;
                for &(r, v) in &columns[j] {
                    families[r][family] += delta * v;
                    scores[r] = combine_families(&families[r]);
                }
                weights[j] = candidate;
                best = value;
                moved = true;
            }
        }
        if !moved {
            break;
        }
    }
    // A feature only the anchors show is as unknown to the library as one nothing shows.
    let mut anchored = vec![false; rows.features.len()];
    for c in constraints {
        for &r in &c.rows {
            anchored[r] = true;
        }
    }
    let mut constant = [true; N];
    for (x, _) in rows.features.iter().zip(&anchored).filter(|(_, a)| !**a) {
        for (c, &v) in constant.iter_mut().zip(x) {
            *c &= v == 0.0;
        }
    }
    Fitted {
        bias: options.bias,
        weights,
        constant,
    }
}

/// How far `weights` fall short of `constraints` (0: every anchor met), scored on `rows`.
pub(crate) fn shortfall_of(
    rows: &Rows<'_>,
    constraints: &[Constraint],
    weights: &[f64; N],
    bias: f64,
) -> f64 {
    let mut scores = vec![0.0; rows.times.len()];
    for c in constraints {
        for &r in &c.rows {
            scores[r] = super::anchors::score(weights, &rows.features[r]);
        }
    }
    total_shortfall(constraints, rows, &scores, weights, bias)
}

/// How far the rows' `scores` under `weights` fall short of `constraints`, summed.
fn total_shortfall(
    constraints: &[Constraint],
    rows: &Rows<'_>,
    scores: &[f64],
    weights: &[f64; N],
    bias: f64,
) -> f64 {
    constraints
        .iter()
        .map(|c| {
            let (times, features) = (rows.times, rows.features);
            shortfall(&c.checks, &c.rows, times, scores, features, weights, bias)
        })
        .sum()
}

/// The weights tried in place of `w`: smaller and larger by factors, and added steps so a
/// weight at zero can grow.
fn candidates(w: f64, most: f64) -> impl Iterator<Item = f64> {
    [0.0, 0.5 * w, 0.75 * w, 1.33 * w, 2.0 * w, w + 0.25, w + 1.0]
        .into_iter()
        .map(move |c| c.clamp(0.0, most))
        .filter(move |&c| (c - w).abs() > 1e-12)
}

/// Seconds from a track's first row to its last.
fn span(times: &[f64], rows: &[usize]) -> f64 {
    match (rows.first(), rows.last()) {
        (Some(&a), Some(&b)) => times[b] - times[a],
        _ => 0.0,
    }
}

/// The objective over every track.
struct Judge<'a> {
    times: &'a [f64],
    tracks: &'a [Track],
    /// Log-odds above the bias at which a warning is raised.
    margin: f64,
    /// A failure's rows from this long before it count towards its lead (a lead's length
    /// plus one row: the row at or before the lead's start).
    lead_from: f64,
    short_from: f64,
    /// False warnings allowed before each costs [`OVER_BUDGET`].
    budget: f64,
    /// The anchors the weights must meet.
    constraints: &'a [Constraint],
    features: &'a [[f64; N]],
    bias: f64,
}

/// Weights judged: how far they fall short of the anchors, and what they gain on the
/// tracks.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Value {
    short: f64,
    gain: f64,
}

impl Value {
    /// Closer to meeting the anchors wins; between weights equally close, the larger gain.
    fn beats(&self, other: &Value) -> bool {
        if self.short < other.short - 1e-9 {
            return true;
        }
        self.short <= other.short + 1e-9 && self.gain > other.gain + 1e-9
    }
}

/// How one track did under some scores.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Verdict {
    Failed {
        /// The lowest score over the lead and the short lead (log-odds above the bias);
        /// None when no row fell inside.
        lowest: Option<f64>,
        lowest_short: Option<f64>,
    },
    Healthy {
        rises: u32,
        peak: f64,
    },
}

impl Judge<'_> {
    fn value(&self, scores: &[f64], weights: &[f64; N]) -> Value {
        let short = self.short(scores, weights);
        Value {
            short,
            gain: self.gain(scores),
        }
    }

    /// [`Judge::value`], without the library's gain (a pass over every track) when the
    /// anchors already say it cannot beat `to_beat`.
    fn value_against(&self, scores: &[f64], weights: &[f64; N], to_beat: &Value) -> Value {
        let short = self.short(scores, weights);
        if short > to_beat.short + 1e-9 {
            return Value {
                short,
                gain: f64::NEG_INFINITY,
            };
        }
        Value {
            short,
            gain: self.gain(scores),
        }
    }

    /// How far `weights` fall short of the anchors.
    fn short(&self, scores: &[f64], weights: &[f64; N]) -> f64 {
        let rows = Rows {
            times: self.times,
            features: self.features,
        };
        total_shortfall(self.constraints, &rows, scores, weights, self.bias)
    }

    fn gain(&self, scores: &[f64]) -> f64 {
        let mut value = 0.0;
        let mut rises = 0.0;
        for track in self.tracks {
            match verdict(
                self.times,
                scores,
                track,
                self.margin,
                self.lead_from,
                self.short_from,
            ) {
                Verdict::Failed {
                    lowest,
                    lowest_short,
                } => {
                    let lowest = lowest.unwrap_or(f64::NEG_INFINITY);
                    if lowest >= self.margin {
                        value += WARNED_LEAD;
                    } else {
                        value += CLOSENESS * (lowest / self.margin).clamp(0.0, 1.0);
                    }
                    if lowest_short.is_some_and(|l| l >= self.margin) {
                        value += WARNED_SHORT_LEAD;
                    }
                }
                Verdict::Healthy { rises: r, peak } => {
                    rises += f64::from(r);
                    let near =
                        ((peak / self.margin - NEAR_MISS) / (1.0 - NEAR_MISS)).clamp(0.0, 1.0);
                    value -= HEALTHY_NEAR_MISS * near;
                }
            }
        }
        value - FALSE_WARNING * rises - OVER_BUDGET * (rises - self.budget).max(0.0)
    }
}

/// How `track` did under `scores` (log-odds above the bias, one per row).
pub fn verdict(
    times: &[f64],
    scores: &[f64],
    track: &Track,
    margin: f64,
    lead_from: f64,
    short_from: f64,
) -> Verdict {
    match track.failure {
        Some(failure) => {
            let (mut lowest, mut lowest_short) = (None::<f64>, None::<f64>);
            for &r in &track.rows {
                let before = failure - times[r];
                if before <= 0.0 || before > lead_from {
                    continue;
                }
                lowest = Some(lowest.map_or(scores[r], |l| l.min(scores[r])));
                if before <= short_from {
                    lowest_short = Some(lowest_short.map_or(scores[r], |l| l.min(scores[r])));
                }
            }
            Verdict::Failed {
                lowest,
                lowest_short,
            }
        }
        None => {
            let (mut rises, mut up, mut peak) = (0, false, f64::NEG_INFINITY);
            for &r in &track.rows {
                let s = scores[r];
                peak = peak.max(s);
                if s >= margin && !up {
                    rises += 1;
                }
                up = s >= margin;
            }
            Verdict::Healthy { rises, peak }
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A test feature's value over time.
    type Curve = dyn Fn(f64) -> f64;
    /// A test GPU: its failure time (None: healthy), its feature curve, the feature.
    type GpuCurve<'a> = (Option<f64>, &'a Curve, usize);

    const DAY: f64 = 86_400.0;
    const HOUR: f64 = 3_600.0;

    /// Hourly rows of one feature per GPU: `value(t)` for each.
    fn rows_of(gpus: &[GpuCurve<'_>], days: f64) -> (Vec<f64>, Vec<[f64; N]>, Vec<Track>) {
        let (mut times, mut features, mut tracks) = (Vec::new(), Vec::new(), Vec::new());
        for (failure, value, feature) in gpus {
            let mut track = Track {
                rows: Vec::new(),
                failure: *failure,
            };
            let end = failure.unwrap_or(days * DAY);
            let mut t = 0.0;
            while t < end {
                let mut x = [0.0; N];
                x[*feature] = value(t);
                track.rows.push(times.len());
                times.push(t);
                features.push(x);
                t += HOUR;
            }
            tracks.push(track);
        }
        (times, features, tracks)
    }

    /// Settings the search's and the bagging's tests share.
    pub(in crate::train) fn options() -> SearchOptions {
        SearchOptions {
            bias: -4.5,
            threshold: 0.7,
            row_every: HOUR,
            false_per_1000_days: 1.0,
        }
    }

    /// Failures whose feature 0 climbs for three days before they fail, healthy GPUs that
    /// show feature 1 as much: the search warns the failures a day ahead on feature 0 and
    /// leaves feature 1 unable to warn.
    #[test]
    fn the_search_weighs_what_precedes_failures_and_not_what_healthy_gpus_show() {
        let climb = |fail: f64| move |t: f64| ((t - (fail - 3.0 * DAY)) / DAY).max(0.0);
        let noise = |t: f64| if (t / DAY) as i64 % 3 == 0 { 2.5 } else { 0.0 };
        let mut gpus: Vec<(Option<f64>, Box<Curve>, usize)> = Vec::new();
        for k in 0..6 {
            let fail = (10.0 + k as f64) * DAY;
            gpus.push((Some(fail), Box::new(climb(fail)), 0));
        }
        for _ in 0..20 {
            gpus.push((None, Box::new(noise), 1));
        }
        let refs: Vec<GpuCurve<'_>> = gpus.iter().map(|(f, v, j)| (*f, v.as_ref(), *j)).collect();
        let (times, features, tracks) = rows_of(&refs, 20.0);
        let mut start = [0.0; N];
        start[1] = 3.0;
        let rows = Rows {
            times: &times,
            features: &features,
        };
        let fitted = search(&rows, &tracks, &[], &start, &options());
        let margin = (0.7f64 / 0.3).ln() + 4.5;
        // A day before the failure the climb stands at 2: that must warn, and hold.
        assert!(2.0 * fitted.weights[0] >= margin, "{:?}", fitted.weights);
        // The healthy GPUs' 2.5 must not.
        assert!(2.5 * fitted.weights[1] < margin, "{:?}", fitted.weights);
        assert!(fitted.constant[2] && !fitted.constant[0]);
        assert_eq!(fitted.bias, -4.5);
    }

    /// Failures that climb on feature 0 want a weight of 2.7 or more (2 × w over the
    /// margin a day ahead); an anchor whose healthy GPU shows 3 of feature 0 must stay
    /// under 0.5 (w under 1.5). The search gives up the failures for the anchor, and from
    /// a start that breaks the anchor it moves to meet it first.
    #[test]
    fn a_move_that_breaks_an_anchor_is_refused_whatever_it_gains() {
        use crate::train::anchors::{Check, Constraint};
        let climb = |fail: f64| move |t: f64| ((t - (fail - 3.0 * DAY)) / DAY).max(0.0);
        let mut gpus: Vec<(Option<f64>, Box<Curve>, usize)> = Vec::new();
        for k in 0..6 {
            let fail = (10.0 + k as f64) * DAY;
            gpus.push((Some(fail), Box::new(climb(fail)), 0));
        }
        for _ in 0..4 {
            gpus.push((None, Box::new(|_| 0.0), 0));
        }
        let refs: Vec<GpuCurve<'_>> = gpus.iter().map(|(f, v, j)| (*f, v.as_ref(), *j)).collect();
        let (mut times, mut features, tracks) = rows_of(&refs, 20.0);
        let unconstrained = search(
            &Rows {
                times: &times,
                features: &features,
            },
            &tracks,
            &[],
            &[1.0; N],
            &options(),
        );
        let margin = (0.7f64 / 0.3).ln() + 4.5;
        assert!(2.0 * unconstrained.weights[0] >= margin);
        let mut x = [0.0; N];
        x[0] = 3.0;
        let anchor = Constraint {
            name: "healthy".into(),
            rows: vec![times.len()],
            checks: vec![Check::Below(0.5)],
        };
        times.push(0.0);
        features.push(x);
        let rows = Rows {
            times: &times,
            features: &features,
        };
        let anchors = [anchor];
        let under_half = 4.5 / 3.0;
        for start in [1.0, 3.0] {
            let fitted = search(&rows, &tracks, &anchors, &[start; N], &options());
            assert!(fitted.weights[0] < under_half, "{:?}", fitted.weights);
            assert!(fitted.weights[0] > 0.5, "{:?}", fitted.weights);
            assert_eq!(shortfall_of(&rows, &anchors, &fitted.weights, -4.5), 0.0);
        }
    }

    #[test]
    fn a_warning_must_hold_over_the_whole_lead() {
        let times = [0.0, HOUR, 2.0 * HOUR, 3.0 * HOUR];
        let track = Track {
            rows: vec![0, 1, 2, 3],
            failure: Some(3.5 * HOUR),
        };
        let scores = [9.0, 9.0, 1.0, 9.0];
        let Verdict::Failed {
            lowest,
            lowest_short,
        } = verdict(&times, &scores, &track, 5.0, 3.0 * HOUR, HOUR)
        else {
            panic!("a failing track");
        };
        assert_eq!(lowest, Some(1.0));
        assert_eq!(lowest_short, Some(9.0));
        let healthy = Track {
            rows: vec![0, 1, 2, 3],
            failure: None,
        };
        assert_eq!(
            verdict(&times, &scores, &healthy, 5.0, 0.0, 0.0),
            Verdict::Healthy {
                rises: 2,
                peak: 9.0
            }
        );
    }
}
