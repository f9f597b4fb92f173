//! The alerting stage of the agent: rules over each step's findings, the alert book, and
//! the dispatcher that turns it into notifications; its state persisted so a restart
//! neither re-fires nor forgets.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::route::{DispatchState, Dispatcher, ReceiverInfo, Route};
use super::rules::{self, AlertBook, Rule, RuleInput};
use super::{AlertState, Notification};
use crate::config::Config;
use crate::engine::Findings;
use crate::model::CollectHealth;
use crate::state_file::SaveLog;

/// What survives a restart: the alerts and the groups' notification history.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AlertingState {
    pub book: AlertBook,
    pub dispatch: DispatchState,
}

/// File name of the alerting state inside `[state] dir`.
pub const FILE_NAME: &str = "alerts.json";

/// Rules, book and dispatcher together.
#[derive(Debug)]
pub struct Alerting {
    rules: Vec<Rule>,
    dispatcher: Dispatcher,
    pub state: AlertingState,
    retention: Duration,
    hostname: String,
    /// Where the state is saved, and how saves went; None when nothing is persisted.
    persisted: Option<SaveLog>,
}

impl Alerting {
    /// The alerting of a configuration; `external_url` is where alerts can be seen.
    pub fn from_config(
        config: &Config,
        hostname: String,
        external_url: String,
    ) -> Result<Alerting, String> {
        let rules = rules::from_config(config.risk.threshold, &config.alerting.rules)?;
        let route = Route::compile(&config.alerting.route)?;
        let receivers = config
            .alerting
            .receivers
            .iter()
            .map(|r| {
                (
                    r.name.clone(),
                    ReceiverInfo {
                        alertmanager: r.kind == "alertmanager",
                        send_resolved: r.send_resolved,
                    },
                )
            })
            .collect::<BTreeMap<_, _>>();
        Ok(Alerting {
            rules,
            dispatcher: Dispatcher {
                route,
                receivers,
                resend_interval: config.alerting.resend_interval,
                external_url,
            },
            state: AlertingState::default(),
            retention: config.alerting.resolved_retention,
            hostname,
            persisted: None,
        })
    }

    /// Resumes from, and later saves to, `path`. An unusable file there is moved aside and
    /// alerting starts fresh.
    pub fn persist_at(&mut self, path: PathBuf) {
        if let Some(state) = crate::state_file::load::<AlertingState>(&path) {
            tracing::info!(
                "alert state at {}: {} alerts remembered",
                path.display(),
                state.book.alerts.len()
            );
            self.state = state;
        }
        self.persisted = Some(SaveLog::new("alert state", path));
    }

    /// Saves the state where [`Alerting::persist_at`] said; a failure is logged when it is
    /// the first of its kind (see [`SaveLog`]) and always counted.
    pub fn save(&mut self) {
        if let Some(log) = &mut self.persisted {
            let outcome = crate::state_file::save(log.path(), &self.state);
            log.record(&outcome);
        }
    }

    /// Failed saves of the state since start; None when nothing is persisted.
    pub fn save_failures(&self) -> Option<u64> {
        self.persisted.as_ref().map(SaveLog::failures)
    }

    /// One step: evaluates the rules, advances the lifecycle, returns the notifications due.
    pub fn step(
        &mut self,
        findings: &Findings,
        health: Option<&CollectHealth>,
    ) -> Vec<Notification> {
        let candidates = rules::evaluate(
            &self.rules,
            &RuleInput {
                findings,
                health,
                hostname: &self.hostname,
            },
        );
        let before = self.transitions();
        self.state
            .book
            .update(findings.at, candidates, self.retention);
        let notifications =
            self.dispatcher
                .tick(&mut self.state.dispatch, &self.state.book, findings.at);
        // Transitions and notifications are rare; saving on each keeps a restart from
        // re-firing or repeating, without writing every tick.
        if self.transitions() != before || !notifications.is_empty() {
            self.save();
        }
        notifications
    }

    /// Each alert's identity and state: what a restart must not lose.
    fn transitions(&self) -> Vec<(u64, AlertState)> {
        self.state
            .book
            .alerts
            .iter()
            .map(|(fp, a)| (*fp, a.state))
            .collect()
    }

    pub fn book(&self) -> &AlertBook {
        &self.state.book
    }

    /// Alerts per (alertname, state), for `gpu_sentinel_alerts`.
    pub fn counts(&self) -> BTreeMap<(String, AlertState), usize> {
        let mut out = BTreeMap::new();
        for a in self.state.book.alerts.values() {
            *out.entry((a.name().to_string(), a.state)).or_insert(0) += 1;
        }
        out
    }
}
