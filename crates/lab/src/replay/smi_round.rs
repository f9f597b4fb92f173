//! What a polling round is in an nvidia-smi log: the one rule the CSV reader groups rows by.
//!
//! `nvidia-smi -l N` writes one row per GPU per round, milliseconds apart, every round in
//! the same GPU order. A round becomes one [`Snapshot`], the engine's unit of "these GPUs
//! were there at this instant", so a round must never claim a GPU is absent when the log
//! only lost or repeated a line. The rule, row by row:
//!
//! - **Duplicate**: a row of a GPU stamped with exactly the time of that GPU's previous
//!   row is the same sample written twice (a capture restarted on the same file, a log
//!   concatenated with itself, a copy-paste). It is skipped and counted, with a warning
//!   naming the line it repeats. Rows nvidia-smi writes for a GPU it cannot reach carry no
//!   time of their own and are never duplicates.
//! - **Out of order**: a row older than its GPU's previous row, or than the round it would
//!   belong to, is skipped (a stale copy of an earlier row is one).
//! - **Next round**: a row starts a new round when its GPU already has a row in the
//!   current one, or when it is stamped so long after the round began that it can only
//!   belong to the next: more than three quarters of the log's cadence (the shortest time
//!   between two rows of one GPU in the last round), and never less than [`ROUND_JITTER`]. A GPU whose row is
//!   missing from one round then starts the next instead of joining this one with the next
//!   round's time; and a round whose rows come slowly (nvidia-smi waiting on a failing GPU
//!   writes a round's rows seconds apart) is not split in two, which would report the GPUs
//!   of each half missing from the other.
//! - Otherwise the row **joins** the current round.
//!
//! **Unreachable GPUs.** nvidia-smi writes "Unable to determine the device handle for GPU
//! …" in place of the row of a GPU it cannot reach; that line has no timestamp, so the
//! reader stamps it with the current round's time. When it comes first in its round, the
//! round has no time yet: the row starts the round with the time of the round before, and
//! the round's first timed row, however late, joins it and gives it its own time. Without
//! that, the unreachable GPU would form a round of its own stamped with the previous
//! round's time (reported lost before it fell off).
//!
//! **A log cut part-way through a round** (the capture was killed, or its tail lost): at
//! the end of the log, a last round that lacks GPUs the round before it had answering, all
//! of them after its own last row in that round's order, was cut short — the file ended
//! before their rows were written. Such a round is left out, with a warning: it is an
//! instant at which only some GPUs were sampled, and handing it to the engine would say
//! the others vanished (the report calls a GPU whose rows stop before the end lost, and
//! alerts on the others resolve). Leaving it out costs the last few rows of a killed
//! capture; merging them into the round before would stamp them with the wrong time. One
//! exception: a cut round in which a GPU stopped answering is kept, since that is news the
//! engine must see, and marked partial ([`super::ReadStats::partial_last_round`]) so that
//! the GPUs without a row in it are not judged on it. A GPU missing from the middle of a
//! last round, or from a last round that matches the one before, is genuinely missing.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use crate::model::{GpuSample, Snapshot};

/// Rows of one round may be stamped a little apart, in either direction; a row earlier
/// than its round by more than this is out of order, and one later by more than this
/// belongs to the next round.
pub(crate) const ROUND_JITTER: Duration = Duration::from_secs(1);

/// What to do with a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// It belongs to the round being filled.
    Join,
    /// It begins the next round: the current one is complete.
    NextRound,
    /// The same GPU at the same time as the row on this line.
    Duplicate { of_line: u64 },
    /// Older than the GPU's previous row, on this line at this time.
    Stale { of_line: u64, last: DateTime<Utc> },
    /// Older than the round it would join (or, starting one, than the last round).
    OutOfOrder { round: DateTime<Utc> },
}

/// How a last round was cut: GPUs with a row, GPUs the round before had answering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cut {
    pub present: usize,
    pub expected: usize,
}

/// Rounds being assembled. GPUs are named by their position in the reader's list of
/// known GPUs, which never reorders.
#[derive(Debug, Default)]
pub(crate) struct Rounds {
    /// The round being filled: its samples are `current.gpus[..filled]`. The samples after
    /// them are spares (of rounds handed out before) that rows are read into ([`Rounds::staged`]),
    /// so that a row is parsed where it stays and no sample, a large struct, is moved.
    pub current: Snapshot,
    filled: usize,
    /// Known-GPU positions of `current.gpus`, in row order.
    ids: Vec<usize>,
    /// By known-GPU position: the GPU has a row in the current round (`ids` as a set, so
    /// that judging a row does not grow with the GPU count).
    in_current: Vec<bool>,
    /// The last round handed out: known-GPU positions in row order, and whether each
    /// answered.
    previous: Vec<(usize, bool)>,
    /// Time and line of each known GPU's last timed row.
    last_row: Vec<Option<(DateTime<Utc>, u64)>>,
    /// Time of the current round, or of the last one while none is being filled.
    last_round_at: Option<DateTime<Utc>>,
    /// The log's cadence: the shortest time between two rows of one GPU in the last round
    /// handed out (the shortest, so that a GPU missing a round does not stretch it).
    cadence: Option<TimeDelta>,
    /// The same, in the round being filled.
    shortest_gap: Option<TimeDelta>,
    /// Rows of the current round that carry their own time. While there are none, the
    /// round holds only rows of unreachable GPUs, whose time is borrowed from the round
    /// before: the first timed row joins such a round and gives it its time.
    timed_in_current: usize,
    /// The times a row is judged against while the round fills, worked out once when the
    /// round's time is set ([`Rounds::set_round_at`]) rather than for every row: date
    /// arithmetic was a tenth of reading a narrow log's row.
    bounds: Bounds,
}

/// The current round's limits: rows stamped after `end` belong to the next round, rows
/// before `floor` are out of order (`None` where the date arithmetic overflows, as
/// `checked_add_signed` and `checked_sub_signed` give it).
#[derive(Debug, Default, Clone, Copy)]
struct Bounds {
    end: Option<DateTime<Utc>>,
    floor: Option<DateTime<Utc>>,
}

impl Rounds {
    /// Where a row of known GPU `gpu` stamped `at` goes. `timed`: the row carries its own
    /// timestamp (rows for unreachable GPUs borrow the round's).
    pub fn judge(&self, at: DateTime<Utc>, gpu: usize, timed: bool) -> Verdict {
        let last_row = match self.last_row.get(gpu) {
            Some(Some(last)) if timed => Some(*last),
            _ => None,
        };
        if let Some((last, line)) = last_row
            && at == last
        {
            return Verdict::Duplicate { of_line: line };
        }
        match self.by_round(at, gpu, timed) {
            verdict @ (Verdict::Join | Verdict::NextRound) => match last_row {
                Some((last, line)) if at < last => Verdict::Stale {
                    of_line: line,
                    last,
                },
                _ => verdict,
            },
            verdict => verdict,
        }
    }

    /// [`Rounds::judge`] by the current round alone.
    fn by_round(&self, at: DateTime<Utc>, gpu: usize, timed: bool) -> Verdict {
        let filling = self.filled > 0;
        let round = self.current.at;
        let repeats = self.in_current.get(gpu).copied().unwrap_or(false);
        // A round begun by an unreachable GPU (nvidia-smi wrote its message where its row
        // would be, first in the round) has no time of its own yet: the round's first
        // timed row belongs to it, however long after the round before it comes.
        let borrowed = filling && self.timed_in_current == 0 && timed;
        let late = filling && !borrowed && self.bounds.end.is_some_and(|end| at > end);
        if borrowed && !repeats {
            return match self.last_round_at {
                Some(last) if at < last => Verdict::OutOfOrder { round: last },
                _ => Verdict::Join,
            };
        }
        if !filling || repeats || late {
            // A row that starts a round must not be older than the last round.
            return match self.last_round_at {
                Some(last) if at < last => Verdict::OutOfOrder { round: last },
                _ if filling => Verdict::NextRound,
                _ => Verdict::Join,
            };
        }
        // One that joins the current round may be stamped a little before it.
        match self.bounds.floor {
            Some(floor) if at < floor => Verdict::OutOfOrder { round },
            _ => Verdict::Join,
        }
    }

    /// How long after a round began its rows may still come: three quarters of the
    /// cadence, and at least [`ROUND_JITTER`].
    fn round_span(&self) -> TimeDelta {
        let jitter = TimeDelta::from_std(ROUND_JITTER).unwrap_or_default();
        match self.cadence {
            Some(cadence) => (cadence * 3 / 4).max(jitter),
            None => jitter,
        }
    }

    /// The sample the next row is read into: the first spare after the round's samples.
    /// It joins the round with [`Rounds::join`]; otherwise the next row overwrites it.
    pub(crate) fn staged(&mut self) -> &mut GpuSample {
        let gpus = &mut self.current.gpus;
        if gpus.len() <= self.filled {
            // Room for a round like the last one and the row that begins the next, exactly:
            // doubling would give a round of 64 GPUs room for 128 samples for its one extra.
            let wanted = self.previous.len() + 1;
            if gpus.len() == gpus.capacity() && wanted > gpus.len() {
                gpus.reserve_exact(wanted - gpus.len());
            }
            gpus.push(GpuSample::default());
        }
        &mut gpus[self.filled]
    }

    /// The samples of the round being filled.
    pub fn samples(&self) -> &[GpuSample] {
        &self.current.gpus[..self.filled]
    }

    /// Adds the row read into [`Rounds::staged`] to the round, as the verdict let it join
    /// (a round that is empty starts at its time).
    pub fn join(&mut self, at: DateTime<Utc>, gpu: usize, line: u64, timed: bool) {
        if self.filled == 0 {
            self.set_round_at(at);
        }
        if timed {
            if self.timed_in_current == 0 {
                // The first timed row of a round begun by unreachable GPUs: its time is
                // the round's.
                self.set_round_at(at);
            }
            self.timed_in_current += 1;
            if self.last_row.len() <= gpu {
                self.last_row.resize(gpu + 1, None);
            }
            if let Some((before, _)) = self.last_row[gpu] {
                let gap = gap(at, before);
                if gap > TimeDelta::zero() && self.shortest_gap.is_none_or(|g| gap < g) {
                    self.shortest_gap = Some(gap);
                }
            }
            self.last_row[gpu] = Some((at, line));
        }
        self.staged();
        self.filled += 1;
        self.ids.push(gpu);
        if self.in_current.len() <= gpu {
            self.in_current.resize(gpu + 1, false);
        }
        self.in_current[gpu] = true;
    }

    /// Sets the current round's time, and the bounds its rows are judged by (the cadence
    /// changes only between rounds, in [`Rounds::take`], before a round's time is set).
    fn set_round_at(&mut self, at: DateTime<Utc>) {
        self.current.at = at;
        self.last_round_at = Some(at);
        let jitter = TimeDelta::from_std(ROUND_JITTER).unwrap_or_default();
        self.bounds = Bounds {
            end: at.checked_add_signed(self.round_span()),
            floor: at.checked_sub_signed(jitter),
        };
    }

    /// Empties the round's list of GPUs.
    fn clear_ids(&mut self) {
        for &gpu in &self.ids {
            if let Some(present) = self.in_current.get_mut(gpu) {
                *present = false;
            }
        }
        self.ids.clear();
    }

    /// The time of the current round, or of the last one.
    pub(crate) fn last_round_at(&self) -> Option<DateTime<Utc>> {
        self.last_round_at
    }

    pub fn is_empty(&self) -> bool {
        self.filled == 0
    }

    /// Whether the current round, the last of the log, was cut short (see the module
    /// documentation for the rule).
    pub(crate) fn cut_short(&self) -> Option<Cut> {
        let last = *self.ids.last()?;
        let reached = self.previous.iter().position(|(gpu, _)| *gpu == last)?;
        let mut expected = 0;
        let mut missing_before = false;
        let mut missing_after = false;
        for (i, (gpu, up)) in self.previous.iter().enumerate() {
            if !up {
                continue;
            }
            expected += 1;
            if !self.ids.contains(gpu) {
                if i < reached {
                    missing_before = true;
                } else {
                    missing_after = true;
                }
            }
        }
        (missing_after && !missing_before).then_some(Cut {
            present: self.ids.len(),
            expected,
        })
    }

    /// Hands the current round out through `into` and starts an empty one, whose spare
    /// samples are `into`'s old ones (a row read already for the next round stays the
    /// first).
    pub fn take(&mut self, into: &mut Snapshot) {
        self.previous.clear();
        self.previous.extend(
            self.ids
                .iter()
                .zip(&self.current.gpus)
                .map(|(gpu, sample)| (*gpu, sample.up)),
        );
        self.clear_ids();
        self.timed_in_current = 0;
        if let Some(gap) = self.shortest_gap.take() {
            self.cadence = Some(gap);
        }
        let filled = std::mem::take(&mut self.filled);
        std::mem::swap(&mut self.current, into);
        // `current` now holds `into`'s old content, whose samples are spares.
        self.current.processes.clear();
        self.current.events.clear();
        let spares = &mut self.current.gpus;
        let mut extra = into.gpus.drain(filled.min(into.gpus.len())..);
        if let Some(staged) = extra.next() {
            match spares.first_mut() {
                Some(first) => {
                    let spare = std::mem::replace(first, staged);
                    spares.reserve_exact(1);
                    spares.push(spare);
                }
                None => spares.push(staged),
            }
        }
        spares.extend(extra);
    }

    /// Gives up the current round (its samples become spares); how many there were.
    pub(crate) fn discard(&mut self) -> usize {
        self.clear_ids();
        self.timed_in_current = 0;
        std::mem::take(&mut self.filled)
    }
}

/// `at - before`, as chrono works it out (the days apart, then the times of day apart),
/// without the days where both fall on the same one: the rows of a GPU mostly do.
fn gap(at: DateTime<Utc>, before: DateTime<Utc>) -> TimeDelta {
    let (a, b) = (at.naive_utc(), before.naive_utc());
    if a.date() == b.date() {
        a.time() - b.time()
    } else {
        at - before
    }
}

#[cfg(test)]
mod tests;
