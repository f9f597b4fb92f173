//! The anchors the shipped model must honour (issue: "anchor points from operators'
//! practice"), each run through the whole engine on a synthetic history: a week of
//! healthy baseline on four GPUs of a node, then one GPU's last day changed.

use chrono::{DateTime, TimeDelta, Utc};

use super::*;
use crate::engine::{Engine, EngineConfig, GpuFindings};
use crate::model::{
    ClockEvents, Ecc, GpuSample, Pcie, RemappedRows, Snapshot, Utilization, XidEvent, XidSource,
};

/// Minutes between synthetic samples.
const STEP_MIN: i64 = 5;
const GPUS: u32 = 4;

fn at(minute: i64) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-03-01T00:00:00Z")
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_default()
        + TimeDelta::minutes(minute)
}

/// A busy, healthy H100 at minute `m`: 90% utilization, 65 °C, HBM 5 °C above.
fn healthy(gpu: u32, m: i64) -> GpuSample {
    let wobble = ((m + i64::from(gpu) * 7) % 11) as f64 / 10.0;
    GpuSample {
        index: gpu,
        uuid: format!("GPU-{gpu}"),
        name: "NVIDIA H100 80GB HBM3".into(),
        up: true,
        utilization: Utilization {
            gpu: Some(0.88 + 0.01 * wobble),
            ..Utilization::default()
        },
        temperature_celsius: Some(65.0 + wobble),
        memory_temperature_celsius: Some(70.0 + wobble),
        power_watts: Some(560.0 + 5.0 * wobble),
        power_limit_watts: Some(700.0),
        clock_events: Some(ClockEvents(0)),
        ecc: Ecc {
            corrected_volatile: Some(0),
            uncorrected_volatile: Some(0),
            corrected_aggregate: Some(0),
            uncorrected_aggregate: Some(0),
        },
        pcie: Pcie {
            replay_counter: Some(3),
            ..Pcie::default()
        },
        remapped_rows: Some(RemappedRows::default()),
        collect_seconds: 0.004,
        ..GpuSample::default()
    }
}

/// Runs `days` of history; `change` edits GPU 0's sample (and may add XIDs) at each minute.
/// Returns GPU 0's findings at every step.
fn run(days: i64, mut change: impl FnMut(i64, &mut GpuSample, &mut Vec<u32>)) -> Vec<GpuFindings> {
    let mut engine = Engine::new(EngineConfig::default());
    let mut out = Vec::new();
    let mut m = 0;
    while m <= days * 24 * 60 {
        let mut gpus: Vec<GpuSample> = (0..GPUS).map(|g| healthy(g, m)).collect();
        let mut xids = Vec::new();
        change(m, &mut gpus[0], &mut xids);
        let events = xids
            .into_iter()
            .map(|xid| XidEvent {
                at: at(m),
                gpu: Some(0),
                uuid: Some("GPU-0".into()),
                pci_bus_id: None,
                xid,
                source: XidSource::Kmsg,
                message: None,
            })
            .collect();
        let snapshot = Snapshot {
            at: at(m),
            gpus,
            events,
            ..Snapshot::default()
        };
        let findings = engine.step(&snapshot);
        out.extend(findings.gpus.into_iter().filter(|g| g.uuid == "GPU-0"));
        m += STEP_MIN;
    }
    out
}

const LAST_DAY: i64 = 7 * 24 * 60;

fn contribution(f: &GpuFindings, feature: &str) -> f64 {
    f.risk
        .contributions
        .iter()
        .find(|c| c.feature == feature)
        .map_or(0.0, |c| c.contribution)
}

fn max_score(all: &[GpuFindings]) -> f64 {
    all.iter().map(|f| f.risk.score).fold(0.0, f64::max)
}

#[test]
fn shipped_model_parses_and_names_known_features_with_reasons() {
    let model = RiskModel::parse(SHIPPED).unwrap();
    assert_eq!(
        model.weights.len(),
        FEATURES.len(),
        "every feature is weighed"
    );
    for w in &model.weights {
        assert!(!w.reason.trim().is_empty(), "{} has no reason", w.feature);
    }
}

#[test]
fn unknown_features_are_refused() {
    let err = RiskModel::parse(
        "bias = 0.0\n[[weight]]\nfeature = \"vibes\"\nweight = 1.0\nreason = \"x\"\n",
    )
    .unwrap_err();
    assert!(err.to_string().contains("vibes"));
}

#[test]
fn a_quiet_busy_gpu_scores_near_the_bias() {
    let all = run(8, |_, _, _| {});
    assert!(max_score(&all) < 0.05, "{}", max_score(&all));
}

/// Spreads `n` corrected errors evenly over the last day.
fn corrected_in_last_day(n: u64) -> impl FnMut(i64, &mut GpuSample, &mut Vec<u32>) {
    move |m, s, _| {
        let into = (m - LAST_DAY).max(0);
        let count = (n * into as u64) / (24 * 60);
        s.ecc.corrected_volatile = Some(count);
        s.ecc.corrected_aggregate = Some(count);
    }
}

#[test]
fn corrected_ecc_rising_from_zero_past_ten_a_day_is_a_warning() {
    let all = run(8, corrected_in_last_day(11));
    let last = all.last().unwrap();
    assert!(last.risk.score >= 0.7, "{:?}", last.risk);
    assert_eq!(
        last.risk.top(1).next().unwrap().feature,
        "ecc_corrected_per_day"
    );
    // A single error, or a handful, is not.
    assert!(max_score(&run(8, corrected_in_last_day(1))) < 0.1);
    assert!(max_score(&run(8, corrected_in_last_day(4))) < 0.5);
}

#[test]
fn a_few_old_aggregate_errors_that_never_grow_stay_well_under_half() {
    let all = run(8, |_, s, _| {
        s.ecc.corrected_aggregate = Some(17);
        s.ecc.uncorrected_aggregate = Some(0);
        s.ecc.corrected_volatile = Some(0);
        s.remapped_rows = Some(RemappedRows {
            correctable: 2,
            ..RemappedRows::default()
        });
    });
    assert!(max_score(&all) < 0.1, "{}", max_score(&all));
}

#[test]
fn a_bursty_busy_gpu_with_brief_peaks_within_spec_stays_well_under_half() {
    let all = run(8, |m, s, _| {
        let burst = m % 60 < 10;
        let util = if burst {
            1.0
        } else {
            0.2 + 0.4 * ((m % 7) as f64 / 7.0)
        };
        s.utilization.gpu = Some(util);
        s.power_watts = Some(70.0 + 620.0 * util);
        s.temperature_celsius = Some(if burst { 84.0 } else { 62.0 });
        s.memory_temperature_celsius = Some(if burst { 92.0 } else { 68.0 });
        if burst {
            s.clock_events = Some(ClockEvents(ClockEvents::SW_POWER_CAP));
        }
    });
    assert!(max_score(&all) < 0.1, "{}", max_score(&all));
}

#[test]
fn memory_hotter_than_the_gpu_by_more_than_15_degrees_contributes() {
    let gap = |degrees: f64| {
        move |m: i64, s: &mut GpuSample, _: &mut Vec<u32>| {
            if m >= LAST_DAY {
                s.memory_temperature_celsius = s.temperature_celsius.map(|t| t + degrees);
            }
        }
    };
    let at_14 = run(8, gap(14.0));
    let at_22 = run(8, gap(22.0));
    assert_eq!(
        contribution(at_14.last().unwrap(), "memory_temperature_gap"),
        0.0
    );
    assert!(contribution(at_22.last().unwrap(), "memory_temperature_gap") > 0.5);
    assert!(at_22.last().unwrap().risk.score > at_14.last().unwrap().risk.score);
    // A gap near 30 °C is a warning by itself.
    assert!(run(8, gap(29.0)).last().unwrap().risk.score >= 0.7);
}

#[test]
fn abnormal_pcie_replay_rates_contribute() {
    // 300 replays an hour through the last day, against a node replaying a few a day.
    let all = run(8, |m, s, _| {
        let into = (m - LAST_DAY).max(0) as u64;
        s.pcie.replay_counter = Some(3 + 5 * into);
    });
    let last = all.last().unwrap();
    for feature in [
        "pcie_replays_per_hour",
        "pcie_replays_vs_baseline",
        "pcie_replays_vs_peers",
    ] {
        assert!(
            contribution(last, feature) > 0.5,
            "{feature}: {:?}",
            last.risk
        );
    }
    assert!(last.risk.score >= 0.7, "{:?}", last.risk);
    // One burst of a hundred in a day is ordinary.
    let burst = run(8, |m, s, _| {
        if m >= LAST_DAY + 600 {
            s.pcie.replay_counter = Some(103);
        }
    });
    assert!(max_score(&burst) < 0.1, "{}", max_score(&burst));
}

#[test]
fn nvlink_power_brake_and_slow_calls_contribute() {
    let nvlink = run(8, |m, s, _| {
        let into = (m - LAST_DAY).max(0) as u64;
        s.nvlink = vec![crate::model::NvLinkErrors {
            link: 3,
            crc_flit: into,
            replay: into,
            ..Default::default()
        }];
    });
    assert!(contribution(nvlink.last().unwrap(), "nvlink_errors_per_hour") > 1.0);
    let brake = run(8, |m, s, _| {
        if m >= LAST_DAY && m % 30 < 5 {
            s.clock_events = Some(ClockEvents(
                ClockEvents::HW_POWER_BRAKE_SLOWDOWN | ClockEvents::HW_SLOWDOWN,
            ));
            s.power_watts = Some(300.0);
        }
    });
    let last = brake.last().unwrap();
    assert!(
        contribution(last, "power_brake_24h") > 1.0,
        "{:?}",
        last.risk
    );
    assert!(contribution(last, "power_erratic") > 0.0, "{:?}", last.risk);
    let gsp = run(8, |m, s, _| {
        if m >= LAST_DAY && m % 20 == 0 {
            s.collect_seconds = 2.0;
            s.failed_calls = 2;
        }
    });
    let last = gsp.last().unwrap();
    for feature in [
        "collect_seconds_level",
        "collect_slowdown",
        "failed_calls_per_collection",
    ] {
        assert!(
            contribution(last, feature) > 0.3,
            "{feature}: {:?}",
            last.risk
        );
    }
}

#[test]
fn known_bad_states_score_at_least_0_9_at_once() {
    let first_bad = 7 * 24 * 60 + 300;
    let step_of = |all: &[GpuFindings], minute: i64| all[(minute / STEP_MIN) as usize].clone();

    let remap = run(8, |m, s, _| {
        if m >= first_bad {
            s.remapped_rows = Some(RemappedRows {
                failure: true,
                ..RemappedRows::default()
            });
        }
    });
    let f = step_of(&remap, first_bad);
    assert!(f.risk.score >= 0.9 && f.risk.rule.as_deref() == Some("row_remap_failure"));
    assert!(step_of(&remap, first_bad - STEP_MIN).risk.score < 0.1);

    let dbe = run(8, |m, s, xids| {
        if m >= first_bad {
            s.ecc.uncorrected_volatile = Some(1);
        }
        if m == first_bad {
            xids.push(48);
        }
    });
    let f = step_of(&dbe, first_bad);
    assert!(f.risk.score >= 0.9, "{:?}", f.risk);
    assert_eq!(f.risk.rule.as_deref(), Some("uncorrectable_memory_error"));

    let off_bus = run(8, |m, s, xids| {
        if m >= first_bad {
            *s = GpuSample {
                up: false,
                ..GpuSample {
                    index: 0,
                    uuid: "GPU-0".into(),
                    ..GpuSample::default()
                }
            };
        }
        if m == first_bad {
            xids.push(79);
        }
    });
    let f = step_of(&off_bus, first_bad);
    assert!(f.risk.score >= 0.9 && f.lost, "{:?}", f.risk);
    assert_eq!(f.risk.rule.as_deref(), Some("fell_off_bus"));

    // XID 79 alone, while NVML still answers, is the same rule.
    let xid79 = run(8, |m, _, xids| {
        if m == first_bad {
            xids.push(79);
        }
    });
    assert!(step_of(&xid79, first_bad).risk.score >= 0.9);
}
