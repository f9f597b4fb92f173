use std::time::Duration;

use chrono::{DateTime, Utc};

use super::census::Census;
use super::shard::{host_matcher, select};
use super::*;
use crate::prom::{Client, Endpoint};

fn at(s: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(s, 0).expect("in range")
}

#[test]
fn window_pieces_meet_half_a_step_off_the_grid() {
    let step = Duration::from_secs(60);
    let spans = split_time(Shape::Window { step: Some(step) }, at(0), at(86_400), 4);
    assert_eq!(spans.len(), 4);
    assert_eq!(spans[0].0, at(0));
    assert_eq!(spans[3].1, at(86_400));
    for pair in spans.windows(2) {
        assert_eq!(pair[0].1, pair[1].0, "adjacent");
        assert_eq!(pair[0].1.timestamp() % 60, 30, "half a step off the grid");
    }
}

#[test]
fn range_pieces_cover_every_step_once() {
    let step = Duration::from_secs(3600);
    let shape = Shape::Range { step, window: step };
    let spans = split_time(shape, at(3600), at(3600 * 100), 3);
    let mut steps = Vec::new();
    for (a, b) in &spans {
        let mut t = *a;
        while t <= *b {
            steps.push(t.timestamp());
            t += chrono::TimeDelta::hours(1);
        }
    }
    let expected: Vec<i64> = (1..=100).map(|h| h * 3600).collect();
    assert_eq!(steps, expected);
}

#[test]
fn host_groups_take_unlabelled_series_with_the_last_host() {
    let hosts: Vec<String> = ["node-a.example", "node\"b", "c"]
        .iter()
        .map(|h| h.to_string())
        .collect();
    assert_eq!(
        host_matcher("instance", &hosts, 0..1),
        r#"instance=~"node\\-a\\.example""#
    );
    assert_eq!(
        host_matcher("instance", &hosts, 1..3),
        r#"instance=~"node\"b|c|""#
    );
    assert_eq!(select("up", &["", "a=\"1\""]), "up{a=\"1\"}");
    assert_eq!(select("up", &[""]), "up");
}

fn planner(client: &Client, hosts: usize, gpus_per_host: u64, max_samples: u64) -> Planner<'_> {
    let census = Census::synthetic(
        "Hostname",
        (0..hosts).map(|i| format!("host-{i:03}")).collect(),
        &[("util", gpus_per_host)],
    );
    Planner::new(
        client,
        Limits::with_max_samples(max_samples),
        census,
        Duration::from_secs(60),
    )
}

fn subquery<'a>() -> Query<'a> {
    Query {
        reads: vec![("util".to_string(), 3.0)],
        shape: Shape::Window {
            step: Some(Duration::from_secs(60)),
        },
        by_host: true,
        per_series: false,
        text: Box::new(|p| {
            format!(
                "sum by (Hostname) (count_over_time({}[{}:60s]))",
                select("util", &[p.hosts]),
                p.window
            )
        }),
    }
}

#[test]
fn pieces_fit_the_limits_and_cover_every_host_and_the_period() {
    let client = Client::new(Endpoint::default());
    // 60 hosts × 8 GPUs × 7 days at 60 s, three operands: about 14.5 million samples
    // held by the unsplit subquery, against 3 million allowed.
    let planner = planner(&client, 60, 8, 3_000_000);
    let query = subquery();
    let (from, to) = (at(0), at(7 * 86_400));
    let whole = Piece {
        hosts: None,
        start: from,
        end: to,
        depth: 0,
    };
    assert!(!planner.fits(&query, &whole), "the unsplit query is over");
    let pieces = planner.pieces(&query, from, to);
    assert!(pieces.len() > 1);
    assert!(pieces.iter().all(|p| planner.fits(&query, p)), "{pieces:?}");
    let mut windows: Vec<(DateTime<Utc>, DateTime<Utc>)> =
        pieces.iter().map(|p| (p.start, p.end)).collect();
    windows.sort();
    windows.dedup();
    assert_eq!(windows.first().map(|w| w.0), Some(from));
    assert_eq!(windows.last().map(|w| w.1), Some(to));
    for (a, b) in windows.iter().zip(windows.iter().skip(1)) {
        assert_eq!(a.1, b.0, "windows meet");
    }
    for (a, b) in &windows {
        let mut hosts: Vec<usize> = pieces
            .iter()
            .filter(|p| (p.start, p.end) == (*a, *b))
            .flat_map(|p| p.hosts.clone().unwrap_or(0..60))
            .collect();
        hosts.sort();
        assert_eq!(
            hosts,
            (0..60).collect::<Vec<_>>(),
            "every host once per window"
        );
    }
    // A store that allows it all gets the fewest queries: two windows, as 10,080 steps
    // are more than a series may have.
    let roomy = super::tests::planner(&client, 60, 8, 1_000_000_000);
    let few = roomy.pieces(&query, from, to);
    assert_eq!(few.len(), 2);
    assert!(few.iter().all(|p| p.hosts.is_none()), "no host groups");
}

#[test]
fn a_host_too_large_for_the_limit_gets_shorter_windows() {
    let client = Client::new(Endpoint::default());
    // One host of 8 GPUs over a week is 8 × 3 × 10,080 samples; allow a tenth of that.
    let planner = planner(&client, 4, 8, 2 * 24_192);
    let query = subquery();
    let pieces = planner.pieces(&query, at(0), at(7 * 86_400));
    assert!(pieces.iter().all(|p| planner.fits(&query, p)));
    assert!(
        pieces
            .iter()
            .all(|p| p.hosts.as_ref().is_some_and(|h| h.len() == 1)),
        "one host a piece"
    );
}

#[test]
fn a_large_query_that_fits_goes_in_two_halves_side_by_side() {
    let client = Client::new(Endpoint::default());
    let query = Query {
        reads: vec![("util".to_string(), 1.0)],
        shape: Shape::Window { step: None },
        by_host: true,
        per_series: false,
        text: Box::new(|p| {
            format!(
                "sum(increase({}[{}]))",
                select("util", &[p.hosts]),
                p.window
            )
        }),
    };
    let week = (at(0), at(7 * 86_400));
    // 2,048 series × 10,080 samples: read in two host groups.
    let large = planner(&client, 256, 8, 1_000_000_000);
    let pieces = large.pieces(&query, week.0, week.1);
    assert_eq!(
        pieces.iter().map(|p| p.hosts.clone()).collect::<Vec<_>>(),
        vec![Some(0..128), Some(128..256)]
    );
    // 128 series: one query.
    let small = planner(&client, 16, 8, 1_000_000_000);
    assert_eq!(small.pieces(&query, week.0, week.1).len(), 1);
}
