//! A store refusing a query for its size, told apart from every other failure by the text of
//! its answer: the stores say which limit a query crossed in words, not in a status code
//! (Prometheus answers 422 for a query that loads too many samples and for one that is
//! wrong in other ways; VictoriaMetrics answers 422 for nearly everything).
//!
//! What each store says, and which way a smaller query goes under the limit:
//!
//! | store | message (excerpt) | limit | smaller by |
//! |---|---|---|---|
//! | Prometheus, Thanos Query | `query processing would load too many samples into memory` | `--query.max-samples` | hosts or time |
//! | Prometheus | `exceeded maximum resolution of 11,000 points per timeseries` | range query points | time |
//! | Prometheus | `query timed out in expression evaluation` | `--query.timeout` | hosts or time |
//! | VictoriaMetrics | `too many points … cannot exceed -search.maxPointsPerTimeseries` (also `…SubqueryPerTimeseries`) | points a series | time |
//! | VictoriaMetrics | `cannot select more than -search.maxSamplesPerQuery` | raw samples a query | hosts or time |
//! | VictoriaMetrics | `cannot process more than … samples per series` (`-search.maxSamplesPerSeries`) | raw samples a series | time |
//! | VictoriaMetrics | `the number of matching timeseries exceeds` (`-search.maxUniqueTimeseries`, `-search.maxSeries`) | series | hosts |
//! | VictoriaMetrics | `too long query; … -search.maxQueryLen` | query text | hosts (a shorter matcher) |
//! | VictoriaMetrics | `not enough memory for processing` | memory a query | hosts or time |
//! | VictoriaMetrics | `-search.maxQueryDuration` | time a query | hosts or time |
//! | Thanos Store, Cortex | `exceeded series limit` / `exceeded chunks limit` / `exceeded bytes limit` | store gateway | hosts / hosts or time |
//! | Mimir | `the query exceeded the maximum number of series` (`err-mimir-max-series-per-query`) | series | hosts |
//! | Mimir | `maximum number of chunks`, `aggregated chunks size`, `estimated number of chunks`, `estimated amount of memory` | chunks, bytes, memory | hosts or time |
//! | Mimir, Cortex, Thanos and Loki frontends | `the query time range exceeds the limit`, `the total query time range exceeds the limit` | query length | time |

use std::fmt;

/// Which way a refused query must shrink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// Too many series: fewer hosts per query.
    Series,
    /// Too many points a series, or too long a range: a shorter window.
    Points,
    /// Too many samples, chunks, bytes, memory or time in all: fewer hosts, or a shorter window.
    Samples,
    /// The query's text is too long: fewer hosts in its matcher.
    Length,
}

/// Phrases of each store's refusals (lower case), and the limit each names.
const PHRASES: &[(&str, Limit)] = &[
    ("would load too many samples into memory", Limit::Samples),
    ("exceeded maximum resolution of", Limit::Points),
    ("query timed out in expression evaluation", Limit::Samples),
    ("maxpointspertimeseries", Limit::Points),
    ("maxpointssubquerypertimeseries", Limit::Points),
    ("too many points for the given step", Limit::Points),
    ("maxsamplesperquery", Limit::Samples),
    ("maxsamplesperseries", Limit::Points),
    ("samples per series", Limit::Points),
    ("the number of matching timeseries exceeds", Limit::Series),
    ("maxuniquetimeseries", Limit::Series),
    ("-search.maxseries", Limit::Series),
    ("too long query", Limit::Length),
    ("maxquerylen", Limit::Length),
    ("not enough memory for processing", Limit::Samples),
    ("maxqueryduration", Limit::Samples),
    ("exceeded series limit", Limit::Series),
    ("exceeded chunks limit", Limit::Samples),
    ("exceeded bytes limit", Limit::Samples),
    ("maximum number of series", Limit::Series),
    ("err-mimir-max-series-per-query", Limit::Series),
    ("maximum number of chunks", Limit::Samples),
    ("aggregated chunks size", Limit::Samples),
    ("estimated number of chunks", Limit::Samples),
    ("estimated amount of memory", Limit::Samples),
    ("query time range exceeds the limit", Limit::Points),
];

/// The limit a store's error message names, if it names one.
pub fn classify(message: &str) -> Option<Limit> {
    let lower = message.to_ascii_lowercase();
    PHRASES
        .iter()
        .find(|(phrase, _)| lower.contains(phrase))
        .map(|(_, limit)| *limit)
}

/// A query the store (or this client's cap on answers in flight) refused for its size: a
/// smaller query may pass. Carried as the source of the client's error, so a caller that
/// can split the query finds it with `downcast_ref`.
#[derive(Debug, Clone)]
pub struct Refused {
    pub limit: Limit,
    /// What the store said (credentials never appear in it: the client scrubs them).
    pub message: String,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Refused {}

/// The refusal in `error`'s chain, if the query was refused for its size.
pub fn refusal(error: &anyhow::Error) -> Option<&Refused> {
    error.chain().find_map(|e| e.downcast_ref::<Refused>())
}

/// The store answered, but not as the endpoint asked answers: a body that is not a
/// Prometheus API answer, or an error that is not about the query's size (a proxy serving
/// only some endpoints, a matcher the store does not take). The query's planning can do
/// without what it asked; the query itself cannot.
#[derive(Debug)]
pub struct Misunderstood(pub(super) String);

impl fmt::Display for Misunderstood {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Misunderstood {}

/// Whether `error` is the store answering something else than asked ([`Misunderstood`]).
pub fn misunderstood(error: &anyhow::Error) -> bool {
    error.chain().any(|e| e.is::<Misunderstood>())
}
