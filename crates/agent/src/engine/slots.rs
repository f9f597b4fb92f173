//! The engine's GPUs, each in a dense slot assigned once per UUID.
//!
//! A step visits every GPU of the snapshot several times (its windows, its risk, the
//! node's capacity), and a replay steps millions of times: looking a GPU up by its UUID in
//! a map at each visit costs string comparisons that grow with the GPU count. Here a GPU's
//! state lives in a `Vec`, found once per step by its UUID — in O(1), and usually by one
//! comparison: the i-th GPU of a snapshot is most often the i-th GPU of the one before,
//! whose slot is remembered — and by its slot from then on.
//!
//! Persisted as before: a map from UUID to state, in UUID order (`docs/architecture.md`,
//! the state directory), so state files written before the slots read back unchanged.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::GpuState;
use super::risk;
use super::window::Summaries;
use crate::model::Snapshot;

/// Every GPU the engine remembers, by slot.
#[derive(Debug, Clone, Default)]
pub struct GpuStates {
    slots: Vec<GpuState>,
    by_uuid: HashMap<String, usize>,
    /// The slot of the i-th GPU of the last snapshot looked up: the first guess for the
    /// i-th GPU of the next one. Not state: a wrong or missing guess only costs a lookup.
    hints: Vec<usize>,
}

impl GpuStates {
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The state of the GPU with this UUID.
    pub fn get(&self, uuid: &str) -> Option<&GpuState> {
        self.by_uuid.get(uuid).map(|&slot| &self.slots[slot])
    }

    /// Every GPU's state, in slot order (the order the engine first saw them).
    pub fn values(&self) -> impl Iterator<Item = &GpuState> {
        self.slots.iter()
    }

    /// Adds a GPU's state, or replaces the state of the GPU with its UUID.
    pub fn insert(&mut self, state: GpuState) {
        match self.by_uuid.get(&state.uuid) {
            Some(&slot) => self.slots[slot] = state,
            None => {
                self.by_uuid.insert(state.uuid.clone(), self.slots.len());
                self.slots.push(state);
            }
        }
    }

    pub(super) fn slot(&self, slot: usize) -> &GpuState {
        &self.slots[slot]
    }

    pub(super) fn slot_mut(&mut self, slot: usize) -> &mut GpuState {
        &mut self.slots[slot]
    }

    /// The slot of the `position`-th GPU of a snapshot, whose UUID is `uuid`; a new slot,
    /// filled by `new`, for a GPU not seen before.
    pub(super) fn slot_of(
        &mut self,
        position: usize,
        uuid: &str,
        new: impl FnOnce() -> GpuState,
    ) -> usize {
        if let Some(&hint) = self.hints.get(position)
            && self
                .slots
                .get(hint)
                .is_some_and(|s| crate::text::same(&s.uuid, uuid))
        {
            return hint;
        }
        let slot = match self.by_uuid.get(uuid) {
            Some(&slot) => slot,
            None => {
                let slot = self.slots.len();
                let state = new();
                self.by_uuid.insert(uuid.to_string(), slot);
                self.slots.push(state);
                slot
            }
        };
        if self.hints.len() <= position {
            self.hints.resize(position + 1, usize::MAX);
        }
        self.hints[position] = slot;
        slot
    }

    /// Keeps the GPUs for which `keep` holds. Slots move only when one is dropped (rare: a
    /// GPU gone for a week), so callers must look slots up again after a call that drops.
    /// True when a GPU was dropped.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(usize, &GpuState) -> bool) -> bool {
        let mut slot = 0;
        let before = self.slots.len();
        self.slots.retain(|state| {
            let kept = keep(slot, state);
            slot += 1;
            kept
        });
        if self.slots.len() == before {
            return false;
        }
        self.reindex();
        true
    }

    fn reindex(&mut self) {
        self.by_uuid.clear();
        for (slot, state) in self.slots.iter().enumerate() {
            self.by_uuid.insert(state.uuid.clone(), slot);
        }
        self.hints.clear();
    }
}

/// A step's working lists, kept between steps for their capacity. Not state.
#[derive(Debug, Clone, Default)]
pub(super) struct Scratch {
    /// The slot of each finding's GPU, in the findings' order.
    pub slots: Vec<usize>,
    /// By slot: the GPU is in this step's snapshot.
    pub seen: Vec<bool>,
    /// Slots of GPUs the snapshot does not list, in UUID order.
    pub missing: Vec<usize>,
    /// Each finding's windows summarised at this step, in the findings' order (the last
    /// hour only, in a round where no GPU is scored).
    pub summaries: Vec<Summaries>,
    /// Each finding's risk signals at this step, in the findings' order (computed only in
    /// a round where some GPU is due to be scored).
    pub signals: Vec<risk::Signals>,
    /// Whether each finding's GPU is scored at this step ([`risk::Cadence`]).
    pub due: Vec<bool>,
    /// The node's signals by field, for its median ([`risk::Peers::of`]).
    pub(crate) peers: risk::PeerScratch,
    /// The placement's slots of findings handed back ([`super::Engine::recycle`]): the next
    /// step writes over them.
    pub(crate) placement_slots: Vec<super::capacity::Slot>,
}

impl Scratch {
    /// Marks the slots of `self.slots` seen, of `known` slots; true when a slot is listed
    /// twice.
    pub(crate) fn mark_seen(&mut self, known: usize) -> bool {
        self.seen.clear();
        self.seen.resize(known, false);
        let mut repeated = false;
        for &slot in &self.slots {
            if let Some(seen) = self.seen.get_mut(slot) {
                repeated |= std::mem::replace(seen, true);
            }
        }
        repeated
    }

    /// Looks the snapshot's GPUs up again once slots moved ([`GpuStates::retain`]), and
    /// marks them seen; true when a slot is listed twice.
    pub(crate) fn look_up_again(
        &mut self,
        states: &mut GpuStates,
        snapshot: &Snapshot,
        now: i64,
    ) -> bool {
        self.slots.clear();
        for (position, sample) in snapshot.gpus.iter().enumerate() {
            let slot = states.slot_of(position, &sample.uuid, || GpuState::new(sample, now));
            self.slots.push(slot);
        }
        self.mark_seen(states.len())
    }

    /// Fills `self.missing` with the slots not seen, in UUID order (the order findings list
    /// them in).
    pub(crate) fn find_missing(&mut self, states: &GpuStates) {
        self.missing.clear();
        let seen = &self.seen;
        self.missing
            .extend((0..states.len()).filter(|&slot| !seen.get(slot).copied().unwrap_or(false)));
        self.missing
            .sort_unstable_by(|a, b| states.slot(*a).uuid.cmp(&states.slot(*b).uuid));
    }
}

impl PartialEq for GpuStates {
    /// The same GPUs with the same states, whatever their slots.
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len()
            && self
                .slots
                .iter()
                .all(|state| other.get(&state.uuid) == Some(state))
    }
}

impl FromIterator<GpuState> for GpuStates {
    fn from_iter<I: IntoIterator<Item = GpuState>>(iter: I) -> Self {
        let mut states = GpuStates::default();
        for state in iter {
            states.insert(state);
        }
        states
    }
}

impl Serialize for GpuStates {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let by_uuid: BTreeMap<&str, &GpuState> =
            self.slots.iter().map(|s| (s.uuid.as_str(), s)).collect();
        by_uuid.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for GpuStates {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let by_uuid = BTreeMap::<String, GpuState>::deserialize(deserializer)?;
        // The map's key is what the engine finds a GPU by.
        Ok(by_uuid
            .into_iter()
            .map(|(uuid, mut state)| {
                state.uuid = uuid;
                state
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::GpuSample;

    fn state(uuid: &str) -> GpuState {
        let sample = GpuSample {
            uuid: uuid.to_string(),
            ..GpuSample::default()
        };
        GpuState::new(&sample, 0)
    }

    #[test]
    fn a_gpu_keeps_its_slot_whatever_its_position() {
        let mut states = GpuStates::default();
        let a = states.slot_of(0, "GPU-a", || state("GPU-a"));
        let b = states.slot_of(1, "GPU-b", || state("GPU-b"));
        assert_ne!(a, b);
        // The snapshot lists them the other way round: the guesses miss, the slots hold.
        assert_eq!(states.slot_of(0, "GPU-b", || state("x")), b);
        assert_eq!(states.slot_of(1, "GPU-a", || state("x")), a);
        assert_eq!(states.len(), 2);
        assert_eq!(states.get("GPU-a").map(|s| s.uuid.as_str()), Some("GPU-a"));
    }

    #[test]
    fn dropping_a_gpu_moves_the_others_and_keeps_them_findable() {
        let mut states = GpuStates::default();
        for (i, uuid) in ["GPU-a", "GPU-b", "GPU-c"].iter().enumerate() {
            states.slot_of(i, uuid, || state(uuid));
        }
        assert!(states.retain(|_, s| s.uuid != "GPU-a"));
        assert!(!states.retain(|_, _| true));
        assert!(states.get("GPU-a").is_none());
        let c = states.slot_of(2, "GPU-c", || state("x"));
        assert_eq!(states.slot(c).uuid, "GPU-c");
        assert_eq!(states.len(), 2);
    }

    #[test]
    fn persisted_as_a_map_by_uuid() {
        let mut states = GpuStates::default();
        states.slot_of(0, "GPU-b", || state("GPU-b"));
        states.slot_of(1, "GPU-a", || state("GPU-a"));
        let json = serde_json::to_value(&states).unwrap();
        let keys: Vec<&String> = json.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["GPU-a", "GPU-b"]);
        let back: GpuStates = serde_json::from_value(json).unwrap();
        assert_eq!(back, states);
    }
}
