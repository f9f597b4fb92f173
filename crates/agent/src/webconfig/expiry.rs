//! When the served certificate stops being valid: read from its DER, warned of at start,
//! on every reload and by `check-config`, and exported as
//! `gpu_sentinel_tls_cert_expiry_timestamp_seconds`.
//!
//! rustls serves an expired certificate without a word (verifying is the client's job),
//! and Prometheus then fails every scrape with an x509 error while the agent looks
//! healthy. A warning two weeks ahead, and a gauge an alert can compare with `time()`,
//! leave time to renew.
//!
//! Only `notAfter` is needed, so the certificate is walked by hand (X.509's TBSCertificate
//! is a fixed sequence: optional version, serial, signature algorithm, issuer, validity)
//! rather than bringing an X.509 parser for one field.

use std::time::Duration;

/// A certificate that ends within this long is warned of.
pub(crate) const WARN_BEFORE: Duration = Duration::from_secs(14 * 86400);

/// The certificate a configuration serves first: its DER, and where it was read from.
#[derive(Clone)]
pub(crate) struct Leaf {
    pub der: Vec<u8>,
    pub what: String,
}

impl std::fmt::Debug for Leaf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "certificate from {}", self.what)
    }
}

impl Leaf {
    /// Starts serving it: see [`serving`].
    pub fn serve(&self) {
        serving(&self.der, &self.what);
    }

    /// The warning [`serving`] would log for it now, without recording it: for
    /// `check-config`.
    pub fn warning(&self) -> Option<String> {
        match not_after(&self.der) {
            Some(at) => warning(at, chrono::Utc::now().timestamp(), &self.what),
            None => Some(format!(
                "{}: cannot read the certificate's expiry date (notAfter)",
                self.what
            )),
        }
    }
}

/// Records the certificate now served (its DER) and warns when it has expired or ends
/// within [`WARN_BEFORE`]; `what` names it in the warning (its file). Called when serving
/// starts and on each reload; `check-config` prints the same warning ([`Leaf::warning`]).
pub fn serving(der: &[u8], what: &str) {
    let Some(at) = not_after(der) else {
        tracing::warn!("{what}: cannot read the certificate's expiry date (notAfter)");
        crate::export::set_tls_cert_not_after(None);
        return;
    };
    crate::export::set_tls_cert_not_after(Some(at));
    if let Some(warning) = warning(at, chrono::Utc::now().timestamp(), what) {
        tracing::warn!("{warning}");
    }
}

/// The warning due for a certificate ending at `at`, seen at `now` (both Unix seconds).
pub fn warning(at: i64, now: i64, what: &str) -> Option<String> {
    let when =
        chrono::DateTime::from_timestamp(at, 0).map_or_else(|| at.to_string(), |t| t.to_rfc3339());
    if at <= now {
        let days = (now - at) / 86400;
        return Some(format!(
            "{what}: the server certificate expired at {when} ({days} days ago); clients \
             that verify it (Prometheus does) refuse every connection: renew it"
        ));
    }
    let left = Duration::from_secs((at - now) as u64);
    if left <= WARN_BEFORE {
        return Some(format!(
            "{what}: the server certificate expires at {when}, in {:.1} days: renew it",
            left.as_secs_f64() / 86400.0
        ));
    }
    None
}

/// `notAfter` of a DER certificate, in Unix seconds.
pub fn not_after(der: &[u8]) -> Option<i64> {
    let (tag, certificate, _) = element(der)?;
    if tag != SEQUENCE {
        return None;
    }
    let (tag, tbs, _) = element(certificate)?;
    if tag != SEQUENCE {
        return None;
    }
    let mut rest = tbs;
    // version [0] EXPLICIT, absent in v1 certificates.
    if rest.first() == Some(&0xa0) {
        rest = element(rest)?.2;
    }
    // serialNumber, signature, issuer.
    for _ in 0..3 {
        rest = element(rest)?.2;
    }
    let (tag, validity, _) = element(rest)?;
    if tag != SEQUENCE {
        return None;
    }
    let (_, _, after) = element(validity)?;
    let (tag, time, _) = element(after)?;
    time_value(tag, time)
}

const SEQUENCE: u8 = 0x30;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// The first DER element of `input`: its tag, its contents and what follows it.
fn element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let bytes = usize::from(first & 0x7f);
        if bytes == 0 || bytes > 4 || rest.len() < bytes {
            return None;
        }
        let len = rest[..bytes]
            .iter()
            .fold(0usize, |n, b| (n << 8) | usize::from(*b));
        (len, &rest[bytes..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

/// UTCTime (`YYMMDDHHMMSSZ`, years 1950–2049 as RFC 5280 says) or GeneralizedTime
/// (`YYYYMMDDHHMMSSZ`) as Unix seconds.
fn time_value(tag: u8, text: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(text).ok()?;
    let digits = text.strip_suffix('Z')?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (year, rest) = match (tag, digits.len()) {
        (UTC_TIME, 12) => {
            let yy: i32 = digits[..2].parse().ok()?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, &digits[2..])
        }
        (GENERALIZED_TIME, 14) => (digits[..4].parse().ok()?, &digits[4..]),
        _ => return None,
    };
    let part = |i: usize| rest[i..i + 2].parse::<u32>().ok();
    let date = chrono::NaiveDate::from_ymd_opt(year, part(0)?, part(2)?)?;
    let time = date.and_hms_opt(part(4)?, part(6)?, part(8)?)?;
    Some(time.and_utc().timestamp())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A DER element of `tag` around `contents` (short or long length form).
    fn der(tag: u8, contents: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        if contents.len() < 0x80 {
            out.push(contents.len() as u8);
        } else {
            out.extend([0x82, (contents.len() >> 8) as u8, contents.len() as u8]);
        }
        out.extend_from_slice(contents);
        out
    }

    fn certificate(version: bool, not_after: (u8, &str)) -> Vec<u8> {
        let mut tbs = Vec::new();
        if version {
            tbs.extend(der(0xa0, &der(0x02, &[2])));
        }
        tbs.extend(der(0x02, &[0x01, 0x23]));
        tbs.extend(der(SEQUENCE, &der(0x06, &[0x2a, 0x86, 0x48])));
        tbs.extend(der(SEQUENCE, &[0u8; 200]));
        let validity = [
            der(UTC_TIME, b"250101000000Z"),
            der(not_after.0, not_after.1.as_bytes()),
        ]
        .concat();
        tbs.extend(der(SEQUENCE, &validity));
        tbs.extend(der(SEQUENCE, &[1, 2, 3]));
        der(
            SEQUENCE,
            &[der(SEQUENCE, &tbs), der(SEQUENCE, &[9; 10])].concat(),
        )
    }

    #[test]
    fn not_after_in_both_time_forms_with_and_without_a_version() {
        // 2030-06-15T12:34:56Z
        let at = 1_907_757_296;
        assert_eq!(
            not_after(&certificate(true, (UTC_TIME, "300615123456Z"))),
            Some(at)
        );
        assert_eq!(
            not_after(&certificate(false, (GENERALIZED_TIME, "20300615123456Z"))),
            Some(at)
        );
        // Two-digit years from 50 are the 1900s.
        assert_eq!(
            not_after(&certificate(true, (UTC_TIME, "500101000000Z"))),
            Some(-631_152_000)
        );
        assert_eq!(
            not_after(&certificate(true, (UTC_TIME, "301315123456Z"))),
            None
        );
        assert_eq!(
            not_after(&certificate(true, (UTC_TIME, "3006151234Z"))),
            None
        );
        assert_eq!(not_after(b"\x30\x82\xff"), None);
        assert_eq!(not_after(&[]), None);
    }

    #[test]
    fn warnings_for_expired_and_soon_expiring_certificates_only() {
        let now = 1_800_000_000;
        let expired = warning(now - 3 * 86400, now, "server.crt").expect("a warning");
        assert!(
            expired.contains("server.crt: the server certificate expired at"),
            "{expired}"
        );
        assert!(expired.contains("3 days ago"), "{expired}");
        let soon = warning(now + 86400 * 13 / 2, now, "server.crt").expect("a warning");
        assert!(
            soon.contains("expires at") && soon.contains("in 6.5 days"),
            "{soon}"
        );
        assert_eq!(warning(now + 15 * 86400, now, "server.crt"), None);
    }
}
