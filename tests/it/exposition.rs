//! The exposition of a fixed simulator run, byte for byte (golden files in `tests/golden/`),
//! and checked by Prometheus's own parser and linter (`promtool check metrics`).
//!
//! Regenerate the golden files after an intended change with
//! `UPDATE_GOLDEN=1 cargo test --test it exposition::`, and review the diff.
//! `GPU_SENTINEL_REQUIRE_TOOLS=1` turns a missing promtool from a skip into a failure
//! (`scripts/test.sh` sets it and installs promtool).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::common;

use chrono::{DateTime, Utc};
use gpu_sentinel::config::SimulationConfig;
use gpu_sentinel::engine::{Engine, EngineConfig};
use gpu_sentinel::export::{self, ExportState, Exposition, RenderInput, RenderOptions};
use gpu_sentinel::model::{CollectHealth, FamilyHealth};
use gpu_sentinel::source::simulate::Fleet;

/// Simulated hours covered by the golden run: long enough for every default fault family
/// (worn memory, PCIe replays, thermal slowdown, a GPU off the bus, idle and ghost jobs).
const HOURS: u32 = 10;
/// Seconds between two collections of the golden run.
const STEP_SECONDS: u32 = 300;

fn start() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_default()
}

/// The simulator reports one collector family that never fails; its timing is fixed here
/// because wall time is the one thing a golden file cannot hold.
fn health() -> CollectHealth {
    CollectHealth {
        source_up: true,
        families: vec![FamilyHealth {
            name: "simulator",
            seconds: 0.000125,
            success: true,
        }],
        errors_by_call: Default::default(),
        seconds: 0.000125,
    }
}

/// Renders every tick of the golden run (so XID counters accumulate as they would in
/// service) and returns the last exposition.
fn golden_run(dcgm_compat: bool) -> Exposition {
    let mut fleet = Fleet::new(&SimulationConfig::default(), start());
    let options = RenderOptions {
        dcgm_compat,
        hostname: "gpu-node-01".into(),
        version: "0.0.0-golden".into(),
        revision: "0000000".into(),
        ..RenderOptions::default()
    };
    let mut state = ExportState::new();
    let mut engine = Engine::new(EngineConfig::default());
    let mut last = Exposition::default();
    for _ in 0..HOURS * 3600 / STEP_SECONDS {
        fleet.advance(f64::from(STEP_SECONDS));
        let snapshot = fleet.snapshot();
        let findings = engine.step(&snapshot);
        let health = health();
        let input = RenderInput {
            findings: Some(&findings),
            ..RenderInput::new(&snapshot, &health)
        };
        last = export::render(&input, &mut state, &options);
    }
    last
}

fn golden_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

/// Compares `actual` with the golden file, or rewrites it when `UPDATE_GOLDEN=1`.
fn assert_golden(name: &str, actual: &str) {
    let path = golden_path(name);
    if std::env::var("UPDATE_GOLDEN").as_deref() == Ok("1") {
        std::fs::create_dir_all(path.parent().unwrap_or(Path::new(".")))
            .and_then(|()| std::fs::write(&path, actual))
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {} ({e}); create it with UPDATE_GOLDEN=1 cargo test --test it exposition::",
            path.display()
        )
    });
    if expected != actual {
        panic!(
            "{} differs from the rendered exposition:\n{}\nIf the change is intended, run \
             UPDATE_GOLDEN=1 cargo test --test it exposition::and review the diff.",
            path.display(),
            first_difference(&expected, actual)
        );
    }
}

/// The first differing line with a little context, and the line counts.
fn first_difference(expected: &str, actual: &str) -> String {
    let e: Vec<&str> = expected.lines().collect();
    let a: Vec<&str> = actual.lines().collect();
    let at = e
        .iter()
        .zip(&a)
        .position(|(x, y)| x != y)
        .unwrap_or(e.len().min(a.len()));
    let mut out = format!(
        "expected {} lines, rendered {}; first difference at line {}:\n",
        e.len(),
        a.len(),
        at + 1
    );
    let from = at.saturating_sub(2);
    for line in &e[from..at] {
        out.push_str(&format!("  {line}\n"));
    }
    for line in e.iter().skip(at).take(3) {
        out.push_str(&format!("- {line}\n"));
    }
    for line in a.iter().skip(at).take(3) {
        out.push_str(&format!("+ {line}\n"));
    }
    out
}

fn text(exposition: &Exposition) -> String {
    String::from_utf8(exposition.text.to_vec()).unwrap_or_else(|e| panic!("not UTF-8: {e}"))
}

#[test]
fn golden_native_exposition() {
    assert_golden("native.prom", &text(&golden_run(false)));
}

#[test]
fn golden_dcgm_compatible_exposition() {
    assert_golden("dcgm.prom", &text(&golden_run(true)));
}

#[test]
fn golden_run_shows_every_family_the_simulator_can_produce() {
    let text = text(&golden_run(true));
    for family in [
        "gpu_info",
        "gpu_up",
        "gpu_utilization_ratio",
        "gpu_memory_used_bytes",
        "gpu_memory_temperature_celsius",
        "gpu_energy_joules_total",
        "gpu_clock_max_hertz",
        "gpu_clock_event_active",
        "gpu_ecc_errors_total",
        "gpu_remapped_rows_total",
        "gpu_pcie_replays_total",
        "gpu_pcie_throughput_bytes_per_second",
        "gpu_nvlink_errors_total",
        "gpu_xid_errors_total",
        "gpu_tensor_active_ratio",
        "gpu_process_memory_bytes",
        "gpu_process_utilization_ratio",
        "gpu_sentinel_collector_success",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    ] {
        assert!(
            text.contains(&format!("\n# TYPE {family} ")),
            "{family} missing"
        );
    }
    // The GPU that fell off the bus is down, and says why.
    assert!(text.contains("gpu_up{gpu=\"4\","));
    assert!(text.contains(",xid=\"79\",class=\"hardware\"} 1\n"));
}

fn read_golden(name: &str) -> String {
    let path = golden_path(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

#[test]
fn promtool_accepts_the_native_exposition_without_lint_findings() {
    let Some(promtool) = common::tool("promtool") else {
        return;
    };
    let (ok, printed) = common::promtool_check(&promtool, &[], &read_golden("native.prom"));
    assert!(ok && printed.trim().is_empty(), "promtool:\n{printed}");
}

/// dcgm-exporter's names break promtool's lint conventions by design (upper-case names,
/// camelCase labels such as `modelName`, counters without `_total`), and must stay as they
/// are for its dashboards and rules to work. So lint is off (`--lint=none`) where promtool
/// has the flag (2.45 and later). Older promtool (Debian 12 ships 2.42) always lints and
/// exits 3 for lint findings, 1 for a parse error: there the text must parse, and every
/// finding must concern a `DCGM_FI_*` family, so our own names stay lint-clean here too.
#[test]
fn promtool_parses_the_dcgm_compatible_exposition() {
    let Some(promtool) = common::tool("promtool") else {
        return;
    };
    let text = read_golden("dcgm.prom");
    if promtool_has_lint_flag(&promtool) {
        let (ok, printed) = common::promtool_check(&promtool, &["--lint=none"], &text);
        assert!(ok, "promtool:\n{printed}");
        return;
    }
    let (_, printed) = common::promtool_check(&promtool, &[], &text);
    let not_dcgm: Vec<&str> = printed
        .lines()
        .filter(|line| !line.starts_with("DCGM_FI_"))
        .collect();
    assert!(not_dcgm.is_empty(), "promtool:\n{}", not_dcgm.join("\n"));
}

fn promtool_has_lint_flag(promtool: &Path) -> bool {
    std::process::Command::new(promtool)
        .args(["check", "metrics", "--help"])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout).contains("--lint")
                || String::from_utf8_lossy(&o.stderr).contains("--lint")
        })
        .unwrap_or(false)
}

/// Label values a host can throw at us (command names with quotes, backslashes, newlines
/// and terminal escapes; very long pod names; non-ASCII) still give an exposition that
/// Prometheus parses.
#[test]
fn promtool_accepts_hostile_label_values() {
    let Some(promtool) = common::tool("promtool") else {
        return;
    };
    let mut fleet = Fleet::new(&SimulationConfig::default(), start());
    fleet.advance(3600.0);
    let mut snapshot = fleet.snapshot();
    let hostile = [
        "say \"hi\"",
        "C:\\temp\\",
        "two\nlines",
        "\u{1b}[31mred\u{1b}[0m\r\t\u{0}",
        "名前-пóд-ünïcode",
        "}",
    ];
    for (process, value) in snapshot.processes.iter_mut().zip(hostile.iter().cycle()) {
        process.process = Some((*value).to_string());
        process.pod = Some(value.repeat(100));
        process.namespace = Some(format!("{value}{value}"));
    }
    let options = RenderOptions {
        hostname: "host\"with\\quotes".into(),
        ..RenderOptions::default()
    };
    let health = health();
    let exposition = export::render(
        &RenderInput::new(&snapshot, &health),
        &mut ExportState::new(),
        &options,
    );
    let (ok, printed) = common::promtool_check(&promtool, &[], &text(&exposition));
    assert!(ok && printed.trim().is_empty(), "promtool:\n{printed}");
}

/// Series of one exposition per GPU: each series with a `gpu` label counts for its GPU,
/// the node's own (`gpu_node_*`, `gpu_scale_*`) are shared out over the GPUs; the agent's
/// (`gpu_sentinel_*`) and per-process series (`gpu_process_*`, bounded by
/// `max_process_series`) are not counted. Returns (the most any GPU has, per family the
/// most any GPU has). `gpu_health_state` counts like the rest: a failing GPU's verdicts
/// are part of what it costs.
fn series_per_gpu(text: &str) -> (f64, BTreeMap<String, usize>) {
    let mut per_gpu: BTreeMap<String, usize> = BTreeMap::new();
    let mut per_family: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut shared = 0usize;
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name = line.split(['{', ' ']).next().unwrap_or("");
        if name.starts_with("gpu_sentinel_") || name.starts_with("gpu_process_") {
            continue;
        }
        let gpu = line
            .split_once("gpu=\"")
            .and_then(|(_, rest)| rest.split_once('"'))
            .map(|(gpu, _)| gpu.to_string());
        match gpu {
            Some(gpu) => {
                *per_gpu.entry(gpu.clone()).or_default() += 1;
                *per_family.entry((name.to_string(), gpu)).or_default() += 1;
            }
            None => shared += 1,
        }
    }
    let gpus = per_gpu.len().max(1);
    let most = per_gpu.values().copied().max().unwrap_or(0) as f64 + shared as f64 / gpus as f64;
    let mut families: BTreeMap<String, usize> = BTreeMap::new();
    for ((name, _), n) in per_family {
        let most = families.entry(name).or_default();
        *most = (*most).max(n);
    }
    (most, families)
}

#[test]
fn series_a_gpu_stay_within_the_budget() {
    use gpu_sentinel::export::budget::{self, Cost};
    for (dcgm_compat, limit) in [
        (false, budget::DEFAULT_PER_GPU),
        (true, budget::DCGM_COMPAT_PER_GPU),
    ] {
        let mut fleet = Fleet::new(&SimulationConfig::default(), start());
        let options = RenderOptions {
            dcgm_compat,
            ..RenderOptions::default()
        };
        let mut state = ExportState::new();
        let mut engine = Engine::new(EngineConfig::default());
        let mut most = 0.0f64;
        let mut families: BTreeMap<String, usize> = BTreeMap::new();
        // Every tick of a day of the default fleet: faults develop, jobs come and go, a GPU
        // is lost; the busiest moment counts.
        for _ in 0..24 * 3600 / STEP_SECONDS {
            fleet.advance(f64::from(STEP_SECONDS));
            let snapshot = fleet.snapshot();
            let findings = engine.step(&snapshot);
            let health = health();
            let input = RenderInput {
                findings: Some(&findings),
                ..RenderInput::new(&snapshot, &health)
            };
            let exposition = export::render(&input, &mut state, &options);
            let (tick_most, tick_families) =
                series_per_gpu(&String::from_utf8_lossy(&exposition.text));
            most = most.max(tick_most);
            for (name, n) in tick_families {
                let seen = families.entry(name).or_default();
                *seen = (*seen).max(n);
            }
        }
        assert!(
            most <= f64::from(limit),
            "dcgm_compat {dcgm_compat}: {most:.1} series a GPU, over the budget of {limit}: {families:?}"
        );
        // Each native family within what docs/metrics.md says it costs.
        for (name, n) in &families {
            if name.starts_with("DCGM_FI_") {
                assert!(*n <= 1, "{name}: {n} series a GPU");
                continue;
            }
            match budget::of(name).map(|b| b.cost) {
                Some(Cost::PerGpu(most)) => {
                    assert!(
                        *n <= most as usize,
                        "{name}: {n} series a GPU, budget {most}"
                    )
                }
                Some(Cost::UpTo { per_gpu, .. }) => {
                    assert!(
                        *n <= per_gpu as usize,
                        "{name}: {n} series a GPU, budget {per_gpu}"
                    )
                }
                Some(Cost::PerHost(_) | Cost::PerHostVarying(_) | Cost::PerMigInstance(_))
                | None => {
                    panic!("{name} has a gpu label but no per-GPU budget")
                }
            }
        }
        eprintln!("dcgm_compat {dcgm_compat}: at most {most:.1} series a GPU (budget {limit})");
    }
}

/// Series of one exposition per MIG instance (those with `mig_uuid`) and per dcgm GPU
/// instance (`GPU_I_ID`), by family: (GPU, instance) → family → count.
fn series_per_instance(text: &str) -> BTreeMap<String, usize> {
    let mut per_family: BTreeMap<(String, String), usize> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name = line.split(['{', ' ']).next().unwrap_or("");
        let label = |key: &str| {
            line.split_once(&format!("{key}=\""))
                .and_then(|(_, rest)| rest.split_once('"'))
                .map(|(value, _)| value.to_string())
        };
        let gpu = label("gpu").unwrap_or_default();
        let instance = label("mig_uuid").or_else(|| label("GPU_I_ID"));
        if let Some(instance) = instance {
            *per_family
                .entry((name.to_string(), format!("{gpu}/{instance}")))
                .or_default() += 1;
        }
    }
    let mut most: BTreeMap<String, usize> = BTreeMap::new();
    for ((name, _), n) in per_family {
        let m = most.entry(name).or_default();
        *m = (*m).max(n);
    }
    most
}

#[test]
fn series_of_mig_instances_stay_within_their_budget_and_the_gpus_within_theirs() {
    use gpu_sentinel::export::budget::{self, Cost};
    let config = SimulationConfig {
        mig_gpus: 3,
        ..SimulationConfig::default()
    };
    for (dcgm_compat, limit) in [
        (false, budget::DEFAULT_PER_GPU),
        (true, budget::DCGM_COMPAT_PER_GPU),
    ] {
        let mut fleet = Fleet::new(&config, start());
        let options = RenderOptions {
            dcgm_compat,
            ..RenderOptions::default()
        };
        let mut state = ExportState::new();
        let mut engine = Engine::new(EngineConfig::default());
        let mut instances: BTreeMap<String, usize> = BTreeMap::new();
        let mut most_per_gpu = 0.0f64;
        let mut saw_instances = false;
        for _ in 0..6 * 3600 / STEP_SECONDS {
            fleet.advance(f64::from(STEP_SECONDS));
            let snapshot = fleet.snapshot();
            let findings = engine.step(&snapshot);
            let health = health();
            let input = RenderInput {
                findings: Some(&findings),
                ..RenderInput::new(&snapshot, &health)
            };
            let text = String::from_utf8_lossy(&export::render(&input, &mut state, &options).text)
                .to_string();
            for (name, n) in series_per_instance(&text) {
                saw_instances = true;
                let seen = instances.entry(name).or_default();
                *seen = (*seen).max(n);
            }
            // What is left once the instances' series are set aside is each GPU's own.
            let own: String = text
                .lines()
                .filter(|l| !l.contains("mig_uuid=\"") && !l.contains("GPU_I_ID=\""))
                .map(|l| format!("{l}\n"))
                .collect();
            most_per_gpu = most_per_gpu.max(series_per_gpu(&own).0);
        }
        assert!(saw_instances);
        assert!(
            most_per_gpu <= f64::from(limit),
            "dcgm_compat {dcgm_compat}: a GPU has {most_per_gpu:.1} series of its own"
        );
        for (name, n) in &instances {
            if name.starts_with("DCGM_FI_") {
                assert!(*n <= 1, "{name}: {n} series a GPU instance");
                continue;
            }
            match budget::of(name).map(|b| b.cost) {
                Some(Cost::PerMigInstance(most)) => {
                    assert!(
                        *n <= most as usize,
                        "{name}: {n} series an instance, budget {most}"
                    )
                }
                // Processes and allocations in an instance carry its ids, not its UUID.
                other => panic!("{name} has a mig_uuid label but budget {other:?}"),
            }
        }
        let total: usize = instances
            .iter()
            .filter(|(name, _)| !name.starts_with("DCGM_FI_"))
            .map(|(_, n)| n)
            .sum();
        assert!(
            total <= budget::per_mig_instance() as usize,
            "{total} series an instance"
        );
        eprintln!(
            "dcgm_compat {dcgm_compat}: {total} series a MIG instance, {most_per_gpu:.1} a GPU"
        );
    }
}
