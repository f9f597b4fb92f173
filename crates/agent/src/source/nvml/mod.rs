//! The real source: every GPU read through NVML (`libnvidia-ml.so.1`) via nvml-wrapper.
//!
//! NVML is initialised once ([`NvmlSource::open`]) and kept; each [`Source::collect`] reads
//! every GPU family by family (see [`calls::FAMILY_NAMES`]), timing each GPU and each family.
//! Failure stays as small as it can be:
//!
//! - a call a GPU does not support is remembered per (GPU, call) and never asked again
//!   (logged once, at debug);
//! - any other failing call leaves its value `None`, counts in `errors_by_call` and in the
//!   GPU's `failed_calls`, and fails its family for this tick only;
//! - a GPU that answers `GPU_IS_LOST` (or vanishes) is reported `up = false` under its last
//!   known identity while the others keep flowing;
//! - when NVML itself goes away (uninitialised, driver unloaded), `source_up` is false and
//!   re-initialisation is tried with exponential backoff, one attempt per tick at most, so a
//!   tick never blocks for longer than one attempt.
//!
//! **Slow calls.** A blocking NVML call cannot be interrupted. The source runs on the
//! collection thread, never on a scrape's path: a slow call delays the next snapshot, never a
//! `/metrics` response, which keeps serving the last rendered exposition. Slowness is itself
//! reported, in each GPU's `collect_seconds` and each family's `FamilyHealth::seconds`.
//!
//! XID errors come from an NVML event set on a separate thread ([`events`]); each tick drains
//! what it sent into `Snapshot::events`.

mod calls;
mod events;
mod gpm;
mod gpu;
mod mig;
mod mig_raw;
mod open;
mod processes;
mod read;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use nvml_wrapper::Nvml;

pub use calls::FAMILY_NAMES;
pub use open::{COMMON_NVML_DIRS, NVML_LIB_NAME, NvmlOpenError};
pub use read::PCIE_THROUGHPUT_UNIT_BYTES;

use calls::{Families, Family};
use events::{EventMessage, XidWatcher};
use gpm::GpmSamples;
use gpu::{Identity, Slot, down_sample, read_gpu};

use super::{Collection, Source};
use crate::config::CollectConfig;
use crate::model::{CollectHealth, GpuSample, HostInfo, ProcessSample, Snapshot, XidEvent};

/// First re-initialisation delay after NVML goes away; doubles up to [`REINIT_MAX_DELAY`].
const REINIT_FIRST_DELAY: Duration = Duration::from_secs(1);
const REINIT_MAX_DELAY: Duration = Duration::from_secs(300);

/// Reads every GPU through NVML. See the module documentation for how failures degrade.
pub struct NvmlSource {
    /// The library path that worked at open; re-initialisation uses it again.
    lib_path: PathBuf,
    processes: bool,
    hostname: String,
    /// `None` while NVML is gone.
    session: Option<Session>,
    /// What we know of each GPU, by NVML index, across ticks and re-initialisations.
    slots: Vec<Slot>,
    /// GPUs that disappeared from their index (another UUID answers there now), reported
    /// `up = false` so their series stay identifiable.
    vanished: Vec<(u32, Identity)>,
    errors_by_call: BTreeMap<String, u64>,
    reinit: Backoff,
}

/// One initialised NVML instance and what hangs off it.
struct Session {
    nvml: Arc<Nvml>,
    watcher: Option<XidWatcher>,
    gpm: GpmSamples,
    driver_version: Option<String>,
    cuda_version: Option<String>,
}

impl Session {
    fn start(nvml: Nvml) -> Session {
        let nvml = Arc::new(nvml);
        let driver_version = nvml.sys_driver_version().ok();
        let cuda_version = nvml.sys_cuda_driver_version().ok().map(|v| {
            format!(
                "{}.{}",
                nvml_wrapper::cuda_driver_version_major(v),
                nvml_wrapper::cuda_driver_version_minor(v)
            )
        });
        let watcher = match XidWatcher::start(Arc::clone(&nvml)) {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the NVML XID event thread");
                None
            }
        };
        Session {
            nvml,
            watcher,
            gpm: GpmSamples::default(),
            driver_version,
            cuda_version,
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // The event thread holds NVML too; stop it first, then free what NVML allocated for
        // us, and only then let the last `Arc<Nvml>` shut NVML down.
        self.watcher.take();
        self.gpm.release(&self.nvml);
    }
}

/// Re-initialisation schedule while NVML is gone.
struct Backoff {
    next_attempt: Instant,
    delay: Duration,
}

impl Backoff {
    fn new() -> Backoff {
        Backoff {
            next_attempt: Instant::now(),
            delay: REINIT_FIRST_DELAY,
        }
    }

    fn reset(&mut self) {
        self.delay = REINIT_FIRST_DELAY;
    }

    /// Schedules the next attempt one delay from now and doubles the delay.
    fn schedule(&mut self, now: Instant) {
        self.next_attempt = now + self.delay;
        self.delay = (self.delay * 2).min(REINIT_MAX_DELAY);
    }

    fn due(&self, now: Instant) -> bool {
        now >= self.next_attempt
    }
}

impl NvmlSource {
    /// Initialises NVML from `lib_path`, or from the system's library search path and the
    /// usual driver directories ([`COMMON_NVML_DIRS`]). Fails with a message naming NVML,
    /// where it looked and how to proceed (`--nvml-lib`, `--simulate`).
    pub fn open(lib_path: Option<&Path>) -> Result<NvmlSource, NvmlOpenError> {
        let (nvml, path) = open::open_nvml(lib_path)?;
        let session = Session::start(nvml);
        tracing::info!(
            lib = %path.display(),
            driver = session.driver_version.as_deref().unwrap_or("unknown"),
            "NVML initialised"
        );
        Ok(NvmlSource {
            lib_path: path,
            processes: true,
            hostname: crate::host::hostname(),
            session: Some(session),
            slots: Vec::new(),
            vanished: Vec::new(),
            errors_by_call: BTreeMap::new(),
            reinit: Backoff::new(),
        })
    }

    /// [`NvmlSource::open`] with `[collect]`'s library path and process setting.
    pub fn from_config(config: &CollectConfig) -> Result<NvmlSource, NvmlOpenError> {
        Ok(NvmlSource::open(config.nvml_lib.as_deref())?.with_processes(config.processes))
    }

    /// Whether to read the compute processes of each GPU (default: yes).
    pub fn with_processes(mut self, enabled: bool) -> NvmlSource {
        self.processes = enabled;
        self
    }

    /// Tries to bring NVML back when it is gone and an attempt is due.
    fn try_reinit(&mut self) {
        let now = Instant::now();
        if self.session.is_some() || !self.reinit.due(now) {
            return;
        }
        match open::reopen_nvml(&self.lib_path) {
            Ok(nvml) => {
                tracing::info!(lib = %self.lib_path.display(), "NVML re-initialised");
                self.reinit.reset();
                // The driver may have been replaced: what it did not support may differ now.
                for slot in &mut self.slots {
                    slot.unavailable.clear();
                }
                self.session = Some(Session::start(nvml));
            }
            Err(error) => {
                *self
                    .errors_by_call
                    .entry("nvmlInit_v2".to_string())
                    .or_insert(0) += 1;
                self.reinit.schedule(now);
                tracing::debug!(%error, retry_in = ?self.reinit.next_attempt - now, "NVML still unavailable");
            }
        }
    }

    /// Drops the NVML session after it went away and schedules re-initialisation.
    fn lose_session(&mut self, reason: &str) {
        tracing::warn!(
            reason,
            "NVML became unavailable; re-initialising with backoff"
        );
        self.session = None;
        self.reinit.reset();
        self.reinit.schedule(Instant::now());
    }

    /// Samples of every GPU we know of, all `up = false` (NVML is gone).
    fn known_gpus_down(&mut self) -> Vec<GpuSample> {
        for slot in &mut self.slots {
            slot.was_up = false;
        }
        let mut gpus: Vec<GpuSample> = (0..self.slots.len())
            .map(|i| down_sample(i as u32, self.slots[i].identity.as_ref()))
            .collect();
        gpus.extend(self.vanished_samples());
        gpus
    }

    fn vanished_samples(&self) -> Vec<GpuSample> {
        self.vanished
            .iter()
            .map(|(index, identity)| down_sample(*index, Some(identity)))
            .collect()
    }

    /// One pass over every GPU. `Err` carries the reason NVML itself went away.
    fn read_all(
        &mut self,
        families: &mut Families,
    ) -> Result<(Vec<GpuSample>, Vec<ProcessSample>), String> {
        let Some(session) = self.session.as_mut() else {
            return Err("not initialised".into());
        };
        let nvml = Arc::clone(&session.nvml);
        let count = match nvml.device_count() {
            Ok(count) => count,
            Err(error) => {
                *self
                    .errors_by_call
                    .entry("nvmlDeviceGetCount_v2".to_string())
                    .or_insert(0) += 1;
                // Without a device count nothing else can be read: treat NVML as gone,
                // whatever the error, and let re-initialisation sort it out.
                return Err(format!("nvmlDeviceGetCount_v2: {error}"));
            }
        };
        if self.slots.len() < count as usize {
            self.slots.resize_with(count as usize, Slot::default);
        }
        let mut gpus = Vec::with_capacity(self.slots.len());
        let mut processes = Vec::new();
        for index in 0..count {
            let read = read_gpu(
                &nvml,
                index,
                &mut self.slots[index as usize],
                &mut session.gpm,
                &mut self.errors_by_call,
                families,
                self.processes,
            );
            if let Some(reason) = read.gone {
                return Err(reason);
            }
            if let Some(old) = read.replaced {
                // A different GPU answers at this index now; keep the old one visible.
                tracing::warn!(gpu = index, uuid = %old.uuid, "another GPU answers at this GPU's index");
                self.vanished.push((index, old));
            }
            gpus.push(read.sample);
            processes.extend(read.processes);
        }
        // GPUs past the current count left NVML's device list. Keep reporting them, `up = 0`,
        // unless they answer at another index now (NVML re-indexes after a removal).
        for index in count as usize..self.slots.len() {
            session.gpm.forget(&nvml, index);
            if let Some(identity) = self.slots[index].identity.take() {
                tracing::warn!(gpu = index, uuid = %identity.uuid, "GPU vanished from NVML's device list");
                self.vanished.push((index as u32, identity));
            }
        }
        self.slots.truncate(count as usize);
        // A vanished GPU stops being reported when it answers again, or when another GPU
        // answers in its PCI slot (it was replaced: an RMA must not stay lost forever).
        let seen: HashSet<&str> = gpus.iter().map(|g| g.uuid.as_str()).collect();
        let slots: HashSet<&str> = gpus
            .iter()
            .map(|g| g.pci_bus_id.as_str())
            .filter(|bus| !bus.is_empty())
            .collect();
        let mut reported = HashSet::new();
        self.vanished.retain(|(_, id)| {
            !seen.contains(id.uuid.as_str())
                && !slots.contains(id.pci_bus_id.as_str())
                && reported.insert(id.uuid.clone())
        });
        gpus.extend(self.vanished_samples());
        gpus.sort_by_key(|g| g.index);
        Ok((gpus, processes))
    }

    /// Drains the XID thread's messages into events, counting its failures.
    fn drain_events(&mut self, families: &mut Families) -> Vec<XidEvent> {
        let began = Instant::now();
        let mut events = Vec::new();
        let mut success = true;
        if let Some(watcher) = self.session.as_ref().and_then(|s| s.watcher.as_ref()) {
            for message in watcher.drain() {
                match message {
                    EventMessage::Xid(event) => events.push(event),
                    EventMessage::Failed(call) => {
                        success = false;
                        *self.errors_by_call.entry(call.to_string()).or_insert(0) += 1;
                    }
                }
            }
        }
        families.record(Family::Events, began.elapsed().as_secs_f64(), success);
        events
    }
}

impl Source for NvmlSource {
    fn collect(&mut self) -> Collection {
        let began = Instant::now();
        self.try_reinit();
        let at = Utc::now();
        let mut families = Families::new();
        let mut source_up = self.session.is_some();
        let (gpus, processes, events) = if source_up {
            match self.read_all(&mut families) {
                Ok((gpus, processes)) => {
                    let events = self.drain_events(&mut families);
                    (gpus, processes, events)
                }
                Err(reason) => {
                    // Whatever the XID thread saw before NVML went away still counts.
                    let events = self.drain_events(&mut Families::new());
                    self.lose_session(&reason);
                    source_up = false;
                    families = Families::all_failed();
                    (self.known_gpus_down(), Vec::new(), events)
                }
            }
        } else {
            families = Families::all_failed();
            (self.known_gpus_down(), Vec::new(), Vec::new())
        };
        let session = self.session.as_ref();
        Collection {
            snapshot: Snapshot {
                at,
                host: HostInfo {
                    hostname: self.hostname.clone(),
                    driver_version: session.and_then(|s| s.driver_version.clone()),
                    cuda_version: session.and_then(|s| s.cuda_version.clone()),
                    ..HostInfo::default()
                },
                gpus,
                processes,
                events,
                allocations: Vec::new(),
                scheduled_by: Vec::new(),
            },
            health: CollectHealth {
                source_up,
                families: families.0,
                errors_by_call: self.errors_by_call.clone(),
                seconds: began.elapsed().as_secs_f64(),
            },
        }
    }

    fn describe(&self) -> String {
        match &self.session {
            Some(s) => format!(
                "nvml (driver {}, {})",
                s.driver_version.as_deref().unwrap_or("unknown"),
                self.lib_path.display()
            ),
            None => format!("nvml (unavailable, retrying; {})", self.lib_path.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_five_minutes() {
        let mut b = Backoff::new();
        let now = Instant::now();
        let mut delays = Vec::new();
        for _ in 0..12 {
            b.schedule(now);
            delays.push((b.next_attempt - now).as_secs());
        }
        assert_eq!(&delays[..5], &[1, 2, 4, 8, 16]);
        assert_eq!(*delays.last().unwrap(), 300);
        b.reset();
        b.schedule(now);
        assert_eq!((b.next_attempt - now).as_secs(), 1);
    }

    #[test]
    fn a_down_sample_keeps_identity_and_nothing_else() {
        let id = Identity {
            uuid: "GPU-1".into(),
            name: "NVIDIA H100 80GB HBM3".into(),
            pci_bus_id: "00000000:18:00.0".into(),
            serial: Some("1".into()),
        };
        let s = down_sample(3, Some(&id));
        assert!(!s.up);
        assert_eq!((s.index, s.uuid.as_str()), (3, "GPU-1"));
        assert_eq!(s.power_watts, None);
    }
}
