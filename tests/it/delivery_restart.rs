//! Crash safety: a process with undelivered notifications is killed with SIGKILL; a new
//! process opening the same outbox delivers every one of them.
//!
//! The "old agent" is this test binary re-run as a child with `OUTBOX_CHILD_*` set: its
//! `child_process` test then opens the outbox, submits notifications and blocks until killed.
//! Run normally (without those variables) that test does nothing.

use crate::common;
use crate::delivery_support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::http_server::{Answer, HttpServer};
use delivery_support::{HttpNotifier, notification, temp_dir, wait_until};
use gpu_sentinel::alert::AlertState::Firing;
use gpu_sentinel::alert::Notification;
use gpu_sentinel::alert::deliver::{Delivery, DeliveryOptions, Outcome, Target};
use gpu_sentinel::alert::outbox::{FILE_NAME, Outbox};

const DIR: &str = "OUTBOX_CHILD_DIR";
const URL: &str = "OUTBOX_CHILD_URL";
const COUNT: &str = "OUTBOX_CHILD_COUNT";

fn options() -> DeliveryOptions {
    DeliveryOptions {
        initial_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(300),
        shutdown_grace: Duration::from_millis(500),
        ..DeliveryOptions::default()
    }
}

fn delivery(outbox: &Arc<Outbox>, url: &str) -> Delivery {
    Delivery::start(
        Arc::clone(outbox),
        vec![Target {
            name: "ops".into(),
            notifier: Box::new(HttpNotifier::new(url, Duration::from_secs(5))),
            max_per_minute: 0,
            max_backoff: None,
        }],
        options(),
    )
}

/// The old agent's side: run only as a child of the tests below (`--ignored`), so a plain
/// test run does not count it as a pass.
#[test]
#[ignore = "the child side of the kill -9 tests; they start it"]
fn child_process() {
    let (Ok(dir), Ok(url), Ok(count)) =
        (std::env::var(DIR), std::env::var(URL), std::env::var(COUNT))
    else {
        panic!("child_process is started by the kill -9 tests, with {DIR}, {URL} and {COUNT} set");
    };
    let dir = Path::new(&dir);
    let count: usize = count.parse().expect("count");
    let outbox = Arc::new(Outbox::open(&dir.join(FILE_NAME), 1000).expect("open the outbox"));
    let delivery = delivery(&outbox, &url);
    for i in 0..count {
        delivery.submit(&notification("ops", &format!("g{i}"), Firing));
    }
    // Every submit has returned: all are durable. Tell the parent, then wait to be killed.
    std::fs::write(dir.join("submitted"), b"").expect("marker");
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn spawn_child(dir: &Path, url: &str, count: usize) -> Child {
    let exe = std::env::current_exe().expect("test binary");
    Command::new(exe)
        .args([
            "--exact",
            &common::test_path(module_path!(), "child_process"),
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DIR, dir)
        .env(URL, url)
        .env(COUNT, count.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the child")
}

fn kill(mut child: Child) {
    // Child::kill is SIGKILL on Unix: no destructor, no flush, no shutdown runs.
    child.kill().expect("kill -9");
    child.wait().expect("reap");
}

/// Notifications a server accepted (answered 200), per group.
fn accepted(server: &HttpServer) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for r in server.requests() {
        *out.entry(r.body_as::<Notification>().group_key)
            .or_insert(0) += 1;
    }
    out
}

#[test]
fn notifications_for_a_dead_receiver_survive_kill_9() {
    let dir = temp_dir("kill9-dead");
    // Nothing listens here: every attempt of the old process fails.
    let dead = format!("http://127.0.0.1:{}", free_port());
    let child = spawn_child(&dir, &dead, 20);
    assert!(
        wait_until(Duration::from_secs(60), || dir.join("submitted").exists()),
        "the child submitted its notifications"
    );
    // Let it retry a little, so the kill lands among failed attempts and their writes.
    std::thread::sleep(Duration::from_millis(300));
    kill(child);

    let server = HttpServer::answering(|_| Answer::status(200));
    let outbox = Arc::new(Outbox::open(&dir.join(FILE_NAME), 1000).expect("reopen"));
    assert_eq!(outbox.pending(), 20, "nothing lost in the kill");
    assert!(
        outbox.entries().iter().any(|e| e.attempts >= 1),
        "the old process's failed attempts were recorded too"
    );
    let delivery = delivery(&outbox, &server.url(""));
    assert!(wait_until(Duration::from_secs(20), || outbox.pending() == 0));
    let got = accepted(&server);
    assert_eq!(got.len(), 20, "{got:?}");
    assert!(got.values().all(|&n| n == 1), "each exactly once: {got:?}");
    assert_eq!(delivery.stats().count("ops", Outcome::Sent), 20);
}

#[test]
fn a_kill_during_delivery_loses_nothing_and_repeats_at_most_the_one_in_flight() {
    let dir = temp_dir("kill9-live");
    // A slow receiver: the kill lands while deliveries are going on.
    let server = HttpServer::answering(|_| Answer::status(200).delay(Duration::from_millis(100)));
    let child = spawn_child(&dir, &server.url(""), 30);
    // Killed only once all 30 are durable (the marker) and deliveries are under way: on a
    // loaded machine the first requests can arrive before the last submit returns, and a
    // notification never submitted is not one the outbox lost.
    assert!(wait_until(Duration::from_secs(60), || {
        dir.join("submitted").exists() && server.requests().len() >= 5
    }));
    kill(child);
    let before = server.requests().len();

    let outbox = Arc::new(Outbox::open(&dir.join(FILE_NAME), 1000).expect("reopen"));
    let left = outbox.pending();
    assert!(left < 30, "some were delivered before the kill");
    let _delivery = delivery(&outbox, &server.url(""));
    assert!(wait_until(Duration::from_secs(30), || outbox.pending() == 0));
    // Requests that had reached the server before the kill may still be answered after
    // it; those count as accepted (the receiver has them), which is the point.
    let got = accepted(&server);
    assert_eq!(got.len(), 30, "every notification arrived: {got:?}");
    let repeats: usize = got.values().map(|n| n - 1).sum();
    assert!(
        repeats <= 1,
        "only a notification in flight at the kill may arrive twice: {got:?} \
         ({before} requests before the kill, {left} left in the outbox)"
    );
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}
