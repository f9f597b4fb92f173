//! A real VictoriaMetrics (Debian's `victoria-metrics`) for the fleet commands' tests, at its
//! default limits: started on a free port with a data directory of its own, history loaded
//! through its import API, killed when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Bytes of one import request at most.
const IMPORT_CHUNK: usize = 4 << 20;

pub struct Victoria {
    child: Child,
    pub base: String,
    http: ureq::Agent,
    dir: PathBuf,
}

impl Victoria {
    /// VictoriaMetrics with its default flags but for where it listens and keeps its data;
    /// answers once healthy.
    pub fn start(binary: &Path) -> Victoria {
        let port = super::free_port();
        let dir = std::env::temp_dir().join(format!(
            "gpu-sentinel-victoria-{}-{port}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("victoria dir");
        let log = std::fs::File::create(dir.join("victoria.log")).expect("victoria log");
        let child = Command::new(binary)
            .arg(format!("-storageDataPath={}", dir.join("data").display()))
            .arg(format!("-httpListenAddr=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("victoria-metrics starts");
        let http: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .into();
        let victoria = Victoria {
            child,
            base: format!("http://127.0.0.1:{port}"),
            http,
            dir,
        };
        let began = Instant::now();
        while began.elapsed() < Duration::from_secs(60) {
            let healthy = victoria
                .http
                .get(format!("{}/health", victoria.base))
                .call()
                .is_ok_and(|r| r.status() == 200);
            if healthy {
                return victoria;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!(
            "VictoriaMetrics was not healthy within 60s: {}",
            std::fs::read_to_string(victoria.dir.join("victoria.log")).unwrap_or_default()
        );
    }

    /// Loads a file `record --format openmetrics` wrote: its sample lines as the
    /// Prometheus text format has them (timestamps in milliseconds), through
    /// `/api/v1/import/prometheus`; then makes them visible to queries.
    pub fn import_openmetrics(&self, file: &Path) {
        let text = std::fs::read_to_string(file).expect("history file");
        let mut body = String::new();
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let (sample, stamp) = line.rsplit_once(' ').expect("a timestamp");
            let seconds: f64 = stamp.parse().expect("a timestamp in seconds");
            body.push_str(&format!("{sample} {}\n", (seconds * 1000.0).round() as i64));
            if body.len() > IMPORT_CHUNK {
                self.post("/api/v1/import/prometheus", &std::mem::take(&mut body));
            }
        }
        if !body.is_empty() {
            self.post("/api/v1/import/prometheus", &body);
        }
        self.flush();
    }

    /// Loads series in VictoriaMetrics's JSON lines (`/api/v1/import`: one
    /// `{"metric":{…},"values":[…],"timestamps":[…]}` a line).
    pub fn import_json_lines(&self, lines: &str) {
        self.post("/api/v1/import", lines);
        self.flush();
    }

    fn post(&self, path: &str, body: &str) {
        let response = self
            .http
            .post(format!("{}{path}", self.base))
            .send(body)
            .expect("victoria-metrics answers the import");
        assert!(
            response.status().is_success(),
            "{path} refused: {}",
            response.status()
        );
    }

    /// Imported samples become visible to queries once flushed.
    fn flush(&self) {
        let flushed = self
            .http
            .get(format!("{}/internal/force_flush", self.base))
            .call()
            .expect("victoria-metrics answers");
        assert!(flushed.status().is_success());
        // Searches cache the index for a moment; let it see the new series.
        std::thread::sleep(Duration::from_secs(2));
    }
}

impl Drop for Victoria {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
