//! The transport [`Server`](super::Server)'s use of the shared
//! [`Schedule`](crate::schedule::Schedule): each connection's next deadline
//! is its `Connection::poll_timeout`, recomputed by the server after every
//! call into the connection (its state changes only through those calls), so
//! the timer pass, the transmit round robin and `poll_timeout` touch only the
//! connections due. Here: the key impl and the invariant the transport tests check.

use super::ConnId;
use crate::schedule::ScheduleKey;

impl ScheduleKey for ConnId {}

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
            let due = own.is_some_and(|t| t <= self.schedule.now());
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
