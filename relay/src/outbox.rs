//! What handling one input produced, shared by the router and its match
//! rooms: messages to send, events to report and the counters. It lives
//! apart from both so that a match room never imports the router.

use crate::event::RouterEvent;
use lockstep::low_level::proto::{Delivery, MAX_SNAPSHOT_CHUNK, SnapshotChunk, ToPeer};
use lockstep::low_level::transport::ConnId;
use sim::{StateHash, Turn};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

/// Counters of everything the router did or refused.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RouterCounters {
    /// Messages received.
    pub messages: u64,
    /// Message bytes received.
    pub bytes_in: u64,
    /// Message bytes queued for sending.
    pub bytes_out: u64,
    /// Messages that did not decode.
    pub decode_errors: u64,
    /// Messages dropped by the per-connection rate limit.
    pub rate_limited: u64,
    /// Messages that made no sense in the connection's state.
    pub bad_state: u64,
    /// Desync forensics answers not asked for (another turn, section or
    /// peer, or a second answer); answers that were asked for but do not
    /// check against the reported hashes are noted in the report instead.
    pub forensics_refused: u64,
    /// Connections refused (limit reached).
    pub connections_refused: u64,
    /// Joins refused.
    pub joins_refused: u64,
    /// New connections, joins and spectators refused because the relay was
    /// at its memory budget (`MemoryFull`; also counted as refused joins or
    /// connections).
    pub memory_refused: u64,
    /// Inputs accepted on time.
    pub inputs: u64,
    /// Inputs that arrived after their turn closed.
    pub inputs_late: u64,
    /// Inputs for a turn the player already sent.
    pub inputs_duplicate: u64,
    /// Inputs refused (too far ahead, past the end, dropped player).
    pub inputs_refused: u64,
    /// Inputs refused because they would take their player over its byte or
    /// entry budget for the turn (the sender gets `InputRefused`).
    pub inputs_over_budget: u64,
    /// `clock` policy: inputs whose sequence number was not above the
    /// player's previous one (a repeat or a step back). Stamped by arrival
    /// like any other: the sequence only names the input in `InputRefused`.
    pub clock_seq_repeated: u64,
    /// `clock` policy: inputs whose sequence number jumped more than
    /// `Limits::max_turns_ahead` past the player's previous one (a peer
    /// sends one per turn). Stamped by arrival too.
    pub clock_seq_jumped: u64,
    /// Turns closed.
    pub turns_closed: u64,
    /// Turns closed by the deadline with inputs missing.
    pub turns_closed_by_deadline: u64,
    /// Turns that passed their deadline waiting (strict policy).
    pub turns_waiting: u64,
    /// Hash reports accepted.
    pub hash_reports: u64,
    /// Hash reports refused (stale, duplicate, for an open turn).
    pub hashes_refused: u64,
    /// Turns whose hashes disagreed.
    pub desynced_turns: u64,
    /// Players dropped.
    pub drops: u64,
    /// Input delay changes announced.
    pub delay_changes: u64,
    /// Matches started.
    pub matches_started: u64,
    /// Matches rebuilt from their recordings at a relay restart.
    pub matches_resumed: u64,
    /// Matches ended.
    pub matches_ended: u64,
    /// Joins refused because the connection's token names another match.
    pub token_wrong_match: u64,
    /// Joins refused because the token's slot is outside the match or taken.
    pub token_wrong_slot: u64,
    /// Joins, rejoins or spectate requests refused because the token is of
    /// the other kind (spectator token to play, player token to watch).
    pub token_wrong_kind: u64,
    /// Joins, rejoins or spectate requests refused because the token is of
    /// another instance of the match's name: an earlier match's token.
    pub token_wrong_instance: u64,
    /// Rejoins accepted (the player got the snapshot and the tail, or, for
    /// a reconnect, the bundles it lacked).
    pub rejoins: u64,
    /// Reconnects: players (counted in `rejoins` too) and spectators that
    /// kept their world and got only the bundles they lacked (after a relay
    /// restart or a broken path).
    pub reconnects: u64,
    /// Turns a restarted relay had lost and adopted from the copies its
    /// players handed back (every holder's copy alike).
    pub turns_handed_back: u64,
    /// Players refused after a restart because a bundle they handed back
    /// (or would have: the relay does not tag its bundles) did not prove
    /// that the relay sent it (`RejectReason::UnprovenHandBack`).
    pub hand_backs_refused: u64,
    /// Rejoins refused (wrong secret or slot, hold expired, no snapshot).
    pub rejoins_refused: u64,
    /// Snapshots asked of a player.
    pub snapshots_requested: u64,
    /// Uploaded snapshots kept: their hash was the turn's agreed hash.
    pub snapshots_agreed: u64,
    /// Uploaded snapshots thrown away (hash not agreed, too large, out of order).
    pub snapshots_refused: u64,
    /// Snapshot bytes sent to rejoining peers and spectators.
    pub snapshot_bytes_out: u64,
    /// Restores of an agreed snapshot that failed at a receiver (a
    /// rejoining or healed player, a spectator): the snapshot did not
    /// decode or its world's hash was not the agreed one. The receiver
    /// keeps its place and gets a replacement; the uploader is skipped.
    pub snapshot_restores_failed: u64,
    /// Replacement bases sent to receivers whose restore failed.
    pub snapshots_reoffered: u64,
    /// Snapshot copies not queued because one was already on its way to
    /// that connection, not yet reported restored or failed.
    pub snapshot_copies_refused: u64,
    /// Spectators admitted.
    pub spectators_joined: u64,
    /// Spectator hash reports equal to the turn's agreed hash.
    pub spectator_hashes_verified: u64,
    /// Spectator hash reports that differ from the turn's agreed hash.
    pub spectator_hash_mismatches: u64,
    /// Spectator hash reports for a turn not judged (yet) or forgotten.
    pub spectator_hashes_unchecked: u64,
}

/// Messages and events produced while handling an input; the router drains
/// it through its `poll_*` methods.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    pub(crate) msgs: VecDeque<(ConnId, Delivery, Vec<u8>)>,
    pub(crate) events: VecDeque<RouterEvent>,
    pub(crate) counters: RouterCounters,
    /// Connections a match let go of (a player dropped by silence): the
    /// router clears their seat so they no longer reach the match.
    pub(crate) detached: Vec<ConnId>,
    /// Changes to which connections may send bulk data, and how large a
    /// message: the transport refuses bulk data the relay did not ask for.
    pub(crate) bulk_grants: VecDeque<(ConnId, usize)>,
    /// Per connection, the snapshot being streamed to it (or streamed and
    /// not yet reported on by its receiver: failed, nor, a player, caught
    /// up from): at most one per connection, so a receiver that asks again
    /// meanwhile (a spectator leaving and spectating again) cannot pile
    /// copies up. Every stream shares the match's one copy of the bytes;
    /// the glue takes the next chunk only when the connection's bulk path
    /// has room. Cleared when the connection closes.
    pub(crate) in_flight: BTreeMap<ConnId, SnapshotStream>,
    /// Which parts of the relay's memory budget are full; at the
    /// snapshots' share no snapshot upload is asked for (see
    /// `Router::set_memory`).
    pub(crate) memory: crate::limits::MemoryPressure,
}

/// One receiver's place in the snapshot it is being sent: the bytes are
/// shared with the match and every other receiver, so a stream costs a
/// few words, not a copy.
#[derive(Clone, Debug)]
pub(crate) struct SnapshotStream {
    pub(crate) turn: Turn,
    pub(crate) hash: StateHash,
    pub(crate) bytes: Arc<[u8]>,
    /// Bytes already handed to the transport.
    pub(crate) offset: usize,
}

impl SnapshotStream {
    /// The next chunk message and the snapshot bytes it carries, or
    /// `None` once every chunk was handed out; [`SnapshotStream::advance`]
    /// by those bytes once the transport took it.
    pub(crate) fn next_chunk(&self) -> Option<(Vec<u8>, usize)> {
        let rest = self.bytes.get(self.offset..).filter(|r| !r.is_empty())?;
        let piece = &rest[..rest.len().min(MAX_SNAPSHOT_CHUNK)];
        let msg = ToPeer::SnapshotChunk(SnapshotChunk {
            turn: self.turn,
            hash: self.hash,
            total: u32::try_from(self.bytes.len()).unwrap_or(u32::MAX),
            offset: u32::try_from(self.offset).unwrap_or(u32::MAX),
            bytes: piece.to_vec(),
        });
        Some((msg.to_bytes(), piece.len()))
    }

    /// Moves past a chunk the transport took.
    pub(crate) fn advance(&mut self, piece: usize) {
        self.offset += piece;
    }

    /// Whether chunks remain to be handed out.
    pub(crate) fn streaming(&self) -> bool {
        self.offset < self.bytes.len()
    }
}

impl Outbox {
    pub(crate) fn send(&mut self, conn: ConnId, msg: &ToPeer) {
        self.push(conn, msg.delivery(), msg.to_bytes());
    }

    pub(crate) fn push(&mut self, conn: ConnId, delivery: Delivery, bytes: Vec<u8>) {
        self.counters.bytes_out += bytes.len() as u64;
        self.msgs.push_back((conn, delivery, bytes));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream cuts the shared bytes into chunks of at most
    /// `MAX_SNAPSHOT_CHUNK` on their offsets, and moves on only past a
    /// chunk the transport took.
    #[test]
    fn a_stream_hands_out_the_shared_bytes_chunk_by_chunk() {
        let bytes: Arc<[u8]> = (0..100_000u32).map(|i| i as u8).collect();
        let mut s = SnapshotStream {
            turn: Turn(9),
            hash: StateHash([1; 32]),
            bytes: Arc::clone(&bytes),
            offset: 0,
        };
        let mut got = Vec::new();
        let mut offsets = Vec::new();
        while let Some((msg, piece)) = s.next_chunk() {
            // Not taken: the same chunk again.
            assert_eq!(s.next_chunk().map(|(m, _)| m), Some(msg.clone()));
            let Ok(ToPeer::SnapshotChunk(c)) = ToPeer::decode(&msg) else {
                panic!("not a chunk");
            };
            assert_eq!(
                (c.turn, c.hash, c.total),
                (Turn(9), StateHash([1; 32]), 100_000)
            );
            assert_eq!(c.bytes.len(), piece);
            offsets.push(c.offset);
            got.extend(c.bytes);
            s.advance(piece);
        }
        assert!(!s.streaming());
        assert_eq!(offsets, [0, 32_768, 65_536, 98_304]);
        assert_eq!(&got[..], &bytes[..]);
    }
}
