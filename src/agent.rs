//! The collection loop: read the source, render once, publish atomically.
//!
//! Collection runs on its own OS thread at a fixed cadence, never on the async runtime and
//! never because of a scrape: a slow or hung NVML call delays fresh data, not an answer.
//! After each collection everything the HTTP server answers with (`/metrics` text and its
//! gzip, `/api/v1/gpus` JSON) is rendered once and swapped in behind an atomic pointer, so
//! a scrape is a reference-count increment and a copy of bytes already made. The engine's
//! state is saved every `[state] save_interval` by a thread of its own ([`saver`]).

mod saver;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use std::borrow::Cow;

use arc_swap::ArcSwapOption;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::alert::Alert;
use crate::alert::alerting::Alerting;
use crate::alert::outgoing::Outgoing;
use crate::engine::capacity::{Advice, Placement};
use crate::engine::cost::CostView;
use crate::engine::idle::IdleFindings;
use crate::engine::risk::Assessment;
use crate::engine::{Engine, Findings, store};
use crate::export::{ExportState, Exposition, RenderInput, RenderOptions};
use crate::model::{GpuSample, ProcessSample, Snapshot, XidEvent};
use crate::source::Source;

pub use saver::EngineSaver;

/// Where the agent's state survives a restart, and how often the engine's part is saved.
#[derive(Debug, Clone)]
pub struct Persistence {
    /// `[state] dir`.
    pub dir: PathBuf,
    /// `[state] save_interval`: the most history a `kill -9` can lose.
    pub save_every: Duration,
}

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

/// Reads the source, analyses what it saw, and publishes both.
pub struct Collector {
    source: Box<dyn Source>,
    engine: Engine,
    alerting: Alerting,
    outgoing: Outgoing,
    /// Writes the engine's state; None for simulated runs.
    saver: Option<EngineSaver>,
    save_every: Duration,
    last_save: Instant,
    export_state: ExportState,
    options: RenderOptions,
    latest: Arc<Latest>,
}

impl Collector {
    /// A collector whose engine and alerting resume from, and save to, `persistence` when
    /// given.
    pub fn new(
        source: Box<dyn Source>,
        mut engine: Engine,
        mut alerting: Alerting,
        outgoing: Outgoing,
        persistence: Option<Persistence>,
        options: RenderOptions,
        latest: Arc<Latest>,
    ) -> Collector {
        let mut saver = None;
        let mut save_every = Duration::MAX;
        if let Some(persistence) = &persistence {
            let path = store::path_in(&persistence.dir);
            engine = Engine::with_state(engine.config, store::load(&path));
            tracing::info!(
                "engine state at {}: {} GPUs remembered",
                path.display(),
                engine.state.gpus.len()
            );
            saver = Some(EngineSaver::start(path));
            save_every = persistence.save_every;
            alerting.persist_at(persistence.dir.join(crate::alert::alerting::FILE_NAME));
        }
        Collector {
            source,
            engine,
            alerting,
            outgoing,
            saver,
            save_every,
            last_save: Instant::now(),
            export_state: ExportState::default(),
            options,
            latest,
        }
    }

    /// Hands a copy of the engine's state to the saver when the cadence has come. A saver
    /// still busy with the previous copy is asked again at the next collection.
    fn save_when_due(&mut self) {
        if self.last_save.elapsed() < self.save_every {
            return;
        }
        if let Some(saver) = &mut self.saver {
            if saver.submit(self.engine.state.clone()) {
                self.last_save = Instant::now();
            }
        }
    }

    /// Saves the engine's state one last time and waits until it is written (shutdown).
    fn finish_saving(&mut self) {
        if let Some(saver) = self.saver.take() {
            saver.finish(std::mem::take(&mut self.engine.state));
        }
    }

    /// Failed saves per state file, for `gpu_sentinel_state_save_errors_total`.
    fn note_save_failures(&mut self) {
        if let Some(saver) = &self.saver {
            self.export_state
                .set_state_save_errors(store::FILE_NAME, saver.failures());
        }
        if let Some(failures) = self.alerting.save_failures() {
            self.export_state
                .set_state_save_errors(crate::alert::alerting::FILE_NAME, failures);
        }
    }

    pub fn describe(&self) -> String {
        self.source.describe()
    }

    /// One collection, rendered and published.
    pub fn tick(&mut self) {
        let collection = self.source.collect();
        let analyse_began = Instant::now();
        let health = collection.health;
        let mut snapshot = collection.snapshot;
        // Values no GPU can have are cleared before the engine or the exposition reads them.
        let rejected = snapshot.sanitize();
        for field in self.export_state.count_rejected(&rejected) {
            tracing::warn!(
                "{field}: the source reported a value no GPU can have; cleared \
                 (counted in gpu_sentinel_values_rejected_total, not logged again)"
            );
        }
        let findings = self.engine.step(&snapshot);
        let notifications = self.alerting.step(&findings, Some(&health));
        self.outgoing.step(notifications, &findings);
        let render_began = Instant::now();
        let alert_counts = self.alerting.counts();
        let delivery = self.outgoing.delivery_stats();
        let advice = self.outgoing.advice_stats();
        self.note_save_failures();
        let metrics = crate::export::render(
            &RenderInput {
                snapshot: &snapshot,
                health: &health,
                findings: Some(&findings),
                alerts: Some(&alert_counts),
                delivery: delivery.as_ref(),
                advice: advice.as_ref(),
            },
            &mut self.export_state,
            &self.options,
        );
        let alerts_json = to_json(&AlertsDocument {
            at: findings.at,
            alerts: self.alerting.book().alerts.values().collect(),
        });
        let threshold = self.engine.config.risk_threshold;
        let gpus_json = gpus_document(&snapshot, &findings, threshold);
        let recommendations_json = to_json(&Recommendations::new(&findings, None));
        // Reported in the next exposition: rendering never reads a clock itself.
        let analysed = render_began.duration_since(analyse_began).as_secs_f64();
        self.export_state.set_stage_seconds("analyse", analysed);
        self.export_state
            .set_stage_seconds("render", render_began.elapsed().as_secs_f64());
        tracing::debug!(
            gpus = snapshot.gpus.len(),
            collect_s = health.seconds,
            render_s = render_began.elapsed().as_secs_f64(),
            bytes = metrics.text.len(),
            "published a collection"
        );
        self.latest.set(Published {
            findings,
            metrics,
            alerts_json,
            gpus_json,
            recommendations_json,
            published: Instant::now(),
        });
        self.save_when_due();
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
                    if Instant::now() >= next {
                        self.tick();
                        next += interval;
                    }
                    let now = Instant::now();
                    if next < now {
                        next = now;
                    }
                    // Notifications held for advice are released on their own deadline,
                    // not at the next collection.
                    let wake = self.outgoing.next_deadline().map_or(next, |d| d.min(next));
                    match stop.recv_timeout(wake.saturating_duration_since(now)) {
                        Err(RecvTimeoutError::Timeout) => {
                            if Instant::now() < next {
                                self.outgoing.poll();
                            }
                        }
                        Ok(()) | Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
                self.finish_saving();
                self.outgoing.shutdown();
            })
    }
}

/// One GPU as `/api/v1/gpus` shows it: its sample, processes and XIDs, and what the
/// engine found.
#[derive(Serialize)]
struct GpuView<'a> {
    #[serde(flatten)]
    sample: Cow<'a, GpuSample>,
    processes: Vec<&'a ProcessSample>,
    xids: Vec<&'a XidEvent>,
    lost: bool,
    risk: &'a Assessment,
    findings: Vec<&'static str>,
    hardware_xids_24h: &'a [u32],
    idle: &'a IdleFindings,
    cost: &'a CostView,
}

#[derive(Serialize)]
struct GpusDocument<'a> {
    at: DateTime<Utc>,
    hostname: &'a str,
    risk_threshold: f64,
    gpus: Vec<GpuView<'a>>,
}

/// `/api/v1/gpus`: every GPU the engine knows, those missing from the snapshot included.
fn gpus_document(snapshot: &Snapshot, findings: &Findings, threshold: f64) -> Bytes {
    let gpus = findings
        .gpus
        .iter()
        .map(|f| {
            let sample = match snapshot.gpu_by_uuid(&f.uuid) {
                Some(sample) => Cow::Borrowed(sample),
                None => Cow::Owned(GpuSample {
                    index: f.index,
                    uuid: f.uuid.clone(),
                    name: f.name.clone(),
                    up: false,
                    ..GpuSample::default()
                }),
            };
            let processes = snapshot
                .processes
                .iter()
                .filter(|p| p.is_on(&sample))
                .collect();
            let xids = snapshot
                .events
                .iter()
                .filter(|e| e.is_on(&sample))
                .collect();
            GpuView {
                sample,
                processes,
                xids,
                lost: f.lost,
                risk: &f.risk,
                findings: f.kinds(threshold),
                hardware_xids_24h: &f.hardware_xids_24h,
                idle: &f.idle,
                cost: &f.cost,
            }
        })
        .collect();
    to_json(&GpusDocument {
        at: snapshot.at,
        hostname: &snapshot.host.hostname,
        risk_threshold: threshold,
        gpus,
    })
}

/// `/api/v1/alerts`: pending and firing alerts, and resolved ones still kept.
#[derive(Serialize)]
struct AlertsDocument<'a> {
    at: DateTime<Utc>,
    alerts: Vec<&'a Alert>,
}

/// `/api/v1/recommendations`: scaling advice, placement, and whether a job fits now.
#[derive(Serialize)]
pub struct Recommendations<'a> {
    pub at: DateTime<Utc>,
    pub scaling: &'a Advice,
    pub placement: &'a Placement,
    /// The job asked about (`?gpus=N&memory_gib=M&exclusive=true`) and the GPUs it would get.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<JobFit>,
}

/// Whether a job of `gpus` GPUs needing `memory_bytes` each can start now.
#[derive(Debug, Clone, Serialize)]
pub struct JobFit {
    pub gpus: usize,
    pub memory_bytes: u64,
    pub exclusive: bool,
    pub fits: bool,
    /// The GPUs best fit would use.
    pub placement: Vec<u32>,
}

impl<'a> Recommendations<'a> {
    pub fn new(findings: &'a Findings, job: Option<(usize, u64, bool)>) -> Recommendations<'a> {
        Recommendations {
            at: findings.at,
            scaling: &findings.capacity,
            placement: &findings.placement,
            job: job.map(|(gpus, memory_bytes, exclusive)| {
                let chosen = findings.placement.fit(gpus, memory_bytes, exclusive);
                JobFit {
                    gpus,
                    memory_bytes,
                    exclusive,
                    fits: chosen.is_some(),
                    placement: chosen.unwrap_or_default(),
                }
            }),
        }
    }
}

/// Pretty JSON of plain data (serialising it cannot fail; an error body beats a dead
/// collector should that ever change).
pub fn to_json<T: Serialize>(value: &T) -> Bytes {
    match serde_json::to_vec_pretty(value) {
        Ok(body) => Bytes::from(body),
        Err(e) => Bytes::from(format!("{{\"error\":\"{e}\"}}")),
    }
}
