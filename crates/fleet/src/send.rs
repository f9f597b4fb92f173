//! `report --send`: each team's report to the receiver `[[teams]] receiver` names, through
//! the same notifiers and durable outbox as alerts.
//!
//! A team's report travels as one notification holding one informational alert
//! (`alertname="GpuTeamReport"`, `severity="info"`, `team`): its summary names the team and
//! the period, its description is the team's Markdown report, so every receiver kind renders
//! it the way it renders an alert's text. Reports are stored in their own outbox in the state
//! directory (`report-outbox.redb`: the running agent holds `outbox.redb`) before anything is
//! sent; what a receiver does not take before `--send-timeout` stays there, and the next
//! `report --send` delivers it first — a newer report of the same team and period replaces
//! an undelivered one. Alertmanager receivers are refused: a report is not an alert to route.

use anyhow::Context as _;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;

use super::render;
use super::report::Report;
use crate::alert::deliver::{Delivery, DeliveryOptions, Target, max_per_minute};
use crate::alert::notify::kind::{self, Consumes};
use crate::alert::notify::{Settings, build_with};
use crate::alert::outbox::Outbox;
use crate::alert::{Alert, AlertState, LabelSet, Notification};
use crate::config::Config;

/// The reports' outbox, in the state directory.
pub(crate) const OUTBOX_FILE: &str = "report-outbox.redb";

/// What sending did.
#[derive(Debug, Default)]
pub struct Sent {
    /// Team → receiver, for the reports handed to delivery now.
    pub queued: BTreeMap<String, String>,
    /// Teams without a receiver (`[[teams]] receiver` not set), not sent.
    pub unrouted: Vec<String>,
    /// Reports still undelivered when the time was up (kept for the next run).
    pub pending: usize,
    pub outbox: PathBuf,
}

/// One notification per team of `report` whose `[[teams]]` entry names a receiver.
pub fn notifications(
    report: &Report,
    config: &Config,
    link: Option<&Path>,
) -> (Vec<Notification>, Vec<String>) {
    let mut out = Vec::new();
    let mut unrouted = Vec::new();
    for team in &report.teams {
        let receiver = config
            .teams
            .iter()
            .find(|t| t.name == team.team)
            .and_then(|t| t.receiver.clone());
        let Some(receiver) = receiver else {
            unrouted.push(team.team.clone());
            continue;
        };
        let one = Report {
            teams: vec![team.clone()],
            ..report.clone()
        };
        let mut description = render::markdown(&one);
        if let Some(path) = link {
            description.push_str(&format!("\nFull report: {}\n", path.display()));
        }
        let period = format!(
            "{} → {}",
            report.from.format("%Y-%m-%d"),
            report.to.format("%Y-%m-%d")
        );
        let labels: LabelSet = [
            ("alertname", "GpuTeamReport"),
            ("severity", "info"),
            ("team", team.team.as_str()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let annotations: LabelSet = [
            (
                "summary",
                format!(
                    "GPU usage of team {} {period}: {:.0} GPU-h held, {:.0}% busy, {:.2} {} idle cost",
                    team.team,
                    team.usage.gpu_hours,
                    team.usage.efficiency * 100.0,
                    team.usage.waste_cost,
                    report.currency
                ),
            ),
            ("description", description),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        out.push(Notification {
            receiver,
            // One report per team and period: a rerun replaces an undelivered one.
            // One report per team and period (to the hour, so `--last 7d` run again soon
            // after is the same period): a rerun replaces an undelivered one.
            group_key: format!(
                "report/{}/{}/{}",
                team.team,
                report.from.timestamp().div_euclid(3600),
                report.to.timestamp().div_euclid(3600)
            ),
            group_labels: [("team".to_string(), team.team.clone())]
                .into_iter()
                .collect(),
            alerts: vec![Alert {
                labels,
                annotations,
                state: AlertState::Firing,
                active_at: report.to,
                starts_at: Some(report.to),
                ends_at: None,
            }],
            created_at: Utc::now(),
            external_url: String::new(),
        });
    }
    (out, unrouted)
}

/// Stores `notifications` in the reports' outbox under `state_dir` and delivers them (and
/// any left from an earlier run) for at most `timeout`.
pub fn send(
    notifications: Vec<Notification>,
    unrouted: Vec<String>,
    config: &Config,
    state_dir: &Path,
    timeout: Duration,
    env: &dyn Fn(&str) -> Option<String>,
) -> anyhow::Result<Sent> {
    for n in &notifications {
        anyhow::ensure!(
            config
                .alerting
                .receivers
                .iter()
                .any(|r| r.name == n.receiver),
            "[[teams]] {:?}: receiver {:?} is not among [[alerting.receivers]]",
            n.group_labels.get("team").map_or("", String::as_str),
            n.receiver
        );
    }
    std::fs::create_dir_all(state_dir).map_err(|e| {
        anyhow::anyhow!(
            "cannot create the state directory {}: {e}",
            state_dir.display()
        )
    })?;
    let path = state_dir.join(OUTBOX_FILE);
    let outbox = Outbox::open(&path, config.alerting.outbox_max_entries)
        .with_context(|| format!("cannot open the reports' outbox {}", path.display()))?;
    let outbox = Arc::new(outbox);
    // Receivers of this run's reports, and of reports an earlier run left undelivered.
    let leftover = outbox.receivers();
    let settings = Settings::from_config(&config.alerting);
    let mut targets = Vec::new();
    for receiver in &config.alerting.receivers {
        let used = notifications.iter().any(|n| n.receiver == receiver.name)
            || leftover.contains(&receiver.name);
        if !used {
            continue;
        }
        if receiver
            .kind
            .valid()
            .is_some_and(|k| kind::facts(*k).consumes == Consumes::AlertList)
        {
            anyhow::bail!(
                "[[alerting.receivers]] {:?} is an Alertmanager: a team report goes to a chat or webhook receiver",
                receiver.name
            );
        }
        let notifier = build_with(receiver, env, &settings)
            .with_context(|| format!("[[alerting.receivers]] {:?}", receiver.name))?;
        targets.push(Target {
            name: receiver.name.clone(),
            notifier,
            max_per_minute: max_per_minute(receiver),
            max_backoff: Some(receiver.max_backoff),
        });
    }
    // Stored before delivery starts, so a report of the same team and period left by an
    // earlier run is replaced, not sent as well.
    let mut sent = Sent {
        unrouted,
        outbox: path.clone(),
        ..Sent::default()
    };
    for n in &notifications {
        outbox
            .enqueue(n, Utc::now())
            .with_context(|| format!("cannot store in {}", path.display()))?;
        sent.queued.insert(
            n.group_labels.get("team").cloned().unwrap_or_default(),
            n.receiver.clone(),
        );
    }
    let mut delivery = Delivery::start(Arc::clone(&outbox), targets, DeliveryOptions::default());
    let began = Instant::now();
    while outbox.pending() > 0 && began.elapsed() < timeout {
        std::thread::sleep(Duration::from_millis(100));
    }
    sent.pending = outbox.pending();
    delivery.shutdown();
    Ok(sent)
}
