//! Log output: what is logged (`RUST_LOG`, `info` by default), where (stderr), and what it
//! may never say.
//!
//! * **No secrets, at any level.** Every line goes through [`crate::redact::scrub`] on its
//!   way out, which knows the secrets of every receiver and of the advisor (registered when
//!   they are built) and the shapes of URLs that carry tokens.
//! * **The HTTP client stays quiet.** ureq, ureq-proto and rustls (through the `log`
//!   bridge) print request lines, headers and hex dumps of the bytes sent at debug and
//!   trace — webhook URLs and their tokens among them, split across lines where no
//!   scrubbing can find them. Their events are capped at `info` whatever `RUST_LOG` asks;
//!   their info, warn and error messages name no URL.
//! * **Colour only on a terminal**: a file or journald gets plain text.

use std::io::{IsTerminal as _, Write as _};

use tracing::{Level, Metadata};
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::{EnvFilter, filter_fn};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// Crates whose events are capped at [`HTTP_CLIENT_CAP`].
const HTTP_CLIENT: [&str; 3] = ["ureq", "ureq_proto", "rustls"];

/// The most verbose level the HTTP client may log at: below it, it prints URLs.
const HTTP_CLIENT_CAP: Level = Level::INFO;

/// Installs the process's log output. Called once, first thing in `main`; a second call
/// changes nothing.
pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let output = tracing_subscriber::fmt::layer()
        .with_writer(ScrubbedStderr)
        .with_ansi(std::io::stderr().is_terminal())
        // The writer never fails (a line that cannot be written is dropped in its Drop), but
        // a failure the subscriber did see would be reported with `eprintln!`, which panics
        // the logging thread when stderr is closed.
        .log_internal_errors(false)
        .with_filter(filter)
        .with_filter(filter_fn(allowed));
    // Fails only when a subscriber is already installed: then that one stays.
    let _ = tracing_subscriber::registry().with(output).try_init();
}

/// False for the HTTP client's events more verbose than its cap.
fn allowed(meta: &Metadata<'_>) -> bool {
    !(is_http_client(meta.target()) && *meta.level() > HTTP_CLIENT_CAP)
}

/// Whether `target` (a module path) is inside one of the [`HTTP_CLIENT`] crates.
fn is_http_client(target: &str) -> bool {
    let krate = target.split("::").next().unwrap_or(target);
    HTTP_CLIENT.contains(&krate)
}

/// Stderr, each event scrubbed before it is written.
struct ScrubbedStderr;

impl<'a> MakeWriter<'a> for ScrubbedStderr {
    type Writer = ScrubbedLine;

    fn make_writer(&'a self) -> ScrubbedLine {
        ScrubbedLine(Vec::new())
    }
}

/// One event's text, collected whole (a secret must not be split between two writes),
/// scrubbed and written when the formatter is done with it.
struct ScrubbedLine(Vec<u8>);

impl std::io::Write for ScrubbedLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for ScrubbedLine {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        let line = crate::redact::scrub(&String::from_utf8_lossy(&self.0));
        // A closed or full stderr loses the line; it must not take the agent with it.
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_http_client_is_capped_and_nothing_else() {
        for target in [
            "ureq",
            "ureq::run",
            "ureq_proto::util",
            "rustls::client::hs",
        ] {
            assert!(is_http_client(target), "{target}");
        }
        for target in [
            "gpu_sentinel_agent::alert::deliver",
            "ureqx",
            "hyper",
            "log",
        ] {
            assert!(!is_http_client(target), "{target}");
        }
    }
}
