//! Unit tests of the nvidia-smi CSV reader (kept apart: the reader is long enough).

use super::*;
use crate::model::{ClockEvents, RemappedRows};
use crate::replay::smi_fields::parse_offset;

fn reader<'a>(text: &'a str, fields: Option<&str>) -> SmiCsvReader<&'a [u8]> {
    SmiCsvReader::new(
        text.as_bytes(),
        SmiCsvOptions {
            fields: fields.map(str::to_string),
            timezone: parse_offset("UTC").unwrap(),
        },
    )
}

/// Every snapshot as (time, [(uuid, up)]) plus the warnings.
fn read_all(text: &str, fields: Option<&str>) -> (Vec<Snapshot>, ReadStats, Vec<String>) {
    let mut r = reader(text, fields);
    let mut w = Warnings::collecting();
    let mut out = Vec::new();
    // One buffer refilled again and again, as the replay does.
    let mut s = Snapshot::default();
    while r.next_into(&mut s, &mut w).unwrap() {
        out.push(s.clone());
    }
    (out, r.stats(), w.messages().to_vec())
}

const UNITS: &str = "\
timestamp, index, uuid, name, pci.bus_id, utilization.gpu [%], utilization.memory [%], memory.total [MiB], memory.used [MiB], temperature.gpu, temperature.memory, power.draw [W], enforced.power.limit [W], clocks.sm [MHz], clocks.max.sm [MHz], pstate, clocks_event_reasons.active, clocks_event_reasons.sw_thermal_slowdown, ecc.errors.corrected.volatile.total, remapped_rows.pending, remapped_rows.failure, pcie.link.gen.current, pcie.link.width.current, fan.speed [%], mig.mode.current
2026/07/14 08:12:38.696, 0, GPU-aaaa, NVIDIA H100 80GB HBM3, 00000000:18:00.0, 100 %, 11 %, 81559 MiB, 19818 MiB, 59, 54, 631.95 W, 700.00 W, 1980 MHz, 1980 MHz, P0, 0x0000000000000001, Not Active, 0, No, No, 5, 16, [N/A], Disabled
2026/07/14 08:12:38.701, 1, GPU-bbbb, NVIDIA H100 80GB HBM3, 00000000:2A:00.0, 0 %, 0 %, 81559 MiB, 0 MiB, 41, N/A, 69.85 W, 700.00 W, 345 MHz, 1980 MHz, P0, 0x0000000000000000, Active, 3, Yes, No, 5, 16, 30 %, Enabled
2026/07/14 08:12:43.700, 0, GPU-aaaa, NVIDIA H100 80GB HBM3, 00000000:18:00.0, 99 %, 10 %, 81559 MiB, 19818 MiB, 60, 55, 640.00 W, 700.00 W, 1980 MHz, 1980 MHz, P0, 0x0000000000000000, Not Active, 0, No, No, 5, 16, [N/A], Disabled
2026/07/14 08:12:43.705, 1, GPU-bbbb, NVIDIA H100 80GB HBM3, 00000000:2A:00.0, 0 %, 0 %, 81559 MiB, 0 MiB, 41, N/A, 69.00 W, 700.00 W, 345 MHz, 1980 MHz, P8, 0x0000000000000000, Not Active, 4, Yes, No, 5, 16, 30 %, Enabled
";

#[test]
fn rows_become_snapshots_with_every_field_mapped() {
    let (snaps, stats, warnings) = read_all(UNITS, None);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(snaps.len(), 2);
    assert_eq!(stats.samples, 4);
    assert!(!stats.partial_last_round);
    let s = &snaps[0];
    assert_eq!(s.at.to_rfc3339(), "2026-07-14T08:12:38.696+00:00");
    let a = &s.gpus[0];
    assert_eq!((a.index, a.uuid.as_str()), (0, "GPU-aaaa"));
    assert_eq!(a.name, "NVIDIA H100 80GB HBM3");
    assert_eq!(a.pci_bus_id, "00000000:18:00.0");
    assert_eq!(a.utilization.gpu, Some(1.0));
    assert_eq!(a.utilization.memory_copy, Some(0.11));
    assert_eq!(a.memory.total_bytes, Some(81559 << 20));
    assert_eq!(a.memory.used_bytes, Some(19818 << 20));
    assert_eq!(a.temperature_celsius, Some(59.0));
    assert_eq!(a.memory_temperature_celsius, Some(54.0));
    assert_eq!(a.power_watts, Some(631.95));
    assert_eq!(a.power_limit_watts, Some(700.0));
    assert_eq!(a.clocks.sm, Some(1980));
    assert_eq!(a.clocks_max.sm, Some(1980));
    assert_eq!(a.performance_state, Some(0));
    assert_eq!(a.clock_events, Some(ClockEvents(ClockEvents::GPU_IDLE)));
    assert_eq!(a.ecc.corrected_volatile, Some(0));
    assert_eq!(a.remapped_rows, Some(RemappedRows::default()));
    assert_eq!(a.pcie.link_generation, Some(5));
    assert_eq!(a.pcie.link_width, Some(16));
    assert_eq!(a.fan_speed_ratio, None);
    assert_eq!(a.mig_enabled, Some(false));
    assert!(a.up);
    let b = &s.gpus[1];
    assert_eq!(b.memory_temperature_celsius, None);
    assert_eq!(
        b.clock_events,
        Some(ClockEvents(ClockEvents::SW_THERMAL_SLOWDOWN))
    );
    assert!(b.remapped_rows.unwrap().pending);
    assert_eq!(b.fan_speed_ratio, Some(0.3));
    assert_eq!(b.mig_enabled, Some(true));
    assert_eq!(snaps[1].gpus[1].performance_state, Some(8));
}

#[test]
fn nounits_and_noheader_logs() {
    let nounits = "\
timestamp, index, uuid, memory.used [MiB], power.draw [W], utilization.gpu [%]
2026/07/14 08:12:38.696, 0, GPU-aaaa, 1024, 70.5, 41
";
    let (snaps, _, warnings) = read_all(nounits, None);
    assert!(warnings.is_empty(), "{warnings:?}");
    let g = &snaps[0].gpus[0];
    assert_eq!(g.memory.used_bytes, Some(1 << 30));
    assert_eq!(g.power_watts, Some(70.5));
    assert_eq!(g.utilization.gpu, Some(0.41));

    let noheader = "2026/07/14 08:12:38.696, 0, GPU-aaaa, 1024 MiB, 41 %\n";
    let mut r = reader(noheader, None);
    let err = r
        .next_into(&mut Snapshot::default(), &mut Warnings::collecting())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no header line") && err.contains("--fields"),
        "{err}"
    );
    let fields = Some("timestamp,index,uuid,memory.used,utilization.gpu");
    let (snaps, _, warnings) = read_all(noheader, fields);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(snaps[0].gpus[0].memory.used_bytes, Some(1 << 30));
    assert_eq!(snaps[0].gpus[0].utilization.gpu, Some(0.41));
    // nounits and noheader: the field's usual unit.
    let bare = "2026/07/14 08:12:38.696, 0, GPU-aaaa, 1024, 41\n";
    let (snaps, _, _) = read_all(bare, fields);
    assert_eq!(snaps[0].gpus[0].memory.used_bytes, Some(1 << 30));
    assert_eq!(snaps[0].gpus[0].utilization.gpu, Some(0.41));
}

#[test]
fn a_log_without_timestamps_is_refused_clearly() {
    let mut r = reader("index, utilization.gpu [%]\n0, 5 %\n", None);
    let err = r
        .next_into(&mut Snapshot::default(), &mut Warnings::collecting())
        .unwrap_err()
        .to_string();
    assert!(err.contains("timestamp"), "{err}");
}

#[test]
fn garbage_warns_with_line_numbers_and_reading_goes_on() {
    let text = "\
timestamp, index, uuid, utilization.gpu [%], bogus.field, temperature.gpu
2026/07/14 08:00:00.000, 0, GPU-a, 10 %, x, 40
2026/07/14 08:00:00.005, 1, GPU-b, 10 %, x, hot
2026/07/14 08:00:05.000, 0, GPU-a, 10 %
2026/07/14 07:00:00.000, 0, GPU-a, 10 %, x, 40
not a time, 1, GPU-b, 10 %, x, 40
2026/07/14 08:00:10.000, 0, GPU-a, 10 %, x, 40
2026/07/14 08:00:10.004, 3, GPU-b, 12 %, x, 41
2026/07/14 08:00:15.000, 0, GPU-a, 10 %, x, 40, 7
2026/07/14 08:00:20.000, 0, GPU-a, 10 %, x, 4";
    let (snaps, stats, warnings) = read_all(text, None);
    let expect = [
        "input: ignoring 1 column(s) gpu-sentinel has no use for: bogus.field",
        "input:3: temperature.gpu: cannot read \"hot\"; left empty",
        "input:4: row cut short: 4 fields, the header has 6; row skipped",
        "input:5: timestamp 2026-07-14 07:00:00.000 is before the round at 2026-07-14 08:00:00.000",
        "input:6: cannot read timestamp \"not a time\"; row skipped",
        "input:8: GPU-b changed index from 1 to 3; following it by its UUID",
        "input:9: row too long: 7 fields, the header has 6; row skipped",
        // The last line has no newline: a log cut off mid-write, perhaps inside the row.
        "input:10: the log ends inside this row (no newline after it)",
        // GPU-b's row of that last round was never written.
        "input: the log ends part-way through the round at 2026-07-14 08:00:20.000 (1 of 2 GPUs written): that round is left out",
    ];
    assert_eq!(warnings.len(), expect.len(), "{warnings:#?}");
    for (w, e) in warnings.iter().zip(expect) {
        assert!(w.starts_with(e), "{w:?} does not start with {e:?}");
    }
    let times: Vec<String> = snaps
        .iter()
        .map(|s| s.at.format("%M:%S").to_string())
        .collect();
    assert_eq!(times, ["00:00", "00:10"]);
    assert_eq!(snaps[0].gpus[1].temperature_celsius, None);
    assert_eq!(snaps[1].gpus[1].index, 3);
    assert_eq!(stats.samples, 4);
}

#[test]
fn rows_that_stop_and_unreachable_gpus() {
    let text = "\
timestamp, index, uuid, pci.bus_id, utilization.gpu [%]
2026/07/14 08:00:00.000, 0, GPU-a, 00000000:18:00.0, 10 %
2026/07/14 08:00:00.003, 1, GPU-b, 00000000:2A:00.0, 10 %
2026/07/14 08:00:05.000, 0, GPU-a, 00000000:18:00.0, 10 %
Unable to determine the device handle for GPU0000:2A:00.0: GPU is lost. Reboot the system to recover this GPU
2026/07/14 08:00:10.000, 0, GPU-a, 00000000:18:00.0, [GPU is lost]
";
    let (snaps, _, warnings) = read_all(text, None);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("nvidia-smi could not read a GPU"));
    assert_eq!(snaps.len(), 3);
    let second: Vec<(&str, bool)> = snaps[1]
        .gpus
        .iter()
        .map(|g| (g.uuid.as_str(), g.up))
        .collect();
    assert_eq!(second, [("GPU-a", true), ("GPU-b", false)]);
    assert!(!snaps[2].gpus[0].up);
}

#[test]
fn logs_without_uuids_identify_gpus_by_bus_or_index() {
    let text = "\
timestamp, index, utilization.gpu [%]
2026/07/14 08:00:00.000, 0, 10 %
2026/07/14 08:00:00.003, 1, 10 %
2026/07/14 08:00:05.000, 0, 10 %
2026/07/14 08:00:05.003, 1, 10 %
";
    let (snaps, _, warnings) = read_all(text, None);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(snaps.len(), 2);
    assert_eq!(snaps[0].gpus[1].uuid, "gpu-1");
    let text = "timestamp, pci.bus_id\n2026/07/14 08:00:00.000, 00000000:18:00.0\n";
    let (snaps, _, _) = read_all(text, None);
    assert_eq!(snaps[0].gpus[0].uuid, "pci-00000000:18:00.0");
}

#[test]
fn a_restarted_nvidia_smi_may_append_a_new_header() {
    let text = "\
timestamp, index, uuid, utilization.gpu [%]
2026/07/14 08:00:00.000, 0, GPU-a, 10 %
timestamp, uuid, index, temperature.gpu
2026/07/14 09:00:00.000, GPU-a, 0, 50
";
    let (snaps, _, warnings) = read_all(text, None);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(snaps.len(), 2);
    assert_eq!(snaps[1].gpus[0].temperature_celsius, Some(50.0));
    assert_eq!(snaps[1].gpus[0].uuid, "GPU-a");
}

#[test]
fn samples_are_recycled_without_leaking_old_values() {
    let text = "\
timestamp, index, uuid, serial, temperature.gpu
2026/07/14 08:00:00.000, 0, GPU-a, 123, 50
2026/07/14 08:00:05.000, 0, GPU-a, [N/A], [N/A]
";
    let (snaps, _, _) = read_all(text, None);
    assert_eq!(snaps[0].gpus[0].serial.as_deref(), Some("123"));
    assert_eq!(snaps[1].gpus[0].serial, None);
    assert_eq!(snaps[1].gpus[0].temperature_celsius, None);
}

#[test]
fn garbled_uuids_and_too_many_gpus_are_refused() {
    let mut text = String::from("timestamp, uuid, utilization.gpu [%]\n");
    text.push_str("2026/07/14 08:00:00.000, NVIDIA H100, 10 %\n");
    for i in 0..=MAX_GPUS {
        text.push_str(&format!("2026/07/14 08:00:00.000, GPU-{i:08x}, 10 %\n"));
    }
    let (snaps, stats, warnings) = read_all(&text, None);
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings[0].contains("\"NVIDIA H100\" is not a GPU UUID"));
    assert!(warnings[1].contains("rows of new GPUs past 1024 are skipped"));
    assert_eq!(stats.samples, MAX_GPUS as u64);
    assert_eq!(snaps.len(), 1);
}

#[test]
fn duplicated_rows_are_skipped_and_counted_with_the_line_they_repeat() {
    let text = "\
timestamp, index, uuid, utilization.gpu [%]
2026/07/14 08:00:00.000, 0, GPU-a, 10 %
2026/07/14 08:00:00.003, 1, GPU-b, 20 %
2026/07/14 08:00:00.003, 1, GPU-b, 20 %
2026/07/14 08:00:05.000, 0, GPU-a, 11 %
2026/07/14 08:00:05.000, 0, GPU-a, 11 %
2026/07/14 08:00:05.003, 1, GPU-b, 21 %
";
    let (snaps, stats, warnings) = read_all(text, None);
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[0].starts_with(
            "input:4: duplicate of line 3 (GPU-b at 2026-07-14 08:00:00.003); row skipped"
        ),
        "{warnings:?}"
    );
    assert!(
        warnings[1].starts_with("input:6: duplicate of line 5"),
        "{warnings:?}"
    );
    assert_eq!(stats.duplicates, 2);
    assert_eq!(stats.samples, 4);
    let rounds: Vec<Vec<&str>> = snaps
        .iter()
        .map(|s| s.gpus.iter().map(|g| g.uuid.as_str()).collect())
        .collect();
    assert_eq!(rounds, [["GPU-a", "GPU-b"], ["GPU-a", "GPU-b"]]);
}

#[test]
fn a_cut_last_round_is_kept_only_when_a_gpu_stopped_answering_in_it() {
    let head = "\
timestamp, index, uuid, utilization.gpu [%]
2026/07/14 08:00:00.000, 0, GPU-a, 10 %
2026/07/14 08:00:00.003, 1, GPU-b, 20 %
2026/07/14 08:00:00.006, 2, GPU-c, 30 %
";
    let answering = format!("{head}2026/07/14 08:00:05.000, 0, GPU-a, 10 %\n");
    let (snaps, stats, warnings) = read_all(&answering, None);
    assert_eq!(snaps.len(), 1);
    assert_eq!(stats.samples, 3);
    assert!(!stats.partial_last_round);
    assert_eq!(
        warnings,
        [
            "input: the log ends part-way through the round at 2026-07-14 08:00:05.000 (1 of 3 GPUs written): that round is left out, and no GPU is judged on it"
        ]
    );
    let lost = format!("{head}2026/07/14 08:00:05.000, 0, GPU-a, [GPU is lost]\n");
    let (snaps, stats, warnings) = read_all(&lost, None);
    assert_eq!(snaps.len(), 2);
    assert!(!snaps[1].gpus[0].up);
    assert!(stats.partial_last_round);
    assert!(
        warnings[0].contains("kept for the GPU(s) that stopped answering"),
        "{warnings:?}"
    );
}

#[test]
fn values_out_of_range_are_cleared_and_tallied_by_field_and_first_line() {
    let text = "\
timestamp, index, uuid, temperature.gpu, utilization.gpu [%], power.draw [W]
2026/07/14 08:00:00.000, 0, GPU-a, 50, 10 %, 300 W
2026/07/14 08:00:05.000, 0, GPU-a, -5, 150 %, 300 W
2026/07/14 08:00:10.000, 0, GPU-a, -5, 10 %, -1 W
";
    let (snaps, stats, warnings) = read_all(text, None);
    assert!(warnings.is_empty(), "{warnings:?}");
    let temperatures: Vec<Option<f64>> = snaps
        .iter()
        .map(|s| s.gpus[0].temperature_celsius)
        .collect();
    assert_eq!(temperatures, [Some(50.0), None, None]);
    assert_eq!(snaps[1].gpus[0].utilization.gpu, None);
    assert_eq!(snaps[1].gpus[0].power_watts, Some(300.0));
    assert_eq!(stats.rejected.total(), 4);
    assert_eq!(
        stats.rejected.summary().unwrap(),
        "4 values out of range, left empty (temperature_celsius: 2, first at line 3; \
         power_watts: 1, first at line 4; utilization.gpu: 1, first at line 3)"
    );
}

#[test]
fn a_row_whose_values_all_read_unknown_error_is_a_lost_gpu() {
    let text = "\
timestamp, index, uuid, name, pci.bus_id, driver_version, temperature.gpu, power.draw [W], fan.speed [%], ecc.errors.corrected.volatile.total
2026/07/14 08:00:00.000, 0, GPU-aaaa, NVIDIA H100 80GB HBM3, 00000000:18:00.0, 570.124.06, 50, 100.00 W, [N/A], 0
2026/07/14 08:00:00.003, 1, GPU-bbbb, NVIDIA H100 80GB HBM3, 00000000:2A:00.0, 570.124.06, [Unknown Error], [Unknown Error], [Unknown Error], [Unknown Error]
2026/07/14 08:00:05.000, 0, GPU-aaaa, NVIDIA H100 80GB HBM3, 00000000:18:00.0, 570.124.06, [N/A], [Not Supported], [N/A], [Unknown Error]
2026/07/14 08:00:05.003, 1, GPU-bbbb, NVIDIA H100 80GB HBM3, 00000000:2A:00.0, 570.124.06, [GPU is lost], [Unknown Error], [Unknown Error], [GPU requires reset]
";
    let (snaps, stats, warnings) = read_all(text, None);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(stats.samples, 4);
    let up: Vec<Vec<(&str, bool)>> = snaps
        .iter()
        .map(|s| s.gpus.iter().map(|g| (g.uuid.as_str(), g.up)).collect())
        .collect();
    // GPU-aaaa's second row has no value, but nvidia-smi read it as absent: it answers.
    assert_eq!(
        up,
        [
            [("GPU-aaaa", true), ("GPU-bbbb", false)],
            [("GPU-aaaa", true), ("GPU-bbbb", false)]
        ]
    );
    // The lost GPU keeps its identity.
    let b = &snaps[0].gpus[1];
    assert_eq!((b.index, b.pci_bus_id.as_str()), (1, "00000000:2A:00.0"));
}

#[test]
fn rows_in_another_order_than_the_round_before_keep_their_gpus() {
    // The reader guesses each row's GPU from the row before (nvidia-smi keeps its order);
    // a round in another order, or with a GPU new to the log, must not fool it.
    let text = "\
timestamp, index, uuid, utilization.gpu [%]
2026/07/14 08:00:00.000, 0, GPU-a, 10 %
2026/07/14 08:00:00.003, 1, GPU-b, 20 %
2026/07/14 08:00:00.006, 2, GPU-c, 30 %
2026/07/14 08:00:05.000, 2, GPU-c, 31 %
2026/07/14 08:00:05.003, 0, GPU-a, 11 %
2026/07/14 08:00:05.004, 3, GPU-d, 41 %
2026/07/14 08:00:05.006, 1, GPU-b, 21 %
2026/07/14 08:00:10.000, 0, GPU-a, 12 %
2026/07/14 08:00:10.003, 1, GPU-b, 22 %
2026/07/14 08:00:10.006, 2, GPU-c, 32 %
2026/07/14 08:00:10.009, 3, GPU-d, 42 %
";
    let (snaps, stats, warnings) = read_all(text, None);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(stats.samples, 11);
    let rounds: Vec<Vec<(&str, u32, Option<f64>)>> = snaps
        .iter()
        .map(|s| {
            s.gpus
                .iter()
                .map(|g| (g.uuid.as_str(), g.index, g.utilization.gpu))
                .collect()
        })
        .collect();
    assert_eq!(
        rounds,
        [
            vec![
                ("GPU-a", 0, Some(0.10)),
                ("GPU-b", 1, Some(0.20)),
                ("GPU-c", 2, Some(0.30))
            ],
            vec![
                ("GPU-c", 2, Some(0.31)),
                ("GPU-a", 0, Some(0.11)),
                ("GPU-d", 3, Some(0.41)),
                ("GPU-b", 1, Some(0.21))
            ],
            vec![
                ("GPU-a", 0, Some(0.12)),
                ("GPU-b", 1, Some(0.22)),
                ("GPU-c", 2, Some(0.32)),
                ("GPU-d", 3, Some(0.42))
            ],
        ]
    );
}
