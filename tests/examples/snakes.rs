//! Snakes, a third game built only from the guide (`lockstep::guide`): the
//! game (`Snakes`, a `sim::Simulation`), the guide's glue (`play`, a peer
//! loop for any game) and a `main` that plays a networked match through a
//! relay, records it and is the game's own replay tool.
//! `tests/tests/it/guide.rs` runs it against a real relay and checks that the
//! guide's code blocks are this file's code, verbatim.
//!
//! ```text
//! cargo run -p lockstep-relay -- serve --bind 127.0.0.1:7777 --record-dir recordings &
//! cargo run -p lockstep-tests --example snakes -- 127.0.0.1:7777 2 a.lsr &
//! cargo run -p lockstep-tests --example snakes -- 127.0.0.1:7777 2 b.lsr
//! cargo run -p lockstep-tests --example snakes -- replay verify a.lsr
//! ```
// --- guide: game ---
use serde::{Deserialize, Serialize};
use sim::forensics::{EntityHash, Field, combine_entities, whole_section};
use sim::rng::Pcg32;
use sim::{MatchSetup, PlayerId, SectionHash, Simulation, SnapshotError, Stamped, StateHash, Turn};

/// Side of the square board, in cells; the edges wrap around.
pub const SIZE: u8 = 20;
/// Walls drawn from the match seed: the map differs from match to match.
const WALLS: u32 = 16;
/// Food on the board at any time.
const FOOD: usize = 3;

/// Where a snake heads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Dir {
    /// Towards row 0.
    Up,
    /// Towards the last row.
    Down,
    /// Towards column 0.
    Left,
    /// Towards the last column.
    Right,
}

/// A player's command, the game's `Simulation::Command`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Head this way from the next tick on (a U-turn is ignored).
    Turn(Dir),
}

/// One player's snake.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snake {
    /// Its cells, head first.
    pub body: Vec<(u8, u8)>,
    /// Where it moves at the next tick.
    pub dir: Dir,
    /// A snake that hit a wall or a body is out (and no obstacle any more).
    pub alive: bool,
    /// Cells still to grow from food eaten.
    pub grow: u8,
}

/// Snakes on a wrapping board with walls drawn from the seed: every tick
/// each snake moves one cell; eating food makes it grow; running into a
/// wall or a body (its own too, heads included) ends it. Integers only.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Snakes {
    ticks_per_turn: u16,
    tick: u32,
    snakes: Vec<Snake>,
    walls: Vec<(u8, u8)>,
    food: Vec<(u8, u8)>,
    rng: Pcg32,
}

fn moved((x, y): (u8, u8), dir: Dir) -> (u8, u8) {
    let wrap = |v: u8, d: i16| (i16::from(v) + d).rem_euclid(i16::from(SIZE)) as u8;
    match dir {
        Dir::Up => (x, wrap(y, -1)),
        Dir::Down => (x, wrap(y, 1)),
        Dir::Left => (wrap(x, -1), y),
        Dir::Right => (wrap(x, 1), y),
    }
}

const fn opposite(dir: Dir) -> Dir {
    match dir {
        Dir::Up => Dir::Down,
        Dir::Down => Dir::Up,
        Dir::Left => Dir::Right,
        Dir::Right => Dir::Left,
    }
}

impl Snakes {
    /// The snakes, in player order.
    #[must_use]
    pub fn snakes(&self) -> &[Snake] {
        &self.snakes
    }

    /// Where the food is.
    #[must_use]
    pub fn food(&self) -> &[(u8, u8)] {
        &self.food
    }

    fn blocked(&self, cell: (u8, u8)) -> bool {
        self.walls.contains(&cell)
            || self.food.contains(&cell)
            || self
                .snakes
                .iter()
                .any(|s| s.alive && s.body.contains(&cell))
    }

    /// A random free cell for food (none after a few tries on a full board).
    fn place_food(&mut self) {
        for _ in 0..64 {
            let cell = (
                self.rng.below(u32::from(SIZE)) as u8,
                self.rng.below(u32::from(SIZE)) as u8,
            );
            if !self.blocked(cell) {
                self.food.push(cell);
                return;
            }
        }
    }

    /// One tick: everyone moves, then collisions, then food.
    fn tick(&mut self) {
        for s in self.snakes.iter_mut().filter(|s| s.alive) {
            s.body.insert(0, moved(s.body[0], s.dir));
            if s.grow > 0 {
                s.grow -= 1;
            } else {
                s.body.pop();
            }
        }
        // Judge every head against the board as it is now, then remove.
        let dead: Vec<bool> = (0..self.snakes.len())
            .map(|i| {
                let me = &self.snakes[i];
                let head = me.body[0];
                me.alive
                    && (self.walls.contains(&head)
                        || self.snakes.iter().enumerate().any(|(j, o)| {
                            o.alive && o.body.iter().skip(usize::from(i == j)).any(|c| *c == head)
                        }))
            })
            .collect();
        for (s, dead) in self.snakes.iter_mut().zip(dead) {
            s.alive &= !dead;
        }
        for i in 0..self.snakes.len() {
            let head = self.snakes[i].body[0];
            if let Some(f) = self.food.iter().position(|f| *f == head)
                && self.snakes[i].alive
            {
                self.food.remove(f);
                self.snakes[i].grow += 2;
                self.place_food();
            }
        }
        self.tick += 1;
    }

    fn snake_hashes(&self) -> Vec<EntityHash> {
        let mut buf = Vec::new();
        (0u64..)
            .zip(&self.snakes)
            .map(|(id, s)| EntityHash {
                id,
                hash: sim::hash::digest_of(s, &mut buf),
            })
            .collect()
    }
}

impl Simulation for Snakes {
    type Command = Command;
    const GAME_ID: &'static str = "snakes";
    const GAME_VERSION: u32 = 1;

    fn new(setup: &MatchSetup) -> Self {
        let players = u32::from(setup.players.max(1));
        // Snakes start spread along the middle row, heading up.
        let snakes: Vec<Snake> = (0..players)
            .map(|p| {
                let x = (2 + p * u32::from(SIZE - 4) / players) as u8;
                let y = SIZE / 2;
                Snake {
                    body: vec![(x, y), (x, y + 1), (x, y + 2)],
                    dir: Dir::Up,
                    alive: true,
                    grow: 0,
                }
            })
            .collect();
        let mut world = Self {
            ticks_per_turn: setup.ticks_per_turn,
            tick: 0,
            snakes,
            walls: Vec::new(),
            food: Vec::new(),
            rng: Pcg32::from_seed(setup.seed, 1),
        };
        // The map: walls from the seed, off the snakes' starting columns.
        for _ in 0..WALLS {
            let cell = (
                world.rng.below(u32::from(SIZE)) as u8,
                world.rng.below(u32::from(SIZE)) as u8,
            );
            if !world.snakes.iter().any(|s| s.body[0].0 == cell.0) && !world.blocked(cell) {
                world.walls.push(cell);
            }
        }
        world.walls.sort_unstable();
        while world.food.len() < FOOD {
            world.place_food();
        }
        world
    }

    fn rules_hash(&self) -> StateHash {
        // The rules and the map: the walls come from the seed.
        let rules = (Self::GAME_ID, SIZE, FOOD as u8, self.ticks_per_turn);
        sim::hash::digest_of(&(rules, &self.walls), &mut Vec::new())
    }

    fn step(&mut self, _turn: Turn, inputs: &[Stamped<Command>]) {
        // The engine hands inputs in canonical order (player, then the
        // order each player gave them); a test may not: sort a copy, so
        // the result never depends on the order given.
        let mut inputs = inputs.to_vec();
        sim::canonical_order(&mut inputs);
        for s in &inputs {
            // A hostile player index cannot occur (the decode drops it);
            // a U-turn is ignored the same way on every peer.
            let Some(snake) = self.snakes.get_mut(usize::from(s.player.0)) else {
                continue;
            };
            let Command::Turn(dir) = s.command;
            if dir != opposite(snake.dir) {
                snake.dir = dir;
            }
        }
        for _ in 0..self.ticks_per_turn {
            self.tick();
        }
    }

    fn state_hash(&self) -> StateHash {
        sim::hash::combine(&self.section_hashes())
    }

    fn section_hashes(&self) -> Vec<SectionHash> {
        let board = (self.tick, &self.food, &self.rng);
        vec![
            SectionHash {
                name: "snakes".into(),
                hash: combine_entities(&self.snake_hashes()),
            },
            SectionHash {
                name: "board".into(),
                hash: sim::hash::digest_of(&board, &mut Vec::new()),
            },
        ]
    }

    fn entity_hashes(&self, section: &str) -> Vec<EntityHash> {
        match section {
            "snakes" => self.snake_hashes(),
            // A section not split into entities is one entity (not an
            // empty list, which fails `sections_are_consistent`).
            _ => whole_section(self, section),
        }
    }

    fn entity_fields(&self, section: &str, id: u64) -> Option<Vec<Field>> {
        let s = self.snakes.get(usize::try_from(id).ok()?)?;
        (section == "snakes").then(|| {
            vec![
                Field::new("alive", s.alive),
                Field::debug("dir", &s.dir),
                Field::new("length", s.body.len()),
                Field::debug("head", &s.body[0]),
                Field::new("grow", s.grow),
            ]
        })
    }

    fn snapshot(&self) -> Vec<u8> {
        postcard::to_allocvec(self).unwrap_or_default()
    }

    fn restore(bytes: &[u8]) -> Result<Self, SnapshotError> {
        let w: Self =
            postcard::from_bytes(bytes).map_err(|e| SnapshotError::Decode(e.to_string()))?;
        let on_board = |c: &(u8, u8)| c.0 < SIZE && c.1 < SIZE;
        let cells = w.snakes.iter().flat_map(|s| &s.body).chain(&w.food);
        if w.snakes.iter().any(|s| s.body.is_empty()) || !cells.chain(&w.walls).all(on_board) {
            return Err(SnapshotError::Invalid("a cell off the board".into()));
        }
        Ok(w)
    }
}
// --- end guide: game ---

// --- guide: bot ---
/// A hungry player: heads for the nearest food, never into a wall or a
/// body next tick if another way is free.
#[must_use]
pub fn hungry(world: &Snakes, me: PlayerId) -> Vec<Command> {
    let Some(snake) = world.snakes().get(usize::from(me.0)).filter(|s| s.alive) else {
        return Vec::new();
    };
    let head = snake.body[0];
    let dist = |a: (u8, u8), b: (u8, u8)| {
        let d = |p: u8, q: u8| {
            let d = p.abs_diff(q);
            d.min(SIZE - d)
        };
        d(a.0, b.0) + d(a.1, b.1)
    };
    let target = world.food().iter().min_by_key(|f| dist(head, **f)).copied();
    let free = |c: (u8, u8)| !world.blocked(c) || world.food().contains(&c);
    let best = [Dir::Up, Dir::Left, Dir::Down, Dir::Right]
        .into_iter()
        .filter(|d| *d != opposite(snake.dir))
        .map(|d| (d, moved(head, d)))
        .min_by_key(|(_, c)| (!free(*c), target.map_or(0, |f| dist(*c, f))));
    best.map(|(d, _)| vec![Command::Turn(d)])
        .unwrap_or_default()
}

// --- end guide: bot ---

// --- guide: hash test ---
/// The state hash every 10 turns of a seeded match of hungry snakes, with
/// no network: the table a snapshot test pins.
#[must_use]
pub fn hash_table(seed: u64, players: u8, turns: u32) -> String {
    let ticks_per_turn = lockstep::peer::DEFAULT_TICKS_PER_TURN;
    let mut world = Snakes::new(&MatchSetup {
        seed,
        players,
        ticks_per_turn,
    });
    let mut table = String::new();
    for t in 0..turns {
        let inputs: Vec<Stamped<Command>> = (0..players)
            .map(PlayerId)
            .flat_map(|player| {
                // Stamped as the relay does: `seq` is each command's
                // position in the player's input for the turn.
                let commands = hungry(&world, player).into_iter().zip(0u16..);
                commands.map(move |(command, seq)| Stamped {
                    player,
                    seq,
                    command,
                })
            })
            .collect();
        world.step(Turn(t), &inputs);
        if t % 10 == 9 {
            table.push_str(&format!("turn {t}: {}\n", world.state_hash().short()));
        }
    }
    table
}

/// Determinism regressions show as changed hashes: pin them (and run the
/// test in `--release` too: debug and release must agree).
#[test]
fn snakes_hashes() {
    insta::assert_snapshot!(hash_table(42, 3, 60));
}

/// Every section's entity list checks against its section hash, as the
/// relay checks a peer's forensics answers.
#[test]
fn snakes_sections_are_consistent() {
    let setup = MatchSetup {
        seed: 42,
        players: 3,
        ticks_per_turn: 2,
    };
    let world = Snakes::new(&setup);
    assert!(sim::forensics::sections_are_consistent(&world));
}
// --- end guide: hash test ---

// --- guide: speculation ---
use lockstep::Instant;
use lockstep::peer::Peer;

/// One rendered frame of a peer built with `PeerBuilder::with_speculation`,
/// after the frame's commands were submitted: bring the speculative view up
/// to date (within its per-frame budget, measured with `clock`), then draw.
/// `draw` gets the world to show (your own commands already in it, or the
/// confirmed world on a frame that fell back) and the confirmed world (for
/// what must be certain: a score, a victory).
pub fn render<S: Simulation>(
    peer: &mut Peer<S>,
    now: Instant,
    clock: &mut dyn FnMut() -> Instant,
    mut draw: impl FnMut(&S, &S),
) {
    peer.handle_frame(now, clock);
    if let (Some(view), Some(confirmed)) = (peer.speculative_world(), peer.confirmed_world()) {
        draw(view, confirmed);
    }
}

/// The view a frame draws: the own command is in it at once, the confirmed
/// world waits for the relay.
#[test]
fn an_own_turn_shows_in_the_next_frame() {
    use lockstep::peer::{Speculation, SpeculationConfig};
    let setup = MatchSetup {
        seed: 1,
        players: 2,
        ticks_per_turn: 2,
    };
    let confirmed = Snakes::new(&setup);
    let mut view = Speculation::<Snakes>::new(SpeculationConfig::default());
    // Submitted now; the relay will stamp it into turn 2 (the peer knows:
    // `Session::landing_turn`). Turn 0 is the first not confirmed.
    view.handle_submit(
        Instant::ZERO,
        PlayerId(0),
        Turn(2),
        vec![Command::Turn(Dir::Left)],
    );
    let mut clock = || Instant::ZERO; // a frame's own work, on your clock
    assert!(view.handle_frame(Instant::ZERO, &confirmed, Turn(0), Turn(2), &mut clock));
    assert_eq!(view.view(&confirmed).snakes()[0].dir, Dir::Left);
    assert_eq!(confirmed.snakes()[0].dir, Dir::Up);
}
// --- end guide: speculation ---

// --- guide: loss ---
/// Three hungry snakes and the real relay (`relay`, the `lockstep-relay`
/// crate, a dev-dependency) on a simulated network that loses a tenth of
/// all datagrams, on a virtual clock: 60 turns run in a fraction of a
/// second, and a seed that fails fails the same way every time.
#[test]
fn snakes_play_through_the_relay_under_loss() {
    use lockstep::netsim::{Endpoint, Harness, LinkConfig, Network, Stopped};
    use lockstep::peer::{Autopilot, PeerBuilder, PeerEvent};
    use lockstep::{Duration, Instant};
    use relay::{RelayConfig, endpoint::RelayEndpoint};

    /// The hungry bot as a `sim::Agent`, for an `Autopilot` to play.
    struct Hungry(PlayerId);
    impl sim::Agent<Snakes> for Hungry {
        fn player(&self) -> PlayerId {
            self.0
        }
        fn think(&mut self, world: &Snakes, _: Turn) -> Vec<Command> {
            hungry(world, self.0)
        }
    }

    let relay_addr: std::net::SocketAddr = "10.0.0.1:7777".parse().unwrap();
    // The relay `relay serve` runs, with its default transport, no socket.
    let mut relay = RelayEndpoint::open(RelayConfig::default(), relay_addr);
    let mut pilots: Vec<_> = (1..=3u8)
        .map(|i| {
            let peer = PeerBuilder::<Snakes>::new("under-loss", 3)
                .with_turns(60)
                .with_seed(u64::from(i))
                // Each peer needs its own address on the simulated network.
                .with_local_addr(std::net::SocketAddr::from(([10, 0, 0, 10 + i], 7000)))
                .build(Instant::ZERO, relay_addr)
                .unwrap();
            // `Autopilot`: a peer played by a bot, built once its slot is known.
            Autopilot::new(peer, Hungry).with_log()
        })
        .collect();
    let lossy = LinkConfig {
        latency: Duration::from_millis(40),
        jitter: Duration::from_millis(10),
        loss: 0.10,
        ..LinkConfig::default()
    };
    let mut harness = Harness::new(Network::new(42, lossy));
    let mut nodes: Vec<&mut dyn Endpoint> = vec![&mut relay];
    nodes.extend(pilots.iter_mut().map(|p| p as &mut dyn Endpoint));
    // Until every peer's match ended (the relay is always "done"), at most
    // two virtual minutes.
    let stopped = harness.run_until(&mut nodes, Instant::from_millis(120_000), |_, nodes| {
        nodes.iter().all(|n| n.is_done())
    });
    assert_eq!(stopped, Stopped::Done);

    let now = harness.now();
    let (mut players, mut hashes) = (Vec::new(), Vec::new());
    for pilot in &mut pilots {
        // The relay seats players in the order their joins arrive, which
        // loss reorders: a peer's index here is not its player id.
        let me = pilot.peer().player().unwrap();
        let started = pilot.take_log().into_iter().find_map(|e| match e {
            PeerEvent::Started { player, .. } => Some(player),
            _ => None,
        });
        assert_eq!(started, Some(me));
        players.push(me.0);
        let summary = pilot.peer().summary(now);
        assert!(summary.completed, "{summary:?}");
        assert_eq!(summary.final_turn, Some(59));
        hashes.push(summary.final_hash);
    }
    players.sort_unstable();
    assert_eq!(players, [0, 1, 2], "every slot played once");
    let agreed = hashes.iter().all(|h| h.is_some() && *h == hashes[0]);
    assert!(agreed, "{hashes:?}");
}
// --- end guide: loss ---

// --- guide: glue ---
use lockstep::Duration;
use lockstep::peer::{PeerBuilder, PeerEvent, udp::UdpPeer};
use std::io;
use std::net::{SocketAddr, UdpSocket};

/// Plays one match of any game `S` through the relay at `relay` as `builder`
/// says (match, players, turns, recording: the `with_*` options); `choose`
/// is the local player's input (keyboard, AI, ...). Returns the last turn
/// and its state hash.
pub fn play<S: Simulation>(
    relay: SocketAddr,
    builder: PeerBuilder<S>,
    mut choose: impl FnMut(&S, PlayerId) -> Vec<S::Command>,
) -> io::Result<(Turn, StateHash)> {
    let socket = UdpSocket::bind((relay.ip(), 0))?;
    let mut net = UdpPeer::new(socket, relay, builder).map_err(io::Error::other)?;
    let mut last = None;
    while !net.peer().is_done() {
        net.pump(Duration::from_millis(16))?; // one frame of I/O
        let now = net.now();
        while let Some(event) = net.peer_mut().poll_event() {
            match event {
                PeerEvent::TurnReady { turn, hash, .. } => {
                    last = Some((turn, hash)); // the world is stepped: render it here
                    let peer = net.peer_mut();
                    // A spectator has no player: it watches, it never submits.
                    if let (Some(world), Some(me)) = (peer.world(), peer.player()) {
                        let commands = choose(world, me);
                        peer.submit(now, &commands).map_err(io::Error::other)?;
                    }
                }
                // The relay's forensics: the entities and fields that differ.
                PeerEvent::DesyncDetails { entities, .. } => eprintln!("desync: {entities:?}"),
                PeerEvent::Refused { reason, .. } => Err(io::Error::other(reason.to_string()))?,
                PeerEvent::ConnectionLost { .. } => return Err(io::Error::other("relay lost")),
                _ => {}
            }
        }
    }
    net.linger(Duration::from_secs(2))?; // let the last hashes reach the relay
    last.ok_or_else(|| io::Error::other("the match ended before its first turn"))
}
// --- end guide: glue ---

// --- guide: main ---
use replays::cli::Games;
use std::process::ExitCode;

/// `snakes RELAY PLAYERS RECORD` plays a match and records this peer's
/// replay; `snakes replay verify RECORD` (info, diff, state, export, ...) is
/// the game's own replay tool.
fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).is_some_and(|a| a == "replay") {
        let games = Games::new().with_simulation::<Snakes>();
        let (mut out, mut err) = (io::stdout(), io::stderr());
        return ExitCode::from(replays::cli::run(&games, &args[1..], &mut out, &mut err));
    }
    let relay = args.get(1).and_then(|a| a.parse().ok());
    let players = args.get(2).and_then(|a| a.parse().ok());
    let (Some(relay), Some(players), Some(record)) = (relay, players, args.get(3)) else {
        eprintln!("usage: snakes RELAY PLAYERS RECORD | snakes replay ...");
        return ExitCode::from(2);
    };
    let builder = PeerBuilder::new("snakes", players)
        .with_turns(120)
        .with_record(record);
    let result = play::<Snakes>(relay, builder, hungry);
    match &result {
        Ok((turn, hash)) => println!("turn {turn}: {hash}"),
        Err(e) => eprintln!("snakes: {e}"),
    }
    ExitCode::from(u8::from(result.is_err()))
}
// --- end guide: main ---
