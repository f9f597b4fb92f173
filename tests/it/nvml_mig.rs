//! MIG through the real NVML path against the fake NVML library: every MIG device of a GPU
//! in MIG mode is read as the simulator has it (ids, profile, placement, memory, GPM,
//! processes), instances created and destroyed while the agent runs appear and disappear
//! within one collection, and none drops out while it exists.
//!
//! As in `tests/it/nvml_source.rs`, the fake's state is process-wide, so each test re-runs
//! this binary as a child with its own scenario.

use crate::common;

use std::collections::BTreeSet;
use std::ffi::CString;
use std::os::raw::c_char;
use std::path::PathBuf;
use std::process::Command;

use chrono::Utc;
use gpu_sentinel::config::SimulationConfig;
use gpu_sentinel::model::{GpuSample, MigInstance};
use gpu_sentinel::source::nvml::NvmlSource;
use gpu_sentinel::source::simulate::Fleet;
use gpu_sentinel::source::simulate::mig::{CREATE_AT, DESTROY_AT};
use gpu_sentinel::source::{Collection, Source};

const CHILD_ENV: &str = "NVML_MIG_TEST_CHILD";

/// Three H100s, the first two in MIG mode (the second is the one whose instances change),
/// on a clock that moves only when told.
const SCENARIO: &str = r#"
    [simulation]
    gpus = 3
    seed = 42
    mig_gpus = 2
    faults = []
    [clock]
    mode = "manual"
"#;

fn config() -> SimulationConfig {
    SimulationConfig {
        gpus: 3,
        seed: 42,
        mig_gpus: 2,
        faults: Vec::new(),
        ..SimulationConfig::default()
    }
}

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
}

/// Runs `body` in a child process whose fake NVML plays `scenario`.
fn isolated(name: &str, scenario: &str, body: impl FnOnce(&Fake)) {
    if std::env::var(CHILD_ENV).as_deref() == Ok(name) {
        body(&Fake::load());
        return;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("nvml_mig");
    std::fs::create_dir_all(&dir).expect("the test scratch directory can be created");
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, scenario).expect("the scenario file can be written");
    let exe = std::env::current_exe().expect("the test binary knows its path");
    let out = Command::new(exe)
        .args([
            &common::test_path(module_path!(), name),
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, name)
        .env("FAKE_NVML_SCENARIO", &path)
        .env("FAKE_NVML_LIB", common::fake_nvml_lib())
        .env_remove("FAKE_NVML_PROCESSES")
        .output()
        .expect("the test binary runs as a child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child test {name} failed ({})\n--- stdout\n{stdout}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

fn gpu(c: &Collection, index: u32) -> &GpuSample {
    c.snapshot
        .gpu_by_index(index)
        .unwrap_or_else(|| panic!("no GPU {index}"))
}

/// What must agree between NVML's answer and the simulator's: everything but GPM (which
/// needs two samples through NVML).
fn identity(i: &MigInstance) -> MigInstance {
    MigInstance {
        gpm: None,
        ..i.clone()
    }
}

fn uuids(instances: &[MigInstance]) -> BTreeSet<String> {
    instances.iter().map(|i| i.uuid.clone()).collect()
}

#[test]
fn every_instance_is_read_as_the_simulator_has_it() {
    isolated(
        "every_instance_is_read_as_the_simulator_has_it",
        SCENARIO,
        |fake| {
            let mut source = fake.open();
            let mut fleet = Fleet::new(&config(), Utc::now());
            let first = source.collect();
            let health = &first.health;
            assert!(health.families.iter().all(|f| f.success), "{health:?}");
            assert!(health.errors_by_call.is_empty(), "{health:?}");
            fake.advance(300.0);
            fleet.advance(300.0);
            let second = source.collect();
            assert!(
                second.health.errors_by_call.is_empty(),
                "{:?}",
                second.health
            );
            for index in 0..2u32 {
                let read = gpu(&second, index);
                let truth = fleet.sample(index as usize).expect("a simulated GPU");
                assert_eq!(read.mig_enabled, Some(true));
                assert!(!read.mig_instances.is_empty());
                let read_ids: Vec<MigInstance> = read.mig_instances.iter().map(identity).collect();
                let true_ids: Vec<MigInstance> = truth.mig_instances.iter().map(identity).collect();
                assert_eq!(read_ids, true_ids, "GPU {index}");
                for (r, t) in read.mig_instances.iter().zip(&truth.mig_instances) {
                    // GPM per GPU instance, through nvmlGpmMigSampleGet and two samples
                    // (NVML's percent and back).
                    let (r_gpm, t_gpm) = (r.gpm.expect("GPM read"), t.gpm.expect("GPM simulated"));
                    for (a, b) in [
                        (r_gpm.sm_active, t_gpm.sm_active),
                        (r_gpm.sm_occupancy, t_gpm.sm_occupancy),
                        (r_gpm.tensor_active, t_gpm.tensor_active),
                        (r_gpm.dram_active, t_gpm.dram_active),
                        (r_gpm.graphics_active, t_gpm.graphics_active),
                    ] {
                        let (a, b) = (a.expect("a ratio"), b.expect("a ratio"));
                        assert!((a - b).abs() < 1e-9, "GPU {index} {}: {a} vs {b}", r.uuid);
                    }
                }
                assert_eq!(read.mig_devices, truth.mig_devices);
                assert_eq!(
                    read.utilization.gpu, None,
                    "no whole-GPU utilization in MIG mode"
                );
            }
            // The mixed layout: profiles and placements as nvidia-smi names them.
            let mixed = &gpu(&second, 0).mig_instances;
            let shape: Vec<(u32, u32, String, u32)> = mixed
                .iter()
                .map(|i| {
                    let start = i.placement.map(|p| p.start).unwrap_or(99);
                    (
                        i.gpu_instance,
                        i.compute_instance,
                        i.compute_profile(),
                        start,
                    )
                })
                .collect();
            assert_eq!(
                shape,
                [
                    (2, 0, "1c.3g.40gb".to_string(), 4),
                    (2, 1, "2c.3g.40gb".to_string(), 4),
                    (3, 0, "2g.20gb".to_string(), 0),
                    (9, 0, "1g.10gb".to_string(), 2),
                    (10, 0, "1g.10gb".to_string(), 3),
                ]
            );
            // Every process of a MIG GPU is named by its instance, as the simulator runs it.
            let truth = fleet.processes(0);
            let read: Vec<_> = second
                .snapshot
                .processes
                .iter()
                .filter(|p| p.gpu == 0)
                .collect();
            assert_eq!(read.len(), truth.len());
            for t in &truth {
                let r = read
                    .iter()
                    .find(|p| p.pid == t.pid)
                    .expect("every process is read");
                assert_eq!(
                    (r.gpu_instance, r.compute_instance),
                    (t.gpu_instance, t.compute_instance),
                    "pid {}",
                    t.pid
                );
                assert!(r.gpu_instance.is_some());
            }
            // The GPU not in MIG mode is read as always.
            let whole = gpu(&second, 2);
            assert!(whole.mig_instances.is_empty() && whole.utilization.gpu.is_some());
            assert!(fake.calls("nvmlGpmMigSampleGet") > 0);
        },
    );
}

#[test]
fn instances_created_and_destroyed_are_followed_and_none_drops_out() {
    isolated(
        "instances_created_and_destroyed_are_followed_and_none_drops_out",
        SCENARIO,
        |fake| {
            let mut source = fake.open();
            let mut fleet = Fleet::new(&config(), Utc::now());
            let step = 60.0;
            let mut elapsed = 0.0;
            let mut seen_created = false;
            let mut seen_destroyed = false;
            let mut last_gpm_free = 0;
            while elapsed < DESTROY_AT + 10.0 * 60.0 {
                let collected = source.collect();
                for index in 0..2u32 {
                    let read = &gpu(&collected, index).mig_instances;
                    let truth = fleet.sample(index as usize).expect("a GPU").mig_instances;
                    // Exactly the instances that exist now: none missing, none left over.
                    assert_eq!(uuids(read), uuids(&truth), "GPU {index} at {elapsed} s");
                    // An instance with nothing on it still reports, with zeros.
                    let idle = read.iter().find(|i| i.gpu_instance == 10).expect("GI 10");
                    assert_eq!(idle.processes, 0);
                    assert!(idle.memory.used_bytes.is_some_and(|b| b < 64 << 20));
                    if let Some(gpm) = idle.gpm {
                        assert_eq!(gpm.sm_active, Some(0.0));
                    }
                }
                let dynamic = &gpu(&collected, 1).mig_instances;
                let gis: Vec<u32> = dynamic.iter().map(|i| i.gpu_instance).collect();
                if elapsed >= CREATE_AT {
                    assert!(
                        gis.contains(&13),
                        "created at {CREATE_AT} s, read at {elapsed}"
                    );
                    seen_created = true;
                } else {
                    assert!(!gis.contains(&13), "not created yet at {elapsed}");
                }
                if elapsed >= DESTROY_AT {
                    assert!(
                        !gis.contains(&7),
                        "destroyed at {DESTROY_AT} s, read at {elapsed}"
                    );
                    seen_destroyed = true;
                    // The destroyed GPU instance's GPM sample is freed with it.
                    let free = fake.calls("nvmlGpmSampleFree");
                    assert!(free >= last_gpm_free);
                    last_gpm_free = free;
                } else {
                    assert!(gis.contains(&7), "GI 7 exists until {DESTROY_AT} s");
                }
                fake.advance(step);
                fleet.advance(step);
                elapsed += step;
            }
            assert!(seen_created && seen_destroyed);
            // Every GPM sample held is one a GPU (or GPU instance) that exists still needs:
            // GPU 2, the 4 GPU instances of GPU 0 and the 6 of GPU 1 now.
            let held = fake.calls("nvmlGpmSampleAlloc") - fake.calls("nvmlGpmSampleFree");
            assert_eq!(held, 1 + 4 + 6);
        },
    );
}

#[test]
fn a_scenario_mig_gpu_lists_its_devices_by_the_given_uuids() {
    const LISTED: &str = r#"
        [simulation]
        gpus = 2
        faults = []
        [clock]
        mode = "manual"
        [[mig]]
        gpu = 1
        devices = ["MIG-5c1e0b2d-1f3a-5e6b-9c8d-7a6b5c4d3e2f", "MIG-11111111-2222-3333-4444-555555555555"]
    "#;
    isolated(
        "a_scenario_mig_gpu_lists_its_devices_by_the_given_uuids",
        LISTED,
        |fake| {
            let collected = fake.open().collect();
            let listed = &gpu(&collected, 1).mig_instances;
            let shape: Vec<(&str, u32, &str)> = listed
                .iter()
                .map(|i| (i.uuid.as_str(), i.gpu_instance, i.profile.as_str()))
                .collect();
            assert_eq!(
                shape,
                [
                    ("MIG-5c1e0b2d-1f3a-5e6b-9c8d-7a6b5c4d3e2f", 7, "1g.10gb"),
                    ("MIG-11111111-2222-3333-4444-555555555555", 8, "1g.10gb"),
                ]
            );
            assert!(
                listed
                    .iter()
                    .all(|i| (i.fraction() - 1.0 / 7.0).abs() < 1e-9)
            );
        },
    );
}
