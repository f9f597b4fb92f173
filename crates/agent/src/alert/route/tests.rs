//! Unit tests of `alert::route`: matching along the tree, `continue`, inheritance.

use super::*;
use crate::alert::labels;

pub(crate) fn route(text: &str) -> Route {
    let config: crate::config::Config = toml::from_str(text).unwrap();
    Route::compile(&config.alerting.route).unwrap()
}

#[test]
fn routing_tree_follows_alertmanager() {
    let r = route(
        "[alerting.route]\nreceiver = \"default\"\ngroup_wait = \"30s\"\n\
         [[alerting.route.routes]]\nmatchers = [\"severity=critical\"]\nreceiver = \"pager\"\ncontinue = true\n\
         [[alerting.route.routes]]\nmatchers = [\"severity=~critical|warning\"]\nreceiver = \"chat\"\n\
         [[alerting.route.routes]]\nmatchers = [\"severity=warning\"]\nreceiver = \"never\"\n",
    );
    let names = |sev: &str| -> Vec<String> {
        r.matches(&labels(&[("severity", sev)]))
            .iter()
            .map(|x| x.receiver.clone())
            .collect()
    };
    assert_eq!(names("critical"), ["pager", "chat"]);
    assert_eq!(
        names("warning"),
        ["chat"],
        "the first match without continue stops"
    );
    assert_eq!(names("info"), ["default"]);
    // Children inherit what they leave unset.
    assert_eq!(
        r.matches(&labels(&[("severity", "critical")]))[0]
            .group_wait
            .as_secs(),
        30
    );
}

#[test]
fn a_matcher_that_did_not_parse_is_refused_with_its_text() {
    let config: crate::config::Config =
        toml::from_str("[alerting.route]\nmatchers = [\"gpu=~(\"]\n").unwrap();
    let err = Route::compile(&config.alerting.route).unwrap_err();
    assert!(
        err.to_string().starts_with("matcher \"gpu=~(\": bad regex"),
        "{err}"
    );
}
