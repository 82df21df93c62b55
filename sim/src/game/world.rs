//! The game state ([`World`]): map, players, entities sorted by id, the RNG,
//! and the [`Simulation`] implementation tying step, hash and snapshot together.

use super::flow::FlowCache;
use super::grid::Grid;
use super::map::{Map, MapConfig, Tile};
use super::{Command, START_RESOURCES, UnitKind};
use crate::contract::{
    MAX_PLAYERS, MatchSetup, PlayerId, SectionHash, Simulation, SnapshotError, Stamped, StateHash,
    Turn,
};
use crate::num::Vec2;
use crate::rng::Pcg32;
use serde::{Deserialize, Serialize};
use std::fmt;

/// What a unit is currently doing.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Order {
    /// Standing; army units still engage enemies that come into sight.
    Idle,
    /// Walking to `slot`, guided by the flow field towards `dest`.
    Move {
        /// The command's target tile (shared flow field).
        dest: Tile,
        /// This unit's own formation point near `dest`.
        slot: Vec2,
    },
    /// Like `Move`, but engaging enemies on the way.
    AttackMove {
        /// The command's target tile (shared flow field).
        dest: Tile,
        /// This unit's own formation point near `dest`.
        slot: Vec2,
    },
    /// Attacking one entity until it dies.
    Attack {
        /// The entity attacked.
        target: u32,
    },
    /// Gathering from a mine and returning to the nearest base.
    Gather {
        /// The mine.
        mine: u32,
        /// True while carrying resources home.
        returning: bool,
    },
    /// Walking to a site to build a base.
    Build {
        /// The site tile.
        site: Tile,
    },
}

/// One entity: a unit, a base or a mine.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Entity {
    /// Sequential id, never reused.
    pub id: u32,
    /// Owning player; `None` for neutral mines.
    pub owner: Option<PlayerId>,
    /// What it is.
    pub kind: UnitKind,
    /// Centre position in tiles.
    pub pos: Vec2,
    /// Hit points; at or below zero the entity is removed at the end of the tick.
    pub hp: i32,
    /// Ticks until it may attack again.
    pub cooldown: u16,
    /// Current order.
    pub order: Order,
    /// Enemy currently engaged (auto-acquired or ordered).
    pub target: Option<u32>,
    /// Resources carried (workers) or left (mines).
    pub cargo: u32,
    /// Progress counter: gathering (workers) or training (bases).
    pub timer: u16,
    /// Training queue (bases only).
    pub queue: Vec<UnitKind>,
}

impl Entity {
    pub(crate) fn new(id: u32, owner: Option<PlayerId>, kind: UnitKind, pos: Vec2) -> Self {
        Self {
            id,
            owner,
            kind,
            pos,
            hp: kind.stats().hp,
            cooldown: 0,
            order: Order::Idle,
            target: None,
            cargo: 0,
            timer: 0,
            queue: Vec::new(),
        }
    }

    /// True while hit points remain.
    #[must_use]
    pub const fn alive(&self) -> bool {
        self.hp > 0
    }
}

/// Per-player state.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PlayerState {
    /// The player.
    pub id: PlayerId,
    /// Spendable resources.
    pub resources: u32,
    /// True while the player owns at least one base.
    pub alive: bool,
    /// Units trained so far.
    pub trained: u32,
    /// Units lost so far.
    pub lost: u32,
}

/// Hostile or invalid command parts ignored so far (identical on every peer).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RejectStats {
    /// Commands ignored entirely.
    pub commands: u32,
    /// Unit ids skipped inside otherwise valid commands (unknown, dead, not owned).
    pub unit_refs: u32,
}

/// How the match ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Outcome {
    /// The last player with a base standing.
    Winner(PlayerId),
    /// The last bases fell in the same tick.
    Draw,
}

/// Everything hashed and snapshotted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct State {
    pub(crate) setup: MatchSetup,
    pub(crate) map: Map,
    pub(crate) tick: u32,
    pub(crate) last_turn: Option<Turn>,
    pub(crate) rng: Pcg32,
    pub(crate) players: Vec<PlayerState>,
    /// Sorted by id, strictly ascending; dead entities removed each tick.
    pub(crate) entities: Vec<Entity>,
    pub(crate) next_id: u32,
    pub(crate) rejected: RejectStats,
    pub(crate) outcome: Option<Outcome>,
}

impl State {
    /// Index of a live or dying entity by id: a binary search, since the
    /// list is sorted by id.
    pub(crate) fn index_of(&self, id: u32) -> Option<usize> {
        self.entities.binary_search_by_key(&id, |e| e.id).ok()
    }
}

/// Derived data rebuilt on demand; never hashed, never snapshotted.
#[derive(Clone, Debug, Default)]
pub(crate) struct Cache {
    pub(crate) flow: FlowCache,
    pub(crate) grid: Grid,
}

/// The reference RTS world.
#[derive(Clone, Debug)]
pub struct World {
    pub(crate) s: State,
    pub(crate) cache: Cache,
}

impl PartialEq for World {
    fn eq(&self, other: &Self) -> bool {
        self.s == other.s
    }
}

/// Start positions as fractions (numerator over 16) of the map size, one
/// per player up to `MAX_PLAYERS`. The first eight are the corners, edge
/// midpoints of the eight-player table (`(1, 1)` over 8 is `(2, 2)` over
/// 16, the same tile after flooring), so matches of up to eight players
/// keep their maps and hashes. The rest fill a lattice of sixteenths, the
/// rest of the outer ring then an inner ring, so that every base is at
/// least an eighth of the map from the next.
const STARTS: [(u16, u16); MAX_PLAYERS as usize] = [
    (2, 2),
    (14, 14),
    (14, 2),
    (2, 14),
    (8, 2),
    (8, 14),
    (2, 8),
    (14, 8),
    // Players 8 to 23: the rest of the outer ring, opposite pairs.
    (4, 2),
    (12, 14),
    (12, 2),
    (4, 14),
    (2, 4),
    (14, 12),
    (14, 4),
    (2, 12),
    (6, 2),
    (10, 14),
    (10, 2),
    (6, 14),
    (2, 6),
    (14, 10),
    (14, 6),
    (2, 10),
    // Players 24 to 31: an inner ring.
    (4, 4),
    (12, 12),
    (12, 4),
    (4, 12),
    (8, 4),
    (8, 12),
    (4, 8),
    (12, 8),
];

/// `numerator` sixteenths of `side`, floored (in `u32`: a side of up to
/// `MAX_SIDE` times 16 overflows `u16`).
fn fraction(side: u16, numerator: u16) -> u16 {
    let t = u32::from(side) * u32::from(numerator) / 16;
    // At most `side`: the numerator is at most 16.
    u16::try_from(t).unwrap_or(side)
}

/// Offsets of the tiles around a point, nearest first (ties by row, then column).
pub(crate) fn ring_offsets() -> &'static [(i32, i32)] {
    use std::sync::OnceLock;
    static RING: OnceLock<Vec<(i32, i32)>> = OnceLock::new();
    RING.get_or_init(|| {
        let r = 14;
        let mut v: Vec<(i32, i32)> = (-r..=r)
            .flat_map(|dy| (-r..=r).map(move |dx| (dx, dy)))
            .filter(|(dx, dy)| dx * dx + dy * dy <= r * r)
            .collect();
        v.sort_by_key(|&(dx, dy)| (dx * dx + dy * dy, dy, dx));
        v
    })
}

impl World {
    /// Builds a match from `setup` on a map described by `config`.
    #[must_use]
    pub fn generate(setup: &MatchSetup, config: &MapConfig) -> Self {
        let players = setup.players.clamp(1, MAX_PLAYERS);
        let setup = MatchSetup {
            seed: setup.seed,
            players,
            ticks_per_turn: setup.ticks_per_turn.clamp(1, 64),
        };
        let mut rng = Pcg32::from_seed(setup.seed, 0x5eed);
        let width = config.width.clamp(24, super::map::MAX_SIDE);
        let height = config.height.clamp(24, super::map::MAX_SIDE);
        let starts: Vec<Tile> = STARTS[..usize::from(players)]
            .iter()
            .map(|&(fx, fy)| (fraction(width, fx), fraction(height, fy)))
            .collect();
        let clear: Vec<(Tile, i32)> = starts.iter().map(|&t| (t, 8)).collect();
        let map = Map::generate(width, height, config.obstacles, &clear, &mut rng);
        let mut world = Self {
            s: State {
                setup: setup.clone(),
                map,
                tick: 0,
                last_turn: None,
                rng,
                players: (0..players)
                    .map(|p| PlayerState {
                        id: PlayerId(p),
                        resources: START_RESOURCES,
                        alive: true,
                        trained: 0,
                        lost: 0,
                    })
                    .collect(),
                entities: Vec::new(),
                next_id: 0,
                rejected: RejectStats::default(),
                outcome: None,
            },
            cache: Cache::default(),
        };
        let center = (width / 2, height / 2);
        // Mines first: next to each start, on the side facing the centre.
        for &s in &starts {
            let toward = (
                (i32::from(center.0) - i32::from(s.0)).signum(),
                (i32::from(center.1) - i32::from(s.1)).signum(),
            );
            let spots = [(5, -2), (-2, 5), (4, 4), (6, 1), (1, 6)];
            for &(a, b) in spots.iter().take(usize::from(config.mines_per_base)) {
                if let Some(t) = world.s.map.offset(s, a * toward.0, b * toward.1) {
                    world.spawn_at(None, UnitKind::Mine, t);
                }
            }
        }
        for k in 0..config.center_mines {
            let k = i32::from(k);
            if let Some(t) = world.s.map.offset(center, (k % 3 - 1) * 2, (k / 3 - 1) * 2) {
                world.spawn_at(None, UnitKind::Mine, t);
            }
        }
        for (p, &s) in starts.iter().enumerate() {
            let owner = Some(PlayerId(u8::try_from(p).unwrap_or(0)));
            world.spawn_at(owner, UnitKind::Base, s);
            let mut slot = 8;
            let mut put = |w: &mut Self, kind: UnitKind, n: u32| {
                for _ in 0..n {
                    if let Some(t) = w.free_tile_near(s, &mut slot) {
                        w.spawn_at(owner, kind, t);
                    }
                }
            };
            put(
                &mut world,
                UnitKind::Worker,
                u32::from(config.start_workers),
            );
            put(
                &mut world,
                UnitKind::Soldier,
                u32::from(config.start_soldiers),
            );
            put(
                &mut world,
                UnitKind::Archer,
                u32::from(config.start_archers),
            );
        }
        world
    }

    /// The next walkable tile around `center` in ring order, starting at `*cursor`.
    pub(crate) fn free_tile_near(&self, center: Tile, cursor: &mut usize) -> Option<Tile> {
        let ring = ring_offsets();
        while *cursor < ring.len() {
            let (dx, dy) = ring[*cursor];
            *cursor += 1;
            if let Some(t) = self.s.map.offset(center, dx, dy) {
                if self.s.map.walkable(t) {
                    return Some(t);
                }
            }
        }
        None
    }

    /// Adds an entity at a tile centre with the next id; returns the id.
    /// Past [`crate::snapshot::MAX_ENTITY_ID`] nothing more is spawned.
    pub(crate) fn spawn_at(&mut self, owner: Option<PlayerId>, kind: UnitKind, t: Tile) -> u32 {
        let id = self.s.next_id;
        if id >= crate::snapshot::MAX_ENTITY_ID {
            return id;
        }
        self.s.next_id += 1;
        let mut e = Entity::new(id, owner, kind, Vec2::tile_center(t.0, t.1));
        if kind == UnitKind::Mine {
            e.cargo = super::MINE_AMOUNT;
        }
        self.s.entities.push(e);
        id
    }

    /// Index of a live or dying entity by id.
    pub(crate) fn index_of(&self, id: u32) -> Option<usize> {
        self.s.index_of(id)
    }

    /// The entity with this id, if it exists.
    #[must_use]
    pub fn entity(&self, id: u32) -> Option<&Entity> {
        self.index_of(id).map(|i| &self.s.entities[i])
    }

    /// All entities, sorted by id.
    #[must_use]
    pub fn entities(&self) -> &[Entity] {
        &self.s.entities
    }

    /// Mutable access for scenario set-up (orders, positions).
    pub(crate) fn entities_mut(&mut self) -> &mut [Entity] {
        &mut self.s.entities
    }

    /// The map.
    #[must_use]
    pub const fn map(&self) -> &Map {
        &self.s.map
    }

    /// The match set-up (after clamping to valid values).
    #[must_use]
    pub const fn setup(&self) -> &MatchSetup {
        &self.s.setup
    }

    /// All players.
    #[must_use]
    pub fn players(&self) -> &[PlayerState] {
        &self.s.players
    }

    /// One player's state.
    #[must_use]
    pub fn player(&self, p: PlayerId) -> Option<&PlayerState> {
        self.s.players.get(usize::from(p.0))
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

    /// Commands ignored so far as hostile or invalid.
    #[must_use]
    pub const fn rejected_commands(&self) -> u32 {
        self.s.rejected.commands
    }

    /// Full rejection counters.
    #[must_use]
    pub const fn rejected(&self) -> RejectStats {
        self.s.rejected
    }

    /// How the match ended, if it has.
    #[must_use]
    pub const fn outcome(&self) -> Option<Outcome> {
        self.s.outcome
    }

    /// The winner, if the match has one.
    #[must_use]
    pub const fn winner(&self) -> Option<PlayerId> {
        match self.s.outcome {
            Some(Outcome::Winner(p)) => Some(p),
            _ => None,
        }
    }

    /// Number of live non-neutral units and buildings.
    #[must_use]
    pub fn unit_count(&self) -> u32 {
        let n = self.s.entities.iter().filter(|e| e.owner.is_some()).count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Flow fields computed since this world value was created (diagnostics).
    #[must_use]
    pub const fn flow_fields_computed(&self) -> u64 {
        self.cache.flow.computed
    }

    /// Fault injection for desync tests: changes one entity's hit points (or
    /// the RNG when there are no entities), so the state hash changes and a
    /// section diff names that entity's block. Deterministic in `salt`.
    pub fn perturb(&mut self, salt: u32) {
        let n = self.s.entities.len();
        if n == 0 {
            self.s.rng.next_u32();
            return;
        }
        let i = salt as usize % n;
        let e = &mut self.s.entities[i];
        // Never kills nor revives: toggles between hp and hp-1 (or hp+1 at 1 hp).
        e.hp = if e.hp > 1 { e.hp - 1 } else { e.hp + 1 };
    }

    /// What [`World::perturb`] with this `salt` would change now: the
    /// section, the entity id and the field (`hp`); `None` without entities.
    /// Tests and drills compare a forensics report against it.
    #[must_use]
    pub fn perturb_target(&self, salt: u32) -> Option<(String, u64, &'static str)> {
        let n = self.s.entities.len();
        let e = self.s.entities.get(salt as usize % n.max(1))?;
        Some((crate::hash::section_of(e.id), u64::from(e.id), "hp"))
    }

    /// A readable summary of the state: per-player units by kind, resources, totals.
    #[must_use]
    pub fn summary(&self) -> WorldSummary {
        let mut players: Vec<PlayerSummary> = self
            .s
            .players
            .iter()
            .map(|p| PlayerSummary {
                player: p.id,
                base_alive: p.alive,
                resources: p.resources,
                bases: 0,
                workers: 0,
                soldiers: 0,
                archers: 0,
                trained: p.trained,
                lost: p.lost,
            })
            .collect();
        let mut mines = 0;
        for e in &self.s.entities {
            let Some(owner) = e.owner else {
                mines += 1;
                continue;
            };
            if let Some(ps) = players.get_mut(usize::from(owner.0)) {
                match e.kind {
                    UnitKind::Base => ps.bases += 1,
                    UnitKind::Worker => ps.workers += 1,
                    UnitKind::Soldier => ps.soldiers += 1,
                    UnitKind::Archer => ps.archers += 1,
                    UnitKind::Mine => {}
                }
            }
        }
        WorldSummary {
            tick: self.s.tick,
            last_turn: self.s.last_turn,
            total_units: players
                .iter()
                .map(|p| p.bases + p.workers + p.soldiers + p.archers)
                .sum(),
            players,
            mines,
            outcome: self.s.outcome,
            winner: self.winner(),
            rejected_commands: self.s.rejected.commands,
        }
    }

    pub(crate) fn ticks_per_turn(&self) -> u16 {
        self.s.setup.ticks_per_turn
    }
}

/// One player's line in a [`WorldSummary`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlayerSummary {
    /// The player.
    pub player: PlayerId,
    /// True while the player owns a base.
    pub base_alive: bool,
    /// Spendable resources.
    pub resources: u32,
    /// Bases owned.
    pub bases: u32,
    /// Workers owned.
    pub workers: u32,
    /// Soldiers owned.
    pub soldiers: u32,
    /// Archers owned.
    pub archers: u32,
    /// Units trained so far.
    pub trained: u32,
    /// Units lost so far.
    pub lost: u32,
}

/// A readable summary of a [`World`] (for `replay state` and logs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorldSummary {
    /// Ticks simulated.
    pub tick: u32,
    /// Last turn stepped.
    pub last_turn: Option<Turn>,
    /// Per-player counts.
    pub players: Vec<PlayerSummary>,
    /// All player-owned units and buildings.
    pub total_units: u32,
    /// Mines left.
    pub mines: u32,
    /// How the match ended, if it has.
    pub outcome: Option<Outcome>,
    /// The winner, if the match has one.
    pub winner: Option<PlayerId>,
    /// Commands ignored as hostile or invalid.
    pub rejected_commands: u32,
}

impl fmt::Display for WorldSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let turn = self
            .last_turn
            .map_or_else(|| "-".to_owned(), |t| t.to_string());
        writeln!(
            f,
            "tick {} (turn {turn}): {} units, {} mines, {} rejected commands",
            self.tick, self.total_units, self.mines, self.rejected_commands
        )?;
        for p in &self.players {
            writeln!(
                f,
                "  {}: {} resources, {} bases, {} workers, {} soldiers, {} archers{}",
                p.player,
                p.resources,
                p.bases,
                p.workers,
                p.soldiers,
                p.archers,
                if p.base_alive { "" } else { " (defeated)" }
            )?;
        }
        match self.outcome {
            Some(Outcome::Winner(p)) => writeln!(f, "  winner: {p}"),
            Some(Outcome::Draw) => writeln!(f, "  draw"),
            None => Ok(()),
        }
    }
}

impl Simulation for World {
    type Command = Command;
    const GAME_ID: &'static str = "lockstep-rts";
    const GAME_VERSION: u32 = 1;

    fn new(setup: &MatchSetup) -> Self {
        Self::generate(setup, &MapConfig::standard(setup.players))
    }

    fn rules_hash(&self) -> StateHash {
        crate::hash::rules_hash(self)
    }

    fn step(&mut self, turn: Turn, inputs: &[Stamped<Command>]) {
        self.step_turn(turn, inputs);
    }

    fn state_hash(&self) -> StateHash {
        crate::hash::combine(&self.section_hashes())
    }

    fn section_hashes(&self) -> Vec<SectionHash> {
        crate::hash::world_sections(self)
    }

    fn snapshot(&self) -> Vec<u8> {
        crate::snapshot::encode(&self.s)
    }

    fn restore(bytes: &[u8]) -> Result<Self, SnapshotError> {
        let s = crate::snapshot::decode(bytes)?;
        Ok(Self {
            s,
            cache: Cache::default(),
        })
    }

    fn entity_hashes(&self, section: &str) -> Vec<crate::forensics::EntityHash> {
        super::forensics::entity_hashes(self, section)
    }

    fn entity_fields(&self, section: &str, id: u64) -> Option<Vec<crate::forensics::Field>> {
        super::forensics::entity_fields(self, section, id)
    }
}
