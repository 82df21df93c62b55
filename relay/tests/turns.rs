//! Deterministic end-to-end tests of the turn protocol without a transport:
//! N `lockstep::Session`s and one `relay::Router` exchange messages through
//! an in-memory pipe with seeded per-message delays (reliable, exactly once,
//! in order per direction, as the transport's reliable channel delivers
//! them), driven by a virtual clock. Each peer plays a toy game with a bot.
#![allow(clippy::unwrap_used)] // tests may unwrap

use lockstep::event::Event;
use lockstep::proto::{EndReason, decode_turn};
use lockstep::session::{Session, SessionStats};
use lockstep::{Duration, Instant, builder::SessionBuilder};
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

/// The reference RTS with its seeded bot.
struct Rts {
    world: sim::game::World,
    bot: sim::bot::Bot,
    commands: u64,
}

fn rts(setup: &sim::MatchSetup, me: PlayerId, seed: u64) -> Box<dyn TestGame> {
    use sim::Simulation;
    Box::new(Rts {
        world: sim::game::World::new(setup),
        bot: sim::bot::Bot::new(me, seed, 300),
        commands: 0,
    })
}

impl TestGame for Rts {
    fn step(&mut self, turn: Turn, inputs: &[(PlayerId, Vec<u8>)]) {
        use sim::Simulation;
        let commands = decode_turn::<sim::game::Command>(inputs);
        self.commands += commands.len() as u64;
        self.world.step(turn, &commands);
    }
    fn hash(&self) -> StateHash {
        sim::Simulation::state_hash(&self.world)
    }
    fn sections(&self) -> Vec<SectionHash> {
        sim::Simulation::section_hashes(&self.world)
    }
    fn perturb(&mut self, me: PlayerId) {
        self.world.perturb(u32::from(me.0) * 7 + 3);
    }
    fn think(&mut self, turn: Turn, _rng: &mut Rng) -> Option<Vec<u8>> {
        let commands = self.bot.think(&self.world, turn);
        (!commands.is_empty()).then(|| {
            let mut bytes = Vec::new();
            sim::encode_commands(&commands, &mut bytes);
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
        for c in decode_turn::<u32>(inputs) {
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
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (i, chunk) in out.chunks_mut(8).enumerate() {
        for w in words {
            for b in w.to_le_bytes().into_iter().chain([i as u8]) {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        }
        chunk.copy_from_slice(&h.to_le_bytes());
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
}

struct Setup {
    peers: usize,
    turns: u32,
    config: RelayConfig,
    shapes: Vec<Vec<(Instant, LinkShape)>>,
    seed: u64,
    factory: GameFactory,
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
                .with_game("toy", 1, StateHash([1; 32]))
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
            while let Some((conn, _, bytes)) = self.router.poll_outgoing() {
                any = true;
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

#[test]
fn four_peers_play_identically_to_the_end() {
    let mut sim = Sim::new(Setup::new(4, 200, 7));
    sim.run(Duration::from_secs(60));
    for i in 0..4 {
        assert!(sim.peers[i].ended, "peer {i} did not see the match end");
        assert_eq!(assert_contiguous(&sim, i), 200);
        assert_eq!(sim.hashes(i), sim.hashes(0), "peer {i} diverged");
        assert!(sim.peers[i].executed == sim.peers[0].executed);
        assert!(matches!(
            sim.peers[i].events.last(),
            Some(Event::MatchEnded {
                turn: Turn(199),
                reason: EndReason::Completed
            })
        ));
    }
    // Every submitted command was simulated exactly once (commands issued
    // after the last schedulable turn never leave the peer).
    let submitted: u64 = sim.peers.iter().map(|p| p.submitted).sum();
    let executed = total_commands(&sim, 0);
    assert!(
        executed > 100 && executed <= submitted,
        "{executed} of {submitted}"
    );
    let agreed = sim
        .router_events
        .iter()
        .filter(|e| matches!(e, RouterEvent::HashAgreed { .. }))
        .count();
    assert_eq!(agreed, 200);
    assert!(
        !sim.router_events
            .iter()
            .any(|e| matches!(e, RouterEvent::Desync { .. }))
    );
    let s = sim.stats(0);
    assert!(s.latency_samples > 0);
    // With 15-35 ms one way and a 3-turn delay, turns are never late.
    assert_eq!(s.stall, Duration::ZERO, "{s:?}");
    assert_eq!(s.latency_p50, Duration::from_millis(300));
    assert_eq!(sim.router.counters().inputs_late, 0);
}

#[test]
fn input_delay_changes_apply_at_the_same_turn_everywhere() {
    let mut setup = Setup::new(3, 400, 11);
    // Player 1's link degrades to ~500 ms RTT at 10 s, then recovers at 20 s.
    setup.shapes[1] = vec![
        (
            Instant::ZERO,
            LinkShape {
                base_ms: 20,
                jitter_ms: 10,
            },
        ),
        (
            Instant::from_millis(10_000),
            LinkShape {
                base_ms: 240,
                jitter_ms: 20,
            },
        ),
        (
            Instant::from_millis(20_000),
            LinkShape {
                base_ms: 20,
                jitter_ms: 10,
            },
        ),
    ];
    setup.config.shrink_hold = Duration::from_secs(3);
    let mut sim = Sim::new(setup);
    sim.run(Duration::from_secs(120));
    let changes = sim.delay_changes(0);
    eprintln!("delay changes {changes:?} stats {:?}", sim.stats(1));
    assert!(
        changes.iter().any(|&(d, _)| d >= 6),
        "delay should grow to cover ~500 ms RTT: {changes:?}"
    );
    assert!(
        changes.last().is_some_and(|&(d, _)| d <= 3),
        "delay should come back down: {changes:?}"
    );
    for i in 0..3 {
        assert_eq!(sim.delay_changes(i), changes, "peer {i} switched elsewhere");
        assert_eq!(assert_contiguous(&sim, i), 400);
        assert_eq!(sim.hashes(i), sim.hashes(0));
    }
    let router_changes: Vec<(u8, Turn)> = sim
        .router_events
        .iter()
        .filter_map(|e| match e {
            RouterEvent::DelayChanged {
                delay, from_turn, ..
            } => Some((*delay, *from_turn)),
            _ => None,
        })
        .collect();
    assert_eq!(router_changes, changes);
}

/// Virtual-time comparison of the two closing policies with one peer whose
/// messages take 500 ms each way.
fn lagging_match(policy: TurnPolicy) -> Sim {
    let mut setup = Setup::new(3, 0, 5);
    setup.config.policy = policy;
    setup.config.adaptive_delay = false;
    setup.config.silence_timeout = Duration::from_secs(60);
    setup.shapes[2] = vec![(
        Instant::ZERO,
        LinkShape {
            base_ms: 500,
            jitter_ms: 0,
        },
    )];
    let mut sim = Sim::new(setup);
    sim.run(Duration::from_secs(20));
    sim
}

#[test]
fn deadline_keeps_the_others_going_strict_stalls_everyone() {
    let deadline = lagging_match(TurnPolicy::Deadline);
    let strict = lagging_match(TurnPolicy::Strict);
    let fast_d = assert_contiguous(&deadline, 0);
    let fast_s = assert_contiguous(&strict, 0);
    let stall_d = deadline.stats(0).stall;
    let stall_s = strict.stats(0).stall;
    eprintln!(
        "deadline: {fast_d} turns, stall {stall_d}, lagger {:?}; strict: {fast_s} turns, stall {stall_s}",
        deadline.stats(2)
    );
    // 20 s of 100 ms turns minus the 0.3 s start: ~196 turns when nobody waits.
    assert!(fast_d >= 190, "deadline played {fast_d} turns");
    assert!(fast_s * 2 < fast_d, "strict {fast_s} vs deadline {fast_d}");
    // Turns closed by the deadline reach the peers right at their due time,
    // give or take the link jitter: a few ms in total, against seconds.
    assert!(
        stall_d < Duration::from_millis(200),
        "fast peer stalled {stall_d} under deadline"
    );
    assert!(stall_s > Duration::from_secs(8), "strict stall {stall_s}");
    for sim in [&deadline, &strict] {
        for i in 0..3 {
            assert_contiguous(sim, i);
        }
        let n = sim.hashes(2).len();
        assert_eq!(sim.hashes(2)[..], sim.hashes(0)[..n]);
    }
    // Under deadline the laggard is told its inputs landed later; they still count.
    assert!(deadline.router.counters().turns_closed_by_deadline > 100);
    assert!(
        deadline.peers[2]
            .events
            .iter()
            .any(|e| matches!(e, Event::LateInput { turn, landed_in } if landed_in > turn))
    );
    // The laggard's commands take effect ~1 s after issue instead of 0.3-0.4 s.
    let lag = deadline.stats(2);
    assert!(
        lag.late_inputs > 20 && lag.latency_p50 > Duration::from_secs(1),
        "{lag:?}"
    );
    assert_eq!(strict.router.counters().inputs_late, 0);
    assert!(strict.peers[0].events.iter().any(|e| matches!(
        e,
        Event::Stalled { waiting_on, .. } if waiting_on == &[PlayerId(2)]
    )));
}

/// A match where peer 1 corrupts its own player's accumulator after turn 50;
/// also returns that peer's slot.
fn desync_match(peers: usize) -> (Sim, PlayerId) {
    let mut sim = Sim::new(Setup::new(peers, 120, 3));
    sim.peers[1].desync_at = Some(Turn(50));
    sim.run(Duration::from_secs(60));
    let odd = sim.peers[1]
        .events
        .iter()
        .find_map(|e| match e {
            Event::Started { your_player, .. } => Some(*your_player),
            _ => None,
        })
        .unwrap();
    (sim, odd)
}

#[test]
fn forced_desync_is_detected_at_that_turn_naming_that_peer_and_section() {
    let (sim, odd) = desync_match(3);
    let section = format!("player {}", odd.0);
    let desyncs: Vec<_> = sim
        .router_events
        .iter()
        .filter_map(|e| match e {
            RouterEvent::Desync {
                turn, odd_players, ..
            } => Some((*turn, odd_players.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(desyncs, vec![(Turn(50), vec![odd])]);
    let sections: Vec<_> = sim
        .router_events
        .iter()
        .filter_map(|e| match e {
            RouterEvent::DesyncSections {
                turn,
                players,
                sections,
                ..
            } => Some((*turn, players.clone(), sections.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(sections.len(), 1);
    assert_eq!(sections[0].0, Turn(50));
    assert!(sections[0].1.contains(&odd) && sections[0].1.len() == 2);
    assert_eq!(sections[0].2, vec![section.clone()]);
    for p in &sim.peers {
        assert!(p.events.iter().any(|e| matches!(
            e,
            Event::Desync { turn: Turn(50), odd_players, .. } if odd_players == &[odd]
        )));
        assert!(p.events.iter().any(|e| matches!(
            e,
            Event::DesyncSections { turn: Turn(50), sections, .. } if sections == std::slice::from_ref(&section)
        )));
    }
    // Hashes agree up to turn 49.
    let agreed = sim
        .router_events
        .iter()
        .filter(|e| matches!(e, RouterEvent::HashAgreed { .. }))
        .count();
    assert_eq!(agreed, 50);
}

#[test]
fn two_player_desync_says_it_cannot_tell_who() {
    let (sim, odd) = desync_match(2);
    let d = sim
        .router_events
        .iter()
        .find_map(|e| match e {
            RouterEvent::Desync {
                turn, odd_players, ..
            } => Some((*turn, odd_players.clone())),
            _ => None,
        })
        .unwrap();
    assert_eq!(d, (Turn(50), vec![]));
    assert!(sim.router_events.iter().any(|e| matches!(
        e,
        RouterEvent::DesyncSections { sections, .. } if sections == &[format!("player {}", odd.0)]
    )));
}

fn drop_turns(sim: &Sim, i: usize) -> Vec<(PlayerId, Turn)> {
    sim.peers[i]
        .events
        .iter()
        .filter_map(|e| match e {
            Event::PlayerDropped { player, turn } => Some((*player, *turn)),
            _ => None,
        })
        .collect()
}

#[test]
fn silent_peer_is_dropped_at_one_agreed_turn() {
    let mut setup = Setup::new(3, 150, 9);
    setup.config.silence_timeout = Duration::from_secs(2);
    setup.config.policy = TurnPolicy::Strict;
    let mut sim = Sim::new(setup);
    sim.peers[2].silent_from = Some(Instant::from_millis(5_000));
    sim.run(Duration::from_secs(60));
    let drops = drop_turns(&sim, 0);
    eprintln!("drops {drops:?} {:?}", sim.stats(0));
    assert_eq!(drops.len(), 1, "{drops:?}");
    let (player, turn) = drops[0];
    assert_eq!(player, PlayerId(2));
    assert_eq!(drop_turns(&sim, 1), drops);
    assert!(sim.router_events.iter().any(|e| matches!(
        e,
        RouterEvent::Dropped { player: PlayerId(2), turn: t, reason: relay::DropReason::Timeout, .. } if *t == turn
    )));
    for i in 0..2 {
        assert!(sim.peers[i].ended);
        assert_eq!(assert_contiguous(&sim, i), 150);
        assert_eq!(sim.hashes(i), sim.hashes(0));
        // From the drop turn on, the slot carries nothing.
        assert!(
            sim.peers[i]
                .executed
                .iter()
                .filter(|(t, _, _)| *t >= turn)
                .all(|(_, inputs, _)| inputs.iter().all(|(p, _)| *p != PlayerId(2)))
        );
    }
}

#[test]
fn clean_leave_is_dropped_at_one_agreed_turn() {
    let mut sim = Sim::new(Setup::new(3, 100, 13));
    sim.peers[0].leave_at = Some(Instant::from_millis(4_000));
    sim.run(Duration::from_secs(60));
    let drops = drop_turns(&sim, 1);
    assert_eq!(drops.len(), 1);
    assert_eq!(drops[0].0, PlayerId(0));
    assert_eq!(drop_turns(&sim, 2), drops);
    for i in 1..3 {
        assert_eq!(assert_contiguous(&sim, i), 100);
        assert_eq!(sim.hashes(i), sim.hashes(1));
    }
}

#[test]
fn reference_game_with_bots_stays_in_sync_and_a_perturbed_peer_is_named() {
    let mut setup = Setup::new(3, 120, 21);
    setup.factory = rts;
    let mut sim = Sim::new(setup);
    sim.peers[2].desync_at = Some(Turn(80));
    sim.run(Duration::from_secs(60));
    for i in 0..3 {
        assert_eq!(assert_contiguous(&sim, i), 120);
        let inputs = |k: usize| -> Vec<_> {
            sim.peers[k]
                .executed
                .iter()
                .map(|(t, inp, _)| (*t, inp.clone()))
                .collect()
        };
        assert!(inputs(i) == inputs(0), "peer {i} saw other bundles");
    }
    assert!(total_commands(&sim, 0) > 20, "bots issued too little");
    let n = 81;
    assert_eq!(sim.hashes(0)[..n - 1], sim.hashes(2)[..n - 1]);
    assert_ne!(sim.hashes(0)[n - 1], sim.hashes(2)[n - 1]);
    let odd = sim.peers[2].session.player().or_else(|| {
        sim.peers[2].events.iter().find_map(|e| match e {
            Event::Started { your_player, .. } => Some(*your_player),
            _ => None,
        })
    });
    let odd = odd.unwrap();
    assert!(sim.router_events.iter().any(|e| matches!(
        e,
        RouterEvent::Desync { turn: Turn(80), odd_players, .. } if odd_players == &[odd]
    )));
    let sections = sim
        .router_events
        .iter()
        .find_map(|e| match e {
            RouterEvent::DesyncSections { turn, sections, .. } => Some((*turn, sections.clone())),
            _ => None,
        })
        .unwrap();
    assert_eq!(sections.0, Turn(80));
    assert!(
        !sections.1.is_empty() && sections.1.len() <= 2,
        "{sections:?}"
    );
}

/// Runs `relay::peer::GamePeer`s (reference game + bot) against a router over
/// a fixed 20 ms pipe.
fn game_peers(
    n: usize,
    turns: u32,
    desync: Option<(usize, u32)>,
) -> (Vec<relay::peer::PeerSummary>, Vec<RouterEvent>) {
    use relay::peer::{GamePeer, PeerConfig};
    let mut now = Instant::from_millis(1);
    let mut router = Router::new(RelayConfig::default());
    let mut peers: Vec<GamePeer> = (0..n)
        .map(|i| {
            router.handle_connected(
                now,
                ConnId(i as u32),
                SocketAddr::from(([127, 0, 0, 1], 9000 + i as u16)),
            );
            GamePeer::new(
                now,
                PeerConfig {
                    match_name: "g".into(),
                    players: n as u8,
                    turns,
                    seed: 40 + i as u64,
                    apm: 300,
                    name: format!("p{i}"),
                    desync_at: desync.filter(|d| d.0 == i).map(|d| Turn(d.1)),
                },
            )
            .unwrap()
        })
        .collect();
    let lag = Duration::from_millis(20);
    let mut queue: BTreeMap<(Instant, u64), (Dest, Vec<u8>)> = BTreeMap::new();
    let mut seq = 0;
    let mut events = Vec::new();
    while !peers.iter().all(GamePeer::is_done) && now < Instant::from_millis(120_000) {
        for (i, p) in peers.iter_mut().enumerate() {
            p.pump(now);
            while let Some((_, b)) = p.session().poll_outgoing() {
                seq += 1;
                queue.insert((now + lag, seq), (Dest::Router(i), b));
            }
        }
        while let Some((c, _, b)) = router.poll_outgoing() {
            seq += 1;
            queue.insert((now + lag, seq), (Dest::Peer(c.0 as usize), b));
        }
        events.extend(std::iter::from_fn(|| router.poll_event()));
        let mut next = queue.keys().next().map(|k| k.0);
        for t in peers
            .iter_mut()
            .filter_map(|p| p.session().poll_timeout())
            .chain(router.poll_timeout())
        {
            next = Some(next.map_or(t, |n| n.min(t)));
        }
        let Some(next) = next else { break };
        now = now.max(next);
        while let Some((&k, _)) = queue.first_key_value() {
            if k.0 > now {
                break;
            }
            let (dest, b) = queue.remove(&k).unwrap();
            match dest {
                Dest::Router(i) => router.handle_message(now, ConnId(i as u32), &b),
                Dest::Peer(i) => peers[i].session().handle_message(now, &b),
            }
        }
        router.handle_timeout(now);
        for p in &mut peers {
            p.session().handle_timeout(now);
        }
    }
    for p in &mut peers {
        p.pump(now);
    }
    events.extend(std::iter::from_fn(|| router.poll_event()));
    (peers.iter().map(|p| p.summary(now)).collect(), events)
}

/// Records `events` with the relay's recorder and verifies the replay by re-simulation.
fn record_and_verify(events: &[RouterEvent], tag: &str) -> replays::VerifyReport {
    let dir = std::env::temp_dir().join(format!("turns-test-{}-{tag}", std::process::id()));
    let mut rec =
        relay::recorder::Recorder::new(&dir, relay::recorder::reference_rules_hash).unwrap();
    let mut done = None;
    for e in events {
        if let Some(r) = rec.handle(e).unwrap() {
            done = Some(r);
        }
    }
    let done = done.unwrap();
    let reader = replays::Reader::open(&done.path).unwrap();
    let report = replays::verify::<sim::game::World, _>(reader, |_| {}).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    report
}

#[test]
fn game_peers_summaries_agree_and_report_a_forced_desync() {
    let (ok, events) = game_peers(3, 80, None);
    let report = record_and_verify(&events, "ok");
    assert!(report.first_divergence.is_none(), "{report:?}");
    assert_eq!(report.turns, 80);
    assert!(report.hashes_checked >= 80);
    for s in &ok {
        assert!(s.completed, "{s:?}");
        assert_eq!(s.final_turn, Some(79));
        assert_eq!(s.final_hash, ok[0].final_hash);
        assert!(s.desyncs.is_empty());
        assert!(s.turn_latency_ms.p50 >= 300.0);
    }
    let (bad, events) = game_peers(3, 80, Some((1, 40)));
    // The relay's replay follows the majority: it still verifies.
    let report = record_and_verify(&events, "bad");
    assert!(report.first_divergence.is_none(), "{report:?}");
    let odd = bad[1].player.unwrap();
    for s in &bad {
        assert_eq!(s.desyncs.len(), 1, "{s:?}");
        assert_eq!(s.desyncs[0].turn, 40);
        assert_eq!(s.desyncs[0].odd_players, vec![odd]);
        assert!(!s.desyncs[0].sections.is_empty());
    }
}

/// What a peer saw in a match over the simulated network.
struct NetPeer {
    peer: relay::peer::GamePeer,
    client: lockstep::transport::Client,
    glue: lockstep::peer_glue::PeerGlue,
    addr: SocketAddr,
    turns: Vec<u32>,
    delay_changes: Vec<(u8, Turn)>,
}

/// Relay + N reference-game peers over real transport endpoints and a
/// seeded `netsim::Network` (loss, duplication, reordering, jitter).
fn netsim_match(
    n: usize,
    turns: u32,
    link: lockstep::netsim::LinkConfig,
    seed: u64,
) -> (Vec<NetPeer>, Vec<RouterEvent>, Instant) {
    use lockstep::netsim::Network;
    use lockstep::transport::{Client, Server, TransportConfig};
    use relay::peer::{GamePeer, PeerConfig};
    let mut now = Instant::from_millis(1);
    let server_addr = SocketAddr::from(([127, 0, 0, 1], 7000));
    let mut net = Network::new(seed, link);
    let mut server = Server::new(TransportConfig::default(), [seed as u8; 32]);
    let mut router = Router::new(RelayConfig::default());
    let mut rglue = relay::server::RouterGlue::new();
    let mut peers: Vec<NetPeer> = (0..n)
        .map(|i| NetPeer {
            peer: GamePeer::new(
                now,
                PeerConfig {
                    match_name: "net".into(),
                    players: n as u8,
                    turns,
                    seed: seed + i as u64,
                    apm: 400,
                    name: format!("p{i}"),
                    desync_at: None,
                },
            )
            .unwrap(),
            client: Client::new(
                now,
                server_addr,
                TransportConfig::default(),
                seed * 31 + i as u64,
            ),
            glue: lockstep::peer_glue::PeerGlue::new(),
            addr: SocketAddr::from(([127, 0, 0, 1], 7001 + i as u16)),
            turns: Vec::new(),
            delay_changes: Vec::new(),
        })
        .collect();
    let mut events = Vec::new();
    let mut buf = Vec::new();
    let limit = Instant::from_millis(180_000);
    while now < limit && !peers.iter().all(|p| p.peer.is_done()) {
        rglue.pump(now, &mut router, &mut server);
        events.extend(std::iter::from_fn(|| router.poll_event()));
        for p in &mut peers {
            p.glue.pump(now, p.peer.session(), &mut p.client);
            p.peer.pump(now);
            p.glue.pump(now, p.peer.session(), &mut p.client);
            for ev in p.peer.take_log() {
                match ev {
                    Event::TurnReady { turn, .. } => p.turns.push(turn.0),
                    Event::InputDelayChanged { delay, from_turn } => {
                        p.delay_changes.push((delay, from_turn));
                    }
                    _ => {}
                }
            }
        }
        rglue.pump(now, &mut router, &mut server);
        events.extend(std::iter::from_fn(|| router.poll_event()));
        while let Some(to) = server.poll_transmit(now, &mut buf) {
            net.send(now, server_addr, to, &buf);
        }
        for p in &mut peers {
            while let Some(to) = p.client.poll_transmit(now, &mut buf) {
                net.send(now, p.addr, to, &buf);
            }
        }
        let mut next = net.next_delivery();
        let mut at = |t: Option<Instant>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n: Instant| n.min(t)));
            }
        };
        at(server.poll_timeout());
        at(router.poll_timeout());
        for p in &mut peers {
            at(p.client.poll_timeout());
            at(p.peer.session().poll_timeout());
        }
        let Some(next) = next else { break };
        // Never stand still: a timer that is already due gets handled below.
        now = next.max(now + Duration::from_micros(100));
        while let Some((from, to, bytes)) = net.poll_deliver(now) {
            if to == server_addr {
                server.handle_datagram(now, from, &bytes);
            } else if let Some(p) = peers.iter_mut().find(|p| p.addr == to) {
                p.client.handle_datagram(now, from, &bytes);
            }
        }
        server.handle_timeout(now);
        router.handle_timeout(now);
        for p in &mut peers {
            p.client.handle_timeout(now);
            p.peer.session().handle_timeout(now);
        }
    }
    for p in &mut peers {
        p.glue.pump(now, p.peer.session(), &mut p.client);
        p.peer.pump(now);
    }
    (peers, events, now)
}

#[test]
fn over_netsim_with_loss_dup_and_reorder_every_peer_plays_every_turn_once() {
    let link = lockstep::netsim::LinkConfig {
        latency: Duration::from_millis(40),
        jitter: Duration::from_millis(20),
        loss: 0.10,
        duplicate: 0.05,
        reorder: 0.10,
        ..lockstep::netsim::LinkConfig::default()
    };
    let (peers, events, now) = netsim_match(4, 150, link, 17);
    let summaries: Vec<_> = peers.iter().map(|p| p.peer.summary(now)).collect();
    eprintln!(
        "netsim: {:?} delay changes {:?}",
        summaries[0], peers[0].delay_changes
    );
    for (i, p) in peers.iter().enumerate() {
        let s = &summaries[i];
        assert!(s.completed, "peer {i}: {s:?}");
        assert_eq!(p.turns, (0..150).collect::<Vec<u32>>(), "peer {i}");
        assert_eq!(s.final_hash, summaries[0].final_hash);
        assert!(s.desyncs.is_empty());
        assert_eq!(p.delay_changes, peers[0].delay_changes);
        assert!(s.rtt_ms > 50.0, "transport RTT reaches the stats: {s:?}");
    }
    let agreed = events
        .iter()
        .filter(|e| matches!(e, RouterEvent::HashAgreed { .. }))
        .count();
    assert_eq!(agreed, 150);
}
