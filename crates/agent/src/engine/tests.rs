//! The engine over the default simulated fleet: every fault family ends up in the findings.

use chrono::{DateTime, Utc};

use super::*;
use crate::config::SimulationConfig;
use crate::source::simulate::Fleet;

fn start() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-03-01T00:00:00Z")
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_default()
}

/// Runs the default fleet for `hours` at `step` seconds; returns every step's findings.
fn run(hours: f64, step: f64) -> (Engine, Vec<Findings>) {
    let mut fleet = Fleet::new(&SimulationConfig::default(), start());
    let mut engine = Engine::new(EngineConfig::default());
    let mut all = Vec::new();
    let mut t = 0.0;
    while t < hours * 3600.0 {
        t += step;
        fleet.advance(step);
        all.push(engine.step(&fleet.snapshot()));
    }
    (engine, all)
}

fn first_step(all: &[Findings], gpu: usize, kind: &str) -> Option<usize> {
    all.iter()
        .position(|f| f.gpus[gpu].kinds(0.7).contains(&kind))
}

#[test]
fn default_fleet_findings() {
    let (_, all) = run(12.0, 60.0);
    let last = all.last().unwrap();
    // GPU 1, memory wear: at risk well before its first uncorrectable error.
    let warned = first_step(&all, 1, "failure_risk").expect("memory wear is warned");
    let failed = all
        .iter()
        .position(|f| f.gpus[1].new_hardware_xids.contains(&48))
        .expect("memory wear fails at its horizon");
    assert!(
        warned < failed,
        "warned at step {warned}, failed at {failed}"
    );
    // By hour 12 its row remapping has failed too: a known-bad state.
    assert_eq!(last.gpus[1].risk.rule.as_deref(), Some("row_remap_failure"));
    assert!(
        all.iter()
            .any(|f| f.gpus[1].risk.rule.as_deref() == Some("uncorrectable_memory_error"))
    );
    let top = last.gpus[1]
        .risk
        .top(3)
        .map(|c| &*c.feature)
        .collect::<Vec<_>>();
    // Its reasons are memory wear's: errors and remaps first, and the hardware XIDs its
    // uncorrectable errors raised (XID 48, a double-bit ECC error).
    let memory = |f: &&str| f.starts_with("ecc_") || f.starts_with("remap");
    assert!(
        top.first().is_some_and(memory) && top.iter().all(|f| memory(f) || *f == "xid_hardware_7d"),
        "{top:?}"
    );
    // GPU 4 fell off the bus: lost, with its rule.
    assert!(last.gpus[4].lost);
    assert!(last.gpus[4].risk.score >= 0.9);
    assert_eq!(last.gpus[4].risk.rule.as_deref(), Some("fell_off_bus"));
    // GPU 5 allocated but idle; GPU 6 holds a ghost, with its owner.
    assert!(last.gpus[5].idle.allocated_idle);
    assert_eq!(last.gpus[6].idle.ghosts.len(), 1);
    assert!(last.gpus[6].idle.ghosts[0].user.is_some());
    // GPU 0 healthy throughout.
    assert!(all.iter().all(|f| f.gpus[0].risk.score < 0.5));
    assert!(all.iter().all(|f| !f.gpus[0].lost));
}

#[test]
fn state_survives_a_round_trip_through_json() {
    let (engine, _) = run(2.0, 60.0);
    let json = serde_json::to_string(&engine.state).unwrap();
    let back: EngineState = serde_json::from_str(&json).unwrap();
    // Compare as JSON: a failing assert_eq on the state would print megabytes.
    assert!(
        serde_json::to_string(&back).unwrap() == json,
        "state changed in a round trip"
    );
}

#[test]
fn a_restarted_engine_continues_where_it_stopped() {
    let mut fleet = Fleet::new(&SimulationConfig::default(), start());
    let mut engine = Engine::new(EngineConfig::default());
    for _ in 0..120 {
        fleet.advance(60.0);
        engine.step(&fleet.snapshot());
    }
    let mut resumed = Engine::with_state(EngineConfig::default(), engine.state.clone());
    fleet.advance(60.0);
    let snap = fleet.snapshot();
    assert!(
        resumed.step(&snap) == engine.step(&snap),
        "a resumed engine finds the same"
    );
}

#[test]
fn the_state_stays_small() {
    let (engine, _) = run(24.0 * 7.0, 300.0);
    let bytes = serde_json::to_vec(&engine.state).unwrap().len();
    // Eight GPUs, a full week of windows.
    assert!(bytes < 4 << 20, "{bytes} bytes");
}

#[test]
fn an_outage_attributes_no_time_but_a_slow_cadence_does() {
    let mut fleet = Fleet::new(&SimulationConfig::default(), start());
    let mut engine = Engine::new(EngineConfig::default());
    let day_seconds = |engine: &Engine, at: i64| -> f64 {
        let state = engine.state.gpus.values().next().unwrap();
        state.windows.last_day(at).seconds
    };
    for _ in 0..30 {
        fleet.advance(60.0);
        engine.step(&fleet.snapshot());
    }
    let before = day_seconds(&engine, fleet.now().timestamp());
    // An hour with no samples (the agent was down), then one more sample.
    fleet.advance(3600.0);
    engine.step(&fleet.snapshot());
    let after = day_seconds(&engine, fleet.now().timestamp());
    assert_eq!(after, before, "the hole counts for nothing");

    // A source that always samples every 50 minutes (the simulator at 600x) is no hole.
    let mut slow = Engine::new(EngineConfig::default());
    let mut fleet = Fleet::new(&SimulationConfig::default(), start());
    for _ in 0..10 {
        fleet.advance(3000.0);
        slow.step(&fleet.snapshot());
    }
    assert!(day_seconds(&slow, fleet.now().timestamp()) >= 8.0 * 3000.0);
}

/// A snapshot at `minutes` after the start listing `gpus` (UUID, temperature) in that order.
fn listing(minutes: i64, gpus: &[(&str, f64)]) -> Snapshot {
    Snapshot {
        at: start() + chrono::TimeDelta::minutes(minutes),
        gpus: gpus
            .iter()
            .enumerate()
            .map(|(i, (uuid, temperature))| GpuSample {
                index: i as u32,
                uuid: (*uuid).to_string(),
                up: true,
                temperature_celsius: Some(*temperature),
                ..GpuSample::default()
            })
            .collect(),
        ..Snapshot::default()
    }
}

#[test]
fn gpus_are_followed_by_uuid_whatever_their_order_until_forgotten() {
    let mut engine = Engine::new(EngineConfig::default());
    let all = [("GPU-a", 40.0), ("GPU-b", 50.0), ("GPU-c", 60.0)];
    engine.step(&listing(0, &all));
    // Listed in another order, GPU-b missing: findings follow the snapshot's order, each
    // with its own reading, then the missing GPU.
    let found = engine.step(&listing(1, &[("GPU-c", 61.0), ("GPU-a", 41.0)]));
    let seen: Vec<(&str, bool, Option<f64>)> = found
        .gpus
        .iter()
        .map(|g| (g.uuid.as_str(), g.up, g.readings.temperature_celsius))
        .collect();
    assert_eq!(
        seen,
        [
            ("GPU-c", true, Some(61.0)),
            ("GPU-a", true, Some(41.0)),
            ("GPU-b", false, None)
        ]
    );
    // Missing past the vanishing time: lost; missing past a week: forgotten, and the
    // others keep their history.
    let lost = engine.step(&listing(10, &[("GPU-a", 42.0), ("GPU-c", 62.0)]));
    assert!(lost.gpus[2].lost, "{:?}", lost.gpus[2].uuid);
    let week = window::WEEK / 60;
    let later = engine.step(&listing(week + 2, &[("GPU-c", 63.0), ("GPU-a", 43.0)]));
    let uuids: Vec<&str> = later.gpus.iter().map(|g| g.uuid.as_str()).collect();
    assert_eq!(uuids, ["GPU-c", "GPU-a"]);
    assert_eq!(engine.state.gpus.len(), 2);
    assert!(engine.state.gpus.get("GPU-b").is_none());
    let a = engine.state.gpus.get("GPU-a").unwrap();
    assert_eq!(a.windows.week.buckets().map(|b| b.samples).sum::<u32>(), 4);
    // A GPU coming back after being forgotten starts afresh, listed where it is.
    let back = engine.step(&listing(week + 3, &[("GPU-b", 52.0), ("GPU-a", 44.0)]));
    let seen: Vec<(&str, bool)> = back.gpus.iter().map(|g| (g.uuid.as_str(), g.up)).collect();
    assert_eq!(seen, [("GPU-b", true), ("GPU-a", true), ("GPU-c", false)]);
    let b = engine.state.gpus.get("GPU-b").unwrap();
    assert_eq!(b.windows.week.buckets().map(|b| b.samples).sum::<u32>(), 1);
}

#[test]
fn recycled_findings_come_out_as_fresh_ones() {
    // The default fleet (failures, XIDs, evidence and rules) and then a snapshot that lists
    // fewer GPUs, in another order: an engine writing over handed-back findings finds
    // exactly what one allocating new findings finds.
    let mut fleet = Fleet::new(&SimulationConfig::default(), start());
    let mut fresh = Engine::new(EngineConfig::default());
    let mut recycling = Engine::new(EngineConfig::default());
    let mut differing = 0;
    for step in 0..(8 * 60) {
        fleet.advance(60.0);
        let mut snapshot = fleet.snapshot();
        if step % 50 == 49 {
            snapshot.gpus.reverse();
            snapshot.gpus.truncate(snapshot.gpus.len() / 2);
        }
        let expected = fresh.step(&snapshot);
        let found = recycling.step(&snapshot);
        differing += usize::from(found != expected);
        recycling.recycle(found);
    }
    assert_eq!(differing, 0);
    assert!(
        !recycling.spare.is_empty(),
        "the last findings are kept for reuse"
    );
}

#[test]
fn findings_recycled_steps_later_come_out_as_fresh_ones() {
    // As a replay hands them back: several steps late, so that each verdict written over
    // was published from an older state of its hold, or from another GPU's (the snapshot
    // reordered and cut short now and then).
    let mut fleet = Fleet::new(&SimulationConfig::default(), start());
    let mut fresh = Engine::new(EngineConfig::default());
    let mut recycling = Engine::new(EngineConfig::default());
    let mut in_flight = std::collections::VecDeque::new();
    let mut differing = 0;
    for step in 0..(8 * 60) {
        fleet.advance(60.0);
        let mut snapshot = fleet.snapshot();
        if step % 37 == 36 {
            snapshot.gpus.rotate_left(3);
            snapshot.gpus.truncate(snapshot.gpus.len() - 2);
        }
        let expected = fresh.step(&snapshot);
        let found = recycling.step(&snapshot);
        differing += usize::from(found != expected);
        in_flight.push_back(found);
        if in_flight.len() > 7
            && let Some(old) = in_flight.pop_front()
        {
            recycling.recycle(old);
        }
    }
    assert_eq!(differing, 0);
}
