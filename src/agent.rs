//! The collection loop: read the source, render once, publish atomically.
//!
//! Collection runs on its own OS thread at a fixed cadence, never on the async runtime and
//! never because of a scrape: a slow or hung NVML call delays fresh data, not an answer.
//! After each collection everything the HTTP server answers with (`/metrics` text and its
//! gzip, `/api/v1/gpus` JSON) is rendered once and swapped in behind an atomic pointer, so
//! a scrape is a reference-count increment and a copy of bytes already made.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use bytes::Bytes;
use serde::Serialize;

use crate::export::{ExportState, Exposition, RenderOptions};
use crate::model::{GpuSample, ProcessSample, Snapshot, XidEvent};
use crate::source::{CollectHealth, Source};

/// Everything served about one collection, rendered once.
#[derive(Debug)]
pub struct Published {
    pub snapshot: Snapshot,
    pub health: CollectHealth,
    pub metrics: Exposition,
    /// `/api/v1/gpus` body.
    pub gpus_json: Bytes,
    /// Monotonic time of publication, for the age shown by `/healthz`.
    pub published: Instant,
}

/// The latest publication; empty until the first collection completes.
#[derive(Debug, Default)]
pub struct Latest(ArcSwapOption<Published>);

impl Latest {
    pub fn get(&self) -> Option<Arc<Published>> {
        self.0.load_full()
    }

    fn set(&self, published: Published) {
        self.0.store(Some(Arc::new(published)));
    }
}

/// Reads the source and publishes what it saw.
pub struct Collector {
    source: Box<dyn Source>,
    export_state: ExportState,
    options: RenderOptions,
    latest: Arc<Latest>,
}

impl Collector {
    pub fn new(source: Box<dyn Source>, options: RenderOptions, latest: Arc<Latest>) -> Collector {
        Collector {
            source,
            export_state: ExportState::default(),
            options,
            latest,
        }
    }

    pub fn describe(&self) -> String {
        self.source.describe()
    }

    /// One collection, rendered and published.
    pub fn tick(&mut self) {
        let collection = self.source.collect();
        let render_began = Instant::now();
        let health = collection.health;
        let snapshot = collection.snapshot;
        let metrics =
            crate::export::render(&snapshot, &health, &mut self.export_state, &self.options);
        let gpus_json = gpus_document(&snapshot);
        // Reported in the next exposition: rendering never reads a clock itself.
        self.export_state
            .set_last_render_seconds(render_began.elapsed().as_secs_f64());
        tracing::debug!(
            gpus = snapshot.gpus.len(),
            collect_s = health.seconds,
            render_s = render_began.elapsed().as_secs_f64(),
            bytes = metrics.text.len(),
            "published a collection"
        );
        self.latest.set(Published {
            snapshot,
            health,
            metrics,
            gpus_json,
            published: Instant::now(),
        });
    }

    /// Runs [`Collector::tick`] every `interval` on a dedicated thread until `stop` fires
    /// (a message, or its sender dropped). Ticks keep a fixed cadence; a collection that
    /// overruns the interval is followed immediately by the next, never by a burst.
    pub fn spawn(
        mut self,
        interval: Duration,
        stop: Receiver<()>,
    ) -> std::io::Result<JoinHandle<()>> {
        std::thread::Builder::new()
            .name("collector".into())
            .spawn(move || {
                let mut next = Instant::now();
                loop {
                    self.tick();
                    next += interval;
                    let now = Instant::now();
                    if next < now {
                        next = now;
                    }
                    match stop.recv_timeout(next - now) {
                        Err(RecvTimeoutError::Timeout) => continue,
                        Ok(()) | Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
            })
    }
}

/// One GPU as `/api/v1/gpus` shows it.
#[derive(Serialize)]
struct GpuView<'a> {
    #[serde(flatten)]
    sample: &'a GpuSample,
    processes: Vec<&'a ProcessSample>,
    xids: Vec<&'a XidEvent>,
}

#[derive(Serialize)]
struct GpusDocument<'a> {
    at: chrono::DateTime<chrono::Utc>,
    hostname: &'a str,
    gpus: Vec<GpuView<'a>>,
}

fn gpus_document(snapshot: &Snapshot) -> Bytes {
    let doc = GpusDocument {
        at: snapshot.at,
        hostname: &snapshot.host.hostname,
        gpus: snapshot
            .gpus
            .iter()
            .map(|g| GpuView {
                sample: g,
                processes: snapshot
                    .processes
                    .iter()
                    .filter(|p| p.gpu == g.index)
                    .collect(),
                xids: snapshot
                    .events
                    .iter()
                    .filter(|e| e.gpu == Some(g.index))
                    .collect(),
            })
            .collect(),
    };
    match serde_json::to_vec_pretty(&doc) {
        Ok(body) => Bytes::from(body),
        // Serialising plain data cannot fail; an empty document beats a dead collector.
        Err(e) => Bytes::from(format!("{{\"error\":\"{e}\"}}")),
    }
}
