//! `gpu-sentinel replay FILE`: runs the engine over a recording and prints the report.
//! `replay --prometheus URL --from … --to …` does the same over a store's history, per host
//! (see [`super::replay_store`]).
//!
//! The recording streams through: memory stays what one snapshot and the engine's
//! bounded windows need, however long the file. Warnings about its lines go to standard
//! error; the report alone goes to standard output, so `--json` output pipes cleanly.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, ValueEnum};

use crate::config::Config;
use crate::engine::{Engine, EngineConfig};
use crate::replay::alerts::ReplayAlerting;
use crate::replay::jsonl::JsonlReader;
use crate::replay::smi_csv::{SmiCsvOptions, SmiCsvReader};
use crate::replay::{Format, SnapshotReader, Warnings};

#[derive(Debug, Clone, Args)]
pub struct ReplayArgs {
    /// The recording: JSONL from `gpu-sentinel record`, or a log of
    /// `nvidia-smi --query-gpu=… --format=csv -l N`; `-` reads standard input.
    #[arg(required_unless_present = "prometheus", conflicts_with = "prometheus")]
    pub file: Option<PathBuf>,
    /// Replay the history a Prometheus-compatible store holds instead of a file, each host
    /// (`instance`) on its own (credentials as for `report`: GPU_SENTINEL_PROMETHEUS_TOKEN,
    /// or _USER and _PASSWORD).
    #[arg(long, value_name = "URL", requires_all = ["from", "to"], conflicts_with_all = ["format", "fields", "timezone", "save_state"])]
    pub prometheus: Option<String>,
    /// With --prometheus: start of the history (RFC 3339).
    #[arg(long, value_name = "RFC3339", requires = "prometheus")]
    pub from: Option<chrono::DateTime<chrono::Utc>>,
    /// With --prometheus: end of the history (RFC 3339).
    #[arg(long, value_name = "RFC3339", requires = "prometheus")]
    pub to: Option<chrono::DateTime<chrono::Utc>>,
    /// With --prometheus: time between the rebuilt snapshots; by default the store's scrape
    /// interval, told from the spacing of its samples (coarser is faster).
    #[arg(long, value_name = "D", value_parser = humantime::parse_duration)]
    pub step: Option<std::time::Duration>,
    /// With --prometheus: samples one query may load in the store (Prometheus
    /// --query.max-samples); by default what the store's flags say, else 50000000.
    #[arg(long, value_name = "N", requires = "prometheus")]
    pub max_samples: Option<u64>,
    /// With --prometheus: give up on one query after this long.
    #[arg(long, value_name = "D", default_value = "60s", value_parser = humantime::parse_duration)]
    pub timeout: std::time::Duration,
    /// Format of the recording; guessed from its first bytes when not given.
    #[arg(long, value_enum)]
    pub format: Option<ReplayFormat>,
    /// Print the report as JSON: a fixed set of keys, for scripts.
    #[arg(long)]
    pub json: bool,
    /// Configuration file: the `[risk]`, `[idle]`, `[cost]` and `[capacity]` settings.
    #[arg(long, env = "GPU_SENTINEL_CONFIG")]
    pub config: Option<PathBuf>,
    /// Zone of nvidia-smi's timestamps, which carry none (default UTC), e.g. +08:00.
    #[arg(long, value_name = "±HH:MM", allow_hyphen_values = true)]
    pub timezone: Option<String>,
    /// The `--query-gpu` list of a log written with `--format=csv,noheader`.
    #[arg(long, value_name = "FIELD,FIELD,…")]
    pub fields: Option<String>,
    /// Write the engine's state at the end of the recording to this file (the format of
    /// the state directory's engine file): start an agent with the recording's history.
    #[arg(long, value_name = "PATH")]
    pub(crate) save_state: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReplayFormat {
    /// nvidia-smi CSV, with or without units, with or without a header.
    SmiCsv,
    /// JSONL snapshots, as `gpu-sentinel record` writes them.
    Jsonl,
}

/// Large reads: the reader is CPU-bound, and fewer system calls help on long logs.
const READ_BUFFER: usize = 1 << 20;

pub fn replay(args: &ReplayArgs) -> anyhow::Result<()> {
    let config = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    let engine_config = EngineConfig::from_config(&config)?;
    let (Some(file), None) = (&args.file, &args.prometheus) else {
        let store = super::replay_store::StoreArgs {
            base: args.prometheus.as_deref().unwrap_or_default(),
            from: args.from,
            to: args.to,
            step: args.step,
            timeout: args.timeout,
            json: args.json,
            max_samples: args.max_samples,
        };
        return super::replay_store::replay(&store, &config, &engine_config);
    };
    let timezone =
        crate::replay::smi_fields::parse_offset(args.timezone.as_deref().unwrap_or("UTC"))?;
    let origin = file.display().to_string();
    // Send: the recording is read on a thread of its own (see `replay::replay`).
    let input: Box<dyn Read + Send> = if origin == "-" {
        Box::new(std::io::stdin())
    } else {
        Box::new(File::open(file).with_context(|| format!("cannot open the recording {origin}"))?)
    };
    // A gzip-compressed log (as logrotate keeps them) is decompressed; a binary file or
    // another compression is refused by name.
    let input = crate::replay::unpack::text_of(input, &origin)?;
    let mut input = BufReader::with_capacity(READ_BUFFER, input);
    let format = match args.format {
        Some(ReplayFormat::SmiCsv) => Format::SmiCsv,
        Some(ReplayFormat::Jsonl) => Format::Jsonl,
        None => Format::guess(&mut input).with_context(|| format!("cannot read {origin}"))?,
    };
    let mut reader: Box<dyn SnapshotReader> = match format {
        Format::Jsonl => Box::new(JsonlReader::new(input)),
        Format::SmiCsv => Box::new(SmiCsvReader::reading_ahead(
            input,
            SmiCsvOptions {
                fields: args.fields.clone(),
                timezone,
            },
        )),
    };
    let mut warnings = Warnings::to_stderr(origin.clone());
    let mut engine = Engine::new(engine_config);
    let mut rules = ReplayAlerting::from_config(&config)?;
    let report = crate::replay::replay(reader.as_mut(), &mut engine, &mut rules, &mut warnings)
        .with_context(|| format!("replay of {origin}"))?;
    warnings.finish();
    if report.samples == 0 {
        super::output::note(&format!(
            "warning: {origin}: no GPU samples in the recording"
        ));
    }
    if let Some(path) = &args.save_state {
        crate::engine::store::save(path, &engine.state)
            .with_context(|| format!("cannot write the engine state to {}", path.display()))?;
    }
    if args.json {
        super::output::print(&format!("{}\n", serde_json::to_string_pretty(&report)?))
    } else {
        super::output::print(&report.to_text())
    }
}
