//! What one collection publishes, rendered once, and the pointer the server reads it from.
//!
//! After each collection the agent renders everything the HTTP server answers with — the
//! `/metrics` text and its gzip (by `export`), the three `/api/v1` documents (here) and the
//! board at `/` (by the renderer the agent hands in, which reads those same documents) —
//! and swaps it in behind an atomic pointer ([`Latest`]), so a scrape or a page load is a
//! reference-count increment and a copy of bytes already made, never a lock or a
//! computation.

use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwapOption;
use bytes::Bytes;

use super::documents::{AlertsDocument, GpusDocument, HealthDocument, Recommendations};
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
    pub(crate) alerts_json: Bytes,
    /// `/api/v1/gpus` body.
    pub(crate) gpus_json: Bytes,
    /// `/api/v1/recommendations` body (without a job to fit).
    pub(crate) recommendations_json: Bytes,
    /// `/api/v1/health` body.
    pub(crate) health_json: Bytes,
    /// The board at `/` (HTML), rendered from the same documents as the three above.
    pub board: Bytes,
    /// Monotonic time of publication, for the age shown by `/healthz`.
    pub published: Instant,
}

/// The `/api/v1` documents of one collection, as the board renderer reads them.
#[derive(Debug, Clone, PartialEq)]
pub struct Documents<'a> {
    pub gpus: GpusDocument<'a>,
    pub alerts: AlertsDocument<'a>,
    pub recommendations: Recommendations<'a>,
    pub health: HealthDocument<'a>,
}

impl<'a> Documents<'a> {
    /// The documents of `snapshot`, the engine's `findings` (`risk_threshold` decides the
    /// `failure_risk` finding) and the alerts, borrowing all of them.
    pub fn new(
        snapshot: &'a Snapshot,
        findings: &'a Findings,
        alerts: impl IntoIterator<Item = &'a Alert>,
        risk_threshold: f64,
    ) -> Documents<'a> {
        Documents {
            gpus: GpusDocument::new(snapshot, findings, risk_threshold),
            alerts: AlertsDocument::new(findings.at, alerts),
            recommendations: Recommendations::new(findings, None),
            health: HealthDocument::new(snapshot, findings),
        }
    }
}

impl Published {
    /// The publication of one collection: its exposition, already rendered, the three
    /// documents rendered here from the snapshot, the engine's findings (`risk_threshold`
    /// decides the `failure_risk` finding) and the alerts, and the board `page` renders
    /// from those very documents (the renderer lives above this module).
    pub fn render<'a>(
        snapshot: &Snapshot,
        findings: Findings,
        alerts: impl IntoIterator<Item = &'a Alert>,
        risk_threshold: f64,
        metrics: Exposition,
        page: impl FnOnce(&Documents<'_>) -> Bytes,
    ) -> Published {
        let alerts: Vec<&Alert> = alerts.into_iter().collect();
        let (alerts_json, gpus_json, recommendations_json, health_json, board) = {
            // The slice's borrow is shortened to the documents' (a `&[&'a Alert]` is a
            // `&[&'short Alert]`), so the findings can move into the publication after.
            let alerts: &[&Alert] = &alerts;
            let documents =
                Documents::new(snapshot, &findings, alerts.iter().copied(), risk_threshold);
            (
                to_json(&documents.alerts),
                to_json(&documents.gpus),
                to_json(&documents.recommendations),
                to_json(&documents.health),
                page(&documents),
            )
        };
        Published {
            findings,
            metrics,
            alerts_json,
            gpus_json,
            recommendations_json,
            health_json,
            board,
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
