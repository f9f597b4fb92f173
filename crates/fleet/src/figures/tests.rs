//! Unit tests of the fleet figures that need no store.

use super::*;

#[test]
fn growth_is_the_mean_monthly_ratio_over_months_with_data() {
    let plan = plan_capacity(
        vec![0.0, 0.0, 1000.0, 1100.0, 1210.0, 1331.0],
        vec![0.0, 0.0, 1.0, 1.1, 1.21, 1.331],
        2,
        1.3,
    );
    assert!((plan.growth - 0.1).abs() < 1e-9, "{}", plan.growth);
    assert!((plan.forecast_demand_gpus - 1.4641).abs() < 1e-9);
    // 1.4641 GPUs × 1.3 = 1.90 → 2, as many as there are.
    assert_eq!(plan.recommended_gpus, 2);
    assert_eq!(plan.gpus_to_buy, 0);
    let grown = plan_capacity(vec![0.0; 6], vec![0.0, 0.0, 0.0, 0.0, 5.0, 7.5], 8, 1.3);
    // 7.5 × 1.5 = 11.25 GPUs of work × 1.3 = 14.6 → 15: buy 7.
    assert_eq!((grown.recommended_gpus, grown.gpus_to_buy), (15, 7));
    let empty = plan_capacity(vec![0.0; 6], vec![0.0; 6], 8, 1.3);
    assert_eq!(
        (empty.growth, empty.recommended_gpus, empty.gpus_to_buy),
        (0.0, 0, 0)
    );
}

#[test]
fn owning_wins_at_high_utilization_and_renting_at_low() {
    let cost = CostConfig {
        purchase_price: 4.0 * 365.25 * 24.0, // 1 per hour over 4 years
        cloud_hourly_price: 2.0,
        ..CostConfig::default()
    };
    let busy = compare_tco(&cost, 0.8, None, 100.0);
    assert_eq!(busy.cheaper, "own");
    assert!((busy.owned_per_used_gpu_hour - 1.25).abs() < 1e-9);
    assert!((busy.monthly_saving - 75.0).abs() < 1e-9);
    assert_eq!(compare_tco(&cost, 0.3, None, 100.0).cheaper, "rent");
    let no_cloud = CostConfig {
        cloud_hourly_price: 0.0,
        ..cost
    };
    assert_eq!(compare_tco(&no_cloud, 0.8, None, 100.0).cheaper, "unknown");
}

#[test]
fn hours_a_store_counts_past_any_size_do_not_overflow_the_plan() {
    let to = chrono::Utc::now();
    let spec = ReportSpec {
        from: to - chrono::TimeDelta::days(1),
        to,
        team: None,
        teams: Vec::new(),
        cost: Default::default(),
        capacity: Default::default(),
        idle_threshold: 0.05,
        memory_floor_mib: 0,
        step: None,
        max_samples: None,
    };
    let hourly = Hourly {
        first: spec.from + chrono::TimeDelta::hours(1),
        slice: chrono::TimeDelta::hours(1),
        slices: 1,
        gpus: vec![crate::hourly::GpuHours {
            host: "h".into(),
            gpu: "0".into(),
            utilization: vec![Some(0.5)],
            power: vec![None],
        }],
    };
    let earlier = EarlierMonths {
        held: vec![0.0; 5],
        demand: vec![0.0; 5],
        last_held: 0.0,
        last_demand: (1.0, usize::MAX),
    };
    let plan = capacity(earlier, &hourly, (1.0, 0.0), &spec, 86_400);
    assert!(
        plan.monthly_demand_gpus.iter().all(|d| d.is_finite()),
        "{plan:?}"
    );
}
