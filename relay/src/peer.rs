//! A headless peer of the reference game: a [`Session`] plus the world and a
//! seeded bot. Transport-agnostic: a driver moves the session's messages
//! (the `peer` binary and the demo over UDP, tests over a pipe) and calls
//! [`GamePeer::pump`] after feeding it.

use lockstep::builder::{BuildError, SessionBuilder};
use lockstep::event::Event;
use lockstep::proto::{EndReason, RejectReason, decode_turn};
use lockstep::session::{Session, SessionStats};
use lockstep::{Duration, Instant};
use serde::Serialize;
use sim::bot::Bot;
use sim::game::{Command, DEFAULT_TICKS_PER_TURN, World};
use sim::{MatchSetup, PlayerId, Simulation, StateHash, Turn};

/// What a peer plays and how.
#[derive(Clone, Debug)]
pub struct PeerConfig {
    /// Match to join.
    pub match_name: String,
    /// Number of players in the match.
    pub players: u8,
    /// Turns to play (0 = until the match ends).
    pub turns: u32,
    /// Seed of this peer's bot.
    pub seed: u64,
    /// Bot actions per minute.
    pub apm: u32,
    /// Display name.
    pub name: String,
    /// Fault switch: perturb the own world right after simulating this turn.
    pub desync_at: Option<Turn>,
}

/// A desync as this peer learned it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DesyncSummary {
    /// The first turn whose hashes disagreed.
    pub turn: u32,
    /// Players outside the majority (empty when the relay cannot tell).
    pub odd_players: Vec<u8>,
    /// Differing sections, once the relay compared them.
    pub sections: Vec<String>,
}

/// The relay refused this peer (its handshake or its join).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PeerRefusal {
    /// Why, typed.
    pub reason: RejectReason,
    /// Specifics the relay added, if any.
    pub detail: Option<String>,
}

impl std::fmt::Display for PeerRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.detail {
            Some(d) => write!(f, "{} ({d})", self.reason),
            None => write!(f, "{}", self.reason),
        }
    }
}

/// Latency percentiles in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct LatencyMs {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
}

/// A peer's end-of-run summary (the `--json` output of `peer`, one row of the demo table).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PeerSummary {
    /// This peer's slot, once started.
    pub player: Option<u8>,
    /// The last simulated turn.
    pub final_turn: Option<u32>,
    /// State hash after it, hex.
    pub final_hash: Option<String>,
    /// Turns simulated.
    pub turns: u32,
    /// Total stall time.
    pub stall_ms: f64,
    /// Command → execution latency.
    pub turn_latency_ms: LatencyMs,
    /// Transport RTT.
    pub rtt_ms: f64,
    /// Transport loss fraction.
    pub loss: f64,
    /// Message bytes per second, up plus down, over the match.
    pub bytes_per_s: f64,
    /// Message bytes per second sent.
    pub bytes_up_per_s: f64,
    /// Message bytes per second received.
    pub bytes_down_per_s: f64,
    /// Input delay at the end, in turns.
    pub input_delay: u8,
    /// Inputs of ours that arrived late.
    pub late_inputs: u32,
    /// Desyncs reported by the relay.
    pub desyncs: Vec<DesyncSummary>,
    /// Players dropped, with the turn.
    pub dropped: Vec<(u8, u32)>,
    /// Whether the match ended normally (all turns played).
    pub completed: bool,
    /// Why the match ended, as the relay announced it (`None`: no end was
    /// announced, e.g. the connection was lost first).
    pub ended: Option<EndReason>,
    /// Why the session ended early, if it did.
    pub error: Option<String>,
    /// Why the relay refused this peer, if it did (`peer` then exits 5).
    pub refused: Option<PeerRefusal>,
}

/// A session playing the reference game with a bot.
#[derive(Debug)]
pub struct GamePeer {
    config: PeerConfig,
    session: Session,
    world: Option<World>,
    bot: Option<Bot>,
    started_at: Option<Instant>,
    last: Option<(Turn, StateHash)>,
    desyncs: Vec<DesyncSummary>,
    dropped: Vec<(u8, u32)>,
    completed: bool,
    ended: Option<EndReason>,
    error: Option<String>,
    refused: Option<PeerRefusal>,
    /// The wall clock at one instant (`now`, Unix ms), given by the driver:
    /// the replay header's start time is derived from it.
    unix_anchor: Option<(Instant, u64)>,
    /// Every event, for callers that want to log them.
    log: Vec<Event>,
    record: Option<PeerRecording>,
}

/// This peer's own replay of the match (with keyframes).
struct PeerRecording {
    path: std::path::PathBuf,
    writer: Option<replays::Writer>,
}

impl std::fmt::Debug for PeerRecording {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerRecording")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// Turns between keyframes in a peer's own replay.
pub const KEYFRAME_EVERY: u32 = 100;

/// The rules fingerprint sent in the join: the reference game's rules hash
/// for a canonical setup of this size (the real seed is only known at start).
#[must_use]
pub fn rules_fingerprint(players: u8) -> StateHash {
    World::new(&MatchSetup {
        seed: 0,
        players,
        ticks_per_turn: DEFAULT_TICKS_PER_TURN,
    })
    .rules_hash()
}

impl GamePeer {
    /// A peer whose session has queued its join.
    pub fn new(now: Instant, config: PeerConfig) -> Result<Self, BuildError> {
        let session = SessionBuilder::new()
            .with_match(&config.match_name, config.players)
            .with_simulation::<World>(rules_fingerprint(config.players))
            .with_name(&config.name)
            .with_turns(config.turns)
            .build(now)?;
        Ok(Self {
            config,
            session,
            world: None,
            bot: None,
            started_at: None,
            last: None,
            desyncs: Vec::new(),
            dropped: Vec::new(),
            completed: false,
            ended: None,
            error: None,
            refused: None,
            unix_anchor: None,
            log: Vec::new(),
            record: None,
        })
    }

    /// Anchors the wall clock: `now` is `unix_ms` milliseconds after the
    /// Unix epoch. The driver calls this (the peer never reads the clock);
    /// without it a recording's start time is 0 (unknown).
    pub fn set_unix_time(&mut self, now: Instant, unix_ms: u64) {
        self.unix_anchor = Some((now, unix_ms));
    }

    /// The wall-clock time of `now` in Unix ms, from the anchor.
    fn unix_ms(&self, now: Instant) -> u64 {
        self.unix_anchor.map_or(0, |(at, ms)| {
            if now >= at {
                ms.saturating_add(now.saturating_since(at).as_millis())
            } else {
                ms.saturating_sub(at.saturating_since(now).as_millis())
            }
        })
    }

    /// Records this peer's view of the match (bundles, own hashes, drops,
    /// delay changes, a keyframe every [`KEYFRAME_EVERY`] turns) to `path`.
    pub fn record_to(&mut self, path: std::path::PathBuf) {
        self.record = Some(PeerRecording { path, writer: None });
    }

    /// Closes the recording: a trailer if the match completed, else the file
    /// is left readable up to its last turn.
    pub fn close_recording(&mut self) {
        let Some(rec) = self.record.as_mut() else {
            return;
        };
        let Some(mut w) = rec.writer.take() else {
            return;
        };
        let r = match self.last {
            Some((turn, hash)) if self.completed => w.finish(turn, hash),
            _ => w.abandon(),
        };
        if let Err(e) = r {
            self.error = Some(format!("recording: {e}"));
        }
    }

    fn record(&mut self, f: impl FnOnce(&mut replays::Writer) -> Result<(), replays::ReplayError>) {
        if let Some(w) = self.record.as_mut().and_then(|r| r.writer.as_mut())
            && let Err(e) = f(w)
        {
            self.error = Some(format!("recording: {e}"));
            if let Some(r) = self.record.as_mut() {
                r.writer = None;
            }
        }
    }

    fn start_recording(
        &mut self,
        now: Instant,
        setup: &MatchSetup,
        players: &[lockstep::proto::PlayerInfo],
        turn_length: Duration,
    ) {
        let start_time_unix_ms = self.unix_ms(now);
        let Some(rec) = self.record.as_mut() else {
            return;
        };
        let Some(world) = self.world.as_ref() else {
            return;
        };
        let mut header = replays::Header::for_game(world, setup);
        header.protocol_version = u32::from(lockstep::proto::PROTOCOL_VERSION);
        header.match_name.clone_from(&self.config.match_name);
        header.turn_length_us = turn_length.as_micros();
        header.players = players
            .iter()
            .map(|p| replays::PlayerInfo {
                id: p.id,
                name: p.name.clone(),
            })
            .collect();
        header.start_time_unix_ms = start_time_unix_ms;
        match replays::Writer::create(&rec.path, &header) {
            Ok(w) => rec.writer = Some(w),
            Err(e) => self.error = Some(format!("recording: {e}")),
        }
    }

    /// The session, for the driver to feed and drain.
    pub fn session(&mut self) -> &mut Session {
        &mut self.session
    }

    /// The world, once the match started.
    #[must_use]
    pub const fn world(&self) -> Option<&World> {
        self.world.as_ref()
    }

    /// Whether the session is over.
    #[must_use]
    pub fn is_done(&self) -> bool {
        self.session.is_ended()
    }

    /// Takes the events seen since the last call (for progress logs).
    pub fn take_log(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.log)
    }

    /// Handles every pending session event: simulate ready turns, report
    /// hashes, let the bot act. Call after feeding the session.
    pub fn pump(&mut self, now: Instant) {
        while let Some(ev) = self.session.poll_event() {
            self.on_event(now, &ev);
            self.log.push(ev);
        }
    }

    fn on_event(&mut self, now: Instant, ev: &Event) {
        match ev {
            Event::Started {
                your_player,
                setup,
                players,
                turn_length,
                ..
            } => {
                self.world = Some(World::new(setup));
                self.bot = Some(Bot::new(*your_player, self.config.seed, self.config.apm));
                self.started_at = Some(now);
                self.start_recording(now, setup, players, *turn_length);
            }
            Event::TurnReady { turn, inputs } => {
                let (Some(world), Some(bot)) = (self.world.as_mut(), self.bot.as_mut()) else {
                    return;
                };
                let commands = decode_turn::<Command>(inputs);
                world.step(*turn, &commands);
                if self.config.desync_at == Some(*turn) {
                    world.perturb(turn.0);
                }
                let hash = world.state_hash();
                self.last = Some((*turn, hash));
                let keyframe =
                    (turn.0 % KEYFRAME_EVERY == KEYFRAME_EVERY - 1).then(|| world.snapshot());
                // Not reachable for a yielded turn; counted rather than fatal.
                if self
                    .session
                    .report_hash(*turn, hash, world.section_hashes())
                    .is_err()
                {
                    self.error = Some(format!("could not report hash of turn {turn}"));
                }
                let orders = bot.think(world, *turn);
                if !orders.is_empty() {
                    // A full queue only delays the bot; nothing to do about it here.
                    let _ = self.session.submit_commands(now, &orders);
                }
                let turn = *turn;
                self.record(|w| {
                    w.record_turn(turn, inputs)?;
                    w.record_hash(turn, hash)?;
                    match &keyframe {
                        Some(snap) => w.record_keyframe(turn, snap, hash),
                        None => Ok(()),
                    }
                });
            }
            Event::Desync {
                turn, odd_players, ..
            } => self.desyncs.push(DesyncSummary {
                turn: turn.0,
                odd_players: odd_players.iter().map(|p| p.0).collect(),
                sections: Vec::new(),
            }),
            Event::DesyncSections { turn, sections, .. } => {
                if let Some(d) = self.desyncs.iter_mut().find(|d| d.turn == turn.0) {
                    d.sections.clone_from(sections);
                }
            }
            Event::PlayerDropped { player, turn } => {
                self.dropped.push((player.0, turn.0));
                let (player, turn) = (*player, *turn);
                self.record(|w| w.record_drop(player, turn));
            }
            Event::InputDelayChanged { delay, from_turn } => {
                let (delay, from_turn) = (u32::from(*delay), *from_turn);
                self.record(|w| w.record_delay_change(delay, from_turn));
            }
            Event::MatchEnded { reason, .. } => {
                self.completed = *reason == EndReason::Completed;
                self.ended = Some(*reason);
                self.close_recording();
            }
            Event::Rejected { reason, detail } => {
                self.refused = Some(PeerRefusal {
                    reason: *reason,
                    detail: detail.clone(),
                });
            }
            _ => {}
        }
    }

    /// The peer's slot, once started.
    #[must_use]
    pub fn player(&self) -> Option<PlayerId> {
        self.session.player().or(self.bot.as_ref().map(Bot::player))
    }

    /// Session figures.
    #[must_use]
    pub fn stats(&self, now: Instant) -> SessionStats {
        self.session.stats(now)
    }

    /// The end-of-run summary.
    #[must_use]
    pub fn summary(&self, now: Instant) -> PeerSummary {
        let s = self.session.stats(now);
        let elapsed = self
            .started_at
            .map_or(Duration::ZERO, |t| now.saturating_since(t));
        let secs = elapsed.as_secs_f64();
        let rate = |b: u64| if secs > 0.0 { b as f64 / secs } else { 0.0 };
        PeerSummary {
            player: self.player().map(|p| p.0),
            final_turn: self.last.map(|(t, _)| t.0),
            final_hash: self.last.map(|(_, h)| h.to_hex()),
            turns: s.turns_executed,
            stall_ms: s.stall.as_millis_f64(),
            turn_latency_ms: LatencyMs {
                p50: s.latency_p50.as_millis_f64(),
                p99: s.latency_p99.as_millis_f64(),
            },
            rtt_ms: s.link.rtt.as_millis_f64(),
            loss: s.link.loss,
            bytes_per_s: rate(s.bytes_sent + s.bytes_received),
            bytes_up_per_s: rate(s.bytes_sent),
            bytes_down_per_s: rate(s.bytes_received),
            input_delay: s.input_delay,
            late_inputs: s.late_inputs,
            desyncs: self.desyncs.clone(),
            dropped: self.dropped.clone(),
            completed: self.completed,
            ended: self.ended,
            error: self.error.clone(),
            refused: self.refused.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests may unwrap
    use super::*;
    use lockstep::proto::{PlayerInfo, Start, ToPeer};

    /// The recording's start time comes from the wall clock the driver
    /// anchored, advanced by the session clock to the moment the match began.
    #[test]
    fn the_recording_start_time_comes_from_the_anchored_wall_clock() {
        let dir = std::env::temp_dir().join(format!("peer-unix-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("me.lsr");
        let t0 = Instant::from_millis(1_000);
        let config = PeerConfig {
            match_name: "m".into(),
            players: 1,
            turns: 10,
            seed: 1,
            apm: 0,
            name: "p".into(),
            desync_at: None,
        };
        let mut peer = GamePeer::new(t0, config).unwrap();
        peer.set_unix_time(t0, 1_700_000_000_000);
        peer.record_to(path.clone());
        let start = ToPeer::Start(Start {
            your_player: PlayerId(0),
            setup: MatchSetup {
                seed: 1,
                players: 1,
                ticks_per_turn: DEFAULT_TICKS_PER_TURN,
            },
            turn_length_us: 100_000,
            players: vec![PlayerInfo {
                id: PlayerId(0),
                name: "p".into(),
            }],
            input_delay: 3,
            first_turn: Turn(0),
            last_turn: Some(Turn(9)),
        });
        let started = t0 + Duration::from_millis(2_500);
        peer.session().handle_message(started, &start.to_bytes());
        peer.pump(started);
        peer.close_recording();
        let reader = replays::Reader::open(&path).unwrap();
        assert_eq!(reader.header().start_time_unix_ms, 1_700_000_002_500);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
