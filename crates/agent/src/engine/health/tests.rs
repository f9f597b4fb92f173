//! Every component driven to each of its states and back through [`Engine::step`], with
//! the hold between; the node's verdict over its GPUs and its own components.

use chrono::{DateTime, Utc};

use super::{Action, State};
use crate::engine::{Engine, EngineConfig, Findings};
use crate::model::{
    ClockEvents, Clocks, Ecc, Fabric, FabricState, GpuSample, HostInfo, KernelLog, NvLinkErrors,
    Pcie, RemappedRows, RetiredPages, Snapshot, Utilization, XidEvent, XidSource,
};

const DRIVER: &str = "570.124.06";
/// Seconds between the test's snapshots.
const STEP: i64 = 60;
/// The default hold, in seconds.
const HOLD: i64 = 300;

fn at(t: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_767_225_600 + t, 0).unwrap()
}

/// A busy, healthy H100.
fn gpu(index: u32) -> GpuSample {
    GpuSample {
        index,
        uuid: format!("GPU-{index}"),
        name: "NVIDIA H100 80GB HBM3".into(),
        pci_bus_id: format!("00000000:{:02X}:00.0", 0x18 + index),
        up: true,
        utilization: Utilization {
            gpu: Some(0.9),
            ..Default::default()
        },
        temperature_celsius: Some(60.0),
        memory_temperature_celsius: Some(55.0),
        power_watts: Some(500.0),
        power_limit_watts: Some(700.0),
        clocks: Clocks {
            sm: Some(1980),
            ..Default::default()
        },
        clocks_max: Clocks {
            sm: Some(1980),
            ..Default::default()
        },
        clock_events: Some(ClockEvents(0)),
        ecc: Ecc {
            corrected_volatile: Some(0),
            uncorrected_volatile: Some(0),
            corrected_aggregate: Some(0),
            uncorrected_aggregate: Some(0),
        },
        remapped_rows: Some(RemappedRows::default()),
        pcie: Pcie {
            replay_counter: Some(0),
            link_generation: Some(5),
            link_width: Some(16),
            link_generation_max: Some(5),
            link_width_max: Some(16),
            ..Default::default()
        },
        nvlink: (0..18)
            .map(|link| NvLinkErrors {
                link,
                ..Default::default()
            })
            .collect(),
        persistence_mode: Some(true),
        firmware_version: Some(DRIVER.into()),
        ..Default::default()
    }
}

/// Two GPUs on a host that reads its PCI bus and kernel log.
fn snapshot(t: i64, gpus: Vec<GpuSample>) -> Snapshot {
    let pci_gpus = gpus.iter().map(|g| g.pci_bus_id.clone()).collect();
    Snapshot {
        at: at(t),
        host: HostInfo {
            hostname: "node-1".into(),
            driver_version: Some(DRIVER.into()),
            pci_gpus: Some(pci_gpus),
            kernel_log: Some(KernelLog {
                path: "/dev/kmsg".into(),
                readable: true,
                problem: None,
            }),
            ..Default::default()
        },
        gpus,
        ..Default::default()
    }
}

/// Steps an engine through time with GPU 1 shaped by each step's edit.
struct Run {
    engine: Engine,
    t: i64,
}

impl Run {
    fn new() -> Run {
        Run {
            engine: Engine::new(EngineConfig::default()),
            t: 0,
        }
    }

    /// One step `STEP` seconds on, GPU 1 edited by `edit`.
    fn step(&mut self, edit: impl Fn(&mut GpuSample)) -> Findings {
        self.t += STEP;
        let mut sick = gpu(1);
        edit(&mut sick);
        self.engine.step(&snapshot(self.t, vec![gpu(0), sick]))
    }

    /// Steps for `seconds` with the same edit; the last findings.
    fn for_(&mut self, seconds: i64, edit: impl Fn(&mut GpuSample)) -> Findings {
        let mut last = self.step(&edit);
        for _ in 1..(seconds / STEP).max(1) {
            last = self.step(&edit);
        }
        last
    }
}

fn component<'a>(f: &'a Findings, gpu: u32, name: &str) -> &'a super::Verdict {
    let g = f.gpus.iter().find(|g| g.index == gpu).expect("the GPU");
    (g.health.components.iter())
        .find(|c| c.component == name)
        .unwrap_or_else(|| panic!("no component {name}"))
}

fn node<'a>(f: &'a Findings, name: &str) -> &'a super::Verdict {
    (f.health.components.iter())
        .find(|c| c.component == name)
        .unwrap_or_else(|| panic!("no node component {name}"))
}

/// The state of GPU 1's `name` component, its action, and a reason that says `needle`.
#[track_caller]
fn expect(f: &Findings, name: &str, state: State, action: Action, needle: &str) {
    let v = component(f, 1, name);
    assert_eq!((v.state, v.action), (state, action), "{name}: {v:?}");
    assert!(
        v.reason.contains(needle),
        "{name}: {needle:?} not in {:?}",
        v.reason
    );
    // GPU 0 stays healthy whatever GPU 1 does.
    assert_eq!(component(f, 0, name).state, State::Healthy, "GPU 0 {name}");
}

/// Runs `edit` until `name` reaches `state`, then heals GPU 1 and checks that the state
/// holds for the hold time and then returns to healthy.
#[track_caller]
fn and_back(run: &mut Run, name: &str, state: State) {
    let f = run.step(|_| {});
    assert_eq!(
        component(&f, 1, name).state,
        state,
        "held right after the evidence went"
    );
    let f = run.for_(HOLD - 2 * STEP, |_| {});
    assert_eq!(
        component(&f, 1, name).state,
        state,
        "held within the hold time"
    );
    let f = run.for_(2 * STEP, |_| {});
    let v = component(&f, 1, name);
    assert_eq!(
        (v.state, v.action),
        (State::Healthy, Action::None),
        "{name} after the hold: {v:?}"
    );
}

#[test]
fn memory_pending_remap_failed_remap_retired_pages_and_uncorrectable_errors() {
    let mut run = Run::new();
    expect(
        &run.step(|_| {}),
        "memory",
        State::Healthy,
        Action::None,
        "no failed",
    );
    let pending = |g: &mut GpuSample| {
        g.remapped_rows = Some(RemappedRows {
            uncorrectable: 1,
            pending: true,
            ..Default::default()
        })
    };
    expect(
        &run.step(pending),
        "memory",
        State::Degraded,
        Action::ResetGpu,
        "remap is pending (1 rows",
    );
    and_back(&mut run, "memory", State::Degraded);

    let failed = |g: &mut GpuSample| {
        g.remapped_rows = Some(RemappedRows {
            uncorrectable: 3,
            failure: true,
            ..Default::default()
        })
    };
    expect(
        &run.step(failed),
        "memory",
        State::Unhealthy,
        Action::InspectHardware,
        "row remapping failed (3 rows",
    );
    and_back(&mut run, "memory", State::Unhealthy);

    let retired = |g: &mut GpuSample| {
        g.remapped_rows = None;
        g.retired_pages = Some(RetiredPages {
            sbe: 40,
            dbe: 20,
            pending: false,
        });
    };
    expect(
        &run.step(retired),
        "memory",
        State::Unhealthy,
        Action::InspectHardware,
        "60 pages retired",
    );
    and_back(&mut run, "memory", State::Unhealthy);

    let uncorrectable = |g: &mut GpuSample| g.ecc.uncorrected_volatile = Some(2);
    expect(
        &run.step(uncorrectable),
        "memory",
        State::Degraded,
        Action::ResetGpu,
        "2 uncorrectable ECC errors",
    );
    and_back(&mut run, "memory", State::Degraded);
}

#[test]
fn memory_pending_page_retirement_and_double_bit_retired_pages() {
    let mut run = Run::new();
    let pending = |g: &mut GpuSample| {
        g.retired_pages = Some(RetiredPages {
            sbe: 2,
            dbe: 1,
            pending: true,
        })
    };
    expect(
        &run.step(pending),
        "memory",
        State::Degraded,
        Action::ResetGpu,
        "a page retirement is pending (3 pages retired): it applies at the next GPU reset",
    );
    and_back(&mut run, "memory", State::Degraded);

    // One page under the double-bit limit (and far under the total one) is no evidence.
    let under = |g: &mut GpuSample| {
        g.retired_pages = Some(RetiredPages {
            sbe: 0,
            dbe: 14,
            pending: false,
        })
    };
    expect(
        &run.step(under),
        "memory",
        State::Healthy,
        Action::None,
        "no failed",
    );
    let at_limit = |g: &mut GpuSample| {
        g.retired_pages = Some(RetiredPages {
            sbe: 0,
            dbe: 15,
            pending: false,
        })
    };
    expect(
        &run.step(at_limit),
        "memory",
        State::Degraded,
        Action::InspectHardware,
        "15 pages retired for double-bit errors: past the limit of 15",
    );
    and_back(&mut run, "memory", State::Degraded);
}

#[test]
fn thermal_slowdown_now_and_for_most_of_the_hour() {
    let mut run = Run::new();
    let hot = |g: &mut GpuSample| {
        g.clock_events = Some(ClockEvents(ClockEvents::HW_THERMAL_SLOWDOWN));
        g.memory_temperature_celsius = Some(98.0);
    };
    expect(
        &run.step(hot),
        "thermal",
        State::Degraded,
        Action::InspectHardware,
        "hardware thermal slowdown now (GPU 60 C, HBM 98 C)",
    );
    let f = run.for_(20 * 60, hot);
    expect(
        &f,
        "thermal",
        State::Unhealthy,
        Action::InspectHardware,
        "thermal slowdown 20 of the last 20 minutes",
    );
    // The share of the hour falls to half within 20 minutes, then the hold runs.
    let f = run.for_(20 * 60, |_| {});
    assert_eq!(component(&f, 1, "thermal").state, State::Unhealthy);
    let f = run.for_(40 * 60, |_| {});
    assert_eq!(
        component(&f, 1, "thermal").state,
        State::Healthy,
        "{:?}",
        component(&f, 1, "thermal")
    );
    expect(
        &run.step(hot),
        "thermal",
        State::Degraded,
        Action::InspectHardware,
        "slowdown now",
    );
    and_back(&mut run, "thermal", State::Degraded);
}

#[test]
fn power_brake_hardware_slowdown_and_clocks_stuck_low() {
    let mut run = Run::new();
    let brake = |g: &mut GpuSample| {
        g.clock_events = Some(ClockEvents(
            ClockEvents::HW_POWER_BRAKE_SLOWDOWN | ClockEvents::HW_SLOWDOWN,
        ));
    };
    expect(
        &run.step(brake),
        "power",
        State::Degraded,
        Action::InspectHardware,
        "power brake now (drawing 500 W of 700 W)",
    );
    let f = run.for_(20 * 60, brake);
    expect(
        &f,
        "power",
        State::Unhealthy,
        Action::InspectHardware,
        "power brake 20 of the last 20 minutes",
    );
    let f = run.for_(65 * 60, |_| {});
    assert_eq!(component(&f, 1, "power").state, State::Healthy);

    let slow = |g: &mut GpuSample| g.clocks.sm = Some(700);
    // Low clocks for less than five minutes are a ramp, not a fault.
    let f = run.for_(4 * 60, slow);
    assert_eq!(component(&f, 1, "power").state, State::Healthy);
    let f = run.for_(2 * 60, slow);
    expect(
        &f,
        "power",
        State::Degraded,
        Action::ResetGpu,
        "clocks stuck low: SM 700 of 1980 MHz for 5 min at 90% busy",
    );
    and_back(&mut run, "power", State::Degraded);
    // Low clocks with a reason (a power cap) are not stuck.
    let capped = |g: &mut GpuSample| {
        g.clocks.sm = Some(700);
        g.clock_events = Some(ClockEvents(ClockEvents::SW_POWER_CAP));
    };
    let f = run.for_(10 * 60, capped);
    assert_eq!(component(&f, 1, "power").state, State::Healthy);
}

#[test]
fn power_hardware_slowdown_without_the_brake() {
    let mut run = Run::new();
    let slowdown = |g: &mut GpuSample| g.clock_events = Some(ClockEvents(ClockEvents::HW_SLOWDOWN));
    expect(
        &run.step(slowdown),
        "power",
        State::Degraded,
        Action::InspectHardware,
        "hardware slowdown without a thermal cause now (drawing 500 W of 700 W)",
    );
    and_back(&mut run, "power", State::Degraded);
    // A hardware slowdown with a thermal one is the cooling's: thermal says so, power not.
    let hot = |g: &mut GpuSample| {
        g.clock_events = Some(ClockEvents(
            ClockEvents::HW_SLOWDOWN | ClockEvents::HW_THERMAL_SLOWDOWN,
        ))
    };
    let f = run.step(hot);
    assert_eq!(
        component(&f, 1, "power").state,
        State::Healthy,
        "{:?}",
        component(&f, 1, "power")
    );
    assert_eq!(component(&f, 1, "thermal").state, State::Degraded);
}

#[test]
fn pcie_link_trained_down_and_replays() {
    let mut run = Run::new();
    run.step(|_| {});
    let narrow = |g: &mut GpuSample| g.pcie.link_width = Some(8);
    expect(
        &run.step(narrow),
        "pcie",
        State::Degraded,
        Action::InspectHardware,
        "PCIe link at Gen5 x8, below the Gen5 x16 it reached",
    );
    and_back(&mut run, "pcie", State::Degraded);
    let slower = |g: &mut GpuSample| g.pcie.link_generation = Some(3);
    expect(
        &run.step(slower),
        "pcie",
        State::Degraded,
        Action::InspectHardware,
        "Gen3 x16, below the Gen5 x16",
    );
    and_back(&mut run, "pcie", State::Degraded);
    // An idle GPU's link steps down to save power: that is no evidence either way.
    let idle = |g: &mut GpuSample| {
        g.utilization.gpu = Some(0.0);
        g.pcie.link_generation = Some(1);
    };
    let f = run.for_(10 * 60, idle);
    assert_eq!(component(&f, 1, "pcie").state, State::Healthy);

    // Replays, read over the last hour: 20 a minute for half of it is over the limit of 8.
    let mut replays = 0u64;
    let mut f = run.step(|g| g.pcie.replay_counter = Some(replays));
    for _ in 0..30 {
        replays += 20;
        f = run.step(|g| g.pcie.replay_counter = Some(replays));
    }
    expect(
        &f,
        "pcie",
        State::Degraded,
        Action::InspectHardware,
        "PCIe replays a minute over the last hour at Gen5 x16, over the limit of 8",
    );
    // They stop; once out of the hour, and after the hold, the link is healthy again.
    let f = run.for_(30 * 60, |g| g.pcie.replay_counter = Some(replays));
    assert_eq!(
        component(&f, 1, "pcie").state,
        State::Degraded,
        "still in the hour"
    );
    let f = run.for_(45 * 60, |g| g.pcie.replay_counter = Some(replays));
    assert_eq!(component(&f, 1, "pcie").state, State::Healthy);
    // A storm: ten thousand in a minute is a failing link for the hour it is in.
    replays += 10_000;
    let f = run.step(|g| g.pcie.replay_counter = Some(replays));
    expect(
        &f,
        "pcie",
        State::Unhealthy,
        Action::InspectHardware,
        "PCIe replays a minute over the last hour",
    );
    let f = run.for_(2 * 3600, |g| g.pcie.replay_counter = Some(replays));
    assert_eq!(component(&f, 1, "pcie").state, State::Healthy);
}

#[test]
fn nvlink_down_errors_and_fabric() {
    let mut run = Run::new();
    run.step(|_| {});
    let down = |g: &mut GpuSample| {
        g.nvlink.retain(|l| l.link != 3);
        g.nvlink_inactive = vec![3];
    };
    expect(
        &run.step(down),
        "nvlink",
        State::Unhealthy,
        Action::ResetGpu,
        "NVLink 3 down (active before); 17 links active",
    );
    and_back(&mut run, "nvlink", State::Unhealthy);

    let mut recoveries = 0;
    run.step(|_| {});
    recoveries += 2;
    let f = run.step(|g| g.nvlink[5].recovery = recoveries);
    expect(
        &f,
        "nvlink",
        State::Degraded,
        Action::ResetGpu,
        "2 NVLink recovery errors",
    );
    let f = run.for_(HOLD + 2 * STEP, |g| g.nvlink[5].recovery = recoveries);
    assert_eq!(component(&f, 1, "nvlink").state, State::Healthy);

    let not_started = |g: &mut GpuSample| {
        g.fabric = Some(Fabric {
            state: FabricState::NotStarted,
            status: 0,
        })
    };
    expect(
        &run.step(not_started),
        "nvlink",
        State::Unhealthy,
        Action::DrainAndReboot,
        "nvidia-fabricmanager",
    );
    let failed = |g: &mut GpuSample| {
        g.fabric = Some(Fabric {
            state: FabricState::Completed,
            status: 999,
        })
    };
    expect(
        &run.step(failed),
        "nvlink",
        State::Unhealthy,
        Action::DrainAndReboot,
        "NVML error 999",
    );
    let in_progress = |g: &mut GpuSample| {
        g.fabric = Some(Fabric {
            state: FabricState::InProgress,
            status: 0,
        })
    };
    let f = run.for_(HOLD + STEP, in_progress);
    expect(&f, "nvlink", State::Degraded, Action::None, "in progress");
    let f = run.for_(HOLD + STEP, |g| {
        g.fabric = Some(Fabric {
            state: FabricState::Completed,
            status: 0,
        })
    });
    assert_eq!(component(&f, 1, "nvlink").state, State::Healthy);
}

#[test]
fn nvlink_crc_errors_at_a_hundred_a_second_and_replays() {
    let mut run = Run::new();
    run.step(|_| {});
    // 5,999 CRC errors in a minute, flit and data over two links: just under 100 a second.
    let (flit, data) = (3000u64, 2999u64);
    let f = run.step(|g| {
        g.nvlink[2].crc_flit = flit;
        g.nvlink[7].crc_data = data;
    });
    expect(&f, "nvlink", State::Healthy, Action::None, "every NVLink");
    // 6,000 more in the next minute: 100 a second.
    let f = run.step(|g| {
        g.nvlink[2].crc_flit = flit + 3000;
        g.nvlink[7].crc_data = data + 3000;
    });
    expect(
        &f,
        "nvlink",
        State::Degraded,
        Action::None,
        "100 NVLink CRC errors a second, most on link 2, past 100",
    );
    and_back(&mut run, "nvlink", State::Degraded);

    run.step(|_| {});
    let f = run.step(|g| g.nvlink[4].replay = 3);
    expect(
        &f,
        "nvlink",
        State::Degraded,
        Action::None,
        "3 NVLink replay errors since the last reading, most on link 4",
    );
    and_back(&mut run, "nvlink", State::Degraded);
}

/// A step with XID `xid` on GPU 1.
fn with_xid(run: &mut Run, xid: u32, edit: impl Fn(&mut GpuSample)) -> Findings {
    run.t += STEP;
    let mut sick = gpu(1);
    edit(&mut sick);
    let mut snap = snapshot(run.t, vec![gpu(0), sick]);
    snap.events.push(XidEvent {
        at: at(run.t),
        gpu: None,
        uuid: None,
        pci_bus_id: Some("0000:19:00".into()),
        xid,
        source: XidSource::Kmsg,
        message: None,
    });
    run.engine.step(&snap)
}

#[test]
fn xids_by_class_for_their_window_or_until_a_reset() {
    let mut run = Run::new();
    let f = with_xid(&mut run, 13, |_| {});
    expect(
        &f,
        "xid",
        State::Healthy,
        Action::RestartJob,
        "XID 13 0 min ago: Graphics engine exception",
    );
    let f = run.for_(3600, |_| {});
    expect(&f, "xid", State::Healthy, Action::None, "no XID");

    let f = with_xid(&mut run, 63, |_| {});
    expect(&f, "xid", State::Degraded, Action::ResetGpu, "XID 63");
    // Counted for a day, then the hold.
    let f = run.for_(86_400 - 2 * STEP, |_| {});
    assert_eq!(component(&f, 1, "xid").state, State::Degraded);
    let f = run.for_(HOLD + 2 * STEP, |_| {});
    assert_eq!(component(&f, 1, "xid").state, State::Healthy);

    // Off the bus: the GPU stops answering; once it answers again (a reboot) the XID is
    // dealt with and only the hold remains.
    let lost = |g: &mut GpuSample| {
        *g = GpuSample {
            up: false,
            ..gpu(1)
        }
    };
    let f = with_xid(&mut run, 79, lost);
    expect(
        &f,
        "xid",
        State::Unhealthy,
        Action::DrainAndReboot,
        "XID 79",
    );
    expect(
        &f,
        "driver",
        State::Unhealthy,
        Action::DrainAndReboot,
        "does not answer NVML (GPU is lost) after XID 79 (fell off the bus); still on the PCI bus",
    );
    let f = run.for_(30 * 60, lost);
    assert_eq!(component(&f, 1, "xid").state, State::Unhealthy);
    let f = run.for_(HOLD - STEP, |_| {});
    assert_eq!(component(&f, 1, "driver").state, State::Unhealthy);
    let f = run.for_(2 * STEP, |_| {});
    assert_eq!(component(&f, 1, "xid").state, State::Healthy);
    assert_eq!(component(&f, 1, "driver").state, State::Healthy);
}

#[test]
fn driver_lost_calls_failing_slow_and_persistence_off() {
    let mut run = Run::new();
    run.step(|_| {});
    let lost = |g: &mut GpuSample| {
        *g = GpuSample {
            up: false,
            ..gpu(1)
        }
    };
    expect(
        &run.step(lost),
        "driver",
        State::Unhealthy,
        Action::DrainAndReboot,
        "does not answer NVML",
    );
    and_back(&mut run, "driver", State::Unhealthy);

    let off = |g: &mut GpuSample| g.persistence_mode = Some(false);
    expect(
        &run.step(off),
        "driver",
        State::Degraded,
        Action::None,
        "persistence mode is off",
    );
    and_back(&mut run, "driver", State::Degraded);

    let slow = |g: &mut GpuSample| g.collect_seconds = 2.5;
    expect(
        &run.step(slow),
        "driver",
        State::Degraded,
        Action::ResetGpu,
        "NVML took 2.5 s",
    );
    and_back(&mut run, "driver", State::Degraded);

    let failing = |g: &mut GpuSample| g.failed_calls = 2;
    run.step(failing);
    expect(
        &run.step(failing),
        "driver",
        State::Degraded,
        Action::ResetGpu,
        "4 NVML calls failed in the last hour",
    );
    // The failures leave the hour, then the hold runs.
    let f = run.for_(3600 + HOLD, |_| {});
    assert_eq!(component(&f, 1, "driver").state, State::Healthy);
}

#[test]
fn a_gpu_gone_from_the_snapshot_is_lost_after_two_minutes_and_back_when_listed_again() {
    let mut run = Run::new();
    run.step(|_| {});
    run.t += STEP;
    let f = run.engine.step(&snapshot(run.t, vec![gpu(0)]));
    // Not judged yet: a recording may miss a row.
    assert_eq!(component(&f, 1, "driver").state, State::Healthy);
    run.t += 3 * STEP;
    let f = run.engine.step(&snapshot(run.t, vec![gpu(0)]));
    let v = component(&f, 1, "driver");
    assert_eq!(
        (v.state, v.action),
        (State::Unhealthy, Action::DrainAndReboot)
    );
    assert!(
        v.reason.contains("gone from NVML's device list"),
        "{}",
        v.reason
    );
    // Listed again (a reboot, a driver reload): held for the hold time, then healthy.
    and_back(&mut run, "driver", State::Unhealthy);
}

#[test]
fn risk_over_the_threshold_and_back() {
    let config = EngineConfig {
        risk_threshold: 0.7,
        ..EngineConfig::default()
    };
    let mut run = Run {
        engine: Engine::new(config),
        t: 0,
    };
    expect(
        &run.step(|_| {}),
        "risk",
        State::Healthy,
        Action::None,
        "under the threshold",
    );
    // A failed remap is a known-bad state: the score goes to 0.95 at once.
    let failed = |g: &mut GpuSample| {
        g.remapped_rows = Some(RemappedRows {
            failure: true,
            ..Default::default()
        })
    };
    expect(
        &run.step(failed),
        "risk",
        State::Degraded,
        Action::InspectHardware,
        "rule row_remap_failure",
    );
    // The risk holds its evidence on its own time scale; the verdict follows the score.
    let mut f = run.step(|_| {});
    let mut waited = 0;
    while component(&f, 1, "risk").state != State::Healthy {
        assert!(waited < 30 * 86_400, "the risk never came down");
        run.t += 3600 - STEP;
        f = run.step(|_| {});
        waited += 3600;
    }
    assert!(f.gpus[1].risk.score < 0.7);
}

#[test]
fn node_components_driver_versions_kernel_log_and_pci_bus() {
    let mut engine = Engine::new(EngineConfig::default());
    let mut t = 0;
    let mut step = |edit: &dyn Fn(&mut Snapshot)| {
        t += STEP;
        let mut snap = snapshot(t, vec![gpu(0), gpu(1)]);
        edit(&mut snap);
        engine.step(&snap)
    };
    let f = step(&|_| {});
    for name in super::NODE_COMPONENTS {
        assert_eq!(node(&f, name).state, State::Healthy, "{name}");
    }
    assert_eq!(
        (f.health.state, f.health.action),
        (State::Healthy, Action::None)
    );

    let mismatch = |s: &mut Snapshot| s.gpus[1].firmware_version = Some("550.54.15".into());
    let f = step(&mismatch);
    let v = node(&f, "driver_version");
    assert_eq!(
        (v.state, v.action),
        (State::Unhealthy, Action::DrainAndReboot)
    );
    assert!(
        v.reason.contains("550.54.15 (GPU 1), 570.124.06 (GPU 0)"),
        "{}",
        v.reason
    );
    assert_eq!(
        (f.health.state, f.health.action),
        (State::Unhealthy, Action::DrainAndReboot)
    );
    let behind = |s: &mut Snapshot| s.host.driver_version = Some("575.51.03".into());
    let v = node(&step(&behind), "driver_version").clone();
    assert!(
        v.reason
            .contains("firmware of driver 570.124.06, NVML is driver 575.51.03"),
        "{}",
        v.reason
    );

    let unreadable = |s: &mut Snapshot| {
        s.host.kernel_log = Some(KernelLog {
            path: "/dev/kmsg".into(),
            readable: false,
            problem: Some("permission denied".into()),
        })
    };
    let f = step(&unreadable);
    let v = node(&f, "kernel_log");
    assert_eq!((v.state, v.action), (State::Degraded, Action::None));
    assert!(
        v.reason
            .contains("cannot read the kernel log /dev/kmsg: permission denied")
    );

    let extra = |s: &mut Snapshot| {
        if let Some(list) = s.host.pci_gpus.as_mut() {
            list.push("0000:3b:00.0".into());
        }
    };
    let f = step(&extra);
    let v = node(&f, "pci");
    assert_eq!(
        (v.state, v.action),
        (State::Unhealthy, Action::DrainAndReboot)
    );
    assert!(
        v.reason
            .contains("1 NVIDIA GPU(s) on the PCI bus that NVML does not list: 0000:3b:00.0"),
        "{}",
        v.reason
    );

    // All three back to healthy after the hold.
    for _ in 0..(HOLD / STEP + 1) {
        step(&|_| {});
    }
    let f = step(&|_| {});
    for name in super::NODE_COMPONENTS {
        assert_eq!(
            node(&f, name).state,
            State::Healthy,
            "{name}: {:?}",
            node(&f, name)
        );
    }
}

#[test]
fn the_node_takes_its_worst_gpu_and_the_most_disruptive_action_of_that_state() {
    let mut run = Run::new();
    let f = run.step(|g| {
        g.remapped_rows = Some(RemappedRows {
            failure: true,
            ..Default::default()
        });
        g.persistence_mode = Some(false);
    });
    let g = &f.gpus[1].health;
    assert_eq!(
        (g.state, g.action),
        (State::Unhealthy, Action::InspectHardware)
    );
    assert_eq!(
        (f.health.state, f.health.action),
        (State::Unhealthy, Action::InspectHardware)
    );
    assert_eq!(f.gpus[0].health.state, State::Healthy);
    // A lost GPU asks for the node to be rebooted, which goes first.
    let f = run.step(|g| {
        *g = GpuSample {
            up: false,
            ..gpu(1)
        }
    });
    assert_eq!(
        (f.health.state, f.health.action),
        (State::Unhealthy, Action::DrainAndReboot)
    );
    // An application's XID leaves everything healthy but says what to do.
    let mut run = Run::new();
    let f = with_xid(&mut run, 31, |_| {});
    assert_eq!(
        (f.health.state, f.health.action),
        (State::Healthy, Action::RestartJob)
    );
}

#[test]
fn health_survives_a_restart_and_old_state_loads() {
    let mut run = Run::new();
    run.step(|g| {
        g.remapped_rows = Some(RemappedRows {
            failure: true,
            ..Default::default()
        })
    });
    let json = serde_json::to_string(&run.engine.state).unwrap();
    let state: crate::engine::EngineState = serde_json::from_str(&json).unwrap();
    let mut resumed = Run {
        engine: Engine::with_state(EngineConfig::default(), state),
        t: run.t,
    };
    let f = resumed.step(|_| {});
    let v = component(&f, 1, "memory");
    assert_eq!(v.state, State::Unhealthy, "held across the restart");
    assert_eq!(
        v.since,
        at(STEP),
        "since the first step, before the restart"
    );

    // State written before the verdicts existed: no `health` anywhere.
    let mut value: serde_json::Value = serde_json::from_str(&json).unwrap();
    value.as_object_mut().unwrap().remove("health");
    for gpu in value["gpus"].as_object_mut().unwrap().values_mut() {
        gpu.as_object_mut().unwrap().remove("health");
    }
    let old: crate::engine::EngineState = serde_json::from_value(value).unwrap();
    let mut engine = Engine::with_state(EngineConfig::default(), old);
    let f = engine.step(&snapshot(run.t + STEP, vec![gpu(0), gpu(1)]));
    assert_eq!(component(&f, 1, "memory").state, State::Healthy);
}
