//! The outgoing side of alerting: advice (when enabled) and then durable delivery.
//!
//! A due notification goes to the outbox at once unless it is critical and advice is on.
//! Then it waits for the advisor at most `max_wait` (wall time: advice is a real-time
//! service even when the simulator runs fast), goes out with the `advice` annotation if
//! the answer came, or without it — and the advice follows as a repeat of the group's
//! notification once it arrives. Advice never blocks or delays an alert beyond `max_wait`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::deliver::{Delivery, DeliveryOptions, DeliveryStats, Target, max_per_minute};
use super::notify::{Settings, build_with};
use super::outbox::Outbox;
use super::route::Route;
use super::{Alert, AlertState, LabelSet, Notification};
use crate::advice::{AdviceStats, AdviceStatus, Advisor, Redaction, alert_summary, fleet_summary};
use crate::config::Config;
use crate::engine::Findings;

/// Delivery and advice for the agent.
pub struct Outgoing {
    delivery: Option<Delivery>,
    advisor: Option<Advisor>,
    redaction: Redaction,
    hostname: String,
    /// Critical notifications waiting for advice, with when they started waiting.
    held: Vec<(Notification, Instant)>,
    /// Groups sent without advice whose advice is still owed: their last notification.
    owed: BTreeMap<String, Notification>,
    digest_every: Option<Duration>,
    last_digest: Option<Instant>,
    digest_route: Option<Route>,
}

impl Outgoing {
    /// Builds notifiers for every receiver (a missing environment variable is an error
    /// naming it), opens the outbox in `state_dir` (in memory without one), starts delivery
    /// and, when `[advice]` is on, the advisor.
    pub fn from_config(
        config: &Config,
        state_dir: Option<&std::path::Path>,
        hostname: String,
    ) -> anyhow::Result<Outgoing> {
        let env = |name: &str| std::env::var(name).ok();
        let settings = Settings::from_config(&config.alerting);
        let mut targets = Vec::new();
        for receiver in &config.alerting.receivers {
            let notifier = build_with(receiver, &env, &settings)
                .map_err(|e| anyhow::anyhow!("[[alerting.receivers]] {:?}: {e}", receiver.name))?;
            targets.push(Target {
                name: receiver.name.clone(),
                notifier,
                max_per_minute: max_per_minute(receiver),
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
        let advisor = Advisor::from_config(&config.advice)?;
        let digest_route = match (&advisor, config.advice.digest_interval) {
            (Some(_), Some(_)) => {
                Some(Route::compile(&config.alerting.route).map_err(anyhow::Error::msg)?)
            }
            _ => None,
        };
        Ok(Outgoing {
            delivery,
            advisor,
            redaction: Redaction::from(&config.advice),
            hostname,
            held: Vec::new(),
            owed: BTreeMap::new(),
            digest_every: config.advice.digest_interval,
            last_digest: None,
            digest_route,
        })
    }

    /// Hands this step's due notifications on, and moves held and owed ones along.
    pub fn step(&mut self, due: Vec<Notification>, findings: &Findings) {
        for n in due {
            let wants_advice =
                self.advisor.is_some() && n.severity() == "critical" && n.status() == "firing";
            if !wants_advice {
                self.owed.remove(&n.group_key);
                self.send(n);
                continue;
            }
            if let Some(advisor) = &self.advisor {
                if advisor.status(&n.group_key) == AdviceStatus::Unrequested {
                    let summary =
                        alert_summary(&n.alerts, findings, &self.hostname, self.redaction);
                    advisor.request(&n.group_key, &summary);
                }
            }
            // A newer notification of the same group replaces one still held.
            self.held.retain(|(h, _)| h.group_key != n.group_key);
            self.held.push((n, Instant::now()));
        }
        self.poll();
        self.digest(findings);
    }

    /// Releases held notifications whose wait is over and sends advice that came late.
    pub fn poll(&mut self) {
        self.release_held();
        self.pay_owed();
    }

    /// When [`Outgoing::poll`] next has something to do: a held notification's `max_wait`
    /// ending, or a second from now while advice is awaited.
    pub fn next_deadline(&self) -> Option<Instant> {
        let advisor = self.advisor.as_ref()?;
        let held = self
            .held
            .iter()
            .map(|(_, since)| *since + advisor.max_wait())
            .min();
        let soon = (!self.held.is_empty() || !self.owed.is_empty())
            .then(|| Instant::now() + Duration::from_secs(1));
        match (held, soon) {
            (Some(h), Some(s)) => Some(h.min(s)),
            (h, s) => h.or(s),
        }
    }

    /// Held notifications whose advice came, or whose `max_wait` ran out, go out.
    fn release_held(&mut self) {
        let Some(advisor) = &self.advisor else {
            return;
        };
        let max_wait = advisor.max_wait();
        let mut still = Vec::new();
        let mut ready = Vec::new();
        for (mut n, since) in std::mem::take(&mut self.held) {
            match advisor.status(&n.group_key) {
                AdviceStatus::Ready(text) => {
                    attach(&mut n, &text);
                    ready.push(n);
                }
                AdviceStatus::Pending { .. } | AdviceStatus::Unrequested
                    if since.elapsed() < max_wait =>
                {
                    still.push((n, since));
                }
                AdviceStatus::Failed => ready.push(n),
                _ => {
                    self.owed.insert(n.group_key.clone(), n.clone());
                    ready.push(n);
                }
            }
        }
        self.held = still;
        for n in ready {
            self.send(n);
        }
    }

    /// Advice that arrived after its group went out follows as a repeat with it attached.
    fn pay_owed(&mut self) {
        let Some(advisor) = &self.advisor else {
            return;
        };
        let mut paid = Vec::new();
        for (key, n) in &self.owed {
            match advisor.status(key) {
                AdviceStatus::Ready(text) => {
                    let mut n = n.clone();
                    attach(&mut n, &text);
                    n.created_at = Utc::now().max(n.created_at);
                    paid.push((key.clone(), Some(n)));
                }
                AdviceStatus::Failed | AdviceStatus::Unrequested => paid.push((key.clone(), None)),
                AdviceStatus::Pending { .. } => {}
            }
        }
        for (key, n) in paid {
            self.owed.remove(&key);
            if let Some(n) = n {
                self.send(n);
            }
        }
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
            .collect();
        for receiver in receivers {
            self.send(Notification {
                receiver,
                ..notification.clone()
            });
        }
    }

    fn send(&self, n: Notification) {
        if let Some(delivery) = &self.delivery {
            delivery.submit(&n);
        }
    }

    pub fn delivery_stats(&self) -> Option<DeliveryStats> {
        self.delivery.as_ref().map(Delivery::stats)
    }

    pub fn advice_stats(&self) -> Option<AdviceStats> {
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

fn attach(n: &mut Notification, advice: &str) {
    for a in &mut n.alerts {
        a.annotations.insert("advice".into(), advice.to_string());
    }
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
