//! Property tests of the configuration parser and of `check-config` against `run`.
//!
//! - Any TOML-ish text, and any mutation of the shipped `config.toml` (lines deleted,
//!   duplicated, uncommented, values swapped for other types), parses to a configuration
//!   or to problems that each name a key or a line; nothing panics.
//! - On generated configurations that need no network, `check-config`'s verdict (the
//!   problems of `cli::preflight::check`) equals `run`'s: the configuration parses and
//!   [`Parts::build`], which builds what `run` builds before serving, succeeds, and the web
//!   configuration it names loads.
//!
//! Bounded: a few hundred cases in all, a few seconds in a debug build.

use std::path::PathBuf;
use std::sync::OnceLock;

use gpu_sentinel::cli::{Parts, preflight};
use gpu_sentinel::config::{Config, Problem};
use gpu_sentinel::webconfig::WebConfig;
use proptest::prelude::*;
use proptest::sample::select;

const SHIPPED: &str = include_str!("../../config.toml");

fn config_cases(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

/// Every problem can be found: by its key, its line, or both.
fn assert_placed(problems: &[Problem], text: &str) {
    for p in problems {
        assert!(
            p.key.is_some() || p.line.is_some(),
            "problem without key or line: {p:?}\n--- text ---\n{text}"
        );
        if let Some(line) = p.line {
            assert!(
                line >= 1 && line <= text.lines().count().max(1) + 1,
                "line {line} outside the text: {p:?}\n--- text ---\n{text}"
            );
        }
    }
}

/// Pieces TOML and our config are made of, to build text that gets past the tokenizer.
fn toml_ish_line() -> impl Strategy<Value = String> {
    let section = select(vec![
        "[collect]",
        "[export]",
        "[state]",
        "[simulation]",
        "[risk]",
        "[idle]",
        "[cost]",
        "[capacity]",
        "[alerting]",
        "[alerting.route]",
        "[[alerting.route.routes]]",
        "[[alerting.receivers]]",
        "[[alerting.rules]]",
        "[advice]",
        "[collect",
        "[[alerting]]",
        "[alerting.receivers]",
    ])
    .prop_map(str::to_string);
    let key = select(vec![
        "interval",
        "listen",
        "dir",
        "gpus",
        "speed",
        "model",
        "threshold",
        "window",
        "owner",
        "buffer",
        "receivers",
        "route",
        "rules",
        "name",
        "kind",
        "url",
        "url_env",
        "secret_env",
        "timeout",
        "receiver",
        "matchers",
        "group_wait",
        "continue",
        "field",
        "op",
        "value",
        "for",
        "enabled",
        "base_url",
        "api_key_env",
        "faults",
        "a.b",
        "\"q\"",
    ]);
    let value = toml_value();
    let assignment = (key, value).prop_map(|(k, v)| format!("{k} = {v}"));
    let noise = "[ -~]{0,30}";
    prop_oneof![3 => section, 6 => assignment, 1 => noise]
}

/// A value of any TOML type, well or badly formed.
fn toml_value() -> impl Strategy<Value = String> {
    prop_oneof![
        select(vec![
            "\"5s\"",
            "\"0s\"",
            "\"soon\"",
            "\"\"",
            "\"1ms\"",
            "\"100000000y\"",
            "true",
            "false",
            "0",
            "-1",
            "1e309",
            "nan",
            "inf",
            "-inf",
            "3.5",
            "18446744073709551616",
            "[]",
            "[\"gpu=0\"]",
            "[1, \"a\"]",
            "{}",
            "{ a = 1 }",
            "\"http://127.0.0.1:9/\"",
            "\"not a url\"",
            "\"ftp://h/x\"",
            "\"webhook\"",
            "\"log\"",
            "\"0.0.0.0:10400\"",
            "1979-05-27T07:32:00Z",
            "'lit'",
            "\"\"\"multi\"\"\"",
            "\"\\u00e9\"",
            "[",
            "\"unterminated",
        ])
        .prop_map(str::to_string),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|x| format!("{x:?}")),
        "[a-zA-Z0-9 ./:=~-]{0,16}".prop_map(|s| format!("{s:?}")),
    ]
}

/// The shipped config with one change per step.
#[derive(Debug, Clone)]
enum Mutation {
    Delete(usize),
    Duplicate(usize),
    /// `# key = value` → `key = value`, reaching the commented-out examples.
    Uncomment(usize),
    /// The value of the line's `key = value` replaced.
    Revalue(usize, String),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let line = any::<usize>();
    prop_oneof![
        1 => line.prop_map(Mutation::Delete),
        1 => line.prop_map(Mutation::Duplicate),
        3 => line.prop_map(Mutation::Uncomment),
        3 => (line, toml_value()).prop_map(|(i, v)| Mutation::Revalue(i, v)),
    ]
}

fn mutate(text: &str, mutations: &[Mutation]) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    for m in mutations {
        if lines.is_empty() {
            break;
        }
        let at = |i: &usize| i % lines.len();
        match m {
            Mutation::Delete(i) => {
                lines.remove(at(i));
            }
            Mutation::Duplicate(i) => {
                let i = at(i);
                lines.insert(i, lines[i].clone());
            }
            Mutation::Uncomment(i) => {
                let i = at(i);
                if let Some(rest) = lines[i].strip_prefix("# ") {
                    lines[i] = rest.split("  #").next().unwrap_or(rest).to_string();
                }
            }
            Mutation::Revalue(i, value) => {
                let i = at(i);
                if let Some((key, _)) = lines[i].split_once(" = ") {
                    lines[i] = format!("{key} = {value}");
                }
            }
        }
    }
    lines.join("\n") + "\n"
}

/// The environment both verdicts read: a few variables set, some to bad values.
fn env(name: &str) -> Option<String> {
    match name {
        "GS_PROP_URL" => Some("http://127.0.0.1:9/hook/TOKEN".into()),
        "GS_PROP_BAD_URL" => Some("ftp://127.0.0.1/hook".into()),
        "GS_PROP_EMPTY" => Some("  ".into()),
        "GS_PROP_SECRET" => Some("s3cret".into()),
        _ => None,
    }
}

/// Risk model files: absent option, the shipped model, binary junk, nothing, a directory.
fn model_paths() -> &'static Vec<Option<String>> {
    static PATHS: OnceLock<Vec<Option<String>>> = OnceLock::new();
    PATHS.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("gs-config-props-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let junk = dir.join("junk.bin");
        std::fs::write(&junk, [0xff_u8, 0x00, 0xfe, 0x81]).expect("junk model");
        let shipped = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models/default-risk.toml");
        [
            None,
            Some(shipped),
            Some(junk),
            Some(dir.join("absent.toml")),
            Some(dir),
        ]
        .into_iter()
        .map(|p| p.map(|p| p.display().to_string()))
        .collect()
    })
}

/// Mostly one of `valid`, sometimes one of `invalid`: generated configurations are often
/// entirely valid and often wrong in just one place, where verdicts are worth comparing.
fn mostly<T: Clone + std::fmt::Debug + 'static>(
    valid: Vec<T>,
    invalid: Vec<T>,
) -> impl Strategy<Value = T> {
    prop_oneof![8 => select(valid), 1 => select(invalid)]
}

/// One `[[alerting.receivers]]` entry, named `name`.
fn receiver_entry(name: String) -> impl Strategy<Value = String> {
    let kind = mostly(
        vec![
            "webhook",
            "alertmanager",
            "slack",
            "feishu",
            "dingtalk",
            "wecom",
            "log",
        ],
        vec!["pager", ""],
    );
    // (url, url_env): one of them, as a rule.
    let target = mostly(
        vec![
            (Some("http://127.0.0.1:9/x"), None),
            (Some("https://h.example/p?k=v"), None),
            (None, Some("GS_PROP_URL")),
        ],
        vec![
            (Some("not a url"), None),
            (Some("ftp://h/x"), None),
            (Some(""), None),
            (None, Some("GS_PROP_BAD_URL")),
            (None, Some("GS_PROP_EMPTY")),
            (None, Some("GS_PROP_UNSET")),
            (Some("http://127.0.0.1:9/x"), Some("GS_PROP_URL")),
            (None, None),
        ],
    );
    let secret = mostly(
        vec![None, None, Some("GS_PROP_SECRET")],
        vec![Some("GS_PROP_UNSET"), Some("GS_PROP_EMPTY")],
    );
    let timeout = mostly(vec![None, Some("1s"), Some("10s")], vec![Some("0s")]);
    (kind, target, secret, timeout).prop_map(move |(kind, (url, url_env), secret, timeout)| {
        let mut t = format!("[[alerting.receivers]]\nname = {name:?}\nkind = {kind:?}\n");
        for (key, v) in [
            ("url", url),
            ("url_env", url_env),
            ("secret_env", secret),
            ("timeout", timeout),
        ] {
            if let Some(v) = v {
                t.push_str(&format!("{key} = {v:?}\n"));
            }
        }
        t
    })
}

/// One `[[alerting.rules]]` entry: a tuned default or an added threshold rule.
fn rule_entry() -> impl Strategy<Value = String> {
    let tuned = (
        mostly(
            vec!["GpuLost", "GpuFailureRiskHigh", "GpuAllocatedIdle"],
            vec!["NoSuchDefault"],
        ),
        any::<bool>(),
        mostly(
            vec![None, Some("critical"), Some("info")],
            vec![Some("bad")],
        ),
    )
        .prop_map(|(name, disabled, severity)| {
            let mut t = format!("[[alerting.rules]]\nname = {name:?}\ndisabled = {disabled}\n");
            if let Some(s) = severity {
                t.push_str(&format!("severity = {s:?}\n"));
            }
            t
        });
    let added = (
        select(vec!["GpuHot", "GpuBusy"]),
        mostly(
            vec![Some("temperature_celsius"), Some("utilization")],
            vec![None, Some("vibes")],
        ),
        mostly(vec![None, Some(">"), Some("<=")], vec![Some("=")]),
        mostly(vec![Some(85.0_f64), Some(0.5)], vec![None]),
    )
        .prop_map(|(name, field, op, value)| {
            let mut t = format!("[[alerting.rules]]\nname = {name:?}\n");
            for (key, v) in [("field", field), ("op", op)] {
                if let Some(v) = v {
                    t.push_str(&format!("{key} = {v:?}\n"));
                }
            }
            if let Some(v) = value {
                t.push_str(&format!("value = {v:?}\n"));
            }
            t
        });
    prop_oneof![tuned, added]
}

/// A configuration of the parts `run` builds: receivers, routes, rules, risk model, advice.
fn runnable_ish() -> impl Strategy<Value = String> {
    let receivers = (0..3usize, mostly(vec![false], vec![true])).prop_flat_map(|(n, twice)| {
        // Unique names, unless a duplicate is wanted.
        let names: Vec<String> = (0..n)
            .map(|i| {
                if twice && i == 1 {
                    "r0".into()
                } else {
                    format!("r{i}")
                }
            })
            .collect();
        names.into_iter().map(receiver_entry).collect::<Vec<_>>()
    });
    let route = (
        mostly(vec!["r0"], vec!["zzz", ""]),
        proptest::collection::vec(
            (
                mostly(vec!["", "r0"], vec!["zzz"]),
                mostly(vec!["gpu=0", "severity!=info"], vec!["gpu=~("]),
            ),
            0..2,
        ),
    );
    let rules = proptest::collection::vec(rule_entry(), 0..3);
    // The risk model: mostly none or the shipped one.
    let model = mostly(vec![0, 0, 1], (2..model_paths().len()).collect());
    let advice = (
        mostly(vec![false, false, true], vec![true]),
        mostly(
            vec!["GS_PROP_SECRET"],
            vec!["GS_PROP_UNSET", "GS_PROP_EMPTY", ""],
        ),
        mostly(
            vec!["https://api.deepseek.com", "http://127.0.0.1:9"],
            vec!["api.example.com"],
        ),
        mostly(vec!["60s"], vec!["0s"]),
    );
    (receivers, route, rules, model, advice).prop_map(
        |(receivers, (root, children), rules, model, (enabled, key, base, timeout))| {
            let mut t = String::new();
            if let Some(path) = &model_paths()[model] {
                t.push_str(&format!("[risk]\nmodel = {path:?}\n"));
            }
            t.push_str(&format!(
                "[advice]\nenabled = {enabled}\napi_key_env = {key:?}\nbase_url = {base:?}\n\
                 timeout = {timeout:?}\n"
            ));
            // Without receivers a route names none.
            let root = if receivers.is_empty() { "" } else { root };
            t.push_str(&format!("[alerting.route]\nreceiver = {root:?}\n"));
            for (receiver, matcher) in children {
                let receiver = if receivers.is_empty() { "" } else { receiver };
                t.push_str(&format!(
                    "[[alerting.route.routes]]\nreceiver = {receiver:?}\nmatchers = [{matcher:?}]\n"
                ));
            }
            for entry in receivers.iter().chain(&rules) {
                t.push_str(entry);
            }
            t
        },
    )
}

/// `check-config` says ok (no errors, every variable set) exactly when `run` builds.
fn assert_verdicts_agree(text: &str) {
    let checked = preflight::check(text, &env);
    assert_placed(&checked.errors, text);
    assert_placed(&checked.unset_env, text);
    let check_ok = checked.errors.is_empty() && checked.unset_env.is_empty();
    let run = Config::parse(text)
        .map_err(|p| format!("{p:?}"))
        .and_then(|config| {
            Parts::build(
                &config,
                &env,
                None,
                "host".into(),
                "http://host:10400/api/v1/alerts".into(),
            )
            .map(drop)
            .map_err(|e| format!("{e:#}"))?;
            // `run` then loads the web configuration the file names (src/cli/run.rs), before
            // it serves: a mutation that uncomments `web_config` names a file that may not
            // exist here.
            match &config.export.web_config {
                Some(path) => WebConfig::load(path).map(drop).map_err(|e| e.to_string()),
                None => Ok(()),
            }
        });
    assert_eq!(
        check_ok,
        run.is_ok(),
        "check-config: {:?} / {:?}; run: {run:?}\n--- text ---\n{text}",
        checked.errors,
        checked.unset_env
    );
    // Values read from the environment never show (the URL's token, the secret).
    let shown = format!("{:?}{:?}{run:?}", checked.errors, checked.unset_env);
    assert!(
        !shown.contains("TOKEN") && !shown.contains("s3cret"),
        "{shown}"
    );
}

proptest! {
    #![proptest_config(config_cases(256))]

    #[test]
    fn any_toml_ish_text_parses_or_names_key_or_line(
        lines in proptest::collection::vec(toml_ish_line(), 0..24)
    ) {
        let text = lines.join("\n");
        if let Err(problems) = Config::parse(&text) {
            prop_assert!(!problems.is_empty());
            assert_placed(&problems, &text);
        }
        let checked = preflight::check(&text, &env);
        assert_placed(&checked.errors, &text);
    }

    #[test]
    fn any_text_parses_or_names_key_or_line(text in "\\PC{0,200}") {
        if let Err(problems) = Config::parse(&text) {
            assert_placed(&problems, &text);
        }
    }

    #[test]
    fn mutated_shipped_config_parses_or_names_key_or_line(
        mutations in proptest::collection::vec(mutation(), 1..6)
    ) {
        let text = mutate(SHIPPED, &mutations);
        if let Err(problems) = Config::parse(&text) {
            prop_assert!(!problems.is_empty());
            assert_placed(&problems, &text);
        }
    }
}

proptest! {
    #![proptest_config(config_cases(64))]

    #[test]
    fn any_bytes_in_a_file_load_or_name_a_line(
        head in "[a-z =\\[\\]\"\n]{0,40}",
        bytes in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let dir = std::env::temp_dir().join(format!("gs-config-props-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join(format!("bytes-{:?}.toml", std::thread::current().id()));
        let mut content = head.clone().into_bytes();
        content.extend(&bytes);
        std::fs::write(&path, &content).expect("temp file");
        if let Err(e) = Config::load(&path) {
            prop_assert!(!e.problems.is_empty());
            for p in &e.problems {
                prop_assert!(p.key.is_some() || p.line.is_some(), "{p:?} of {content:?}");
            }
            if std::str::from_utf8(&content).is_err() {
                let cut = std::str::from_utf8(&content).err().map(|e| e.valid_up_to());
                let line = content[..cut.unwrap_or(0)].iter().filter(|&&b| b == b'\n').count() + 1;
                prop_assert_eq!(e.problems[0].line, Some(line));
            }
        }
    }

    #[test]
    fn check_config_agrees_with_run_on_generated_configs(text in runnable_ish()) {
        assert_verdicts_agree(&text);
    }

    #[test]
    fn check_config_agrees_with_run_on_mutated_shipped_configs(
        mutations in proptest::collection::vec(mutation(), 1..8)
    ) {
        assert_verdicts_agree(&mutate(SHIPPED, &mutations));
    }
}
