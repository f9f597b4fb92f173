//! What the store holds that a query's plan depends on, asked without reading samples: the
//! hosts (`/api/v1/label/HOST/values`), each host's series of the families a query reads
//! (`/api/v1/series`, itself asked in host groups when the store refuses the whole fleet at
//! once), and the interval the samples were scraped at (the spacing of one host's raw
//! samples).

use std::collections::HashMap;
use std::ops::Range;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use super::shard::host_matcher;
use crate::prom::{Client, misunderstood, refusal};

/// Splits of the census's own series listing before it gives up: 2^12 host groups.
const MAX_SPLITS: u32 = 12;

/// The hosts and their series over a span.
#[derive(Debug, Clone, Default)]
pub struct Census {
    /// The label naming a GPU's host (`instance`, or dcgm-exporter's `Hostname`).
    pub(crate) host_label: String,
    /// Every host with a series of the families asked about, sorted.
    pub hosts: Vec<String>,
    /// Series per family: per host (as `hosts` orders them), and those without the label.
    families: HashMap<String, Counts>,
}

/// One family's series and GPUs, per host and without a host.
#[derive(Debug, Clone, Default)]
struct Counts {
    per_host: Vec<u64>,
    unlabelled: u64,
    /// Distinct GPUs (`gpu` label) per host: the series alive at one time, where a GPU's
    /// series change labels with the pod on it.
    gpus: Vec<u64>,
    unlabelled_gpus: u64,
}

impl Census {
    /// A census that knows nothing: one piece per time window, no host groups (tests and
    /// benchmarks that plan by hand).
    pub fn unknown(host_label: &str) -> Census {
        Census {
            host_label: host_label.to_string(),
            ..Census::default()
        }
    }

    /// A census of `hosts`, each with `per_host` series (one a GPU) of each family given
    /// (tests and benchmarks).
    pub fn synthetic(host_label: &str, hosts: Vec<String>, families: &[(&str, u64)]) -> Census {
        let n = hosts.len();
        Census {
            host_label: host_label.to_string(),
            families: families
                .iter()
                .map(|(family, per_host)| {
                    let counts = Counts {
                        per_host: vec![*per_host; n],
                        gpus: vec![*per_host; n],
                        ..Counts::default()
                    };
                    (family.to_string(), counts)
                })
                .collect(),
            hosts,
        }
    }

    /// The hosts and series of `families` with samples between `start` and `end`.
    pub fn take(
        client: &Client,
        host_label: &str,
        families: &[&str],
        start: DateTime<Utc>,
        end: DateTime<Utc>,
    ) -> anyhow::Result<Census> {
        Census::take_matching(client, host_label, families, "", start, end)
    }

    /// The same, of the series `matcher` (`instance="node-1"`; empty: all) matches. A store
    /// whose index does not answer (a proxy that serves only the query endpoints) gets a
    /// warning and a census that knows nothing: its queries are split only when it refuses
    /// them.
    pub(crate) fn take_matching(
        client: &Client,
        host_label: &str,
        families: &[&str],
        matcher: &str,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
    ) -> anyhow::Result<Census> {
        match Census::listed(client, host_label, families, matcher, start, end) {
            Ok(census) => Ok(census),
            // An unreachable store or refused credentials fail the command now.
            Err(error) if misunderstood(&error) || refusal(&error).is_some() => {
                tracing::warn!(
                    "{:#}; planning without the store's index: queries are split only when the store refuses them",
                    error
                );
                Ok(Census::unknown(host_label))
            }
            Err(error) => Err(error),
        }
    }

    fn listed(
        client: &Client,
        host_label: &str,
        families: &[&str],
        matcher: &str,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
    ) -> anyhow::Result<Census> {
        let mut names = format!("__name__=~\"{}\"", families.join("|"));
        if !matcher.is_empty() {
            names = format!("{names},{matcher}");
        }
        let mut hosts: Vec<String> = client
            .label_values(host_label, &format!("{{{names}}}"), start, end)?
            .into_iter()
            .filter(|h| !h.is_empty())
            .collect();
        hosts.sort();
        hosts.dedup();
        let mut census = Census {
            host_label: host_label.to_string(),
            families: families
                .iter()
                .map(|f| {
                    let counts = Counts {
                        per_host: vec![0; hosts.len()],
                        gpus: vec![0; hosts.len()],
                        ..Counts::default()
                    };
                    (f.to_string(), counts)
                })
                .collect(),
            hosts,
        };
        let index: HashMap<String, usize> = census
            .hosts
            .iter()
            .enumerate()
            .map(|(i, h)| (h.clone(), i))
            .collect();
        let mut seen: std::collections::HashSet<(String, String, String)> = Default::default();
        let mut pending: Vec<(Option<Range<usize>>, u32)> = vec![(None, 0)];
        while let Some((group, depth)) = pending.pop() {
            let matcher = match &group {
                None => format!("{{{names}}}"),
                Some(range) => format!(
                    "{{{names},{}}}",
                    host_matcher(host_label, &census.hosts, range.clone())
                ),
            };
            match client.series(&matcher, start, end) {
                Ok(series) => {
                    for labels in series {
                        let label = |name: &str| labels.get(name).cloned().unwrap_or_default();
                        let family = label("__name__");
                        let Some(counts) = census.families.get_mut(&family) else {
                            continue;
                        };
                        let host = label(host_label);
                        // Without a `gpu` label each series is one of its own.
                        let gpu = labels
                            .get("gpu")
                            .cloned()
                            .unwrap_or_else(|| format!("{labels:?}"));
                        let new_gpu = seen.insert((family, host.clone(), gpu));
                        match index.get(&host) {
                            Some(&i) => {
                                counts.per_host[i] += 1;
                                counts.gpus[i] += u64::from(new_gpu);
                            }
                            None => {
                                counts.unlabelled += 1;
                                counts.unlabelled_gpus += u64::from(new_gpu);
                            }
                        }
                    }
                }
                Err(error) if refusal(&error).is_some() && depth < MAX_SPLITS => {
                    let range = group.unwrap_or(0..census.hosts.len());
                    anyhow::ensure!(
                        range.len() >= 2,
                        "{error:#}: the store refuses to list the series of one host"
                    );
                    tracing::debug!(
                        hosts = range.len(),
                        "the store refused to list the series of that many hosts; asking in halves"
                    );
                    let middle = range.start + range.len() / 2;
                    pending.push((Some(range.start..middle), depth + 1));
                    pending.push((Some(middle..range.end), depth + 1));
                }
                Err(error) => return Err(error),
            }
        }
        Ok(census)
    }

    /// Counts `family` as `by`'s series, without listing it: for a record kept per series
    /// of `by` or fewer (an hourly rule's `avg_over_time`, or a `sum by` over labels `by`'s
    /// series all carry), taken over a span that starts the rule's range earlier, `by`'s
    /// series and GPUs per host are at least the record's. Nothing when `by` was not counted.
    pub fn bound(&mut self, family: &str, by: &str) {
        if let Some(counts) = self.families.get(by).cloned() {
            self.families.insert(family.to_string(), counts);
        }
    }

    /// Series of `family` on the hosts in `hosts` (all of them when None); `unlabelled`
    /// adds those without the host label.
    pub fn series(&self, family: &str, hosts: Option<Range<usize>>, unlabelled: bool) -> u64 {
        let Some(counts) = self.families.get(family) else {
            return 0;
        };
        let range = hosts.unwrap_or(0..counts.per_host.len());
        let named: u64 = counts.per_host.get(range).map_or(0, |c| c.iter().sum());
        named + if unlabelled { counts.unlabelled } else { 0 }
    }

    /// GPUs with series of `family` on the hosts in `hosts` (see [`Census::series`]).
    pub fn gpus(&self, family: &str, hosts: Option<Range<usize>>, unlabelled: bool) -> u64 {
        let Some(counts) = self.families.get(family) else {
            return 0;
        };
        let range = hosts.unwrap_or(0..counts.gpus.len());
        let named: u64 = counts.gpus.get(range).map_or(0, |c| c.iter().sum());
        named
            + if unlabelled {
                counts.unlabelled_gpus
            } else {
                0
            }
    }

    /// The host with the most series of `family`, if any.
    pub fn busiest(&self, family: &str) -> Option<&str> {
        let counts = self.families.get(family)?;
        let (i, _) = counts
            .per_host
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .max_by_key(|(i, n)| (**n, std::cmp::Reverse(*i)))?;
        self.hosts.get(i).map(String::as_str)
    }
}

/// The interval `family`'s samples were scraped at: the median spacing of the raw samples
/// of its busiest host's series in the quarter hour before `to`, else before the middle of
/// the period, else in its first quarter hour. `None` when none of those has two samples in
/// a series (or the store refuses even that, or answers something else); an unreachable
/// store is an error.
pub fn scrape_interval(
    client: &Client,
    census: &Census,
    family: &str,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> anyhow::Result<Option<Duration>> {
    let Some(host) = census.busiest(family) else {
        return Ok(None);
    };
    let window = TimeDelta::minutes(15);
    let selector = format!(
        "{family}{{{}=\"{}\"}}[{}s]",
        census.host_label,
        super::shard::quote(host),
        window.num_seconds()
    );
    let middle = from + (to - from) / 2;
    for at in [to, middle, (from + window).min(to)] {
        let series = match client.instant_matrix(&selector, at) {
            Ok(series) => series,
            Err(error) if misunderstood(&error) || refusal(&error).is_some() => continue,
            Err(error) => return Err(error),
        };
        let mut gaps: Vec<i64> = series
            .iter()
            .flat_map(|s| s.points.windows(2))
            .map(|pair| (pair[1].0 - pair[0].0).num_milliseconds())
            .filter(|gap| *gap > 0)
            .collect();
        if gaps.is_empty() {
            continue;
        }
        gaps.sort_unstable();
        let median = gaps[gaps.len() / 2];
        return Ok(Some(Duration::from_millis(median.unsigned_abs())));
    }
    Ok(None)
}
