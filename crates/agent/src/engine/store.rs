//! Persisting the engine's state in the state directory, so a restart keeps the evidence.
//! Written atomically through [`crate::state_file`]; a file that cannot be used, state of
//! another format version included, is set aside and the engine starts fresh.

use std::path::{Path, PathBuf};

use super::{EngineState, STATE_VERSION};

/// File name of the engine state inside `[state] dir`.
pub const FILE_NAME: &str = "engine.json";

/// Where the engine state lives in a state directory.
pub fn path_in(dir: &Path) -> PathBuf {
    dir.join(FILE_NAME)
}

/// Reads the state at `path`; a missing or unusable file is a fresh start (an unusable
/// one is moved aside, never overwritten).
pub fn load(path: &Path) -> EngineState {
    match crate::state_file::load::<EngineState>(path) {
        Some(state) if state.version == STATE_VERSION => state,
        Some(state) => {
            crate::state_file::set_aside(
                path,
                &format!(
                    "format version {}, this build reads {STATE_VERSION}",
                    state.version
                ),
            );
            EngineState::default()
        }
        None => EngineState::default(),
    }
}

/// Writes the state atomically.
pub fn save(path: &Path, state: &EngineState) -> std::io::Result<()> {
    crate::state_file::save(path, state)
}
