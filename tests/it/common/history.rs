//! Ground truth from a history `record --format openmetrics` wrote: what the fleet report
//! must find in a store the history was loaded into.

use std::collections::BTreeMap;

/// One sample line of the recording: labels, value, timestamp (seconds).
pub fn parse_sample(line: &str) -> Option<(&str, BTreeMap<String, String>, f64, f64)> {
    let open = line.find('{')?;
    let close = line.rfind('}')?;
    let name = &line[..open];
    let mut labels = BTreeMap::new();
    for pair in line[open + 1..close].split("\",") {
        let (key, value) = pair.split_once("=\"")?;
        labels.insert(key.to_string(), value.trim_end_matches('"').to_string());
    }
    let mut tail = line[close + 1..].split_whitespace();
    let value = tail.next()?.parse().ok()?;
    let at = tail.next()?.parse().ok()?;
    Some((name, labels, value, at))
}

/// Busy and idle GPU-hours per team from the file, as truth and as the most the store's
/// `increase` may add to it.
pub struct Truth {
    /// Per team: busy and idle GPU-hours, each owner series' last value minus its first
    /// (the counter only grows).
    pub hours: BTreeMap<String, (f64, f64)>,
    /// Per team, busy and idle: Prometheus' `increase` extrapolates a series that starts
    /// or ends inside the range by up to half its interval at that end (its documentation:
    /// the result is extrapolated to the range's ends), so each such end may add that much.
    pub extrapolation: BTreeMap<String, (f64, f64)>,
}

/// One owner series of the recording: its labels, first and last values, and when.
struct Series {
    labels: BTreeMap<String, String>,
    first: f64,
    last: f64,
    began: f64,
    ended: f64,
}

/// Owners matched to teams as the tests' config says (`ml-*` research, `inference`
/// serving); `interval` is the recording's, seconds. Also the first and last timestamps.
pub fn ground_truth(text: &str, interval: f64) -> (Truth, f64, f64) {
    let mut series: BTreeMap<String, Series> = BTreeMap::new();
    let (mut from, mut to) = (f64::MAX, f64::MIN);
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((name, labels, value, at)) = parse_sample(line) else {
            panic!("not an OpenMetrics sample line: {line}");
        };
        from = from.min(at);
        to = to.max(at);
        if name != "gpu_owner_seconds_total" {
            continue;
        }
        let key = format!("{labels:?}");
        series
            .entry(key)
            .and_modify(|e| {
                e.last = value;
                e.ended = at;
            })
            .or_insert(Series {
                labels,
                first: value,
                last: value,
                began: at,
                ended: at,
            });
    }
    let mut teams: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    let mut extrapolation: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for Series {
        labels,
        first,
        last,
        began,
        ended,
    } in series.values()
    {
        let team = team_of(&labels["owner"]);
        let hours = (last - first) / 3600.0;
        let inner_ends = f64::from(u8::from(*began > from)) + f64::from(u8::from(*ended < to));
        let most = inner_ends * interval / 2.0 / 3600.0;
        let entry = teams.entry(team.to_string()).or_default();
        let allowed = extrapolation.entry(team.to_string()).or_default();
        match labels["state"].as_str() {
            "busy" => {
                entry.0 += hours;
                allowed.0 += most;
            }
            "idle" => {
                entry.1 += hours;
                allowed.1 += most;
            }
            other => panic!("state {other:?}"),
        }
    }
    (
        Truth {
            hours: teams,
            extrapolation,
        },
        from,
        to,
    )
}

/// The team of an owner, as the tests' config matches them.
fn team_of(owner: &str) -> &'static str {
    if owner.starts_with("ml-") {
        "research"
    } else if owner == "inference" {
        "serving"
    } else {
        "unassigned"
    }
}

/// Busy and idle GPU-hours per team that the hourly rule's owner record
/// (`instance_gpu_owner_state:gpu_owner_seconds:increase1h`, evaluated at each whole hour
/// `e` from `from` to `to`) leaves out by design: a series back in the hour `(e − 1h, e]`
/// after a whole hour away counts from its first sample there, so what the counter grew
/// from its value before the gap to that sample is not in any record (docs/fleet.md,
/// "Recording rules").
pub fn rules_return_loss(text: &str, from: i64, to: i64) -> BTreeMap<String, (f64, f64)> {
    /// Labels, and the samples (time, value).
    type Samples = (BTreeMap<String, String>, Vec<(f64, f64)>);
    let mut series: BTreeMap<String, Samples> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((name, labels, value, at)) = parse_sample(line) else {
            panic!("not an OpenMetrics sample line: {line}");
        };
        if name == "gpu_owner_seconds_total" {
            let key = format!("{labels:?}");
            series
                .entry(key)
                .or_insert((labels, Vec::new()))
                .1
                .push((at, value));
        }
    }
    let mut loss: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for (labels, mut samples) in series.into_values() {
        samples.sort_by(|a, b| a.0.total_cmp(&b.0));
        for end in (from..=to).step_by(3600).map(|e| e as f64) {
            let in_hour =
                |lo: f64, hi: f64| samples.iter().filter(move |(t, _)| *t > lo && *t <= hi);
            let Some(&(_, first)) = in_hour(end - 3600.0, end).next() else {
                continue;
            };
            if in_hour(end - 7200.0, end - 3600.0).next().is_some() {
                continue;
            }
            let Some(&(_, before)) = samples.iter().rev().find(|(t, _)| *t <= end - 7200.0) else {
                continue;
            };
            let entry = loss
                .entry(team_of(&labels["owner"]).to_string())
                .or_default();
            let hours = (first - before) / 3600.0;
            match labels["state"].as_str() {
                "busy" => entry.0 += hours,
                _ => entry.1 += hours,
            }
        }
    }
    loss
}

/// Held, busy and idle GPU-hours per team from dcgm-exporter-named samples: held while
/// `DCGM_FI_DEV_FB_USED` is above 1 GiB (or a pod is mapped), busy while held and
/// `DCGM_FI_DEV_GPU_UTIL` ≥ 5; each sample stands for one recording interval.
pub fn dcgm_ground_truth(text: &str, interval_s: f64) -> BTreeMap<String, (f64, f64)> {
    type At = (String, String, u64);
    let mut used: BTreeMap<At, (f64, String, String)> = BTreeMap::new();
    let mut util: BTreeMap<At, f64> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((name, labels, value, at)) = parse_sample(line) else {
            panic!("not an OpenMetrics sample line: {line}");
        };
        let key = (labels["Hostname"].clone(), labels["gpu"].clone(), at as u64);
        let label = |k: &str| labels.get(k).cloned().unwrap_or_default();
        match name {
            "DCGM_FI_DEV_FB_USED" => {
                used.insert(key, (value, label("namespace"), label("pod")));
            }
            "DCGM_FI_DEV_GPU_UTIL" => {
                util.insert(key, value);
            }
            _ => {}
        }
    }
    let mut teams: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for (key, (mib, namespace, pod)) in &used {
        if *mib <= 1024.0 && pod.is_empty() {
            continue;
        }
        let team = if namespace.starts_with("ml-") || key.0 == "sim-node-02" {
            "research"
        } else if namespace == "inference" {
            "serving"
        } else {
            "unassigned"
        };
        let hours = interval_s / 3600.0;
        let entry = teams.entry(team.to_string()).or_default();
        if util.get(key).copied().unwrap_or(0.0) >= 5.0 {
            entry.0 += hours;
        } else {
            entry.1 += hours;
        }
    }
    teams
}
