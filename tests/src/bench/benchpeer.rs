//! A measuring peer: the public game half of a peer
//! ([`lockstep::peer::GameSession`], the same code `lockstep::peer::Peer`
//! runs) playing either the reference game with its seeded bot or a fake
//! game for load generation (small commands at the bot's rate, a
//! deterministic fake hash per turn). It timestamps every command it submits
//! and matches them, in order, to the turns that execute them, so benchmarks
//! get whole latency distributions rather than two percentiles. The carrier
//! (UDP transport or a TCP stream) is the driver's: it feeds
//! [`BenchPeer::session`] and drains it.

use lockstep::low_level::proto::EndReason;
use lockstep::low_level::session::{Session, SessionStats};
use lockstep::peer::{GameSession, PeerBuilder, PeerEvent};
use lockstep::{Duration, Instant};
use sim::bot::Bot;
use sim::game::{Command, World};
use sim::{MatchSetup, PlayerId, SectionHash, Simulation, SnapshotError, Stamped, StateHash, Turn};
use std::collections::VecDeque;

/// Commands submitted this soon after the match start are the warm-up:
/// [`PeerFigures::steady_latencies_ms`] leaves them out (the session's own
/// steady-state figures leave out the same first 5 s).
pub const WARMUP: Duration = Duration::from_secs(5);

/// What the peer plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Play {
    /// The reference game, with a bot at this many actions per minute.
    Game {
        /// Bot actions per minute.
        apm: u32,
    },
    /// The reference game with its seeded bot, each turn's orders submitted
    /// after a seeded random reaction time within one turn, plus clicks (a
    /// small command each) at seeded random instants, exponential gaps: a
    /// player's clicks fall anywhere in a turn, while a bot answering each
    /// turn at once is in phase with the turn clock and measures whole turns.
    /// The clicks give the latency figures enough samples (the bot orders
    /// about once a second, in batches that share one latency).
    GameReacting {
        /// Bot actions per minute.
        apm: u32,
        /// Clicks per minute (0 for none).
        clicks_per_min: u32,
    },
    /// No simulation: one small command every `every` turns, fake hashes.
    Fake {
        /// Turns between two submitted commands.
        every: u32,
    },
}

/// How a bench peer joins.
#[derive(Clone, Debug)]
pub struct BenchPeerConfig {
    /// Match name (peers with the same name play together).
    pub match_name: String,
    /// Players in the match.
    pub players: u8,
    /// Turns to play.
    pub turns: u32,
    /// Bot seed.
    pub seed: u64,
    /// Game or fake.
    pub play: Play,
}

impl BenchPeerConfig {
    /// The player name the peer joins with (unique per seed), by which a
    /// relay driver can tell its connections apart.
    #[must_use]
    pub fn peer_name(&self) -> String {
        format!("bench-{}", self.seed)
    }
}

/// Figures one peer measured over its match.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PeerFigures {
    /// Command submitted → its turn executed, one sample per command, ms.
    pub latencies_ms: Vec<f64>,
    /// Total stall time (a due turn's bundle missing), ms.
    pub stall_ms: f64,
    /// From the start message to the last turn (or the end of the run), seconds.
    pub secs: f64,
    /// Turns executed.
    pub turns: u32,
    /// Whether every turn was played.
    pub completed: bool,
    /// Whether the relay's end-of-match message arrived.
    pub end_seen: bool,
    /// Carrier bytes sent (UDP payload or TCP stream bytes).
    pub bytes_sent: u64,
    /// Carrier bytes received.
    pub bytes_received: u64,
    /// Datagrams (UDP) or frames (TCP) sent.
    pub packets_sent: u64,
    /// Datagrams or frames received.
    pub packets_received: u64,
    /// Why the peer did not complete, if it did not.
    pub error: Option<String>,
    /// How many of the first `latencies_ms` are commands submitted within
    /// [`WARMUP`] of the start (samples are in submission order).
    #[serde(default)]
    pub warmup_samples: usize,
    /// When the match started for this peer (its Start message), seconds
    /// on the driver's clock (a load generator's: since it began); `None`
    /// if it never started.
    #[serde(default)]
    pub started_at_secs: Option<f64>,
    /// Median RTT to the relay, ms: the transport's RTT as the session
    /// samples it (`SessionStats::rtt_p50`); zero when the carrier gives the
    /// session none (TCP), for the driver to fill from the relay's Ping/Pong.
    #[serde(default)]
    pub rtt_p50_ms: f64,
    /// The RTT's p99, ms: the transport's raw samples (`SessionStats::rtt_p99`);
    /// on TCP the relay's Ping/Pong p99, filled in by the driver.
    #[serde(default)]
    pub rtt_p99_ms: f64,
    /// The session's jitter buffer at the end of the match, ms (clock policy).
    #[serde(default)]
    pub jitter_buffer_ms: f64,
}

impl PeerFigures {
    /// Stall time per minute of match.
    #[must_use]
    pub fn stall_per_min_ms(&self) -> f64 {
        if self.secs > 0.0 {
            self.stall_ms * 60.0 / self.secs
        } else {
            0.0
        }
    }

    /// Latency samples of commands submitted after the warm-up.
    #[must_use]
    pub fn steady_latencies_ms(&self) -> &[f64] {
        self.latencies_ms
            .get(self.warmup_samples..)
            .unwrap_or_default()
    }

    /// Carrier bytes per second, up plus down.
    #[must_use]
    pub fn bytes_per_s(&self) -> f64 {
        if self.secs > 0.0 {
            (self.bytes_sent + self.bytes_received) as f64 / self.secs
        } else {
            0.0
        }
    }
}

/// The game a bench peer runs.
#[derive(Debug)]
enum BenchGame {
    World(Box<GameSession<World>>),
    Fake(Box<GameSession<FakeGame>>),
}

/// Runs `$body` with `$g` bound to whichever game session it is (both
/// games share the command type, so the bodies type-check for both).
macro_rules! with_game {
    ($game:expr, $g:ident => $body:expr) => {
        match $game {
            BenchGame::World($g) => $body,
            BenchGame::Fake($g) => $body,
        }
    };
}

/// The peer; see the module docs.
#[derive(Debug)]
pub struct BenchPeer {
    config: BenchPeerConfig,
    game: BenchGame,
    me: Option<PlayerId>,
    bot: Option<Bot>,
    /// Submit times of our commands not yet executed, oldest first.
    submitted: VecDeque<Instant>,
    /// [`Play::GameReacting`]'s draw state.
    reaction_rng: u64,
    /// Orders waiting for their reaction time, in submit order.
    pending: VecDeque<(Instant, Vec<Command>)>,
    /// When the next click is due ([`Play::GameReacting`]).
    next_click: Option<Instant>,
    /// The match's turn length (known from the start).
    turn_length: Duration,
    latencies: Vec<Duration>,
    /// Latency samples of commands submitted within [`WARMUP`] of the start.
    warmup_samples: usize,
    started: Option<Instant>,
    last_turn_at: Option<Instant>,
    turns: u32,
    completed: bool,
    failed: Option<String>,
    /// Desyncs the relay reported.
    desyncs: u32,
}

impl BenchPeer {
    /// A peer whose session has queued its join.
    pub fn new(now: Instant, config: BenchPeerConfig) -> Result<Self, String> {
        let name = config.peer_name();
        let game = match config.play {
            Play::Game { .. } | Play::GameReacting { .. } => BenchGame::World(Box::new(
                PeerBuilder::<World>::new(&config.match_name, config.players)
                    .with_name(&name)
                    .with_turns(config.turns)
                    .with_ticks_per_turn(sim::game::DEFAULT_TICKS_PER_TURN)
                    .build_session(now)
                    .map_err(|e| e.to_string())?,
            )),
            Play::Fake { .. } => BenchGame::Fake(Box::new(
                PeerBuilder::<FakeGame>::new(&config.match_name, config.players)
                    .with_name(&name)
                    .with_turns(config.turns)
                    .build_session(now)
                    .map_err(|e| e.to_string())?,
            )),
        };
        // xorshift must not start at zero (a seed equal to the constant would).
        let reaction_rng = (config.seed ^ 0x9e37_79b9_7f4a_7c15).max(1);
        Ok(Self {
            config,
            game,
            me: None,
            bot: None,
            submitted: VecDeque::new(),
            reaction_rng,
            pending: VecDeque::new(),
            next_click: None,
            turn_length: Duration::ZERO,
            latencies: Vec::new(),
            warmup_samples: 0,
            started: None,
            last_turn_at: None,
            turns: 0,
            completed: false,
            failed: None,
            desyncs: 0,
        })
    }

    /// The session, for a driver to feed and drain (never to poll events:
    /// [`pump`](Self::pump) does).
    pub fn session(&mut self) -> &mut Session {
        with_game!(&mut self.game, g => g.session_mut())
    }

    /// Whether the session ended.
    #[must_use]
    pub fn is_done(&self) -> bool {
        with_game!(&self.game, g => g.is_done())
    }

    /// Why the peer failed, if it did (rejected, could not report a hash).
    #[must_use]
    pub fn failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    fn stats(&self, now: Instant) -> SessionStats {
        with_game!(&self.game, g => g.stats(now))
    }

    /// Handles every pending event at `now` (the world steps and its hash is
    /// reported as each turn is polled), then submits the orders whose
    /// reaction time has come. Call after feeding the session.
    pub fn pump(&mut self, now: Instant) {
        loop {
            let ev = with_game!(&mut self.game, g => g.poll_event());
            let Some(ev) = ev else { break };
            self.on_event(now, ev);
        }
        while let Some(at) = self.next_click.filter(|at| *at <= now) {
            let me = self.me.map_or(0, |p| u32::from(p.0));
            self.queue(at, vec![Command::Stop { units: vec![me] }]);
            self.next_click = Some(at + self.click_gap());
        }
        while self.pending.front().is_some_and(|(at, _)| *at <= now) {
            if let Some((_, orders)) = self.pending.pop_front() {
                self.submit(now, &orders);
            }
        }
    }

    /// When orders waiting for their reaction time are due: a driver wakes
    /// then (as well as at the session's timeouts) and calls
    /// [`pump`](Self::pump).
    #[must_use]
    pub fn next_wake(&self) -> Option<Instant> {
        [self.pending.front().map(|(at, _)| *at), self.next_click]
            .into_iter()
            .flatten()
            .min()
    }

    /// xorshift64: seeded, the same on every platform.
    fn draw(&mut self) -> u64 {
        let r = &mut self.reaction_rng;
        *r ^= *r << 13;
        *r ^= *r >> 7;
        *r ^= *r << 17;
        *r
    }

    /// A reaction time, uniform within one turn.
    fn reaction(&mut self) -> Duration {
        Duration::from_micros(self.draw() % self.turn_length.as_micros().max(1))
    }

    /// An exponential gap between clicks (the mean is a minute over the rate).
    fn click_gap(&mut self) -> Duration {
        let per_min = match self.config.play {
            Play::GameReacting { clicks_per_min, .. } => clicks_per_min.max(1),
            _ => 1,
        };
        let mean_us = 60_000_000.0 / f64::from(per_min);
        let u = (self.draw() >> 11) as f64 / (1u64 << 53) as f64;
        Duration::from_micros((-(1.0 - u).ln() * mean_us) as u64 + 1)
    }

    /// Queues `orders` for their reaction time after `now`.
    fn react(&mut self, now: Instant, orders: Vec<Command>) {
        let at = now + self.reaction();
        self.queue(at, orders);
    }

    /// Queues `orders` to be submitted at `at`, or after the ones queued
    /// before them: kept in submit order, a later order never overtakes an
    /// earlier one.
    fn queue(&mut self, at: Instant, orders: Vec<Command>) {
        let at = at.max(self.pending.back().map_or(at, |(t, _)| *t));
        self.pending.push_back((at, orders));
    }

    fn submit(&mut self, now: Instant, orders: &[Command]) {
        let submitted =
            !orders.is_empty() && with_game!(&mut self.game, g => g.submit(now, orders).is_ok());
        if submitted {
            self.submitted
                .extend(std::iter::repeat_n(now, orders.len()));
        }
    }

    fn on_event(&mut self, now: Instant, ev: PeerEvent<Command>) {
        match ev {
            PeerEvent::Started {
                player,
                turn_length,
                ..
            } => {
                self.me = Some(player);
                self.started = Some(now);
                self.turn_length = turn_length;
                if let Play::Game { apm } | Play::GameReacting { apm, .. } = self.config.play {
                    self.bot = Some(Bot::new(player, self.config.seed, apm));
                }
                if let Play::GameReacting { clicks_per_min, .. } = self.config.play
                    && clicks_per_min > 0
                {
                    self.next_click = Some(now + self.click_gap());
                }
            }
            PeerEvent::TurnReady { turn, inputs, .. } => self.on_turn(now, turn, &inputs),
            PeerEvent::MatchEnded { reason, turn } => {
                self.completed = reason == EndReason::Completed;
                if !self.completed {
                    let at = turn.map_or("before its first turn".to_owned(), |t| {
                        format!("at turn {t}")
                    });
                    self.note(format!("match ended {at}: {reason:?}"));
                }
            }
            PeerEvent::PlayerDropped { player, turn } if Some(player) == self.me => {
                self.note(format!("dropped by the relay at turn {turn}"));
            }
            PeerEvent::Refused { reason, .. } => self.failed = Some(format!("rejected: {reason}")),
            PeerEvent::Desync { .. } => self.desyncs += 1,
            _ => {}
        }
    }

    fn on_turn(&mut self, now: Instant, turn: Turn, commands: &[Stamped<Command>]) {
        self.turns += 1;
        self.last_turn_at = Some(now);
        let mine = commands
            .iter()
            .filter(|c| Some(c.player) == self.me)
            .count();
        for _ in 0..mine {
            if let Some(at) = self.submitted.pop_front() {
                if self
                    .started
                    .is_some_and(|s| at.saturating_since(s) < WARMUP)
                {
                    self.warmup_samples += 1;
                }
                self.latencies.push(now.saturating_since(at));
            }
        }
        let orders = match (&self.game, self.bot.as_mut()) {
            (BenchGame::World(g), Some(bot)) => {
                g.world().map(|w| bot.think(w, turn)).unwrap_or_default()
            }
            _ => {
                let every = match self.config.play {
                    Play::Fake { every } => every.max(1),
                    Play::Game { .. } | Play::GameReacting { .. } => u32::MAX,
                };
                if turn.0 % every == 0 {
                    vec![Command::Stop {
                        units: vec![turn.0],
                    }]
                } else {
                    Vec::new()
                }
            }
        };
        match self.config.play {
            _ if orders.is_empty() => {}
            Play::GameReacting { .. } => self.react(now, orders),
            _ => self.submit(now, &orders),
        }
    }

    /// The reference game's state hash now (`None` for the fake game or
    /// before the start), and the desyncs the relay reported: for a driver
    /// to check that every peer ended on one world.
    #[must_use]
    pub fn outcome(&self) -> (Option<sim::StateHash>, u32) {
        let hash = match &self.game {
            BenchGame::World(g) => g.world().map(sim::Simulation::state_hash),
            BenchGame::Fake(_) => None,
        };
        (hash, self.desyncs)
    }

    /// Records why the peer failed (the first reason wins).
    pub fn note(&mut self, why: String) {
        self.failed.get_or_insert(why);
    }

    /// The figures so far (carrier counters left at zero for the driver to fill).
    #[must_use]
    pub fn figures(&self, now: Instant) -> PeerFigures {
        // A peer that played every turn is measured up to its last turn, whether
        // or not the end-of-match message reached it (waiting for it is no stall).
        let played_all = self.config.turns > 0 && self.turns >= self.config.turns;
        let end = if self.completed || played_all {
            self.last_turn_at.unwrap_or(now)
        } else {
            now
        };
        let stats = self.stats(end);
        let secs = self
            .started
            .map_or(0.0, |s| end.saturating_since(s).as_secs_f64());
        PeerFigures {
            latencies_ms: self.latencies.iter().map(|d| d.as_millis_f64()).collect(),
            stall_ms: stats.stall.as_millis_f64(),
            secs,
            turns: self.turns,
            completed: self.completed || played_all,
            end_seen: self.completed,
            error: self.failed.clone(),
            warmup_samples: self.warmup_samples,
            started_at_secs: self
                .started
                .map(|s| s.saturating_since(Instant::ZERO).as_secs_f64()),
            rtt_p50_ms: stats.rtt_p50.as_millis_f64(),
            rtt_p99_ms: stats.rtt_p99.as_millis_f64(),
            jitter_buffer_ms: stats.jitter_buffer.as_millis_f64(),
            ..PeerFigures::default()
        }
    }
}

/// The fake game: no simulation, only the turn count; its hash is
/// [`fake_hash`] of the last turn, the same on every peer.
#[derive(Clone, Debug)]
pub struct FakeGame {
    last: Option<Turn>,
}

impl Simulation for FakeGame {
    type Command = Command;
    const GAME_ID: &'static str = "bench-fake";
    const GAME_VERSION: u32 = 1;

    fn new(_setup: &MatchSetup) -> Self {
        Self { last: None }
    }
    fn rules_hash(&self) -> StateHash {
        StateHash([0xbe; 32])
    }
    fn step(&mut self, turn: Turn, _inputs: &[Stamped<Command>]) {
        self.last = Some(turn);
    }
    fn state_hash(&self) -> StateHash {
        self.last.map_or(StateHash([0; 32]), fake_hash)
    }
    fn section_hashes(&self) -> Vec<SectionHash> {
        Vec::new()
    }
    fn snapshot(&self) -> Vec<u8> {
        self.last.map_or(Vec::new(), |t| t.0.to_le_bytes().to_vec())
    }
    fn restore(bytes: &[u8]) -> Result<Self, SnapshotError> {
        let last = match bytes.len() {
            0 => None,
            _ => Some(Turn(u32::from_le_bytes(
                <[u8; 4]>::try_from(bytes)
                    .map_err(|_| SnapshotError::Decode(format!("{} bytes", bytes.len())))?,
            ))),
        };
        Ok(Self { last })
    }
}

/// The fake game's hash of a turn: the same on every peer, different per turn.
#[must_use]
pub fn fake_hash(turn: Turn) -> StateHash {
    let mut h = [0u8; 32];
    for (i, b) in h.iter_mut().enumerate() {
        *b = (turn.0.wrapping_mul(2_654_435_761) >> (i % 4 * 8)) as u8 ^ i as u8;
    }
    StateHash(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reacting orders wait a seeded time within one turn, spread over the
    /// turn (not in phase with it), and leave in the order they were decided.
    #[test]
    fn reacting_orders_wait_within_a_turn_in_order() {
        let config = BenchPeerConfig {
            match_name: "m".into(),
            players: 2,
            turns: 10,
            seed: 3,
            play: Play::GameReacting {
                apm: 300,
                clicks_per_min: 240,
            },
        };
        let mut p = BenchPeer::new(Instant::ZERO, config).unwrap();
        p.turn_length = Duration::from_millis(100);
        let waits: Vec<Duration> = (0..1000).map(|_| p.reaction()).collect();
        assert!(waits.iter().all(|w| *w < Duration::from_millis(100)));
        // Both halves of the turn are drawn, often.
        let early = waits
            .iter()
            .filter(|w| **w < Duration::from_millis(50))
            .count();
        assert!((300..700).contains(&early), "{early}");
        let order = |t| vec![Command::Stop { units: vec![t] }];
        let t0 = Instant::from_millis(1000);
        for i in 0..20 {
            p.react(t0 + Duration::from_millis(i), order(i as u32));
        }
        let due: Vec<Instant> = p.pending.iter().map(|(at, _)| *at).collect();
        assert!(due.windows(2).all(|w| w[0] <= w[1]), "{due:?}");
        assert_eq!(p.next_wake(), due.first().copied());
        // Clicks: 240 a minute on average, queued behind the orders, in order.
        p.next_click = Some(t0);
        let gaps: Vec<Duration> = (0..1000).map(|_| p.click_gap()).collect();
        let mean_ms = gaps.iter().map(|g| g.as_millis_f64()).sum::<f64>() / 1000.0;
        assert!((200.0..300.0).contains(&mean_ms), "{mean_ms}");
        p.pump(t0 + Duration::from_secs(10));
        assert!(
            p.pending.is_empty(),
            "all due by then (the session refuses them: not started)"
        );
        assert!(
            p.next_click
                .is_some_and(|t| t > t0 + Duration::from_secs(10))
        );
        assert!(due[0] >= t0 && due[0] < t0 + Duration::from_millis(100));
    }

    #[test]
    fn fake_hashes_agree_and_differ_by_turn() {
        assert_eq!(fake_hash(Turn(7)), fake_hash(Turn(7)));
        assert_ne!(fake_hash(Turn(7)), fake_hash(Turn(8)));
    }

    #[test]
    fn figures_per_minute_and_per_second() {
        let f = PeerFigures {
            stall_ms: 300.0,
            secs: 30.0,
            bytes_sent: 3000,
            bytes_received: 6000,
            ..PeerFigures::default()
        };
        assert_eq!(f.stall_per_min_ms(), 600.0);
        assert_eq!(f.bytes_per_s(), 300.0);
        assert_eq!(PeerFigures::default().bytes_per_s(), 0.0);
        let g = PeerFigures {
            latencies_ms: vec![300.0, 250.0, 110.0, 120.0],
            warmup_samples: 2,
            ..PeerFigures::default()
        };
        assert_eq!(g.steady_latencies_ms(), &[110.0, 120.0]);
        // A count past the end (it cannot happen, but the data is parsed) leaves nothing.
        let h = PeerFigures {
            warmup_samples: 9,
            ..g
        };
        assert!(h.steady_latencies_ms().is_empty());
    }
}
