//! Each fixed-shape family unfolds as documented in fault.rs.

use super::*;
use rand::SeedableRng;

fn run(kind: FaultKind, until: f64) -> (Wear, Vec<u32>) {
    let mut rng = SmallRng::seed_from_u64(7);
    let mut fault = Fault::new(kind, 8.0 * 3600.0);
    let mut wear = Wear {
        link_gen: 5,
        link_width: 16,
        ..Wear::default()
    };
    let mut xids = Vec::new();
    let dt = 60.0;
    let mut t = 0.0;
    while t < until {
        t += dt;
        xids.extend(fault.step(t, dt, &mut wear, &mut rng));
    }
    (wear, xids)
}

#[test]
fn memory_wear_warns_before_it_fails() {
    let (before, xids) = run(FaultKind::MemoryWear, 0.9 * 8.0 * 3600.0);
    assert!(
        before.corrected > 10,
        "corrected ECC climbs: {}",
        before.corrected
    );
    assert!(before.remap_correctable > 0);
    assert!(before.remap_pending);
    assert_eq!(before.uncorrected, 0);
    assert!(xids.is_empty());
    let (after, xids) = run(FaultKind::MemoryWear, 1.3 * 8.0 * 3600.0);
    assert!(after.uncorrected > 0 && after.remap_failure);
    assert_eq!(&xids[..3], &[48, 63, 94]);
    assert!(xids.contains(&64));
}

#[test]
fn pcie_link_bursts_then_trains_down() {
    let (w, _) = run(FaultKind::PcieLink, 1.01 * 8.0 * 3600.0);
    assert!(w.pcie_replays > 100, "{}", w.pcie_replays);
    assert_eq!((w.link_gen, w.link_width), (3, 8));
}

#[test]
fn fell_off_bus_raises_xid_79_once() {
    let (w, xids) = run(FaultKind::FellOffBus, 2.0 * 8.0 * 3600.0);
    assert!(w.lost);
    assert_eq!(xids, vec![79]);
}

#[test]
fn nvlink_errors_climb_on_one_link_then_xid_74() {
    let (early, xids) = run(FaultKind::NvLink, 0.6 * 8.0 * 3600.0);
    assert_eq!(early.nvlink.len(), 1, "one link degrades");
    assert!(early.nvlink[0].crc_flit > 5, "{:?}", early.nvlink);
    assert!(xids.is_empty());
    let (late, xids) = run(FaultKind::NvLink, 1.01 * 8.0 * 3600.0);
    assert!(late.nvlink[0].crc_flit > 4 * early.nvlink[0].crc_flit);
    assert!(late.nvlink[0].recovery > 0);
    assert_eq!(xids, vec![74]);
}

#[test]
fn gsp_calls_slow_and_fail_before_xid_119_120() {
    let mut rng = SmallRng::seed_from_u64(3);
    let horizon = 8.0 * 3600.0;
    let mut fault = Fault::new(FaultKind::GspFirmware, horizon);
    let mut wear = Wear::default();
    let (mut slow, mut failing, mut xids) = (0, 0, Vec::new());
    let mut t = 0.0;
    while t < 0.8 * horizon {
        t += 60.0;
        xids.extend(fault.step(t, 60.0, &mut wear, &mut rng));
        slow += usize::from(wear.collect_seconds > 0.2);
        failing += usize::from(wear.failed_calls > 0);
    }
    assert!(slow > 20 && failing > 5, "slow {slow}, failing {failing}");
    assert!(xids.is_empty() && !wear.lost);
    while t < 1.01 * horizon {
        t += 60.0;
        xids.extend(fault.step(t, 60.0, &mut wear, &mut rng));
    }
    assert!(wear.lost);
    assert!(xids.ends_with(&[119, 120]), "{xids:?}");
}

#[test]
fn power_delivery_brakes_more_often_then_drops_off_the_bus() {
    let mut rng = SmallRng::seed_from_u64(4);
    let horizon = 8.0 * 3600.0;
    let mut fault = Fault::new(FaultKind::PowerDelivery, horizon);
    let mut wear = Wear::default();
    let mut braked = [0usize; 2];
    let mut t = 0.0;
    while t < horizon {
        t += 60.0;
        fault.step(t, 60.0, &mut wear, &mut rng);
        if wear.power_brake {
            braked[usize::from(t > 0.65 * horizon)] += 1;
        }
    }
    assert!(braked[1] > braked[0] && braked[1] > 10, "{braked:?}");
    assert!(wear.lost);
}

#[test]
fn far_off_failures_stay_quiet_until_their_precursor_span() {
    let horizon = 30.0 * DAY;
    let fault = Fault::new(FaultKind::MemoryWear, horizon);
    assert!(fault.progress(10.0 * DAY) < 0.0);
    assert!((fault.progress(horizon) - 1.0).abs() < 1e-12);
    assert!((fault.progress(horizon - 5.0 * DAY) - 0.5).abs() < 1e-12);
    // Short horizons keep the plain ratio.
    let short = Fault::new(FaultKind::MemoryWear, 8.0 * 3600.0);
    assert_eq!(short.progress(3600.0), 3600.0 / (8.0 * 3600.0));
}
