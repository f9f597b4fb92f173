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

/// Compute instance `ci` of GPU instance `gi`, `slices` of its GPU instance's
/// `gi_slices`; memory and activity are the GPU instance's, the same on each of its
/// compute instances (as NVML reports them).
fn compute(gi: u32, ci: u32, slices: u32, gi_slices: u32, active: f64, used: u64) -> MigInstance {
    MigInstance {
        compute_instance: ci,
        uuid: format!("MIG-{gi}-{ci}"),
        slices,
        ..instance(gi, gi_slices, Some(active), used)
    }
}

fn process(pid: u32, user: &str, gi: u32, ci: Option<u32>) -> ProcessSample {
    ProcessSample {
        pid,
        used_memory_bytes: Some(8 * GIB),
        user: Some(user.into()),
        gpu_instance: Some(gi),
        compute_instance: ci,
        ..ProcessSample::default()
    }
}

/// `(owner, busy seconds, idle seconds)` of a view.
fn owner_seconds(view: &CostView) -> Vec<(String, f64, f64)> {
    view.owners
        .iter()
        .map(|(o, _, busy, idle)| (o.clone(), *busy, *idle))
        .collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

/// Asserts the view's owners are `want` (owner, busy seconds, idle seconds), within 1e-6.
fn assert_owners(view: &CostView, want: &[(&str, f64, f64)]) {
    let got = owner_seconds(view);
    assert!(
        got.len() == want.len()
            && got
                .iter()
                .zip(want)
                .all(|(g, w)| g.0 == w.0 && close(g.1, w.1) && close(g.2, w.2)),
        "owners {got:?}, expected {want:?}"
    );
}

#[test]
fn compute_instances_of_one_gpu_instance_charge_each_holder_its_own_share_once() {
    // A 3g split into a 1c and a 2c, busy; alice on the 1c, bob on the 2c.
    let sample = gpu(vec![
        compute(2, 0, 1, 3, 0.8, 30 * GIB),
        compute(2, 1, 2, 3, 0.8, 30 * GIB),
    ]);
    let (alice, bob) = (
        process(1, "alice", 2, Some(0)),
        process(2, "bob", 2, Some(1)),
    );
    let (_, _, out, view) = run(&sample, &[&alice, &bob], &[], 60);
    // Owners by namespace, else user: alice a seventh of the hour, bob two.
    assert_owners(
        &view,
        &[("alice", 3600.0 / 7.0, 0.0), ("bob", 7200.0 / 7.0, 0.0)],
    );
    assert!(out.iter().all(|f| f.allocated && f.owners.len() == 1));
    // The GPU's cost: the 3g's three sevenths busy, the four not cut into instances idle.
    assert!(close(view.busy, 3.0) && close(view.idle, 4.0), "{view:?}");

    // A pod given the GPU instance without a compute instance (GKE's `nvidia0/gi2`) holds
    // both, and a process of its own on the 1c: charged the 3g's three sevenths, once.
    let pod = Allocation {
        user: Some("carol".into()),
        gpu_instance: Some(2),
        ..Allocation::default()
    };
    let carol = process(3, "carol", 2, Some(0));
    let (_, _, out, view) = run(&sample, &[&carol], &[&pod], 60);
    assert_owners(&view, &[("carol", 3.0 * 3600.0 / 7.0, 0.0)]);
    assert!(out.iter().all(|f| f.allocated && f.owners == ["carol"]));
    // Two owners sharing the 2c split it; with the 1c's owner the three sevenths add up.
    let dave = process(4, "dave", 2, Some(1));
    let (_, _, _, view) = run(&sample, &[&alice, &bob, &dave], &[], 60);
    let total: f64 = owner_seconds(&view).iter().map(|o| o.1 + o.2).sum();
    assert!(close(total, 3.0 * 3600.0 / 7.0), "{:?}", view.owners);
}

#[test]
fn a_compute_instance_beside_a_held_one_is_free_not_held_by_their_shared_memory() {
    // Alice's notebook holds 30 GiB of the 3g on its 1c and computes nothing; the 2c beside
    // it runs nothing. The memory NVML reports on both is the GPU instance's: alice's.
    let sample = gpu(vec![
        compute(2, 0, 1, 3, 0.0, 30 * GIB),
        compute(2, 1, 2, 3, 0.0, 30 * GIB),
    ]);
    let alice = process(1, "alice", 2, Some(0));
    let (_, _, out, view) = run(&sample, &[&alice], &[], 60);
    let (one, two) = (&out[0], &out[1]);
    assert!(one.allocated && one.allocated_idle && one.owners == ["alice"]);
    assert!(
        !two.allocated && !two.allocated_idle && two.unused && two.owners.is_empty(),
        "{two:?}"
    );
    // Alice is charged her 1c, idle; nobody holds the 2c, so nobody is charged it (the
    // GPU's idle cost has it).
    assert_owners(&view, &[("alice", 0.0, 3600.0 / 7.0)]);
    assert!(close(view.idle, 7.0) && view.busy == 0.0);
    // The placement counts it free by the same rule, given the GPU's processes.
    let idle = IdleConfig::default();
    assert!(allocated(&sample.mig_instances[0], &[&alice], &[], &idle));
    assert!(!allocated(&sample.mig_instances[1], &[&alice], &[], &idle));
    // A process on another GPU instance does not explain this one's memory.
    let elsewhere = process(2, "bob", 9, Some(0));
    assert!(allocated(
        &sample.mig_instances[1],
        &[&elsewhere],
        &[],
        &idle
    ));
    // Memory that no holder of the GPU instance explains (a process the host cannot
    // see) marks every compute instance of it allocated: which one holds it is unknown.
    let (_, _, out, view) = run(&sample, &[], &[], 60);
    assert!(
        out.iter()
            .all(|f| f.allocated && !f.unused && f.owners.is_empty())
    );
    assert!(view.owners.is_empty());
}

#[test]
fn instances_created_and_destroyed_are_charged_each_interval_they_close() {
    // A sample a minute; the 2g exists in the samples of minutes 10 to 40. Each interval
    // between two samples is charged by the state at its end, as for a whole GPU: the
    // 2g's holder gets the 31 intervals ending at minutes 10–40, and every second of the
    // GPU is costed once, busy or idle.
    let (idle, cost) = (IdleConfig::default(), cost_config());
    let settings = Settings {
        idle: &idle,
        cost: &cost,
    };
    let base = instance(9, 1, Some(0.0), 9 << 20);
    let created = instance(3, 2, Some(0.9), 20 * GIB);
    let erin = process(5, "erin", 3, Some(0));
    let (mut mig, mut gpu_cost, mut out) = (MigState::default(), CostState::default(), Vec::new());
    let mut view = CostView::default();
    for minute in 0..=60 {
        let mut instances = vec![base.clone()];
        if (10..=40).contains(&minute) {
            instances.push(created.clone());
        }
        let processes: &[&ProcessSample] = if (10..=40).contains(&minute) {
            &[&erin]
        } else {
            &[]
        };
        let holders = Holders {
            processes,
            allocations: &[],
        };
        let seconds = if minute == 0 { 0.0 } else { 60.0 };
        view = account(
            &mut mig,
            &mut gpu_cost,
            minute * 60,
            seconds,
            &gpu(instances),
            holders,
            true,
            &settings,
            &mut out,
        );
    }
    assert_owners(&view, &[("erin", 31.0 * 60.0 * 2.0 / 7.0, 0.0)]);
    assert!(close(view.busy, 31.0 / 60.0 * 2.0), "{view:?}");
    assert!(close(view.busy + view.idle, 7.0), "{view:?}");
}

#[test]
fn a_dead_process_in_an_idle_instance_is_a_ghost_named_with_its_instance() {
    use crate::engine::idle::{IdleState, update};
    use crate::model::Liveness;
    // NVML gives no per-process utilization in MIG mode: `sm_utilization` is empty, and
    // the GPU instance's GPM SM activity says whether anything ran in it.
    let dead = |pid: u32, gi: u32| ProcessSample {
        pid,
        used_memory_bytes: Some(5 * GIB),
        liveness: Liveness::Orphaned,
        gpu_instance: Some(gi),
        compute_instance: Some(0),
        ..ProcessSample::default()
    };
    let (idle_gi, busy_gi, no_gpm) = (dead(11, 9), dead(12, 2), dead(13, 10));
    let live_beside = ProcessSample {
        liveness: Liveness::Running,
        ..dead(14, 2)
    };
    let sample = gpu(vec![
        instance(2, 3, Some(0.6), 30 * GIB),
        instance(9, 1, Some(0.004), 5 * GIB),
        instance(10, 1, None, 5 * GIB),
    ]);
    let mut state = IdleState::default();
    let processes = [&idle_gi, &busy_gi, &no_gpm, &live_beside];
    let mut last = None;
    for minute in 0..=30 {
        let found = update(
            &mut state,
            minute * 60,
            &sample,
            &processes,
            &[],
            &IdleConfig::default(),
        );
        if minute < 30 {
            assert!(found.ghosts.is_empty(), "not before the window: {minute}");
        }
        last = Some(found);
    }
    let ghosts = last.expect("30 steps").ghosts;
    // Only the one in the GPU instance without SM activity: a live process computing
    // beside a dead one keeps it from being called idle, and no GPM reading is no evidence.
    assert_eq!(ghosts.iter().map(|g| g.pid).collect::<Vec<_>>(), [11]);
    let ghost = &ghosts[0];
    assert_eq!(ghost.idle_seconds, 1800.0);
    assert_eq!(
        (ghost.gpu_instance, ghost.compute_instance),
        (Some(9), Some(0))
    );
    assert_eq!(ghost.profile.as_deref(), Some("1g.10gb"));
    assert_eq!(ghost.mig_uuid.as_deref(), Some("MIG-9"));
    assert_eq!(
        ghost.instance_label().as_deref(),
        Some("MIG 1g.10gb (GI 9, CI 0)")
    );
}
