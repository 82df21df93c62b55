//! The session's side of agreed snapshots and rejoining: uploading the
//! snapshot the relay asked for in paced chunks behind turn traffic, and
//! coming back into a held slot (resume, receive the snapshot, fast-forward
//! through the bundle tail at full speed, then play live again).

use super::playout::{Ledger, Playout};
use super::{Phase, Running, Session};
use crate::event::Event;
use crate::input_delay::DelaySchedule;
use crate::proto::{Heal, MAX_SNAPSHOT_CHUNK, Resume, SnapshotChunk, ToRelay};
use crate::time::{Duration, Instant};
use crate::turn_buffer::TurnBuffer;
use sim::{StateHash, Turn};
use std::collections::{BTreeMap, VecDeque};

/// A rejoining session between the relay's `Resume` and catching up.
#[derive(Debug)]
pub(super) struct Restoring {
    /// The snapshot announced (turn, hash, length); `None`: from the setup.
    snapshot: Option<(Turn, StateHash, u32)>,
    /// Snapshot bytes received so far.
    buf: Vec<u8>,
    /// Whether the world was handed over ([`Event::Restored`]).
    restored: bool,
    /// The relay's next turn to close when it accepted the rejoin: every
    /// turn before it comes as the tail.
    live: Turn,
}

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

    /// Whether the world may not step yet: a rejoin's snapshot is incomplete.
    pub(super) fn awaiting_snapshot(&self) -> bool {
        self.restoring.as_ref().is_some_and(|r| !r.restored)
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

    /// The relay accepted our rejoin: set the schedule from its clock, wait
    /// for the snapshot, then fast-forward.
    pub(super) fn resume(&mut self, now: Instant, resume: Resume) {
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
        let restored = resume.snapshot.is_none();
        if restored {
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
                restored,
                // A spectator never catches up: it sends no input, ever.
                live: if resume.spectator {
                    Turn(u32::MAX)
                } else {
                    resume.live
                },
            }),
            upload: Upload::default(),
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
        let next_exec = heal.snapshot.map_or(r.first_turn, |(t, _, _)| t.next());
        let restored = heal.snapshot.is_none();
        r.next_exec = next_exec;
        r.consumed = next_exec.0.checked_sub(1).map(Turn);
        r.last_hashed = r.consumed;
        r.buffer = TurnBuffer::default();
        r.arrived.clear();
        r.sections.clear();
        r.waiting = None;
        r.stall_notified = None;
        r.upload = Upload::default();
        r.restoring = Some(Restoring {
            snapshot: heal.snapshot,
            buf: Vec::new(),
            restored,
            live: heal.live,
        });
        self.stats.heals += 1;
        self.events.push_back(Event::Healing {
            desync_turn: heal.desync_turn,
        });
        if restored {
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
        if rs.restored
            || chunk.turn != turn
            || chunk.total != total
            || u64::from(chunk.offset) != rs.buf.len() as u64
        {
            self.stats.bad_messages += 1;
            return;
        }
        rs.buf.extend_from_slice(&chunk.bytes);
        if rs.buf.len() as u64 == u64::from(total) {
            rs.restored = true;
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
        if !rs.restored || r.next_exec < rs.live || r.buffer.has(r.next_exec) {
            return;
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
        let (out, ev) = drain(&mut s);
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
