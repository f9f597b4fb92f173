//! One receiver's delivery worker: takes its due entries from the outbox one send at a
//! time, keeps its rate limit, backs off after failures and records every outcome.
//!
//! Times here come from outside — a `Retry-After` of any size, a clock that jumps — so no
//! instant or date is computed with an operator that can overflow: a wait is bounded first
//! (by the receiver's max backoff) and added with `checked_add`.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use rand::Rng;
use rand::rngs::SmallRng;

use super::merge::{Batch, single, summary};
use super::{Outcome, Shared};
use crate::alert::notify::{Notifier, NotifyError};
use crate::retry_after;
use crate::sync::lock;

/// Longest sleep without a wake-up: a wall-clock jump is noticed within it.
const IDLE_POLL: Duration = Duration::from_secs(30);
const MINUTE: Duration = Duration::from_secs(60);
/// Shortest pause between looks at the outbox, so a due time in the past never spins.
const MIN_WAIT: Duration = Duration::from_millis(10);

/// Wakes a sleeping worker (new work, or shutdown).
#[derive(Default)]
pub(super) struct Signal {
    raised: Mutex<bool>,
    cond: Condvar,
}

impl Signal {
    pub fn raise(&self) {
        *lock(&self.raised) = true;
        self.cond.notify_all();
    }

    /// Sleeps up to `timeout` or until raised; clears the signal.
    pub fn wait(&self, timeout: Duration) {
        let guard = lock(&self.raised);
        let (mut guard, _) = self
            .cond
            .wait_timeout_while(guard, timeout, |raised| !*raised)
            .unwrap_or_else(|p| p.into_inner());
        *guard = false;
    }
}

pub(super) struct Worker {
    pub shared: Arc<Shared>,
    pub signal: Arc<Signal>,
    pub name: String,
    pub notifier: Box<dyn Notifier>,
    pub max_per_minute: u32,
    /// Longest wait between attempts: the backoff's cap and the most a service's
    /// `Retry-After` is honoured.
    pub max_backoff: Duration,
    /// Start times of the sends of the last minute (rate limit).
    pub window: VecDeque<Instant>,
    /// Consecutive failed attempts (backoff exponent).
    pub failures: u32,
    /// The receiver is backing off until then.
    pub(crate) blocked_until: Option<Instant>,
    pub rng: SmallRng,
}

impl Worker {
    /// Delivers until shutdown. Safe to call again after it panicked: what a panic may have
    /// left half-done (an in-flight mark) is cleared first.
    pub fn run(&mut self) {
        lock(&self.shared.in_flight).remove(&self.name);
        self.bring_forward();
        while !self.shared.stop.load(Ordering::SeqCst) {
            let now = Utc::now();
            self.expire(now);
            match self.next(now) {
                Ok(batch) => self.attempt(batch),
                Err(wait) => self.signal.wait(wait.min(IDLE_POLL)),
            }
        }
    }

    /// No entry waits longer than `max_backoff` from now: ones stored with a later retry
    /// (by a version that honoured any `Retry-After`, or under a wrong clock) come due then.
    fn bring_forward(&self) {
        let now = Utc::now();
        let latest = wall_after(now, self.max_backoff);
        match self.shared.outbox.bring_forward(&self.name, latest) {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                "receiver {:?}: {n} notification(s) scheduled further out than its max_backoff \
                 ({}) now come due within it",
                self.name,
                humantime::format_duration(self.max_backoff)
            ),
            Err(e) => self.shared.store_result::<()>(Err(e)),
        }
    }

    /// Sleeps `pause` unless shutdown comes first; false then. Used after a panic: a send
    /// the panic interrupted is no longer in flight.
    pub fn rest(&self, pause: Duration) -> bool {
        lock(&self.shared.in_flight).remove(&self.name);
        let began = Instant::now();
        loop {
            if self.shared.stop.load(Ordering::SeqCst) {
                return false;
            }
            let left = pause.saturating_sub(began.elapsed());
            if left.is_zero() {
                return true;
            }
            self.signal.wait(left.min(IDLE_POLL));
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
            let frees = self
                .window
                .front()
                .and_then(|t| t.checked_add(MINUTE))
                .map_or(Duration::ZERO, |end| end.saturating_duration_since(instant));
            return Err(frees.max(MIN_WAIT));
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
                Err(wait.max(MIN_WAIT))
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
                let asked = self.asked_wait(after);
                let delay = self.backoff().max(asked);
                let now = Instant::now();
                self.blocked_until = now.checked_add(delay).or(Some(now));
                let next = wall_after(Utc::now(), delay);
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

    /// The wait the service asked for, cut to `max_backoff` (counted when cut): a
    /// `Retry-After` of 2^64 seconds or a date in 2099 is a retry within the cap, not never.
    fn asked_wait(&self, after: Option<Duration>) -> Duration {
        let Some(asked) = after else {
            return Duration::ZERO;
        };
        let (wait, capped) = retry_after::bounded(asked, self.max_backoff);
        if capped {
            self.shared.count_capped(&self.name);
            tracing::warn!(
                "receiver {:?}: asked to wait {} before retrying; waiting its max_backoff {} instead",
                self.name,
                shown(asked),
                humantime::format_duration(self.max_backoff)
            );
        }
        wait
    }

    /// `initial × 2^(failures−1)`, capped at `max_backoff`, scaled by `1 ± jitter`.
    fn backoff(&mut self) -> Duration {
        let o = &self.shared.options;
        let exp = self.failures.saturating_sub(1).min(30);
        let base = o
            .initial_backoff
            .saturating_mul(1u32 << exp)
            .min(self.max_backoff);
        let jitter = o.jitter.clamp(0.0, 1.0);
        if jitter == 0.0 {
            return base;
        }
        let factor = 1.0 + self.rng.random_range(-jitter..=jitter);
        Duration::try_from_secs_f64(base.as_secs_f64() * factor).unwrap_or(base)
    }

    /// Drops this receiver's entries older than `max_age`.
    fn expire(&mut self, now: DateTime<Utc>) {
        let Some(max_age) = self.shared.options.max_age else {
            return;
        };
        // An age beyond what a date can go back: nothing is that old.
        let Some(cutoff) = TimeDelta::from_std(max_age)
            .ok()
            .and_then(|age| now.checked_sub_signed(age))
        else {
            return;
        };
        let outbox = &self.shared.outbox;
        for entry in outbox.enqueued_before(&self.name, cutoff) {
            self.shared.count(&self.name, Outcome::Dropped, 1);
            self.shared.store_result(outbox.dropped(entry.id));
            tracing::warn!(
                "receiver {:?}: notification of {} dropped undelivered after {} attempt(s): \
                 older than {}",
                self.name,
                entry.enqueued_at.to_rfc3339(),
                entry.attempts,
                humantime::format_duration(max_age)
            );
        }
    }
}

/// `now + wait` as a date; `now` when that is past what a date can hold (a wait is
/// bounded before it gets here, so this is a guard, not a rule).
fn wall_after(now: DateTime<Utc>, wait: Duration) -> DateTime<Utc> {
    TimeDelta::from_std(wait)
        .ok()
        .and_then(|d| now.checked_add_signed(d))
        .unwrap_or(now)
}

/// A wait for a message: humantime's form, or "more than a century" for the absurd.
fn shown(wait: Duration) -> String {
    if wait.as_secs() > 100 * 365 * 86_400 {
        "more than a century".to_string()
    } else {
        humantime::format_duration(wait).to_string()
    }
}
