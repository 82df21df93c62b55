//! Held slots and rejoining: a dropped player's slot stays held for the
//! configured time; the same player comes back (its secret, or a token for
//! that slot), gets the agreed snapshot and the bundle tail, fast-forwards
//! while the match goes on, and its inputs and hashes count again from the
//! turn it caught up. Also the relay's side of agreed snapshots: whom to ask
//! and what to do with the chunks.

use super::snapshots::{Base, Dispute, Outcome};
use super::{Game, MatchRoom, Phase};
use crate::config::RelayConfig;
use crate::event::{DropReason, MatchId, RouterEvent};
use crate::outbox::{Outbox, SnapshotStream};
use lockstep::Instant;
use lockstep::low_level::proto::{
    Delivery, MAX_SNAPSHOT_CHUNK_MESSAGE, Reconnected, RejectReason, Rejoin, Reoffer, Resume,
    SnapshotChunk, ToPeer,
};
use lockstep::low_level::transport::ConnId;
use sim::{PlayerId, StateHash, Turn};
use std::sync::Arc;

/// How long after a rejoin took a slot a second rejoin of that slot, while
/// the first one's connection is heard, is refused [`RejectReason::SlotTaken`]
/// (two processes started for one seat; the second is not needed) rather
/// than [`RejectReason::SlotInUse`], which the library's peer retries for
/// as long (`lockstep`'s 10 s of retries).
const REJOIN_RACE: lockstep::Duration = lockstep::Duration::from_secs(10);

/// Why a rejoin was refused: the typed reason and a detail for humans.
pub(crate) type Refused = (RejectReason, Option<String>);

impl MatchRoom {
    /// Takes `conn` back into `rejoin.player`'s held slot, or says why not.
    /// `token_mode`: the connection's token already granted this match and
    /// slot, so the secret is not checked. On success the peer gets the
    /// resume, the snapshot chunks and the tail; its inputs count once it
    /// reports that it caught up. `from` (a reconnect: the peer kept its
    /// world and holds every turn before it): when the tail reaches back to
    /// it, the peer gets `Reconnected` and the bundles from it instead, no
    /// snapshot.
    #[allow(clippy::too_many_arguments)] // the rejoin's facts, all needed
    pub(crate) fn rejoin(
        &mut self,
        now: Instant,
        conn: ConnId,
        rejoin: &Rejoin,
        from: Option<Turn>,
        token_mode: bool,
        config: &RelayConfig,
        out: &mut Outbox,
    ) -> Result<PlayerId, Refused> {
        let join = &rejoin.join;
        if join.game_id != self.game_id || join.game_version != self.game_version {
            let d = format!("the match plays {} v{}", self.game_id, self.game_version);
            return Err((RejectReason::GameDiffers, Some(d)));
        }
        if join.rules_hash != self.rules_hash {
            return Err((RejectReason::RulesDiffer, None));
        }
        let secret = config
            .rejoin
            .secret(self.id, self.nonce, &self.name, rejoin.player);
        let Phase::Running(g) = &mut self.phase else {
            return Err((
                RejectReason::HoldExpired,
                Some("the match is not running".into()),
            ));
        };
        let player = rejoin.player;
        if usize::from(player.0) >= g.slots.len() {
            return Err((
                RejectReason::WrongSlot,
                Some(format!("the match has {} slots", self.slots)),
            ));
        }
        if !token_mode && rejoin.secret != secret {
            return Err((RejectReason::WrongSecret, None));
        }
        if from.is_some_and(|f| f > g.next_close && !g.can_hand_back(f)) {
            let d = format!(
                "the peer holds turns up to {}, the relay closed turns up to {} only",
                from.map_or(0, |f| f.0.saturating_sub(1)),
                g.next_close.0.saturating_sub(1)
            );
            return Err((RejectReason::HoldExpired, Some(d)));
        }
        // A reconnect the tail can serve: the bundles from `from` on.
        let reconnect = from.filter(|&f| g.holds_bundles_from(f) || g.can_hand_back(f));
        let snapshot = match g.snapshots.base() {
            _ if reconnect.is_some() => None,
            Base::Genesis => None,
            Base::Agreed { turn, hash, bytes } => {
                Some((*turn, *hash, u32::try_from(bytes.len()).unwrap_or(u32::MAX)))
            }
            Base::Lost => {
                // A resumed match does not wait for a player it cannot
                // serve yet: it plays on, agrees a snapshot, and the
                // player's retry gets in.
                if g.paused_until.is_some() {
                    g.drop_player(now, player, DropReason::Disconnected);
                }
                return Err((RejectReason::NoSnapshot, None));
            }
        };
        // The slot's own player is back before the relay noticed it was
        // gone (a restarted process): once its old connection has been
        // silent for `takeover_after` it is dead to the match. Never while
        // it plays: a leaked secret must not take a live player's slot, and
        // of two processes rejoining one slot the second is refused.
        if let Some(s) = g.slots.get(usize::from(player.0))
            && let Some(old) = s.conn
        {
            let silent = now.saturating_since(s.last_heard);
            // Another process won the slot by a rejoin a moment ago and is
            // heard: this one lost the race. Told so, not asked to retry.
            let raced = s
                .rejoined_at
                .is_some_and(|t| now.saturating_since(t) < REJOIN_RACE);
            if raced && silent < config.rejoin.takeover_after {
                let d = format!(
                    "the slot was rejoined {} ms ago by another connection, heard {} ms ago",
                    now.saturating_since(s.rejoined_at.unwrap_or(now))
                        .as_millis(),
                    silent.as_millis()
                );
                return Err((RejectReason::SlotTaken, Some(d)));
            }
            if silent < config.rejoin.takeover_after {
                let d = format!(
                    "the slot's connection was heard {} ms ago; it is taken over after {} ms of silence",
                    silent.as_millis(),
                    config.rejoin.takeover_after.as_millis()
                );
                return Err((RejectReason::SlotInUse, Some(d)));
            }
            out.detached.push(old);
            g.drop_player(now, player, DropReason::Disconnected);
        }
        let Some(slot) = g.slots.get_mut(usize::from(player.0)) else {
            return Err((RejectReason::WrongSlot, None));
        };
        let held = slot
            .held_since
            .is_some_and(|t| now.saturating_since(t) <= config.rejoin.hold);
        if !held {
            let d = format!(
                "slots are held for {} s after a drop",
                config.rejoin.hold.as_millis() / 1000
            );
            return Err((RejectReason::HoldExpired, Some(d)));
        }
        slot.conn = Some(conn);
        slot.rejoining = true;
        slot.rejoined_at = Some(now);
        slot.last_heard = now;
        slot.next_ping = now;
        let mut bundles = 0u32;
        if let Some(from) = reconnect.filter(|&f| f > g.next_close) {
            // Ahead of the relay, which lost turns: it plays on from its
            // own turn once it has handed them back.
            let mut answer = g.reconnected_msg(now);
            answer.live = from;
            out.send(conn, &ToPeer::Reconnected(answer));
            g.claim_hand_back(now, player, from, out);
            out.counters.reconnects += 1;
        } else if let Some(from) = reconnect {
            out.send(conn, &ToPeer::Reconnected(g.reconnected_msg(now)));
            for bundle in g.snapshots.tail_after(from.0.checked_sub(1).map(Turn)) {
                out.push(conn, Delivery::Urgent, bundle.to_vec());
                bundles += 1;
            }
            out.counters.reconnects += 1;
        } else {
            out.send(
                conn,
                &ToPeer::Resume(g.resume_msg(now, Some(player), snapshot)),
            );
            g.send_snapshot(conn, snapshot, out);
            for bundle in g.snapshots.tail() {
                out.push(conn, Delivery::Urgent, bundle.to_vec());
                bundles += 1;
            }
        }
        out.counters.rejoins += 1;
        out.events.push_back(RouterEvent::Rejoining {
            id: self.id,
            player,
            snapshot: snapshot.map(|(t, _, _)| t),
            bundles,
            kept_world: reconnect.is_some(),
        });
        Ok(player)
    }

    /// Memory the match's snapshot store holds: (snapshot bytes, upload
    /// bytes, tail bytes, tail turns).
    pub(crate) fn snapshot_memory(&self) -> (usize, usize, usize, usize) {
        match &self.phase {
            Phase::Running(g) => {
                let (s, u, t) = g.snapshots.bytes();
                // Turns handed back during a resumed match's pause are
                // tail bundles waiting to be adopted: counted with it.
                let t = t + g.hand_back.bytes();
                (s, u, t, g.snapshots.tail_turns())
            }
            _ => (0, 0, 0, 0),
        }
    }
}

impl Game {
    /// Whether a peer or spectator holding every turn before `from` can be
    /// sent the rest from the tail (`from` is the next turn to close, or
    /// the tail still holds it).
    pub(super) fn holds_bundles_from(&self, from: Turn) -> bool {
        from == self.next_close || self.snapshots.holds_turn(from)
    }

    /// The answer to a reconnect or rewatch served from the tail.
    pub(super) fn reconnected_msg(&self, now: Instant) -> Reconnected {
        Reconnected {
            live: self.next_close,
            elapsed_us: self.elapsed(now).as_micros(),
            delay: self.delay.current(),
        }
    }

    /// The answer to a rejoin of `player`'s slot (`None`: a spectator) that
    /// restores from `snapshot` (`None`: the setup's world).
    pub(super) fn resume_msg(
        &self,
        now: Instant,
        player: Option<PlayerId>,
        snapshot: Option<(Turn, StateHash, u32)>,
    ) -> Resume {
        let mut start = self.start_msg.clone();
        if let Some(p) = player {
            start.your_player = p;
        }
        Resume {
            start,
            elapsed_us: self.elapsed(now).as_micros(),
            delay: self.delay.current(),
            snapshot,
            live: self.next_close,
            spectator: player.is_none(),
        }
    }

    /// A rejoining player simulated every turn up to `turn` and plays live:
    /// its inputs and hashes count from the next turn to close, which
    /// every peer learns from a `PlayerRejoined` notice in that bundle.
    pub(super) fn caught_up(&mut self, id: MatchId, player: PlayerId, out: &mut Outbox) {
        let next = self.next_close;
        let Some(slot) = self.slots.get_mut(usize::from(player.0)) else {
            return;
        };
        if !slot.rejoining {
            out.counters.bad_state += 1;
            return;
        }
        // It restored: a later heal may send it a snapshot again.
        if let Some(conn) = slot.conn {
            out.in_flight.remove(&conn);
        }
        // A healed player never left: no rejoin notice, no rejoin event.
        let healed = self.heal_caught_up(player, next);
        let Some(slot) = self.slots.get_mut(usize::from(player.0)) else {
            return;
        };
        slot.rejoining = false;
        slot.dropped_at = None;
        slot.drop_pending = None;
        slot.held_since = None;
        slot.back_from = Some(next);
        slot.rejoin_pending = !healed;
        if healed {
            return;
        }
        out.events.push_back(RouterEvent::Rejoined {
            id,
            player,
            turn: next,
        });
    }

    /// Before turn `turn`'s bundle goes out: if a snapshot of it is due, ask
    /// one live player for it: every live player in turn, skipping one whose
    /// latest upload failed (see `SnapshotStore::next_uploader`). The
    /// request precedes the bundle on the reliable channel, so the player
    /// has not simulated the turn yet when it arrives.
    pub(super) fn request_snapshot(&mut self, turn: Turn, config: &RelayConfig, out: &mut Outbox) {
        // At the memory budget an upload would hold a second snapshot
        // beside the base: ask again at the next interval.
        if !self.snapshots.due(turn, &config.rejoin) || self.desynced || out.memory.snapshots {
            return;
        }
        let live: Vec<(PlayerId, ConnId)> = self
            .seats()
            .filter(|(_, s)| s.live())
            .filter_map(|(seat, s)| s.conn.map(|c| (seat.id(), c)))
            .collect();
        let Some((player, conn)) = self.snapshots.next_uploader(&live) else {
            return;
        };
        let outcome = self.snapshots.request(turn, player);
        self.count(outcome, out);
        out.counters.snapshots_requested += 1;
        // The chunks come on the bulk path, which the relay opens only for
        // the player it asks, for one chunk at a time (the previous
        // uploader's closes: its upload was just abandoned).
        if let Some((_, old)) = self.upload_grant.replace((player, conn))
            && old != conn
        {
            out.bulk_grants.push_back((old, 0));
        }
        out.bulk_grants
            .push_back((conn, MAX_SNAPSHOT_CHUNK_MESSAGE));
        out.send(conn, &ToPeer::SnapshotRequest { turn });
    }

    /// A snapshot chunk from `player`.
    pub(super) fn on_snapshot_chunk(
        &mut self,
        player: PlayerId,
        chunk: SnapshotChunk,
        config: &RelayConfig,
        out: &mut Outbox,
    ) {
        let outcome = self.snapshots.on_chunk(player, chunk, &config.rejoin);
        self.count(outcome, out);
        self.settle_upload_grant(out);
    }

    /// Closes the uploader's bulk path once its upload no longer wants
    /// chunks (complete, refused or judged without a majority). An
    /// uploader dropped while its connection lives keeps it until the
    /// next request goes elsewhere: bounded meanwhile by the one-chunk cap
    /// and the transport's stall expiry.
    fn settle_upload_grant(&mut self, out: &mut Outbox) {
        if let Some((player, conn)) = self.upload_grant
            && !self.snapshots.awaits_chunks_from(player)
        {
            self.upload_grant = None;
            out.bulk_grants.push_back((conn, 0));
        }
    }

    /// The relay judged `turn`: `agreed` is its majority hash, if one exists.
    pub(super) fn snapshot_judged(
        &mut self,
        turn: Turn,
        agreed: Option<StateHash>,
        out: &mut Outbox,
    ) {
        let outcome = match agreed {
            Some(h) => self.snapshots.on_agreed(turn, h),
            None => self.snapshots.on_unagreed(turn),
        };
        self.count(outcome, out);
        self.settle_upload_grant(out);
    }

    fn count(&mut self, outcome: Outcome, out: &mut Outbox) {
        match outcome {
            Outcome::Pending => {}
            Outcome::Accepted => {
                out.counters.snapshots_agreed += 1;
                // Players whose restore failed get the new base; spectators
                // wait for a spectator base (never newer than their delay).
                let (players, spectators): (Vec<Receiver>, Vec<Receiver>) =
                    std::mem::take(&mut self.awaiting)
                        .into_iter()
                        .partition(|w| matches!(w, Receiver::Player(_)));
                self.awaiting = spectators;
                for who in players {
                    let base = self.snapshots.offer();
                    self.reoffer(who, base, out);
                }
            }
            Outcome::Refused => out.counters.snapshots_refused += 1,
            Outcome::Ignored => out.counters.bad_state += 1,
        }
    }

    /// The connection of `who` if it is restoring from a snapshot of this
    /// match (a rejoining or healing player, a spectator).
    fn receiver_conn(&self, who: Receiver) -> Option<ConnId> {
        match who {
            Receiver::Player(p) => self
                .slots
                .get(usize::from(p.0))
                .filter(|s| s.rejoining)
                .and_then(|s| s.conn),
            Receiver::Spectator(c) => self.is_spectator(c).then_some(c),
        }
    }

    /// `who` reports that the snapshot of `turn` it was sent did not restore
    /// to the agreed hash (see `SnapshotStore::dispute`). It keeps its
    /// place: it gets a newer base at once if there is one, the setup's
    /// world if the tail still reaches back to the first turn, else the
    /// next agreed snapshot, asked for early from another player.
    pub(super) fn on_restore_failed(
        &mut self,
        who: Receiver,
        turn: Turn,
        config: &RelayConfig,
        out: &mut Outbox,
    ) {
        // Only the snapshot this receiver was sent and has not reported on.
        let sent = self
            .receiver_conn(who)
            .filter(|c| out.in_flight.get(c).map(|s| s.turn) == Some(turn));
        let Some(conn) = sent else {
            out.counters.bad_state += 1;
            return;
        };
        out.in_flight.remove(&conn);
        let every = config.rejoin.snapshot_every;
        if let Receiver::Spectator(_) = who {
            // Counted against the uploader if it was the base; a spectator
            // is offered only a snapshot at least its delay old.
            let _ = self.snapshots.dispute(turn, self.next_close, every);
            match self.snapshots.spectator_offer() {
                Some(b) if b.0 > turn => self.reoffer(who, Some(b), out),
                _ if self.snapshots.holds_every_turn_from(self.first) => {
                    self.reoffer(who, None, out);
                }
                _ => self.awaiting.push(who),
            }
            out.counters.snapshot_restores_failed += 1;
            return;
        }
        match self.snapshots.dispute(turn, self.next_close, every) {
            Dispute::Unknown => {
                out.counters.bad_state += 1;
                return;
            }
            Dispute::Superseded => {
                let base = self.snapshots.offer();
                self.reoffer(who, base, out);
            }
            Dispute::Base if self.snapshots.holds_every_turn_from(self.first) => {
                self.reoffer(who, None, out);
            }
            Dispute::Base | Dispute::Lost => self.awaiting.push(who),
        }
        out.counters.snapshot_restores_failed += 1;
    }

    /// Sends `who` a `Reoffer` of `base` (`None`: the setup's world), its
    /// chunks and the bundles after it (a spectator's come at its delay).
    pub(super) fn reoffer(
        &mut self,
        who: Receiver,
        base: Option<(Turn, StateHash, u32)>,
        out: &mut Outbox,
    ) {
        // A player who left or a spectator who went meanwhile gets nothing.
        let Some(conn) = self.receiver_conn(who) else {
            return;
        };
        let reoffer = Reoffer {
            snapshot: base,
            live: self.next_close,
        };
        out.send(conn, &ToPeer::Reoffer(reoffer));
        self.send_snapshot(conn, base, out);
        let after = base.map(|(t, _, _)| t);
        match who {
            Receiver::Player(_) => {
                for bundle in self.snapshots.tail_after(after) {
                    out.push(conn, Delivery::Urgent, bundle.to_vec());
                }
            }
            Receiver::Spectator(c) => self.refeed_spectator(c, after),
        }
        out.counters.snapshots_reoffered += 1;
    }
}

/// Who restores from the relay's snapshot: a rejoining or healing player,
/// or a spectator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Receiver {
    /// A player slot that is rejoining or being healed.
    Player(PlayerId),
    /// A spectator's connection.
    Spectator(ConnId),
}

impl Game {
    /// Sends `conn` the agreed snapshot named in its `Resume` or `Heal`
    /// (`snapshot`: turn, hash, total length), in chunks on the bulk path;
    /// nothing when the base is the setup. Rejoins, spectators and heals
    /// all restore through this.
    pub(super) fn send_snapshot(
        &self,
        conn: ConnId,
        snapshot: Option<(Turn, StateHash, u32)>,
        out: &mut Outbox,
    ) {
        let Some((turn, hash, total)) = snapshot else {
            return;
        };
        let Some(bytes) = self.snapshots.snapshot_of(turn) else {
            return;
        };
        if out.in_flight.contains_key(&conn) {
            // A copy is on its way to this receiver already (it asked
            // again before restoring): a second would only pile up.
            out.counters.snapshot_copies_refused += 1;
            return;
        }
        // Streamed: the glue takes one chunk at a time as the receiver's
        // bulk path drains, all from the match's one copy.
        out.counters.snapshot_bytes_out += u64::from(total);
        out.in_flight.insert(
            conn,
            SnapshotStream {
                turn,
                hash,
                bytes: Arc::clone(bytes),
                offset: 0,
            },
        );
    }
}
