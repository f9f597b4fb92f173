//! The per-host agent: sources ([`source`]) produce one `model::Snapshot` per tick; the
//! [`engine`] turns it into findings and health verdicts; [`alert`] delivers; the [`agent`]
//! loop renders it once for Prometheus ([`export`]), the API ([`api`]) and the live page
//! ([`board`]) and publishes it; the [`server`] serves what was rendered last. The
//! simulator (`source::simulate`) and the scenario library ([`scenario`]) are here too: the
//! agent runs on a simulated fleet (`run --simulate`), and the engine's own tests read
//! both. docs/architecture.md draws the crates and the layers inside them.

// The ground this crate stands on, under the names its modules use (`crate::model`, …).
use gpu_sentinel_core::{
    config, host, html, model, redact, retry_after, state_file, sync, text, xid,
};

pub mod advice;
pub mod agent;
pub mod alert;
pub mod api;
pub mod board;
pub mod engine;
pub mod export;
pub mod procinfo;
pub mod scenario;
pub mod server;
pub mod source;
pub mod webconfig;
