//! Unit tests of `config::matcher`: the four operators, quoting, anchoring, and the
//! messages of matchers that do not parse.

use super::*;
use crate::config::Parsed;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn matchers_parse_and_match() {
    let l = labels(&[("severity", "critical"), ("gpu", "3")]);
    assert!(Matcher::parse("severity=critical").unwrap().matches(&l));
    assert!(
        Matcher::parse("severity = \"critical\"")
            .unwrap()
            .matches(&l)
    );
    assert!(!Matcher::parse("severity!=critical").unwrap().matches(&l));
    assert!(Matcher::parse("gpu=~[0-3]").unwrap().matches(&l));
    assert!(!Matcher::parse("gpu=~3.+").unwrap().matches(&l), "anchored");
    assert!(
        Matcher::parse("team!~.+").unwrap().matches(&l),
        "missing label is empty"
    );
    assert!(Matcher::parse("nonsense").is_err());
    assert!(Matcher::parse("gpu=~(").is_err());
}

#[test]
fn errors_read_as_before_typing() {
    let message = |text: &str| Matcher::parse(text).unwrap_err().to_string();
    assert_eq!(
        message("nonsense"),
        "expected name=value, name!=value, name=~regex or name!~regex"
    );
    assert_eq!(message("gp u=1"), "\"gp u\" is not a label name");
    assert!(message("gpu=~(").starts_with("bad regex \"(\": "));
}

#[test]
fn matchers_compare_by_what_they_match() {
    let parse = |text: &str| Matcher::parse(text).unwrap();
    assert_eq!(parse("gpu=~[0-3]"), parse(" gpu =~ \"[0-3]\""));
    assert_ne!(parse("gpu=~1"), parse("gpu=1"));
    assert_ne!(parse("gpu=1"), parse("uuid=1"));
}

#[test]
fn a_matcher_that_does_not_parse_is_kept_with_its_text() {
    let parsed: Vec<Parsed<Matcher>> = toml::from_str::<toml::Table>("m = [\"gpu=1\", \"gpu=~(\"]")
        .unwrap()["m"]
        .clone()
        .try_into()
        .unwrap();
    assert_eq!(parsed[0], Parsed::Valid(Matcher::parse("gpu=1").unwrap()));
    match &parsed[1] {
        Parsed::Invalid { text, error } => {
            assert_eq!(text, "gpu=~(");
            assert!(matches!(error, MatcherError::Regex { .. }));
        }
        other => panic!("{other:?}"),
    }
}
