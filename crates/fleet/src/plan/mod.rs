//! Queries sized by the store's limits, not by the period: each query the fleet commands
//! send is cut into pieces — windows of time and groups of hosts — so that no piece asks
//! the store for more than it allows, and the pieces' answers are merged here
//! ([`merge`], linear in the series).
//!
//! A piece's cost is estimated from what the store's index says ([`census`]: the series of
//! each family per host, and the scrape interval) and the query's shape ([`Shape`]): a
//! subquery holds every series it reads at every one of its steps in memory, a range query
//! its output, a range function one series' samples at a time. The limits ([`Limits`]) are
//! Prometheus's `--query.max-samples` where the store says it (`/api/v1/status/flags`), else
//! its default; at most 10,000 points a series (Prometheus refuses range queries over
//! 11,000, VictoriaMetrics anything over 30,000 by default); VictoriaMetrics's default
//! bounds on raw samples, series and query length with room to spare. A store whose limits
//! are lower than estimated refuses a piece ([`crate::prom::Refused`]): that piece is
//! split again in two, by hosts or by time as the refusal says ([`run`]), down to one host
//! and one step, and only a piece that small being refused fails the command, naming the
//! limit.

pub mod census;
pub mod merge;
mod run;
pub(crate) mod shard;
#[cfg(test)]
mod tests;

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

pub use census::Census;
use shard::host_matcher;

use super::prom::Client;

/// What one query may cost the store.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Samples one query may hold in memory at once (Prometheus `--query.max-samples`),
    /// with room for the estimate's error.
    pub(crate) peak_samples: u64,
    /// Points a series: range query steps and subquery steps.
    pub steps: u64,
    /// Raw samples one query may read (VictoriaMetrics `-search.maxSamplesPerQuery`).
    pub(crate) raw_samples: u64,
    /// Points one answer may carry (its JSON is about 25 bytes a point).
    pub output_points: u64,
    /// Series one query may select (VictoriaMetrics `-search.maxUniqueTimeseries`).
    pub series: u64,
    /// Bytes of query text (VictoriaMetrics `-search.maxQueryLen`, 16 KiB).
    pub(crate) query_bytes: usize,
}

/// Prometheus's default `--query.max-samples`.
pub(crate) const PROMETHEUS_MAX_SAMPLES: u64 = 50_000_000;

impl Limits {
    /// The limits for a store that allows `max_samples` samples in memory a query.
    pub fn with_max_samples(max_samples: u64) -> Limits {
        Limits {
            // Half: the estimate counts the series the index lists, not the samples the
            // store will find, and a subquery's operands are estimated, not measured.
            peak_samples: (max_samples / 2).max(1),
            steps: 10_000,
            raw_samples: 250_000_000,
            output_points: 1_000_000,
            series: 100_000,
            query_bytes: 12_000,
        }
    }

    /// The store's own `--query.max-samples` when it says it (Prometheus and Thanos serve
    /// their flags), `given` when the command line gives it, else Prometheus's default; the
    /// points of one answer as the client's cap on answers in flight allows, shared by the
    /// queries in flight (about 40 bytes of JSON a point).
    pub fn of(client: &Client, given: Option<u64>) -> Limits {
        let max = given.or_else(|| {
            client
                .flag("query.max-samples")
                .and_then(|v| v.trim().parse().ok())
        });
        let mut limits = Limits::with_max_samples(max.unwrap_or(PROMETHEUS_MAX_SAMPLES));
        let share = client.answer_budget() / (super::prom::CONCURRENT * 40);
        limits.output_points = limits.output_points.min(share.max(1) as u64);
        limits
    }
}

/// How the store evaluates a query, which says what a piece of it costs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Shape {
    /// An instant query at the end of its piece over the piece's window (`[W]`, and
    /// `[W:step]` where `step` is given: a subquery, whose inner expression the store holds
    /// for every series at every step). Its rows add up over windows and host groups.
    Window { step: Option<Duration> },
    /// A range query stepping `step` over the piece, each step reading `window` of samples.
    Range { step: Duration, window: Duration },
    /// An instant query at one time over `window` of samples; only host groups split it.
    At { window: Duration },
    /// An instant query over the piece's window of series sampled once `every` at
    /// `phase` past it (recording rules' records): sums over it add up over windows, whose
    /// boundaries fall halfway between two samples.
    Recorded { every: Duration, phase: Duration },
    /// The same, answering the raw samples themselves (`family[W]`).
    Raw { every: Duration, phase: Duration },
}

/// One query to plan: the families it reads, its shape and its text for a piece.
pub struct Query<'a> {
    /// Families read, each with the times the query reads it (a subquery's operands).
    pub reads: Vec<(String, f64)>,
    pub shape: Shape,
    /// Whether pieces may split the hosts: false for a query that aggregates across them.
    pub by_host: bool,
    /// Whether the store holds every series it selects at every step (a plain selector),
    /// rather than a GPU's series one after the other (a GPU's series change labels with the
    /// pod on it, so the GPUs are what a subquery or a range function holds at a time).
    pub per_series: bool,
    /// The text for a piece, given the host matcher (empty: every host) and the window.
    pub text: Box<dyn Fn(&Part<'_>) -> String + Sync + 'a>,
}

/// What a piece's text is written with.
pub struct Part<'p> {
    /// `instance=~"…"` for a group of hosts; empty for all of them.
    pub hosts: &'p str,
    /// The piece's window as a PromQL duration (`Window` shape), else empty.
    pub window: &'p str,
}

/// One piece of a query: a group of hosts over a stretch of time.
#[derive(Debug, Clone, PartialEq)]
pub struct Piece {
    /// Indices into the census's hosts; `None`: every series, no matcher.
    pub hosts: Option<Range<usize>>,
    /// `Window`: the window `(start, end]`, evaluated at `end`; `Range`: the first and last
    /// step; `At`: both the evaluation time.
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    /// Times a refusal split it.
    depth: u32,
}

/// Plans queries against one store's census and runs them.
pub struct Planner<'c> {
    pub client: &'c Client,
    pub limits: Limits,
    pub census: Census,
    /// The scrape interval of the families planned for.
    pub interval: Duration,
    /// Refused pieces, counted with those of the planners sharing the counter.
    refusals: Arc<AtomicUsize>,
}

/// Raw samples a query reads above which it is asked in two halves side by side.
const PARALLEL_RAW: u64 = 10_000_000;

/// Windows a query is cut into at most before planning stops halving them.
const MAX_WINDOWS: u64 = 1 << 14;

impl<'c> Planner<'c> {
    pub fn new(client: &'c Client, limits: Limits, census: Census, interval: Duration) -> Self {
        Planner {
            client,
            limits,
            census,
            interval: interval.max(Duration::from_millis(1)),
            refusals: Arc::default(),
        }
    }

    /// The same planner counting its refusals into `counter` (one report's planners
    /// together).
    pub fn counting_into(mut self, counter: Arc<AtomicUsize>) -> Self {
        self.refusals = counter;
        self
    }

    /// Pieces the store refused and that were asked for again in halves.
    pub fn refusals(&self) -> usize {
        self.refusals.load(Ordering::Relaxed)
    }

    /// The matcher of a piece's hosts (empty for all).
    pub fn matcher(&self, piece: &Piece) -> String {
        match &piece.hosts {
            None => String::new(),
            Some(range) => host_matcher(&self.census.host_label, &self.census.hosts, range.clone()),
        }
    }

    /// The text of `query` for `piece`.
    pub fn text(&self, query: &Query<'_>, piece: &Piece) -> String {
        let hosts = self.matcher(piece);
        let window = match query.shape {
            Shape::Window { .. } | Shape::Recorded { .. } | Shape::Raw { .. } => {
                shard::duration((piece.end - piece.start).num_milliseconds())
            }
            _ => String::new(),
        };
        (query.text)(&Part {
            hosts: &hosts,
            window: &window,
        })
    }

    /// The pieces of `query` over `start`..`end`, each within the limits as estimated:
    /// windows as long as the points a series allow, then groups of whole hosts as large as
    /// the rest allows; where one host does not fit a window, shorter windows.
    pub fn pieces(
        &self,
        query: &Query<'_>,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
    ) -> Vec<Piece> {
        let mut windows = match query.shape {
            Shape::At { .. } => 1,
            _ => self
                .steps(query.shape, start, end)
                .div_ceil(self.limits.steps)
                .max(1),
        };
        loop {
            let spans = split_time(query.shape, start, end, windows);
            let groups = self
                .groups(query, &spans)
                .map(|groups| self.halved(query, &spans, groups));
            match groups {
                Some(groups) => {
                    return spans
                        .iter()
                        .flat_map(|(a, b)| {
                            groups.iter().map(move |hosts| Piece {
                                hosts: hosts.clone(),
                                start: *a,
                                end: *b,
                                depth: 0,
                            })
                        })
                        .collect();
                }
                None if windows < MAX_WINDOWS && spans.len() as u64 == windows => windows *= 2,
                // As small as planning makes it: the store's answer decides the rest.
                None => {
                    let hosts = (0..self.census.hosts.len()).map(|i| Some(i..i + 1));
                    let groups: Vec<Option<Range<usize>>> =
                        if self.census.hosts.is_empty() || !query.by_host {
                            vec![None]
                        } else {
                            hosts.collect()
                        };
                    return spans
                        .iter()
                        .flat_map(|(a, b)| {
                            groups.iter().map(move |hosts| Piece {
                                hosts: hosts.clone(),
                                start: *a,
                                end: *b,
                                depth: 0,
                            })
                        })
                        .collect();
                }
            }
        }
    }

    /// A large query that fits in one piece, in two host groups instead: the store
    /// evaluates a query on one core, and two halves side by side take about half as long
    /// where it has a core to spare.
    fn halved(
        &self,
        query: &Query<'_>,
        spans: &[(DateTime<Utc>, DateTime<Utc>)],
        groups: Vec<Option<Range<usize>>>,
    ) -> Vec<Option<Range<usize>>> {
        let n = self.census.hosts.len();
        let [None] = groups.as_slice() else {
            return groups;
        };
        let Some(&(start, end)) = spans.first() else {
            return groups;
        };
        let whole = Piece {
            hosts: None,
            start,
            end,
            depth: 0,
        };
        if spans.len() == 1
            && query.by_host
            && n >= 2
            && self.cost(query, &whole).raw > PARALLEL_RAW
        {
            vec![Some(0..n / 2), Some(n / 2..n)]
        } else {
            groups
        }
    }

    /// Host groups for pieces over `spans` (the longest decides), or None when one host
    /// does not fit.
    fn groups(
        &self,
        query: &Query<'_>,
        spans: &[(DateTime<Utc>, DateTime<Utc>)],
    ) -> Option<Vec<Option<Range<usize>>>> {
        let (a, b) = spans.iter().copied().max_by_key(|(a, b)| *b - *a)?;
        let probe = |hosts: Option<Range<usize>>| Piece {
            hosts,
            start: a,
            end: b,
            depth: 0,
        };
        if self.fits(query, &probe(None)) {
            return Some(vec![None]);
        }
        let n = self.census.hosts.len();
        if !query.by_host || n < 2 {
            return None;
        }
        let mut groups = Vec::new();
        let mut first = 0;
        while first < n {
            if !self.fits(query, &probe(Some(first..first + 1))) {
                return None;
            }
            // The largest group from `first` that fits: costs grow with the hosts added.
            let (mut lo, mut hi) = (first + 1, n);
            while lo < hi {
                let mid = (lo + hi).div_ceil(2);
                if self.fits(query, &probe(Some(first..mid))) {
                    lo = mid;
                } else {
                    hi = mid - 1;
                }
            }
            groups.push(Some(first..lo));
            first = lo;
        }
        Some(groups)
    }

    /// Steps of the piece's time dimension (subquery or range steps; 1 otherwise).
    fn steps(&self, shape: Shape, start: DateTime<Utc>, end: DateTime<Utc>) -> u64 {
        let span = (end - start).num_milliseconds().max(0) as u64;
        match shape {
            Shape::Window { step: Some(step) } => span / (step.as_millis().max(1) as u64),
            Shape::Range { step, .. } => span / (step.as_millis().max(1) as u64) + 1,
            _ => 1,
        }
    }

    /// Whether a piece is within every limit, as estimated.
    pub fn fits(&self, query: &Query<'_>, piece: &Piece) -> bool {
        let cost = self.cost(query, piece);
        let limits = &self.limits;
        cost.peak <= limits.peak_samples
            && cost.steps <= limits.steps
            && cost.raw <= limits.raw_samples
            && cost.output <= limits.output_points
            && cost.series <= limits.series
            && self.text(query, piece).len() <= limits.query_bytes
    }

    /// What a piece costs the store, as estimated.
    fn cost(&self, query: &Query<'_>, piece: &Piece) -> Cost {
        let unlabelled = piece
            .hosts
            .as_ref()
            .is_none_or(|r| r.end >= self.census.hosts.len());
        // `live`: the series a subquery or range query holds at each step, operands
        // counted as often as they are read; `selected`: the series the query selects.
        let mut live = 0.0;
        let mut selected = 0u64;
        for (family, times) in &query.reads {
            let gpus = self.census.gpus(family, piece.hosts.clone(), unlabelled);
            live += gpus as f64 * times;
            selected += self.census.series(family, piece.hosts.clone(), unlabelled);
        }
        let series = selected as f64;
        if query.per_series {
            live = series;
        }
        let interval = self.interval.as_millis().max(1) as f64;
        let span = (piece.end - piece.start).num_milliseconds().max(0) as f64;
        let steps = self.steps(query.shape, piece.start, piece.end);
        let read = live.max(series);
        let (peak, raw, output) = match query.shape {
            Shape::Window { step: Some(_) } => {
                (live * steps as f64, read * span / interval, series)
            }
            Shape::Window { step: None } => {
                (series + span / interval, read * span / interval, series)
            }
            Shape::Range { window, .. } => {
                let window = window.as_millis() as f64;
                let raw = read * (span + window) / interval;
                (live * steps as f64, raw, live * steps as f64)
            }
            Shape::At { window } => {
                let window = window.as_millis() as f64;
                (series + window / interval, read * window / interval, series)
            }
            Shape::Recorded { every, .. } => {
                let per_series = span / every.as_millis().max(1) as f64 + 1.0;
                (series + per_series, series * per_series, series)
            }
            Shape::Raw { every, .. } => {
                let points = series * (span / every.as_millis().max(1) as f64 + 1.0);
                (points, points, points)
            }
        };
        Cost {
            peak: peak.ceil() as u64,
            steps,
            raw: raw.ceil() as u64,
            output: output.ceil() as u64,
            series: selected,
        }
    }
}

/// A piece's cost: samples held at once, steps a series, raw samples read, points
/// answered, series selected.
#[derive(Debug, Clone, Copy)]
struct Cost {
    peak: u64,
    steps: u64,
    raw: u64,
    output: u64,
    series: u64,
}

/// `windows` stretches covering `start`..`end`. A window query's stretches meet half a
/// subquery step off the step grid, so no step the store aligns to the clock falls on a
/// boundary and counts twice (or not at all); a range query's meet between steps.
fn split_time(
    shape: Shape,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    windows: u64,
) -> Vec<(DateTime<Utc>, DateTime<Utc>)> {
    let span = (end - start).num_milliseconds();
    if windows <= 1 || span <= 0 {
        return vec![(start, end)];
    }
    // Where boundaries may fall: (grid, offset), both in milliseconds.
    let grid = match shape {
        Shape::At { .. } => return vec![(start, end)],
        Shape::Range { .. } => None,
        Shape::Window { step: Some(step) } => {
            let step = step.as_millis().max(1) as i64;
            Some((step, step / 2))
        }
        Shape::Window { step: None } => Some((1000, 0)),
        Shape::Recorded { every, phase } | Shape::Raw { every, phase } => {
            let every = every.as_millis().max(1) as i64;
            Some((every, (phase.as_millis() as i64 + every / 2) % every))
        }
    };
    match grid {
        Some((grid, offset)) => {
            let mut bounds = vec![start];
            for k in 1..windows as i64 {
                let at = start.timestamp_millis() + span * k / windows as i64;
                let at = (at - offset).div_euclid(grid) * grid + offset;
                let at = DateTime::from_timestamp_millis(at).unwrap_or(end);
                if at > *bounds.last().unwrap_or(&start) && at < end {
                    bounds.push(at);
                }
            }
            bounds.push(end);
            bounds.windows(2).map(|w| (w[0], w[1])).collect()
        }
        None => {
            let Shape::Range { step, .. } = shape else {
                return vec![(start, end)];
            };
            let step = TimeDelta::milliseconds(step.as_millis().max(1) as i64);
            let steps = span / step.num_milliseconds() + 1;
            let per = (steps as u64).div_ceil(windows).max(1) as i64;
            let mut out = Vec::new();
            let mut first = 0;
            while first < steps {
                let last = (first + per).min(steps) - 1;
                out.push((start + step * first as i32, start + step * last as i32));
                first = last + 1;
            }
            out
        }
    }
}
