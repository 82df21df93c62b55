//! The agreed snapshot of a running match and the bundle tail since it: what
//! a rejoining player or a late spectator starts from. Bounded: one
//! snapshot of at most `max_snapshot_bytes`, one upload in progress of at
//! most the same, and at most `max_tail_turns` bundles.
//!
//! A spectator watches `spectator_delay` behind live, so it must not start
//! from a world newer than that either (the latest agreed snapshot is as
//! little as half a second old; a spectator restoring it would see the
//! match seconds ahead of its delay). New spectators start from the
//! *spectator base*: the newest agreed snapshot whose turn closed at least
//! the delay ago, or the setup's world while none is that old (the tail is
//! kept from the first turn until then). To stay bounded, the store keeps
//! at most two snapshots besides the base: the spectator base and one
//! candidate (the oldest agreed snapshot not yet old enough); a snapshot
//! agreed while a candidate waits is not kept, so a new spectator's world
//! is between the delay and about the delay plus two snapshot intervals
//! old. The copies share the base's bytes when they are the same snapshot
//! and count in the snapshot memory otherwise; every spectator streams
//! from the one copy.

use crate::rejoin_config::RejoinConfig;
use lockstep::Instant;
use lockstep::low_level::proto::SnapshotChunk;
use lockstep::low_level::transport::ConnId;
use sim::{PlayerId, StateHash, Turn};
use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

/// What a rejoining peer restores from.
#[derive(Debug)]
pub(super) enum Base {
    /// The world as the setup builds it: the tail starts at the first turn.
    Genesis,
    /// The latest snapshot whose hash equals its turn's agreed hash.
    Agreed {
        turn: Turn,
        hash: StateHash,
        /// Shared with every receiver it is being streamed to.
        bytes: Arc<[u8]>,
    },
    /// The tail overflowed before a newer snapshot was agreed: nothing to
    /// restore from until the next one.
    Lost,
}

/// An agreed snapshot waiting to be `spectator_delay` old.
#[derive(Debug)]
struct Aging {
    turn: Turn,
    hash: StateHash,
    bytes: Arc<[u8]>,
    /// When its turn's bundle closed.
    closed: Instant,
}

/// A snapshot being uploaded by the player the relay asked.
#[derive(Debug)]
struct Upload {
    turn: Turn,
    from: PlayerId,
    /// The uploader's hash and the snapshot's length, from its first chunk.
    declared: Option<(StateHash, u32)>,
    buf: Vec<u8>,
    /// The agreed hash of `turn`, once judged.
    agreed: Option<StateHash>,
}

impl Upload {
    fn complete(&self) -> bool {
        self.declared
            .is_some_and(|(_, total)| self.buf.len() as u64 == u64::from(total))
    }
}

/// What happened to an upload, for the counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Nothing decided yet.
    Pending,
    /// The snapshot is the new base.
    Accepted,
    /// Its hash is not the agreed one, or it broke the rules (out of
    /// order, too large, another declared hash): thrown away.
    Refused,
    /// A chunk nobody asked for (another player, a stale turn): ignored,
    /// the upload under way stays.
    Ignored,
}

/// The store; see the module docs.
#[derive(Debug)]
pub(super) struct SnapshotStore {
    base: Base,
    /// Encoded `ToPeer::Bundle` messages after the base, oldest first,
    /// with when they closed (spectators get them a set time later).
    tail: VecDeque<(Turn, Instant, Vec<u8>)>,
    /// The first turn a spectator still needs: bundles from it on stay in
    /// the tail when a newer snapshot is agreed.
    floor: Option<Turn>,
    tail_bytes: usize,
    upload: Option<Upload>,
    /// The player asked last: the next request goes to the live player
    /// after it, so every live player takes its turn whatever their number.
    last_asked: Option<PlayerId>,
    /// Players whose latest upload failed (never completed, broke the
    /// rules, had another hash than the agreed one, or did not restore at a
    /// receiver): skipped while another live player has not failed, so one
    /// silent or lying uploader cannot keep the match without a snapshot.
    failed: BTreeSet<PlayerId>,
    /// Who uploaded the base (`Base::Agreed`).
    base_from: Option<PlayerId>,
    /// A receiver could not restore the base: a replacement is asked for
    /// from this turn on, without waiting for the next `snapshot_every`-th.
    wanted: Option<Turn>,
    /// The turn of the last such early request: at most one per
    /// `snapshot_every` turns, so receivers that lie about failed restores
    /// can at most double the players' uploads.
    last_wanted: Option<Turn>,
    /// What a new spectator starts from (see the module docs).
    spectator: Base,
    /// The next spectator base, once its turn closed `spectator_delay` ago.
    candidate: Option<Aging>,
    /// When the base's turn closed (`Base::Agreed` only).
    base_closed: Option<Instant>,
}

/// What a receiver's report that its restore of `turn` failed means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Dispute {
    /// It is the base: its uploader is skipped from now on, a replacement
    /// is asked for early, and the receiver waits for it.
    Base,
    /// A newer base was agreed since the receiver was sent the old one.
    Superseded,
    /// The relay holds no base to offer (the tail overflowed): the receiver
    /// waits for the next one, asked for early.
    Lost,
    /// There is no such snapshot (never sent, or the base is the setup).
    Unknown,
}

impl Default for SnapshotStore {
    fn default() -> Self {
        Self {
            base: Base::Genesis,
            tail: VecDeque::new(),
            floor: None,
            tail_bytes: 0,
            upload: None,
            last_asked: None,
            failed: BTreeSet::new(),
            base_from: None,
            wanted: None,
            last_wanted: None,
            spectator: Base::Genesis,
            candidate: None,
            base_closed: None,
        }
    }
}

impl SnapshotStore {
    /// The base to restore from, if there is one.
    pub(super) const fn base(&self) -> &Base {
        &self.base
    }

    /// What a new spectator starts from: the newest agreed snapshot at
    /// least the spectator delay old as of the last [`Self::age`], the
    /// setup's world while none is, or nothing (the tail overflowed).
    pub(super) const fn spectator_base(&self) -> &Base {
        &self.spectator
    }

    /// The spectator base as a `Resume` or `Reoffer` names it.
    pub(super) fn spectator_offer(&self) -> Option<(Turn, StateHash, u32)> {
        match &self.spectator {
            Base::Agreed { turn, hash, bytes } => {
                Some((*turn, *hash, u32::try_from(bytes.len()).unwrap_or(u32::MAX)))
            }
            _ => None,
        }
    }

    /// The bytes of the snapshot of `turn` the store keeps (the base or the
    /// spectator base), to stream to a receiver.
    pub(super) fn snapshot_of(&self, turn: Turn) -> Option<&Arc<[u8]>> {
        [&self.base, &self.spectator]
            .into_iter()
            .find_map(|b| match b {
                Base::Agreed { turn: t, bytes, .. } if *t == turn => Some(bytes),
                _ => None,
            })
    }

    /// Moves the spectator base on at `now`: the candidate becomes it once
    /// its turn closed `delay` ago, and the base (if newer) becomes the
    /// next candidate. Whether the spectator base changed.
    pub(super) fn age(&mut self, now: Instant, delay: lockstep::Duration) -> bool {
        let mut moved = false;
        while let Some(c) = self
            .candidate
            .take_if(|c| now.saturating_since(c.closed) >= delay)
        {
            if let (Base::Agreed { turn, hash, bytes }, Some(closed)) =
                (&self.base, self.base_closed)
                && *turn > c.turn
            {
                self.candidate = Some(Aging {
                    turn: *turn,
                    hash: *hash,
                    bytes: Arc::clone(bytes),
                    closed,
                });
            }
            self.spectator = Base::Agreed {
                turn: c.turn,
                hash: c.hash,
                bytes: c.bytes,
            };
            moved = true;
        }
        if moved {
            self.trim();
        }
        moved
    }

    /// The first turn the spectator base needs from the tail (`None`: it
    /// needs none, it is lost).
    fn spectator_keeps(&self) -> Option<Turn> {
        match &self.spectator {
            Base::Genesis => Some(Turn(0)),
            Base::Agreed { turn, .. } => Some(turn.next()),
            Base::Lost => None,
        }
    }

    /// The bundles after the base, in turn order.
    pub(super) fn tail(&self) -> impl Iterator<Item = &[u8]> {
        let after = match &self.base {
            Base::Agreed { turn, .. } => Some(*turn),
            _ => None,
        };
        self.tail_after(after)
    }

    /// The bundles after turn `after` (`None`: all of them), in turn order.
    pub(super) fn tail_after(&self, after: Option<Turn>) -> impl Iterator<Item = &[u8]> {
        self.tail
            .iter()
            .filter(move |(t, _, _)| after.is_none_or(|a| *t > a))
            .map(|(_, _, b)| b.as_slice())
    }

    /// The base as a `Resume`, `Heal` or `Reoffer` names it (turn, hash,
    /// length); `None` when it is not an agreed snapshot.
    pub(super) fn offer(&self) -> Option<(Turn, StateHash, u32)> {
        match &self.base {
            Base::Agreed { turn, hash, bytes } => {
                Some((*turn, *hash, u32::try_from(bytes.len()).unwrap_or(u32::MAX)))
            }
            _ => None,
        }
    }

    /// The base is gone (a resumed match whose kept bundles do not reach
    /// back to the first turn): rejoins wait for the next agreed snapshot.
    pub(super) fn lose_base(&mut self, next: Turn) {
        self.base = Base::Lost;
        self.spectator = Base::Lost;
        self.candidate = None;
        // A rejoin cannot be served until a new base is agreed: ask for
        // one as soon as the match runs.
        self.wanted = Some(next);
    }

    /// Whether the tail holds the bundle of `turn` (and so every one after
    /// it): a reconnecting peer that kept its world can be served from it.
    pub(super) fn holds_turn(&self, turn: Turn) -> bool {
        self.tail.front().is_some_and(|(t, _, _)| *t <= turn)
            && self.tail.back().is_some_and(|(t, _, _)| *t >= turn)
    }

    /// Whether the tail still holds every bundle from the first turn on: a
    /// receiver can then restore from the setup's world instead.
    pub(super) fn holds_every_turn_from(&self, first: Turn) -> bool {
        self.tail.front().is_some_and(|(t, _, _)| *t == first)
    }

    /// A receiver reports that the snapshot of `turn` it was sent did not
    /// restore to its agreed hash. The relay cannot check snapshot bytes (it
    /// does not know the game) and cannot tell whether the uploader or the
    /// receiver lies, so the base stays for everyone else, but its uploader
    /// is skipped from now on and a replacement is asked for at once (once
    /// per `every` turns at most; `next` is the next turn to close).
    pub(super) fn dispute(&mut self, turn: Turn, next: Turn, every: u32) -> Dispute {
        let outcome = match &self.base {
            Base::Agreed { turn: t, .. } if *t == turn => {
                if let Some(from) = self.base_from {
                    self.failed.insert(from);
                }
                Dispute::Base
            }
            Base::Agreed { turn: t, .. } if *t > turn => return Dispute::Superseded,
            Base::Lost => Dispute::Lost,
            _ => return Dispute::Unknown,
        };
        if self.wanted.is_none() {
            let earliest = self
                .last_wanted
                .map_or(next, |l| next.max(Turn(l.0.saturating_add(every))));
            self.wanted = Some(earliest);
        }
        outcome
    }

    /// The tail with closing times, for feeding spectators.
    pub(super) fn timed_tail(&self) -> impl Iterator<Item = (Turn, Instant, &[u8])> {
        self.tail.iter().map(|(t, at, b)| (*t, *at, b.as_slice()))
    }

    /// Keeps bundles from turn `floor` on when a newer snapshot is agreed.
    pub(super) const fn set_floor(&mut self, floor: Option<Turn>) {
        self.floor = floor;
    }

    /// Bytes held: the snapshots (the base, and the spectator base and the
    /// candidate where they are other copies), the half-received upload
    /// and the tail.
    pub(super) fn bytes(&self) -> (usize, usize, usize) {
        let base = match &self.base {
            Base::Agreed { bytes, .. } => Some(bytes),
            _ => None,
        };
        let spectator = match &self.spectator {
            Base::Agreed { bytes, .. } => Some(bytes),
            _ => None,
        };
        let candidate = self.candidate.as_ref().map(|c| &c.bytes);
        let mut copies: Vec<&Arc<[u8]>> = Vec::with_capacity(3);
        for b in [base, spectator, candidate].into_iter().flatten() {
            if !copies.iter().any(|c| Arc::ptr_eq(c, b)) {
                copies.push(b);
            }
        }
        let snap = copies.iter().map(|b| b.len()).sum();
        let up = self.upload.as_ref().map_or(0, |u| u.buf.len());
        (snap, up, self.tail_bytes)
    }

    /// Bundles in the tail.
    pub(super) fn tail_turns(&self) -> usize {
        self.tail.len()
    }

    /// Whether the relay should ask for a snapshot of `turn`: on every
    /// `snapshot_every`-th turn, unless an upload asked for less than four
    /// intervals ago is still under way (a large snapshot on a slow link
    /// may take longer than one interval; a newer request would throw it
    /// away every time).
    pub(super) fn due(&self, turn: Turn, config: &RejoinConfig) -> bool {
        let every = config.snapshot_every;
        let busy = self
            .upload
            .as_ref()
            .is_some_and(|u| turn.0.saturating_sub(u.turn.0) < every.saturating_mul(4));
        let wanted = self.wanted.is_some_and(|w| turn >= w);
        every > 0 && turn.0 > 0 && (turn.0 % every == 0 || wanted) && !busy
    }

    /// Whether the upload under way still waits for chunks from `player`
    /// (while it does, the relay accepts bulk data from that player).
    pub(super) fn awaits_chunks_from(&self, player: PlayerId) -> bool {
        self.upload
            .as_ref()
            .is_some_and(|u| u.from == player && !u.complete())
    }

    /// Abandons the upload under way if `player` is its uploader (it left).
    pub(super) fn uploader_gone(&mut self, player: PlayerId) {
        if self.upload.as_ref().is_some_and(|u| u.from == player) {
            self.upload = None;
        }
    }

    /// Whom to ask for the next snapshot among `live` (sorted by player):
    /// the first after the player asked last, skipping players whose
    /// latest upload failed unless every live player's did.
    pub(super) fn next_uploader(&self, live: &[(PlayerId, ConnId)]) -> Option<(PlayerId, ConnId)> {
        // Players after the last asked first, then from the lowest on.
        let after = |p: PlayerId| self.last_asked.is_none_or(|l| p > l);
        let order = live
            .iter()
            .filter(|(p, _)| after(*p))
            .chain(live.iter().filter(|(p, _)| !after(*p)));
        let mut first = None;
        for &(p, c) in order {
            if !self.failed.contains(&p) {
                return Some((p, c));
            }
            first.get_or_insert((p, c));
        }
        first
    }

    /// The relay asked `from` for its snapshot of `turn`; an upload still
    /// under way is abandoned (refused, if it was) and its uploader counts
    /// as failed.
    pub(super) fn request(&mut self, turn: Turn, from: PlayerId) -> Outcome {
        self.last_asked = Some(from);
        if self.wanted.take().is_some() {
            self.last_wanted = Some(turn);
        }
        let old = self.upload.replace(Upload {
            turn,
            from,
            declared: None,
            buf: Vec::new(),
            agreed: None,
        });
        match old {
            Some(old) => {
                self.failed.insert(old.from);
                Outcome::Refused
            }
            None => Outcome::Pending,
        }
    }

    /// A closed turn's encoded bundle joins the tail.
    pub(super) fn push_tail(
        &mut self,
        turn: Turn,
        at: Instant,
        bytes: Vec<u8>,
        config: &RejoinConfig,
    ) {
        self.tail_bytes += bytes.len();
        self.tail.push_back((turn, at, bytes));
        let max = config
            .max_tail_turns
            .min(crate::rejoin_config::MAX_TAIL_TURNS) as usize;
        while self.tail.len() > max {
            let Some((t, _, b)) = self.tail.pop_front() else {
                break;
            };
            self.tail_bytes -= b.len();
            // A bundle at or before a snapshot's turn was kept only for a
            // base that needs older ones: the snapshot itself stays good.
            let needed = |base: &Base| match base {
                Base::Genesis => true,
                Base::Agreed { turn, .. } => t > *turn,
                Base::Lost => false,
            };
            if needed(&self.base) {
                self.base = Base::Lost;
            }
            if needed(&self.spectator) {
                self.spectator = Base::Lost;
            }
            if self.candidate.as_ref().is_some_and(|c| t > c.turn) {
                self.candidate = None;
            }
        }
    }

    /// A chunk from `player`: appended if it is the next piece of the
    /// upload the relay asked that player for.
    pub(super) fn on_chunk(
        &mut self,
        player: PlayerId,
        chunk: SnapshotChunk,
        config: &RejoinConfig,
    ) -> Outcome {
        let Some(up) = self.upload.as_mut() else {
            return Outcome::Ignored;
        };
        if up.from != player || up.turn != chunk.turn {
            return Outcome::Ignored;
        }
        let declared = *up.declared.get_or_insert((chunk.hash, chunk.total));
        let fits = chunk.total <= config.max_snapshot_bytes;
        if declared != (chunk.hash, chunk.total)
            || !fits
            || u64::from(chunk.offset) != up.buf.len() as u64
        {
            self.failed.insert(player);
            self.upload = None;
            return Outcome::Refused;
        }
        up.buf.extend_from_slice(&chunk.bytes);
        self.try_accept()
    }

    /// The relay judged `turn`: `hash` is its agreed (majority) hash.
    pub(super) fn on_agreed(&mut self, turn: Turn, hash: StateHash) -> Outcome {
        match self.upload.as_mut() {
            Some(up) if up.turn == turn => {
                up.agreed = Some(hash);
                self.try_accept()
            }
            _ => Outcome::Pending,
        }
    }

    /// The relay judged `turn` without a majority: its upload cannot be trusted.
    pub(super) fn on_unagreed(&mut self, turn: Turn) -> Outcome {
        if self.upload.as_ref().is_some_and(|u| u.turn == turn) {
            self.upload = None;
            return Outcome::Refused;
        }
        Outcome::Pending
    }

    fn try_accept(&mut self) -> Outcome {
        let Some(up) = &self.upload else {
            return Outcome::Pending;
        };
        let (Some((hash, _)), Some(agreed)) = (up.declared, up.agreed) else {
            return Outcome::Pending;
        };
        if !up.complete() {
            return Outcome::Pending;
        }
        let Some(up) = self.upload.take() else {
            return Outcome::Pending;
        };
        if hash != agreed {
            self.failed.insert(up.from);
            return Outcome::Refused;
        }
        // The tail must reach back to the snapshot's next turn, or the
        // snapshot cannot be played forward.
        let continuous = match &self.base {
            Base::Lost => self
                .tail
                .front()
                .is_some_and(|(t, _, _)| *t <= up.turn.next()),
            _ => true,
        };
        if !continuous {
            return Outcome::Refused;
        }
        self.failed.remove(&up.from);
        self.base_from = Some(up.from);
        let closed = self
            .tail
            .iter()
            .find(|(t, _, _)| *t == up.turn)
            .map(|(_, at, _)| *at);
        let bytes: Arc<[u8]> = up.buf.into();
        self.base_closed = closed;
        if self.candidate.is_none()
            && let Some(closed) = closed
        {
            self.candidate = Some(Aging {
                turn: up.turn,
                hash,
                bytes: Arc::clone(&bytes),
                closed,
            });
        }
        self.base = Base::Agreed {
            turn: up.turn,
            hash,
            bytes,
        };
        self.trim();
        Outcome::Accepted
    }

    /// Drops the bundles up to the base's turn that no spectator and no
    /// spectator base needs any more.
    fn trim(&mut self) {
        let Base::Agreed { turn: base, .. } = &self.base else {
            return;
        };
        let base = *base;
        // Spectators still need the bundles after their base.
        let floor = match (self.floor, self.spectator_keeps()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        while self
            .tail
            .front()
            .is_some_and(|(t, _, _)| *t <= base && floor.is_none_or(|f| *t < f))
        {
            if let Some((_, _, b)) = self.tail.pop_front() {
                self.tail_bytes -= b.len();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(turn: u32, hash: u8, total: u32, offset: u32, bytes: &[u8]) -> SnapshotChunk {
        SnapshotChunk {
            turn: Turn(turn),
            hash: StateHash([hash; 32]),
            total,
            offset,
            bytes: bytes.to_vec(),
        }
    }

    fn filled(config: &RejoinConfig, turns: std::ops::Range<u32>) -> SnapshotStore {
        let mut s = SnapshotStore::default();
        for t in turns {
            s.push_tail(Turn(t), Instant::ZERO, vec![t as u8; 10], config);
        }
        s
    }

    #[test]
    fn an_upload_with_the_agreed_hash_becomes_the_base_and_trims_the_tail() {
        let c = RejoinConfig::default();
        let mut s = filled(&c, 0..15);
        assert_eq!(s.request(Turn(10), PlayerId(1)), Outcome::Pending);
        // Chunks in order, from the asked player only.
        assert_eq!(
            s.on_chunk(PlayerId(0), chunk(10, 7, 4, 0, &[1, 2]), &c),
            Outcome::Ignored
        );
        assert_eq!(
            s.on_chunk(PlayerId(1), chunk(10, 7, 4, 0, &[1, 2]), &c),
            Outcome::Pending
        );
        assert_eq!(
            s.on_chunk(PlayerId(1), chunk(10, 7, 4, 2, &[3, 4]), &c),
            Outcome::Pending
        );
        assert!(matches!(s.base(), Base::Genesis));
        assert_eq!(s.on_agreed(Turn(10), StateHash([7; 32])), Outcome::Accepted);
        match s.base() {
            Base::Agreed { turn, bytes, .. } => {
                assert_eq!((*turn, &bytes[..]), (Turn(10), &[1, 2, 3, 4][..]))
            }
            b => panic!("{b:?}"),
        }
        // Spectators need the bundles from their base on: without a delay
        // the snapshot is their base at once, and the tail is cut past it.
        assert_eq!(s.tail_turns(), 15);
        assert!(s.age(Instant::ZERO, lockstep::Duration::ZERO));
        assert_eq!(s.tail_turns(), 4, "bundles 11..=14 stay");
        assert_eq!(s.bytes(), (4, 0, 40));
    }

    #[test]
    fn an_upload_whose_hash_is_not_the_agreed_one_is_refused() {
        let c = RejoinConfig::default();
        let mut s = filled(&c, 0..12);
        s.request(Turn(10), PlayerId(0));
        assert_eq!(s.on_agreed(Turn(10), StateHash([8; 32])), Outcome::Pending);
        assert_eq!(
            s.on_chunk(PlayerId(0), chunk(10, 7, 2, 0, &[1, 2]), &c),
            Outcome::Refused
        );
        assert!(matches!(s.base(), Base::Genesis));
        assert_eq!(s.tail_turns(), 12);
    }

    #[test]
    fn oversized_gapped_and_unagreed_uploads_are_refused() {
        let c = RejoinConfig {
            max_snapshot_bytes: 3,
            ..RejoinConfig::default()
        };
        let mut s = SnapshotStore::default();
        s.request(Turn(10), PlayerId(0));
        assert_eq!(
            s.on_chunk(PlayerId(0), chunk(10, 7, 4, 0, &[1]), &c),
            Outcome::Refused
        );
        s.request(Turn(20), PlayerId(0));
        assert_eq!(
            s.on_chunk(PlayerId(0), chunk(20, 7, 3, 1, &[1]), &c),
            Outcome::Refused
        );
        s.request(Turn(30), PlayerId(0));
        assert_eq!(s.on_unagreed(Turn(30)), Outcome::Refused);
        assert_eq!(
            s.on_chunk(PlayerId(0), chunk(30, 7, 1, 0, &[1]), &c),
            Outcome::Ignored
        );
    }

    /// A spectator that still needs turn 0 keeps the whole tail through a
    /// newer snapshot (it was fed from the start, not from the snapshot).
    #[test]
    fn a_newer_snapshot_keeps_the_bundles_a_spectator_still_needs() {
        let c = RejoinConfig::default();
        let mut s = filled(&c, 0..15);
        s.set_floor(Some(Turn(0)));
        s.request(Turn(10), PlayerId(0));
        s.on_chunk(PlayerId(0), chunk(10, 1, 1, 0, &[9]), &c);
        assert_eq!(s.on_agreed(Turn(10), StateHash([1; 32])), Outcome::Accepted);
        s.age(Instant::ZERO, lockstep::Duration::ZERO);
        assert_eq!(s.tail_turns(), 15);
        // A rejoin still gets only the bundles after the snapshot.
        assert_eq!(s.tail().count(), 4);
        s.set_floor(Some(Turn(6)));
        s.request(Turn(12), PlayerId(0));
        s.on_chunk(PlayerId(0), chunk(12, 1, 1, 0, &[9]), &c);
        assert_eq!(s.on_agreed(Turn(12), StateHash([1; 32])), Outcome::Accepted);
        assert_eq!(s.timed_tail().next().map(|(t, _, _)| t), Some(Turn(6)));
    }

    fn live(ids: &[u8]) -> Vec<(PlayerId, ConnId)> {
        ids.iter()
            .map(|&i| (PlayerId(i), ConnId(u32::from(i))))
            .collect()
    }

    fn asked(s: &SnapshotStore, live: &[(PlayerId, ConnId)]) -> Option<u8> {
        s.next_uploader(live).map(|(p, _)| p.0)
    }

    /// Every live player in turn from the one after the last asked; one
    /// whose upload failed is skipped until every live player's did.
    #[test]
    fn uploaders_take_turns_and_a_failed_one_is_skipped_while_others_can_upload() {
        let c = RejoinConfig::default();
        let mut s = filled(&c, 0..80);
        let agreed = |s: &mut SnapshotStore, turn: u32, p: u8| {
            assert_eq!(s.request(Turn(turn), PlayerId(p)), Outcome::Pending);
            s.on_chunk(PlayerId(p), chunk(turn, 1, 1, 0, &[9]), &c);
            assert_eq!(
                s.on_agreed(Turn(turn), StateHash([1; 32])),
                Outcome::Accepted
            );
        };
        let all = live(&[0, 1, 2]);
        assert_eq!(asked(&s, &all), Some(0));
        agreed(&mut s, 10, 0);
        assert_eq!(asked(&s, &all), Some(1));
        // Player 1 never completes: replaced, it failed.
        assert_eq!(s.request(Turn(20), PlayerId(1)), Outcome::Pending);
        assert_eq!(s.request(Turn(60), PlayerId(2)), Outcome::Refused);
        s.on_chunk(PlayerId(2), chunk(60, 1, 1, 0, &[9]), &c);
        assert_eq!(s.on_agreed(Turn(60), StateHash([1; 32])), Outcome::Accepted);
        assert_eq!(asked(&s, &all), Some(0));
        agreed(&mut s, 70, 0);
        assert_eq!(asked(&s, &all), Some(2), "1 is skipped");
        // With only failed players live, they are asked in turn anyway.
        assert_eq!(asked(&s, &live(&[1])), Some(1));
        assert_eq!(asked(&s, &[]), None);
    }

    /// A failed restore of the base marks its uploader failed and makes a
    /// replacement due at once, but at most once per `every` turns.
    #[test]
    fn a_disputed_base_asks_for_a_replacement_early_once_per_interval() {
        let c = RejoinConfig {
            snapshot_every: 10,
            ..RejoinConfig::default()
        };
        let mut s = filled(&c, 0..12);
        s.request(Turn(10), PlayerId(0));
        s.on_chunk(PlayerId(0), chunk(10, 1, 1, 0, &[9]), &c);
        assert_eq!(s.on_agreed(Turn(10), StateHash([1; 32])), Outcome::Accepted);
        assert_eq!(
            SnapshotStore::default().dispute(Turn(10), Turn(12), 10),
            Dispute::Unknown
        );
        assert!(!s.due(Turn(12), &c));
        assert_eq!(s.dispute(Turn(10), Turn(12), 10), Dispute::Base);
        assert!(s.due(Turn(12), &c), "a replacement is due at once");
        assert_eq!(
            asked(&s, &live(&[0, 1])),
            Some(1),
            "its uploader is skipped"
        );
        s.request(Turn(12), PlayerId(1));
        s.on_chunk(PlayerId(1), chunk(12, 2, 1, 0, &[8]), &c);
        assert_eq!(s.on_agreed(Turn(12), StateHash([2; 32])), Outcome::Accepted);
        assert_eq!(s.dispute(Turn(10), Turn(13), 10), Dispute::Superseded);
        // Another dispute soon after: the next early request waits 10 turns.
        assert_eq!(s.dispute(Turn(12), Turn(13), 10), Dispute::Base);
        assert!(!s.due(Turn(13), &c));
        assert!(!s.due(Turn(21), &c));
        assert!(s.due(Turn(22), &c));
    }

    #[test]
    fn a_tail_past_its_limit_loses_the_base_until_the_next_snapshot() {
        let c = RejoinConfig {
            max_tail_turns: 5,
            ..RejoinConfig::default()
        };
        let mut s = filled(&c, 0..7);
        assert!(matches!(s.base(), Base::Lost));
        assert_eq!(s.tail_turns(), 5);
        // Tail 2..=6; a snapshot of turn 4 continues into bundle 5.
        s.request(Turn(4), PlayerId(0));
        s.on_chunk(PlayerId(0), chunk(4, 1, 1, 0, &[9]), &c);
        assert_eq!(s.on_agreed(Turn(4), StateHash([1; 32])), Outcome::Accepted);
        assert_eq!(s.tail_turns(), 2);
    }

    /// A new spectator's base is the newest agreed snapshot at least the
    /// delay old; while it waits, the tail is kept from the spectator
    /// base on, and the older copy counts in the snapshot memory (every
    /// copy once, however many hold it).
    #[test]
    fn the_spectator_base_ages_and_its_copy_counts_in_the_memory() {
        use lockstep::Duration;
        let c = RejoinConfig::default();
        let delay = Duration::from_secs(3);
        let mut s = SnapshotStore::default();
        for t in 0..25u32 {
            let at = Instant::from_millis(100 * u64::from(t));
            s.push_tail(Turn(t), at, vec![t as u8; 10], &c);
        }
        let agree = |s: &mut SnapshotStore, turn: u32, len: usize| {
            s.request(Turn(turn), PlayerId(0));
            s.on_chunk(
                PlayerId(0),
                chunk(turn, 1, len as u32, 0, &vec![9; len]),
                &c,
            );
            assert_eq!(
                s.on_agreed(Turn(turn), StateHash([1; 32])),
                Outcome::Accepted
            );
        };
        agree(&mut s, 10, 4);
        // Turn 10 closed at 1 s: at 1.5 s a spectator starts from the setup.
        assert!(!s.age(Instant::from_millis(1_500), delay));
        assert!(matches!(s.spectator_base(), Base::Genesis));
        assert_eq!(s.tail_turns(), 25, "kept from the first turn");
        // A newer base; turn 10 waits to be old enough: two copies.
        agree(&mut s, 20, 6);
        assert_eq!(s.bytes().0, 4 + 6);
        // At 4 s turn 10 is 3 s old: it is the spectators' base; turn 20
        // (2 s old) waits. The tail is kept from turn 11.
        assert!(s.age(Instant::from_millis(4_000), delay));
        assert_eq!(s.spectator_offer().map(|o| o.0), Some(Turn(10)));
        assert_eq!(s.bytes().0, 4 + 6);
        assert_eq!(s.timed_tail().next().map(|(t, _, _)| t), Some(Turn(11)));
        // At 5 s turn 20 is: one copy, shared with the base.
        assert!(s.age(Instant::from_millis(5_000), delay));
        assert_eq!(s.spectator_offer().map(|o| o.0), Some(Turn(20)));
        assert_eq!(s.bytes().0, 6);
        assert_eq!(s.timed_tail().next().map(|(t, _, _)| t), Some(Turn(21)));
        assert_eq!(s.snapshot_of(Turn(20)).map(|b| b.len()), Some(6));
    }
}
