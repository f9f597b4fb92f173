//! Bookkeeping around every NVML call: what an error means, what to remember, what to count.
//!
//! Following node_exporter's collectors, a call that a GPU does not support is a quiet,
//! typed "no data": it is remembered per (GPU, call) and never asked again, and logged once.
//! Real failures are counted by NVML function name and fail their family for the tick, but
//! are asked again next tick. A lost GPU stops the calls for that GPU; NVML itself going away
//! stops the whole tick.

use std::collections::{BTreeMap, HashSet};
use std::time::Instant;

use nvml_wrapper::error::NvmlError;

use crate::model::FamilyHealth;

/// NVML's `NVML_ERROR_ARGUMENT_VERSION_MISMATCH`: the driver does not know the struct version
/// we passed, which for us means "this driver does not support that call".
const ARGUMENT_VERSION_MISMATCH: u32 = 25;

/// A call as remembered in the unsupported set: the NVML function and, for calls made with
/// several arguments (clock types, ECC counters, field ids), which one.
pub(crate) type CallKey = (&'static str, &'static str);

/// What an NVML error means for the collection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorClass {
    /// The GPU (or this driver) does not offer the value: remember, do not ask again.
    Unsupported,
    /// We may not read the value (typically root-only data): remember like unsupported, since
    /// asking again every tick cannot succeed and would only add noise.
    NoPermission,
    /// The GPU fell off the bus or needs a reset.
    GpuLost,
    /// NVML itself is unusable: re-initialise.
    Gone,
    /// Anything else: count it, ask again next tick.
    Failed,
}

pub fn classify(error: &NvmlError) -> ErrorClass {
    match error {
        NvmlError::NotSupported
        | NvmlError::FunctionNotFound
        | NvmlError::FailedToLoadSymbol(_) => ErrorClass::Unsupported,
        NvmlError::UnexpectedVariant(ARGUMENT_VERSION_MISMATCH) => ErrorClass::Unsupported,
        NvmlError::NoPermission => ErrorClass::NoPermission,
        NvmlError::GpuLost | NvmlError::ResetRequired => ErrorClass::GpuLost,
        NvmlError::Uninitialized
        | NvmlError::DriverNotLoaded
        | NvmlError::LibRmVersionMismatch
        | NvmlError::LibraryNotFound
        | NvmlError::LibloadingError(_) => ErrorClass::Gone,
        _ => ErrorClass::Failed,
    }
}

/// The collector families, in the fixed order [`crate::model::CollectHealth::families`] lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Identity,
    Utilization,
    Memory,
    Thermal,
    Power,
    Clocks,
    ClockEvents,
    Ecc,
    RetiredPages,
    RemappedRows,
    Pcie,
    NvLink,
    Gpm,
    Processes,
    Events,
    Mig,
}

pub const FAMILY_NAMES: [&str; 16] = [
    "identity",
    "utilization",
    "memory",
    "thermal",
    "power",
    "clocks",
    "clock_events",
    "ecc",
    "retired_pages",
    "remapped_rows",
    "pcie",
    "nvlink",
    "gpm",
    "processes",
    "events",
    "mig",
];

/// Per-family time and success over one tick, across all GPUs.
#[derive(Debug, Clone)]
pub struct Families(pub Vec<FamilyHealth>);

impl Families {
    pub fn new() -> Families {
        Families(
            FAMILY_NAMES
                .iter()
                .map(|name| FamilyHealth {
                    name,
                    seconds: 0.0,
                    success: true,
                })
                .collect(),
        )
    }

    /// Every family failed: the source is down this tick.
    pub(crate) fn all_failed() -> Families {
        let mut f = Families::new();
        for family in &mut f.0 {
            family.success = false;
        }
        f
    }

    pub fn record(&mut self, family: Family, seconds: f64, success: bool) {
        let entry = &mut self.0[family as usize];
        entry.seconds += seconds;
        entry.success &= success;
    }

    /// Runs one family's reads for one GPU, timing it; skipped once the GPU is lost or NVML
    /// is gone.
    pub fn run<T>(
        &mut self,
        family: Family,
        calls: &mut Calls<'_>,
        read: impl FnOnce(&mut Calls<'_>) -> T,
    ) -> Option<T> {
        if calls.halted() {
            return None;
        }
        calls.family_failed = false;
        let began = Instant::now();
        let out = read(calls);
        self.record(family, began.elapsed().as_secs_f64(), !calls.family_failed);
        Some(out)
    }
}

/// The call context of one GPU for one tick.
pub struct Calls<'a> {
    pub gpu: u32,
    unavailable: &'a mut HashSet<CallKey>,
    errors_by_call: &'a mut BTreeMap<String, u64>,
    /// Calls that failed this tick (not counting unsupported ones).
    pub failed: u32,
    /// The GPU answered `GPU_IS_LOST` (or needs a reset).
    pub lost: bool,
    /// NVML itself went away, with the error that said so.
    pub gone: Option<String>,
    /// A call of the current family failed.
    pub(crate) family_failed: bool,
}

impl<'a> Calls<'a> {
    pub fn new(
        gpu: u32,
        unavailable: &'a mut HashSet<CallKey>,
        errors_by_call: &'a mut BTreeMap<String, u64>,
    ) -> Calls<'a> {
        Calls {
            gpu,
            unavailable,
            errors_by_call,
            failed: 0,
            lost: false,
            gone: None,
            family_failed: false,
        }
    }

    /// No more calls for this GPU this tick.
    pub(crate) fn halted(&self) -> bool {
        self.lost || self.gone.is_some()
    }

    /// True when the call is known to be unavailable or the GPU cannot be asked now.
    pub fn skip(&self, function: &'static str, variant: &'static str) -> bool {
        self.halted() || self.unavailable.contains(&(function, variant))
    }

    /// Makes `call` unless it is known to be unavailable, and settles its result.
    pub fn call<T>(
        &mut self,
        function: &'static str,
        variant: &'static str,
        call: impl FnOnce() -> Result<T, NvmlError>,
    ) -> Option<T> {
        if self.skip(function, variant) {
            return None;
        }
        self.settle(function, variant, call())
    }

    /// Turns a call's result into a value, remembering or counting its error.
    pub fn settle<T>(
        &mut self,
        function: &'static str,
        variant: &'static str,
        result: Result<T, NvmlError>,
    ) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(error) => {
                self.error(function, variant, &error);
                None
            }
        }
    }

    /// Records an error of `function` (with `variant`) on this GPU.
    pub fn error(&mut self, function: &'static str, variant: &'static str, error: &NvmlError) {
        match classify(error) {
            ErrorClass::Unsupported => {
                if self.unavailable.insert((function, variant)) {
                    tracing::debug!(
                        gpu = self.gpu,
                        call = function,
                        variant,
                        %error,
                        "NVML call not supported on this GPU; not asking again"
                    );
                }
            }
            ErrorClass::NoPermission => {
                if self.unavailable.insert((function, variant)) {
                    tracing::info!(
                        gpu = self.gpu,
                        call = function,
                        variant,
                        "NVML call needs more privileges than this process has; not asking again"
                    );
                }
            }
            ErrorClass::GpuLost => self.lost = true,
            ErrorClass::Gone => {
                self.count(function);
                self.gone = Some(format!("{function}: {error}"));
            }
            ErrorClass::Failed => {
                self.count(function);
                tracing::debug!(gpu = self.gpu, call = function, variant, %error, "NVML call failed");
            }
        }
    }

    fn count(&mut self, function: &'static str) {
        *self.errors_by_call.entry(function.to_string()).or_insert(0) += 1;
        self.failed += 1;
        self.family_failed = true;
    }

    /// Never makes this call again on this GPU: it is unsupported, or its answer cannot change.
    pub(crate) fn never_again(&mut self, function: &'static str, variant: &'static str) {
        self.unavailable.insert((function, variant));
    }

    /// Forgets what this GPU slot did not support (a different GPU now sits at its index).
    pub(crate) fn forget_unavailable(&mut self) {
        self.unavailable.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsupported_is_remembered_and_not_counted() {
        let mut unavailable = HashSet::new();
        let mut errors = BTreeMap::new();
        let mut calls = Calls::new(0, &mut unavailable, &mut errors);
        let mut asked = 0;
        for _ in 0..3 {
            let v: Option<u32> = calls.call("nvmlDeviceGetFanSpeed_v2", "", || {
                asked += 1;
                Err(NvmlError::NotSupported)
            });
            assert_eq!(v, None);
        }
        assert_eq!(asked, 1);
        assert_eq!(calls.failed, 0);
        assert!(!calls.family_failed);
        assert!(errors.is_empty());
    }

    #[test]
    fn failures_are_counted_and_asked_again() {
        let mut unavailable = HashSet::new();
        let mut errors = BTreeMap::new();
        let mut calls = Calls::new(0, &mut unavailable, &mut errors);
        for _ in 0..2 {
            let _: Option<u32> =
                calls.call("nvmlDeviceGetPowerUsage", "", || Err(NvmlError::Unknown));
        }
        assert_eq!(calls.failed, 2);
        assert!(calls.family_failed);
        assert_eq!(errors.get("nvmlDeviceGetPowerUsage"), Some(&2));
    }

    #[test]
    fn lost_and_gone_halt_the_gpu() {
        let mut unavailable = HashSet::new();
        let mut errors = BTreeMap::new();
        let mut calls = Calls::new(0, &mut unavailable, &mut errors);
        let _: Option<u32> = calls.call("nvmlDeviceGetUUID", "", || Err(NvmlError::GpuLost));
        assert!(calls.lost && calls.halted());
        let mut asked = false;
        let _: Option<u32> = calls.call("nvmlDeviceGetName", "", || {
            asked = true;
            Ok(1)
        });
        assert!(!asked);
        assert_eq!(classify(&NvmlError::Uninitialized), ErrorClass::Gone);
        assert_eq!(classify(&NvmlError::DriverNotLoaded), ErrorClass::Gone);
        assert_eq!(
            classify(&NvmlError::FailedToLoadSymbol("x".into())),
            ErrorClass::Unsupported
        );
    }

    #[test]
    fn families_keep_their_fixed_order() {
        let f = Families::new();
        let names: Vec<_> = f.0.iter().map(|f| f.name).collect();
        assert_eq!(names[0], "identity");
        assert_eq!(names[Family::Gpm as usize], "gpm");
        assert_eq!(names[Family::Events as usize], "events");
        assert_eq!(names[Family::Mig as usize], "mig");
        assert_eq!(names.len(), 16);
    }
}
