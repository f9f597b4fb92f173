//! [`ProcFs`]: the [`ProcessTable`] of a real (or fixture) `/proc` tree.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use super::{ProcessInfo, ProcessTable, cgroup};
use crate::model::Liveness;

/// Reads process facts from `<root>/<pid>/{stat,status,comm,cmdline,cgroup}` and
/// `<root>/uptime`, and user names from a passwd file.
///
/// In a Kubernetes DaemonSet, point `root` at the host's `/proc` (or run with `hostPID`)
/// and the passwd path at the host's `/etc/passwd`, since NVML reports host PIDs.
#[derive(Debug)]
pub struct ProcFs {
    root: PathBuf,
    passwd: PathBuf,
    hide_arguments: bool,
    max_command: usize,
    clock_ticks: u64,
    users: Mutex<Option<Passwd>>,
    /// This `/proc` shows a PID namespace of its own (a container without `hostPID`): the
    /// host PIDs NVML reports are not in it, so a missing one says nothing about liveness.
    foreign_pids: bool,
}

/// A parsed passwd file, reloaded when its modification time or size changes.
#[derive(Debug)]
struct Passwd {
    stamp: (Option<SystemTime>, u64),
    names: HashMap<u32, String>,
}

/// What `/proc/PID/stat` says.
struct Stat {
    comm: String,
    state: char,
    ppid: u32,
    session: u32,
    start_ticks: Option<u64>,
}

impl ProcFs {
    /// A table over the `/proc`-like tree at `root`, with `/etc/passwd` for user names,
    /// full command lines, at most 256 characters each.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        // SAFETY: sysconf has no preconditions; it only reads a constant of the system.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        Self {
            root: root.into(),
            passwd: PathBuf::from("/etc/passwd"),
            hide_arguments: false,
            max_command: 256,
            clock_ticks: u64::try_from(ticks).ok().filter(|&t| t > 0).unwrap_or(100),
            users: Mutex::new(None),
            foreign_pids: false,
        }
    }

    /// The host's `/proc`, at `root` (`/proc`, or where a container mounts the host's).
    /// In a PID namespace of its own (a container without `hostPID`), the PIDs NVML
    /// reports cannot be looked up in the agent's own `/proc`: they are reported with
    /// liveness unknown, never as gone — every job would otherwise look like a ghost. A
    /// tree elsewhere is taken for the host's, as node_exporter's `--path.procfs` is.
    pub fn host(root: &Path) -> Self {
        let mut table = Self::new(root);
        table.foreign_pids = root == Path::new("/proc")
            && nested_pid_namespace(
                &std::fs::read_to_string("/proc/self/status").unwrap_or_default(),
            );
        if table.foreign_pids {
            tracing::warn!(
                "gpu-sentinel runs in a PID namespace of its own: GPU processes cannot be \
                 resolved to owners, and ghost processes cannot be told (in Kubernetes, run \
                 the pod with hostPID: true)"
            );
        }
        table
    }

    /// Reads user names from this passwd-format file instead of `/etc/passwd`.
    pub fn with_passwd(mut self, path: impl Into<PathBuf>) -> Self {
        self.passwd = path.into();
        self
    }

    /// Keeps only the program of each command line: arguments often carry secrets
    /// (tokens, passwords, URLs with credentials).
    pub fn hide_arguments(mut self, hide: bool) -> Self {
        self.hide_arguments = hide;
        self
    }

    /// Longest command kept, in characters; longer ones end in `…`.
    pub fn max_command(mut self, chars: usize) -> Self {
        self.max_command = chars.max(1);
        self
    }

    /// Clock ticks per second of `stat`'s start time (the system's `_SC_CLK_TCK` by
    /// default); fixtures written on another system may need theirs.
    pub fn clock_ticks(mut self, per_second: u64) -> Self {
        self.clock_ticks = per_second.max(1);
        self
    }

    fn stat_path(&self, pid: u32) -> PathBuf {
        self.root.join(pid.to_string()).join("stat")
    }

    fn read(&self, pid: u32, file: &str) -> io::Result<Vec<u8>> {
        std::fs::read(self.root.join(pid.to_string()).join(file))
    }

    fn read_text(&self, pid: u32, file: &str) -> Option<String> {
        self.read(pid, file)
            .ok()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    fn stat(&self, pid: u32) -> io::Result<Option<Stat>> {
        let raw = self.read(pid, "stat")?;
        Ok(parse_stat(&String::from_utf8_lossy(&raw)))
    }

    /// Whether the parent a process was re-parented to is an init: PID 1, or a systemd
    /// user manager (a child subreaper that adopts a logged-out user's orphans).
    fn parent_is_init(&self, ppid: u32) -> bool {
        ppid == 1
            || (ppid > 1
                && self
                    .read_text(ppid, "comm")
                    .is_some_and(|c| c.trim_end() == "systemd"))
    }

    /// The name of `uid` in the passwd file (re-read when it changes), else the number.
    pub(crate) fn user_name(&self, uid: u32) -> String {
        let stamp = std::fs::metadata(&self.passwd)
            .map(|m| (m.modified().ok(), m.len()))
            .ok();
        let Ok(mut cache) = self.users.lock() else {
            return uid.to_string();
        };
        let stale = match (&*cache, stamp) {
            (Some(p), Some(s)) => p.stamp != s,
            (None, Some(_)) => true,
            (_, None) => false,
        };
        if stale {
            *cache = std::fs::read_to_string(&self.passwd)
                .ok()
                .map(|text| Passwd {
                    stamp: stamp.unwrap_or((None, 0)),
                    names: parse_passwd(&text),
                });
        }
        cache
            .as_ref()
            .and_then(|p| p.names.get(&uid).cloned())
            .unwrap_or_else(|| uid.to_string())
    }

    fn runtime_seconds(&self, start_ticks: u64) -> Option<f64> {
        let uptime = std::fs::read_to_string(self.root.join("uptime")).ok()?;
        let uptime: f64 = uptime.split_whitespace().next()?.parse().ok()?;
        let started = start_ticks as f64 / self.clock_ticks as f64;
        Some((uptime - started).max(0.0))
    }

    fn command(&self, raw: &[u8]) -> Option<String> {
        let args: Vec<String> = raw
            .split(|&b| b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let command = if self.hide_arguments {
            // A process that rewrote its title (setproctitle) has one argument with spaces.
            args.first()?.split_whitespace().next()?.to_string()
        } else {
            args.join(" ")
        };
        let command: String = command
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        Some(truncate(command.trim(), self.max_command)).filter(|c| !c.is_empty())
    }
}

/// Whether `/proc/self/status` (its `NSpid:` line lists this process's PID in each
/// namespace from the outermost in) shows more than one PID namespace.
fn nested_pid_namespace(status: &str) -> bool {
    status_field(status, "NSpid:").is_some_and(|v| v.split_whitespace().count() > 1)
}

impl ProcessTable for ProcFs {
    fn lookup(&self, pid: u32) -> ProcessInfo {
        let mut unreadable = None;
        let stat = match self.stat(pid) {
            Ok(stat) => stat,
            // ESRCH: the process exited between open and read.
            Err(e)
                if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH) =>
            {
                let dir_gone = matches!(
                    std::fs::symlink_metadata(self.root.join(pid.to_string())),
                    Err(e) if e.kind() == io::ErrorKind::NotFound
                );
                if self.foreign_pids {
                    return ProcessInfo::default();
                }
                // Under `hidepid=invisible` another user's live process looks just like
                // one that exited: gone only while other users' processes can be seen.
                if let Err(hidden) = self.others_visible() {
                    return ProcessInfo {
                        unreadable: Some(hidden),
                        ..ProcessInfo::default()
                    };
                }
                if dir_gone || e.raw_os_error() == Some(libc::ESRCH) {
                    return ProcessInfo {
                        liveness: Liveness::Gone,
                        ..ProcessInfo::default()
                    };
                }
                None
            }
            // Unreadable (hidepid, permissions): say nothing rather than guess, and say
            // that the table cannot tell.
            Err(e) => {
                unreadable = Some(format!(
                    "cannot read {}: {e}",
                    self.stat_path(pid).display()
                ));
                None
            }
        };
        let status = self.read_text(pid, "status").unwrap_or_default();
        let uid =
            status_field(&status, "Uid:").and_then(|v| v.split_whitespace().next()?.parse().ok());
        let owner = self
            .read_text(pid, "cgroup")
            .map(|c| cgroup::owner(&c))
            .unwrap_or_default();
        let comm = self
            .read_text(pid, "comm")
            .map(|c| c.trim_end_matches('\n').to_string())
            .filter(|c| !c.is_empty())
            .or_else(|| stat.as_ref().map(|s| s.comm.clone()));

        ProcessInfo {
            liveness: stat
                .as_ref()
                .map_or(Liveness::Unknown, |s| self.liveness(pid, s, &status)),
            process: comm,
            command: self
                .read(pid, "cmdline")
                .ok()
                .and_then(|raw| self.command(&raw)),
            user: uid.map(|uid| self.user_name(uid)),
            uid,
            container: owner.container,
            pod: owner.pod,
            hpc_job: owner.hpc_job,
            runtime_seconds: stat
                .as_ref()
                .and_then(|s| s.start_ticks)
                .and_then(|t| self.runtime_seconds(t)),
            unreadable,
        }
    }

    fn others_visible(&self) -> Result<(), String> {
        // PID 1 (the init of the table's PID namespace) is always there and never the
        // agent's own: if its entry cannot be read, no other user's can.
        match self.read(1, "stat") {
            Ok(_) => Ok(()),
            Err(e) => Err(format!(
                "{}: other users' processes are hidden from gpu-sentinel (cannot read {}: \
                 {e}); mount /proc without hidepid, add the agent to its gid= group, or \
                 grant CAP_SYS_PTRACE",
                self.root.display(),
                self.stat_path(1).display()
            )),
        }
    }
}

impl ProcFs {
    /// `Orphaned` means: re-parented to an init, and not something meant to run detached.
    /// A process that is its own session leader (`setsid`: every systemd service, every
    /// classic daemon, runc's container init) chose to outlive its parent; so did a process
    /// that is PID 1 of its own PID namespace (a container's init). What is left — a job
    /// whose shell, launcher or scheduler step died under it — is an orphan.
    fn liveness(&self, pid: u32, stat: &Stat, status: &str) -> Liveness {
        match stat.state {
            'Z' => return Liveness::Zombie,
            'X' | 'x' => return Liveness::Gone,
            _ => {}
        }
        let container_init = status_field(status, "NSpid:").is_some_and(|v| {
            let ids: Vec<&str> = v.split_whitespace().collect();
            ids.len() > 1 && ids.last() == Some(&"1")
        });
        let session_leader = stat.session == pid;
        if self.parent_is_init(stat.ppid) && !session_leader && !container_init {
            Liveness::Orphaned
        } else {
            Liveness::Running
        }
    }
}

/// `pid (comm) S ppid pgrp session … starttime …`; comm may hold spaces and parentheses,
/// so the fields start after the *last* `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let fields: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    let number = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    Some(Stat {
        comm,
        state: fields.first()?.chars().next()?,
        ppid: u32::try_from(number(1)?).ok()?,
        session: number(3).and_then(|s| u32::try_from(s).ok()).unwrap_or(0),
        start_ticks: number(19),
    })
}

fn status_field<'a>(status: &'a str, key: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .map(str::trim)
}

fn parse_passwd(text: &str) -> HashMap<u32, String> {
    let mut names = HashMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let mut fields = line.split(':');
        let (Some(name), Some(_), Some(uid)) = (fields.next(), fields.next(), fields.next()) else {
            continue;
        };
        if let (false, Ok(uid)) = (name.is_empty(), uid.parse()) {
            // The first entry for a uid is the one tools like `ls` show.
            names.entry(uid).or_insert_with(|| name.to_string());
        }
    }
    names
}

/// At most `max` characters, the last being `…` when something was cut.
fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max - 1).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nested_pid_namespace_is_recognised() {
        assert!(!nested_pid_namespace("Name:\tagent\nNSpid:\t4242\n"));
        assert!(nested_pid_namespace("Name:\tagent\nNSpid:\t4242\t1\n"));
        assert!(
            !nested_pid_namespace("Name:\tagent\n"),
            "old kernels have no NSpid"
        );
    }

    #[test]
    fn foreign_pids_are_unknown_not_gone() {
        let root = fixture_root("foreign", true);
        let mut table = ProcFs::new(&root);
        table.foreign_pids = true;
        assert_eq!(table.lookup(123).liveness, Liveness::Unknown);
        table.foreign_pids = false;
        assert_eq!(table.lookup(123).liveness, Liveness::Gone);
    }

    /// An empty `/proc`-like tree, with PID 1 in it when `init`.
    fn fixture_root(name: &str, init: bool) -> PathBuf {
        let root = std::env::temp_dir().join(format!("gs-procfs-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("1")).unwrap_or_else(|e| panic!("{e}"));
        if init {
            std::fs::write(
                root.join("1/stat"),
                "1 (init) S 0 1 1 0 -1 0 0 0 0 0 0 0 0 0",
            )
            .unwrap_or_else(|e| panic!("{e}"));
        }
        root
    }

    #[test]
    fn hidden_processes_are_unknown_and_say_why() {
        // hidepid=invisible: PID 1 is not there for the agent, nor anyone else's.
        let table = ProcFs::new(fixture_root("hidden", false));
        let info = table.lookup(4242);
        assert_eq!(info.liveness, Liveness::Unknown, "not gone: hidden");
        let why = info.unreadable.unwrap_or_default();
        assert!(why.contains("other users' processes are hidden"), "{why}");
        assert!(why.contains("hidepid"), "{why}");
        assert!(table.others_visible().is_err());
    }

    #[test]
    fn an_entry_that_cannot_be_read_is_unknown_and_says_why() {
        let root = fixture_root("unreadable", true);
        // A `stat` that cannot be read (as root no mode bit denies it; a folder does).
        std::fs::create_dir_all(root.join("77/stat")).unwrap_or_else(|e| panic!("{e}"));
        let table = ProcFs::new(&root);
        assert_eq!(table.others_visible(), Ok(()));
        let info = table.lookup(77);
        assert_eq!(info.liveness, Liveness::Unknown);
        let why = info.unreadable.unwrap_or_default();
        assert!(
            why.contains("cannot read") && why.contains("77/stat"),
            "{why}"
        );
        let gone = table.lookup(78);
        assert_eq!((gone.liveness, gone.unreadable), (Liveness::Gone, None));
    }

    #[test]
    fn stat_with_parentheses_in_the_name() {
        let s = parse_stat(
            "77 (my (odd) proc) S 1 77 70 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 4200 1 2 3",
        )
        .unwrap_or_else(|| panic!("stat not parsed"));
        assert_eq!(
            (s.comm.as_str(), s.state, s.ppid, s.session, s.start_ticks),
            ("my (odd) proc", 'S', 1, 70, Some(4200))
        );
        assert!(parse_stat("").is_none());
        assert!(parse_stat("12 (x").is_none());
        assert!(parse_stat("12 (x) ").is_none());
    }

    #[test]
    fn passwd_lines_tolerate_junk() {
        let names = parse_passwd(
            "root:x:0:0::/root:/bin/bash\n# comment\n\nbad line\n:x:5:5\nalice:x:1000:1000::/home/alice:/bin/sh\ntoor:x:0:0::/:/bin/sh\n",
        );
        assert_eq!(names.get(&0).map(String::as_str), Some("root"));
        assert_eq!(names.get(&1000).map(String::as_str), Some("alice"));
        assert_eq!(names.len(), 2);
    }

    #[test]
    fn commands_are_truncated_and_can_hide_arguments() {
        let p = ProcFs::new("/nonexistent").max_command(12);
        assert_eq!(
            p.command(b"python\0train.py\0--lr\0"),
            Some("python trai…".into())
        );
        assert_eq!(p.command(b""), None);
        assert_eq!(p.command(b"\0\0"), None);
        let p = p.hide_arguments(true);
        assert_eq!(
            p.command(b"/usr/bin/python3\0train.py\0--token=s3cret\0"),
            Some("/usr/bin/py…".into())
        );
        let p = ProcFs::new("/nonexistent").hide_arguments(true);
        assert_eq!(
            p.command(b"vllm serve --api-key s3cret"),
            Some("vllm".into())
        );
        let p = ProcFs::new("/nonexistent");
        assert_eq!(p.command(b"a\nb\0c\0"), Some("a b c".into()));
    }
}
