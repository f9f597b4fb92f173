//! Parsing of XID lines in the formats the kernel log reaches us in.
//!
//! The driver writes one line per XID, `NVRM: Xid (PCI:0000:3b:00): 79, pid=…, name=…, text`
//! (older drivers omit `PCI:`), and, when the GPU drops off PCIe, a second line without a
//! number, `NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.` That text arrives wrapped
//! in whatever the reader adds: a `/dev/kmsg` record header, dmesg's `[ 1234.567890]`,
//! a syslog or journal prefix. The parser does not care about the wrapping: it finds the
//! `NVRM:` part anywhere in the line and takes the monotonic timestamp from the wrapping
//! when there is one.

use chrono::{DateTime, Datelike, Local, NaiveDateTime, TimeZone, Utc};

use crate::model::normalize_pci_bus_id;

/// One XID found in a kernel log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KmsgXid {
    /// Normalised PCI bus id, `0000:3B:00.0` (see [`normalize_pci_bus_id`]).
    pub pci_bus_id: String,
    /// The XID number (79 for the number-less "fallen off the bus" line).
    pub xid: u32,
    /// The driver's text after the XID number (process and details), trimmed.
    pub message: String,
    /// Microseconds since boot, from a `/dev/kmsg` header or dmesg's `[secs.usecs]`.
    pub(crate) monotonic_us: Option<u64>,
}

/// XID the driver means by its number-less "GPU has fallen off the bus" line.
const FELL_OFF_THE_BUS: u32 = 79;

/// Parses one kernel log line (or one `/dev/kmsg` record); `None` when it is not an XID.
///
/// Never panics: any input, however odd, gives `Some` or `None`.
pub(crate) fn parse_line(line: &str) -> Option<KmsgXid> {
    // A /dev/kmsg record may carry continuation lines (` SUBSYSTEM=…`); only the first
    // line is the message.
    let line = line.lines().next()?;
    let (monotonic_us, text) = split_header(line);
    let nvrm = text.find("NVRM:").map(|i| &text[i + "NVRM:".len()..])?;
    let nvrm = nvrm.trim_start();
    if let Some(rest) = nvrm.strip_prefix("Xid") {
        return parse_xid(rest, monotonic_us);
    }
    parse_fell_off_bus(nvrm, monotonic_us)
}

/// `(PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.`
fn parse_xid(rest: &str, monotonic_us: Option<u64>) -> Option<KmsgXid> {
    let rest = rest.trim_start().strip_prefix('(')?;
    let (bus, rest) = rest.split_once(')')?;
    let pci_bus_id = normalize_pci_bus_id(bus)?;
    let rest = rest.strip_prefix(':')?.trim_start();
    let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let xid = rest[..digits].parse().ok()?;
    let message = rest[digits..]
        .trim_start()
        .trim_start_matches(',')
        .trim()
        .to_string();
    Some(KmsgXid {
        pci_bus_id,
        xid,
        message,
        monotonic_us,
    })
}

/// `GPU 0000:3b:00.0: GPU has fallen off the bus.` and `GPU at PCI:0000:3b:00: GPU has…`
fn parse_fell_off_bus(nvrm: &str, monotonic_us: Option<u64>) -> Option<KmsgXid> {
    let rest = nvrm.strip_prefix("GPU ")?;
    let at = rest.find("has fallen off the bus")?;
    let rest = rest.trim_start();
    let rest = rest.strip_prefix("at ").unwrap_or(rest);
    let token = rest.split_whitespace().next()?.trim_end_matches([':', ',']);
    let pci_bus_id = normalize_pci_bus_id(token)?;
    // The message is the sentence from "GPU has fallen…" (or "has fallen…") on.
    let from = nvrm.find("GPU has fallen").unwrap_or(at + "GPU ".len());
    Some(KmsgXid {
        pci_bus_id,
        xid: FELL_OFF_THE_BUS,
        message: nvrm[from..].trim().to_string(),
        monotonic_us,
    })
}

/// Splits a `/dev/kmsg` header (`6,1234,5678901234,-;`) or a dmesg timestamp
/// (`[ 1234.567890] `) off the line, returning the monotonic time they carry. Syslog and
/// journal prefixes are left in place (the caller searches for `NVRM:`), but a dmesg
/// timestamp after them (`kernel: [ 1234.5] NVRM: …`) is still read.
fn split_header(line: &str) -> (Option<u64>, &str) {
    if let Some((header, body)) = line.split_once(';') {
        let mut fields = header.split(',');
        let numeric = |f: Option<&str>| {
            f.is_some_and(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()))
        };
        let (prio, seq) = (fields.next(), fields.next());
        let ts = fields.next();
        if numeric(prio) && numeric(seq) && numeric(ts) {
            return (ts.and_then(|t| t.parse().ok()), body);
        }
    }
    // The bracket must come before NVRM: so text inside the driver's message is not read.
    let nvrm_at = line.find("NVRM:").unwrap_or(line.len());
    let head = &line[..nvrm_at];
    if let Some(open) = head.rfind('[') {
        if let Some(close) = head[open..].find(']') {
            let inner = head[open + 1..open + close].trim();
            if let Some(us) = seconds_to_us(inner) {
                return (Some(us), &line[open + close + 1..]);
            }
        }
    }
    (None, line)
}

/// `1234.567890` (or `1234.5`) seconds as microseconds. The fraction is required: dmesg
/// always prints one, and a bare `[1234]` in a prefix is more likely a PID.
fn seconds_to_us(s: &str) -> Option<u64> {
    let (secs, frac) = s.split_once('.')?;
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    if !digits(secs) || !digits(frac) {
        return None;
    }
    let secs: u64 = secs.parse().ok()?;
    let mut micros = 0u64;
    for (i, b) in frac.bytes().take(6).enumerate() {
        micros += u64::from(b - b'0') * 10u64.pow(5 - i as u32);
    }
    secs.checked_mul(1_000_000)?.checked_add(micros)
}

/// The wall-clock time a log line's own prefix states, when it has one: RFC 3339 / ISO
/// (rsyslog high-precision, `journalctl -o short-iso`), classic syslog (`Jan 12 10:00:00`,
/// local time, year guessed from `now`), or `dmesg -T` (`[Sun Feb 23 16:24:18 2025]`).
pub(crate) fn prefix_wall_time(line: &str, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let first = line.split_whitespace().next()?;
    for fmt in ["%Y-%m-%dT%H:%M:%S%.f%:z", "%Y-%m-%dT%H:%M:%S%.f%z"] {
        if let Ok(t) = DateTime::parse_from_str(first, fmt) {
            return Some(t.with_timezone(&Utc));
        }
    }
    if let Some(inner) = line.strip_prefix('[').and_then(|r| r.split_once(']')) {
        if let Ok(t) = NaiveDateTime::parse_from_str(inner.0.trim(), "%a %b %e %H:%M:%S %Y") {
            return local(t);
        }
    }
    syslog_time(line, now)
}

/// `Jan 12 10:00:00 host …`: syslog has no year; take `now`'s, or last year's when that
/// would put the line more than a day in the future (a December line read in January).
fn syslog_time(line: &str, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let mut words = line.split_whitespace();
    let (month, day, clock) = (words.next()?, words.next()?, words.next()?);
    if month.len() != 3 || clock.len() < 8 {
        return None;
    }
    let year = now.with_timezone(&Local).year();
    for y in [year, year - 1] {
        let text = format!("{y} {month} {day} {clock}");
        let parsed = NaiveDateTime::parse_from_str(&text, "%Y %b %d %H:%M:%S%.f").ok()?;
        let t = local(parsed)?;
        if t <= now + chrono::TimeDelta::days(1) {
            return Some(t);
        }
    }
    None
}

fn local(t: NaiveDateTime) -> Option<DateTime<Utc>> {
    Local
        .from_local_datetime(&t)
        .earliest()
        .map(|t| t.with_timezone(&Utc))
}

#[cfg(test)]
mod props;

#[cfg(test)]
mod tests {
    use super::*;

    fn xid(line: &str) -> KmsgXid {
        parse_line(line).unwrap_or_else(|| panic!("no XID parsed from {line:?}"))
    }

    #[test]
    fn raw_kmsg_record_with_monotonic_time() {
        let x = xid(
            "6,1234,5678901234,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.",
        );
        assert_eq!(x.pci_bus_id, "0000:3B:00.0");
        assert_eq!(x.xid, 79);
        assert_eq!(x.monotonic_us, Some(5_678_901_234));
        assert_eq!(
            x.message,
            "pid=1234, name=python, GPU has fallen off the bus."
        );
    }

    #[test]
    fn kmsg_record_with_caller_field_and_continuation_lines() {
        let x = xid(
            "4,812,93338123,-,caller=T2213;NVRM: Xid (PCI:0000:18:00): 13, pid=2213, name=python3, Graphics Exception: ESR 0x50df30=0x107000e\n SUBSYSTEM=pci\n DEVICE=+pci:0000:18:00.0",
        );
        assert_eq!((x.xid, x.pci_bus_id.as_str()), (13, "0000:18:00.0"));
        assert_eq!(x.monotonic_us, Some(93_338_123));
        assert!(!x.message.contains("SUBSYSTEM"));
    }

    #[test]
    fn dmesg_line_with_unknown_process() {
        let x = xid(
            "[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.",
        );
        assert_eq!(x.xid, 48);
        assert_eq!(x.monotonic_us, Some(1_234_567_890));
        assert!(x.message.starts_with("pid='<unknown>'"));
        assert!(x.message.ends_with("subpartition 0."));
    }

    #[test]
    fn syslog_and_journal_lines() {
        let x = xid(
            "Jan 12 10:00:00 node-3 kernel: [ 1234.5] NVRM: Xid (PCI:0000:18:00): 13, Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address",
        );
        assert_eq!((x.xid, x.monotonic_us), (13, Some(1_234_500_000)));
        assert!(x.message.starts_with("Graphics SM Warp Exception"));

        let x = xid(
            "Nov 07 18:17:15 server kernel: NVRM: Xid (PCI:0000:01:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        );
        assert_eq!(
            (x.xid, x.pci_bus_id.as_str(), x.monotonic_us),
            (79, "0000:01:00.0", None)
        );

        let x = xid(
            "2025-01-12T10:00:00.123456+00:00 node-3 kernel: NVRM: Xid (PCI:0000:61:00): 119, pid=123417, name=nv-hostengine, Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 10 (FREE) (0xc0000005 0x0).",
        );
        assert_eq!((x.xid, x.pci_bus_id.as_str()), (119, "0000:61:00.0"));
    }

    #[test]
    fn gsp_timeout_without_pid() {
        let x = xid(
            "NVRM: Xid (PCI:000f:01:00): 119, Timeout after 6s of waiting for RPC response from GPU0 GSP!",
        );
        assert_eq!((x.xid, x.pci_bus_id.as_str()), (119, "000F:01:00.0"));
        assert_eq!(
            x.message,
            "Timeout after 6s of waiting for RPC response from GPU0 GSP!"
        );
        let x = xid(
            "[16450076.435595] NVRM: Xid (PCI:0002:00:00): 119, pid=1582259, name=nvc:[driver], Timeout after 6s of waiting for RPC response from GPU1 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20802a02 0x8).",
        );
        assert_eq!((x.xid, x.monotonic_us), (119, Some(16_450_076_435_595)));
        assert!(x.message.contains("name=nvc:[driver]"));
    }

    #[test]
    fn bracketed_numbers_without_a_fraction_are_not_timestamps() {
        let x = xid("Jan 12 10:00:00 node-3 kernel[0]: NVRM: Xid (PCI:0000:3b:00): 13, x");
        assert_eq!(x.monotonic_us, None);
        let x = xid("[    5.000001] NVRM: Xid (PCI:0000:3b:00): 13, x");
        assert_eq!(x.monotonic_us, Some(5_000_001));
    }

    #[test]
    fn older_and_newer_driver_forms() {
        // Pre-R450 drivers print no PCI: prefix.
        let x = xid(
            "Nov 22 18:29:55 hostname kernel: [ 966.503025] NVRM: Xid (0000:01:00): 31, Ch 0000000b, engmask 00000120, intr 10000000",
        );
        assert_eq!((x.xid, x.pci_bus_id.as_str()), (31, "0000:01:00.0"));
        // dmesg -T wraps a wall time, not a monotonic one.
        let x = xid(
            "[Sun Feb 23 16:24:18 2025] NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, Timeout after 6s of waiting for RPC response from GPU4 GSP! Expected function 103 (GSP_RM_ALLOC) (0x2081 0x4).",
        );
        assert_eq!((x.xid, x.monotonic_us), (119, None));
        // Blackwell NVLink and recovery-action lines.
        let x = xid(
            "[171167.620236] NVRM: Xid (PCI:0009:01:00): 149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
        );
        assert_eq!((x.xid, x.pci_bus_id.as_str()), (149, "0009:01:00.0"));
        let x = xid(
            "NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (OS Reboot)",
        );
        assert_eq!(x.xid, 154);
        let x = xid(
            "NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.",
        );
        assert_eq!((x.xid, x.pci_bus_id.as_str()), (63, "0000:10:1C.0"));
        let x = xid(
            "NVRM: Xid (PCI:0000:01:00): 94, pid=7062, Contained: CE User Channel (0x9). RST: No, D-RST: No",
        );
        assert_eq!(x.xid, 94);
        let x = xid(
            "NVRM: Xid (PCI:0000:01:00): 62, 322bff9a 0000b3b8 00000000 206a4b08 206a3cc8 206a3e36 206a2284 206a2ad6",
        );
        assert_eq!(x.xid, 62);
    }

    #[test]
    fn fallen_off_the_bus_lines_without_a_number_are_xid_79() {
        for (line, bus, mono) in [
            (
                "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.",
                "0000:3B:00.0",
                None,
            ),
            (
                "NVRM: GPU at PCI:0000:3b:00: GPU has fallen off the bus.",
                "0000:3B:00.0",
                None,
            ),
            (
                "[90211.554402] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.",
                "0000:3B:00.0",
                Some(90_211_554_402),
            ),
            (
                "Nov 07 18:17:15 server kernel: NVRM: GPU 0000:01:00.0: GPU has fallen off the bus.",
                "0000:01:00.0",
                None,
            ),
            (
                "3,2201,90211554402,-;NVRM: GPU at 0000:01:00.0 has fallen off the bus.",
                "0000:01:00.0",
                Some(90_211_554_402),
            ),
        ] {
            let x = xid(line);
            assert_eq!(
                (x.xid, x.pci_bus_id.as_str(), x.monotonic_us),
                (79, bus, mono),
                "{line}"
            );
            assert!(x.message.contains("fallen off the bus"), "{line}");
        }
    }

    #[test]
    fn lines_that_are_not_xids() {
        for line in [
            "",
            ";",
            "6,1,2,-;",
            "Regular log content without Xid errors",
            "NVRM: Xid error: xyz, invalid data",
            "NVRM: Xid (invalid): some error",
            "NVRM: Xid (PCI:0000:3b:00): , no number",
            "NVRM: Xid (PCI:0000:3b:00) 79 missing colon",
            "NVRM: Xid (PCI:0000:3b:00): 99999999999999999999, overflow",
            "NVRM: GPU at PCI:0000:9b:00: GPU-509665ad-b600-ac93-3616-d754b23d636d",
            "NVRM: GPU Board Serial Number: 1650124014249",
            "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  570.86.15",
            "NVRM: GPU 0000:04:00.0: PDB_PROP_GPU_IS_LOST set; refusing further ops",
            "pcieport 0000:00:01.0: PCIe Bus Error: severity=Corrected, type=Physical Layer",
            "NVRM: Xid (PCI:zzzz:3b:00): 79, GPU has fallen off the bus.",
            "[ 12.3] NVRM: Xid (PCI:0000:3b:00",
            "NVRM: GPU ",
            "NVRM:",
            "\u{0}\u{ff}NVRM: Xid (\u{1F600}): 1",
        ] {
            assert_eq!(parse_line(line), None, "{line:?}");
        }
    }

    #[test]
    fn odd_bytes_never_panic() {
        let samples = [
            "NVRM: Xid (PCI:0000:3b:00): 7é, x",
            "[é] NVRM: Xid",
            "6,é,1;NVRM:",
            "[ 1.9999999999999999999] NVRM: Xid (0:1): 2",
        ];
        for s in samples {
            let _ = parse_line(s);
        }
        // Every prefix of a real line, cut at every char boundary.
        let line = "6,1234,5678901234,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.";
        for (i, _) in line.char_indices() {
            let _ = parse_line(&line[..i]);
        }
    }

    #[test]
    fn wall_time_prefixes() {
        let now = Utc::now();
        let t = prefix_wall_time("2025-01-12T10:00:00.5+00:00 node kernel: NVRM: Xid", now);
        assert_eq!(
            t.map(|t| t.to_rfc3339()),
            Some("2025-01-12T10:00:00.500+00:00".to_string())
        );
        let t = prefix_wall_time("2025-01-12T10:00:00+0100 node kernel: NVRM: Xid", now);
        assert_eq!(
            t.map(|t| t.to_rfc3339()),
            Some("2025-01-12T09:00:00+00:00".to_string())
        );
        assert!(prefix_wall_time("[Sun Feb 23 16:24:18 2025] NVRM: Xid", now).is_some());
        let t = prefix_wall_time("Jan  2 10:00:00 node kernel: NVRM: Xid", now);
        assert!(t.is_some_and(|t| t <= now + chrono::TimeDelta::days(1)));
        assert_eq!(prefix_wall_time("[ 1234.5] NVRM: Xid", now), None);
        assert_eq!(
            prefix_wall_time("Feb 30 10:00:00 node kernel: x", now),
            None
        );
        assert_eq!(prefix_wall_time("6,1,2,-;NVRM: Xid", now), None);
        assert_eq!(prefix_wall_time("", now), None);
    }
}
