//! Unit tests of `alert::book`: the lifecycle from candidates, retention of resolved
//! alerts, and an alert that returns after resolving.

use super::*;
use crate::alert::LabelSet;

fn start() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-04-01T00:00:00Z")
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_default()
}

fn candidate(name: &str, for_secs: u64) -> Candidate {
    let mut labels = LabelSet::new();
    labels.insert("alertname".into(), name.into());
    Candidate {
        labels,
        annotations: LabelSet::new(),
        for_: Duration::from_secs(for_secs),
    }
}

#[test]
fn lifecycle_pending_firing_resolved_then_forgotten() {
    let t0 = start();
    let at = |m: i64| t0 + TimeDelta::minutes(m);
    let mut book = AlertBook::default();
    let retention = Duration::from_secs(15 * 60);
    book.update(at(0), vec![candidate("A", 600)], retention);
    assert_eq!(book.in_state(AlertState::Pending).count(), 1);
    book.update(at(9), vec![candidate("A", 600)], retention);
    assert_eq!(book.in_state(AlertState::Firing).count(), 0);
    book.update(at(10), vec![candidate("A", 600)], retention);
    let a = book.in_state(AlertState::Firing).next().unwrap().clone();
    assert_eq!((a.active_at, a.starts_at), (at(0), Some(at(10))));
    book.update(at(11), vec![], retention);
    let r = book.in_state(AlertState::Resolved).next().unwrap().clone();
    assert_eq!(r.ends_at, Some(at(11)));
    book.update(at(25), vec![], retention);
    assert_eq!(book.alerts.len(), 1, "kept for the retention");
    book.update(at(27), vec![], retention);
    assert!(book.alerts.is_empty());
}

#[test]
fn pending_alerts_that_stop_holding_never_fire() {
    let mut book = AlertBook::default();
    book.update(start(), vec![candidate("A", 600)], Duration::ZERO);
    book.update(start() + TimeDelta::minutes(5), vec![], Duration::ZERO);
    assert!(book.alerts.is_empty());
}

#[test]
fn zero_for_fires_at_once_and_a_return_after_resolving_is_a_new_alert() {
    let mut book = AlertBook::default();
    let retention = Duration::from_secs(900);
    book.update(start(), vec![candidate("A", 0)], retention);
    assert_eq!(book.in_state(AlertState::Firing).count(), 1);
    book.update(start() + TimeDelta::minutes(1), vec![], retention);
    let later = start() + TimeDelta::minutes(2);
    book.update(later, vec![candidate("A", 0)], retention);
    let a = book.in_state(AlertState::Firing).next().unwrap();
    assert_eq!(a.starts_at, Some(later));
}

#[test]
fn a_ghost_in_a_mig_instance_mutes_that_instances_idle_alert_only() {
    let on = |name: &str, uuid: &str, mig: Option<&str>| {
        let mut c = candidate(name, 0);
        c.labels.insert("uuid".into(), uuid.into());
        if let Some(mig) = mig {
            c.labels.insert("mig_uuid".into(), mig.into());
        }
        c
    };
    let mut book = AlertBook::default();
    book.update(
        start(),
        vec![
            on("GpuGhostProcess", "GPU-a", Some("MIG-9")),
            on("GpuAllocatedIdle", "GPU-a", Some("MIG-9")),
            on("GpuAllocatedIdle", "GPU-a", Some("MIG-10")),
            on("GpuGhostProcess", "GPU-b", None),
            on("GpuAllocatedIdle", "GPU-b", Some("MIG-3")),
        ],
        Duration::from_secs(900),
    );
    let muted = book.inhibited();
    let mut heard: Vec<String> = book
        .alerts
        .iter()
        .filter(|(fp, a)| a.name() == "GpuAllocatedIdle" && !muted.contains(fp))
        .map(|(_, a)| a.labels["mig_uuid"].clone())
        .collect();
    heard.sort();
    // The ghost in MIG-9 explains MIG-9's idle allocation, not MIG-10's; a ghost of the
    // whole GPU explains every instance's.
    assert_eq!(heard, ["MIG-10"]);
}
