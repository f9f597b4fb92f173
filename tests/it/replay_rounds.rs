//! `gpu-sentinel replay` on sloppy logs, through the real binary: what a polling round is
//! (duplicated rows, a log cut part-way through a round) and values no GPU can report.
//! Each test starts from a good fixture (tests/fixtures/smi/, see its README), damages it
//! the way a real capture gets damaged, and compares the report with the undamaged one.

use crate::common;

use std::path::{Path, PathBuf};

use common::{replay_json, repo, run, temp_file};
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    repo().join("tests/fixtures/smi").join(name)
}

fn path(p: &Path) -> &str {
    p.to_str().expect("test paths are UTF-8")
}

/// The lines of a fixture, header first.
fn lines(name: &str) -> Vec<String> {
    std::fs::read_to_string(fixture(name))
        .expect("fixture")
        .lines()
        .map(str::to_string)
        .collect()
}

/// Writes lines as a log (each with its newline) and replays it as nvidia-smi CSV.
fn replay_lines(name: &str, lines: &[String]) -> (Value, String) {
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let file = temp_file(name, &text);
    replay_json(&["--format", "smi-csv", path(&file)])
}

/// No GPU of the report is lost or at risk.
fn assert_all_healthy(report: &Value) {
    for g in report["gpus"].as_array().expect("gpus") {
        assert_eq!(g["lost"], false, "{g:#}");
        let findings = g["findings"].as_array().expect("findings");
        assert!(
            !findings.iter().any(|f| f == "lost" || f == "failure_risk"),
            "{g:#}"
        );
        assert!(g["max_risk"].as_f64().expect("max_risk") < 0.5, "{g:#}");
    }
}

#[test]
fn a_log_cut_after_a_whole_line_part_way_through_a_round_loses_no_gpu() {
    // The reproduction: units.csv without its last line (GPU 1's row of the last
    // round) said GPU 1 fell off the bus.
    let (full, _) = replay_json(&[path(&fixture("units.csv"))]);
    let mut cut = lines("units.csv");
    cut.pop();
    let (report, stderr) = replay_lines("cut-round.csv", &cut);
    assert_all_healthy(&report);
    assert!(
        stderr.contains("ends part-way through the round"),
        "no warning about the cut round:\n{stderr}"
    );
    // The cut round is left out: the report is the full log's up to the round before.
    assert_eq!(report["end"], "2026-03-02T09:38:00.003Z");
    assert_eq!(report["samples"], 78);
    assert_eq!(
        report["alerts"], full["alerts"],
        "alerts changed by the cut"
    );
    assert_eq!(report["gpus"][1]["findings"], full["gpus"][1]["findings"]);
}

#[test]
fn a_row_repeated_mid_file_is_skipped_with_a_warning() {
    // Line 41 is GPU 1's row of 09:19; repeating it shifted every later round by one GPU
    // and GPU 0 ended up "lost".
    let (full, _) = replay_json(&[path(&fixture("units.csv"))]);
    let mut doubled = lines("units.csv");
    let row = doubled[40].clone();
    doubled.insert(41, row);
    let (report, stderr) = replay_lines("duplicated-row.csv", &doubled);
    assert_all_healthy(&report);
    assert_eq!(report, full, "a duplicated row changed the report");
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("duplicate")).collect();
    assert!(
        warnings
            .iter()
            .any(|l| l.contains(":42: ") && l.contains("line 41")),
        "no warning naming line 42 as a duplicate of line 41:\n{stderr}"
    );
    assert!(
        stderr.contains("skipped 1 duplicate line"),
        "no duplicate count in the summary:\n{stderr}"
    );
}

#[test]
fn every_row_tripled_gives_the_same_report_and_alert_episodes() {
    let (full, _) = replay_json(&[path(&fixture("units.csv"))]);
    let original = lines("units.csv");
    let mut tripled = vec![original[0].clone()];
    for row in &original[1..] {
        tripled.extend([row.clone(), row.clone(), row.clone()]);
    }
    let (report, stderr) = replay_lines("tripled.csv", &tripled);
    assert_all_healthy(&report);
    // One GpuAllocatedIdle episode from 09:30 to the end, as in the original log; it used
    // to resolve and fire again every minute.
    assert_eq!(report["alerts"], full["alerts"], "alert episodes differ");
    assert_eq!(report, full);
    assert!(
        stderr.contains("skipped 160 duplicate line"),
        "no duplicate count in the summary:\n{stderr}"
    );
}

#[test]
fn a_gpu_that_really_stops_mid_log_is_still_lost() {
    // The cut-round rule must not hide a GPU whose rows stop for good: GPU 1's rows of the
    // last ten rounds are gone, the rounds themselves complete without it.
    let mut gone = lines("units.csv");
    let keep = gone.len() - 20;
    let tail: Vec<String> = gone
        .split_off(keep)
        .into_iter()
        .filter(|l| l.contains(", 0, GPU-"))
        .collect();
    gone.extend(tail);
    let (report, _) = replay_lines("gpu-stops.csv", &gone);
    let lost = &report["gpus"][1];
    assert_eq!(lost["index"], 1);
    assert_eq!(lost["lost"], true, "{report:#}");
    assert_eq!(report["gpus"][0]["lost"], false);
}

#[test]
fn a_duplicated_jsonl_snapshot_is_skipped_with_a_warning() {
    let recording = temp_file("sim-dup.jsonl", "");
    let out = run(&[
        "record",
        "--simulate",
        "--simulated-duration",
        "2h",
        "--interval",
        "60s",
        "--out",
        path(&recording),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (full, _) = replay_json(&[path(&recording)]);
    let text = std::fs::read_to_string(&recording).expect("recording");
    let mut lines: Vec<&str> = text.lines().collect();
    let middle = lines.len() / 2;
    let snapshot = (middle..lines.len())
        .find(|&i| lines[i].starts_with("{\"at\""))
        .expect("a snapshot line");
    lines.insert(snapshot + 1, lines[snapshot]);
    let body: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let doubled = temp_file("sim-dup-doubled.jsonl", &body);
    let (report, stderr) = replay_json(&[path(&doubled)]);
    assert_eq!(report, full, "a duplicated snapshot changed the report");
    let line = snapshot + 2;
    assert!(
        stderr
            .lines()
            .any(|l| l.contains(&format!(":{line}: ")) && l.contains("duplicate")),
        "no duplicate warning for line {line}:\n{stderr}"
    );
    assert!(stderr.contains("skipped 1 duplicate line"), "{stderr}");
}

#[test]
fn temperatures_no_gpu_can_have_are_rejected_and_counted() {
    // temperature.gpu is the 11th column; -5 °C on every row scored risk 1.0.
    let mut cold = lines("units.csv");
    for row in cold.iter_mut().skip(1) {
        let mut cells: Vec<&str> = row.split(", ").collect();
        cells[10] = "-5";
        *row = cells.join(", ");
    }
    let (report, stderr) = replay_lines("minus-five.csv", &cold);
    assert_all_healthy(&report);
    let summary = stderr
        .lines()
        .find(|l| l.contains("out of range"))
        .unwrap_or_else(|| panic!("no out-of-range summary:\n{stderr}"));
    assert!(
        summary.contains("80 values out of range")
            && summary.contains("temperature_celsius: 80, first at line 2"),
        "{summary}"
    );
}

#[test]
fn a_clean_log_has_no_range_or_duplicate_warnings() {
    let (_, stderr) = replay_json(&[path(&fixture("interleaved_lost.csv"))]);
    assert!(!stderr.contains("out of range"), "{stderr}");
    assert!(!stderr.contains("duplicate"), "{stderr}");
}

/// nvidia-smi waiting on a slow GPU writes a round's rows seconds apart: eight GPUs 400 ms
/// apart, a round every 7.8 s, for 20 minutes. Each round stays one instant with every GPU
/// in it, so no GPU is ever missing from the engine's view (split in two, each half of a
/// round would report the GPUs of the other half gone, and they were reported lost).
#[test]
fn rounds_whose_rows_come_seconds_apart_lose_no_gpu() {
    let mut lines = vec![
        "timestamp, index, uuid, utilization.gpu [%], memory.used [MiB], memory.total [MiB]"
            .to_string(),
    ];
    let start = chrono::DateTime::parse_from_rfc3339("2026-03-02T09:00:00Z").expect("time");
    for round in 0..150 {
        for gpu in 0..8 {
            let at = start + chrono::TimeDelta::milliseconds(round * 7_800 + gpu * 400);
            lines.push(format!(
                "{}, {gpu}, GPU-00000000-0000-0000-0000-00000000000{gpu}, 80 %, 40000 MiB, 81559 MiB",
                at.format("%Y/%m/%d %H:%M:%S%.3f")
            ));
        }
    }
    let (report, stderr) = replay_lines("slow-rounds.csv", &lines);
    assert_eq!(report["gpus"].as_array().map(Vec::len), Some(8), "{stderr}");
    assert_all_healthy(&report);
    let lost: Vec<&Value> = report["alerts"]
        .as_array()
        .expect("alerts")
        .iter()
        .filter(|a| a["alertname"] == "GpuLost")
        .collect();
    assert!(lost.is_empty(), "{lost:?}");
}
