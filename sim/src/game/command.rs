//! The commands a player sends, and the limits beyond which one is hostile.

use super::UnitKind;
use serde::{Deserialize, Serialize};

/// Most unit ids one command may name; a longer list is rejected whole.
pub const MAX_UNITS_PER_COMMAND: usize = 256;

/// Most commands with a new destination (`Move`, `AttackMove`, `Build`) one
/// player may give in one turn: each may need a new flow field, so this caps
/// the path-finding work a hostile player can cause.
pub const MAX_PATH_COMMANDS_PER_TURN: usize = 4;

/// Most units one `Train` command may queue.
pub const MAX_TRAIN_COUNT: u8 = 5;

/// A player's order for this turn. Unit ids are the world's `u32` entity ids.
///
/// Every command is validated when applied: naming units the player does not
/// own, dead or unknown ids, targets outside the map or absurd counts makes
/// the world ignore (that part of) the command and count it, identically on
/// every peer.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Command {
    /// Walk to tile `(x, y)`, ignoring enemies; units spread into a formation around it.
    Move {
        /// The units to move.
        units: Vec<u32>,
        /// Target tile column.
        x: u16,
        /// Target tile row.
        y: u16,
    },
    /// Walk to tile `(x, y)`, fighting any enemy met on the way.
    AttackMove {
        /// The units to move.
        units: Vec<u32>,
        /// Target tile column.
        x: u16,
        /// Target tile row.
        y: u16,
    },
    /// Attack one enemy entity until it dies.
    Attack {
        /// The attackers.
        units: Vec<u32>,
        /// The entity to attack.
        target: u32,
    },
    /// Drop whatever the units are doing.
    Stop {
        /// The units to stop.
        units: Vec<u32>,
    },
    /// Workers gather from a mine and carry the resources to the nearest own base.
    Gather {
        /// The workers.
        units: Vec<u32>,
        /// The mine entity.
        mine: u32,
    },
    /// Queue `count` units of `kind` at one of the player's bases (paid up front).
    Train {
        /// The base that trains.
        base: u32,
        /// What to train (worker, soldier or archer).
        kind: UnitKind,
        /// How many (1 to [`MAX_TRAIN_COUNT`]).
        count: u8,
    },
    /// A worker walks to tile `(x, y)` and builds a new base there (paid on arrival).
    Build {
        /// The builder.
        worker: u32,
        /// Site column.
        x: u16,
        /// Site row.
        y: u16,
    },
}
