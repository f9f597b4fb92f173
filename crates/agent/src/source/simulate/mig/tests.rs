use rand::SeedableRng;

use super::super::mig_profiles::table_for;
use super::*;

fn mig(layout: usize, dynamic: bool, model: &str) -> SimMig {
    let table = table_for(model).expect("a MIG model");
    SimMig::new(
        table,
        layout,
        dynamic,
        8.0 * 3600.0,
        SmallRng::seed_from_u64(7),
    )
}

fn listed(m: &SimMig) -> Vec<(u32, u32, String)> {
    m.instances()
        .into_iter()
        .map(|i| (i.gpu_instance, i.compute_instance, i.compute_profile()))
        .collect()
}

#[test]
fn the_mixed_layout_is_the_captured_one_in_nvml_order() {
    let mut m = mig(0, false, "NVIDIA H100 80GB HBM3");
    m.step(60.0, true);
    assert_eq!(
        listed(&m),
        [
            (2, 0, "1c.3g.40gb".to_string()),
            (2, 1, "2c.3g.40gb".to_string()),
            (3, 0, "2g.20gb".to_string()),
            (9, 0, "1g.10gb".to_string()),
            (10, 0, "1g.10gb".to_string()),
        ]
    );
    let instances = m.instances();
    let indexes: Vec<u32> = instances.iter().map(|i| i.device_index).collect();
    assert_eq!(indexes, [0, 1, 2, 3, 4]);
    // The compute slices of the instances add up to the GPU's.
    let slices: u32 = instances.iter().map(|i| i.slices).sum();
    assert_eq!(slices, 7);
    let uuids: std::collections::BTreeSet<&str> =
        instances.iter().map(|i| i.uuid.as_str()).collect();
    assert_eq!(uuids.len(), 5);
    assert!(instances.iter().all(|i| i.uuid.starts_with("MIG-")));
}

#[test]
fn an_instance_is_created_and_another_destroyed_on_the_dynamic_gpu() {
    let mut m = mig(1, true, "NVIDIA H200");
    let gis = |m: &SimMig| -> Vec<u32> { m.instances().iter().map(|i| i.gpu_instance).collect() };
    m.step(CREATE_AT - 1.0, true);
    assert_eq!(gis(&m), [7, 8, 9, 10, 11, 12]);
    m.step(CREATE_AT, true);
    assert_eq!(gis(&m), [7, 8, 9, 10, 11, 12, 13]);
    assert_eq!(m.instances()[6].profile, "1g.18gb");
    m.step(DESTROY_AT, true);
    assert_eq!(gis(&m), [8, 9, 10, 11, 12, 13]);
    // Indexes close up after a destruction, as NVML's do.
    assert_eq!(m.instances()[0].device_index, 0);
}

#[test]
fn every_instance_reports_and_holds_no_more_than_it_has() {
    let mut m = mig(0, false, "NVIDIA A100-SXM4-80GB");
    let mut t = 0.0;
    let mut idle_memory = Vec::new();
    while t < 24.0 * 3600.0 {
        t += 300.0;
        m.step(t, true);
        let instances = m.instances();
        assert_eq!(instances.len(), 5, "none drops out at {t}");
        for i in &instances {
            let (used, total) = (i.memory.used_bytes.unwrap(), i.memory.total_bytes.unwrap());
            // Strictly less: the simulator never fills an instance to the brim, so nothing
            // is cut to fit (the jobs of a split GPU instance share it by slices).
            assert!(used < total, "{} at {t}: {used} >= {total}", i.uuid);
            let gpm = i.gpm.unwrap();
            assert!(gpm.sm_active.unwrap() <= 1.0);
        }
        // GI 10 runs nothing: zeros and the driver's few MiB.
        let empty = instances.iter().find(|i| i.gpu_instance == 10).unwrap();
        assert_eq!(empty.processes, 0);
        assert_eq!(empty.gpm.unwrap().sm_active, Some(0.0));
        idle_memory.push(empty.memory.used_bytes.unwrap());
    }
    assert!(idle_memory.iter().all(|&b| b == 9 * MIB));
    // The notebook on GI 9 holds memory and stops computing after its turn.
    let notebook = m
        .instances()
        .into_iter()
        .find(|i| i.gpu_instance == 9)
        .unwrap();
    assert!(notebook.memory.used_bytes.unwrap() > 4 << 30);
    assert!(notebook.gpm.unwrap().sm_active.unwrap() <= 0.02);
    let on_notebook: Vec<_> = m
        .processes()
        .into_iter()
        .filter(|p| p.instance == Some((9, 0)))
        .collect();
    assert_eq!(on_notebook.len(), 1);
    assert_eq!(on_notebook[0].command, "jupyter-lab");
}

#[test]
fn the_gpu_load_is_the_instances_weighted_by_their_share() {
    let mut m = mig(2, false, "NVIDIA H100 80GB HBM3");
    let gpu = m.step(3.0 * 3600.0, true);
    let weighted: f64 = m
        .instances()
        .iter()
        .map(|i| i.fraction() * i.gpm.unwrap().sm_active.unwrap() / 0.88)
        .sum();
    assert!(
        (gpu.util - weighted).abs() < 0.02,
        "{} vs {weighted}",
        gpu.util
    );
    let idle = m.step(3.0 * 3600.0 + 60.0, false);
    assert_eq!(idle.util, 0.0);
}

#[test]
fn processes_in_mig_instances_carry_no_utilization_as_nvml_gives_none() {
    let config = crate::config::SimulationConfig {
        gpus: 3,
        mig_gpus: 1,
        faults: Vec::new(),
        ..crate::config::SimulationConfig::default()
    };
    let mut fleet = super::super::Fleet::new(&config, chrono::DateTime::default());
    fleet.advance(3600.0);
    let snapshot = fleet.snapshot();
    let (mig, whole): (Vec<_>, Vec<_>) = snapshot.processes.iter().partition(|p| p.gpu == 0);
    assert!(!mig.is_empty() && !whole.is_empty());
    for p in mig {
        assert!(p.gpu_instance.is_some(), "{p:?}");
        assert_eq!(p.sm_utilization, None, "{p:?}");
    }
    assert!(whole.iter().all(|p| p.sm_utilization.is_some()));
}

#[test]
fn a_mig_gpu_has_its_models_memory_and_its_instances_fit_in_it() {
    for (model, total_mib) in [
        ("NVIDIA H100 80GB HBM3", 81_559u64),
        ("NVIDIA H200", 143_771),
        ("NVIDIA A100-SXM4-80GB", 81_920),
        ("NVIDIA A100-SXM4-40GB", 40_960),
    ] {
        let config = crate::config::SimulationConfig {
            gpus: 2,
            mig_gpus: 1,
            model: model.into(),
            faults: Vec::new(),
            ..crate::config::SimulationConfig::default()
        };
        let mut fleet = super::super::Fleet::new(&config, chrono::DateTime::default());
        fleet.advance(3600.0);
        let gpu = fleet.sample(0).expect("GPU 0");
        let total = gpu.memory.total_bytes.expect("a total");
        assert_eq!(total, total_mib << 20, "{model}");
        // Each GPU instance counted once: its compute instances share its memory.
        let mut gis = std::collections::BTreeMap::new();
        for i in &gpu.mig_instances {
            gis.insert(
                i.gpu_instance,
                i.memory.total_bytes.expect("instance total"),
            );
        }
        let cut: u64 = gis.values().sum();
        assert!(cut > 0 && cut < total, "{model}: {cut} of {total}");
        let used = gpu.memory.used_bytes.expect("used");
        assert!(used <= total, "{model}: {used} of {total}");
    }
}
