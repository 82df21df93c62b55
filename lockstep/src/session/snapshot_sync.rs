//! The session's side of agreed snapshots and rejoining: uploading the
//! snapshot the relay asked for in paced chunks behind turn traffic, and
//! coming back into a held slot (resume, receive the snapshot, fast-forward
//! through the bundle tail at full speed, then play live again).

use super::playout::{Ledger, Playout};
use super::{Phase, Running, Session};
use crate::event::Event;
use crate::input_delay::DelaySchedule;
use crate::proto::{
    Bundle, Heal, MAX_SNAPSHOT_CHUNK, Reconnect, Reconnected, Rejoin, RejoinSecret, Reoffer,
    Resume, Rewatch, SnapshotChunk, ToRelay,
};
use crate::time::{Duration, Instant};
use crate::turn_buffer::TurnBuffer;
use sim::{PlayerId, StateHash, Turn};
use std::collections::{BTreeMap, VecDeque};

/// A rejoining session between the relay's `Resume` and catching up.
#[derive(Debug)]
pub(super) struct Restoring {
    /// The snapshot announced (turn, hash, length); `None`: from the setup.
    snapshot: Option<(Turn, StateHash, u32)>,
    /// Snapshot bytes received so far.
    buf: Vec<u8>,
    /// How far the restore is.
    stage: Stage,
    /// The relay's next turn to close when it accepted the rejoin: every
    /// turn before it comes as the tail.
    live: Turn,
    /// After a reconnect: own inputs numbered before this went to the lost
    /// relay; those no bundle up to `live` carried are forgotten once the
    /// catch-up ends.
    lost_inputs_before: Option<u32>,
}

/// Where a restore stands. No turn runs before `Restored`: the game checks
/// the snapshot when it polls [`Event::Restored`] and may report it failed
/// ([`Session::snapshot_failed`]) before it polls the next event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Snapshot chunks are coming.
    Receiving,
    /// The whole snapshot is in an [`Event::Restored`] the game has not
    /// polled yet.
    Handed,
    /// The game polled it; the turns run from its next poll (or the next
    /// message or timer) unless it reports the snapshot failed first.
    Polled,
    /// The world is restored: the tail runs.
    Restored,
    /// The game could not restore it; the relay was told and a
    /// [`Reoffer`] is awaited.
    Failed,
}

const fn first_stage(snapshot: Option<(Turn, StateHash, u32)>) -> Stage {
    if snapshot.is_some() {
        Stage::Receiving
    } else {
        Stage::Restored
    }
}

/// A spectator's `live`: it never catches up (it sends no input, ever).
const NEVER: Turn = Turn(u32::MAX);

/// Snapshot chunks waiting to be sent, one per pacing interval (all at once
/// with the default zero interval).
#[derive(Debug, Default)]
pub(super) struct Upload {
    chunks: VecDeque<SnapshotChunk>,
    next_at: Option<Instant>,
}

impl Upload {
    /// When the next chunk may leave, if one waits.
    pub(super) fn next_at(&self) -> Option<Instant> {
        self.chunks.front().and(self.next_at)
    }
}

impl Running {
    /// Whether the session is still restoring (no own inputs, no stall).
    pub(super) const fn restoring(&self) -> bool {
        self.restoring.is_some()
    }

    /// Whether the world may not step yet: a rejoin's snapshot is
    /// incomplete, not checked by the game yet, or failed.
    pub(super) fn awaiting_snapshot(&self) -> bool {
        self.restoring
            .as_ref()
            .is_some_and(|r| r.stage != Stage::Restored)
    }

    /// The game polled an [`Event::Restored`] with a snapshot: it checks
    /// it now; turns wait for its next poll.
    pub(super) fn restore_polled(&mut self) {
        if let Some(rs) = self
            .restoring
            .as_mut()
            .filter(|rs| rs.stage == Stage::Handed)
        {
            rs.stage = Stage::Polled;
        }
    }

    /// The game came back after polling the snapshot without reporting it
    /// failed: the world is restored and the tail may run. True if it was
    /// waiting for that.
    pub(super) fn restore_accepted(&mut self) -> bool {
        match self
            .restoring
            .as_mut()
            .filter(|rs| rs.stage == Stage::Polled)
        {
            Some(rs) => {
                rs.stage = Stage::Restored;
                true
            }
            None => false,
        }
    }
}

impl Session {
    /// Uploads the snapshot of the world after `turn` (asked for by
    /// [`Event::SnapshotWanted`]) with the world's hash after it. The bytes
    /// leave on the bulk channel in chunks of at most
    /// [`SessionConfig::upload_chunk`](crate::builder::SessionConfig) bytes,
    /// one every `upload_interval` (by default all at once: the transport's
    /// bulk path sends turn traffic first and paces the upload on its own
    /// budget, so it never crowds out this peer's turn traffic).
    pub fn upload_snapshot(&mut self, turn: Turn, hash: StateHash, bytes: &[u8]) {
        let Phase::Running(r) = &mut self.phase else {
            return;
        };
        let Ok(total) = u32::try_from(bytes.len()) else {
            return;
        };
        // A newer request replaces an upload still under way.
        r.upload.chunks.clear();
        let mut offset = 0u32;
        let size = self.config.upload_chunk.clamp(1, MAX_SNAPSHOT_CHUNK);
        for piece in bytes.chunks(size) {
            r.upload.chunks.push_back(SnapshotChunk {
                turn,
                hash,
                total,
                offset,
                bytes: piece.to_vec(),
            });
            // At most MAX_SNAPSHOT_CHUNK: fits u32.
            offset += u32::try_from(piece.len()).unwrap_or(u32::MAX);
        }
        if bytes.is_empty() {
            r.upload.chunks.push_back(SnapshotChunk {
                turn,
                hash,
                total: 0,
                offset: 0,
                bytes: Vec::new(),
            });
        }
        r.upload.next_at = Some(r.now);
        self.stats.snapshots_uploaded += 1;
    }

    /// Sends the upload chunks whose time has come (every one left with a
    /// zero interval).
    pub(super) fn pump_upload(&mut self, now: Instant) {
        loop {
            let Phase::Running(r) = &mut self.phase else {
                return;
            };
            if r.upload.next_at().is_none_or(|at| now < at) {
                return;
            }
            let Some(chunk) = r.upload.chunks.pop_front() else {
                return;
            };
            r.upload.next_at = Some(now + self.config.upload_interval);
            self.send(&ToRelay::SnapshotChunk(chunk));
        }
    }

    /// The connection to the relay was lost and a new one is open (the
    /// relay restarted from its recording, or the path broke): ask for our
    /// slot back with the world kept. Messages queued for the old
    /// connection are dropped; the buffered turns keep running; own inputs
    /// and stall notices pause until the relay answers and the session
    /// caught up with it. False (nothing sent) unless a player's match is
    /// running.
    pub fn reconnect(&mut self, player: PlayerId, secret: RejoinSecret) -> bool {
        if self.config.spectate
            || !matches!(&self.phase, Phase::Running(r) if r.your_player == player)
        {
            return false;
        }
        let Some((from, restored)) = self.begin_reconnect() else {
            return false;
        };
        let rejoin = Rejoin {
            join: self.config.join.clone(),
            player,
            secret,
        };
        // A world still waiting for its snapshot has nothing to keep: the
        // slot comes back as in any rejoin, with the relay's snapshot.
        let msg = if restored {
            ToRelay::Reconnect(Reconnect { rejoin, from })
        } else {
            ToRelay::Rejoin(rejoin)
        };
        self.send(&msg);
        self.reconnect_msg = Some(msg);
        true
    }

    /// [`Session::reconnect`] for a spectator: the connection to the relay
    /// was lost and a new one is open; watch again from the first turn this
    /// session has no bundle for, keeping the world. False (nothing sent)
    /// unless a spectator's match is running.
    pub fn rewatch(&mut self) -> bool {
        if !self.config.spectate {
            return false;
        }
        let Some((from, restored)) = self.begin_reconnect() else {
            return false;
        };
        let join = self.config.join.clone();
        let msg = if restored {
            ToRelay::Rewatch(Rewatch { join, from })
        } else {
            ToRelay::Spectate(join)
        };
        self.send(&msg);
        self.reconnect_msg = Some(msg);
        true
    }

    /// Forgets what was queued for the old connection and marks the wait
    /// for the relay's answer; the first turn without a bundle here, and
    /// whether the world is whole (not waiting for a snapshot).
    fn begin_reconnect(&mut self) -> Option<(Turn, bool)> {
        let Phase::Running(r) = &mut self.phase else {
            return None;
        };
        let restored = !r.awaiting_snapshot();
        self.outgoing.clear();
        // A fresh connection gets a fresh retry budget.
        self.rejoin_retry = None;
        r.upload = Upload::default();
        r.waiting = None;
        r.stall_notified = None;
        // The turns already here run meanwhile; a player's `live` is
        // unknown until the relay answers, so the catch-up cannot end
        // before it does.
        let from = r.next_exec;
        let lost = Some(r.ledger.next_seq());
        match r.restoring.as_mut() {
            Some(rs) => {
                rs.live = NEVER;
                rs.lost_inputs_before = lost;
            }
            None => {
                r.restoring = Some(Restoring {
                    snapshot: None,
                    buf: Vec::new(),
                    stage: Stage::Restored,
                    live: NEVER,
                    lost_inputs_before: lost,
                });
            }
        }
        Some((from, restored))
    }

    /// The relay answered a reconnect (or rewatch) and took this session
    /// back.
    fn taken_back(&mut self, now: Instant) {
        self.reconnect_msg = None;
        self.reconnected_at = Some(now);
        self.stats.reconnects += 1;
    }

    /// The relay restarted without the turns from `from` on: hand back
    /// every bundle from it this player played (the relay adopts a turn
    /// only when every player holding it sends the same one).
    pub(super) fn hand_back(&mut self, from: Turn) {
        let Phase::Running(r) = &self.phase else {
            self.stats.bad_messages += 1;
            return;
        };
        if self.config.spectate {
            self.stats.bad_messages += 1;
            return;
        }
        let bundles: Vec<Bundle> = r
            .played
            .iter()
            .filter(|b| b.turn >= from)
            .cloned()
            .collect();
        for b in bundles {
            self.send(&ToRelay::HandedBack(b));
        }
    }

    /// The relay took our [`Reconnect`] back: the bundles from the turn we
    /// asked for follow; the schedule restarts from the relay's clock and
    /// the catch-up ends once every turn before `live` ran.
    pub(super) fn reconnected(&mut self, now: Instant, answer: &Reconnected) {
        if !self.is_reconnecting() {
            self.stats.bad_messages += 1;
            return;
        }
        self.taken_back(now);
        let Phase::Running(r) = &mut self.phase else {
            return;
        };
        if let Some(rs) = r.restoring.as_mut().filter(|_| !self.config.spectate) {
            rs.live = answer.live;
        }
        // Input delay: due times follow the relay's clock again, which
        // stood still while the relay was away.
        let d0 = r.epoch.saturating_since(r.start);
        r.start = now;
        r.epoch = now + d0;
        r.lead = Duration::from_micros(answer.elapsed_us);
        r.stall_accounted = r.stall_accounted.max(now);
        // Under the relay's clock the playout restarts from the relay's
        // live turn, as after a resume: its old schedule ran on while the
        // relay was away, and would count the whole pause as stall turn
        // after turn.
        if r.playout.is_some() {
            r.playout = Some(Playout::new(
                self.config.playout,
                now,
                answer.live,
                r.turn_length,
            ));
        }
        if r.delay.delay_at(answer.live) != answer.delay {
            r.delay.change(answer.live, answer.delay);
        }
        self.stats.input_delay = answer.delay;
    }

    /// The relay accepted our rejoin: set the schedule from its clock, wait
    /// for the snapshot, then fast-forward.
    pub(super) fn resume(&mut self, now: Instant, resume: Resume) {
        // A reconnect the relay could not serve from its bundles: it sent
        // its snapshot instead, which replaces our world.
        if resume.spectator == self.config.spectate
            && self.is_reconnecting()
            && let Phase::Running(r) = &mut self.phase
        {
            let live = if resume.spectator { NEVER } else { resume.live };
            let lost = r.restoring.as_ref().and_then(|rs| rs.lost_inputs_before);
            restart(r, resume.snapshot, live);
            if let Some(rs) = r.restoring.as_mut() {
                rs.lost_inputs_before = lost;
            }
            self.taken_back(now);
            if resume.snapshot.is_none() {
                self.events.push_back(Event::Restored { snapshot: None });
            }
            return;
        }
        let expected = self.config.rejoin.is_some() || self.config.spectate;
        if !matches!(self.phase, Phase::Joining)
            || !expected
            || resume.spectator != self.config.spectate
        {
            self.stats.bad_messages += 1;
            return;
        }
        let s = resume.start;
        let turn_length = Duration::from_micros(s.turn_length_us);
        // The match started `elapsed` ago: the schedule leads the session's
        // clock by that much (its clock may have started after the match).
        let start = now;
        let lead = Duration::from_micros(resume.elapsed_us);
        let epoch = start + turn_length.saturating_mul(u64::from(s.input_delay));
        let next_exec = resume.snapshot.map_or(s.first_turn, |(t, _, _)| t.next());
        self.events.push_back(Event::Started {
            your_player: s.your_player,
            setup: s.setup,
            players: s.players,
            first_turn: s.first_turn,
            last_turn: s.last_turn,
            input_delay: resume.delay,
            turn_length,
        });
        self.stats.input_delay = resume.delay;
        // The schedule's first entry is the starting delay: the clock turn
        // is counted from it, as at every other peer.
        let mut delay = DelaySchedule::new(s.first_turn, s.input_delay);
        delay.change(next_exec, resume.delay);
        if resume.snapshot.is_none() {
            self.events.push_back(Event::Restored { snapshot: None });
        }
        self.phase = Phase::Running(Box::new(Running {
            your_player: s.your_player,
            first_turn: s.first_turn,
            last_turn: s.last_turn,
            turn_length,
            start,
            now,
            epoch,
            lead,
            next_exec,
            consumed: next_exec.0.checked_sub(1).map(Turn),
            buffer: TurnBuffer::default(),
            arrived: BTreeMap::new(),
            delay,
            next_input: next_exec,
            pending: VecDeque::new(),
            in_flight: BTreeMap::new(),
            awaiting_late: BTreeMap::new(),
            sections: VecDeque::new(),
            last_hashed: next_exec.0.checked_sub(1).map(Turn),
            stall_accounted: now,
            stall_notified: None,
            waiting: None,
            next_report: now + self.config.report_interval,
            end: None,
            // Under the relay's clock the schedule comes from bundle
            // arrivals: the tail's burst lands far behind it and is
            // discarded, live bundles set it.
            playout: (s.input_delay == 0)
                .then(|| Playout::new(self.config.playout, now, s.first_turn, turn_length)),
            ledger: Ledger::default(),
            restoring: Some(Restoring {
                snapshot: resume.snapshot,
                buf: Vec::new(),
                stage: first_stage(resume.snapshot),
                live: if resume.spectator { NEVER } else { resume.live },
                lost_inputs_before: None,
            }),
            upload: Upload::default(),
            played: VecDeque::new(),
        }));
    }

    /// `--on-desync heal`: the relay re-synchronises this running peer.
    /// Like a rejoin's resume without a new schedule: the world is dropped,
    /// every turn after the snapshot runs again from the tail that follows
    /// (turns already buffered are dropped: the tail holds them), own inputs
    /// pause until the peer caught up.
    pub(super) fn heal(&mut self, heal: Heal) {
        let Phase::Running(r) = &mut self.phase else {
            self.stats.bad_messages += 1;
            return;
        };
        if r.restoring.is_some() {
            self.stats.bad_messages += 1;
            return;
        }
        r.upload = Upload::default();
        restart(r, heal.snapshot, heal.live);
        self.stats.heals += 1;
        self.events.push_back(Event::Healing {
            desync_turn: heal.desync_turn,
        });
        if heal.snapshot.is_none() {
            self.events.push_back(Event::Restored { snapshot: None });
        }
    }

    /// The game could not restore the snapshot of the [`Event::Restored`]
    /// it just polled (it does not decode, or its world's hash is not the
    /// agreed one). Call it before polling the next event: no turn has run
    /// from the snapshot yet. The session tells the relay, keeps its place
    /// (its slot, or its seat as a spectator) and waits for the relay's
    /// replacement ([`ToPeer::Reoffer`](crate::proto::ToPeer::Reoffer): a
    /// newer agreed snapshot, or the setup's world while the relay still
    /// holds every bundle). Does nothing at any other time.
    pub fn snapshot_failed(&mut self) {
        let Phase::Running(r) = &mut self.phase else {
            return;
        };
        let Some(rs) = r
            .restoring
            .as_mut()
            .filter(|rs| matches!(rs.stage, Stage::Handed | Stage::Polled))
        else {
            return;
        };
        let Some((turn, _, _)) = rs.snapshot else {
            return;
        };
        rs.stage = Stage::Failed;
        rs.buf = Vec::new();
        self.stats.snapshots_failed += 1;
        self.send(&ToRelay::SnapshotFailed { turn });
    }

    /// The relay's replacement for a snapshot this session reported failed:
    /// restore from it as from a resume, dropping every bundle buffered
    /// since (the tail after the new base follows).
    pub(super) fn reoffer(&mut self, reoffer: Reoffer) {
        let Phase::Running(r) = &mut self.phase else {
            self.stats.bad_messages += 1;
            return;
        };
        if r.restoring
            .as_ref()
            .is_none_or(|rs| rs.stage != Stage::Failed)
        {
            self.stats.bad_messages += 1;
            return;
        }
        let live = if self.config.spectate {
            NEVER
        } else {
            reoffer.live
        };
        restart(r, reoffer.snapshot, live);
        if reoffer.snapshot.is_none() {
            self.events.push_back(Event::Restored { snapshot: None });
        }
    }

    /// A piece of the rejoin snapshot: appended in order; the whole, once
    /// here, goes to the game as [`Event::Restored`].
    pub(super) fn on_snapshot_chunk(&mut self, chunk: SnapshotChunk) {
        let Phase::Running(r) = &mut self.phase else {
            self.stats.bad_messages += 1;
            return;
        };
        let Some(rs) = r.restoring.as_mut() else {
            self.stats.bad_messages += 1;
            return;
        };
        let Some((turn, hash, total)) = rs.snapshot else {
            self.stats.bad_messages += 1;
            return;
        };
        if rs.stage != Stage::Receiving
            || chunk.turn != turn
            || chunk.total != total
            || u64::from(chunk.offset) != rs.buf.len() as u64
        {
            self.stats.bad_messages += 1;
            return;
        }
        rs.buf.extend_from_slice(&chunk.bytes);
        if rs.buf.len() as u64 == u64::from(total) {
            rs.stage = Stage::Handed;
            let bytes = std::mem::take(&mut rs.buf);
            self.events.push_back(Event::Restored {
                snapshot: Some((turn, hash, bytes)),
            });
        }
    }

    /// Ends the catch-up once every turn the relay had closed at the rejoin
    /// is simulated and the next bundle is not here yet: from now on the
    /// peer sends inputs and the relay counts them.
    pub(super) fn check_caught_up(&mut self) {
        let Phase::Running(r) = &mut self.phase else {
            return;
        };
        let Some(rs) = &r.restoring else {
            return;
        };
        if rs.stage != Stage::Restored || r.next_exec < rs.live || r.buffer.has(r.next_exec) {
            return;
        }
        if let Some(seq) = rs.lost_inputs_before {
            r.ledger.forget_before(seq);
        }
        r.restoring = None;
        r.next_input = r.next_input.max(r.next_exec);
        // Stall counts from here: the catch-up was no wait for a bundle.
        r.stall_accounted = r.stall_accounted.max(r.now);
        let Some(turn) = r.next_exec.0.checked_sub(1).map(Turn) else {
            return;
        };
        self.events.push_back(Event::CaughtUp { turn });
        self.send(&ToRelay::CaughtUp { turn });
    }
}

/// Restores a running session from `snapshot` (`None`: the setup's world)
/// on: every turn after it runs again from the tail that follows, turns
/// already buffered are dropped (the tail holds them), own inputs pause
/// until the session caught up with `live`.
fn restart(r: &mut Running, snapshot: Option<(Turn, StateHash, u32)>, live: Turn) {
    let next_exec = snapshot.map_or(r.first_turn, |(t, _, _)| t.next());
    r.next_exec = next_exec;
    r.consumed = next_exec.0.checked_sub(1).map(Turn);
    r.last_hashed = r.consumed;
    r.buffer = TurnBuffer::default();
    r.arrived.clear();
    r.sections.clear();
    r.waiting = None;
    r.stall_notified = None;
    r.restoring = Some(Restoring {
        snapshot,
        buf: Vec::new(),
        stage: first_stage(snapshot),
        live,
        lost_inputs_before: None,
    });
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests {
    use super::*;
    use crate::builder::SessionBuilder;
    use crate::proto::{Bundle, PlayerInfo, RejectReason, RejoinSecret, Start, ToPeer};
    use crate::session::{REJOIN_RETRY_EVERY, REJOIN_RETRY_FOR};
    use sim::{MatchSetup, PlayerId};

    fn bundle(turn: u32) -> Vec<u8> {
        ToPeer::Bundle(Bundle {
            turn: Turn(turn),
            inputs: vec![(PlayerId(0), vec![turn as u8])],
            notices: Vec::new(),
            tag: None,
        })
        .to_bytes()
    }

    fn resume(snapshot: Option<(Turn, StateHash, u32)>, elapsed_ms: u64, live: u32) -> Vec<u8> {
        ToPeer::Resume(Resume {
            start: Start {
                your_player: PlayerId(1),
                setup: MatchSetup {
                    seed: 1,
                    players: 2,
                    ticks_per_turn: 1,
                },
                turn_length_us: 100_000,
                players: (0..2)
                    .map(|i| PlayerInfo {
                        id: PlayerId(i),
                        name: format!("p{i}"),
                    })
                    .collect(),
                input_delay: 2,
                first_turn: Turn(0),
                last_turn: None,
            },
            elapsed_us: elapsed_ms * 1000,
            delay: 3,
            snapshot,
            live: Turn(live),
            spectator: false,
        })
        .to_bytes()
    }

    fn rejoining(now: Instant) -> Session {
        let mut s = SessionBuilder::new()
            .with_match("m", 2)
            .with_rejoin(PlayerId(1), RejoinSecret([1; 16]))
            .build(now)
            .unwrap();
        let (_, first) = s.poll_outgoing().unwrap();
        assert!(matches!(ToRelay::decode(&first), Ok(ToRelay::Rejoin(_))));
        s
    }

    /// Starts `s` as player 0 of the match [`resume`] describes (a fresh
    /// player, not a rejoin: the tests of heals and uploads need one).
    fn start_as_player_0(s: &mut Session, now: Instant) {
        let mut start = match ToPeer::decode(&resume(None, 0, 0)) {
            Ok(ToPeer::Resume(r)) => r.start,
            other => panic!("{other:?}"),
        };
        start.your_player = PlayerId(0);
        s.handle_message(now, &ToPeer::Start(start).to_bytes());
    }

    fn drain(s: &mut Session) -> (Vec<ToRelay>, Vec<Event>) {
        let out = std::iter::from_fn(|| s.poll_outgoing())
            .map(|(_, b)| ToRelay::decode(&b).unwrap())
            .collect();
        (out, std::iter::from_fn(|| s.poll_event()).collect())
    }

    /// A restarted peer asks for its slot before the relay noticed its old
    /// process died: refused `SlotInUse`, it asks again on its own timer
    /// (no event, no end) until the relay takes it back, and gives up with
    /// the refusal once the retry time is spent.
    #[test]
    fn a_rejoin_refused_because_the_slot_is_in_use_is_retried_for_a_bounded_time() {
        let t0 = Instant::ZERO;
        let in_use = ToPeer::Rejected {
            reason: RejectReason::SlotInUse,
            detail: None,
        }
        .to_bytes();
        let mut s = rejoining(t0);
        s.handle_message(t0, &in_use);
        assert!(!s.is_ended());
        assert!(drain(&mut s).1.is_empty());
        let retry = s.poll_timeout().unwrap();
        assert_eq!(retry, t0 + REJOIN_RETRY_EVERY);
        s.handle_timeout(retry);
        let (sent, _) = drain(&mut s);
        assert!(matches!(sent.as_slice(), [ToRelay::Rejoin(r)] if r.player == PlayerId(1)));
        // Taken back on the second try.
        s.handle_message(retry, &resume(None, 1_000, 10));
        assert!(s.is_running());

        // Never taken back: the refusal stands once the retry time is spent.
        let mut s = rejoining(t0);
        let mut now = t0;
        while !s.is_ended() {
            s.handle_message(now, &in_use);
            if let Some(t) = s.poll_timeout() {
                now = t;
                s.handle_timeout(now);
            }
            assert!(now <= t0 + REJOIN_RETRY_FOR + REJOIN_RETRY_EVERY);
        }
        let (_, events) = drain(&mut s);
        assert!(events.iter().any(|e| matches!(
            e,
            Event::Rejected {
                reason: RejectReason::SlotInUse,
                ..
            }
        )));
    }

    /// A restarted peer's clock starts at zero while the match has run for
    /// 10.2 s: the tail runs at once (no pacing, no stall), the peer reports
    /// that it caught up, sends inputs only from then on, and the next live
    /// turn is due on the relay's schedule, not 10 s later.
    #[test]
    fn a_rejoin_fast_forwards_the_tail_then_plays_on_the_relays_schedule() {
        let t0 = Instant::ZERO;
        let mut s = rejoining(t0);
        // Turn T is due at (T + 2) * 100 ms of match time: 99 is due at 10.1 s.
        s.handle_message(t0, &resume(None, 10_200, 100));
        for t in 0..100 {
            s.handle_message(t0, &bundle(t));
        }
        let (out, ev) = drain(&mut s);
        let turns: Vec<u32> = ev
            .iter()
            .filter_map(|e| match e {
                Event::TurnReady { turn, .. } => Some(turn.0),
                _ => None,
            })
            .collect();
        assert_eq!(turns, (0..100).collect::<Vec<_>>());
        assert!(matches!(
            ev[..2],
            [Event::Started { .. }, Event::Restored { snapshot: None }]
        ));
        assert!(ev.contains(&Event::CaughtUp { turn: Turn(99) }));
        let inputs: Vec<Turn> = out
            .iter()
            .filter_map(|m| match m {
                ToRelay::Input { turn, .. } => Some(*turn),
                _ => None,
            })
            .collect();
        assert!(out.contains(&ToRelay::CaughtUp { turn: Turn(99) }));
        assert!(inputs.iter().all(|t| t.0 >= 100), "{inputs:?}");
        // Turn 100 is due at 10.2 s of match time: 0 s here. Its bundle
        // arriving 50 ms late is a 50 ms stall, no more.
        let late = t0 + Duration::from_millis(50);
        s.handle_message(late, &bundle(100));
        let (_, ev) = drain(&mut s);
        assert!(ev.iter().any(|e| matches!(
            e,
            Event::TurnReady {
                turn: Turn(100),
                ..
            }
        )));
        assert_eq!(s.stats(late).stall, Duration::from_millis(50));
        // Turn 101 is due at 100 ms: not before.
        s.handle_message(late, &bundle(101));
        assert!(drain(&mut s).1.is_empty());
        s.handle_timeout(t0 + Duration::from_millis(100));
        let (_, ev) = drain(&mut s);
        assert!(ev.iter().any(|e| matches!(
            e,
            Event::TurnReady {
                turn: Turn(101),
                ..
            }
        )));
    }

    /// Player 1, rejoined into a match that has run 10.2 s and caught up
    /// at turn 99.
    fn caught_up(t0: Instant) -> Session {
        let mut s = rejoining(t0);
        s.handle_message(t0, &resume(None, 10_200, 100));
        for t in 0..100 {
            s.handle_message(t0, &bundle(t));
        }
        let _ = drain(&mut s);
        s
    }

    fn turns_run(ev: &[Event]) -> Vec<u32> {
        ev.iter()
            .filter_map(|e| match e {
                Event::TurnReady { turn, .. } => Some(turn.0),
                _ => None,
            })
            .collect()
    }

    /// The relay restarted: a player's session and a spectator's, each on
    /// a new connection, ask to come back from the first turn they have no
    /// bundle for and keep their world. Until the relay answers they are
    /// reconnecting; its `Reconnected` brings the missing turns, which run
    /// once each. The player reports that it caught up again (the spectator
    /// never does: it sends no input). A relay that can no longer serve the
    /// spectator's turns answers with a snapshot, which replaces its world.
    #[test]
    fn a_reconnect_and_a_rewatch_keep_the_world_and_ask_for_the_first_missing_turn() {
        let t0 = Instant::ZERO;
        let reconnected = |live: u32| {
            ToPeer::Reconnected(Reconnected {
                live: Turn(live),
                elapsed_us: 12_000_000,
                delay: 3,
            })
            .to_bytes()
        };
        let mut s = caught_up(t0);
        assert!(!s.is_reconnecting());
        assert!(s.reconnect(PlayerId(1), RejoinSecret([1; 16])));
        assert!(s.is_reconnecting());
        let (out, _) = drain(&mut s);
        assert!(
            matches!(&out[..], [ToRelay::Reconnect(r)] if r.from == Turn(100) && r.rejoin.player == PlayerId(1)),
            "{out:?}"
        );
        s.handle_message(t0, &reconnected(120));
        assert!(!s.is_reconnecting());
        for t in 100..120 {
            s.handle_message(t0, &bundle(t));
        }
        // The last turns run on the relay's schedule again.
        s.handle_timeout(t0 + Duration::from_millis(500));
        let (out, ev) = drain(&mut s);
        assert_eq!(turns_run(&ev), (100..120).collect::<Vec<_>>());
        assert!(
            out.contains(&ToRelay::CaughtUp { turn: Turn(119) }),
            "{out:?}"
        );
        assert!(!s.rewatch(), "a player does not rewatch");
        // The relay restarted without turns 115 on: they go back to it.
        s.handle_message(t0, &ToPeer::HandBack { from: Turn(115) }.to_bytes());
        let (out, _) = drain(&mut s);
        let back: Vec<Vec<u8>> = out
            .iter()
            .filter_map(|m| match m {
                ToRelay::HandedBack(b) => Some(ToPeer::Bundle(b.clone()).to_bytes()),
                _ => None,
            })
            .collect();
        assert_eq!(back, (115..120).map(bundle).collect::<Vec<_>>());

        // A spectator, 20 turns in.
        let mut w = SessionBuilder::new()
            .with_match("m", 2)
            .with_spectate()
            .build(t0)
            .unwrap();
        let _ = drain(&mut w);
        let watch = |snapshot, live| match ToPeer::decode(&resume(snapshot, 10_000, live)) {
            Ok(ToPeer::Resume(mut r)) => {
                r.spectator = true;
                ToPeer::Resume(r).to_bytes()
            }
            other => panic!("{other:?}"),
        };
        w.handle_message(t0, &watch(None, 60));
        for t in 0..20 {
            w.handle_message(t0, &bundle(t));
        }
        let _ = drain(&mut w);
        assert!(!w.reconnect(PlayerId(1), RejoinSecret([1; 16])));
        assert!(w.rewatch());
        assert!(w.is_reconnecting());
        let (out, _) = drain(&mut w);
        assert!(
            matches!(&out[..], [ToRelay::Rewatch(r)] if r.from == Turn(20)),
            "{out:?}"
        );
        w.handle_message(t0, &reconnected(80));
        assert!(!w.is_reconnecting());
        for t in 20..30 {
            w.handle_message(t0, &bundle(t));
        }
        let (out, ev) = drain(&mut w);
        assert_eq!(turns_run(&ev), (20..30).collect::<Vec<_>>());
        assert!(out.is_empty(), "a spectator sends no input: {out:?}");
        w.handle_message(t0, &ToPeer::HandBack { from: Turn(20) }.to_bytes());
        assert!(drain(&mut w).0.is_empty(), "a spectator hands nothing back");
        // Again, and the relay has only its snapshot of turn 40 to offer.
        assert!(w.rewatch());
        let hash = StateHash([4; 32]);
        w.handle_message(t0, &watch(Some((Turn(40), hash, 2)), 90));
        let chunk = SnapshotChunk {
            turn: Turn(40),
            hash,
            total: 2,
            offset: 0,
            bytes: vec![7, 8],
        };
        w.handle_message(t0, &ToPeer::SnapshotChunk(chunk).to_bytes());
        for t in 41..45 {
            w.handle_message(t0, &bundle(t));
        }
        let (_, ev) = drain(&mut w);
        assert_eq!(
            ev[0],
            Event::Restored {
                snapshot: Some((Turn(40), hash, vec![7, 8]))
            }
        );
        w.handle_timeout(t0);
        let (_, later) = drain(&mut w);
        assert_eq!(
            turns_run(&[ev, later].concat()),
            (41..45).collect::<Vec<_>>()
        );
        assert!(!w.is_reconnecting());
        assert_eq!(w.stats(t0).reconnects, 2);
        assert_eq!(s.stats(t0).reconnects, 1);
    }

    /// A reconnect refused for a passing reason (no agreed snapshot yet at
    /// a restarted relay) is sent again on the retry timer until the relay
    /// takes it; one refused for good ends the session with the refusal,
    /// instead of leaving it reconnecting forever.
    /// A relay that can restart tags each bundle it sends; a restarted
    /// relay adopts a handed-back bundle only with that tag. The peer keeps
    /// each tag with the bundle it played and hands back exactly what it
    /// was given: every turn with its own tag, none invented, none dropped.
    #[test]
    fn a_peer_hands_back_each_bundle_with_the_tag_the_relay_gave_it() {
        let t0 = Instant::ZERO;
        let tagged = |turn: u32| Bundle {
            turn: Turn(turn),
            inputs: vec![(PlayerId(0), vec![turn as u8])],
            notices: Vec::new(),
            tag: Some(crate::proto::BundleTag([turn as u8 ^ 0xa5; 16])),
        };
        let mut s = rejoining(t0);
        s.handle_message(t0, &resume(None, 10_200, 100));
        for t in 0..100 {
            s.handle_message(t0, &ToPeer::Bundle(tagged(t)).to_bytes());
        }
        let _ = drain(&mut s);
        s.handle_message(t0, &ToPeer::HandBack { from: Turn(90) }.to_bytes());
        let (out, _) = drain(&mut s);
        let back: Vec<Bundle> = out
            .into_iter()
            .filter_map(|m| match m {
                ToRelay::HandedBack(b) => Some(b),
                _ => None,
            })
            .collect();
        assert_eq!(back, (90..100).map(tagged).collect::<Vec<_>>());
        // The tags compare in constant time; check the bytes themselves too.
        let tags: Vec<[u8; 16]> = back.iter().filter_map(|b| b.tag.map(|t| t.0)).collect();
        assert_eq!(
            tags,
            (90..100u32)
                .map(|t| [t as u8 ^ 0xa5; 16])
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_refused_reconnect_is_retried_or_ends_the_session() {
        let t0 = Instant::ZERO;
        let refusal = |reason| {
            ToPeer::Rejected {
                reason,
                detail: None,
            }
            .to_bytes()
        };
        let mut s = caught_up(t0);
        assert!(s.reconnect(PlayerId(1), RejoinSecret([1; 16])));
        let (first, _) = drain(&mut s);
        s.handle_message(t0, &refusal(RejectReason::NoSnapshot));
        assert!(s.is_running() && s.is_reconnecting());
        let retry = t0 + REJOIN_RETRY_EVERY;
        assert!(s.poll_timeout().is_some_and(|t| t <= retry));
        s.handle_timeout(retry);
        let (again, _) = drain(&mut s);
        let asks = |out: &[ToRelay]| {
            out.iter()
                .filter(|m| matches!(m, ToRelay::Reconnect(_)))
                .count()
        };
        assert_eq!((asks(&first), asks(&again)), (1, 1), "{again:?}");

        let mut s = caught_up(t0);
        assert!(s.reconnect(PlayerId(1), RejoinSecret([1; 16])));
        s.handle_message(t0, &refusal(RejectReason::WrongSecret));
        assert!(s.is_ended());
        let (_, ev) = drain(&mut s);
        assert!(ev.iter().any(|e| matches!(
            e,
            Event::Rejected {
                reason: RejectReason::WrongSecret,
                ..
            }
        )));
    }

    /// The relay restarted while a rejoining player was still receiving its
    /// snapshot: there is no world to keep, so the session asks for its
    /// slot back with a plain `Rejoin`, and the relay's `Resume` and
    /// snapshot restore it as in any rejoin.
    #[test]
    fn a_reconnect_before_the_snapshot_is_whole_rejoins() {
        let t0 = Instant::ZERO;
        let mut s = rejoining(t0);
        let hash = StateHash([9; 32]);
        s.handle_message(t0, &resume(Some((Turn(49), hash, 4)), 6_000, 55));
        let chunk = |bytes: &[u8], offset: u32| {
            ToPeer::SnapshotChunk(SnapshotChunk {
                turn: Turn(49),
                hash,
                total: 4,
                offset,
                bytes: bytes.to_vec(),
            })
            .to_bytes()
        };
        s.handle_message(t0, &chunk(&[1, 2], 0));
        let _ = drain(&mut s);
        assert!(s.reconnect(PlayerId(1), RejoinSecret([1; 16])));
        let (out, _) = drain(&mut s);
        assert!(
            matches!(&out[..], [ToRelay::Rejoin(r)] if r.player == PlayerId(1)),
            "{out:?}"
        );
        s.handle_message(t0, &resume(Some((Turn(49), hash, 4)), 7_000, 60));
        assert!(!s.is_reconnecting());
        s.handle_message(t0, &chunk(&[1, 2], 0));
        s.handle_message(t0, &chunk(&[3, 4], 2));
        for t in 50..60 {
            s.handle_message(t0, &bundle(t));
        }
        let (_, ev) = drain(&mut s);
        assert_eq!(
            ev[0],
            Event::Restored {
                snapshot: Some((Turn(49), hash, vec![1, 2, 3, 4]))
            }
        );
        s.handle_timeout(t0 + Duration::from_millis(500));
        let (out, later) = drain(&mut s);
        assert_eq!(
            turns_run(&[ev, later].concat()),
            (50..60).collect::<Vec<_>>()
        );
        assert!(
            out.contains(&ToRelay::CaughtUp { turn: Turn(59) }),
            "{out:?}"
        );
    }

    /// The snapshot comes in chunks; no turn runs before the whole of it is
    /// here, and a chunk out of order is refused.
    #[test]
    fn no_turn_runs_before_the_whole_snapshot_is_here() {
        let t0 = Instant::from_millis(5);
        let mut s = rejoining(t0);
        let hash = StateHash([9; 32]);
        s.handle_message(t0, &resume(Some((Turn(49), hash, 6)), 6_000, 55));
        for t in 50..55 {
            s.handle_message(t0, &bundle(t));
        }
        let chunk = |offset: u32, bytes: &[u8]| {
            ToPeer::SnapshotChunk(SnapshotChunk {
                turn: Turn(49),
                hash,
                total: 6,
                offset,
                bytes: bytes.to_vec(),
            })
            .to_bytes()
        };
        s.handle_message(t0, &chunk(0, &[1, 2, 3]));
        s.handle_message(t0, &chunk(4, &[5, 6]));
        let (_, ev) = drain(&mut s);
        assert!(matches!(ev[..], [Event::Started { .. }]), "{ev:?}");
        assert_eq!(s.stats(t0).bad_messages, 1);
        s.handle_message(t0, &chunk(3, &[4, 5, 6]));
        let (_, ev) = drain(&mut s);
        assert_eq!(
            ev[0],
            Event::Restored {
                snapshot: Some((Turn(49), hash, vec![1, 2, 3, 4, 5, 6]))
            }
        );
        let turns: Vec<u32> = ev
            .iter()
            .filter_map(|e| match e {
                Event::TurnReady { turn, .. } => Some(turn.0),
                _ => None,
            })
            .collect();
        assert_eq!(turns, (50..55).collect::<Vec<_>>());
    }

    /// `--on-desync heal` on a running peer: the relay's `Heal` drops the
    /// turns after the snapshot, the tail runs again after the snapshot is
    /// here, no input leaves before the peer caught up, then play goes on.
    #[test]
    fn a_heal_restores_and_replays_the_tail_on_the_live_session() {
        let t0 = Instant::from_millis(0);
        let mut s = SessionBuilder::new().with_match("m", 2).build(t0).unwrap();
        start_as_player_0(&mut s, t0);
        let late = t0 + Duration::from_millis(1500);
        for t in 0..10 {
            s.handle_message(late, &bundle(t));
        }
        let _ = drain(&mut s);
        let hash = StateHash([4; 32]);
        let heal = ToPeer::Heal(Heal {
            desync_turn: Turn(7),
            snapshot: Some((Turn(4), hash, 2)),
            live: Turn(10),
        });
        s.handle_message(late, &heal.to_bytes());
        for t in 5..10 {
            s.handle_message(late, &bundle(t));
        }
        let (out, ev) = drain(&mut s);
        assert_eq!(
            ev,
            vec![Event::Healing {
                desync_turn: Turn(7)
            }]
        );
        assert!(!out.iter().any(|m| matches!(m, ToRelay::Input { .. })));
        let chunk = ToPeer::SnapshotChunk(SnapshotChunk {
            turn: Turn(4),
            hash,
            total: 2,
            offset: 0,
            bytes: vec![1, 2],
        });
        s.handle_message(late, &chunk.to_bytes());
        // The tail runs once the game polled the snapshot (and did not
        // report it failed): `CaughtUp` leaves after the events.
        let (mut out, ev) = drain(&mut s);
        out.extend(drain(&mut s).0);
        assert_eq!(
            ev[0],
            Event::Restored {
                snapshot: Some((Turn(4), hash, vec![1, 2]))
            }
        );
        let turns: Vec<u32> = ev
            .iter()
            .filter_map(|e| match e {
                Event::TurnReady { turn, .. } => Some(turn.0),
                _ => None,
            })
            .collect();
        assert_eq!(turns, (5..10).collect::<Vec<_>>());
        assert!(ev.contains(&Event::CaughtUp { turn: Turn(9) }));
        assert!(out.contains(&ToRelay::CaughtUp { turn: Turn(9) }));
        // Turns before the snapshot's next one are not hashed twice over:
        // the replayed turns report again, the relay ignores judged ones.
        assert!(s.report_hash(Turn(5), hash, Vec::new()).is_ok());
        assert_eq!(s.stats(late).heals, 1);
        // A second heal while restoring would be refused; here it is
        // accepted again once caught up.
        assert_eq!(s.stats(late).bad_messages, 0);
    }

    /// A snapshot the game cannot restore costs the rejoining peer nothing
    /// but time: no turn runs from it, the session reports it (no `Leave`),
    /// keeps its place, ignores the rest of the old tail and restores the
    /// relay's replacement, then catches up as usual.
    #[test]
    fn a_failed_restore_is_reported_and_the_relays_replacement_restores() {
        let t0 = Instant::from_millis(5);
        let mut s = rejoining(t0);
        let bad = StateHash([9; 32]);
        s.handle_message(t0, &resume(Some((Turn(49), bad, 2)), 6_000, 55));
        for t in 50..55 {
            s.handle_message(t0, &bundle(t));
        }
        let chunk = |turn: u32, hash: StateHash, bytes: &[u8]| {
            ToPeer::SnapshotChunk(SnapshotChunk {
                turn: Turn(turn),
                hash,
                total: bytes.len() as u32,
                offset: 0,
                bytes: bytes.to_vec(),
            })
            .to_bytes()
        };
        s.handle_message(t0, &chunk(49, bad, &[0xde, 0xad]));
        let mut polled = Vec::new();
        while let Some(ev) = s.poll_event() {
            if matches!(ev, Event::Restored { snapshot: Some(_) }) {
                // The game's check fails.
                s.snapshot_failed();
            }
            polled.push(ev);
        }
        assert!(
            !polled.iter().any(|e| matches!(e, Event::TurnReady { .. })),
            "{polled:?}"
        );
        let (out, _) = drain(&mut s);
        assert!(out.contains(&ToRelay::SnapshotFailed { turn: Turn(49) }));
        assert!(!out.contains(&ToRelay::Leave), "{out:?}");
        assert!(!s.is_ended());
        assert_eq!(s.stats(t0).snapshots_failed, 1);
        // The relay's replacement: a newer snapshot and the tail after it.
        let good = StateHash([3; 32]);
        let reoffer = ToPeer::Reoffer(Reoffer {
            snapshot: Some((Turn(52), good, 1)),
            live: Turn(56),
        });
        s.handle_message(t0, &reoffer.to_bytes());
        s.handle_message(t0, &chunk(52, good, &[7]));
        for t in 53..56 {
            s.handle_message(t0, &bundle(t));
        }
        let (mut out, ev) = drain(&mut s);
        out.extend(drain(&mut s).0);
        assert_eq!(
            ev[0],
            Event::Restored {
                snapshot: Some((Turn(52), good, vec![7]))
            }
        );
        let turns: Vec<u32> = ev
            .iter()
            .filter_map(|e| match e {
                Event::TurnReady { turn, .. } => Some(turn.0),
                _ => None,
            })
            .collect();
        assert_eq!(turns, vec![53, 54, 55]);
        assert!(out.contains(&ToRelay::CaughtUp { turn: Turn(55) }));
        // A reoffer nobody asked for is refused.
        let before = s.stats(t0).bad_messages;
        s.handle_message(t0, &reoffer.to_bytes());
        assert_eq!(s.stats(t0).bad_messages, before + 1);
    }

    /// An upload leaves in paced chunks of the configured size, in order.
    #[test]
    fn a_snapshot_upload_leaves_in_paced_chunks() {
        let t0 = Instant::from_millis(0);
        let mut s = SessionBuilder::new()
            .with_match("m", 2)
            .with_upload_pacing(4, Duration::from_millis(50))
            .build(t0)
            .unwrap();
        start_as_player_0(&mut s, t0);
        let _ = drain(&mut s);
        s.upload_snapshot(
            Turn(7),
            StateHash([1; 32]),
            &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
        );
        let chunks = |s: &mut Session| -> Vec<(u32, Vec<u8>)> {
            drain(s)
                .0
                .into_iter()
                .filter_map(|m| match m {
                    ToRelay::SnapshotChunk(c) => Some((c.offset, c.bytes)),
                    _ => None,
                })
                .collect()
        };
        s.handle_timeout(t0);
        assert_eq!(chunks(&mut s), vec![(0, vec![1, 2, 3, 4])]);
        s.handle_timeout(t0 + Duration::from_millis(49));
        assert!(chunks(&mut s).is_empty());
        assert_eq!(s.poll_timeout(), Some(t0 + Duration::from_millis(50)));
        s.handle_timeout(t0 + Duration::from_millis(50));
        assert_eq!(chunks(&mut s), vec![(4, vec![5, 6, 7, 8])]);
        s.handle_timeout(t0 + Duration::from_millis(100));
        assert_eq!(chunks(&mut s), vec![(8, vec![9, 10])]);
    }

    /// The relay is lost in the middle of a paced snapshot upload: the
    /// reconnect drops the rest (a restarted relay asked for none and would
    /// refuse it; it asks anew once its match runs), so only the reconnect
    /// leaves on the new connection.
    #[test]
    fn an_upload_under_way_when_the_relay_is_lost_is_dropped() {
        let t0 = Instant::from_millis(0);
        let mut s = SessionBuilder::new()
            .with_match("m", 2)
            .with_upload_pacing(4, Duration::from_millis(50))
            .build(t0)
            .unwrap();
        start_as_player_0(&mut s, t0);
        for t in 0..8 {
            s.handle_message(t0 + Duration::from_millis(900), &bundle(t));
        }
        let _ = drain(&mut s);
        s.upload_snapshot(
            Turn(7),
            StateHash([1; 32]),
            &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
        );
        s.handle_timeout(t0 + Duration::from_millis(900));
        let (out, _) = drain(&mut s);
        assert!(out.iter().any(|m| matches!(m, ToRelay::SnapshotChunk(_))));
        assert!(s.reconnect(PlayerId(0), RejoinSecret([1; 16])));
        for ms in [950, 1000, 1050] {
            s.handle_timeout(t0 + Duration::from_millis(ms));
        }
        let (out, _) = drain(&mut s);
        assert!(
            out.iter().all(|m| !matches!(m, ToRelay::SnapshotChunk(_))),
            "{out:?}"
        );
        assert!(
            matches!(out.first(), Some(ToRelay::Reconnect(_))),
            "{out:?}"
        );
    }

    /// By default the whole upload is handed to the bulk channel at once in
    /// chunks of the largest size: the transport's bulk path paces it.
    #[test]
    fn by_default_an_upload_leaves_at_once_in_the_largest_chunks() {
        let t0 = Instant::from_millis(0);
        let mut s = SessionBuilder::new().with_match("m", 2).build(t0).unwrap();
        start_as_player_0(&mut s, t0);
        let _ = drain(&mut s);
        let snapshot: Vec<u8> = (0..70_000u32).map(|i| i as u8).collect();
        s.upload_snapshot(Turn(7), StateHash([1; 32]), &snapshot);
        s.handle_timeout(t0);
        let chunks: Vec<SnapshotChunk> = drain(&mut s)
            .0
            .into_iter()
            .filter_map(|m| match m {
                ToRelay::SnapshotChunk(c) => Some(c),
                _ => None,
            })
            .collect();
        let offsets: Vec<u32> = chunks.iter().map(|c| c.offset).collect();
        assert_eq!(offsets, vec![0, 32 * 1024, 64 * 1024]);
        let joined: Vec<u8> = chunks.into_iter().flat_map(|c| c.bytes).collect();
        assert_eq!(joined, snapshot);
        assert_eq!(
            s.poll_timeout().filter(|&t| t <= t0),
            None,
            "nothing left to pace"
        );
    }
}
