//! The second game: a 2–8 player space arena (`GAME_ID = "arena"`).
//!
//! Ships with inertia thrust, turn, brake and boost inside a walled square
//! arena strewn with round rocks; they fire projectiles that travel, hit the
//! first ship or rock on their path, and deal damage. A destroyed ship
//! respawns after a delay at a seeded spawn point; pickups (health, rapid
//! fire, shield) appear at seeded places and times. Each kill scores a point;
//! the first player to the score limit wins (or the best score at the turn
//! limit).
//!
//! This module is written like a game outside the workspace would be: it
//! uses only public items of `sim` (the [`crate::Simulation`] contract, the
//! [`crate::num`] fixed-point toolkit, [`crate::rng::Pcg32`] and the
//! [`crate::hash`] helpers), never the reference game's internals.
//!
//! ```
//! use sim::arena::{self, Arena};
//! use sim::{MatchSetup, Simulation, Turn};
//!
//! let setup = MatchSetup { seed: 3, players: 2, ticks_per_turn: arena::DEFAULT_TICKS_PER_TURN };
//! let mut world = Arena::new(&setup);
//! let mut bots = arena::bots(&world, 3, arena::BOT_APM);
//! for t in 0..50 {
//!     let inputs = arena::bot_inputs(&world, &mut bots, Turn(t));
//!     world.step(Turn(t), &inputs);
//! }
//! let restored = Arena::restore(&world.snapshot()).unwrap();
//! assert_eq!(restored.state_hash(), world.state_hash());
//! ```

mod bot;
mod codec;
mod command;
mod forensics;
mod geom;
mod map;
mod step;
mod world;

pub use bot::{BOT_APM, Bot, bot_inputs, bots};
pub use command::{Command, MAX_COMMANDS_PER_TURN, MAX_POWER, MAX_TURN_RATE};
pub use geom::{HEADINGS, heading_delta, heading_towards, heading_vector};
pub use map::{ArenaMap, Obstacle};
pub use world::{
    Arena, ArenaConfig, ArenaSummary, Outcome, Pickup, PickupKind, Projectile, RejectStats, Ship,
};

use crate::num::{Fx, fx_int, fx_ratio};

/// Ticks per lockstep turn unless the match says otherwise (100 ms turns at 20 ticks/s).
pub const DEFAULT_TICKS_PER_TURN: u16 = 2;

/// Game time one tick stands for, in milliseconds (bots pace their APM with it).
pub const TICK_MS: u32 = 50;

/// Radius of a ship's hull (tiles).
pub const SHIP_RADIUS: Fx = fx_ratio(3, 5);
/// Hit points of a fresh ship.
pub const SHIP_HP: u16 = 100;
/// Most shield points a ship can hold; the shield absorbs damage before the hull.
pub const MAX_SHIELD: u16 = 100;
/// Velocity gained per tick at full thrust (tiles/tick²).
pub const THRUST_ACCEL: Fx = fx_ratio(1, 40);
/// Cruising speed cap (tiles/tick); faster ships (after a boost) slow down to it.
pub const MAX_SPEED: Fx = fx_ratio(7, 20);
/// Absolute speed cap, reached only by boosting.
pub const BOOST_MAX_SPEED: Fx = fx_ratio(4, 5);
/// Velocity added by a boost along the heading.
pub const BOOST_IMPULSE: Fx = fx_ratio(2, 5);
/// Ticks before a ship may boost again.
pub const BOOST_COOLDOWN: u16 = 80;
/// Drag per tick: velocity is multiplied by `DRAG.0 / DRAG.1`.
pub const DRAG: (i64, i64) = (127, 128);
/// Braking per tick: velocity is multiplied by `BRAKE.0 / BRAKE.1`.
pub const BRAKE: (i64, i64) = (7, 8);
/// Projectile speed relative to the firing ship (tiles/tick); it inherits the ship's velocity.
pub const PROJECTILE_SPEED: Fx = fx_ratio(4, 5);
/// Ticks a projectile flies before it fizzles.
pub const PROJECTILE_TTL: u16 = 30;
/// Radius of a projectile (tiles).
pub const PROJECTILE_RADIUS: Fx = fx_ratio(3, 20);
/// Hull damage of one hit.
pub const PROJECTILE_DAMAGE: u16 = 20;
/// Ticks between two shots.
pub const FIRE_COOLDOWN: u16 = 8;
/// Ticks between two shots under rapid fire.
pub const RAPID_FIRE_COOLDOWN: u16 = 4;
/// Ticks a destroyed ship waits before it respawns.
pub const RESPAWN_TICKS: u16 = 60;
/// Shield points a ship respawns with (spawn protection).
pub const SPAWN_SHIELD: u16 = 40;
/// Radius within which a ship collects a pickup (centre to centre, tiles).
pub const PICKUP_REACH: Fx = fx_int(1);
/// Hull points a health pickup restores (up to [`SHIP_HP`]).
pub const HEALTH_BONUS: u16 = 50;
/// Shield points a shield pickup adds (up to [`MAX_SHIELD`]).
pub const SHIELD_BONUS: u16 = 60;
/// Ticks of rapid fire a rapid-fire pickup gives.
pub const RAPID_FIRE_TICKS: u16 = 200;
/// Fewest and most ticks between two pickup spawns.
pub const PICKUP_GAP: (u32, u32) = (40, 120);

#[cfg(test)]
mod tests;
