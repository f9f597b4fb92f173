//! Unit tests of nvidia-smi cell, unit and timestamp reading.

use super::*;

fn q(cell: &str, header: Unit, field: Field) -> Cell<f64> {
    let want = match field.default_unit() {
        Unit::Watt => Unit::Watt,
        Unit::Mhz => Unit::Mhz,
        _ => Unit::None,
    };
    // As a row's reader reads a cell: placeholders first.
    let cell = cell.as_bytes();
    placeholder(cell).unwrap_or_else(|| quantity(cell, header, field, want))
}

#[test]
fn values_with_and_without_units() {
    assert_eq!(
        q("81559 MiB", Unit::None, Field::MemTotal),
        Cell::Value(81559.0 * 1_048_576.0)
    );
    assert_eq!(
        q("81559", Unit::Mib, Field::MemTotal),
        Cell::Value(81559.0 * 1_048_576.0)
    );
    // No header unit and no value unit: the field's usual unit.
    assert_eq!(
        q("2", Unit::None, Field::MemUsed),
        Cell::Value(2.0 * 1_048_576.0)
    );
    assert_eq!(
        q("69.85 W", Unit::None, Field::PowerDraw),
        Cell::Value(69.85)
    );
    assert_eq!(q("100.00 %", Unit::None, Field::UtilGpu), Cell::Value(1.0));
    assert_eq!(q("41", Unit::Percent, Field::UtilGpu), Cell::Value(0.41));
    assert_eq!(q("41", Unit::None, Field::TempGpu), Cell::Value(41.0));
    assert_eq!(
        q("345 MHz", Unit::None, Field::Clock(ClockKind::Sm)),
        Cell::Value(345.0)
    );
    assert_eq!(q("[N/A]", Unit::None, Field::TempMemory), Cell::Absent);
    assert_eq!(q("N/A", Unit::None, Field::TempMemory), Cell::Absent);
    assert_eq!(
        q("[Not Supported]", Unit::None, Field::FanSpeed),
        Cell::Absent
    );
    assert_eq!(
        q(
            "[Requested functionality has been deprecated]",
            Unit::None,
            Field::PowerLimit
        ),
        Cell::Absent
    );
    assert_eq!(q("[GPU is lost]", Unit::None, Field::TempGpu), Cell::Lost);
    assert_eq!(q("hot", Unit::None, Field::TempGpu), Cell::Invalid);
    assert_eq!(q("12 parsecs", Unit::None, Field::TempGpu), Cell::Invalid);
    assert_eq!(q("inf", Unit::None, Field::TempGpu), Cell::Invalid);
}

#[test]
fn decimals_read_exactly_as_the_standard_parser() {
    for text in [
        "0",
        "41",
        "69.85",
        "631.95",
        "0.1",
        "-3.5",
        "100.00",
        "81559",
        "1e3",
        "12.",
        ".5",
        "123456789012345",
        "1234567890123456789",
        "3.14159265358979",
    ] {
        let expected = text.parse::<f64>().ok();
        assert_eq!(decimal(text.as_bytes()), expected, "{text}");
    }
    for bad in ["", "-", "1.2.3", "12a", "NaN", "inf"] {
        assert_eq!(decimal(bad.as_bytes()), None, "{bad}");
    }
}

/// What [`quantity`] gave before its one-pass path: the cell split at its first space (or a
/// last `%`), the number read by [`decimal`].
fn split_then_read(cell: &[u8]) -> Option<(f64, Unit)> {
    let (number, unit) = number_and_unit(cell);
    decimal(number).map(|v| (v, unit))
}

#[test]
fn the_one_pass_path_reads_every_shape_as_splitting_then_reading_does() {
    let cells = [
        "0",
        "41",
        "69.85 W",
        "631.95 W",
        "41 %",
        "41%",
        "41 %x",
        "41%x",
        "-3.5 C",
        "12.",
        "12. W",
        ".5",
        "-.5 W",
        "-",
        "- W",
        "1.2.3",
        "1.2.3 W",
        "1e3",
        "1e3 W",
        "0x1F",
        "12a",
        "12 ",
        "12  MiB",
        "81559 MiB",
        "1980 MHz",
        "1.5 GHz",
        "250 mW",
        "7 us",
        "3 XB",
        "123456789012345",
        "1234567890123456 W",
        "3.14159265358979 W",
        "5\t",
        "+5",
        "5 W W",
    ];
    for text in cells {
        let cell = text.as_bytes();
        let fast = leading_decimal(cell).and_then(|(value, end)| match cell.get(end) {
            None => Some((value, Unit::None)),
            Some(b' ') => Some((value, Unit::parse(cell[end + 1..].trim_ascii()))),
            Some(b'%') if end + 1 == cell.len() => Some((value, Unit::Percent)),
            Some(_) => None,
        });
        if let Some(fast) = fast {
            let general = split_then_read(cell);
            assert_eq!(Some(fast), general, "{text:?}");
            assert!(
                fast.0.to_bits() == general.map_or(0, |g| g.0.to_bits()),
                "{text:?}: the same bits"
            );
        }
        for (header, field) in [
            (Unit::None, Field::PowerDraw),
            (Unit::Mib, Field::MemUsed),
            (Unit::Percent, Field::UtilGpu),
            (Unit::None, Field::TempGpu),
        ] {
            let want = match field.default_unit() {
                Unit::Watt => Unit::Watt,
                Unit::Mhz => Unit::Mhz,
                _ => Unit::None,
            };
            let got = quantity(cell, header, field, want);
            let expected = match split_then_read(cell) {
                None => Cell::Invalid,
                Some((value, unit)) => {
                    let unit = match unit {
                        Unit::None if header != Unit::None => header,
                        Unit::None => field.default_unit(),
                        u => u,
                    };
                    match (unit, want) {
                        (u, w) if u == w => Cell::Value(value),
                        (Unit::None, _) | (Unit::Celsius, Unit::None) => Cell::Value(value),
                        (Unit::Percent, Unit::None) => Cell::Value(value / 100.0),
                        (Unit::Mib, Unit::None) => Cell::Value(value * 1_048_576.0),
                        (Unit::Milliwatt, Unit::Watt) => Cell::Value(value / 1000.0),
                        (Unit::Ghz, Unit::Mhz) => Cell::Value(value * 1000.0),
                        (Unit::Kib, Unit::None) => Cell::Value(value * 1024.0),
                        (Unit::Gib, Unit::None) => Cell::Value(value * 1_073_741_824.0),
                        _ => Cell::Invalid,
                    }
                }
            };
            assert_eq!(got, expected, "{text:?} as {field:?} under [{header:?}]");
        }
    }
}

#[test]
fn masks_and_pstates_read_on_the_short_path_as_the_general_parser_reads_them() {
    for text in [
        "0x0000000000000001",
        "0x0000000000000041",
        "0X00000000000000FF",
        "0xffffffffffffffff",
        "0x1",
        "0xAbC",
        "0x",
        "0x+1",
        "0x00000000000000001",
        "0x1g",
        "0x 1",
        "41",
        "0b1",
    ] {
        let general = {
            let hex = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X"));
            let parsed = match hex {
                Some(hex) => u64::from_str_radix(hex, 16).ok(),
                None => text.parse().ok(),
            };
            parsed.map_or(Cell::Invalid, Cell::Value)
        };
        assert_eq!(bitmask(text.as_bytes()), general, "{text:?}");
    }
    for text in [
        "P0", "P8", "P9", "P10", "P12", "P15", "P16", "P32", "P33", "P99", "P", "7", "P-1", "P1a",
    ] {
        let digits = text.strip_prefix('P').unwrap_or(text);
        let general = digits
            .parse()
            .ok()
            .filter(|&p: &u32| p <= 32)
            .map_or(Cell::Invalid, Cell::Value);
        assert_eq!(pstate(text.as_bytes()), general, "{text:?}");
    }
}

#[test]
fn flags_masks_and_pstates() {
    for yes in ["Yes", "Active", "Enabled"] {
        assert_eq!(flag(yes.as_bytes()), Cell::Value(true));
    }
    for no in ["No", "Not Active", "Disabled"] {
        assert_eq!(flag(no.as_bytes()), Cell::Value(false));
    }
    assert_eq!(flag(b"Maybe"), Cell::Invalid);
    assert_eq!(bitmask(b"0x0000000000000041"), Cell::Value(0x41));
    assert_eq!(bitmask(b"0xZZ"), Cell::Invalid);
    assert_eq!(pstate(b"P8"), Cell::Value(8));
    assert_eq!(pstate(b"[N/A]"), Cell::Absent);
    assert_eq!(pstate(b"P99"), Cell::Invalid);
}

#[test]
fn header_names_and_aliases() {
    assert_eq!(
        split_header(" memory.used [MiB] "),
        ("memory.used", Unit::Mib)
    );
    assert_eq!(
        split_header("temperature.gpu"),
        ("temperature.gpu", Unit::None)
    );
    assert_eq!(
        Field::lookup("clocks.sm"),
        Some(Field::Clock(ClockKind::Sm))
    );
    assert_eq!(
        Field::lookup("clocks_throttle_reasons.hw_slowdown"),
        Some(Field::EventBit(ClockEvents::HW_SLOWDOWN))
    );
    assert_eq!(
        Field::lookup("clocks_event_reasons.active"),
        Some(Field::EventsActive)
    );
    assert_eq!(Field::lookup("clocks_event_reasons.supported"), None);
    assert_eq!(Field::lookup("pci.domain"), None);
}

#[test]
fn timestamps_in_nvidia_smi_format_and_zones() {
    let mut utc = TimestampParser::new(parse_offset("UTC").unwrap());
    let t = utc.parse(b"2026/07/14 08:12:38.696").unwrap();
    assert_eq!(t.to_rfc3339(), "2026-07-14T08:12:38.696+00:00");
    let t = utc.parse(b"2026/07/14 08:12:39").unwrap();
    assert_eq!(t.to_rfc3339(), "2026-07-14T08:12:39+00:00");
    // The cached date is not reused for another date.
    let t = utc.parse(b"2026/07/15 00:00:00.000").unwrap();
    assert_eq!(t.to_rfc3339(), "2026-07-15T00:00:00+00:00");
    let mut east = TimestampParser::new(parse_offset("+08:00").unwrap());
    let t = east.parse(b"2026/07/14 08:12:38.696").unwrap();
    assert_eq!(t.to_rfc3339(), "2026-07-14T00:12:38.696+00:00");
    let t = east.parse(b"2026-07-14T08:12:38Z").unwrap();
    assert_eq!(t.to_rfc3339(), "2026-07-14T08:12:38+00:00");
    assert!(utc.parse(b"2026/13/14 08:12:38.696").is_none());
    assert!(utc.parse(b"yesterday").is_none());
    assert!(utc.parse(b"2026/07/14 08:1x:38.696").is_none());
}

#[test]
fn offsets() {
    assert_eq!(
        parse_offset("-05:30").unwrap().local_minus_utc(),
        -(5 * 3600 + 30 * 60)
    );
    assert!(parse_offset("08:00").is_err());
    assert!(parse_offset("+25:00").is_err());
}

#[test]
fn the_links_maximum_width_and_generation_are_read() {
    use crate::model::Snapshot;
    use crate::replay::smi_csv::{SmiCsvOptions, SmiCsvReader};
    use crate::replay::{SnapshotReader, Warnings};
    // Columns as `nvidia-smi --query-gpu` writes them; the link trained down to x8 Gen3.
    let text = "\
timestamp, uuid, utilization.gpu [%], pcie.link.gen.current, pcie.link.gen.max, pcie.link.width.current, pcie.link.width.max
2026/07/14 08:12:38.696, GPU-aaaa, 100 %, 3, 5, 8, 16
2026/07/14 08:12:43.696, GPU-aaaa, 100 %, 3, 5, 8, 16
";
    let mut reader = SmiCsvReader::new(
        text.as_bytes(),
        SmiCsvOptions {
            fields: None,
            timezone: parse_offset("UTC").unwrap(),
        },
    );
    let mut warnings = Warnings::collecting();
    let mut snapshot = Snapshot::default();
    assert!(reader.next_into(&mut snapshot, &mut warnings).unwrap());
    assert!(warnings.messages().is_empty(), "{:?}", warnings.messages());
    let pcie = snapshot.gpus[0].pcie;
    assert_eq!(
        (
            pcie.link_generation,
            pcie.link_generation_max,
            pcie.link_width,
            pcie.link_width_max
        ),
        (Some(3), Some(5), Some(8), Some(16))
    );
}

#[test]
fn timestamps_of_one_second_read_as_each_on_its_own() {
    // The second of the row before is remembered: each time comes out as a parser that
    // reads it first gives it, across seconds, days, zones and shapes.
    for zone in ["UTC", "+08:00", "-05:30"] {
        let offset = parse_offset(zone).unwrap();
        let mut reused = TimestampParser::new(offset);
        for cell in [
            "2026/07/14 08:12:38.002",
            "2026/07/14 08:12:38.005",
            "2026/07/14 08:12:38.999",
            "2026/07/14 08:12:38",
            "2026/07/14 08:12:38.000",
            "2026/07/14 08:12:39.000",
            "2026/07/14 08:12:39.1x0",
            "2026/07/14 08:12:39.100",
            "2026/07/15 08:12:39.100",
            "2026/07/14 23:59:59.998",
            "2026/07/14 23:59:59.999",
            "2026/07/15 00:00:00.000",
            "2026-07-15 00:00:00.001",
            "2026/07/15 00:00:00.001",
        ] {
            let fresh = TimestampParser::new(offset).parse(cell.as_bytes());
            assert_eq!(reused.parse(cell.as_bytes()), fresh, "{cell} at {zone}");
        }
    }
}
