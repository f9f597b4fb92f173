//! How many connections the server holds, and which one goes when it is full.
//!
//! Every accepted connection is registered here until it ends. A connection is *idle*
//! while no request of it is being answered: before its TLS handshake and first request,
//! and between keep-alive requests. When `[server] max_connections` are open, the oldest
//! idle one is closed to make room: a client that opens sockets and sends nothing costs
//! itself its oldest socket, not somebody else's scrape. When every connection is busy the
//! server stops accepting until one ends, and new clients wait in the kernel's backlog.
//!
//! The cap is also kept below the process's open-file limit ([`connection_cap`]), whose
//! soft value is first raised to the hard one: past it `accept` fails with EMFILE, and
//! then nobody gets in. Should it fail anyway (other files, a lower limit set later), the
//! accept loop closes the oldest idle connection, backs off, and says so at most once a
//! minute ([`AcceptErrors`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::sync::lock;

/// The open connections, oldest first.
#[derive(Debug)]
pub(crate) struct Connections {
    max: usize,
    open: Mutex<Open>,
    /// Signalled when a connection ends.
    freed: Notify,
}

#[derive(Debug, Default)]
struct Open {
    next: u64,
    /// By id, which increases with each accept: the first idle one is the oldest.
    slots: BTreeMap<u64, Arc<Slot>>,
}

/// One connection's state, shared by its task and the registry.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    /// Requests being answered.
    busy: AtomicUsize,
    /// Signalled when the connection should close to make room.
    evicted: Notify,
}

impl Connections {
    /// Room for `max` connections (at least 1).
    pub fn new(max: usize) -> Arc<Connections> {
        Arc::new(Connections {
            max: max.max(1),
            open: Mutex::new(Open::default()),
            freed: Notify::new(),
        })
    }

    /// Whether one more connection can be taken: below the cap, or one can be closed.
    pub(crate) fn has_room(&self) -> bool {
        let open = lock(&self.open);
        open.slots.len() < self.max || open.slots.values().any(|s| s.is_idle())
    }

    /// Waits until [`Connections::has_room`].
    pub async fn room(&self) {
        loop {
            let freed = self.freed.notified();
            if self.has_room() {
                return;
            }
            freed.await;
        }
    }

    /// Registers a connection just accepted, closing the oldest idle one first when full.
    pub(crate) fn admit(self: &Arc<Connections>) -> Ticket {
        let mut open = lock(&self.open);
        if open.slots.len() >= self.max {
            evict_oldest_idle(&mut open);
        }
        let id = open.next;
        open.next += 1;
        let slot = Arc::new(Slot::default());
        open.slots.insert(id, Arc::clone(&slot));
        Ticket {
            id,
            slot,
            connections: Arc::clone(self),
        }
    }

    /// Closes the oldest idle connection (when file descriptors ran out); false if none.
    pub(crate) fn evict_idle(&self) -> bool {
        evict_oldest_idle(&mut lock(&self.open))
    }

    /// Connections open (evicted ones no longer count).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        lock(&self.open).slots.len()
    }
}

fn evict_oldest_idle(open: &mut Open) -> bool {
    let oldest = open
        .slots
        .iter()
        .find(|(_, slot)| slot.is_idle())
        .map(|(id, _)| *id);
    match oldest.and_then(|id| open.slots.remove(&id)) {
        Some(slot) => {
            // A stored permit: the connection sees it even if it is not waiting yet.
            slot.evicted.notify_one();
            true
        }
        None => false,
    }
}

impl Slot {
    fn is_idle(&self) -> bool {
        self.busy.load(Ordering::Acquire) == 0
    }
}

/// A registered connection; it leaves the registry when dropped.
#[derive(Debug)]
pub(crate) struct Ticket {
    id: u64,
    slot: Arc<Slot>,
    connections: Arc<Connections>,
}

impl Ticket {
    /// Marks a request as being answered until the guard is dropped.
    #[cfg(test)]
    pub fn request(&self) -> Busy {
        self.slot.request()
    }

    /// Shared with the connection's requests.
    pub fn slot(&self) -> Arc<Slot> {
        Arc::clone(&self.slot)
    }

    /// Resolves when the connection was chosen to close.
    pub async fn evicted(&self) {
        self.slot.evicted.notified().await;
    }
}

impl Slot {
    /// Marks a request as being answered until the guard is dropped.
    pub fn request(self: &Arc<Slot>) -> Busy {
        self.busy.fetch_add(1, Ordering::AcqRel);
        Busy(Arc::clone(self))
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        lock(&self.connections.open).slots.remove(&self.id);
        self.connections.freed.notify_waiters();
    }
}

/// A request being answered.
#[derive(Debug)]
pub struct Busy(Arc<Slot>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// File descriptors kept for everything but connections: NVML's device files, the state
/// and outbox files, the kernel log, sockets to receivers and the kubelet. A quarter of the
/// limit, from 16 to 256.
fn reserved(limit: u64) -> u64 {
    (limit / 4).clamp(16, 256)
}

/// Raises the soft open-file limit to the hard one, and returns the connection cap:
/// `max_connections`, lowered (with a warning) where the limit leaves fewer descriptors.
pub fn connection_cap(max_connections: usize) -> usize {
    let Some(limit) = raise_open_file_limit() else {
        return max_connections;
    };
    let room = limit.saturating_sub(reserved(limit)).max(1);
    let room = usize::try_from(room).unwrap_or(usize::MAX);
    if room < max_connections {
        tracing::warn!(
            "[server] max_connections = {max_connections} lowered to {room}: the open-file \
             limit is {limit} (raise it, e.g. LimitNOFILE= in the systemd unit)"
        );
        room
    } else {
        max_connections
    }
}

/// The soft RLIMIT_NOFILE after raising it to the hard limit; None if it cannot be read.
/// Many systems start services at a soft limit of 1024 under a far higher hard one, and
/// every connection is a descriptor.
fn raise_open_file_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return None;
    }
    // Linux refuses an infinite NOFILE (fs.nr_open bounds it); 2^20 is its default bound.
    let hard = if limit.rlim_max == libc::RLIM_INFINITY {
        1 << 20
    } else {
        limit.rlim_max
    };
    if limit.rlim_cur < hard {
        let raised = libc::rlimit {
            rlim_cur: hard,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit reads the struct it is given.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            tracing::debug!("open-file limit raised from {} to {hard}", limit.rlim_cur);
            return Some(hard);
        }
        tracing::debug!(
            "cannot raise the open-file limit from {}: {}",
            limit.rlim_cur,
            std::io::Error::last_os_error()
        );
    }
    Some(limit.rlim_cur)
}

/// How often the same kind of accept failure is logged.
const LOG_EVERY: Duration = Duration::from_secs(60);

/// Failed accepts, logged at most once a [`LOG_EVERY`] with how many were not.
#[derive(Debug, Default)]
pub(crate) struct AcceptErrors {
    logged: Option<Instant>,
    unlogged: u64,
    /// The current pause after a failure, doubled while failures go on.
    backoff: Option<Duration>,
}

/// The first and the longest pause after accept fails for want of descriptors.
const BACKOFF_FIRST: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

impl AcceptErrors {
    /// Notes a failed accept; returns how long to wait before the next one. `freed`: an
    /// idle connection was closed for it, so a descriptor is about to come back.
    pub fn failed(&mut self, error: &std::io::Error, freed: bool) -> Duration {
        self.failed_at(error, freed, Instant::now())
    }

    fn failed_at(&mut self, error: &std::io::Error, freed: bool, now: Instant) -> Duration {
        let out_of_files = matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE));
        if !out_of_files {
            // ECONNABORTED and the like: that one client's problem.
            tracing::debug!("accept failed: {error}");
            return Duration::ZERO;
        }
        if self
            .logged
            .is_none_or(|at| now.duration_since(at) >= LOG_EVERY)
        {
            let more = match self.unlogged {
                0 => String::new(),
                n => format!(" ({n} more since the last message)"),
            };
            tracing::warn!(
                "accept failed: {error}{more}; closing the oldest idle connection and pausing \
                 accepts (raise the open-file limit or lower [server] max_connections)"
            );
            self.logged = Some(now);
            self.unlogged = 0;
        } else {
            self.unlogged += 1;
        }
        let pause = match (freed, self.backoff) {
            (true, _) | (false, None) => BACKOFF_FIRST,
            (false, Some(last)) => (last * 2).min(BACKOFF_MAX),
        };
        self.backoff = Some(pause);
        pause
    }

    /// A connection was accepted: the next failure starts the backoff afresh.
    pub fn accepted(&mut self) {
        self.backoff = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn when_full_the_oldest_idle_connection_goes_first() {
        let connections = Connections::new(3);
        let first = connections.admit();
        let second = connections.admit();
        let third = connections.admit();
        let _in_request = first.request();
        assert!(connections.has_room(), "idle ones can be closed");
        let fourth = connections.admit();
        assert_eq!(connections.len(), 3);
        // The first is busy: the second, the oldest idle one, was told to close.
        let told = |t: &Ticket| {
            let notified = t.slot.evicted.notified();
            tokio::pin!(notified);
            notified.as_mut().enable()
        };
        assert!(!told(&first));
        assert!(told(&second));
        assert!(!told(&third));
        drop(second);
        assert_eq!(connections.len(), 3);
        let _busy = (third.request(), fourth.request());
        assert!(!connections.has_room(), "every connection is answering");
        assert!(!connections.evict_idle());
        drop(first);
        assert!(connections.has_room());
    }

    #[tokio::test]
    async fn room_waits_until_a_connection_ends() {
        let connections = Connections::new(1);
        let only = connections.admit();
        let busy = only.request();
        let waiter = {
            let connections = Arc::clone(&connections);
            tokio::spawn(async move { connections.room().await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        drop(busy);
        drop(only);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("room after the connection ended")
            .expect("no panic");
    }

    #[test]
    fn running_out_of_descriptors_is_logged_once_a_minute_and_backs_off() {
        let mut errors = AcceptErrors::default();
        let emfile = std::io::Error::from_raw_os_error(libc::EMFILE);
        let start = Instant::now();
        assert_eq!(errors.failed_at(&emfile, false, start), BACKOFF_FIRST);
        let pauses: Vec<Duration> = (1..10)
            .map(|i| errors.failed_at(&emfile, false, start + Duration::from_millis(i)))
            .collect();
        assert_eq!(pauses.last(), Some(&BACKOFF_MAX));
        assert_eq!(errors.unlogged, 9);
        assert_eq!(errors.failed_at(&emfile, true, start), BACKOFF_FIRST);
        errors.failed_at(&emfile, false, start + LOG_EVERY);
        assert_eq!(errors.unlogged, 0, "logged again after a minute");
        let aborted = std::io::Error::from_raw_os_error(libc::ECONNABORTED);
        assert_eq!(errors.failed(&aborted, false), Duration::ZERO);
    }

    #[test]
    fn the_cap_leaves_descriptors_for_the_rest() {
        assert_eq!(reserved(64), 16);
        assert_eq!(reserved(1024), 256);
        assert_eq!(reserved(1 << 20), 256);
    }
}
