//! Following the kernel log on a thread of its own, sending each XID as an [`XidEvent`].
//!
//! Two kinds of path are followed:
//! - a character device (`/dev/kmsg`): each `read` returns exactly one record; the thread
//!   waits in `poll(2)` so it sleeps while the kernel is quiet and can still notice a stop
//!   request within [`TICK`];
//! - anything else is treated as a text file a log shipper appends to (a syslog file, a
//!   dmesg capture): read from the start, then followed like `tail -F`, surviving
//!   truncation and rotation by checking size and inode every [`TICK`] at end of file.
//!
//! Neither loop spins: every path through them either consumes input or sleeps.
//!
//! What was already in the log when following began (the ring buffer's records since boot,
//! a log file's existing lines) is sent marked as backlog: the follower knows it has caught
//! up when it first reaches the end, which no timestamp can tell (a log line may carry
//! none, or one from a previous boot).

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::thread::JoinHandle;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use super::parse::{KmsgXid, parse_line, prefix_wall_time};
use crate::model::{XidEvent, XidSource};

/// How long a quiet follower sleeps before looking again (and checking for a stop request).
pub(crate) const TICK: Duration = Duration::from_millis(250);

/// Longest line kept; the rest of a longer line is dropped. Driver lines are < 1 KiB; this
/// only bounds memory when a file without newlines is followed by mistake.
const MAX_LINE: usize = 64 * 1024;

/// One XID read from the kernel log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KmsgEvent {
    pub event: XidEvent,
    /// Read before the follower first reached the end of the log: from before it started.
    pub backlog: bool,
}

/// A kernel log that cannot be followed.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot read the kernel log at {path}: {source}. XIDs are read from it because NVML's \
     event wait reports only the last of several. Reading /dev/kmsg needs CAP_SYSLOG (or root) \
     when kernel.dmesg_restrict=1, and in a container the host's /dev/kmsg mounted in; or set \
     `kmsg` under [collect] to a log file the agent can read, or to \"off\" to rely on NVML \
     events alone"
)]
pub struct KmsgError {
    /// The path that could not be opened.
    pub path: PathBuf,
    /// Why.
    #[source]
    pub source: io::Error,
}

/// A running kernel-log follower. Dropping it stops the thread.
#[derive(Debug)]
pub struct KmsgFollower {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl KmsgFollower {
    /// Opens `path` and starts following it on a new thread, sending each XID found on `tx`.
    ///
    /// The open happens here, so a missing or forbidden path is reported to the caller
    /// with its fix. The thread ends when stopped, dropped, or when `tx`'s receiver is gone.
    pub fn spawn(path: &Path, tx: Sender<KmsgEvent>) -> Result<Self, KmsgError> {
        let err = |source| KmsgError {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(err)?;
        let meta = file.metadata().map_err(err)?;
        if meta.is_dir() {
            return Err(err(io::Error::new(
                io::ErrorKind::IsADirectory,
                "a directory, not a log",
            )));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let owned = path.to_path_buf();
        let name = "kmsg-follower".to_string();
        let thread = if meta.file_type().is_char_device() {
            std::thread::Builder::new()
                .name(name)
                .spawn(move || follow_device(file, &owned, &tx, &flag))
        } else {
            std::thread::Builder::new()
                .name(name)
                .spawn(move || follow_file(file, &owned, &tx, &flag))
        }
        .map_err(err)?;
        Ok(Self {
            path: path.to_path_buf(),
            stop,
            thread: Some(thread),
        })
    }

    /// The path being followed.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Asks the thread to stop and waits for it (at most about one [`TICK`]).
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for KmsgFollower {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// `/dev/kmsg`: opening it positions the reader at the oldest record still in the kernel's
/// ring buffer, so the backlog since boot (or since the buffer last wrapped) is read first.
/// That is deliberate: XIDs logged while the agent was down (a restart, an upgrade) are
/// still seen, with their original times, so the engine can place them correctly.
fn follow_device(mut file: File, path: &Path, tx: &Sender<KmsgEvent>, stop: &AtomicBool) {
    // One record is at most ~1 KiB of text plus its dictionary; the kernel fails a read
    // into a buffer too small for the record with EINVAL.
    let mut buf = vec![0u8; 16 * 1024];
    let mut failures = 0u32;
    let mut backlog = true;
    while !stop.load(Ordering::Relaxed) {
        match file.read(&mut buf) {
            Ok(0) => {
                backlog = false;
                wait_readable(&file);
            }
            Ok(n) => {
                failures = 0;
                let record = String::from_utf8_lossy(&buf[..n]);
                if let Some(x) = parse_line(&record) {
                    let at = x
                        .monotonic_us
                        .and_then(|us| wall_from_monotonic(us, Utc::now()))
                        .unwrap_or_else(Utc::now);
                    if tx.send(event(x, at, backlog)).is_err() {
                        return;
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                backlog = false;
                wait_readable(&file);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // EPIPE: the ring buffer overwrote records we had not read yet. The next read
            // continues from the oldest record still there; the lost ones are gone.
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => {
                tracing::warn!(path = %path.display(), "kernel log overran: some records were lost before they could be read");
            }
            Err(e) => {
                failures += 1;
                if failures == 1 {
                    tracing::warn!(path = %path.display(), error = %e, "reading the kernel log failed; retrying");
                }
                std::thread::sleep(TICK * failures.min(20));
            }
        }
    }
}

/// Sleeps until the descriptor has data or [`TICK`] passes.
fn wait_readable(file: &File) {
    let mut fds = libc::pollfd {
        fd: file.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `fds` is one valid pollfd for the duration of the call, and the count says so.
    let ready = unsafe { libc::poll(&mut fds, 1, TICK.as_millis() as libc::c_int) };
    if ready < 0 || fds.revents & (libc::POLLERR | libc::POLLNVAL) != 0 {
        // poll itself failing must not turn the loop into a spin.
        std::thread::sleep(TICK);
    }
}

/// A regular file: read it from the start, then follow appends like `tail -F`.
fn follow_file(file: File, path: &Path, tx: &Sender<KmsgEvent>, stop: &AtomicBool) {
    // Until the first end of file, what is read was there before we started.
    let backlog = std::cell::Cell::new(true);
    // Returning false ends the read: a stop request is honoured even in the middle of a
    // long backlog.
    let handle = |line: &str| {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        let Some(x) = parse_line(line) else {
            return true;
        };
        let now = Utc::now();
        let at = prefix_wall_time(line, now)
            .or_else(|| x.monotonic_us.and_then(|us| wall_from_monotonic(us, now)))
            .unwrap_or(now);
        tx.send(event(x, at, backlog.get())).is_ok()
    };
    let mut tail = Tail::new(file);
    while !stop.load(Ordering::Relaxed) {
        match tail.read_lines(handle) {
            Err(Disconnected) => return,
            Ok(true) => continue,
            Ok(false) => backlog.set(false),
        }
        std::thread::sleep(TICK);
        if let Some(next) = tail.check_rotation(path) {
            // Lines the writer added to the old file after our last read, before renaming it.
            if tail.read_lines(handle).is_err() {
                return;
            }
            tail = next;
        }
    }
}

/// The receiving side is gone, or the follower was asked to stop.
struct Disconnected;

/// Line reader over a file that may grow, be truncated, or be replaced.
struct Tail {
    file: File,
    inode: u64,
    offset: u64,
    /// Bytes of an unfinished last line.
    partial: Vec<u8>,
    /// Dropping the rest of an over-long line until its newline.
    skipping: bool,
}

impl Tail {
    fn new(file: File) -> Self {
        let inode = file.metadata().map(|m| m.ino()).unwrap_or(0);
        Self {
            file,
            inode,
            offset: 0,
            partial: Vec::new(),
            skipping: false,
        }
    }

    /// Reads what is there now and hands each complete line to `handle` (which returns
    /// false when its receiver is gone). `Ok(true)` when it read something.
    fn read_lines(&mut self, mut handle: impl FnMut(&str) -> bool) -> Result<bool, Disconnected> {
        let mut chunk = [0u8; 8192];
        let mut any = false;
        loop {
            let n = match self.file.read(&mut chunk) {
                Ok(0) => return Ok(any),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // An unreadable moment (NFS hiccup, WouldBlock on a FIFO): try again later.
                Err(_) => return Ok(any),
            };
            any = true;
            self.offset += n as u64;
            for piece in chunk[..n].split_inclusive(|&b| b == b'\n') {
                let complete = piece.last() == Some(&b'\n');
                if !self.skipping {
                    self.partial.extend_from_slice(piece);
                }
                if self.partial.len() > MAX_LINE {
                    self.partial.clear();
                    self.skipping = true;
                }
                if complete {
                    let line = String::from_utf8_lossy(&self.partial);
                    let line = line.trim_end_matches(['\n', '\r']);
                    let keep_going = self.skipping || handle(line);
                    self.partial.clear();
                    self.skipping = false;
                    if !keep_going {
                        return Err(Disconnected);
                    }
                }
            }
        }
    }

    /// At end of file: start over when the file was truncated; when the path now names
    /// another inode (rotation), return a reader of the new file for the caller to switch
    /// to once it has read the old one to its end.
    fn check_rotation(&mut self, path: &Path) -> Option<Tail> {
        // Rotated away and not recreated yet: keep the old file until a new one appears.
        let meta = std::fs::metadata(path).ok()?;
        if meta.ino() != self.inode {
            let file = File::open(path).ok()?;
            tracing::debug!(path = %path.display(), "kernel log file was rotated; following the new one");
            return Some(Tail::new(file));
        }
        if meta.len() < self.offset {
            tracing::debug!(path = %path.display(), "kernel log file was truncated; reading it again from the start");
            if self.file.seek(SeekFrom::Start(0)).is_ok() {
                self.offset = 0;
                self.partial.clear();
                self.skipping = false;
            }
        }
        None
    }
}

fn event(x: KmsgXid, at: DateTime<Utc>, backlog: bool) -> KmsgEvent {
    KmsgEvent {
        event: XidEvent {
            at,
            gpu: None,
            uuid: None,
            pci_bus_id: Some(x.pci_bus_id),
            xid: x.xid,
            source: XidSource::Kmsg,
            message: (!x.message.is_empty()).then_some(x.message),
        },
        backlog,
    }
}

/// Wall time of a kernel timestamp (µs since boot), using boot time = now − monotonic now.
///
/// Printk stamps with the kernel's local clock, which, like CLOCK_MONOTONIC, stops during
/// suspend, so the offset holds across suspends. Recomputed per call so NTP steps are
/// followed. `None` when the result would lie in the future (a stamp from a previous boot
/// in a log file).
pub(crate) fn wall_from_monotonic(monotonic_us: u64, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let mono_now = monotonic_now()?;
    let boot = now.checked_sub_signed(TimeDelta::from_std(mono_now).ok()?)?;
    // Checked: a garbled header can claim any number of microseconds.
    let at = boot.checked_add_signed(TimeDelta::microseconds(i64::try_from(monotonic_us).ok()?))?;
    (at <= now + TimeDelta::seconds(1)).then_some(at)
}

fn monotonic_now() -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (rc == 0).then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_time_maps_to_the_past_and_never_overflows() {
        let now = Utc::now();
        let at = wall_from_monotonic(1_000_000, now);
        assert!(at.is_some_and(|t| t <= now), "{at:?}");
        // Absurd values from a mangled header are refused, not a panic.
        assert_eq!(wall_from_monotonic(u64::MAX, now), None);
        assert_eq!(wall_from_monotonic(i64::MAX as u64, now), None);
    }
}
