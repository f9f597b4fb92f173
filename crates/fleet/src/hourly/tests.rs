//! Unit tests of the figures combined from hourly rows: small fleets whose answers are
//! worked out by hand.

use super::*;

fn at(text: &str) -> DateTime<Utc> {
    text.parse().expect("RFC 3339")
}

fn series(host: &str, gpu: &str, points: &[(&str, f64)]) -> Series {
    Series {
        labels: [("instance", host), ("gpu", gpu), ("uuid", "GPU-x")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        points: points.iter().map(|(t, v)| (at(t), *v)).collect(),
    }
}

fn gpu(host: &str, gpu: &str, utilization: &[Option<f64>], power: &[Option<f64>]) -> GpuHours {
    GpuHours {
        host: host.into(),
        gpu: gpu.into(),
        utilization: utilization.to_vec(),
        power: power.to_vec(),
    }
}

/// Four hours from Saturday 2026-11-28 01:00 UTC (the first slice ends at 02:00).
fn fleet(gpus: Vec<GpuHours>) -> Hourly {
    Hourly {
        first: at("2026-11-28T02:00:00Z"),
        slice: TimeDelta::hours(1),
        slices: 4,
        gpus,
    }
}

#[test]
fn answers_become_one_row_per_gpu_with_points_in_their_hours() {
    let first = at("2026-11-28T02:00:00Z");
    let utilization = vec![
        // The store answers whole seconds; the period's start had a fraction.
        series(
            "b",
            "0",
            &[("2026-11-28T02:00:00Z", 0.5), ("2026-11-28T04:00:00Z", 0.7)],
        ),
        // A second series of the same GPU (its card replaced): the hour is their mean.
        Series {
            labels: [("instance", "b"), ("gpu", "0"), ("uuid", "GPU-y")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            points: vec![(at("2026-11-28T04:00:00Z"), 0.3)],
        },
        series("a", "1", &[("2026-11-28T03:00:00Z", f64::NAN)]),
        series(
            "a",
            "0",
            &[("2026-11-28T05:00:00Z", 0.1), ("2026-11-29T05:00:00Z", 0.9)],
        ),
    ];
    let power = vec![
        series("a", "0", &[("2026-11-28T05:00:00Z", 100.0)]),
        series("c", "0", &[("2026-11-28T02:00:00Z", 300.0)]),
    ];
    let hourly = Hourly::from_series(
        first,
        TimeDelta::hours(1),
        4,
        "instance",
        utilization,
        power,
    );
    assert_eq!(
        hourly.gpus,
        vec![
            gpu(
                "a",
                "0",
                &[None, None, None, Some(0.1)],
                &[None, None, None, Some(100.0)]
            ),
            gpu("b", "0", &[Some(0.5), None, Some(0.5), None], &[None; 4]),
        ],
        "hosts in order; a GPU whose only point is NaN, a point after the period and power without utilization are dropped"
    );
}

#[test]
fn fleet_means_are_means_of_each_gpus_mean() {
    let hourly = fleet(vec![
        gpu(
            "a",
            "0",
            &[Some(0.0), Some(0.02), Some(0.9), None],
            &[Some(60.0), Some(80.0), Some(300.0), None],
        ),
        gpu(
            "a",
            "1",
            &[Some(0.5), Some(0.5), Some(0.5), Some(0.5)],
            &[Some(200.0), None, Some(200.0), Some(200.0)],
        ),
    ]);
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    assert_eq!(hourly.gpu_means(), vec![Some(0.92 / 3.0), Some(0.5)]);
    assert!(close(hourly.utilization(), (0.92 / 3.0 + 0.5) / 2.0));
    // GPU 0 averages 440/3 W, GPU 1 200 W.
    assert!(
        hourly
            .power()
            .is_some_and(|w| close(w, (440.0 / 3.0 + 200.0) / 2.0))
    );
    // Idle (under 5%): GPU 0's first two hours only; GPU 1 never.
    assert!(hourly.idle_power(0.05).is_some_and(|w| close(w, 70.0)));
    assert_eq!(hourly.idle_power(0.0), None, "no GPU-hour under 0%");
    assert!(close(hourly.busy_gpu_hours(), 0.92 + 2.0));
    // Slices ending after 03:00: the third (03–04) and fourth.
    let (sum, hours) = hourly.demand_since(at("2026-11-28T03:00:00Z"));
    assert_eq!(hours, 2);
    assert!(close(sum, 1.4 + 0.5));
}

#[test]
fn heatmaps_place_each_slice_at_its_start() {
    let hourly = fleet(vec![
        gpu("a", "0", &[Some(0.2), Some(0.4), None, None], &[None; 4]),
        gpu("b", "0", &[Some(0.6), None, None, Some(1.0)], &[None; 4]),
    ]);
    let cells: Vec<(String, u32, f64)> = hourly
        .heatmap()
        .into_iter()
        .map(|c| (c.day, c.hour, c.utilization))
        .collect();
    assert_eq!(
        cells,
        vec![
            ("2026-11-28".to_string(), 1, 0.4),
            ("2026-11-28".to_string(), 2, 0.4),
            ("2026-11-28".to_string(), 4, 1.0),
        ],
        "the hour without data has no cell"
    );
    let nodes = hourly.node_heatmap();
    assert_eq!(nodes.start, Some(at("2026-11-28T01:00:00Z")));
    assert_eq!(nodes.step_seconds, 3600, "four hours fit 84 slices of one");
    assert_eq!(nodes.hosts.len(), 2);
    assert_eq!(
        nodes.hosts[1].utilization,
        vec![Some(0.6), None, None, Some(1.0)]
    );
}

#[test]
fn a_week_of_hours_makes_84_node_slices_of_two() {
    let week: Vec<Option<f64>> = (0..168).map(|h| Some(f64::from(h % 2))).collect();
    let hourly = Hourly {
        slices: 168,
        ..fleet(vec![gpu("a", "0", &week, &week)])
    };
    let nodes = hourly.node_heatmap();
    assert_eq!(nodes.step_seconds, 7200);
    assert_eq!(nodes.hosts[0].utilization, vec![Some(0.5); 84]);
    // 169 hours: one more slice, holding the last hour alone.
    let longer = Hourly {
        slices: 169,
        ..fleet(vec![gpu(
            "a",
            "0",
            &[vec![Some(0.0); 168], vec![Some(1.0)]].concat(),
            &[],
        )])
    };
    let nodes = longer.node_heatmap();
    assert_eq!(
        nodes.step_seconds,
        3 * 3600,
        "169 hours need slices of three"
    );
    assert_eq!(nodes.hosts[0].utilization.len(), 57);
    assert_eq!(nodes.hosts[0].utilization.last(), Some(&Some(1.0)));
}

#[test]
fn idle_hosts_are_judged_on_their_gpus_mean_in_the_chosen_hours() {
    // Slices start at 01, 02, 03 and 04 UTC.
    let hourly = fleet(vec![
        // Host a: idle from 02:00 on, busy before.
        gpu(
            "a",
            "0",
            &[Some(0.9), Some(0.0), Some(0.1), Some(0.1)],
            &[Some(300.0), Some(60.0), Some(70.0), Some(80.0)],
        ),
        gpu(
            "a",
            "1",
            &[Some(0.9), Some(0.1), Some(0.1), None],
            &[Some(300.0), Some(60.0), None, None],
        ),
        // Host b: one busy GPU beside an idle one averages over the line.
        gpu("b", "0", &[Some(0.0); 4], &[Some(50.0); 4]),
        gpu("b", "1", &[Some(0.8); 4], &[Some(250.0); 4]),
    ]);
    let night = |t: DateTime<Utc>| (2..6).contains(&t.hour());
    let (hosts, kwh) = hourly.idle_hosts(night, 0.2);
    assert_eq!(hosts, ["a"]);
    // Host a's GPUs in the three night hours: 60 + 70 + 80 + 60 Wh.
    assert!((kwh - 0.27).abs() < 1e-9, "{kwh}");
    let (hosts, _) = hourly.idle_hosts(|_| true, 0.2);
    assert!(
        hosts.is_empty(),
        "host a's first hour lifts its mean to 0.26"
    );
    let (hosts, kwh) = hourly.idle_hosts(|_| false, 0.2);
    assert_eq!((hosts.len(), kwh), (0, 0.0), "no hour chosen: no evidence");
}
