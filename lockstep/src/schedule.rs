//! Which of many timed things (a server's connections, a relay's matches)
//! have something due, so a wake-up's work grows with what is due and not
//! with how many things exist.
//!
//! A relay holds thousands of connections and matches, and on any one
//! wake-up only a few have a timer that fired. Asking every one on every
//! wake-up (as the transport server and the relay's router once did) made
//! the per-wake-up cost grow with the load, not with the work: about a third
//! of the relay's CPU at 512 matches. The schedule keeps each key's next
//! deadline (its owner's `poll_timeout`, recomputed by the owner after every
//! call that changes it) in deadline order, and the keys whose deadline has
//! come in key order, so a timer pass, a transmit round robin and a
//! `poll_timeout` touch only those.
//!
//! Exactness is the owner's duty: a key's deadline must depend only on state
//! the owner changes through calls it reschedules after.

use crate::idhash::IdMap;
use crate::time::Instant;
use std::collections::BTreeSet;
use std::hash::Hash;
use std::ops::Bound;

/// A key of a [`Schedule`]: ordered, copied, hashed, with a largest value
/// (the schedule's range bounds use it).
pub trait ScheduleKey: Ord + Copy + Hash {
    /// The largest key.
    const MAX: Self;
}

/// Deadlines by time, and the keys already due: use it for anything with
/// many timers of which few fire per wake-up (see the module docs).
#[derive(Debug)]
pub struct Schedule<K> {
    /// Every key that has a deadline, earliest first.
    by_time: BTreeSet<(Instant, K)>,
    /// Each scheduled key's deadline (its entry in `by_time`), looked up on
    /// every change: a hash map, with the id hasher (keys are ids the owner
    /// assigned, see [`crate::idhash`]).
    deadline: IdMap<K, Instant>,
    /// Keys whose deadline is at or before `now`, in key order (the
    /// transport server's transmit round robin walks them in order).
    due: BTreeSet<K>,
    /// The latest time the schedule was told.
    now: Instant,
}

impl<K: ScheduleKey> Schedule<K> {
    /// Sets `id`'s deadline (`None`: nothing will ever be due, e.g. closed).
    pub fn set(&mut self, id: K, at: Option<Instant>) {
        let old = match at {
            Some(t) => self.deadline.insert(id, t),
            None => self.deadline.remove(&id),
        };
        if old == at {
            return;
        }
        if let Some(t) = old {
            self.by_time.remove(&(t, id));
        }
        match at {
            Some(t) => {
                self.by_time.insert((t, id));
                if t <= self.now {
                    self.due.insert(id);
                } else {
                    self.due.remove(&id);
                }
            }
            None => {
                self.due.remove(&id);
            }
        }
    }

    /// Forgets `id` (its owner is gone).
    pub fn remove(&mut self, id: K) {
        self.set(id, None);
    }

    /// Moves the clock to `now` (never back): deadlines passed meanwhile become due.
    pub fn advance(&mut self, now: Instant) {
        if now <= self.now {
            return;
        }
        let from = Bound::Excluded((self.now, K::MAX));
        let to = Bound::Included((now, K::MAX));
        for &(_, id) in self.by_time.range((from, to)) {
            self.due.insert(id);
        }
        self.now = now;
    }

    /// The latest time the schedule was told.
    #[must_use]
    pub fn now(&self) -> Instant {
        self.now
    }

    /// The earliest deadline of any key.
    #[must_use]
    pub fn first(&self) -> Option<Instant> {
        self.by_time.first().map(|&(t, _)| t)
    }

    /// How many keys are due.
    #[must_use]
    pub fn due_len(&self) -> usize {
        self.due.len()
    }

    /// The due keys, in key order.
    pub fn due(&self) -> impl Iterator<Item = K> + '_ {
        self.due.iter().copied()
    }

    /// The first due key strictly after `after` in key order, wrapping
    /// around to the first one (`after` need not be due, or exist).
    #[must_use]
    pub fn due_after(&self, after: Option<K>) -> Option<K> {
        after
            .and_then(|c| {
                self.due
                    .range((Bound::Excluded(c), Bound::Unbounded))
                    .next()
            })
            .or_else(|| self.due.first())
            .copied()
    }

    /// The deadline recorded for `id` (owners check it against their own in tests).
    #[must_use]
    pub fn deadline_of(&self, id: K) -> Option<Instant> {
        self.deadline.get(&id).copied()
    }

    /// Whether `id` is in the due set.
    #[must_use]
    pub fn is_due(&self, id: K) -> bool {
        self.due.contains(&id)
    }

    /// How many keys have a deadline.
    #[must_use]
    pub fn len(&self) -> usize {
        self.deadline.len()
    }

    /// Whether no key has a deadline.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.deadline.is_empty()
    }
}

impl<K: ScheduleKey> Default for Schedule<K> {
    fn default() -> Self {
        Self {
            by_time: BTreeSet::new(),
            deadline: IdMap::default(),
            due: BTreeSet::new(),
            now: Instant::ZERO,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
    struct ConnId(u32);
    impl ScheduleKey for ConnId {
        const MAX: Self = Self(u32::MAX);
    }

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    #[test]
    fn deadlines_become_due_when_the_clock_reaches_them_and_not_before() {
        let mut s = Schedule::<ConnId>::default();
        s.set(ConnId(1), Some(at(10)));
        s.set(ConnId(2), Some(at(20)));
        s.set(ConnId(3), None);
        assert_eq!(s.first(), Some(at(10)));
        assert_eq!(s.due_len(), 0);
        s.advance(at(10));
        assert_eq!(s.due().collect::<Vec<_>>(), [ConnId(1)]);
        s.advance(at(19));
        assert_eq!(s.due_len(), 1);
        s.advance(at(25));
        assert_eq!(s.due().collect::<Vec<_>>(), [ConnId(1), ConnId(2)]);
        // Pushed back past now: no longer due; cleared: gone everywhere.
        s.set(ConnId(1), Some(at(30)));
        s.remove(ConnId(2));
        assert_eq!(s.due_len(), 0);
        assert_eq!(s.first(), Some(at(30)));
        assert_eq!(s.len(), 1);
        // A deadline already passed is due at once.
        s.set(ConnId(4), Some(at(5)));
        assert!(s.is_due(ConnId(4)));
        assert_eq!(s.first(), Some(at(5)));
    }

    #[test]
    fn the_round_robin_wraps_and_skips_connections_not_due() {
        let mut s = Schedule::<ConnId>::default();
        for id in [1, 3, 5] {
            s.set(ConnId(id), Some(at(0)));
        }
        s.set(ConnId(4), Some(at(100)));
        assert_eq!(s.due_after(None), Some(ConnId(1)));
        assert_eq!(s.due_after(Some(ConnId(1))), Some(ConnId(3)));
        assert_eq!(s.due_after(Some(ConnId(3))), Some(ConnId(5)));
        assert_eq!(s.due_after(Some(ConnId(5))), Some(ConnId(1)));
        // A cursor naming a connection that is gone or not due.
        assert_eq!(s.due_after(Some(ConnId(2))), Some(ConnId(3)));
        assert_eq!(s.due_after(Some(ConnId(9))), Some(ConnId(1)));
    }
}
