//! One agent per state directory: an advisory lock (`flock`) on a file inside it.
//!
//! Two agents on one directory would both fire and deliver every alert (the second one's
//! outbox only in memory, since the store is locked) and race on the state files' temporary
//! names. So `run` takes this lock before it opens anything there, and a second agent exits
//! at once, naming the directory and the holder's PID. The kernel drops the lock when the
//! holder dies, kill -9 included, so a stale file never keeps an agent from starting.

use anyhow::Context as _;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// Name of the lock file inside the state directory.
pub const LOCK_FILE: &str = "gpu-sentinel.lock";

/// Held for the life of the process; dropping it (closing the file) releases the lock.
#[derive(Debug)]
pub struct StateLock {
    _file: File,
    path: PathBuf,
}

impl StateLock {
    /// Takes the lock on `dir`, or says who holds it.
    pub fn acquire(dir: &Path) -> anyhow::Result<StateLock> {
        let path = dir.join(LOCK_FILE);
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("cannot open the state lock {}", path.display()))?;
        // SAFETY: flock on a descriptor this function owns; it touches no memory.
        let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if locked != 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::WouldBlock {
                let holder = holder_pid(&mut file)
                    .map(|pid| format!(" (PID {pid})"))
                    .unwrap_or_default();
                anyhow::bail!(
                    "state directory {} is in use by another gpu-sentinel{holder}; \
                     run one agent per [state] dir (the lock is {})",
                    dir.display(),
                    path.display()
                );
            }
            anyhow::bail!("cannot lock {}: {err}", path.display());
        }
        // The holder's PID, for the message a second agent prints. Only written while
        // holding the lock, so a reader never sees another agent's half-written number.
        let written = file
            .set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)))
            .and_then(|_| writeln!(file, "{}", std::process::id()));
        if let Err(e) = written {
            // The lock holds without the PID in it; only the message would be poorer.
            tracing::warn!("cannot write the PID into {}: {e}", path.display());
        }
        Ok(StateLock { _file: file, path })
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The PID the holder wrote, if the file holds one.
fn holder_pid(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    file.take(32).read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("gs-lock-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        dir
    }

    #[test]
    fn a_second_lock_on_the_same_directory_is_refused_naming_the_holder() {
        let dir = temp_dir("second");
        let first = StateLock::acquire(&dir).expect("the first lock");
        // flock locks belong to the open file description, so a second open in the same
        // process conflicts just as another process would.
        let err = StateLock::acquire(&dir).expect_err("the second lock is refused");
        let text = err.to_string();
        assert!(text.contains(&dir.display().to_string()), "{text}");
        assert!(
            text.contains(&format!("PID {}", std::process::id())),
            "{text}"
        );
        drop(first);
        StateLock::acquire(&dir).expect("free again once the holder let go");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_stale_file_without_a_holder_does_not_block() {
        let dir = temp_dir("stale");
        std::fs::write(dir.join(LOCK_FILE), "999999999\n").expect("stale file");
        let lock = StateLock::acquire(&dir).expect("a file nobody locks is free");
        let pid = std::fs::read_to_string(lock.path()).expect("read back");
        assert_eq!(pid.trim(), std::process::id().to_string());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn garbage_in_the_file_only_drops_the_pid_from_the_message() {
        let dir = temp_dir("garbage");
        let _first = StateLock::acquire(&dir).expect("the first lock");
        let mut other = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join(LOCK_FILE))
            .expect("open");
        other.write_all(b"\xff\xfenot a pid").expect("write");
        let text = StateLock::acquire(&dir).expect_err("refused").to_string();
        assert!(text.contains("in use by another gpu-sentinel;"), "{text}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
