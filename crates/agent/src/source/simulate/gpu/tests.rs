//! Unit tests of crates/agent/src/source/simulate/gpu.rs.

use super::super::workload::WorkloadKind;
use super::*;
use rand::SeedableRng;

#[test]
fn office_hours_are_weekdays_from_eight_to_eight_utc() {
    let mut rng = SmallRng::seed_from_u64(1);
    let workload = Workload::new(WorkloadKind::Training, 0.0, &mut rng);
    // Monday 2026-11-30 00:00 UTC.
    let monday = chrono::DateTime::parse_from_rfc3339("2026-11-30T00:00:00Z")
        .expect("a date")
        .with_timezone(&chrono::Utc);
    let gpu = SimGpu::new(0, "H100", workload, None, false, rng).with_office_hours(monday);
    let hour = 3600.0;
    assert!(!gpu.in_office_hours(7.5 * hour));
    assert!(gpu.in_office_hours(8.0 * hour));
    assert!(gpu.in_office_hours(19.9 * hour));
    assert!(!gpu.in_office_hours(20.0 * hour));
    assert!(
        gpu.in_office_hours((4.0 * 24.0 + 12.0) * hour),
        "Friday noon"
    );
    assert!(
        !gpu.in_office_hours((5.0 * 24.0 + 12.0) * hour),
        "Saturday noon"
    );
    assert!(
        !gpu.in_office_hours((6.0 * 24.0 + 12.0) * hour),
        "Sunday noon"
    );
}
