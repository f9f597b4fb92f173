//! The alerting stage of the agent: rules over each step's findings, the alert book, and
//! dispatch turning it into notifications. Its state ([`AlertingState`]) is what a restart
//! must keep so it neither re-fires nor forgets; the agent saves it when a step says it
//! changed ([`Alerting::take_changed`]).
//!
//! Replay drives the same stage without receivers ([`Alerting::without_receivers`]): rules
//! and book only, so a recording fires exactly the alerts the agent would have.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::book::AlertBook;
use super::dispatch::{DispatchState, Dispatcher, ReceiverInfo};
use super::notify::kind::{self, Consumes};
use super::route::{Route, RouteError};
use super::rules::{self, Rule, RuleError, RuleInput};
use super::{AlertState, Notification};
use crate::config::Config;
use crate::engine::Findings;
use crate::model::CollectHealth;

/// What survives a restart: the alerts and the groups' notification history.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AlertingState {
    pub book: AlertBook,
    pub dispatch: DispatchState,
}

/// File name of the alerting state inside `[state] dir`.
pub const FILE_NAME: &str = "alerts.json";

/// Why a configuration's alerting cannot be built. A configuration that loaded has
/// neither (its value checks and `check-config` find them first).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AlertingError {
    #[error(transparent)]
    Rules(#[from] RuleError),
    #[error(transparent)]
    Route(#[from] RouteError),
}

/// Rules, book and (in the agent) dispatch together.
#[derive(Debug)]
pub struct Alerting {
    rules: Vec<Rule>,
    /// None without receivers (replay): alerts are evaluated, nothing is notified.
    dispatcher: Option<Dispatcher>,
    pub state: AlertingState,
    retention: Duration,
    hostname: String,
    /// Whether an alert changed state or a notification went out since the last
    /// [`Alerting::take_changed`]: the moments the state must be saved.
    changed: bool,
}

impl Alerting {
    /// The alerting of a configuration, compiling its routing tree; `external_url` is where
    /// alerts can be seen. See [`Alerting::with_route`] to share a compiled tree.
    pub fn from_config(
        config: &Config,
        hostname: String,
        external_url: String,
    ) -> Result<Alerting, AlertingError> {
        let route = Arc::new(Route::compile(&config.alerting.route)?);
        Alerting::with_route(config, route, hostname, external_url)
    }

    /// The alerting of a configuration whose routing tree is already compiled (the agent
    /// compiles it once and shares it with the advice digest).
    pub fn with_route(
        config: &Config,
        route: Arc<Route>,
        hostname: String,
        external_url: String,
    ) -> Result<Alerting, AlertingError> {
        let rules = rules::from_config(config.risk.threshold, &config.alerting.rules)?;
        let receivers = config
            .alerting
            .receivers
            .iter()
            .map(|r| {
                // An unknown kind (refused when the configuration loads) is fed groups.
                let consumes = r
                    .kind
                    .valid()
                    .map_or(Consumes::Groups, |k| kind::facts(*k).consumes);
                let info = ReceiverInfo {
                    consumes,
                    send_resolved: r.send_resolved,
                };
                (r.name.clone(), info)
            })
            .collect::<BTreeMap<_, _>>();
        Ok(Alerting {
            rules,
            dispatcher: Some(Dispatcher {
                route,
                receivers,
                resend_interval: config.alerting.resend_interval,
                external_url,
            }),
            state: AlertingState::default(),
            retention: config.alerting.resolved_retention,
            hostname,
            changed: false,
        })
    }

    /// The rules of a configuration (tuned, disabled and added ones included) and the book,
    /// without dispatch: what replay runs. Resolved alerts leave the book at the next step,
    /// as no receiver is re-sent them.
    pub fn without_receivers(config: &Config, hostname: String) -> Result<Alerting, RuleError> {
        Ok(Alerting {
            rules: rules::from_config(config.risk.threshold, &config.alerting.rules)?,
            dispatcher: None,
            state: AlertingState::default(),
            retention: Duration::ZERO,
            hostname,
            changed: false,
        })
    }

    /// Resumes from a saved state.
    pub fn restore(&mut self, state: AlertingState) {
        self.state = state;
    }

    /// Whether the state changed in a way a restart must not lose (an alert changed state,
    /// a notification went out) since the last call; clears the flag. Transitions and
    /// notifications are rare: saving on them keeps a restart from re-firing or repeating,
    /// without writing every tick.
    pub(crate) fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }

    /// One step: evaluates the rules, advances the lifecycle, returns the notifications due
    /// (none without receivers).
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
        let notifications = match &self.dispatcher {
            Some(dispatcher) => {
                let muted = self.state.book.inhibited();
                dispatcher.tick(
                    &mut self.state.dispatch,
                    &self.state.book,
                    &muted,
                    findings.at,
                )
            }
            None => Vec::new(),
        };
        if self.transitions() != before || !notifications.is_empty() {
            self.changed = true;
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
