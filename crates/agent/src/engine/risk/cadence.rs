//! How often a GPU's risk is assessed: at its first sample of each minute, and at once when a
//! sample brings news the score must show without delay.
//!
//! The features read windows whose finest buckets are a minute wide, baselines learnt over
//! days and evidence held for hours; between two minutes a sample moves them only by its
//! share of the open minute. Scoring every sample of a log written every 5 seconds computed
//! twelve times a minute a score that an operator reads once a minute at most, and it was
//! the largest part of the engine's work per sample (docs/detection.md, "How often a GPU is
//! scored"). So a GPU whose sample brings nothing new keeps, within the minute, the
//! assessment of its last scored sample. Assessed at once, whatever the minute:
//! - a sample with any error count that grew (corrected or uncorrected ECC, PCIe replays,
//!   NVLink errors, hardware XIDs, failed NVML calls): errors are the evidence that starts a
//!   warning, and its start time is the sample's;
//! - a change of the remapped-row or retired-page state (a remap pending, a failure);
//! - a GPU that stops or starts answering, or that the snapshot misses;
//! - the first sample after a start or a restored state (nothing is remembered yet).
//!
//! A collection interval of a minute or more scores every sample, as before.

use super::Assessment;
use crate::model::{GpuSample, RemappedRows, RetiredPages};

/// Seconds of the scoring period: the width of the finest window bucket.
const PERIOD: i64 = 60;

/// A GPU's last assessment and what it was made on. Not state: it is not saved, compared or
/// cloned (a copy starts empty and scores its next sample), as the window memo is not.
#[derive(Default)]
pub struct Cadence {
    last: Option<Last>,
    /// A sample since the last assessment brought an error count that grew.
    news: bool,
}

struct Last {
    period: i64,
    up: bool,
    rows: Option<RemappedRows>,
    pages: Option<RetiredPages>,
    assessment: Assessment,
    /// Uncorrectable errors of the last day, as summarised for the assessment: it changes
    /// only with a new error (news) or at a window bucket's end (a minute's start).
    uncorrectable_day: f64,
}

impl Cadence {
    /// Notes that this step's sample brought errors (any counter delta).
    pub(crate) fn note_news(&mut self, news: bool) {
        self.news |= news;
    }

    /// Whether the GPU is to be scored at `now` on `sample` (None: the snapshot missed it).
    pub fn due(&self, now: i64, sample: Option<&GpuSample>) -> bool {
        let (Some(last), Some(sample)) = (&self.last, sample) else {
            return true;
        };
        self.news
            || now.div_euclid(PERIOD) != last.period
            || !sample.up
            || !last.up
            || sample.remapped_rows != last.rows
            || sample.retired_pages != last.pages
    }

    /// Remembers `assessment`, just made at `now` on `sample` with the day's
    /// `uncorrectable_day` errors.
    pub fn scored(
        &mut self,
        now: i64,
        sample: Option<&GpuSample>,
        assessment: &Assessment,
        uncorrectable_day: f64,
    ) {
        self.news = false;
        let Some(sample) = sample else {
            self.last = None;
            return;
        };
        let last = self.last.get_or_insert_with(|| Last {
            period: 0,
            up: true,
            rows: None,
            pages: None,
            assessment: Assessment::default(),
            uncorrectable_day: 0.0,
        });
        last.period = now.div_euclid(PERIOD);
        last.up = sample.up;
        last.rows = sample.remapped_rows;
        last.pages = sample.retired_pages;
        last.uncorrectable_day = uncorrectable_day;
        // Into the kept one's buffers: no allocation once they have grown.
        last.assessment.clone_from(assessment);
    }

    /// The last assessment and the day's uncorrectable errors it was made with, for a GPU
    /// that is not due; None before the first.
    pub fn last(&self) -> Option<(&Assessment, f64)> {
        (self.last.as_ref()).map(|last| (&last.assessment, last.uncorrectable_day))
    }
}

impl Clone for Cadence {
    /// A copy starts empty: remembering is an optimisation, not state.
    fn clone(&self) -> Self {
        Cadence::default()
    }
}

impl PartialEq for Cadence {
    /// Not state: two GPU states are equal whatever their last assessments.
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for Cadence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cadence")
            .field("remembered", &self.last.is_some())
            .field("news", &self.news)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scored(now: i64, sample: &GpuSample) -> Cadence {
        let mut cadence = Cadence::default();
        let assessment = Assessment {
            score: 0.3,
            ..Assessment::default()
        };
        cadence.scored(now, Some(sample), &assessment, 2.0);
        cadence
    }

    fn up() -> GpuSample {
        GpuSample {
            up: true,
            ..GpuSample::default()
        }
    }

    #[test]
    fn a_quiet_sample_within_the_minute_repeats_the_last_assessment() {
        let cadence = scored(120, &up());
        assert!(!cadence.due(125, Some(&up())));
        assert!(!cadence.due(179, Some(&up())));
        let last = cadence
            .last()
            .map(|(a, uncorrectable)| (a.score, uncorrectable));
        assert_eq!(last, Some((0.3, 2.0)));
        assert!(cadence.due(180, Some(&up())), "the next minute is scored");
    }

    #[test]
    fn news_is_scored_at_once() {
        let mut cadence = scored(120, &up());
        cadence.note_news(true);
        assert!(cadence.due(125, Some(&up())), "an error count grew");
        let mut cadence = scored(120, &up());
        cadence.note_news(false);
        assert!(!cadence.due(125, Some(&up())));
        let down = GpuSample::default();
        assert!(cadence.due(125, Some(&down)), "stopped answering");
        assert!(cadence.due(125, None), "missing from the snapshot");
        let pending = GpuSample {
            remapped_rows: Some(RemappedRows {
                pending: true,
                ..RemappedRows::default()
            }),
            ..up()
        };
        assert!(cadence.due(125, Some(&pending)), "a remap pending");
        let retiring = GpuSample {
            retired_pages: Some(RetiredPages::default()),
            ..up()
        };
        assert!(cadence.due(125, Some(&retiring)), "page retirement appears");
        assert!(
            Cadence::default().due(125, Some(&up())),
            "nothing remembered"
        );
        assert!(
            cadence.clone().due(125, Some(&up())),
            "a copy remembers nothing"
        );
    }
}
