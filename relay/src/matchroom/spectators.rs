//! Spectators: read-only connections that join a running match at any time
//! from the newest agreed snapshot at least `spectator_delay` old (the
//! setup's world while none is; see `snapshots`) and watch
//! `spectator_delay` behind live. They
//! never count for turn closing or the desync majority; their hash reports
//! are checked against the turns' agreed hashes, so each one is a free
//! extra verifier.

use super::held_slots::Receiver;
use super::snapshots::Base;
use super::{Game, MatchRoom, Phase};
use crate::config::RelayConfig;
use crate::outbox::Outbox;
use crate::rejoin_config::MAX_TAIL_TURNS;
use lockstep::Instant;
use lockstep::low_level::proto::{DesyncReport, Join, RejectReason, ToPeer, ToRelay};
use lockstep::low_level::transport::ConnId;
use sim::{PlayerId, StateHash, Turn};
use std::collections::VecDeque;

/// One spectator of a match.
#[derive(Debug)]
pub(super) struct Spectator {
    pub(super) conn: ConnId,
    /// The last turn whose bundle it was sent (`None`: none yet).
    sent_through: Option<Turn>,
    /// Its first hash that differed from the agreed one, once reported.
    desynced: bool,
}

/// Agreed hashes of recent turns, to check spectators' late reports.
/// Sorted by turn in a ring: turns are judged in order, so an insert is a
/// push at the back and the oldest leaves at the front (a B-tree made and
/// freed nodes every few turns of every match: about 1 % of a loaded relay).
#[derive(Debug, Default)]
pub(super) struct AgreedHashes(VecDeque<(Turn, StateHash)>);

impl AgreedHashes {
    pub(super) fn insert(&mut self, turn: Turn, hash: StateHash) {
        if self.0.back().is_none_or(|&(t, _)| t < turn) {
            self.0.push_back((turn, hash));
        } else {
            match self.0.binary_search_by_key(&turn, |&(t, _)| t) {
                Ok(i) => self.0[i].1 = hash,
                Err(i) => self.0.insert(i, (turn, hash)),
            }
        }
        while self.0.len() > MAX_TAIL_TURNS as usize * 2 {
            self.0.pop_front();
        }
    }

    fn get(&self, turn: Turn) -> Option<StateHash> {
        let i = self.0.binary_search_by_key(&turn, |&(t, _)| t).ok()?;
        Some(self.0[i].1)
    }

    /// Forgets the turns before `turn`, and the room of a long run of them
    /// (800 kept for a spectator are 36 KiB a match).
    fn forget_before(&mut self, turn: Turn) {
        while self.0.front().is_some_and(|&(t, _)| t < turn) {
            self.0.pop_front();
        }
        if self.0.capacity() > 4 * self.0.len().max(64) {
            self.0.shrink_to(2 * self.0.len().max(64));
        }
    }
}

impl MatchRoom {
    /// Adds `conn` as a spectator of this running match, or says why not.
    /// `from` (a rewatch: the spectator kept its world and holds every turn
    /// before it): if the tail still holds it, the spectator gets
    /// `Reconnected` and the bundles from it on, no snapshot.
    pub(crate) fn spectate(
        &mut self,
        now: Instant,
        conn: ConnId,
        join: &Join,
        from: Option<Turn>,
        config: &RelayConfig,
        out: &mut Outbox,
    ) -> Result<(), (RejectReason, Option<String>)> {
        // Rules are not compared: the spectator's world comes from the
        // snapshot, whose hash it checks; the join's rules fingerprint
        // depends on a player count a spectator need not know.
        if join.game_id != self.game_id || join.game_version != self.game_version {
            let d = format!("the match plays {} v{}", self.game_id, self.game_version);
            return Err((RejectReason::GameDiffers, Some(d)));
        }
        let Phase::Running(g) = &mut self.phase else {
            return Err((
                RejectReason::HoldExpired,
                Some("the match is not running".into()),
            ));
        };
        if g.spectators.len() >= config.rejoin.max_spectators {
            let d = format!("{} spectators", config.rejoin.max_spectators);
            return Err((RejectReason::SpectatorsFull, Some(d)));
        }
        // A spectator ahead of the relay (it lost turns in a machine
        // crash) starts over from the snapshot, as a new one.
        let kept = from.filter(|&f| f <= g.next_close && g.holds_bundles_from(f));
        let sent_through = if let Some(from) = kept {
            out.send(conn, &ToPeer::Reconnected(g.reconnected_msg(now)));
            out.counters.reconnects += 1;
            from.0.checked_sub(1).map(Turn)
        } else {
            // Never a world newer than the delay: the spectator base.
            g.snapshots.age(now, config.rejoin.spectator_delay);
            let snapshot = match g.snapshots.spectator_base() {
                Base::Genesis => None,
                Base::Agreed { turn, hash, bytes } => {
                    Some((*turn, *hash, u32::try_from(bytes.len()).unwrap_or(u32::MAX)))
                }
                Base::Lost => return Err((RejectReason::NoSnapshot, None)),
            };
            out.send(conn, &ToPeer::Resume(g.resume_msg(now, None, snapshot)));
            g.send_snapshot(conn, snapshot, out);
            snapshot.map(|(t, _, _)| t)
        };
        g.spectators.push(Spectator {
            conn,
            sent_through,
            desynced: false,
        });
        out.counters.spectators_joined += 1;
        g.feed_spectators(now, config, out);
        Ok(())
    }

    /// A message from spectator `conn`: only hash reports and a failed
    /// restore mean something.
    pub(crate) fn spectator_message(
        &mut self,
        conn: ConnId,
        msg: ToRelay,
        config: &RelayConfig,
        out: &mut Outbox,
    ) {
        let Phase::Running(g) = &mut self.phase else {
            return;
        };
        match msg {
            // A hash does not clear the snapshot in flight: a spectator can
            // claim one without having received anything, and an honest one
            // never asks twice on one connection.
            ToRelay::Hash { turn, hash } => g.check_spectator_hash(conn, turn, hash, out),
            ToRelay::SnapshotFailed { turn } => {
                g.on_restore_failed(Receiver::Spectator(conn), turn, config, out);
            }
            ToRelay::Pong { .. } | ToRelay::Report(_) | ToRelay::Sections { .. } => {}
            _ => out.counters.bad_state += 1,
        }
    }

    /// Spectator `conn` left or its connection closed.
    pub(crate) fn spectator_gone(&mut self, conn: ConnId) {
        if let Phase::Running(g) = &mut self.phase {
            g.spectators.retain(|s| s.conn != conn);
            g.awaiting.retain(|w| *w != Receiver::Spectator(conn));
            g.snapshots.set_floor(g.spectator_floor());
        }
    }
}

impl Game {
    /// Keeps the agreed hashes a spectator could still report against:
    /// with spectators watching, the recent turns (as many as a lagging
    /// one may need); with none, only from the turn of the snapshot the
    /// next one would start from (it never reports a turn before it), so
    /// a match nobody watches holds a snapshot interval of hashes, not 800.
    pub(super) fn trim_agreed(&mut self) {
        if !self.spectators.is_empty() {
            return;
        }
        if let Base::Agreed { turn, .. } = self.snapshots.spectator_base() {
            let from = *turn;
            self.agreed.forget_before(from);
        }
    }

    /// Spectator `conn` restores from `base` (`None`: the setup) again, its
    /// first restore having failed: the bundles after it follow at the
    /// spectator delay.
    pub(super) fn refeed_spectator(&mut self, conn: ConnId, base: Option<Turn>) {
        if let Some(s) = self.spectators.iter_mut().find(|s| s.conn == conn) {
            s.sent_through = base;
        }
        self.snapshots.set_floor(self.spectator_floor());
    }

    /// Whether `conn` is a spectator of this match.
    pub(super) fn is_spectator(&self, conn: ConnId) -> bool {
        self.spectators.iter().any(|s| s.conn == conn)
    }

    /// The first turn a spectator still needs (kept in the tail).
    fn spectator_floor(&self) -> Option<Turn> {
        self.spectators
            .iter()
            .map(|s| s.sent_through.map_or(Turn(0), Turn::next))
            .min()
    }

    /// Sends every spectator the bundles that closed at least
    /// `spectator_delay` ago (all of them when `all`, at the match's end).
    pub(super) fn feed_spectators_by(
        &mut self,
        now: Instant,
        config: &RelayConfig,
        out: &mut Outbox,
        all: bool,
    ) {
        let delay = config.rejoin.spectator_delay;
        // Aged on every tick, watched or not: the tail is trimmed only
        // past the spectator base, so it must move on.
        if self.snapshots.age(now, delay) {
            // Spectators whose restore failed get the new spectator base.
            let waiting: Vec<Receiver> = self
                .awaiting
                .iter()
                .copied()
                .filter(|w| matches!(w, Receiver::Spectator(_)))
                .collect();
            self.awaiting
                .retain(|w| !matches!(w, Receiver::Spectator(_)));
            let base = self.snapshots.spectator_offer();
            for who in waiting {
                self.reoffer(who, base, out);
            }
        }
        if self.spectators.is_empty() {
            return;
        }
        for s in &mut self.spectators {
            for (turn, at, bytes) in self.snapshots.timed_tail() {
                if s.sent_through.is_some_and(|t| turn <= t) {
                    continue;
                }
                if !all && now.saturating_since(at) < delay {
                    break;
                }
                out.push(
                    s.conn,
                    lockstep::low_level::proto::Delivery::Urgent,
                    bytes.to_vec(),
                );
                s.sent_through = Some(turn);
            }
        }
        self.snapshots.set_floor(self.spectator_floor());
    }

    /// [`Game::feed_spectators_by`] the delay.
    pub(super) fn feed_spectators(&mut self, now: Instant, config: &RelayConfig, out: &mut Outbox) {
        self.feed_spectators_by(now, config, out, false);
    }

    /// The next instant a bundle is due at a spectator.
    pub(super) fn spectator_timeout(&self, config: &RelayConfig) -> Option<Instant> {
        let needed = self.spectator_floor()?;
        self.snapshots
            .timed_tail()
            .find(|(t, _, _)| *t >= needed)
            .map(|(_, at, _)| at + config.rejoin.spectator_delay)
    }

    /// A spectator's hash for `turn`, checked against the agreed one.
    fn check_spectator_hash(
        &mut self,
        conn: ConnId,
        turn: Turn,
        hash: StateHash,
        out: &mut Outbox,
    ) {
        let Some(agreed) = self.agreed.get(turn) else {
            // Not judged yet (a spectator at delay 0) or long forgotten.
            out.counters.spectator_hashes_unchecked += 1;
            return;
        };
        let Some(s) = self.spectators.iter_mut().find(|s| s.conn == conn) else {
            return;
        };
        if agreed == hash {
            out.counters.spectator_hashes_verified += 1;
            return;
        }
        out.counters.spectator_hash_mismatches += 1;
        if !s.desynced {
            s.desynced = true;
            // The spectator is the odd one out: tell it, and only it.
            out.send(
                conn,
                &ToPeer::Desync(DesyncReport {
                    turn,
                    hashes: vec![(PlayerId(0), agreed)],
                    odd_players: Vec::new(),
                }),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(n: u8) -> StateHash {
        StateHash([n; 32])
    }

    #[test]
    fn agreed_hashes_keep_the_recent_turns_whatever_the_order_they_come_in() {
        let mut a = AgreedHashes::default();
        a.insert(Turn(5), h(5));
        a.insert(Turn(7), h(7));
        a.insert(Turn(6), h(6)); // judged late
        a.insert(Turn(7), h(70)); // judged again
        assert_eq!(a.get(Turn(6)), Some(h(6)));
        assert_eq!(a.get(Turn(7)), Some(h(70)));
        assert_eq!(a.get(Turn(4)), None);
        let keep = MAX_TAIL_TURNS * 2;
        for t in 8..8 + keep {
            a.insert(Turn(t), h(1));
        }
        assert_eq!(a.0.len(), keep as usize);
        assert_eq!(a.get(Turn(7)), None, "the oldest left first");
        assert_eq!(a.get(Turn(8)), Some(h(1)));
        let turns: Vec<u32> = a.0.iter().map(|(t, _)| t.0).collect();
        assert!(turns.windows(2).all(|w| w[0] < w[1]), "sorted");
        // Forgetting keeps the turns from the one named, and frees the room.
        let last = 8 + keep - 1;
        a.forget_before(Turn(last - 9));
        assert_eq!(a.0.len(), 10);
        assert_eq!(a.get(Turn(last - 10)), None);
        assert_eq!(a.get(Turn(last - 9)), Some(h(1)));
        assert!(a.0.capacity() <= 256, "room of {} kept", a.0.capacity());
    }
}
