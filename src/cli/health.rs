//! `gpu-sentinel health [--url URL] [--gpu N|UUID] [--format text|json]`: the running
//! agent's verdict as a health check for schedulers.
//!
//! It asks `/api/v1/health` once and answers the way Slurm's `HealthCheckProgram` and
//! node-problem-detector's custom plugins read a check: exit status 0 when the node (or
//! the GPU asked about) is healthy or degraded, 1 when unhealthy, 2 when unknown (the agent
//! unreachable, not ready, refusing, answering nonsense, or silent past the timeout); and
//! one line of at most 80 characters naming the worst component, its GPU and the repair
//! action, which becomes the node condition's message or the drain reason. `--format json`
//! prints the document instead (the exit status is the same).
//!
//! Credentials for an agent behind basic authentication come from
//! `GPU_SENTINEL_AGENT_USER` and `GPU_SENTINEL_AGENT_PASSWORD`, never the command line
//! (where `ps` shows them); an https URL is verified against the bundled Mozilla roots, or
//! against the certificates of `--ca-file`.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::api::{GpuHealthView, HealthDocument};
use crate::engine::health::{Action, State, Verdict};

#[derive(Debug, Clone, Args)]
pub struct HealthArgs {
    /// Base URL of the running agent (or the full /api/v1/health URL).
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:10400")]
    pub url: String,
    /// Judge only this GPU: its NVML index or UUID.
    #[arg(long, value_name = "N|UUID")]
    pub gpu: Option<String>,
    #[arg(long, value_enum, default_value_t = HealthFormat::Text)]
    pub format: HealthFormat,
    /// Give up (unknown, exit 2) after this long.
    #[arg(long, value_name = "D", default_value = "5s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// PEM file of the certificate authorities an https agent's certificate is checked
    /// against (instead of the bundled Mozilla roots).
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HealthFormat {
    Text,
    Json,
}

/// The exit status a command chose, its output already written: `main` exits with it
/// and prints nothing more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("exit status {0}")]
pub struct Exit(pub u8);

/// Longest line printed: node-problem-detector's and Slurm's readers take one short line.
pub const MAX_LINE: usize = 80;

/// Exit statuses, as node-problem-detector's custom plugins define them.
const OK: u8 = 0;
const PROBLEM: u8 = 1;
const UNKNOWN: u8 = 2;

pub fn health(args: &HealthArgs) -> anyhow::Result<()> {
    let (status, text) = match verdict(args) {
        Ok((status, text)) => (status, text),
        Err(why) => (UNKNOWN, unknown(args.format, &why)),
    };
    super::output::print(&text)?;
    match status {
        OK => Ok(()),
        code => Err(Exit(code).into()),
    }
}

/// The output for an unknown verdict.
fn unknown(format: HealthFormat, why: &str) -> String {
    match format {
        HealthFormat::Text => format!("{}\n", fit(&format!("unknown: {why}"))),
        HealthFormat::Json => format!(
            "{}\n",
            serde_json::json!({ "state": "unknown", "reason": why })
        ),
    }
}

/// The exit status and output of a verdict the agent gave; `Err` with the reason the
/// verdict is unknown.
fn verdict(args: &HealthArgs) -> Result<(u8, String), String> {
    let url = health_url(&args.url);
    let body = fetch(&url, args)?;
    let mut doc: HealthDocument<'static> = serde_json::from_str(&body)
        .map_err(|e| format!("not a health document ({e}) from {url}"))?;
    if let Some(wanted) = &args.gpu {
        let index: Option<u32> = wanted.trim().parse().ok();
        doc.gpus.retain(|g| match index {
            Some(i) => g.index == i,
            None => g.uuid.eq_ignore_ascii_case(wanted.trim()),
        });
        if doc.gpus.is_empty() {
            return Err(format!("GPU {wanted} is not among the agent's GPUs"));
        }
        doc.node = std::borrow::Cow::Owned(Vec::new());
        doc.state = doc.gpus[0].state;
        doc.action = doc.gpus[0].action;
    }
    let status = if doc.state == State::Unhealthy {
        PROBLEM
    } else {
        OK
    };
    let text = match args.format {
        HealthFormat::Text => format!("{}\n", line(&doc)),
        HealthFormat::Json => {
            let mut json = serde_json::to_string_pretty(&doc)
                .map_err(|e| format!("cannot write the document as JSON: {e}"))?;
            json.push('\n');
            json
        }
    };
    Ok((status, text))
}

/// `/api/v1/health` under a base URL, unless the URL names it already.
pub(crate) fn health_url(base: &str) -> String {
    let base = base.trim().trim_end_matches('/');
    let base = if base.contains("://") {
        base.to_string()
    } else {
        format!("http://{base}")
    };
    if base.ends_with("/api/v1/health") {
        base
    } else {
        format!("{base}/api/v1/health")
    }
}

/// Basic-auth credentials for the agent, from the environment.
fn credentials() -> Result<Option<(String, String)>, String> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    match (
        var("GPU_SENTINEL_AGENT_USER"),
        var("GPU_SENTINEL_AGENT_PASSWORD"),
    ) {
        (Some(user), Some(password)) => {
            crate::redact::register_secret(&password);
            Ok(Some((user, password)))
        }
        (None, None) => Ok(None),
        _ => Err("GPU_SENTINEL_AGENT_USER and GPU_SENTINEL_AGENT_PASSWORD go together".into()),
    }
}

fn client(args: &HealthArgs) -> Result<ureq::Agent, String> {
    let mut config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(args.timeout));
    if let Some(path) = &args.ca_file {
        let pem = std::fs::read(path)
            .map_err(|e| format!("cannot read --ca-file {}: {e}", path.display()))?;
        let certs: Vec<ureq::tls::Certificate<'static>> = ureq::tls::parse_pem(&pem)
            .filter_map(|item| match item {
                Ok(ureq::tls::PemItem::Certificate(cert)) => Some(cert),
                _ => None,
            })
            .collect();
        if certs.is_empty() {
            return Err(format!(
                "--ca-file {} holds no PEM certificate",
                path.display()
            ));
        }
        config = config.tls_config(
            ureq::tls::TlsConfig::builder()
                .root_certs(ureq::tls::RootCerts::Specific(Arc::new(certs)))
                .build(),
        );
    }
    Ok(config.build().into())
}

fn fetch(url: &str, args: &HealthArgs) -> Result<String, String> {
    let agent = client(args)?;
    let mut request = agent.get(url);
    if let Some((user, password)) = credentials()? {
        use base64::Engine as _;
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        request = request.header("Authorization", format!("Basic {token}"));
    }
    let mut response = request.call().map_err(|e| match e {
        ureq::Error::Timeout(_) => format!("no answer within {:?} from {url}", args.timeout),
        e => format!("cannot reach {url}: {e}"),
    })?;
    let status = response.status().as_u16();
    let body = response
        .body_mut()
        .read_to_string()
        .map_err(|e| format!("cannot read the answer of {url}: {e}"))?;
    match status {
        200 => Ok(body),
        503 => Err("the agent has not finished its first collection".into()),
        401 => Err("the agent wants credentials: GPU_SENTINEL_AGENT_USER, _PASSWORD".into()),
        404 => Err(format!(
            "HTTP 404 (an agent without health verdicts?) from {url}"
        )),
        code => Err(format!("HTTP {code} from {url}")),
    }
}

/// The worst verdict of the document: its GPU (none for a node component) and the
/// component. Worst by state, then action; of equals, the lowest GPU, then the order the
/// agent lists components in.
fn worst<'d, 'a>(
    doc: &'d HealthDocument<'a>,
) -> Option<(Option<&'d GpuHealthView<'a>>, &'d Verdict)> {
    let mut best: Option<(Option<&'d GpuHealthView<'a>>, &'d Verdict)> = None;
    let candidates = (doc.gpus.iter())
        .flat_map(|g| g.components.iter().map(move |c| (Some(g), c)))
        .chain(doc.node.iter().map(|c| (None, c)));
    for (gpu, verdict) in candidates {
        if best.is_none_or(|(_, b)| verdict.rank() > b.rank()) {
            best = Some((gpu, verdict));
        }
    }
    best
}

/// The one line: `unhealthy: GPU 4 xid, drain_and_reboot: XID 79 …`, at most
/// [`MAX_LINE`] characters.
pub fn line(doc: &HealthDocument<'_>) -> String {
    let mut out = String::new();
    match worst(doc) {
        Some((gpu, v)) if (v.state, v.action) != (State::Healthy, Action::None) => {
            let _ = write!(out, "{}: ", doc.state.as_str());
            match gpu {
                Some(g) => {
                    let _ = write!(out, "GPU {} ", g.index);
                }
                None => out.push_str("node "),
            }
            let _ = write!(out, "{}, {}: {}", v.component, v.action.as_str(), v.reason);
        }
        _ => {
            let _ = write!(out, "{}: ", doc.state.as_str());
            match doc.gpus.as_slice() {
                [g] => {
                    let _ = write!(out, "GPU {} ({})", g.index, g.uuid);
                }
                gpus => {
                    let _ = write!(out, "{} GPUs, every component", gpus.len());
                }
            }
        }
    }
    fit(&out)
}

/// `text` on one line of at most [`MAX_LINE`] characters, cut with `...` when longer.
fn fit(text: &str) -> String {
    let one: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if one.chars().count() <= MAX_LINE {
        return one;
    }
    let mut cut: String = one.chars().take(MAX_LINE - 3).collect();
    cut.truncate(cut.trim_end().len());
    cut.push_str("...");
    cut
}

#[cfg(test)]
mod tests;
