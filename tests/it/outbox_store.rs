//! The outbox store on its own: durability across reopening, the order entries come due in,
//! supersession, the bound and its eviction policy, and what happens with a damaged, locked
//! or unusable store file.

use crate::common;
use crate::delivery_support;

use std::time::Duration;

use chrono::Utc;
use delivery_support::{notification, temp_dir};
use gpu_sentinel::alert::AlertState::{Firing, Resolved};
use gpu_sentinel::alert::outbox::{FILE_NAME, Outbox, OutboxError};

#[test]
fn entries_survive_reopening_with_their_history() {
    let dir = temp_dir("outbox-reopen");
    let path = dir.join(FILE_NAME);
    let now = Utc::now();
    let later = now + chrono::Duration::seconds(30);
    let ids = {
        let outbox = Outbox::open(&path, 100).expect("open");
        assert!(outbox.is_durable());
        let a = outbox
            .enqueue(&notification("ops", "a", Firing), now)
            .expect("a");
        let b = outbox
            .enqueue(&notification("ops", "b", Firing), now)
            .expect("b");
        let c = outbox
            .enqueue(&notification("chat", "c", Resolved), now)
            .expect("c");
        assert!(a.durable && b.durable && c.durable);
        assert!(a.id < b.id && b.id < c.id, "ids increase");
        outbox.failed(b.id, "HTTP 503", later).expect("failed");
        assert!(outbox.delivered(a.id).expect("delivered"));
        assert!(!outbox.delivered(a.id).expect("twice"), "already gone");
        (a.id, b.id, c.id)
    };
    let outbox = Outbox::open(&path, 100).expect("reopen");
    let entries = outbox.entries();
    assert_eq!(entries.len(), 2);
    assert_eq!(outbox.pending(), 2);
    let b = &entries[0];
    assert_eq!(b.id, ids.1);
    check(&b.notification, "ops", "b");
    assert_eq!(b.attempts, 1);
    assert_eq!(b.last_error.as_deref(), Some("HTTP 503"));
    assert_eq!(b.next_attempt_at, later);
    assert_eq!(entries[1].id, ids.2);
    assert!(entries[1].is_resolved());
    // New ids continue after the stored ones, never reusing a pending entry's id.
    let d = outbox
        .enqueue(&notification("ops", "d", Firing), now)
        .expect("d");
    assert!(d.id > ids.2);
}

/// The stored notification is the one enqueued.
fn check(stored: &gpu_sentinel::alert::Notification, receiver: &str, group: &str) {
    assert_eq!(stored.receiver, receiver);
    assert_eq!(stored.group_key, group);
    assert_eq!(stored.alerts.len(), 1);
    assert_eq!(stored.alerts[0].labels["gpu"], group);
    assert_eq!(stored.alerts[0].state, Firing);
}

#[test]
fn due_entries_come_earliest_due_then_oldest_first_per_receiver() {
    let outbox = Outbox::in_memory(100);
    assert!(!outbox.is_durable());
    let now = Utc::now();
    let a = outbox
        .enqueue(&notification("ops", "a", Firing), now)
        .unwrap();
    let b = outbox
        .enqueue(&notification("ops", "b", Firing), now)
        .unwrap();
    let c = outbox
        .enqueue(&notification("ops", "c", Firing), now)
        .unwrap();
    outbox
        .enqueue(&notification("chat", "x", Firing), now)
        .unwrap();
    // a failed and waits; b and c are due before it.
    outbox
        .failed(a.id, "down", now + chrono::Duration::seconds(5))
        .unwrap();
    let due: Vec<u64> = outbox.due("ops", now, 10).iter().map(|e| e.id).collect();
    assert_eq!(due, vec![b.id, c.id]);
    assert_eq!(outbox.due("ops", now, 1).len(), 1, "limit");
    let later = now + chrono::Duration::seconds(6);
    let due: Vec<u64> = outbox.due("ops", later, 10).iter().map(|e| e.id).collect();
    assert_eq!(due, vec![b.id, c.id, a.id]);
    assert_eq!(outbox.next_due("ops"), Some(now));
    assert_eq!(outbox.next_due("nobody"), None);
    assert_eq!(outbox.pending_for("chat"), 1);
    assert_eq!(
        outbox.receivers(),
        vec!["chat".to_string(), "ops".to_string()]
    );
}

#[test]
fn a_newer_notification_of_a_group_supersedes_the_pending_one() {
    let dir = temp_dir("outbox-supersede");
    let path = dir.join(FILE_NAME);
    let now = Utc::now();
    {
        let outbox = Outbox::open(&path, 100).unwrap();
        outbox
            .enqueue(&notification("ops", "g", Firing), now)
            .unwrap();
        // Same group at another receiver: a different destination, not superseded.
        outbox
            .enqueue(&notification("chat", "g", Firing), now)
            .unwrap();
        let newer = outbox
            .enqueue(&notification("ops", "g", Resolved), now)
            .unwrap();
        assert_eq!(newer.superseded, 1);
        assert_eq!(outbox.pending(), 2);
    }
    // Supersession is in the store too: the newer notification for ops, chat's untouched.
    let outbox = Outbox::open(&path, 100).unwrap();
    let entries = outbox.entries();
    assert_eq!(entries.len(), 2);
    let ops = entries
        .iter()
        .find(|e| e.notification.receiver == "ops")
        .expect("ops' entry");
    assert!(ops.is_resolved());
    assert!(
        entries
            .iter()
            .any(|e| e.notification.receiver == "chat" && !e.is_resolved())
    );
    // A failure reported for a superseded entry does not bring it back.
    assert!(!outbox.failed(1, "late", now).unwrap());
    assert_eq!(outbox.pending(), 2);
}

#[test]
fn when_full_the_oldest_resolved_go_first_then_the_oldest() {
    let dir = temp_dir("outbox-bound");
    let path = dir.join(FILE_NAME);
    let now = Utc::now();
    let outbox = Outbox::open(&path, 3).unwrap();
    let a = outbox
        .enqueue(&notification("ops", "a", Firing), now)
        .unwrap();
    let b = outbox
        .enqueue(&notification("chat", "b", Resolved), now)
        .unwrap();
    let c = outbox
        .enqueue(&notification("ops", "c", Resolved), now)
        .unwrap();
    assert!(a.evicted.is_empty() && b.evicted.is_empty() && c.evicted.is_empty());
    // Full: the oldest resolved (b) makes room, not the older firing a.
    let d = outbox
        .enqueue(&notification("ops", "d", Firing), now)
        .unwrap();
    assert_eq!(d.evicted, vec!["chat".to_string()]);
    let ids = |o: &Outbox| o.entries().iter().map(|e| e.id).collect::<Vec<_>>();
    assert_eq!(ids(&outbox), vec![a.id, c.id, d.id]);
    // Then the next resolved (c).
    let e = outbox
        .enqueue(&notification("ops", "e", Firing), now)
        .unwrap();
    assert_eq!(e.evicted, vec!["ops".to_string()]);
    assert_eq!(ids(&outbox), vec![a.id, d.id, e.id]);
    // No resolved left: the oldest overall (a); the new entry is never the victim.
    let f = outbox
        .enqueue(&notification("ops", "f", Resolved), now)
        .unwrap();
    assert_eq!(f.evicted.len(), 1);
    assert_eq!(ids(&outbox), vec![d.id, e.id, f.id]);
    // Superseding frees its room first: nothing else is evicted.
    let f2 = outbox
        .enqueue(&notification("ops", "f", Firing), now)
        .unwrap();
    assert_eq!((f2.superseded, f2.evicted.len()), (1, 0));
    drop(outbox);
    let reopened = Outbox::open(&path, 3).unwrap();
    assert_eq!(ids(&reopened), vec![d.id, e.id, f2.id]);
}

#[test]
fn a_corrupt_store_is_an_error_naming_it_and_the_fallback_starts_afresh() {
    let dir = temp_dir("outbox-corrupt");
    let path = dir.join(FILE_NAME);
    std::fs::write(&path, vec![0x5a; 64 * 1024]).unwrap();
    let err = Outbox::open(&path, 10).expect_err("garbage is not a store");
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "names the path: {err}"
    );
    let outbox = Outbox::open_or_fallback(&path, 10);
    assert!(
        outbox.is_durable(),
        "a fresh store replaced the corrupt one"
    );
    outbox
        .enqueue(&notification("ops", "a", Firing), Utc::now())
        .unwrap();
    assert!(err.is_corrupt());
    let aside: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".corrupt-"))
        .collect();
    assert_eq!(aside.len(), 1, "the damaged file is kept for inspection");
}

#[test]
fn damage_inside_a_store_never_panics_out_of_the_outbox() {
    // redb checks its pages and panics on some kinds of damage; the outbox turns that into
    // an error, and the fallback into a fresh store.
    for offset in [600usize, 4096, 8192, 20_000] {
        let dir = temp_dir("outbox-damaged");
        let path = dir.join(FILE_NAME);
        {
            let outbox = Outbox::open(&path, 100).unwrap();
            for i in 0..20 {
                let n = notification("ops", &format!("g{i}"), Firing);
                outbox.enqueue(&n, Utc::now()).unwrap();
            }
        }
        let mut bytes = std::fs::read(&path).unwrap();
        for b in bytes.iter_mut().skip(offset).take(2000) {
            *b ^= 0xff;
        }
        std::fs::write(&path, bytes).unwrap();
        match Outbox::open(&path, 100) {
            Ok(outbox) => assert!(outbox.pending() <= 20),
            Err(e) => assert!(e.to_string().contains(&path.display().to_string()), "{e}"),
        }
        let outbox = Outbox::open_or_fallback(&path, 100);
        outbox
            .enqueue(&notification("ops", "new", Firing), Utc::now())
            .unwrap();
    }
}

#[test]
fn a_store_in_use_or_unusable_falls_back_to_memory() {
    let dir = temp_dir("outbox-locked");
    let path = dir.join(FILE_NAME);
    let first = Outbox::open(&path, 10).unwrap();
    first
        .enqueue(&notification("ops", "a", Firing), Utc::now())
        .unwrap();
    let err = Outbox::open(&path, 10).expect_err("locked");
    assert!(matches!(err, OutboxError::InUse { .. }), "{err}");
    assert!(err.to_string().contains(&path.display().to_string()));
    let second = Outbox::open_or_fallback(&path, 10);
    assert!(!second.is_durable());
    assert_eq!(second.pending(), 0);
    drop(first);
    // The locked store was not touched: its entry is still there.
    assert_eq!(Outbox::open(&path, 10).unwrap().pending(), 1);

    // A directory where the file should be.
    let blocked = dir.join("is-a-dir");
    std::fs::create_dir_all(&blocked).unwrap();
    let err = Outbox::open(&blocked, 10).expect_err("a directory");
    assert!(err.to_string().contains("is-a-dir"), "{err}");
    let outbox = Outbox::open_or_fallback(&blocked, 10);
    assert!(!outbox.is_durable());
    // It is tried again later; meanwhile notifications are accepted into memory, while a
    // strict enqueue (which promises the disk) says it cannot.
    let now = Utc::now();
    let kept = outbox.accept(&notification("ops", "a", Firing), now, now);
    assert!(!kept.durable);
    assert_eq!(outbox.pending(), 1, "still takes notifications");
    let err = outbox
        .enqueue(&notification("ops", "b", Firing), now)
        .expect_err("nowhere to write it");
    assert!(err.to_string().contains("is-a-dir"), "{err}");
    assert_eq!(outbox.pending(), 1);
}

#[test]
fn undecodable_entries_are_removed_on_open() {
    let dir = temp_dir("outbox-undecodable");
    let path = dir.join(FILE_NAME);
    {
        let outbox = Outbox::open(&path, 10).unwrap();
        outbox
            .enqueue(&notification("ops", "a", Firing), Utc::now())
            .unwrap();
    }
    {
        let db = redb::Database::create(&path).unwrap();
        let table: redb::TableDefinition<u64, &[u8]> =
            redb::TableDefinition::new("notifications_v1");
        let txn = db.begin_write().unwrap();
        txn.open_table(table)
            .unwrap()
            .insert(99, &b"{not json"[..])
            .unwrap();
        txn.commit().unwrap();
    }
    let outbox = Outbox::open(&path, 10).unwrap();
    assert_eq!(outbox.pending(), 1);
    drop(outbox);
    assert_eq!(Outbox::open(&path, 10).unwrap().pending(), 1);
}

#[test]
fn enqueue_is_durable_and_quick_enough_for_alert_rates() {
    // Each enqueue is one fsynced transaction; a burst of alerts must not stall dispatch.
    let dir = temp_dir("outbox-speed");
    let outbox = Outbox::open(&dir.join(FILE_NAME), 1000).unwrap();
    let start = std::time::Instant::now();
    for i in 0..50 {
        outbox
            .enqueue(&notification("ops", &format!("g{i}"), Firing), Utc::now())
            .unwrap();
    }
    assert_eq!(outbox.pending(), 50);
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "50 enqueues took {:?}",
        start.elapsed()
    );
}

/// A store file damaged so that redb panics reading it: its first region's header (the
/// page at 4096) inverted.
fn damaged_store(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join(FILE_NAME);
    {
        let outbox = Outbox::open(&path, 100).unwrap();
        for i in 0..20 {
            let n = notification("ops", &format!("g{i}"), Firing);
            outbox.enqueue(&n, Utc::now()).unwrap();
        }
    }
    let mut bytes = std::fs::read(&path).unwrap();
    for b in bytes.iter_mut().skip(4096).take(2000) {
        *b ^= 0xff;
    }
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn redbs_panic_on_a_damaged_store_becomes_the_error_it_carries() {
    let dir = temp_dir("outbox-panic");
    let path = damaged_store(&dir);
    match Outbox::open(&path, 100) {
        Err(OutboxError::Panicked { message, .. }) => {
            assert!(message.contains("redb"), "where it failed: {message}");
            assert!(!message.contains('\n'), "one line: {message}");
        }
        Err(other) => panic!("expected redb's panic on this damage, got: {other}"),
        Ok(_) => panic!("expected redb's panic on this damage, it opened"),
    }
}

#[test]
fn the_agent_reports_a_damaged_outbox_once_clearly_without_redbs_panic() {
    // The caught redb panic ("thread 'main' panicked at …redb…") used to be printed into
    // the log before the clear message.
    let dir = temp_dir("outbox-agent");
    damaged_store(&dir);
    let hook = common::http_server::HttpServer::start(vec![]);
    let scenario = common::temp_file(
        "damaged-scenario.toml",
        "[simulation]\ngpus = 1\nfaults = []\n",
    );
    let config = common::temp_file(
        "damaged.toml",
        &format!(
            "[collect]\ninterval = \"200ms\"\nkmsg = \"off\"\n[state]\ndir = \"{}\"\n\
             [[alerting.receivers]]\nname = \"ops\"\nkind = \"webhook\"\nurl = \"{}\"\n\
             [alerting.route]\nreceiver = \"ops\"\n",
            dir.display(),
            hook.url("/hook")
        ),
    );
    let lib = common::fake_nvml_lib();
    let agent = common::Agent::start(
        &[
            "--nvml-lib",
            lib.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
        ],
        &[("FAKE_NVML_SCENARIO", scenario.to_str().unwrap())],
    );
    let metrics = agent.metrics();
    assert_eq!(
        common::samples(&metrics, "gpu_sentinel_outbox_durable"),
        vec![("", 1.0)],
        "a fresh store replaced the damaged one"
    );
    let (_, stderr) = agent.stop();
    assert!(
        stderr.contains("notification outbox") && stderr.contains("damaged"),
        "the clear message: {stderr}"
    );
    assert!(stderr.contains("moved it to"), "{stderr}");
    assert!(
        !stderr.contains("panicked") && !stderr.contains("RUST_BACKTRACE"),
        "no panic printed: {stderr}"
    );
}
