//! The pieces' answers put back together, in time linear in the series: each label set is
//! hashed once into a table of the series seen so far, never compared against all of them.
//!
//! - [`Sums`]: instant answers of a quantity that adds up over time windows and host
//!   groups (GPU-seconds held, samples counted): values of the same label set are added.
//! - [`Ranges`]: range answers (and raw samples): points of the same label set are joined,
//!   in time order, a point that two pieces both answered (a window's closed edge) kept once.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};

use chrono::{DateTime, Utc};

use crate::prom::{Sample, Series};

type Labels = std::collections::BTreeMap<String, String>;

/// Values added up by label set.
#[derive(Debug, Default)]
pub struct Sums {
    values: HashMap<Labels, f64>,
}

impl Sums {
    pub fn add(&mut self, rows: Vec<Sample>) {
        for row in rows {
            *self.values.entry(row.labels).or_default() += row.value;
        }
    }

    /// The rows, ordered by label set (the same answer gives the same order).
    pub fn finish(self) -> Vec<Sample> {
        let mut rows: Vec<Sample> = self
            .values
            .into_iter()
            .map(|(labels, value)| Sample { labels, value })
            .collect();
        rows.sort_by(|a, b| a.labels.cmp(&b.labels));
        rows
    }
}

/// Series joined by label set. The table holds each label set's hash and where its series
/// is, not a second copy of the labels: a hundred thousand series' label sets are most of
/// what the join holds. Label sets whose hashes collide are kept aside.
#[derive(Debug, Default)]
pub struct Ranges {
    hasher: RandomState,
    at: HashMap<u64, usize>,
    collided: HashMap<u64, Vec<usize>>,
    series: Vec<Series>,
}

impl Ranges {
    pub fn add(&mut self, parts: Vec<Series>) {
        for part in parts {
            self.add_one(part);
        }
    }

    /// Joins one series (as a streamed answer hands them on).
    pub(crate) fn add_one(&mut self, part: Series) {
        let hash = self.hasher.hash_one(&part.labels);
        let same = |i: &usize| self.series[*i].labels == part.labels;
        let found = match self.at.get(&hash) {
            Some(i) if same(i) => Some(*i),
            Some(_) => self
                .collided
                .get(&hash)
                .and_then(|slots| slots.iter().copied().find(|i| same(i))),
            None => None,
        };
        match found {
            Some(i) => self.series[i].points.extend(part.points),
            None => {
                let i = self.series.len();
                match self.at.entry(hash) {
                    std::collections::hash_map::Entry::Occupied(_) => {
                        self.collided.entry(hash).or_default().push(i);
                    }
                    std::collections::hash_map::Entry::Vacant(slot) => {
                        slot.insert(i);
                    }
                }
                self.series.push(part);
            }
        }
    }

    /// The series in the order first seen, each one's points in time order, one per time.
    pub fn finish(self) -> Vec<Series> {
        let mut series = self.series;
        for s in &mut series {
            sort_points(&mut s.points);
        }
        series
    }
}

fn sort_points(points: &mut Vec<(DateTime<Utc>, f64)>) {
    if points.windows(2).any(|w| w[0].0 >= w[1].0) {
        points.sort_by_key(|(at, _)| *at);
        points.dedup_by_key(|(at, _)| *at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(s, 0).expect("in range")
    }

    #[test]
    fn ranges_join_by_label_set_in_time_order_once_per_time() {
        let a = labels(&[("gpu", "0")]);
        let b = labels(&[("gpu", "1")]);
        let mut merged = Ranges::default();
        merged.add(vec![
            Series {
                labels: a.clone(),
                points: vec![(at(120), 3.0), (at(180), 4.0)],
            },
            Series {
                labels: b.clone(),
                points: vec![(at(0), 1.0)],
            },
        ]);
        merged.add(vec![Series {
            labels: a.clone(),
            points: vec![(at(0), 1.0), (at(60), 2.0), (at(120), 3.0)],
        }]);
        let series = merged.finish();
        assert_eq!(series.len(), 2);
        assert_eq!(series[0].labels, a);
        let times: Vec<i64> = series[0].points.iter().map(|p| p.0.timestamp()).collect();
        assert_eq!(times, [0, 60, 120, 180]);
        assert_eq!(series[1].labels, b);
    }

    #[test]
    fn sums_add_by_label_set() {
        let mut sums = Sums::default();
        let row = |gpu: &str, value: f64| Sample {
            labels: labels(&[("gpu", gpu)]),
            value,
        };
        sums.add(vec![row("1", 2.0), row("0", 1.0)]);
        sums.add(vec![row("1", 0.5)]);
        let rows = sums.finish();
        assert_eq!(rows, vec![row("0", 1.0), row("1", 2.5)]);
    }
}
