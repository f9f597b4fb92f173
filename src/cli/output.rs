//! The commands' standard output and standard error: what a write that fails does.
//!
//! Rust starts every program with SIGPIPE ignored, so a write to a pipe whose reader has
//! gone (`gpu-sentinel replay FILE 2>&1 | head -1`) fails with EPIPE, and `println!` and
//! `eprintln!` panic on that failure: exit status 101 and a panic message. The one-shot
//! commands restore the default disposition instead, so the kernel ends them at that write
//! the way it ends `cat` or `grep`: quietly, with the status of SIGPIPE (141 in a shell).
//!
//! `run` keeps SIGPIPE ignored: its sockets must see a vanished peer as an error, not die of
//! it. It writes nothing to standard output, and its log lines go through a subscriber that
//! drops a line it cannot write (see src/main.rs), so a closed standard error costs the
//! log, never the agent.
//!
//! Any other failure to write a command's output (standard output redirected to a full
//! disk) is an error naming standard output, through [`print`], rather than the panic of
//! `print!`; a note on standard error that cannot be written ([`note`]) is dropped. So is
//! a standard output closed at start (`>&-`), which Rust would otherwise let swallow the
//! output with exit status 0 ([`note_closed_stdout`]).

use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context as _;

/// Standard output was closed when the process was started (`gpu-sentinel snapshot >&-`).
static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// Records whether standard output is closed. Must run before Rust's runtime starts:
/// that runtime puts `/dev/null` on a closed standard descriptor before `main` (so the
/// first file opened cannot become descriptor 1), after which a closed standard output
/// looks like one sent to `/dev/null`, and a command's whole output would vanish with exit
/// status 0 (`gpu-sentinel snapshot >&-`). The binary calls it from an `.init_array`
/// constructor (src/main.rs), which the C runtime runs before `main`.
pub extern "C" fn note_closed_stdout() {
    #[cfg(unix)]
    {
        // SAFETY: F_GETFD only asks whether descriptor 1 is open; it changes nothing and
        // needs no part of the Rust runtime.
        let closed = unsafe { libc::fcntl(1, libc::F_GETFD) } == -1;
        STDOUT_CLOSED.store(closed, Ordering::Relaxed);
    }
}

/// Restores the default SIGPIPE disposition: a write to a closed pipe ends the process.
/// For the one-shot commands only, called before they start any thread.
pub fn end_quietly_on_closed_pipe() {
    #[cfg(unix)]
    // SAFETY: signal(2) with SIG_DFL installs no handler code; it only changes what the
    // kernel does with SIGPIPE, which is always sound.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Writes `text` to standard output and flushes it.
pub fn print(text: &str) -> anyhow::Result<()> {
    stdout_is_open()?;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .context("cannot write to standard output")
}

/// An error when standard output was closed at start (see [`note_closed_stdout`]),
/// for a command about to write its output there.
pub(crate) fn stdout_is_open() -> anyhow::Result<()> {
    anyhow::ensure!(
        !STDOUT_CLOSED.load(Ordering::Relaxed),
        "cannot write to standard output: it is closed (started with >&-); nothing was written"
    );
    Ok(())
}

/// Writes one line to standard error; a line that cannot be written is dropped.
pub fn note(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}
