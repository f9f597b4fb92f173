//! What one save of the engine state costs — cloning it, serialising it, writing it with
//! fsync — for a fleet whose history windows are full (a simulated week at a 60 s cadence).
//! The agent clones on the collection thread and does the rest on its saver thread
//! (crates/agent/src/agent/saver.rs). `bench/save.sh` runs it at 8 and 64 GPUs.
//!
//! usage: save-cost GPUS DIR   (DIR receives engine.json)

use std::path::PathBuf;
use std::time::{Duration, Instant};

use chrono::Utc;
use gpu_sentinel::config::{Config, SimulationConfig};
use gpu_sentinel::engine::{Engine, EngineConfig, store};
use gpu_sentinel::source::simulate::Fleet;

/// Simulated history: a week, enough to fill every ring of every window.
const HISTORY: Duration = Duration::from_secs(7 * 24 * 3600);
/// Simulated cadence of the history.
const STEP: Duration = Duration::from_secs(60);
/// GPUs actually simulated; more are copies of these under other UUIDs (the state of a
/// GPU has a fixed size once its windows are full, so copies cost what real ones would).
const SIMULATED: u32 = 8;
/// Timed repetitions of each stage.
const REPEAT: u32 = 5;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let gpus: u32 = args.next().unwrap_or_else(|| "8".into()).parse()?;
    let dir = PathBuf::from(args.next().unwrap_or_else(|| "target/save-cost".into()));
    let simulation = SimulationConfig {
        gpus: SIMULATED.min(gpus),
        ..Config::default().simulation
    };
    let mut fleet = Fleet::new(&simulation, Utc::now() - HISTORY);
    let mut engine = Engine::new(EngineConfig::from_config(&Config::default())?);
    let steps = HISTORY.as_secs() / STEP.as_secs();
    for _ in 0..steps {
        fleet.advance(STEP.as_secs_f64());
        engine.step(&fleet.snapshot());
    }
    let mut state = engine.state.clone();
    let originals: Vec<_> = state.gpus.values().cloned().collect();
    for copy in 0..gpus.saturating_sub(SIMULATED) {
        let mut gpu = originals[(copy as usize) % originals.len()].clone();
        gpu.uuid = format!("GPU-copy-{copy:04}");
        gpu.index = SIMULATED + copy;
        state.gpus.insert(gpu);
    }
    std::fs::create_dir_all(&dir)?;
    let path = store::path_in(&dir);
    let time = |stage: &mut dyn FnMut()| {
        let began = Instant::now();
        for _ in 0..REPEAT {
            stage();
        }
        began.elapsed().as_secs_f64() * 1e3 / f64::from(REPEAT)
    };
    let clone_ms = time(&mut || {
        std::hint::black_box(state.clone());
    });
    let mut bytes = 0;
    let serialise_ms = time(&mut || {
        bytes = serde_json::to_vec(&state).map(|v| v.len()).unwrap_or(0);
    });
    let mut failed = None;
    let save_ms = time(&mut || {
        if let Err(e) = store::save(&path, &state) {
            failed = Some(e);
        }
    });
    if let Some(e) = failed {
        anyhow::bail!("cannot save to {}: {e}", path.display());
    }
    println!(
        "{gpus} GPUs: {bytes} bytes ({:.1} KiB per GPU); clone {clone_ms:.2} ms, \
         serialise {serialise_ms:.2} ms, serialise+write+fsync {save_ms:.2} ms",
        bytes as f64 / 1024.0 / f64::from(gpus.max(1))
    );
    Ok(())
}
