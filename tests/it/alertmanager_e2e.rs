//! End to end with a real Alertmanager (Debian's `prometheus-alertmanager`, started here on
//! loopback): gpu-sentinel's Alertmanager notifier pushes alerts; Alertmanager's API must
//! show them with README.md's labels (alertname, severity, hostname, gpu, uuid) and the
//! fingerprints we compute; Alertmanager must forward them, firing then resolved, to a
//! webhook served by this test. Alertmanager's forwarded body and the body of our own
//! webhook notifier are read by one parser of the version-4 payload, so the two are held
//! to a single definition.
//!
//! Without the binary the test skips, unless GPU_SENTINEL_REQUIRE_TOOLS=1 (scripts/test.sh).

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use common::alerts::labels;
use common::http_server::{Answer, HttpServer, Request};
use gpu_sentinel::alert::notify::Notifier;
use gpu_sentinel::alert::notify::alertmanager::AlertmanagerNotifier;
use gpu_sentinel::alert::notify::webhook::WebhookNotifier;
use gpu_sentinel::alert::{Alert, AlertState, Notification};
use serde::Deserialize;

const TIMEOUT: Duration = Duration::from_secs(5);
const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// Alertmanager's webhook message, version 4, as its documentation defines it. Every
/// field is required; unknown fields are tolerated here and compared separately.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WebhookMessage {
    version: String,
    group_key: String,
    truncated_alerts: u64,
    status: String,
    receiver: String,
    group_labels: BTreeMap<String, String>,
    common_labels: BTreeMap<String, String>,
    common_annotations: BTreeMap<String, String>,
    #[serde(rename = "externalURL")]
    external_url: String,
    alerts: Vec<WebhookAlert>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WebhookAlert {
    status: String,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    starts_at: String,
    ends_at: String,
    #[serde(rename = "generatorURL")]
    generator_url: String,
    fingerprint: String,
}

/// Parses and checks a version-4 body: statuses, times, fingerprints, and that a firing
/// alert's end is Go's zero time while a resolved one's is a real time after its start.
fn parse_v4(request: &Request) -> WebhookMessage {
    let message: WebhookMessage = serde_json::from_slice(&request.body)
        .unwrap_or_else(|e| panic!("not a version-4 webhook body ({e}): {}", request.text()));
    assert_eq!(message.version, "4");
    assert!(!message.group_key.is_empty() && !message.receiver.is_empty());
    assert!(["firing", "resolved"].contains(&message.status.as_str()));
    assert_eq!(message.truncated_alerts, 0);
    let _ = (
        &message.group_labels,
        &message.common_annotations,
        &message.external_url,
    );
    for alert in &message.alerts {
        assert!(
            alert.fingerprint.len() == 16
                && alert.fingerprint.chars().all(|c| c.is_ascii_hexdigit()),
            "fingerprint {:?}",
            alert.fingerprint
        );
        let starts = time(&alert.starts_at);
        match alert.status.as_str() {
            "firing" => assert_eq!(alert.ends_at, ZERO_TIME),
            "resolved" => assert!(time(&alert.ends_at) >= starts, "{alert:?}"),
            other => panic!("alert status {other:?}"),
        }
        assert!(!alert.labels.is_empty());
        let _ = (&alert.annotations, &alert.generator_url);
    }
    let firing = message.alerts.iter().any(|a| a.status == "firing");
    assert_eq!(message.status, if firing { "firing" } else { "resolved" });
    message
}

/// The JSON keys of a body and of its alerts, for comparing two payloads' shapes.
fn shape(request: &Request) -> (BTreeSet<String>, BTreeSet<String>) {
    let doc = request.json();
    let keys = |v: &serde_json::Value| {
        v.as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default()
    };
    (keys(&doc), keys(&doc["alerts"][0]))
}

fn time(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .unwrap_or_else(|e| panic!("{text:?} is not RFC 3339: {e}"))
        .with_timezone(&Utc)
}

/// A running Alertmanager, killed (and its directory removed) when dropped.
struct Alertmanager {
    child: Child,
    base: String,
    dir: PathBuf,
    http: ureq::Agent,
}

impl Alertmanager {
    fn start(binary: &Path, webhook: &str) -> Alertmanager {
        let port = common::free_port();
        let dir =
            std::env::temp_dir().join(format!("gpu-sentinel-am-{}-{port}", std::process::id()));
        std::fs::create_dir_all(dir.join("data")).expect("alertmanager dir");
        // Short waits so the test sees notifications within seconds.
        let config = format!(
            "route:\n  receiver: hook\n  group_by: ['alertname', 'hostname', 'gpu']\n  group_wait: 1s\n  group_interval: 1s\n  repeat_interval: 1h\nreceivers:\n  - name: hook\n    webhook_configs:\n      - url: '{webhook}'\n        send_resolved: true\n"
        );
        std::fs::write(dir.join("alertmanager.yml"), config).expect("alertmanager config");
        let child = Command::new(binary)
            .arg(format!(
                "--config.file={}",
                dir.join("alertmanager.yml").display()
            ))
            .arg(format!("--storage.path={}", dir.join("data").display()))
            .arg("--cluster.listen-address=")
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let http: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(TIMEOUT))
            .build()
            .into();
        let am = Alertmanager {
            child,
            base: format!("http://127.0.0.1:{port}"),
            dir,
            http,
        };
        am.wait_until("ready", Duration::from_secs(30), |am| {
            am.get("/-/ready").is_some_and(|(status, _)| status == 200)
        });
        am
    }

    fn get(&self, path: &str) -> Option<(u16, String)> {
        let mut response = self.http.get(format!("{}{path}", self.base)).call().ok()?;
        let status = response.status().as_u16();
        Some((status, response.body_mut().read_to_string().ok()?))
    }

    /// Alertmanager's current alerts (`GET /api/v2/alerts`).
    fn alerts(&self) -> Vec<serde_json::Value> {
        self.get("/api/v2/alerts")
            .and_then(|(_, body)| serde_json::from_str::<serde_json::Value>(&body).ok())
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
    }

    fn wait_until(&self, what: &str, limit: Duration, mut done: impl FnMut(&Self) -> bool) {
        let began = Instant::now();
        while began.elapsed() < limit {
            if done(self) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("Alertmanager: {what} not within {limit:?}");
    }
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn gpu_alert(name: &str, severity: &str, gpu: u32, since: DateTime<Utc>) -> Alert {
    Alert {
        labels: labels(&[
            ("alertname", name),
            ("severity", severity),
            ("hostname", "gpu-host-01"),
            ("gpu", &gpu.to_string()),
            (
                "uuid",
                &format!("GPU-6a1f0c2e-0000-4000-8000-00000000000{gpu}"),
            ),
        ]),
        annotations: labels(&[
            ("summary", &format!("GPU {gpu} on gpu-host-01: {name}")),
            (
                "description",
                "Failure risk 0.91: corrected ECC 42/h, 3 rows pending remap.",
            ),
            ("runbook", "https://runbooks.example/gpu"),
        ]),
        state: AlertState::Firing,
        active_at: since,
        starts_at: Some(since),
        ends_at: None,
    }
}

fn notification(alerts: Vec<Alert>) -> Notification {
    Notification {
        receiver: "am".into(),
        group_key: "am".into(),
        group_labels: Default::default(),
        alerts,
        created_at: Utc::now(),
        external_url: "http://gpu-host-01:10400/api/v1/alerts".into(),
    }
}

/// Webhook requests until `done` holds for the alerts seen (by alertname → status).
fn collect(
    hook: &HttpServer,
    limit: Duration,
    done: impl Fn(&BTreeMap<String, String>) -> bool,
) -> Vec<Request> {
    let began = Instant::now();
    loop {
        let requests = hook.requests();
        let mut seen = BTreeMap::new();
        for r in &requests {
            for a in parse_v4(r).alerts {
                seen.insert(a.labels["alertname"].clone(), a.status.clone());
            }
        }
        if done(&seen) {
            return requests;
        }
        assert!(
            began.elapsed() < limit,
            "webhook saw {seen:?} within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn alertmanager_receives_pushed_alerts_and_forwards_them_as_version_4() {
    let Some(binary) = common::tool("prometheus-alertmanager") else {
        return;
    };
    let hook = HttpServer::start(vec![Answer::ok()]);
    let am = Alertmanager::start(&binary, &hook.url("/hook"));
    let notifier =
        AlertmanagerNotifier::new(&am.base, None, TIMEOUT, Duration::from_secs(60)).expect("n");

    let since = Utc::now() - chrono::Duration::minutes(1);
    let lost = gpu_alert("GpuLost", "critical", 1, since);
    let risk = gpu_alert("GpuFailureRiskHigh", "warning", 3, since);
    notifier
        .send(&notification(vec![lost.clone(), risk.clone()]))
        .expect("Alertmanager accepts the alerts");

    // (a) Alertmanager's API shows them, with our labels and our fingerprints.
    am.wait_until("both alerts listed", Duration::from_secs(20), |am| {
        am.alerts().len() == 2
    });
    for shown in am.alerts() {
        let name = shown["labels"]["alertname"].as_str().expect("alertname");
        let source = if name == "GpuLost" { &lost } else { &risk };
        assert_eq!(shown["labels"], serde_json::json!(source.labels), "{shown}");
        for label in ["alertname", "severity", "hostname", "gpu", "uuid"] {
            assert!(
                shown["labels"][label].is_string(),
                "{label} missing: {shown}"
            );
        }
        assert_eq!(shown["annotations"], serde_json::json!(source.annotations));
        assert_eq!(shown["status"]["state"], "active");
        assert_eq!(
            shown["fingerprint"].as_str(),
            Some(format!("{:016x}", source.fingerprint()).as_str()),
            "our fingerprint is Alertmanager's"
        );
        let ends = time(shown["endsAt"].as_str().expect("endsAt"));
        assert!(
            ends > Utc::now() + chrono::Duration::minutes(3),
            "endsAt {ends}"
        );
    }

    // (b) Alertmanager forwards them to the webhook as version 4.
    let requests = collect(&hook, Duration::from_secs(30), |seen| {
        seen.get("GpuLost").map(String::as_str) == Some("firing")
            && seen.get("GpuFailureRiskHigh").map(String::as_str) == Some("firing")
    });
    let forwarded = parse_v4(&requests[0]);
    assert_eq!(forwarded.receiver, "hook");
    let alert = &forwarded.alerts[0];
    let source = if alert.labels["alertname"] == "GpuLost" {
        &lost
    } else {
        &risk
    };
    assert_eq!(alert.labels, source.labels);
    assert_eq!(alert.fingerprint, format!("{:016x}", source.fingerprint()));
    assert_eq!(
        alert.generator_url,
        "http://gpu-host-01:10400/api/v1/alerts"
    );
    assert_eq!(time(&alert.starts_at), since);
    assert_eq!(forwarded.common_labels, source.labels);

    // Our own webhook notifier's body, read by the same parser, has the same shape.
    let ours_server = HttpServer::start(vec![Answer::ok()]);
    WebhookNotifier::new(&ours_server.url("/hook"), None, TIMEOUT)
        .expect("n")
        .send(&notification(vec![lost.clone()]))
        .expect("delivered");
    let ours_request = &ours_server.requests()[0];
    let ours = parse_v4(ours_request);
    assert_eq!(ours.alerts[0].labels, lost.labels);
    assert_eq!(
        ours.alerts[0].fingerprint,
        format!("{:016x}", lost.fingerprint())
    );
    assert_eq!(
        shape(ours_request),
        shape(&requests[0]),
        "same keys as Alertmanager's"
    );

    // Resolution: pushed with its real end, forwarded as resolved, gone from the API.
    let ended = Utc::now();
    let mut resolved = lost.clone();
    resolved.state = AlertState::Resolved;
    resolved.ends_at = Some(ended);
    notifier
        .send(&notification(vec![resolved, risk.clone()]))
        .expect("Alertmanager accepts the resolution");
    let requests = collect(&hook, Duration::from_secs(30), |seen| {
        seen.get("GpuLost").map(String::as_str) == Some("resolved")
    });
    let message = requests
        .iter()
        .map(parse_v4)
        .find(|m| m.alerts.iter().any(|a| a.status == "resolved"))
        .expect("a resolved message");
    assert_eq!(message.status, "resolved");
    let end = time(&message.alerts[0].ends_at);
    assert!(
        (end - ended).num_milliseconds().abs() < 1000,
        "{end} vs {ended}"
    );
    am.wait_until(
        "the resolved alert leaves the list",
        Duration::from_secs(20),
        |am| {
            let alerts = am.alerts();
            alerts.len() == 1 && alerts[0]["labels"]["alertname"] == "GpuFailureRiskHigh"
        },
    );
}

/// The agent itself, on the accelerated simulator with an Alertmanager receiver: its
/// alerts appear in a real Alertmanager with README.md's labels, and Alertmanager
/// forwards them as version-4 webhooks.
#[test]
fn the_agent_pushes_the_simulators_alerts_into_a_real_alertmanager() {
    let Some(binary) = common::tool("prometheus-alertmanager") else {
        return;
    };
    let hook = HttpServer::start(vec![Answer::ok()]);
    let am = Alertmanager::start(&binary, &hook.url("/hook"));
    let config = common::temp_file(
        "agent-am.toml",
        &format!(
            "[simulation]\nfault_hours = 2.0\n\
             [[alerting.receivers]]\nname = \"am\"\nkind = \"alertmanager\"\nurl = \"{}\"\n\
             [alerting.route]\nreceiver = \"am\"\n",
            am.base
        ),
    );
    let _agent = common::Agent::start(
        &[
            "--simulate",
            "--sim-speed",
            "600",
            "--config",
            config.to_str().unwrap(),
        ],
        &[],
    );
    am.wait_until("GpuLost from the agent", Duration::from_secs(60), |am| {
        am.alerts()
            .iter()
            .any(|a| a["labels"]["alertname"] == "GpuLost")
    });
    let alerts = am.alerts();
    let lost = alerts
        .iter()
        .find(|a| a["labels"]["alertname"] == "GpuLost")
        .expect("GpuLost");
    for label in ["alertname", "severity", "hostname", "gpu", "uuid"] {
        assert!(lost["labels"][label].is_string(), "{label}: {lost}");
    }
    assert_eq!(lost["status"]["state"], "active");
    let forwarded = hook.wait_for(1, Duration::from_secs(30));
    let message = parse_v4(&forwarded[0]);
    assert!(!message.alerts.is_empty());
}
