//! The windows' buckets, summaries and bounds.

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

proptest::proptest! {
    /// A step's sums are the summary's, read over and over as the memo fills.
    #[test]
    fn sums_are_the_summarys_sums(
        samples in proptest::collection::vec((1i64..900, 0.0f64..3.0, proptest::bool::ANY), 1..400),
    ) {
        let mut w = Windows::default();
        let mut at = 1_700_000_000;
        for (step, collect, up) in samples {
            at += step;
            w.add(&Point {
                at,
                seconds: step as f64,
                utilization: Some(0.5),
                collect_seconds: up.then_some(collect),
                ..Point::default()
            });
            for span in [600, 3600] {
                let summary = w.hour.summary(at, span);
                let sums = w.hour.sums(at, span);
                // The summary merges whole buckets (their statistics' extremes), the sums
                // a step's memo of them: the slowest collection included.
                proptest::prop_assert_eq!(sums, Sums::from(&summary));
            }
        }
    }
}
