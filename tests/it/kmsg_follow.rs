//! The kernel-log follower against real files and threads: read from the start, follow
//! appends, survive truncation and rotation, shrug off garbage, stop promptly, and fail
//! with a message that names the path and the fix. (Idle CPU use is measured alone, in
//! tests/it/kmsg_idle.rs.)

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use gpu_sentinel::model::{XidEvent, XidSource};
use gpu_sentinel::source::kmsg::{KmsgEvent, KmsgFollower};

const WAIT: Duration = Duration::from_secs(5);

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!(
            "gpu-sentinel-{name}-{}-{nanos}",
            std::process::id()
        ));
        fs::create_dir_all(&dir).expect("create temp dir");
        Self(dir)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn append(path: &Path, text: &str) {
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open for append");
    f.write_all(text.as_bytes()).expect("append");
}

fn next_marked(rx: &Receiver<KmsgEvent>) -> KmsgEvent {
    rx.recv_timeout(WAIT).expect("an XID event within 5 s")
}

fn next(rx: &Receiver<KmsgEvent>) -> XidEvent {
    next_marked(rx).event
}

fn nothing_more(rx: &Receiver<KmsgEvent>) {
    if let Ok(e) = rx.recv_timeout(Duration::from_millis(700)) {
        panic!("unexpected event {e:?}");
    }
}

fn line(bus: &str, xid: u32, text: &str) -> String {
    format!("Jan 12 10:00:00 node-3 kernel: [ 12.5] NVRM: Xid (PCI:{bus}): {xid}, {text}\n")
}

#[test]
fn reads_a_file_from_the_start_then_follows_appends() {
    let dir = TempDir::new("follow");
    let log = dir.file("kern.log");
    append(&log, "Jan 12 09:59:59 node-3 kernel: usb 1-1: new device\n");
    append(&log, &line("0000:3b:00", 48, "DBE"));
    let (tx, rx) = channel();
    let follower = KmsgFollower::spawn(&log, tx).expect("spawn");

    let first = next_marked(&rx);
    assert!(
        first.backlog,
        "a line that was there before following began"
    );
    let e = first.event;
    assert_eq!((e.xid, e.source), (48, XidSource::Kmsg));
    assert_eq!(e.pci_bus_id.as_deref(), Some("0000:3B:00.0"));
    assert_eq!(e.message.as_deref(), Some("DBE"));
    assert_eq!((e.gpu, e.uuid), (None, None));

    // A line written in two pieces is read once it is complete.
    append(
        &log,
        "Jan 12 10:00:01 node-3 kernel: NVRM: Xid (PCI:0000:3c:00): 1",
    );
    nothing_more(&rx);
    append(&log, "3, pid=77, name=python, Graphics Exception\n");
    let appended = next_marked(&rx);
    assert!(!appended.backlog, "written after following began");
    let e = appended.event;
    assert_eq!((e.xid, e.pci_bus_id.as_deref()), (13, Some("0000:3C:00.0")));
    follower.stop();
}

#[test]
fn survives_truncation_and_rotation() {
    let dir = TempDir::new("rotate");
    let log = dir.file("kern.log");
    append(
        &log,
        &line(
            "0000:3b:00",
            31,
            "first, a long line to make the offset large",
        ),
    );
    let (tx, rx) = channel();
    let _follower = KmsgFollower::spawn(&log, tx).expect("spawn");
    assert_eq!(next(&rx).xid, 31);

    // copytruncate-style: emptied in place, then written again, shorter.
    File::create(&log).expect("truncate");
    append(&log, &line("0000:3b:00", 43, "x"));
    assert_eq!(next(&rx).xid, 43);

    // rename-style: the old file gets one more line after the rename, then a new file.
    let old = dir.file("kern.log.1");
    fs::rename(&log, &old).expect("rotate");
    append(&old, &line("0000:3b:00", 45, "late line in the old file"));
    append(&log, &line("0000:3b:00", 79, "GPU has fallen off the bus."));
    let mut got = vec![next(&rx).xid, next(&rx).xid];
    got.sort_unstable();
    assert_eq!(got, vec![45, 79]);

    // And the new file is followed.
    append(&log, &line("0000:3b:00", 119, "Timeout after 6s"));
    assert_eq!(next(&rx).xid, 119);
    nothing_more(&rx);
}

#[test]
fn odd_input_is_skipped_without_harm() {
    let dir = TempDir::new("garbage");
    let log = dir.file("kern.log");
    let mut bytes: Vec<u8> = (0u8..=255).collect();
    bytes.extend(std::iter::repeat_n(b'x', 200 * 1024)); // one very long line
    bytes.extend_from_slice(b"\nNVRM: Xid (PCI:0000:3b:00): \xff\xfe, bad number\n\r\n\n");
    fs::write(&log, &bytes).expect("write");
    append(
        &log,
        &line(
            "0000:3b:00",
            94,
            "Contained: CE User Channel (0x9). RST: No, D-RST: No",
        ),
    );
    let (tx, rx) = channel();
    let _follower = KmsgFollower::spawn(&log, tx).expect("spawn");
    let e = next(&rx);
    assert_eq!(e.xid, 94);
    nothing_more(&rx);
}

#[test]
fn dev_kmsg_is_read_and_stopped_without_blocking() {
    let (tx, rx) = channel();
    match KmsgFollower::spawn(Path::new("/dev/kmsg"), tx) {
        Ok(follower) => {
            // The backlog since boot is read; any XID in it must be well formed.
            std::thread::sleep(Duration::from_millis(300));
            for KmsgEvent { event: e, .. } in rx.try_iter() {
                assert_eq!(e.source, XidSource::Kmsg);
                assert!(e.pci_bus_id.is_some());
                assert!(e.at <= chrono::Utc::now());
            }
            let start = Instant::now();
            follower.stop();
            assert!(
                start.elapsed() < Duration::from_secs(2),
                "stop must not wait for a record"
            );
        }
        Err(e) => {
            // No /dev/kmsg or no CAP_SYSLOG here: the error must say how to proceed.
            let text = e.to_string();
            assert!(
                text.contains("/dev/kmsg") && text.contains("CAP_SYSLOG"),
                "{text}"
            );
        }
    }
}

#[test]
fn an_unopenable_path_names_itself_and_the_fix() {
    let (tx, _rx) = channel();
    let err = KmsgFollower::spawn(Path::new("/nonexistent/kern.log"), tx)
        .expect_err("a missing path cannot be followed");
    let text = err.to_string();
    for needle in ["/nonexistent/kern.log", "CAP_SYSLOG", "\"off\"", "kmsg"] {
        assert!(text.contains(needle), "{needle:?} missing from: {text}");
    }
}

#[test]
fn stop_is_prompt_even_in_a_long_backlog() {
    let dir = TempDir::new("backlog");
    let log = dir.file("kern.log");
    let mut text = String::new();
    for i in 0..20_000 {
        text.push_str(&line(
            "0000:3b:00",
            13,
            &format!("pid={i}, name=python, Graphics Exception"),
        ));
    }
    for _ in 0..10 {
        append(&log, &text);
    }
    // A channel nobody drains fast: the follower is busy for a while.
    let (tx, rx) = channel();
    let follower = KmsgFollower::spawn(&log, tx).expect("spawn");
    assert_eq!(next(&rx).xid, 13);
    let start = Instant::now();
    follower.stop();
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "stopped after {:?}",
        start.elapsed()
    );
    assert!(
        rx.try_iter().count() < 200_000,
        "stopped before the end of the backlog"
    );
}

#[test]
fn a_directory_is_refused_at_once() {
    let dir = TempDir::new("dir");
    let (tx, _rx) = channel();
    let err = KmsgFollower::spawn(&dir.0, tx).expect_err("a directory is not a log");
    assert!(err.to_string().contains("a directory"), "{err}");
}
