//! LLM advice: suggested actions for alert groups, and an optional fleet digest, from an
//! OpenAI-compatible chat-completions API (`[advice]`, off by default).
//!
//! Advice must never delay or block an alert, so everything here is asynchronous and
//! bounded:
//! - [`Advisor::request`] only queues (a bounded queue; a full queue is counted, not waited
//!   on) and returns at once; one worker thread sends **one request at a time**, each bounded
//!   by `timeout` (connect, wait and read together) and `max_tokens`;
//! - answers are cached per alert group key; [`Advisor::advice`] returns one once it is
//!   there. The dispatcher sends a notification without advice when none is back within
//!   `max_wait` ([`Advisor::status`] says since when it is pending) and attaches it (the
//!   `advice` annotation) to the group's next notification;
//! - a failed request is not repeated for the same group for [`RETRY_FAILED_AFTER`]; after a
//!   429 the worker pauses for the server's `Retry-After` (10 s without one, at most 2 min);
//! - an answer cut at `max_tokens` (`finish_reason` "length") is kept with a
//!   "(cut short)" note: a truncated list of actions for a critical alert is still useful,
//!   and the note says it is incomplete. It is counted as `incomplete`.
//!
//! Every request's outcome is counted for `gpu_sentinel_advice_requests_total{outcome}`
//! ([`Advisor::stats`]). The API key comes from the environment variable named by
//! `api_key_env`; it is sent only in the `Authorization` header and never logged.

pub mod client;
pub mod summary;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use client::{Answer, ChatClient, ChatError, endpoint};
pub use summary::{AlertFacts, Redaction, alert_summary, fleet_summary};

use crate::config::AdviceConfig;
use crate::sync::lock;

/// A group whose request failed is not asked about again before this.
pub(crate) const RETRY_FAILED_AFTER: Duration = Duration::from_secs(300);
/// Requests waiting for the worker, at most.
const QUEUE: usize = 32;
/// Groups whose advice is remembered, at most (the oldest answered go first).
const CACHE: usize = 256;
/// Appended to an answer cut at `max_tokens`.
pub const CUT_SHORT_NOTE: &str = "(cut short: the answer reached max_tokens)";

/// Instructions for advice on an alert group.
const ALERT_PROMPT: &str = "You advise the operators of NVIDIA GPU servers. The user message is \
a JSON summary of alerts from one host: the alerts, the GPUs concerned with their numbers \
(failure-risk score 0-1 and its largest reasons, XID errors, ECC and row-remap state, \
temperatures, idle time, processes) and the host's fleet utilization and waste. Reply in plain \
text with at most 5 short, concrete next actions, most urgent first, one per line starting \
with \"- \". Where the data does not support a conclusion, say so. No preamble.";

/// Instructions for the fleet digest.
const DIGEST_PROMPT: &str = "You summarise the state of one host's NVIDIA GPUs for its \
operators. The user message is a JSON summary: the GPUs (most at risk first) with their \
failure-risk scores and reasons, idle time and processes, and the fleet's utilization, waste \
and scaling advice. Reply in plain text, at most 8 lines: the GPUs most at risk and why, idle \
or wasted capacity and who holds it, and one or two suggested actions. No preamble.";

/// Advice could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum AdviceError {
    #[error(
        "[advice] api_key_env: the environment variable {env} is not set; it should hold the API key for {base_url}"
    )]
    MissingApiKey { env: String, base_url: String },
    #[error("[advice] api_key_env: the environment variable {env} is empty")]
    EmptyApiKey { env: String },
    #[error("[advice] api_key_env is empty: name the environment variable that holds the API key")]
    NoKeyVariable,
    #[error("[advice]: cannot start the advice thread: {0}")]
    Thread(#[source] std::io::Error),
}

/// Where a group's advice stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdviceStatus {
    /// Never asked for (or forgotten).
    Unrequested,
    /// Queued or being answered since then.
    Pending {
        since: Instant,
    },
    Ready(String),
    /// The last request failed; see the counters and the log for why.
    Failed,
}

/// Every outcome counted, in the order the exposition lists them.
pub(crate) const OUTCOMES: [&str; 12] = [
    "ok",
    "incomplete",
    "unauthorized",
    "rate_limited",
    "server_error",
    "client_error",
    "error_body",
    "malformed",
    "empty",
    "timeout",
    "transport",
    "queue_full",
];

/// The advisor's numbers, for the exposition.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AdviceStats {
    /// `gpu_sentinel_advice_requests_total{outcome}`, every outcome of [`OUTCOMES`].
    pub requests: BTreeMap<&'static str, u64>,
    /// Groups with advice ready.
    pub cached: usize,
}

enum Slot {
    Pending { since: Instant },
    Ready { text: String, seq: u64 },
    Failed { at: Instant, seq: u64 },
}

#[derive(Default)]
struct Cache {
    slots: HashMap<String, Slot>,
    seq: u64,
    digest_pending: bool,
    digest: Option<String>,
}

impl Cache {
    /// Keeps the cache bounded: the oldest finished slot goes.
    fn trim(&mut self) {
        while self.slots.len() > CACHE {
            let oldest = self
                .slots
                .iter()
                .filter_map(|(k, s)| match s {
                    Slot::Ready { seq, .. } | Slot::Failed { seq, .. } => Some((*seq, k.clone())),
                    Slot::Pending { .. } => None,
                })
                .min();
            match oldest {
                Some((_, key)) => self.slots.remove(&key),
                None => return,
            };
        }
    }
}

enum JobKind {
    Advice(String),
    Digest,
}

struct Job {
    kind: JobKind,
    summary: String,
}

struct Shared {
    cache: Mutex<Cache>,
    counters: Mutex<BTreeMap<&'static str, u64>>,
    stop: AtomicBool,
}

impl Shared {
    fn count(&self, outcome: &'static str) {
        *lock(&self.counters).entry(outcome).or_insert(0) += 1;
    }
}

/// The API key `[advice]` needs, read through `env` from the variable `api_key_env`
/// names; None when advice is off. What `run` starts the advisor with and what
/// `check-config` checks (`cli::preflight`).
pub fn api_key(
    config: &AdviceConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<String>, AdviceError> {
    if !config.enabled {
        return Ok(None);
    }
    let var = config.api_key_env.trim();
    if var.is_empty() {
        return Err(AdviceError::NoKeyVariable);
    }
    match env(var) {
        Some(key) if key.trim().is_empty() => Err(AdviceError::EmptyApiKey { env: var.into() }),
        Some(key) => Ok(Some(key.trim().to_string())),
        None => Err(AdviceError::MissingApiKey {
            env: var.into(),
            base_url: crate::redact::url(&config.base_url),
        }),
    }
}

/// The advisor: a queue, one worker, a cache per alert group.
pub struct Advisor {
    shared: Arc<Shared>,
    queue: Mutex<Option<SyncSender<Job>>>,
    max_wait: Duration,
}

impl Advisor {
    /// The advisor `config` describes, or None when `[advice]` is off. The API key is read
    /// from the environment variable `api_key_env` names (see [`api_key`]).
    pub fn from_config(config: &AdviceConfig) -> Result<Option<Advisor>, AdviceError> {
        match api_key(config, &|name| std::env::var(name).ok())? {
            Some(key) => Advisor::start(config, key).map(Some),
            None => Ok(None),
        }
    }

    /// Starts the worker with an explicit key (whatever `enabled` says).
    pub fn start(config: &AdviceConfig, api_key: String) -> Result<Advisor, AdviceError> {
        let client = ChatClient::new(
            &config.base_url,
            api_key,
            &config.model,
            config.max_tokens,
            config.timeout,
        );
        let shared = Arc::new(Shared {
            cache: Mutex::new(Cache::default()),
            counters: Mutex::new(OUTCOMES.iter().map(|o| (*o, 0)).collect()),
            stop: AtomicBool::new(false),
        });
        let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE);
        let worker = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("advice".into())
            .spawn(move || run(&worker, &client, &rx))
            .map_err(AdviceError::Thread)?;
        Ok(Advisor {
            shared,
            queue: Mutex::new(Some(tx)),
            max_wait: config.max_wait,
        })
    }

    /// How long the dispatcher holds a notification for its advice.
    pub fn max_wait(&self) -> Duration {
        self.max_wait
    }

    /// Asks for advice on a group (`summary`: see [`alert_summary`]). Never blocks. Returns
    /// whether a request was queued: not when the group's advice is pending or ready, when
    /// its last request failed less than [`RETRY_FAILED_AFTER`] ago, or when the queue is
    /// full (counted as `queue_full`).
    pub fn request(&self, group_key: &str, summary: &serde_json::Value) -> bool {
        let mut cache = lock(&self.shared.cache);
        match cache.slots.get(group_key) {
            Some(Slot::Pending { .. } | Slot::Ready { .. }) => return false,
            Some(Slot::Failed { at, .. }) if at.elapsed() < RETRY_FAILED_AFTER => return false,
            _ => {}
        }
        let job = Job {
            kind: JobKind::Advice(group_key.to_string()),
            summary: summary.to_string(),
        };
        if !self.enqueue(job) {
            return false;
        }
        cache.slots.insert(
            group_key.to_string(),
            Slot::Pending {
                since: Instant::now(),
            },
        );
        true
    }

    /// The group's advice, once it is there.
    pub fn advice(&self, group_key: &str) -> Option<String> {
        match lock(&self.shared.cache).slots.get(group_key) {
            Some(Slot::Ready { text, .. }) => Some(text.clone()),
            _ => None,
        }
    }

    pub fn status(&self, group_key: &str) -> AdviceStatus {
        match lock(&self.shared.cache).slots.get(group_key) {
            None => AdviceStatus::Unrequested,
            Some(Slot::Pending { since }) => AdviceStatus::Pending { since: *since },
            Some(Slot::Ready { text, .. }) => AdviceStatus::Ready(text.clone()),
            Some(Slot::Failed { .. }) => AdviceStatus::Failed,
        }
    }

    /// Forgets a group (it resolved): a later request asks afresh, and an answer still on
    /// its way is discarded.
    pub fn forget(&self, group_key: &str) {
        lock(&self.shared.cache).slots.remove(group_key);
    }

    /// Asks for a fleet digest (`summary`: see [`fleet_summary`]). Never blocks; false when
    /// one is already pending or the queue is full. Fetch it with [`Advisor::take_digest`].
    pub fn digest(&self, summary: &serde_json::Value) -> bool {
        let mut cache = lock(&self.shared.cache);
        if cache.digest_pending {
            return false;
        }
        let job = Job {
            kind: JobKind::Digest,
            summary: summary.to_string(),
        };
        if self.enqueue(job) {
            cache.digest_pending = true;
            true
        } else {
            false
        }
    }

    /// The finished digest text, once (for an info notification).
    pub fn take_digest(&self) -> Option<String> {
        lock(&self.shared.cache).digest.take()
    }

    pub fn stats(&self) -> AdviceStats {
        let cache = lock(&self.shared.cache);
        AdviceStats {
            requests: lock(&self.shared.counters).clone(),
            cached: cache
                .slots
                .values()
                .filter(|s| matches!(s, Slot::Ready { .. }))
                .count(),
        }
    }

    /// Stops taking requests; the worker ends after its current one (not waited for: it may
    /// hang until its timeout).
    pub fn shutdown(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        lock(&self.queue).take();
    }

    fn enqueue(&self, job: Job) -> bool {
        let queue = lock(&self.queue);
        let Some(tx) = queue.as_ref() else {
            return false;
        };
        match tx.try_send(job) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) => {
                self.shared.count("queue_full");
                tracing::warn!("advice: {QUEUE} requests already waiting; this one is skipped");
                false
            }
            Err(TrySendError::Disconnected(_)) => false,
        }
    }
}

impl Drop for Advisor {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn run(shared: &Shared, client: &ChatClient, jobs: &Receiver<Job>) {
    while let Ok(job) = jobs.recv() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        if let JobKind::Advice(key) = &job.kind {
            // Forgotten while queued: nobody wants the answer any more.
            if !matches!(
                lock(&shared.cache).slots.get(key),
                Some(Slot::Pending { .. })
            ) {
                continue;
            }
        }
        let prompt = match job.kind {
            JobKind::Advice(_) => ALERT_PROMPT,
            JobKind::Digest => DIGEST_PROMPT,
        };
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            client.ask(prompt, &job.summary)
        }))
        .unwrap_or_else(|_| Err(ChatError::Transport("the request panicked".into())));
        let (outcome, text) = match &result {
            Ok(Answer::Complete(text)) => ("ok", Some(text.clone())),
            Ok(Answer::CutShort(text)) => ("incomplete", Some(format!("{text}\n{CUT_SHORT_NOTE}"))),
            Err(e) => (e.outcome(), None),
        };
        shared.count(outcome);
        if let Err(e) = &result {
            match e {
                ChatError::Unauthorized { .. } => tracing::error!(
                    "advice: {}: {e}; check the key in the variable [advice] api_key_env names",
                    client.url()
                ),
                _ => tracing::warn!("advice: {}: {e}", client.url()),
            }
        }
        store(shared, &job.kind, text);
        if let Err(ChatError::RateLimited { retry_after, .. }) = &result {
            pause(
                shared,
                retry_after
                    .unwrap_or(Duration::from_secs(10))
                    .min(Duration::from_secs(120)),
            );
        }
    }
}

fn store(shared: &Shared, kind: &JobKind, text: Option<String>) {
    let mut cache = lock(&shared.cache);
    cache.seq += 1;
    let seq = cache.seq;
    match kind {
        JobKind::Digest => {
            cache.digest_pending = false;
            if text.is_some() {
                cache.digest = text;
            }
        }
        JobKind::Advice(key) => {
            // Only a slot still waiting takes the answer (not one forgotten meanwhile).
            if let Some(slot @ Slot::Pending { .. }) = cache.slots.get_mut(key) {
                *slot = match text {
                    Some(text) => Slot::Ready { text, seq },
                    None => Slot::Failed {
                        at: Instant::now(),
                        seq,
                    },
                };
            }
            cache.trim();
        }
    }
}

/// Sleeps `d`, waking early on shutdown.
fn pause(shared: &Shared, d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until && !shared.stop.load(Ordering::SeqCst) {
        std::thread::sleep(
            Duration::from_millis(100).min(until.saturating_duration_since(Instant::now())),
        );
    }
}
