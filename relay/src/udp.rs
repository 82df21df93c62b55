//! The relay's UDP serve loop: the only relay code that touches sockets and
//! the real clock. [`serve`] runs a transport `Server` + [`Router`] (+
//! optional [`Recorder`]) as one event loop of [`crate::serve`]. Peers run
//! on `lockstep::peer::udp`.

use crate::config::RelayConfig;
use crate::event::RouterEvent;
use crate::metrics::{Metric, Metrics};
use crate::recorder::{Recorded, Recorder};
use crate::router::Router;
use crate::router_glue::RouterGlue;
use lockstep::low_level::transport::{AuthMode, Server, TransportConfig};
use lockstep::{Duration, Instant};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// The per-process server secret for the stateless handshake cookies, from
/// the OS CSPRNG ([`crate::entropy::os_random`]): whoever could guess it
/// could forge cookies for any address.
///
/// # Errors
/// When the OS has no random source.
pub fn process_secret() -> io::Result<[u8; 32]> {
    crate::entropy::os_random("the handshake cookie secret")
}

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

/// How [`serve_with`] stops and what it publishes.
#[derive(Clone, Debug)]
pub struct ServeOptions<'a> {
    /// Set (e.g. by SIGTERM) to begin a graceful shutdown: no new matches,
    /// running ones may finish within `grace`, then every match left is
    /// ended (`MatchEnd` to its players) and every replay finalised.
    pub stop: &'a AtomicBool,
    /// Set (e.g. by SIGUSR2) to hand the running matches over to the next
    /// relay process: joins are refused and lobbies closed as in a drain,
    /// then the relay stops at once without ending any match. Their
    /// recordings stay unfinished, and a relay started on the same record
    /// directory and rejoin key resumes them (see [`crate::resume`]).
    pub handover: Option<&'a AtomicBool>,
    /// How long running matches may go on after `stop` is set.
    pub grace: Duration,
    /// Counters to publish for the metrics endpoint, if any.
    pub metrics: Option<Arc<Metrics>>,
    /// Who may connect: anyone ([`AuthMode::Open`], the default) or only
    /// holders of a join token sealed under the relay's key. In token mode
    /// the driver anchors the server's token clock to the wall clock.
    pub auth: AuthMode,
    /// The key of the hash that places each match on one of several event
    /// loops ([`crate::serve::home_of`]). `None` (what a relay should use):
    /// a fresh key from the OS CSPRNG, so clients cannot choose match names
    /// that all land on one loop. A fixed key is for tests that must know
    /// where a match lives.
    pub home_key: Option<[u8; 32]>,
    /// The relay-wide memory budget in bytes (`--max-memory-mib`, default
    /// [`crate::limits::DEFAULT_MAX_MEMORY_BYTES`]): see
    /// [`crate::limits::MemoryBudget`] for what is refused at it.
    pub max_memory: usize,
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

/// Serves matches on `socket` until `stop` is set, then ends every match at
/// once (finalising its replay). Every router event (and every finished
/// recording) is passed to `note`.
pub fn serve(
    socket: &UdpSocket,
    config: RelayConfig,
    transport: TransportConfig,
    recorder: Option<Recorder>,
    stop: &AtomicBool,
    note: impl FnMut(RelayNote<'_>),
) -> io::Result<()> {
    let opts = ServeOptions {
        stop,
        handover: None,
        grace: Duration::ZERO,
        metrics: None,
        auth: AuthMode::Open,
        home_key: None,
        max_memory: crate::limits::DEFAULT_MAX_MEMORY_BYTES,
    };
    serve_with(socket, config, transport, recorder, &opts, note)
}

/// Driver-side packet figures.
#[derive(Default)]
pub(crate) struct Io {
    pub(crate) packets_in: u64,
    pub(crate) packets_out: u64,
    pub(crate) bytes_in: u64,
    pub(crate) bytes_out: u64,
}

/// Serves matches on `socket` until a graceful shutdown completes (see
/// [`ServeOptions::stop`]); returns `Ok` once every match has ended and every
/// replay is finalised. One event loop on the calling thread; see
/// [`crate::serve::serve_loops`] for several.
pub fn serve_with(
    socket: &UdpSocket,
    config: RelayConfig,
    transport: TransportConfig,
    recorder: Option<Recorder>,
    opts: &ServeOptions<'_>,
    note: impl FnMut(RelayNote<'_>),
) -> io::Result<()> {
    crate::serve::serve_one(socket.try_clone()?, config, transport, recorder, opts, note)
}

/// Publishes loop `i`'s totals: the counters every time (each an atomic
/// store), the gauges that walk every match (matches running, snapshot
/// memory) only when `gauges` is set, because a loop publishes on every
/// wake-up and a walk over every match per wake-up is what the router's
/// schedule exists to avoid.
#[allow(clippy::too_many_arguments)]
pub(crate) fn publish(
    m: &Metrics,
    i: usize,
    router: &Router,
    server: &Server,
    glue: &RouterGlue,
    recorder: Option<&Recorder>,
    io: &Io,
    gauges: bool,
) {
    let r = router.counters();
    let s = server.counters();
    let set = |k, v: u64| m.set_loop(i, k, v);
    set(Metric::Matches, router.match_count() as u64);
    set(Metric::MatchesStarted, r.matches_started);
    set(Metric::MatchesEnded, r.matches_ended);
    set(Metric::Peers, router.connection_count() as u64);
    set(Metric::PacketsIn, io.packets_in);
    set(Metric::PacketsOut, io.packets_out);
    set(Metric::BytesIn, io.bytes_in);
    set(Metric::BytesOut, io.bytes_out);
    set(Metric::MessagesIn, r.messages);
    set(Metric::DropMalformed, s.malformed);
    set(Metric::DropWrongVersion, s.wrong_version);
    set(Metric::DropWrongProtocol, s.wrong_protocol);
    set(Metric::DropServerFull, s.denied_full);
    set(Metric::DropBadCookie, s.bad_cookie);
    set(Metric::DropExpiredCookie, s.expired_cookie);
    set(Metric::DropUnknownSender, s.unknown_sender);
    set(Metric::DropAuthFailed, s.auth_failed);
    set(Metric::DropReplayed, s.replayed);
    set(Metric::DropRepliesQueueFull, s.replies_dropped);
    set(Metric::DropMessageUndecodable, r.decode_errors);
    set(Metric::DropMessageBadState, r.bad_state);
    set(Metric::DropInputLate, r.inputs_late);
    set(Metric::DropInputDuplicate, r.inputs_duplicate);
    set(Metric::DropInputRefused, r.inputs_refused);
    set(Metric::DropInputOverBudget, r.inputs_over_budget);
    set(Metric::ClockSeqRepeated, r.clock_seq_repeated);
    set(Metric::ClockSeqJumped, r.clock_seq_jumped);
    set(Metric::DropHashRefused, r.hashes_refused);
    set(Metric::DropSendQueue, glue.dropped());
    set(
        Metric::DropConnectionsRefused,
        r.connections_refused + glue.quota_refused(),
    );
    set(Metric::DropJoinsRefused, r.joins_refused);
    set(Metric::DropRateLimitedConn, r.rate_limited);
    set(Metric::Desyncs, r.desynced_turns);
    set(Metric::StallTurnsDeadline, r.turns_closed_by_deadline);
    set(Metric::StallTurnsWaiting, r.turns_waiting);
    set(Metric::TurnsClosed, r.turns_closed);
    set(Metric::PlayersDropped, r.drops);
    if gauges {
        set(Metric::MatchesRunning, router.running_count() as u64);
        let (snap, upload, tail, tail_turns) = router.snapshot_memory();
        set(Metric::SnapshotBytes, snap as u64);
        set(Metric::SnapshotUploadBytes, upload as u64);
        set(Metric::SnapshotTailBytes, tail as u64);
        set(Metric::SnapshotTailTurns, tail_turns as u64);
    }
    set(Metric::SnapshotsAgreed, r.snapshots_agreed);
    set(Metric::SnapshotsRefused, r.snapshots_refused);
    set(Metric::SnapshotRestoresFailed, r.snapshot_restores_failed);
    set(Metric::SnapshotsReoffered, r.snapshots_reoffered);
    set(Metric::SnapshotCopiesRefused, r.snapshot_copies_refused);
    set(Metric::MemoryRefused, r.memory_refused);
    set(Metric::Rejoins, r.rejoins);
    set(Metric::RejoinsRefused, r.rejoins_refused);
    set(Metric::SpectatorHashesVerified, r.spectator_hashes_verified);
    set(Metric::SpectatorHashMismatches, r.spectator_hash_mismatches);
    set(
        Metric::SpectatorHashesUnchecked,
        r.spectator_hashes_unchecked,
    );
    set(Metric::MatchesResumed, r.matches_resumed);
    set(Metric::Reconnects, r.reconnects);
    set(Metric::TurnsHandedBack, r.turns_handed_back);
    set(Metric::DropBulkRefused, s.bulk_refused);
    set(Metric::DropBulkExpired, s.bulk_expired);
    set(Metric::DropReorderRefused, s.reorder_refused);
    set(Metric::ConnectionsCutOff, glue.cut_off_total());
    set(Metric::DropTokenMissing, s.token_missing);
    set(Metric::DropTokenExpired, s.token_expired);
    set(Metric::DropTokenForged, s.token_forged);
    set(Metric::DropTokenReused, s.token_reused);
    set(Metric::DropTokenTableFull, s.token_table_full);
    set(Metric::DropTokenWrongMatch, s.token_wrong_match);
    set(Metric::DropTokenWrongSlot, s.token_wrong_slot);
    set(Metric::DropTokenWrongKind, s.token_wrong_kind);
    if let Some(rec) = recorder {
        set(Metric::RecordErrors, rec.errors());
        set(Metric::RecordingsLive, rec.live() as u64);
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
