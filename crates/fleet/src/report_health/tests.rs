use super::*;

fn at(minute: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000 + minute * 60, 0).expect("in range")
}

fn series(labels: &[(&str, &str)], points: &[(i64, f64)]) -> Series {
    Series {
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        points: points.iter().map(|&(m, v)| (at(m), v)).collect(),
    }
}

fn node(host: &str, last: i64) -> Series {
    series(&[("instance", host)], &[(last - 1, 0.0), (last, 2.0)])
}

fn component(host: &str, uuid: &str, name: &str, action: &str, points: &[(i64, f64)]) -> Series {
    series(
        &[
            ("instance", host),
            ("uuid", uuid),
            ("component", name),
            ("action", action),
        ],
        points,
    )
}

const MINUTE: Duration = Duration::from_secs(60);

#[test]
fn only_components_sampled_at_the_hosts_last_scrape_are_current() {
    let nodes = [node("a", 60), node("b", 60)];
    let components = [
        // Recovered at minute 40: its series stopped.
        component("a", "GPU-1", "thermal", "none", &[(30, 1.0), (40, 1.0)]),
        // Unhealthy now, and degraded in another component.
        component(
            "a",
            "GPU-2",
            "memory",
            "inspect_hardware",
            &[(59, 2.0), (60, 2.0)],
        ),
        component("a", "GPU-2", "pcie", "reset_gpu", &[(60, 1.0)]),
        // Its action changed: the old series stopped, the new one goes on.
        component("b", "GPU-3", "xid", "reset_gpu", &[(50, 2.0)]),
        component(
            "b",
            "GPU-3",
            "xid",
            "drain_and_reboot",
            &[(51, 2.0), (60, 2.0)],
        ),
    ];
    let verdicts = Verdicts::from_series(&nodes, &components, MINUTE / 2);
    let healthy = verdicts.of("a", "GPU-1");
    assert_eq!(
        (healthy.state, healthy.action.as_deref()),
        ("healthy", Some("none"))
    );
    let two = verdicts.of("a", "GPU-2");
    assert_eq!(
        (two.state, two.action.as_deref()),
        ("unhealthy", Some("inspect_hardware"))
    );
    let names: Vec<&str> = two
        .components
        .iter()
        .map(|c| c.component.as_str())
        .collect();
    assert_eq!(names, ["memory", "pcie"], "worst first");
    let three = verdicts.of("b", "GPU-3");
    assert_eq!(three.action.as_deref(), Some("drain_and_reboot"));
    assert_eq!(three.components.len(), 1, "{three:?}");
    let mut unhealthy: Vec<_> = verdicts.unhealthy().cloned().collect();
    unhealthy.sort();
    assert_eq!(
        unhealthy,
        [
            ("a".to_string(), "GPU-2".to_string()),
            ("b".to_string(), "GPU-3".to_string())
        ]
    );
}

#[test]
fn a_host_without_verdicts_is_unknown_never_healthy() {
    let components = [component(
        "old",
        "GPU-9",
        "memory",
        "reset_gpu",
        &[(60, 2.0)],
    )];
    let verdicts = Verdicts::from_series(&[node("a", 60)], &components, MINUTE / 2);
    let verdict = verdicts.of("old", "GPU-9");
    assert_eq!(verdict, GpuVerdict::unknown());
    assert_eq!(verdicts.of("dcgm-host", "GPU-x").state, "unknown");
    assert_eq!(verdicts.unhealthy().count(), 0);
}

#[test]
fn the_most_disruptive_action_of_the_worst_components_is_the_gpus() {
    let components = [
        component("a", "G", "memory", "reset_gpu", &[(60, 2.0)]),
        component("a", "G", "xid", "drain_and_reboot", &[(60, 2.0)]),
        // Worse action, but only degraded: not the GPU's.
        component("a", "G", "nvlink", "inspect_hardware", &[(60, 1.0)]),
    ];
    let verdicts = Verdicts::from_series(&[node("a", 60)], &components, MINUTE / 2);
    assert_eq!(
        verdicts.of("a", "G").action.as_deref(),
        Some("drain_and_reboot")
    );
    // A series from before the action label: the state stands, the action is not known.
    let old = [series(
        &[("instance", "a"), ("uuid", "H"), ("component", "memory")],
        &[(60, 1.0)],
    )];
    let verdicts = Verdicts::from_series(&[node("a", 60)], &old, MINUTE / 2);
    let verdict = verdicts.of("a", "H");
    assert_eq!((verdict.state, verdict.action), ("degraded", None));
}

#[test]
fn since_is_the_start_of_the_current_stretch_at_that_state_or_worse() {
    let now = [
        component("a", "G", "memory", "inspect_hardware", &[(60, 2.0)]),
        component("a", "H", "pcie", "reset_gpu", &[(60, 1.0)]),
    ];
    let mut verdicts = Verdicts::from_series(&[node("a", 60)], &now, MINUTE / 2);
    let history = [
        // Unhealthy 5–10, recovered (a gap), degraded from 20, unhealthy from 30.
        component(
            "a",
            "G",
            "memory",
            "reset_gpu",
            &[(5, 2.0), (10, 2.0), (20, 1.0), (25, 1.0)],
        ),
        component(
            "a",
            "G",
            "memory",
            "inspect_hardware",
            &[(30, 2.0), (40, 2.0), (50, 2.0), (60, 2.0)],
        ),
        // A component of another GPU counts for it alone.
        component("a", "H", "pcie", "reset_gpu", &[(0, 1.0), (10, 1.0)]),
        // H degraded through another component from 12, no break longer than two scrapes.
        component("a", "H", "thermal", "none", &[(12, 1.0), (30, 1.0)]),
        component(
            "a",
            "H",
            "pcie",
            "reset_gpu",
            &[(45, 1.0), (52, 1.0), (60, 1.0)],
        ),
    ];
    verdicts.date(&history, MINUTE * 25 / 2 * 2);
    assert_eq!(verdicts.of("a", "G").since, Some(at(30)));
    assert_eq!(verdicts.of("a", "H").since, Some(at(0)));
    verdicts.date(&history, MINUTE * 10);
    assert_eq!(
        verdicts.of("a", "H").since,
        Some(at(45)),
        "a break of 15 minutes ends the stretch"
    );
}
