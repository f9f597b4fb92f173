//! The document around the board's sections: head, style sheet, summary line, footer and
//! the refresh script, and the Content-Security-Policy that keeps the page on this host.

use std::sync::LazyLock;

use base64::Engine as _;
use maud::{Markup, PreEscaped, html};
use sha2::{Digest, Sha256};

use super::tile::{TileContext, states, tile};
use super::{Board, BoardOptions, advice, tables, today};
use crate::api::GpuView;
use crate::html::Text;

/// The page's only script: every 5 s it fetches `/` and swaps `<main>` for the new one, so
/// a wall screen never flashes a reload. It skips while the tab is hidden or a fetch is
/// still out, marks the page stale while the agent does not answer, and counts its swaps
/// in `<html data-refreshes>` (what the browser test reads to know the refresh works).
const SCRIPT: &str = "(function(){var busy=false;setInterval(function(){\
if(busy||document.hidden)return;busy=true;\
fetch('/',{cache:'no-store',credentials:'same-origin'})\
.then(function(r){if(!r.ok)throw new Error(r.status);return r.text();})\
.then(function(t){var m=new DOMParser().parseFromString(t,'text/html').querySelector('main');\
if(m){document.querySelector('main').replaceWith(m);var h=document.documentElement;\
h.dataset.refreshes=(+h.dataset.refreshes||0)+1;}document.body.classList.remove('stale');})\
.catch(function(){document.body.classList.add('stale');})\
.finally(function(){busy=false;});},5000);})();";

/// The style sheet: dark, for a screen on a wall; the `u0`–`u10` shades colour tiles and
/// heat-strip cells alike (cold blue → green → hot red), `un` marks no data.
const STYLE: &str = ":root{color-scheme:dark;--bg:#0f1318;--panel:#181e26;--text:#e6e9ee;\
--muted:#8a94a3;--line:#2a323d;--warn:#f2b93b;--bad:#e8542f;--ok:#57b26d;--cool:#5aa9e6}\
*{box-sizing:border-box}\
body{margin:0;background:var(--bg);color:var(--text);font:14px/1.35 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif}\
main{padding:14px 20px;max-width:1900px;margin:auto}\
.top{display:flex;align-items:baseline;gap:16px;flex-wrap:wrap}\
h1{font-size:22px;margin:0}h2{font-size:16px;margin:0 0 8px}\
small,.muted{color:var(--muted);font-weight:normal}\
.summary{display:flex;gap:8px;flex-wrap:wrap;margin:10px 0}\
.summary span{background:var(--panel);border:1px solid var(--line);border-radius:6px;padding:3px 10px}\
.summary .most-at-risk{border-color:var(--bad);color:#ffb4a2}\
.tiles{display:grid;grid-template-columns:repeat(auto-fill,minmax(320px,1fr));gap:12px}\
.tile{background:var(--panel);border:1px solid var(--line);border-radius:8px;overflow:hidden;display:flex;flex-direction:column}\
.tile[data-state~=at-risk]{border-color:var(--bad);box-shadow:0 0 0 1px var(--bad)}\
.tile[data-state~=lost],.tile[data-state~=down]{border-style:dashed}\
.tile>header{display:flex;justify-content:space-between;padding:6px 10px;font-weight:600;font-size:18px}\
.tile>p,.tile>div,.tile>ul,.tile>dl{margin:4px 10px}\
.model{font-size:12px;color:var(--muted);white-space:nowrap;overflow:hidden;text-overflow:ellipsis}\
.uuid{font-family:monospace;font-size:11px;color:var(--muted)}\
.badge{display:inline-block;border-radius:4px;padding:0 6px;margin-right:4px;font-size:12px;background:var(--line)}\
.badge.lost,.badge.down,.badge.at-risk,.badge.critical{background:var(--bad);color:#000}\
.badge.ghost,.badge.idle-allocated,.badge.warning{background:var(--warn);color:#000}\
.badge.busy{background:#1f4e79}.badge.free{background:#2a9d8f;color:#000}\
.since{font-size:12px;color:var(--warn)}\
.health{font-size:12px;margin-left:2px}.badge.unhealthy{background:var(--bad);color:#000}.badge.degraded{background:var(--warn);color:#000}.badge.healthy{background:#2a9d8f;color:#000}\
.summary .health.unhealthy{border-color:var(--bad);color:#ffb4a2}.summary .health.degraded{border-color:var(--warn)}\
.tile[data-health=unhealthy]>header{box-shadow:inset 0 -3px 0 var(--bad)}.tile[data-health=degraded]>header{box-shadow:inset 0 -3px 0 var(--warn)}\
.readings{display:grid;grid-template-columns:1.4fr 1fr 1fr;gap:6px}\
dt{font-size:11px;color:var(--muted);text-transform:uppercase;letter-spacing:.04em}dd{margin:0;white-space:nowrap}\
svg.bar{display:block;width:100%;height:4px;margin-top:2px}.bar .track{fill:var(--line)}.bar .fill{fill:var(--cool)}\
.risk.high .score{color:var(--bad);font-weight:700}.rule{color:var(--bad);font-size:12px}\
.reasons{margin:2px 0 0;padding-left:16px;font-size:12px}\
.holders{list-style:none;padding:0;font-size:12px}.holders li{padding:2px 0;border-top:1px solid var(--line)}\
.holders li.ghost{color:var(--warn)}.what{color:var(--muted)}\
.tile>.strip{margin-top:auto;padding:6px 0 8px}\
.mig{font-size:12px}.mig-head{margin:0;color:var(--muted)}svg.split{display:block;width:100%;height:14px;margin:2px 0}\
.split .track{fill:var(--line)}.split rect{stroke:var(--panel);stroke-width:.05}.split rect.idle-allocated{stroke:var(--warn);stroke-width:.15}\
.instances{list-style:none;padding:0;margin:0}.instances li{padding:2px 0;border-top:1px solid var(--line)}\
.instances li.idle-allocated{color:var(--warn)}.instances li.down{color:var(--muted)}.prof{font-family:monospace;font-weight:600}\
svg.heat{display:block;width:100%;height:18px}\
.axis{display:flex;justify-content:space-between;font-size:10px;color:var(--muted);margin:0}\
.cols{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:12px;margin-top:12px}\
.cols>section{background:var(--panel);border:1px solid var(--line);border-radius:8px;padding:10px 12px}\
table{border-collapse:collapse;width:100%;font-size:13px}\
th,td{text-align:left;padding:4px 6px;border-bottom:1px solid var(--line);vertical-align:top}\
th{color:var(--muted);font-weight:normal;font-size:11px;text-transform:uppercase}\
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}tr.high td{color:#ffb4a2}\
td svg.bar{width:80px}\
.figures{display:flex;gap:20px;flex-wrap:wrap;margin:6px 0}.figures dd{font-size:18px;font-weight:600}\
.warn{color:var(--warn)}.ok{color:var(--ok)}.cool{color:var(--cool)}\
.headline{font-size:20px;font-weight:700;margin:0}\
.slot{display:inline-block;background:var(--line);border-radius:4px;padding:1px 6px;margin:2px;font-size:12px}.slot.held{opacity:.6}\
footer{margin-top:14px;color:var(--muted);font-size:12px}a{color:var(--cool)}\
.stale main::before{content:'connection to the agent lost: showing the last data';display:block;background:var(--bad);color:#000;padding:4px 10px;border-radius:4px}\
.u0{fill:#23395b;background:#23395b;color:#fff}.u1{fill:#1f4e79;background:#1f4e79;color:#fff}\
.u2{fill:#1a6a8a;background:#1a6a8a;color:#fff}.u3{fill:#16838f;background:#16838f;color:#fff}\
.u4{fill:#2a9d8f;background:#2a9d8f;color:#fff}.u5{fill:#57b26d;background:#57b26d;color:#000}\
.u6{fill:#8cc152;background:#8cc152;color:#000}.u7{fill:#c8cf3c;background:#c8cf3c;color:#000}\
.u8{fill:#f2b93b;background:#f2b93b;color:#000}.u9{fill:#f28c28;background:#f28c28;color:#000}\
.u10{fill:#e8542f;background:#e8542f;color:#000}.un{fill:#333a44;background:#333a44;color:#aaa}";

/// `/`'s Content-Security-Policy: the page's own style sheet and script (by hash) and
/// fetches of this origin; nothing else may load, no font, image, frame or other host.
pub(crate) static CONTENT_SECURITY_POLICY: LazyLock<String> = LazyLock::new(|| {
    let hash = |text: &str| base64::engine::general_purpose::STANDARD.encode(Sha256::digest(text));
    format!(
        "default-src 'none'; style-src 'sha256-{}'; script-src 'sha256-{}'; \
         connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; \
         frame-ancestors 'none'",
        hash(STYLE),
        hash(SCRIPT)
    )
});

/// How a page reloads besides its script.
enum Reload {
    /// `<noscript>` meta refresh every N seconds: the board, for browsers without script.
    WithoutScript(u32),
    /// Meta refresh every N seconds: the waiting page, which has no script.
    Always(u32),
}

/// A whole document: `<head>` with `title`, the reload and the style sheet, then `body`.
/// `script` is whether the page carries its refresh script.
fn document(title: &str, reload: Reload, body: Markup, script: bool) -> String {
    html! {
        (PreEscaped("<!doctype html>\n"))
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width,initial-scale=1";
                title { (Text(title)) }
                @match reload {
                    Reload::WithoutScript(seconds) => {
                        noscript { meta http-equiv="refresh" content=(seconds); }
                    }
                    Reload::Always(seconds) => { meta http-equiv="refresh" content=(seconds); }
                }
                // The style sheet and script are this file's constants, admitted by hash.
                style { (PreEscaped(STYLE)) }
            }
            "\n"
            body {
                (body)
                @if script {
                    script { (PreEscaped(SCRIPT)) }
                }
            }
        }
        "\n"
    }
    .into_string()
}

pub fn page(board: &Board<'_>) -> String {
    let documents = board.documents;
    let gpus = &documents.gpus;
    let at = documents.alerts.at;
    let hostname = gpus.hostname.as_deref().unwrap_or("");
    let threshold = gpus.risk_threshold.unwrap_or(0.7);
    let options = board.options;
    let mut tiles: Vec<_> = gpus.gpus.iter().collect();
    tiles.sort_by_key(|g| g.sample.index);
    let tile_of = |gpu: &GpuView<'_>| {
        let cx = TileContext {
            risk_threshold: threshold,
            strip: board.strips.get(&gpu.sample.uuid),
            teams: &options.teams,
            hostname,
            health: (documents.health.gpus.iter()).find(|h| h.uuid == gpu.sample.uuid),
        };
        tile(gpu, &cx)
    };
    let main = html! {
        main data-at=(at.to_rfc3339()) {
            header.top {
                h1 { (Text(hostname)) }
                span.muted {
                    (gpus.gpus.len()) " GPUs · collected " (at.format("%Y-%m-%d %H:%M:%S"))
                    " UTC · " (Text(&options.source)) " · gpu-sentinel " (Text(&options.version))
                }
            }
            "\n"
            (summary(board, threshold))
            section.tiles {
                "\n"
                @for gpu in tiles { (tile_of(gpu)) }
            }
            "\n"
            div.cols {
                (tables::ranking(gpus, threshold))
                (tables::alerts(&documents.alerts))
            }
            div.cols {
                (today::section(board.today, &options.currency))
                (advice::section(&documents.recommendations))
            }
            (footer())
        }
    };
    document(
        &format!("gpu-sentinel · {hostname}"),
        Reload::WithoutScript(10),
        main,
        true,
    )
}

/// GPUs by state, alerts firing, the mean utilization.
fn summary(board: &Board<'_>, threshold: f64) -> Markup {
    let gpus = &board.documents.gpus.gpus;
    let count = |state: &str| {
        gpus.iter()
            .filter(|g| states(g, threshold).contains(&state))
            .count()
    };
    let answering: Vec<f64> = gpus
        .iter()
        .filter(|g| g.sample.up && !g.lost)
        .filter_map(|g| g.sample.utilization.gpu)
        .collect();
    let firing = board
        .documents
        .alerts
        .alerts
        .iter()
        .filter(|a| a.state == crate::alert::AlertState::Firing)
        .count();
    let mean =
        (!answering.is_empty()).then(|| answering.iter().sum::<f64>() / answering.len() as f64);
    let counts = [
        ("busy", "busy"),
        ("idle", "idle"),
        ("free", "free"),
        ("idle-allocated", "held idle"),
        ("ghost", "with ghosts"),
        ("at-risk", "at risk"),
        ("lost", "lost"),
        ("down", "not answering"),
    ]
    .map(|(state, label)| (state, label, count(state)));
    // The GPU to look at first, named at the top of the page; the ranking below has all.
    let ranked = tables::ranked(&board.documents.gpus);
    let top = (ranked.first()).and_then(|top| {
        let risk = top.risk.as_ref().filter(|r| r.score >= threshold)?;
        Some((top, risk))
    });
    html! {
        section.summary {
            @if let Some(mean) = mean {
                span { "utilization " b { (format!("{:.0}%", mean * 100.0)) } }
            }
            @for (state, label, n) in counts {
                @if n > 0 {
                    span class=(state) { b { (n) } " " (label) }
                }
            }
            span { b { (firing) } " alert" @if firing != 1 { "s" } " firing" }
            (super::health::node(&board.documents.health))
            @if let Some((top, risk)) = top {
                span.most-at-risk {
                    "most at risk: " b { "GPU " (top.sample.index) } " " (format!("{:.2}", risk.score))
                    @if let Some(why) = risk.rule.as_deref().or_else(|| risk.top(1).next().map(|c| &*c.feature)) {
                        " · " (Text(why))
                    }
                }
            }
        }
        "\n"
    }
}

fn footer() -> Markup {
    html! {
        footer {
            "Refreshes every 5 s. Same data: " a href="/api/v1/gpus" { "/api/v1/gpus" }
            " · " a href="/api/v1/alerts" { "/api/v1/alerts" }
            " · " a href="/api/v1/recommendations" { "/api/v1/recommendations" }
            " · " a href="/metrics" { "/metrics" }
            " · " a href="/healthz" { "/healthz" }
            " · " a href="/readyz" { "/readyz" }
        }
    }
}

/// Before the first collection: a page that says so and reloads itself.
pub fn waiting(options: &BoardOptions) -> String {
    let main = html! {
        main {
            h1 { "gpu-sentinel " (Text(&options.version)) }
            p { "Waiting for the first collection from " (Text(&options.source)) "." }
            (footer())
        }
    };
    document("gpu-sentinel · waiting", Reload::Always(2), main, false)
}
