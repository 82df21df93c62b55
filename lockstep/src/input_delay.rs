//! The input-delay schedule a session follows: which delay applies at which
//! local turn, so that every peer maps "issued during turn t" to the same
//! target turn `t + d(t)`.

use sim::Turn;

/// The agreed input delays, each in force from a turn on.
#[derive(Clone, Debug)]
pub(crate) struct DelaySchedule {
    /// `(from_turn, delay)`, sorted by turn; the first entry covers the match start.
    changes: Vec<(Turn, u8)>,
}

impl DelaySchedule {
    /// A schedule with `delay` in force from `first_turn`.
    #[must_use]
    pub(crate) fn new(first_turn: Turn, delay: u8) -> Self {
        Self {
            changes: vec![(first_turn, delay)],
        }
    }

    /// Records "delay `delay` from turn `from`". Changes arrive in turn order;
    /// one that does not lie after the latest is ignored (returns false) so a
    /// replayed notice cannot rewrite the past.
    pub(crate) fn change(&mut self, from: Turn, delay: u8) -> bool {
        if self.changes.last().is_some_and(|&(t, _)| from <= t) {
            return false;
        }
        self.changes.push((from, delay));
        // Only the entry in force and the ones after it can still matter; keep a few.
        if self.changes.len() > 16 {
            self.changes.remove(0);
        }
        true
    }

    /// The delay in force at local turn `turn`.
    #[must_use]
    pub(crate) fn delay_at(&self, turn: Turn) -> u8 {
        self.changes
            .iter()
            .rev()
            .find(|&&(t, _)| t <= turn)
            .or(self.changes.first())
            .map_or(0, |&(_, d)| d)
    }

    /// The most recently announced delay.
    #[must_use]
    pub(crate) fn latest(&self) -> u8 {
        self.changes.last().map_or(0, |&(_, d)| d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_follows_changes_in_turn_order() {
        let mut s = DelaySchedule::new(Turn(0), 3);
        assert_eq!(s.delay_at(Turn(0)), 3);
        assert!(s.change(Turn(10), 5));
        assert!(!s.change(Turn(10), 7));
        assert!(!s.change(Turn(4), 7));
        assert_eq!(s.delay_at(Turn(9)), 3);
        assert_eq!(s.delay_at(Turn(10)), 5);
        assert_eq!(s.latest(), 5);
    }
}
