//! JSON state files in the state directory, written so a crash never leaves half a file.
//!
//! A document is written to a temporary file, flushed to disk and renamed over the old
//! one; the directory is synced so the rename itself survives a power cut. A file that
//! cannot be read back (corruption, another format) is moved aside with a warning and the
//! caller starts fresh rather than refusing to run.

use std::fs::{self, File};
use std::io::Write as _;
use std::path::Path;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// The document at `path`; None when there is none yet or it is unusable (then it is
/// moved aside to `<name>.unreadable` and a warning says why).
pub fn load<T: DeserializeOwned>(path: &Path) -> Option<T> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!("cannot read {}: {e}; starting fresh", path.display());
            return None;
        }
    };
    match serde_json::from_str(&text) {
        Ok(value) => Some(value),
        Err(e) => {
            set_aside(path, &e.to_string());
            None
        }
    }
}

/// Moves an unusable state file out of the way, saying why.
pub fn set_aside(path: &Path, why: &str) {
    let mut aside = path.as_os_str().to_owned();
    aside.push(".unreadable");
    let aside = std::path::PathBuf::from(aside);
    let moved = fs::rename(path, &aside).is_ok();
    tracing::warn!(
        "state file {} is unusable ({why}); {}starting fresh",
        path.display(),
        if moved {
            format!("moved to {}, ", aside.display())
        } else {
            String::new()
        }
    );
}

/// Writes `value` atomically: temporary file, fsync, rename, fsync of the directory.
pub fn save<T: Serialize>(path: &Path, value: &T) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    {
        let mut file = File::create(&tmp)?;
        let body = serde_json::to_vec(value).map_err(std::io::Error::other)?;
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
mod tests {
    use super::*;

    fn dir(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("gs-state-file-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn round_trip_missing_and_garbage() {
        let d = dir("rt");
        let path = d.join("x.json");
        assert_eq!(load::<Vec<u32>>(&path), None);
        save(&path, &vec![1u32, 2, 3]).unwrap();
        assert_eq!(load::<Vec<u32>>(&path), Some(vec![1, 2, 3]));
        fs::write(&path, "{not json").unwrap();
        assert_eq!(load::<Vec<u32>>(&path), None);
        assert!(d.join("x.json.unreadable").exists());
        assert!(!path.exists());
    }
}
