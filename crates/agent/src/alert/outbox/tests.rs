//! The outbox over a store whose "disk" the test fills and breaks: redb's own behaviour
//! after an I/O error (it refuses everything until reopened) meets the outbox's reopen,
//! backlog and backoff, without a real file system.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;

use super::store::Opener;
use super::*;
use crate::alert::{Alert, AlertState, LabelSet};

/// Bytes that outlive every database opened on them, and switches that make them fail.
#[derive(Debug, Default)]
struct FakeDisk {
    bytes: Mutex<Vec<u8>>,
    /// Writes fail with "no space left on device".
    full: AtomicBool,
    /// Reads fail too (a file that cannot be opened at all).
    broken: AtomicBool,
}

impl FakeDisk {
    fn check_write(&self) -> io::Result<()> {
        self.check_read()?;
        if self.full.load(Ordering::SeqCst) {
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                "No space left on device",
            ));
        }
        Ok(())
    }

    fn check_read(&self) -> io::Result<()> {
        if self.broken.load(Ordering::SeqCst) {
            return Err(io::Error::other("Input/output error"));
        }
        Ok(())
    }

    fn bytes(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        self.bytes.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[derive(Debug)]
struct Backend(Arc<FakeDisk>);

impl redb::StorageBackend for Backend {
    fn len(&self) -> io::Result<u64> {
        self.0.check_read()?;
        Ok(self.0.bytes().len() as u64)
    }

    fn read(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        self.0.check_read()?;
        let bytes = self.0.bytes();
        let start = usize::try_from(offset).map_err(io::Error::other)?;
        bytes
            .get(start..start + len)
            .map(<[u8]>::to_vec)
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "read past the end"))
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.check_write()?;
        let len = usize::try_from(len).map_err(io::Error::other)?;
        self.0.bytes().resize(len, 0);
        Ok(())
    }

    fn sync_data(&self, _eventual: bool) -> io::Result<()> {
        self.0.check_write()
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.0.check_write()?;
        let mut bytes = self.0.bytes();
        let start = usize::try_from(offset).map_err(io::Error::other)?;
        if bytes.len() < start + data.len() {
            bytes.resize(start + data.len(), 0);
        }
        bytes[start..start + data.len()].copy_from_slice(data);
        Ok(())
    }
}

fn opener(disk: &Arc<FakeDisk>) -> Opener {
    let disk = Arc::clone(disk);
    Opener::custom(move |_| redb::Builder::new().create_with_backend(Backend(Arc::clone(&disk))))
}

/// No directory part: opening creates nothing on the real disk.
const PATH: &str = "outbox.redb";

fn open(disk: &Arc<FakeDisk>) -> Outbox {
    Outbox::open_with(Path::new(PATH), 100, opener(disk)).expect("the fake store opens")
}

fn notification(group: &str, state: AlertState) -> Notification {
    let mut labels = LabelSet::new();
    labels.insert("alertname".into(), "GpuLost".into());
    labels.insert("gpu".into(), group.into());
    let at = Utc::now();
    Notification {
        receiver: "ops".into(),
        group_key: group.into(),
        group_labels: labels.clone(),
        alerts: vec![Alert {
            labels,
            annotations: LabelSet::new(),
            state,
            active_at: at,
            starts_at: Some(at),
            ends_at: (state == AlertState::Resolved).then_some(at),
        }],
        created_at: at,
        external_url: String::new(),
    }
}

/// (group, status) of every entry, oldest first.
fn groups(outbox: &Outbox) -> Vec<(String, &'static str)> {
    outbox
        .entries()
        .iter()
        .map(|e| (e.notification.group_key.clone(), e.notification.status()))
        .collect()
}

fn owned(pairs: &[(&str, &'static str)]) -> Vec<(String, &'static str)> {
    pairs.iter().map(|(g, s)| (g.to_string(), *s)).collect()
}

#[test]
fn a_full_disk_keeps_everything_in_memory_and_writes_the_newest_once_space_returns() {
    let disk = Arc::new(FakeDisk::default());
    let outbox = open(&disk);
    let now = Utc::now();
    outbox
        .enqueue(&notification("g1", AlertState::Firing), now)
        .expect("written");
    let g2 = outbox
        .enqueue(&notification("g2", AlertState::Firing), now)
        .expect("written");
    assert!(outbox.is_durable());

    disk.full.store(true, Ordering::SeqCst);
    let resolved = outbox.accept(&notification("g1", AlertState::Resolved), now, now);
    assert!(!resolved.durable);
    assert_eq!(resolved.superseded, 1);
    assert!(!outbox.is_durable(), "a notification is in memory only");
    let errors = outbox.store_errors();
    assert!(errors >= 1);
    // The newest state of g1, also only in memory; and g2 delivered while the disk is full.
    let newest = outbox.accept(&notification("g1", AlertState::Firing), now, now);
    assert!(!newest.durable);
    assert!(
        outbox.delivered(g2.id).is_err(),
        "its removal is not on disk"
    );
    assert_eq!(groups(&outbox), owned(&[("g1", "firing")]));
    // Still full: the attempt fails again, and the store stays closed and failing.
    assert!(outbox.flush().is_err());
    assert!(outbox.store_errors() > errors);

    disk.full.store(false, Ordering::SeqCst);
    outbox.flush().expect("written once there is room");
    assert!(outbox.is_durable());
    let errors = outbox.store_errors();
    assert!(outbox.retry_store().is_empty());
    outbox
        .enqueue(&notification("g3", AlertState::Firing), now)
        .expect("the reopened store takes new entries");
    assert_eq!(outbox.store_errors(), errors, "no more failures");
    drop(outbox);

    // What a restart reads: the newest state of g1 (not the firing or the resolved before
    // it), g2 gone, g3.
    let reopened = open(&disk);
    assert_eq!(
        groups(&reopened),
        owned(&[("g1", "firing"), ("g3", "firing")])
    );
    assert_eq!(reopened.entries()[0].id, newest.id);
}

#[test]
fn a_failing_store_is_retried_on_a_backoff_not_at_every_call() {
    let disk = Arc::new(FakeDisk::default());
    let outbox = open(&disk);
    let now = Utc::now();
    disk.full.store(true, Ordering::SeqCst);
    let kept = outbox.accept(&notification("g1", AlertState::Firing), now, now);
    assert_eq!(outbox.store_errors(), 1);
    // Within the first backoff (1 s) neither the retry loop nor a worker's report tries.
    for _ in 0..20 {
        outbox.retry_store();
    }
    assert!(matches!(
        outbox.failed(kept.id, "HTTP 503", now),
        Err(OutboxError::Waiting { .. })
    ));
    assert_eq!(outbox.store_errors(), 1);
    std::thread::sleep(Duration::from_millis(1100));
    outbox.retry_store();
    assert_eq!(outbox.store_errors(), 2, "tried once the backoff ended");
    outbox.retry_store();
    assert_eq!(outbox.store_errors(), 2, "then waits longer");
    // The backoff doubles up to its cap.
    let waits: Vec<u64> = (1..=6).map(|n| backoff(n).as_secs()).collect();
    assert_eq!(waits, vec![1, 2, 4, 8, 10, 10]);
    assert_eq!(backoff(u32::MAX), RETRY_LONGEST);
}

#[test]
fn a_strict_enqueue_that_cannot_be_written_changes_nothing() {
    let disk = Arc::new(FakeDisk::default());
    let outbox = open(&disk);
    let now = Utc::now();
    let first = outbox
        .enqueue(&notification("g1", AlertState::Firing), now)
        .expect("written");
    disk.full.store(true, Ordering::SeqCst);
    let err = outbox
        .enqueue(&notification("g1", AlertState::Resolved), now)
        .expect_err("the disk is full");
    assert!(err.to_string().contains(PATH), "names the store: {err}");
    assert_eq!(groups(&outbox), owned(&[("g1", "firing")]));
    assert_eq!(outbox.entries()[0].id, first.id);
    assert!(outbox.is_durable(), "memory still matches the file");
}

#[test]
fn a_store_that_opens_late_takes_in_its_entries_but_not_older_states_of_groups_notified_since() {
    let disk = Arc::new(FakeDisk::default());
    {
        let outbox = open(&disk);
        let now = Utc::now();
        for (group, state) in [
            ("g1", AlertState::Firing),
            ("g2", AlertState::Firing),
            ("g3", AlertState::Resolved),
        ] {
            outbox
                .enqueue(&notification(group, state), now)
                .expect("written");
        }
    }
    disk.broken.store(true, Ordering::SeqCst);
    let outbox = Outbox::open_or_fallback_with(Path::new(PATH), 100, opener(&disk));
    assert!(!outbox.is_durable());
    assert_eq!(outbox.store_errors(), 1);
    let now = Utc::now();
    // Newer than the file's g1, and numbered 1 like the file's first entry.
    let g1 = outbox.accept(&notification("g1", AlertState::Resolved), now, now);
    assert!(!g1.durable);
    assert!(outbox.flush().is_err(), "still broken");

    disk.broken.store(false, Ordering::SeqCst);
    outbox.flush().expect("opens and catches up");
    assert!(outbox.is_durable());
    let expected = owned(&[("g1", "resolved"), ("g2", "firing"), ("g3", "resolved")]);
    assert_eq!(groups(&outbox), expected);
    let ids: Vec<EntryId> = outbox.entries().iter().map(|e| e.id).collect();
    assert_eq!(ids[0], g1.id, "memory's entries keep their ids");
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    let next = outbox
        .enqueue(&notification("g4", AlertState::Firing), now)
        .expect("written");
    assert!(next.id > ids[2], "new ids follow the adopted ones");
    drop(outbox);
    let reopened = open(&disk);
    let mut expected = expected;
    expected.push(("g4".into(), "firing"));
    assert_eq!(groups(&reopened), expected);
}

#[test]
fn a_late_opened_store_keeps_the_bound_and_reports_what_it_evicted() {
    let disk = Arc::new(FakeDisk::default());
    {
        let outbox = open(&disk);
        let now = Utc::now();
        for group in ["a", "b", "c"] {
            outbox
                .enqueue(&notification(group, AlertState::Resolved), now)
                .expect("written");
        }
    }
    disk.broken.store(true, Ordering::SeqCst);
    let outbox = Outbox::open_or_fallback_with(Path::new(PATH), 2, opener(&disk));
    let now = Utc::now();
    outbox.accept(&notification("x", AlertState::Firing), now, now);
    disk.broken.store(false, Ordering::SeqCst);
    outbox.flush().expect("opens and catches up");
    // Handed over by the next call that reports evictions.
    let evicted = outbox.retry_store();
    assert_eq!(evicted, vec!["ops".to_string(), "ops".to_string()]);
    assert_eq!(
        groups(&outbox),
        owned(&[("x", "firing"), ("c", "resolved")])
    );
    assert!(outbox.is_durable());
}
