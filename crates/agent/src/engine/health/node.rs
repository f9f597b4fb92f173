//! The node's own components, judged from what the host says besides each GPU's sample:
//!
//! - driver_version: the GPUs run firmware of one driver, the one NVML reports (the GSP
//!   firmware ships with the driver, so GPUs that disagree, or disagree with NVML, run a
//!   driver half replaced: reboot to load one);
//! - kernel_log: the kernel log the XIDs are read from can be read (without it XIDs come
//!   from NVML's events alone, which keep only the last of several);
//! - pci: every NVIDIA display or 3D controller on the PCI bus is a GPU NVML lists (one it
//!   does not list failed to initialise or was dropped by the driver).

use std::collections::BTreeMap;

use super::hold::{Found, found, healthy};
use super::{Action, State};
use crate::model::{Snapshot, normalize_pci_bus_id};

/// The node components' evidence, in [`super::NODE_COMPONENTS`] order. `known_buses`: the
/// PCI bus ids of every GPU the engine knows, those missing from the snapshot included.
pub fn judge(snapshot: &Snapshot, known_buses: &[String]) -> [Option<Found>; 3] {
    [
        driver_version(snapshot),
        kernel_log(snapshot),
        pci(snapshot, known_buses),
    ]
}

/// `0-3, 5` for GPU indices.
fn ranges(indices: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < indices.len() {
        let start = indices[i];
        let mut end = start;
        while i + 1 < indices.len() && indices[i + 1] == end + 1 {
            i += 1;
            end = indices[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(", ")
}

fn driver_version(snapshot: &Snapshot) -> Option<Found> {
    let mut versions: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for g in snapshot.gpus.iter().filter(|g| g.up) {
        if let Some(v) = g.firmware_version.as_deref().map(str::trim)
            && !v.is_empty()
        {
            versions.entry(v).or_default().push(g.index);
        }
    }
    match versions.len() {
        0 => healthy("no GPU reports its driver's version"),
        1 => {
            let running = versions.keys().next().copied().unwrap_or_default();
            match snapshot.host.driver_version.as_deref() {
                Some(nvml) if nvml.trim() != running => found(
                    State::Unhealthy,
                    Action::DrainAndReboot,
                    format!(
                        "the GPUs run firmware of driver {running}, NVML is driver {}: reboot to load one driver",
                        nvml.trim()
                    ),
                ),
                _ => healthy("every GPU runs the driver NVML reports"),
            }
        }
        _ => {
            let listed: Vec<String> = versions
                .iter()
                .map(|(v, gpus)| {
                    let mut gpus = gpus.clone();
                    gpus.sort_unstable();
                    format!("{v} (GPU {})", ranges(&gpus))
                })
                .collect();
            found(
                State::Unhealthy,
                Action::DrainAndReboot,
                format!(
                    "GPUs run different driver versions: {}; reboot to load one driver",
                    listed.join(", ")
                ),
            )
        }
    }
}

fn kernel_log(snapshot: &Snapshot) -> Option<Found> {
    match &snapshot.host.kernel_log {
        None => healthy("no kernel log is followed for XIDs"),
        Some(log) if log.readable => healthy("the kernel log is read for XIDs"),
        Some(log) => found(
            State::Degraded,
            Action::None,
            format!(
                "cannot read the kernel log {}: {}; XIDs come from NVML events alone, which keep only the last of several",
                log.path,
                log.problem.as_deref().unwrap_or("unreadable")
            ),
        ),
    }
}

fn pci(snapshot: &Snapshot, known_buses: &[String]) -> Option<Found> {
    let Some(on_bus) = &snapshot.host.pci_gpus else {
        return healthy("the PCI bus is not read");
    };
    let listed: Vec<String> = snapshot
        .gpus
        .iter()
        .map(|g| g.pci_bus_id.as_str())
        .chain(known_buses.iter().map(String::as_str))
        .filter_map(normalize_pci_bus_id)
        .collect();
    let missing: Vec<&str> = on_bus
        .iter()
        .filter(|bus| normalize_pci_bus_id(bus).is_none_or(|b| !listed.contains(&b)))
        .map(String::as_str)
        .collect();
    if missing.is_empty() {
        return healthy("every NVIDIA GPU on the PCI bus is in NVML's device list");
    }
    found(
        State::Unhealthy,
        Action::DrainAndReboot,
        format!(
            "{} NVIDIA GPU(s) on the PCI bus that NVML does not list: {}; reboot, and inspect a GPU that stays missing",
            missing.len(),
            missing.join(", ")
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_ranges_read_as_operators_write_them() {
        assert_eq!(ranges(&[0, 1, 2, 3, 5, 7, 8]), "0-3, 5, 7-8");
        assert_eq!(ranges(&[4]), "4");
        assert_eq!(ranges(&[]), "");
    }
}
