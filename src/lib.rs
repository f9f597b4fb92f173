//! gpu-sentinel: a per-host NVIDIA GPU agent.
//!
//! Sources ([`source`]) produce one [`model::Snapshot`] per tick; the [`agent`] renders it
//! once for Prometheus ([`export`]), the API ([`api`]) and the live page ([`board`]) and
//! publishes it; the [`server`] serves what was rendered last. docs/architecture.md draws the whole picture: layers, data flow, contracts.

pub mod advice;
pub mod agent;
pub mod alert;
pub mod api;
pub mod board;
pub mod cli;
pub mod config;
pub mod engine;
pub mod export;
pub mod fleet;
pub mod host;
pub mod html;
pub mod model;
pub mod procinfo;
pub mod redact;
pub mod replay;
pub mod retry_after;
pub mod scenario;
pub mod server;
pub mod source;
pub mod state_file;
pub mod sync;
// The risk model's trainer (`gpu-sentinel train`): built with `--features train`, so the
// agent's own binary does not link its numeric crates.
#[cfg(feature = "train")]
pub mod train;
pub mod webconfig;
pub mod xid;
