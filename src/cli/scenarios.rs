//! `gpu-sentinel scenarios --out DIR`: draws a scenario library and writes one log per node
//! (an nvidia-smi CSV log or JSONL snapshots) and its ground truth, `truth.json`.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::output;
use crate::scenario::emit::{FileFormat, write_library};
use crate::scenario::{Library, LibraryOptions, Polling, TruthKind};

#[derive(Debug, Clone, Args)]
pub struct ScenariosArgs {
    /// Directory to write into (created if missing): NODE.csv or NODE.jsonl per node, and
    /// truth.json.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Nodes of eight GPUs to draw.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub nodes: u16,
    /// Seed of every draw: the same seed and options give the same files.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Simulated time each node runs (e.g. 30d); failures fall inside it.
    #[arg(long, value_name = "D", default_value = "30d", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// The longest simulated time between collections: each node is collected at an
    /// interval of its own, from --min-interval to this (whole seconds).
    #[arg(long, value_name = "D", default_value = "60s", value_parser = humantime::parse_duration)]
    pub interval: Duration,
    /// The shortest simulated time between collections (capped at --interval).
    #[arg(long, value_name = "D", default_value = "5s", value_parser = humantime::parse_duration)]
    pub(crate) min_interval: Duration,
    /// `smi-csv` (nvidia-smi --format=csv, units after values), `smi-csv-nounits`
    /// (--format=csv,nounits) or `jsonl` (snapshots and failure labels, as `record` writes).
    #[arg(long, value_enum, default_value_t = ScenarioFormat::SmiCsv)]
    pub format: ScenarioFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ScenarioFormat {
    SmiCsv,
    SmiCsvNounits,
    Jsonl,
}

pub fn scenarios(args: &ScenariosArgs) -> anyhow::Result<()> {
    let days = args.duration.as_secs_f64() / 86_400.0;
    let interval = args.interval.as_secs_f64();
    anyhow::ensure!(
        interval >= 1.0,
        "--interval {}: give at least one second",
        humantime::format_duration(args.interval)
    );
    anyhow::ensure!(
        (1.0 / 24.0..=3650.0).contains(&days),
        "--duration {}: give between 1h and 3650d",
        humantime::format_duration(args.duration)
    );
    let shortest = args.min_interval.as_secs_f64().min(interval);
    anyhow::ensure!(
        shortest >= 1.0,
        "--min-interval {}: give at least one second",
        humantime::format_duration(args.min_interval)
    );
    anyhow::ensure!(
        days * 86_400.0 / shortest <= 10_000_000.0,
        "--duration over --min-interval is more than 10,000,000 collections per node"
    );
    let format = match args.format {
        ScenarioFormat::SmiCsv => FileFormat::SmiCsv,
        ScenarioFormat::SmiCsvNounits => FileFormat::SmiCsvNoUnits,
        ScenarioFormat::Jsonl => FileFormat::Jsonl,
    };
    let library = Library::new(LibraryOptions::new(args.seed, args.nodes.into(), days));
    let polling = Polling::between(shortest, interval);
    let written = write_library(&library, &args.out, format, polling)?;
    let labels = library.nodes.iter().flat_map(|n| &n.labels);
    let count = |kind| labels.clone().filter(|l| l.kind == kind).count();
    output::print(&format!(
        "{} nodes, {} GPUs ({} failing, {} confounders, {} healthy): {} {} in {}\n",
        library.nodes.len(),
        labels.clone().count(),
        count(TruthKind::Failing),
        count(TruthKind::Confounder),
        count(TruthKind::Healthy),
        written.rows,
        if format == FileFormat::Jsonl {
            "snapshots"
        } else {
            "rows"
        },
        args.out.display()
    ))
}
