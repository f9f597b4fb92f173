//! The Prometheus exposition: each collection's [`Snapshot`] and [`CollectHealth`] rendered
//! once, in text format 0.0.4, and gzip-compressed once, so that a scrape only copies bytes.
//!
//! [`render`] is called by the collection loop once per tick and returns an [`Exposition`];
//! the HTTP server publishes it (swapped atomically) and serves `text` or `gzip` as the
//! client asks. Nothing here reads a clock or touches NVML: time comes from the snapshot,
//! so the same snapshots always give the same bytes (the golden tests rely on it).
//!
//! - [`metric_def`]: what a family is (name, type, labels, help).
//! - [`metrics`]: the catalogue of native families.
//! - [`reference`]: the metrics reference `docs/metrics.md`, from the catalogue and the
//!   dcgm-exporter fields.
//! - [`families`]: the families under construction and their text encoding.
//! - `render`: the native families; [`dcgm`]: dcgm-exporter's names, units and labels,
//!   rendered by `dcgm_render` (per GPU instance on a GPU in MIG mode).
//! - [`state`]: what is carried across ticks (XID counters, last XID per GPU, stage times).
//! - `analysis`: the engine's findings, the alerts and the delivery and advice counters,
//!   rendered after the native families when [`RenderInput`] carries them.
//! - [`mig`]: the `gpu_mig_*` families, one series per MIG instance of a GPU in MIG mode.

mod analysis;
pub mod budget;
pub mod dcgm;
mod dcgm_render;
pub mod families;
pub(crate) mod metric_def;
pub mod metrics;
pub mod mig;
pub mod reference;
mod render;
pub mod state;

use std::io::Write as _;

use bytes::Bytes;
use flate2::Compression;
use flate2::write::GzEncoder;

pub(crate) use dcgm::HostnameLabel;
pub use families::{Families, Family};
pub use reference::reference_markdown;
pub use state::ExportState;

use crate::config::ExportConfig;
use std::collections::BTreeMap;

use crate::advice::AdviceStats;
use crate::alert::AlertState;
use crate::alert::deliver::DeliveryStats;
use crate::engine::Findings;
use crate::model::CollectHealth;
use crate::model::Snapshot;

/// One rendered exposition: the text and its gzip form, both immutable and cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Exposition {
    /// Prometheus text format 0.0.4 (`text/plain; version=0.0.4; charset=utf-8`).
    pub text: Bytes,
    /// `text`, gzip-compressed, for clients that send `Accept-Encoding: gzip`.
    pub gzip: Bytes,
}

/// `notAfter` of the TLS certificate the server presents, in Unix seconds; `i64::MIN`
/// without TLS. The server sets it (at start and when the certificate is reloaded) and
/// each collection renders it as `gpu_sentinel_tls_cert_expiry_timestamp_seconds`. One per
/// process: the agent has one listener and one web configuration.
static TLS_CERT_NOT_AFTER: std::sync::atomic::AtomicI64 =
    std::sync::atomic::AtomicI64::new(i64::MIN);

/// Sets what `gpu_sentinel_tls_cert_expiry_timestamp_seconds` shows (None: no series).
pub(crate) fn set_tls_cert_not_after(at: Option<i64>) {
    TLS_CERT_NOT_AFTER.store(at.unwrap_or(i64::MIN), std::sync::atomic::Ordering::Relaxed);
}

/// The served certificate's `notAfter`, None without TLS.
pub(crate) fn tls_cert_not_after() -> Option<i64> {
    match TLS_CERT_NOT_AFTER.load(std::sync::atomic::Ordering::Relaxed) {
        i64::MIN => None,
        at => Some(at),
    }
}

/// Content type of [`Exposition::text`].
pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What shapes an exposition besides the data.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderOptions {
    /// Also render dcgm-exporter's `DCGM_FI_*` families.
    pub dcgm_compat: bool,
    /// Spelling of dcgm-exporter's hostname label.
    pub dcgm_hostname_label: HostnameLabel,
    /// Most `gpu_process_*` series per family; the largest memory holders are kept.
    pub max_process_series: usize,
    /// Longest label value, in characters (never below [`families::MIN_LABEL_LENGTH`]).
    pub max_label_length: usize,
    /// NVLink errors per link (`link` label) rather than summed per GPU.
    pub nvlink_per_link: bool,
    /// Value of the `hostname` labels; empty means the snapshot's host name.
    pub hostname: String,
    /// `gpu_sentinel_build_info` labels.
    pub version: String,
    pub revision: String,
    /// Currency of `gpu_cost_total`, named in its help.
    pub currency: String,
}

impl Default for RenderOptions {
    fn default() -> Self {
        RenderOptions::new(&ExportConfig::default(), String::new())
    }
}

impl RenderOptions {
    /// Options from `[export]`, with the hostname already resolved (config value, or the
    /// host's name when that is empty) and this build's version and source revision.
    pub fn new(config: &ExportConfig, resolved_hostname: String) -> RenderOptions {
        RenderOptions {
            dcgm_compat: config.dcgm_compat,
            dcgm_hostname_label: if config.dcgm_hostname_label == "hostname" {
                HostnameLabel::Lowercase
            } else {
                HostnameLabel::Capitalised
            },
            max_process_series: config.max_process_series,
            max_label_length: config.max_label_length,
            nvlink_per_link: config.nvlink_per_link,
            hostname: resolved_hostname,
            version: env!("CARGO_PKG_VERSION").to_string(),
            revision: env!("GPU_SENTINEL_REVISION").to_string(),
            currency: "USD".to_string(),
        }
    }

    /// Options from a configuration: `[export]`, resolving an empty `hostname` to this
    /// host's name, and `[cost] currency`.
    pub fn from_config(config: &crate::config::Config) -> RenderOptions {
        let export = &config.export;
        let hostname = if export.hostname.is_empty() {
            crate::host::hostname()
        } else {
            export.hostname.clone()
        };
        RenderOptions {
            currency: config.cost.currency.clone(),
            ..RenderOptions::new(export, hostname)
        }
    }
}

/// What one exposition is rendered from.
#[derive(Debug, Clone, Copy)]
pub struct RenderInput<'a> {
    pub snapshot: &'a Snapshot,
    pub health: &'a CollectHealth,
    /// The engine's findings on the snapshot, when the engine ran.
    pub findings: Option<&'a Findings>,
    /// Alerts per (alertname, state), when alerting ran.
    pub alerts: Option<&'a BTreeMap<(String, AlertState), usize>>,
    /// Notification delivery counters, when receivers are configured.
    pub delivery: Option<&'a DeliveryStats>,
    /// LLM advice counters, when advice is on.
    pub advice: Option<&'a AdviceStats>,
}

impl<'a> RenderInput<'a> {
    /// Input with data and health only.
    pub fn new(snapshot: &'a Snapshot, health: &'a CollectHealth) -> RenderInput<'a> {
        RenderInput {
            snapshot,
            health,
            findings: None,
            alerts: None,
            delivery: None,
            advice: None,
        }
    }
}

/// Renders one collection. Call once per snapshot: the snapshot's XID events are added to
/// the counters in `state`.
pub fn render(
    input: &RenderInput<'_>,
    state: &mut ExportState,
    options: &RenderOptions,
) -> Exposition {
    Exposition::from_families(&families(input, state, options))
}

/// The families of one collection, before encoding, for callers that append their own.
/// Adds the snapshot's XID events to `state`, like [`render`].
pub fn families(
    input: &RenderInput<'_>,
    state: &mut ExportState,
    options: &RenderOptions,
) -> Families {
    let snapshot = input.snapshot;
    state.absorb_events(snapshot);
    let mut families = Families::new(options.max_label_length);
    render::render_native(&mut families, snapshot, input.health, state, options);
    mig::render_native(&mut families, snapshot);
    if let Some(findings) = input.findings {
        analysis::render_analysis(&mut families, findings, options);
        mig::render_analysis(&mut families, findings, &options.currency);
    }
    if let Some(alerts) = input.alerts {
        analysis::render_alerts(&mut families, alerts);
    }
    if let Some(delivery) = input.delivery {
        analysis::render_delivery(&mut families, delivery);
    }
    if let Some(advice) = input.advice {
        analysis::render_advice(&mut families, advice);
    }
    if options.dcgm_compat {
        let hostname = if options.hostname.is_empty() {
            &snapshot.host.hostname
        } else {
            &options.hostname
        };
        dcgm_render::render_dcgm(
            &mut families,
            snapshot,
            state,
            hostname,
            options.dcgm_hostname_label,
        );
    }
    families
}

impl Exposition {
    /// Encodes the families and compresses the text once.
    pub(crate) fn from_families(families: &Families) -> Exposition {
        let text = families.encode();
        let gzip = gzip(text.as_bytes());
        Exposition {
            text: Bytes::from(text),
            gzip: Bytes::from(gzip),
        }
    }
}

/// gzip of `data`. Writing into a `Vec` cannot fail, so an error here is a bug in flate2;
/// it yields an empty body, which the server treats as "serve the text instead".
fn gzip(data: &[u8]) -> Vec<u8> {
    let mut encoder = GzEncoder::new(Vec::with_capacity(data.len() / 6), Compression::fast());
    match encoder.write_all(data).and_then(|()| encoder.finish()) {
        Ok(compressed) => compressed,
        Err(error) => {
            tracing::error!(%error, "gzip of the exposition failed");
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests;
