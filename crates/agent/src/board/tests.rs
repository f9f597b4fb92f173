//! The board of a simulated hour: every GPU's tile, the ranking, alerts, holders, escaping,
//! and a policy that admits exactly the page's own style sheet and script.

use base64::Engine as _;
use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

use super::*;
use crate::alert::alerting::Alerting;
use crate::api::GpusDocument;
use crate::config::Config;
use crate::engine::{Engine, EngineConfig, Findings};
use crate::model::Snapshot;
use crate::source::simulate::{FaultKind, Fleet, GpuPlan, WorkloadKind};

/// Three simulated hours of six GPUs (one wearing its memory, one falling off the bus, one
/// holding memory idle, one with a ghost) with the engine and alerting at the end of them.
fn an_hour() -> (Snapshot, Findings, Alerting, Engine, TodayView) {
    let start: DateTime<Utc> = "2026-03-02T09:00:00Z".parse().expect("a time");
    let plans = [
        GpuPlan::healthy(WorkloadKind::Training),
        GpuPlan::failing(FaultKind::MemoryWear, 0.0),
        GpuPlan::failing(FaultKind::FellOffBus, 0.0),
        GpuPlan::healthy(WorkloadKind::AllocatedIdle),
        GpuPlan::healthy(WorkloadKind::Inference),
        GpuPlan::healthy(WorkloadKind::Ghost),
    ];
    let mut fleet = Fleet::from_plans(7, "NVIDIA H100 80GB HBM3", start, &plans);
    let mut engine = Engine::new(EngineConfig::default());
    let mut alerting = Alerting::from_config(
        &Config::default(),
        "node-1".into(),
        "http://node-1:10400/api/v1/alerts".into(),
    )
    .expect("the default alerting");
    let mut today = Today::default();
    let mut last = None;
    for _ in 0..180 {
        fleet.advance(60.0);
        let mut snapshot = fleet.snapshot();
        snapshot.sanitize();
        let findings = engine.step(&snapshot);
        let _ = alerting.step(&findings, None);
        let view = today.update(&GpusDocument::new(&snapshot, &findings, 0.7), findings.at);
        last = Some((snapshot, findings, view));
    }
    let (snapshot, findings, view) = last.expect("an hour of snapshots");
    (snapshot, findings, alerting, engine, view)
}

fn options() -> BoardOptions {
    BoardOptions {
        source: "simulator (5 GPUs)".into(),
        version: "0.0.0-test".into(),
        currency: "USD".into(),
        teams: Vec::new(),
    }
}

fn page_of(
    snapshot: &Snapshot,
    findings: &Findings,
    alerting: &Alerting,
    engine: &Engine,
) -> String {
    page_with(snapshot, findings, alerting, engine, &options())
}

fn page_with(
    snapshot: &Snapshot,
    findings: &Findings,
    alerting: &Alerting,
    engine: &Engine,
    options: &BoardOptions,
) -> String {
    let documents = Documents::new(snapshot, findings, alerting.book().alerts.values(), 0.7);
    let strips = strips(&engine.state, findings.at.timestamp());
    let today = TodayView::default();
    let page = render(&Board {
        documents: &documents,
        strips: &strips,
        today: &today,
        options,
    });
    String::from_utf8(page.to_vec()).expect("UTF-8")
}

/// The values of `attribute` on elements whose opening tag starts with `tag`, in order.
fn attributes<'p>(page: &'p str, tag: &str, attribute: &str) -> Vec<&'p str> {
    page.split(tag)
        .skip(1)
        .filter_map(|rest| {
            let open = &rest[..rest.find('>')?];
            let at = open.find(&format!("{attribute}=\""))? + attribute.len() + 2;
            Some(&open[at..at + open[at..].find('"')?])
        })
        .collect()
}

#[test]
fn every_gpu_has_a_tile_with_its_uuid_risk_state_and_heat_strip() {
    let (snapshot, findings, alerting, engine, _) = an_hour();
    let page = page_of(&snapshot, &findings, &alerting, &engine);
    let uuids = attributes(&page, "<article class=\"tile\"", "data-uuid");
    let expected: Vec<&str> = findings.gpus.iter().map(|g| g.uuid.as_str()).collect();
    assert_eq!(uuids, expected);
    let risks = attributes(&page, "<article class=\"tile\"", "data-risk");
    for (risk, gpu) in risks.iter().zip(&findings.gpus) {
        assert_eq!(*risk, format!("{:.3}", gpu.risk.score));
    }
    assert_eq!(
        page.matches("<svg class=\"heat\"").count(),
        findings.gpus.len()
    );
    let states = attributes(&page, "<article class=\"tile\"", "data-state");
    let has = |i: usize, state: &str| states[i].split(' ').any(|s| s == state);
    for (i, gpu) in findings.gpus.iter().enumerate() {
        assert_eq!(has(i, "lost"), gpu.lost, "{states:?}");
        assert_eq!(has(i, "down"), !gpu.lost && !gpu.up, "{states:?}");
        assert_eq!(has(i, "at-risk"), gpu.risk.score >= 0.7, "{states:?}");
        assert_eq!(
            has(i, "idle-allocated"),
            gpu.idle.allocated_idle,
            "{states:?}"
        );
        assert_eq!(has(i, "ghost"), !gpu.idle.ghosts.is_empty(), "{states:?}");
    }
    assert_eq!(states[0], "busy");
    assert!(
        has(2, "down") && has(3, "idle-allocated") && has(5, "ghost"),
        "{states:?}"
    );
}

#[test]
fn each_tile_shows_its_health_verdict_and_the_summary_the_nodes() {
    let (snapshot, findings, alerting, engine, _) = an_hour();
    let page = page_of(&snapshot, &findings, &alerting, &engine);
    let health = attributes(&page, "<article class=\"tile\"", "data-health");
    let expected: Vec<&str> = findings
        .gpus
        .iter()
        .map(|g| g.health.state.as_str())
        .collect();
    assert_eq!(health, expected);
    assert_eq!(health[0], "healthy");
    assert_eq!(health[2], "unhealthy", "the GPU that fell off the bus");
    // Its tile names the components and the action, every reason on hover.
    let tile = page
        .split("<article class=\"tile\"")
        .nth(3)
        .expect("GPU 2's tile");
    let line = between(tile, "<span class=\"health unhealthy\"", "</span>");
    assert!(
        line.contains("xid, driver → <b>drain_and_reboot</b>"),
        "{line}"
    );
    assert!(
        line.contains("driver unhealthy: does not answer NVML"),
        "{line}"
    );
    let summary = between(&page, "<section class=\"summary\">", "</section>");
    assert!(
        summary.contains("data-health=\"unhealthy\">node <b>unhealthy</b>: drain_and_reboot"),
        "{summary}"
    );
}

#[test]
fn the_ranking_lists_the_most_at_risk_gpu_first_with_its_reasons() {
    let (snapshot, findings, alerting, engine, _) = an_hour();
    let page = page_of(&snapshot, &findings, &alerting, &engine);
    let ranking = &page[page.find("<section class=\"ranking\"").expect("a ranking")..];
    let ranking = &ranking[..ranking.find("</section>").expect("closed")];
    let risks: Vec<f64> = attributes(ranking, "<tr data-uuid", "data-risk")
        .iter()
        .map(|r| r.parse().expect("a number"))
        .collect();
    assert_eq!(risks.len(), findings.gpus.len());
    assert!(risks.windows(2).all(|w| w[0] >= w[1]), "{risks:?}");
    let top = findings
        .gpus
        .iter()
        .max_by(|a, b| a.risk.score.total_cmp(&b.risk.score))
        .expect("GPUs");
    assert!(
        top.risk.score >= 0.7,
        "the wearing GPU is at risk: {}",
        top.risk.score
    );
    let first = attributes(ranking, "<tr ", "data-uuid")[0];
    assert_eq!(first, top.uuid);
    // Named at the top of the page too.
    assert!(
        page.contains(&format!("most at risk: <b>GPU {}</b>", top.index)),
        "{}",
        &page[page.find("<section class=\"summary\"").expect("a summary")..][..600]
    );
    let reason = &top.risk.top(1).next().expect("a reason").feature;
    assert!(ranking.contains(&**reason), "{ranking}");
}

#[test]
fn active_alerts_are_listed_with_their_age_and_holders_on_their_gpu() {
    let (snapshot, findings, alerting, engine, _) = an_hour();
    let page = page_of(&snapshot, &findings, &alerting, &engine);
    let firing: Vec<_> = alerting
        .book()
        .alerts
        .values()
        .filter(|a| a.state == crate::alert::AlertState::Firing)
        .collect();
    assert!(!firing.is_empty(), "the hour fires alerts");
    for alert in &firing {
        assert!(
            page.contains(&format!("<b>{}</b>", alert.name())),
            "{}",
            alert.name()
        );
    }
    assert!(page.contains("<td>firing</td><td class=\"num\">"), "an age");
    for process in &snapshot.processes {
        assert!(
            page.contains(&format!("pid {}", process.pid)),
            "holder {} shown",
            process.pid
        );
    }
}

#[test]
fn text_from_outside_is_escaped_wherever_it_lands() {
    let (mut snapshot, findings, alerting, engine, _) = an_hour();
    let hostile = "<script>alert('x')</script>";
    let process = snapshot.processes.first_mut().expect("a process");
    process.process = Some(hostile.into());
    process.user = Some("\"><img src=x>".into());
    process.pod = Some("pod&<b>".into());
    snapshot.host.hostname = "<i>host</i>".into();
    let page = page_of(&snapshot, &findings, &alerting, &engine);
    assert!(!page.contains(hostile));
    assert!(page.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"));
    assert!(!page.contains("<img"));
    assert!(page.contains("pod&amp;&lt;b&gt;"));
    assert!(!page.contains("<i>host"));
    // One script, the page's own.
    assert_eq!(page.matches("<script>").count(), 1);
}

/// The text between `open` and the next `close`.
fn between<'p>(page: &'p str, open: &str, close: &str) -> &'p str {
    let from = page.find(open).expect("opened") + open.len();
    &page[from..from + page[from..].find(close).expect("closed")]
}

#[test]
fn the_policy_admits_the_pages_own_style_and_script_and_nothing_from_elsewhere() {
    let (snapshot, findings, alerting, engine, _) = an_hour();
    let page = page_of(&snapshot, &findings, &alerting, &engine);
    let hash = |text: &str| {
        format!(
            "'sha256-{}'",
            base64::engine::general_purpose::STANDARD.encode(Sha256::digest(text))
        )
    };
    let policy = CONTENT_SECURITY_POLICY.as_str();
    assert!(policy.starts_with("default-src 'none'"), "{policy}");
    assert!(policy.contains(&hash(between(&page, "<style>", "</style>"))));
    assert!(policy.contains(&hash(between(&page, "<script>", "</script>"))));
    assert!(policy.contains("connect-src 'self'"));
    for external in ["http:", "https:", "src=", "@import", "url(", "//"] {
        assert!(!page.contains(external), "{external} in the page");
    }
}

#[test]
fn the_same_collection_renders_the_same_bytes() {
    let (snapshot, findings, alerting, engine, _) = an_hour();
    assert_eq!(
        page_of(&snapshot, &findings, &alerting, &engine),
        page_of(&snapshot, &findings, &alerting, &engine)
    );
}

#[test]
fn today_counts_from_the_first_publication_then_from_midnight() {
    let (snapshot, findings, _, _, view) = an_hour();
    assert_eq!(
        view.since,
        Some("2026-03-02T09:01:00Z".parse().expect("a time"))
    );
    let mut today = Today::default();
    let mut findings = findings;
    let at = findings.at;
    for gpu in &mut findings.gpus {
        gpu.cost.busy = 10.0;
        gpu.cost.idle = 2.0;
        gpu.cost.owners = vec![("alice".into(), "unassigned".into(), 100.0, 50.0)];
    }
    let first = today.update(&GpusDocument::new(&snapshot, &findings, 0.7), at);
    assert_eq!((first.busy_cost, first.idle_cost), (0.0, 0.0));
    assert!(first.holders.is_empty());
    for gpu in &mut findings.gpus {
        gpu.cost.busy = 11.0;
        gpu.cost.idle = 2.5;
        gpu.cost.owners = vec![("alice".into(), "unassigned".into(), 100.0, 950.0)];
    }
    let n = findings.gpus.len() as f64;
    let later = today.update(&GpusDocument::new(&snapshot, &findings, 0.7), at);
    assert_eq!((later.busy_cost, later.idle_cost), (n, 0.5 * n));
    assert_eq!(later.holders[0].owner, "alice");
    assert_eq!(later.holders[0].idle_seconds, 900.0 * n);
    let tomorrow = at + chrono::Duration::days(1);
    let next_day = today.update(&GpusDocument::new(&snapshot, &findings, 0.7), tomorrow);
    assert_eq!(next_day.busy_cost, 0.0);
    assert_eq!(
        next_day.since,
        Some("2026-03-03T00:00:00Z".parse().expect("a time"))
    );
}

#[test]
fn before_the_first_collection_the_page_says_so_and_reloads_itself() {
    let page = waiting_page(&BoardOptions {
        source: "nvml <driver>".into(),
        ..options()
    });
    let page = String::from_utf8(page.to_vec()).expect("UTF-8");
    assert!(page.contains("Waiting for the first collection from nvml &lt;driver&gt;."));
    assert!(page.contains("<meta http-equiv=\"refresh\" content=\"2\">"));
    assert!(!page.contains("<script>"));
}

#[test]
fn holders_carry_their_team_when_teams_are_configured() {
    let (snapshot, findings, alerting, engine, _) = an_hour();
    let without = page_of(&snapshot, &findings, &alerting, &engine);
    assert!(!without.contains("team <b>"));
    let teams =
        Config::parse("[[teams]]\nname = \"notebook-users\"\nnamespaces = [\"notebooks\"]\n")
            .expect("valid config")
            .teams;
    let options = BoardOptions { teams, ..options() };
    let page = page_with(&snapshot, &findings, &alerting, &engine, &options);
    assert_eq!(page.matches("team <b>").count(), snapshot.processes.len());
    assert!(
        page.contains("notebooks/jupyter-"),
        "an idle notebook holds a GPU"
    );
    assert!(page.contains("team <b>notebook-users</b>"));
    assert!(page.contains("team <b>unassigned</b>"));
}
