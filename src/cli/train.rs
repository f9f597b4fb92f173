//! `gpu-sentinel train --history FILE --out MODEL.toml`: fits the risk model and prints how
//! it does on held-out GPUs, next to the shipped model.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::config::DEFAULT_RISK_THRESHOLD;
#[cfg(feature = "train")]
use anyhow::Context as _;

#[cfg(feature = "train")]
use crate::scenario::{Library, LibraryOptions};
#[cfg(feature = "train")]
use crate::train::{TrainOptions, library, train as fit};

#[derive(Debug, Clone, Args)]
pub struct TrainArgs {
    /// Labelled history: JSONL snapshots (as `record` writes them) and failure lines
    /// `{"failure": {"uuid": "GPU-…", "at": "RFC3339", "family": "…"}}`.
    #[arg(long, value_name = "FILE", required_unless_present = "scenarios")]
    pub history: Option<PathBuf>,
    /// Instead of a history: fit on a drawn scenario library of this many nodes of eight
    /// GPUs (docs/detection.md), and judge the model leaving each variant out.
    #[arg(long, value_name = "NODES", conflicts_with_all = ["history", "test_share"])]
    pub scenarios: Option<usize>,
    /// With --scenarios: simulated days each node runs.
    #[arg(
        long,
        value_name = "DAYS",
        default_value_t = 30.0,
        requires = "scenarios"
    )]
    pub days: f64,
    /// With --scenarios: the longest time between two collections of a node (each node is
    /// collected at an interval of its own, from --min-interval to this).
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = humantime::parse_duration, requires = "scenarios")]
    pub interval: Duration,
    /// With --scenarios: the shortest time between two collections of a node [default:
    /// half of --interval; shorter intervals cost time in proportion].
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration, requires = "scenarios")]
    pub(crate) min_interval: Option<Duration>,
    /// With --scenarios: also write the evaluation tables (Markdown) to this file.
    #[arg(long, value_name = "FILE", requires = "scenarios")]
    pub tables: Option<PathBuf>,
    /// With --scenarios: follow this GPU hour by hour (node and GPU as the tables list
    /// them, e.g. 3:1; repeatable): its score and largest terms under the model that
    /// judges it in the tables and under the shipped model, appended to the tables.
    #[arg(long, value_name = "NODE:GPU", value_parser = parse_traced, requires = "scenarios")]
    pub trace: Vec<(usize, u32)>,
    /// Where to write the fitted model (the format of models/default-risk.toml).
    #[arg(long, value_name = "MODEL.toml")]
    pub out: PathBuf,
    /// With --history: a GPU counts as at risk when it fails within this time.
    #[arg(long, value_name = "DURATION", default_value = "7d", value_parser = humantime::parse_duration)]
    pub horizon: Duration,
    /// Score at which a warning is raised, for the printed metrics.
    #[arg(long, value_name = "SCORE", default_value_t = DEFAULT_RISK_THRESHOLD)]
    pub threshold: f64,
    /// Share of GPUs held out to measure the model.
    #[arg(long, value_name = "SHARE", default_value_t = 0.3)]
    pub test_share: f64,
    /// Seed of the split into training and test GPUs (with --scenarios: of the library and
    /// of the bagged searches' bootstrap draws).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// One row of features per GPU per this interval.
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = humantime::parse_duration)]
    pub row_every: Duration,
    /// With --history: L2 penalty of the logistic regression (on standardised features).
    #[arg(long, default_value_t = 1.0)]
    pub alpha: f64,
}

/// `NODE:GPU` of `--trace`: a node numbered from 1 and a GPU index from 0, as the tables
/// list them.
fn parse_traced(text: &str) -> Result<(usize, u32), String> {
    let expected = || format!("{text:?} is not NODE:GPU (as the tables list them, e.g. 3:1)");
    let (node, gpu) = text.trim().split_once(':').ok_or_else(expected)?;
    let node: usize = node.trim().parse().map_err(|_| expected())?;
    let gpu: u32 = gpu.trim().parse().map_err(|_| expected())?;
    if node == 0 {
        return Err(format!("{text:?}: nodes are numbered from 1"));
    }
    Ok((node, gpu))
}

/// The agent as hosts install it has no trainer: the fit's numeric crates (linfa, ndarray)
/// stay out of the binary that runs on every GPU host. The command stays, and says how to
/// get a build that has it.
#[cfg(not(feature = "train"))]
pub fn train(_args: &TrainArgs) -> anyhow::Result<()> {
    anyhow::bail!(
        "this gpu-sentinel was built without the trainer; build one with it on a workstation: \
         cargo build --release --features train"
    )
}

#[cfg(feature = "train")]
pub fn train(args: &TrainArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        (0.0..=1.0).contains(&args.threshold),
        "--threshold {} is outside 0..1",
        args.threshold
    );
    anyhow::ensure!(
        args.test_share > 0.0 && args.test_share < 1.0,
        "--test-share {} must be between 0 and 1",
        args.test_share
    );
    anyhow::ensure!(
        args.alpha.is_finite() && args.alpha >= 0.0,
        "--alpha {} must be a non-negative number",
        args.alpha
    );
    let seconds = |d: Duration| i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
    anyhow::ensure!(seconds(args.horizon) > 0, "--horizon must be positive");
    anyhow::ensure!(seconds(args.row_every) > 0, "--row-every must be positive");
    let Some(history) = &args.history else {
        return scenarios(args, seconds(args.row_every));
    };
    let report = fit(&TrainOptions {
        history: history.clone(),
        out: args.out.clone(),
        horizon: seconds(args.horizon),
        threshold: args.threshold,
        test_share: args.test_share,
        seed: args.seed,
        row_every: seconds(args.row_every),
        alpha: args.alpha,
    })?;
    super::output::print(&format!("{report}wrote {}\n", args.out.display()))
}

/// False warnings the search may raise per 1,000 healthy training GPU-days, with
/// `--scenarios`: a third of what the held-out GPUs are allowed (one), so a model does not
/// spend its whole allowance on the GPUs it was fitted on.
#[cfg(feature = "train")]
const SEARCH_FALSE_PER_1000_DAYS: f64 = 0.33;

/// `--scenarios NODES`: fit and judge on the scenario library.
#[cfg(feature = "train")]
fn scenarios(args: &TrainArgs, row_every: i64) -> anyhow::Result<()> {
    let nodes = args.scenarios.unwrap_or(0);
    anyhow::ensure!(nodes >= 1, "--scenarios needs at least one node");
    anyhow::ensure!(
        args.days.is_finite() && args.days > 0.0 && args.days <= 366.0,
        "--days {} must be between 0 and 366",
        args.days
    );
    let interval = args.interval.as_secs_f64();
    anyhow::ensure!(interval >= 1.0, "--interval must be at least 1s");
    let shortest = args
        .min_interval
        .map_or(interval / 2.0, |d| d.as_secs_f64());
    anyhow::ensure!(
        (1.0..=interval).contains(&shortest),
        "--min-interval must be at least 1s and at most --interval"
    );
    let library = Library::new(LibraryOptions::new(args.seed, nodes, args.days));
    let report = library::run(
        &library,
        &library::LibraryOptions {
            seed: args.seed,
            nodes,
            days: args.days,
            interval,
            shortest_interval: shortest.max(1.0).min(interval),
            row_every: row_every as f64,
            threshold: args.threshold,
            false_per_1000_days: SEARCH_FALSE_PER_1000_DAYS,
            trace: args.trace.clone(),
        },
    )?;
    let tables = report.tables();
    if let Some(path) = &args.tables {
        std::fs::write(path, &tables)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    std::fs::write(&args.out, report.model.to_toml())
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    super::output::print(&format!("{tables}wrote {}\n", args.out.display()))
}

#[cfg(test)]
mod tests;
