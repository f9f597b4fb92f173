//! Routing and grouping with Alertmanager's semantics: a tree of routes with label
//! matchers sends each alert to receivers; alerts sharing the `group_by` labels form an
//! aggregation group, notified after `group_wait`, again after `group_interval` when the
//! group changed, and every `repeat_interval` while it keeps firing unchanged.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use regex::Regex;
use serde::{Deserialize, Serialize};

use super::rules::AlertBook;
use super::{Alert, AlertState, LabelSet, Notification};
use crate::config::{
    DEFAULT_GROUP_BY, DEFAULT_GROUP_INTERVAL, DEFAULT_GROUP_WAIT, DEFAULT_REPEAT_INTERVAL,
    RouteConfig,
};

/// One label matcher: `name=value`, `name!=value`, `name=~regex`, `name!~regex`.
#[derive(Debug, Clone)]
pub struct Matcher {
    name: String,
    op: MatchOp,
}

#[derive(Debug, Clone)]
enum MatchOp {
    Equal(String),
    NotEqual(String),
    /// Anchored like Alertmanager's (`^(?:…)$`).
    Regex(Regex),
    NotRegex(Regex),
}

impl Matcher {
    /// Parses a matcher; values may be quoted (`severity="critical"`).
    pub fn parse(text: &str) -> Result<Matcher, String> {
        let text = text.trim();
        let (pos, op_len, kind) = ["=~", "!~", "!=", "="]
            .iter()
            .filter_map(|op| text.find(op).map(|p| (p, op.len(), *op)))
            .min_by_key(|(p, len, _)| (*p, usize::MAX - len))
            .ok_or_else(|| {
                "expected name=value, name!=value, name=~regex or name!~regex".to_string()
            })?;
        let name = text[..pos].trim();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("{name:?} is not a label name"));
        }
        let raw = text[pos + op_len..].trim();
        let value = raw
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(raw)
            .to_string();
        let regex = |v: &str| {
            Regex::new(&format!("^(?:{v})$")).map_err(|e| format!("bad regex {v:?}: {e}"))
        };
        let op = match kind {
            "=" => MatchOp::Equal(value),
            "!=" => MatchOp::NotEqual(value),
            "=~" => MatchOp::Regex(regex(&value)?),
            _ => MatchOp::NotRegex(regex(&value)?),
        };
        Ok(Matcher {
            name: name.to_string(),
            op,
        })
    }

    /// A missing label matches as the empty string, as in Alertmanager.
    pub fn matches(&self, labels: &LabelSet) -> bool {
        let value = labels.get(&self.name).map_or("", String::as_str);
        match &self.op {
            MatchOp::Equal(v) => value == v,
            MatchOp::NotEqual(v) => value != v,
            MatchOp::Regex(r) => r.is_match(value),
            MatchOp::NotRegex(r) => !r.is_match(value),
        }
    }
}

/// A compiled route: matchers parsed, unset options inherited from the parent.
#[derive(Debug, Clone)]
pub struct Route {
    pub receiver: String,
    matchers: Vec<Matcher>,
    pub group_by: Vec<String>,
    pub group_wait: Duration,
    pub group_interval: Duration,
    pub repeat_interval: Duration,
    continue_matching: bool,
    children: Vec<Route>,
    /// Position in the tree ("0", "0.2", …): part of group keys.
    id: String,
}

impl Route {
    /// Compiles `[alerting.route]`; errors name the bad matcher.
    pub fn compile(config: &RouteConfig) -> Result<Route, String> {
        let root = Route {
            receiver: config.receiver.clone(),
            matchers: Vec::new(),
            group_by: config
                .group_by
                .clone()
                .unwrap_or_else(|| DEFAULT_GROUP_BY.map(String::from).to_vec()),
            group_wait: config.group_wait.unwrap_or(DEFAULT_GROUP_WAIT),
            group_interval: config.group_interval.unwrap_or(DEFAULT_GROUP_INTERVAL),
            repeat_interval: config.repeat_interval.unwrap_or(DEFAULT_REPEAT_INTERVAL),
            continue_matching: false,
            children: Vec::new(),
            id: "0".into(),
        };
        Route::fill(root, config)
    }

    fn fill(mut route: Route, config: &RouteConfig) -> Result<Route, String> {
        route.matchers = config
            .matchers
            .iter()
            .map(|m| Matcher::parse(m).map_err(|e| format!("matcher {m:?}: {e}")))
            .collect::<Result<_, _>>()?;
        for (i, child) in config.routes.iter().enumerate() {
            let inherited = Route {
                receiver: if child.receiver.is_empty() {
                    route.receiver.clone()
                } else {
                    child.receiver.clone()
                },
                matchers: Vec::new(),
                group_by: child
                    .group_by
                    .clone()
                    .unwrap_or_else(|| route.group_by.clone()),
                group_wait: child.group_wait.unwrap_or(route.group_wait),
                group_interval: child.group_interval.unwrap_or(route.group_interval),
                repeat_interval: child.repeat_interval.unwrap_or(route.repeat_interval),
                continue_matching: child.continue_matching,
                children: Vec::new(),
                id: format!("{}.{i}", route.id),
            };
            route.children.push(Route::fill(inherited, child)?);
        }
        Ok(route)
    }

    /// The routes an alert with `labels` goes to, as Alertmanager's `Route.Match`: the
    /// deepest matching routes, siblings after a match only with `continue`.
    pub fn matches(&self, labels: &LabelSet) -> Vec<&Route> {
        if !self.matchers.iter().all(|m| m.matches(labels)) {
            return Vec::new();
        }
        let mut all = Vec::new();
        for child in &self.children {
            let found = child.matches(labels);
            let matched = !found.is_empty();
            all.extend(found);
            if matched && !child.continue_matching {
                break;
            }
        }
        if all.is_empty() {
            all.push(self);
        }
        all
    }
}

/// How a receiver is fed.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceiverInfo {
    /// Alertmanager receivers get the whole alert list, re-sent; others get groups.
    pub alertmanager: bool,
    pub send_resolved: bool,
}

/// What one aggregation group remembers between ticks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct GroupState {
    receiver: String,
    group_labels: LabelSet,
    created: DateTime<Utc>,
    last_flush: Option<DateTime<Utc>>,
    /// The alerts that were firing when the group last notified.
    last_sent: BTreeMap<u64, AlertState>,
}

/// Grouping and Alertmanager-push state: persisted with the alerts, so a restart does
/// not repeat notifications that went out.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DispatchState {
    groups: BTreeMap<String, GroupState>,
    /// Per Alertmanager receiver: when its list was last pushed, and what it held.
    #[serde(default)]
    pushed: BTreeMap<String, Pushed>,
}

/// The last list pushed to one Alertmanager receiver.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Pushed {
    at: Option<DateTime<Utc>>,
    alerts: BTreeMap<u64, AlertState>,
}

/// Turns the alert book into notifications, tick by tick.
#[derive(Debug, Clone)]
pub struct Dispatcher {
    pub route: Route,
    pub receivers: BTreeMap<String, ReceiverInfo>,
    /// Alertmanager receivers are re-sent firing alerts this often.
    pub resend_interval: Duration,
    pub external_url: String,
}

impl Dispatcher {
    /// Notifications due at `now`, updating `state`.
    pub fn tick(
        &self,
        state: &mut DispatchState,
        book: &AlertBook,
        now: DateTime<Utc>,
    ) -> Vec<Notification> {
        let mut out = self.push_to_alertmanagers(state, book, now);
        // Muted alerts stay in the book (and on /api/v1/alerts); they are only not notified.
        let muted = super::rules::inhibited(book);
        let mut current: BTreeMap<String, (&Route, LabelSet, Vec<&Alert>)> = BTreeMap::new();
        for (fingerprint, alert) in &book.alerts {
            if alert.state == AlertState::Pending || muted.contains(fingerprint) {
                continue;
            }
            for route in self.route.matches(&alert.labels) {
                let Some(info) = self.receivers.get(&route.receiver) else {
                    continue;
                };
                if info.alertmanager {
                    continue;
                }
                let group_labels: LabelSet = route
                    .group_by
                    .iter()
                    .filter_map(|l| alert.labels.get(l).map(|v| (l.clone(), v.clone())))
                    .collect();
                let key = format!(
                    "{}:{}:{}",
                    route.id,
                    route.receiver,
                    label_text(&group_labels)
                );
                current
                    .entry(key)
                    .or_insert_with(|| (route, group_labels, Vec::new()))
                    .2
                    .push(alert);
            }
        }
        // Groups whose alerts all went away keep their state until their resolution is sent.
        let keys: std::collections::BTreeSet<String> =
            current.keys().chain(state.groups.keys()).cloned().collect();
        for key in keys {
            let entry = current.remove(&key);
            let Some((route, group_labels, alerts)) = entry else {
                state.groups.remove(&key);
                continue;
            };
            let send_resolved = self
                .receivers
                .get(&route.receiver)
                .is_some_and(|r| r.send_resolved);
            let group = state
                .groups
                .entry(key.clone())
                .or_insert_with(|| GroupState {
                    receiver: route.receiver.clone(),
                    group_labels: group_labels.clone(),
                    created: now,
                    last_flush: None,
                    last_sent: BTreeMap::new(),
                });
            // Resolved alerts go out once (if the receiver wants them), then leave the group.
            let members: Vec<&Alert> = alerts
                .into_iter()
                .filter(|a| {
                    a.state == AlertState::Firing
                        || (send_resolved
                            && group.last_sent.get(&a.fingerprint()) == Some(&AlertState::Firing))
                })
                .collect();
            if members.is_empty() {
                state.groups.remove(&key);
                continue;
            }
            let now_set: BTreeMap<u64, AlertState> =
                members.iter().map(|a| (a.fingerprint(), a.state)).collect();
            // A new firing alert, or a resolution the receiver wants, is a change; an alert
            // leaving a group that does not send resolutions is not (Alertmanager's rule).
            let changed = now_set
                .iter()
                .any(|(fp, s)| group.last_sent.get(fp) != Some(s));
            let firing = members.iter().any(|a| a.state == AlertState::Firing);
            let after = |from: DateTime<Utc>, wait: Duration| now >= from + delta(wait);
            let due = match group.last_flush {
                None => after(group.created, route.group_wait),
                Some(last) if changed => after(last, route.group_interval),
                Some(last) => firing && after(last, route.repeat_interval),
            };
            if !due {
                continue;
            }
            group.last_flush = Some(now);
            // A resolution goes out once: afterwards only firing alerts are remembered.
            group.last_sent = now_set
                .into_iter()
                .filter(|(_, s)| *s == AlertState::Firing)
                .collect();
            out.push(Notification {
                receiver: route.receiver.clone(),
                group_key: key,
                group_labels,
                alerts: members.into_iter().cloned().collect(),
                created_at: now,
                external_url: self.external_url.clone(),
            });
        }
        out
    }

    /// For each Alertmanager receiver, the alerts the routing tree sends it (pending ones
    /// aside), pushed when the list changed or the resend interval passed. Inhibition is
    /// Alertmanager's own business there. Firing alerts leave `ends_at` unset: the
    /// Alertmanager notifier sets it four intervals past the moment it actually sends, as
    /// Prometheus does, so a list that waited in the outbox through an outage does not
    /// arrive already expired.
    fn push_to_alertmanagers(
        &self,
        state: &mut DispatchState,
        book: &AlertBook,
        now: DateTime<Utc>,
    ) -> Vec<Notification> {
        let mut out = Vec::new();
        for (receiver, info) in &self.receivers {
            if !info.alertmanager {
                continue;
            }
            let listed: Vec<(&u64, &Alert)> = book
                .alerts
                .iter()
                .filter(|(_, a)| a.state != AlertState::Pending)
                .filter(|(_, a)| {
                    self.route
                        .matches(&a.labels)
                        .iter()
                        .any(|r| &r.receiver == receiver)
                })
                .collect();
            let set: BTreeMap<u64, AlertState> =
                listed.iter().map(|(fp, a)| (**fp, a.state)).collect();
            let last = state.pushed.entry(receiver.clone()).or_default();
            let resend_due = last
                .at
                .is_none_or(|at| now >= at + delta(self.resend_interval));
            if listed.is_empty() {
                last.alerts.clear();
                continue;
            }
            if set == last.alerts && !resend_due {
                continue;
            }
            last.at = Some(now);
            last.alerts = set;
            out.push(Notification {
                receiver: receiver.clone(),
                group_key: format!("alertmanager:{receiver}"),
                group_labels: LabelSet::new(),
                alerts: listed.into_iter().map(|(_, a)| a.clone()).collect(),
                created_at: now,
                external_url: self.external_url.clone(),
            });
        }
        out
    }
}

fn delta(d: Duration) -> TimeDelta {
    TimeDelta::from_std(d).unwrap_or(TimeDelta::MAX)
}

/// `{a="1", b="2"}`: a group's labels as Alertmanager prints them in group keys.
fn label_text(labels: &LabelSet) -> String {
    let inner: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!("{{{}}}", inner.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alert::labels;

    fn route(text: &str) -> Route {
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

    fn book_with(alerts: &[(&str, &str, AlertState)], at: DateTime<Utc>) -> AlertBook {
        let mut book = AlertBook::default();
        for (name, gpu, state) in alerts {
            let mut labels = labels(&[("alertname", name), ("gpu", gpu), ("hostname", "h")]);
            labels.insert("severity".into(), "critical".into());
            let alert = Alert {
                labels,
                annotations: LabelSet::new(),
                state: *state,
                active_at: at,
                starts_at: Some(at),
                ends_at: (*state == AlertState::Resolved).then_some(at),
            };
            book.alerts.insert(alert.fingerprint(), alert);
        }
        book
    }

    fn dispatcher(alertmanager: bool) -> Dispatcher {
        let mut receivers = BTreeMap::new();
        receivers.insert(
            "ops".to_string(),
            ReceiverInfo {
                alertmanager,
                send_resolved: true,
            },
        );
        Dispatcher {
            route: route("[alerting.route]\nreceiver = \"ops\"\ngroup_by = [\"alertname\"]\n"),
            receivers,
            resend_interval: Duration::from_secs(60),
            external_url: String::new(),
        }
    }

    fn t0() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-05-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn without_send_resolved_a_resolution_neither_goes_out_nor_counts_as_a_change() {
        let mut d = dispatcher(false);
        d.receivers.get_mut("ops").unwrap().send_resolved = false;
        let mut state = DispatchState::default();
        let at = |s: i64| t0() + TimeDelta::seconds(s);
        let two = book_with(
            &[
                ("GpuLost", "1", AlertState::Firing),
                ("GpuLost", "2", AlertState::Firing),
            ],
            t0(),
        );
        assert!(d.tick(&mut state, &two, at(0)).is_empty(), "group_wait");
        assert_eq!(d.tick(&mut state, &two, at(10)).len(), 1);
        let one_resolved = book_with(
            &[
                ("GpuLost", "1", AlertState::Firing),
                ("GpuLost", "2", AlertState::Resolved),
            ],
            t0(),
        );
        assert!(d.tick(&mut state, &one_resolved, at(100)).is_empty());
        let all_resolved = book_with(
            &[
                ("GpuLost", "1", AlertState::Resolved),
                ("GpuLost", "2", AlertState::Resolved),
            ],
            t0(),
        );
        assert!(d.tick(&mut state, &all_resolved, at(200)).is_empty());
    }

    #[test]
    fn alertmanager_receivers_get_only_what_their_routes_send_them() {
        let mut receivers = BTreeMap::new();
        for (name, alertmanager) in [("am", true), ("chat", false)] {
            receivers.insert(
                name.to_string(),
                ReceiverInfo {
                    alertmanager,
                    send_resolved: true,
                },
            );
        }
        let d = Dispatcher {
            route: route(
                "[alerting.route]\nreceiver = \"chat\"\n\
                 [[alerting.route.routes]]\nmatchers = [\"alertname=GpuLost\"]\nreceiver = \"am\"\n",
            ),
            receivers,
            resend_interval: Duration::from_secs(60),
            external_url: String::new(),
        };
        let book = book_with(
            &[
                ("GpuLost", "1", AlertState::Firing),
                ("GpuGhostProcess", "2", AlertState::Firing),
            ],
            t0(),
        );
        let sent = d.tick(
            &mut DispatchState::default(),
            &book,
            t0() + TimeDelta::seconds(10),
        );
        let to_am: Vec<&str> = sent
            .iter()
            .filter(|n| n.receiver == "am")
            .flat_map(|n| n.alerts.iter().map(|a| a.name()))
            .collect();
        assert_eq!(to_am, ["GpuLost"]);
    }

    #[test]
    fn muted_alerts_are_not_notified() {
        let d = dispatcher(false);
        let mut book = book_with(
            &[
                ("GpuLost", "1", AlertState::Firing),
                ("GpuHardwareXid", "1", AlertState::Firing),
            ],
            t0(),
        );
        for a in book.alerts.values_mut() {
            a.labels.insert("uuid".into(), "GPU-1".into());
        }
        let book = AlertBook {
            alerts: book
                .alerts
                .into_values()
                .map(|a| (a.fingerprint(), a))
                .collect(),
        };
        let mut state = DispatchState::default();
        d.tick(&mut state, &book, t0());
        let sent = d.tick(&mut state, &book, t0() + TimeDelta::seconds(10));
        let names: Vec<&str> = sent
            .iter()
            .flat_map(|n| n.alerts.iter().map(|a| a.name()))
            .collect();
        assert_eq!(names, ["GpuLost"]);
    }

    #[test]
    fn groups_wait_batch_change_repeat_and_resolve() {
        let d = dispatcher(false);
        let mut state = DispatchState::default();
        let t0 = DateTime::parse_from_rfc3339("2026-05-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let at = |s: i64| t0 + TimeDelta::seconds(s);
        let one = book_with(&[("GpuLost", "1", AlertState::Firing)], t0);
        assert!(d.tick(&mut state, &one, at(0)).is_empty(), "group_wait");
        let two = book_with(
            &[
                ("GpuLost", "1", AlertState::Firing),
                ("GpuLost", "2", AlertState::Firing),
            ],
            t0,
        );
        let sent = d.tick(&mut state, &two, at(10));
        assert_eq!(sent.len(), 1);
        assert_eq!(
            sent[0].alerts.len(),
            2,
            "siblings gathered during group_wait"
        );
        assert_eq!(sent[0].group_labels, labels(&[("alertname", "GpuLost")]));
        assert!(d.tick(&mut state, &two, at(30)).is_empty(), "unchanged");
        let resolved = book_with(
            &[
                ("GpuLost", "1", AlertState::Firing),
                ("GpuLost", "2", AlertState::Resolved),
            ],
            t0,
        );
        assert!(
            d.tick(&mut state, &resolved, at(40)).is_empty(),
            "group_interval not yet over"
        );
        let sent = d.tick(&mut state, &resolved, at(70));
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].status(), "firing");
        assert!(
            sent[0]
                .alerts
                .iter()
                .any(|a| a.state == AlertState::Resolved)
        );
        let still = book_with(
            &[
                ("GpuLost", "1", AlertState::Firing),
                ("GpuLost", "2", AlertState::Resolved),
            ],
            t0,
        );
        assert!(
            d.tick(&mut state, &still, at(200)).is_empty(),
            "resolution went out once"
        );
        let repeat = d.tick(&mut state, &still, at(70 + 4 * 3600));
        assert_eq!(repeat.len(), 1, "repeat_interval");
        assert_eq!(repeat[0].alerts.len(), 1);
    }

    #[test]
    fn alertmanager_receivers_get_the_whole_list_resent() {
        let d = dispatcher(true);
        let mut state = DispatchState::default();
        let t0 = DateTime::parse_from_rfc3339("2026-05-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let book = book_with(&[("GpuLost", "1", AlertState::Firing)], t0);
        let first = d.tick(&mut state, &book, t0);
        assert_eq!(first.len(), 1);
        assert_eq!(
            first[0].alerts[0].ends_at, None,
            "the notifier stamps it when it sends"
        );
        assert_eq!(first[0].alerts[0].state, AlertState::Firing);
        assert!(
            d.tick(&mut state, &book, t0 + TimeDelta::seconds(30))
                .is_empty()
        );
        assert_eq!(
            d.tick(&mut state, &book, t0 + TimeDelta::seconds(60)).len(),
            1,
            "re-sent every minute"
        );
        let resolved = book_with(&[("GpuLost", "1", AlertState::Resolved)], t0);
        let sent = d.tick(&mut state, &resolved, t0 + TimeDelta::seconds(70));
        assert_eq!(sent.len(), 1, "a change goes out at once");
        assert_eq!(sent[0].alerts[0].state, AlertState::Resolved);
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
}
