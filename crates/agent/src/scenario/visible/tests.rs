use super::*;
use crate::scenario::{LibraryOptions, draw};
use crate::source::simulate::{Curve, Sku};

/// A failing GPU of a drawn library, made to fail of `kind` after `shape`.
fn failing(kind: FaultKind, sku: Sku, shape: Shape, link_mode: LinkMode) -> GpuSpec {
    let library = draw(LibraryOptions::new(3, 6, 30.0));
    let mut gpu = library
        .nodes
        .iter()
        .flat_map(|n| n.gpus.iter())
        .find(|g| g.plan.fault.is_some_and(FaultKind::has_precursors))
        .cloned()
        .expect("a library of six nodes has a failure with precursors");
    gpu.plan.fault = Some(kind);
    gpu.sku = sku;
    gpu.shape = Some(shape);
    gpu.link_mode = link_mode;
    gpu
}

fn shape(curve: Curve, end_per_hour: f64, base: f64, growth: f64, days: f64) -> Shape {
    Shape {
        curve,
        rate: end_per_hour / (base * growth),
        growth,
        precursor_days: days,
        cluster_hours: 12.0,
    }
}

fn shows(kind: FaultKind, sku: Sku, shape: Shape) -> bool {
    gpu_shows_a_day_ahead(&failing(kind, sku, shape, LinkMode::Replays), 600.0)
}

#[test]
fn a_span_of_a_day_shows_nothing_a_day_ahead_however_loud() {
    let loud = shape(Curve::Linear, 500.0 / 24.0, 2.0, 3.0, 1.0);
    assert!(!shows(FaultKind::MemoryWear, Sku::H100, loud));
    assert!(!shows(
        FaultKind::PcieLink,
        Sku::H100,
        shape(Curve::Linear, 1000.0, 100.0, 3.0, 0.9)
    ));
}

#[test]
fn a_faint_climb_shows_nothing_where_a_loud_one_of_the_same_span_does() {
    // Three corrected errors a day at the end, 60 times what it started at, over two days:
    // about half an event expected by a day ahead.
    let faint = shape(Curve::Exponential, 3.0 / 24.0, 2.0, 60.0, 2.0);
    assert!(!shows(FaultKind::MemoryWear, Sku::H100, faint));
    let loud = shape(Curve::Exponential, 300.0 / 24.0, 2.0, 10.0, 2.0);
    assert!(shows(FaultKind::MemoryWear, Sku::H100, loud));
    // Past three days and a half the remap pending shows, however faint the errors.
    let long = shape(Curve::Exponential, 3.0 / 24.0, 2.0, 60.0, 4.0);
    assert!(shows(FaultKind::MemoryWear, Sku::H100, long));
}

#[test]
fn hours_with_events_count_every_hour_of_a_loud_precursor_and_the_events_of_a_faint_one() {
    // Linear from 1 to 3 (× base) an hour over 3 days: 48 hours to a day ahead.
    let s = shape(Curve::Linear, 3.0, 1.0, 3.0, 3.0);
    let ahead = Ahead::new(FaultKind::MemoryWear, &s);
    assert!((ahead.hours - 48.0).abs() < 1e-9);
    // Hundreds an hour: every hour shows.
    assert!((ahead.hours_with_events(100.0) - 48.0).abs() < 1e-6);
    // A thousandth of that: hardly two events in an hour, so hours ≈ events, 48 hours at a
    // mean of (1 + 2.33) / 2 × 0.001.
    let events = 48.0 * (1.0 + (1.0 + 2.0 * 2.0 / 3.0)) / 2.0 * 0.001;
    let hours = ahead.hours_with_events(0.001);
    assert!(
        hours < events && hours > 0.99 * events,
        "{hours} against {events}"
    );
}

#[test]
fn a_small_temperature_move_shows_nothing_and_a_large_one_does() {
    // Linear level at rate 0.3 (7.8 °C of gap at the failure), a 1.5-day span: a third of
    // the way a day ahead, 2.6 °C.
    let small = Shape {
        curve: Curve::Linear,
        rate: 0.3,
        growth: 3.0,
        precursor_days: 1.5,
        cluster_hours: 12.0,
    };
    assert!(!shows(FaultKind::Thermal, Sku::H100, small));
    let large = Shape {
        rate: 1.0,
        precursor_days: 5.0,
        ..small
    };
    assert!(shows(FaultKind::Thermal, Sku::H100, large));
    // Without an HBM sensor only the inlet's 12 °C at the full level can show: 80% of the
    // way at rate 0.5 is 4.8 °C.
    let no_sensor = Shape { rate: 0.5, ..large };
    assert!(shows(FaultKind::Thermal, Sku::H100, no_sensor));
    assert!(!shows(FaultKind::Thermal, Sku::L40S, no_sensor));
}

#[test]
fn per_collection_precursors_count_at_the_nodes_interval() {
    // Power-brake collections at 3% × 0.5 over 12 hours: an hour of 60 collections shows
    // one with a chance of 0.6 (7 hours of 12), an hour of six with 0.09 (1 hour).
    let s = Shape {
        curve: Curve::Linear,
        rate: 0.5,
        growth: 1.0,
        precursor_days: 1.5,
        cluster_hours: 12.0,
    };
    let gpu = failing(FaultKind::PowerDelivery, Sku::H100, s, LinkMode::Replays);
    assert!(gpu_shows_a_day_ahead(&gpu, 60.0));
    assert!(!gpu_shows_a_day_ahead(&gpu, 600.0));
}

#[test]
fn a_gpu_that_does_not_fail_or_drops_without_warning_shows_nothing() {
    let library = draw(LibraryOptions::new(3, 6, 30.0));
    for node in &library.nodes {
        for (i, gpu) in node.gpus.iter().enumerate() {
            let predictable = gpu.plan.fault.is_some_and(FaultKind::has_precursors);
            if !predictable {
                assert!(!node.shows_a_day_ahead(i, 600.0));
            }
        }
    }
    let s = shape(Curve::Linear, 10.0, 1.0, 3.0, 8.0);
    assert!(!shows(FaultKind::FellOffBus, Sku::H100, s));
}

#[test]
fn a_loud_short_precursor_shows_beyond_any_healthy_burst() {
    // NVLink errors at about 100 an hour for the 3.6 hours before a day ahead: fewer than
    // five hours, but far more errors than a healthy burst's 20.
    let loud = shape(Curve::Linear, 300.0, SHAPED_BASE.nvlink_errors, 3.0, 1.15);
    assert!(shows(FaultKind::NvLink, Sku::H100, loud));
    let faint = shape(Curve::Linear, 3.0, SHAPED_BASE.nvlink_errors, 3.0, 1.15);
    assert!(!shows(FaultKind::NvLink, Sku::H100, faint));
}

#[test]
fn a_link_that_trains_down_and_replays_replays_at_the_full_rate() {
    // 1.3 days: a day ahead the link has not trained down yet (45% of the way); 7.2 hours
    // at about 7 replays an hour show, a tenth of that (a link that only trains down)
    // hardly does.
    let s = shape(Curve::Linear, 20.0, SHAPED_BASE.pcie_replays, 3.0, 1.3);
    let link =
        |mode| gpu_shows_a_day_ahead(&failing(FaultKind::PcieLink, Sku::H100, s, mode), 600.0);
    assert!(link(LinkMode::Both));
    assert!(link(LinkMode::Replays));
    assert!(!link(LinkMode::TrainDown));
}

#[test]
fn a_remap_or_two_expected_is_no_sign_and_a_handful_is() {
    // Row remapping on a 1.1-day span: 2.4 hours before a day ahead, at 0.1 an hour times
    // the shape's rate.
    let few = shape(Curve::Linear, 1.0, SHAPED_BASE.rows_remapped, 3.0, 1.1);
    assert!(!shows(FaultKind::RowRemap, Sku::H100, few));
    let many = shape(Curve::Linear, 3.0, SHAPED_BASE.rows_remapped, 1.0, 1.1);
    assert!(shows(FaultKind::RowRemap, Sku::H100, many));
}
