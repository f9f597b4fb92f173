//! Unit tests of `alert::dispatch`: group timers, resolutions, muting, and the whole-list
//! push to Alertmanager receivers.

use super::*;
use crate::alert::labels;

fn route(text: &str) -> Arc<Route> {
    let config: crate::config::Config = toml::from_str(text).unwrap();
    Arc::new(Route::compile(&config.alerting.route).unwrap())
}

/// One tick, with the book's own inhibition (as alerting passes it).
fn tick(
    d: &Dispatcher,
    state: &mut DispatchState,
    book: &AlertBook,
    now: DateTime<Utc>,
) -> Vec<Notification> {
    d.tick(state, book, &book.inhibited(), now)
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
            consumes: if alertmanager {
                Consumes::AlertList
            } else {
                Consumes::Groups
            },
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
    assert!(tick(&d, &mut state, &two, at(0)).is_empty(), "group_wait");
    assert_eq!(tick(&d, &mut state, &two, at(10)).len(), 1);
    let one_resolved = book_with(
        &[
            ("GpuLost", "1", AlertState::Firing),
            ("GpuLost", "2", AlertState::Resolved),
        ],
        t0(),
    );
    assert!(tick(&d, &mut state, &one_resolved, at(100)).is_empty());
    let all_resolved = book_with(
        &[
            ("GpuLost", "1", AlertState::Resolved),
            ("GpuLost", "2", AlertState::Resolved),
        ],
        t0(),
    );
    assert!(tick(&d, &mut state, &all_resolved, at(200)).is_empty());
}

#[test]
fn alertmanager_receivers_get_only_what_their_routes_send_them() {
    let mut receivers = BTreeMap::new();
    for (name, alertmanager) in [("am", true), ("chat", false)] {
        receivers.insert(
            name.to_string(),
            ReceiverInfo {
                consumes: if alertmanager {
                    Consumes::AlertList
                } else {
                    Consumes::Groups
                },
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
    let sent = tick(
        &d,
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
    tick(&d, &mut state, &book, t0());
    let sent = tick(&d, &mut state, &book, t0() + TimeDelta::seconds(10));
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
    assert!(tick(&d, &mut state, &one, at(0)).is_empty(), "group_wait");
    let two = book_with(
        &[
            ("GpuLost", "1", AlertState::Firing),
            ("GpuLost", "2", AlertState::Firing),
        ],
        t0,
    );
    let sent = tick(&d, &mut state, &two, at(10));
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].alerts.len(),
        2,
        "siblings gathered during group_wait"
    );
    assert_eq!(sent[0].group_labels, labels(&[("alertname", "GpuLost")]));
    assert!(tick(&d, &mut state, &two, at(30)).is_empty(), "unchanged");
    let resolved = book_with(
        &[
            ("GpuLost", "1", AlertState::Firing),
            ("GpuLost", "2", AlertState::Resolved),
        ],
        t0,
    );
    assert!(
        tick(&d, &mut state, &resolved, at(40)).is_empty(),
        "group_interval not yet over"
    );
    let sent = tick(&d, &mut state, &resolved, at(70));
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
        tick(&d, &mut state, &still, at(200)).is_empty(),
        "resolution went out once"
    );
    let repeat = tick(&d, &mut state, &still, at(70 + 4 * 3600));
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
    let first = tick(&d, &mut state, &book, t0);
    assert_eq!(first.len(), 1);
    assert_eq!(
        first[0].alerts[0].ends_at, None,
        "the notifier stamps it when it sends"
    );
    assert_eq!(first[0].alerts[0].state, AlertState::Firing);
    assert!(tick(&d, &mut state, &book, t0 + TimeDelta::seconds(30)).is_empty());
    assert_eq!(
        tick(&d, &mut state, &book, t0 + TimeDelta::seconds(60)).len(),
        1,
        "re-sent every minute"
    );
    let resolved = book_with(&[("GpuLost", "1", AlertState::Resolved)], t0);
    let sent = tick(&d, &mut state, &resolved, t0 + TimeDelta::seconds(70));
    assert_eq!(sent.len(), 1, "a change goes out at once");
    assert_eq!(sent[0].alerts[0].state, AlertState::Resolved);
}
