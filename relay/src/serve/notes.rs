//! What the serve loop reports to its caller ([`RelayNote`]), and the caps
//! that keep floods of refusals and send drops from becoming floods of
//! notes.

use crate::event::RouterEvent;
use crate::recorder::Recorded;
use lockstep::{Duration, Instant};
use std::net::SocketAddr;

/// What the relay driver reports to its caller, event by event.
#[derive(Debug)]
pub enum RelayNote<'a> {
    /// A router event, and the wall-clock time (Unix ms) the relay's
    /// recorder stamps it with (a match's recording and its live view's
    /// header carry the same start time).
    Event(&'a RouterEvent, u64),
    /// A match's replay was closed.
    Recorded(&'a Recorded),
    /// Recording failed for a match (the match goes on; reported once per match).
    RecordError(String),
    /// A peer was refused, with the reason it was sent: its join (a token
    /// for another match or slot, a running match, another game, a full or
    /// draining relay, ...) or its handshake (a missing, expired, reused or
    /// forged token, another protocol, a full server).
    Refused {
        /// The connection; `None` when the handshake was denied (no
        /// connection was ever made).
        conn: Option<crate::router::ConnId>,
        /// The peer's address.
        addr: SocketAddr,
        /// The match its join named (`None` before any join).
        match_name: Option<&'a str>,
        /// Why.
        reason: lockstep::low_level::proto::RejectReason,
        /// Specifics sent along, if any.
        detail: Option<&'a str>,
    },
    /// More refusals than [`REFUSAL_NOTES_PER_SEC`] came in one second;
    /// this many were counted (see the metrics) but not passed on one by one.
    RefusalsSuppressed {
        /// How many.
        count: u64,
    },
    /// Messages to peers were dropped before reaching the transport (a
    /// connection's send backlog overflowed, or the transport refused a
    /// message): `count` since the previous such note, at most one note per
    /// second, with the latest drop as an example. Each is also counted in
    /// the `relay_drops_total{reason="send_queue"}` metric.
    SendDropped {
        /// Drops since the previous note.
        count: u64,
        /// The latest one's connection.
        conn: crate::router::ConnId,
        /// The latest one.
        drop: lockstep::low_level::backlog::SendDrop,
    },
    /// The transport cut a connection off for misbehaving: it acknowledged
    /// nothing for the back-pressure timeout while it kept sending
    /// (`NoAcks`), or left its window full that long (`Backpressure`).
    CutOff {
        /// The connection.
        conn: crate::router::ConnId,
        /// Why.
        reason: lockstep::low_level::transport::DisconnectReason,
    },
    /// A graceful shutdown began: `running` matches may go on for `grace`.
    Draining {
        /// Matches running when the shutdown began.
        running: usize,
        /// How long they may go on.
        grace: Duration,
    },
    /// A hand-over began (SIGUSR2): the relay stops without ending its
    /// `running` matches, for the next process to resume them.
    HandingOver {
        /// Matches left running in their recordings.
        running: usize,
    },
}

/// Most [`RelayNote::Refused`] per second: a flood of bad handshakes must
/// not turn into a flood of log lines (the counters still count them all).
pub const REFUSAL_NOTES_PER_SEC: u64 = 20;

/// Caps refusal notes to [`REFUSAL_NOTES_PER_SEC`] per one-second window.
#[derive(Default)]
pub(crate) struct RefusalNotes {
    window: Option<Instant>,
    in_window: u64,
    suppressed: u64,
}

impl RefusalNotes {
    /// Whether to pass one more refusal on now; reports what a closed window suppressed.
    pub(crate) fn allow(&mut self, now: Instant, note: &mut impl FnMut(RelayNote<'_>)) -> bool {
        let fresh = self
            .window
            .is_none_or(|w| now.saturating_since(w) >= Duration::from_secs(1));
        if fresh {
            if self.suppressed > 0 {
                note(RelayNote::RefusalsSuppressed {
                    count: self.suppressed,
                });
            }
            *self = Self {
                window: Some(now),
                ..Self::default()
            };
        }
        if self.in_window < REFUSAL_NOTES_PER_SEC {
            self.in_window += 1;
            true
        } else {
            self.suppressed += 1;
            false
        }
    }

    /// Notes what a window that is over suppressed, without waiting for a
    /// refusal to open the next one: otherwise a flood's last count is
    /// never logged. The driver calls this at every wake-up (at least
    /// every 20 ms), so the count comes within a second of the flood's end.
    pub(crate) fn flush(&mut self, now: Instant, note: &mut impl FnMut(RelayNote<'_>)) {
        let over = self
            .window
            .is_some_and(|w| now.saturating_since(w) >= Duration::from_secs(1));
        if over && self.suppressed > 0 {
            note(RelayNote::RefusalsSuppressed {
                count: self.suppressed,
            });
            *self = Self::default();
        }
    }
}

/// Batches [`RelayNote::SendDropped`]: a stalled peer drops a message per
/// message sent to it, which must not turn into a log line each.
#[derive(Default)]
pub(crate) struct DropNotes {
    /// When the last note went out.
    noted: Option<Instant>,
    count: u64,
    latest: Option<(
        crate::router::ConnId,
        lockstep::low_level::backlog::SendDrop,
    )>,
}

impl DropNotes {
    /// Takes drop reports (the glue's, each once) and notes them if a
    /// second passed since the last note.
    pub(crate) fn note(
        &mut self,
        now: Instant,
        drops: impl IntoIterator<
            Item = (
                crate::router::ConnId,
                lockstep::low_level::backlog::SendDrop,
            ),
        >,
        note: &mut impl FnMut(RelayNote<'_>),
    ) {
        for d in drops {
            self.count += 1;
            self.latest = Some(d);
        }
        let due = self
            .noted
            .is_none_or(|n| now.saturating_since(n) >= Duration::from_secs(1));
        if let (true, Some((conn, drop))) = (due, self.latest) {
            note(RelayNote::SendDropped {
                count: self.count,
                conn,
                drop,
            });
            *self = Self {
                noted: Some(now),
                ..Self::default()
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::router::ConnId;
    use lockstep::low_level::backlog::{DropCause, SendDrop};
    use lockstep::low_level::transport::Channel;

    #[test]
    fn a_floods_last_suppressed_count_is_noted_when_its_window_ends() {
        let mut notes = RefusalNotes::default();
        let mut counts = Vec::new();
        let mut note = |n: RelayNote<'_>| {
            if let RelayNote::RefusalsSuppressed { count } = n {
                counts.push(count);
            }
        };
        let t0 = Instant::from_millis(5);
        let passed = (0..50).filter(|_| notes.allow(t0, &mut note)).count();
        assert_eq!(passed as u64, REFUSAL_NOTES_PER_SEC);
        notes.flush(t0 + Duration::from_millis(999), &mut note);
        notes.flush(t0 + Duration::from_secs(1), &mut note);
        notes.flush(t0 + Duration::from_secs(2), &mut note);
        assert!(notes.allow(t0 + Duration::from_secs(3), &mut note));
        assert_eq!(counts, vec![30], "once, when the window is over");
    }

    #[test]
    fn send_drops_are_noted_at_most_once_a_second_each_counted_once() {
        let drop = |len| {
            (
                ConnId(4),
                SendDrop {
                    channel: Channel::Reliable,
                    len,
                    cause: DropCause::Overflow,
                },
            )
        };
        let mut notes = DropNotes::default();
        let mut seen = Vec::new();
        let mut step = |notes: &mut DropNotes, ms, drops: Vec<_>| {
            notes.note(Instant::from_millis(ms), drops, &mut |n| {
                if let RelayNote::SendDropped { count, conn, drop } = n {
                    seen.push((ms, count, conn, drop.len));
                }
            });
        };
        step(&mut notes, 0, vec![]);
        step(&mut notes, 10, vec![drop(1), drop(2), drop(3)]);
        step(&mut notes, 500, vec![drop(4), drop(5)]);
        step(&mut notes, 900, vec![]);
        step(&mut notes, 1010, vec![]);
        step(&mut notes, 5000, vec![]);
        assert_eq!(
            seen,
            vec![(10, 3, ConnId(4), 3), (1010, 2, ConnId(4), 5)],
            "the first drops at once, the next ones a second later, then silence"
        );
    }
}
