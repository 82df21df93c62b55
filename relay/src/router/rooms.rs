//! The router's matches and their timer schedule: which matches have a
//! timer due, so a wake-up ticks only those instead of every match.
//!
//! A relay loop holds hundreds or thousands of matches; under the `clock`
//! policy each has a turn to close every turn length and pings to send, and
//! on any one wake-up only a few are due. Every change to a match goes
//! through [`Rooms::get_mut`] or [`Rooms::insert`], which mark it dirty; the
//! router calls [`Rooms::reschedule`] at the end of each of its entry points,
//! which recomputes the dirty matches' `poll_timeout` (a match's deadline
//! depends only on its own state and the relay's configuration). The
//! shared [`Schedule`] is the transport server's mechanism, keyed by match.

use crate::config::RelayConfig;
use crate::event::MatchId;
use crate::matchroom::MatchRoom;
use lockstep::Instant;
use lockstep::low_level::schedule::{Schedule, ScheduleKey};
use std::collections::BTreeMap;

impl ScheduleKey for MatchId {}

/// Matches by id, with each one's next deadline.
#[derive(Debug, Default)]
pub(super) struct Rooms {
    map: BTreeMap<MatchId, MatchRoom>,
    schedule: Schedule<MatchId>,
    /// Matches changed since the last [`Rooms::reschedule`].
    dirty: Vec<MatchId>,
}

impl Rooms {
    pub(super) fn get(&self, id: &MatchId) -> Option<&MatchRoom> {
        self.map.get(id)
    }

    /// The match, to change: its deadline is recomputed at the next
    /// [`Rooms::reschedule`].
    pub(super) fn get_mut(&mut self, id: &MatchId) -> Option<&mut MatchRoom> {
        let m = self.map.get_mut(id)?;
        self.dirty.push(*id);
        Some(m)
    }

    pub(super) fn insert(&mut self, id: MatchId, room: MatchRoom) {
        self.map.insert(id, room);
        self.dirty.push(id);
    }

    pub(super) fn remove(&mut self, id: &MatchId) -> Option<MatchRoom> {
        self.schedule.remove(*id);
        self.map.remove(id)
    }

    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub(super) fn keys(&self) -> impl Iterator<Item = &MatchId> {
        self.map.keys()
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &MatchRoom> {
        self.map.values()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&MatchId, &MatchRoom)> {
        self.map.iter()
    }

    /// Recomputes the deadline of every match changed since the last call.
    pub(super) fn reschedule(&mut self, config: &RelayConfig) {
        // Drained in place: the list keeps its capacity (taking it made
        // every router call grow a new one, about 1.5 % of a loaded relay).
        for id in self.dirty.drain(..) {
            let at = self.map.get(&id).and_then(|m| m.poll_timeout(config));
            self.schedule.set(id, at);
        }
    }

    /// Moves the clock to `now` and puts the matches whose deadline has come
    /// into `due` (cleared first), in id order.
    pub(super) fn due(&mut self, now: Instant, due: &mut Vec<MatchId>) {
        self.schedule.advance(now);
        due.clear();
        due.extend(self.schedule.due());
    }

    /// The earliest deadline of any match.
    pub(super) fn first(&self) -> Option<Instant> {
        debug_assert!(
            self.dirty.is_empty(),
            "a router entry point left matches unscheduled"
        );
        self.schedule.first()
    }

    /// The schedule's invariant: every match's recorded deadline is its own
    /// `poll_timeout`, and nothing else is scheduled. Checked in debug builds
    /// by [`Router::poll_timeout`](super::Router::poll_timeout), so every
    /// router and turn test checks it after each step.
    #[cfg(debug_assertions)]
    pub(super) fn check(&self, config: &RelayConfig) {
        let mut scheduled = 0;
        for (&id, m) in &self.map {
            let own = m.poll_timeout(config);
            assert_eq!(self.schedule.deadline_of(id), own, "deadline of match {id}");
            scheduled += usize::from(own.is_some());
        }
        assert_eq!(self.schedule.len(), scheduled, "entries of gone matches");
    }
}

#[cfg(test)]
mod tests {
    use super::super::{ConnId, Router};
    use crate::config::RelayConfig;
    use lockstep::Instant;
    use std::net::{Ipv4Addr, SocketAddr};

    /// 300 running matches started 1 ms apart: a wake-up at the earliest
    /// deadline ticks the one match due, not all 300 (the router once ran
    /// every match's timers and asked every match for its deadline on every
    /// wake-up), and the schedule stays exact through a minute of turns.
    #[test]
    fn a_wake_up_ticks_only_the_matches_due_among_hundreds() {
        const MATCHES: u32 = 300;
        let mut r = Router::new(RelayConfig::default());
        for i in 0..MATCHES {
            let now = Instant::from_millis(10 + u64::from(i));
            for p in 0..2 {
                let conn = ConnId(i * 2 + p);
                let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, 1000 + (i * 2 + p) as u16));
                assert!(r.handle_connected(now, conn, addr));
                let join = crate::test_support::join_bytes(&format!("m{i}"), &format!("p{p}"));
                r.handle_message(now, conn, &join);
            }
        }
        while r.poll_outgoing().is_some() {}
        assert_eq!(r.running_count(), MATCHES as usize);
        let mut passes = 0;
        let mut visited = 0;
        while let Some(t) = r.poll_timeout() {
            if t > Instant::from_millis(2_000) {
                break;
            }
            let due_by_hand = r
                .matches
                .values()
                .filter(|m| m.poll_timeout(&r.config).is_some_and(|d| d <= t))
                .count();
            r.handle_timeout(t);
            assert_eq!(r.due.len(), due_by_hand, "ticked exactly the due matches");
            assert!(
                r.due.len() < MATCHES as usize / 10,
                "{} ticked",
                r.due.len()
            );
            while r.poll_outgoing().is_some() {}
            passes += 1;
            visited += r.due.len();
        }
        // Every match had timers in those 2 s (turns, pings), one pass each time.
        assert!(passes > MATCHES as usize, "{passes} passes");
        assert!(visited >= passes);
    }
}
