//! How the board writes quantities: durations, memory, ratios.

const GIB: f64 = (1u64 << 30) as f64;

/// `seconds` as a short human duration: "45 s", "12 min", "3 h 20 min", "2 d 4 h".
pub fn duration(seconds: f64) -> String {
    let s = if seconds.is_finite() {
        seconds.max(0.0) as u64
    } else {
        0
    };
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min", s / 60),
        3600..86_400 => match (s % 3600) / 60 {
            0 => format!("{} h", s / 3600),
            m => format!("{} h {m} min", s / 3600),
        },
        _ => format!("{} d {} h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// Bytes in GiB with one decimal.
pub(crate) fn gib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / GIB)
}

/// A ratio (0–1) as a whole percentage.
pub fn percent(ratio: f64) -> String {
    format!("{:.0}%", (ratio * 100.0).clamp(0.0, 100.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_say_them() {
        assert_eq!(duration(-3.0), "0 s");
        assert_eq!(duration(f64::NAN), "0 s");
        assert_eq!(duration(59.9), "59 s");
        assert_eq!(duration(720.0), "12 min");
        assert_eq!(duration(7200.0), "2 h");
        assert_eq!(duration(12_000.0), "3 h 20 min");
        assert_eq!(duration(187_200.0), "2 d 4 h");
        assert_eq!(gib(3 << 29), "1.5");
        assert_eq!(percent(0.456), "46%");
        assert_eq!(percent(1.7), "100%");
    }
}
