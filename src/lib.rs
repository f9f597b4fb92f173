//! gpu-sentinel: a per-host NVIDIA GPU agent, and the fleet view over the store the fleet
//! already runs.
//!
//! This crate is the command line ([`cli`]) over the workspace's layers, each its own
//! crate: `gpu-sentinel-core` (model, configuration, XID catalog, utilities),
//! `gpu-sentinel-agent` (sources, engine, alerting, exposition, API, board, server, the
//! loop), `gpu-sentinel-lab` (replay, backfill, training) and `gpu-sentinel-fleet` (the
//! report and the store client). Their modules are re-exported under the names the
//! command line and the integration tests use (`gpu_sentinel::engine`, …).
//! docs/architecture.md draws the crates and the layers inside them.

pub use gpu_sentinel_agent::{
    advice, agent, alert, api, board, engine, export, procinfo, scenario, server, source, webconfig,
};
pub use gpu_sentinel_core::{
    config, host, html, model, redact, retry_after, state_file, sync, xid,
};
pub use gpu_sentinel_fleet as fleet;
#[cfg(feature = "train")]
pub use gpu_sentinel_lab::train;
pub use gpu_sentinel_lab::{backfill, replay};

pub mod cli;
