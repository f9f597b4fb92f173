//! The web configuration file of Prometheus exporters (`--web.config.file`): TLS, client
//! certificates, basic-auth users, response headers and a rate limit, read exactly as
//! exporter-toolkit reads it, so the file a site already gives node_exporter or
//! dcgm-exporter works here unchanged.
//!
//! [`WebConfig::load`] reads and checks everything `run` will use — the YAML (strict: an
//! unknown key is an error with its line), the bcrypt hashes, and the TLS settings, by
//! building the rustls configuration and loading the certificate, key and client CAs.
//! `check-config` calls the same function, so it accepts exactly what `run` starts with.
//! Relative file names are taken from the file's own folder, as exporter-toolkit does.
//!
//! What differs from exporter-toolkit, each refused by name rather than ignored: TLS 1.0
//! and 1.1, CBC and RSA-key-exchange suites and the P-521 curve (rustls has none of them),
//! the client-certificate policies that accept a certificate without verifying it,
//! `client_allowed_sans`, and bcrypt costs above 14 ([`file::MAX_BCRYPT_COST`]).
//! `rate_limit` is a bucket per client address rather than one for all ([`rate`]), and
//! requests whose credentials were already verified are not counted. exporter-toolkit
//! re-reads the whole file on every request; here the certificate and key files are
//! re-read when they change ([`tls`]), and users,
//! headers and policies are read at start.

mod auth;
pub mod expiry;
mod file;
mod locate;
mod rate;
mod tls;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use auth::{BasicAuth, Verdict};
pub(crate) use file::BcryptHash;
#[cfg(test)]
pub(crate) use file::GoDuration;
pub(crate) use rate::RateLimiter;

use file::FileConfig;

/// A checked web configuration, ready to serve with.
#[derive(Debug, Clone)]
pub struct WebConfig {
    /// The file it was read from.
    pub path: PathBuf,
    /// The rustls configuration (its certificate re-read when the files change); None:
    /// plain HTTP.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// The certificate served at start (with TLS): [`expiry::Leaf::serve`] records and
    /// checks its expiry when serving begins.
    pub(crate) leaf: Option<expiry::Leaf>,
    /// HTTP/2 over TLS (ALPN `h2`); plain HTTP is always HTTP/1.1, as in exporter-toolkit.
    pub http2: bool,
    /// Headers added to every response, in exporter-toolkit's allowed set.
    pub headers: Vec<(&'static str, String)>,
    /// User name → bcrypt hash; empty: no authentication.
    pub users: BTreeMap<String, BcryptHash>,
    /// Token bucket of each client address over its requests not already authenticated:
    /// one token per `every`, at most `burst` stored.
    pub rate_limit: Option<(Duration, u32)>,
}

/// Why a web configuration file was refused: where, and what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.render())]
pub struct WebConfigError {
    pub path: PathBuf,
    /// 1-based line, where one could be found.
    pub line: Option<usize>,
    /// Dotted key (`tls_server_config.cert_file`), where one applies.
    pub key: Option<String>,
    pub message: String,
}

impl WebConfigError {
    fn render(&self) -> String {
        let mut out = self.path.display().to_string();
        if let Some(line) = self.line {
            out.push_str(&format!(":{line}"));
        }
        out.push_str(": ");
        if let Some(key) = &self.key {
            out.push_str(key);
            out.push_str(": ");
        }
        out.push_str(&self.message);
        out
    }
}

/// A problem before the file's name is attached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub line: Option<usize>,
    pub key: Option<String>,
    pub message: String,
}

impl Problem {
    /// A problem with a dotted key; the line is looked up in `text`.
    fn at(text: &str, key: &str, message: String) -> Problem {
        let path: Vec<&str> = key.split('.').collect();
        Problem {
            line: locate::line_of_key(text, &path),
            key: Some(key.to_string()),
            message,
        }
    }
}

impl WebConfig {
    /// The warning `run` logs when it starts serving this configuration's certificate
    /// (expired, or ending within 14 days); None without TLS or for a certificate good for
    /// longer. `check-config` prints it.
    pub fn certificate_warning(&self) -> Option<String> {
        self.leaf.as_ref().and_then(expiry::Leaf::warning)
    }

    /// Reads and checks a web configuration file.
    pub fn load(path: &Path) -> Result<WebConfig, WebConfigError> {
        let error = |p: Problem| WebConfigError {
            path: path.to_owned(),
            line: p.line,
            key: p.key,
            message: p.message,
        };
        let bytes = std::fs::read(path).map_err(|e| {
            error(Problem {
                line: None,
                key: None,
                message: format!("cannot read the web configuration file: {e}"),
            })
        })?;
        let text = String::from_utf8(bytes).map_err(|_| {
            error(Problem {
                line: None,
                key: None,
                message: "is not UTF-8 text".into(),
            })
        })?;
        let dir = path.parent().unwrap_or(Path::new("."));
        WebConfig::parse(&text, dir)
            .map(|mut config| {
                config.path = path.to_owned();
                config
            })
            .map_err(error)
    }

    /// Checks configuration text whose relative file names are under `dir`.
    pub fn parse(text: &str, dir: &Path) -> Result<WebConfig, Problem> {
        let file = parse_yaml(text)?;
        let tls_config = &file.tls_server_config;
        if tls_config
            .client_allowed_sans
            .as_ref()
            .is_some_and(|sans| !sans.is_empty())
        {
            return Err(Problem::at(
                text,
                "tls_server_config.client_allowed_sans",
                "is not supported: restrict clients with the CA in client_ca_file instead".into(),
            ));
        }
        let http = &file.http_server_config;
        let mut headers = Vec::new();
        for (header, value) in &http.headers {
            // Go leaves a header unset when its value is blank.
            if value.is_empty() {
                continue;
            }
            header.check_value(value).map_err(|message| {
                Problem::at(
                    text,
                    &format!("http_server_config.headers.{}", header.name()),
                    message,
                )
            })?;
            headers.push((header.name(), value.clone()));
        }
        let limit = &file.rate_limit;
        let rate_limit = match (limit.interval.0, limit.burst) {
            (interval, _) if interval.is_zero() => None,
            (_, 0) => {
                return Err(Problem::at(
                    text,
                    "rate_limit.burst",
                    "is 0, which would refuse every request; set it to 1 or more (or \
                     interval to 0 to turn the limit off)"
                        .into(),
                ));
            }
            (interval, burst) => Some((interval, burst)),
        };
        let (tls, leaf) = if tls_config.is_enabled() {
            let (config, leaf) = tls::server_config(tls_config, dir, http.http2)
                .map_err(|(key, message)| Problem::at(text, key, message))?;
            (Some(Arc::new(config)), Some(leaf))
        } else {
            (None, None)
        };
        Ok(WebConfig {
            path: PathBuf::new(),
            tls,
            leaf,
            http2: http.http2,
            headers,
            users: file.basic_auth_users,
            rate_limit,
        })
    }
}

/// The YAML as exporter-toolkit's structure; an empty document is the empty configuration.
fn parse_yaml(text: &str) -> Result<FileConfig, Problem> {
    let blank = text
        .lines()
        .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#') || l.trim() == "---");
    if blank {
        return Ok(FileConfig::default());
    }
    serde_norway::from_str::<FileConfig>(text).map_err(|e| {
        let full = e.to_string();
        // serde_norway appends " at line L column C"; the line is given on its own.
        let message = match full.rfind(" at line ") {
            Some(at) if e.location().is_some() => full[..at].to_string(),
            _ => full,
        };
        Problem {
            line: e.location().map(|l| l.line()),
            key: None,
            message,
        }
    })
}

#[cfg(test)]
mod tests;
