//! Property tests of the agent's state-file loaders (`engine.json` through
//! `engine::store::load`, `alerts.json` through `Alerting::persist_at`): any bytes give
//! either exactly the state they spell, the file left in place, or a fresh state with the
//! file moved aside byte for byte; never a panic. A state the agent produced round-trips
//! unchanged.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use chrono::{DateTime, Utc};
use proptest::prelude::*;

use gpu_sentinel::alert::alerting::{Alerting, AlertingState};
use gpu_sentinel::config::{Config, SimulationConfig};
use gpu_sentinel::engine::{Engine, EngineConfig, EngineState, STATE_VERSION, store};
use gpu_sentinel::source::simulate::Fleet;
use gpu_sentinel::state_file;

/// A fresh directory for one case.
fn case_dir() -> PathBuf {
    static CASE: AtomicU32 = AtomicU32::new(0);
    let n = CASE.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("gs-state-props-{}-{n}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("case dir");
    dir
}

/// The files in `dir` set aside from `file`.
fn kept(dir: &Path, file: &str) -> Vec<PathBuf> {
    let prefix = format!("{file}.corrupt-");
    fs::read_dir(dir)
        .expect("case dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .collect()
}

fn start() -> DateTime<Utc> {
    DateTime::from_timestamp(1_767_225_600, 0).expect("a valid time")
}

/// A fleet with every fault family due within the hour, so alerts fire in a few steps.
fn fleet(seed: u64, gpus: u32) -> Fleet {
    let simulation = SimulationConfig {
        gpus,
        seed,
        fault_hours: 0.5,
        ..SimulationConfig::default()
    };
    Fleet::new(&simulation, start())
}

/// What the agent's engine and alerting hold after `steps` collections `gap_s` apart.
fn run(seed: u64, gpus: u32, steps: u32, gap_s: u32) -> (EngineState, AlertingState) {
    let config = Config::default();
    let mut fleet = fleet(seed, gpus);
    let mut engine = Engine::new(EngineConfig::from_config(&config).expect("default config"));
    let mut alerting = alerting();
    for _ in 0..steps {
        fleet.advance(f64::from(gap_s));
        let findings = engine.step(&fleet.snapshot());
        alerting.step(&findings, None);
    }
    (engine.state, alerting.state)
}

fn alerting() -> Alerting {
    Alerting::from_config(&Config::default(), "host".into(), "http://host/".into())
        .expect("the default alerting")
}

/// Valid documents to damage: a small engine state and an alert state with alerts in it.
fn valid_documents() -> &'static (Vec<u8>, Vec<u8>) {
    static DOCS: OnceLock<(Vec<u8>, Vec<u8>)> = OnceLock::new();
    DOCS.get_or_init(|| {
        let (engine, alerts) = run(7, 4, 12, 300);
        assert!(
            !alerts.book.alerts.is_empty(),
            "the fleet's faults raise alerts"
        );
        (
            serde_json::to_vec(&engine).expect("engine state as JSON"),
            serde_json::to_vec(&alerts).expect("alert state as JSON"),
        )
    })
}

/// Any bytes, or a valid document cut short or with some bytes replaced.
fn damaged(valid: &'static [u8]) -> impl Strategy<Value = Vec<u8>> {
    let len = valid.len().max(1);
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..256),
        (0..len).prop_map(move |cut| valid[..cut.min(valid.len())].to_vec()),
        prop::collection::vec((0..len, any::<u8>()), 1..8).prop_map(move |edits| {
            let mut bytes = valid.to_vec();
            for (at, byte) in edits {
                if let Some(b) = bytes.get_mut(at) {
                    *b = byte;
                }
            }
            bytes
        }),
    ]
}

/// The loader's verdict on `bytes` at `path` is the parser's: the state they spell, or a
/// fresh one with the file kept aside unchanged.
fn check_verdict<T: PartialEq + std::fmt::Debug + Default>(
    dir: &Path,
    file: &str,
    bytes: &[u8],
    loaded: T,
    spelled: Option<T>,
) -> Result<(), TestCaseError> {
    let path = dir.join(file);
    match spelled {
        Some(state) => {
            prop_assert_eq!(loaded, state);
            prop_assert!(path.exists(), "a usable file stays where it is");
            prop_assert!(kept(dir, file).is_empty());
        }
        None => {
            prop_assert_eq!(loaded, T::default());
            prop_assert!(!path.exists(), "an unusable file is moved away");
            let kept = kept(dir, file);
            prop_assert_eq!(kept.len(), 1);
            prop_assert_eq!(fs::read(&kept[0]).expect("the kept file"), bytes.to_vec());
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn any_bytes_as_engine_json(bytes in damaged(&valid_documents().0)) {
        let dir = case_dir();
        let path = store::path_in(&dir);
        fs::write(&path, &bytes).expect("write the case");
        let loaded = store::load(&path);
        let spelled = serde_json::from_slice::<EngineState>(&bytes)
            .ok()
            .filter(|s| s.version == STATE_VERSION);
        check_verdict(&dir, store::FILE_NAME, &bytes, loaded, spelled)?;
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn any_bytes_as_alerts_json(bytes in damaged(&valid_documents().1)) {
        let dir = case_dir();
        let path = dir.join(gpu_sentinel::alert::alerting::FILE_NAME);
        fs::write(&path, &bytes).expect("write the case");
        // As the agent resumes alerting (agent/persistence.rs): the state file's loader.
        let loaded = state_file::load::<AlertingState>(&path).unwrap_or_default();
        let spelled = serde_json::from_slice::<AlertingState>(&bytes).ok();
        check_verdict(
            &dir,
            gpu_sentinel::alert::alerting::FILE_NAME,
            &bytes,
            loaded,
            spelled,
        )?;
        let _ = fs::remove_dir_all(&dir);
    }
}

proptest! {
    // Each case runs the engine and alerting over a simulated fleet: fewer cases.
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn saved_states_load_back_unchanged(
        seed in 0u64..1000,
        gpus in 1u32..4,
        steps in 1u32..24,
        gap_s in 1u32..900,
    ) {
        let (engine, alerts) = run(seed, gpus, steps, gap_s);
        let dir = case_dir();
        let path = store::path_in(&dir);
        store::save(&path, &engine).expect("save the engine state");
        prop_assert_eq!(store::load(&path), engine);

        let path = dir.join(gpu_sentinel::alert::alerting::FILE_NAME);
        state_file::save(&path, &alerts).expect("save the alert state");
        prop_assert_eq!(state_file::load::<AlertingState>(&path), Some(alerts));
        prop_assert!(kept(&dir, store::FILE_NAME).is_empty());
        let _ = fs::remove_dir_all(&dir);
    }
}
