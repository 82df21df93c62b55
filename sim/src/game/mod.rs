//! The reference RTS game: a tile map with obstacles and mines, players with
//! bases and resources, workers / soldiers / archers, and the commands that
//! drive them. [`World`] implements [`crate::Simulation`].

mod command;
mod culling;
mod flow;
mod forensics;
mod grid;
pub mod map;
mod step;
mod systems;
pub(crate) mod world;

pub use command::{Command, MAX_PATH_COMMANDS_PER_TURN, MAX_TRAIN_COUNT, MAX_UNITS_PER_COMMAND};
pub use culling::TileRect;
pub use map::{Map, MapConfig, Tile};
pub use world::{
    Entity, Order, Outcome, PlayerState, PlayerSummary, RejectStats, World, WorldSummary,
};

use crate::num::{Fx, fx_int, fx_ratio};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Simulation ticks per lockstep turn unless the match says otherwise
/// (a 100 ms turn at 20 ticks per second).
pub const DEFAULT_TICKS_PER_TURN: u16 = 2;

/// Game time one tick stands for, in milliseconds (used by bots to pace their APM).
pub const TICK_MS: u32 = 50;

/// Resources each player starts with.
pub const START_RESOURCES: u32 = 300;

/// Most units (buildings excluded) a player may own; training waits beyond it.
pub const POPULATION_CAP: u32 = 300;

/// What an entity is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum UnitKind {
    /// Gathers resources and builds bases; fights weakly.
    Worker,
    /// Melee infantry.
    Soldier,
    /// Ranged infantry.
    Archer,
    /// A player's base: trains units, receives resources; losing all of them loses the game.
    Base,
    /// A neutral resource node workers gather from.
    Mine,
}

/// The fixed statistics of a [`UnitKind`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stats {
    /// Starting and maximum hit points.
    pub hp: i32,
    /// Distance moved per tick (tiles); zero for buildings.
    pub speed: Fx,
    /// Attack reach, centre to centre (tiles); zero when it cannot attack.
    pub range: Fx,
    /// Damage per hit before the small random bonus.
    pub damage: i32,
    /// Ticks between two attacks.
    pub cooldown: u16,
    /// How far the unit notices enemies (tiles).
    pub sight: Fx,
    /// Resource cost to train or build.
    pub cost: u32,
    /// Ticks a base needs to train one.
    pub train_ticks: u16,
    /// Body radius used by separation (tiles).
    pub radius: Fx,
}

const WORKER: Stats = Stats {
    hp: 40,
    speed: fx_ratio(1, 10),
    range: fx_ratio(9, 10),
    damage: 4,
    cooldown: 16,
    sight: fx_int(5),
    cost: 50,
    train_ticks: 40,
    radius: fx_ratio(3, 10),
};
const SOLDIER: Stats = Stats {
    hp: 120,
    speed: fx_ratio(1, 10),
    range: fx_ratio(9, 10),
    damage: 10,
    cooldown: 12,
    sight: fx_int(6),
    cost: 75,
    train_ticks: 50,
    radius: fx_ratio(35, 100),
};
const ARCHER: Stats = Stats {
    hp: 70,
    speed: fx_ratio(9, 100),
    range: fx_int(4),
    damage: 8,
    cooldown: 18,
    sight: fx_int(7),
    cost: 90,
    train_ticks: 60,
    radius: fx_ratio(3, 10),
};
const BASE: Stats = Stats {
    hp: 1200,
    speed: Fx::ZERO,
    range: Fx::ZERO,
    damage: 0,
    cooldown: 0,
    sight: fx_int(8),
    cost: 400,
    train_ticks: 0,
    radius: fx_ratio(3, 2),
};
const MINE: Stats = Stats {
    hp: 1,
    speed: Fx::ZERO,
    range: Fx::ZERO,
    damage: 0,
    cooldown: 0,
    sight: Fx::ZERO,
    cost: 0,
    train_ticks: 0,
    radius: fx_int(1),
};

impl UnitKind {
    /// All kinds, in declaration order.
    pub const ALL: [Self; 5] = [
        Self::Worker,
        Self::Soldier,
        Self::Archer,
        Self::Base,
        Self::Mine,
    ];

    /// The kind's fixed statistics.
    #[must_use]
    pub const fn stats(self) -> &'static Stats {
        match self {
            Self::Worker => &WORKER,
            Self::Soldier => &SOLDIER,
            Self::Archer => &ARCHER,
            Self::Base => &BASE,
            Self::Mine => &MINE,
        }
    }

    /// True for units that move (workers, soldiers, archers).
    #[must_use]
    pub const fn is_mobile(self) -> bool {
        matches!(self, Self::Worker | Self::Soldier | Self::Archer)
    }

    /// True for what a base can train.
    #[must_use]
    pub const fn is_trainable(self) -> bool {
        self.is_mobile()
    }

    /// True for fighters that look for enemies on their own.
    #[must_use]
    pub const fn is_army(self) -> bool {
        matches!(self, Self::Soldier | Self::Archer)
    }
}

impl fmt::Display for UnitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Worker => "worker",
            Self::Soldier => "soldier",
            Self::Archer => "archer",
            Self::Base => "base",
            Self::Mine => "mine",
        })
    }
}

/// Resources one worker trip carries.
pub const CARRY: u32 = 10;
/// Ticks a worker spends at a mine to fill up.
pub const GATHER_TICKS: u16 = 14;
/// Resources a fresh mine holds.
pub const MINE_AMOUNT: u32 = 1500;
/// Most entries in a base's training queue.
pub const MAX_QUEUE: usize = 5;

#[cfg(test)]
mod tests;
