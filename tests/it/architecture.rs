//! The layering of docs/architecture.md inside each crate of the workspace. Between crates
//! the compiler keeps it (a crate cannot name one above it); inside a crate, every `crate::`
//! path (and every `super::` path that leaves its folder) is an import, and a module may
//! import only modules on a lower layer of its crate, or the modules of the crates below that
//! the crate's root names (`use gpu_sentinel_core::{model, …}`). A second check finds circles
//! between the folders inside one top-level module (`alert::notify` ⇄ `alert::deliver`, say;
//! in the fleet crate, between its modules), which the layers alone would not see. A third
//! holds production files to 600 lines, a fourth keeps comments citing documents that are in
//! the repository, and a fifth keeps issue numbers (which mean nothing to a reader of the
//! repository) out of comments and documents.
//!
//! A new top-level module fails the first test until it is given a layer in [`CRATES`] (and a
//! line in docs/architecture.md).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use regex::Regex;

/// A crate of the workspace: where its source is, and its modules' layers (lowest first; a
/// module may import modules of lower layers only, and modules of one layer do not import
/// each other). The modules of lower crates its root names for its modules to use are read
/// from its root ([`below`]).
struct Crate {
    src: &'static str,
    layers: &'static [&'static [&'static str]],
    /// How many parts of a module path make one node of the circle check: 2 where the
    /// crate's top-level modules are layers of folders (`alert::notify`), 1 where its
    /// modules are the folders (the fleet crate: its modules import each other freely, with
    /// no circle, and are one layer only to be known).
    node_depth: usize,
}

const CRATES: &[Crate] = &[
    Crate {
        src: "crates/core/src",
        layers: &[
            // Utilities that know nothing of GPUs.
            &["sync", "host", "retry_after", "html", "text"],
            &["redact", "state_file"],
            // What a GPU reading is, and the XID catalog it refers to.
            &["xid"],
            &["model"],
            &["config"],
        ],
        node_depth: 2,
    },
    Crate {
        src: "crates/agent/src",
        layers: &[
            // Where readings come from.
            &["procinfo"],
            &["source"],
            // Scenario fleets drawn for evaluation, and their files.
            &["scenario"],
            // What they mean.
            &["engine"],
            &["advice"],
            &["alert"],
            // How they are served.
            &["export"],
            &["api"],
            &["webconfig"],
            &["board"],
            &["server"],
            // The loop.
            &["agent"],
        ],
        node_depth: 2,
    },
    Crate {
        src: "crates/lab/src",
        layers: &[&["backfill", "replay", "train"]],
        node_depth: 2,
    },
    Crate {
        src: "crates/fleet/src",
        layers: &[&[
            "dialect",
            "figures",
            "history",
            "hourly",
            "plan",
            "prom",
            "reading",
            "recorded",
            "render",
            "report",
            "report_health",
            "report_mig",
            "review",
            "send",
            "spec",
        ]],
        node_depth: 1,
    },
    Crate {
        src: "src",
        layers: &[&["cli"]],
        node_depth: 2,
    },
];

/// The modules of lower crates a crate's root names (`use gpu_sentinel_core::{model, …};`,
/// `pub use gpu_sentinel_fleet as fleet;`): what its modules reach as `crate::model`. The
/// compiler has checked that these crates are below it.
fn below(krate: &Crate) -> BTreeSet<String> {
    let root = ["lib.rs", "main.rs"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(root().join(krate.src).join(f)).ok())
        .collect::<String>();
    let grouped = Regex::new(r"(?s)\buse\s+gpu_sentinel_[a-z]+::\{([^}]*)\}").expect("regex");
    let single =
        Regex::new(r"\buse\s+gpu_sentinel_[a-z]+(?:::([a-z_]+))?(?:\s+as\s+([a-z_]+))?\s*;")
            .expect("regex");
    let mut names = BTreeSet::new();
    for m in grouped.captures_iter(&root) {
        names.extend(
            m[1].split(',')
                .map(|n| n.trim().to_string())
                .filter(|n| !n.is_empty()),
        );
    }
    for m in single.captures_iter(&root) {
        if let Some(name) = m.get(2).or(m.get(1)) {
            names.insert(name.as_str().to_string());
        }
    }
    names
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every production and test source file of every crate.
fn all_sources() -> Vec<(PathBuf, Vec<String>)> {
    CRATES
        .iter()
        .flat_map(|c| sources(&root().join(c.src)))
        .collect()
}

fn layer_of(krate: &Crate, module: &str) -> Option<usize> {
    krate
        .layers
        .iter()
        .position(|layer| layer.contains(&module))
}

/// Every `.rs` file under `dir`, with its module path (`alert::notify::http`; `mod.rs` and a
/// folder's sibling `x.rs` name the folder's module).
fn sources(dir: &Path) -> Vec<(PathBuf, Vec<String>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(dir).expect("under src");
                let mut parts: Vec<String> = rel
                    .with_extension("")
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                if parts.last().is_some_and(|p| p == "mod") {
                    parts.pop();
                }
                out.push((path, parts));
            }
        }
    }
    out.sort();
    out
}

/// The production code of a file: every line but the items under `#[cfg(test)]` (a test
/// module, inline or `mod x;`, or a test-only function: skipped by counting braces, so
/// production code after a test module is still read), without comment lines (doc links are
/// not imports).
fn code_lines(text: &str) -> impl Iterator<Item = &str> {
    let mut skipping = false;
    let mut depth = 0i64;
    let mut opened = false;
    text.lines().filter(move |l| {
        let trimmed = l.trim();
        if !skipping && trimmed == "#[cfg(test)]" {
            (skipping, depth, opened) = (true, 0, false);
            return false;
        }
        if skipping {
            let code = trimmed.split("//").next().unwrap_or("");
            for c in code.chars() {
                match c {
                    '{' => (depth, opened) = (depth + 1, true),
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            // An item without a body (`mod tests;`, `use …;`) ends at its semicolon;
            // one with a body when its braces close.
            if (opened && depth <= 0) || (!opened && code.ends_with(';')) {
                skipping = false;
            }
            return false;
        }
        !trimmed.starts_with("//")
    })
}

/// Whether a module name is a test module's: `tests` and `props` (property tests), or
/// `…_tests` and `…_props` where a module has more than one.
fn is_test_module(name: &str) -> bool {
    name == "tests" || name == "props" || name.ends_with("_tests") || name.ends_with("_props")
}

/// Whether a file holds only tests (its module is a test module).
fn is_test_file(path: &Path) -> bool {
    let name = path.file_stem().map(|s| s.to_string_lossy().into_owned());
    name.is_some_and(|n| is_test_module(&n))
}

/// The module paths a file refers to: `crate::a::b…` and `super::…` resolved against the
/// file's own module path. `use crate::{a, b::c}` lists count too.
fn references(text: &str, own: &[String]) -> Vec<Vec<String>> {
    let path = Regex::new(r"\b(crate|super)((?:::[A-Za-z_][A-Za-z0-9_]*)*)(::\{([^}]*)\})?")
        .expect("regex");
    let mut out = Vec::new();
    for line in code_lines(text) {
        for m in path.captures_iter(line) {
            let mut base: Vec<String> = match &m[1] {
                "crate" => Vec::new(),
                // `super` of a file's module; chained `super::super` resolve in the loop.
                _ => own[..own.len().saturating_sub(1)].to_vec(),
            };
            let rest = m.get(2).map_or("", |r| r.as_str());
            for part in rest.split("::").filter(|p| !p.is_empty()) {
                if part == "super" {
                    base.pop();
                } else {
                    base.push(part.to_string());
                }
            }
            match m.get(4) {
                Some(list) => {
                    for item in list.as_str().split(',') {
                        let first = item.trim().split("::").next().unwrap_or("").trim();
                        if !first.is_empty() && first != "self" {
                            let mut p = base.clone();
                            p.push(first.to_string());
                            out.push(p);
                        } else if first == "self" {
                            out.push(base.clone());
                        }
                    }
                }
                None => out.push(base),
            }
        }
    }
    out
}

#[test]
fn every_module_imports_only_lower_layers() {
    let mut wrong = Vec::new();
    let mut unknown = BTreeSet::new();
    let mut files = 0;
    for krate in CRATES {
        let src = root().join(krate.src);
        let below = below(krate);
        assert!(
            krate.src == "crates/core/src" || !below.is_empty(),
            "{}: no module of a lower crate read from its root",
            krate.src
        );
        for (path, own) in sources(&src) {
            let Some(top) = own.first() else { continue };
            if top == "lib" || top == "main" || is_test_file(&path) {
                continue;
            }
            let Some(layer) = layer_of(krate, top) else {
                unknown.insert(format!("{}: {top}", krate.src));
                continue;
            };
            files += 1;
            let text = std::fs::read_to_string(&path).expect("read source");
            for target in references(&text, &own) {
                let Some(to) = target.first() else { continue };
                if to == top || below.contains(to) {
                    continue;
                }
                match layer_of(krate, to) {
                    Some(l) if l < layer || krate.node_depth == 1 => {}
                    Some(_) => wrong.push(format!(
                        "{} ({top}) imports {} ({to})",
                        path.strip_prefix(root()).unwrap_or(&path).display(),
                        target.join("::")
                    )),
                    None => {
                        unknown.insert(format!("{}: {to}", krate.src));
                    }
                }
            }
        }
    }
    assert!(
        files > 200,
        "only {files} files read: is the walk finding the crates?"
    );
    assert!(
        unknown.is_empty(),
        "modules without a layer in tests/it/architecture.rs (and docs/architecture.md): {unknown:?}"
    );
    wrong.sort();
    wrong.dedup();
    assert!(
        wrong.is_empty(),
        "imports that go up or sideways:\n{}",
        wrong.join("\n")
    );
}

/// Circles between the folders (and folder-level files) inside one top-level module, or
/// between the modules of a crate whose modules are its folders.
#[test]
fn no_circle_between_folders() {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for krate in CRATES {
        let below = below(krate);
        // node = the first `node_depth` parts of a module path (`alert::notify`).
        let node = |p: &[String]| {
            let parts: Vec<String> = p.iter().take(krate.node_depth).cloned().collect();
            format!("{}: {}", krate.src, parts.join("::"))
        };
        for (path, own) in sources(&root().join(krate.src)) {
            if own.len() < krate.node_depth || is_test_file(&path) {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("read source");
            let from = node(&own);
            for target in references(&text, &own) {
                let inside = match krate.node_depth {
                    1 => target.first().is_some_and(|t| !below.contains(t)),
                    _ => target.len() >= 2 && target[0] == own[0],
                };
                if !inside {
                    continue;
                }
                let to = node(&target);
                if to != from {
                    edges.entry(from.clone()).or_default().insert(to);
                }
            }
        }
    }
    // Depth-first search for a back edge, reporting the circle it closes.
    fn visit(
        n: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
        circles: &mut Vec<String>,
    ) {
        if let Some(at) = stack.iter().position(|s| s == n) {
            let mut circle = stack[at..].to_vec();
            circle.push(n.to_string());
            circles.push(circle.join(" → "));
            return;
        }
        if done.contains(n) {
            return;
        }
        stack.push(n.to_string());
        for next in edges.get(n).into_iter().flatten() {
            visit(next, edges, stack, done, circles);
        }
        stack.pop();
        done.insert(n.to_string());
    }
    let mut circles = Vec::new();
    let mut done = BTreeSet::new();
    for n in edges.keys() {
        visit(n, &edges, &mut Vec::new(), &mut done, &mut circles);
    }
    assert!(circles.is_empty(), "circles:\n{}", circles.join("\n"));
}

#[test]
fn no_production_source_file_passes_600_lines() {
    let mut long = Vec::new();
    for (path, _) in all_sources() {
        if is_test_file(&path) {
            continue;
        }
        let lines = std::fs::read_to_string(&path)
            .expect("read source")
            .lines()
            .count();
        if lines > 600 {
            long.push(format!("{} ({lines} lines)", path.display()));
        }
    }
    assert!(
        long.is_empty(),
        "split these (tests in their own files):\n{}",
        long.join("\n")
    );
}

/// One naming rule for unit tests: a module's tests are its child module, in the file
/// where Rust finds it (`foo.rs` → `foo/tests.rs`, `foo/mod.rs` → `foo/tests.rs`), named as
/// `is_test_module` says; no `#[path]` points anywhere else.
#[test]
fn unit_tests_are_child_modules_named_by_one_rule() {
    let declared =
        Regex::new(r"#\[cfg\(test\)\]\s*(#\[[^\]]*\]\s*)*mod\s+([a-z_0-9]+)\s*;").expect("regex");
    let mut wrong = Vec::new();
    for (path, _) in all_sources() {
        let text = std::fs::read_to_string(&path).expect("read source");
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("#[path") {
                wrong.push(format!("{}:{}: #[path]", path.display(), n + 1));
            }
        }
        for found in declared.captures_iter(&text) {
            let name = &found[2];
            if !is_test_module(name) {
                wrong.push(format!("{}: test module `{name}`", path.display()));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "unit tests go in a child module named tests, props, *_tests or *_props:\n{}",
        wrong.join("\n")
    );
}

/// Comments cite documents a reader of the repository can open.
#[test]
fn comments_cite_only_documents_in_the_repository() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cited = Regex::new(r"\b([A-Za-z0-9_./-]+\.md)\b").expect("regex");
    let mut missing = Vec::new();
    for dir in ["src", "crates", "tests", "bench", "scripts"] {
        for (path, _) in sources(&root.join(dir)) {
            let text = std::fs::read_to_string(&path).expect("read source");
            for (n, line) in text.lines().enumerate() {
                let Some(comment) = line.split_once("//").map(|(_, c)| c) else {
                    continue;
                };
                for m in cited.captures_iter(comment) {
                    let doc = &m[1];
                    let exists = root.join(doc).exists()
                        || root.join("docs").join(doc).exists()
                        || path.parent().is_some_and(|p| p.join(doc).exists());
                    if !exists {
                        missing.push(format!("{}:{}: {doc}", path.display(), n + 1));
                    }
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "comments citing documents that are not in the repository:\n{}",
        missing.join("\n")
    );
}

/// The comment text of a line of a file of kind `ext` (a document is all text).
fn comment_of<'a>(ext: &str, line: &'a str) -> Option<&'a str> {
    match ext {
        "md" => Some(line),
        "rs" => line.split_once("//").map(|(_, c)| c),
        "sh" | "py" | "toml" | "yml" | "yaml" => line
            .split_once('#')
            .map(|(_, c)| c)
            .filter(|_| !line.contains("#!")),
        _ => None,
    }
}

/// No comment or document cites an issue number (the word and a number, or a hash and a
/// number): a reader of the repository cannot open those. Another project's issue with its repository named
/// (`NVIDIA/dcgm-exporter#655`) is a reference anyone can follow, so it is allowed.
#[test]
fn no_comment_cites_an_issue_number() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let issue = Regex::new(r"(?i)\bissues?\s+#?\d+\b|(?:^|[\s(])#\d+\b").expect("regex");
    let mut files = Vec::new();
    let mut stack: Vec<PathBuf> = [
        "src", "crates", "tests", "bench", "scripts", "deploy", "alerts", "docs", ".ci",
    ]
    .iter()
    .map(|d| root.join(d))
    .collect();
    for file in [
        "README.md",
        "BENCHMARKS.md",
        "CHANGELOG.md",
        "config.toml",
        "Cargo.toml",
    ] {
        files.push(root.join(file));
    }
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                // Rendered outputs compared byte for byte, and build products.
                if !path.ends_with("golden") && !path.ends_with("target") {
                    stack.push(path);
                }
            } else {
                files.push(path);
            }
        }
    }
    let mut found = Vec::new();
    let mut read = 0;
    for path in &files {
        let ext = path
            .extension()
            .map(|e| e.to_string_lossy().into_owned())
            .unwrap_or_default();
        let Ok(text) = std::fs::read_to_string(path) else {
            continue;
        };
        read += 1;
        for (n, line) in text.lines().enumerate() {
            if let Some(m) = comment_of(&ext, line).and_then(|c| issue.find(c)) {
                found.push(format!(
                    "{}:{}: {}",
                    path.display(),
                    n + 1,
                    m.as_str().trim()
                ));
            }
        }
    }
    assert!(
        read > 300,
        "only {read} files read: is the walk finding the tree?"
    );
    assert!(
        found.is_empty(),
        "comments citing issue numbers:\n{}",
        found.join("\n")
    );
}
