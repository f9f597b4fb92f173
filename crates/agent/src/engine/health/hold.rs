//! Anti-flap: how a component's state follows its evidence.
//!
//! A worse state is taken at once (a GPU that fell off the bus must leave the scheduler
//! before the next job lands). A better one is taken only once the evidence of the current
//! state has been gone for the hold time: a remap that stops being pending, a link back at
//! full width, a slowdown that stopped. So a condition that comes and goes between
//! collections keeps its state, and a state lasts at least the hold time after the last
//! time anything showed it. While the evidence is only weaker, the state keeps the reason
//! and action it was last seen with.

use serde::{Deserialize, Serialize};

use super::{Action, State};

/// One component's held state.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Hold {
    pub state: State,
    pub action: Action,
    pub reason: String,
    /// Unix seconds the state began; `None` before the first judgement.
    pub since: Option<i64>,
    /// Unix seconds the evidence for the state was last seen.
    pub seen: i64,
    /// The fixed text (a [`Reason::Fixed`]) `reason` was last set to by [`Hold::update`]:
    /// the same text again, step after step for a healthy component, is then known equal
    /// without comparing it. Not saved, and not part of the hold's value: a hold read back
    /// compares the text once.
    #[serde(skip)]
    fixed: Option<&'static str>,
}

impl PartialEq for Hold {
    fn eq(&self, other: &Hold) -> bool {
        (self.state, self.action, self.since, self.seen)
            == (other.state, other.action, other.since, other.seen)
            && self.reason == other.reason
    }
}

/// What one step's readings say of a component.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    pub state: State,
    pub action: Action,
    pub reason: Reason,
}

/// A reason: fixed text for the common healthy case (no formatting every step), or text
/// with the numbers.
#[derive(Debug, Clone, PartialEq)]
pub enum Reason {
    Fixed(&'static str),
    Text(String),
}

/// Evidence of a healthy component, with its fixed reason.
pub fn healthy(text: &'static str) -> Option<Found> {
    Some(Found {
        state: State::Healthy,
        action: Action::None,
        reason: Reason::Fixed(text),
    })
}

/// Evidence of a component in `state`, asking for `action`, with the numbers in `text`.
pub fn found(state: State, action: Action, text: String) -> Option<Found> {
    Some(Found {
        state,
        action,
        reason: Reason::Text(text),
    })
}

/// The reason of a component nothing could be judged of yet (its GPU never answered).
const NOT_JUDGED: &str = "no reading of this GPU yet";

impl Hold {
    /// The fixed text `reason` holds, where it was last set to one by [`Hold::update`] and
    /// has its length still.
    pub(super) fn fixed_reason(&self) -> Option<&'static str> {
        self.fixed.filter(|f| f.len() == self.reason.len())
    }

    /// Folds one step's evidence in at unix time `now`; `found` is `None` when nothing
    /// could be judged (the GPU does not answer): the state holds. `hold` is in seconds.
    /// Whether what a verdict publishes of the hold (its state, action, reason or start)
    /// may have changed: false only where none of them did (`seen` is not published).
    #[inline]
    pub fn update(&mut self, now: i64, found: Option<Found>, hold: i64) -> bool {
        // Step after step the evidence says what the hold says, with the fixed text it
        // holds: only when it was seen moves (what the rest of an update comes to then).
        if let Some(Found {
            state,
            action,
            reason: Reason::Fixed(text),
        }) = &found
            && self.since.is_some()
            && (*state, *action) == (self.state, self.action)
            && self.fixed.is_some_and(|f| std::ptr::eq(f, *text))
            && self.reason.len() == text.len()
        {
            self.seen = now;
            return false;
        }
        self.fold(now, found, hold)
    }

    /// [`Hold::update`] of evidence that changes something, or may.
    #[inline(never)]
    fn fold(&mut self, now: i64, found: Option<Found>, hold: i64) -> bool {
        let Some(found) = found else {
            if self.since.is_none() {
                self.since = Some(now);
                self.seen = now;
                set_text(&mut self.reason, NOT_JUDGED);
                self.fixed = None;
                return true;
            }
            return false;
        };
        let first = self.since.is_none();
        let mut changed = false;
        if first || found.state > self.state {
            changed = self.since != Some(now);
            self.since = Some(now);
        } else if found.state < self.state {
            // Held while the evidence of the current state is recent; a clock that went
            // back (a recording) holds too.
            if now - self.seen < hold {
                return false;
            }
            changed = self.since != Some(now);
            self.since = Some(now);
        }
        changed |= (self.state, self.action) != (found.state, found.action);
        self.state = found.state;
        self.action = found.action;
        self.seen = now;
        match found.reason {
            // The text `reason` already holds, unless a caller wrote over it since: the
            // length tells the common such case (the field is public).
            Reason::Fixed(text)
                if self.fixed.is_some_and(|f| std::ptr::eq(f, text))
                    && self.reason.len() == text.len() => {}
            Reason::Fixed(text) => {
                changed |= set_text(&mut self.reason, text);
                self.fixed = Some(text);
            }
            Reason::Text(text) => {
                changed |= set_text(&mut self.reason, &text);
                self.fixed = None;
            }
        }
        changed
    }
}

/// Replaces `out` with `text`, reusing its allocation (and skipping the copy when equal);
/// whether it was not equal.
fn set_text(out: &mut String, text: &str) -> bool {
    if !crate::text::same(&out, text) {
        out.clear();
        out.push_str(text);
        return true;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(state: State, action: Action, reason: &str) -> Option<Found> {
        Some(Found {
            state,
            action,
            reason: Reason::Text(reason.into()),
        })
    }

    const HOLD: i64 = 300;

    #[test]
    fn worse_is_taken_at_once_and_better_only_after_the_hold() {
        let mut h = Hold::default();
        h.update(0, found(State::Healthy, Action::None, "ok"), HOLD);
        assert_eq!((h.state, h.since), (State::Healthy, Some(0)));
        h.update(10, found(State::Unhealthy, Action::ResetGpu, "bad"), HOLD);
        assert_eq!(
            (h.state, h.action, h.since),
            (State::Unhealthy, Action::ResetGpu, Some(10))
        );
        // The evidence goes, and comes back before the hold is over: no flap.
        h.update(20, found(State::Healthy, Action::None, "ok"), HOLD);
        assert_eq!((h.state, h.reason.as_str()), (State::Unhealthy, "bad"));
        h.update(
            200,
            found(State::Unhealthy, Action::ResetGpu, "bad again"),
            HOLD,
        );
        assert_eq!(
            (h.state, h.since, h.seen),
            (State::Unhealthy, Some(10), 200)
        );
        // Gone: still held until 300 s after it was last seen.
        h.update(499, found(State::Healthy, Action::None, "ok"), HOLD);
        assert_eq!(h.state, State::Unhealthy);
        h.update(500, found(State::Healthy, Action::None, "ok"), HOLD);
        assert_eq!(
            (h.state, h.action, h.since),
            (State::Healthy, Action::None, Some(500))
        );
        assert_eq!(h.reason, "ok");
    }

    #[test]
    fn unhealthy_steps_down_through_degraded() {
        let mut h = Hold::default();
        h.update(
            0,
            found(State::Unhealthy, Action::InspectHardware, "x"),
            HOLD,
        );
        h.update(400, found(State::Degraded, Action::ResetGpu, "y"), HOLD);
        assert_eq!((h.state, h.since), (State::Degraded, Some(400)));
        h.update(500, found(State::Healthy, Action::None, "ok"), HOLD);
        assert_eq!(h.state, State::Degraded);
        h.update(700, found(State::Healthy, Action::None, "ok"), HOLD);
        assert_eq!(h.state, State::Healthy);
    }

    #[test]
    fn nothing_to_judge_holds_the_state() {
        let mut h = Hold::default();
        h.update(0, None, HOLD);
        assert_eq!((h.state, h.reason.as_str()), (State::Healthy, NOT_JUDGED));
        h.update(
            5,
            found(State::Unhealthy, Action::DrainAndReboot, "lost"),
            HOLD,
        );
        h.update(10_000, None, HOLD);
        assert_eq!(h.state, State::Unhealthy);
    }

    #[test]
    fn a_fixed_reason_seen_again_is_the_held_text_and_any_other_replaces_it() {
        let mut h = Hold::default();
        h.update(0, super::healthy("all fine"), HOLD);
        h.update(10, super::healthy("all fine"), HOLD);
        assert_eq!(h.reason, "all fine");
        h.update(20, super::healthy("fine again"), HOLD);
        assert_eq!(h.reason, "fine again");
        h.update(
            30,
            found(State::Degraded, Action::ResetGpu, "all fine"),
            HOLD,
        );
        h.update(400, super::healthy("all fine"), HOLD);
        assert_eq!((h.state, h.reason.as_str()), (State::Healthy, "all fine"));
        // A text written over the held one (the field is public) is not taken for it.
        h.reason = "edited".into();
        h.update(410, super::healthy("all fine"), HOLD);
        assert_eq!(h.reason, "all fine");
        // What the hold skips comparing is not part of its value.
        let mut fresh = Hold::default();
        fresh.update(0, found(State::Healthy, Action::None, "all fine"), HOLD);
        fresh.since = h.since;
        fresh.seen = h.seen;
        assert_eq!(fresh, h);
    }

    #[test]
    fn an_update_says_whether_what_is_published_of_the_hold_may_have_changed() {
        let mut h = Hold::default();
        assert!(h.update(0, None, HOLD), "the first judgement");
        assert!(!h.update(5, None, HOLD), "nothing judged: the state holds");
        assert!(h.update(10, super::healthy("all fine"), HOLD));
        let published = |h: &Hold| (h.state, h.action, h.reason.clone(), h.since);
        let before = published(&h);
        assert!(!h.update(20, super::healthy("all fine"), HOLD));
        assert_eq!(published(&h), before, "only `seen` moved");
        assert_eq!(h.seen, 20);
        assert!(h.update(30, found(State::Degraded, Action::ResetGpu, "x"), HOLD));
        assert!(!h.update(40, found(State::Degraded, Action::ResetGpu, "x"), HOLD));
        assert!(h.update(50, found(State::Degraded, Action::ResetGpu, "y"), HOLD));
        assert!(h.update(
            60,
            found(State::Degraded, Action::InspectHardware, "y"),
            HOLD
        ));
        // Better evidence within the hold: held, nothing changes.
        let before = published(&h);
        assert!(!h.update(70, super::healthy("all fine"), HOLD));
        assert_eq!(published(&h), before);
        assert!(h.update(400, super::healthy("all fine"), HOLD));
    }

    #[test]
    fn a_clock_that_goes_back_holds() {
        let mut h = Hold::default();
        h.update(1_000, found(State::Degraded, Action::None, "x"), HOLD);
        h.update(0, found(State::Healthy, Action::None, "ok"), HOLD);
        assert_eq!(h.state, State::Degraded);
    }
}
