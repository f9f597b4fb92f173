//! The delivery stage against real local HTTP receivers: an outage that ends (everything
//! delivered, each notification accepted once), `Retry-After`, rejected notifications, a
//! hanging receiver next to a healthy one, rate-limit batching, expiry and shutdown.

use crate::common;
use crate::delivery_support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use chrono::Utc;
use common::http_server::{Answer, HttpServer, Step};
use delivery_support::{HttpNotifier, notification, temp_dir, wait_until};
use gpu_sentinel::alert::AlertState::{Firing, Resolved};
use gpu_sentinel::alert::Notification;
use gpu_sentinel::alert::deliver::{Delivery, DeliveryOptions, Outcome, Target, merge};
use gpu_sentinel::alert::outbox::{FILE_NAME, Outbox};

fn fast() -> DeliveryOptions {
    DeliveryOptions {
        initial_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(400),
        jitter: 0.2,
        max_age: None,
        shutdown_grace: Duration::from_millis(500),
    }
}

fn target(name: &str, server: &HttpServer, max_per_minute: u32) -> Target {
    Target {
        name: name.into(),
        notifier: Box::new(HttpNotifier::new(&server.url(""), Duration::from_secs(5))),
        max_per_minute,
        max_backoff: None,
    }
}

/// Accepted (2xx) notifications per group key, from the server's log and the status the
/// handler chose for each request.
fn accepted(server: &HttpServer, ok: impl Fn(usize) -> bool) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for (i, r) in server.requests().iter().enumerate() {
        if ok(i) {
            for alert in r.body_as::<Notification>().alerts {
                *out.entry(alert.labels["gpu"].clone()).or_insert(0) += 1;
            }
        }
    }
    out
}

#[test]
fn an_outage_delays_but_loses_and_repeats_nothing() {
    // The receiver answers 503 for its first 1.5 s, then 200.
    let start = Instant::now();
    let outage = Duration::from_millis(1500);
    let statuses = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = Arc::clone(&statuses);
    let server = HttpServer::answering(move |_| {
        let status = if start.elapsed() < outage { 503 } else { 200 };
        log.lock().unwrap().push(status);
        Answer::status(status)
    });
    let dir = temp_dir("outage");
    let outbox = Arc::new(Outbox::open(&dir.join(FILE_NAME), 100).unwrap());
    let mut delivery =
        Delivery::start(Arc::clone(&outbox), vec![target("ops", &server, 0)], fast());
    for i in 0..10 {
        delivery.submit(&notification("ops", &format!("g{i}"), Firing));
    }
    assert!(
        wait_until(Duration::from_secs(20), || outbox.pending() == 0),
        "all delivered once the receiver is back"
    );
    let statuses = statuses.lock().unwrap().clone();
    let got = accepted(&server, |i| statuses[i] == 200);
    assert_eq!(got.len(), 10, "every notification arrived: {got:?}");
    assert!(
        got.values().all(|&n| n == 1),
        "none accepted twice: {got:?}"
    );
    // The receiver was backed off, not hammered: 50 ms doubling to 400 ms over 1.5 s is
    // about 7 attempts; each attempt is one request, and nothing was sent in parallel.
    let failed = statuses.iter().filter(|&&s| s == 503).count();
    assert!(
        (2..=12).contains(&failed),
        "{failed} attempts during the outage"
    );
    let stats = delivery.stats();
    assert_eq!(stats.count("ops", Outcome::Sent), 10);
    assert_eq!(stats.count("ops", Outcome::Retried), failed as u64);
    assert_eq!(stats.pending, 0);
    assert!(stats.durable);
    assert!(delivery.shutdown().is_empty());
}

#[test]
fn retry_after_is_a_minimum_wait() {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&calls);
    let server = HttpServer::answering(move |_| {
        if seen.fetch_add(1, Ordering::SeqCst) == 0 {
            Answer::status(429)
                .header("Retry-After", "1")
                .body("slow down")
        } else {
            Answer::status(200)
        }
    });
    let outbox = Arc::new(Outbox::in_memory(10));
    // The receiver's max_backoff allows the wait asked for.
    let ops = Target {
        max_backoff: Some(Duration::from_secs(5)),
        ..target("ops", &server, 0)
    };
    let delivery = Delivery::start(Arc::clone(&outbox), vec![ops], fast());
    delivery.submit(&notification("ops", "g", Firing));
    assert!(wait_until(Duration::from_secs(10), || outbox.pending() == 0));
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let gap = requests[1].at - requests[0].at;
    assert!(
        gap >= Duration::from_millis(950),
        "waited {gap:?}, asked 1 s"
    );
    let stats = delivery.stats();
    assert_eq!(stats.count("ops", Outcome::Retried), 1);
    assert_eq!(stats.retry_after_capped["ops"], 0);
}

#[test]
fn a_retry_after_beyond_max_backoff_is_cut_to_it_and_counted() {
    // 2^64 - 1 seconds and a date in 2099: a receiver once killed the worker with the
    // first and scheduled a retry 73 years out with the second.
    for asked in ["18446744073709551615", "Thu, 01 Jan 2099 00:00:00 GMT"] {
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&calls);
        let server = HttpServer::answering(move |_| {
            if seen.fetch_add(1, Ordering::SeqCst) == 0 {
                Answer::status(429)
                    .header("Retry-After", asked)
                    .body("slow down")
            } else {
                Answer::status(200)
            }
        });
        let outbox = Arc::new(Outbox::in_memory(10));
        // fast(): max_backoff 400 ms.
        let delivery =
            Delivery::start(Arc::clone(&outbox), vec![target("ops", &server, 0)], fast());
        delivery.submit(&notification("ops", "g", Firing));
        assert!(
            wait_until(Duration::from_secs(10), || outbox.pending() == 0),
            "Retry-After {asked}: delivered within the cap"
        );
        let requests = server.requests();
        let gap = requests[1].at - requests[0].at;
        assert!(gap < Duration::from_secs(2), "{asked}: waited {gap:?}");
        let stats = delivery.stats();
        assert_eq!(stats.retry_after_capped["ops"], 1, "{asked}");
        assert_eq!(stats.worker_restarts["ops"], 0, "{asked}");
        assert_eq!(stats.count("ops", Outcome::Sent), 1);
        assert!(delivery.health().down().is_empty());
    }
}

#[test]
fn a_rejected_notification_is_dropped_and_counted_not_retried() {
    let server = HttpServer::answering(|r| {
        if r.body_as::<Notification>().group_key == "bad" {
            Answer::status(400).body("invalid payload")
        } else {
            Answer::status(200)
        }
    });
    let outbox = Arc::new(Outbox::in_memory(10));
    let delivery = Delivery::start(Arc::clone(&outbox), vec![target("ops", &server, 0)], fast());
    delivery.submit(&notification("ops", "bad", Firing));
    delivery.submit(&notification("ops", "good", Firing));
    assert!(wait_until(Duration::from_secs(10), || outbox.pending() == 0));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        server.requests().len(),
        2,
        "the rejected one was tried once"
    );
    let stats = delivery.stats();
    assert_eq!(stats.count("ops", Outcome::Dropped), 1);
    assert_eq!(stats.count("ops", Outcome::Sent), 1);
}

#[test]
fn a_hanging_receiver_holds_back_only_itself_and_shutdown_abandons_it() {
    let hanging =
        HttpServer::answering(|_| Answer::raw(vec![Step::Sleep(Duration::from_secs(30))]));
    let healthy = HttpServer::answering(|_| Answer::status(200));
    let dir = temp_dir("hang");
    let outbox = Arc::new(Outbox::open(&dir.join(FILE_NAME), 100).unwrap());
    let mut delivery = Delivery::start(
        Arc::clone(&outbox),
        vec![
            Target {
                name: "stuck".into(),
                // Longer than the test: the worker must not need the timeout to stay out
                // of the other receiver's way.
                notifier: Box::new(HttpNotifier::new(&hanging.url(""), Duration::from_secs(60))),
                max_per_minute: 0,
                max_backoff: None,
            },
            target("ops", &healthy, 0),
        ],
        fast(),
    );
    delivery.submit(&notification("stuck", "a", Firing));
    for i in 0..3 {
        delivery.submit(&notification("ops", &format!("g{i}"), Firing));
    }
    assert!(
        wait_until(Duration::from_secs(10), || outbox.pending_for("ops") == 0),
        "the healthy receiver got everything"
    );
    assert!(wait_until(Duration::from_secs(5), || {
        delivery.stats().in_flight.contains_key("stuck")
    }));
    assert_eq!(outbox.pending_for("stuck"), 1);
    let begun = Instant::now();
    let abandoned = delivery.shutdown();
    assert!(
        begun.elapsed() < Duration::from_secs(3),
        "shutdown took {:?}",
        begun.elapsed()
    );
    assert_eq!(abandoned, vec!["stuck".to_string()]);
    // The undelivered notification stays for the next start.
    assert_eq!(outbox.pending_for("stuck"), 1);
}

#[test]
fn over_the_rate_limit_notifications_are_batched_not_dropped() {
    let server = HttpServer::answering(|_| Answer::status(200));
    let outbox = Arc::new(Outbox::in_memory(100));
    // Waiting before the workers start, so the test sees one burst.
    let now = Utc::now();
    for i in 0..8 {
        outbox
            .enqueue(&notification("bot", &format!("g{i}"), Firing), now)
            .unwrap();
    }
    let delivery = Delivery::start(Arc::clone(&outbox), vec![target("bot", &server, 3)], fast());
    assert!(wait_until(Duration::from_secs(10), || outbox.pending() == 0));
    let requests = server.requests();
    assert_eq!(requests.len(), 3, "3 messages a minute");
    let sizes: Vec<usize> = requests
        .iter()
        .map(|r| r.body_as::<Notification>().alerts.len())
        .collect();
    assert_eq!(
        sizes,
        vec![1, 1, 6],
        "the last message of the minute carries the rest"
    );
    let summary = requests[2].body_as::<Notification>();
    assert_eq!(summary.receiver, "bot");
    let gpus: Vec<String> = summary
        .alerts
        .iter()
        .map(|a| a.labels["gpu"].clone())
        .collect();
    assert_eq!(gpus, ["g2", "g3", "g4", "g5", "g6", "g7"]);
    let stats = delivery.stats();
    assert_eq!(stats.count("bot", Outcome::Sent), 8);
    assert_eq!(stats.summaries, 1);
    // The minute is used up: a new notification waits for it rather than going out.
    delivery.submit(&notification("bot", "late", Firing));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(server.requests().len(), 3);
    assert_eq!(outbox.pending(), 1);
}

#[test]
fn superseded_and_evicted_notifications_are_counted() {
    let server = HttpServer::answering(|_| Answer::status(503));
    let outbox = Arc::new(Outbox::in_memory(2));
    let delivery = Delivery::start(
        Arc::clone(&outbox),
        vec![target("ops", &server, 0)],
        DeliveryOptions {
            initial_backoff: Duration::from_secs(30),
            ..fast()
        },
    );
    delivery.submit(&notification("ops", "a", Firing));
    delivery.submit(&notification("ops", "a", Resolved));
    delivery.submit(&notification("ops", "b", Firing));
    delivery.submit(&notification("ops", "c", Firing));
    let stats = delivery.stats();
    assert_eq!(stats.count("ops", Outcome::Superseded), 1);
    // a (resolved) was the oldest resolved when c arrived.
    assert_eq!(stats.count("ops", Outcome::Evicted), 1);
    assert_eq!(stats.pending, 2);
}

#[test]
fn notifications_past_max_age_are_dropped() {
    let server = HttpServer::answering(|_| Answer::status(200));
    let outbox = Arc::new(Outbox::in_memory(10));
    let old = Utc::now() - chrono::Duration::hours(2);
    outbox
        .enqueue(&notification("ops", "old", Firing), old)
        .unwrap();
    outbox
        .enqueue(&notification("ops", "new", Firing), Utc::now())
        .unwrap();
    let delivery = Delivery::start(
        Arc::clone(&outbox),
        vec![target("ops", &server, 0)],
        DeliveryOptions {
            max_age: Some(Duration::from_secs(3600)),
            ..fast()
        },
    );
    assert!(wait_until(Duration::from_secs(10), || outbox.pending() == 0));
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].body_as::<Notification>().group_key, "new");
    assert_eq!(delivery.stats().count("ops", Outcome::Dropped), 1);
}

#[test]
fn a_summary_keeps_each_alerts_latest_state_in_first_seen_order() {
    let outbox = Outbox::in_memory(10);
    let now = Utc::now();
    let mut both = notification("bot", "x", Firing);
    both.alerts.extend(notification("bot", "y", Firing).alerts);
    outbox.enqueue(&both, now).unwrap();
    outbox
        .enqueue(&notification("bot", "z", Firing), now)
        .unwrap();
    // Another group carrying x again, now resolved.
    let mut x_resolved = notification("bot", "x", Resolved);
    x_resolved.group_key = "other".into();
    outbox.enqueue(&x_resolved, now).unwrap();
    let merged = merge("bot", &outbox.entries(), now);
    let got: Vec<(String, &str)> = merged
        .alerts
        .iter()
        .map(|a| (a.labels["gpu"].clone(), a.state.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("x".to_string(), "resolved"),
            ("y".to_string(), "firing"),
            ("z".to_string(), "firing")
        ]
    );
    assert!(merged.group_labels.is_empty(), "the groups share no labels");
    assert_eq!(merged.status(), "firing");
}

#[test]
fn kind_defaults_for_rate_limits() {
    use gpu_sentinel::alert::deliver::max_per_minute;
    let receiver = |kind: &str, max: u32| gpu_sentinel::config::ReceiverConfig {
        name: "r".into(),
        kind: kind.into(),
        url: Some("http://127.0.0.1:1/".into()),
        url_env: None,
        secret_env: None,
        send_resolved: true,
        max_per_minute: max,
        timeout: Duration::from_secs(10),
        max_backoff: Duration::from_secs(300),
    };
    assert_eq!(max_per_minute(&receiver("dingtalk", 0)), 20);
    assert_eq!(max_per_minute(&receiver("wecom", 0)), 20);
    assert_eq!(max_per_minute(&receiver("wecom", 5)), 5);
    assert_eq!(max_per_minute(&receiver("slack", 0)), 0);
    assert_eq!(max_per_minute(&receiver("webhook", 60)), 60);
}

#[test]
fn the_stages_can_be_shared_between_threads() {
    fn shared<T: Send + Sync>() {}
    shared::<Delivery>();
    shared::<Outbox>();
    shared::<gpu_sentinel::advice::Advisor>();
}

/// Panics when dropped: a notifier panicking with it survives the worker's own catch and
/// takes the worker loop down — the way to make a real worker die from outside.
struct PanicsWhenDropped;

impl Drop for PanicsWhenDropped {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("the worker loop itself panicked");
        }
    }
}

/// Its first send kills the worker; later ones deliver.
struct KillsTheWorkerOnce(std::sync::atomic::AtomicBool);

impl gpu_sentinel::alert::notify::Notifier for KillsTheWorkerOnce {
    fn send(
        &self,
        _: &gpu_sentinel::alert::Notification,
    ) -> Result<(), gpu_sentinel::alert::notify::NotifyError> {
        if self.0.swap(false, Ordering::SeqCst) {
            std::panic::panic_any(PanicsWhenDropped);
        }
        Ok(())
    }
}

#[test]
fn a_worker_that_dies_is_reported_down_restarted_counted_and_delivers() {
    let outbox = Arc::new(Outbox::in_memory(10));
    let delivery = Delivery::start(
        Arc::clone(&outbox),
        vec![Target {
            name: "ops".into(),
            notifier: Box::new(KillsTheWorkerOnce(true.into())),
            max_per_minute: 0,
            max_backoff: None,
        }],
        DeliveryOptions {
            // The pause before the restart: long enough to see the worker down.
            initial_backoff: Duration::from_millis(400),
            ..fast()
        },
    );
    delivery.submit(&notification("ops", "g", Firing));
    let health = delivery.health();
    assert!(
        wait_until(Duration::from_secs(5), || !health.down().is_empty()),
        "reported down"
    );
    let down = health.down();
    assert_eq!(down[0].0, "ops");
    assert!(down[0].1.contains("panicked"), "{down:?}");
    assert!(
        wait_until(Duration::from_secs(5), || outbox.pending() == 0),
        "restarted, it delivers what was pending"
    );
    assert!(health.down().is_empty());
    let stats = delivery.stats();
    assert_eq!(stats.worker_restarts["ops"], 1);
    assert_eq!(stats.count("ops", Outcome::Sent), 1);
}

#[test]
fn a_retry_stored_years_ahead_comes_due_within_max_backoff() {
    // An outbox written before the wait was bounded: its entry is not due until 2099.
    let dir = temp_dir("outbox-2099");
    let path = dir.join(FILE_NAME);
    {
        let outbox = Outbox::open(&path, 10).unwrap();
        let id = outbox
            .enqueue(&notification("ops", "g", Firing), Utc::now())
            .unwrap()
            .id;
        let year_2099 = chrono::DateTime::parse_from_rfc3339("2099-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert!(outbox.failed(id, "HTTP 429", year_2099).unwrap());
    }
    let server = HttpServer::answering(|_| Answer::status(200));
    let outbox = Arc::new(Outbox::open(&path, 10).unwrap());
    let delivery = Delivery::start(Arc::clone(&outbox), vec![target("ops", &server, 0)], fast());
    assert!(
        wait_until(Duration::from_secs(5), || outbox.pending() == 0),
        "delivered within the cap (400 ms), not in 2099"
    );
    assert_eq!(delivery.stats().count("ops", Outcome::Sent), 1);
}
