//! Shared by the outbox, delivery and advice tests: a test [`Notifier`] that POSTs
//! notifications as JSON through the notifiers' own HTTP endpoint, sample notifications,
//! temporary directories and waiting for a condition. The receivers they send to are the
//! tests' one loopback HTTP server, `common::http_server`.
#![allow(dead_code)] // each test binary uses a different part of this

use std::path::PathBuf;
use std::time::{Duration, Instant};

use chrono::Utc;
use gpu_sentinel::alert::notify::http::Endpoint;
use gpu_sentinel::alert::notify::{Notifier, NotifyError};
use gpu_sentinel::alert::{Alert, AlertState, LabelSet, Notification};

/// A fresh, empty directory under the system temp dir, unique to this test and process.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "gs-{name}-{}-{}",
        std::process::id(),
        Utc::now().timestamp_nanos_opt().unwrap_or(0)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// A notification to `receiver` for group `group`, with one alert whose `gpu` label is the
/// group name.
pub fn notification(receiver: &str, group: &str, state: AlertState) -> Notification {
    let labels: LabelSet = [
        ("alertname", "GpuLost"),
        ("severity", "critical"),
        ("hostname", "node-1"),
        ("gpu", group),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let now = Utc::now();
    Notification {
        receiver: receiver.into(),
        group_key: group.into(),
        group_labels: [("gpu".to_string(), group.to_string())].into(),
        alerts: vec![Alert {
            labels,
            annotations: [("summary".to_string(), format!("GPU {group} lost"))].into(),
            state,
            active_at: now,
            starts_at: Some(now),
            ends_at: (state == AlertState::Resolved).then_some(now),
        }],
        created_at: now,
        external_url: "http://node-1:10400/api/v1/alerts".into(),
    }
}

/// A test receiver integration: POSTs the notification itself as JSON through the
/// notifiers' own HTTP endpoint, so the delivery tests run on the real outcome
/// classification (2xx ok; 5xx, 429 and transport errors retry, honouring `Retry-After`;
/// other 4xx drop).
pub struct HttpNotifier(Endpoint);

impl HttpNotifier {
    pub fn new(url: &str, timeout: Duration) -> HttpNotifier {
        HttpNotifier(Endpoint::new(url, timeout).expect("a valid test URL"))
    }
}

impl Notifier for HttpNotifier {
    fn send(&self, notification: &Notification) -> Result<(), NotifyError> {
        let body = serde_json::to_vec(notification).map_err(|e| NotifyError::Drop {
            reason: e.to_string(),
        })?;
        self.0.post_json(None, &body, None)
    }
}

/// Polls `done` every 20 ms until it holds or `limit` passes; returns whether it held.
pub fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    done()
}
