//! Turns a restarted relay lost, handed back by the players that hold them.
//! A process crash loses nothing (a turn is in the recording before its
//! bundle leaves), but a machine crash loses the turns the file had not
//! synced to the disk, while the players hold them. A resumed match asks
//! each player that comes back ahead of it for the bundles it played
//! (`HandBack`). A handed-back bundle counts only if its tag proves the
//! relay sent it (`BundleKey::proves`: a keyed hash only the relay can
//! compute, so no player can hand back commands in another's name); a
//! player that hands back one that does not prove itself, or comes back
//! ahead of a relay that does not tag its bundles, is refused at once
//! (`RejectReason::UnprovenHandBack`) and dropped, its slot held, and
//! nothing it handed back is adopted. At the end of its pause the match
//! adopts a turn only when every player holding it handed back the same
//! proven bundle: recorded, kept in the tail, sent to the players that
//! lack it, its notices applied. A player holding turns that could not be
//! adopted (its copies differ from the others') is ahead of the match and
//! cannot play on: it is refused and dropped, its slot held.

use super::Game;
use crate::config::RelayConfig;
use crate::delay::DelayController;
use crate::desync::HashBook;
use crate::event::{DropReason, MatchId, RouterEvent};
use crate::outbox::Outbox;
use lockstep::Instant;
use lockstep::low_level::proto::{
    Bundle, Delivery, MAX_HAND_BACK_TURNS, Notice, RejectReason, ToPeer,
};
use sim::{PlayerId, Turn};
use std::collections::BTreeMap;

/// A resumed match's hand-back, while it is paused.
#[derive(Debug, Default)]
pub(super) struct HandBack {
    /// Each player that came back holding turns the relay lacks, with the
    /// first turn it does not hold.
    claims: Vec<(PlayerId, Turn)>,
    /// Per turn: the first copy handed back and who handed back a copy.
    turns: BTreeMap<Turn, Copies>,
}

/// The copies of one turn's bundle handed back so far: one set of bytes
/// (the copies of honest players are equal) and who sent one.
#[derive(Debug)]
struct Copies {
    bytes: Vec<u8>,
    from: Vec<PlayerId>,
    /// Two copies differed: the turn is not adopted.
    differ: bool,
}

impl HandBack {
    /// Bytes held by the copies handed back so far: counted with the tail
    /// in the relay's memory budget (at most [`MAX_HAND_BACK_TURNS`] turns
    /// of one copy each per paused match, until its pause ends).
    pub(super) fn bytes(&self) -> usize {
        self.turns
            .values()
            .map(|c| c.bytes.len() + c.from.len())
            .sum()
    }

    /// Whether every claimant handed back every turn from `from` it holds.
    fn complete(&self, from: Turn) -> bool {
        self.claims.iter().all(|&(p, claim)| {
            (from.0..claim.0).all(|t| {
                self.turns
                    .get(&Turn(t))
                    .is_some_and(|c| c.from.contains(&p))
            })
        })
    }
}

impl Game {
    /// Whether a player coming back with every turn before `from` can be
    /// taken back although the relay closed fewer: the match was resumed
    /// and is still paused, and it lacks at most [`MAX_HAND_BACK_TURNS`].
    pub(super) fn can_hand_back(&self, from: Turn) -> bool {
        self.paused_until.is_some()
            && from > self.next_close
            && from.0 - self.next_close.0 <= MAX_HAND_BACK_TURNS
    }

    /// `player` came back holding every turn before `from`, beyond the
    /// relay's: it is asked to hand them back, or refused when this relay
    /// does not tag its bundles (nothing it could hand back would prove
    /// itself).
    pub(super) fn claim_hand_back(
        &mut self,
        now: Instant,
        player: PlayerId,
        from: Turn,
        out: &mut Outbox,
    ) {
        if self.bundle_key.is_none() {
            let detail = format!(
                "this peer holds turns up to {}, the relay closed up to {}, and the relay does not tag its bundles",
                from.0.saturating_sub(1),
                self.next_close.0.saturating_sub(1)
            );
            return self.refuse_hand_back(now, player, detail, out);
        }
        let conn = self.slots.get(usize::from(player.0)).and_then(|s| s.conn);
        let hb = &mut self.hand_back;
        hb.claims.retain(|(p, _)| *p != player);
        hb.claims.push((player, from));
        // A player back again forgets what it handed back before.
        for c in hb.turns.values_mut() {
            c.from.retain(|p| *p != player);
        }
        if let Some(conn) = conn {
            out.send(
                conn,
                &ToPeer::HandBack {
                    from: self.next_close,
                },
            );
        }
    }

    /// A bundle `player` handed back: kept if the relay asked it for that
    /// turn (once per player and turn) and its tag proves the relay sent
    /// it; one that does not prove itself gets its player refused.
    pub(super) fn on_handed_back(
        &mut self,
        now: Instant,
        player: PlayerId,
        bundle: Bundle,
        out: &mut Outbox,
    ) {
        let turn = bundle.turn;
        let asked = self
            .hand_back
            .claims
            .iter()
            .any(|&(p, claim)| p == player && turn >= self.next_close && turn < claim);
        if !asked {
            out.counters.bad_state += 1;
            return;
        }
        if !self.bundle_key.as_ref().is_some_and(|k| k.proves(&bundle)) {
            let detail = format!(
                "the bundle of turn {} it handed back does not carry the relay's tag",
                turn.0
            );
            return self.refuse_hand_back(now, player, detail, out);
        }
        // Encoded again, not kept as received: the bytes adopted and sent
        // on are the ones the tag was checked on.
        let bytes = ToPeer::Bundle(bundle).to_bytes();
        let copies = self.hand_back.turns.entry(turn).or_insert_with(|| Copies {
            bytes: bytes.clone(),
            from: Vec::new(),
            differ: false,
        });
        if copies.from.contains(&player) {
            return;
        }
        copies.differ |= copies.bytes != bytes;
        copies.from.push(player);
    }

    /// Refuses `player`'s hand-back for good: its claim and every copy it
    /// handed back are forgotten (none is adopted, and the pause no longer
    /// waits for it), and it is told why and dropped, its slot held. A
    /// player holding turns the match will not have cannot play on.
    fn refuse_hand_back(
        &mut self,
        now: Instant,
        player: PlayerId,
        detail: String,
        out: &mut Outbox,
    ) {
        let hb = &mut self.hand_back;
        hb.claims.retain(|(p, _)| *p != player);
        for c in hb.turns.values_mut() {
            c.from.retain(|p| *p != player);
        }
        hb.turns.retain(|_, c| !c.from.is_empty());
        out.counters.hand_backs_refused += 1;
        if let Some(conn) = self.slots.get(usize::from(player.0)).and_then(|s| s.conn) {
            out.send(
                conn,
                &ToPeer::Rejected {
                    reason: RejectReason::UnprovenHandBack,
                    detail: Some(detail),
                },
            );
            out.detached.push(conn);
        }
        self.drop_player(now, player, DropReason::Disconnected);
    }

    /// Whether the pause still waits for handed-back turns.
    pub(super) fn awaits_hand_back(&self) -> bool {
        !self.hand_back.claims.is_empty() && !self.hand_back.complete(self.next_close)
    }

    /// The end of the pause: adopts the handed-back turns in order, each
    /// one every player holding it handed back alike, and refuses the
    /// players still ahead of the match.
    pub(super) fn adopt_handed_back(
        &mut self,
        id: MatchId,
        now: Instant,
        config: &RelayConfig,
        out: &mut Outbox,
    ) {
        let HandBack { claims, mut turns } = std::mem::take(&mut self.hand_back);
        loop {
            let t = self.next_close;
            let holders: Vec<PlayerId> = claims
                .iter()
                .filter(|&&(_, claim)| claim > t)
                .map(|&(p, _)| p)
                .collect();
            let Some(copies) = turns.remove(&t) else {
                break;
            };
            let alike = !holders.is_empty()
                && !copies.differ
                && holders.iter().all(|h| copies.from.contains(h));
            let bundle = match ToPeer::decode(&copies.bytes) {
                Ok(ToPeer::Bundle(b)) if alike && b.turn == t => b,
                _ => break,
            };
            self.adopt_turn(id, now, bundle, copies.bytes, &claims, config, out);
        }
        for (player, claim) in claims {
            if claim <= self.next_close {
                continue;
            }
            let detail = format!(
                "this peer holds turns up to {}; the other players' copies of turn {} differ or are missing",
                claim.0.saturating_sub(1),
                self.next_close.0
            );
            if let Some(conn) = self.slots.get(usize::from(player.0)).and_then(|s| s.conn) {
                out.send(
                    conn,
                    &ToPeer::Rejected {
                        reason: RejectReason::HoldExpired,
                        detail: Some(detail),
                    },
                );
                out.detached.push(conn);
            }
            self.drop_player(now, player, DropReason::Disconnected);
        }
    }

    /// One handed-back turn joins the match as if the relay had closed it.
    #[allow(clippy::too_many_arguments)] // one call site, all of it needed
    fn adopt_turn(
        &mut self,
        id: MatchId,
        now: Instant,
        bundle: Bundle,
        bytes: Vec<u8>,
        claims: &[(PlayerId, Turn)],
        config: &RelayConfig,
        out: &mut Outbox,
    ) {
        let turn = bundle.turn;
        for n in &bundle.notices {
            match *n {
                Notice::PlayerDropped { player, turn } => {
                    // A player already back in its seat stays back.
                    if let Some(s) = self.slots.get_mut(usize::from(player.0))
                        && s.conn.is_none()
                    {
                        s.dropped_at = Some(turn);
                    }
                    let reason = DropReason::Disconnected;
                    out.events.push_back(RouterEvent::Dropped {
                        id,
                        player,
                        turn,
                        reason,
                    });
                }
                Notice::PlayerRejoined { player, turn } => {
                    if let Some(s) = self.slots.get_mut(usize::from(player.0)) {
                        s.dropped_at = None;
                    }
                    out.events
                        .push_back(RouterEvent::Rejoined { id, player, turn });
                }
                Notice::DelayChange { delay, from_turn } => {
                    self.delay = DelayController::new(self.slots.len(), delay);
                    out.events.push_back(RouterEvent::DelayChanged {
                        id,
                        delay,
                        from_turn,
                    });
                }
            }
        }
        // The players that lack it get it now, as a closed turn.
        let lacks = |p: PlayerId| !claims.iter().any(|&(c, claim)| c == p && claim > turn);
        for (seat, s) in self.seats() {
            if let Some(conn) = s.conn.filter(|_| lacks(seat.id())) {
                out.push(conn, Delivery::Urgent, bytes.clone());
            }
        }
        self.snapshots.push_tail(turn, now, bytes, &config.rejoin);
        out.counters.turns_closed += 1;
        out.counters.turns_handed_back += 1;
        out.events.push_back(RouterEvent::TurnClosed {
            id,
            turn,
            inputs: bundle.inputs,
            missing: Vec::new(),
        });
        // Its hashes were judged by the process that crashed.
        self.hashes = HashBook::judged_through(Some(turn));
        self.next_close = turn.next();
        if self.last == Some(turn) {
            self.end_by = Some(now + self.end_wait(now, config));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Phase;
    use super::super::resumed::tests::resumed_room;
    use lockstep::low_level::proto::{Bundle, ToPeer};
    use lockstep::low_level::transport::ConnId;
    use sim::{PlayerId, Turn};

    /// `bundle` as the match's relay sent it: tagged with its key.
    fn as_sent(g: &super::Game, bundle: Bundle) -> Bundle {
        let mut bytes = ToPeer::Bundle(bundle).to_bytes();
        if let Some(k) = &g.bundle_key {
            k.seal(&mut bytes);
        }
        match ToPeer::decode(&bytes) {
            Ok(ToPeer::Bundle(b)) => b,
            other => panic!("{other:?}"),
        }
    }

    /// Before: the copies a resumed match holds during its pause were
    /// outside the memory budget (only the snapshot store was measured).
    #[test]
    fn handed_back_copies_count_in_the_memory_budget() {
        let (mut room, _, mut out, now) = resumed_room(40);
        let before = room.snapshot_memory().2;
        let Phase::Running(g) = &mut room.phase else {
            panic!("not running");
        };
        g.slots[0].conn = Some(ConnId(0));
        g.claim_hand_back(now, PlayerId(0), Turn(44), &mut out);
        let mut sent = 0;
        for t in 40..44 {
            let bundle = Bundle {
                turn: Turn(t),
                inputs: vec![(PlayerId(1), vec![7; 1000])],
                notices: Vec::new(),
                tag: None,
            };
            let bundle = as_sent(g, bundle);
            sent += ToPeer::Bundle(bundle.clone()).to_bytes().len();
            g.on_handed_back(now, PlayerId(0), bundle, &mut out);
        }
        assert_eq!(out.counters.hand_backs_refused, 0);
        let held = room.snapshot_memory().2 - before;
        assert!(held >= sent && held < sent + 64, "{held} for {sent}");
    }
}
