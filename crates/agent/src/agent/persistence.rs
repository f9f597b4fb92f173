//! The agent's persistence: where its state survives a restart, when each part is saved,
//! and how saves went.
//!
//! Two state files live in `[state] dir`: the engine's (its windows, baselines and
//! counters), saved every `[state] save_interval` by [`EngineSaver`] off the collection
//! thread and once more at shutdown; and alerting's (the alert book and the groups'
//! notification history), saved after each step in which an alert changed state or a
//! notification went out — rare events a restart must not lose — and at shutdown.
//! [`StateKeeper`] is the agent's one place for both: it resumes them at start, saves each
//! when due, finishes at shutdown, and reports each file's failed saves for
//! `gpu_sentinel_state_save_errors_total`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::saver::EngineSaver;
use crate::alert::alerting::{Alerting, AlertingState, FILE_NAME as ALERTING_FILE_NAME};
use crate::engine::{Engine, store};
use crate::export::ExportState;
use crate::state_file::SaveLog;

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
pub(crate) struct StateKeeper {
    /// Writes the engine's state; None without persistence, and after [`StateKeeper::finish`].
    saver: Option<EngineSaver>,
    /// Where alerting's state is saved, and how its saves went; None without persistence.
    alerts: Option<SaveLog>,
    save_every: Duration,
    last_save: Instant,
}

impl StateKeeper {
    /// Resumes `engine` and `alerting` from `persistence` when given (an unusable file is
    /// moved aside and that part starts fresh) and saves there from now on; without it,
    /// nothing is loaded or saved.
    pub(crate) fn resume(
        persistence: Option<&Persistence>,
        engine: &mut Engine,
        alerting: &mut Alerting,
    ) -> StateKeeper {
        let Some(persistence) = persistence else {
            return StateKeeper {
                saver: None,
                alerts: None,
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
        let alerts_path = persistence.dir.join(ALERTING_FILE_NAME);
        if let Some(state) = crate::state_file::load::<AlertingState>(&alerts_path) {
            tracing::info!(
                "alert state at {}: {} alerts remembered",
                alerts_path.display(),
                state.book.alerts.len()
            );
            alerting.restore(state);
        }
        StateKeeper {
            saver: Some(EngineSaver::start(path)),
            alerts: Some(SaveLog::new("alert state", alerts_path)),
            save_every: persistence.save_every,
            last_save: Instant::now(),
        }
    }

    /// Hands a copy of the engine's state to the saver when the cadence has come. A saver
    /// still busy with the previous copy is asked again at the next collection.
    pub(crate) fn save_when_due(&mut self, engine: &Engine) {
        if self.last_save.elapsed() < self.save_every {
            return;
        }
        if let Some(saver) = &mut self.saver {
            if saver.submit(engine.state.clone()) {
                self.last_save = Instant::now();
            }
        }
    }

    /// Saves alerting's state when its last step changed it, before that step's
    /// notifications are handed to delivery. Written on the collection thread: it is small
    /// and changes rarely.
    pub(crate) fn save_alerts_when_changed(&mut self, alerting: &mut Alerting) {
        if alerting.take_changed() {
            self.save_alerts(alerting);
        }
    }

    fn save_alerts(&mut self, alerting: &Alerting) {
        if let Some(log) = &mut self.alerts {
            let outcome = crate::state_file::save(log.path(), &alerting.state);
            log.record(&outcome);
        }
    }

    /// Saves both states one last time and waits until they are written (shutdown).
    pub fn finish(&mut self, engine: &mut Engine, alerting: &Alerting) {
        self.save_alerts(alerting);
        if let Some(saver) = self.saver.take() {
            saver.finish(std::mem::take(&mut engine.state));
        }
    }

    /// Failed saves per state file, for `gpu_sentinel_state_save_errors_total`.
    pub(crate) fn note_failures(&self, export_state: &mut ExportState) {
        if let Some(saver) = &self.saver {
            export_state.set_state_save_errors(store::FILE_NAME, saver.failures());
        }
        if let Some(log) = &self.alerts {
            export_state.set_state_save_errors(ALERTING_FILE_NAME, log.failures());
        }
    }
}
