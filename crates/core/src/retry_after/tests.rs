//! Unit tests of `retry_after`: every form a service may send, and the cap.

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
