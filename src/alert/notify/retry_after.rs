//! `Retry-After` (RFC 9110 §10.2.3): the wait a service asks for, read from any text
//! without panicking, and bounded before anyone computes a time from it.
//!
//! The value is what the service *asked*: `18446744073709551615` seconds or a date in 2099
//! are valid answers, so [`parse`] returns them as they are (delay-seconds past `u64`
//! saturate), and [`bounded`] cuts them to the caller's cap — the delivery stage's is the
//! receiver's `max_backoff` — saying whether it had to, so the cut can be counted. Nothing
//! here adds a duration to an instant.

use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, Utc};

/// The wait `value` asks for at `now`: delay-seconds (digits only), or an HTTP-date in any
/// of its three forms (IMF-fixdate, RFC 850, asctime). A date in the past is no wait;
/// anything else is None (the caller's own backoff applies).
pub fn parse(value: &str, now: DateTime<Utc>) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // More digits than u64 holds is still "a very long wait", not garbage.
        return Some(Duration::from_secs(value.parse().unwrap_or(u64::MAX)));
    }
    let at = http_date(value)?;
    // Subtracting two dates cannot overflow (chrono's TimeDelta spans every DateTime pair).
    Some((at - now).to_std().unwrap_or(Duration::ZERO))
}

/// A wait no longer than `cap`, and whether `asked` had to be cut to it.
pub fn bounded(asked: Duration, cap: Duration) -> (Duration, bool) {
    if asked > cap {
        (cap, true)
    } else {
        (asked, false)
    }
}

/// `value` as an HTTP-date. IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT") is an RFC 2822
/// date; recipients must also accept the obsolete RFC 850 ("Sunday, 06-Nov-94 08:49:37
/// GMT") and asctime ("Sun Nov  6 08:49:37 1994") forms.
fn http_date(value: &str) -> Option<DateTime<Utc>> {
    if let Ok(at) = DateTime::parse_from_rfc2822(value) {
        return Some(at.with_timezone(&Utc));
    }
    let naive = NaiveDateTime::parse_from_str(value, "%A, %d-%b-%y %H:%M:%S GMT")
        .or_else(|_| NaiveDateTime::parse_from_str(value, "%a %b %e %H:%M:%S %Y"))
        .ok()?;
    Some(naive.and_utc())
}

/// `at` as an IMF-fixdate, the form services send.
pub fn imf_fixdate(at: DateTime<Utc>) -> String {
    at.format("%a, %d %b %Y %H:%M:%S GMT").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2024-05-01T10:00:00Z")
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_default()
    }

    #[test]
    fn seconds_and_every_date_form() {
        let secs = |s| Some(Duration::from_secs(s));
        assert_eq!(parse("120", now()), secs(120));
        assert_eq!(parse(" 0 ", now()), secs(0));
        assert_eq!(parse("18446744073709551615", now()), secs(u64::MAX));
        assert_eq!(parse("99999999999999999999999", now()), secs(u64::MAX));
        assert_eq!(parse("Wed, 01 May 2024 10:00:30 GMT", now()), secs(30));
        assert_eq!(parse("Wednesday, 01-May-24 10:01:00 GMT", now()), secs(60));
        assert_eq!(parse("Wed May  1 10:00:05 2024", now()), secs(5));
        assert_eq!(parse("Wed, 01 May 2024 09:00:00 GMT", now()), secs(0));
        // 2099: asked as is; bounding is the caller's.
        let far = parse("Thu, 01 Jan 2099 00:00:00 GMT", now());
        assert!(far.is_some_and(|d| d > Duration::from_secs(70 * 365 * 86_400)));
        for bad in [
            "",
            "soon",
            "-5",
            "1.5",
            "+3",
            "Wed, 32 May 2024 10:00:00 GMT",
        ] {
            assert_eq!(parse(bad, now()), None, "{bad:?}");
        }
    }

    #[test]
    fn bounded_cuts_and_says_so() {
        let cap = Duration::from_secs(300);
        assert_eq!(
            bounded(Duration::from_secs(7), cap),
            (Duration::from_secs(7), false)
        );
        assert_eq!(bounded(Duration::MAX, cap), (cap, true));
        assert_eq!(bounded(cap, cap), (cap, false));
    }
}
