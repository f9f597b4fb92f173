//! The NVIDIA GPUs the PCI bus lists, read from sysfs (`/sys/bus/pci/devices`, a folder per
//! function named by its address, with `vendor` and `class` files of hex ids).
//!
//! NVML lists only the GPUs the driver brought up; one that failed to initialise, or that
//! the driver dropped, is still on the bus. Comparing the two is the health verdict's `pci`
//! component. A GPU is a display controller of NVIDIA's vendor id: VGA (class 0x0300) or
//! 3D (0x0302, what data-center GPUs are). NVSwitches (bridges) and the GPUs' audio
//! functions are other classes; SR-IOV virtual functions (a `physfn` link) are left out,
//! since NVML on the host lists the physical GPU only.

use std::io;
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::collector::{Collected, Collector};
use crate::model::Snapshot;

/// The `pci` collector: lists the NVIDIA GPUs on the bus into each snapshot, for the
/// health verdicts' `pci` component.
pub(crate) struct PciBus {
    /// sysfs's PCI device folder (`[collect] pci_devices`).
    pub root: PathBuf,
}

impl Collector for PciBus {
    fn name(&self) -> &'static str {
        "pci"
    }

    fn collect(&mut self, snapshot: &mut Snapshot) -> anyhow::Result<Collected> {
        let list = nvidia_gpus(&self.root).with_context(|| {
            format!(
                "cannot read the PCI bus at {}: GPUs missing from NVML go unnoticed \
                 ([collect] pci_devices)",
                self.root.display()
            )
        })?;
        snapshot.host.pci_gpus = Some(list);
        Ok(Collected::Done)
    }
}

/// NVIDIA's PCI vendor id.
pub(crate) const NVIDIA_VENDOR: u32 = 0x10de;

/// A sysfs id file's value: `0x10de` with or without the prefix and trailing whitespace.
pub(crate) fn parse_id(text: &str) -> Option<u32> {
    let text = text.trim();
    let hex = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))
        .unwrap_or(text);
    if hex.is_empty() || hex.len() > 8 {
        return None;
    }
    u32::from_str_radix(hex, 16).ok()
}

/// Whether a 24-bit PCI class code is a display controller a GPU presents (VGA or 3D).
pub(crate) fn is_gpu_class(class: u32) -> bool {
    class >> 16 == 0x03 && matches!((class >> 8) & 0xff, 0x00 | 0x02)
}

/// The addresses of the NVIDIA GPUs under `root`, sorted. A device whose files cannot be
/// read is skipped (it may be going away); only an unreadable `root` is an error.
pub(crate) fn nvidia_gpus(root: &Path) -> io::Result<Vec<String>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(root)? {
        let Ok(entry) = entry else { continue };
        let dir = entry.path();
        let id = |file: &str| {
            std::fs::read_to_string(dir.join(file))
                .ok()
                .and_then(|t| parse_id(&t))
        };
        if id("vendor") != Some(NVIDIA_VENDOR) || !id("class").is_some_and(is_gpu_class) {
            continue;
        }
        if dir.join("physfn").exists() {
            continue;
        }
        found.push(entry.file_name().to_string_lossy().into_owned());
    }
    found.sort();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A sysfs-like folder with the given devices: (address, vendor, class, virtual).
    fn bus(name: &str, devices: &[(&str, &str, &str, bool)]) -> std::path::PathBuf {
        let root =
            std::env::temp_dir().join(format!("gpu-sentinel-pci-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for (address, vendor, class, virtual_fn) in devices {
            let dir = root.join(address);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("vendor"), format!("{vendor}\n")).unwrap();
            std::fs::write(dir.join("class"), format!("{class}\n")).unwrap();
            if *virtual_fn {
                std::fs::create_dir_all(dir.join("physfn")).unwrap();
            }
        }
        root
    }

    #[test]
    fn only_nvidia_display_and_3d_controllers_count() {
        let root = bus(
            "classes",
            &[
                ("0000:18:00.0", "0x10de", "0x030200", false), // an H100: 3D controller
                ("0000:2a:00.0", "0x10de", "0x030000", false), // a VGA GPU
                ("0000:2a:00.1", "0x10de", "0x040300", false), // its audio function
                ("0000:05:00.0", "0x10de", "0x068000", false), // an NVSwitch (bridge)
                ("0000:00:02.0", "0x8086", "0x030000", false), // Intel graphics
                ("0000:3b:00.4", "0x10de", "0x030200", true),  // an SR-IOV virtual function
                ("0000:99:00.0", "garbage", "0x030200", false),
            ],
        );
        let found = nvidia_gpus(&root).unwrap();
        assert_eq!(found, ["0000:18:00.0", "0000:2a:00.0"]);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_missing_bus_is_an_error() {
        assert!(nvidia_gpus(Path::new("/nonexistent/sys/bus/pci/devices")).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any text in an id file is an id or nothing, never a panic; ids read back.
        #[test]
        fn any_id_text_parses_or_is_refused(text in ".{0,20}", id in any::<u32>()) {
            let _ = parse_id(&text);
            prop_assert_eq!(parse_id(&format!("0x{id:04x}\n")), Some(id));
            prop_assert_eq!(parse_id(&format!("{id:x}")), Some(id));
        }
    }
}
