//! `gpu-sentinel train` end to end: a labelled history written from simulated fleets (the
//! snapshots as `record` writes them, the failures as label lines), the real binary fitting
//! it, and the model it writes loaded and used by the engine on fleets it never saw.

use std::io::Write as _;
use std::path::Path;
use std::process::Command;

use chrono::{DateTime, Utc};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use gpu_sentinel::engine::risk::RiskModel;
use gpu_sentinel::engine::{Engine, EngineConfig};
use gpu_sentinel::source::simulate::{FaultKind, Fleet, GpuPlan, WorkloadKind};

const STEP: f64 = 600.0;
const DAYS: f64 = 16.0;
const GPUS: usize = 8;
const FAILING: usize = 5;

fn start() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-04-01T00:00:00Z")
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_default()
}

/// A host of eight GPUs: five fail (families in turn) 4–14 days in, three stay healthy.
fn plans(host: u64) -> Vec<GpuPlan> {
    let mut rng = SmallRng::seed_from_u64(0x7EA1 + host);
    let healthy = [
        WorkloadKind::Inference,
        WorkloadKind::Bursty,
        WorkloadKind::Training,
    ];
    (0..GPUS)
        .map(|i| {
            let mut plan = if i < FAILING {
                let kind = FaultKind::ALL[(host as usize * FAILING + i) % FaultKind::ALL.len()];
                GpuPlan::failing(kind, rng.random_range(4.0..14.0) * 24.0)
            } else {
                GpuPlan::healthy(healthy[i - FAILING])
            };
            plan.background_noise = true;
            plan.hot_aisle = rng.random_bool(0.3);
            plan
        })
        .collect()
}

/// Runs `host`'s fleet, calling `each` with every snapshot and the failures it brought.
fn simulate(host: u64, mut each: impl FnMut(&gpu_sentinel::model::Snapshot, Vec<String>)) {
    let mut fleet = Fleet::from_plans(500 + host, "NVIDIA H100 80GB HBM3", start(), &plans(host));
    let mut t = 0.0;
    while t < DAYS * 86_400.0 {
        t += STEP;
        fleet.advance(STEP);
        let failures = fleet
            .take_failures()
            .into_iter()
            .map(|f| {
                serde_json::json!({"failure": {"uuid": f.uuid, "at": f.at, "family": f.family}})
                    .to_string()
            })
            .collect();
        each(&fleet.snapshot(), failures);
    }
}

fn write_history(path: &Path, hosts: std::ops::Range<u64>) {
    let file = std::fs::File::create(path).unwrap();
    let mut out = std::io::BufWriter::new(file);
    for host in hosts {
        simulate(host, |snapshot, failures| {
            let mut snapshot = snapshot.clone();
            // Keep the file small: processes and all-zero NVLink counters say nothing here.
            snapshot.processes.clear();
            for g in &mut snapshot.gpus {
                g.nvlink
                    .retain(|l| l.replay + l.recovery + l.crc_flit + l.crc_data > 0);
            }
            writeln!(out, "{}", serde_json::to_string(&snapshot).unwrap()).unwrap();
            for line in failures {
                writeln!(out, "{line}").unwrap();
            }
        });
    }
    out.flush().unwrap();
}

#[test]
fn train_fits_a_model_that_ranks_failing_gpus_first() {
    let dir = std::env::temp_dir().join(format!("gpu-sentinel-train-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let history = dir.join("history.jsonl");
    let model_path = dir.join("model.toml");
    write_history(&history, 0..3);

    let output = Command::new(env!("CARGO_BIN_EXE_gpu-sentinel"))
        .args(["train", "--history"])
        .arg(&history)
        .arg("--out")
        .arg(&model_path)
        // Most families show their precursors in the last three days; a week-long horizon
        // would label as "at risk" days that nothing could tell from healthy ones.
        .args(["--horizon", "3d"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}{}", String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success());
    for words in [
        "ROC AUC",
        "precision",
        "recall",
        "false alarms/GPU-day",
        "median lead",
        "min lead",
        "fitted",
        "shipped",
    ] {
        assert!(stdout.contains(words), "{words:?} missing");
    }
    let fitted_line = stdout.lines().find(|l| l.starts_with("fitted")).unwrap();
    let auc: f64 = fitted_line
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(auc > 0.8, "test AUC {auc}");

    let model = RiskModel::load(&model_path).unwrap();
    assert!(model.weights.iter().all(|w| w.reason.contains("fitted on")));

    // On a host it never saw, the fitted model's highest score before failure is above
    // every healthy GPU's highest score for most failing GPUs.
    let mut engine = Engine::new(EngineConfig {
        risk_model: model,
        ..EngineConfig::default()
    });
    let plans = plans(7);
    let mut max_score = [0.0f64; GPUS];
    let mut failed = [false; GPUS];
    let mut uuids: Vec<String> = Vec::new();
    simulate(7, |snapshot, failures| {
        let findings = engine.step(snapshot);
        if uuids.is_empty() {
            uuids = findings.gpus.iter().map(|g| g.uuid.clone()).collect();
        }
        for line in failures {
            for (i, u) in uuids.iter().enumerate() {
                failed[i] |= line.contains(u.as_str());
            }
        }
        for g in &findings.gpus {
            if let Some(i) = uuids.iter().position(|u| *u == g.uuid)
                && !failed[i]
            {
                max_score[i] = max_score[i].max(g.risk.score);
            }
        }
    });
    let healthy_max = (FAILING..GPUS).map(|i| max_score[i]).fold(0.0, f64::max);
    let ranked_above = (0..FAILING)
        .filter(|&i| plans[i].fault.is_some_and(FaultKind::has_precursors))
        .filter(|&i| max_score[i] > healthy_max)
        .count();
    let with_precursors = (0..FAILING)
        .filter(|&i| plans[i].fault.is_some_and(FaultKind::has_precursors))
        .count();
    println!("unseen host: scores {max_score:.3?}; {ranked_above}/{with_precursors} above healthy");
    assert!(ranked_above * 4 >= with_precursors * 3);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `train --scenarios`: the scenario library drawn, every variant held out in turn, the
/// tables written, and a model the agent loads. A small library (two nodes, six days at
/// hourly collections) keeps it quick; the published tables come from a larger one
/// (docs/detection.md).
#[test]
fn train_on_the_scenario_library_judges_every_held_out_variant() {
    let dir = std::env::temp_dir().join(format!("gpu-sentinel-train-lib-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let (model, tables) = (dir.join("model.toml"), dir.join("tables.md"));
    let bin = env!("CARGO_BIN_EXE_gpu-sentinel");
    let output = Command::new(bin)
        .args([
            "train",
            "--scenarios",
            "2",
            "--days",
            "6",
            "--interval",
            "1h",
        ])
        .args(["--seed", "3", "--trace", "2:5", "--out"])
        .arg(&model)
        .arg("--tables")
        .arg(&tables)
        .output()
        .expect("the binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = std::fs::read_to_string(&tables).expect("tables written");
    assert!(stdout.contains(&text), "the tables are printed too");
    assert!(text.starts_with("16 GPUs ("), "{text}");
    for heading in [
        "By failure family",
        "by whether their precursor shows anything to warn on a day",
        "Healthy GPUs by what they show",
        "By held-out variant",
    ] {
        assert!(text.contains(heading), "{heading}: {text}");
    }
    // Every axis has its folds, and each of its values is one row.
    for axis in ["sku", "curve", "workload", "rate_class"] {
        assert!(text.contains(&format!("| {axis}=")), "{axis}: {text}");
    }
    // The two nodes' GPU models are the two sku folds, their sixteen GPUs between them.
    let sku_gpus: u32 = text
        .lines()
        .filter(|l| l.starts_with("| sku="))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            // failures, …, lost without precursor, healthy GPUs
            let failures: u32 = cells[2].parse().unwrap_or(0);
            let lost: u32 = cells[6]
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            let healthy: u32 = cells[7].parse().unwrap_or(0);
            failures + lost + healthy
        })
        .sum();
    assert!((8..=16).contains(&sku_gpus), "{sku_gpus}: {text}");
    // The traced GPU, hour by hour, under the fold that judges it and the shipped model:
    // one line at the first collection of each hour the GPU was up (six days at most).
    let traced = text
        .split_once("Traced GPUs (--trace)")
        .map(|(_, t)| t)
        .expect("a traced section");
    let blocks: Vec<&str> = traced.split("node 2 GPU 5 under ").skip(1).collect();
    assert_eq!(blocks.len(), 2, "{traced}");
    assert!(blocks[1].starts_with("the shipped model:"), "{}", blocks[1]);
    // A failure is judged by its noise × curve fold and traced up to the failure, a
    // healthy GPU by its noise fold.
    let fails = blocks[0].contains("h before the failure");
    let fold = blocks[0].lines().next().unwrap_or_default();
    assert!(fold.starts_with("fold noise="), "{fold}");
    assert_eq!(fold.contains(", curve="), fails, "{}", blocks[0]);
    for block in blocks {
        let hours: Vec<&str> = block.lines().filter(|l| l.starts_with("day ")).collect();
        assert!(
            (12..=6 * 24).contains(&hours.len()),
            "{}: {block}",
            hours.len()
        );
        for hour in hours {
            // `day 1.25[, 31.0 h before the failure]: 0.011[, terms]`
            let score: f64 = hour
                .split(": ")
                .nth(1)
                .and_then(|s| s.split(',').next())
                .and_then(|s| s.split(' ').next())
                .and_then(|s| s.parse().ok())
                .unwrap_or(f64::NAN);
            assert!((0.0..=1.0).contains(&score), "{hour}");
            if fails {
                let left: f64 = hour
                    .split(", ")
                    .nth(1)
                    .and_then(|s| s.split(' ').next())
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(f64::NAN);
                assert!(left > 0.0, "{hour}");
            }
        }
    }
    // The model is one the agent accepts.
    let loaded = RiskModel::load(&model).expect("the written model loads");
    assert!(
        loaded.description.contains("--scenarios 2 --seed 3"),
        "{loaded:?}"
    );
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        format!("[risk]\nmodel = \"{}\"\n", model.display()),
    )
    .expect("write config");
    let check = Command::new(bin)
        .arg("check-config")
        .arg(&config)
        .output()
        .expect("the binary runs");
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );

    // Bad arguments are refused by name.
    let refused = Command::new(bin)
        .args(["train", "--scenarios", "0", "--out"])
        .arg(dir.join("never.toml"))
        .output()
        .expect("the binary runs");
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--scenarios"));
    for (trace, says) in [
        ("3:0", "nodes 1 to 2"),
        ("1:8", "GPUs 0 to 7"),
        ("x", "\"x\" is not NODE:GPU"),
    ] {
        let refused = Command::new(bin)
            .args([
                "train",
                "--scenarios",
                "2",
                "--days",
                "1",
                "--trace",
                trace,
                "--out",
            ])
            .arg(dir.join("never.toml"))
            .output()
            .expect("the binary runs");
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success(), "{trace}");
        assert!(stderr.contains(says), "{trace}: {stderr}");
    }
    assert!(!dir.join("never.toml").exists());
}
