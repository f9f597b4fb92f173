//! Property tests of the `Retry-After` parser, which reads what any receiver (or a proxy in
//! front of it) cares to send: any text gives no wait or a wait that, bounded, is within
//! the cap — never a panic — and delay-seconds and IMF-fixdates read back what was written.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use gpu_sentinel::retry_after::{bounded, imf_fixdate, parse};
use proptest::prelude::*;

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2024-05-01T10:00:00Z")
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_default()
}

/// Texts near the valid forms, where parsers break: digits of any length, signs, dates
/// with any numbers in them, and anything at all.
fn header_value() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9]{0,40}",
        "[ +-]?[0-9]{1,25}(\\.[0-9]{0,3})?[ ]?",
        "(Mon|Thu|Sun|Xyz), [0-9]{1,3} (Jan|Nov|Foo) [0-9]{1,6} [0-9]{1,3}:[0-9]{1,3}:[0-9]{1,3} (GMT|UTC|[+-][0-9]{4})",
        "[A-Za-z]{3,9}, [0-9]{2}-[A-Za-z]{3}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2} GMT",
        "[A-Za-z]{3} [A-Za-z]{3} [ 0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2} [0-9]{1,6}",
        any::<String>(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn any_value_is_no_wait_or_a_wait_within_the_cap(
        value in header_value(),
        cap_secs in 1u64..=3600,
    ) {
        let cap = Duration::from_secs(cap_secs);
        if let Some(asked) = parse(&value, now()) {
            let (wait, capped) = bounded(asked, cap);
            prop_assert!(wait <= cap);
            prop_assert_eq!(capped, asked > cap);
        }
    }

    #[test]
    fn delay_seconds_read_back(seconds in any::<u64>(), cap_secs in 1u64..=3600) {
        let asked = parse(&seconds.to_string(), now());
        prop_assert_eq!(asked, Some(Duration::from_secs(seconds)));
        let cap = Duration::from_secs(cap_secs);
        prop_assert_eq!(bounded(Duration::from_secs(seconds), cap).0, cap.min(Duration::from_secs(seconds)));
    }

    /// Any instant from the past into the year 9999, written as an IMF-fixdate, reads back
    /// as the wait until it (none for the past).
    #[test]
    fn imf_fixdates_read_back(offset in -2_000_000_000i64..250_000_000_000i64) {
        let at = now() + TimeDelta::seconds(offset);
        let asked = parse(&imf_fixdate(at), now());
        let expected = Duration::from_secs(offset.max(0).unsigned_abs());
        prop_assert_eq!(asked, Some(expected));
    }
}
