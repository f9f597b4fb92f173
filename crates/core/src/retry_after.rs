//! `Retry-After` (RFC 9110 §10.2.3): the wait a service asks for, read from any text
//! without panicking, and bounded before anyone computes a time from it.
//!
//! At the ground floor because two callers read it the same way: the notifiers (through
//! `alert::notify::http`) and the advice client, which sits below alerting.
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
mod tests;
