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
//! exponential backoff with jitter (1 s doubling to 5 min, ±20% by default), never shorter
//! than the `Retry-After` the service asked for (`retried`, once per attempt).
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
//! **Shutdown.** Workers finish or abandon their in-flight send within
//! [`DeliveryOptions::shutdown_grace`]; whatever was not delivered stays in the outbox for
//! the next start.

use std::collections::{BTreeMap, VecDeque};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::notify::{Notifier, NotifyError};
use super::outbox::{Enqueued, EntryId, Outbox, OutboxEntry};
use super::{Alert, LabelSet, Notification};
use crate::config::ReceiverConfig;

/// How the delivery stage retries and waits.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryOptions {
    /// Backoff after a receiver's first failure; doubled after each further one.
    pub initial_backoff: Duration,
    /// Most time between attempts.
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
}

/// A receiver's effective rate limit: its `max_per_minute`, or its kind's limit when 0 —
/// 20 per bot for DingTalk (custom robot guide; past it the robot is throttled for ten
/// minutes) and WeCom (group robot guide); 0 means unlimited.
pub fn max_per_minute(receiver: &ReceiverConfig) -> u32 {
    match (receiver.max_per_minute, receiver.kind.as_str()) {
        (0, "dingtalk" | "wecom") => 20,
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
    /// False when the outbox runs in memory only (its store failed).
    pub durable: bool,
    /// Writes to the outbox store that failed.
    pub store_errors: u64,
    /// Summary messages sent for rate-limited receivers.
    pub summaries: u64,
    /// Receivers with a send in progress, and for how long.
    pub in_flight: BTreeMap<String, Duration>,
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
    store_errors: AtomicU64,
    summaries: AtomicU64,
}

impl Shared {
    fn count(&self, receiver: &str, outcome: Outcome, n: u64) {
        if n > 0 {
            *lock(&self.counters)
                .entry((receiver.to_string(), outcome))
                .or_insert(0) += n;
        }
    }

    fn store_result<T>(&self, result: Result<T, super::outbox::OutboxError>) {
        if let Err(e) = result {
            self.store_errors.fetch_add(1, Ordering::Relaxed);
            tracing::warn!("{e}");
        }
    }
}

/// Wakes a sleeping worker (new work, or shutdown).
#[derive(Default)]
struct Signal {
    raised: Mutex<bool>,
    cond: Condvar,
}

impl Signal {
    fn raise(&self) {
        *lock(&self.raised) = true;
        self.cond.notify_all();
    }

    /// Sleeps up to `timeout` or until raised; clears the signal.
    fn wait(&self, timeout: Duration) {
        let guard = lock(&self.raised);
        let (mut guard, _) = self
            .cond
            .wait_timeout_while(guard, timeout, |raised| !*raised)
            .unwrap_or_else(|p| p.into_inner());
        *guard = false;
    }
}

struct WorkerHandle {
    signal: Arc<Signal>,
    thread: Option<JoinHandle<()>>,
}

/// The running delivery stage. Dropping it shuts it down (see [`Delivery::shutdown`]).
pub struct Delivery {
    shared: Arc<Shared>,
    workers: BTreeMap<String, WorkerHandle>,
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
            store_errors: AtomicU64::new(0),
            summaries: AtomicU64::new(0),
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
            let signal = Arc::new(Signal::default());
            let worker = Worker {
                shared: Arc::clone(&shared),
                signal: Arc::clone(&signal),
                name: target.name.clone(),
                notifier: target.notifier,
                max_per_minute: target.max_per_minute,
                window: VecDeque::new(),
                failures: 0,
                blocked_until: None,
                rng: SmallRng::seed_from_u64(seed(&target.name)),
            };
            let thread = std::thread::Builder::new()
                .name(format!("deliver-{}", target.name))
                .spawn(move || worker.run());
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
                Err(e) => tracing::error!(
                    "receiver {:?}: cannot start its delivery thread: {e}",
                    target.name
                ),
            }
        }
        Delivery { shared, workers }
    }

    /// Stores a notification in the outbox and wakes its receiver's worker. Never blocks on
    /// a receiver. When the store fails the notification is kept in memory and still sent.
    pub fn submit(&self, notification: &Notification) -> Enqueued {
        self.submit_due_at(notification, Utc::now())
    }

    /// Like [`Delivery::submit`], not sent before `due_at` (a notification waiting for
    /// advice): stored at once, so a crash while it waits loses nothing.
    pub fn submit_due_at(&self, notification: &Notification, due_at: DateTime<Utc>) -> Enqueued {
        let now = Utc::now();
        let outbox = &self.shared.outbox;
        let done = match outbox.enqueue_due_at(notification, now, due_at) {
            Ok(done) => done,
            Err(e) => {
                self.shared.store_errors.fetch_add(1, Ordering::Relaxed);
                tracing::error!("{e}; this notification is kept in memory only");
                outbox.enqueue_in_memory(notification, now, due_at)
            }
        };
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
            store_errors: self.shared.store_errors.load(Ordering::Relaxed),
            summaries: self.shared.summaries.load(Ordering::Relaxed),
            in_flight: lock(&self.shared.in_flight)
                .iter()
                .map(|(name, since)| (name.clone(), now.saturating_duration_since(*since)))
                .collect(),
        }
    }

    /// Stops the workers: each finishes its in-flight send if that ends within
    /// `shutdown_grace`, otherwise it is abandoned (its entry stays in the outbox).
    /// Returns the receivers whose send was abandoned.
    pub fn shutdown(&mut self) -> Vec<String> {
        self.shared.stop.store(true, Ordering::SeqCst);
        for worker in self.workers.values() {
            worker.signal.raise();
        }
        let deadline = Instant::now() + self.shared.options.shutdown_grace;
        let mut abandoned = Vec::new();
        for (name, worker) in &mut self.workers {
            let Some(thread) = worker.thread.take() else {
                continue;
            };
            while !thread.is_finished() && Instant::now() < deadline {
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
        abandoned
    }
}

impl Drop for Delivery {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A notification to send now, and the entries it carries.
struct Batch {
    notification: Notification,
    ids: Vec<EntryId>,
}

struct Worker {
    shared: Arc<Shared>,
    signal: Arc<Signal>,
    name: String,
    notifier: Box<dyn Notifier>,
    max_per_minute: u32,
    /// Start times of the sends of the last minute (rate limit).
    window: VecDeque<Instant>,
    /// Consecutive failed attempts (backoff exponent).
    failures: u32,
    /// The receiver is backing off until then.
    blocked_until: Option<Instant>,
    rng: SmallRng,
}

/// Longest sleep without a wake-up: a wall-clock jump is noticed within it.
const IDLE_POLL: Duration = Duration::from_secs(30);
const MINUTE: Duration = Duration::from_secs(60);

impl Worker {
    fn run(mut self) {
        while !self.shared.stop.load(Ordering::SeqCst) {
            let now = Utc::now();
            self.expire(now);
            match self.next(now) {
                Ok(batch) => self.attempt(batch),
                Err(wait) => self.signal.wait(wait.min(IDLE_POLL)),
            }
        }
    }

    /// The batch to send now, or how long to wait for one.
    fn next(&mut self, now: DateTime<Utc>) -> Result<Batch, Duration> {
        let instant = Instant::now();
        if let Some(until) = self.blocked_until {
            if until > instant {
                return Err(until - instant);
            }
            self.blocked_until = None;
        }
        let limit = self.max_per_minute as usize;
        while self
            .window
            .front()
            .is_some_and(|t| instant.saturating_duration_since(*t) >= MINUTE)
        {
            self.window.pop_front();
        }
        let room = if limit == 0 {
            usize::MAX
        } else {
            limit.saturating_sub(self.window.len())
        };
        if room == 0 {
            let frees = self.window.front().map_or(Duration::ZERO, |t| {
                (*t + MINUTE).saturating_duration_since(instant)
            });
            return Err(frees.max(Duration::from_millis(10)));
        }
        // The last message the window allows carries everything due.
        let take = if room == 1 { usize::MAX } else { 1 };
        let due = self.shared.outbox.due(&self.name, now, take);
        match due.len() {
            0 => {
                let wait = self
                    .shared
                    .outbox
                    .next_due(&self.name)
                    .map_or(IDLE_POLL, |at| {
                        (at - now).to_std().unwrap_or(Duration::ZERO)
                    });
                // A due time already past (clock skew) still gets a short pause, never a spin.
                Err(wait.max(Duration::from_millis(10)))
            }
            1 => Ok(single(&due[0])),
            _ => Ok(summary(&self.name, &due, now)),
        }
    }

    fn attempt(&mut self, batch: Batch) {
        let started = Instant::now();
        lock(&self.shared.in_flight).insert(self.name.clone(), started);
        self.window.push_back(started);
        // A panicking integration must not take the receiver's worker down with it.
        let result = catch_unwind(AssertUnwindSafe(|| self.notifier.send(&batch.notification)))
            .unwrap_or_else(|_| {
                Err(NotifyError::Retry {
                    reason: "the notifier panicked".into(),
                    after: None,
                })
            });
        lock(&self.shared.in_flight).remove(&self.name);
        let n = batch.ids.len() as u64;
        if n > 1 && result.is_ok() {
            self.shared.summaries.fetch_add(1, Ordering::Relaxed);
        }
        // Counted before the outbox changes, so a reader who sees the entry gone also sees
        // its outcome.
        let shared = Arc::clone(&self.shared);
        let outbox = &shared.outbox;
        match result {
            Ok(()) => {
                self.failures = 0;
                shared.count(&self.name, Outcome::Sent, n);
                for id in &batch.ids {
                    shared.store_result(outbox.delivered(*id));
                }
            }
            Err(NotifyError::Retry { reason, after }) => {
                self.failures = self.failures.saturating_add(1);
                let delay = self.backoff().max(after.unwrap_or(Duration::ZERO));
                self.blocked_until = Some(Instant::now() + delay);
                let next = Utc::now() + chrono::Duration::from_std(delay).unwrap_or_default();
                shared.count(&self.name, Outcome::Retried, n);
                for id in &batch.ids {
                    shared.store_result(outbox.failed(*id, &reason, next));
                }
                tracing::warn!(
                    "receiver {:?}: delivery failed ({reason}); failure {} in a row, next try in {:.1?}",
                    self.name,
                    self.failures,
                    delay
                );
            }
            Err(NotifyError::Drop { reason }) => {
                // The receiver answered: it is up, whatever it thought of this message.
                self.failures = 0;
                shared.count(&self.name, Outcome::Dropped, n);
                for id in &batch.ids {
                    shared.store_result(outbox.dropped(*id));
                }
                tracing::error!("receiver {:?}: notification dropped: {reason}", self.name);
            }
        }
    }

    /// `initial × 2^(failures−1)`, capped, scaled by `1 ± jitter`.
    fn backoff(&mut self) -> Duration {
        let o = &self.shared.options;
        let exp = self.failures.saturating_sub(1).min(30);
        let base = o
            .initial_backoff
            .saturating_mul(1u32 << exp)
            .min(o.max_backoff);
        let jitter = o.jitter.clamp(0.0, 1.0);
        if jitter == 0.0 {
            return base;
        }
        base.mul_f64(1.0 + self.rng.random_range(-jitter..=jitter))
    }

    /// Drops this receiver's entries older than `max_age`.
    fn expire(&mut self, now: DateTime<Utc>) {
        let Some(max_age) = self.shared.options.max_age else {
            return;
        };
        let Ok(max_age) = chrono::Duration::from_std(max_age) else {
            return;
        };
        let outbox = &self.shared.outbox;
        for entry in outbox.enqueued_before(&self.name, now - max_age) {
            self.shared.count(&self.name, Outcome::Dropped, 1);
            self.shared.store_result(outbox.dropped(entry.id));
            tracing::warn!(
                "receiver {:?}: notification of {} dropped undelivered after {} attempt(s): \
                 older than {}",
                self.name,
                entry.enqueued_at.to_rfc3339(),
                entry.attempts,
                humantime::format_duration(self.shared.options.max_age.unwrap_or_default())
            );
        }
    }
}

fn single(entry: &OutboxEntry) -> Batch {
    Batch {
        notification: entry.notification.clone(),
        ids: vec![entry.id],
    }
}

/// Everything due for a rate-limited receiver as one notification: all alerts of the
/// entries (an alert in several keeps its latest state), the group labels they share.
pub fn merge(receiver: &str, entries: &[OutboxEntry], now: DateTime<Utc>) -> Notification {
    let mut ordered: Vec<&OutboxEntry> = entries.iter().collect();
    ordered.sort_by_key(|e| e.id);
    let mut alerts: BTreeMap<u64, (usize, Alert)> = BTreeMap::new();
    let mut position = 0;
    for entry in &ordered {
        for alert in &entry.notification.alerts {
            // First appearance fixes the place, the latest entry the state.
            alerts
                .entry(alert.fingerprint())
                .and_modify(|slot| slot.1 = alert.clone())
                .or_insert_with(|| (position, alert.clone()));
            position += 1;
        }
    }
    let mut alerts: Vec<(usize, Alert)> = alerts.into_values().collect();
    alerts.sort_by_key(|(pos, _)| *pos);
    let mut group_labels: Option<LabelSet> = None;
    for entry in &ordered {
        let labels = &entry.notification.group_labels;
        group_labels = Some(match group_labels {
            None => labels.clone(),
            Some(mut common) => {
                common.retain(|k, v| labels.get(k) == Some(v));
                common
            }
        });
    }
    Notification {
        receiver: receiver.to_string(),
        group_key: format!("{receiver}/summary"),
        group_labels: group_labels.unwrap_or_default(),
        alerts: alerts.into_iter().map(|(_, a)| a).collect(),
        created_at: now,
        external_url: ordered
            .last()
            .map(|e| e.notification.external_url.clone())
            .unwrap_or_default(),
    }
}

fn summary(receiver: &str, due: &[OutboxEntry], now: DateTime<Utc>) -> Batch {
    Batch {
        notification: merge(receiver, due, now),
        ids: due.iter().map(|e| e.id).collect(),
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Counters and flags stay consistent through a panic elsewhere; keep using them.
    m.lock().unwrap_or_else(|p| p.into_inner())
}
