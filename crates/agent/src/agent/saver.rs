//! Writes the engine's state on a thread of its own, so the collection thread never waits
//! on a disk.
//!
//! A full engine state is about 144 KiB of JSON per GPU (every window ring full). Measured
//! with `bench/save.sh` on a small VM: at 8 GPUs a save (serialise, write, fsync) took
//! 12-18 ms and the clone 0.3 ms; at 64 GPUs (9.4 MB) 60-70 ms and 3-5 ms. Only the clone
//! happens on the collection thread; the saver serialises and writes the copy with
//! [`store::save`]. One copy at most waits: when the disk is slower than the cadence, a
//! copy is refused rather than queued, so memory stays bounded and a later collection
//! hands over a newer one.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::thread::JoinHandle;

use crate::engine::{EngineState, store};
use crate::state_file::SaveLog;

/// What the messages call the engine's file.
const WHAT: &str = "engine state";

/// The engine state's writer: a thread fed one state at a time, or the caller's own
/// thread when no thread could be started.
#[derive(Debug)]
pub(crate) struct EngineSaver {
    path: PathBuf,
    writer: Writer,
    /// Failed saves since start, whichever thread wrote.
    failures: Arc<AtomicU64>,
}

#[derive(Debug)]
enum Writer {
    Thread {
        queue: SyncSender<EngineState>,
        thread: JoinHandle<()>,
    },
    Inline(SaveLog),
}

impl EngineSaver {
    /// A saver writing to `path`, on its own thread when one can be started.
    pub fn start(path: PathBuf) -> EngineSaver {
        let failures = Arc::new(AtomicU64::new(0));
        let mut log = SaveLog::counting_into(WHAT, path.clone(), failures.clone());
        // One state waits while another is written; a third is refused (see `submit`).
        let (queue, states) = std::sync::mpsc::sync_channel::<EngineState>(1);
        let spawned = std::thread::Builder::new()
            .name("state-saver".into())
            .spawn(move || {
                for state in states {
                    let outcome = store::save(log.path(), &state);
                    log.record(&outcome);
                }
            });
        let writer = match spawned {
            Ok(thread) => Writer::Thread { queue, thread },
            Err(e) => {
                tracing::warn!(
                    "cannot start a thread to save the engine state ({e}); saving it on the \
                     collection thread"
                );
                Writer::Inline(SaveLog::counting_into(WHAT, path.clone(), failures.clone()))
            }
        };
        EngineSaver {
            path,
            writer,
            failures,
        }
    }

    /// Hands `state` over to be written. False when the previous state is still waiting
    /// (the disk is slower than the cadence): nothing is queued, try again later.
    pub fn submit(&mut self, state: EngineState) -> bool {
        let state = match &self.writer {
            Writer::Thread { queue, .. } => match queue.try_send(state) {
                Ok(()) => return true,
                Err(TrySendError::Full(_)) => return false,
                // The thread is gone (nothing in it panics, but should it die all the
                // same): write here from now on rather than lose the state.
                Err(TrySendError::Disconnected(state)) => {
                    tracing::warn!("the engine state's saver thread stopped; saving inline");
                    self.writer = Writer::Inline(SaveLog::counting_into(
                        WHAT,
                        self.path.clone(),
                        self.failures.clone(),
                    ));
                    state
                }
            },
            Writer::Inline(_) => state,
        };
        if let Writer::Inline(log) = &mut self.writer {
            let outcome = store::save(log.path(), &state);
            log.record(&outcome);
        }
        true
    }

    /// Writes `state`, the last one, and returns once every handed-over state is written.
    pub fn finish(self, state: EngineState) {
        match self.writer {
            Writer::Thread { queue, thread } => {
                // Blocks while a state waits; the thread drains it and then takes this one.
                if let Err(unsent) = queue.send(state) {
                    let mut log = SaveLog::counting_into(WHAT, self.path, self.failures);
                    log.record(&store::save(log.path(), &unsent.0));
                }
                drop(queue);
                let _ = thread.join();
            }
            Writer::Inline(mut log) => {
                let outcome = store::save(log.path(), &state);
                log.record(&outcome);
            }
        }
    }

    /// Failed saves since start.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }
}
