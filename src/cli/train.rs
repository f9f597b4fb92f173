//! `gpu-sentinel train --history FILE --out MODEL.toml`: fits the risk model and prints how
//! it does on held-out GPUs, next to the shipped model.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::config::DEFAULT_RISK_THRESHOLD;
use crate::train::{TrainOptions, train as fit};

#[derive(Debug, Clone, Args)]
pub struct TrainArgs {
    /// Labelled history: JSONL snapshots (as `record` writes them) and failure lines
    /// `{"failure": {"uuid": "GPU-…", "at": "RFC3339", "family": "…"}}`.
    #[arg(long, value_name = "FILE")]
    pub history: PathBuf,
    /// Where to write the fitted model (the format of models/default-risk.toml).
    #[arg(long, value_name = "MODEL.toml")]
    pub out: PathBuf,
    /// A GPU counts as at risk when it fails within this time.
    #[arg(long, value_name = "DURATION", default_value = "7d", value_parser = humantime::parse_duration)]
    pub horizon: Duration,
    /// Score at which a warning is raised, for the printed metrics.
    #[arg(long, value_name = "SCORE", default_value_t = DEFAULT_RISK_THRESHOLD)]
    pub threshold: f64,
    /// Share of GPUs held out to measure the model.
    #[arg(long, value_name = "SHARE", default_value_t = 0.3)]
    pub test_share: f64,
    /// Seed of the split into training and test GPUs.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// One row of features per GPU per this interval.
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = humantime::parse_duration)]
    pub row_every: Duration,
    /// L2 penalty of the logistic regression (on standardised features).
    #[arg(long, default_value_t = 1.0)]
    pub alpha: f64,
}

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
    let report = fit(&TrainOptions {
        history: args.history.clone(),
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
