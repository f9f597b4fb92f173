//! The XID catalog: what an NVIDIA XID number means to an operator.
//!
//! The driver reports GPU errors as numbered "XID" events (in the kernel log and through
//! NVML's event API). The numbers say little by themselves; what matters to an operator is
//! *whose* fault it is and whether the GPU itself is now suspect. This module answers both:
//!
//! - [`classify`] puts each XID into a small [`XidClass`] — the `class` label of
//!   `gpu_xid_errors_total{xid,class}` — chosen by who has to act: the application owner
//!   (`application`), the hardware/RMA path (`hardware`, `memory`, `nvlink`), a driver or
//!   firmware update or GPU reset (`driver`, `firmware`), or nobody knows yet (`unknown`).
//! - [`is_hardware_fault`] is the narrower "this GPU is suspect" set that raises
//!   `GpuHardwareXid` and feeds the risk model. It cuts across classes: an NVLink *corrected*
//!   error (121) is in the `nvlink` class but does not make the GPU suspect, while a GSP
//!   timeout (119, class `firmware`) does.
//!
//! Sources, named on each row:
//! - **NVIDIA catalog**: NVIDIA's "XID Errors" catalog, docs.nvidia.com/deploy/xid-errors
//!   (the Ampere-and-newer table and its per-XID notes), and the companion pages
//!   "GPU Debug Guidelines" (docs.nvidia.com/deploy/gpu-debug-guidelines) and
//!   "A100 GPU Memory Error Management" (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt).
//! - **device plugin**: NVIDIA's Kubernetes device plugin (`internal/rm/health.go`), which
//!   skips XIDs 13, 31, 43, 45, 68 and 109 as application errors that leave the GPU healthy.
//! - **operator practice**: how fleet operators act on the XID (published GPU-health
//!   runbooks of cloud and HPC operators).
//!
//! A row's comment ends with its verdict for [`is_hardware_fault`] ("suspect: …" with the
//! part at fault, or why not) where the cited source does not settle it by itself.
//!
//! Unlisted numbers classify as `unknown`, are not hardware faults, and keep their number
//! in the metric, so a new driver's XIDs are counted from day one.

/// Who has to act on an XID. The label values are part of the metrics contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum XidClass {
    /// The application did something illegal; the GPU is fine. Restart or fix the job.
    Application,
    /// GPU memory errors: ECC, page retirement, row remapping. Reset, watch, maybe RMA.
    Memory,
    /// NVLink or C2C link errors between GPUs, NVSwitches or the CPU.
    Nvlink,
    /// The board or its PCIe link: fell off the bus, failed to initialise.
    Hardware,
    /// On-GPU micro-controllers and their firmware (GSP, PMU, InfoROM).
    Firmware,
    /// Driver-side errors and driver state notices; usually a driver update or reboot.
    Driver,
    /// Not in the catalog.
    Unknown,
}

impl XidClass {
    /// Every class, in label order.
    pub const ALL: [XidClass; 7] = [
        XidClass::Application,
        XidClass::Memory,
        XidClass::Nvlink,
        XidClass::Hardware,
        XidClass::Firmware,
        XidClass::Driver,
        XidClass::Unknown,
    ];

    /// The lowercase label used in `gpu_xid_errors_total{xid,class}`.
    pub fn as_str(self) -> &'static str {
        match self {
            XidClass::Application => "application",
            XidClass::Memory => "memory",
            XidClass::Nvlink => "nvlink",
            XidClass::Hardware => "hardware",
            XidClass::Firmware => "firmware",
            XidClass::Driver => "driver",
            XidClass::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for XidClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One catalog row.
struct Entry {
    xid: u32,
    class: XidClass,
    /// Member of the "GPU is suspect" set.
    fault: bool,
    description: &'static str,
}

const fn row(xid: u32, class: XidClass, fault: bool, description: &'static str) -> Entry {
    Entry {
        xid,
        class,
        fault,
        description,
    }
}

use XidClass::{Application, Driver, Firmware, Hardware, Memory, Nvlink};

/// Sorted by XID so lookups can binary-search; a test keeps it sorted.
#[rustfmt::skip]
const CATALOG: &[Entry] = &[
    // NVIDIA catalog "Graphics Engine Exception"; device plugin: application error.
    row(13, Application, false, "Graphics engine exception (typically an illegal instruction or out-of-range access by the application)"),
    // NVIDIA catalog "GPU memory page fault"; device plugin: application error.
    row(31, Application, false, "GPU memory page fault (MMU fault), usually an illegal address used by the application"),
    // NVIDIA catalog "Invalid or corrupted push buffer stream": causes listed are driver,
    // system memory, bus and thermal; the GPU itself is not named, so not a GPU fault.
    row(32, Driver, false, "Invalid or corrupted push buffer stream (driver, PCIe or system-memory corruption)"),
    // NVIDIA catalog "Driver firmware error" (driver error is the only listed cause).
    row(38, Firmware, false, "Driver firmware error"),
    // NVIDIA catalog "GPU stopped processing" (driver or user application); device plugin:
    // application error.
    row(43, Application, false, "GPU stopped processing: a channel was reset after an application fault"),
    // NVIDIA catalog "Preemptive cleanup, due to previous errors"; debug guidelines:
    // informative, channels affected by another failure; device plugin: application error.
    row(45, Application, false, "Preemptive cleanup of channels after an earlier error or a killed process"),
    // NVIDIA catalog "Double Bit ECC Error"; debug guidelines: reset the GPU, drain if
    // followed by 63/64. Suspect: hardware.
    row(48, Memory, true, "Double-bit (uncorrectable) ECC error in GPU memory"),
    // NVIDIA catalog "Internal micro-controller breakpoint/warning"; debug guidelines: reset
    // the GPU and report. Not suspect: it often clears with a reset.
    row(61, Firmware, false, "Internal micro-controller breakpoint/warning"),
    // NVIDIA catalog "Internal micro-controller halt" (hardware, driver or thermal cause);
    // suspect: hardware or firmware.
    row(62, Firmware, true, "Internal micro-controller halt"),
    // NVIDIA memory error management: row-remap (A100+) or page-retirement (older) entry
    // recorded in the InfoROM. Suspect: the memory is wearing.
    row(63, Memory, true, "ECC page retirement or row remapping recorded; takes effect after a GPU reset"),
    // NVIDIA memory error management: the retirement/remap could not be recorded.
    row(64, Memory, true, "ECC page retirement or row remapping recording failed"),
    // NVIDIA catalog "NVDEC0 Exception" (video decoder); device plugin: application error.
    row(68, Application, false, "Video decoder (NVDEC) exception"),
    // NVIDIA catalog "Graphics Engine class error" (hardware or driver). Operators reset the
    // GPU when it repeats; a single one is not evidence against the board.
    row(69, Driver, false, "Graphics engine class error"),
    // NVIDIA catalog "NVLINK Error": link hardware or the device at the far end; reset or
    // reboot to clear. Suspect: hardware.
    row(74, Nvlink, true, "NVLink error; the link needs a GPU reset or reboot to recover"),
    // NVIDIA catalog "GPU has fallen off the bus": the driver cannot reach the GPU over PCIe.
    row(79, Hardware, true, "GPU has fallen off the bus"),
    // NVIDIA catalog "High single-bit ECC error rate"; suspect: hardware.
    row(92, Memory, true, "High single-bit ECC error rate"),
    // NVIDIA memory error management: contained ECC error, only the faulting application
    // dies; reset when convenient. Suspect: hardware.
    row(94, Memory, true, "Contained uncorrectable ECC error (only the affected application was stopped)"),
    // NVIDIA memory error management: uncontained ECC error, every application on the GPU is
    // affected and the GPU must be reset.
    row(95, Memory, true, "Uncontained uncorrectable ECC error (the GPU must be reset)"),
    // NVIDIA catalog "Context Switch Timeout Error" (any cause, usually recoverable);
    // device plugin: application error.
    row(109, Application, false, "Context switch timeout"),
    // NVIDIA catalog "GSP RPC Timeout": the GPU System Processor stopped answering; reset
    // the GPU or power-cycle if it persists. Suspect: hardware or firmware.
    row(119, Firmware, true, "GSP RPC timeout: the GPU System Processor did not answer the driver"),
    // NVIDIA catalog "GSP Error"; suspect: hardware or firmware.
    row(120, Firmware, true, "GSP error"),
    // NVIDIA catalog "C2C Link corrected error" (Grace Hopper CPU-GPU link): corrected, no
    // operational impact, reset to retrain the link.
    row(121, Nvlink, false, "C2C (CPU-GPU link) corrected error"),
    // NVIDIA catalog "SPI PMU RPC Read/Write/Erase Failure" (hardware or driver). Operators
    // differ on severity; kept out of the suspect set until the risk model says otherwise.
    row(122, Firmware, false, "SPI PMU RPC read failure"),
    row(123, Firmware, false, "SPI PMU RPC write failure"),
    row(124, Firmware, false, "SPI PMU RPC erase failure"),
    // NVIDIA catalog "Inforom FS Failure" (hardware or driver).
    row(125, Firmware, false, "InfoROM filesystem failure"),
    // NVIDIA catalog "NVLink FLA privilege error": an illegal peer access, typically an
    // application bug.
    row(137, Application, false, "NVLink FLA privilege error (illegal peer-to-peer access)"),
    // NVIDIA catalog "Unrecovered ECC Error": uncorrectable errors the driver could not mark
    // for retirement or remapping. Suspect: hardware.
    row(140, Memory, true, "Unrecovered ECC error: could not be retired or remapped"),
    // NVIDIA catalog "GPU Initialization Failure" (hardware, driver or framebuffer). A GPU
    // that cannot initialise is suspect by operator practice.
    row(143, Hardware, true, "GPU initialization failure"),
    // NVIDIA catalog NVLink fatal error rows of Blackwell systems (NVLINK_*_ERROR); the same
    // family as 74, so suspect by the same reasoning.
    row(144, Nvlink, true, "NVLink SAW error"),
    row(145, Nvlink, true, "NVLink RLW error"),
    row(146, Nvlink, true, "NVLink TLW error"),
    row(147, Nvlink, true, "NVLink TREX error"),
    row(148, Nvlink, true, "NVLink NVLPW control error"),
    row(149, Nvlink, true, "NVLink NETIR link error"),
    row(150, Nvlink, true, "NVLink MSE error"),
    // NVIDIA catalog "GPU Recovery Action Changed": the driver announces that a reset or
    // reboot is needed. It follows the XID that caused it, which carries the evidence, so
    // counting it as a fault again would double-count.
    row(154, Driver, false, "GPU recovery action changed (GPU reset or node reboot required)"),
    // NVIDIA catalog "PCIe Fatal Timeout" (hardware or bus), the same family as 79.
    row(167, Hardware, true, "PCIe fatal timeout"),
    // NVIDIA catalog "Uncorrectable DRAM/SRAM Error": detail rows that accompany XID 48.
    row(171, Memory, true, "Uncorrectable DRAM error"),
    row(172, Memory, true, "Uncorrectable SRAM error"),
];

fn entry(xid: u32) -> Option<&'static Entry> {
    CATALOG
        .binary_search_by_key(&xid, |e| e.xid)
        .ok()
        .map(|i| &CATALOG[i])
}

/// The class of an XID; [`XidClass::Unknown`] for numbers not in the catalog.
pub fn classify(xid: u32) -> XidClass {
    entry(xid).map_or(XidClass::Unknown, |e| e.class)
}

/// Short operator-facing text for an XID.
pub fn description(xid: u32) -> &'static str {
    entry(xid).map_or(
        "XID not in gpu-sentinel's catalog; see NVIDIA's XID catalog",
        |e| e.description,
    )
}

/// True when the XID makes the GPU itself suspect (drain, reset, watch for RMA), as opposed
/// to an application fault or a driver notice.
pub fn is_hardware_fault(xid: u32) -> bool {
    entry(xid).is_some_and(|e| e.fault)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_is_sorted_without_duplicates() {
        for pair in CATALOG.windows(2) {
            assert!(
                pair[0].xid < pair[1].xid,
                "catalog out of order at XID {} / {}",
                pair[0].xid,
                pair[1].xid
            );
        }
    }

    #[test]
    fn design_suspect_set_is_hardware_fault() {
        for xid in [48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140] {
            assert!(
                is_hardware_fault(xid),
                "XID {xid} must make the GPU suspect"
            );
        }
    }

    #[test]
    fn application_faults_leave_the_gpu_healthy() {
        for xid in [13, 31, 43, 45, 68, 109] {
            assert_eq!(classify(xid), XidClass::Application, "XID {xid}");
            assert!(
                !is_hardware_fault(xid),
                "XID {xid} is the application's fault"
            );
        }
    }

    #[test]
    fn classes_match_who_acts() {
        assert_eq!(classify(48), XidClass::Memory);
        assert_eq!(classify(79), XidClass::Hardware);
        assert_eq!(classify(74), XidClass::Nvlink);
        assert_eq!(classify(119), XidClass::Firmware);
        assert_eq!(classify(154), XidClass::Driver);
        // Corrected link errors are counted under nvlink but do not condemn the GPU.
        assert_eq!(classify(121), XidClass::Nvlink);
        assert!(!is_hardware_fault(121));
    }

    #[test]
    fn faults_never_sit_in_blameless_classes() {
        for e in CATALOG.iter().filter(|e| e.fault) {
            assert!(
                !matches!(e.class, Application | Driver),
                "XID {} is a hardware fault but classed {}",
                e.xid,
                e.class
            );
        }
    }

    #[test]
    fn unknown_xids_are_counted_not_blamed() {
        assert_eq!(classify(9999), XidClass::Unknown);
        assert_eq!(classify(0), XidClass::Unknown);
        assert!(!is_hardware_fault(9999));
        assert!(description(9999).contains("not in"));
    }

    #[test]
    fn descriptions_are_short_single_lines() {
        for e in CATALOG {
            assert!(!e.description.is_empty() && e.description.len() <= 120);
            assert!(!e.description.contains('\n'));
        }
        assert_eq!(description(79), "GPU has fallen off the bus");
    }

    #[test]
    fn labels_are_lowercase_and_distinct() {
        let labels: std::collections::BTreeSet<_> =
            XidClass::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(labels.len(), XidClass::ALL.len());
        for label in labels {
            assert_eq!(label, label.to_lowercase());
        }
        assert_eq!(XidClass::Hardware.to_string(), "hardware");
    }
}
