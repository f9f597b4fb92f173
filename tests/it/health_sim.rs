//! The health verdicts on the simulator's fault families: each family shows in the
//! component it concerns, with the action NVIDIA's guidance gives, while its healthy
//! neighbours stay healthy; and `replay` of a recording reaches the verdicts the live
//! engine reached.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use gpu_sentinel::config::SimulationConfig;
use gpu_sentinel::engine::health::{Action, State};
use gpu_sentinel::engine::{Engine, EngineConfig, Findings};
use gpu_sentinel::source::simulate::Fleet;

fn start() -> DateTime<Utc> {
    "2026-03-02T00:00:00Z".parse().expect("a time")
}

/// For each (GPU, component, state, action) seen, the first hour it was seen.
type Seen = BTreeMap<(u32, String, State, Action), f64>;

/// What was seen over `hours` of the fleet at 5-minute collections, and the last findings.
fn timeline(config: &SimulationConfig, hours: f64) -> (Seen, Findings) {
    let mut fleet = Fleet::new(config, start());
    let mut engine = Engine::new(EngineConfig::default());
    let mut seen = BTreeMap::new();
    let mut last = None;
    while fleet.elapsed_seconds() < hours * 3600.0 {
        fleet.advance(300.0);
        let findings = engine.step(&fleet.snapshot());
        let hour = fleet.elapsed_seconds() / 3600.0;
        for g in &findings.gpus {
            for c in &g.health.components {
                seen.entry((g.index, c.component.to_string(), c.state, c.action))
                    .or_insert(hour);
            }
        }
        last = Some(findings);
    }
    (seen, last.expect("some steps"))
}

/// The first hour GPU `gpu`'s `component` was in `state` asking for `action`.
fn first(seen: &Seen, gpu: u32, component: &str, state: State, action: Action) -> Option<f64> {
    seen.get(&(gpu, component.to_string(), state, action))
        .copied()
}

#[test]
fn the_default_fleets_faults_show_in_their_components() {
    let (seen, last) = timeline(&SimulationConfig::default(), 12.0);
    use Action::*;
    use State::*;
    // GPU 1, memory wear: a pending remap (reset), then an uncorrectable error (XID 48,
    // reset), then a failed remap (inspect: the RMA path).
    let pending = first(&seen, 1, "memory", Degraded, ResetGpu).expect("a pending remap");
    let failed = first(&seen, 1, "memory", Unhealthy, InspectHardware).expect("a failed remap");
    assert!(pending < failed, "{pending} h, {failed} h");
    assert!(
        first(&seen, 1, "xid", Unhealthy, ResetGpu).is_some(),
        "XID 48"
    );
    // GPU 2, a PCIe link: replays, then trained down (reseat or replace: inspect).
    assert!(first(&seen, 2, "pcie", Degraded, InspectHardware).is_some());
    // GPU 3, cooling: slowdown now, then most of the hour.
    let slow = first(&seen, 3, "thermal", Degraded, InspectHardware).expect("slowdown");
    let hot = first(&seen, 3, "thermal", Unhealthy, InspectHardware).expect("mostly slowed");
    assert!(slow < hot);
    // GPU 4 falls off the bus at 8 h: no warning before, then drain and reboot.
    let lost = first(&seen, 4, "driver", Unhealthy, DrainAndReboot).expect("lost");
    assert!((8.0..8.5).contains(&lost), "{lost} h");
    assert!(
        first(&seen, 4, "xid", Unhealthy, DrainAndReboot).is_some(),
        "XID 79"
    );
    for component in ["memory", "thermal", "power", "pcie", "nvlink"] {
        assert!(
            !seen
                .keys()
                .any(|(g, c, s, _)| *g == 4 && c == component && *s != Healthy),
            "GPU 4's {component} had no warning to give"
        );
    }
    // The node: unhealthy, and the lost GPU's reboot goes first.
    assert_eq!(
        (last.health.state, last.health.action),
        (Unhealthy, DrainAndReboot)
    );
    // GPU 0 and GPU 7 run healthy throughout, every component.
    for gpu in [0, 7] {
        let bad: Vec<_> = seen
            .keys()
            .filter(|(g, _, s, a)| *g == gpu && (*s != Healthy || *a != None))
            .collect();
        assert!(bad.is_empty(), "GPU {gpu}: {bad:?}");
    }
}

#[test]
fn nvlink_gsp_and_power_faults_show_in_theirs() {
    let config = SimulationConfig {
        gpus: 4,
        faults: vec![
            "nvlink".into(),
            "gsp_firmware".into(),
            "power_delivery".into(),
        ],
        ..SimulationConfig::default()
    };
    let (seen, _) = timeline(&config, 10.0);
    use Action::*;
    use State::*;
    // GPU 1, NVLink: errors on a link (degraded), then XID 74 (reset).
    assert!(
        first(&seen, 1, "nvlink", Degraded, None).is_some()
            || first(&seen, 1, "nvlink", Degraded, ResetGpu).is_some(),
        "NVLink errors: {seen:?}"
    );
    assert!(
        first(&seen, 1, "xid", Unhealthy, ResetGpu).is_some(),
        "XID 74"
    );
    // GPU 2, GSP firmware: slow and failing NVML calls (reset), then XID 119/120 and gone.
    assert!(
        first(&seen, 2, "driver", Degraded, ResetGpu).is_some(),
        "slow calls"
    );
    assert!(
        first(&seen, 2, "driver", Unhealthy, DrainAndReboot).is_some(),
        "gone"
    );
    // GPU 3, power delivery: the power brake, then most of the hour, then off the bus.
    let brake = first(&seen, 3, "power", Degraded, InspectHardware).expect("brake");
    if let Some(failing) = first(&seen, 3, "power", Unhealthy, InspectHardware) {
        assert!(brake <= failing);
    }
    assert!(
        first(&seen, 3, "xid", Unhealthy, DrainAndReboot).is_some(),
        "XID 79"
    );
    // GPU 0 stays healthy.
    assert!(
        !seen.keys().any(|(g, _, s, _)| *g == 0 && *s != Healthy),
        "GPU 0 stays healthy"
    );
}

#[test]
fn replay_and_the_live_engine_reach_the_same_verdicts() {
    // The same snapshots stepped twice, once through a JSONL round trip as `record` writes
    // and `replay` reads them: the verdicts agree to the reason and the second.
    let mut fleet = Fleet::new(&SimulationConfig::default(), start());
    let mut live = Engine::new(EngineConfig::default());
    let mut replayed = Engine::new(EngineConfig::default());
    for _ in 0..120 {
        fleet.advance(300.0);
        let snapshot = fleet.snapshot();
        let line = serde_json::to_string(&snapshot).expect("a JSONL line");
        let read = serde_json::from_str(&line).expect("reads back");
        let a = live.step(&snapshot);
        let b = replayed.step(&read);
        assert_eq!(a.health, b.health);
        for (x, y) in a.gpus.iter().zip(&b.gpus) {
            assert_eq!(x.health, y.health);
        }
    }
}

/// Through the binary: a simulated NVLink fault on GPU 1 (its link drawn by the seed), and
/// the risk alert and the nvlink verdict name the link whose counters grew most, as
/// `/api/v1/gpus` lists every link's counters. The fault fails a simulated day in (72 s
/// here), so its errors climb for hours before the XID that ends it.
#[test]
fn an_nvlink_faults_alert_and_verdict_name_the_failing_link() {
    use crate::common::{Agent, temp_file};
    use std::time::Duration;
    let config = temp_file(
        "nvlink-link-config.toml",
        "[collect]\nkmsg = \"off\"\n[simulation]\nfaults = [\"nvlink\"]\nfault_hours = 24.0\nspeed = 1200.0\nseed = 7\n",
    );
    let agent = Agent::start(
        &["--simulate", "--config", &config.display().to_string()],
        &[],
    );
    let json = |path: &str| -> serde_json::Value {
        serde_json::from_slice(&agent.get(path).body).expect("JSON")
    };
    let mut description = String::new();
    agent.wait_until(Duration::from_secs(90), |_| {
        let alerts = json("/api/v1/alerts");
        let risk = alerts["alerts"].as_array().into_iter().flatten().find(|a| {
            a["labels"]["alertname"] == "GpuFailureRiskHigh" && a["labels"]["gpu"] == "1"
        });
        description = risk
            .and_then(|a| a["annotations"]["description"].as_str())
            .unwrap_or_default()
            .to_string();
        description.contains("on link")
    });
    // The link whose counters the simulated fault drives: the most errors of GPU 1's links.
    let gpus = json("/api/v1/gpus");
    let gpu = gpus["gpus"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|g| g["index"] == 1)
        .expect("GPU 1");
    let errors = |l: &serde_json::Value| {
        ["crc_flit", "crc_data", "replay", "recovery"]
            .iter()
            .filter_map(|k| l[*k].as_u64())
            .sum::<u64>()
    };
    let worst = gpu["nvlink"]
        .as_array()
        .into_iter()
        .flatten()
        .max_by_key(|l| errors(l))
        .expect("GPU 1 has NVLinks");
    let link = worst["link"].as_u64().expect("a link number");
    assert!(errors(worst) > 0, "{worst}");
    assert!(
        description.contains(&format!("on link {link} ")),
        "the risk alert names link {link}: {description}"
    );
    // The nvlink verdict, once it is degraded by the link's errors, names the same link.
    let mut reason = String::new();
    agent.wait_until(Duration::from_secs(60), |_| {
        let health = json("/api/v1/health");
        reason = health["gpus"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|g| g["index"] == 1)
            .flat_map(|g| g["components"].as_array().cloned().unwrap_or_default())
            .find(|c| c["component"] == "nvlink" && c["state"] != "healthy")
            .and_then(|c| c["reason"].as_str().map(str::to_string))
            .unwrap_or_default();
        reason.contains("errors")
    });
    assert!(
        reason.contains(&format!("most on link {link}")),
        "the nvlink verdict names link {link}: {reason}"
    );
}
