//! Unit tests of `alert`: fingerprints and what a notification's alerts share.

use super::*;

#[test]
fn fingerprints_depend_on_labels_only() {
    let a = labels(&[("alertname", "GpuLost"), ("gpu", "1")]);
    let b = labels(&[("gpu", "1"), ("alertname", "GpuLost")]);
    let c = labels(&[("alertname", "GpuLost"), ("gpu", "2")]);
    assert_eq!(fingerprint(&a), fingerprint(&b));
    assert_ne!(fingerprint(&a), fingerprint(&c));
    // Separators keep ("ab","c") apart from ("a","bc").
    assert_ne!(
        fingerprint(&labels(&[("ab", "c")])),
        fingerprint(&labels(&[("a", "bc")]))
    );
}

#[test]
fn common_labels_are_the_intersection() {
    let alert = |gpu: &str| Alert {
        labels: labels(&[
            ("alertname", "GpuLost"),
            ("gpu", gpu),
            ("severity", "critical"),
        ]),
        annotations: LabelSet::new(),
        state: AlertState::Firing,
        active_at: Utc::now(),
        starts_at: None,
        ends_at: None,
    };
    let n = Notification {
        receiver: "ops".into(),
        group_key: "k".into(),
        group_labels: LabelSet::new(),
        alerts: vec![alert("1"), alert("2")],
        created_at: Utc::now(),
        external_url: String::new(),
    };
    assert_eq!(
        n.common_labels(),
        labels(&[("alertname", "GpuLost"), ("severity", "critical")])
    );
    assert_eq!(n.status(), "firing");
    assert_eq!(n.severity(), "critical");
}
