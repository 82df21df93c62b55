//! Which of a [`Server`](super::Server)'s connections have something due.
//!
//! A relay holds thousands of connections, and on any one wake-up only a
//! few have a timer that fired or a packet to send. Asking every connection
//! on every wake-up (as the server once did) made the per-wake-up cost grow
//! with the number of connections, not with the work; about a third of the
//! relay's CPU at 512 matches. The schedule keeps each connection's next
//! deadline (its `poll_timeout`, recomputed by the server after every call
//! that changes the connection) in deadline order, and the connections whose
//! deadline has come in id order, so the server's timer pass, its transmit
//! round robin and its own `poll_timeout` touch only those.
//!
//! A connection's deadline depends only on its own state, and its state
//! changes only through the server's calls into it, so recomputing after each
//! such call keeps the schedule exact: a connection left out of a pass would
//! have done nothing in it (see `Connection::poll_timeout`).

use super::ConnId;
use crate::time::Instant;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

/// Deadlines by time, and the connections already due.
#[derive(Debug, Default)]
pub(super) struct Schedule {
    /// Every connection that has a deadline, earliest first.
    by_time: BTreeSet<(Instant, ConnId)>,
    /// Each scheduled connection's deadline (its key in `by_time`).
    deadline: BTreeMap<ConnId, Instant>,
    /// Connections whose deadline is at or before `now`, in id order (the
    /// transmit round robin walks them by id, as it walked every connection).
    due: BTreeSet<ConnId>,
    /// The latest time the server was told.
    now: Instant,
}

impl Schedule {
    /// Sets `id`'s deadline (`None`: nothing will ever be due, e.g. closed).
    pub(super) fn set(&mut self, id: ConnId, at: Option<Instant>) {
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

    /// Forgets `id` (its connection is gone).
    pub(super) fn remove(&mut self, id: ConnId) {
        self.set(id, None);
    }

    /// Moves the clock to `now` (never back): deadlines passed meanwhile become due.
    pub(super) fn advance(&mut self, now: Instant) {
        if now <= self.now {
            return;
        }
        let from = Bound::Excluded((self.now, ConnId(u32::MAX)));
        let to = Bound::Included((now, ConnId(u32::MAX)));
        for &(_, id) in self.by_time.range((from, to)) {
            self.due.insert(id);
        }
        self.now = now;
    }

    /// The earliest deadline of any connection.
    pub(super) fn first(&self) -> Option<Instant> {
        self.by_time.first().map(|&(t, _)| t)
    }

    /// How many connections are due.
    pub(super) fn due_len(&self) -> usize {
        self.due.len()
    }

    /// The due connections, in id order.
    pub(super) fn due(&self) -> impl Iterator<Item = ConnId> + '_ {
        self.due.iter().copied()
    }

    /// The first due connection strictly after `after` in id order, wrapping
    /// around to the first one (`after` need not be due, or exist).
    pub(super) fn due_after(&self, after: Option<ConnId>) -> Option<ConnId> {
        after
            .and_then(|c| {
                self.due
                    .range((Bound::Excluded(c), Bound::Unbounded))
                    .next()
            })
            .or_else(|| self.due.first())
            .copied()
    }

    /// The deadline recorded for `id` (tests check it against the connection's own).
    #[cfg(test)]
    pub(super) fn deadline_of(&self, id: ConnId) -> Option<Instant> {
        self.deadline.get(&id).copied()
    }

    /// Whether `id` is in the due set.
    #[cfg(test)]
    pub(super) fn is_due(&self, id: ConnId) -> bool {
        self.due.contains(&id)
    }

    /// How many connections have a deadline.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        debug_assert_eq!(self.deadline.len(), self.by_time.len());
        self.deadline.len()
    }
}

/// The schedule's invariant, checked by the transport tests after every
/// step: each connection's recorded deadline is its own `poll_timeout`, and
/// exactly the connections whose deadline has come are due.
#[cfg(test)]
impl super::Server {
    pub(crate) fn check_schedule(&self) {
        let mut scheduled = 0;
        for (&id, slot) in &self.conns {
            let own = slot.conn.poll_timeout();
            assert_eq!(self.schedule.deadline_of(id), own, "deadline of {id:?}");
            scheduled += usize::from(own.is_some());
            let due = own.is_some_and(|t| t <= self.schedule.now);
            assert_eq!(self.schedule.is_due(id), due, "due set, {id:?}");
        }
        assert_eq!(
            self.schedule.len(),
            scheduled,
            "entries of gone connections"
        );
        assert_eq!(self.schedule.due_len(), self.schedule.due().count());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    #[test]
    fn deadlines_become_due_when_the_clock_reaches_them_and_not_before() {
        let mut s = Schedule::default();
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
        let mut s = Schedule::default();
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
