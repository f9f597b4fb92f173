//! The outgoing side of alerting: advice (when enabled) and then durable delivery.
//!
//! Every due notification goes to the outbox at once. A critical one, with advice on, is
//! stored due `max_wait` from now (wall time: advice is a real-time service even when the
//! simulator runs fast); when the advice comes sooner it is stored again with the `advice`
//! annotation and supersedes the waiting one, and when it comes later it follows as a
//! repeat of the group's notification. Advice never delays an alert beyond `max_wait`, and
//! a crash while waiting loses nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};

use super::deliver::{
    Delivery, DeliveryHealth, DeliveryOptions, DeliveryStats, Target, max_per_minute,
};
use super::notify::kind::{self, Consumes};
use super::notify::{ReceiverError, Settings, build_with};
use super::outbox::Outbox;
use super::route::Route;
use super::{Alert, AlertState, LabelSet, Notification};
use crate::advice::{
    AdviceError, AdviceStats, AdviceStatus, Advisor, Redaction, alert_summary, fleet_summary,
};
use crate::config::Config;
use crate::engine::Findings;

/// Why delivery or advice cannot start.
#[derive(Debug, thiserror::Error)]
pub enum OutgoingError {
    /// The receiver's problems are in the message itself (not a separate source), so
    /// `run` prints them once.
    #[error("[[alerting.receivers]] {name:?}: {error}")]
    Receiver { name: String, error: ReceiverError },
    #[error(transparent)]
    Advice(#[from] AdviceError),
}

/// Delivery and advice for the agent.
pub struct Outgoing {
    delivery: Option<Delivery>,
    advisor: Option<Advisor>,
    redaction: Redaction,
    hostname: String,
    /// Alertmanager receivers: machine consumers, not sent the digest.
    alertmanagers: BTreeSet<String>,
    /// Critical notifications already in the outbox (due at `max_wait` at the latest)
    /// whose advice is awaited, by receiver and group, with the key the advice is under.
    awaiting: BTreeMap<(String, String), (String, Notification)>,
    digest_every: Option<Duration>,
    last_digest: Option<Instant>,
    /// The routing tree the digest follows (the one dispatch uses), when there is a digest.
    digest_route: Option<Arc<Route>>,
}
impl Outgoing {
    /// Builds notifiers for every receiver (a missing environment variable is an error
    /// naming it), opens the outbox in `state_dir` (in memory without one), starts delivery
    /// and, when `[advice]` is on, the advisor. `env` reads the variables `*_env` options
    /// name (`std::env::var` in the agent). `route` is the compiled routing tree alerting
    /// dispatches along; the digest follows it too.
    pub fn from_config(
        config: &Config,
        route: Arc<Route>,
        state_dir: Option<&std::path::Path>,
        hostname: String,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Outgoing, OutgoingError> {
        let settings = Settings::from_config(&config.alerting);
        let mut targets = Vec::new();
        for receiver in &config.alerting.receivers {
            let notifier =
                build_with(receiver, env, &settings).map_err(|error| OutgoingError::Receiver {
                    name: receiver.name.clone(),
                    error,
                })?;
            targets.push(Target {
                name: receiver.name.clone(),
                notifier,
                max_per_minute: max_per_minute(receiver),
                max_backoff: Some(receiver.max_backoff),
            });
        }
        let delivery = if targets.is_empty() {
            None
        } else {
            let max = config.alerting.outbox_max_entries;
            let outbox = match state_dir {
                Some(dir) => Outbox::open_or_fallback(&dir.join(super::outbox::FILE_NAME), max),
                None => Outbox::in_memory(max),
            };
            Some(Delivery::start(
                Arc::new(outbox),
                targets,
                DeliveryOptions::default(),
            ))
        };
        let advisor = match crate::advice::api_key(&config.advice, env)? {
            Some(key) => Some(Advisor::start(&config.advice, key)?),
            None => None,
        };
        let digest_route = match (&advisor, config.advice.digest_interval) {
            (Some(_), Some(_)) => Some(route),
            _ => None,
        };
        Ok(Outgoing {
            delivery,
            advisor,
            redaction: Redaction::from(&config.advice),
            hostname,
            alertmanagers: config
                .alerting
                .receivers
                .iter()
                .filter(|r| {
                    r.kind
                        .valid()
                        .is_some_and(|k| kind::facts(*k).consumes == Consumes::AlertList)
                })
                .map(|r| r.name.clone())
                .collect(),
            awaiting: BTreeMap::new(),
            digest_every: config.advice.digest_interval,
            last_digest: None,
            digest_route,
        })
    }

    /// Hands this step's due notifications on, and sends advice that has come in.
    ///
    /// Every notification is stored in the outbox at once, so a crash loses nothing. One
    /// that wants advice is stored due `max_wait` from now: if the advice comes first it
    /// is stored again with the advice attached (superseding the waiting one); if it
    /// comes later, it follows as a repeat of the group's notification.
    pub fn step(&mut self, due: Vec<Notification>, findings: &Findings) {
        for n in due {
            let group = (n.receiver.clone(), n.group_key.clone());
            // A newer notification of the group makes any awaited advice for it moot.
            self.awaiting.remove(&group);
            let wants_advice = n.status() == "firing" && n.severity() == "critical";
            let Some(advisor) = self.advisor.as_ref().filter(|_| wants_advice) else {
                self.send(&n, None);
                continue;
            };
            let key = advice_key(&n);
            // Asked for each new set of firing alerts; the advisor answers one group key
            // once, retries failures after a while, and keeps answers for repeats.
            let summary = alert_summary(&n.alerts, findings, &self.hostname, self.redaction);
            advisor.request(&key, &summary);
            match advisor.status(&key) {
                AdviceStatus::Ready(text) => self.send(&with_advice(n, &text), None),
                AdviceStatus::Failed => self.send(&n, None),
                AdviceStatus::Pending { .. } | AdviceStatus::Unrequested => {
                    // Checked: a max_wait past what a date holds means "now", not a panic.
                    let now = Utc::now();
                    let due = TimeDelta::from_std(advisor.max_wait())
                        .ok()
                        .and_then(|wait| now.checked_add_signed(wait))
                        .unwrap_or(now);
                    self.send(&n, Some(due));
                    self.awaiting.insert(group, (key, n));
                }
            }
        }
        self.poll();
        self.digest(findings);
    }

    /// Sends advice that has come in for notifications already stored.
    pub fn poll(&mut self) {
        let Some(advisor) = &self.advisor else {
            return;
        };
        let mut settled = Vec::new();
        for (group, (key, n)) in &self.awaiting {
            match advisor.status(key) {
                AdviceStatus::Ready(text) => {
                    settled.push((group.clone(), Some(with_advice(n.clone(), &text))))
                }
                AdviceStatus::Failed | AdviceStatus::Unrequested => {
                    settled.push((group.clone(), None))
                }
                AdviceStatus::Pending { .. } => {}
            }
        }
        for (group, advised) in settled {
            self.awaiting.remove(&group);
            if let Some(n) = advised {
                self.send(&n, None);
            }
        }
    }

    /// When [`Outgoing::poll`] next has something to do: soon, while advice is awaited.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        (!self.awaiting.is_empty()).then(|| Instant::now() + Duration::from_millis(250))
    }

    /// The periodic fleet digest, sent as an info notification along the routing tree.
    fn digest(&mut self, findings: &Findings) {
        let (Some(advisor), Some(every), Some(route)) =
            (&self.advisor, self.digest_every, &self.digest_route)
        else {
            return;
        };
        if self.last_digest.is_none_or(|t| t.elapsed() >= every) {
            self.last_digest = Some(Instant::now());
            advisor.digest(&fleet_summary(findings, &self.hostname, self.redaction));
        }
        let Some(text) = advisor.take_digest() else {
            return;
        };
        let notification = digest_notification(&self.hostname, &text, findings.at);
        let receivers: Vec<String> = route
            .matches(&notification.alerts[0].labels)
            .iter()
            .map(|r| r.receiver.clone())
            .filter(|r| !self.alertmanagers.contains(r))
            .collect();
        for receiver in receivers {
            let n = Notification {
                receiver,
                ..notification.clone()
            };
            self.send(&n, None);
        }
    }

    /// Stores `n` for delivery, not due before `due_at` when given.
    fn send(&self, n: &Notification, due_at: Option<DateTime<Utc>>) {
        if let Some(delivery) = &self.delivery {
            match due_at {
                Some(at) => delivery.submit_due_at(n, at),
                None => delivery.submit(n),
            };
        }
    }

    pub(crate) fn delivery_stats(&self) -> Option<DeliveryStats> {
        self.delivery.as_ref().map(Delivery::stats)
    }

    /// Whether the delivery workers run, for `/healthz`; None without receivers.
    pub fn delivery_health(&self) -> Option<DeliveryHealth> {
        self.delivery.as_ref().map(Delivery::health)
    }

    pub(crate) fn advice_stats(&self) -> Option<AdviceStats> {
        self.advisor.as_ref().map(Advisor::stats)
    }

    /// Stops delivery (undelivered notifications stay in the outbox) and the advisor.
    pub fn shutdown(&mut self) {
        if let Some(delivery) = &mut self.delivery {
            let abandoned = delivery.shutdown();
            if !abandoned.is_empty() {
                tracing::warn!(
                    "deliveries to {} still in flight at shutdown; they stay in the outbox",
                    abandoned.join(", ")
                );
            }
        }
        if let Some(advisor) = &self.advisor {
            advisor.shutdown();
        }
    }
}

fn with_advice(mut n: Notification, advice: &str) -> Notification {
    for a in &mut n.alerts {
        a.annotations.insert("advice".into(), advice.to_string());
    }
    n
}

/// Where a group's advice is kept: the group and the set of alerts firing in it, so a new
/// incident in the same group (or the same Alertmanager list) gets advice of its own.
fn advice_key(n: &Notification) -> String {
    let mut labels = LabelSet::new();
    for a in n.alerts.iter().filter(|a| a.state == AlertState::Firing) {
        labels.insert(format!("{:016x}", a.fingerprint()), String::new());
    }
    format!(
        "{}/{}#{:016x}",
        n.receiver,
        n.group_key,
        super::fingerprint(&labels)
    )
}

/// The digest as a notification of one info alert, `GpuFleetDigest`.
fn digest_notification(hostname: &str, text: &str, at: DateTime<Utc>) -> Notification {
    let mut labels = LabelSet::new();
    labels.insert("alertname".into(), "GpuFleetDigest".into());
    labels.insert("severity".into(), "info".into());
    labels.insert("hostname".into(), hostname.into());
    let mut annotations = LabelSet::new();
    annotations.insert("summary".into(), format!("GPU fleet digest for {hostname}"));
    annotations.insert("description".into(), text.to_string());
    Notification {
        receiver: String::new(),
        group_key: format!("digest:{hostname}"),
        group_labels: LabelSet::new(),
        alerts: vec![Alert {
            labels,
            annotations,
            state: AlertState::Firing,
            active_at: at,
            starts_at: Some(at),
            ends_at: None,
        }],
        created_at: at,
        external_url: String::new(),
    }
}
