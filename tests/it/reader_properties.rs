//! Property tests of the two recording readers `replay` uses (nvidia-smi CSV and JSONL):
//! arbitrary bytes never panic, and well-formed data survives any noise around it.
//!
//! The second kind generates K polling rounds of G GPUs — any subset and order of known
//! fields, with or without units, with or without a header (`--fields`), `[N/A]`-style
//! cells anywhere — then injects duplicated rows, stale copies of earlier rows, garbage
//! lines, repeated headers, comments and blank lines at random positions, and asserts that
//! the reader yields exactly the K×G generated samples with their values, grouped in their
//! K rounds, and counts exactly the duplicates injected. Case counts keep each property to
//! a few seconds in a debug build (they run with every `cargo test`).

use chrono::{DateTime, TimeDelta, TimeZone, Utc};
use proptest::prelude::*;
use proptest::test_runner::Config as ProptestConfig;

use gpu_sentinel::model::{GpuSample, Snapshot};
use gpu_sentinel::replay::jsonl::JsonlReader;
use gpu_sentinel::replay::smi_csv::{SmiCsvOptions, SmiCsvReader};
use gpu_sentinel::replay::smi_fields::parse_offset;
use gpu_sentinel::replay::{ReadStats, SnapshotReader, Warnings};

/// Bounded, and without a regressions file: a failure prints its minimal case.
fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Reads every snapshot; stops at the first error (a CSV whose columns cannot be known).
/// Checks what must hold of any input: each snapshot names each GPU once, snapshots never
/// go back in time, and the count of samples is what was handed out.
fn read_all(reader: &mut dyn SnapshotReader) -> (Vec<Snapshot>, ReadStats, bool) {
    let mut warnings = Warnings::collecting();
    let mut out: Vec<Snapshot> = Vec::new();
    let mut snapshot = Snapshot::default();
    let mut failed = false;
    loop {
        match reader.next_into(&mut snapshot, &mut warnings) {
            Ok(true) => out.push(snapshot.clone()),
            Ok(false) => break,
            Err(_) => {
                failed = true;
                break;
            }
        }
    }
    let stats = reader.stats();
    for (i, s) in out.iter().enumerate() {
        let mut uuids: Vec<&str> = s.gpus.iter().map(|g| g.uuid.as_str()).collect();
        uuids.sort_unstable();
        uuids.dedup();
        assert_eq!(
            uuids.len(),
            s.gpus.len(),
            "a GPU twice in snapshot {i}: {s:?}"
        );
        if i > 0 {
            assert!(s.at >= out[i - 1].at, "snapshot {i} goes back in time");
        }
    }
    let samples: usize = out.iter().map(|s| s.gpus.len()).sum();
    if !failed {
        assert_eq!(stats.samples, samples as u64);
    }
    (out, stats, failed)
}

fn csv_reader(text: &[u8], fields: Option<String>) -> SmiCsvReader<&[u8]> {
    SmiCsvReader::new(
        text,
        SmiCsvOptions {
            fields,
            timezone: parse_offset("UTC").expect("UTC"),
        },
    )
}

/// Reads `text` as `replay` does (records read ahead on a thread of their own) and as the
/// reader alone does, and checks both give the same snapshots, counts and warnings.
fn same_read_ahead(text: &[u8], fields: Option<String>) -> Result<(), TestCaseError> {
    let options = || SmiCsvOptions {
        fields: fields.clone(),
        timezone: parse_offset("UTC").expect("UTC"),
    };
    let read = |reader: &mut dyn SnapshotReader| {
        let mut warnings = Warnings::collecting();
        let mut out = Vec::new();
        let mut snapshot = Snapshot::default();
        let end = loop {
            match reader.next_into(&mut snapshot, &mut warnings) {
                Ok(true) => out.push(snapshot.clone()),
                Ok(false) => break String::new(),
                Err(e) => break format!("{e:#}"),
            }
        };
        (
            out,
            format!("{:?}", reader.stats()),
            warnings.messages().to_vec(),
            end,
        )
    };
    let here = read(&mut SmiCsvReader::new(text, options()));
    let ahead = read(&mut SmiCsvReader::reading_ahead(
        std::io::Cursor::new(text.to_vec()),
        options(),
    ));
    prop_assert_eq!(here.0, ahead.0);
    prop_assert_eq!(here.1, ahead.1);
    prop_assert_eq!(here.2, ahead.2);
    prop_assert_eq!(here.3, ahead.3);
    Ok(())
}

/// A column of the generated logs besides `timestamp` and `uuid`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Col {
    Index,
    Name,
    Bus,
    Util,
    MemTotal,
    MemUsed,
    Temp,
    Power,
    ClockSm,
    Fan,
    Pstate,
    Ecc,
}

const COLS: [Col; 12] = [
    Col::Index,
    Col::Name,
    Col::Bus,
    Col::Util,
    Col::MemTotal,
    Col::MemUsed,
    Col::Temp,
    Col::Power,
    Col::ClockSm,
    Col::Fan,
    Col::Pstate,
    Col::Ecc,
];

/// `None` for timestamp and uuid, which every generated log has.
type Column = Option<Col>;

impl Col {
    /// Name and unit as nvidia-smi writes them in the header.
    fn header(self) -> &'static str {
        match self {
            Col::Index => "index",
            Col::Name => "name",
            Col::Bus => "pci.bus_id",
            Col::Util => "utilization.gpu [%]",
            Col::MemTotal => "memory.total [MiB]",
            Col::MemUsed => "memory.used [MiB]",
            Col::Temp => "temperature.gpu",
            Col::Power => "power.draw [W]",
            Col::ClockSm => "clocks.sm [MHz]",
            Col::Fan => "fan.speed [%]",
            Col::Pstate => "pstate",
            Col::Ecc => "ecc.errors.corrected.volatile.total",
        }
    }

    /// The unit a `units` log writes after each value.
    fn unit(self) -> &'static str {
        match self {
            Col::Util | Col::Fan => " %",
            Col::MemTotal | Col::MemUsed => " MiB",
            Col::Power => " W",
            Col::ClockSm => " MHz",
            _ => "",
        }
    }
}

/// One generated log and what reading it must give.
#[derive(Debug)]
struct Log {
    text: String,
    /// The `--fields` list when the log has no header.
    fields: Option<String>,
    expected: Vec<Snapshot>,
    duplicates: u64,
}

const PLACEHOLDERS: [&str; 5] = [
    "[N/A]",
    "[Not Supported]",
    "[Unknown Error]",
    "N/A",
    "[Insufficient Permissions]",
];

/// Lines that are neither a row nor a header, as seen in real captures and worse.
const GARBAGE: [&str; 6] = [
    "nvidia-smi: command not found",
    "Failed to initialize NVML: Driver/library version mismatch",
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
    ",,,,",
    "0x00",
    "\u{feff}\u{fffd}\u{fffd}",
];

/// The cell of `col` for GPU `gpu` from a random `seed`, and what it sets in `sample`.
fn cell(col: Col, gpu: usize, seed: u32, units: bool, sample: &mut GpuSample) -> String {
    let unit = if units { col.unit() } else { "" };
    match col {
        Col::Index => return gpu.to_string(),
        Col::Name => {
            sample.name = "NVIDIA H100 80GB HBM3".into();
            return sample.name.clone();
        }
        Col::Bus => {
            sample.pci_bus_id = format!("00000000:{:02X}:00.0", 0x18 + gpu);
            return sample.pci_bus_id.clone();
        }
        _ => {}
    }
    if seed % 11 == 0 {
        return PLACEHOLDERS[(seed / 11) as usize % PLACEHOLDERS.len()].to_string();
    }
    let v = seed / 11;
    match col {
        Col::Util => {
            let pct = v % 101;
            sample.utilization.gpu = Some(f64::from(pct) / 100.0);
            format!("{pct}{unit}")
        }
        Col::MemTotal => {
            sample.memory.total_bytes = Some(81_559 << 20);
            format!("81559{unit}")
        }
        Col::MemUsed => {
            let mib = v % 81_560;
            sample.memory.used_bytes = Some(u64::from(mib) << 20);
            format!("{mib}{unit}")
        }
        Col::Temp => {
            let c = v % 121;
            sample.temperature_celsius = Some(f64::from(c));
            c.to_string()
        }
        Col::Power => {
            let centiwatts = v % 70_001;
            sample.power_watts = Some(f64::from(centiwatts) / 100.0);
            format!("{}.{:02}{unit}", centiwatts / 100, centiwatts % 100)
        }
        Col::ClockSm => {
            let mhz = v % 2001;
            sample.clocks.sm = Some(mhz);
            format!("{mhz}{unit}")
        }
        Col::Fan => {
            let pct = v % 101;
            sample.fan_speed_ratio = Some(f64::from(pct) / 100.0);
            format!("{pct}{unit}")
        }
        Col::Pstate => {
            let p = v % 16;
            sample.performance_state = Some(p);
            format!("P{p}")
        }
        Col::Ecc => {
            let n = v % 1000;
            sample.ecc.corrected_volatile = Some(u64::from(n));
            n.to_string()
        }
        Col::Index | Col::Name | Col::Bus => unreachable!("identity columns returned above"),
    }
}

/// A line of a generated log before noise, or noise.
#[derive(Debug, Clone)]
enum Line {
    /// The row of GPU `gpu` in round `round`.
    Row {
        round: usize,
        gpu: usize,
        text: String,
    },
    /// A copy of a row, which the reader skips (counted as a duplicate when it repeats its
    /// GPU's latest row, else out of order).
    Copy(String),
    Other(String),
}

fn uuid(gpu: usize) -> String {
    format!("GPU-{gpu:08x}-0000-4000-8000-00000000abcd")
}

#[allow(clippy::too_many_arguments)]
fn build_log(
    gpus: usize,
    rounds: usize,
    columns: &[Column],
    units: bool,
    header: bool,
    interval_s: i64,
    seeds: &[u32],
    noise: &[(usize, u8, usize, String)],
) -> Log {
    let base = Utc
        .with_ymd_and_hms(2026, 7, 14, 8, 0, 0)
        .single()
        .expect("a valid time");
    let header_line: Vec<&str> = columns
        .iter()
        .map(|c| match c {
            None => "",
            Some(col) => col.header(),
        })
        .collect();
    // The two `None`s are timestamp then uuid, in the order they appear.
    let mut names = Vec::new();
    let mut fixed = ["timestamp", "uuid"].into_iter();
    for (c, h) in columns.iter().zip(&header_line) {
        names.push(match c {
            None => fixed.next().expect("two fixed columns").to_string(),
            Some(_) => h.to_string(),
        });
    }
    let header_text = names.join(", ");
    let mut lines: Vec<Line> = Vec::new();
    let mut expected = Vec::new();
    let mut seed = seeds.iter().copied().cycle();
    for round in 0..rounds {
        let round_at = base + TimeDelta::seconds(interval_s * round as i64);
        let mut snapshot = Snapshot {
            at: round_at,
            ..Snapshot::default()
        };
        for gpu in 0..gpus {
            let at = round_at + TimeDelta::milliseconds(3 * gpu as i64);
            let mut sample = GpuSample {
                uuid: uuid(gpu),
                up: true,
                ..GpuSample::default()
            };
            let mut fixed = 0;
            let cells: Vec<String> = columns
                .iter()
                .map(|c| match c {
                    None => {
                        fixed += 1;
                        if fixed == 1 {
                            at.format("%Y/%m/%d %H:%M:%S%.3f").to_string()
                        } else {
                            sample.uuid.clone()
                        }
                    }
                    Some(col) => cell(*col, gpu, seed.next().unwrap_or(1), units, &mut sample),
                })
                .collect();
            if columns.contains(&Some(Col::Index)) {
                sample.index = gpu as u32;
            }
            // A row whose every value cell reads `[Unknown Error]` is a GPU nvidia-smi
            // could not read: lost, its identity cells kept.
            let mut values = columns
                .iter()
                .zip(&cells)
                .filter(|(c, _)| !matches!(c, None | Some(Col::Index | Col::Name | Col::Bus)))
                .peekable();
            if values.peek().is_some() && values.all(|(_, cell)| cell == "[Unknown Error]") {
                sample.up = false;
            }
            snapshot.gpus.push(sample);
            lines.push(Line::Row {
                round,
                gpu,
                text: cells.join(", "),
            });
        }
        expected.push(snapshot);
    }
    let mut duplicates = 0;
    for (position, kind, pick, garbage) in noise {
        let at = position % (lines.len() + 1);
        let rows_before: Vec<(usize, usize, &str)> = lines[..at]
            .iter()
            .filter_map(|l| match l {
                Line::Row { round, gpu, text } => Some((*round, *gpu, text.as_str())),
                _ => None,
            })
            .collect();
        let line = match kind % 6 {
            // A row written again right away, or a copy of any earlier row: a copy of its
            // GPU's latest row before here is a duplicate, of an older one stale.
            0 | 1 => {
                let Some(&last) = rows_before.last() else {
                    continue;
                };
                let (round, gpu, text) = if kind % 6 == 0 {
                    last
                } else {
                    rows_before[pick % rows_before.len()]
                };
                let latest = rows_before
                    .iter()
                    .rev()
                    .find(|(_, g, _)| *g == gpu)
                    .is_some_and(|(r, _, _)| *r == round);
                duplicates += u64::from(latest);
                Line::Copy(text.to_string())
            }
            2 => Line::Other(if garbage.is_empty() {
                GARBAGE[pick % GARBAGE.len()].to_string()
            } else {
                garbage.clone()
            }),
            3 => Line::Other(header_text.clone()),
            4 => Line::Other(String::new()),
            _ => Line::Other("# nvidia-smi restarted".into()),
        };
        lines.insert(at, line);
    }
    let mut text = String::new();
    if header {
        text.push_str(&header_text);
        text.push('\n');
    }
    for line in &lines {
        let l = match line {
            Line::Row { text, .. } | Line::Copy(text) | Line::Other(text) => text,
        };
        text.push_str(l);
        text.push('\n');
    }
    let fields = (!header).then(|| {
        names
            .iter()
            .map(|n| n.split(" [").next().unwrap_or(n))
            .collect::<Vec<_>>()
            .join(",")
    });
    Log {
        text,
        fields,
        expected,
        duplicates,
    }
}

/// Columns: timestamp and uuid (as `None`) and a subset of the others, in any order.
fn columns() -> impl Strategy<Value = Vec<Column>> {
    proptest::sample::subsequence(COLS.to_vec(), 0..=COLS.len())
        .prop_map(|cols| {
            let mut all: Vec<Column> = vec![None, None];
            all.extend(cols.into_iter().map(Some));
            all
        })
        .prop_shuffle()
}

/// Noise: (position, kind, pick, garbage text or empty for a canned line). Random garbage
/// is drawn from characters that cannot make a timestamp, so it can never be a row.
fn noise() -> impl Strategy<Value = Vec<(usize, u8, usize, String)>> {
    prop::collection::vec(
        (
            any::<usize>(),
            any::<u8>(),
            any::<usize>(),
            prop_oneof![Just(String::new()), "[0-9 ,;%!?\\[\\]]{0,40}"],
        ),
        0..12,
    )
}

/// The fields of `sample` a generated log can set, for comparison.
fn compare(read: &GpuSample, want: &GpuSample, columns: &[Column]) {
    assert_eq!(read.uuid, want.uuid);
    assert_eq!(read.up, want.up);
    if columns.contains(&Some(Col::Index)) {
        assert_eq!(read.index, want.index);
    }
    assert_eq!(read.name, want.name);
    assert_eq!(read.pci_bus_id, want.pci_bus_id);
    assert_eq!(read.utilization.gpu, want.utilization.gpu);
    assert_eq!(read.memory.total_bytes, want.memory.total_bytes);
    assert_eq!(read.memory.used_bytes, want.memory.used_bytes);
    assert_eq!(read.temperature_celsius, want.temperature_celsius);
    assert_eq!(read.power_watts, want.power_watts);
    assert_eq!(read.clocks.sm, want.clocks.sm);
    assert_eq!(read.fan_speed_ratio, want.fan_speed_ratio);
    assert_eq!(read.performance_state, want.performance_state);
    assert_eq!(read.ecc.corrected_volatile, want.ecc.corrected_volatile);
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn smi_csv_any_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        read_all(&mut csv_reader(&bytes, None));
        read_all(&mut csv_reader(&bytes, Some("timestamp,index,uuid,utilization.gpu".into())));
    }

    #[test]
    fn smi_csv_any_bytes_after_a_header_never_panic(
        columns in columns(),
        bytes in prop::collection::vec(any::<u8>(), 0..2048),
    ) {
        let mut text: Vec<u8> = columns
            .iter()
            .map(|c| c.map_or("timestamp", Col::header))
            .collect::<Vec<_>>()
            .join(", ")
            .into_bytes();
        text.push(b'\n');
        text.extend_from_slice(&bytes);
        read_all(&mut csv_reader(&text, None));
    }
}

proptest! {
    #![proptest_config(config(192))]

    #[test]
    fn smi_csv_rows_of_plausible_cells_never_panic(
        lines in prop::collection::vec(
            prop::collection::vec(
                prop_oneof![
                    Just("2026/07/14 08:00:00.000".to_string()),
                    Just("2026/07/14 07:59:59.999".to_string()),
                    "2026/07/14 08:0[0-9]:[0-5][0-9]\\.[0-9]{3}",
                    "GPU-[0-9a-f]{1,4}",
                    "[0-9]{1,3}( %| MiB| W| MHz)?",
                    "-?[0-9]{1,20}(\\.[0-9]{0,3})?",
                    Just("[N/A]".to_string()),
                    Just("[GPU is lost]".to_string()),
                    Just("Unable to determine the device handle for GPU0000:18:00.0: Unknown Error".to_string()),
                    Just("timestamp".to_string()),
                    Just("uuid".to_string()),
                    Just("00000000:18:00.0".to_string()),
                ],
                0..7,
            ),
            0..40,
        ),
    ) {
        let mut text = String::from("timestamp, index, uuid, pci.bus_id, utilization.gpu [%], memory.used [MiB]\n");
        for cells in &lines {
            text.push_str(&cells.join(", "));
            text.push('\n');
        }
        read_all(&mut csv_reader(text.as_bytes(), None));
    }

    #[test]
    fn smi_csv_read_ahead_reads_as_the_reader_alone(
        lines in prop::collection::vec(
            prop::collection::vec(
                prop_oneof![
                    "2026/07/14 08:0[0-9]:[0-5][0-9]\\.[0-9]{3}",
                    "GPU-[0-9a-f]{1,2}",
                    "[0-9]{1,3}( %| MiB)?",
                    Just("[N/A]".to_string()),
                    Just("\"quoted, cell\"".to_string()),
                    Just("# comment".to_string()),
                    Just("timestamp".to_string()),
                ],
                0..7,
            ),
            0..40,
        ),
        // Repeated, so that a log spans several of the read-ahead's batches of records.
        times in 1usize..24,
        cut in any::<bool>(),
    ) {
        let mut text = String::from("timestamp, uuid, utilization.gpu [%], memory.used [MiB]\n");
        for _ in 0..times {
            for cells in &lines {
                text.push_str(&cells.join(", "));
                text.push('\n');
            }
        }
        if cut {
            // A log that ends inside its last line.
            text.pop();
        }
        same_read_ahead(text.as_bytes(), None)?;
    }
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn smi_csv_well_formed_rounds_survive_any_noise(
        gpus in 1usize..=4,
        rounds in 1usize..=6,
        columns in columns(),
        units in any::<bool>(),
        header in any::<bool>(),
        interval_s in 1i64..=60,
        seeds in prop::collection::vec(any::<u32>(), 1..64),
        noise in noise(),
    ) {
        let log = build_log(gpus, rounds, &columns, units, header, interval_s, &seeds, &noise);
        same_read_ahead(log.text.as_bytes(), log.fields.clone())?;
        let mut reader = csv_reader(log.text.as_bytes(), log.fields.clone());
        let (read, stats, failed) = read_all(&mut reader);
        prop_assert!(!failed, "the reader failed on:\n{}", log.text);
        prop_assert_eq!(read.len(), rounds, "rounds of:\n{}", log.text);
        prop_assert_eq!(stats.samples, (gpus * rounds) as u64);
        prop_assert_eq!(stats.duplicates, log.duplicates, "duplicates in:\n{}", log.text);
        prop_assert!(!stats.partial_last_round);
        prop_assert_eq!(stats.rejected.total(), 0);
        for (got, want) in read.iter().zip(&log.expected) {
            prop_assert_eq!(got.at, want.at);
            prop_assert_eq!(got.gpus.len(), want.gpus.len());
            for (g, w) in got.gpus.iter().zip(&want.gpus) {
                compare(g, w, &columns);
            }
        }
    }
}

/// A snapshot line of a JSONL recording: `gpus` GPUs at `at`, values from `seed`.
fn snapshot(at: DateTime<Utc>, gpus: usize, seed: u32) -> Snapshot {
    Snapshot {
        at,
        gpus: (0..gpus)
            .map(|g| {
                let v = seed.wrapping_mul(2_654_435_761).wrapping_add(g as u32);
                let mut s = GpuSample {
                    index: g as u32,
                    uuid: uuid(g),
                    name: "NVIDIA H100 80GB HBM3".into(),
                    up: v % 13 != 0,
                    temperature_celsius: Some(f64::from(v % 100)),
                    power_watts: Some(f64::from(v % 70_000) / 100.0),
                    ..GpuSample::default()
                };
                s.utilization.gpu = Some(f64::from(v % 101) / 100.0);
                s.memory.total_bytes = Some(81_559 << 20);
                s.memory.used_bytes = Some(u64::from(v % 81_559) << 20);
                s.ecc.uncorrected_volatile = (v % 7 == 0).then_some(u64::from(v % 5));
                s
            })
            .collect(),
        ..Snapshot::default()
    }
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn jsonl_any_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        read_all(&mut JsonlReader::new(bytes.as_slice()));
        let mut object = b"{\"at\":\"2026-07-14T08:00:00Z\",\"gpus\":[".to_vec();
        object.extend_from_slice(&bytes);
        read_all(&mut JsonlReader::new(object.as_slice()));
    }

    #[test]
    fn jsonl_values_of_any_magnitude_never_panic(
        temperature in any::<f64>(),
        used in any::<u64>(),
        count in any::<u64>(),
        ratio in any::<f64>(),
    ) {
        let mut s = snapshot(Utc::now(), 1, 1);
        s.gpus[0].temperature_celsius = Some(temperature);
        s.gpus[0].memory.used_bytes = Some(used);
        s.gpus[0].ecc.uncorrected_aggregate = Some(count);
        s.gpus[0].utilization.gpu = Some(ratio);
        // Non-finite floats have no JSON spelling; serde_json writes null, which reads back
        // as absent.
        let line = serde_json::to_string(&s).expect("serialisable") + "\n";
        let (read, stats, _) = read_all(&mut JsonlReader::new(line.as_bytes()));
        prop_assert_eq!(read.len(), 1);
        let g = &read[0].gpus[0];
        if let Some(t) = g.temperature_celsius {
            prop_assert!((0.0..=150.0).contains(&t));
        }
        if let Some(u) = g.utilization.gpu {
            prop_assert!((0.0..=1.0).contains(&u));
        }
        if let Some(u) = g.memory.used_bytes {
            prop_assert!(u <= 81_559 << 20);
        }
        if let Some(n) = g.ecc.uncorrected_aggregate {
            prop_assert!(n <= 1 << 53);
        }
        let cleared = u64::from(g.temperature_celsius.is_none() && temperature.is_finite())
            + u64::from(g.utilization.gpu.is_none() && ratio.is_finite())
            + u64::from(g.memory.used_bytes.is_none())
            + u64::from(g.ecc.uncorrected_aggregate.is_none());
        prop_assert_eq!(stats.rejected.total(), cleared);
    }
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn jsonl_snapshots_survive_any_noise(
        gpus in 0usize..=4,
        count in 1usize..=8,
        interval_s in 1i64..=600,
        seed in any::<u32>(),
        noise in prop::collection::vec((any::<usize>(), 0u8..6, any::<usize>(), "[ -~]{0,60}"), 0..12),
        cut_tail in any::<bool>(),
    ) {
        let base = Utc.with_ymd_and_hms(2026, 7, 14, 8, 0, 0).single().expect("a valid time");
        let expected: Vec<Snapshot> = (0..count)
            .map(|i| snapshot(base + TimeDelta::seconds(interval_s * i as i64), gpus, seed ^ i as u32))
            .collect();
        // (line, Some(snapshot index) for a snapshot line)
        let mut lines: Vec<(String, Option<usize>)> = expected
            .iter()
            .enumerate()
            .map(|(i, s)| (serde_json::to_string(s).expect("serialisable"), Some(i)))
            .collect();
        let mut duplicates = 0u64;
        for (position, kind, pick, text) in &noise {
            let at = position % (lines.len() + 1);
            let before: Vec<usize> = lines[..at].iter().filter_map(|(_, s)| *s).collect();
            let line = match kind {
                // A snapshot written again right away, or an older one copied.
                0 | 1 => {
                    let Some(&last) = before.last() else { continue };
                    let copied = if *kind == 0 { last } else { before[pick % before.len()] };
                    duplicates += u64::from(copied == last);
                    lines.iter().find(|(_, s)| *s == Some(copied)).map(|(l, _)| l.clone())
                        .unwrap_or_default()
                }
                2 => format!(
                    "{{\"failure\":{{\"uuid\":\"{}\",\"at\":\"2026-07-14T08:00:00Z\",\"family\":\"thermal\"}}}}",
                    uuid(0)
                ),
                3 => text.clone(),
                4 => String::new(),
                // A snapshot line cut off mid-write, then continued by the next line.
                _ => {
                    let whole = &lines[pick % lines.len().max(1)].0;
                    let cut = pick % whole.len().max(1);
                    whole[..cut].to_string()
                }
            };
            lines.insert(at, (line, None));
        }
        let mut body: String = lines.iter().map(|(l, _)| format!("{l}\n")).collect();
        if cut_tail && let Some(last) = expected.last() {
            // The capture was killed while writing one more snapshot.
            let whole = serde_json::to_string(&snapshot(last.at + TimeDelta::seconds(1), gpus, seed))
                .expect("serialisable");
            body.push_str(&whole[..whole.len() / 2]);
        }
        let (read, stats, failed) = read_all(&mut JsonlReader::new(body.as_bytes()));
        prop_assert!(!failed);
        prop_assert_eq!(&read, &expected, "snapshots of:\n{}", body);
        prop_assert_eq!(stats.duplicates, duplicates);
        prop_assert_eq!(stats.samples, (gpus * count) as u64);
    }
}

/// `/proc/PID/cgroup` text: lines of `id:controllers:path`, with Slurm, kubelet and runtime
/// path pieces mixed into arbitrary ones.
fn cgroup_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("slurm".to_string()),
        Just("slurmstepd.scope".to_string()),
        Just("n1_slurmstepd.scope".to_string()),
        "job_[0-9a-z]{0,6}",
        "uid_[0-9]{1,5}",
        "kubepods[a-z_-]{0,12}",
        "pod[0-9a-f-]{0,40}",
        "[ -~]{0,20}",
    ];
    let line = (
        "[0-9]{1,2}",
        "[a-z,=]{0,12}",
        prop::collection::vec(piece, 0..8),
    )
        .prop_map(|(id, ctl, parts)| format!("{id}:{ctl}:/{}", parts.join("/")));
    prop::collection::vec(line, 0..5).prop_map(|lines| lines.join("\n"))
}

proptest! {
    #![proptest_config(config(512))]

    /// Any cgroup file parses without panicking; a Slurm job id, when found, is digits and
    /// comes from a `job_` segment of a path under slurmstepd's tree.
    #[test]
    fn cgroup_owner_never_panics_and_jobs_are_numeric(text in cgroup_text()) {
        let owner = gpu_sentinel::procinfo::cgroup::owner(&text);
        if let Some(job) = owner.hpc_job {
            prop_assert!(!job.is_empty() && job.bytes().all(|b| b.is_ascii_digit()), "{job:?}");
            let segment = format!("job_{job}");
            prop_assert!(text.contains(&segment));
            prop_assert!(text.contains("slurm"));
        }
    }
}
