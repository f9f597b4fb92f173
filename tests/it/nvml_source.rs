//! The NVML source end to end against the fake NVML library (`tests/fake-nvml`): the real
//! nvml-wrapper path (dlopen, versioned symbols, struct layouts, error codes) on a machine
//! without a GPU.
//!
//! The fake keeps process-wide state (one simulated fleet, one fault clock per process), so
//! each test re-runs this test binary as a child process with its own scenario file and
//! checks the child's result. The library must be built first (`cargo build --workspace`,
//! which scripts/test.sh runs); `FAKE_NVML_LIB` overrides where it is looked for.

use crate::common;

use std::ffi::CString;
use std::os::raw::c_char;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use chrono::Utc;
use gpu_sentinel::config::SimulationConfig;
use gpu_sentinel::model::{GpuSample, XidSource};
use gpu_sentinel::source::nvml::{FAMILY_NAMES, NvmlOpenError, NvmlSource};
use gpu_sentinel::source::simulate::Fleet;
use gpu_sentinel::source::{Collection, Source};

const CHILD_ENV: &str = "NVML_SOURCE_TEST_CHILD";

/// The fake library, loaded into this process to reach its test-only controls. dlopen of the
/// same path returns the same instance nvml-wrapper uses, so both see one state.
struct Fake {
    lib: libloading::Library,
    path: PathBuf,
}

impl Fake {
    fn load() -> Fake {
        let path = common::fake_nvml_lib();
        // SAFETY: the fake's initialisers are Rust statics only; loading it runs no code.
        let lib = unsafe { libloading::Library::new(&path) }.expect("the fake library loads");
        Fake { lib, path }
    }

    fn open(&self) -> NvmlSource {
        NvmlSource::open(Some(&self.path)).expect("NVML opens on the fake library")
    }

    /// Calls of NVML function `name` so far (on every GPU).
    fn calls(&self, name: &str) -> u64 {
        let name = CString::new(name).expect("no NUL in names");
        // SAFETY: the symbol's signature is the one the fake exports.
        unsafe {
            let f: libloading::Symbol<unsafe extern "C" fn(*const c_char) -> u64> = self
                .lib
                .get(b"fake_nvml_call_count")
                .expect("the fake exports fake_nvml_call_count");
            f(name.as_ptr())
        }
    }

    /// Calls of NVML function `name` on GPU `gpu` so far.
    fn gpu_calls(&self, name: &str, gpu: u32) -> u64 {
        let name = CString::new(name).expect("no NUL in names");
        // SAFETY: as above.
        unsafe {
            let f: libloading::Symbol<unsafe extern "C" fn(*const c_char, u32) -> u64> = self
                .lib
                .get(b"fake_nvml_gpu_call_count")
                .expect("the fake exports fake_nvml_gpu_call_count");
            f(name.as_ptr(), gpu)
        }
    }

    /// Moves the fake's simulated clock (scenario `mode = "manual"`).
    fn advance(&self, seconds: f64) {
        // SAFETY: as above.
        let code = unsafe {
            let f: libloading::Symbol<unsafe extern "C" fn(f64) -> u32> = self
                .lib
                .get(b"fake_nvml_advance")
                .expect("the fake exports fake_nvml_advance");
            f(seconds)
        };
        assert_eq!(code, 0, "fake_nvml_advance answered {code}");
    }

    fn set_process(&self, gpu: u32, pid: u32, bytes: u64, sm: f64) {
        // SAFETY: as above.
        let code = unsafe {
            let f: libloading::Symbol<unsafe extern "C" fn(u32, u32, u64, f64) -> u32> = self
                .lib
                .get(b"fake_nvml_set_process")
                .expect("the fake exports fake_nvml_set_process");
            f(gpu, pid, bytes, sm)
        };
        assert_eq!(code, 0, "fake_nvml_set_process answered {code}");
    }

    /// Waits until the XID thread has registered `gpus` devices.
    fn wait_for_event_registration(&self, gpus: u64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.calls("nvmlDeviceRegisterEvents") < gpus {
            assert!(Instant::now() < deadline, "the XID thread never registered");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Runs `body` in a child process whose fake NVML plays `scenario` (TOML), with `env` set.
fn isolated_with_env(name: &str, scenario: &str, env: &[(&str, &str)], body: impl FnOnce(&Fake)) {
    if std::env::var(CHILD_ENV).as_deref() == Ok(name) {
        body(&Fake::load());
        return;
    }
    let lib = common::fake_nvml_lib();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("nvml_source");
    std::fs::create_dir_all(&dir).expect("the test scratch directory can be created");
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, scenario).expect("the scenario file can be written");
    let exe = std::env::current_exe().expect("the test binary knows its path");
    let mut child = Command::new(exe);
    child
        .args([
            &common::test_path(module_path!(), name),
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, name)
        .env("FAKE_NVML_SCENARIO", &path)
        .env("FAKE_NVML_LIB", &lib)
        .env_remove("FAKE_NVML_PROCESSES");
    for (key, value) in env {
        child.env(key, value);
    }
    let out = child.output().expect("the test binary runs as a child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child test {name} failed ({})\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
}

fn isolated(name: &str, scenario: &str, body: impl FnOnce(&Fake)) {
    isolated_with_env(name, scenario, &[], body)
}

fn family(c: &Collection, name: &str) -> (bool, f64) {
    let f = c
        .health
        .families
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no family {name}"));
    (f.success, f.seconds)
}

fn gpu(c: &Collection, index: u32) -> &GpuSample {
    c.snapshot
        .gpu_by_index(index)
        .unwrap_or_else(|| panic!("no GPU {index} in the snapshot"))
}

fn close(a: Option<f64>, b: Option<f64>, tolerance: f64) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => (a - b).abs() <= tolerance,
        (None, None) => true,
        _ => false,
    }
}

#[test]
fn a_missing_library_is_a_clear_error() {
    let err = NvmlSource::open(Some(Path::new("/nonexistent/lib/libnvidia-ml.so.1")))
        .err()
        .expect("there is no library there");
    assert!(
        matches!(err, NvmlOpenError::LibraryNotFound { .. }),
        "{err:?}"
    );
    let text = err.to_string();
    for needle in [
        "NVML (libnvidia-ml.so.1) was not found",
        "/nonexistent/lib/libnvidia-ml.so.1",
        "--nvml-lib",
        "--simulate",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from: {text}");
    }
}

#[test]
fn values_match_the_simulator() {
    const SCENARIO: &str = r#"
        [simulation]
        gpus = 8
        seed = 42
        [clock]
        mode = "manual"
        [[process]]
        gpu = 7
        pid = 999999
        used_memory_bytes = 1073741824
        sm_utilization = 0.25
    "#;
    isolated("values_match_the_simulator", SCENARIO, |fake| {
        let config = SimulationConfig {
            gpus: 8,
            seed: 42,
            ..SimulationConfig::default()
        };
        let mut source = fake.open();
        let mut fleet = Fleet::new(&config, Utc::now());
        let first = source.collect();
        assert!(first.health.source_up);
        assert!(
            first.snapshot.gpus.iter().all(|g| g.gpm.is_none()),
            "GPM needs two samples"
        );

        fake.advance(300.0);
        fleet.advance(300.0);
        let second = source.collect();
        let health = &second.health;
        assert!(health.source_up);
        let names: Vec<_> = health.families.iter().map(|f| f.name).collect();
        assert_eq!(names, FAMILY_NAMES.to_vec());
        assert!(
            health.families.iter().all(|f| f.success),
            "{:?}",
            health.families
        );
        assert!(
            health.errors_by_call.is_empty(),
            "{:?}",
            health.errors_by_call
        );
        assert_eq!(
            second.snapshot.host.driver_version.as_deref(),
            Some("570.124.06")
        );
        assert_eq!(second.snapshot.host.cuda_version.as_deref(), Some("12.8"));
        assert_eq!(second.snapshot.gpus.len(), 8);

        for i in 0..8u32 {
            let mut got = gpu(&second, i).clone();
            let mut want = fleet.sample(i as usize).expect("the simulator has the GPU");
            assert!(got.collect_seconds > 0.0);
            got.collect_seconds = 0.0;
            assert_eq!(got.failed_calls, 0, "GPU {i}");
            // PCIe throughput travels in NVML's KB/s, GPM ratios in NVML's percent.
            for (g, w) in [
                (got.pcie.tx_bytes_per_second, want.pcie.tx_bytes_per_second),
                (got.pcie.rx_bytes_per_second, want.pcie.rx_bytes_per_second),
            ] {
                assert!(close(g, w, 512.0), "GPU {i} PCIe {g:?} vs {w:?}");
            }
            got.pcie.tx_bytes_per_second = want.pcie.tx_bytes_per_second;
            got.pcie.rx_bytes_per_second = want.pcie.rx_bytes_per_second;
            let (g, w) = (got.gpm.expect("GPM on Hopper"), want.gpm.expect("GPM"));
            for (a, b) in [
                (g.sm_active, w.sm_active),
                (g.sm_occupancy, w.sm_occupancy),
                (g.tensor_active, w.tensor_active),
                (g.dram_active, w.dram_active),
            ] {
                assert!(close(a, b, 1e-9), "GPU {i} GPM {a:?} vs {b:?}");
            }
            got.gpm = want.gpm;
            want.collect_seconds = 0.0;
            assert_eq!(got, want, "GPU {i}");
        }

        // Processes: the simulator's, plus the scenario's on GPU 7, with per-process SM use.
        let mut want: Vec<(u32, u32, Option<u64>, Option<f64>)> = (0..8)
            .flat_map(|i| fleet.processes(i))
            .map(|p| (p.gpu, p.pid, p.used_memory_bytes, p.sm_utilization))
            .collect();
        want.push((7, 999999, Some(1 << 30), Some(0.25)));
        let mut got: Vec<_> = second
            .snapshot
            .processes
            .iter()
            .map(|p| (p.gpu, p.pid, p.used_memory_bytes, p.sm_utilization))
            .collect();
        want.sort_by_key(|p| (p.0, p.1));
        got.sort_by_key(|p| (p.0, p.1));
        assert!(!want.is_empty());
        assert_eq!(got, want);
        for p in &second.snapshot.processes {
            assert_eq!(p.uuid, gpu(&second, p.gpu).uuid);
            assert_eq!(p.user, None, "owners are the /proc resolver's job");
        }
    });
}

#[test]
fn an_unsupported_call_is_left_out_and_not_asked_again() {
    const SCENARIO: &str = r#"
        [simulation]
        gpus = 4
        faults = []
        [[fault]]
        gpu = 1
        function = "nvmlDeviceGetPowerUsage"
        error = "NOT_SUPPORTED"
    "#;
    isolated(
        "an_unsupported_call_is_left_out_and_not_asked_again",
        SCENARIO,
        |fake| {
            let mut source = fake.open();
            let mut last = None;
            for _ in 0..3 {
                last = Some(source.collect());
            }
            let c = last.expect("three collections");
            assert_eq!(gpu(&c, 1).power_watts, None);
            assert!(
                gpu(&c, 1).power_limit_watts.is_some(),
                "only that call degrades"
            );
            assert!(gpu(&c, 0).power_watts.is_some());
            assert_eq!(fake.gpu_calls("nvmlDeviceGetPowerUsage", 1), 1);
            assert_eq!(fake.gpu_calls("nvmlDeviceGetPowerUsage", 0), 3);
            // The simulated H100s have no fan and retire no pages: asked once per GPU.
            assert_eq!(fake.calls("nvmlDeviceGetFanSpeed_v2"), 4);
            assert_eq!(fake.calls("nvmlDeviceGetRetiredPagesPendingStatus"), 4);
            assert_eq!(
                fake.calls("nvmlDeviceGetRetiredPages"),
                8,
                "sbe and dbe, once each"
            );
            assert_eq!(
                fake.calls("nvmlGpmQueryDeviceSupport"),
                4,
                "asked once per GPU"
            );
            assert!(family(&c, "power").0, "unsupported is not a failure");
            assert!(
                c.health.errors_by_call.is_empty(),
                "{:?}",
                c.health.errors_by_call
            );
            assert!(c.snapshot.gpus.iter().all(|g| g.failed_calls == 0 && g.up));
        },
    );
}

#[test]
fn unknown_errors_fail_the_family_and_are_counted() {
    const SCENARIO: &str = r#"
        [simulation]
        gpus = 4
        faults = []
        [[fault]]
        gpu = 2
        function = "nvmlDeviceGetTotalEccErrors"
        error = "UNKNOWN"
    "#;
    isolated(
        "unknown_errors_fail_the_family_and_are_counted",
        SCENARIO,
        |fake| {
            let mut source = fake.open();
            let c = source.collect();
            let ecc_errors = |c: &Collection| {
                c.health
                    .errors_by_call
                    .get("nvmlDeviceGetTotalEccErrors")
                    .copied()
            };
            assert_eq!(ecc_errors(&c), Some(4), "four ECC counters failed");
            assert_eq!(gpu(&c, 2).failed_calls, 4);
            assert_eq!(gpu(&c, 2).ecc.corrected_volatile, None);
            assert!(gpu(&c, 2).up && gpu(&c, 2).power_watts.is_some());
            assert!(gpu(&c, 0).ecc.corrected_volatile.is_some());
            assert!(!family(&c, "ecc").0);
            for f in &c.health.families {
                if f.name != "ecc" {
                    assert!(f.success, "{} should succeed", f.name);
                }
            }
            let c = source.collect();
            assert_eq!(
                ecc_errors(&c),
                Some(8),
                "failures are asked again and counted"
            );
            assert_eq!(fake.gpu_calls("nvmlDeviceGetTotalEccErrors", 2), 8);
        },
    );
}

#[test]
fn a_gpu_lost_mid_run_is_down_and_the_others_keep_flowing() {
    const SCENARIO: &str = r#"
        [simulation]
        gpus = 4
        faults = []
        [[fault]]
        gpu = 1
        function = "*"
        error = "GPU_IS_LOST"
        after_seconds = 2.0
    "#;
    isolated(
        "a_gpu_lost_mid_run_is_down_and_the_others_keep_flowing",
        SCENARIO,
        |fake| {
            let began = Instant::now();
            let mut source = fake.open();
            let before = source.collect();
            assert!(before.snapshot.gpus.iter().all(|g| g.up));
            let identity = |g: &GpuSample| (g.uuid.clone(), g.name.clone(), g.pci_bus_id.clone());
            let lost_identity = identity(gpu(&before, 1));
            if let Some(rest) = Duration::from_millis(2300).checked_sub(began.elapsed()) {
                std::thread::sleep(rest);
            }
            let after = source.collect();
            let lost = gpu(&after, 1);
            assert!(!lost.up);
            assert_eq!(
                identity(lost),
                lost_identity,
                "a lost GPU stays identifiable"
            );
            assert_eq!(lost.power_watts, None);
            assert!(lost.gpm.is_none() && lost.nvlink.is_empty());
            assert!(after.snapshot.processes.iter().all(|p| p.gpu != 1));
            for i in [0, 2, 3] {
                let g = gpu(&after, i);
                assert!(
                    g.up && g.power_watts.is_some() && g.gpm.is_some(),
                    "GPU {i}"
                );
            }
            assert!(after.health.source_up);
            assert!(
                after.health.errors_by_call.is_empty(),
                "{:?}",
                after.health.errors_by_call
            );
            assert_eq!(after.snapshot.gpus.len(), 4);
        },
    );
}

#[test]
fn a_slow_call_shows_in_collect_seconds() {
    const SCENARIO: &str = r#"
        [simulation]
        gpus = 2
        faults = []
        [[fault]]
        gpu = 0
        function = "nvmlDeviceGetPowerUsage"
        delay_ms = 300
    "#;
    isolated("a_slow_call_shows_in_collect_seconds", SCENARIO, |fake| {
        let mut source = fake.open();
        let c = source.collect();
        assert!(
            gpu(&c, 0).collect_seconds >= 0.3,
            "{}",
            gpu(&c, 0).collect_seconds
        );
        assert!(
            gpu(&c, 1).collect_seconds < 0.3,
            "{}",
            gpu(&c, 1).collect_seconds
        );
        assert!(gpu(&c, 0).power_watts.is_some(), "slow, not failed");
        let (success, seconds) = family(&c, "power");
        assert!(success && seconds >= 0.3, "power family took {seconds}");
        assert!(c.health.seconds >= 0.3);
    });
}

#[test]
fn nvml_disappearing_marks_the_source_down_then_recovers() {
    const SCENARIO: &str = r#"
        [simulation]
        gpus = 2
        faults = []
        [[fault]]
        function = "*"
        error = "UNINITIALIZED"
        after_seconds = 2.0
        until_seconds = 3.5
    "#;
    isolated(
        "nvml_disappearing_marks_the_source_down_then_recovers",
        SCENARIO,
        |fake| {
            let began = Instant::now();
            let mut source = fake.open();
            let up = source.collect();
            assert!(up.health.source_up);
            let uuids: Vec<String> = up.snapshot.gpus.iter().map(|g| g.uuid.clone()).collect();
            if let Some(rest) = Duration::from_millis(2200).checked_sub(began.elapsed()) {
                std::thread::sleep(rest);
            }
            let down = source.collect();
            assert!(!down.health.source_up);
            assert!(down.health.families.iter().all(|f| !f.success));
            assert!(down.snapshot.gpus.iter().all(|g| !g.up));
            let kept: Vec<String> = down.snapshot.gpus.iter().map(|g| g.uuid.clone()).collect();
            assert_eq!(kept, uuids, "GPUs stay identifiable while NVML is gone");
            assert!(
                down.health
                    .errors_by_call
                    .contains_key("nvmlDeviceGetCount_v2")
            );
            assert!(source.describe().contains("unavailable"));

            // Re-initialisation backs off (1 s, 2 s, …): it fails once inside the outage
            // and succeeds after it. No collection blocks longer than one attempt.
            let deadline = Instant::now() + Duration::from_secs(15);
            let recovered = loop {
                let tick = Instant::now();
                let c = source.collect();
                assert!(tick.elapsed() < Duration::from_secs(1), "a tick blocked");
                if c.health.source_up {
                    break c;
                }
                assert!(Instant::now() < deadline, "NVML never came back");
                std::thread::sleep(Duration::from_millis(100));
            };
            assert!(began.elapsed() >= Duration::from_millis(3500));
            assert!(
                recovered
                    .snapshot
                    .gpus
                    .iter()
                    .all(|g| g.up && g.power_watts.is_some())
            );
            assert!(recovered.health.families.iter().all(|f| f.success));
            assert!(recovered.health.errors_by_call.get("nvmlInit_v2").copied() >= Some(1));
            let deadline = Instant::now() + Duration::from_secs(5);
            while fake.calls("nvmlEventSetCreate") < 2 {
                assert!(Instant::now() < deadline, "the XID thread did not restart");
                std::thread::sleep(Duration::from_millis(20));
            }
        },
    );
}

#[test]
fn xid_79_from_a_gpu_falling_off_the_bus_arrives_as_an_nvml_event() {
    const SCENARIO: &str = r#"
        [simulation]
        gpus = 2
        faults = ["fell_off_bus"]
        fault_hours = 1.0
        [clock]
        mode = "manual"
    "#;
    isolated(
        "xid_79_from_a_gpu_falling_off_the_bus_arrives_as_an_nvml_event",
        SCENARIO,
        |fake| {
            let mut source = fake.open();
            let before = source.collect();
            assert!(gpu(&before, 1).up);
            fake.wait_for_event_registration(2);
            fake.advance(3700.0);
            let deadline = Instant::now() + Duration::from_secs(5);
            let mut events = Vec::new();
            let mut last = before;
            while events.is_empty() {
                assert!(Instant::now() < deadline, "no XID arrived");
                std::thread::sleep(Duration::from_millis(50));
                last = source.collect();
                events.extend(last.snapshot.events.clone());
            }
            assert_eq!(events.len(), 1, "{events:?}");
            let e = &events[0];
            assert_eq!((e.xid, e.source, e.gpu), (79, XidSource::Nvml, Some(1)));
            let lost = gpu(&last, 1);
            assert_eq!(e.uuid.as_deref(), Some(lost.uuid.as_str()));
            assert_eq!(e.pci_bus_id.as_deref(), Some(lost.pci_bus_id.as_str()));
            assert!(!lost.up, "the GPU that fell off is down");
            assert!(gpu(&last, 0).up);
        },
    );
}

#[test]
fn the_event_thread_stops_when_the_source_is_dropped() {
    isolated(
        "the_event_thread_stops_when_the_source_is_dropped",
        "[simulation]\ngpus = 2\nfaults = []\n",
        |fake| {
            let mut source = fake.open();
            source.collect();
            fake.wait_for_event_registration(2);
            let began = Instant::now();
            drop(source);
            assert!(
                began.elapsed() < Duration::from_secs(2),
                "drop waited too long"
            );
            assert_eq!(fake.calls("nvmlEventSetFree"), 1);
            assert_eq!(fake.calls("nvmlShutdown"), 1);
            let waits = fake.calls("nvmlEventSetWait_v2");
            std::thread::sleep(Duration::from_millis(800));
            assert_eq!(
                fake.calls("nvmlEventSetWait_v2"),
                waits,
                "still waiting after drop"
            );
        },
    );
}

#[test]
fn a_bad_scenario_fails_initialisation() {
    isolated(
        "a_bad_scenario_fails_initialisation",
        "[simulation]\ngpus = 0\n",
        |fake| {
            let err = NvmlSource::open(Some(&fake.path))
                .err()
                .expect("a bad scenario fails nvmlInit_v2");
            let text = err.to_string();
            assert!(matches!(err, NvmlOpenError::Init { .. }), "{err:?}");
            assert!(text.contains("nvmlInit_v2 failed"), "{text}");
        },
    );
}

#[test]
fn processes_named_at_runtime_or_by_environment_are_reported() {
    isolated_with_env(
        "processes_named_at_runtime_or_by_environment_are_reported",
        "[simulation]\ngpus = 2\nfaults = []\n",
        &[("FAKE_NVML_PROCESSES", "1:4242:1048576")],
        |fake| {
            let mut source = fake.open();
            // A real child holding "memory", as a ghost-process test would use.
            let mut child = Command::new("sleep")
                .arg("30")
                .spawn()
                .expect("`sleep` runs");
            fake.set_process(0, child.id(), 2 << 30, 0.0);
            let c = source.collect();
            let _ = child.kill();
            let _ = child.wait();
            let find = |pid: u32| c.snapshot.processes.iter().find(|p| p.pid == pid);
            let real = find(child.id()).expect("the child is reported");
            assert_eq!((real.gpu, real.used_memory_bytes), (0, Some(2 << 30)));
            assert_eq!(real.sm_utilization, Some(0.0));
            let named = find(4242).expect("the FAKE_NVML_PROCESSES entry is reported");
            assert_eq!((named.gpu, named.used_memory_bytes), (1, Some(1 << 20)));
        },
    );
}

#[test]
fn a_gpu_leaving_the_device_list_stays_visible_as_down() {
    const SCENARIO: &str = r#"
        [simulation]
        gpus = 4
        faults = []
        [[vanish]]
        gpu = 1
        after_seconds = 2.0
    "#;
    isolated(
        "a_gpu_leaving_the_device_list_stays_visible_as_down",
        SCENARIO,
        |fake| {
            let began = Instant::now();
            let mut source = fake.open();
            let before = source.collect();
            let uuids: Vec<String> = before
                .snapshot
                .gpus
                .iter()
                .map(|g| g.uuid.clone())
                .collect();
            if let Some(rest) = Duration::from_millis(2300).checked_sub(began.elapsed()) {
                std::thread::sleep(rest);
            }
            for _ in 0..2 {
                let after = source.collect();
                // NVML now lists three GPUs, the ones after GPU 1 moved up one index.
                let up: Vec<(u32, &str)> = after
                    .snapshot
                    .gpus
                    .iter()
                    .filter(|g| g.up)
                    .map(|g| (g.index, g.uuid.as_str()))
                    .collect();
                assert_eq!(
                    up,
                    vec![
                        (0, uuids[0].as_str()),
                        (1, uuids[2].as_str()),
                        (2, uuids[3].as_str())
                    ]
                );
                let down: Vec<&GpuSample> = after.snapshot.gpus.iter().filter(|g| !g.up).collect();
                assert_eq!(down.len(), 1, "{:?}", after.snapshot.gpus);
                assert_eq!(
                    (down[0].index, down[0].uuid.as_str()),
                    (1, uuids[1].as_str())
                );
                assert_eq!(down[0].pci_bus_id, before.snapshot.gpus[1].pci_bus_id);
                assert!(after.health.source_up);
                assert!(after.health.families.iter().all(|f| f.success));
            }
        },
    );
}
