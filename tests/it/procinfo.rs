//! Process ownership and liveness, from a fixture `/proc` tree (tests/fixtures/proc, with
//! tests/fixtures/etc/passwd beside it) and from real processes this test spawns.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gpu_sentinel::model::{Liveness, ProcessSample};
use gpu_sentinel::procinfo::{ProcFs, ProcessTable, enrich};

const CID: &str = "4c1a6b9f0e2d3c4b5a69788796a5b4c3d2e1f00112233445566778899aabbccd";
const POD: &str = "0f3d2c1a-5b6e-4c7d-8e9f-0a1b2c3d4e5f";

fn fixtures() -> ProcFs {
    let base = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    ProcFs::new(base.join("proc"))
        .with_passwd(base.join("etc/passwd"))
        .clock_ticks(100)
}

#[test]
fn training_process_in_a_kubernetes_pod() {
    let info = fixtures().lookup(4242);
    assert_eq!(info.liveness, Liveness::Running);
    assert_eq!(info.process.as_deref(), Some("python"));
    assert_eq!(
        info.command.as_deref(),
        Some("python train.py --lr 0.1 --wandb-key=SECRET")
    );
    assert_eq!(
        (info.user.as_deref(), info.uid),
        (Some("alice"), Some(1000))
    );
    assert_eq!(info.container.as_deref(), Some(CID));
    assert_eq!(info.pod.as_deref(), Some(POD));
    // uptime 100000 s, started at tick 6,400,000 of 100 Hz.
    assert_eq!(info.runtime_seconds, Some(36_000.0));
}

#[test]
fn hidden_arguments_and_truncated_commands() {
    let info = fixtures().hide_arguments(true).lookup(6001);
    assert_eq!(info.command.as_deref(), Some("python3"));
    let info = fixtures().hide_arguments(true).lookup(9001);
    assert_eq!(
        info.command.as_deref(),
        Some("vllm"),
        "a rewritten title is split too"
    );
    let info = fixtures().max_command(20).lookup(6001);
    let command = info.command.unwrap_or_default();
    assert_eq!(command, "python3 -m torch.di…");
    assert!(!command.contains("SECRET"));
}

#[test]
fn zombie_is_seen_and_has_no_command() {
    let info = fixtures().lookup(5151);
    assert_eq!(info.liveness, Liveness::Zombie);
    assert_eq!(info.command, None);
    assert_eq!(info.pod.as_deref(), Some(POD));
}

#[test]
fn orphans_are_told_apart_from_services_and_container_inits() {
    let table = fixtures();
    // Login shell gone: re-parented to init, not a session leader.
    assert_eq!(table.lookup(6001).liveness, Liveness::Orphaned);
    assert_eq!(table.lookup(6001).user.as_deref(), Some("bob"));
    // A service is init's child by design and leads its own session.
    assert_eq!(table.lookup(6002).liveness, Liveness::Running);
    // A container's init (PID 1 in its namespace) whose runtime parent went away.
    let init = table.lookup(7001);
    assert_eq!(init.liveness, Liveness::Running);
    assert_eq!(
        init.container.as_deref(),
        Some("9f8e7d6c5b4a39281706f5e4d3c2b1a0ffeeddccbbaa99887766554433221100")
    );
    assert_eq!(init.user.as_deref(), Some("root"));
    // Adopted by a systemd user manager (a subreaper), not by PID 1.
    assert_eq!(table.lookup(8001).liveness, Liveness::Orphaned);
    assert_eq!(table.lookup(8000).liveness, Liveness::Running);
}

#[test]
fn odd_names_unknown_users_and_cri_o_pods() {
    let info = fixtures().lookup(9001);
    assert_eq!(info.process.as_deref(), Some("my (odd) proc"));
    assert_eq!((info.user.as_deref(), info.uid), (Some("4242"), Some(4242)));
    assert_eq!(
        info.pod.as_deref(),
        Some("7c2e9a41-3d5b-4f6a-b8c9-d0e1f2a3b4c5")
    );
    assert_eq!(
        info.container.as_deref(),
        Some("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
    );
}

#[test]
fn absent_pids_are_gone_but_unreadable_ones_are_unknown() {
    let table = fixtures();
    assert_eq!(table.lookup(3333).liveness, Liveness::Gone);
    let hidden = table.lookup(9100);
    assert_eq!(hidden.liveness, Liveness::Unknown);
    assert_eq!(hidden.process.as_deref(), Some("secretive"));
}

#[test]
fn enrich_fills_samples_from_the_fixture_tree() {
    let mut procs = vec![
        ProcessSample {
            gpu: 0,
            uuid: "GPU-0".into(),
            pid: 4242,
            used_memory_bytes: Some(40 << 30),
            ..Default::default()
        },
        ProcessSample {
            gpu: 1,
            uuid: "GPU-1".into(),
            pid: 6001,
            ..Default::default()
        },
        ProcessSample {
            gpu: 1,
            uuid: "GPU-1".into(),
            pid: 3333,
            ..Default::default()
        },
    ];
    enrich(&fixtures(), &mut procs);
    assert_eq!(procs[0].liveness, Liveness::Running);
    assert_eq!(procs[0].user.as_deref(), Some("alice"));
    assert_eq!(procs[0].pod.as_deref(), Some(POD));
    assert_eq!(procs[0].container.as_deref(), Some(CID));
    assert_eq!(
        procs[0].used_memory_bytes,
        Some(40 << 30),
        "NVML's values stay"
    );
    assert_eq!(procs[1].liveness, Liveness::Orphaned);
    assert_eq!(procs[1].process.as_deref(), Some("python3"));
    assert_eq!(procs[2].liveness, Liveness::Gone);
    assert_eq!(procs[2].user, None);
}

/// Waits until `cond` holds, for at most five seconds.
fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

fn own_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[test]
fn real_child_is_running_then_gone_once_killed() {
    let table = ProcFs::host();
    let mut child = Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("spawn sleep");
    let pid = child.id();
    let info = table.lookup(pid);
    assert_eq!(info.liveness, Liveness::Running);
    assert_eq!(info.uid, own_uid());
    assert!(info.user.is_some());
    assert!(
        info.runtime_seconds
            .is_some_and(|s| (0.0..60.0).contains(&s)),
        "{info:?}"
    );
    // comm and cmdline change at exec, and cmdline reads empty while exec swaps memory.
    assert!(
        eventually(|| {
            let info = table.lookup(pid);
            info.process.as_deref() == Some("sleep") && info.command.as_deref() == Some("sleep 30")
        }),
        "after exec: {:?}",
        table.lookup(pid)
    );

    child.kill().expect("kill sleep");
    child.wait().expect("reap sleep");
    assert_eq!(table.lookup(pid).liveness, Liveness::Gone);
}

#[test]
fn real_unreaped_child_is_a_zombie() {
    let table = ProcFs::host();
    let mut child = Command::new("true").spawn().expect("spawn true");
    let pid = child.id();
    // Not waited for: once it exits it stays a zombie until reaped.
    assert!(
        eventually(|| table.lookup(pid).liveness == Liveness::Zombie),
        "child {pid} never became a zombie: {:?}",
        table.lookup(pid)
    );
    child.wait().expect("reap true");
    assert_eq!(table.lookup(pid).liveness, Liveness::Gone);
}

#[test]
fn real_orphan_is_seen_as_orphaned() {
    let table = ProcFs::host();
    // The shell starts a background sleep and exits at once, orphaning it.
    let out = Command::new("sh")
        .args(["-c", "sleep 30 >/dev/null 2>&1 & echo $!"])
        .stdout(Stdio::piped())
        .output()
        .expect("run sh");
    let pid: u32 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("sh printed the orphan's pid");
    let kill = || {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    };
    let ppid = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("PPid:"))
                .and_then(|v| v.trim().parse::<u32>().ok())
        });
    let adopter = ppid.and_then(|p| std::fs::read_to_string(format!("/proc/{p}/comm")).ok());
    let by_init = ppid == Some(1) || adopter.as_deref().map(str::trim_end) == Some("systemd");
    let seen = table.lookup(pid).liveness;
    kill();
    if by_init {
        assert_eq!(seen, Liveness::Orphaned);
    } else {
        // Adopted by some other subreaper (a test harness): it has a living parent that is
        // not an init, which is not what this agent calls an orphan.
        assert_eq!(seen, Liveness::Running, "adopted by {ppid:?} {adopter:?}");
    }
}

#[test]
fn slurm_jobs_are_named_from_cgroup_v1_and_v2() {
    // slurmstepd's cgroup v1 tree (/slurm/uid_<uid>/job_<id>/step_<n>/task_<n>).
    let v1 = fixtures().lookup(6101);
    assert_eq!(v1.hpc_job.as_deref(), Some("4242"));
    assert_eq!(v1.user.as_deref(), Some("bob"));
    // cgroup v2: <node>_slurmstepd.scope/job_<id>/step_batch/user/task_0.
    let v2 = fixtures().lookup(6102);
    assert_eq!(v2.hpc_job.as_deref(), Some("977"));
    // A session scope is no Slurm job.
    assert_eq!(fixtures().lookup(6001).hpc_job, None);
}
