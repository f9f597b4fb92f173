//! Bagging the direct search: the weights a fold ships are each feature's median over
//! searches on bootstrap draws of its training GPUs.
//!
//! One search on a few dozen failures is unstable: where two features can each buy the
//! same failures, the first one moved takes them, and a feature that happens to separate
//! two training failures from every training GPU gets a large weight that a GPU it never
//! saw (a cooling event shaped a little otherwise, another SKU) turns into a false warning.
//! A weight that only some draws of the GPUs want, or only some orders of the moves, is a
//! weight the data does not support: the median over the draws keeps what most of them
//! agree on (bootstrap aggregation). Each draw keeps the split of failing and healthy GPUs
//! (drawn with replacement within each), and moves the weights in its own random order.

use rand::SeedableRng;
use rand::rngs::SmallRng;
use rand::seq::{IndexedRandom, SliceRandom};

use super::anchors::Constraint;
use super::fit::Fitted;
use super::parallel::in_parallel;
use super::search::{Rows, SearchOptions, Track, search_in_order, shortfall_of};
use crate::engine::risk::FEATURES;

const N: usize = FEATURES.len();

/// Searches per fit: enough that the median of a weight does not hang on one draw, few
/// enough that a fold costs seconds.
pub(crate) const BAGS: usize = 8;

/// The per-feature median of the weights [`search_in_order`] finds on `bags` bootstrap
/// draws of `tracks`, each draw and its order of moves from `seed`.
pub fn bagged(
    rows: &Rows<'_>,
    tracks: &[Track],
    constraints: &[Constraint],
    start: &[f64; N],
    options: &SearchOptions,
    bags: usize,
    seed: u64,
) -> Fitted {
    let failing: Vec<&Track> = tracks.iter().filter(|t| t.failure.is_some()).collect();
    let healthy: Vec<&Track> = tracks.iter().filter(|t| t.failure.is_none()).collect();
    let draws: Vec<(Vec<Track>, Vec<usize>)> = (0..bags.max(1))
        .map(|b| {
            let mut rng = SmallRng::seed_from_u64(seed ^ (b as u64 + 1).wrapping_mul(0x9E37_79B9));
            let mut draw = Vec::with_capacity(tracks.len());
            for group in [&failing, &healthy] {
                for _ in 0..group.len() {
                    if let Some(t) = group.choose(&mut rng) {
                        draw.push((*t).clone());
                    }
                }
            }
            let mut order: Vec<usize> = (0..N).collect();
            order.shuffle(&mut rng);
            (draw, order)
        })
        .collect();
    let fits = in_parallel(&draws, |(draw, order)| {
        search_in_order(rows, draw, constraints, start, options, order)
    });
    let mut weights = [0.0; N];
    for (j, w) in weights.iter_mut().enumerate() {
        let mut column: Vec<f64> = fits.iter().map(|f| f.weights[j]).collect();
        column.sort_by(f64::total_cmp);
        let n = column.len();
        if n > 0 {
            *w = (column[(n - 1) / 2] + column[n / 2]) / 2.0;
        }
    }
    // The anchors bound every draw's weights, but not their median: a median that misses
    // one gives way to the draw nearest it that meets them all (the searches meet them
    // wherever their start allows).
    if shortfall_of(rows, constraints, &weights, options.bias) > 0.0 {
        let distance = |f: &Fitted| -> f64 {
            f.weights
                .iter()
                .zip(&weights)
                .map(|(a, b)| (a - b).abs())
                .sum()
        };
        if let Some(nearest) = fits
            .iter()
            .filter(|f| shortfall_of(rows, constraints, &f.weights, options.bias) == 0.0)
            .min_by(|a, b| distance(a).total_cmp(&distance(b)))
        {
            weights = nearest.weights;
        }
    }
    Fitted {
        bias: options.bias,
        weights,
        // A feature no row shows is constant in every draw alike.
        constant: fits.first().map_or([true; N], |f| f.constant),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::search::tests::options;

    const DAY: f64 = 86_400.0;
    const HOUR: f64 = 3_600.0;

    /// Six failures that climb on feature 0 over three days; one of them shows feature 1
    /// as well, and no healthy GPU shows either. Every draw has feature 0 to warn with, so
    /// the median keeps it at a warning weight and feature 1, which only draws holding
    /// that one failure could want, below it; the same seed gives the same weights.
    #[test]
    fn the_median_keeps_what_every_draw_needs_and_the_same_seed_gives_the_same_model() {
        let (mut times, mut features, mut tracks) = (Vec::new(), Vec::new(), Vec::new());
        let mut push = |failure: Option<f64>, value: &dyn Fn(f64) -> [f64; N]| {
            let mut track = Track {
                rows: Vec::new(),
                failure,
            };
            let mut t = 0.0;
            while t < failure.unwrap_or(20.0 * DAY) {
                track.rows.push(times.len());
                times.push(t);
                features.push(value(t));
                t += HOUR;
            }
            tracks.push(track);
        };
        for k in 0..6 {
            let fail = (10.0 + k as f64) * DAY;
            let climb = move |t: f64| ((t - (fail - 3.0 * DAY)) / DAY).max(0.0);
            push(Some(fail), &|t| {
                let mut x = [0.0; N];
                x[0] = climb(t);
                if k == 0 {
                    x[1] = 3.0 * climb(t);
                }
                x
            });
        }
        for _ in 0..20 {
            push(None, &|_| [0.0; N]);
        }
        let rows = Rows {
            times: &times,
            features: &features,
        };
        let fitted = bagged(&rows, &tracks, &[], &[0.0; N], &options(), BAGS, 7);
        let margin = (0.7f64 / 0.3).ln() + 4.5;
        assert!(2.0 * fitted.weights[0] >= margin, "{:?}", fitted.weights);
        assert!(
            fitted.weights[1] < fitted.weights[0],
            "{:?}",
            fitted.weights
        );
        assert_eq!(fitted.bias, -4.5);
        // The same seed, the same model.
        let again = bagged(&rows, &tracks, &[], &[0.0; N], &options(), BAGS, 7);
        assert_eq!(again.weights, fitted.weights);
    }
}
