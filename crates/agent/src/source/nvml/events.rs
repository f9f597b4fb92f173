//! XID errors from an NVML event set, on a dedicated thread.
//!
//! `nvmlEventSetWait` blocks, so it gets its own thread that waits with a short timeout in a
//! loop (checking a stop flag between waits) and sends what it sees over a channel; the
//! collection drains the channel each tick. NVML reports only the *last* XID of a device when
//! several arrive between two waits; the kernel-log reader fills that gap and the agent
//! de-duplicates the two sources, so this thread forwards exactly what NVML says.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;
use std::time::Duration;

use chrono::Utc;
use nvml_wrapper::Nvml;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::{NvmlError, nvml_sym, nvml_try};

use super::calls::{ErrorClass, classify};
use crate::model::{XidEvent, XidSource};

/// How long one wait blocks: the longest a stop request waits for the thread.
const WAIT_MS: u32 = 500;
/// Pause after a failed wait, so a broken driver does not turn the loop into a busy spin.
const ERROR_PAUSE: Duration = Duration::from_secs(1);
/// NVML's "unknown XID" value in `nvmlEventData_t.eventData`.
const UNKNOWN_XID: u32 = 999;

/// What the watcher thread tells the collection.
#[derive(Debug)]
pub(crate) enum EventMessage {
    Xid(XidEvent),
    /// An NVML call of the watcher failed (counted in `errors_by_call`).
    Failed(&'static str),
}

/// The XID watcher thread. Dropping it stops the thread and waits for it (at most one wait).
pub(crate) struct XidWatcher {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    messages: Receiver<EventMessage>,
}

impl XidWatcher {
    /// Starts watching every GPU of `nvml` that supports XID events.
    pub fn start(nvml: Arc<Nvml>) -> std::io::Result<XidWatcher> {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, messages) = channel();
        let thread_stop = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("nvml-xid-events".into())
            .spawn(move || watch(&nvml, &thread_stop, &tx))?;
        Ok(XidWatcher {
            stop,
            thread: Some(thread),
            messages,
        })
    }

    /// Everything the thread sent since the last call.
    pub fn drain(&self) -> Vec<EventMessage> {
        self.messages.try_iter().collect()
    }
}

impl Drop for XidWatcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::warn!("the NVML XID event thread panicked");
        }
    }
}

/// Identity of a registered device, looked up by its NVML handle when an event arrives.
struct Registered {
    index: u32,
    uuid: Option<String>,
    pci_bus_id: Option<String>,
}

fn watch(nvml: &Nvml, stop: &AtomicBool, tx: &Sender<EventMessage>) {
    let report = |call: &'static str, error: &NvmlError| {
        if matches!(classify(error), ErrorClass::Failed | ErrorClass::Gone) {
            let _ = tx.send(EventMessage::Failed(call));
        }
        tracing::debug!(call, %error, "NVML XID events unavailable");
    };
    let set = match nvml.create_event_set() {
        Ok(set) => set,
        Err(e) => return report("nvmlEventSetCreate", &e),
    };
    let count = match nvml.device_count() {
        Ok(count) => count,
        Err(e) => return report("nvmlDeviceGetCount_v2", &e),
    };
    let mut devices: HashMap<usize, Registered> = HashMap::new();
    for index in 0..count {
        let Ok(device) = nvml.device_by_index(index) else {
            continue; // a lost GPU raises no more events
        };
        match device.supported_event_types() {
            Ok(types) if types.contains(EventTypes::CRITICAL_XID_ERROR) => {}
            Ok(_) => continue,
            Err(e) => {
                report("nvmlDeviceGetSupportedEventTypes", &e);
                continue;
            }
        }
        // nvml-wrapper's `register_events` frees the whole set when one device refuses, which
        // would lose the devices registered before it; the raw call leaves the set alone.
        let registered = nvml_sym(nvml.lib().nvmlDeviceRegisterEvents.as_ref()).and_then(|sym| {
            // SAFETY: both handles come from this NVML instance and outlive the call.
            nvml_try(unsafe {
                sym(
                    device.handle(),
                    EventTypes::CRITICAL_XID_ERROR.bits(),
                    set.handle(),
                )
            })
        });
        if let Err(e) = registered {
            report("nvmlDeviceRegisterEvents", &e);
            continue;
        }
        // SAFETY: the handle is only used as a map key, never dereferenced.
        let key = unsafe { device.handle() } as usize;
        devices.insert(
            key,
            Registered {
                index,
                uuid: device.uuid().ok(),
                pci_bus_id: device.pci_info().ok().map(|p| p.bus_id),
            },
        );
    }
    if devices.is_empty() {
        tracing::debug!("no GPU supports NVML XID events; relying on the kernel log");
        return;
    }
    while !stop.load(Ordering::Relaxed) {
        match set.wait(WAIT_MS) {
            Ok(data) => {
                let Some(xid) = data.event_data else { continue };
                let xid = match xid {
                    XidError::Value(v) => u32::try_from(v).unwrap_or(UNKNOWN_XID),
                    XidError::Unknown => UNKNOWN_XID,
                };
                // SAFETY: used as a map key only.
                let key = unsafe { data.device.handle() } as usize;
                let known = devices.get(&key);
                let event = XidEvent {
                    at: Utc::now(),
                    gpu: known.map(|d| d.index),
                    uuid: known.and_then(|d| d.uuid.clone()),
                    pci_bus_id: known.and_then(|d| d.pci_bus_id.clone()),
                    xid,
                    source: XidSource::Nvml,
                    message: None,
                };
                if tx.send(EventMessage::Xid(event)).is_err() {
                    return; // the source is gone
                }
            }
            Err(NvmlError::Timeout) => {}
            // A GPU that fell off the bus shows as `up = false` in the collection; the wait
            // keeps answering GPU_IS_LOST for it, which is no news.
            Err(NvmlError::GpuLost) => std::thread::sleep(ERROR_PAUSE),
            Err(e) => {
                let gone = classify(&e) == ErrorClass::Gone;
                report("nvmlEventSetWait_v2", &e);
                if gone {
                    return; // the collection notices too, and restarts us after re-init
                }
                std::thread::sleep(ERROR_PAUSE);
            }
        }
    }
}
