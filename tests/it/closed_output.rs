//! A reader that goes away early (`gpu-sentinel replay FILE 2>&1 | head -1`): the one-shot
//! commands end quietly, killed by SIGPIPE as `cat` would be, never with a panic (exit 101);
//! `run` survives a closed standard error and keeps collecting. Output that cannot be
//! written for another reason (a full disk, a standard output closed at start) is an error
//! message, not a panic and not exit status 0.

use crate::common;

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write as _};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use common::{Agent, binary, repo, samples, temp_file};

/// A pipe as (read end, write end), closed on exec so no other test's child inherits it
/// (an inherited read end would keep the pipe open and hide the EPIPE under test).
fn pipe() -> (File, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: pipe2(2) writes two new descriptors into the array, which we own.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(rc, 0, "pipe2: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just created and belong to nobody else.
    unsafe { (File::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// Starts the binary with standard output and standard error on one pipe (`2>&1`) and
/// standard input piped; returns the child and the read end of the output pipe.
fn spawn_merged(args: &[&str]) -> (Child, BufReader<File>) {
    let (read, write) = pipe();
    let write_err = write.try_clone().expect("dup of the pipe");
    // The command is dropped at the end of the block: it holds copies of the write end,
    // which would keep the pipe open after the child's end closes.
    let child = {
        let mut cmd = Command::new(binary());
        cmd.args(args)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::from(write))
            .stderr(Stdio::from(write_err));
        cmd.spawn().expect("the gpu-sentinel binary starts")
    };
    (child, BufReader::new(read))
}

/// What a Unix tool killed by a closed pipe exits with; a panic would be code 101.
fn assert_ended_by_sigpipe(status: ExitStatus, what: &str) {
    assert_ne!(status.code(), Some(101), "{what} panicked");
    assert_eq!(
        status.signal(),
        Some(libc::SIGPIPE),
        "{what} should end as killed by SIGPIPE, ended {status:?}"
    );
}

#[test]
fn replay_into_head_ends_quietly() {
    let (mut child, mut output) = spawn_merged(&["replay", "-"]);
    let fixture =
        std::fs::read_to_string(repo().join("tests/fixtures/smi/units.csv")).expect("fixture");
    // A column the model has no place for (accounting mode) makes the first line of output a
    // warning, written while the recording is still being read.
    let recording: String = fixture
        .lines()
        .enumerate()
        .map(|(i, line)| match i {
            0 => format!("{line}, accounting.mode\n"),
            _ => format!("{line}, Disabled\n"),
        })
        .collect();
    let mut stdin = child.stdin.take().expect("stdin is piped");
    // Should no warning come, the read below would wait for ever on a replay waiting for
    // the end of its input: kill it after a minute, so that the read ends and the test
    // fails instead of hanging.
    let pid = child.id().to_string();
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(60));
        let _ = Command::new("kill").args(["-KILL", &pid]).status();
    });
    stdin
        .write_all(recording.as_bytes())
        .expect("the recording is fed");
    // The recording's first warning (an unused column) comes before the report.
    let mut first = String::new();
    output.read_line(&mut first).expect("one line of output");
    assert!(first.contains("warning"), "{first:?}");
    // `head -1` exits: the report, written once the recording ends, meets a closed pipe.
    drop(output);
    drop(stdin);
    let status = child.wait().expect("replay exits");
    assert_ended_by_sigpipe(status, "replay");
}

#[test]
fn record_into_head_ends_quietly_with_merged_stderr() {
    let (mut child, mut output) = spawn_merged(&[
        "record",
        "--simulate",
        "--simulated-duration",
        "1h",
        "--interval",
        "10s",
        "--out",
        "-",
    ]);
    let mut first = String::new();
    output.read_line(&mut first).expect("one line of output");
    assert!(first.starts_with('{'), "{first:?}");
    drop(output);
    drop(child.stdin.take());
    let status = child.wait().expect("record exits");
    assert_ended_by_sigpipe(status, "record");
}

#[test]
fn record_into_head_says_nothing_on_stderr() {
    let mut child = Command::new(binary())
        .args([
            "record",
            "--simulate",
            "--simulated-duration",
            "1h",
            "--interval",
            "10s",
            "--out",
            "-",
        ])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the gpu-sentinel binary starts");
    let mut output = BufReader::new(child.stdout.take().expect("stdout is piped"));
    let mut first = String::new();
    output.read_line(&mut first).expect("one line of output");
    drop(output);
    let mut stderr = String::new();
    if let Some(mut err) = child.stderr.take() {
        err.read_to_string(&mut stderr).expect("stderr is read");
    }
    let status = child.wait().expect("record exits");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        !stderr.contains("error"),
        "a closed reader is not an error: {stderr}"
    );
    assert_ended_by_sigpipe(status, "record");
}

#[test]
fn run_keeps_collecting_after_its_stderr_closes() {
    let config = temp_file(
        "closed-stderr.toml",
        "[collect]\ninterval = \"200ms\"\nkmsg = \"off\"\n",
    );
    // Debug level logs every collection: each one writes to the closed pipe.
    let mut agent = Agent::start(
        &["--simulate", "--config", config.to_str().unwrap()],
        &[("RUST_LOG", "debug")],
    );
    let collected_at = |agent: &Agent| {
        samples(
            &agent.get("/metrics").text(),
            "gpu_sentinel_last_collect_timestamp_seconds",
        )
        .first()
        .map(|(_, v)| *v)
    };
    agent.metrics();
    let before = collected_at(&agent).expect("a first collection");
    drop(agent.child.stderr.take());
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        agent
            .child
            .try_wait()
            .expect("the agent's status")
            .is_none(),
        "the agent exited when its stderr closed"
    );
    agent.wait_until(Duration::from_secs(10), |a| {
        collected_at(a).is_some_and(|at| at >= before + 2.0)
    });
}

#[test]
fn output_to_a_full_device_is_an_error_not_a_panic() {
    let Ok(full) = File::options().write(true).open("/dev/full") else {
        eprintln!("skipping: no /dev/full");
        return;
    };
    let fixture = repo().join("tests/fixtures/smi/units.csv");
    for args in [
        vec!["replay", fixture.to_str().unwrap()],
        vec!["snapshot", "--simulate"],
    ] {
        let output = Command::new(binary())
            .args(&args)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::from(full.try_clone().expect("dup of /dev/full")))
            .stderr(Stdio::piped())
            .output()
            .expect("the gpu-sentinel binary runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(
            stderr.contains("error: cannot write to standard output: No space left on device"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn output_to_a_closed_descriptor_is_an_error_not_exit_zero() {
    // `gpu-sentinel snapshot >&-`: Rust's standard output would report success on the
    // closed descriptor, and the output would be lost with exit status 0.
    let fixture = repo().join("tests/fixtures/smi/units.csv");
    let fixture = fixture.to_str().unwrap();
    for command in [
        format!("exec {:?} snapshot --simulate >&-", binary()),
        format!("exec {:?} replay {fixture:?} >&-", binary()),
        format!(
            "exec {:?} record --simulate --simulated-duration 1m --out - >&-",
            binary()
        ),
    ] {
        let output = Command::new("sh")
            .args(["-c", &command])
            .env("RUST_LOG", "warn")
            .stderr(Stdio::piped())
            .output()
            .expect("sh runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{command}: {stderr}");
        assert!(
            stderr.contains("standard output: it is closed"),
            "{command}: {stderr}"
        );
    }
}
