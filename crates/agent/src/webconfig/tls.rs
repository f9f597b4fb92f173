//! `tls_server_config` as a rustls server configuration, on the ring provider that ureq
//! already brings (one crypto stack in the binary).
//!
//! The certificate and key are served by [`RotatingCert`]: it looks at the files' change
//! stamps at most once a second, on a handshake, and loads the new pair when they change,
//! so a certificate renewed on disk (cert-manager, certbot) is served to the next
//! connection without a restart. A new pair that does not load (half written, key and
//! certificate not matching) is logged once and the previous one is kept.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use rustls::crypto::CryptoProvider;
use rustls::crypto::ring::{cipher_suite, kx_group};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig, SupportedCipherSuite};

use super::expiry::{self, Leaf};
use super::file::{ClientAuth, Curve, TlsServerConfig, TlsVersion};
use crate::sync::lock;

/// A refusal: the dotted key at fault and why.
type Refusal = (&'static str, String);

/// Builds the rustls configuration of `t`, reading its files (relative to `dir`), with
/// the certificate it serves first.
pub(crate) fn server_config(
    t: &TlsServerConfig,
    dir: &Path,
    http2: bool,
) -> Result<(ServerConfig, Leaf), Refusal> {
    let cert = source(
        dir,
        t.cert_file.as_deref(),
        t.cert.as_deref(),
        "cert_file",
        "cert",
    )?;
    let key = source(
        dir,
        t.key_file.as_deref(),
        t.key.as_ref().map(|k| k.0.as_str()),
        "key_file",
        "key",
    )?;
    let versions = versions(t)?;
    let provider = Arc::new(provider(t)?);
    let versions = usable_versions(&versions, &provider)?;
    let verifier = client_verifier(t, dir, &provider)?;
    let resolver = RotatingCert::load(cert, key, Arc::clone(&provider))?;
    let leaf = resolver.leaf();
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions)
        .map_err(|e| {
            (
                "tls_server_config",
                format!("rustls refuses the settings: {e}"),
            )
        })?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(Arc::new(resolver));
    config.ignore_client_order = t.prefer_server_cipher_suites;
    config.alpn_protocols = if http2 {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    Ok((config, leaf))
}

/// Where PEM text comes from: a file (re-read when it changes) or the YAML itself.
#[derive(Clone)]
enum Pem {
    File { path: PathBuf, key: &'static str },
    Inline { text: Vec<u8>, key: &'static str },
}

impl std::fmt::Debug for Pem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pem::File { path, .. } => write!(f, "{}", path.display()),
            Pem::Inline { key, .. } => write!(f, "inline {key}"),
        }
    }
}

impl Pem {
    fn key(&self) -> &'static str {
        match self {
            Pem::File { key, .. } | Pem::Inline { key, .. } => key,
        }
    }

    fn read(&self) -> Result<Vec<u8>, String> {
        match self {
            Pem::File { path, .. } => {
                std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
            }
            Pem::Inline { text, .. } => Ok(text.clone()),
        }
    }

    /// What changes when the file is replaced or rewritten; None inline or unreadable.
    fn stamp(&self) -> Option<(SystemTime, u64, u64)> {
        let Pem::File { path, .. } = self else {
            return None;
        };
        let meta = std::fs::metadata(path).ok()?;
        #[cfg(unix)]
        let inode = std::os::unix::fs::MetadataExt::ino(&meta);
        #[cfg(not(unix))]
        let inode = 0;
        Some((meta.modified().ok()?, meta.len(), inode))
    }

    fn described(&self) -> String {
        match self {
            Pem::File { path, .. } => path.display().to_string(),
            Pem::Inline { key, .. } => format!("the inline {key}"),
        }
    }
}

/// The file (relative to `dir`) or the inline text; exactly one must be set.
fn source(
    dir: &Path,
    file: Option<&str>,
    inline: Option<&str>,
    file_key: &'static str,
    inline_key: &'static str,
) -> Result<Pem, Refusal> {
    let full = |k: &'static str| -> &'static str {
        match k {
            "cert_file" => "tls_server_config.cert_file",
            "cert" => "tls_server_config.cert",
            "key_file" => "tls_server_config.key_file",
            "key" => "tls_server_config.key",
            "client_ca_file" => "tls_server_config.client_ca_file",
            _ => "tls_server_config.client_ca",
        }
    };
    let file = file.filter(|f| !f.is_empty());
    let inline = inline.filter(|t| !t.is_empty());
    match (file, inline) {
        (Some(_), Some(_)) => Err((
            full(file_key),
            format!("set {file_key} or {inline_key}, not both"),
        )),
        (Some(f), None) => Ok(Pem::File {
            path: dir.join(f),
            key: full(file_key),
        }),
        (None, Some(text)) => Ok(Pem::Inline {
            text: text.as_bytes().to_vec(),
            key: full(inline_key),
        }),
        (None, None) => Err((
            "tls_server_config",
            format!("missing one of {inline_key} or {file_key}"),
        )),
    }
}

/// The versions from `min_version` to `max_version`; rustls speaks TLS 1.2 and 1.3 only.
fn versions(t: &TlsServerConfig) -> Result<Vec<TlsVersion>, Refusal> {
    if t.min_version > t.max_version {
        return Err((
            "tls_server_config.min_version",
            format!(
                "{} is above max_version {}",
                t.min_version.name(),
                t.max_version.name()
            ),
        ));
    }
    for (key, v) in [
        ("tls_server_config.min_version", t.min_version),
        ("tls_server_config.max_version", t.max_version),
    ] {
        if v < TlsVersion::Tls12 {
            return Err((
                key,
                format!(
                    "{} is not supported: rustls speaks TLS12 and TLS13 only",
                    v.name()
                ),
            ));
        }
    }
    Ok([TlsVersion::Tls12, TlsVersion::Tls13]
        .into_iter()
        .filter(|v| (t.min_version..=t.max_version).contains(v))
        .collect())
}

/// The versions that have a suite left: naming only TLS 1.3 suites leaves TLS 1.2 none
/// (as in Go, where such a list turns TLS 1.2 handshakes away).
fn usable_versions(
    versions: &[TlsVersion],
    provider: &CryptoProvider,
) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, Refusal> {
    let has = |tls13: bool| {
        provider
            .cipher_suites
            .iter()
            .any(|s| matches!(s, SupportedCipherSuite::Tls13(_)) == tls13)
    };
    let out: Vec<_> = versions
        .iter()
        .filter_map(|v| match v {
            TlsVersion::Tls12 if has(false) => Some(&rustls::version::TLS12),
            TlsVersion::Tls13 if has(true) => Some(&rustls::version::TLS13),
            _ => None,
        })
        .collect();
    if out.is_empty() {
        return Err((
            "tls_server_config.cipher_suites",
            "leaves no cipher suite for the versions allowed (TLS 1.3's suites are always on; \
             name TLS 1.2 suites or allow TLS13)"
                .into(),
        ));
    }
    Ok(out)
}

/// The ring provider with the suites and curves the file names, in its order.
fn provider(t: &TlsServerConfig) -> Result<CryptoProvider, Refusal> {
    let mut provider = rustls::crypto::ring::default_provider();
    if !t.cipher_suites.is_empty() {
        // Go never lets TLS 1.3 suites be configured: all three stay on, first.
        let mut suites: Vec<SupportedCipherSuite> = vec![
            cipher_suite::TLS13_AES_128_GCM_SHA256,
            cipher_suite::TLS13_AES_256_GCM_SHA384,
            cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
        ];
        for named in t.cipher_suites.iter().filter(|s| !s.tls13) {
            let suite = match named.name {
                "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256" => {
                    cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
                }
                "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384" => {
                    cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
                }
                "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256" => {
                    cipher_suite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
                }
                "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384" => {
                    cipher_suite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384
                }
                "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256" => {
                    cipher_suite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
                }
                "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256" => {
                    cipher_suite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256
                }
                other => {
                    return Err((
                        "tls_server_config.cipher_suites",
                        format!("{other} has no rustls counterpart"),
                    ));
                }
            };
            if !suites.contains(&suite) {
                suites.push(suite);
            }
        }
        provider.cipher_suites = suites;
    }
    if !t.curve_preferences.is_empty() {
        let mut groups: Vec<&'static dyn rustls::crypto::SupportedKxGroup> = Vec::new();
        for curve in &t.curve_preferences {
            let group = match curve {
                Curve::X25519 => kx_group::X25519,
                Curve::P256 => kx_group::SECP256R1,
                Curve::P384 => kx_group::SECP384R1,
            };
            if !groups.iter().any(|g| g.name() == group.name()) {
                groups.push(group);
            }
        }
        provider.kx_groups = groups;
    }
    Ok(provider)
}

/// The client-certificate policy, with the CAs it verifies against.
fn client_verifier(
    t: &TlsServerConfig,
    dir: &Path,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, Refusal> {
    const KEY: &str = "tls_server_config.client_auth_type";
    let ca = match source(
        dir,
        t.client_ca_file.as_deref(),
        t.client_ca.as_deref(),
        "client_ca_file",
        "client_ca",
    ) {
        Ok(pem) => Some(pem),
        Err((_, message)) if message.starts_with("missing") => None,
        Err(refusal) => return Err(refusal),
    };
    let policy = t.client_auth_type;
    let roots = match &ca {
        None => None,
        Some(pem) => Some(Arc::new(roots(pem)?)),
    };
    match (policy, roots) {
        (ClientAuth::NoClientCert, None) => Ok(WebPkiClientVerifier::no_client_auth()),
        (ClientAuth::NoClientCert, Some(_)) => Err((
            KEY,
            "client CAs are configured without a client auth policy: set client_auth_type \
             to RequireAndVerifyClientCert (or VerifyClientCertIfGiven)"
                .into(),
        )),
        (ClientAuth::RequestClientCert | ClientAuth::RequireAnyClientCert, _) => Err((
            KEY,
            format!(
                "{policy:?} accepts client certificates without verifying them, which rustls \
                 does not do: use RequireAndVerifyClientCert (or VerifyClientCertIfGiven) with \
                 client_ca_file"
            ),
        )),
        (_, None) => Err((
            KEY,
            format!("{policy:?} needs the CAs to verify against: set client_ca_file or client_ca"),
        )),
        (policy, Some(roots)) => {
            let builder = WebPkiClientVerifier::builder_with_provider(roots, Arc::clone(provider));
            let builder = if policy == ClientAuth::VerifyClientCertIfGiven {
                builder.allow_unauthenticated()
            } else {
                builder
            };
            builder
                .build()
                .map_err(|e| (KEY, format!("cannot verify client certificates: {e}")))
        }
    }
}

/// Every certificate in the client-CA PEM as a trust anchor.
fn roots(pem: &Pem) -> Result<RootCertStore, Refusal> {
    let key = pem.key();
    let text = pem.read().map_err(|e| (key, e))?;
    let mut store = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&text) {
        let cert = cert.map_err(|e| (key, format!("{}: bad PEM: {e}", pem.described())))?;
        store.add(cert).map_err(|e| {
            (
                key,
                format!("{}: not a CA certificate: {e}", pem.described()),
            )
        })?;
    }
    if store.is_empty() {
        return Err((key, format!("{} holds no PEM certificate", pem.described())));
    }
    Ok(store)
}

/// Loads the certificate chain and its key; the message never quotes the key's text.
fn load_pair(cert: &Pem, key: &Pem, provider: &CryptoProvider) -> Result<CertifiedKey, Refusal> {
    let cert_text = cert.read().map_err(|e| (cert.key(), e))?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_text)
        .collect::<Result<_, _>>()
        .map_err(|e| (cert.key(), format!("{}: bad PEM: {e}", cert.described())))?;
    if chain.is_empty() {
        return Err((
            cert.key(),
            format!("{} holds no PEM certificate", cert.described()),
        ));
    }
    let key_text = key.read().map_err(|e| (key.key(), e))?;
    let key_der = PrivateKeyDer::from_pem_slice(&key_text).map_err(|_| {
        (
            key.key(),
            format!(
                "{} holds no PEM private key (PKCS#8, PKCS#1 or SEC1)",
                key.described()
            ),
        )
    })?;
    CertifiedKey::from_der(chain, key_der, provider).map_err(|e| {
        (
            key.key(),
            format!(
                "{} does not go with the certificate in {}: {e}",
                key.described(),
                cert.described()
            ),
        )
    })
}

/// How often a handshake may look at the files.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// Serves the certificate and key, re-read when their files change.
#[derive(Debug)]
pub(crate) struct RotatingCert {
    cert: Pem,
    key: Pem,
    provider: Arc<CryptoProvider>,
    state: Mutex<Served>,
}

type Stamps = (
    Option<(SystemTime, u64, u64)>,
    Option<(SystemTime, u64, u64)>,
);

#[derive(Debug)]
struct Served {
    current: Arc<CertifiedKey>,
    /// The stamps of the files `current` was read from.
    stamps: Stamps,
    checked: Instant,
    /// Stamps of a pair that failed to load and was logged.
    refused: Option<Stamps>,
}

impl RotatingCert {
    fn load(cert: Pem, key: Pem, provider: Arc<CryptoProvider>) -> Result<RotatingCert, Refusal> {
        let stamps = (cert.stamp(), key.stamp());
        let current = Arc::new(load_pair(&cert, &key, &provider)?);
        Ok(RotatingCert {
            cert,
            key,
            provider,
            state: Mutex::new(Served {
                current,
                stamps,
                checked: Instant::now(),
                refused: None,
            }),
        })
    }

    /// The certificate served now.
    fn leaf(&self) -> Leaf {
        let served = lock(&self.state);
        Leaf {
            der: served
                .current
                .cert
                .first()
                .map(|c| c.to_vec())
                .unwrap_or_default(),
            what: self.cert.described(),
        }
    }

    fn current(&self) -> Arc<CertifiedKey> {
        let mut served = lock(&self.state);
        if served.checked.elapsed() >= CHECK_EVERY {
            served.checked = Instant::now();
            let stamps = (self.cert.stamp(), self.key.stamp());
            if stamps != served.stamps {
                match load_pair(&self.cert, &self.key, &self.provider) {
                    Ok(pair) => {
                        tracing::info!("TLS certificate reloaded from {}", self.cert.described());
                        if let Some(leaf) = pair.cert.first() {
                            expiry::serving(leaf, &self.cert.described());
                        }
                        served.current = Arc::new(pair);
                        served.stamps = stamps;
                        served.refused = None;
                    }
                    Err((_, why)) => {
                        if served.refused != Some(stamps) {
                            tracing::warn!(
                                "TLS certificate changed on disk but does not load, still \
                                 serving the previous one: {why}"
                            );
                            served.refused = Some(stamps);
                        }
                    }
                }
            }
        }
        Arc::clone(&served.current)
    }
}

impl ResolvesServerCert for RotatingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}
