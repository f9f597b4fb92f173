//! The fleet view: gpu-sentinel as a client of the store the fleet already runs
//! (Prometheus, or Thanos, Mimir, VictoriaMetrics: one HTTP query API), never a second
//! time-series store.
//!
//! - [`history`]: the stored history rebuilt as snapshots, host by host, in either metric
//!   dialect, for `replay --prometheus`.
//! - [`prom`]: the query API client (bounded, retried on 5xx, errors naming URL and query,
//!   refusals for size told apart).
//! - [`plan`]: every query cut into pieces the store's limits allow (windows of time, groups
//!   of hosts), pieces the store still refuses split again, the answers merged.
//! - [`report`]: the weekly report's figures per team, and (with `figures`) for the fleet, aggregated in
//!   PromQL; [`hourly`]: each GPU's hourly utilization and power, read once, and the fleet
//!   figures combined from them; [`render`]: the report as Markdown and as one
//!   self-contained HTML file; [`report_health`]: the health verdicts of the risk table's
//!   GPUs at the period's end; [`report_mig`]: MIG instances counted at their share of
//!   the GPU.
//!
//! docs/fleet.md documents the report's JSON and the queries behind each figure.

// The layers below, under the names this crate's modules use (`crate::engine`, …).
use gpu_sentinel_agent::{alert, engine};
use gpu_sentinel_core::{config, html, model, redact};

pub mod dialect;
mod figures;
pub mod history;
pub mod hourly;
pub mod plan;
pub mod prom;
pub mod reading;
pub mod recorded;
pub mod render;
pub mod report;
pub mod report_health;
pub mod report_mig;
pub mod review;
pub mod send;
mod spec;
