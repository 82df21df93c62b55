//! The arena state ([`Arena`]): ships, projectiles and pickups sorted by id,
//! the seeded RNG, scores and outcome, and the [`Simulation`] implementation
//! tying step, hash and snapshot together.

use super::geom::heading_towards;
use super::map::ArenaMap;
use super::{Command, SHIP_HP, SPAWN_SHIELD};
use crate::num::Vec2;
use crate::rng::Pcg32;
use crate::{
    MAX_PLAYERS, MatchSetup, PlayerId, SectionHash, Simulation, SnapshotError, Stamped, StateHash,
    Turn,
};
use serde::{Deserialize, Serialize};
use std::fmt;

/// How a match is played: arena size, rocks and when it ends.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ArenaConfig {
    /// Side of the square arena (tiles, 24 to 256).
    pub side: u16,
    /// Rocks to place (at most 48; fewer when the arena is crowded).
    pub obstacles: u8,
    /// Kills that win the match (at least 1).
    pub score_limit: u16,
    /// Turns after which the best score wins (a tie is a draw).
    pub turn_limit: u32,
}

impl ArenaConfig {
    /// The standard rules for `players` players: a side of `36 + 4·players`
    /// tiles, `4 + players` rocks, 10 kills to win, at most 12,000 turns
    /// (20 minutes of 100 ms turns).
    #[must_use]
    pub fn standard(players: u8) -> Self {
        let players = players.clamp(1, MAX_PLAYERS);
        Self {
            side: 36 + 4 * u16::from(players),
            obstacles: 4 + players,
            score_limit: 10,
            turn_limit: 12_000,
        }
    }
}

/// One player's ship (there is exactly one per player, destroyed or not).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Ship {
    /// The player flying it (ships are indexed by player id).
    pub player: PlayerId,
    /// Centre (tiles).
    pub pos: Vec2,
    /// Velocity (tiles/tick).
    pub vel: Vec2,
    /// Facing, in `0..HEADINGS`.
    pub heading: u8,
    /// Hull points; the ship is destroyed when they reach 0.
    pub hp: u16,
    /// Shield points, absorbed before the hull.
    pub shield: u16,
    /// False while destroyed and waiting to respawn.
    pub alive: bool,
    /// Ticks until respawn while destroyed.
    pub respawn_in: u16,
    /// Ticks until the gun may fire again.
    pub cooldown: u16,
    /// Ticks until the boost recharges.
    pub boost_cooldown: u16,
    /// Ticks of rapid fire left.
    pub rapid: u16,
    /// Held thrust level (`0..=MAX_POWER`).
    pub thrust: u8,
    /// Held turn rate (headings per tick).
    pub turn: i8,
    /// Braking during this turn.
    pub brake: bool,
    /// Trigger held during this turn.
    pub trigger: bool,
    /// A boost requested this turn, applied on its first tick.
    pub boost: bool,
    /// Kills scored.
    pub score: u32,
    /// Times destroyed.
    pub deaths: u32,
    /// Shots fired.
    pub shots: u32,
    /// Shots that hit a ship.
    pub hits: u32,
}

/// A shot in flight.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Projectile {
    /// Sequential id (shared with pickups), never reused.
    pub id: u32,
    /// Who fired it (scores the kill).
    pub owner: PlayerId,
    /// Centre (tiles).
    pub pos: Vec2,
    /// Velocity (tiles/tick).
    pub vel: Vec2,
    /// Ticks left before it fizzles.
    pub ttl: u16,
}

/// What a pickup gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum PickupKind {
    /// Restores hull points.
    Health,
    /// Halves the gun cooldown for a while.
    RapidFire,
    /// Adds shield points.
    Shield,
}

impl PickupKind {
    /// All kinds, in declaration order.
    pub const ALL: [Self; 3] = [Self::Health, Self::RapidFire, Self::Shield];
}

/// A pickup waiting to be collected.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Pickup {
    /// Sequential id (shared with projectiles), never reused.
    pub id: u32,
    /// What it gives.
    pub kind: PickupKind,
    /// Centre (tiles).
    pub pos: Vec2,
}

/// Hostile or out-of-range command parts, counted identically on every peer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RejectStats {
    /// Commands stamped with a player not in the match.
    pub unknown_player: u32,
    /// Commands beyond the per-turn cap of one player.
    pub over_cap: u32,
    /// Commands for a destroyed ship.
    pub dead_ship: u32,
    /// Commands whose value was clamped into range (then obeyed).
    pub clamped: u32,
}

impl RejectStats {
    /// Commands ignored entirely (clamped ones are obeyed, so not included).
    #[must_use]
    pub const fn ignored(&self) -> u32 {
        self.unknown_player
            .saturating_add(self.over_cap)
            .saturating_add(self.dead_ship)
    }
}

/// How the match ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Outcome {
    /// This player reached the score limit first.
    ScoreLimit(PlayerId),
    /// The turn limit came; this player had the best score.
    TimeLimit(PlayerId),
    /// The turn limit came with the best score shared.
    Draw,
}

/// Everything hashed and snapshotted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct State {
    pub(crate) setup: MatchSetup,
    pub(crate) config: ArenaConfig,
    pub(crate) map: ArenaMap,
    pub(crate) tick: u32,
    /// Turns stepped (the turn limit counts these).
    pub(crate) turns: u32,
    pub(crate) last_turn: Option<Turn>,
    pub(crate) rng: Pcg32,
    /// One per player, indexed by player id.
    pub(crate) ships: Vec<Ship>,
    /// Sorted by id, strictly ascending.
    pub(crate) projectiles: Vec<Projectile>,
    /// Sorted by id, strictly ascending.
    pub(crate) pickups: Vec<Pickup>,
    pub(crate) next_id: u32,
    /// Tick at or after which the next pickup appears.
    pub(crate) next_pickup_at: u32,
    pub(crate) rejected: RejectStats,
    pub(crate) outcome: Option<Outcome>,
}

/// The arena world. All of its state is hashed and snapshotted; there is no cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Arena {
    pub(crate) s: State,
}

impl Arena {
    /// Builds a match from `setup` with explicit rules (players are clamped
    /// to `1..=MAX_PLAYERS`, ticks per turn to `1..=64`).
    #[must_use]
    pub fn generate(setup: &MatchSetup, config: &ArenaConfig) -> Self {
        let players = setup.players.clamp(1, MAX_PLAYERS);
        let setup = MatchSetup {
            seed: setup.seed,
            players,
            ticks_per_turn: setup.ticks_per_turn.clamp(1, 64),
        };
        let config = ArenaConfig {
            side: config
                .side
                .clamp(super::map::SIDE_RANGE.0, super::map::SIDE_RANGE.1),
            obstacles: config.obstacles.min(super::map::MAX_OBSTACLES),
            score_limit: config.score_limit.max(1),
            turn_limit: config.turn_limit.max(1),
        };
        // A stream of its own, so the arena's random draws never line up with
        // another game's built from the same seed.
        let mut rng = Pcg32::from_seed(setup.seed, 0xa7e4a);
        let map = ArenaMap::generate(config.side, config.obstacles, players, &mut rng);
        let n = map.spawns().len();
        let ships = (0..players)
            .map(|p| {
                // Players spread evenly around the spawn ring.
                let pos = map.spawns()[usize::from(p) * n / usize::from(players)];
                Ship {
                    player: PlayerId(p),
                    pos,
                    vel: Vec2::ZERO,
                    heading: heading_towards(map.centre() - pos),
                    hp: SHIP_HP,
                    shield: 0,
                    alive: true,
                    respawn_in: 0,
                    cooldown: 0,
                    boost_cooldown: 0,
                    rapid: 0,
                    thrust: 0,
                    turn: 0,
                    brake: false,
                    trigger: false,
                    boost: false,
                    score: 0,
                    deaths: 0,
                    shots: 0,
                    hits: 0,
                }
            })
            .collect();
        let first_pickup = rng.range(super::PICKUP_GAP.0, super::PICKUP_GAP.1);
        Self {
            s: State {
                setup,
                config,
                map,
                tick: 0,
                turns: 0,
                last_turn: None,
                rng,
                ships,
                projectiles: Vec::new(),
                pickups: Vec::new(),
                next_id: 0,
                next_pickup_at: first_pickup,
                rejected: RejectStats::default(),
                outcome: None,
            },
        }
    }

    /// The match set-up (after clamping).
    #[must_use]
    pub const fn setup(&self) -> &MatchSetup {
        &self.s.setup
    }

    /// The rules (after clamping).
    #[must_use]
    pub const fn config(&self) -> &ArenaConfig {
        &self.s.config
    }

    /// The static arena.
    #[must_use]
    pub const fn map(&self) -> &ArenaMap {
        &self.s.map
    }

    /// All ships, indexed by player id.
    #[must_use]
    pub fn ships(&self) -> &[Ship] {
        &self.s.ships
    }

    /// One player's ship.
    #[must_use]
    pub fn ship(&self, p: PlayerId) -> Option<&Ship> {
        self.s.ships.get(usize::from(p.0))
    }

    /// Shots in flight, sorted by id.
    #[must_use]
    pub fn projectiles(&self) -> &[Projectile] {
        &self.s.projectiles
    }

    /// Pickups waiting, sorted by id.
    #[must_use]
    pub fn pickups(&self) -> &[Pickup] {
        &self.s.pickups
    }

    /// Ticks simulated so far.
    #[must_use]
    pub const fn tick(&self) -> u32 {
        self.s.tick
    }

    /// The last turn stepped, if any.
    #[must_use]
    pub const fn last_turn(&self) -> Option<Turn> {
        self.s.last_turn
    }

    /// Hostile or out-of-range commands seen so far.
    #[must_use]
    pub const fn rejected(&self) -> RejectStats {
        self.s.rejected
    }

    /// How the match ended, if it has.
    #[must_use]
    pub const fn outcome(&self) -> Option<Outcome> {
        self.s.outcome
    }

    /// True once the match has ended; further turns change nothing but the turn counter.
    #[must_use]
    pub const fn is_over(&self) -> bool {
        self.s.outcome.is_some()
    }

    /// The winner, if the match has ended with one.
    #[must_use]
    pub const fn winner(&self) -> Option<PlayerId> {
        match self.s.outcome {
            Some(Outcome::ScoreLimit(p) | Outcome::TimeLimit(p)) => Some(p),
            _ => None,
        }
    }

    /// Fault injection for desync tests: takes one hull point from one ship
    /// (adds one at 1 hp; shifts a destroyed ship's respawn delay by a tick
    /// instead), so the hash and exactly the `ships` section change.
    /// Deterministic in `salt`; never destroys nor revives.
    pub fn perturb(&mut self, salt: u32) {
        let n = u32::try_from(self.s.ships.len()).unwrap_or(1).max(1);
        if let Some(ship) = self.s.ships.get_mut((salt % n) as usize) {
            if ship.alive {
                ship.hp = if ship.hp > 1 {
                    ship.hp - 1
                } else {
                    ship.hp + 1
                };
            } else {
                // A destroyed ship has no hull to change: shift its respawn by a tick.
                ship.respawn_in = if ship.respawn_in > 1 {
                    ship.respawn_in - 1
                } else {
                    ship.respawn_in + 1
                };
            }
        }
    }

    /// What [`Arena::perturb`] with this `salt` would change now: the
    /// section (`ships`), the ship's id (its player) and the field (`hp`, or
    /// `respawn_in` for a destroyed ship). Tests and drills compare a
    /// forensics report against it.
    #[must_use]
    pub fn perturb_target(&self, salt: u32) -> Option<(String, u64, &'static str)> {
        let n = u32::try_from(self.s.ships.len()).unwrap_or(1).max(1);
        let ship = self.s.ships.get((salt % n) as usize)?;
        let field = if ship.alive { "hp" } else { "respawn_in" };
        Some(("ships".to_owned(), u64::from(ship.player.0), field))
    }

    /// A readable summary: scores, deaths, hull and outcome.
    #[must_use]
    pub fn summary(&self) -> ArenaSummary {
        ArenaSummary {
            tick: self.s.tick,
            last_turn: self.s.last_turn,
            ships: self
                .s
                .ships
                .iter()
                .map(|s| (s.player, s.score, s.deaths, if s.alive { s.hp } else { 0 }))
                .collect(),
            projectiles: u32::try_from(self.s.projectiles.len()).unwrap_or(u32::MAX),
            pickups: u32::try_from(self.s.pickups.len()).unwrap_or(u32::MAX),
            rejected: self.s.rejected,
            outcome: self.s.outcome,
        }
    }

    /// The spawn point for a respawning ship: of three seeded candidates,
    /// the one farthest from the nearest live enemy (ties to the first).
    pub(crate) fn pick_spawn(&mut self, player: PlayerId) -> Vec2 {
        let n = u32::try_from(self.s.map.spawns().len()).unwrap_or(1);
        let mut best: Option<(i64, Vec2)> = None;
        for _ in 0..3 {
            let p = self.s.map.spawns()[self.s.rng.below(n) as usize];
            let clearance = self
                .s
                .ships
                .iter()
                .filter(|s| s.alive && s.player != player)
                .map(|s| s.pos.dist_sq_bits(p))
                .min()
                .unwrap_or(i64::MAX);
            if best.is_none_or(|(c, _)| clearance > c) {
                best = Some((clearance, p));
            }
        }
        best.map_or_else(|| self.s.map.centre(), |(_, p)| p)
    }

    /// Brings a destroyed ship back at a spawn point with a full hull and spawn shield.
    pub(crate) fn respawn(&mut self, i: usize) {
        let player = self.s.ships[i].player;
        let pos = self.pick_spawn(player);
        let heading = heading_towards(self.s.map.centre() - pos);
        let s = &mut self.s.ships[i];
        s.pos = pos;
        s.vel = Vec2::ZERO;
        s.heading = heading;
        s.hp = SHIP_HP;
        s.shield = SPAWN_SHIELD;
        s.alive = true;
        s.respawn_in = 0;
        s.cooldown = 0;
        s.boost_cooldown = 0;
        s.rapid = 0;
    }
}

/// A readable summary of an [`Arena`] (for logs, tests and replay tools).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArenaSummary {
    /// Ticks simulated.
    pub tick: u32,
    /// Last turn stepped.
    pub last_turn: Option<Turn>,
    /// Per ship: player, score, deaths, hull (0 while destroyed).
    pub ships: Vec<(PlayerId, u32, u32, u16)>,
    /// Shots in flight.
    pub projectiles: u32,
    /// Pickups waiting.
    pub pickups: u32,
    /// Hostile or out-of-range commands seen.
    pub rejected: RejectStats,
    /// How the match ended, if it has.
    pub outcome: Option<Outcome>,
}

impl fmt::Display for ArenaSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let turn = self
            .last_turn
            .map_or_else(|| "-".to_owned(), |t| t.to_string());
        writeln!(
            f,
            "tick {} (turn {turn}): {} shots in flight, {} pickups, {} commands ignored, {} clamped",
            self.tick,
            self.projectiles,
            self.pickups,
            self.rejected.ignored(),
            self.rejected.clamped
        )?;
        for (p, score, deaths, hp) in &self.ships {
            writeln!(f, "  {p}: {score} kills, {deaths} deaths, hull {hp}")?;
        }
        match self.outcome {
            Some(Outcome::ScoreLimit(p)) => writeln!(f, "  winner: {p} (score limit)"),
            Some(Outcome::TimeLimit(p)) => writeln!(f, "  winner: {p} (turn limit)"),
            Some(Outcome::Draw) => writeln!(f, "  draw"),
            None => Ok(()),
        }
    }
}

impl Simulation for Arena {
    type Command = Command;
    const GAME_ID: &'static str = "arena";
    const GAME_VERSION: u32 = 1;

    fn new(setup: &MatchSetup) -> Self {
        Self::generate(setup, &ArenaConfig::standard(setup.players))
    }

    fn rules_hash(&self) -> StateHash {
        super::codec::rules_hash(self)
    }

    fn step(&mut self, turn: Turn, inputs: &[Stamped<Command>]) {
        self.step_turn(turn, inputs);
    }

    fn state_hash(&self) -> StateHash {
        crate::hash::combine(&self.section_hashes())
    }

    fn section_hashes(&self) -> Vec<SectionHash> {
        super::codec::sections(&self.s)
    }

    fn snapshot(&self) -> Vec<u8> {
        super::codec::encode(&self.s)
    }

    fn restore(bytes: &[u8]) -> Result<Self, SnapshotError> {
        super::codec::decode(bytes).map(|s| Self { s })
    }

    fn entity_hashes(&self, section: &str) -> Vec<crate::forensics::EntityHash> {
        super::forensics::entity_hashes(self, section)
    }

    fn entity_fields(&self, section: &str, id: u64) -> Option<Vec<crate::forensics::Field>> {
        super::forensics::entity_fields(self, section, id)
    }
}
