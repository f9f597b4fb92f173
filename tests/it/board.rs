//! The live board at `/` through the real binary: every GPU's tile with `data-uuid` and
//! `data-risk` as the API reports them, the most at-risk GPU first in the ranking, the
//! holders, a hostile process name shown as text, the Content-Security-Policy; the page of
//! a fixed simulator run byte for byte (`tests/golden/board.html`); and the page in
//! headless Chromium, refreshed by its own script, with a screenshot.
//!
//! Regenerate the golden page after an intended change with
//! `UPDATE_GOLDEN=1 cargo test --test it board::`, and review the diff.
//! `GPU_SENTINEL_REQUIRE_TOOLS=1` turns a missing `chromium` from a skip into a failure
//! (`scripts/test.sh` sets it and installs Chromium).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use chrono::{DateTime, Utc};
use common::{Agent, temp_file};
use gpu_sentinel::alert::alerting::Alerting;
use gpu_sentinel::api::Documents;
use gpu_sentinel::board::{self, Board, BoardOptions, Today};
use gpu_sentinel::config::{Config, SimulationConfig};
use gpu_sentinel::engine::{Engine, EngineConfig};
use gpu_sentinel::source::simulate::Fleet;

/// Ten simulated hours of the default fleet in about ten seconds: every default fault
/// (worn memory, PCIe replays, thermal slowdown, a GPU off the bus, idle and ghost jobs)
/// has shown by then.
fn simulated_node() -> Agent {
    let config = temp_file(
        "board-sim.toml",
        "[collect]\ninterval = \"200ms\"\nkmsg = \"off\"\n",
    );
    Agent::start(
        &[
            "--simulate",
            "--sim-speed",
            "3600",
            "--config",
            config.to_str().expect("UTF-8 temp path"),
        ],
        &[],
    )
}

/// The values of `attribute` on the elements whose opening tag starts with `tag`.
fn attributes(page: &str, tag: &str, attribute: &str) -> Vec<String> {
    page.split(tag)
        .skip(1)
        .filter_map(|rest| {
            let open = &rest[..rest.find('>')?];
            let at = open.find(&format!("{attribute}=\""))? + attribute.len() + 2;
            Some(open[at..at + open[at..].find('"')?].to_string())
        })
        .collect()
}

/// The page and the `/api/v1/gpus` document of one and the same publication (the agent
/// publishes every 200 ms: fetch both until their times agree).
fn page_and_gpus(agent: &Agent) -> (String, serde_json::Value) {
    for _ in 0..50 {
        let page = agent.get("/").text();
        let gpus: serde_json::Value =
            serde_json::from_slice(&agent.get("/api/v1/gpus").body).expect("JSON");
        let at = attributes(&page, "<main", "data-at");
        let same = at
            .first()
            .and_then(|a| DateTime::parse_from_rfc3339(a).ok())
            == gpus["at"]
                .as_str()
                .and_then(|a| DateTime::parse_from_rfc3339(a).ok());
        if same {
            return (page, gpus);
        }
    }
    panic!("the page and /api/v1/gpus never came from one publication");
}

#[test]
fn the_board_shows_every_gpu_the_ranking_and_the_holders_of_a_simulated_node() {
    let agent = simulated_node();
    agent.metrics();
    // Ten simulated hours: the worn GPU is at risk, a ghost holds memory, a GPU is lost.
    agent.wait_until(Duration::from_secs(60), |a| {
        let page = a.get("/").text();
        let states = attributes(&page, "<article class=\"tile\"", "data-state").join(" ");
        ["at-risk", "ghost", "idle-allocated", "lost"]
            .iter()
            .all(|state| states.split(' ').any(|s| s == *state))
    });
    let (page, doc) = page_and_gpus(&agent);
    let gpus = doc["gpus"].as_array().expect("gpus");
    assert_eq!(gpus.len(), 8);

    let tile = "<article class=\"tile\"";
    let uuids = attributes(&page, tile, "data-uuid");
    let risks = attributes(&page, tile, "data-risk");
    assert_eq!(uuids.len(), 8, "one tile per GPU");
    for gpu in gpus {
        let uuid = gpu["uuid"].as_str().expect("uuid");
        let at = uuids.iter().position(|u| u == uuid).expect("a tile");
        let score = gpu["risk"]["score"].as_f64().expect("a score");
        assert_eq!(risks[at], format!("{score:.3}"), "{uuid}");
        for process in gpu["processes"].as_array().expect("processes") {
            let pid = process["pid"].as_u64().expect("pid");
            assert!(page.contains(&format!(" pid {pid}")), "holder {pid} shown");
            if let Some(user) = process["user"].as_str() {
                assert!(
                    page.contains(&format!("<b>{user}</b>")),
                    "user {user} shown"
                );
            }
            if let (Some(ns), Some(pod)) = (process["namespace"].as_str(), process["pod"].as_str())
            {
                assert!(
                    page.contains(&format!("{ns}/{pod}")),
                    "pod {ns}/{pod} shown"
                );
            }
        }
    }

    // The most at-risk GPU heads the ranking, with its top reason.
    let top = gpus
        .iter()
        .max_by(|a, b| {
            let score = |g: &serde_json::Value| g["risk"]["score"].as_f64().unwrap_or(0.0);
            score(a).total_cmp(&score(b))
        })
        .expect("GPUs");
    let ranking = &page[page.find("<section class=\"ranking\"").expect("a ranking")..];
    let rows = attributes(ranking, "<tr data-uuid", "data-risk");
    assert_eq!(rows.len(), 8);
    let first = attributes(ranking, "<tr ", "data-uuid");
    assert_eq!(first[0], top["uuid"].as_str().expect("uuid"));
    let reason = top["risk"]["contributions"][0]["feature"]
        .as_str()
        .expect("a reason");
    assert!(ranking.contains(reason), "{reason}");

    // The states the simulator's faults give.
    let states = attributes(&page, tile, "data-state").join(" ");
    for state in ["at-risk", "ghost", "idle-allocated", "lost"] {
        assert!(states.split(' ').any(|s| s == state), "{state} in {states}");
    }
    assert!(page.contains("<section class=\"alerts\""));
    assert!(page.contains("<td>firing</td>"), "an alert firing");
}

#[test]
fn the_board_is_served_with_a_policy_that_keeps_every_request_on_the_host() {
    let agent = simulated_node();
    agent.metrics();
    let http: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let resp = http
        .get(format!("{}/", agent.base))
        .call()
        .expect("the board answers");
    assert_eq!(resp.status().as_u16(), 200);
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    assert_eq!(header("content-type"), "text/html; charset=utf-8");
    let policy = header("content-security-policy");
    assert!(policy.starts_with("default-src 'none';"), "{policy}");
    assert!(policy.contains("connect-src 'self'"), "{policy}");
    assert!(!policy.contains("unsafe"), "{policy}");
    let page = agent.get("/").text();
    for external in ["http:", "https:", "src=", "url(", "@import", "//"] {
        assert!(!page.contains(external), "{external} in the page");
    }
}

/// A process whose name is markup: a shell renames itself through /proc and waits.
struct Hostile(Child);

impl Drop for Hostile {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_hostile_process_name_is_shown_as_text() {
    // 11 bytes: /proc/PID/comm keeps 15.
    let name = "<b>\"'&x</b>";
    let child = Command::new("sh")
        .args([
            "-c",
            &format!(
                "printf '%s' '{}' > /proc/self/comm; sleep 120; exit 0",
                name.replace('\'', "'\\''")
            ),
        ])
        .stdout(Stdio::null())
        .spawn()
        .expect("sh runs");
    let pid = child.id();
    let _hostile = Hostile(child);
    let processes = format!("0:{pid}:1073741824:0.5");
    let agent = Agent::on_fake_nvml(
        "board-hostile",
        "[simulation]\ngpus = 1\nfaults = []\n",
        "[collect]\ninterval = \"200ms\"\nkmsg = \"off\"\n",
        &[("FAKE_NVML_PROCESSES", processes.as_str())],
    );
    agent.metrics();
    agent.wait_until(Duration::from_secs(20), |a| {
        a.get("/").text().contains(&format!(" pid {pid}"))
    });
    let page = agent.get("/").text();
    assert!(
        page.contains(&format!("&lt;b&gt;&quot;&#39;&amp;x&lt;/b&gt; pid {pid}")),
        "{page}"
    );
    assert!(!page.contains(name));
    assert!(!page.contains("<b>\""));
}

/// Start of the golden run: fixed, so no wall clock reaches the page.
fn start() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_default()
}

/// The page after ten simulated hours of seed 42's fleet, collected every five minutes,
/// rendered as the agent renders it.
fn golden_page() -> String {
    const HOURS: u32 = 10;
    const STEP_SECONDS: u32 = 300;
    let hostname = "gpu-node-01";
    let config = Config::default();
    let mut fleet = Fleet::new(&SimulationConfig::default(), start());
    let mut engine = Engine::new(EngineConfig::default());
    let mut alerting = Alerting::from_config(
        &config,
        hostname.into(),
        format!("http://{hostname}:10400/api/v1/alerts"),
    )
    .expect("the default alerting");
    let options = BoardOptions {
        source: "simulator (8 GPUs, 1x speed)".into(),
        version: "0.0.0-golden".into(),
        currency: "USD".into(),
        teams: Vec::new(),
    };
    let mut today = Today::default();
    let mut page = String::new();
    for _ in 0..HOURS * 3600 / STEP_SECONDS {
        fleet.advance(f64::from(STEP_SECONDS));
        let mut snapshot = fleet.snapshot();
        snapshot.sanitize();
        snapshot.host.hostname = hostname.into();
        let findings = engine.step(&snapshot);
        let _ = alerting.step(&findings, None);
        let documents = Documents::new(
            &snapshot,
            &findings,
            alerting.book().alerts.values(),
            engine.config.risk_threshold,
        );
        let today = today.update(&documents.gpus, findings.at);
        let strips = board::strips(&engine.state, findings.at.timestamp());
        let bytes = board::render(&Board {
            documents: &documents,
            strips: &strips,
            today: &today,
            options: &options,
        });
        page = String::from_utf8(bytes.to_vec()).expect("UTF-8");
    }
    page
}

#[test]
fn the_page_of_a_fixed_simulator_run_matches_its_golden_file() {
    let page = golden_page();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/board.html");
    if std::env::var("UPDATE_GOLDEN").as_deref() == Ok("1") {
        std::fs::write(&path, &page)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {} ({e}); create it with UPDATE_GOLDEN=1 cargo test --test it board::",
            path.display()
        )
    });
    if expected != page {
        let at = expected
            .lines()
            .zip(page.lines())
            .position(|(e, a)| e != a)
            .unwrap_or(expected.lines().count().min(page.lines().count()));
        panic!(
            "{} differs from the rendered page at line {}:\n- {}\n+ {}\nIf the change is \
             intended, run UPDATE_GOLDEN=1 cargo test --test it board::and review the diff.",
            path.display(),
            at + 1,
            expected.lines().nth(at).unwrap_or(""),
            page.lines().nth(at).unwrap_or(""),
        );
    }
}

/// A fresh directory for one Chromium run (its profile and its screenshot).
fn chromium_dir(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("gpu-sentinel-board-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// Headless Chromium on `url` with `args`, its own profile, the page's script given
/// `budget_ms` of virtual time (two minutes of real time at most); stdout. Fails when the
/// browser reports a Content-Security-Policy violation: the page must live within its
/// own policy.
fn chromium(chromium: &Path, dir: &Path, url: &str, budget_ms: u32, args: &[&str]) -> String {
    let out = Command::new("timeout")
        .arg("120")
        .arg(chromium)
        .args([
            "--enable-logging=stderr",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--window-size=1400,1000",
            &format!("--user-data-dir={}", dir.join("profile").display()),
            &format!("--virtual-time-budget={budget_ms}"),
        ])
        .args(args)
        .arg(url)
        .stderr(Stdio::piped())
        .output()
        .expect("chromium runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "chromium failed: {stderr}");
    assert!(
        !stderr.contains("Content Security Policy"),
        "the page broke its own policy: {stderr}"
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn headless_chromium_shows_every_tile_after_the_page_refreshed_itself() {
    let Some(browser) = common::tool("chromium") else {
        return;
    };
    let agent = simulated_node();
    agent.metrics();
    let url = format!("{}/", agent.base);
    let dir = chromium_dir("dom");
    // Twelve seconds of virtual time: the script swaps <main> at 5 s and 10 s.
    let dom = chromium(&browser, &dir, &url, 12_000, &["--dump-dom"]);
    let refreshes = attributes(&dom, "<html", "data-refreshes");
    assert!(
        refreshes
            .first()
            .and_then(|n| n.parse::<u32>().ok())
            .is_some_and(|n| n >= 1),
        "the page's script refreshed <main>: {refreshes:?}\n{}",
        &dom[..dom.len().min(2000)]
    );
    let uuids = attributes(&dom, "<article class=\"tile\"", "data-uuid");
    let doc: serde_json::Value =
        serde_json::from_slice(&agent.get("/api/v1/gpus").body).expect("JSON");
    let expected: Vec<String> = doc["gpus"]
        .as_array()
        .expect("gpus")
        .iter()
        .map(|g| g["uuid"].as_str().expect("uuid").to_string())
        .collect();
    assert_eq!(uuids.len(), expected.len(), "{uuids:?}");
    for uuid in &expected {
        assert!(uuids.contains(uuid), "tile of {uuid} in the DOM");
    }
    assert_eq!(
        attributes(&dom, "<article class=\"tile\"", "data-risk").len(),
        8
    );

    let shot = dir.join("board.png");
    let screenshot = format!("--screenshot={}", shot.display());
    chromium(&browser, &dir, &url, 2_000, &[&screenshot]);
    let png = std::fs::read(&shot).expect("a screenshot was written");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG");
    assert!(
        png.len() > 20_000,
        "more than a blank page: {} bytes",
        png.len()
    );
    eprintln!("screenshot: {}", shot.display());
}
