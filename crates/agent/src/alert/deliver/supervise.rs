//! Keeping the delivery workers alive: a worker whose loop panics is caught, counted
//! (`gpu_sentinel_delivery_worker_restarts_total`), reported down on `/healthz` while it
//! pauses, and started again — a bug hit by one notification must not silence a receiver
//! for the rest of the run.
//!
//! The pause after a panic starts at the receiver's initial backoff and doubles with each
//! panic in a row (up to its max backoff), so a worker that panics on every attempt neither
//! spins nor hammers its receiver. A run that lasted longer than the longest pause ends the
//! streak.

use std::any::Any;
use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::redact;
use crate::sync::lock;

/// Whether a receiver's worker is delivering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    Running,
    /// It panicked and waits to be started again.
    Restarting {
        reason: String,
    },
    /// Its thread could not start, or ended other than by shutdown.
    Dead {
        reason: String,
    },
}

/// The workers' status and restart counts, shared with `/healthz` and the exposition.
#[derive(Debug, Default)]
pub struct Liveness {
    workers: Mutex<BTreeMap<String, (Status, u64)>>,
}

impl Liveness {
    /// A worker about to start: running, no restarts.
    pub(crate) fn register(&self, receiver: &str) {
        lock(&self.workers).insert(receiver.to_string(), (Status::Running, 0));
    }

    pub fn set(&self, receiver: &str, status: Status) {
        lock(&self.workers)
            .entry(receiver.to_string())
            .or_insert((Status::Running, 0))
            .0 = status;
    }

    /// The worker runs again after a panic: counted.
    fn restarted(&self, receiver: &str) {
        let mut workers = lock(&self.workers);
        let entry = workers
            .entry(receiver.to_string())
            .or_insert((Status::Running, 0));
        entry.0 = Status::Running;
        entry.1 = entry.1.saturating_add(1);
    }

    /// Receivers whose worker is not delivering, with why.
    pub fn down(&self) -> Vec<(String, String)> {
        lock(&self.workers)
            .iter()
            .filter_map(|(name, (status, _))| match status {
                Status::Running => None,
                Status::Restarting { reason } => {
                    Some((name.clone(), format!("{reason}; restarting")))
                }
                Status::Dead { reason } => Some((name.clone(), reason.clone())),
            })
            .collect()
    }

    /// Restarts per receiver (every registered receiver, 0 until one happens).
    pub fn restarts(&self) -> BTreeMap<String, u64> {
        lock(&self.workers)
            .iter()
            .map(|(name, (_, n))| (name.clone(), *n))
            .collect()
    }
}

/// How long a worker pauses before it is started again.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pauses {
    pub first: Duration,
    pub longest: Duration,
}

impl Pauses {
    /// The pause after the `n`th panic in a row (n ≥ 1).
    fn after(&self, n: u32) -> Duration {
        let exp = n.saturating_sub(1).min(30);
        self.first.saturating_mul(1u32 << exp).min(self.longest)
    }
}

/// Runs `work` until it returns (shutdown). When it panics, the panic is logged, the
/// receiver is reported [`Status::Restarting`], `rest` pauses (returning false when a
/// shutdown came meanwhile, which ends supervision), and `work` runs again, counted.
pub(super) fn supervise(
    liveness: &Liveness,
    receiver: &str,
    pauses: Pauses,
    mut work: impl FnMut(),
    mut rest: impl FnMut(Duration) -> bool,
) {
    let mut in_a_row = 0u32;
    loop {
        let began = Instant::now();
        let Err(payload) = catch_unwind(AssertUnwindSafe(&mut work)) else {
            return;
        };
        if began.elapsed() > pauses.longest {
            in_a_row = 0;
        }
        in_a_row = in_a_row.saturating_add(1);
        let pause = pauses.after(in_a_row);
        let reason = format!("panicked: {}", redact::scrub(&panic_message(&*payload)));
        tracing::error!(
            "receiver {receiver:?}: its delivery worker {reason}; restarting it in {}",
            humantime::format_duration(pause)
        );
        liveness.set(receiver, Status::Restarting { reason });
        if !rest(pause) {
            return;
        }
        liveness.restarted(receiver);
        tracing::warn!("receiver {receiver:?}: delivery worker restarted");
    }
}

/// The text a panic was raised with.
pub(super) fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "no message".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAUSES: Pauses = Pauses {
        first: Duration::from_millis(1),
        longest: Duration::from_millis(4),
    };

    #[test]
    fn a_worker_panic_is_caught_counted_reported_and_restarted() {
        let liveness = Liveness::default();
        liveness.register("ops");
        let mut runs = 0;
        let mut seen_while_resting = Vec::new();
        supervise(
            &liveness,
            "ops",
            PAUSES,
            || {
                runs += 1;
                if runs <= 2 {
                    // What once killed the worker: arithmetic on a huge Retry-After.
                    let asked = Duration::from_secs(u64::MAX);
                    let _ = std::hint::black_box(Instant::now()) + asked;
                }
            },
            |_| {
                seen_while_resting.push(liveness.down());
                true
            },
        );
        assert_eq!(runs, 3, "restarted after each panic, then ran to its end");
        assert_eq!(liveness.restarts()["ops"], 2);
        assert!(liveness.down().is_empty(), "running again");
        assert_eq!(seen_while_resting.len(), 2);
        let (receiver, why) = &seen_while_resting[0][0];
        assert_eq!(receiver, "ops");
        assert!(
            why.contains("panicked") && why.contains("restarting"),
            "{why}"
        );
    }

    #[test]
    fn a_shutdown_during_the_pause_ends_supervision_uncounted() {
        let liveness = Liveness::default();
        liveness.register("ops");
        let mut runs = 0;
        supervise(
            &liveness,
            "ops",
            PAUSES,
            || {
                runs += 1;
                panic!("always");
            },
            |_| false,
        );
        assert_eq!(runs, 1);
        assert_eq!(liveness.restarts()["ops"], 0);
    }

    #[test]
    fn pauses_double_up_to_the_longest() {
        let p = Pauses {
            first: Duration::from_secs(1),
            longest: Duration::from_secs(300),
        };
        assert_eq!(p.after(1), Duration::from_secs(1));
        assert_eq!(p.after(3), Duration::from_secs(4));
        assert_eq!(p.after(u32::MAX), Duration::from_secs(300));
    }

    #[test]
    fn panic_messages_are_scrubbed() {
        let liveness = Liveness::default();
        let mut first = true;
        supervise(
            &liveness,
            "ops",
            PAUSES,
            || {
                if std::mem::take(&mut first) {
                    panic!("POST https://x/robot/send?access_token=Zq12345 failed");
                }
            },
            |_| {
                let down = liveness.down();
                assert!(!down[0].1.contains("Zq12345"), "{down:?}");
                true
            },
        );
    }
}
