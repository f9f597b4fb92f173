//! The collection loop: the agent sequences the stages of each collection, each of which
//! lives in its own module, on a thread of its own at a fixed cadence.
//!
//! One tick: the source collects ([`crate::source`]); values no GPU can have are cleared
//! ([`crate::model`]); the engine analyses ([`crate::engine`]); alerting evaluates its rules
//! and the outgoing stage delivers what is due ([`crate::alert`]); the exposition is rendered
//! ([`crate::export`]) and, with the `/api/v1` documents ([`crate::api`]), published behind
//! an atomic pointer for the HTTP server; and the state is saved when due ([`persistence`]).
//!
//! Collection never runs on the async runtime and never because of a scrape: a slow or hung
//! NVML call delays fresh data, not an answer.

mod persistence;
mod saver;
mod state_lock;

use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::alert::alerting::Alerting;
use crate::alert::outgoing::Outgoing;
use crate::api::{Latest, Published};
use crate::board::{Board, BoardOptions, Today};
use crate::config::TeamConfig;
use crate::engine::Engine;
use crate::export::{ExportState, Exposition, RenderInput, RenderOptions};
use crate::model::Snapshot;
use crate::source::Source;

pub use persistence::Persistence;
use persistence::StateKeeper;
pub use state_lock::{LOCK_FILE, StateLock};

/// Reads the source, and runs each collection through analysis, alerting, delivery,
/// publication and persistence.
pub struct Collector {
    source: Box<dyn Source>,
    engine: Engine,
    alerting: Alerting,
    outgoing: Outgoing,
    keeper: StateKeeper,
    /// What the exposition carries across collections (counters, stage times).
    export_state: ExportState,
    options: RenderOptions,
    latest: Arc<Latest>,
    /// `[[teams]]`, matched onto every holder of each snapshot.
    teams: Vec<TeamConfig>,
    board: BoardOptions,
    /// The cost totals at the start of the day, for the board's "today".
    today: Today,
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
        let keeper = StateKeeper::resume(persistence.as_ref(), &mut engine, &mut alerting);
        let board = BoardOptions {
            source: source.describe(),
            version: options.version.clone(),
            currency: engine.config.cost.currency.clone(),
            teams: Vec::new(),
        };
        Collector {
            source,
            engine,
            alerting,
            outgoing,
            keeper,
            export_state: ExportState::default(),
            options,
            latest,
            teams: Vec::new(),
            board,
            today: Today::default(),
        }
    }

    /// Names the team of every process and allocation from `[[teams]]`, on the series
    /// and on the board.
    pub fn with_teams(mut self, teams: Vec<TeamConfig>) -> Collector {
        self.board.teams = teams.clone();
        self.teams = teams;
        self
    }

    pub fn describe(&self) -> String {
        self.source.describe()
    }

    /// One collection, analysed, alerted on, delivered, published and, when due, saved.
    pub fn tick(&mut self) {
        let collection = self.source.collect();
        let analyse_began = Instant::now();
        let health = collection.health;
        let mut snapshot = collection.snapshot;
        self.clear_impossible_values(&mut snapshot);
        crate::source::teams::assign(&mut snapshot, &self.teams);
        let findings = self.engine.step(&snapshot);
        let notifications = self.alerting.step(&findings, Some(&health));
        self.keeper.save_alerts_when_changed(&mut self.alerting);
        self.outgoing.step(notifications, &findings);
        let render_began = Instant::now();
        let metrics = self.render_exposition(RenderInput {
            findings: Some(&findings),
            ..RenderInput::new(&snapshot, &health)
        });
        let strips = crate::board::strips(&self.engine.state, snapshot.at.timestamp());
        let (today, board) = (&mut self.today, &self.board);
        let published = Published::render(
            &snapshot,
            findings,
            self.alerting.book().alerts.values(),
            self.engine.config.risk_threshold,
            metrics,
            |documents| {
                let today = today.update(&documents.gpus, documents.alerts.at);
                crate::board::render(&Board {
                    documents,
                    strips: &strips,
                    today: &today,
                    options: board,
                })
            },
        );
        // Reported in the next exposition: rendering never reads a clock itself.
        let analysed = render_began.duration_since(analyse_began).as_secs_f64();
        self.export_state.set_stage_seconds("analyse", analysed);
        self.export_state
            .set_stage_seconds("render", render_began.elapsed().as_secs_f64());
        tracing::debug!(
            gpus = snapshot.gpus.len(),
            collect_s = health.seconds,
            render_s = render_began.elapsed().as_secs_f64(),
            bytes = published.metrics.text.len(),
            "published a collection"
        );
        self.latest.publish(published);
        self.keeper.save_when_due(&self.engine);
    }

    /// Clears values no GPU can have before the engine or the exposition reads them; each
    /// field is logged the first time and counted always.
    fn clear_impossible_values(&mut self, snapshot: &mut Snapshot) {
        let rejected = snapshot.sanitize();
        for field in self.export_state.count_rejected(&rejected) {
            tracing::warn!(
                "{field}: the source reported a value no GPU can have; cleared \
                 (counted in gpu_sentinel_values_rejected_total, not logged again)"
            );
        }
    }

    /// The exposition of `collection` (its snapshot, health and findings), with alerting's,
    /// delivery's, advice's and the state files' counters added.
    fn render_exposition(&mut self, collection: RenderInput<'_>) -> Exposition {
        let alert_counts = self.alerting.counts();
        let delivery = self.outgoing.delivery_stats();
        let advice = self.outgoing.advice_stats();
        self.keeper.note_failures(&mut self.export_state);
        crate::export::render(
            &RenderInput {
                alerts: Some(&alert_counts),
                delivery: delivery.as_ref(),
                advice: advice.as_ref(),
                ..collection
            },
            &mut self.export_state,
            &self.options,
        )
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
                self.keeper.finish(&mut self.engine, &self.alerting);
                self.outgoing.shutdown();
            })
    }
}
