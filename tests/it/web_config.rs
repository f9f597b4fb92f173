//! `--web.config.file` through the real binary: TLS, basic auth, client certificates and
//! certificate rotation, seen by a real Prometheus and by a rustls client; exporter-toolkit's
//! own example file accepted unchanged; bad files refused with key and line by `run` and
//! `check-config` alike. Certificates are made here with the openssl CLI.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::{Agent, Prometheus, tool};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// The password of every test user; its hash is made per test at a low cost.
const PASSWORD: &str = "s3cret-scrape-pass";

/// A folder with a CA, a server certificate for 127.0.0.1/localhost and a client
/// certificate, all made by openssl.
struct Certs {
    dir: PathBuf,
}

impl Certs {
    fn new(name: &str) -> Option<Certs> {
        let openssl = tool("openssl")?;
        let dir =
            std::env::temp_dir().join(format!("gpu-sentinel-web-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let certs = Certs { dir };
        certs.openssl(
            &openssl,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "2",
                "-subj",
                "/CN=gpu-sentinel test CA",
            ],
        );
        certs.issue(
            &openssl,
            "server",
            "/CN=localhost",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
        );
        certs.issue(
            &openssl,
            "client",
            "/CN=prometheus",
            "extendedKeyUsage=clientAuth",
        );
        Some(certs)
    }

    fn openssl(&self, openssl: &Path, args: &[&str]) {
        let out = Command::new(openssl)
            .args(args)
            .current_dir(&self.dir)
            .output()
            .expect("openssl runs");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `NAME.key` and `NAME.crt`, signed by the CA, valid for two days.
    fn issue(&self, openssl: &Path, name: &str, subject: &str, ext: &str) {
        self.issue_for(openssl, name, subject, ext, "2");
    }

    /// The same, ending `days` from now (negative: already expired).
    fn issue_for(&self, openssl: &Path, name: &str, subject: &str, ext: &str, days: &str) {
        let (key, csr, crt) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.crt"),
        );
        self.openssl(
            openssl,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                &key,
                "-out",
                &csr,
                "-subj",
                subject,
            ],
        );
        let ext_file = self.dir.join(format!("{name}.ext"));
        std::fs::write(&ext_file, format!("{ext}\n")).expect("ext file");
        self.openssl(
            openssl,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &crt,
                "-days",
                days,
                "-extfile",
                ext_file.to_str().expect("UTF-8 path"),
            ],
        );
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// A server certificate for 127.0.0.1/localhost ending `days` from now, written over
    /// `server.key` and `server.crt` (the key first, as a renewal does); its notAfter.
    fn serve_for(&self, openssl: &Path, days: &str) -> i64 {
        let name = format!("server-{days}d");
        self.issue_for(
            openssl,
            &name,
            "/CN=localhost",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            days,
        );
        std::fs::write(self.path("server.key"), self.read(&format!("{name}.key")))
            .expect("server.key");
        std::fs::write(self.path("server.crt"), self.read(&format!("{name}.crt")))
            .expect("server.crt");
        not_after(openssl, &self.path("server.crt"))
    }

    fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).expect("cert file")
    }

    /// Writes the web configuration next to the certificates (so relative names resolve
    /// against its folder) and returns its path.
    fn web_config(&self, text: &str) -> PathBuf {
        let path = self.path("web.yml");
        std::fs::write(&path, text).expect("web config");
        path
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn users(hash: &str) -> String {
    format!("basic_auth_users:\n  prometheus: {hash}\n")
}

fn hash() -> String {
    bcrypt::hash(PASSWORD, 5).expect("bcrypt hashes")
}

/// What one HTTPS request got.
struct Answer {
    status: u16,
    head: String,
    body: String,
    /// The certificate the server presented.
    server_cert: Vec<u8>,
}

/// GET over TLS (HTTP/1.1) trusting `ca`, presenting `client` when given.
fn get(
    port: u16,
    path: &str,
    ca: &[u8],
    client: Option<(&[u8], &[u8])>,
    basic: Option<(&str, &str)>,
) -> Result<Answer, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca) {
        roots
            .add(cert.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let config = match client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(cert)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())?;
            let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| e.to_string())?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| e.to_string())?
        }
    };
    let name = ServerName::try_from("localhost").map_err(|e| e.to_string())?;
    let conn = rustls::ClientConnection::new(Arc::new(config), name).map_err(|e| e.to_string())?;
    let tcp = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    if let Some((user, password)) = basic {
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        request.push_str(&format!("Authorization: Basic {token}\r\n"));
    }
    request.push_str("\r\n");
    tls.write_all(request.as_bytes())
        .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    match tls.read_to_end(&mut raw) {
        Ok(_) => {}
        // Some servers close without close_notify after a complete answer.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
        Err(e) => return Err(e.to_string()),
    }
    let server_cert = tls
        .conn
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec())
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no HTTP status in {head:?}"))?;
    Ok(Answer {
        status,
        head: head.to_string(),
        body: body.to_string(),
        server_cert,
    })
}

/// The DER of the first certificate in a PEM file.
fn der(pem: &[u8]) -> Vec<u8> {
    CertificateDer::pem_slice_iter(pem)
        .next()
        .expect("a certificate")
        .expect("PEM")
        .to_vec()
}

/// Waits until `/readyz` answers 200 over TLS.
fn wait_ready(agent: &Agent, ca: &[u8]) {
    let began = Instant::now();
    while began.elapsed() < Duration::from_secs(30) {
        if get(agent.port(), "/readyz", ca, None, None).is_ok_and(|a| a.status == 200) {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("the agent did not become ready over TLS within 30s");
}

/// `run --simulate` serving TLS with the certificate in `certs` (no client certificates,
/// no users), once it is ready; the agent and the CA to reach it with.
fn serve_tls(certs: &Certs) -> (Agent, Vec<u8>) {
    let web =
        certs.web_config("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n");
    let agent = Agent::spawn(
        &["--simulate", "--web.config.file", web.to_str().unwrap()],
        &[],
    );
    let ca = certs.read("ca.crt");
    wait_ready(&agent, &ca);
    (agent, ca)
}

#[test]
fn prometheus_scrapes_over_tls_with_basic_auth_and_a_wrong_password_gets_401() {
    let (Some(certs), Some(prometheus)) = (Certs::new("scrape"), tool("prometheus")) else {
        return;
    };
    let hash = hash();
    let web = certs.web_config(&format!(
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n{}",
        users(&hash)
    ));
    let agent = Agent::spawn(
        &[
            "--simulate",
            "--sim-gpus",
            "2",
            "--web.config.file",
            web.to_str().unwrap(),
        ],
        &[],
    );
    let ca = certs.read("ca.crt");
    wait_ready(&agent, &ca);
    let port = agent.port();

    // Probes are open; everything else wants the password.
    assert_eq!(get(port, "/healthz", &ca, None, None).unwrap().status, 200);
    for path in [
        "/metrics",
        "/",
        "/api/v1/gpus",
        "/api/v1/alerts",
        "/api/v1/recommendations",
    ] {
        let answer = get(port, path, &ca, None, None).unwrap();
        assert_eq!(answer.status, 401, "{path}");
        assert!(
            answer
                .head
                .to_ascii_lowercase()
                .contains("www-authenticate: basic"),
            "{}",
            answer.head
        );
        let wrong = get(port, path, &ca, None, Some(("prometheus", "wrong"))).unwrap();
        assert_eq!(wrong.status, 401, "{path}");
        let unknown = get(port, path, &ca, None, Some(("nobody", PASSWORD))).unwrap();
        assert_eq!(unknown.status, 401, "{path}");
        let right = get(port, path, &ca, None, Some(("prometheus", PASSWORD))).unwrap();
        assert_eq!(right.status, 200, "{path}");
    }

    let ca_file = certs.path("ca.crt");
    let job = |name: &str, password: &str| {
        format!(
            "  - job_name: {name}\n    scheme: https\n    tls_config:\n      ca_file: {}\n      \
             server_name: localhost\n    basic_auth:\n      username: prometheus\n      \
             password: {password}\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n",
            ca_file.display()
        )
    };
    let prom = Prometheus::with_scrape_configs(
        &prometheus,
        &(job("gpu", PASSWORD) + &job("wrong", "not-the-password")),
    );
    let began = Instant::now();
    let (mut good, mut bad) = (Vec::new(), Vec::new());
    while began.elapsed() < Duration::from_secs(60) {
        good = prom.query("up{job=\"gpu\"} == 1");
        bad = prom.query("up{job=\"wrong\"} == 0");
        if !good.is_empty() && !bad.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_eq!(
        good.len(),
        1,
        "Prometheus did not scrape over TLS with basic auth"
    );
    assert_eq!(bad.len(), 1, "a wrong password must make the target down");
    // Prometheus says why: the agent answered 401.
    let targets = prom.targets();
    let wrong = targets
        .iter()
        .find(|t| t["labels"]["job"] == "wrong")
        .expect("the wrong-password target");
    let error = wrong["lastError"].as_str().unwrap_or_default();
    assert!(error.contains("401"), "{error}");
    let temps = prom.query("gpu_temperature_celsius{job=\"gpu\"}");
    assert_eq!(temps.len(), 2, "GPU data arrives: {temps:?}");
    assert!(
        prom.query("gpu_temperature_celsius{job=\"wrong\"}")
            .is_empty()
    );

    // Neither the password nor its hash reaches the log.
    let (_, stderr) = agent.stop();
    assert!(
        !stderr.contains(PASSWORD) && !stderr.contains(&hash),
        "{stderr}"
    );
}

#[test]
fn required_client_certificates_refuse_a_client_without_one() {
    let Some(certs) = Certs::new("mtls") else {
        return;
    };
    let web = certs.web_config(
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  \
         client_ca_file: ca.crt\n  client_auth_type: RequireAndVerifyClientCert\n",
    );
    let agent = Agent::spawn(
        &["--simulate", "--web.config.file", web.to_str().unwrap()],
        &[],
    );
    let ca = certs.read("ca.crt");
    let (cert, key) = (certs.read("client.crt"), certs.read("client.key"));
    let began = Instant::now();
    while get(agent.port(), "/readyz", &ca, Some((&cert, &key)), None)
        .map_or(true, |a| a.status != 200)
    {
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "not ready over mTLS"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let with = get(agent.port(), "/metrics", &ca, Some((&cert, &key)), None).unwrap();
    assert_eq!(with.status, 200);
    assert!(with.body.contains("gpu_temperature_celsius"));
    // Without a certificate the handshake fails: no HTTP answer at all, not even for probes.
    for path in ["/metrics", "/healthz"] {
        let without = get(agent.port(), path, &ca, None, None);
        assert!(
            without.is_err(),
            "{path}: got HTTP {:?}",
            without.map(|a| a.status)
        );
    }
    // A self-signed certificate, from no CA the server trusts, is refused too.
    let openssl = tool("openssl").expect("checked above");
    certs.openssl(
        &openssl,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "rogue.key",
            "-out",
            "rogue.crt",
            "-days",
            "1",
            "-subj",
            "/CN=rogue",
        ],
    );
    let rogue = get(
        agent.port(),
        "/metrics",
        &ca,
        Some((&certs.read("rogue.crt"), &certs.read("rogue.key"))),
        None,
    );
    assert!(
        rogue.is_err(),
        "a certificate of another CA got HTTP {:?}",
        rogue.map(|a| a.status)
    );
}

#[test]
fn a_certificate_rewritten_on_disk_is_served_to_the_next_connection() {
    let (Some(certs), Some(openssl)) = (Certs::new("rotate"), tool("openssl")) else {
        return;
    };
    let (mut agent, ca) = serve_tls(&certs);
    let first = der(&certs.read("server.crt"));
    assert_eq!(
        get(agent.port(), "/healthz", &ca, None, None)
            .unwrap()
            .server_cert,
        first
    );

    // A renewal: a new key and certificate, written over the old files.
    certs.issue(
        &openssl,
        "renewed",
        "/CN=localhost",
        "subjectAltName=DNS:localhost,IP:127.0.0.1",
    );
    std::fs::write(certs.path("server.key"), certs.read("renewed.key")).unwrap();
    std::fs::write(certs.path("server.crt"), certs.read("renewed.crt")).unwrap();
    let renewed = der(&certs.read("renewed.crt"));
    assert_ne!(first, renewed);
    let began = Instant::now();
    loop {
        let served = get(agent.port(), "/healthz", &ca, None, None)
            .unwrap()
            .server_cert;
        if served == renewed {
            break;
        }
        assert_eq!(served, first, "neither the old nor the new certificate");
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "the renewed certificate was not served"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // A broken write keeps the renewed pair in service, and is logged once.
    std::fs::write(
        certs.path("server.crt"),
        b"-----BEGIN CERTIFICATE-----\nnot base64\n",
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    for _ in 0..4 {
        assert_eq!(
            get(agent.port(), "/healthz", &ca, None, None)
                .unwrap()
                .server_cert,
            renewed
        );
        std::thread::sleep(Duration::from_millis(400));
    }
    assert!(
        agent.child.try_wait().unwrap().is_none(),
        "the agent keeps running"
    );
    let (_, stderr) = agent.stop();
    // The broken file is logged once, however many handshakes saw it. (A handshake that
    // fell between the renewal's two writes may have logged the half-renewed pair too.)
    let refusals: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("does not load"))
        .collect();
    let broken = refusals
        .iter()
        .filter(|l| l.contains("PEM certificate") || l.contains("bad PEM"))
        .count();
    assert_eq!(broken, 1, "{stderr}");
    assert!(refusals.len() <= 2, "{stderr}");
    assert!(!stderr.contains("BEGIN"), "{stderr}");
}

#[test]
fn exporter_toolkits_documented_example_is_accepted_unchanged() {
    let Some(certs) = Certs::new("example") else {
        return;
    };
    let fixture = common::repo().join("tests/fixtures/webconfig/web-config.yml");
    let web = certs.path("web-config.yml");
    std::fs::copy(&fixture, &web).expect("fixture copied next to its server.crt and server.key");
    let config = common::temp_file(
        "example.toml",
        &format!("[export]\nweb_config = {:?}\n", web.display().to_string()),
    );
    let out = common::run(&["check-config", config.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let headers = common::repo().join("tests/fixtures/webconfig/headers.yml");
    let out = common::run(&[
        "check-config",
        config.to_str().unwrap(),
        "--web.config.file",
        headers.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Served as written: TLS, its users (whose passwords the example does not tell), and
    // its rate limit of a burst of 20, then one a second.
    let agent = Agent::spawn(&["--simulate", "--config", config.to_str().unwrap()], &[]);
    let ca = certs.read("ca.crt");
    wait_ready(&agent, &ca);
    let statuses: Vec<u16> = (0..30)
        .map(|_| {
            get(
                agent.port(),
                "/metrics",
                &ca,
                None,
                Some(("alice", "guess")),
            )
            .unwrap()
            .status
        })
        .collect();
    assert!(
        statuses.iter().all(|s| *s == 401 || *s == 429),
        "{statuses:?}"
    );
    assert!(
        statuses.contains(&429),
        "the rate limit holds: {statuses:?}"
    );
    assert!(
        statuses.iter().filter(|s| **s == 401).count() <= 21,
        "{statuses:?}"
    );
}

#[test]
fn an_unknown_key_and_a_bad_hash_are_refused_with_key_and_line_by_run_and_check_config() {
    let Some(certs) = Certs::new("refused") else {
        return;
    };
    let cases = [
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_auth: RequireAndVerifyClientCert\n".to_string(),
            ":4: tls_server_config: unknown field `client_auth`",
        ),
        (
            format!("basic_auth_users:\n  alice: {}\n  bob: $2y$10$abc\n", hash()),
            ":3: basic_auth_users.bob: is not a bcrypt hash",
        ),
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: ca.key\n".to_string(),
            ":3: tls_server_config.key_file:",
        ),
    ];
    for (text, expected) in cases {
        let web = certs.web_config(&text);
        let web_arg = web.to_str().unwrap();
        let config = common::temp_file(
            "refused.toml",
            &format!("[export]\nweb_config = {web_arg:?}\n"),
        );
        let out = common::run(&["check-config", config.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{text}");
        assert!(stderr.contains(":2: export.web_config:"), "{stderr}");
        assert!(stderr.contains(&format!("{web_arg}{expected}")), "{stderr}");

        let out = common::run(&[
            "run",
            "--simulate",
            "--listen",
            "127.0.0.1:0",
            "--web.config.file",
            web_arg,
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{text}");
        assert!(
            stderr.contains(&format!("--web.config.file: {web_arg}{expected}")),
            "{stderr}"
        );
        // Neither the refused hash nor the good one is repeated.
        assert!(
            !stderr.contains("$2y$10$abc") && !stderr.contains("$2b$05$"),
            "{stderr}"
        );
    }
}

/// `curl --http2` over TLS: the HTTP version spoken, the status and the response head.
fn curl_http2(curl: &Path, certs: &Certs, port: u16, path: &str) -> (String, String) {
    let out = Command::new(curl)
        .args([
            "-s",
            "--http2",
            "--max-time",
            "10",
            "-D",
            "-",
            "-o",
            "/dev/null",
        ])
        .args(["-w", "%{http_version} %{http_code}"])
        .arg("--cacert")
        .arg(certs.path("ca.crt"))
        .args(["-u", &format!("prometheus:{PASSWORD}")])
        .args(["--resolve", &format!("localhost:{port}:127.0.0.1")])
        .arg(format!("https://localhost:{port}{path}"))
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (head, last) = text.rsplit_once('\n').unwrap_or(("", &text));
    (last.to_string(), head.to_ascii_lowercase())
}

#[test]
fn http2_is_negotiated_unless_turned_off_and_configured_headers_are_sent() {
    let (Some(certs), Some(curl)) = (Certs::new("h2"), tool("curl")) else {
        return;
    };
    for (http2, expected) in [(true, "2 200"), (false, "1.1 200")] {
        let web = certs.web_config(&format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n\
             http_server_config:\n  http2: {http2}\n  headers:\n    X-Frame-Options: deny\n    \
             X-Content-Type-Options: nosniff\n{}",
            users(&hash())
        ));
        let agent = Agent::spawn(
            &["--simulate", "--web.config.file", web.to_str().unwrap()],
            &[],
        );
        wait_ready(&agent, &certs.read("ca.crt"));
        let (version, head) = curl_http2(&curl, &certs, agent.port(), "/metrics");
        assert_eq!(version, expected, "http2: {http2}\n{head}");
        assert!(head.contains("x-frame-options: deny"), "{head}");
        assert!(head.contains("x-content-type-options: nosniff"), "{head}");
        // Refusals carry them too.
        let refused = get(agent.port(), "/metrics", &certs.read("ca.crt"), None, None).unwrap();
        assert_eq!(refused.status, 401);
        assert!(
            refused
                .head
                .to_ascii_lowercase()
                .contains("x-frame-options: deny")
        );
    }
}

#[test]
fn head_without_credentials_over_http2_is_answered_401() {
    let (Some(certs), Some(curl)) = (Certs::new("h2-head"), tool("curl")) else {
        return;
    };
    let web = certs.web_config(&format!(
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n{}",
        users(&hash())
    ));
    let agent = Agent::spawn(
        &["--simulate", "--web.config.file", web.to_str().unwrap()],
        &[],
    );
    wait_ready(&agent, &certs.read("ca.crt"));
    let port = agent.port();
    let head = |credentials: Option<&str>| {
        let mut cmd = Command::new(&curl);
        cmd.args(["-s", "--http2", "-I", "--max-time", "10", "-o", "/dev/null"])
            .args(["-w", "%{http_version} %{http_code}"])
            .arg("--cacert")
            .arg(certs.path("ca.crt"))
            .args(["--resolve", &format!("localhost:{port}:127.0.0.1")]);
        if let Some(c) = credentials {
            cmd.args(["-u", c]);
        }
        let out = cmd
            .arg(format!("https://localhost:{port}/metrics"))
            .output()
            .expect("curl runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    // curl exits 92 (HTTP/2 stream error) when the answer breaks the protocol.
    assert_eq!(head(None), (Some(0), "2 401".to_string()));
    assert_eq!(
        head(Some(&format!("prometheus:{PASSWORD}"))),
        (Some(0), "2 200".to_string())
    );
    assert_eq!(
        head(Some("prometheus:wrong")),
        (Some(0), "2 401".to_string())
    );
}

/// `gpu-sentinel ARGS` to its end, or killed after `limit` (None as status then).
fn run_within(args: &[&str], limit: Duration) -> (Option<std::process::ExitStatus>, String) {
    let mut child = Command::new(common::binary())
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let began = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if began.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut stderr);
    }
    (status, stderr)
}

#[test]
fn bcrypt_costs_above_14_are_refused_by_check_config_and_run_naming_the_user() {
    let Some(certs) = Certs::new("cost") else {
        return;
    };
    for cost in ["15", "31"] {
        // A real cost-5 hash with its cost rewritten: making one at 31 would take a day.
        let steep = hash().replacen("$05$", &format!("${cost}$"), 1);
        let web = certs.web_config(&format!(
            "basic_auth_users:\n  prometheus: {}\n  ops-admin: {steep}\n",
            hash()
        ));
        let web_arg = web.to_str().unwrap();
        let expected = format!(
            "{web_arg}:3: basic_auth_users.ops-admin: has bcrypt cost {cost}, above the 14 accepted"
        );
        let config = common::temp_file(
            "cost.toml",
            &format!("[export]\nweb_config = {web_arg:?}\n"),
        );
        let out = common::run(&["check-config", config.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "cost {cost} passed check-config");
        assert!(stderr.contains(&expected), "{stderr}");
        assert!(stderr.contains("of a core"), "{stderr}");

        // Before, run spent the cost's hours making its dummy hash, serving nothing.
        let (status, stderr) = run_within(
            &[
                "run",
                "--simulate",
                "--listen",
                "127.0.0.1:0",
                "--web.config.file",
                web_arg,
            ],
            Duration::from_secs(20),
        );
        assert!(
            status.is_some_and(|s| !s.success()),
            "run with cost {cost}: {status:?}\n{stderr}"
        );
        assert!(
            stderr.contains(&format!("--web.config.file: {expected}")),
            "{stderr}"
        );
        assert!(!stderr.contains(&steep[7..]), "{stderr}");
    }
}

#[test]
fn a_certificate_near_its_end_is_warned_of_and_its_expiry_exported() {
    let (Some(certs), Some(openssl)) = (Certs::new("expiry"), tool("openssl")) else {
        return;
    };
    // The test certificates are valid for two days: well within the 14 days warned of.
    let (agent, ca) = serve_tls(&certs);
    let not_after = not_after(&openssl, &certs.path("server.crt"));
    assert_eq!(exported_expiry(agent.port(), &ca), Some(not_after as f64));
    let (_, stderr) = agent.stop();
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("the server certificate expires at"))
        .collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(warnings[0].contains("server.crt"), "{stderr}");
    assert!(warnings[0].contains("renew it"), "{stderr}");
}

/// A certificate's notAfter, Unix seconds, as openssl reads it.
fn not_after(openssl: &Path, crt: &Path) -> i64 {
    let out = Command::new(openssl)
        .args(["x509", "-noout", "-enddate", "-dateopt", "iso_8601", "-in"])
        .arg(crt)
        .output()
        .expect("openssl runs");
    let end = String::from_utf8_lossy(&out.stdout);
    let end = end.trim().trim_start_matches("notAfter=");
    chrono::NaiveDateTime::parse_from_str(end, "%Y-%m-%d %H:%M:%SZ")
        .unwrap_or_else(|e| panic!("{end:?}: {e}"))
        .and_utc()
        .timestamp()
}

/// `gpu_sentinel_tls_cert_expiry_timestamp_seconds` as the agent on `port` serves it.
fn exported_expiry(port: u16, ca: &[u8]) -> Option<f64> {
    let metrics = get(port, "/metrics", ca, None, None).unwrap().body;
    common::value(
        &metrics,
        "gpu_sentinel_tls_cert_expiry_timestamp_seconds",
        "",
    )
}

#[test]
fn a_certificate_renewed_to_one_near_its_end_is_warned_of_and_its_expiry_exported() {
    let (Some(certs), Some(openssl)) = (Certs::new("rotate-expiry"), tool("openssl")) else {
        return;
    };
    // Served first: a certificate good for a year, not warned of.
    let long = certs.serve_for(&openssl, "365");
    let (agent, ca) = serve_tls(&certs);
    assert_eq!(exported_expiry(agent.port(), &ca), Some(long as f64));

    // Renewed on disk to one that ends in two days: served, exported and warned of.
    let short = certs.serve_for(&openssl, "2");
    let renewed = der(&certs.read("server.crt"));
    let began = Instant::now();
    while get(agent.port(), "/healthz", &ca, None, None)
        .unwrap()
        .server_cert
        != renewed
    {
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "the renewed certificate was not served"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // The exposition is rendered once a collection: the gauge follows at the next one.
    let began = Instant::now();
    loop {
        let exported = exported_expiry(agent.port(), &ca);
        if exported == Some(short as f64) {
            break;
        }
        assert_eq!(exported, Some(long as f64), "neither expiry");
        assert!(
            began.elapsed() < Duration::from_secs(40),
            "the renewed certificate's expiry was not exported"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let (_, stderr) = agent.stop();
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("the server certificate expires at"))
        .collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].contains("server.crt") && warnings[0].contains("renew it"),
        "{stderr}"
    );
}

#[test]
fn check_config_warns_of_a_certificate_expired_or_near_its_end() {
    let (Some(certs), Some(openssl)) = (Certs::new("check-expiry"), tool("openssl")) else {
        return;
    };
    let web =
        certs.web_config("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n");
    let web_arg = web.to_str().unwrap();
    let empty = common::temp_file("check-expiry-empty.toml", "");
    let naming = common::temp_file(
        "check-expiry-naming.toml",
        &format!("[export]\nweb_config = {web_arg:?}\n"),
    );
    // The web configuration given by flag, and named in the configuration file.
    let checks = [
        vec![
            "check-config",
            empty.to_str().unwrap(),
            "--web.config.file",
            web_arg,
        ],
        vec!["check-config", naming.to_str().unwrap()],
    ];
    for (days, warned) in [
        ("2", Some("the server certificate expires at")),
        ("-1", Some("the server certificate expired at")),
        ("365", None),
    ] {
        certs.serve_for(&openssl, days);
        for args in &checks {
            let out = common::run(args);
            let (stdout, stderr) = (
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
            );
            // A warning, not a refusal: run serves the certificate (and warns too).
            assert!(out.status.success(), "{days} days, {args:?}:\n{stderr}");
            match warned {
                Some(warning) => {
                    assert!(
                        stderr.contains("warning: ")
                            && stderr.contains(warning)
                            && stderr.contains("server.crt"),
                        "{days} days, {args:?}:\n{stderr}"
                    );
                    assert!(
                        stdout.contains(": ok, with a warning about the server certificate"),
                        "{days} days, {args:?}:\n{stdout}"
                    );
                }
                None => {
                    assert!(
                        !stderr.contains("certificate"),
                        "{days} days, {args:?}:\n{stderr}"
                    );
                    assert!(stdout.trim_end().ends_with(": ok"), "{stdout}");
                }
            }
        }
    }
}

/// Flood `port` with wrong passwords from `source` on `connections` concurrent
/// connections (one tokio task, as a scanner would), until `stop`; returns the statuses.
fn flood(
    port: u16,
    source: std::net::Ipv4Addr,
    connections: usize,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<Vec<u16>> {
    use std::sync::atomic::Ordering;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async move {
            let mut tasks = Vec::new();
            for c in 0..connections {
                let stop = Arc::clone(&stop);
                tasks.push(tokio::spawn(async move {
                    let mut statuses: Vec<u16> = Vec::new();
                    let mut guess = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        guess += 1;
                        let Ok(socket) = tokio::net::TcpSocket::new_v4() else {
                            break;
                        };
                        if socket.bind((source, 0).into()).is_err() {
                            break;
                        }
                        let Ok(mut tcp) = socket.connect(([127, 0, 0, 1], port).into()).await
                        else {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        };
                        let token = base64::engine::general_purpose::STANDARD
                            .encode(format!("prometheus:guess-{c}-{guess}"));
                        let request = format!(
                            "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
                             Authorization: Basic {token}\r\n\r\n"
                        );
                        let mut answer = Vec::new();
                        if tcp.write_all(request.as_bytes()).await.is_ok()
                            && tcp.read_to_end(&mut answer).await.is_ok()
                        {
                            let text = String::from_utf8_lossy(&answer);
                            if let Some(status) =
                                text.split(' ').nth(1).and_then(|s| s.parse().ok())
                            {
                                statuses.push(status);
                            }
                        }
                        // A breath between guesses keeps the flood from starving the
                        // test machine itself; each connection still guesses ~100/s.
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    statuses
                }));
            }
            let mut all = Vec::new();
            for task in tasks {
                all.extend(task.await.unwrap_or_default());
            }
            all
        })
    })
}

/// One scrape on a fresh connection from 127.0.0.1: status and how long it took.
fn timed_scrape(port: u16, password: &str) -> (u16, Duration) {
    let began = Instant::now();
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).expect("connects");
    tcp.set_read_timeout(Some(Duration::from_secs(15))).ok();
    let token = base64::engine::general_purpose::STANDARD.encode(format!("prometheus:{password}"));
    let request = format!(
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Basic {token}\r\n\r\n"
    );
    tcp.write_all(request.as_bytes()).expect("sends");
    let mut answer = Vec::new();
    let _ = tcp.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, began.elapsed())
}

#[test]
fn a_wrong_password_flood_from_one_address_never_slows_a_right_scrape_from_another() {
    // Cost 9: a wrong guess costs the server ~25 ms of a core, as at exporter-toolkit's 10.
    let hash = bcrypt::hash(PASSWORD, 9).expect("bcrypt hashes");
    for rate_limit in ["", "rate_limit:\n  interval: 1s\n  burst: 5\n"] {
        let web = common::temp_file("flood-web.yml", &format!("{}{rate_limit}", users(&hash)));
        let agent = Agent::start(
            &["--simulate", "--web.config.file", web.to_str().unwrap()],
            &[],
        );
        agent.wait_until(Duration::from_secs(20), |a| {
            a.request("/readyz", &[]).is_some_and(|r| r.status == 200)
        });
        let port = agent.port();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flooding = flood(port, [127, 0, 0, 2].into(), 64, Arc::clone(&stop));
        std::thread::sleep(Duration::from_millis(1500));
        // A Prometheus-like scraper: a fresh connection each time, the first unverified.
        let mut tries = Vec::new();
        for _ in 0..30 {
            tries.push(timed_scrape(port, PASSWORD));
            std::thread::sleep(Duration::from_millis(100));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let statuses = flooding.join().expect("the flood ends");
        let refused = statuses.iter().filter(|s| **s != 200).count();
        assert!(
            !statuses.is_empty() && refused == statuses.len(),
            "the flood got in: {statuses:?}"
        );
        let mut times: Vec<Duration> = tries.iter().map(|(_, t)| *t).collect();
        times.sort();
        let p99 = times[times.len() * 99 / 100];
        assert!(
            tries.iter().all(|(status, _)| *status == 200),
            "rate limit {rate_limit:?}: {tries:?}"
        );
        assert!(
            p99 < Duration::from_secs(1),
            "rate limit {rate_limit:?}: p99 {p99:?} of {tries:?}"
        );
        eprintln!(
            "rate limit {rate_limit:?}: scraper p50 {:?} p99 {p99:?}; flood: {} answers, {} of them 429",
            times[times.len() / 2],
            statuses.len(),
            statuses.iter().filter(|s| **s == 429).count()
        );
    }
}
