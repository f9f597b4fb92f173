//! What the node's GPUs show together: the median of every signal the GPUs of one node can
//! share, computed once per round and taken away from each GPU's own.
//!
//! A room or CDU running hot, a driver reload failing NVML calls everywhere, a platform
//! whose links all replay: every GPU of the node reads the same, which says nothing about
//! one of them. The median, not the mean, so that the one GPU that is failing does not
//! lift its own reference. On a node with fewer than [`MIN_PEERS`] GPUs there is no median
//! worth the name and each GPU keeps its whole value.

/// GPUs a node needs before its median stands for "what every GPU shows".
pub(crate) const MIN_PEERS: usize = 3;

/// The signals a node's GPUs may share, in their units before any weighting.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Shared {
    /// `ln(1 + replays in the last day ÷ 240)`.
    pub(crate) replay_level: f64,
    /// The replay counter's rate test against the GPU's own baseline, nats.
    pub(crate) replay_rate: f64,
    /// The same of NVLink errors, hardware XIDs and failed NVML calls.
    pub(crate) nvlink_rate: f64,
    pub(crate) xid_rate: f64,
    pub(crate) failed_rate: f64,
    /// Slow collections' rate test, nats: a host under load slows every GPU's reads.
    pub(crate) slow_rate: f64,
    /// Unstable power hours' rate test, nats.
    pub(crate) power_unstable: f64,
    /// `ln(1 + NVLink errors per hour)`.
    pub(crate) nvlink_level: f64,
    /// Memory–GPU gap over the GPU's own at similar utilization, °C.
    pub(crate) gap_deviation: f64,
    /// Hour-mean GPU temperature beyond 80 °C.
    pub(crate) temperature_excess: f64,
    /// GPU temperature over the GPU's own at similar power, °C.
    pub(crate) temperature_deviation: f64,
    /// Share of the day in thermal slowdown.
    pub(crate) thermal_share: f64,
    /// That share over the GPU's own previous days, `ln(1 + percent)` apart.
    pub(crate) thermal_rise: f64,
    /// Share of recent time in generic hardware slowdown.
    pub(crate) hw_slowdown_share: f64,
    /// Share of the day under the power brake.
    pub(crate) brake_share: f64,
    pub(crate) failed_per_collection: f64,
    /// Mean collection seconds, last hour.
    pub collect_seconds: f64,
    /// `ln` of that over the GPU's own baseline, when slower: a host under load slows
    /// every GPU's NVML calls alike.
    pub collect_slowdown: f64,
    /// The gap's and the GPU temperature's deviations averaged over about a day, °C.
    pub(crate) gap_persistent: f64,
    pub(crate) temperature_persistent: f64,
    /// The gap's deviation averaged over about three days, °C.
    pub(crate) gap_lasting: f64,
}

const FIELDS: usize = 21;

impl Shared {
    fn to_array(self) -> [f64; FIELDS] {
        [
            self.replay_level,
            self.replay_rate,
            self.nvlink_rate,
            self.nvlink_level,
            self.gap_deviation,
            self.temperature_excess,
            self.temperature_deviation,
            self.thermal_share,
            self.thermal_rise,
            self.hw_slowdown_share,
            self.brake_share,
            self.failed_per_collection,
            self.collect_seconds,
            self.gap_persistent,
            self.temperature_persistent,
            self.collect_slowdown,
            self.xid_rate,
            self.failed_rate,
            self.power_unstable,
            self.slow_rate,
            self.gap_lasting,
        ]
    }

    fn from_array(a: [f64; FIELDS]) -> Shared {
        Shared {
            replay_level: a[0],
            replay_rate: a[1],
            nvlink_rate: a[2],
            nvlink_level: a[3],
            gap_deviation: a[4],
            temperature_excess: a[5],
            temperature_deviation: a[6],
            thermal_share: a[7],
            thermal_rise: a[8],
            hw_slowdown_share: a[9],
            brake_share: a[10],
            failed_per_collection: a[11],
            collect_seconds: a[12],
            gap_persistent: a[13],
            temperature_persistent: a[14],
            collect_slowdown: a[15],
            xid_rate: a[16],
            failed_rate: a[17],
            power_unstable: a[18],
            slow_rate: a[19],
            gap_lasting: a[20],
        }
    }
}

/// The buffers [`Peers::of`] sorts each field in, kept from round to round so that a
/// round allocates nothing once the node's GPUs are known.
#[derive(Debug, Clone, Default)]
pub struct PeerScratch {
    /// Every GPU's fields, GPU after GPU.
    rows: Vec<[f64; FIELDS]>,
    /// One field of every GPU, sorted for its median.
    column: Vec<f64>,
}

impl PeerScratch {
    /// [`Peers::of`], in these buffers.
    pub fn median<'a>(&mut self, gpus: impl Iterator<Item = &'a Shared>) -> Peers {
        self.rows.clear();
        self.rows.extend(gpus.map(|s| s.to_array()));
        let n = self.rows.len();
        if n < MIN_PEERS {
            return Peers::default();
        }
        let mut median = [0.0; FIELDS];
        for (f, m) in median.iter_mut().enumerate() {
            self.column.clear();
            self.column.extend(self.rows.iter().map(|row| row[f]));
            // Most fields read the same on every GPU of a healthy node (zero): then that is
            // the median, without a sort.
            let first = self.column[0];
            if !self.column.iter().all(|v| v.to_bits() == first.to_bits()) {
                self.column.sort_unstable_by(f64::total_cmp);
            }
            *m = (self.column[(n - 1) / 2] + self.column[n / 2]) / 2.0;
        }
        Peers {
            median: Some(Shared::from_array(median)),
        }
    }
}

/// The node's median GPU, for features relative to peers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Peers {
    /// None on a node with fewer than [`MIN_PEERS`] GPUs with data.
    pub median: Option<Shared>,
}

impl Peers {
    /// From every GPU's shared signals, once per round.
    pub fn of<'a>(gpus: impl Iterator<Item = &'a Shared>) -> Peers {
        PeerScratch::default().median(gpus)
    }

    /// What `own` shows beyond the node's median, never below 0.
    pub fn beyond(&self, own: &Shared) -> Shared {
        let Some(median) = &self.median else {
            return Shared::from_array(own.to_array().map(|v| v.max(0.0)));
        };
        let mut out = own.to_array();
        for (o, m) in out.iter_mut().zip(median.to_array()) {
            *o = (*o - m.max(0.0)).max(0.0);
        }
        Shared::from_array(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_temperature(excess: f64) -> Shared {
        Shared {
            temperature_excess: excess,
            ..Shared::default()
        }
    }

    #[test]
    fn a_node_wide_reading_is_taken_away_and_one_gpu_stands_out() {
        let node: Vec<Shared> = (4..12).map(|t| with_temperature(f64::from(t))).collect();
        let peers = Peers::of(node.iter());
        // 4..=11 °C over 80: median 7.5; the hottest is 3.5 beyond it.
        assert_eq!(peers.beyond(&node[7]).temperature_excess, 3.5);
        assert_eq!(peers.beyond(&node[0]).temperature_excess, 0.0);
        let mut lone = vec![with_temperature(0.0); 7];
        lone.push(with_temperature(11.0));
        let peers = Peers::of(lone.iter());
        assert_eq!(peers.beyond(&lone[7]).temperature_excess, 11.0);
    }

    #[test]
    fn too_few_gpus_have_no_median() {
        let two = [with_temperature(5.0), with_temperature(9.0)];
        let peers = Peers::of(two.iter());
        assert_eq!(peers.median, None);
        assert_eq!(peers.beyond(&two[1]).temperature_excess, 9.0);
    }
}
