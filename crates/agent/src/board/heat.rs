//! Heat strips: a GPU's utilization over the last hours as a row of coloured cells, and the
//! shade scale the tiles share with them.
//!
//! The cells come from the engine's day window (15-minute buckets, see
//! `crates/agent/src/engine/window.rs`): the board keeps no history of its own. A cell is the bucket's
//! mean utilization. A sample stands for the time since the one before it (capped by the
//! engine: a long silence is not observed time), so when samples are further apart than a
//! cell — a slow collection interval, an accelerated simulator — the empty cells that a
//! bucket's samples stand for show its value; a cell nothing stands for (the agent was
//! down, the GPU lost) is drawn as "no data", not as idle.

use std::collections::BTreeMap;

use maud::{Markup, Render, html};

use crate::engine::EngineState;
use crate::engine::window::Ring;
use crate::html::shade;

/// Hours a strip covers.
pub(crate) const STRIP_HOURS: i64 = 12;

/// One GPU's utilization over the last [`STRIP_HOURS`], oldest cell first.
#[derive(Debug, Clone, PartialEq)]
pub struct HeatStrip {
    /// Seconds one cell stands for.
    pub(crate) cell_seconds: i64,
    /// Mean utilization per cell; None where the window holds no sample.
    pub cells: Vec<Option<f64>>,
}

impl HeatStrip {
    /// The last [`STRIP_HOURS`] of `ring` as of `now` (unix seconds): one cell per bucket,
    /// the newest (still filling) bucket last.
    pub fn from_ring(ring: &Ring, now: i64) -> HeatStrip {
        let width = ring.width();
        let count = (STRIP_HOURS * 3600 / width).max(1) as usize;
        let newest = now.div_euclid(width) * width;
        let oldest = newest - (count as i64 - 1) * width;
        let mut cells = vec![None; count];
        // Seconds each cell's bucket stands for.
        let mut stands_for = vec![0.0; count];
        for bucket in ring.buckets() {
            if bucket.start < oldest || bucket.start > newest {
                continue;
            }
            let slot = ((bucket.start - oldest) / width) as usize;
            if let (Some(cell), Some(seconds)) = (cells.get_mut(slot), stands_for.get_mut(slot)) {
                *cell = bucket.utilization.mean();
                *seconds = bucket.seconds;
            }
        }
        // Newest first: what a bucket stands for beyond its own width reaches back over
        // the empty cells before it.
        let mut carried: Option<(f64, f64)> = None;
        for slot in (0..count).rev() {
            match cells[slot] {
                Some(value) => {
                    let beyond = stands_for[slot] - width as f64;
                    carried = (beyond > 0.0).then_some((value, beyond));
                }
                None => {
                    if let Some((value, left)) = carried {
                        cells[slot] = Some(value);
                        let left = left - width as f64;
                        carried = (left > 0.0).then_some((value, left));
                    }
                }
            }
        }
        HeatStrip {
            cell_seconds: width,
            cells,
        }
    }
}

/// The strip as inline SVG: one `rect` per cell, stretched to the width it is given.
impl Render for HeatStrip {
    fn render(&self) -> Markup {
        let hours = self.cells.len() as i64 * self.cell_seconds / 3600;
        html! {
            svg.heat viewBox={ "0 0 " (self.cells.len()) " 1" } preserveAspectRatio="none"
                role="img" aria-label={ "utilization, last " (hours) " h" } {
                @for (x, cell) in self.cells.iter().enumerate() {
                    rect class=(shade(*cell)) x=(x) width="1" height="1" {}
                }
            }
        }
    }
}

/// Every GPU's strip, by UUID.
pub type HeatStrips = BTreeMap<String, HeatStrip>;

/// The strips of every GPU the engine knows, as of `now` (unix seconds).
pub fn strips(engine: &EngineState, now: i64) -> HeatStrips {
    engine
        .gpus
        .values()
        .map(|gpu| {
            (
                gpu.uuid.clone(),
                HeatStrip::from_ring(&gpu.windows.day, now),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::window::{Point, Windows};

    #[test]
    fn shades_cover_the_range_and_say_when_there_is_no_data() {
        assert_eq!(shade(Some(0.0)), "u0");
        assert_eq!(shade(Some(0.04)), "u0");
        assert_eq!(shade(Some(0.5)), "u5");
        assert_eq!(shade(Some(1.0)), "u10");
        assert_eq!(shade(Some(7.0)), "u10");
        assert_eq!(shade(Some(-1.0)), "u0");
        assert_eq!(shade(Some(f64::NAN)), "un");
        assert_eq!(shade(None), "un");
    }

    #[test]
    fn a_strip_places_each_bucket_in_its_cell_and_leaves_gaps_empty() {
        let mut windows = Windows::default();
        let now = 100 * 86_400;
        // Busy two hours ago, idle in the newest bucket, nothing in between.
        for (at, utilization) in [(now - 7200, 0.9), (now - 7100, 0.7), (now, 0.0)] {
            windows.add(&Point {
                at,
                seconds: 5.0,
                utilization: Some(utilization),
                ..Point::default()
            });
        }
        let strip = HeatStrip::from_ring(&windows.day, now);
        assert_eq!(strip.cell_seconds, 900);
        assert_eq!(strip.cells.len(), 48);
        assert_eq!(strip.cells[47], Some(0.0));
        assert_eq!(strip.cells[47 - 8], Some(0.8));
        assert_eq!(strip.cells.iter().flatten().count(), 2);

        let mut svg = String::new();
        maud::Render::render_to(&strip, &mut svg);
        assert_eq!(svg.matches("<rect").count(), 48);
        // Samples 5 s apart stand for nothing beyond their bucket: the gap stays.
        assert_eq!(svg.matches("class=\"un\"").count(), 46);
        assert!(svg.contains("class=\"u8\" x=\"39\""), "{svg}");
    }

    #[test]
    fn a_sample_that_stands_for_an_hour_fills_the_cells_before_it_and_no_more() {
        let mut windows = Windows::default();
        let now = 100 * 86_400;
        windows.add(&Point {
            at: now - 3 * 3600,
            seconds: 600.0,
            utilization: Some(0.2),
            ..Point::default()
        });
        windows.add(&Point {
            at: now,
            seconds: 3600.0,
            utilization: Some(1.0),
            ..Point::default()
        });
        let strip = HeatStrip::from_ring(&windows.day, now);
        // The newest cell and the three 15-minute cells before it.
        assert_eq!(
            &strip.cells[43..],
            &[None, Some(1.0), Some(1.0), Some(1.0), Some(1.0)]
        );
        assert_eq!(strip.cells[47 - 12], Some(0.2));
        assert_eq!(strip.cells.iter().flatten().count(), 5);
    }
}
