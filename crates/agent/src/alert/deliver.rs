//! The delivery stage: drains the [`Outbox`] into the receivers' [`Notifier`]s, with
//! retries, backoff, rate limits and counting — the part Alertmanager keeps outside its
//! integrations.
//!
//! **One worker thread per receiver.** A receiver that hangs or is down holds back only its
//! own notifications; each worker sends one notification at a time, so a receiver is never hit
//! by parallel requests. Due entries go oldest first, except that an entry that failed waits
//! for its retry behind entries never tried, so one poisonous message cannot block the rest;
//! a group's newer notification supersedes its older one, so a group is never told an old
//! state after a new one. Every send is bounded by the receiver's timeout inside the notifier
//! (its HTTP client); the worker records when its send started, so a send stuck past that
//! shows in `gpu_sentinel_delivery_in_flight_seconds` rather than silently.
//!
//! **Outcomes.** `Ok` removes the entry (`sent`). [`NotifyError::Retry`] keeps it and backs
//! the whole receiver off — the failure is about the receiver, not the message — by
//! exponential backoff with jitter (1 s doubling to the receiver's `max_backoff`, 5 min by
//! default, ±20%), never shorter than the wait the service asked for (`Retry-After`) up to
//! that same `max_backoff`: a longer ask is cut to it and counted
//! (`gpu_sentinel_delivery_retry_after_capped_total`), so a receiver answering "retry in
//! 2^64 seconds" is retried within the cap, not never (`retried`, once per attempt).
//! [`NotifyError::Drop`] removes it (`dropped`), as does passing `max_age` undelivered.
//! Entries replaced by a newer notification of their group are `superseded`, entries pushed
//! out of a full outbox `evicted` (see [`crate::alert::outbox`]). Counts are per entry, so a
//! summary carrying five notifications counts five `sent`.
//!
//! **Rate limits.** A receiver with `max_per_minute` (DingTalk and WeCom bots: 20 by
//! default) gets at most that many messages in any 60 s. While the window still has room
//! notifications go out one by one; the last message of a window carries everything then due,
//! merged into one summary notification — nothing is dropped for being over the limit.
//!
//! **A worker that panics** is caught, counted
//! (`gpu_sentinel_delivery_worker_restarts_total`), reported down on `/healthz` (through
//! [`DeliveryHealth`]) while it pauses, and started again (the `supervise` module).
//!
//! **Shutdown.** Workers finish or abandon their in-flight send within
//! [`DeliveryOptions::shutdown_grace`]; whatever was not delivered stays in the outbox for
//! the next start.

mod merge;
pub(crate) mod supervise;
mod worker;

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use rand::SeedableRng;
use rand::rngs::SmallRng;

use super::notify::Notifier;
use super::outbox::{Enqueued, Outbox};
use super::{LabelSet, Notification};
use crate::config::ReceiverConfig;
use crate::sync::lock;
pub use merge::merge;
use supervise::{Liveness, Pauses, Status, supervise};
use worker::{Signal, Worker};

/// How the delivery stage retries and waits.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryOptions {
    /// Backoff after a receiver's first failure; doubled after each further one.
    pub initial_backoff: Duration,
    /// Most time between attempts, for targets that set none: the backoff's cap and the
    /// most a service's `Retry-After` is honoured.
    pub max_backoff: Duration,
    /// Each backoff is scaled by a random factor in `1 ± jitter`, so agents that failed
    /// together do not retry together.
    pub jitter: f64,
    /// Undelivered notifications older than this are dropped (counted): a day-old alert
    /// state is history, and Alertmanager receivers get the current one re-sent anyway.
    pub max_age: Option<Duration>,
    /// How long [`Delivery::shutdown`] waits for in-flight sends.
    pub shutdown_grace: Duration,
}

impl Default for DeliveryOptions {
    fn default() -> Self {
        DeliveryOptions {
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(300),
            jitter: 0.2,
            max_age: Some(Duration::from_secs(24 * 3600)),
            shutdown_grace: Duration::from_secs(3),
        }
    }
}

/// A receiver the delivery stage can send to.
pub struct Target {
    pub name: String,
    pub notifier: Box<dyn Notifier>,
    /// Most messages a minute; 0: unlimited. See [`max_per_minute`].
    pub max_per_minute: u32,
    /// The receiver's `max_backoff` (at least the initial backoff); None: the options'.
    pub max_backoff: Option<Duration>,
}

/// A receiver's effective rate limit: its `max_per_minute`, or when 0 its kind's default
/// (`KindFacts::default_max_per_minute`: 20 for DingTalk and WeCom bots); 0 means
/// unlimited.
pub fn max_per_minute(receiver: &ReceiverConfig) -> u32 {
    match (receiver.max_per_minute, receiver.kind.valid()) {
        (0, Some(kind)) => super::notify::kind::facts(*kind).default_max_per_minute,
        (n, _) => n,
    }
}

/// What happened to a notification, the `outcome` label of
/// `gpu_sentinel_notifications_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Outcome {
    Sent,
    Retried,
    Dropped,
    Superseded,
    Evicted,
}

impl Outcome {
    pub const ALL: [Outcome; 5] = [
        Outcome::Sent,
        Outcome::Retried,
        Outcome::Dropped,
        Outcome::Superseded,
        Outcome::Evicted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Sent => "sent",
            Outcome::Retried => "retried",
            Outcome::Dropped => "dropped",
            Outcome::Superseded => "superseded",
            Outcome::Evicted => "evicted",
        }
    }
}

/// The delivery stage's numbers, for the exposition.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeliveryStats {
    /// `gpu_sentinel_notifications_total{receiver,outcome}`: only pairs that happened;
    /// every configured receiver is listed with `sent` (0 until one is).
    pub notifications: BTreeMap<(String, Outcome), u64>,
    /// `gpu_sentinel_outbox_pending`.
    pub pending: usize,
    /// False while something the outbox holds is in memory only (its store failed, or it
    /// has none).
    pub durable: bool,
    /// Attempts to open or write the outbox's store that failed.
    pub(crate) store_errors: u64,
    /// Summary messages sent for rate-limited receivers.
    pub summaries: u64,
    /// Receivers with a send in progress, and for how long.
    pub in_flight: BTreeMap<String, Duration>,
    /// `gpu_sentinel_delivery_retry_after_capped_total{receiver}`: waits a receiver asked
    /// for that were cut to its `max_backoff` (every configured receiver, 0 until one is).
    pub retry_after_capped: BTreeMap<String, u64>,
    /// `gpu_sentinel_delivery_worker_restarts_total{receiver}`: workers started again after
    /// a panic (every configured receiver, 0 until one is).
    pub worker_restarts: BTreeMap<String, u64>,
}

impl DeliveryStats {
    pub fn count(&self, receiver: &str, outcome: Outcome) -> u64 {
        self.notifications
            .get(&(receiver.to_string(), outcome))
            .copied()
            .unwrap_or(0)
    }
}

/// State the workers and the handle share.
struct Shared {
    outbox: Arc<Outbox>,
    options: DeliveryOptions,
    stop: AtomicBool,
    counters: Mutex<BTreeMap<(String, Outcome), u64>>,
    in_flight: Mutex<BTreeMap<String, Instant>>,
    summaries: AtomicU64,
    capped: Mutex<BTreeMap<String, u64>>,
    liveness: Arc<Liveness>,
}

impl Shared {
    fn count_capped(&self, receiver: &str) {
        *lock(&self.capped).entry(receiver.to_string()).or_insert(0) += 1;
    }

    fn count(&self, receiver: &str, outcome: Outcome, n: u64) {
        if n > 0 {
            *lock(&self.counters)
                .entry((receiver.to_string(), outcome))
                .or_insert(0) += n;
        }
    }

    /// A change the outbox could not write yet: it keeps it, retries, counts the failure
    /// and logs when failing starts and ends, so here it is only a debug line.
    fn store_result<T>(&self, result: Result<T, super::outbox::OutboxError>) {
        if let Err(e) = result {
            tracing::debug!("{e}");
        }
    }
}

struct WorkerHandle {
    signal: Arc<Signal>,
    thread: Option<JoinHandle<()>>,
}

/// Whether the delivery workers are running, for `/healthz`: a handle to their shared
/// status, which keeps no worker (and no outbox) alive.
#[derive(Debug, Clone)]
pub struct DeliveryHealth(Arc<Liveness>);

impl From<Arc<Liveness>> for DeliveryHealth {
    fn from(liveness: Arc<Liveness>) -> Self {
        DeliveryHealth(liveness)
    }
}

impl DeliveryHealth {
    /// Receivers whose worker is not delivering now (panicked and waiting to restart, or
    /// its thread gone), each with why. Empty when all are running.
    pub fn down(&self) -> Vec<(String, String)> {
        self.0.down()
    }
}

/// Marks a worker dead when its thread ends for any reason but shutdown.
struct ThreadExit {
    shared: Arc<Shared>,
    name: String,
}

impl Drop for ThreadExit {
    fn drop(&mut self) {
        if !self.shared.stop.load(Ordering::SeqCst) {
            self.shared.liveness.set(
                &self.name,
                Status::Dead {
                    reason: "its delivery thread ended".into(),
                },
            );
        }
    }
}

/// How often the outbox is asked to retry a failing store (it keeps its own backoff; a
/// working store makes this a lock and a comparison).
const STORE_RETRY_POLL: Duration = Duration::from_millis(250);

/// The running delivery stage. Dropping it shuts it down (see [`Delivery::shutdown`]).
pub struct Delivery {
    shared: Arc<Shared>,
    workers: BTreeMap<String, WorkerHandle>,
    /// Retries a failing outbox store, so what waits in memory reaches the disk once it
    /// can even when no notification comes and nothing is delivered.
    store_retry: Option<WorkerHandle>,
}

impl Delivery {
    /// Starts one worker per target; they begin with what the outbox holds from before.
    pub fn start(outbox: Arc<Outbox>, targets: Vec<Target>, options: DeliveryOptions) -> Delivery {
        let shared = Arc::new(Shared {
            outbox,
            options,
            stop: AtomicBool::new(false),
            counters: Mutex::new(BTreeMap::new()),
            in_flight: Mutex::new(BTreeMap::new()),
            summaries: AtomicU64::new(0),
            capped: Mutex::new(BTreeMap::new()),
            liveness: Arc::new(Liveness::default()),
        });
        let names: Vec<&str> = targets.iter().map(|t| t.name.as_str()).collect();
        for receiver in shared.outbox.receivers() {
            if !names.contains(&receiver.as_str()) {
                tracing::warn!(
                    "notification outbox holds {} notification(s) for receiver {receiver:?}, \
                     which is not configured: they stay there (counted as pending) until it is \
                     configured again or they are evicted",
                    shared.outbox.pending_for(&receiver)
                );
            }
        }
        let mut workers = BTreeMap::new();
        for target in targets {
            lock(&shared.counters)
                .entry((target.name.clone(), Outcome::Sent))
                .or_insert(0);
            lock(&shared.capped).entry(target.name.clone()).or_insert(0);
            shared.liveness.register(&target.name);
            let signal = Arc::new(Signal::default());
            let max_backoff = target
                .max_backoff
                .unwrap_or(shared.options.max_backoff)
                .max(shared.options.initial_backoff);
            let pauses = Pauses {
                first: shared.options.initial_backoff,
                longest: max_backoff,
            };
            let mut worker = Worker {
                shared: Arc::clone(&shared),
                signal: Arc::clone(&signal),
                name: target.name.clone(),
                notifier: target.notifier,
                max_per_minute: target.max_per_minute,
                max_backoff,
                window: VecDeque::new(),
                failures: 0,
                blocked_until: None,
                rng: SmallRng::seed_from_u64(seed(&target.name)),
            };
            let exit = ThreadExit {
                shared: Arc::clone(&shared),
                name: target.name.clone(),
            };
            let thread = std::thread::Builder::new()
                .name(format!("deliver-{}", target.name))
                .spawn(move || {
                    let _exit = exit;
                    let liveness = Arc::clone(&worker.shared.liveness);
                    let name = worker.name.clone();
                    // `work` and `rest` both need the worker; never at the same time.
                    let worker = std::cell::RefCell::new(&mut worker);
                    supervise(
                        &liveness,
                        &name,
                        pauses,
                        || worker.borrow_mut().run(),
                        |pause| worker.borrow().rest(pause),
                    );
                });
            match thread {
                Ok(thread) => {
                    workers.insert(
                        target.name,
                        WorkerHandle {
                            signal,
                            thread: Some(thread),
                        },
                    );
                }
                Err(e) => {
                    tracing::error!(
                        "receiver {:?}: cannot start its delivery thread: {e}",
                        target.name
                    );
                    shared.liveness.set(
                        &target.name,
                        Status::Dead {
                            reason: format!("its delivery thread could not start: {e}"),
                        },
                    );
                }
            }
        }
        let store_retry = start_store_retry(&shared);
        Delivery {
            shared,
            workers,
            store_retry,
        }
    }

    /// Stores a notification in the outbox and wakes its receiver's worker. Never blocks on
    /// a receiver. When the store fails the notification is kept in memory and still sent.
    pub fn submit(&self, notification: &Notification) -> Enqueued {
        self.submit_due_at(notification, Utc::now())
    }

    /// Like [`Delivery::submit`], not sent before `due_at` (a notification waiting for
    /// advice): stored at once, so a crash while it waits loses nothing.
    pub(crate) fn submit_due_at(
        &self,
        notification: &Notification,
        due_at: DateTime<Utc>,
    ) -> Enqueued {
        let outbox = &self.shared.outbox;
        // A failing store keeps it in memory (and says so, once) until it can be written.
        let done = outbox.accept(notification, Utc::now(), due_at);
        let receiver = &notification.receiver;
        self.shared
            .count(receiver, Outcome::Superseded, done.superseded as u64);
        for evicted in &done.evicted {
            self.shared.count(evicted, Outcome::Evicted, 1);
        }
        if !done.evicted.is_empty() {
            tracing::warn!(
                "notification outbox full ({} entries): evicted {} older notification(s)",
                outbox.max_entries(),
                done.evicted.len()
            );
        }
        match self.workers.get(receiver) {
            Some(worker) => worker.signal.raise(),
            None => tracing::warn!(
                "no receiver {receiver:?} is configured; its notification waits in the outbox"
            ),
        }
        done
    }

    /// The workers' status, for `/healthz`.
    pub fn health(&self) -> DeliveryHealth {
        DeliveryHealth(Arc::clone(&self.shared.liveness))
    }

    /// The outbox being drained.
    pub fn outbox(&self) -> &Arc<Outbox> {
        &self.shared.outbox
    }

    pub fn stats(&self) -> DeliveryStats {
        let now = Instant::now();
        DeliveryStats {
            notifications: lock(&self.shared.counters).clone(),
            pending: self.shared.outbox.pending(),
            durable: self.shared.outbox.is_durable(),
            store_errors: self.shared.outbox.store_errors(),
            summaries: self.shared.summaries.load(Ordering::Relaxed),
            in_flight: lock(&self.shared.in_flight)
                .iter()
                .map(|(name, since)| (name.clone(), now.saturating_duration_since(*since)))
                .collect(),
            retry_after_capped: lock(&self.shared.capped).clone(),
            worker_restarts: self.shared.liveness.restarts(),
        }
    }

    /// Stops the workers: each finishes its in-flight send if that ends within
    /// `shutdown_grace`, otherwise it is abandoned (its entry stays in the outbox). Then
    /// the outbox gets a last try at writing what a failing store still lacks.
    /// Returns the receivers whose send was abandoned.
    pub fn shutdown(&mut self) -> Vec<String> {
        self.shared.stop.store(true, Ordering::SeqCst);
        for worker in self.workers.values() {
            worker.signal.raise();
        }
        let began = Instant::now();
        let grace = self.shared.options.shutdown_grace;
        let mut abandoned = Vec::new();
        for (name, worker) in &mut self.workers {
            let Some(thread) = worker.thread.take() else {
                continue;
            };
            while !thread.is_finished() && began.elapsed() < grace {
                std::thread::sleep(Duration::from_millis(10));
            }
            if thread.is_finished() {
                if thread.join().is_err() {
                    tracing::error!("receiver {name:?}: its delivery thread panicked");
                }
            } else {
                tracing::warn!(
                    "receiver {name:?}: a send still in flight at shutdown was abandoned; \
                     it stays in the outbox"
                );
                abandoned.push(name.clone());
            }
        }
        if let Some(mut retry) = self.store_retry.take() {
            if let Some(thread) = retry.thread.take() {
                retry.signal.raise();
                if thread.join().is_err() {
                    tracing::error!("the outbox's store retry thread panicked");
                }
            }
            if let Err(e) = self.shared.outbox.flush() {
                tracing::error!(
                    "{e}; at shutdown: notifications it lacks are lost with this process \
                     ({} pending)",
                    self.shared.outbox.pending()
                );
            }
        }
        abandoned
    }
}

impl Drop for Delivery {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Starts the thread that asks the outbox to retry a failing store (the outbox decides,
/// by its backoff, when an attempt is due) and counts entries evicted on the way.
fn start_store_retry(shared: &Arc<Shared>) -> Option<WorkerHandle> {
    let signal = Arc::new(Signal::default());
    let (thread_shared, thread_signal) = (Arc::clone(shared), Arc::clone(&signal));
    let thread = std::thread::Builder::new()
        .name("outbox-store".into())
        .spawn(move || {
            while !thread_shared.stop.load(Ordering::SeqCst) {
                for receiver in thread_shared.outbox.retry_store() {
                    thread_shared.count(&receiver, Outcome::Evicted, 1);
                }
                thread_signal.wait(STORE_RETRY_POLL);
            }
        });
    match thread {
        Ok(thread) => Some(WorkerHandle {
            signal,
            thread: Some(thread),
        }),
        Err(e) => {
            tracing::error!(
                "cannot start the outbox's store retry thread: {e}; a failing store is tried \
                 again only when a notification comes"
            );
            None
        }
    }
}

/// Jitter seed: differs between receivers and between runs.
fn seed(name: &str) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut labels = LabelSet::new();
    labels.insert("receiver".into(), name.into());
    nanos ^ super::fingerprint(&labels) ^ u64::from(std::process::id())
}
