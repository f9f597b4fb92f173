//! The command line: `run` (the default), `check-config`, `snapshot`, `record`, `replay`,
//! `train`, `review`, `report`, `scenarios`, `health`.
//!
//! Parsing lives here; each subcommand's work lives in its own file and returns
//! `anyhow::Result`, so `main` only prints the error chain and picks the exit code.

mod health;
pub mod logging;
pub mod output;
pub mod preflight;
mod record;
mod replay;
mod replay_store;
mod report;
mod review;
mod run;
mod scenarios;
mod snapshot;
mod sources;
mod train;

pub use health::{Exit, HealthArgs, HealthFormat};
pub(crate) use record::RecordArgs;
pub(crate) use replay::ReplayArgs;
pub(crate) use report::ReportArgs;
pub(crate) use review::ReviewArgs;
pub use run::Parts;

use anyhow::Context as _;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::{Config, ConfigError, MAX_SIM_SPEED};

/// Per-host NVIDIA GPU agent: Prometheus exporter, failure-risk and idle analysis, alerting.
#[derive(Debug, Parser)]
#[command(name = "gpu-sentinel", version, args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Options of `run`, which is what a bare `gpu-sentinel` does.
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Collect, analyse and serve /metrics and the API (the default).
    Run(RunArgs),
    /// Validate a configuration file; every problem is printed with its key and line.
    CheckConfig {
        /// The configuration file to check.
        path: PathBuf,
        /// Also check this web configuration file, as `run --web.config.file` would.
        #[arg(long = "web.config.file", value_name = "FILE")]
        web_config_file: Option<PathBuf>,
    },
    /// Collect once and print every GPU as a table, or as JSON.
    Snapshot(SnapshotArgs),
    /// Record snapshots as JSONL, one per line (with failure labels from the simulator).
    Record(RecordArgs),
    /// Run the engine over a recording (JSONL or an nvidia-smi CSV log), or over the history
    /// of every host a Prometheus-compatible store holds (--prometheus), and report.
    Replay(ReplayArgs),
    /// Rank a running exporter's GPUs by failure risk, with reasons and findings.
    Review(ReviewArgs),
    /// The fleet report from a Prometheus-compatible store: GPU-hours per team, busy and
    /// idle, waste cost, utilization heatmap, scaling, night-idle hosts, risk review.
    Report(ReportArgs),
    /// Fit the failure-risk model on labelled history and print how it does.
    Train(train::TrainArgs),
    /// Draw the scenario library (failing GPUs of every family in many shapes, healthy
    /// confounders) and write one nvidia-smi CSV log or JSONL file per node plus truth.json.
    Scenarios(scenarios::ScenariosArgs),
    /// A running agent's health verdict as a scheduler's health check: one line (worst
    /// component, GPU, repair action); exit 0 healthy or degraded, 1 unhealthy, 2 unknown.
    Health(HealthArgs),
}

/// Where GPU data comes from: real NVML or the simulator.
#[derive(Debug, Clone, Args, Default)]
pub struct SourceArgs {
    /// Configuration file (every option and its default: config.toml in the repository).
    #[arg(long, env = "GPU_SENTINEL_CONFIG")]
    pub config: Option<PathBuf>,
    /// Use the built-in simulated fleet instead of NVML.
    #[arg(long)]
    pub simulate: bool,
    /// Number of simulated GPUs (overrides [simulation] gpus).
    #[arg(long, value_name = "N")]
    pub(crate) sim_gpus: Option<u32>,
    /// Simulated seconds per wall-clock second (overrides [simulation] speed).
    #[arg(long, value_name = "X")]
    pub(crate) sim_speed: Option<f64>,
    /// Put the first N simulated GPUs in MIG mode (overrides [simulation] mig_gpus).
    #[arg(long, value_name = "N")]
    pub(crate) sim_mig: Option<u32>,
    /// Path of libnvidia-ml.so.1 (overrides [collect] nvml_lib).
    #[arg(long, value_name = "PATH")]
    pub nvml_lib: Option<PathBuf>,
}

#[derive(Debug, Clone, Args, Default)]
pub struct RunArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// Address to serve on (overrides [export] listen; default 0.0.0.0:10400).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Web configuration file in exporter-toolkit's format: TLS, client certificates,
    /// basic-auth users (overrides [export] web_config).
    #[arg(long = "web.config.file", value_name = "FILE")]
    pub(crate) web_config_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct SnapshotArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// Print JSON (the snapshot model) instead of a table.
    #[arg(long)]
    pub json: bool,
}

impl Cli {
    /// True for `run`, bare or named: the long-running agent rather than a one-shot command.
    pub fn is_run(&self) -> bool {
        matches!(self.command, None | Some(Command::Run(_)))
    }
}

impl SourceArgs {
    /// The configuration file's contents (or the defaults) with the command line applied.
    pub fn config(&self) -> anyhow::Result<Config> {
        let config = match &self.config {
            Some(path) => Config::load(path)?,
            None => Config::default(),
        };
        self.overridden(config)
    }

    /// The configuration `run` starts with: checked by [`preflight::check`] exactly as
    /// `check-config` checks it (every environment variable named must be set), with the
    /// command line applied.
    pub(crate) fn config_for_run(&self) -> anyhow::Result<Config> {
        let config = match &self.config {
            Some(path) => preflight::check(&Config::read_text(path)?, &preflight::process_env)
                .into_runnable(path)?,
            None => preflight::check("", &preflight::process_env)
                .into_runnable(std::path::Path::new("(built-in defaults)"))?,
        };
        self.overridden(config)
    }

    fn overridden(&self, mut config: Config) -> anyhow::Result<Config> {
        if let Some(n) = self.sim_gpus {
            anyhow::ensure!((1..=4096).contains(&n), "--sim-gpus {n} is outside 1..4096");
            config.simulation.gpus = n;
        }
        if let Some(x) = self.sim_speed {
            anyhow::ensure!(
                x > 0.0 && x <= MAX_SIM_SPEED,
                "--sim-speed {x} is outside (0, {MAX_SIM_SPEED}]"
            );
            config.simulation.speed = x;
        }
        if let Some(n) = self.sim_mig {
            config.simulation.mig_gpus = n;
        }
        if let Some((key, problem)) = config.simulation.problems().into_iter().next() {
            // The file's values were checked before: the command line made them disagree.
            anyhow::bail!("{key} (with --sim-gpus/--sim-mig as given): {problem}");
        }
        if let Some(path) = &self.nvml_lib {
            config.collect.nvml_lib = Some(path.clone());
        }
        Ok(config)
    }
}

/// Runs the parsed command line.
pub fn dispatch(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        None => run::run(&cli.run),
        Some(Command::Run(args)) => run::run(&args),
        Some(Command::CheckConfig {
            path,
            web_config_file,
        }) => check_config(&path, web_config_file.as_deref()),
        Some(Command::Snapshot(args)) => snapshot::snapshot(&args),
        Some(Command::Record(args)) => record::record(&args),
        Some(Command::Replay(args)) => replay::replay(&args),
        Some(Command::Review(args)) => review::review(&args),
        Some(Command::Report(args)) => report::report(&args),
        Some(Command::Train(args)) => train::train(&args),
        Some(Command::Scenarios(args)) => scenarios::scenarios(&args),
        Some(Command::Health(args)) => health::health(&args),
    }
}

/// Runs the checks `run` runs ([`preflight::check`]). Unset environment variables are
/// warnings: they may be set where the agent runs, and `run` names them if not. So is a
/// server certificate that has expired or ends within 14 days: `run` serves it, warning.
fn check_config(
    path: &std::path::Path,
    web_config_file: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    let flagged = match web_config_file {
        Some(web) => Some(
            crate::webconfig::WebConfig::load(web)
                .context("--web.config.file")?
                .certificate_warning(),
        ),
        None => None,
    };
    let checked = preflight::check(&Config::read_text(path)?, &preflight::process_env);
    // The flag's file is the one `run` serves when both are given.
    let certificate = flagged.unwrap_or_else(|| checked.certificate.clone());
    if let Some(warning) = &certificate {
        output::note(&format!("warning: {warning}"));
    }
    for problem in &checked.unset_env {
        output::note(&format!(
            "warning: {}; run refuses to start unless it is set there",
            problem.render(path)
        ));
    }
    if !checked.errors.is_empty() {
        return Err(ConfigError {
            path: path.to_owned(),
            problems: checked.errors,
        }
        .into());
    }
    let mut remarks = Vec::new();
    if !checked.unset_env.is_empty() {
        remarks.push(format!(
            "{} environment variable(s) to set where the agent runs",
            checked.unset_env.len()
        ));
    }
    if certificate.is_some() {
        remarks.push("a warning about the server certificate".to_string());
    }
    if remarks.is_empty() {
        output::print(&format!("{}: ok\n", path.display()))
    } else {
        output::print(&format!(
            "{}: ok, with {}\n",
            path.display(),
            remarks.join(" and ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_invocation_is_run_with_its_flags() {
        let cli = Cli::try_parse_from(["gpu-sentinel", "--simulate", "--sim-gpus", "4"]).unwrap();
        assert!(cli.command.is_none());
        assert!(cli.run.source.simulate);
        assert_eq!(cli.run.source.sim_gpus, Some(4));
    }

    #[test]
    fn flags_override_the_config() {
        let cli = Cli::try_parse_from([
            "gpu-sentinel",
            "run",
            "--simulate",
            "--sim-speed",
            "600",
            "--listen",
            "127.0.0.1:9",
        ])
        .unwrap();
        let Some(Command::Run(args)) = cli.command else {
            panic!("expected run");
        };
        let config = args.source.config().unwrap();
        assert_eq!(config.simulation.speed, 600.0);
        assert_eq!(args.listen, Some("127.0.0.1:9".parse().unwrap()));
    }

    #[test]
    fn bad_overrides_are_refused() {
        let args = SourceArgs {
            sim_gpus: Some(0),
            ..Default::default()
        };
        assert!(args.config().is_err());
    }

    #[test]
    fn sim_mig_puts_gpus_in_mig_mode_within_the_fleet() {
        let cli = Cli::try_parse_from(["gpu-sentinel", "--simulate", "--sim-mig", "2"]).unwrap();
        assert_eq!(cli.run.source.config().unwrap().simulation.mig_gpus, 2);
        let args = SourceArgs {
            sim_gpus: Some(2),
            sim_mig: Some(3),
            ..Default::default()
        };
        let error = args.config().unwrap_err().to_string();
        assert!(
            error.contains("simulation.mig_gpus") && error.contains("more than the 2"),
            "{error}"
        );
    }
}
