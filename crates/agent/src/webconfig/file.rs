//! The web configuration file as exporter-toolkit (github.com/prometheus/exporter-toolkit)
//! documents and reads it: every key, with Go's names for TLS versions, cipher suites,
//! curves and client-certificate policies. tests/fixtures/webconfig/ holds its own example.
//!
//! Values whose set is closed (a TLS version, a suite, a curve, a policy, an allowed
//! header, a bcrypt hash) are checked while the YAML is read, so serde_norway's error
//! carries the line of the value at fault. Names Go knows but rustls cannot honour are
//! refused by name here too, never dropped silently.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer};

/// The whole file. Every section is optional; an empty file is valid and changes nothing.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct FileConfig {
    pub tls_server_config: TlsServerConfig,
    pub http_server_config: HttpServerConfig,
    pub rate_limit: RateLimitConfig,
    /// User name → bcrypt hash. Empty: no authentication.
    pub basic_auth_users: BTreeMap<String, BcryptHash>,
}

/// `tls_server_config`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct TlsServerConfig {
    /// Inline PEM certificate chain (instead of `cert_file`).
    pub cert: Option<String>,
    /// Inline PEM private key (instead of `key_file`).
    pub key: Option<Secret>,
    /// Inline PEM CA certificates for client certificates (instead of `client_ca_file`).
    pub(crate) client_ca: Option<String>,
    pub cert_file: Option<String>,
    pub key_file: Option<String>,
    pub client_ca_file: Option<String>,
    pub client_auth_type: ClientAuth,
    /// Accepted by Go; not honoured here (refused by name when set).
    pub(crate) client_allowed_sans: Option<Vec<String>>,
    pub(crate) min_version: TlsVersion,
    pub(crate) max_version: TlsVersion,
    pub(crate) cipher_suites: Vec<CipherSuite>,
    pub(crate) prefer_server_cipher_suites: bool,
    pub(crate) curve_preferences: Vec<Curve>,
}

impl Default for TlsServerConfig {
    fn default() -> Self {
        TlsServerConfig {
            cert: None,
            key: None,
            client_ca: None,
            cert_file: None,
            key_file: None,
            client_ca_file: None,
            client_auth_type: ClientAuth::NoClientCert,
            client_allowed_sans: None,
            min_version: TlsVersion::Tls12,
            max_version: TlsVersion::Tls13,
            cipher_suites: Vec::new(),
            prefer_server_cipher_suites: true,
            curve_preferences: Vec::new(),
        }
    }
}

impl TlsServerConfig {
    /// exporter-toolkit's `IsEnabled`: any certificate, key or client-CA setting turns TLS on.
    pub(crate) fn is_enabled(&self) -> bool {
        let set = |s: &Option<String>| s.as_deref().is_some_and(|s| !s.is_empty());
        set(&self.cert)
            || self.key.as_ref().is_some_and(|k| !k.0.is_empty())
            || set(&self.client_ca)
            || set(&self.cert_file)
            || set(&self.key_file)
            || set(&self.client_ca_file)
            || self.client_auth_type != ClientAuth::NoClientCert
    }
}

/// `http_server_config`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct HttpServerConfig {
    /// HTTP/2 over TLS (ALPN `h2`); Go's default is on.
    pub http2: bool,
    /// Extra response headers, from exporter-toolkit's allowed set.
    pub headers: BTreeMap<AllowedHeader, String>,
}

impl Default for HttpServerConfig {
    fn default() -> Self {
        HttpServerConfig {
            http2: true,
            headers: BTreeMap::new(),
        }
    }
}

/// `rate_limit`: a token bucket per client address over its requests not already
/// authenticated ([`super::rate`]); an interval of 0 turns it off.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RateLimitConfig {
    pub interval: GoDuration,
    pub burst: u32,
}

/// A string that must never be printed (an inline private key).
#[derive(Clone, Default, Deserialize)]
#[serde(transparent)]
pub struct Secret(pub String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<secret>")
    }
}

/// Go's `tls.ClientAuthType` names, as exporter-toolkit accepts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClientAuth {
    NoClientCert,
    RequestClientCert,
    RequireAnyClientCert,
    VerifyClientCertIfGiven,
    RequireAndVerifyClientCert,
}

impl ClientAuth {
    pub fn parse(s: &str) -> Result<ClientAuth, String> {
        Ok(match s {
            "" | "NoClientCert" => ClientAuth::NoClientCert,
            "RequestClientCert" => ClientAuth::RequestClientCert,
            // "RequireClientCert" is exporter-toolkit's older spelling of the same policy.
            "RequireAnyClientCert" | "RequireClientCert" => ClientAuth::RequireAnyClientCert,
            "VerifyClientCertIfGiven" => ClientAuth::VerifyClientCertIfGiven,
            "RequireAndVerifyClientCert" => ClientAuth::RequireAndVerifyClientCert,
            other => {
                return Err(format!(
                    "unknown client_auth_type {other:?}; expected NoClientCert, RequestClientCert, \
                     RequireAnyClientCert, VerifyClientCertIfGiven or RequireAndVerifyClientCert"
                ));
            }
        })
    }
}

/// Go's `tls.VersionTLS1x` names as exporter-toolkit spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum TlsVersion {
    Tls10,
    Tls11,
    Tls12,
    Tls13,
}

impl TlsVersion {
    pub fn parse(s: &str) -> Result<TlsVersion, String> {
        Ok(match s {
            "TLS10" => TlsVersion::Tls10,
            "TLS11" => TlsVersion::Tls11,
            "TLS12" => TlsVersion::Tls12,
            "TLS13" => TlsVersion::Tls13,
            other => {
                return Err(format!(
                    "unknown TLS version {other:?}; expected TLS10, TLS11, TLS12 or TLS13"
                ));
            }
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            TlsVersion::Tls10 => "TLS10",
            TlsVersion::Tls11 => "TLS11",
            TlsVersion::Tls12 => "TLS12",
            TlsVersion::Tls13 => "TLS13",
        }
    }
}

/// One of Go's `tls.CipherSuites()` names that rustls implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CipherSuite {
    pub name: &'static str,
    /// A TLS 1.3 suite: Go does not let these be configured (all three are always on), so
    /// naming one changes nothing, as in Go.
    pub(crate) tls13: bool,
}

/// Go's secure suites (`tls.CipherSuites()`) that rustls implements: every AEAD suite with
/// ECDHE key exchange, and TLS 1.3's three.
const RUSTLS_SUITES: [(&str, bool); 9] = [
    ("TLS_AES_128_GCM_SHA256", true),
    ("TLS_AES_256_GCM_SHA384", true),
    ("TLS_CHACHA20_POLY1305_SHA256", true),
    ("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", false),
    ("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", false),
    ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", false),
    ("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", false),
    ("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", false),
    ("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", false),
];

/// Go's other `tls.CipherSuites()` names: valid for exporter-toolkit, absent from rustls
/// (CBC modes and RSA key exchange, which rustls leaves out by design).
const GO_ONLY_SUITES: [&str; 8] = [
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384",
];

impl CipherSuite {
    pub fn parse(s: &str) -> Result<CipherSuite, String> {
        if let Some((name, tls13)) = RUSTLS_SUITES.iter().find(|(n, _)| *n == s) {
            return Ok(CipherSuite {
                name,
                tls13: *tls13,
            });
        }
        if GO_ONLY_SUITES.contains(&s) {
            return Err(format!(
                "cipher suite {s} is not supported: rustls offers no CBC or RSA key exchange \
                 suites; use the ECDHE GCM or CHACHA20_POLY1305 suites"
            ));
        }
        Err(format!(
            "unknown cipher suite {s:?}; expected one of Go's tls.CipherSuites() names, such as \
             TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"
        ))
    }
}

/// Go's `tls.CurveID` names that exporter-toolkit accepts, less CurveP521 (refused: the
/// ring provider has no P-521 key exchange).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Curve {
    P256,
    P384,
    X25519,
}

impl Curve {
    pub fn parse(s: &str) -> Result<Curve, String> {
        Ok(match s {
            "CurveP256" => Curve::P256,
            "CurveP384" => Curve::P384,
            "X25519" => Curve::X25519,
            "CurveP521" => {
                return Err(
                    "curve CurveP521 is not supported by rustls; use X25519, CurveP256 \
                            or CurveP384"
                        .into(),
                );
            }
            other => {
                return Err(format!(
                    "unknown curve {other:?}; expected CurveP256, CurveP384, CurveP521 or X25519"
                ));
            }
        })
    }
}

/// The response headers exporter-toolkit lets a web config set (its `extraHTTPHeaders`),
/// with the values it allows where the set is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum AllowedHeader {
    StrictTransportSecurity,
    XContentTypeOptions,
    XFrameOptions,
    XXssProtection,
    ContentSecurityPolicy,
}

impl AllowedHeader {
    const ALL: [AllowedHeader; 5] = [
        AllowedHeader::StrictTransportSecurity,
        AllowedHeader::XContentTypeOptions,
        AllowedHeader::XFrameOptions,
        AllowedHeader::XXssProtection,
        AllowedHeader::ContentSecurityPolicy,
    ];

    pub fn name(self) -> &'static str {
        match self {
            AllowedHeader::StrictTransportSecurity => "Strict-Transport-Security",
            AllowedHeader::XContentTypeOptions => "X-Content-Type-Options",
            AllowedHeader::XFrameOptions => "X-Frame-Options",
            AllowedHeader::XXssProtection => "X-XSS-Protection",
            AllowedHeader::ContentSecurityPolicy => "Content-Security-Policy",
        }
    }

    /// The values Go accepts, empty when any value goes.
    pub(crate) fn allowed_values(self) -> &'static [&'static str] {
        match self {
            AllowedHeader::XContentTypeOptions => &["nosniff"],
            AllowedHeader::XFrameOptions => &["deny", "sameorigin"],
            _ => &[],
        }
    }

    pub fn parse(s: &str) -> Result<AllowedHeader, String> {
        AllowedHeader::ALL
            .into_iter()
            .find(|h| h.name() == s)
            .ok_or_else(|| {
                format!(
                    "HTTP header {s:?} can not be configured; allowed: {}",
                    AllowedHeader::ALL.map(AllowedHeader::name).join(", ")
                )
            })
    }

    /// Checks a value as Go does, and that it can be sent at all.
    pub(crate) fn check_value(self, value: &str) -> Result<(), String> {
        let allowed = self.allowed_values();
        if !allowed.is_empty() && !allowed.contains(&value) {
            return Err(format!(
                "invalid value for {}: expected one of {allowed:?}, got {value:?}",
                self.name()
            ));
        }
        if hyper::header::HeaderValue::from_str(value).is_err() {
            return Err(format!(
                "{}: the value holds characters no HTTP header may carry",
                self.name()
            ));
        }
        Ok(())
    }
}

/// The highest bcrypt cost accepted. bcrypt's work doubles with each step: cost 10 (Go's
/// and htpasswd's default) takes about 50 ms of a core, 14 about a second, 15 two, and 31
/// (which the format allows) more than a day — at start, where the dummy hash for unknown
/// users is made, and at every login not yet verified. Above 14 the agent would be a
/// denial of service against itself.
pub(crate) const MAX_BCRYPT_COST: u32 = 14;

/// About how long one bcrypt at `cost` takes a core, in words (from ~50 ms at cost 10).
fn bcrypt_time(cost: u32) -> String {
    let seconds = 0.05 * 2f64.powi(cost as i32 - 10);
    match seconds {
        s if s < 120.0 => format!("{s:.0} seconds"),
        s if s < 2.0 * 3600.0 => format!("{:.0} minutes", s / 60.0),
        s if s < 2.0 * 86400.0 => format!("{:.0} hours", s / 3600.0),
        s => format!("{:.0} days", s / 86400.0),
    }
}

/// A bcrypt hash as htpasswd and Go's bcrypt write it: `$2a$`, `$2b$` or `$2y$`, a cost of
/// 4 to [`MAX_BCRYPT_COST`] (Go allows 31), then 53 characters of salt and hash. Never
/// printed.
#[derive(Clone, PartialEq, Eq)]
pub struct BcryptHash(pub String);

impl fmt::Debug for BcryptHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<bcrypt hash>")
    }
}

impl BcryptHash {
    /// The hash, or why it is none; the message never repeats the text.
    pub fn parse(s: &str) -> Result<BcryptHash, String> {
        const WHAT: &str = "is not a bcrypt hash (expected $2a$, $2b$ or $2y$, a two-digit cost \
                            from 04 to 31, $ and 53 characters, as `htpasswd -nBC 10 \"\"` writes)";
        let rest = ["$2a$", "$2b$", "$2y$"]
            .iter()
            .find_map(|p| s.strip_prefix(p))
            .ok_or(WHAT)?;
        let cost: u32 = rest
            .get(..2)
            .filter(|c| c.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|c| c.parse().ok())
            .ok_or(WHAT)?;
        if !(4..=31).contains(&cost) || rest.as_bytes().get(2) != Some(&b'$') {
            return Err(WHAT.into());
        }
        if cost > MAX_BCRYPT_COST {
            return Err(format!(
                "has bcrypt cost {cost}, above the {MAX_BCRYPT_COST} accepted: each step of \
                 cost doubles the work, and every login not verified yet (a new scraper, each \
                 wrong password) would take about {} of a core, as would the start itself; \
                 hash the password again at cost 10 to 12 (`htpasswd -nBC 10 USER`)",
                bcrypt_time(cost)
            ));
        }
        let tail = &rest[3..];
        let alphabet = |b: u8| b.is_ascii_alphanumeric() || b == b'.' || b == b'/';
        if tail.len() != 53 || !tail.bytes().all(alphabet) {
            return Err(WHAT.into());
        }
        // The crate's own reading (salt decoding) must agree, or verifying would fail later.
        s.parse::<bcrypt::HashParts>()
            .map_err(|_| WHAT.to_string())?;
        Ok(BcryptHash(s.to_string()))
    }

    pub fn cost(&self) -> u32 {
        self.0.get(4..6).and_then(|c| c.parse().ok()).unwrap_or(10)
    }
}

/// A Go `time.Duration`: `"1s"`, `"1m30s"`, `"250ms"`, `"1.5h"`, or an integer of nanoseconds
/// (how yaml.v2 reads a bare number into one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct GoDuration(pub std::time::Duration);

impl GoDuration {
    pub fn parse(s: &str) -> Result<GoDuration, String> {
        let bad = || format!("{s:?} is not a duration (Go's form: 500ms, 1s, 1m30s)");
        let mut rest = s.trim();
        if rest == "0" {
            return Ok(GoDuration::default());
        }
        if rest.is_empty() || rest.starts_with('-') {
            return Err(bad());
        }
        rest = rest.strip_prefix('+').unwrap_or(rest);
        let mut total = 0f64;
        while !rest.is_empty() {
            let number_end = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .ok_or_else(bad)?;
            let number: f64 = rest[..number_end].parse().map_err(|_| bad())?;
            rest = &rest[number_end..];
            let unit_end = rest
                .find(|c: char| c.is_ascii_digit() || c == '.')
                .unwrap_or(rest.len());
            let seconds = match &rest[..unit_end] {
                "ns" => 1e-9,
                "us" | "µs" | "μs" => 1e-6,
                "ms" => 1e-3,
                "s" => 1.0,
                "m" => 60.0,
                "h" => 3600.0,
                _ => return Err(bad()),
            };
            rest = &rest[unit_end..];
            total += number * seconds;
        }
        // Go's Duration is an int64 of nanoseconds: about 292 years.
        if !total.is_finite() || total > 9.2e9 {
            return Err(bad());
        }
        Ok(GoDuration(std::time::Duration::from_secs_f64(total)))
    }
}

/// Reads a string and turns it into `T` with `parse`, inside the deserializer's visit of
/// the scalar, so that serde_norway places an error on the value's own line and key.
fn via_str<'de, D, T>(d: D, parse: fn(&str) -> Result<T, String>) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
{
    struct Visitor<T>(fn(&str) -> Result<T, String>);
    impl<T> serde::de::Visitor<'_> for Visitor<T> {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string")
        }
        fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<T, E> {
            (self.0)(s).map_err(E::custom)
        }
    }
    d.deserialize_str(Visitor(parse))
}

macro_rules! deserialize_via_str {
    ($($t:ty),*) => {$(
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                via_str(d, <$t>::parse)
            }
        }
    )*};
}

deserialize_via_str!(
    ClientAuth,
    TlsVersion,
    CipherSuite,
    Curve,
    AllowedHeader,
    BcryptHash
);

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = GoDuration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as 1s or 500ms")
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<GoDuration, E> {
                Ok(GoDuration(std::time::Duration::from_nanos(n)))
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<GoDuration, E> {
                u64::try_from(n)
                    .map(|n| GoDuration(std::time::Duration::from_nanos(n)))
                    .map_err(|_| E::custom(format!("{n} is negative; a duration is 0 or more")))
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<GoDuration, E> {
                GoDuration::parse(s).map_err(E::custom)
            }
        }
        d.deserialize_any(Visitor)
    }
}
