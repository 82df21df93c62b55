//! The reference RTS started from a ready-made scenario instead of the
//! standard map, as a game of its own: generic peers build its world from
//! the match setup like any game's, so a benchmark can play a networked
//! match of a large world (the standard map's bot matches stay at a few
//! hundred units).

use sim::forensics::{EntityHash, Field};
use sim::game::{Command, World};
use sim::{
    Agent, MatchSetup, PlayerId, SectionHash, Simulation, SnapshotError, Stamped, StateHash, Turn,
};
use std::marker::PhantomData;

/// Where a [`Scenario`] starts.
pub trait Start: 'static {
    /// The game id its matches carry.
    const GAME_ID: &'static str;
    /// The world at the start of turn 0.
    fn world(setup: &MatchSetup) -> World;
}

/// The reference game's world, started from `T`.
#[derive(Debug)]
pub struct Scenario<T>(pub World, PhantomData<fn() -> T>);

impl<T> Clone for Scenario<T> {
    fn clone(&self) -> Self {
        Self(self.0.clone(), PhantomData)
    }
}

impl<T: Start> Simulation for Scenario<T> {
    type Command = Command;
    const GAME_ID: &'static str = T::GAME_ID;
    const GAME_VERSION: u32 = World::GAME_VERSION;

    fn new(setup: &MatchSetup) -> Self {
        Self(T::world(setup), PhantomData)
    }
    fn rules_hash(&self) -> StateHash {
        self.0.rules_hash()
    }
    fn step(&mut self, turn: Turn, inputs: &[Stamped<Command>]) {
        self.0.step(turn, inputs);
    }
    fn state_hash(&self) -> StateHash {
        self.0.state_hash()
    }
    fn section_hashes(&self) -> Vec<SectionHash> {
        self.0.section_hashes()
    }
    fn snapshot(&self) -> Vec<u8> {
        self.0.snapshot()
    }
    fn restore(bytes: &[u8]) -> Result<Self, SnapshotError> {
        World::restore(bytes).map(|w| Self(w, PhantomData))
    }
    fn entity_hashes(&self, section: &str) -> Vec<EntityHash> {
        self.0.entity_hashes(section)
    }
    fn entity_fields(&self, section: &str, id: u64) -> Option<Vec<Field>> {
        self.0.entity_fields(section, id)
    }
}

/// The reference game's bot, playing a [`Scenario`].
pub struct ScenarioBot<T>(sim::bot::Bot, PhantomData<fn() -> T>);

impl<T> ScenarioBot<T> {
    /// The bot for `player` at `apm` actions a minute.
    #[must_use]
    pub fn new(player: PlayerId, seed: u64, apm: u32) -> Self {
        Self(sim::bot::Bot::new(player, seed, apm), PhantomData)
    }
}

impl<T: Start> Agent<Scenario<T>> for ScenarioBot<T> {
    fn player(&self) -> PlayerId {
        Agent::<World>::player(&self.0)
    }
    fn think(&mut self, world: &Scenario<T>, turn: Turn) -> Vec<Command> {
        Agent::<World>::think(&mut self.0, &world.0, turn)
    }
}
