//! JSON state files in the state directory, written so a crash never leaves half a file,
//! and read so a damaged one is kept as evidence rather than overwritten.
//!
//! A document is written to a temporary file, flushed to disk and renamed over the old
//! one; the directory is synced so the rename itself survives a power cut. A file that
//! cannot be used (unreadable, not UTF-8, not JSON, not the expected shape) is renamed to
//! `<name>.corrupt-<UTC time>` with one warning naming both paths, and the caller starts
//! fresh rather than refusing to run. Failed saves are told by [`SaveLog`].

mod save_log;

pub use save_log::SaveLog;

use std::fs::{self, File};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Why a state file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum Unusable {
    #[error("cannot read it: {0}")]
    Read(#[source] std::io::Error),
    #[error("not the expected JSON: {0}")]
    Parse(#[source] serde_json::Error),
}

/// The document at `path`; None when there is none yet or it is unusable (then it is
/// moved aside, see [`set_aside`]).
pub fn load<T: DeserializeOwned>(path: &Path) -> Option<T> {
    match read(path) {
        Ok(value) => value,
        Err(why) => {
            set_aside(path, &why.to_string());
            None
        }
    }
}

/// The document at `path`, None when the file does not exist. Bytes, not text, are read:
/// the JSON parser rejects invalid UTF-8 itself, so such a file is unusable like any other
/// damage instead of a read error the caller might write over.
pub fn read<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, Unusable> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Unusable::Read(e)),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(Unusable::Parse)
}

/// Moves an unusable state file out of the way, to `<name>.corrupt-<UTC time>` (with a
/// counter should that name be taken), and warns once, naming the file and `why`. Returns
/// where the file went; None when it could not be moved (the warning says so).
pub fn set_aside(path: &Path, why: &str) -> Option<PathBuf> {
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%SZ");
    let mut base = path.as_os_str().to_owned();
    base.push(format!(".corrupt-{stamp}"));
    let free = (1..1000)
        .map(|n| {
            let mut name = base.clone();
            if n > 1 {
                name.push(format!("-{n}"));
            }
            PathBuf::from(name)
        })
        .find(|candidate| fs::symlink_metadata(candidate).is_err());
    let moved = match free {
        Some(aside) => fs::rename(path, &aside).map(|()| aside),
        None => Err(std::io::Error::other("no free name for a copy")),
    };
    match moved {
        Ok(aside) => {
            tracing::warn!(
                "state file {} is unusable ({why}); kept as {} and starting fresh",
                path.display(),
                aside.display()
            );
            Some(aside)
        }
        Err(e) => {
            tracing::warn!(
                "state file {} is unusable ({why}) and cannot be moved aside ({e}); starting fresh",
                path.display()
            );
            None
        }
    }
}

/// Writes `value` atomically: temporary file, fsync, rename, fsync of the directory.
pub fn save<T: Serialize>(path: &Path, value: &T) -> std::io::Result<()> {
    let body = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    {
        let mut file = File::create(&tmp)?;
        file.write_all(&body)?;
        file.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests;
