//! Alerts, notifications and receiver entries for notifier tests, with the labels every
//! alert carries (alertname, severity, hostname, gpu, uuid: README.md, "Alerting") and
//! realistic annotations.

use std::time::Duration;

use chrono::{DateTime, Utc};
use gpu_sentinel::alert::{Alert, AlertState, LabelSet, Notification};
use gpu_sentinel::config::ReceiverConfig;

pub const HOST: &str = "gpu-host-01";

pub fn at(rfc3339: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(rfc3339)
        .expect("a fixture time")
        .with_timezone(&Utc)
}

pub fn labels(pairs: &[(&str, &str)]) -> LabelSet {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A GPU alert on `HOST`, firing since 10:01 (active since 10:00).
pub fn alert(name: &str, severity: &str, gpu: u32) -> Alert {
    Alert {
        labels: labels(&[
            ("alertname", name),
            ("severity", severity),
            ("hostname", HOST),
            ("gpu", &gpu.to_string()),
            (
                "uuid",
                &format!("GPU-00000000-0000-0000-0000-00000000000{gpu}"),
            ),
        ]),
        annotations: labels(&[
            ("summary", &format!("GPU {gpu} on {HOST}: {name}")),
            (
                "description",
                "Failure risk 0.91 (≥ 0.70): corrected ECC 42/h (baseline 0.1/h), 3 remapped rows pending, PCIe replays 120/h.",
            ),
            ("runbook", "https://runbooks.example/gpu#failure-risk"),
        ]),
        state: AlertState::Firing,
        active_at: at("2024-05-01T10:00:00Z"),
        starts_at: Some(at("2024-05-01T10:01:00Z")),
        ends_at: None,
    }
}

/// The same alert, resolved at 10:21.
pub fn resolved(mut alert: Alert) -> Alert {
    alert.state = AlertState::Resolved;
    alert.ends_at = Some(at("2024-05-01T10:21:00Z"));
    alert
}

pub fn notification(receiver: &str, alerts: Vec<Alert>) -> Notification {
    Notification {
        receiver: receiver.to_string(),
        group_key: "{}:{alertname=\"GpuFailureRiskHigh\"}".to_string(),
        group_labels: labels(&[("alertname", "GpuFailureRiskHigh")]),
        alerts,
        created_at: at("2024-05-01T10:01:10Z"),
        external_url: "http://gpu-host-01:10400/api/v1/alerts".to_string(),
    }
}

/// A receiver entry as `[[alerting.receivers]]` would give it.
pub fn receiver(name: &str, kind: &str, url: Option<&str>) -> ReceiverConfig {
    ReceiverConfig {
        name: name.to_string(),
        kind: kind.into(),
        url: url.map(str::to_string),
        url_env: None,
        secret_env: None,
        send_resolved: true,
        max_per_minute: 0,
        timeout: Duration::from_secs(5),
        max_backoff: Duration::from_secs(300),
    }
}

/// An environment with nothing set.
pub fn no_env(_: &str) -> Option<String> {
    None
}
