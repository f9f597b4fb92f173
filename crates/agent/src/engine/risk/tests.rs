//! The anchors the shipped model must honour (issue: "anchor points from operators'
//! practice"), each run through the whole engine on a synthetic history: a week or more of
//! healthy baseline on the eight GPUs of a node, then one GPU (or all of them) changed.

use super::*;
use crate::engine::{Engine, EngineConfig, GpuFindings};
use crate::model::{ClockEvents, GpuSample, RemappedRows, RetiredPages};
use crate::scenario::anchors::{
    self, CLIMB_END, CLIMB_START, DAY_MIN, GPUS, LAST_DAY, STEP_MIN, at, node_history,
};

/// Runs `days` of history on a node of [`GPUS`]; `change` edits GPU `g`'s sample (and may
/// add XIDs for it) at each minute. Returns every GPU's findings at every step, by GPU.
fn run_node(
    days: i64,
    change: impl FnMut(i64, u32, &mut GpuSample, &mut Vec<u32>),
) -> Vec<Vec<GpuFindings>> {
    run_node_with(RiskModel::shipped(), days, change)
}

/// [`run_node`] under `model`.
fn run_node_with(
    model: RiskModel,
    days: i64,
    change: impl FnMut(i64, u32, &mut GpuSample, &mut Vec<u32>),
) -> Vec<Vec<GpuFindings>> {
    let mut engine = Engine::new(EngineConfig {
        risk_model: model,
        ..EngineConfig::default()
    });
    let mut out: Vec<Vec<GpuFindings>> = vec![Vec::new(); GPUS as usize];
    node_history(days, change, |_, snapshot| {
        for f in engine.step(snapshot).gpus {
            if let Some(i) = f
                .uuid
                .strip_prefix("GPU-")
                .and_then(|i| i.parse::<usize>().ok())
            {
                out[i].push(f);
            }
        }
    });
    out
}

/// Runs `days` of history; `change` edits GPU 0's sample (and may add XIDs) at each
/// minute. Returns GPU 0's findings at every step.
fn run(days: i64, mut change: impl FnMut(i64, &mut GpuSample, &mut Vec<u32>)) -> Vec<GpuFindings> {
    let mut all = run_node(days, |m, g, s, xids| {
        if g == 0 {
            change(m, s, xids);
        }
    });
    all.swap_remove(0)
}

/// The minute of step `i`.
fn minute(i: usize) -> i64 {
    i as i64 * STEP_MIN
}

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

/// Steps from the first at or above `threshold` to the end, or None if none.
fn first_warning(all: &[GpuFindings], threshold: f64) -> Option<usize> {
    all.iter().position(|f| f.risk.score >= threshold)
}

#[test]
fn a_one_hour_burst_of_200_corrected_errors_then_silence_never_warns() {
    let burst_at = 3 * DAY_MIN;
    let all = run(13, |m, s, _| {
        let into = (m - burst_at).clamp(0, 60) as u64;
        let count = 200 * into / 60;
        s.ecc.corrected_volatile = Some(count);
        s.ecc.corrected_aggregate = Some(count);
    });
    let peak = max_score(&all);
    assert!(peak < 0.1, "peak {peak}");
    // Its evidence is gone within two days of the burst.
    let two_days_on = &all[((burst_at + 2 * DAY_MIN) / STEP_MIN) as usize];
    assert!(
        two_days_on.risk.score < 0.05 && two_days_on.risk.evidence.is_empty(),
        "{:?}",
        two_days_on.risk
    );
}

#[test]
fn a_climb_from_0_to_12_corrected_errors_a_day_over_six_days_warns_a_day_ahead_and_holds() {
    // The rate grows linearly from 0 to 12 a day: after t days, t² errors in all.
    let (start, end) = (CLIMB_START, CLIMB_END);
    let all = run(9, anchors::ecc_climb);
    let first = first_warning(&all, 0.7).expect("the climb warns");
    let lead_hours = (end - minute(first)) as f64 / 60.0;
    assert!(lead_hours >= 24.0, "warned only {lead_hours:.1} h ahead");
    assert!(
        minute(first) > start + 2 * DAY_MIN,
        "warned on the climb's first days"
    );
    let end_step = (end / STEP_MIN) as usize;
    let dips: Vec<f64> = all[first..=end_step]
        .iter()
        .map(|f| f.risk.score)
        .filter(|s| *s < 0.7)
        .collect();
    assert!(dips.is_empty(), "the warning flickered: {dips:?}");
    let last = &all[end_step];
    let top = last.risk.top(1).next().map(|c| &*c.feature);
    assert!(
        matches!(top, Some("ecc_corrected_days" | "ecc_corrected_rate")),
        "{:?}",
        last.risk
    );
    // The evidence names the memory family and the hour it started, before the warning.
    let evidence = &last.risk.evidence[0];
    assert!(evidence.family.starts_with("memory errors"), "{evidence:?}");
    assert!(evidence.since <= at(minute(first)).timestamp());
    assert!(evidence.since > at(start).timestamp());
    // A handful of errors a day for a few days is not a warning.
    let few = run(9, anchors::ecc_few);
    assert!(max_score(&few) < 0.5, "{}", max_score(&few));
}

#[test]
fn a_noisy_climb_of_corrected_errors_warns_a_day_ahead_and_holds() {
    // The same climb drawn Poisson: no day need exceed the one before it.
    let all = run(9, anchors::ecc_noisy_climb);
    let first = first_warning(&all, 0.7).expect("the noisy climb warns");
    let lead_hours = (CLIMB_END - minute(first)) as f64 / 60.0;
    assert!(lead_hours >= 24.0, "warned only {lead_hours:.1} h ahead");
    assert!(
        minute(first) > CLIMB_START + 2 * DAY_MIN,
        "warned on the climb's first days"
    );
    let dips = all[first..].iter().filter(|f| f.risk.score < 0.7).count();
    assert_eq!(dips, 0, "the warning flickered");
    assert!(contribution(all.last().unwrap(), "ecc_corrected_rate") > 2.0);
}

#[test]
fn a_link_that_dies_in_two_days_warns_a_day_ahead() {
    // Replays from 0.3 to 300 an hour over the last two days, Poisson.
    let all = run(9, anchors::link_two_day_ramp);
    let first = first_warning(&all, 0.7).expect("the ramp warns");
    let lead_hours = (9 * DAY_MIN - minute(first)) as f64 / 60.0;
    assert!(lead_hours >= 24.0, "warned only {lead_hours:.1} h ahead");
    assert!(
        minute(first) > anchors::RAMP_START,
        "warned before the ramp"
    );
    let last = all.last().unwrap();
    assert_eq!(
        last.risk.top(1).next().map(|c| &*c.feature),
        Some("pcie_replays_rate"),
        "{:?}",
        last.risk
    );
}

#[test]
fn power_swinging_more_and_more_warns_and_a_draw_that_always_swung_does_not() {
    let growing = run(9, anchors::power_swings_growing);
    let first = first_warning(&growing, 0.7).expect("the swings warn");
    let lead_hours = (9 * DAY_MIN - minute(first)) as f64 / 60.0;
    assert!(lead_hours >= 24.0, "warned only {lead_hours:.1} h ahead");
    assert!(
        minute(first) > 4 * DAY_MIN + DAY_MIN / 2,
        "warned too early"
    );
    assert!(contribution(growing.last().unwrap(), "power_unstable_hours") > 2.0);
    let always = run(9, anchors::power_always_swinging);
    assert!(max_score(&always) < 0.5, "{}", max_score(&always));
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
        s.retired_pages = Some(RetiredPages {
            sbe: 3,
            ..RetiredPages::default()
        });
    });
    assert!(max_score(&all) < 0.1, "{}", max_score(&all));
}

#[test]
fn new_remaps_and_retirements_pending_a_reset_warn() {
    let remap = run(8, |m, s, _| {
        if m >= LAST_DAY {
            s.remapped_rows = Some(RemappedRows {
                uncorrectable: 1,
                pending: true,
                ..RemappedRows::default()
            });
        }
    });
    assert!(
        remap.last().unwrap().risk.score >= 0.7,
        "{:?}",
        remap.last().unwrap().risk
    );
    let retired = run(8, |m, s, _| {
        s.retired_pages = Some(if m >= LAST_DAY {
            RetiredPages {
                dbe: 1,
                pending: true,
                ..RetiredPages::default()
            }
        } else {
            RetiredPages::default()
        });
    });
    let last = retired.last().unwrap();
    assert!(last.risk.score >= 0.7, "{:?}", last.risk);
    assert!(contribution(last, "retired_pages_new") > 1.0);
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
fn an_hbm_gap_25_degrees_over_its_own_baseline_warns_where_hbm_runs_cooler() {
    // An H100 whose HBM runs 8 °C cooler than the die, as loaded H100s do.
    let gap = anchors::hbm_gap;
    let failing = run(8, gap(25.0));
    let last = failing.last().unwrap();
    assert!(last.risk.score >= 0.7, "{:?}", last.risk);
    // Against the GPU's own gap: over the hour, or held for the day.
    let top = last.risk.top(1).next().map(|c| &*c.feature);
    assert!(
        matches!(
            top,
            Some("memory_gap_vs_baseline" | "memory_gap_persistent")
        ),
        "{top:?}"
    );
    assert!(contribution(last, "memory_gap_vs_baseline") > 2.0);
    // The absolute gap (+17 °C) alone would barely count.
    assert!(contribution(last, "memory_temperature_gap") < 0.5);
    // A few degrees of change is ordinary.
    assert!(max_score(&run(8, gap(6.0))) < 0.1);
}

#[test]
fn a_node_wide_temperature_rise_on_all_gpus_keeps_every_gpu_under_half() {
    // 84-91 °C on every GPU from the last day; the two hottest slow down now and then.
    let all = run_node(9, anchors::node_wide_heat);
    for (g, findings) in all.iter().enumerate() {
        assert!(
            max_score(findings) < 0.5,
            "GPU {g}: {}",
            max_score(findings)
        );
    }
    // The same heat on one GPU alone stands out.
    let alone = run(9, anchors::heat_alone);
    let last = alone.last().unwrap();
    assert!(
        contribution(last, "temperature_vs_peers") > 0.5,
        "{:?}",
        last.risk
    );
    assert!(
        contribution(last, "thermal_slowdown_24h") > 2.0,
        "{:?}",
        last.risk
    );
}

#[test]
fn a_steady_noisy_link_stays_under_half_and_an_accelerating_one_warns() {
    // 120 replays an hour, every hour, for two weeks.
    let steady = run(14, anchors::steady_noisy_link);
    assert!(max_score(&steady) < 0.5, "{}", max_score(&steady));
    // From a few an hour, doubling every day for six days (to about 60 an hour).
    let accelerating = run(13, anchors::accelerating_link);
    let last = accelerating.last().unwrap();
    assert!(last.risk.score >= 0.7, "{:?}", last.risk);
    assert!(
        contribution(last, "pcie_replays_rate") > 1.0,
        "{:?}",
        last.risk
    );
}

#[test]
fn a_link_that_trains_down_under_load_warns_and_an_idle_downtrain_does_not() {
    let loaded = run(8, |m, s, _| {
        if m >= LAST_DAY {
            s.pcie.link_width = Some(8);
        }
    });
    let last = loaded.last().unwrap();
    assert!(last.risk.score >= 0.7, "{:?}", last.risk);
    assert_eq!(
        last.risk.top(1).next().map(|c| &*c.feature),
        Some("pcie_link_degraded")
    );
    // Where no maximum is reported (a Prometheus store, a CSV log without the columns),
    // the widest link the GPU showed under load stands for it.
    let unreported = run(8, |m, s, _| {
        s.pcie.link_width_max = None;
        s.pcie.link_generation_max = None;
        if m >= LAST_DAY {
            s.pcie.link_width = Some(8);
        }
    });
    assert!(unreported.last().unwrap().risk.score >= 0.7);
    // An idle GPU whose link saves power at Gen1 x8.
    let idle = run(8, |m, s, _| {
        if m >= LAST_DAY {
            s.utilization.gpu = Some(0.0);
            s.power_watts = Some(70.0);
            s.pcie.link_width = Some(8);
            s.pcie.link_generation = Some(1);
        }
    });
    assert!(max_score(&idle) < 0.1, "{}", max_score(&idle));
}

#[test]
fn a_warning_holds_after_its_evidence_stops_then_decays() {
    // Trained down under load for half a day, then back at x16.
    let recovers_at = LAST_DAY + DAY_MIN / 2;
    let all = run(10, |m, s, _| {
        if (LAST_DAY..recovers_at).contains(&m) {
            s.pcie.link_width = Some(8);
        }
    });
    let step = |minute: i64| &all[(minute / STEP_MIN) as usize];
    assert!(step(recovers_at).risk.score >= 0.7);
    // Held for hours (PCIe evidence decays with e-fold 24 h) ...
    assert!(
        step(recovers_at + 3 * 60).risk.score >= 0.7,
        "{:?}",
        step(recovers_at + 180).risk
    );
    // ... and gone within two days.
    assert!(step(recovers_at + 2 * DAY_MIN).risk.score < 0.1);
}

#[test]
fn erratic_power_at_steady_load_warns() {
    // A spread of 140 W at steady utilization: the board, not the workload.
    let all = run(8, |m, s, _| {
        if m >= LAST_DAY {
            let swing = if (m / STEP_MIN) % 2 == 0 {
                140.0
            } else {
                -140.0
            };
            s.power_watts = Some(520.0 + swing);
        }
    });
    let last = all.last().unwrap();
    assert!(last.risk.score >= 0.7, "{:?}", last.risk);
    let top = last.risk.top(1).next().map(|c| &*c.feature);
    assert!(
        matches!(top, Some("power_erratic" | "power_unstable_hours")),
        "{:?}",
        last.risk
    );
}

#[test]
fn abnormal_pcie_replay_rates_contribute() {
    // 300 replays an hour through the last day, against a node replaying a few a day.
    let all = run(8, |m, s, _| {
        let into = (m - LAST_DAY).max(0) as u64;
        s.pcie.replay_counter = Some(3 + 5 * into);
    });
    let last = all.last().unwrap();
    assert!(
        contribution(last, "pcie_replays_rate") > 0.5,
        "{:?}",
        last.risk
    );
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
    // The brake's drops of the draw at the same load are unstable power too.
    assert!(
        contribution(last, "power_erratic") + contribution(last, "power_unstable_hours") > 0.0,
        "{:?}",
        last.risk
    );
    assert_eq!(
        contribution(last, "hw_slowdown_share"),
        0.0,
        "the brake explains it"
    );
    let generic = run(8, |m, s, _| {
        if m >= LAST_DAY && m % 30 < 10 {
            s.clock_events = Some(ClockEvents(ClockEvents::HW_SLOWDOWN));
        }
    });
    assert!(contribution(generic.last().unwrap(), "hw_slowdown_share") > 1.0);
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
fn a_host_that_slows_every_gpus_collection_warns_none_of_them() {
    // The agent's host under load (a job's data loaders on every core): NVML calls take
    // 0.3 s instead of 4 ms on every GPU of the node for the last day.
    let node = run_node(8, |m, _, s, _| {
        if m >= LAST_DAY {
            s.collect_seconds = 0.3;
        }
    });
    for gpu in &node {
        let last = gpu.last().unwrap();
        assert_eq!(
            contribution(last, "collect_slowdown"),
            0.0,
            "{:?}",
            last.risk
        );
        assert!(max_score(gpu) < 0.1, "{:?}", last.risk);
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

#[test]
fn a_burst_cut_in_two_by_the_rolling_days_boundary_is_still_one_burst() {
    // An hour of 300 errors starting an hour into a 2-hour bucket and running into the
    // next: twelve buckets later, the rolling days' boundary lies between its two halves.
    let burst_at = 3 * DAY_MIN + 60;
    let all = run(8, |m, s, _| {
        let into = (m - burst_at).clamp(0, 60) as u64;
        let count = 300 * into / 60;
        s.ecc.corrected_volatile = Some(count);
        s.ecc.corrected_aggregate = Some(count);
    });
    let peak = max_score(&all);
    assert!(peak < 0.5, "peak {peak}");
    // The feature's value, not its weighted contribution, so that the check holds whatever
    // weight the model gives it: the burst spans two clock hours, each counted as one
    // error at most, against what the floor expects of six hours; its 300 errors as
    // counts would read hundreds of nats.
    let rate = all
        .iter()
        .flat_map(|f| &f.risk.contributions)
        .filter(|c| c.feature == "ecc_corrected_rate")
        .map(|c| c.value)
        .fold(0.0, f64::max);
    let two_bad_hours = super::rate::poisson_llr(2.0, 6.0 * super::rate::floor::ECC_CORRECTED);
    assert!(rate > 0.0, "the burst counts");
    assert!(rate <= two_bad_hours + 1e-9, "{rate} > {two_bad_hours}");
}

#[test]
fn a_node_wide_heat_that_warms_idle_gpus_most_keeps_every_gpu_under_half() {
    // Inlet air warms until every GPU runs at 86-88 °C: the idle ones, normally at 35 °C,
    // warm by 50 degrees, the busy ones by 22, so the idle ones stand far above the node's
    // median against their own normal. The heat explains them all.
    let all = run_node(9, anchors::idle_warming_heat);
    for (g, findings) in all.iter().enumerate() {
        assert!(
            max_score(findings) < 0.5,
            "GPU {g}: {}",
            max_score(findings)
        );
        let heat = findings
            .iter()
            .map(|f| contribution(f, "temperature_vs_baseline"))
            .fold(0.0, f64::max);
        assert!(heat < 0.5, "GPU {g}: temperature_vs_baseline {heat}");
    }
}

#[test]
fn a_slow_first_collection_after_a_gap_is_no_slowing_gpu() {
    // The agent (or the log) stops for an hour; the first read after it takes 0.29 s where
    // reads took milliseconds (the driver loads, caches are cold). Alone in its hour, or
    // beside two ordinary reads (a mean of 0.1 s), it must not read as a GPU whose calls
    // slow down; a GSP that slows every call still does.
    let gap = (6 * DAY_MIN)..(6 * DAY_MIN + 70);
    let after = gap.end; // a step of the history: 70 minutes is a multiple of STEP_MIN
    let mut engine = Engine::new(EngineConfig::default());
    let mut hour_after = Vec::new();
    node_history(
        7,
        |m, g, s, _| {
            if g == 0 && m == after {
                s.collect_seconds = 0.29;
            }
        },
        |m, snapshot| {
            if gap.contains(&m) {
                return;
            }
            let findings = engine.step(snapshot);
            if (after..after + 60).contains(&m) {
                hour_after.extend(findings.gpus.into_iter().find(|f| f.uuid == "GPU-0"));
            }
        },
    );
    assert_eq!(
        hour_after.len(),
        12,
        "GPU 0 stepped through the hour after the gap"
    );
    for f in &hour_after {
        for feature in ["collect_slowdown", "collect_seconds_level"] {
            // Within rounding: the hour's sum less its slowest read is not the sum of the
            // others to the bit.
            let c = contribution(f, feature);
            assert!(c.abs() < 1e-9, "{feature} {c}: {:?}", f.risk);
        }
    }
}

/// [`run_node`] under a model that weighs `feature` 1 and nothing else: its findings carry
/// the feature's held value whatever the shipped model weighs it.
fn run_node_reading(
    feature: &str,
    days: i64,
    change: impl FnMut(i64, u32, &mut GpuSample, &mut Vec<u32>),
) -> Vec<Vec<GpuFindings>> {
    let model = RiskModel::parse(&format!(
        "bias = -4.5\n[[weight]]\nfeature = \"{feature}\"\nweight = 1.0\nreason = \"read\"\n"
    ))
    .unwrap();
    run_node_with(model, days, change)
}

#[test]
fn slow_reads_that_come_back_hour_after_hour_read_as_a_rate_and_one_now_and_then_does_not() {
    // A GSP going bad: from day 7, one read in ten of GPU 0 takes 1.5 s (one or two an
    // hour at this history's 5-minute cadence, never more than one in an hour's mean
    // without its slowest). GPU 1: one 0.29 s read every other day, a host's moment.
    let node = run_node_reading("collect_slow_rate", 8, |m, g, s, _| {
        if g == 0 && m >= LAST_DAY && m % (10 * STEP_MIN) == 0 {
            s.collect_seconds = 1.5;
        }
        if g == 1 && m % (2 * DAY_MIN) == 333 * STEP_MIN {
            s.collect_seconds = 0.29;
        }
    });
    let read = |f: &GpuFindings| contribution(f, "collect_slow_rate");
    let gsp = &node[0];
    let before = gsp[..(LAST_DAY / STEP_MIN) as usize]
        .iter()
        .map(read)
        .fold(0.0, f64::max);
    assert_eq!(before, 0.0, "nothing slow before day 7");
    let half_day = &gsp[((LAST_DAY + DAY_MIN / 2) / STEP_MIN) as usize];
    assert!(
        read(half_day) > 5.0,
        "12 h of slow reads: {}",
        read(half_day)
    );
    assert!(
        read(gsp.last().unwrap()) > 10.0,
        "{}",
        read(gsp.last().unwrap())
    );
    let hiccups = node[1].iter().map(read).fold(0.0, f64::max);
    assert!(hiccups < 1.5, "a slow read every other day: {hiccups} nats");
    // The same reads on every GPU of the node: the host, not a GPU.
    let host = run_node_reading("collect_slow_rate", 8, |m, _, s, _| {
        if m >= LAST_DAY && m % (10 * STEP_MIN) == 0 {
            s.collect_seconds = 1.5;
        }
    });
    for (g, gpu) in host.iter().enumerate() {
        let most = gpu.iter().map(read).fold(0.0, f64::max);
        assert_eq!(most, 0.0, "GPU {g}: {most}");
    }
}

#[test]
fn an_hbm_gap_that_keeps_rising_for_days_lasts_and_a_step_of_a_few_degrees_does_not() {
    // GPU 0's HBM runs hotter than its die from day 5: by 6 °C at once and then steady
    // (another job, a moved rack: the baseline learns it at 1 °C a day), or by 2.5 °C
    // more each day (a cold plate failing). Ten days.
    let gap = |rise: fn(f64) -> f64| {
        run_node_reading("memory_gap_lasting", 10, move |m, g, s, _| {
            // The node's samples carry no HBM reading: GPU 0's runs 8 °C under its die.
            let days = (m - 5 * DAY_MIN) as f64 / DAY_MIN as f64;
            if g == 0 {
                let rise = if days >= 0.0 { rise(days) } else { 0.0 };
                s.memory_temperature_celsius = s.temperature_celsius.map(|t| t - 8.0 + rise);
            }
        })
        .swap_remove(0)
    };
    let read = |f: &GpuFindings| contribution(f, "memory_gap_lasting");
    let step = gap(|_| 6.0);
    let most = step.iter().map(read).fold(0.0, f64::max);
    assert!(most < 0.5, "a 6 °C step: {most}");
    let ramp = gap(|days| 2.5 * days);
    let end = read(ramp.last().unwrap());
    assert!(end > 0.8, "12.5 °C over five days: {end}");
}
