//! The commands a player sends for their ship, and the limits beyond which
//! one is hostile (clamped or ignored, and counted).

use serde::{Deserialize, Serialize};

/// Highest thrust level; larger values are clamped to it (and counted).
pub const MAX_POWER: u8 = 4;

/// Fastest turn, in headings per tick (a heading is 1/[`crate::arena::HEADINGS`]
/// of a full turn); larger rates are clamped to it (and counted).
pub const MAX_TURN_RATE: i8 = 4;

/// Most commands one player's ship obeys in one turn; further ones are
/// ignored and counted (a ship needs at most five: one of each kind).
pub const MAX_COMMANDS_PER_TURN: u16 = 8;

/// A player's order to their ship for this turn.
///
/// `Thrust` and `Turn` set controls that stay in force until changed (so a
/// player whose input is lost keeps flying the same way); `Brake` and `Fire`
/// hold for the ticks of this turn only; `Boost` is a one-off impulse. A
/// command from a player not in the match, for a destroyed ship, or beyond
/// [`MAX_COMMANDS_PER_TURN`] is ignored; out-of-range values are clamped;
/// both are counted in [`crate::arena::Arena::rejected`] identically on every peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Command {
    /// Engine power from 0 (off) to [`MAX_POWER`] (full), along the heading.
    Thrust {
        /// Power level; clamped to [`MAX_POWER`].
        power: u8,
    },
    /// Turn rate in headings per tick: negative turns left (counter-clockwise
    /// on screen), positive right; clamped to ±[`MAX_TURN_RATE`].
    Turn {
        /// Headings per tick.
        rate: i8,
    },
    /// Brake hard during this turn's ticks.
    Brake,
    /// Hold the trigger during this turn's ticks: fires whenever the gun is
    /// cooled down.
    Fire,
    /// A burst of speed along the heading, if the boost has recharged.
    Boost,
}
