//! Persisting the engine's state in the state directory, so a restart keeps the evidence.
//!
//! The state is one JSON document, written to a temporary file, flushed to disk and
//! renamed over the old one: a crash mid-write leaves the previous state, never half of
//! one. A file that cannot be read back (another format version, corruption) is moved
//! aside with a warning and the engine starts fresh rather than refusing to run.

use std::fs::{self, File};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use super::{EngineState, STATE_VERSION};

/// File name of the engine state inside `[state] dir`.
pub const FILE_NAME: &str = "engine.json";

/// Where the engine state lives in a state directory.
pub fn path_in(dir: &Path) -> PathBuf {
    dir.join(FILE_NAME)
}

/// Reads the state at `path`; a missing file is a fresh start.
pub fn load(path: &Path) -> EngineState {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return EngineState::default(),
        Err(e) => {
            tracing::warn!(
                "cannot read engine state {}: {e}; starting fresh",
                path.display()
            );
            return EngineState::default();
        }
    };
    match serde_json::from_str::<EngineState>(&text) {
        Ok(state) if state.version == STATE_VERSION => state,
        Ok(state) => {
            set_aside(path, &format!("it has format version {}", state.version));
            EngineState::default()
        }
        Err(e) => {
            set_aside(path, &e.to_string());
            EngineState::default()
        }
    }
}

fn set_aside(path: &Path, why: &str) {
    let aside = path.with_extension("json.unreadable");
    let moved = fs::rename(path, &aside).is_ok();
    tracing::warn!(
        "engine state {} is unusable ({why}); {} starting fresh",
        path.display(),
        if moved {
            format!("moved to {},", aside.display())
        } else {
            String::new()
        }
    );
}

/// Writes the state atomically (temporary file, fsync, rename, fsync of the directory).
pub fn save(path: &Path, state: &EngineState) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let tmp = path.with_extension("json.tmp");
    {
        let mut file = File::create(&tmp)?;
        let body = serde_json::to_vec(state).map_err(std::io::Error::other)?;
        file.write_all(&body)?;
        file.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    // The rename is durable only once the directory entry is on disk.
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("gs-store-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn round_trip_and_fresh_start() {
        let d = dir("rt");
        let path = path_in(&d);
        assert_eq!(load(&path), EngineState::default());
        let state = EngineState {
            version: STATE_VERSION,
            last_at: Some(42),
            ..EngineState::default()
        };
        save(&path, &state).unwrap();
        assert_eq!(load(&path), state);
    }

    #[test]
    fn garbage_is_set_aside_not_fatal() {
        let d = dir("garbage");
        fs::create_dir_all(&d).unwrap();
        let path = path_in(&d);
        fs::write(&path, "{not json").unwrap();
        assert_eq!(load(&path), EngineState::default());
        assert!(d.join("engine.json.unreadable").exists());
        assert!(!path.exists());
    }
}
