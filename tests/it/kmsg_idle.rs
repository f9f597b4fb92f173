//! An idle kernel-log follower sleeps: it must not spin. Alone in its own test binary, so
//! the process's CPU time is the follower's.

use std::path::Path;
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

use gpu_sentinel::source::kmsg::KmsgFollower;

/// User + system CPU time of this process (all threads), from /proc/self/stat, in the
/// kernel's fixed USER_HZ of 100 ticks per second.
fn process_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("read /proc/self/stat");
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    // utime and stime are fields 14 and 15 of stat, 11 and 12 after the comm.
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

fn assert_idle(path: &Path) {
    let (tx, _rx) = channel();
    let Ok(follower) = KmsgFollower::spawn(path, tx) else {
        return; // /dev/kmsg not readable here; the file case still runs.
    };
    std::thread::sleep(Duration::from_millis(300)); // past any backlog
    let before = process_cpu_seconds();
    std::thread::sleep(Duration::from_millis(1500));
    let used = process_cpu_seconds() - before;
    assert!(
        used < 0.2,
        "{}: an idle follower used {used:.2} s of CPU in 1.5 s",
        path.display()
    );
    let start = Instant::now();
    follower.stop();
    assert!(start.elapsed() < Duration::from_secs(2));
}

#[test]
fn idle_followers_sleep() {
    let log = std::env::temp_dir().join(format!("gpu-sentinel-idle-{}.log", std::process::id()));
    std::fs::write(&log, "nothing to see\n").expect("write log");
    assert_idle(&log);
    let _ = std::fs::remove_file(&log);
    assert_idle(Path::new("/dev/kmsg"));
}
