//! The health verdicts from the real NVML path: the fake NVML library (`tests/fake-nvml`)
//! answers from the simulator, with `[[set]]` windows of simulated time changing what one
//! GPU reports (a pending remap, a link trained down, persistence mode off, clocks stuck
//! low, a link down, a lost GPU, …), read by `NvmlSource` inside `HostSource` (which adds
//! the PCI bus and the kernel log), judged by the engine. Every component goes to each of
//! its states and back.
//!
//! The fake's state is process-wide, so each test runs in a child process of this test
//! binary with its own scenario (as tests/it/nvml_source.rs does). Simulated time moves by
//! `fake_nvml_advance`, one minute a collection, and each snapshot is stamped with it, so
//! hours of holds and windows pass in moments.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use chrono::{DateTime, TimeDelta, Utc};
use gpu_sentinel::config::CollectConfig;
use gpu_sentinel::engine::health::{Action, State, Verdict};
use gpu_sentinel::engine::{Engine, EngineConfig, Findings};
use gpu_sentinel::source::Source;
use gpu_sentinel::source::host::HostSource;
use gpu_sentinel::source::nvml::NvmlSource;

const CHILD_ENV: &str = "HEALTH_NVML_TEST_CHILD";
/// Simulated seconds between collections.
const STEP: f64 = 60.0;

/// Runs `body` in a child process whose fake NVML plays `scenario`.
fn isolated(name: &str, scenario: &str, body: impl FnOnce()) {
    if std::env::var(CHILD_ENV).as_deref() == Ok(name) {
        body();
        return;
    }
    let lib = common::fake_nvml_lib();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("health_nvml");
    std::fs::create_dir_all(&dir).expect("the scratch directory");
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, scenario).expect("the scenario file");
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = Command::new(exe)
        .args([
            &common::test_path(module_path!(), name),
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, name)
        .env("FAKE_NVML_SCENARIO", &path)
        .env("FAKE_NVML_LIB", &lib)
        .env_remove("FAKE_NVML_PROCESSES")
        .output()
        .expect("the test binary runs as a child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child test {name} failed ({})\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
}

/// The fake's test-only controls.
struct Fake {
    lib: libloading::Library,
}

impl Fake {
    fn load() -> Fake {
        // SAFETY: the fake's initialisers are Rust statics only; loading it runs no code.
        let lib = unsafe { libloading::Library::new(common::fake_nvml_lib()) }
            .expect("the fake library loads");
        Fake { lib }
    }

    fn advance(&self, seconds: f64) {
        // SAFETY: the symbol's signature is the one the fake exports.
        let code = unsafe {
            let f: libloading::Symbol<unsafe extern "C" fn(f64) -> u32> = self
                .lib
                .get(b"fake_nvml_advance")
                .expect("fake_nvml_advance");
            f(seconds)
        };
        assert_eq!(code, 0, "fake_nvml_advance answered {code}");
    }

    /// Waits until the XID thread has registered `gpus` devices for events.
    fn wait_for_event_registration(&self, gpus: u64) {
        let name = std::ffi::CString::new("nvmlDeviceRegisterEvents").expect("no NUL");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            // SAFETY: the symbol's signature is the one the fake exports.
            let calls = unsafe {
                let f: libloading::Symbol<
                    unsafe extern "C" fn(*const std::os::raw::c_char) -> u64,
                > = self
                    .lib
                    .get(b"fake_nvml_call_count")
                    .expect("fake_nvml_call_count");
                f(name.as_ptr())
            };
            if calls >= gpus {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the XID thread never registered"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    fn seconds(&self) -> f64 {
        // SAFETY: as above.
        unsafe {
            let f: libloading::Symbol<unsafe extern "C" fn() -> f64> = self
                .lib
                .get(b"fake_nvml_sim_seconds")
                .expect("fake_nvml_sim_seconds");
            f()
        }
    }
}

/// A fake-NVML host judged collection by collection.
struct Host {
    fake: Fake,
    source: HostSource,
    engine: Engine,
    start: DateTime<Utc>,
}

/// `[collect]` for the host: the kernel log at `kmsg`, the PCI bus at `pci`.
fn collect_config(kmsg: &Path, pci: &Path) -> CollectConfig {
    CollectConfig {
        nvml_lib: Some(common::fake_nvml_lib()),
        kmsg: kmsg.display().to_string(),
        processes: false,
        kubelet_socket: "off".into(),
        scontrol: "off".into(),
        pci_devices: pci.display().to_string(),
        ..CollectConfig::default()
    }
}

/// A scratch folder for a test's files.
fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("health_nvml")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch folder");
    dir
}

/// A sysfs-like PCI folder listing `buses` as NVIDIA 3D controllers.
fn pci_bus(dir: &Path, buses: &[&str]) -> PathBuf {
    let root = dir.join("pci");
    let _ = std::fs::remove_dir_all(&root);
    for bus in buses {
        let device = root.join(bus);
        std::fs::create_dir_all(&device).expect("device folder");
        std::fs::write(device.join("vendor"), "0x10de\n").expect("vendor");
        std::fs::write(device.join("class"), "0x030200\n").expect("class");
    }
    std::fs::create_dir_all(&root).expect("pci folder");
    root
}

impl Host {
    fn new(name: &str) -> Host {
        let dir = scratch(name);
        let kmsg = dir.join("kern.log");
        std::fs::write(&kmsg, "").expect("kernel log");
        let pci = pci_bus(&dir, &[]);
        Host::with(
            &collect_config(&kmsg, &pci),
            Engine::new(EngineConfig::default()),
        )
    }

    fn with(config: &CollectConfig, engine: Engine) -> Host {
        let fake = Fake::load();
        let nvml = NvmlSource::open(config.nvml_lib.as_deref()).expect("NVML opens on the fake");
        let source = HostSource::new(Box::new(nvml.with_processes(false)), config);
        let start: DateTime<Utc> = "2026-03-02T00:00:00Z".parse().expect("a time");
        Host {
            fake,
            source,
            engine,
            start,
        }
    }

    /// One collection a simulated minute on, judged.
    fn tick(&mut self) -> Findings {
        self.fake.advance(STEP);
        let mut collection = self.source.collect();
        let seconds = self.fake.seconds();
        collection.snapshot.at = self.start + TimeDelta::milliseconds((seconds * 1000.0) as i64);
        collection.snapshot.sanitize();
        self.engine.step(&collection.snapshot)
    }

    /// Collections until simulated time reaches `seconds`; the last findings.
    fn until(&mut self, seconds: f64) -> Findings {
        let mut last = self.tick();
        while self.fake.seconds() + STEP <= seconds {
            last = self.tick();
        }
        last
    }
}

fn component<'a>(f: &'a Findings, gpu: u32, name: &str) -> &'a Verdict {
    let g = f
        .gpus
        .iter()
        .find(|g| g.index == gpu)
        .expect("the GPU is listed");
    (g.health.components.iter())
        .find(|c| c.component == name)
        .unwrap_or_else(|| panic!("no component {name}"))
}

fn node<'a>(f: &'a Findings, name: &str) -> &'a Verdict {
    (f.health.components.iter())
        .find(|c| c.component == name)
        .unwrap_or_else(|| panic!("no node component {name}"))
}

#[track_caller]
fn is(v: &Verdict, state: State, action: Action, needle: &str) {
    assert_eq!((v.state, v.action), (state, action), "{v:?}");
    assert!(
        v.reason.contains(needle),
        "{needle:?} not in {:?}",
        v.reason
    );
}

#[track_caller]
fn healthy(v: &Verdict) {
    assert_eq!((v.state, v.action), (State::Healthy, Action::None), "{v:?}");
}

/// Four healthy GPUs and the `[[set]]` windows given.
fn scenario(sets: &str) -> String {
    format!("[simulation]\ngpus = 4\nseed = 42\nfaults = []\n[clock]\nmode = \"manual\"\n{sets}")
}

#[test]
fn memory_a_pending_remap_then_a_failed_one_and_back() {
    let sets = r#"
        [[set]]
        gpu = 1
        from_seconds = 600.0
        until_seconds = 1200.0
        sample = { remapped_rows = { correctable = 2, uncorrectable = 1, pending = true, failure = false } }
        [[set]]
        gpu = 1
        from_seconds = 3000.0
        until_seconds = 3600.0
        sample = { remapped_rows = { correctable = 2, uncorrectable = 3, pending = false, failure = true } }
    "#;
    isolated(
        "memory_a_pending_remap_then_a_failed_one_and_back",
        &scenario(sets),
        || {
            let mut host = Host::new("memory");
            healthy(component(&host.until(540.0), 1, "memory"));
            let f = host.until(660.0);
            is(
                component(&f, 1, "memory"),
                State::Degraded,
                Action::ResetGpu,
                "a row remap is pending (1 rows",
            );
            healthy(component(&f, 0, "memory"));
            // The remap applied (a reset) at 1200 s; held for the hold time after.
            assert_eq!(
                component(&host.until(1380.0), 1, "memory").state,
                State::Degraded
            );
            healthy(component(&host.until(1600.0), 1, "memory"));
            let f = host.until(3060.0);
            is(
                component(&f, 1, "memory"),
                State::Unhealthy,
                Action::InspectHardware,
                "row remapping failed (3 rows",
            );
            assert_eq!(
                (f.health.state, f.health.action),
                (State::Unhealthy, Action::InspectHardware)
            );
            healthy(component(&host.until(4000.0), 1, "memory"));
        },
    );
}

#[test]
fn pcie_a_link_trained_down_and_a_replay_storm_and_back() {
    let sets = r#"
        [[set]]
        gpu = 2
        from_seconds = 600.0
        until_seconds = 1200.0
        sample = { utilization = { gpu = 0.9 }, pcie = { link_width = 8 } }
        [[set]]
        gpu = 2
        from_seconds = 3000.0
        until_seconds = 3060.0
        sample = { utilization = { gpu = 0.9 }, pcie = { replay_counter = 1000000 } }
    "#;
    isolated(
        "pcie_a_link_trained_down_and_a_replay_storm_and_back",
        &scenario(sets),
        || {
            let mut host = Host::new("pcie");
            healthy(component(&host.until(540.0), 2, "pcie"));
            is(
                component(&host.until(660.0), 2, "pcie"),
                State::Degraded,
                Action::InspectHardware,
                "x8, below the Gen5 x16 it reached",
            );
            healthy(component(&host.until(1600.0), 2, "pcie"));
            is(
                component(&host.until(3000.0), 2, "pcie"),
                State::Unhealthy,
                Action::InspectHardware,
                "PCIe replays a minute over the last hour",
            );
            // Read over the hour: the storm counts until it leaves it, then the hold.
            assert_eq!(
                component(&host.until(6000.0), 2, "pcie").state,
                State::Unhealthy
            );
            healthy(component(&host.until(7800.0), 2, "pcie"));
        },
    );
}

#[test]
fn driver_persistence_off_lost_calls_failing_and_back() {
    let sets = r#"
        [[set]]
        gpu = 1
        from_seconds = 600.0
        until_seconds = 1200.0
        sample = { persistence_mode = false }
        [[set]]
        gpu = 3
        from_seconds = 3000.0
        until_seconds = 3600.0
        sample = { up = false }
        [[fault]]
        gpu = 2
        function = "nvmlDeviceGetPowerUsage"
        error = "UNKNOWN"
        until_seconds = 3.0
    "#;
    isolated(
        "driver_persistence_off_lost_calls_failing_and_back",
        &scenario(sets),
        || {
            let mut host = Host::new("driver");
            // Power readings of GPU 2 fail for the first wall seconds: three collections.
            for _ in 0..3 {
                host.tick();
            }
            let f = host.tick();
            is(
                component(&f, 2, "driver"),
                State::Degraded,
                Action::ResetGpu,
                "NVML calls failed in the last hour",
            );
            std::thread::sleep(std::time::Duration::from_secs(3));
            is(
                component(&host.until(660.0), 1, "driver"),
                State::Degraded,
                Action::None,
                "persistence mode is off",
            );
            let f = host.until(1600.0);
            healthy(component(&f, 1, "driver"));
            let f = host.until(3060.0);
            is(
                component(&f, 3, "driver"),
                State::Unhealthy,
                Action::DrainAndReboot,
                "does not answer NVML",
            );
            assert_eq!(
                (f.health.state, f.health.action),
                (State::Unhealthy, Action::DrainAndReboot)
            );
            // GPU 2's failures have left the hour by now.
            let f = host.until(4400.0);
            healthy(component(&f, 3, "driver"));
            healthy(component(&f, 2, "driver"));
        },
    );
}

#[test]
fn power_clocks_stuck_low_brake_and_back() {
    let sets = r#"
        [[set]]
        gpu = 1
        from_seconds = 600.0
        until_seconds = 1200.0
        sample = { utilization = { gpu = 0.95 }, clocks = { sm = 600 }, clock_events = 0 }
        [[set]]
        gpu = 1
        from_seconds = 3000.0
        until_seconds = 6000.0
        sample = { clock_events = 136 }
    "#;
    isolated(
        "power_clocks_stuck_low_brake_and_back",
        &scenario(sets),
        || {
            let mut host = Host::new("power");
            healthy(component(&host.until(840.0), 1, "power"));
            is(
                component(&host.until(960.0), 1, "power"),
                State::Degraded,
                Action::ResetGpu,
                "clocks stuck low: SM 600 of",
            );
            healthy(component(&host.until(1600.0), 1, "power"));
            is(
                component(&host.until(3060.0), 1, "power"),
                State::Degraded,
                Action::InspectHardware,
                "hardware power brake now",
            );
            is(
                component(&host.until(5000.0), 1, "power"),
                State::Unhealthy,
                Action::InspectHardware,
                "hardware power brake",
            );
            healthy(component(&host.until(10_000.0), 1, "power"));
        },
    );
}

#[test]
fn thermal_slowdown_and_back() {
    let sets = r#"
        [[set]]
        gpu = 1
        from_seconds = 600.0
        until_seconds = 4200.0
        sample = { clock_events = 64, memory_temperature_celsius = 99.0 }
    "#;
    isolated("thermal_slowdown_and_back", &scenario(sets), || {
        let mut host = Host::new("thermal");
        healthy(component(&host.until(540.0), 1, "thermal"));
        is(
            component(&host.until(660.0), 1, "thermal"),
            State::Degraded,
            Action::InspectHardware,
            "hardware thermal slowdown now",
        );
        is(
            component(&host.until(3000.0), 1, "thermal"),
            State::Unhealthy,
            Action::InspectHardware,
            "thermal slowdown",
        );
        healthy(component(&host.until(9000.0), 1, "thermal"));
    });
}

#[test]
fn nvlink_a_link_down_the_fabric_and_back() {
    let sets = r#"
        [[set]]
        gpu = 1
        from_seconds = 600.0
        until_seconds = 1200.0
        sample = { nvlink_inactive = [3] }
        [[set]]
        gpu = 1
        sample = { fabric = { state = "completed" } }
        [[set]]
        gpu = 1
        from_seconds = 3000.0
        until_seconds = 3600.0
        sample = { fabric = { state = "in_progress" } }
        [[set]]
        gpu = 1
        from_seconds = 6000.0
        until_seconds = 6600.0
        sample = { fabric = { state = "completed", status = 999 } }
    "#;
    isolated(
        "nvlink_a_link_down_the_fabric_and_back",
        &scenario(sets),
        || {
            let mut host = Host::new("nvlink");
            healthy(component(&host.until(540.0), 1, "nvlink"));
            is(
                component(&host.until(660.0), 1, "nvlink"),
                State::Unhealthy,
                Action::ResetGpu,
                "NVLink 3 down (active before)",
            );
            healthy(component(&host.until(1600.0), 1, "nvlink"));
            is(
                component(&host.until(3060.0), 1, "nvlink"),
                State::Degraded,
                Action::None,
                "in progress",
            );
            healthy(component(&host.until(4000.0), 1, "nvlink"));
            is(
                component(&host.until(6060.0), 1, "nvlink"),
                State::Unhealthy,
                Action::DrainAndReboot,
                "NVML error 999",
            );
            healthy(component(&host.until(7000.0), 1, "nvlink"));
        },
    );
}

#[test]
fn xid_79_takes_the_gpu_out_until_it_answers_again() {
    // GPU 1 falls off the bus an hour in (XID 79 through NVML's events); two hours in it
    // answers again, as after a reboot.
    let scenario = r#"
        [simulation]
        gpus = 2
        seed = 42
        faults = ["fell_off_bus"]
        fault_hours = 1.0
        [clock]
        mode = "manual"
        [[set]]
        gpu = 1
        from_seconds = 7200.0
        sample = { up = true, utilization = { gpu = 0.5 } }
    "#;
    isolated(
        "xid_79_takes_the_gpu_out_until_it_answers_again",
        scenario,
        || {
            let mut host = Host::new("xid");
            host.tick();
            host.fake.wait_for_event_registration(2);
            healthy(component(&host.until(3000.0), 1, "xid"));
            let mut f = host.until(3660.0);
            // The XID thread delivers it, and the host holds an NVML XID 2 s for its kernel-log
            // twin before passing it on.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while component(&f, 1, "xid").state != State::Unhealthy {
                assert!(std::time::Instant::now() < deadline, "XID 79 never arrived");
                std::thread::sleep(std::time::Duration::from_millis(250));
                f = host.tick();
            }
            is(
                component(&f, 1, "xid"),
                State::Unhealthy,
                Action::DrainAndReboot,
                "XID 79",
            );
            is(
                component(&f, 1, "driver"),
                State::Unhealthy,
                Action::DrainAndReboot,
                "after XID 79 (fell off the bus)",
            );
            assert_eq!(
                component(&host.until(7000.0), 1, "xid").state,
                State::Unhealthy
            );
            let f = host.until(7800.0);
            healthy(component(&f, 1, "xid"));
            healthy(component(&f, 1, "driver"));
        },
    );
}

#[test]
fn risk_over_the_threshold_and_back() {
    let sets = r#"
        [[set]]
        gpu = 1
        from_seconds = 600.0
        until_seconds = 1200.0
        sample = { remapped_rows = { correctable = 0, uncorrectable = 1, pending = false, failure = true } }
    "#;
    isolated("risk_over_the_threshold_and_back", &scenario(sets), || {
        let mut host = Host::new("risk");
        healthy(component(&host.until(540.0), 1, "risk"));
        is(
            component(&host.until(660.0), 1, "risk"),
            State::Degraded,
            Action::InspectHardware,
            "rule row_remap_failure",
        );
        // The risk holds its evidence on its own time scale (days); the verdict follows.
        let mut f = host.until(1260.0);
        let mut hours = 0;
        while component(&f, 1, "risk").state != State::Healthy {
            assert!(
                hours < 24 * 30,
                "the risk never came down: {:?}",
                component(&f, 1, "risk")
            );
            host.fake.advance(3600.0 - STEP);
            f = host.tick();
            hours += 1;
        }
    });
}

#[test]
fn node_driver_versions_pci_bus_and_kernel_log_and_back() {
    let sets = r#"
        [[set]]
        gpu = 2
        from_seconds = 600.0
        until_seconds = 1200.0
        sample = { firmware_version = "550.54.15" }
    "#;
    isolated(
        "node_driver_versions_pci_bus_and_kernel_log_and_back",
        &scenario(sets),
        || {
            let dir = scratch("node");
            let kmsg = dir.join("kern.log");
            std::fs::write(&kmsg, "").expect("kernel log");
            let pci = pci_bus(&dir, &[]);
            let mut host = Host::with(
                &collect_config(&kmsg, &pci),
                Engine::new(EngineConfig::default()),
            );
            let f = host.tick();
            for name in ["driver_version", "kernel_log", "pci"] {
                healthy(node(&f, name));
            }
            let f = host.until(660.0);
            is(
                node(&f, "driver_version"),
                State::Unhealthy,
                Action::DrainAndReboot,
                "550.54.15 (GPU 2), 570.124.06 (GPU 0-1, 3)",
            );
            healthy(node(&host.until(1600.0), "driver_version"));

            // The bus lists every GPU NVML lists, then one more, then no longer.
            let buses: Vec<String> = (host.engine.state.gpus.values())
                .filter_map(|g| gpu_sentinel::model::normalize_pci_bus_id(&g.pci_bus_id))
                .map(|bus| bus.to_lowercase())
                .collect();
            assert_eq!(buses.len(), 4, "{buses:?}");
            let mut with_extra: Vec<&str> = buses.iter().map(String::as_str).collect();
            pci_bus(&dir, &with_extra);
            healthy(node(&host.tick(), "pci"));
            with_extra.push("0000:3b:00.0");
            pci_bus(&dir, &with_extra);
            is(
                node(&host.tick(), "pci"),
                State::Unhealthy,
                Action::DrainAndReboot,
                "on the PCI bus that NVML does not list: 0000:3b:00.0",
            );
            with_extra.pop();
            pci_bus(&dir, &with_extra);
            let t = host.fake.seconds();
            healthy(node(&host.until(t + 400.0), "pci"));

            // A kernel log that cannot be read, then one that can (the agent restarted).
            let unreadable = collect_config(&dir.join("no-such-log"), &pci);
            let engine = std::mem::replace(&mut host.engine, Engine::new(EngineConfig::default()));
            drop(host);
            let mut host = Host::with(&unreadable, engine);
            is(
                node(&host.tick(), "kernel_log"),
                State::Degraded,
                Action::None,
                "cannot read the kernel log",
            );
            let engine = std::mem::replace(&mut host.engine, Engine::new(EngineConfig::default()));
            drop(host);
            let mut host = Host::with(&collect_config(&kmsg, &pci), engine);
            assert_eq!(
                node(&host.tick(), "kernel_log").state,
                State::Degraded,
                "held"
            );
            let t = host.fake.seconds();
            healthy(node(&host.until(t + 400.0), "kernel_log"));
        },
    );
}
