use std::collections::BTreeMap;

use super::*;

fn row(state: &str, value: f64) -> Sample {
    let labels: BTreeMap<String, String> = [("instance", "node-1"), ("gpu", "0"), ("state", state)]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Sample { labels, value }
}

#[test]
fn held_less_busy_leaves_no_row_for_rounding_or_less_than_nothing() {
    // Two MIG instances (3g and 4g of 7) held and busy all day, their shares applied before
    // busy is taken off held: a rounding's worth of idle, not a row.
    let (h, f3, f4) = (86_400.0_f64, 3.0 / 7.0, 4.0 / 7.0);
    let idle = ((h * f3 + h * f4) - h * f3) - h * f4;
    let mut rows = vec![
        row("idle", idle),
        row("idle", -2e-9),
        row("idle", 0.0),
        row("idle", 60.0 / 8.0),
        row("busy", 1e-12),
    ];
    drop_rounding(&mut rows, &["idle"]);
    let kept: Vec<(&str, f64)> = rows
        .iter()
        .map(|r| (r.labels["state"].as_str(), r.value))
        .collect();
    assert_eq!(kept, [("idle", 7.5), ("busy", 1e-12)]);
}
