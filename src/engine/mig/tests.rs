use super::*;
use crate::model::{Gpm, Memory};

const GIB: u64 = 1 << 30;

fn instance(gi: u32, slices: u32, active: Option<f64>, used: u64) -> MigInstance {
    MigInstance {
        gpu_instance: gi,
        compute_instance: 0,
        uuid: format!("MIG-{gi}"),
        profile: format!("{slices}g.{}gb", slices * 10),
        slices,
        gpu_instance_slices: slices,
        gpu_slices: 7,
        memory: Memory {
            total_bytes: Some(u64::from(slices) * 10 * GIB),
            used_bytes: Some(used),
            ..Memory::default()
        },
        gpm: active.map(|a| Gpm {
            sm_active: Some(a),
            ..Gpm::default()
        }),
        ..MigInstance::default()
    }
}

fn gpu(instances: Vec<MigInstance>) -> GpuSample {
    GpuSample {
        up: true,
        mig_enabled: Some(true),
        mig_instances: instances,
        ..GpuSample::default()
    }
}

/// 7 an hour: 1 a slice-hour.
fn cost_config() -> CostConfig {
    CostConfig {
        hourly_price: 7.0,
        ..CostConfig::default()
    }
}

fn run(
    sample: &GpuSample,
    processes: &[&ProcessSample],
    allocations: &[&Allocation],
    minutes: i64,
) -> (MigState, CostState, Vec<InstanceFindings>, CostView) {
    let (idle, cost) = (IdleConfig::default(), cost_config());
    let settings = Settings {
        idle: &idle,
        cost: &cost,
    };
    let mut mig = MigState::default();
    let mut gpu_cost = CostState::default();
    let mut out = Vec::new();
    let mut view = CostView::default();
    for minute in 0..=minutes {
        let seconds = if minute == 0 { 0.0 } else { 60.0 };
        let holders = Holders {
            processes,
            allocations,
        };
        view = account(
            &mut mig,
            &mut gpu_cost,
            minute * 60,
            seconds,
            sample,
            holders,
            true,
            &settings,
            &mut out,
        );
    }
    (mig, gpu_cost, out, view)
}

#[test]
fn an_idle_instance_held_past_the_window_is_allocated_idle_and_costs_its_share() {
    let notebook = ProcessSample {
        pid: 7,
        used_memory_bytes: Some(7 * GIB),
        namespace: Some("notebooks".into()),
        gpu_instance: Some(9),
        compute_instance: Some(0),
        ..ProcessSample::default()
    };
    let sample = gpu(vec![
        instance(2, 3, Some(0.8), 30 * GIB),
        instance(9, 1, Some(0.0), 7 * GIB),
        instance(10, 1, Some(0.0), 9 << 20),
    ]);
    let (_, _, out, view) = run(&sample, &[&notebook], &[], 60);
    let by_gi = |gi: u32| out.iter().find(|f| f.gpu_instance == gi).unwrap();
    let idle = by_gi(9);
    assert!(idle.allocated && idle.allocated_idle && idle.present);
    assert_eq!(idle.allocated_idle_seconds, 3600.0);
    assert_eq!(idle.owners, ["notebooks"]);
    // A seventh of 7 an hour for an hour: 1, all of it idle.
    assert!((idle.cost_idle - 1.0).abs() < 1e-9, "{}", idle.cost_idle);
    assert_eq!(idle.cost_busy, 0.0);
    assert!((idle.hourly - 1.0).abs() < 1e-9);
    // The busy 3g is 3 of the 7; the rest of the GPU (its idle instances, the slices no
    // instance covers) is idle.
    assert!((by_gi(2).cost_busy - 3.0).abs() < 1e-9);
    assert!((view.busy - 3.0).abs() < 1e-9 && (view.idle - 4.0).abs() < 1e-9);
    // Nothing on GI 10: free capacity, not waste.
    let free = by_gi(10);
    assert!(free.unused && !free.allocated && !free.allocated_idle);
    // The notebook's owner is charged a seventh of the hour, as idle GPU time.
    let [(owner, team, busy, idle)] = view.owners.as_slice() else {
        panic!("one owner: {:?}", view.owners);
    };
    assert_eq!(
        (owner.as_str(), team.as_str(), *busy),
        ("notebooks", "unassigned", 0.0)
    );
    assert!((idle - 3600.0 / 7.0).abs() < 1e-6, "{idle}");
}

#[test]
fn an_instance_a_pod_holds_is_allocated_without_processes() {
    let pod = Allocation {
        namespace: Some("serving".into()),
        pod: Some("llm-0".into()),
        gpu_instance: Some(9),
        compute_instance: Some(0),
        ..Allocation::default()
    };
    let sample = gpu(vec![instance(9, 1, Some(0.0), 9 << 20)]);
    let (_, _, out, _) = run(&sample, &[], &[&pod], 31);
    assert!(out[0].allocated_idle);
    assert_eq!(out[0].holders[0].pod.as_deref(), Some("llm-0"));
}

#[test]
fn without_activity_an_instance_is_never_called_idle() {
    let sample = gpu(vec![instance(9, 1, None, 7 * GIB)]);
    let (_, _, out, view) = run(&sample, &[], &[], 60);
    assert!(out[0].allocated && !out[0].idle_now && !out[0].allocated_idle);
    assert!((out[0].cost_busy - 1.0).abs() < 1e-9);
    assert!((view.busy - 1.0).abs() < 1e-9 && (view.idle - 6.0).abs() < 1e-9);
}

#[test]
fn a_gpu_that_stops_answering_reports_its_instances_as_last_seen() {
    let sample = gpu(vec![
        instance(2, 3, Some(0.5), GIB),
        instance(9, 1, Some(0.0), GIB),
    ]);
    let (mut mig, mut gpu_cost, _, _) = run(&sample, &[], &[], 5);
    let (idle, cost) = (IdleConfig::default(), cost_config());
    let settings = Settings {
        idle: &idle,
        cost: &cost,
    };
    let lost = GpuSample::default();
    let mut out = Vec::new();
    let holders = Holders {
        processes: &[],
        allocations: &[],
    };
    account(
        &mut mig,
        &mut gpu_cost,
        400,
        60.0,
        &lost,
        holders,
        false,
        &settings,
        &mut out,
    );
    let listed: Vec<(u32, bool)> = out.iter().map(|f| (f.gpu_instance, f.present)).collect();
    assert_eq!(listed, [(2, false), (9, false)]);
    assert_eq!(out[0].label(), "MIG 3g.30gb (GI 2, CI 0)");
    // A day later they are forgotten.
    account(
        &mut mig,
        &mut gpu_cost,
        400 + 2 * 86_400,
        0.0,
        &lost,
        holders,
        false,
        &settings,
        &mut out,
    );
    assert!(out.is_empty());
}

#[test]
fn a_mig_gpu_load_is_its_instances_activity_by_share() {
    let sample = gpu(vec![
        instance(2, 3, Some(0.7), 0),
        instance(9, 1, Some(0.0), 0),
    ]);
    assert!((utilization(&sample).unwrap() - 0.3).abs() < 1e-9);
    assert_eq!(utilization(&gpu(vec![instance(9, 1, None, 0)])), None);
    assert_eq!(utilization(&GpuSample::default()), None);
}
