//! `gpu-sentinel replay` through the real binary: nvidia-smi CSV fixtures (tests/fixtures/smi/,
//! see its README), JSONL recordings of the simulator, garbage, and the report's contract.

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use common::{replay_json, repo, run, temp_file};
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    repo().join("tests/fixtures/smi").join(name)
}

fn path(p: &Path) -> &str {
    p.to_str().expect("test paths are UTF-8")
}

fn keys(v: &Value) -> BTreeSet<&str> {
    v.as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect()
}

/// The GPU of the report with this index.
fn gpu(report: &Value, index: u64) -> &Value {
    report["gpus"]
        .as_array()
        .and_then(|g| g.iter().find(|g| g["index"] == index))
        .unwrap_or_else(|| panic!("no GPU {index} in {report:#}"))
}

fn findings(gpu: &Value) -> Vec<&str> {
    gpu["findings"]
        .as_array()
        .expect("findings is an array")
        .iter()
        .map(|f| f.as_str().expect("findings are strings"))
        .collect()
}

#[test]
fn report_has_exactly_the_contract_keys() {
    let (report, _) = replay_json(&[path(&fixture("units.csv"))]);
    assert_eq!(
        keys(&report),
        BTreeSet::from(["samples", "start", "end", "gpus", "alerts"])
    );
    for g in report["gpus"].as_array().unwrap() {
        assert_eq!(
            keys(g),
            BTreeSet::from([
                "uuid",
                "index",
                "name",
                "max_risk",
                "final_risk",
                "first_risk_warning",
                "lost",
                "findings"
            ])
        );
    }
    // The fixture's GPU 1 holds memory at 0% for the idle window: the default rules fire.
    let alerts = report["alerts"].as_array().expect("alerts array");
    assert!(
        alerts
            .iter()
            .any(|a| a["alertname"] == "GpuAllocatedIdle" && a["gpu"] == "1"),
        "{alerts:#?}"
    );
}

#[test]
fn smi_csv_with_units_is_read_and_judged() {
    let (report, stderr) = replay_json(&[path(&fixture("units.csv"))]);
    assert_eq!(report["samples"], 80);
    assert_eq!(report["start"], "2026-03-02T09:00:00.003Z");
    assert_eq!(report["end"], "2026-03-02T09:39:00.003Z");
    let busy = gpu(&report, 0);
    assert_eq!(busy["uuid"], "GPU-5a1c7f0e-3b2d-4e8f-9a61-0c7d2e4b8f10");
    assert_eq!(busy["name"], "NVIDIA H100 80GB HBM3");
    assert!(findings(busy).is_empty(), "{busy:#}");
    let idle = gpu(&report, 1);
    assert_eq!(findings(idle), ["thermal_slowdown", "allocated_idle"]);
    for g in [busy, idle] {
        assert_eq!(g["lost"], false);
        assert_eq!(g["first_risk_warning"], Value::Null);
        assert!(g["max_risk"].as_f64().unwrap() < 0.5, "{g:#}");
    }
    // Every column is read (pcie.link.gen.max too): nothing is warned.
    assert_eq!(stderr.matches("warning").count(), 0, "{stderr}");
}

#[test]
fn nounits_gives_the_same_report_as_units() {
    let (units, _) = replay_json(&[path(&fixture("units.csv"))]);
    let (nounits, _) = replay_json(&["--format", "smi-csv", path(&fixture("nounits.csv"))]);
    assert_eq!(units, nounits);
}

#[test]
fn timezone_shifts_nvidia_smi_local_times() {
    let (report, _) = replay_json(&["--timezone", "-05:00", path(&fixture("units.csv"))]);
    assert_eq!(report["start"], "2026-03-02T14:00:00.003Z");
    let out = run(&["replay", "--timezone", "CET", path(&fixture("units.csv"))]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("±HH:MM"));
}

#[test]
fn a_gpu_whose_rows_stop_is_lost_even_when_the_log_ends_soon_after() {
    // GPU 2's rows stop 40 s before the end: less than the engine needs to call it lost.
    let (report, _) = replay_json(&[path(&fixture("interleaved_lost.csv"))]);
    assert_eq!(report["samples"], 72);
    let lost = gpu(&report, 2);
    assert_eq!(lost["lost"], true, "{lost:#}");
    assert!(findings(lost).contains(&"lost"));
    assert!(lost["final_risk"].as_f64().unwrap() >= 0.9, "{lost:#}");
    assert_eq!(lost["first_risk_warning"], report["end"]);
    for i in [0, 1, 3] {
        assert_eq!(gpu(&report, i)["lost"], false);
        assert!(!findings(gpu(&report, i)).contains(&"lost"));
    }
}

/// The alerts of the report named `alertname`, as (gpu, starts_at).
fn alerts_named<'a>(report: &'a Value, alertname: &str) -> Vec<(&'a str, &'a str)> {
    report["alerts"]
        .as_array()
        .expect("alerts array")
        .iter()
        .filter(|a| a["alertname"] == alertname)
        .map(|a| {
            (
                a["gpu"].as_str().expect("gpu label"),
                a["starts_at"].as_str().expect("starts_at"),
            )
        })
        .collect()
}

#[test]
fn a_device_handle_line_keeps_every_round_on_its_own_time() {
    // GPU 0 (bus 3B:00.0, first in every round) becomes unreachable at 09:01:00: from then
    // on nvidia-smi writes "Unable to determine the device handle" where its row was.
    let (report, stderr) = replay_json(&[path(&fixture("device_handle.csv"))]);
    assert!(
        stderr.contains("Unable to determine the device handle"),
        "{stderr}"
    );
    assert_eq!(report["samples"], 96);
    assert_eq!(report["start"], "2026-03-02T09:00:00.002Z");
    // The last round is that of 09:01:55, stamped by its first timed row (GPU 1's).
    assert_eq!(report["end"], "2026-03-02T09:01:55.005Z");
    let lost = gpu(&report, 0);
    assert_eq!(lost["lost"], true, "{lost:#}");
    // Lost in the round of 09:01:00, not in the one before (its last good row, 09:00:55).
    assert_eq!(
        alerts_named(&report, "GpuLost"),
        [("0", "2026-03-02T09:01:00.005Z")],
        "{report:#}"
    );
    for i in [1, 2, 3] {
        assert_eq!(gpu(&report, i)["lost"], false, "GPU {i}: {report:#}");
        assert!(!findings(gpu(&report, i)).contains(&"lost"));
    }
}

#[test]
fn a_gpu_whose_value_cells_read_unknown_error_is_lost() {
    // GPU 2's rows go on to the end, identity cells kept, every value `[Unknown Error]`.
    let (report, _) = replay_json(&[path(&fixture("unknown_error.csv"))]);
    assert_eq!(report["samples"], 96);
    assert_eq!(report["end"], "2026-03-02T09:01:55.002Z");
    let lost = gpu(&report, 2);
    assert_eq!(lost["lost"], true, "{lost:#}");
    assert!(findings(lost).contains(&"lost"), "{lost:#}");
    assert_eq!(
        alerts_named(&report, "GpuLost"),
        [("2", "2026-03-02T09:01:00.002Z")],
        "{report:#}"
    );
    // The others write `[N/A]` for fan.speed in every row and stay up.
    for i in [0, 1, 3] {
        assert_eq!(gpu(&report, i)["lost"], false, "GPU {i}: {report:#}");
    }
}

#[test]
fn a_last_round_cut_mid_write_does_not_make_gpus_lost() {
    // GPUs 0, 1 and 3 report to the end; the capture is killed in the middle of GPU 1's
    // row of the last round, so GPUs 1 and 3 are missing from that round only because of it.
    let text = std::fs::read_to_string(fixture("interleaved_lost.csv")).unwrap();
    let mut lines: Vec<&str> = text.lines().filter(|l| !l.contains(", 2, GPU-")).collect();
    lines.pop(); // GPU 3's row of the last round was never written
    let gpu1 = lines.pop().unwrap();
    let body = format!("{}\n{}", lines.join("\n"), &gpu1[..gpu1.len() / 2]);
    let file = temp_file("cut.csv", &body);
    let (report, stderr) = replay_json(&[path(&file)]);
    assert!(stderr.contains("row cut short"), "{stderr}");
    assert_eq!(report["gpus"].as_array().unwrap().len(), 3);
    for i in [0, 1, 3] {
        assert_eq!(gpu(&report, i)["lost"], false, "GPU {i}: {report:#}");
    }
}

#[test]
fn garbage_lines_warn_with_their_numbers_and_the_report_still_comes() {
    let file = fixture("garbage.csv");
    let (report, stderr) = replay_json(&[path(&file)]);
    let name = file.display().to_string();
    for (line, what) in [
        (
            0,
            "ignoring 1 column(s) gpu-sentinel has no use for: bogus.metric",
        ),
        (4, "row cut short"),
        (5, "temperature.gpu: cannot read \"hot\""),
        (6, "(out of order); row skipped"),
        (7, "row cut short: 1 fields"),
        (10, "changed index from 1 to 3"),
        (11, "row too long"),
        (12, "cannot read timestamp \"yesterday\""),
        (13, "memory.used: cannot read \"lots MiB\""),
        (15, "row cut short"),
    ] {
        let prefix = if line == 0 {
            format!("warning: {name}: ")
        } else {
            format!("warning: {name}:{line}: ")
        };
        assert!(
            stderr
                .lines()
                .any(|l| l.starts_with(&prefix) && l.contains(what)),
            "no warning {prefix}…{what} in:\n{stderr}"
        );
    }
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(report["samples"], 7);
    assert_eq!(report["gpus"].as_array().unwrap().len(), 2);
    // The GPU that changed index is followed by UUID and reported at its new index.
    assert_eq!(
        gpu(&report, 3)["uuid"],
        "GPU-bbbb0000-0000-0000-0000-000000000002"
    );
}

#[test]
fn logs_without_header_need_fields() {
    let text = std::fs::read_to_string(fixture("units.csv")).unwrap();
    let body: String = text.lines().skip(1).map(|l| format!("{l}\n")).collect();
    let file = temp_file("noheader.csv", &body);
    let out = run(&["replay", path(&file)]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no header line") && err.contains("--fields"),
        "{err}"
    );

    let header = text.lines().next().unwrap();
    let fields: Vec<&str> = header
        .split(", ")
        .map(|f| f.split(" [").next().unwrap())
        .collect();
    let (report, _) = replay_json(&["--fields", &fields.join(","), path(&file)]);
    let (with_header, _) = replay_json(&[path(&fixture("units.csv"))]);
    assert_eq!(report, with_header);
}

#[test]
fn unreadable_files_and_empty_logs_are_told_apart() {
    let out = run(&["replay", "/nonexistent/recording.csv"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot open the recording"));

    let file = temp_file("header-only.csv", "timestamp, index, uuid\n");
    let (report, stderr) = replay_json(&[path(&file)]);
    assert_eq!(report["samples"], 0);
    assert_eq!(report["start"], Value::Null);
    assert!(stderr.contains("no GPU samples"), "{stderr}");
}

/// Records a simulated fleet fast: 10 simulated hours, a snapshot a minute, the default
/// fault mix (memory wear, PCIe, thermal, fell off the bus, allocated-idle, ghost).
fn simulated_recording(name: &str) -> PathBuf {
    let out_file = temp_file(name, "");
    let out = run(&[
        "record",
        "--simulate",
        "--simulated-duration",
        "10h",
        "--interval",
        "60s",
        "--out",
        path(&out_file),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out_file
}

#[test]
fn replay_of_a_simulated_recording_finds_the_faults() {
    let file = simulated_recording("sim.jsonl");
    let (report, stderr) = replay_json(&[path(&file)]);
    assert!(
        stderr.contains("skipped 4 failure label line(s)"),
        "{stderr}"
    );
    assert_eq!(report["samples"], 600 * 8);
    // The simulator only reports values a GPU can have: the range checks clear nothing.
    assert!(!stderr.contains("out of range"), "{stderr}");
    // GPU 1 wears its memory out, GPU 4 falls off the bus, GPU 5 idles with memory held,
    // GPU 6 keeps a ghost process; GPU 0 stays healthy.
    let memory = gpu(&report, 1);
    assert!(findings(memory).contains(&"failure_risk"), "{memory:#}");
    assert!(memory["first_risk_warning"].is_string());
    let bus = gpu(&report, 4);
    assert_eq!(bus["lost"], true);
    assert!(findings(bus).contains(&"lost"), "{bus:#}");
    assert!(findings(gpu(&report, 5)).contains(&"allocated_idle"));
    assert!(findings(gpu(&report, 6)).contains(&"ghost_process"));
    let healthy = gpu(&report, 0);
    assert!(healthy["max_risk"].as_f64().unwrap() < 0.5, "{healthy:#}");
    assert_eq!(healthy["lost"], false);

    // The default alert rules ran over the recording.
    let alerts = report["alerts"].as_array().unwrap();
    let alert = |name: &str, gpu: &str| {
        alerts
            .iter()
            .find(|a| a["alertname"] == name && a["gpu"] == gpu)
            .unwrap_or_else(|| panic!("no {name} on GPU {gpu}: {alerts:#?}"))
    };
    let lost = alert("GpuLost", "4");
    assert_eq!(lost["severity"], "critical");
    assert!(lost["uuid"].as_str().unwrap().starts_with("GPU-"));
    assert!(
        lost["starts_at"].is_string() && lost["ends_at"].is_null(),
        "{lost}"
    );
    alert("GpuHardwareXid", "1");
    alert("GpuAllocatedIdle", "5");
    alert("GpuGhostProcess", "6");
    assert!(
        alerts
            .iter()
            .all(|a| a["gpu"] != "0" || a["alertname"] == "GpuLongRunningProcess")
    );
    for a in alerts {
        let keys: BTreeSet<&str> = a.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            BTreeSet::from([
                "alertname",
                "uuid",
                "gpu",
                "severity",
                "starts_at",
                "ends_at"
            ])
        );
    }

    // The same recording read from standard input, format named.
    let text = run_with_stdin(&["replay", "--json", "--format", "jsonl", "-"], &file);
    let from_stdin: Value = serde_json::from_slice(&text).unwrap();
    assert_eq!(from_stdin, report);
}

fn run_with_stdin(args: &[&str], input: &Path) -> Vec<u8> {
    let out = std::process::Command::new(common::binary())
        .args(args)
        .stdin(std::fs::File::open(input).unwrap())
        .output()
        .expect("the binary runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[test]
fn garbage_in_a_jsonl_recording_is_skipped_with_its_line_number() {
    let file = simulated_recording("sim-garbage.jsonl");
    let mut text = std::fs::read_to_string(&file).unwrap();
    let lines = text.lines().count();
    text.push_str("{\"not\": \"a snapshot\"}\nnonsense\n{\"at\": \"2026-");
    let garbled = temp_file("garbled.jsonl", &text);
    let (report, stderr) = replay_json(&[path(&garbled)]);
    let name = garbled.display().to_string();
    for n in [lines + 1, lines + 2, lines + 3] {
        assert!(
            stderr.contains(&format!("{name}:{n}: not a snapshot")),
            "line {n}:\n{stderr}"
        );
    }
    assert_eq!(report["samples"], 600 * 8);
}

#[test]
fn the_text_report_ranks_gpus_most_at_risk_first() {
    let out = run(&["replay", path(&fixture("interleaved_lost.csv"))]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("Replayed 72 GPU samples of 4 GPUs"),
        "{text}"
    );
    let first_gpu_row = text
        .lines()
        .skip_while(|l| !l.contains("MAX RISK"))
        .nth(1)
        .unwrap();
    assert!(first_gpu_row.trim_start().starts_with("2 "), "{text}");
    assert!(first_gpu_row.contains("lost"), "{text}");
}

/// Replays every nvidia-smi CSV section of the third-party captures when they are present
/// (`GPU_SENTINEL_CAPTURES`, default ../shared/third_party/nvidia_gpu_exporter-captures):
/// each must parse without a warning beyond the unused-columns one. Run with
/// `cargo test --test it replay:: -- --ignored --nocapture`; the captures are not part of the
/// project and no other test depends on them.
#[test]
#[ignore]
fn real_nvidia_smi_captures() {
    let dir = std::env::var_os("GPU_SENTINEL_CAPTURES").map_or_else(
        || repo().join("../shared/third_party/nvidia_gpu_exporter-captures"),
        PathBuf::from,
    );
    let Ok(entries) = std::fs::read_dir(&dir) else {
        eprintln!("skipping: no captures at {}", dir.display());
        return;
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no captures in {}", dir.display());
    for capture in files {
        let text = std::fs::read_to_string(&capture).unwrap();
        for (phase, csv) in query_gpu_sections(&text) {
            let rows = csv.lines().count() - 1;
            let name = format!(
                "{}-{phase}.csv",
                capture.file_stem().unwrap().to_string_lossy()
            );
            let file = temp_file(&name, &csv);
            let (report, stderr) = replay_json(&[path(&file)]);
            let warnings: Vec<&str> = stderr
                .lines()
                .filter(|l| l.starts_with("warning") && !l.contains("has no use for"))
                .collect();
            println!(
                "{name}: {rows} row(s), {} sample(s), {} warning(s) {warnings:?}",
                report["samples"],
                warnings.len()
            );
            assert_eq!(report["samples"], rows as u64, "{name}");
            assert!(warnings.is_empty(), "{name}: {warnings:?}");
        }
    }
}

/// The `query-gpu (csv…)` sections of a capture: (phase, header and rows).
fn query_gpu_sections(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let Some(rest) = line.strip_prefix("# ") else {
            continue;
        };
        let Some((phase, what)) = rest.split_once(" :: ") else {
            continue;
        };
        if !what.starts_with("query-gpu (csv") {
            continue;
        }
        // The command line, then a rule, then the CSV up to a blank line.
        for l in lines.by_ref() {
            if l.starts_with("####") {
                break;
            }
        }
        let mut csv = String::new();
        for l in lines.by_ref() {
            if l.trim().is_empty() {
                break;
            }
            csv.push_str(l);
            csv.push('\n');
        }
        out.push((phase.to_string(), csv));
    }
    out
}

#[test]
fn a_gzip_compressed_log_gives_the_same_report_and_a_binary_file_is_named() {
    use std::io::Write as _;
    let plain = std::fs::read(fixture("units.csv")).expect("fixture");
    let gz = temp_file("units.csv.gz", "");
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(&plain).expect("gzip");
    std::fs::write(&gz, encoder.finish().expect("gzip")).expect("write");
    let (from_plain, _) = replay_json(&[path(&fixture("units.csv"))]);
    let (from_gzip, _) = replay_json(&[path(&gz)]);
    assert_eq!(from_plain, from_gzip);

    let out = run(&["replay", path(&common::binary())]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("is not text") && !stderr.contains("no header line"),
        "{stderr}"
    );
}
