//! `gpu-sentinel record --out FILE`: snapshots as JSONL, one line per collection.
//!
//! Three ways to record:
//! - NVML (the default): a collection every `--interval`, paced by the wall clock;
//! - `--simulate`: the simulated fleet, paced by the wall clock at `--sim-speed`, exactly
//!   what `run --simulate` would collect;
//! - `--simulate --simulated-duration D`: the fleet stepped directly, a snapshot every
//!   `--interval` of *simulated* time, as fast as the CPU allows: a week of history takes
//!   seconds, not a week divided by the speed-up.
//!
//! With the simulator, each fault reaching its failure point is also written, after the
//! snapshot of that step, as a label line `{"failure": {"uuid": …, "at": …, "family": …}}`:
//! the ground truth `train` learns from and `replay` skips.
//!
//! Lines are written whole and flushed after every live collection (every 64 KiB when
//! stepping the simulator); SIGINT or SIGTERM stops recording between two lines, so the
//! file always ends with a complete line.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::{DurationRound, TimeDelta, Utc};
use clap::Args;
use serde::Serialize;

use super::SourceArgs;
use crate::model::Snapshot;
use crate::source::simulate::{Failure, Fleet};

#[derive(Debug, Clone, Args)]
pub struct RecordArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// File to write, one JSON snapshot per line (replaced if it exists); `-` for stdout.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// Wall-clock time to record (e.g. 10m, 24h); until Ctrl-C when not given.
    #[arg(long, value_name = "D", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Time between snapshots (overrides [collect] interval). With --simulated-duration it
    /// is simulated time.
    #[arg(long, value_name = "D", value_parser = parse_duration)]
    pub interval: Option<Duration>,
    /// With --simulate: record this much simulated time (e.g. 7d) as fast as the CPU
    /// allows, a snapshot every --interval of simulated time, instead of pacing the
    /// simulator by the wall clock.
    #[arg(
        long,
        value_name = "D",
        value_parser = parse_duration,
        requires = "simulate",
        conflicts_with_all = ["duration", "sim_speed"]
    )]
    pub(crate) simulated_duration: Option<Duration>,
    /// What to write: `jsonl` (snapshots, replayable) or `openmetrics` (what a Prometheus
    /// scraping the simulated fleet would have stored, with timestamps, for `promtool tsdb
    /// create-blocks-from openmetrics`; needs --simulate and --simulated-duration, and the
    /// history ends now).
    #[arg(long, value_enum, default_value_t = RecordFormat::Jsonl)]
    pub format: RecordFormat,
    /// With --format openmetrics: simulated hosts, each with [simulation] gpus GPUs, named
    /// sim-node-01, sim-node-02, … (the `instance` label).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub hosts: u16,
    /// With --format openmetrics: a regular expression over the family names to record
    /// (as /metrics spells them); the default is what the fleet report and dashboards read.
    /// `.*` records every family.
    #[arg(long, value_name = "REGEX", default_value = crate::backfill::FLEET_FAMILIES, hide_default_value = true)]
    pub families: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RecordFormat {
    Jsonl,
    Openmetrics,
}

fn parse_duration(text: &str) -> Result<Duration, DurationArgError> {
    humantime::parse_duration(text).map_err(DurationArgError)
}

/// A `--duration`, `--interval` or `--simulated-duration` value that is not a duration;
/// clap prints it after the option's name, so it only adds the accepted forms.
#[derive(Debug, thiserror::Error)]
#[error("{0} (use e.g. 500ms, 5s, 30m, 24h, 7d)")]
struct DurationArgError(humantime::DurationError);

/// A failure label line, in the exact shape `train` reads.
#[derive(Serialize)]
struct Label<'a> {
    failure: &'a Failure,
}

/// Writes whole lines and counts them.
struct Lines {
    out: BufWriter<Box<dyn Write>>,
    snapshots: u64,
    labels: u64,
}

impl Lines {
    fn snapshot(&mut self, snapshot: &Snapshot) -> anyhow::Result<()> {
        serde_json::to_writer(&mut self.out, snapshot)?;
        self.out.write_all(b"\n")?;
        self.snapshots += 1;
        Ok(())
    }

    fn failures(&mut self, failures: Vec<Failure>) -> anyhow::Result<()> {
        for failure in &failures {
            serde_json::to_writer(&mut self.out, &Label { failure })?;
            self.out.write_all(b"\n")?;
            self.labels += 1;
        }
        Ok(())
    }
}

pub fn record(args: &RecordArgs) -> anyhow::Result<()> {
    let config = args.source.config()?;
    let interval = args.interval.unwrap_or(config.collect.interval);
    anyhow::ensure!(
        interval >= Duration::from_millis(1),
        "--interval {interval:?} is too short (at least 1ms)"
    );
    if args.format == RecordFormat::Openmetrics {
        return record_openmetrics(args, &config, interval);
    }
    anyhow::ensure!(
        args.hosts == 1,
        "--hosts is for --format openmetrics; a JSONL recording is one host"
    );
    let target = args.out.display().to_string();
    let sink: Box<dyn Write> = if target == "-" {
        super::output::stdout_is_open()?;
        Box::new(std::io::stdout().lock())
    } else {
        Box::new(File::create(&args.out).with_context(|| format!("cannot create {target}"))?)
    };
    let mut lines = Lines {
        out: BufWriter::with_capacity(64 << 10, sink),
        snapshots: 0,
        labels: 0,
    };
    let stop = stop_on_signal();
    let began = Instant::now();
    let outcome = match args.simulated_duration {
        Some(span) => simulated(&config, span, interval, &stop, &mut lines),
        None => live(args, &config, interval, &stop, &mut lines),
    };
    lines
        .out
        .flush()
        .with_context(|| format!("cannot write {target}"))?;
    outcome.with_context(|| format!("cannot write {target}"))?;
    super::output::note(&format!(
        "recorded {} snapshots and {} failure labels to {target} in {:.1}s",
        lines.snapshots,
        lines.labels,
        began.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// `--format openmetrics`: the simulated hosts' history up to now, for backfilling.
fn record_openmetrics(
    args: &RecordArgs,
    config: &crate::config::Config,
    interval: Duration,
) -> anyhow::Result<()> {
    let Some(span) = args.simulated_duration.filter(|_| args.source.simulate) else {
        anyhow::bail!(
            "--format openmetrics writes simulated history: give --simulate and --simulated-duration"
        );
    };
    anyhow::ensure!(
        args.out.as_os_str() != "-",
        "--format openmetrics writes a file (its families are joined at the end); give --out FILE"
    );
    let families = regex::Regex::new(&args.families)
        .with_context(|| format!("--families {:?} is not a regular expression", args.families))?;
    let end = Utc::now()
        .duration_trunc(TimeDelta::from_std(interval).unwrap_or(TimeDelta::seconds(1)))
        .unwrap_or_else(|_| Utc::now());
    let began = Instant::now();
    let history = crate::backfill::History {
        hosts: usize::from(args.hosts),
        span,
        interval,
        end,
        families,
    };
    let written = crate::backfill::write(config, &history, &args.out, &stop_on_signal())?;
    super::output::note(&format!(
        "recorded {} hosts × {} steps ({} samples, {} families) to {} in {:.1}s",
        args.hosts,
        written.steps,
        written.samples,
        written.families,
        args.out.display(),
        began.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// Steps a simulated fleet directly through `span` of simulated time.
fn simulated(
    config: &crate::config::Config,
    span: Duration,
    interval: Duration,
    stop: &Receiver<()>,
    lines: &mut Lines,
) -> anyhow::Result<()> {
    let start = Utc::now()
        .duration_trunc(TimeDelta::seconds(1))
        .unwrap_or_else(|_| Utc::now());
    let mut fleet = Fleet::new(&config.simulation, start);
    let steps = span.as_nanos() / interval.as_nanos();
    for step in 0..steps {
        if step > 0 {
            fleet.advance(interval.as_secs_f64());
        }
        lines.snapshot(&fleet.snapshot())?;
        lines.failures(fleet.take_failures())?;
        if step % 256 == 0 && stop.try_recv().is_ok() {
            super::output::note("stopped by signal");
            break;
        }
    }
    Ok(())
}

/// What produces snapshots in real time.
enum Producer {
    /// The simulated fleet, driven here (not through the `Source` trait) so that its
    /// failure points can be written as labels.
    Fleet {
        fleet: Box<Fleet>,
        speed: f64,
        began: Instant,
    },
    Source(Box<dyn crate::source::Source>),
}

impl Producer {
    fn next(&mut self, lines: &mut Lines) -> anyhow::Result<()> {
        match self {
            Producer::Fleet {
                fleet,
                speed,
                began,
            } => {
                let simulated = began.elapsed().as_secs_f64() * *speed;
                fleet.advance(simulated - fleet.elapsed_seconds());
                lines.snapshot(&fleet.snapshot())?;
                lines.failures(fleet.take_failures())
            }
            Producer::Source(source) => lines.snapshot(&source.collect().snapshot),
        }
    }
}

/// Collects every `interval` of wall time until `--duration` has passed or a signal comes.
fn live(
    args: &RecordArgs,
    config: &crate::config::Config,
    interval: Duration,
    stop: &Receiver<()>,
    lines: &mut Lines,
) -> anyhow::Result<()> {
    let mut producer = if args.source.simulate {
        Producer::Fleet {
            fleet: Box::new(Fleet::new(&config.simulation, Utc::now())),
            speed: config.simulation.speed,
            began: Instant::now(),
        }
    } else {
        Producer::Source(super::sources::open(config, false)?)
    };
    let began = Instant::now();
    let mut tick: u32 = 0;
    loop {
        producer.next(lines)?;
        lines.out.flush()?;
        // The next tick on the grid; ticks missed by a slow collection are skipped.
        let elapsed = began.elapsed();
        tick = tick
            .saturating_add(1)
            .max(u32::try_from(elapsed.as_nanos() / interval.as_nanos()).unwrap_or(u32::MAX));
        let next = interval.saturating_mul(tick);
        if args.duration.is_some_and(|d| next >= d) {
            return Ok(());
        }
        let wait = next.saturating_sub(began.elapsed());
        match stop.recv_timeout(wait) {
            Ok(()) => {
                super::output::note("stopped by signal");
                return Ok(());
            }
            Err(RecvTimeoutError::Timeout) => {}
            // No signal handling (the runtime could not start): just wait.
            Err(RecvTimeoutError::Disconnected) => std::thread::sleep(wait),
        }
    }
}

/// A channel that receives once SIGINT or SIGTERM arrives. The handler lives on its own
/// thread, so recording loops only poll or wait on the channel.
fn stop_on_signal() -> Receiver<()> {
    let (tx, rx) = mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async {
                let ctrl_c = tokio::signal::ctrl_c();
                #[cfg(unix)]
                {
                    use tokio::signal::unix::{SignalKind, signal};
                    match signal(SignalKind::terminate()) {
                        Ok(mut term) => {
                            tokio::select! {
                                _ = ctrl_c => {}
                                _ = term.recv() => {}
                            }
                        }
                        Err(_) => {
                            let _ = ctrl_c.await;
                        }
                    }
                }
                #[cfg(not(unix))]
                {
                    let _ = ctrl_c.await;
                }
            });
            let _ = tx.send(());
        });
    if spawned.is_err() {
        tracing::warn!("cannot start the signal thread; Ctrl-C will end recording abruptly");
    }
    rx
}
