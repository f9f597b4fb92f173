//! What one collection publishes, rendered once, and the pointer the server reads it from.
//!
//! After each collection the agent renders everything the HTTP server answers with — the
//! `/metrics` text and its gzip (by `export`), the three `/api/v1` documents (here) — and
//! swaps it in behind an atomic pointer ([`Latest`]), so a scrape is a reference-count
//! increment and a copy of bytes already made, never a lock or a computation.

use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwapOption;
use bytes::Bytes;

use super::documents::{AlertsDocument, GpusDocument, Recommendations};
use super::to_json;
use crate::alert::Alert;
use crate::engine::Findings;
use crate::export::Exposition;
use crate::model::Snapshot;

/// Everything served about one collection, rendered once.
#[derive(Debug)]
pub struct Published {
    /// Kept for `/api/v1/recommendations?gpus=…`, which fits jobs on the placement.
    pub findings: Findings,
    pub metrics: Exposition,
    /// `/api/v1/alerts` body.
    pub alerts_json: Bytes,
    /// `/api/v1/gpus` body.
    pub gpus_json: Bytes,
    /// `/api/v1/recommendations` body (without a job to fit).
    pub recommendations_json: Bytes,
    /// Monotonic time of publication, for the age shown by `/healthz`.
    pub published: Instant,
}

impl Published {
    /// The publication of one collection: its exposition, already rendered, and the three
    /// documents rendered here from the snapshot, the engine's findings (`risk_threshold`
    /// decides the `failure_risk` finding) and the alerts.
    pub fn render<'a>(
        snapshot: &Snapshot,
        findings: Findings,
        alerts: impl IntoIterator<Item = &'a Alert>,
        risk_threshold: f64,
        metrics: Exposition,
    ) -> Published {
        let alerts_json = to_json(&AlertsDocument::new(findings.at, alerts));
        let gpus_json = to_json(&GpusDocument::new(snapshot, &findings, risk_threshold));
        let recommendations_json = to_json(&Recommendations::new(&findings, None));
        Published {
            findings,
            metrics,
            alerts_json,
            gpus_json,
            recommendations_json,
            published: Instant::now(),
        }
    }
}

/// The latest publication; empty until the first collection completes.
#[derive(Debug, Default)]
pub struct Latest(ArcSwapOption<Published>);

impl Latest {
    pub fn get(&self) -> Option<Arc<Published>> {
        self.0.load_full()
    }

    /// Replaces the publication; readers holding the previous one keep it until they drop it.
    pub fn publish(&self, published: Published) {
        self.0.store(Some(Arc::new(published)));
    }
}
