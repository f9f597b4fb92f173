//! The outbox on a full disk, through the real binary: `[state] dir` is on a small tmpfs the
//! test mounts and fills. Alerts fire and resolve while nothing can be written; the outbox
//! keeps them in memory (`gpu_sentinel_outbox_durable` 0), writes them once space returns
//! (1 again, store errors stop growing), and after a `kill -9` the next agent delivers the
//! newest state of every alert — also after a `kill -9` while the disk is still full.
//!
//! Root mounts the tmpfs directly; anyone else runs this test again inside `unshare -rm`
//! (a user and mount namespace where mounting a tmpfs is allowed). Without either it is
//! skipped, unless `GPU_SENTINEL_REQUIRE_TOOLS=1`, which makes that a failure.

use crate::common;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::http_server::{Answer, HttpServer};
use common::{Agent, fake_nvml_lib, samples, temp_file};
use gpu_sentinel::alert::outbox::{FILE_NAME, Outbox};

/// Set in the copy of this test that runs inside `unshare -rm`.
const IN_NAMESPACE: &str = "GPU_SENTINEL_OUTBOX_TEST_IN_NAMESPACE";
const TEST_NAME: &str = "the_outbox_survives_a_full_disk_in_order_and_through_kill_9";

/// A tmpfs mounted for the test, unmounted when dropped (also when the test fails).
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (mount's `size=` syntax); the error says why not.
    fn mount(size: &str) -> Result<Tmpfs, String> {
        let dir = std::env::temp_dir().join(format!("gs-outbox-full-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            let _ = std::fs::remove_dir(&dir);
            return Err(format!(
                "mount -t tmpfs on {}: {}",
                dir.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Tmpfs { dir })
    }

    fn filler(&self) -> PathBuf {
        self.dir.join("filler")
    }

    /// Writes a filler file until the file system says it has no space left.
    fn fill(&self) {
        let path = self.filler();
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for chunk in [1 << 16, 4096, 512, 1] {
            let bytes = vec![0x5au8; chunk];
            loop {
                match file.write_all(&bytes) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::StorageFull => break,
                    Err(e) => panic!("filling {}: {e}", path.display()),
                }
            }
        }
        let probe = self.dir.join("probe");
        assert!(
            std::fs::write(&probe, vec![0u8; 8192]).is_err(),
            "{} is not full",
            self.dir.display()
        );
        let _ = std::fs::remove_file(probe);
    }

    fn free(&self) {
        std::fs::remove_file(self.filler())
            .unwrap_or_else(|e| panic!("{}: {e}", self.filler().display()));
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let unmounted = Command::new("umount")
            .arg(&self.dir)
            .status()
            .is_ok_and(|s| s.success());
        if !unmounted {
            // Busy (an agent not reaped yet): detach it now, freed when the last user goes.
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// One alert as the webhook receiver saw it.
#[derive(Debug, Clone)]
struct Seen {
    gpu: String,
    status: String,
    accepted: bool,
}

/// A webhook receiver that answers 503 until told to accept, logging every alert.
struct Receiver {
    server: HttpServer,
    accepting: Arc<AtomicBool>,
    log: Arc<Mutex<Vec<Seen>>>,
}

impl Receiver {
    fn start() -> Receiver {
        let accepting = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(Vec::new()));
        let (accept, seen) = (Arc::clone(&accepting), Arc::clone(&log));
        let server = HttpServer::answering(move |request| {
            let accepted = accept.load(Ordering::SeqCst);
            let body = request.json();
            let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
            for alert in body["alerts"].as_array().into_iter().flatten() {
                if alert["labels"]["alertname"] == "GpuLost" {
                    seen.push(Seen {
                        gpu: alert["labels"]["gpu"].as_str().unwrap_or("?").to_string(),
                        status: alert["status"].as_str().unwrap_or("?").to_string(),
                        accepted,
                    });
                }
            }
            Answer::status(if accepted { 200 } else { 503 })
        });
        Receiver {
            server,
            accepting,
            log,
        }
    }

    fn accept(&self, yes: bool) {
        self.accepting.store(yes, Ordering::SeqCst);
    }

    fn seen(&self) -> Vec<Seen> {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// How many alerts it has seen so far (to look only at what comes after).
    fn mark(&self) -> usize {
        self.seen().len()
    }

    /// Whether, since `mark`, it saw GpuLost of `gpu` with `status` (accepted or not).
    fn saw(&self, since: usize, gpu: &str, status: &str, accepted: bool) -> bool {
        self.seen()[since..]
            .iter()
            .any(|s| s.gpu == gpu && s.status == status && s.accepted == accepted)
    }

    /// Accepted states per GPU, in the order they were accepted.
    fn accepted(&self) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for s in self.seen().into_iter().filter(|s| s.accepted) {
            out.entry(s.gpu).or_default().push(s.status);
        }
        out
    }
}

/// A running agent whose log is printed when the test fails while it runs.
struct Running {
    agent: Agent,
    name: String,
}

impl std::ops::Deref for Running {
    type Target = Agent;
    fn deref(&self) -> &Agent {
        &self.agent
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let name = self.name.clone();
            kill9(&name, self);
        }
    }
}

/// `gpu-sentinel run` on the fake NVML playing `scenario`, with its state on the tmpfs.
fn agent(name: &str, scenario: &str, config: &Path) -> Running {
    let scenario = temp_file(&format!("{name}.toml"), scenario);
    let lib = fake_nvml_lib();
    let agent = Agent::start(
        &[
            "--nvml-lib",
            lib.to_str().expect("UTF-8 library path"),
            "--config",
            config.to_str().expect("UTF-8 config path"),
        ],
        &[
            ("FAKE_NVML_SCENARIO", scenario.to_str().expect("UTF-8 path")),
            // The outbox's recovery is an info line; everything else stays quiet.
            ("RUST_LOG", "warn,gpu_sentinel_agent::alert::outbox=info"),
        ],
    );
    Running {
        agent,
        name: name.to_string(),
    }
}

fn gauge(agent: &Agent, family: &str) -> f64 {
    let text = agent.get("/metrics").text();
    match samples(&text, family).as_slice() {
        [(_, value)] => *value,
        other => panic!("{family}: expected one sample, got {other:?}"),
    }
}

fn wait(what: &str, limit: Duration, mut ready: impl FnMut() -> bool) {
    let began = Instant::now();
    while !ready() {
        assert!(began.elapsed() < limit, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

const DURABLE: &str = "gpu_sentinel_outbox_durable";
const STORE_ERRORS: &str = "gpu_sentinel_outbox_store_errors_total";

/// GPU_IS_LOST on `gpu` from `after` seconds (since the agent's first NVML call), until
/// `until` when given.
fn lost(gpu: u32, after: f64, until: Option<f64>) -> String {
    let until = until.map_or(String::new(), |u| format!("until_seconds = {u:.1}\n"));
    format!(
        "[[fault]]\ngpu = {gpu}\nfunction = \"*\"\nerror = \"GPU_IS_LOST\"\nafter_seconds = {after:.1}\n{until}"
    )
}

const FLEET: &str = "[simulation]\ngpus = 2\nfaults = []\n";

#[test]
fn the_outbox_survives_a_full_disk_in_order_and_through_kill_9() {
    let tmpfs = match Tmpfs::mount("16m") {
        Ok(tmpfs) => tmpfs,
        Err(why) => {
            if std::env::var_os(IN_NAMESPACE).is_none() && in_namespace() {
                return;
            }
            if std::env::var("GPU_SENTINEL_REQUIRE_TOOLS").as_deref() == Ok("1") {
                panic!(
                    "a tmpfs is required (GPU_SENTINEL_REQUIRE_TOOLS=1) but cannot be mounted, \
                     neither directly nor in `unshare -rm`: {why}"
                );
            }
            eprintln!("skipping: cannot mount a tmpfs ({why}), nor in `unshare -rm`");
            return;
        }
    };
    let state = tmpfs.dir.join("state");
    let receiver = Receiver::start();
    let config = temp_file(
        "full-disk-config.toml",
        &format!(
            "[collect]\ninterval = \"200ms\"\nkmsg = \"off\"\n[state]\ndir = \"{}\"\n\
             [[alerting.receivers]]\nname = \"ops\"\nkind = \"webhook\"\nurl = \"{}\"\n\
             max_backoff = \"1s\"\n\
             [alerting.route]\nreceiver = \"ops\"\ngroup_wait = \"0s\"\ngroup_interval = \"1s\"\n",
            state.display(),
            receiver.server.url("/hook")
        ),
    );

    // Phase 1. GPU 1 is lost and comes back, then GPU 0 is lost, all while the disk is full
    // and the receiver down: the outbox holds them in memory only.
    let scenario = format!("{FLEET}{}{}", lost(1, 5.0, Some(10.0)), lost(0, 12.0, None));
    let mut first = agent("full-disk-1", &scenario, &config);
    first.metrics();
    assert_eq!(gauge(&first, DURABLE), 1.0, "on disk before the disk fills");
    tmpfs.fill();
    wait("GPU 1 lost, refused", Duration::from_secs(30), || {
        receiver.saw(0, "1", "firing", false)
    });
    wait("the durable gauge at 0", Duration::from_secs(10), || {
        gauge(&first, DURABLE) == 0.0
    });
    wait(
        "GPU 1 back and GPU 0 lost, refused",
        Duration::from_secs(30),
        || receiver.saw(0, "1", "resolved", false) && receiver.saw(0, "0", "firing", false),
    );
    assert_eq!(gauge(&first, DURABLE), 0.0, "still only in memory");
    assert!(gauge(&first, STORE_ERRORS) > 0.0);

    // Space returns: everything reaches the disk, and the failures stop.
    tmpfs.free();
    wait(
        "the durable gauge back at 1",
        Duration::from_secs(30),
        || gauge(&first, DURABLE) == 1.0,
    );
    let errors = gauge(&first, STORE_ERRORS);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(gauge(&first, STORE_ERRORS), errors, "store errors stopped");
    assert_eq!(gauge(&first, DURABLE), 1.0);
    kill9("the first agent", &mut first);
    // The newest state of each alert, not the firing GPU 1 had before it resolved.
    assert_eq!(
        stored(&state),
        BTreeMap::from([("0".into(), "firing"), ("1".into(), "resolved")]),
        "the outbox on disk after the first kill"
    );

    // The next agent delivers them. Its GPU 0 is still lost; its GPU 1 is lost and back.
    receiver.accept(true);
    let since = receiver.mark();
    let scenario = format!("{FLEET}{}{}", lost(0, 2.0, None), lost(1, 10.0, Some(14.0)));
    let mut second = agent("full-disk-2", &scenario, &config);
    wait(
        "phase 1's notifications delivered",
        Duration::from_secs(30),
        || receiver.saw(since, "1", "resolved", true) && receiver.saw(since, "0", "firing", true),
    );
    wait("the outbox drained", Duration::from_secs(30), || {
        gauge(&second, "gpu_sentinel_outbox_pending") == 0.0
    });
    let accepted = receiver.accepted();
    assert_eq!(accepted["1"], ["resolved"], "{accepted:?}");
    // GPU 0 may come twice: the stored notification, and the new agent's own (its alert
    // state was never saved on the full disk), both firing.
    assert!(accepted["0"].iter().all(|s| s == "firing"), "{accepted:?}");

    // Phase 2. With the receiver down and room on disk, GPU 1 fires and resolves: the disk
    // holds its resolved state when this agent is killed.
    receiver.accept(false);
    let since = receiver.mark();
    wait(
        "GPU 1 lost and back, refused",
        Duration::from_secs(30),
        || receiver.saw(since, "1", "firing", false) && receiver.saw(since, "1", "resolved", false),
    );
    wait(
        "the resolved state on disk",
        Duration::from_secs(10),
        || gauge(&second, DURABLE) == 1.0,
    );
    kill9("the second agent", &mut second);
    // (GPU 0's own notification from this agent may be there too, or delivered.)
    assert_eq!(
        stored(&state).get("1").copied(),
        Some("resolved"),
        "GPU 1 in the outbox on disk after the second kill"
    );
    // Compacted, as after a long quiet time: a write then needs space the file does not
    // already have (redb reuses pages it freed inside the file, full disk or not).
    compact(&state.join(FILE_NAME));

    // An agent starts on the full disk, GPU 1 is lost again, and it is killed while the
    // disk is still full: that firing is gone with its memory, and the disk holds GPU 1's
    // older resolved state, which must not be the last word.
    tmpfs.fill();
    let since = receiver.mark();
    let scenario = format!("{FLEET}{}{}", lost(0, 2.0, None), lost(1, 3.0, None));
    let mut third = agent("full-disk-3", &scenario, &config);
    wait("GPU 1 lost again, refused", Duration::from_secs(30), || {
        receiver.saw(since, "1", "firing", false)
    });
    wait("the durable gauge at 0", Duration::from_secs(10), || {
        gauge(&third, DURABLE) == 0.0
    });
    kill9("the third agent", &mut third);
    tmpfs.free();
    assert_eq!(
        stored(&state).get("1").copied(),
        Some("resolved"),
        "GPU 1 in the outbox on disk after the kill on a full disk: its older state"
    );

    receiver.accept(true);
    let since = receiver.mark();
    let scenario = format!("{FLEET}{}{}", lost(0, 2.0, None), lost(1, 2.0, None));
    let mut fourth = agent("full-disk-4", &scenario, &config);
    wait("GPU 1's firing delivered", Duration::from_secs(30), || {
        receiver.saw(since, "1", "firing", true)
    });
    wait("the outbox drained", Duration::from_secs(30), || {
        gauge(&fourth, "gpu_sentinel_outbox_pending") == 0.0
    });
    std::thread::sleep(Duration::from_secs(2));
    let accepted = receiver.accepted();
    for gpu in ["0", "1"] {
        assert_eq!(
            accepted[gpu].last().map(String::as_str),
            Some("firing"),
            "GPU {gpu}'s newest state is the last one delivered: {accepted:?}"
        );
    }
    assert_eq!(gauge(&fourth, DURABLE), 1.0);
    kill9("the fourth agent", &mut fourth);
}

/// Compacts the redb file at `path` (no agent may hold it).
fn compact(path: &Path) {
    let mut db = redb::Database::create(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    db.compact()
        .unwrap_or_else(|e| panic!("compacting {}: {e}", path.display()));
}

/// GPU → status of the GpuLost notifications in the outbox file (no agent may hold it).
fn stored(state: &Path) -> BTreeMap<String, &'static str> {
    let outbox = Outbox::open(&state.join(FILE_NAME), 100).expect("the outbox opens");
    outbox
        .entries()
        .iter()
        .filter(|e| {
            e.notification
                .group_labels
                .get("alertname")
                .map(String::as_str)
                == Some("GpuLost")
        })
        .map(|e| {
            let gpu = e.notification.group_labels.get("gpu").cloned();
            (gpu.unwrap_or_default(), e.notification.status())
        })
        .collect()
}

/// `kill -9`, then prints what the agent logged (shown when the test fails).
fn kill9(name: &str, running: &mut Running) {
    running.agent.kill9();
    let mut log = String::new();
    if let Some(mut stderr) = running.agent.child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut stderr, &mut log);
    }
    eprintln!("--- {name} logged ---\n{log}");
}

/// Runs this test again inside `unshare -rm`, where a tmpfs can be mounted without root;
/// false when `unshare` cannot do that here (then the caller skips or fails).
fn in_namespace() -> bool {
    let Ok(exe) = std::env::current_exe() else {
        return false;
    };
    let probe = Command::new("unshare")
        .args(["-rm", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !probe {
        return false;
    }
    let out = Command::new("unshare")
        .arg("-rm")
        .arg(exe)
        .args([
            "--exact",
            &common::test_path(module_path!(), TEST_NAME),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(IN_NAMESPACE, "1")
        .output();
    let out = match out {
        Ok(out) => out,
        Err(e) => panic!("cannot run this test in `unshare -rm`: {e}"),
    };
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "the test failed inside `unshare -rm`:\n{printed}"
    );
    assert!(
        printed.contains("1 passed"),
        "inside `unshare -rm` the test did not run:\n{printed}"
    );
    true
}
