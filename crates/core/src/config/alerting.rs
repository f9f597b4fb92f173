//! `[alerting]` and `[advice]`: rules, routing, receivers, the outbox, and LLM advice.
//!
//! The keys existing configurations rely on (`[[alerting.receivers]]` name/kind/url/
//! url_env/secret_env, `[alerting.route]` receiver/group_wait/group_interval/
//! repeat_interval and `[[alerting.route.routes]]` matchers/receiver/continue, `[advice]`)
//! keep their meaning; everything else here extends them.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;

use super::{Matcher, Parsed, duration};

/// `[alerting]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AlertingConfig {
    /// Where notifications go. Without receivers, alerts are evaluated and served on
    /// `/api/v1/alerts` and as metrics, but nothing is sent.
    pub receivers: Vec<ReceiverConfig>,
    pub route: RouteConfig,
    /// Tuning of the default rules, and added rules.
    pub rules: Vec<RuleConfig>,
    /// How often firing alerts are re-sent to Alertmanager receivers (Prometheus: 1m); their
    /// `endsAt` is set four intervals ahead, so Alertmanager resolves them if we go silent.
    #[serde(deserialize_with = "duration")]
    pub resend_interval: Duration,
    /// How long resolved alerts keep being re-sent to Alertmanager receivers (Prometheus: 15m).
    #[serde(deserialize_with = "duration")]
    pub resolved_retention: Duration,
    /// Most notifications the outbox holds; past it, the oldest resolved ones go first.
    pub outbox_max_entries: usize,
}

impl Default for AlertingConfig {
    fn default() -> Self {
        AlertingConfig {
            receivers: Vec::new(),
            route: RouteConfig::default(),
            rules: Vec::new(),
            resend_interval: Duration::from_secs(60),
            resolved_retention: Duration::from_secs(15 * 60),
            outbox_max_entries: 10_000,
        }
    }
}

/// What a receiver is: the integration its notifications go through. What each kind
/// takes (a secret?), how fast it may be sent to and what it is fed are facts of its
/// notifier, kept next to it (`alert::notify::kind`); configuration only needs to know
/// which kinds exist and which need a URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ReceiverKind {
    /// Alertmanager's `/api/v2/alerts`.
    Alertmanager,
    /// A JSON POST in Alertmanager's webhook format.
    Webhook,
    Slack,
    Feishu,
    DingTalk,
    WeCom,
    /// The agent's own log: for trying routing out.
    Log,
}

impl ReceiverKind {
    /// Every kind, in the order messages list them.
    pub const ALL: [ReceiverKind; 7] = [
        ReceiverKind::Alertmanager,
        ReceiverKind::Webhook,
        ReceiverKind::Slack,
        ReceiverKind::Feishu,
        ReceiverKind::DingTalk,
        ReceiverKind::WeCom,
        ReceiverKind::Log,
    ];

    /// As written in `kind = "…"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReceiverKind::Alertmanager => "alertmanager",
            ReceiverKind::Webhook => "webhook",
            ReceiverKind::Slack => "slack",
            ReceiverKind::Feishu => "feishu",
            ReceiverKind::DingTalk => "dingtalk",
            ReceiverKind::WeCom => "wecom",
            ReceiverKind::Log => "log",
        }
    }

    /// Whether the receiver posts to a URL (`url` or `url_env`): every kind but `log`,
    /// which writes to the agent's own log.
    pub fn needs_url(self) -> bool {
        self != ReceiverKind::Log
    }
}

impl fmt::Display for ReceiverKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ReceiverKind {
    type Err = UnknownKind;

    fn from_str(text: &str) -> Result<ReceiverKind, UnknownKind> {
        ReceiverKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == text)
            .ok_or_else(|| UnknownKind(text.to_string()))
    }
}

/// A `kind` that is none of [`ReceiverKind::ALL`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("kind {0:?} is not one of {known}", known = known_kinds())]
pub struct UnknownKind(pub String);

fn known_kinds() -> String {
    let names: Vec<&str> = ReceiverKind::ALL.iter().map(|k| k.as_str()).collect();
    names.join(", ")
}

/// `[[alerting.receivers]]`: one destination.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiverConfig {
    /// Name routes refer to.
    pub name: String,
    /// alertmanager | webhook | slack | feishu | dingtalk | wecom | log
    pub kind: Parsed<ReceiverKind>,
    /// Endpoint URL. Chat webhook URLs embed their token: prefer `url_env`.
    #[serde(default)]
    pub url: Option<String>,
    /// Environment variable holding the URL.
    #[serde(default)]
    pub url_env: Option<String>,
    /// Environment variable holding the signing secret (Feishu, DingTalk) or a bearer token
    /// (webhook, alertmanager).
    #[serde(default)]
    pub secret_env: Option<String>,
    /// Also notify when alerts resolve.
    #[serde(default = "yes")]
    pub send_resolved: bool,
    /// Most messages a minute to this receiver; beyond it, alerts are batched into one
    /// summary message rather than dropped. 0: the kind's default (20 for DingTalk and
    /// WeCom bots, unlimited otherwise).
    #[serde(default)]
    pub max_per_minute: u32,
    /// Time limit of one delivery attempt.
    #[serde(default = "ten_seconds", deserialize_with = "duration")]
    pub timeout: Duration,
    /// Longest wait between delivery attempts (the backoff doubles up to it, from 1 s); a
    /// `Retry-After` asking for longer is cut to it, and counted.
    #[serde(default = "five_minutes", deserialize_with = "duration")]
    pub max_backoff: Duration,
}

fn yes() -> bool {
    true
}

fn ten_seconds() -> Duration {
    Duration::from_secs(10)
}

fn five_minutes() -> Duration {
    Duration::from_secs(5 * 60)
}

/// `[alerting.route]` and its nested `routes`: Alertmanager's routing tree. A child route
/// inherits every option it leaves unset from its parent; the root's defaults are below.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RouteConfig {
    /// Receiver of alerts this route (or no child route) matches.
    pub receiver: String,
    /// Labels `label=value`, `label!=value`, `label=~regex`, `label!~regex`; all must hold.
    /// Empty on the root route (it matches everything).
    pub matchers: Vec<Parsed<Matcher>>,
    /// Labels whose values make up a group: alerts sharing them go out together
    /// (root default: alertname, hostname, gpu).
    pub group_by: Option<Vec<String>>,
    /// Wait after a group's first alert before notifying, to gather its siblings
    /// (root default 10s).
    #[serde(deserialize_with = "optional_duration")]
    pub group_wait: Option<Duration>,
    /// Wait between notifications of a group whose alerts changed (root default 1m).
    #[serde(deserialize_with = "optional_duration")]
    pub group_interval: Option<Duration>,
    /// Wait before repeating a notification for a group whose alerts are unchanged
    /// (root default 4h).
    #[serde(deserialize_with = "optional_duration")]
    pub repeat_interval: Option<Duration>,
    /// Keep matching sibling routes after this one matched.
    #[serde(rename = "continue")]
    pub continue_matching: bool,
    pub routes: Vec<RouteConfig>,
}

/// Root-route defaults, as in Alertmanager's example configuration.
pub const DEFAULT_GROUP_BY: [&str; 3] = ["alertname", "hostname", "gpu"];
pub const DEFAULT_GROUP_WAIT: Duration = Duration::from_secs(10);
pub const DEFAULT_GROUP_INTERVAL: Duration = Duration::from_secs(60);
pub const DEFAULT_REPEAT_INTERVAL: Duration = Duration::from_secs(4 * 3600);

/// `[[alerting.rules]]`: tune a default rule by name, or add a threshold rule.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// A default rule's name (`GpuFailureRiskHigh`, …) to tune, or a new rule's name.
    pub name: String,
    /// Turn the rule off.
    #[serde(default)]
    pub disabled: bool,
    /// How long the condition must hold before the alert fires.
    #[serde(default, rename = "for", deserialize_with = "optional_duration")]
    pub for_: Option<Duration>,
    /// critical | warning | info
    #[serde(default)]
    pub severity: Option<String>,
    /// For added rules: the per-GPU value compared (see the rule docs in config.toml).
    #[serde(default)]
    pub field: Option<String>,
    /// For added rules: `>`, `>=`, `<`, `<=`; for threshold default rules, their threshold.
    #[serde(default)]
    pub op: Option<String>,
    #[serde(default)]
    pub value: Option<f64>,
    /// Summary annotation; `{gpu}`, `{uuid}`, `{hostname}`, `{value}` are filled in.
    #[serde(default)]
    pub summary: Option<String>,
    /// Runbook hint annotation.
    #[serde(default)]
    pub runbook: Option<String>,
}

fn optional_duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    duration(d).map(Some)
}

/// `[advice]`: suggested actions from an OpenAI-compatible chat-completions endpoint.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdviceConfig {
    pub enabled: bool,
    /// API base; `/chat/completions` (or `/v1/chat/completions`) is appended.
    pub base_url: String,
    /// Model name. Names are retired over time, so it is configuration, never code.
    pub model: String,
    /// Environment variable holding the API key.
    pub api_key_env: String,
    /// An alert goes out without advice if advice is not back by then; the advice follows.
    #[serde(deserialize_with = "duration")]
    pub max_wait: Duration,
    /// Total time limit of one request (advice arriving later is still attached to the
    /// next notification of its group).
    #[serde(deserialize_with = "duration")]
    pub timeout: Duration,
    /// Most tokens of one answer.
    pub max_tokens: u32,
    /// Period of the fleet digest (utilization, waste, risk ranking); unset: no digest.
    #[serde(default, deserialize_with = "optional_duration")]
    pub digest_interval: Option<Duration>,
    /// Leave host names out of what is sent.
    pub redact_hostnames: bool,
    /// Leave user, pod and namespace names out of what is sent.
    pub redact_users: bool,
    /// Leave process names and command lines out of what is sent.
    pub redact_commands: bool,
}

impl Default for AdviceConfig {
    fn default() -> Self {
        AdviceConfig {
            enabled: false,
            base_url: "https://api.deepseek.com".into(),
            model: "deepseek-chat".into(),
            api_key_env: "DEEPSEEK_API_KEY".into(),
            max_wait: Duration::from_secs(10),
            timeout: Duration::from_secs(60),
            max_tokens: 400,
            digest_interval: None,
            redact_hostnames: false,
            redact_users: true,
            redact_commands: true,
        }
    }
}

/// Semantic checks of `[alerting]` and `[advice]`, as `(dotted key, message)`. Keys of
/// array entries carry their index (`alerting.receivers[1].kind`), so each message points
/// at its own entry's line.
pub(super) fn problems(alerting: &AlertingConfig, advice: &AdviceConfig) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut names = std::collections::BTreeSet::new();
    for (i, r) in alerting.receivers.iter().enumerate() {
        let key = |option: &str| format!("alerting.receivers[{i}].{option}");
        if !names.insert(r.name.as_str()) {
            out.push((
                key("name"),
                format!("receiver {:?} is defined twice", r.name),
            ));
        }
        if let Parsed::Invalid { error, .. } = &r.kind {
            out.push((key("kind"), format!("receiver {:?}: {error}", r.name)));
        }
        // An unknown kind is told as such above; it is not also let off its URL.
        let needs_url = r.kind.valid().is_none_or(|kind| kind.needs_url());
        if needs_url && r.url.is_none() && r.url_env.is_none() {
            out.push((
                format!("alerting.receivers[{i}]"),
                format!("receiver {:?} needs url or url_env", r.name),
            ));
        }
        if r.url.is_some() && r.url_env.is_some() {
            out.push((
                key("url_env"),
                format!("receiver {:?}: set url or url_env, not both", r.name),
            ));
        }
        // Every attempt would time out at once: the receiver would never be told anything.
        if r.timeout.is_zero() {
            out.push((
                key("timeout"),
                format!("receiver {:?}: must be more than 0s", r.name),
            ));
        }
    }
    // A group notifies its resolutions at most every group_interval; resolved alerts must
    // be kept at least that long, or a group loses them before it says so.
    let longest = longest_group_interval(&alerting.route, DEFAULT_GROUP_INTERVAL);
    if alerting.resolved_retention < longest {
        out.push((
            "alerting.resolved_retention".into(),
            format!(
                "{} is shorter than the longest group_interval ({}): resolutions would be \
                 forgotten before their group notifies them",
                humantime::format_duration(alerting.resolved_retention),
                humantime::format_duration(longest)
            ),
        ));
    }
    check_route(
        &alerting.route,
        "alerting.route",
        &names,
        alerting.receivers.is_empty(),
        &mut out,
    );
    for (i, rule) in alerting.rules.iter().enumerate() {
        if let Some(sev) = &rule.severity {
            if !["critical", "warning", "info"].contains(&sev.as_str()) {
                out.push((
                    format!("alerting.rules[{i}].severity"),
                    format!(
                        "rule {:?}: severity {sev:?} is not critical, warning or info",
                        rule.name
                    ),
                ));
            }
        }
        if let Some(op) = &rule.op {
            if ![">", ">=", "<", "<="].contains(&op.as_str()) {
                out.push((
                    format!("alerting.rules[{i}].op"),
                    format!("rule {:?}: op {op:?} is not >, >=, < or <=", rule.name),
                ));
            }
        }
    }
    if advice.enabled && advice.model.trim().is_empty() {
        out.push((
            "advice.model".into(),
            "a model name is needed when advice is enabled".into(),
        ));
    }
    if alerting.outbox_max_entries == 0 {
        out.push((
            "alerting.outbox_max_entries".into(),
            "must be at least 1: an outbox that holds nothing would drop every notification \
             a receiver has not taken yet"
                .into(),
        ));
    }
    if advice.max_tokens == 0 {
        out.push(("advice.max_tokens".into(), "must be above 0".into()));
    }
    if advice.timeout.is_zero() {
        out.push((
            "advice.timeout".into(),
            "must be more than 0s: every request would time out at once".into(),
        ));
    }
    if let Err(problem) = super::url::check_http_url(&advice.base_url) {
        out.push(("advice.base_url".into(), format!("the URL {problem}")));
    }
    out
}

/// The longest group_interval in the tree, unset ones inheriting from their parent.
fn longest_group_interval(route: &RouteConfig, inherited: Duration) -> Duration {
    let own = route.group_interval.unwrap_or(inherited);
    route
        .routes
        .iter()
        .map(|child| longest_group_interval(child, own))
        .fold(own, Duration::max)
}

fn check_route(
    route: &RouteConfig,
    key: &str,
    receivers: &std::collections::BTreeSet<&str>,
    none_defined: bool,
    out: &mut Vec<(String, String)>,
) {
    if !route.receiver.is_empty() && !receivers.contains(route.receiver.as_str()) {
        out.push((
            format!("{key}.receiver"),
            format!(
                "receiver {:?} is not defined in [[alerting.receivers]]",
                route.receiver
            ),
        ));
    }
    if route.receiver.is_empty() && !none_defined && route.routes.is_empty() {
        out.push((
            key.to_string(),
            "receivers are defined but the route names none (set [alerting.route] receiver)".into(),
        ));
    }
    for (i, m) in route.matchers.iter().enumerate() {
        if let Parsed::Invalid { text, error } = m {
            out.push((
                format!("{key}.matchers[{i}]"),
                format!("matcher {text:?}: {error}"),
            ));
        }
    }
    for (i, child) in route.routes.iter().enumerate() {
        check_route(
            child,
            &format!("{key}.routes[{i}]"),
            receivers,
            none_defined,
            out,
        );
    }
}
