//! The lab: the engine and the alert rules run over recordings (`replay`: JSONL and
//! nvidia-smi logs), simulated fleet history written for a store to backfill
//! ([`backfill`]), and fitting the risk model ([`train`], only with the cargo feature
//! `train`, so the agent's hosts never link its numeric crates). docs/architecture.md
//! draws the crates and the layers inside them.

use gpu_sentinel_agent::{alert, engine, export, source};
// The scenario library: what training fits on, and what the replay's tests read back.
#[cfg(any(test, feature = "train"))]
use gpu_sentinel_agent::scenario;
use gpu_sentinel_core::{config, model, text};

pub mod backfill;
pub mod replay;
#[cfg(feature = "train")]
pub mod train;
