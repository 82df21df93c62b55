//! Deterministic simulation for lockstep RTS networking.
//!
//! This crate owns the contract between a game and the engine
//! ([`Simulation`], [`PlayerId`], [`Turn`], [`StateHash`]) and the reference
//! RTS game every peer, demo and test plays ([`game::World`]), plus a second
//! game of another kind written against the public API only, a space arena
//! ([`arena::Arena`]). Determinism is law here: no floats, no hash-map
//! iteration, no clocks, one seeded RNG inside the state.
//!
//! A peer's main loop, in miniature:
//!
//! ```
//! use sim::game::{Command, World, DEFAULT_TICKS_PER_TURN};
//! use sim::{MatchSetup, PlayerId, Simulation, Stamped, Turn};
//!
//! let setup = MatchSetup { seed: 7, players: 2, ticks_per_turn: DEFAULT_TICKS_PER_TURN };
//! let mut a = World::new(&setup);
//! let mut b = World::new(&setup);
//! let mut bots = sim::scenarios::bots(&a, 7, 300);
//! for t in 0..20 {
//!     let turn = Turn(t);
//!     // Every peer gets the same relay-stamped entries for a turn...
//!     let mut entries: Vec<(PlayerId, Vec<u8>)> = Vec::new();
//!     for bot in &mut bots {
//!         let mut bytes = Vec::new();
//!         sim::encode_commands(&bot.think(&a, turn), &mut bytes);
//!         entries.push((bot.player(), bytes));
//!     }
//!     // ...and decodes them the one canonical way.
//!     let mut inputs: Vec<Stamped<Command>> = sim::decode_turn(&entries, setup.players).commands;
//!     // A world applies commands in canonical order, whatever order it gets...
//!     a.step(turn, &inputs);
//!     inputs.reverse();
//!     b.step(turn, &inputs);
//!     // ...and must reach the same state hash.
//!     assert_eq!(a.state_hash(), b.state_hash());
//! }
//! let restored = World::restore(&a.snapshot()).unwrap();
//! assert_eq!(restored.state_hash(), a.state_hash());
//! ```

mod agent;
pub mod arena;
pub mod bot;
pub mod check;
mod contract;
pub mod culling;
mod decoded_turn;
pub mod forensics;
pub mod game;
pub mod hash;
#[doc = include_str!("../docs/manual.md")]
pub mod manual {}
pub mod num;
pub mod rng;
pub mod scenarios;
pub mod snapshot;

pub use agent::{Agent, agent_inputs};
pub use contract::{
    InputError, MAX_COMMANDS_PER_TURN, MAX_PLAYERS, MatchSetup, PlayerId, SectionHash, Simulation,
    SnapshotError, Stamped, StateHash, Turn, TurnInputs, canonical_order, decode_commands,
    encode_commands, rules_fingerprint,
};
pub use decoded_turn::{DecodedTurn, decode_turn};
