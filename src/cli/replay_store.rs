//! `gpu-sentinel replay --prometheus URL --from … --to …`: the engine and the alert rules
//! over the history a Prometheus-compatible store holds, each host (`instance`) with an
//! engine and rules of its own, exactly as `replay FILE` runs them over one recording.
//!
//! The history is rebuilt into snapshots by [`crate::fleet::history`] (either dialect: our
//! metrics or dcgm-exporter's) and fed through [`crate::replay::replay`], so the report per
//! host is the `replay --json` report. Everything is gathered before anything is printed: a
//! failure part-way prints no partial report.

use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::config::Config;
use crate::engine::{Engine, EngineConfig};
use crate::fleet::history::{self, HostHistory, Period};
use crate::fleet::prom::{Client, Endpoint};
use crate::model::Snapshot;
use crate::replay::alerts::ReplayAlerting;
use crate::replay::report::{Report, rfc3339};
use crate::replay::{ReadStats, SnapshotReader, Warnings};

/// The step where neither `--step` nor the store's samples say one: Prometheus's default
/// scrape interval.
const DEFAULT_STEP: Duration = Duration::from_secs(60);

/// `replay --prometheus --json`: every host's replay report.
#[derive(Debug, Serialize)]
struct StoreReplay {
    from: String,
    to: String,
    /// `gpu-sentinel` or `dcgm-exporter`: whose metrics the history was rebuilt from.
    source: &'static str,
    hosts: Vec<HostReport>,
}

#[derive(Debug, Serialize)]
struct HostReport {
    host: String,
    report: Report,
}

/// What `replay --prometheus` was asked.
pub(crate) struct StoreArgs<'a> {
    pub base: &'a str,
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
    /// None: the store's scrape interval.
    pub step: Option<Duration>,
    pub timeout: Duration,
    pub json: bool,
    pub max_samples: Option<u64>,
}

pub fn replay(
    args: &StoreArgs<'_>,
    config: &Config,
    engine_config: &EngineConfig,
) -> anyhow::Result<()> {
    let (Some(from), Some(to)) = (args.from, args.to) else {
        anyhow::bail!("give the period: --prometheus URL --from RFC3339 --to RFC3339");
    };
    anyhow::ensure!(from < to, "--from {from} is not before --to {to}");
    anyhow::ensure!(
        args.step.is_none_or(|s| s >= Duration::from_secs(1)),
        "--step must be at least 1s"
    );
    let client = Client::new(Endpoint {
        base: args.base.to_string(),
        auth: super::report::auth_from_env()?,
        timeout: args.timeout,
    });
    let mut period = Period {
        from,
        to,
        step: args.step.unwrap_or(DEFAULT_STEP),
    };
    let survey = history::survey(&client, &period, args.max_samples)?;
    if args.step.is_none() {
        // A snapshot a scrape: each of the store's samples seen once.
        period.step = survey
            .interval
            .map_or(DEFAULT_STEP, |i| i.max(Duration::from_secs(1)));
    }
    super::output::note(&format!(
        "replaying {} host(s) of {} ({} metrics) from {} to {} every {}",
        survey.hosts.len(),
        crate::redact::url(client.base()),
        survey.dialect.as_str(),
        rfc3339(from),
        rfc3339(to),
        humantime::format_duration(period.step)
    ));
    let mut hosts = Vec::with_capacity(survey.hosts.len());
    // Metrics no host had: said once, after the replays.
    let mut missing: Option<Vec<&'static str>> = None;
    for host in &survey.hosts {
        let (report, lacking) = replay_host(
            &client,
            host,
            survey.dialect,
            period,
            args.max_samples,
            config,
            engine_config,
        )
        .with_context(|| {
            format!(
                "replay of host {host} from {}",
                crate::redact::url(client.base())
            )
        })?;
        if report.samples == 0 {
            continue;
        }
        missing = Some(match missing {
            None => lacking,
            Some(all) => all.into_iter().filter(|m| lacking.contains(m)).collect(),
        });
        hosts.push(HostReport {
            host: host.clone(),
            report,
        });
    }
    anyhow::ensure!(
        !hosts.is_empty(),
        "{}: no host listed a GPU between {} and {}",
        crate::redact::url(client.base()),
        rfc3339(from),
        rfc3339(to)
    );
    if let Some(missing) = missing.filter(|m| !m.is_empty()) {
        super::output::note(&format!(
            "note: {} holds no {} for any host in the period: the engine ran without them",
            crate::redact::url(client.base()),
            missing.join(", ")
        ));
    }
    let doc = StoreReplay {
        from: rfc3339(from),
        to: rfc3339(to),
        source: survey.dialect.as_str(),
        hosts,
    };
    if args.json {
        super::output::print(&format!("{}\n", serde_json::to_string_pretty(&doc)?))
    } else {
        super::output::print(&to_text(&doc))
    }
}

fn replay_host(
    client: &Client,
    host: &str,
    dialect: history::Dialect,
    period: Period,
    max_samples: Option<u64>,
    config: &Config,
    engine_config: &EngineConfig,
) -> anyhow::Result<(Report, Vec<&'static str>)> {
    let origin = format!("{} {host}", crate::redact::url(client.base()));
    let mut reader = StoreReader {
        history: HostHistory::open(client, host, dialect, period, max_samples)?,
        stats: ReadStats::default(),
        rejected: 0,
        first_rejected: None,
    };
    // The alerts carry the host they are about, as the agent there would label them.
    let mut host_config = config.clone();
    host_config.export.hostname = host.to_string();
    let mut rules = ReplayAlerting::from_config(&host_config)?;
    let mut engine = Engine::new(engine_config.clone());
    let mut warnings = Warnings::to_stderr(origin.clone());
    let report = crate::replay::replay(&mut reader, &mut engine, &mut rules, &mut warnings)?;
    if let Some(at) = reader.first_rejected {
        warnings.summary(format_args!(
            "{} values out of range, left empty (the first at {})",
            reader.rejected,
            rfc3339(at)
        ));
    }
    for (why, count) in reader.history.skipped() {
        warnings.summary(format_args!("{why}: {count} series skipped"));
    }
    warnings.finish();
    Ok((report, reader.history.missing_metrics()))
}

/// The store's history of one host as a [`SnapshotReader`], every snapshot through the
/// model's range checks as a recording's are.
struct StoreReader<'c> {
    history: HostHistory<'c>,
    stats: ReadStats,
    rejected: u64,
    first_rejected: Option<DateTime<Utc>>,
}

impl SnapshotReader for StoreReader<'_> {
    fn next_into(&mut self, into: &mut Snapshot, _: &mut Warnings) -> anyhow::Result<bool> {
        let Some(mut snapshot) = self.history.next_snapshot()? else {
            return Ok(false);
        };
        let rejected = snapshot.sanitize().total();
        if rejected > 0 {
            self.rejected += rejected;
            self.first_rejected.get_or_insert(snapshot.at);
        }
        self.stats.samples = self.history.samples();
        *into = snapshot;
        Ok(true)
    }

    fn stats(&self) -> ReadStats {
        self.stats
    }
}

fn to_text(doc: &StoreReplay) -> String {
    let mut out = format!(
        "Replay of {} host(s) from {} to {} ({} metrics)\n",
        doc.hosts.len(),
        doc.from,
        doc.to,
        doc.source
    );
    for host in &doc.hosts {
        out.push_str(&format!("\n== {} ==\n", host.host));
        out.push_str(&host.report.to_text());
    }
    out
}
