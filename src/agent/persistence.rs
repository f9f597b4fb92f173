//! The agent's persistence: where its state survives a restart, when each part is saved,
//! and how saves went.
//!
//! Two state files live in `[state] dir`: the engine's (its windows, baselines and
//! counters), saved every `[state] save_interval` by [`EngineSaver`] off the collection
//! thread and once more at shutdown; and alerting's (the alert book and the groups'
//! notification history), which [`Alerting`] saves itself inside its step whenever an
//! alert changes state or a notification goes out — rare events a restart must not lose.
//! [`StateKeeper`] is the agent's one place for both: it resumes them at start, hands the
//! engine's state to the saver on its cadence, finishes at shutdown, and reports each
//! file's failed saves for `gpu_sentinel_state_save_errors_total`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::saver::EngineSaver;
use crate::alert::alerting::{Alerting, FILE_NAME as ALERTING_FILE_NAME};
use crate::engine::{Engine, store};
use crate::export::ExportState;

/// Where the agent's state survives a restart, and how often the engine's part is saved.
#[derive(Debug, Clone)]
pub struct Persistence {
    /// `[state] dir`.
    pub dir: PathBuf,
    /// `[state] save_interval`: the most history a `kill -9` can lose.
    pub save_every: Duration,
}

/// Saves the agent's state on its cadence; does nothing for runs without persistence
/// (simulated runs).
#[derive(Debug)]
pub struct StateKeeper {
    /// Writes the engine's state; None without persistence, and after [`StateKeeper::finish`].
    saver: Option<EngineSaver>,
    save_every: Duration,
    last_save: Instant,
}

impl StateKeeper {
    /// Resumes `engine` and `alerting` from `persistence` when given (an unusable file is
    /// moved aside and that part starts fresh) and saves there from now on; without it,
    /// nothing is loaded or saved.
    pub fn resume(
        persistence: Option<&Persistence>,
        engine: &mut Engine,
        alerting: &mut Alerting,
    ) -> StateKeeper {
        let Some(persistence) = persistence else {
            return StateKeeper {
                saver: None,
                save_every: Duration::MAX,
                last_save: Instant::now(),
            };
        };
        let path = store::path_in(&persistence.dir);
        *engine = Engine::with_state(engine.config.clone(), store::load(&path));
        tracing::info!(
            "engine state at {}: {} GPUs remembered",
            path.display(),
            engine.state.gpus.len()
        );
        alerting.persist_at(persistence.dir.join(ALERTING_FILE_NAME));
        StateKeeper {
            saver: Some(EngineSaver::start(path)),
            save_every: persistence.save_every,
            last_save: Instant::now(),
        }
    }

    /// Hands a copy of the engine's state to the saver when the cadence has come. A saver
    /// still busy with the previous copy is asked again at the next collection.
    pub fn save_when_due(&mut self, engine: &Engine) {
        if self.last_save.elapsed() < self.save_every {
            return;
        }
        if let Some(saver) = &mut self.saver {
            if saver.submit(engine.state.clone()) {
                self.last_save = Instant::now();
            }
        }
    }

    /// Saves the engine's state one last time and waits until it is written (shutdown).
    /// Alerting's state needs no last save: it was saved at its last change.
    pub fn finish(&mut self, engine: &mut Engine) {
        if let Some(saver) = self.saver.take() {
            saver.finish(std::mem::take(&mut engine.state));
        }
    }

    /// Failed saves per state file, for `gpu_sentinel_state_save_errors_total`.
    pub fn note_failures(&self, alerting: &Alerting, export_state: &mut ExportState) {
        if let Some(saver) = &self.saver {
            export_state.set_state_save_errors(store::FILE_NAME, saver.failures());
        }
        if let Some(failures) = alerting.save_failures() {
            export_state.set_state_save_errors(ALERTING_FILE_NAME, failures);
        }
    }
}
