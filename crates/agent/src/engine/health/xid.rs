//! What an XID asks of the node: the xid component's state and action per XID, following
//! the recovery actions of NVIDIA's XID catalog (docs.nvidia.com/deploy/xid-errors) and its
//! memory-error guidance ("A100 GPU Memory Error Management"), on top of the classes of
//! [`crate::xid`].
//!
//! - The application's faults (class `application`: 13, 31, 43, 45, 68, 109, 137) leave
//!   the GPU healthy and ask for the job to be restarted, as NVIDIA's device plugin treats
//!   them.
//! - Off the bus, a PCIe fatal timeout or a GPU that failed to initialise (79, 167, 143):
//!   the driver cannot reach the GPU; drain the node and reboot.
//! - A remap or retirement that could not be recorded, an ECC error that could be neither
//!   retired nor remapped (64, 140): the memory guidance's replacement path.
//! - Uncorrectable memory errors (48, 95, 171, 172), a micro-controller halt or the GSP not
//!   answering (62, 119, 120), fatal NVLink errors (74, 144–150), and the driver announcing
//!   that a reset is required (154): reset the GPU before it runs work again.
//! - A remap recorded or an error contained (63, 94): the GPU works; reset it when it is
//!   free so the remap applies. A high single-bit error rate (92): watch for replacement.
//! - Any other driver, firmware or unknown XID: degraded, nothing to do but look it up.

use super::{Action, State};
use crate::xid::{XidClass, classify};

/// The xid component's state and action for one XID.
pub fn verdict(xid: u32) -> (State, Action) {
    match xid {
        79 | 143 | 167 => (State::Unhealthy, Action::DrainAndReboot),
        64 | 140 => (State::Unhealthy, Action::InspectHardware),
        48 | 95 | 171 | 172 | 62 | 119 | 120 | 74 | 144..=150 | 154 => {
            (State::Unhealthy, Action::ResetGpu)
        }
        63 | 94 | 61 => (State::Degraded, Action::ResetGpu),
        92 => (State::Degraded, Action::InspectHardware),
        // C2C corrected errors: no operational impact by the catalog.
        121 => (State::Healthy, Action::None),
        _ => match classify(xid) {
            XidClass::Application => (State::Healthy, Action::RestartJob),
            _ => (State::Degraded, Action::None),
        },
    }
}

/// How long an XID counts as evidence: a day for one that says something of the GPU (the
/// `GpuHardwareXid` alert's window), an hour for the application's faults.
pub(crate) fn window_seconds(xid: u32) -> i64 {
    match verdict(xid).0 {
        State::Healthy => 3600,
        _ => 86_400,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catalog_guidance_the_verdicts_follow() {
        assert_eq!(verdict(79), (State::Unhealthy, Action::DrainAndReboot));
        assert_eq!(verdict(64), (State::Unhealthy, Action::InspectHardware));
        assert_eq!(verdict(48), (State::Unhealthy, Action::ResetGpu));
        assert_eq!(verdict(63), (State::Degraded, Action::ResetGpu));
        for app in [13, 31, 43, 45, 68, 109] {
            assert_eq!(
                verdict(app),
                (State::Healthy, Action::RestartJob),
                "XID {app}"
            );
        }
        // Unknown numbers are looked at, never ignored.
        assert_eq!(verdict(9999), (State::Degraded, Action::None));
    }

    #[test]
    fn every_hardware_fault_xid_takes_the_gpu_out() {
        for xid in 0..200 {
            if crate::xid::is_hardware_fault(xid) {
                let (state, action) = verdict(xid);
                assert!(state >= State::Degraded, "XID {xid}");
                assert!(action >= Action::ResetGpu, "XID {xid}");
            }
        }
    }
}
