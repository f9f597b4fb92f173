//! Unit tests of the round rule, row by row, without a CSV in between.

use super::*;

/// Seconds after 08:00 on a fixed day.
fn t(seconds: f64) -> DateTime<Utc> {
    let base = DateTime::parse_from_rfc3339("2026-07-14T08:00:00Z")
        .unwrap()
        .with_timezone(&Utc);
    base + TimeDelta::milliseconds((seconds * 1000.0) as i64)
}

fn sample(up: bool) -> GpuSample {
    GpuSample {
        up,
        ..GpuSample::default()
    }
}

/// Feeds rows `(seconds, gpu, timed, up)` as the reader does; returns each row's verdict
/// and the rounds handed out as lists of GPUs, plus the rounds left (the last one).
fn feed(rows: &[(f64, usize, bool, bool)]) -> (Vec<Verdict>, Vec<Vec<usize>>, Rounds) {
    let mut rounds = Rounds::default();
    let mut verdicts = Vec::new();
    let mut out = Vec::new();
    for (line, &(at, gpu, timed, up)) in rows.iter().enumerate() {
        let verdict = rounds.judge(t(at), gpu, timed);
        verdicts.push(verdict);
        match verdict {
            Verdict::Join => {
                *rounds.staged() = sample(up);
                rounds.join(t(at), gpu, line as u64 + 2, timed);
            }
            Verdict::NextRound => {
                out.push(rounds.ids.clone());
                let mut into = Snapshot::default();
                rounds.take(&mut into);
                *rounds.staged() = sample(up);
                rounds.join(t(at), gpu, line as u64 + 2, timed);
            }
            _ => {}
        }
    }
    (verdicts, out, rounds)
}

#[test]
fn a_repeated_gpu_or_a_late_row_starts_the_next_round() {
    let (verdicts, rounds, left) = feed(&[
        (0.0, 0, true, true),
        (0.003, 1, true, true),
        (5.0, 0, true, true),
        // GPU 1's row of 08:00:05 is missing; its next row is 5 s later than the round.
        (10.0, 1, true, true),
        (10.002, 0, true, true),
    ]);
    use Verdict::*;
    assert_eq!(verdicts, [Join, Join, NextRound, NextRound, Join]);
    assert_eq!(rounds, [vec![0, 1], vec![0]]);
    assert_eq!(left.ids, [1, 0]);
    assert_eq!(left.current.at, t(10.0));
}

#[test]
fn a_round_whose_rows_come_seconds_apart_stays_one_round() {
    // Eight GPUs written 400 ms apart (nvidia-smi waiting on a slow GPU), every 5 s plus
    // the 2.8 s the round takes: once the cadence is known, the round is not split.
    let mut rows = Vec::new();
    for round in 0..4 {
        for gpu in 0..8 {
            rows.push((round as f64 * 7.8 + gpu as f64 * 0.4, gpu, true, true));
        }
    }
    let (_, rounds, left) = feed(&rows);
    // The first rounds are split while the cadence is unknown (a second of allowance, far
    // less than the two minutes a GPU must be missing to count as lost); once a whole
    // round has shown the cadence, every round is whole.
    let whole: Vec<usize> = (0..8).collect();
    assert_eq!(rounds.last(), Some(&whole), "{rounds:?}");
    assert_eq!(left.ids, whole);
}

#[test]
fn the_same_gpu_at_the_same_time_is_a_duplicate_of_its_line() {
    let (verdicts, rounds, _) = feed(&[
        (0.0, 0, true, true),
        (0.003, 1, true, true),
        (0.003, 1, true, true),
        (5.0, 0, true, true),
        (5.0, 0, true, true),
        (5.003, 1, true, true),
    ]);
    use Verdict::*;
    assert_eq!(
        verdicts,
        [
            Join,
            Join,
            Duplicate { of_line: 3 },
            NextRound,
            Duplicate { of_line: 5 },
            Join
        ]
    );
    assert_eq!(rounds, [vec![0, 1]]);
}

#[test]
fn a_stale_copy_of_an_earlier_row_is_out_of_order_whatever_the_cadence() {
    // Two rounds a second (`nvidia-smi -lms 500`): a copy of GPU 1's first row is within
    // the jitter of the third round, yet older than GPU 1's last row.
    let (verdicts, rounds, _) = feed(&[
        (0.0, 0, true, true),
        (0.003, 1, true, true),
        (0.5, 0, true, true),
        (0.503, 1, true, true),
        (1.0, 0, true, true),
        (0.003, 1, true, true),
        (1.003, 1, true, true),
    ]);
    use Verdict::*;
    assert_eq!(
        verdicts[5],
        Stale {
            of_line: 5,
            last: t(0.503)
        }
    );
    assert_eq!(verdicts[6], Join);
    assert_eq!(rounds, [vec![0, 1], vec![0, 1]]);
}

#[test]
fn rows_without_their_own_time_are_never_duplicates() {
    // A GPU nvidia-smi cannot reach borrows its round's time, which may equal its last row's.
    let (verdicts, _, left) = feed(&[
        (0.0, 0, true, true),
        (0.0, 1, true, true),
        (0.0, 1, false, false),
    ]);
    assert_eq!(verdicts[2], Verdict::NextRound);
    assert!(!left.current.gpus[0].up);
}

#[test]
fn old_rows_are_out_of_order_but_a_little_jitter_joins() {
    let (verdicts, _, _) = feed(&[
        (10.0, 0, true, true),
        (9.5, 1, true, true),
        (15.0, 0, true, true),
        (13.0, 1, true, true),
        (8.0, 0, true, true),
    ]);
    use Verdict::*;
    assert_eq!(
        verdicts,
        [
            Join,
            Join,
            NextRound,
            OutOfOrder { round: t(15.0) },
            OutOfOrder { round: t(15.0) }
        ]
    );
}

/// The last round after rounds of `before`, made of `last` (gpu, up).
fn last_round(before: &[(usize, bool)], last: &[(usize, bool)]) -> Option<Cut> {
    let mut rows = Vec::new();
    for &(gpu, up) in before {
        rows.push((0.0 + gpu as f64 * 0.001, gpu, true, up));
    }
    for &(gpu, up) in last {
        rows.push((5.0 + gpu as f64 * 0.001, gpu, true, up));
    }
    let (_, _, left) = feed(&rows);
    left.cut_short()
}

#[test]
fn a_last_round_missing_only_its_tail_was_cut_short() {
    let all = [(0, true), (1, true), (2, true), (3, true)];
    assert_eq!(
        last_round(&all, &[(0, true), (1, true)]),
        Some(Cut {
            present: 2,
            expected: 4
        })
    );
    // Complete, or missing a GPU in the middle: not a cut.
    assert_eq!(last_round(&all, &all), None);
    assert_eq!(last_round(&all, &[(0, true), (1, true), (3, true)]), None);
    // A GPU already down in the round before is not expected.
    let down = [(0, true), (1, false)];
    assert_eq!(last_round(&down, &[(0, true)]), None);
    // The only round of the log: nothing to compare with.
    assert_eq!(last_round(&[], &[(0, true)]), None);
}

#[test]
fn an_unreachable_gpu_first_in_its_round_takes_that_rounds_time() {
    // GPU 0's row is replaced by a device-handle message (untimed, borrowing the last
    // round's time) in the rounds of 5 s and 10 s.
    let (verdicts, rounds, left) = feed(&[
        (0.0, 0, true, true),
        (0.003, 1, true, true),
        (0.0, 0, false, false),
        (5.003, 1, true, true),
        // The reader stamps it with the last round's time: 5.003 s by then.
        (5.003, 0, false, false),
        (10.003, 1, true, true),
    ]);
    use Verdict::*;
    assert_eq!(verdicts, [Join, Join, NextRound, Join, NextRound, Join]);
    assert_eq!(rounds, [vec![0, 1], vec![0, 1]]);
    assert_eq!(left.ids, [0, 1]);
    assert_eq!(left.current.at, t(10.003));
    assert_eq!(left.last_round_at(), Some(t(10.003)));
}

#[test]
fn rounds_of_unreachable_gpus_alone_keep_the_last_known_time() {
    // No row carries a time: nothing better than the last round's is known.
    let (verdicts, rounds, left) = feed(&[
        (0.0, 0, true, true),
        (0.0, 0, false, false),
        (0.0, 0, false, false),
    ]);
    use Verdict::*;
    assert_eq!(verdicts, [Join, NextRound, NextRound]);
    assert_eq!(rounds.len(), 2);
    assert_eq!(left.current.at, t(0.0));
}

#[test]
fn a_row_read_for_the_next_round_keeps_its_sample_across_the_hand_out() {
    // As the reader does: each row is read into the staged sample before it is judged; the
    // row that begins the next round stays staged while the round is handed out.
    let mut rounds = Rounds::default();
    let mut into = Snapshot::default();
    let rows = [
        (0.0, 0, 40.0),
        (0.003, 1, 41.0),
        (5.0, 0, 50.0),
        (5.003, 1, 51.0),
    ];
    let mut handed = Vec::new();
    for (line, &(at, gpu, temperature)) in rows.iter().enumerate() {
        *rounds.staged() = GpuSample {
            index: gpu as u32,
            temperature_celsius: Some(temperature),
            ..sample(true)
        };
        if rounds.judge(t(at), gpu, true) == Verdict::NextRound {
            rounds.take(&mut into);
            handed.push(
                into.gpus
                    .iter()
                    .map(|g| g.temperature_celsius)
                    .collect::<Vec<_>>(),
            );
        }
        rounds.join(t(at), gpu, line as u64 + 2, true);
    }
    assert_eq!(handed, [vec![Some(40.0), Some(41.0)]]);
    let left: Vec<Option<f64>> = rounds
        .samples()
        .iter()
        .map(|g| g.temperature_celsius)
        .collect();
    assert_eq!(left, [Some(50.0), Some(51.0)]);
    // A row that does not join is read over; giving up the round keeps its samples as spares.
    assert_eq!(rounds.discard(), 2);
    assert!(rounds.samples().is_empty() && rounds.is_empty());
}
