//! Deterministic simulation for lockstep RTS networking.
//!
//! This crate owns the contract between a game and the engine
//! ([`Simulation`], [`PlayerId`], [`Turn`], [`StateHash`]) and the reference
//! RTS game every peer, demo and test plays. Determinism is law here: no
//! floats, no hash-map iteration, no clocks, one seeded RNG inside the state.

mod contract;

pub use contract::{
    InputError, MAX_COMMANDS_PER_TURN, MAX_PLAYERS, MatchSetup, PlayerId, SectionHash, Simulation,
    SnapshotError, Stamped, StateHash, Turn, TurnInputs, canonical_order, decode_commands,
    encode_commands,
};
