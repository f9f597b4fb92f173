//! Running a planned query's pieces side by side, splitting a piece the store refuses for
//! its size in two (by hosts where the refusal is about series or the query's length, by
//! time where it is about points a series, either where it is about samples), and handing
//! each answer to the caller's merge as it arrives.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Condvar, Mutex};

use chrono::{DateTime, Utc};

use super::merge::{Ranges, Sums};
use super::{Piece, Planner, Query, Shape, shard};
use crate::prom::{CONCURRENT, Limit, Sample, Series, refusal};

/// Splits of one piece before its refusal fails the query: a piece is at most 2^20 times
/// smaller than planned.
const MAX_DEPTH: u32 = 20;

/// Refusals one run may meet before it fails, beyond eight a planned piece: a store that
/// refuses pieces however small they get must not be asked a million times.
const REFUSALS: usize = 64;

/// The queue of pieces the workers share.
struct Queue {
    pieces: VecDeque<Piece>,
    /// Pieces taken but not yet answered, refused or failed.
    running: usize,
    failed: bool,
    /// Refusals left to this run.
    refusals_left: usize,
}

impl Planner<'_> {
    /// Runs `query` over `start`..`end` as planned; `Window` pieces are instant queries at
    /// their ends, their rows added up by label set.
    pub fn sum(
        &self,
        query: &Query<'_>,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
    ) -> anyhow::Result<Vec<Sample>> {
        let mut sums = Sums::default();
        let pieces = self.pieces(query, start, end);
        self.run(
            query,
            pieces,
            &|text, piece| self.client.instant(text, piece.end),
            &mut |rows| sums.add(rows),
        )?;
        Ok(sums.finish())
    }

    /// Runs `query` (shape `At`) at `at`, host group by host group; the rows side by side.
    pub fn rows(&self, query: &Query<'_>, at: DateTime<Utc>) -> anyhow::Result<Vec<Sample>> {
        let mut all = Vec::new();
        let pieces = self.pieces(query, at, at);
        self.run(
            query,
            pieces,
            &|text, _| self.client.instant(text, at),
            &mut |rows| all.extend(rows),
        )?;
        Ok(all)
    }

    /// Runs `query` (shape `Range`) from `start` to `end`; the series joined by label set.
    pub fn range(
        &self,
        query: &Query<'_>,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
    ) -> anyhow::Result<Vec<Series>> {
        let Shape::Range { step, .. } = query.shape else {
            anyhow::bail!("a range query planned with the shape {:?}", query.shape);
        };
        // Each answer is joined series by series as it is read: the client holds what is
        // joined and one series an answer in flight, not whole answers.
        let series = Mutex::new(Ranges::default());
        let pieces = self.pieces(query, start, end);
        self.run(
            query,
            pieces,
            &|text, piece| {
                self.client
                    .range_each(text, piece.start, piece.end, step, &mut |s| {
                        series.lock().unwrap_or_else(|e| e.into_inner()).add_one(s)
                    })
            },
            &mut |()| {},
        )?;
        Ok(series
            .into_inner()
            .unwrap_or_else(|e| e.into_inner())
            .finish())
    }

    /// Runs `query` (shape `Window`, a range selector without a function) over
    /// `start`..`end`: the raw samples, each series joined by label set.
    pub fn raw(
        &self,
        query: &Query<'_>,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
    ) -> anyhow::Result<Vec<Series>> {
        let mut series = Ranges::default();
        let pieces = self.pieces(query, start, end);
        self.run(
            query,
            pieces,
            &|text, piece| self.client.instant_matrix(text, piece.end),
            &mut |rows| series.add(rows),
        )?;
        Ok(series.finish())
    }

    /// Runs `pieces` of `query`, at most [`CONCURRENT`] at once, handing each answer to
    /// `take` on this thread. A refused piece goes back to the queue as two halves.
    pub fn run<T: Send>(
        &self,
        query: &Query<'_>,
        pieces: Vec<Piece>,
        ask: &(dyn Fn(&str, &Piece) -> anyhow::Result<T> + Sync),
        take: &mut dyn FnMut(T),
    ) -> anyhow::Result<()> {
        let workers = pieces.len().clamp(1, CONCURRENT);
        let queue = Mutex::new(Queue {
            refusals_left: REFUSALS + 8 * pieces.len(),
            pieces: pieces.into(),
            running: 0,
            failed: false,
        });
        let changed = Condvar::new();
        let (answers, answered) = std::sync::mpsc::channel::<anyhow::Result<T>>();
        std::thread::scope(|scope| {
            for _ in 0..workers {
                let answers = answers.clone();
                let (queue, changed) = (&queue, &changed);
                scope.spawn(move || {
                    while let Some(piece) = next(queue, changed) {
                        let text = self.text(query, &piece);
                        let outcome = ask(&text, &piece);
                        let mut q = queue.lock().unwrap_or_else(|e| e.into_inner());
                        q.running -= 1;
                        match outcome {
                            Ok(answer) => {
                                drop(q);
                                let _ = answers.send(Ok(answer));
                            }
                            Err(error) => match self.halves(query, &piece, &error, q.refusals_left)
                            {
                                Ok((a, b)) => {
                                    q.refusals_left -= 1;
                                    q.pieces.push_back(a);
                                    q.pieces.push_back(b);
                                }
                                Err(error) => {
                                    q.failed = true;
                                    drop(q);
                                    let _ = answers.send(Err(error));
                                }
                            },
                        }
                        changed.notify_all();
                    }
                });
            }
            drop(answers);
            let mut first_error = None;
            for answer in answered {
                match answer {
                    Ok(answer) if first_error.is_none() => take(answer),
                    Ok(_) => {}
                    Err(error) => {
                        first_error.get_or_insert(error);
                    }
                }
            }
            first_error.map_or(Ok(()), Err)
        })
    }

    /// The two halves of a refused piece, or the error to fail with: not a refusal, or a
    /// piece too small to split the way the refusal asks.
    fn halves(
        &self,
        query: &Query<'_>,
        piece: &Piece,
        error: &anyhow::Error,
        refusals_left: usize,
    ) -> anyhow::Result<(Piece, Piece)> {
        let Some(refused) = refusal(error) else {
            return Err(anyhow::anyhow!("{error:#}"));
        };
        anyhow::ensure!(
            refusals_left > 0,
            "{error:#}\nthe store refused this query's pieces too many times over, however small; raise the store's limit ({}) or ask for a shorter period",
            hint(refused.limit)
        );
        let by_hosts = self.split_hosts(query, piece);
        let by_time = split_window(query.shape, piece);
        let halves = match refused.limit {
            Limit::Series | Limit::Length => by_hosts,
            Limit::Points => by_time,
            Limit::Samples => by_hosts.or(by_time),
        };
        match halves {
            Some((a, b)) if piece.depth < MAX_DEPTH => {
                self.refusals.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(
                    limit = ?refused.limit,
                    hosts = self.hosts_in(piece),
                    window = %shard::duration((piece.end - piece.start).num_milliseconds()),
                    said = %refused.message,
                    "the store refused a piece for its size; asking for it in two halves"
                );
                Ok((a, b))
            }
            _ => Err(anyhow::anyhow!(
                "{error:#}\nthe store refuses this query even for {} host(s) over {}; raise the store's limit ({}) or ask for a shorter period",
                self.hosts_in(piece),
                shard::duration((piece.end - piece.start).num_milliseconds()),
                hint(refused.limit)
            )),
        }
    }

    fn hosts_in(&self, piece: &Piece) -> usize {
        piece
            .hosts
            .as_ref()
            .map_or(self.census.hosts.len(), |r| r.len())
    }

    fn split_hosts(&self, query: &Query<'_>, piece: &Piece) -> Option<(Piece, Piece)> {
        if !query.by_host {
            return None;
        }
        let range = piece.hosts.clone().unwrap_or(0..self.census.hosts.len());
        if range.len() < 2 {
            return None;
        }
        let middle = range.start + range.len() / 2;
        let half = |hosts| Piece {
            hosts: Some(hosts),
            depth: piece.depth + 1,
            ..piece.clone()
        };
        Some((half(range.start..middle), half(middle..range.end)))
    }
}

/// The next piece to ask for; `None` once every piece is answered or one failed.
fn next(queue: &Mutex<Queue>, changed: &Condvar) -> Option<Piece> {
    let mut q = queue.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if q.failed {
            return None;
        }
        if let Some(piece) = q.pieces.pop_front() {
            q.running += 1;
            return Some(piece);
        }
        if q.running == 0 {
            return None;
        }
        q = changed.wait(q).unwrap_or_else(|e| e.into_inner());
    }
}

/// A piece's window in two halves (see `split_time`), if it has two steps to split.
fn split_window(shape: Shape, piece: &Piece) -> Option<(Piece, Piece)> {
    let spans = super::split_time(shape, piece.start, piece.end, 2);
    let [(a0, a1), (b0, b1)] = spans.as_slice() else {
        return None;
    };
    let half = |start, end| Piece {
        start,
        end,
        depth: piece.depth + 1,
        ..piece.clone()
    };
    Some((half(*a0, *a1), half(*b0, *b1)))
}

/// What to raise for a limit.
fn hint(limit: Limit) -> &'static str {
    match limit {
        Limit::Series => {
            "VictoriaMetrics -search.maxUniqueTimeseries, Mimir/Thanos series per query"
        }
        Limit::Points => {
            "VictoriaMetrics -search.maxPointsPerTimeseries, the frontend's query length"
        }
        Limit::Samples => {
            "Prometheus --query.max-samples, VictoriaMetrics -search.maxSamplesPerQuery, Mimir/Thanos chunks per query"
        }
        Limit::Length => "VictoriaMetrics -search.maxQueryLen",
    }
}
