//! What each event loop publishes for the metrics endpoint: its totals,
//! stored into [`Metrics`] as atomics ([`publish`]).

use crate::metrics::{Metric, Metrics};
use crate::recorder::Recorder;
use crate::router::Router;
use crate::router_glue::RouterGlue;
use lockstep::low_level::transport::Server;

/// Driver-side packet figures.
#[derive(Default)]
pub(crate) struct Io {
    pub(crate) packets_in: u64,
    pub(crate) packets_out: u64,
    pub(crate) bytes_in: u64,
    pub(crate) bytes_out: u64,
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
    set(Metric::HandBacksRefused, r.hand_backs_refused);
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
    set(Metric::DropTokenWrongInstance, s.token_wrong_instance);
    set(Metric::DropCookieReplayed, s.cookie_replayed);
    set(Metric::DropHandshakeWhileHeard, s.handshake_while_heard);
    if let Some(rec) = recorder {
        set(Metric::RecordErrors, rec.errors());
        set(Metric::RecordingsLive, rec.live() as u64);
    }
}
