//! `gpu-sentinel report --prometheus URL`: GPU-hours held, busy and idle per team, waste
//! cost, and the fleet's utilization heatmap, scaling, night-idle hosts and risk review,
//! from the store the fleet's agents are scraped into (see [`crate::fleet`]).

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, TimeDelta, Utc};
use clap::Args;

use crate::config::Config;
use crate::fleet::prom::{Auth, Client, Endpoint};
use crate::fleet::render;
use crate::fleet::report::{ReportSpec, build};

#[derive(Debug, Clone, Args)]
pub struct ReportArgs {
    /// Base URL of the Prometheus-compatible query API (Prometheus, Thanos, Mimir, …).
    /// Credentials come from the environment: GPU_SENTINEL_PROMETHEUS_TOKEN (bearer) or
    /// GPU_SENTINEL_PROMETHEUS_USER and GPU_SENTINEL_PROMETHEUS_PASSWORD (basic).
    #[arg(long, value_name = "URL")]
    pub prometheus: String,
    /// The period: this long up to now (e.g. 7d).
    #[arg(long, value_name = "D", value_parser = humantime::parse_duration, conflicts_with_all = ["from", "to"])]
    pub last: Option<Duration>,
    /// Start of the period (RFC 3339), with --to.
    #[arg(long, value_name = "RFC3339", requires = "to")]
    pub from: Option<DateTime<Utc>>,
    /// End of the period (RFC 3339), with --from.
    #[arg(long, value_name = "RFC3339", requires = "from")]
    pub to: Option<DateTime<Utc>>,
    /// Configuration file ([[teams]], [cost], [capacity], [idle]).
    #[arg(long, env = "GPU_SENTINEL_CONFIG")]
    pub config: Option<PathBuf>,
    /// Only this team.
    #[arg(long, value_name = "NAME")]
    pub team: Option<String>,
    #[arg(long, value_enum, default_value_t = ReportFormat::Markdown)]
    pub format: ReportFormat,
    /// Write here (replaced only once the report is complete) instead of standard output.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Resolution at which dcgm-exporter's held GPU-seconds are counted; by default the
    /// store's scrape interval, told from the spacing of its samples.
    #[arg(long, value_name = "D", value_parser = humantime::parse_duration)]
    pub step: Option<Duration>,
    /// Samples one query may load in the store (Prometheus --query.max-samples); by default
    /// what the store's /api/v1/status/flags says, else Prometheus's default, 50000000.
    /// Queries are planned to stay under it; a store that refuses a query anyway gets it
    /// again in smaller pieces.
    #[arg(long, value_name = "N")]
    pub max_samples: Option<u64>,
    /// Send each team's report (Markdown) to the receiver its `[[teams]] receiver` names,
    /// through a durable outbox in the state directory; with --out, the message names the
    /// file.
    #[arg(long)]
    pub send: bool,
    /// With --send: how long to wait for the receivers before leaving what they did not
    /// take in the outbox for the next run.
    #[arg(long, value_name = "D", default_value = "2m", value_parser = humantime::parse_duration)]
    pub(crate) send_timeout: Duration,
    /// Give up on one query after this long.
    #[arg(long, value_name = "D", default_value = "60s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Megabytes of the store's answers held in flight at most, all queries together
    /// (parsed as they arrive); a query whose answer would pass it fails, naming it. The
    /// report's systemd unit caps the process at 256 MB.
    #[arg(long, value_name = "MB", default_value_t = crate::fleet::prom::ANSWER_BYTES_IN_FLIGHT as u64 >> 20,
          value_parser = clap::value_parser!(u64).range(1..=65536))]
    pub(crate) max_answer_mb: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportFormat {
    Json,
    Markdown,
    Html,
}

pub fn report(args: &ReportArgs) -> anyhow::Result<()> {
    let config = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    let (from, to) = period(args)?;
    anyhow::ensure!(
        args.step.is_none_or(|s| s >= Duration::from_secs(1)),
        "--step must be at least 1s"
    );
    anyhow::ensure!(args.max_samples != Some(0), "--max-samples must be above 0");
    let client = Client::new(Endpoint {
        base: args.prometheus.clone(),
        auth: auth_from_env()?,
        timeout: args.timeout,
    })
    .with_answer_budget(usize::try_from(args.max_answer_mb << 20).unwrap_or(usize::MAX));
    let spec = ReportSpec {
        from,
        to,
        team: args.team.clone(),
        teams: config.teams.clone(),
        cost: config.cost.clone(),
        capacity: config.capacity.clone(),
        idle_threshold: config.idle.threshold,
        memory_floor_mib: config.idle.memory_floor_mib,
        step: args.step,
        max_samples: args.max_samples,
    };
    let report = build(&client, &spec)?;
    let text = match args.format {
        ReportFormat::Json => format!("{}\n", serde_json::to_string_pretty(&report)?),
        ReportFormat::Markdown => render::markdown(&report),
        ReportFormat::Html => render::html(&report),
    };
    match &args.out {
        Some(path) => write_whole(path, &text)?,
        None if args.send => {}
        None => super::output::print(&text)?,
    }
    if args.send {
        send(args, &config, &report)?;
    }
    Ok(())
}

fn send(
    args: &ReportArgs,
    config: &Config,
    report: &crate::fleet::report::Report,
) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.config.is_some(),
        "--send needs --config: [[teams]] receiver and [[alerting.receivers]] say where reports go"
    );
    let (notifications, unrouted) =
        crate::fleet::send::notifications(report, config, args.out.as_deref());
    let sent = crate::fleet::send::send(
        notifications,
        unrouted,
        config,
        &config.state.dir,
        args.send_timeout,
        &|name| std::env::var(name).ok(),
    )?;
    for (team, receiver) in &sent.queued {
        super::output::note(&format!("report of team {team} → receiver {receiver}"));
    }
    for team in &sent.unrouted {
        super::output::note(&format!("team {team}: no [[teams]] receiver, not sent"));
    }
    anyhow::ensure!(
        sent.pending == 0,
        "{} report(s) not yet delivered after {}; they stay in {} and the next `report --send` delivers them",
        sent.pending,
        humantime::format_duration(args.send_timeout),
        sent.outbox.display()
    );
    Ok(())
}

fn period(args: &ReportArgs) -> anyhow::Result<(DateTime<Utc>, DateTime<Utc>)> {
    let (from, to) = match (args.last, args.from, args.to) {
        (Some(last), _, _) => {
            let to = Utc::now();
            let span = TimeDelta::from_std(last).context("--last is too long")?;
            (to - span, to)
        }
        (None, Some(from), Some(to)) => (from, to),
        _ => anyhow::bail!("give the period: --last 7d, or --from and --to (RFC 3339)"),
    };
    anyhow::ensure!(
        to - from >= TimeDelta::hours(1),
        "the period {from} → {to} is shorter than an hour"
    );
    Ok((from, to))
}

/// Bearer token or basic-auth pair from the environment; never from a flag, which `ps`
/// would show.
pub(crate) fn auth_from_env() -> anyhow::Result<Auth> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let token = var("GPU_SENTINEL_PROMETHEUS_TOKEN");
    let user = var("GPU_SENTINEL_PROMETHEUS_USER");
    let password = var("GPU_SENTINEL_PROMETHEUS_PASSWORD");
    for secret in [&token, &password].into_iter().flatten() {
        crate::redact::register_secret(secret);
    }
    Ok(match (token, user, password) {
        (Some(token), None, None) => Auth::Bearer(token),
        (None, Some(user), Some(password)) => Auth::Basic { user, password },
        (None, None, None) => Auth::None,
        (Some(_), _, _) => anyhow::bail!(
            "set GPU_SENTINEL_PROMETHEUS_TOKEN or GPU_SENTINEL_PROMETHEUS_USER and _PASSWORD, not both"
        ),
        _ => anyhow::bail!(
            "GPU_SENTINEL_PROMETHEUS_USER and GPU_SENTINEL_PROMETHEUS_PASSWORD go together"
        ),
    })
}

/// Writes `text` to a temporary sibling of `path` and renames it into place: a failed run
/// never leaves a file that looks like a complete report.
fn write_whole(path: &std::path::Path, text: &str) -> anyhow::Result<()> {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    let partial = path.with_file_name(name);
    let written = std::fs::File::create(&partial)
        .and_then(|mut f| f.write_all(text.as_bytes()).and_then(|()| f.sync_all()));
    if let Err(error) = written {
        let _ = std::fs::remove_file(&partial);
        return Err(error).with_context(|| format!("cannot write {}", partial.display()));
    }
    std::fs::rename(&partial, path)
        .with_context(|| format!("cannot move {} to {}", partial.display(), path.display()))
}
