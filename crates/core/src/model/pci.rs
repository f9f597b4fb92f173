//! PCI bus id normalisation: the one key under which NVML, the kernel log, sysfs and the
//! simulator's bus ids meet.
//!
//! Each writes the same address differently (`00000000:3B:00.0`, `0000:3b:00`,
//! `PCI:0000:3b:00`, `3b:00.0`), and an XID from the kernel log, which names no UUID, is
//! matched to its GPU through it; the data model's own [`super::XidEvent::is_on`] compares
//! through it too, so the normalisation lives with the model every layer shares.

/// Normalises a PCI bus id to NVML's `0000:3B:00.0` form: domain of at least four hex
/// digits, uppercase hex, function `.0` when absent.
///
/// Accepts NVML's `00000000:3B:00.0` (eight-digit domain), the kernel log's `0000:3b:00`
/// and `PCI:0000:3b:00`, sysfs's `0000:3b:00.0`, and lspci's domain-less `3b:00.0`.
/// Domains above `FFFF` (VMD and some hypervisors) keep all their digits. Returns `None`
/// for anything that is not a bus id, so a mangled log line never matches a GPU by accident.
pub fn normalize_pci_bus_id(s: &str) -> Option<String> {
    let s = s.trim();
    let s = s
        .get(..4)
        .filter(|p| p.eq_ignore_ascii_case("pci:"))
        .map_or(s, |_| &s[4..]);
    let (addr, function) = match s.rsplit_once('.') {
        Some((addr, f)) => (addr, Some(f)),
        None => (s, None),
    };
    let parts: Vec<&str> = addr.split(':').collect();
    let (domain, bus, device) = match parts.as_slice() {
        [d, b, dev] => (hex(d, 8)?, hex(b, 2)?, hex(dev, 2)?),
        [b, dev] => (0, hex(b, 2)?, hex(dev, 2)?),
        _ => return None,
    };
    let function = match function {
        Some(f) => hex(f, 1)?,
        None => 0,
    };
    if device > 0x1f || function > 7 {
        return None;
    }
    Some(format!("{domain:04X}:{bus:02X}:{device:02X}.{function:X}"))
}

fn hex(s: &str, max_digits: usize) -> Option<u32> {
    if s.is_empty() || s.len() > max_digits || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(s, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids_from_every_source_meet_in_one_key() {
        for s in [
            "00000000:3B:00.0",
            "0000:3b:00",
            "0000:3b:00.0",
            "PCI:0000:3b:00",
            "pci:0000:3B:00.0",
            " 3b:00.0 ",
            "3b:0",
        ] {
            assert_eq!(
                normalize_pci_bus_id(s).as_deref(),
                Some("0000:3B:00.0"),
                "{s:?}"
            );
        }
        assert_eq!(
            normalize_pci_bus_id("0001:00:1f.7").as_deref(),
            Some("0001:00:1F.7")
        );
        assert_eq!(
            normalize_pci_bus_id("10000:01:00.0").as_deref(),
            Some("10000:01:00.0")
        );
        for bad in [
            "",
            "3b",
            "0000:3b:00.8",
            "0000:3b:20.0",
            "0000:3bb:00.0",
            "GPU-1234",
            "0000:3b:00.0.1",
            "000000000:3b:00.0",
            "0000::00.0",
        ] {
            assert_eq!(normalize_pci_bus_id(bad), None, "{bad:?}");
        }
    }
}
