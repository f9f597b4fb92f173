//! nvidia-smi's timestamps, and the zone they are read in.

use chrono::{DateTime, FixedOffset, NaiveDate, NaiveDateTime, Offset as _, Timelike as _, Utc};

/// Reads nvidia-smi's timestamps fast, remembering the last date (it changes once a day
/// while rows come every few milliseconds) and the last second (the rows of a round are
/// written milliseconds apart, most of them within one second).
#[derive(Debug, Clone)]
pub(crate) struct TimestampParser {
    /// Local time of the log minus UTC.
    offset: FixedOffset,
    last_date: [u8; 10],
    last_day: Option<NaiveDate>,
    /// `YYYY/MM/DD HH:MM:SS` of the last timestamp read in that shape, and that second in
    /// UTC.
    last_second: [u8; 19],
    last_second_at: Option<NaiveDateTime>,
}

impl TimestampParser {
    pub fn new(offset: FixedOffset) -> TimestampParser {
        TimestampParser {
            offset,
            last_date: [0; 10],
            last_day: None,
            last_second: [0; 19],
            last_second_at: None,
        }
    }

    /// `2026/07/14 08:12:38.696` (nvidia-smi; local time without a zone, taken at the
    /// configured offset), or RFC 3339 with its own zone.
    pub fn parse(&mut self, cell: &[u8]) -> Option<DateTime<Utc>> {
        if let Some(t) = self.fast(cell) {
            return Some(t);
        }
        let text = std::str::from_utf8(cell).ok()?;
        if let Ok(t) = DateTime::parse_from_rfc3339(text) {
            return Some(t.with_timezone(&Utc));
        }
        for format in [
            "%Y/%m/%d %H:%M:%S%.f",
            "%Y-%m-%d %H:%M:%S%.f",
            "%Y-%m-%dT%H:%M:%S%.f",
        ] {
            if let Ok(t) = NaiveDateTime::parse_from_str(text, format) {
                return self.to_utc(t);
            }
        }
        None
    }

    fn to_utc(&self, local: NaiveDateTime) -> Option<DateTime<Utc>> {
        local.checked_sub_offset(self.offset).map(|t| t.and_utc())
    }

    /// The exact `YYYY/MM/DD HH:MM:SS.mmm` shape, without a general-purpose parser.
    fn fast(&mut self, cell: &[u8]) -> Option<DateTime<Utc>> {
        if !(cell.len() == 19 || cell.len() == 23) || cell[4] != b'/' || cell[7] != b'/' {
            return None;
        }
        // The second of the last one: its milliseconds added to that second in UTC. The
        // offset is whole seconds, so a time's milliseconds are the same in UTC.
        if cell.len() == 23
            && cell[19] == b'.'
            && same_second(cell, &self.last_second)
            && let Some(second) = self.last_second_at
            && let [a, b, c] = [cell[20], cell[21], cell[22]].map(|d| d.wrapping_sub(b'0'))
            && a < 10
            && b < 10
            && c < 10
        {
            let millis = u32::from(a) * 100 + u32::from(b) * 10 + u32::from(c);
            let time = second.time().with_nanosecond(millis * 1_000_000)?;
            return Some(NaiveDateTime::new(second.date(), time).and_utc());
        }
        let digits = |range: std::ops::Range<usize>| -> Option<u32> {
            let mut n = 0u32;
            for &b in cell.get(range)? {
                if !b.is_ascii_digit() {
                    return None;
                }
                n = n * 10 + u32::from(b - b'0');
            }
            Some(n)
        };
        let day = match self.last_day {
            Some(day) if cell[..10] == self.last_date => day,
            _ => {
                let day =
                    NaiveDate::from_ymd_opt(digits(0..4)? as i32, digits(5..7)?, digits(8..10)?)?;
                self.last_date.copy_from_slice(&cell[..10]);
                self.last_day = Some(day);
                day
            }
        };
        if cell[10] != b' ' || cell[13] != b':' || cell[16] != b':' {
            return None;
        }
        let millis = if cell.len() == 23 {
            if cell[19] != b'.' {
                return None;
            }
            digits(20..23)?
        } else {
            0
        };
        let (hour, minute, second) = (digits(11..13)?, digits(14..16)?, digits(17..19)?);
        let time = day.and_hms_milli_opt(hour, minute, second, millis)?;
        let at = self.to_utc(time)?;
        // Remembered for the next rows of this second (not a leap second's, whose
        // milliseconds run past 999).
        if second < 60 {
            self.last_second.copy_from_slice(&cell[..19]);
            self.last_second_at = at.naive_utc().with_nanosecond(0);
        }
        Some(at)
    }
}

/// Parses `--timezone`: `+08:00`, `-05:30`, `Z` or `UTC`.
pub fn parse_offset(text: &str) -> anyhow::Result<FixedOffset> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("utc") || text == "Z" {
        return Ok(Utc.fix());
    }
    let bad = || anyhow::anyhow!("--timezone {text:?}: expected ±HH:MM, e.g. +08:00 or -05:00");
    let (sign, rest) = match text.as_bytes().first() {
        Some(b'+') => (1, &text[1..]),
        Some(b'-') => (-1, &text[1..]),
        _ => return Err(bad()),
    };
    let (h, m) = rest.split_once(':').unwrap_or((rest, "0"));
    let hours: i32 = h.parse().map_err(|_| bad())?;
    let minutes: i32 = m.parse().map_err(|_| bad())?;
    anyhow::ensure!(hours <= 14 && minutes < 60, bad());
    FixedOffset::east_opt(sign * (hours * 3600 + minutes * 60)).ok_or_else(bad)
}

/// Whether `cell` starts with the 19 bytes of `second`, compared a word at a time (a call
/// to compare 19 bytes cost more than the rest of reading a time of a known second).
fn same_second(cell: &[u8], second: &[u8; 19]) -> bool {
    let (Some(head), Some(tail)) = (cell.get(..16), cell.get(16..19)) else {
        return false;
    };
    let word = |bytes: &[u8]| bytes.try_into().map_or(0, u128::from_ne_bytes);
    word(head) == word(&second[..16]) && tail == &second[16..]
}
