//! Deterministic tests of the turn protocol, bottom up: N `lockstep::Session`s
//! and one `relay::Router` through an in-memory pipe with seeded per-message
//! delays (reliable, exactly once, in order per direction, as the transport's
//! reliable channel delivers them) on a virtual clock (`pipe`); the same with
//! the reference game on the public `lockstep::peer::Peer` and replay recording (`game_peers`); the
//! full stack over real transport endpoints and a seeded `netsim::Network`
//! (`netsim`); the demo over loopback UDP (`udp`); hostile turn entries
//! recorded and verified against the peers (`decode`). This file holds the
//! shared session-level harness and its toy game (the reference game plays
//! through the generic `lockstep::peer` in `game_peers` and `netsim`).
#![allow(clippy::unwrap_used)] // tests may unwrap

mod big_battle;
mod clock;
mod decode;
mod edges;
mod ends;
mod forensics;
mod forensics_hostile;
mod game_peers;
mod heal;
mod hostile;
mod limits;
mod netsim;
mod pipe;
mod refusals;
mod rejoin;
mod speculation;
mod token_cli;
mod tokens;
mod udp;

use lockstep::low_level::proto::{Bundle, EndReason, ToPeer};
use lockstep::low_level::session::Event;
use lockstep::low_level::session::SessionBuilder;
use lockstep::low_level::session::{Session, SessionStats};
use lockstep::{Duration, Instant};
use relay::{ConnId, RelayConfig, Router, RouterEvent, TurnPolicy};
use sim::{PlayerId, SectionHash, StateHash, Turn};
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};

/// What a peer in these tests plays: a game plus its bot.
trait TestGame {
    fn step(&mut self, turn: Turn, inputs: &[(PlayerId, Vec<u8>)]);
    fn hash(&self) -> StateHash;
    fn sections(&self) -> Vec<SectionHash>;
    /// Deliberately corrupts this peer's state (the desync fault switch).
    fn perturb(&mut self, me: PlayerId);
    /// The bot's encoded commands after simulating `turn`, if any.
    fn think(&mut self, turn: Turn, rng: &mut Rng) -> Option<Vec<u8>>;
    /// Commands simulated so far.
    fn commands(&self) -> u64;
}

type GameFactory = fn(&sim::MatchSetup, PlayerId, u64) -> Box<dyn TestGame>;

fn toy(setup: &sim::MatchSetup, _me: PlayerId, _seed: u64) -> Box<dyn TestGame> {
    Box::new(Toy::new(setup.players))
}

impl TestGame for Toy {
    fn step(&mut self, turn: Turn, inputs: &[(PlayerId, Vec<u8>)]) {
        Self::step(self, turn, inputs);
    }
    fn hash(&self) -> StateHash {
        Self::hash(self)
    }
    fn sections(&self) -> Vec<SectionHash> {
        Self::sections(self)
    }
    fn perturb(&mut self, me: PlayerId) {
        self.acc[usize::from(me.0)] ^= 1;
    }
    fn think(&mut self, _turn: Turn, rng: &mut Rng) -> Option<Vec<u8>> {
        // A command on about a third of the turns.
        (rng.below(3) == 0).then(|| {
            let mut bytes = Vec::new();
            sim::encode_commands(&[rng.next() as u32], &mut bytes);
            bytes
        })
    }
    fn commands(&self) -> u64 {
        self.commands
    }
}

/// A tiny deterministic game: one accumulator per player.
#[derive(Clone, Debug)]
struct Toy {
    acc: Vec<u64>,
    steps: u64,
    commands: u64,
}

impl Toy {
    fn new(players: u8) -> Self {
        Self {
            acc: vec![0; usize::from(players)],
            steps: 0,
            commands: 0,
        }
    }

    fn step(&mut self, turn: Turn, inputs: &[(PlayerId, Vec<u8>)]) {
        let players = u8::try_from(self.acc.len()).unwrap();
        for c in sim::decode_turn::<u32>(inputs, players).commands {
            let a = &mut self.acc[usize::from(c.player.0)];
            *a = a
                .wrapping_mul(1_000_003)
                .wrapping_add(u64::from(c.command) ^ u64::from(c.seq) << 32);
            self.commands += 1;
        }
        self.steps = self.steps.wrapping_mul(31).wrapping_add(u64::from(turn.0));
    }

    fn sections(&self) -> Vec<SectionHash> {
        let mut out = vec![SectionHash {
            name: "globals".into(),
            hash: digest(&[self.steps]),
        }];
        for (p, a) in self.acc.iter().enumerate() {
            out.push(SectionHash {
                name: format!("player {p}"),
                hash: digest(&[*a]),
            });
        }
        out
    }

    fn hash(&self) -> StateHash {
        let mut words = vec![self.steps];
        words.extend(&self.acc);
        digest(&words)
    }
}

fn digest(words: &[u64]) -> StateHash {
    let mut out = [0u8; 32];
    let mut h = sim::hash::Fnv1a64::new();
    for (i, chunk) in out.chunks_mut(8).enumerate() {
        for w in words {
            h.update(&w.to_le_bytes());
            h.update(&[i as u8]);
        }
        chunk.copy_from_slice(&h.finish().to_le_bytes());
    }
    StateHash(out)
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
}

/// One-way delay of a peer's link: `base + uniform(0..jitter)`, from `from` on.
#[derive(Clone, Copy, Debug)]
struct LinkShape {
    base_ms: u64,
    jitter_ms: u64,
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Dest {
    Router(usize),
    Peer(usize),
}

/// A yielded turn: its number, inputs and the hash after simulating it.
type Executed = (Turn, Vec<(PlayerId, Vec<u8>)>, StateHash);

struct Peer {
    session: Session,
    game: Option<Box<dyn TestGame>>,
    bot: Rng,
    /// Every yielded turn, in order, with its inputs and resulting hash.
    executed: Vec<Executed>,
    events: Vec<Event>,
    submitted: u64,
    silent_from: Option<Instant>,
    leave_at: Option<Instant>,
    desync_at: Option<Turn>,
    ended: bool,
}

struct Sim {
    now: Instant,
    router: Router,
    peers: Vec<Peer>,
    /// Links: shape per peer, possibly changing at a time.
    shapes: Vec<Vec<(Instant, LinkShape)>>,
    rng: Rng,
    queue: BTreeMap<(Instant, u64), (Dest, Vec<u8>)>,
    last_at: BTreeMap<Dest, Instant>,
    seq: u64,
    router_events: Vec<RouterEvent>,
    factory: GameFactory,
    seed: u64,
    /// A hostile extra sender: on every step, the messages `flood` returns
    /// reach the router on that peer's connection at once (outside the pipe,
    /// so the pipe's seeded delays are the same as without it).
    flood: Option<(usize, Flood)>,
    /// A hostile relay: rewrites every bundle the router sends, on its way
    /// to every peer (the router's own events, and so its recording, keep
    /// what it meant to send).
    tamper: Option<fn(&mut Bundle)>,
}

/// Makes a hostile peer's extra messages for one step: (now, step counter).
type Flood = fn(Instant, u64) -> Vec<Vec<u8>>;

/// The relay's settings under the input-delay `deadline` policy (the
/// default before the relay's `clock`): for tests of input delay, late
/// inputs and deadlines.
fn deadline_config() -> RelayConfig {
    RelayConfig {
        policy: TurnPolicy::Deadline,
        ..RelayConfig::default()
    }
}

struct Setup {
    peers: usize,
    turns: u32,
    config: RelayConfig,
    shapes: Vec<Vec<(Instant, LinkShape)>>,
    seed: u64,
    factory: GameFactory,
    /// Game id and version the sessions announce (the toy's by default).
    game: (&'static str, u32),
}

impl Setup {
    fn new(peers: usize, turns: u32, seed: u64) -> Self {
        Self {
            peers,
            turns,
            config: RelayConfig::default(),
            shapes: vec![
                vec![(
                    Instant::ZERO,
                    LinkShape {
                        base_ms: 15,
                        jitter_ms: 20,
                    }
                )];
                peers
            ],
            seed,
            factory: toy,
            game: ("toy", 1),
        }
    }
}

impl Sim {
    fn new(setup: Setup) -> Self {
        let now = Instant::from_millis(1);
        let mut router = Router::new(setup.config.clone());
        let mut peers = Vec::new();
        for i in 0..setup.peers {
            let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, 10_000 + i as u16));
            assert!(router.handle_connected(now, ConnId(i as u32), addr));
            let session = SessionBuilder::new()
                .with_match("m", setup.peers as u8)
                .with_game(setup.game.0, setup.game.1, StateHash([1; 32]))
                .with_name(&format!("bot{i}"))
                .with_turns(setup.turns)
                .build(now)
                .unwrap();
            peers.push(Peer {
                session,
                game: None,
                bot: Rng(setup.seed ^ (0x1234_5678 * (i as u64 + 1))),
                executed: Vec::new(),
                events: Vec::new(),
                submitted: 0,
                silent_from: None,
                leave_at: None,
                desync_at: None,
                ended: false,
            });
        }
        Self {
            now,
            router,
            peers,
            shapes: setup.shapes,
            rng: Rng(setup.seed | 1),
            queue: BTreeMap::new(),
            last_at: BTreeMap::new(),
            seq: 0,
            router_events: Vec::new(),
            factory: setup.factory,
            seed: setup.seed,
            flood: None,
            tamper: None,
        }
    }

    fn shape(&self, peer: usize) -> LinkShape {
        self.shapes[peer]
            .iter()
            .rev()
            .find(|(t, _)| *t <= self.now)
            .map(|(_, s)| *s)
            .unwrap()
    }

    fn silent(&self, peer: usize) -> bool {
        self.peers[peer].silent_from.is_some_and(|t| self.now >= t)
    }

    /// Queues a message; per direction, delivery stays in order (like the
    /// transport's reliable ordered channel).
    fn send(&mut self, dest: Dest, bytes: Vec<u8>) {
        let peer = match dest {
            Dest::Router(p) | Dest::Peer(p) => p,
        };
        let s = self.shape(peer);
        let delay = Duration::from_millis(s.base_ms + self.rng.below(s.jitter_ms + 1));
        let last = self.last_at.get(&dest).copied().unwrap_or(Instant::ZERO);
        let at = (self.now + delay).max(last);
        self.last_at.insert(dest, at);
        self.seq += 1;
        self.queue.insert((at, self.seq), (dest, bytes));
    }

    /// Moves every pending output into the pipe and reacts to events.
    fn drain(&mut self) {
        loop {
            let mut any = false;
            for i in 0..self.peers.len() {
                if self.silent(i) {
                    while self.peers[i].session.poll_outgoing().is_some() {}
                    while self.peers[i].session.poll_event().is_some() {}
                    continue;
                }
                while let Some((_, bytes)) = self.peers[i].session.poll_outgoing() {
                    any = true;
                    self.send(Dest::Router(i), bytes);
                }
                while let Some(ev) = self.peers[i].session.poll_event() {
                    any = true;
                    self.on_event(i, ev);
                }
            }
            while let Some((conn, _, mut bytes)) = self.router.poll_outgoing() {
                any = true;
                if let Some(tamper) = self.tamper
                    && let Ok(ToPeer::Bundle(mut b)) = ToPeer::decode(&bytes)
                {
                    tamper(&mut b);
                    bytes = ToPeer::Bundle(b).to_bytes();
                }
                self.send(Dest::Peer(conn.0 as usize), bytes);
            }
            while let Some(ev) = self.router.poll_event() {
                any = true;
                self.router_events.push(ev);
            }
            if !any {
                break;
            }
        }
    }

    fn on_event(&mut self, i: usize, ev: Event) {
        let now = self.now;
        let p = &mut self.peers[i];
        match &ev {
            Event::Started {
                setup, your_player, ..
            } => p.game = Some((self.factory)(setup, *your_player, self.seed + i as u64)),
            Event::TurnReady { turn, inputs } => {
                let game = p.game.as_mut().unwrap();
                game.step(*turn, inputs);
                if p.desync_at == Some(*turn) {
                    game.perturb(p.session.player().unwrap());
                }
                let hash = game.hash();
                p.session.report_hash(*turn, hash, game.sections()).unwrap();
                p.executed.push((*turn, inputs.clone(), hash));
                if let Some(bytes) = game.think(*turn, &mut p.bot)
                    && p.session.submit(now, bytes).is_ok()
                {
                    p.submitted += 1;
                }
            }
            Event::MatchEnded { .. } => p.ended = true,
            _ => {}
        }
        p.events.push(ev);
    }

    /// Runs until every non-silent peer ended or `limit` of virtual time passed.
    fn run(&mut self, limit: Duration) {
        let end = self.now + limit;
        loop {
            for i in 0..self.peers.len() {
                if self.peers[i].leave_at.is_some_and(|t| self.now >= t) {
                    self.peers[i].leave_at = None;
                    self.peers[i].session.leave(self.now);
                    self.peers[i].ended = true;
                }
            }
            self.drain();
            if (0..self.peers.len()).all(|i| self.silent(i) || self.peers[i].session.is_ended()) {
                // Deliver what is still in flight to the router, then stop.
                if self.queue.is_empty() {
                    break;
                }
            }
            let mut next = self.queue.keys().next().map(|(t, _)| *t);
            let mut consider = |t: Option<Instant>| {
                if let Some(t) = t {
                    next = Some(next.map_or(t, |n: Instant| n.min(t)));
                }
            };
            consider(self.router.poll_timeout());
            for i in 0..self.peers.len() {
                if !self.silent(i) {
                    consider(self.peers[i].session.poll_timeout());
                }
            }
            let Some(next) = next else { break };
            if next > end {
                break;
            }
            self.now = self.now.max(next);
            while let Some((&(at, seq), _)) = self.queue.first_key_value() {
                if at > self.now {
                    break;
                }
                let (dest, bytes) = self.queue.remove(&(at, seq)).unwrap();
                match dest {
                    Dest::Router(p) => {
                        self.router
                            .handle_message(self.now, ConnId(p as u32), &bytes);
                    }
                    Dest::Peer(p) => {
                        if !self.silent(p) {
                            self.peers[p].session.handle_message(self.now, &bytes);
                        }
                    }
                }
            }
            if let Some((p, flood)) = self.flood {
                self.seq += 1;
                for bytes in flood(self.now, self.seq) {
                    self.router
                        .handle_message(self.now, ConnId(p as u32), &bytes);
                }
            }
            if self.router.poll_timeout().is_some_and(|t| t <= self.now) {
                self.router.handle_timeout(self.now);
            }
            for i in 0..self.peers.len() {
                if !self.silent(i)
                    && self.peers[i]
                        .session
                        .poll_timeout()
                        .is_some_and(|t| t <= self.now)
                {
                    self.peers[i].session.handle_timeout(self.now);
                }
            }
        }
    }

    fn stats(&self, i: usize) -> SessionStats {
        self.peers[i].session.stats(self.now)
    }

    fn hashes(&self, i: usize) -> Vec<(Turn, StateHash)> {
        self.peers[i]
            .executed
            .iter()
            .map(|(t, _, h)| (*t, *h))
            .collect()
    }

    fn delay_changes(&self, i: usize) -> Vec<(u8, Turn)> {
        self.peers[i]
            .events
            .iter()
            .filter_map(|e| match e {
                Event::InputDelayChanged { delay, from_turn } => Some((*delay, *from_turn)),
                _ => None,
            })
            .collect()
    }
}

/// Turns yielded by a peer are exactly `0..n`, in order, once each.
fn assert_contiguous(sim: &Sim, i: usize) -> u32 {
    let turns: Vec<u32> = sim.peers[i].executed.iter().map(|(t, _, _)| t.0).collect();
    let expect: Vec<u32> = (0..turns.len() as u32).collect();
    assert_eq!(turns, expect, "peer {i} skipped or repeated a turn");
    turns.len() as u32
}

fn total_commands(sim: &Sim, i: usize) -> u64 {
    sim.peers[i].game.as_ref().unwrap().commands()
}
