//! Property tests of kernel-log parsing: any line (any bytes, decoded the way the
//! followers decode them) parses or is refused without a panic, and well-formed XID lines,
//! in every wrapping the log reaches us in, give back the bus id, number, message and
//! kernel time they were written with.

use chrono::Utc;
use proptest::prelude::*;

use super::*;

/// A bus id as written in a line, and the normalised form it must come back as.
fn bus_id() -> impl Strategy<Value = (String, String)> {
    (
        0u32..=0xFFFF,
        any::<bool>(),
        0u32..=0xFF,
        0u32..=0x1F,
        prop::option::of(0u32..=7),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(domain, wide, bus, device, function, upper, pci)| {
            let mut written = if wide {
                format!("{domain:08x}:{bus:02x}:{device:02x}")
            } else {
                format!("{domain:04x}:{bus:02x}:{device:02x}")
            };
            if let Some(f) = function {
                written.push_str(&format!(".{f}"));
            }
            if upper {
                written = written.to_uppercase();
            }
            if pci {
                written.insert_str(0, "PCI:");
            }
            let normal = format!(
                "{domain:04X}:{bus:02X}:{device:02X}.{:X}",
                function.unwrap_or(0)
            );
            (written, normal)
        })
}

/// The driver's text after the number: no line break, not starting with a comma (the
/// parser drops the separator's commas), possibly with `;`, brackets, or another `NVRM:`.
fn message() -> impl Strategy<Value = String> {
    (
        "[A-Za-z0-9=_'<>().\\[\\]:;! -][A-Za-z0-9=_'<>().\\[\\]:;!, -]{0,80}",
        any::<bool>(),
    )
        .prop_map(|(text, nested)| {
            if nested {
                format!("{text} NVRM: Xid (PCI:0000:01:00): 13, [ 5.000001] again")
            } else {
                text
            }
        })
}

/// A wrapping of the driver's line, and the kernel time (µs since boot) it carries.
fn prefix() -> impl Strategy<Value = (String, Option<u64>)> {
    prop_oneof![
        Just((String::new(), None)),
        (0u32..8, 0u64..1_000_000, 0u64..100_000_000_000_000)
            .prop_map(|(prio, seq, us)| (format!("{prio},{seq},{us},-;"), Some(us))),
        (0u64..100_000_000, 0u64..1_000_000)
            .prop_map(|(secs, us)| (format!("[{secs:>5}.{us:06}] "), Some(secs * 1_000_000 + us))),
        "[a-z0-9-]{1,12}".prop_map(|host| (format!("Jan 12 10:00:00 {host} kernel: "), None)),
        ("[a-z0-9-]{1,12}", 0u64..100_000, 0u64..1_000_000).prop_map(|(host, secs, us)| (
            format!("Nov  7 18:17:15 {host} kernel: [{secs}.{us:06}] "),
            Some(secs * 1_000_000 + us)
        )),
        "[a-z0-9-]{1,12}".prop_map(|host| (
            format!("2025-01-12T10:00:00.123456+00:00 {host} kernel: "),
            None
        )),
        Just(("[Sun Feb 23 16:24:18 2025] ".to_string(), None)),
    ]
}

/// Timestamps at and past the edges of what chrono represents, in every prefix form.
fn odd_wall_time() -> impl Strategy<Value = String> {
    let iso = (
        -400_000i64..400_000,
        0u32..14,
        0u32..33,
        0u32..25,
        -30i32..30,
    )
        .prop_map(|(year, month, day, hour, offset)| {
            format!("{year:+}-{month:02}-{day:02}T{hour:02}:59:59.999999{offset:+03}:00 host")
        });
    let syslog = "[A-Za-z]{3} [0-9 ]{1,3} [0-9:.]{8,24} host";
    let dmesg_t = (-400_000i64..400_000, 0u32..33, 0u32..25)
        .prop_map(|(year, day, hour)| format!("[Sun Feb {day:2} {hour:02}:24:18 {year}]"));
    prop_oneof![iso.boxed(), syslog.boxed(), dmesg_t.boxed()]
        .prop_map(|head| format!("{head} kernel: NVRM: Xid (PCI:0000:3b:00): 79, x"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn any_bytes_parse_or_are_refused(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        // What the followers do with a record or a line: decode lossily, then parse.
        let line = String::from_utf8_lossy(&bytes);
        if let Some(x) = parse_line(&line) {
            prop_assert_eq!(normalize_pci_bus_id(&x.pci_bus_id), Some(x.pci_bus_id.clone()));
            prop_assert!(!x.message.contains('\n'));
        }
        let _ = prefix_wall_time(&line, Utc::now());
    }

    #[test]
    fn any_text_around_nvrm_parses_or_is_refused(
        head in "\\PC{0,40}",
        tail in "\\PC{0,80}",
        marker in prop::sample::select(vec![
            "NVRM: Xid (", "NVRM: Xid (PCI:", "NVRM: GPU ", "NVRM: GPU at PCI:", "[", ";", "NVRM:",
        ]),
    ) {
        let line = format!("{head}{marker}{tail}");
        if let Some(x) = parse_line(&line) {
            prop_assert_eq!(normalize_pci_bus_id(&x.pci_bus_id), Some(x.pci_bus_id.clone()));
        }
        let _ = prefix_wall_time(&line, Utc::now());
    }

    #[test]
    fn wall_times_at_the_edges_of_the_calendar_never_panic(line in odd_wall_time()) {
        let _ = prefix_wall_time(&line, Utc::now());
        prop_assert!(parse_line(&line).is_some());
    }

    #[test]
    fn well_formed_xid_lines_round_trip(
        (prefix, monotonic_us) in prefix(),
        (written, normal) in bus_id(),
        xid in any::<u32>(),
        message in message(),
        continuation in any::<bool>(),
    ) {
        let mut line = format!("{prefix}NVRM: Xid ({written}): {xid}, {message}");
        if continuation {
            line.push_str("\n SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0");
        }
        let Some(x) = parse_line(&line) else {
            return Err(TestCaseError::fail(format!("no XID in {line:?}")));
        };
        prop_assert_eq!(x.pci_bus_id, normal);
        prop_assert_eq!(x.xid, xid);
        prop_assert_eq!(x.message, message.trim());
        prop_assert_eq!(x.monotonic_us, monotonic_us);
    }

    #[test]
    fn fallen_off_the_bus_lines_round_trip(
        (prefix, monotonic_us) in prefix(),
        (written, normal) in bus_id(),
        at in any::<bool>(),
    ) {
        let line = if at {
            format!("{prefix}NVRM: GPU at {written}: GPU has fallen off the bus.")
        } else {
            format!("{prefix}NVRM: GPU {written}: GPU has fallen off the bus.")
        };
        let Some(x) = parse_line(&line) else {
            return Err(TestCaseError::fail(format!("no XID in {line:?}")));
        };
        prop_assert_eq!(x.pci_bus_id, normal);
        prop_assert_eq!(x.xid, 79);
        prop_assert_eq!(x.message, "GPU has fallen off the bus.");
        prop_assert_eq!(x.monotonic_us, monotonic_us);
    }
}
