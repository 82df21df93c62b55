//! SyncTest-style determinism self-check (after GGRS's sync test session):
//! keep the last N turns' snapshots and inputs, restore from N turns back,
//! re-simulate, and require the very same hashes. A mismatch means the game
//! is not deterministic (hidden state, iteration order, uninitialised data)
//! and names the sections that differ.

use crate::contract::{Simulation, SnapshotError, Stamped, StateHash, Turn};
use crate::hash::diff_sections;
use std::collections::VecDeque;

/// What a failed check found.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SyncError {
    /// Re-simulating a turn gave another hash than the first run.
    #[error(
        "turn {turn}: re-simulation gave {actual:?}, first run {expected:?}; sections {sections:?}"
    )]
    Mismatch {
        /// The turn whose hash differs.
        turn: Turn,
        /// Hash of the first run.
        expected: StateHash,
        /// Hash of the re-simulation.
        actual: StateHash,
        /// Sections that differ.
        sections: Vec<String>,
    },
    /// A snapshot taken by the game could not be restored.
    #[error("turn {turn}: snapshot does not restore: {error}")]
    Restore {
        /// The turn before which the snapshot was taken.
        turn: Turn,
        /// Why.
        error: SnapshotError,
    },
    /// Restoring a snapshot did not give the hash the world had when it was taken.
    #[error("turn {turn}: restored snapshot hashes to {actual:?}, not {expected:?}")]
    RestoreHash {
        /// The turn before which the snapshot was taken.
        turn: Turn,
        /// Hash of the world when snapshotted.
        expected: StateHash,
        /// Hash of the restored world.
        actual: StateHash,
    },
}

struct Record<C> {
    turn: Turn,
    before: Vec<u8>,
    before_hash: StateHash,
    inputs: Vec<Stamped<C>>,
    after_hash: StateHash,
    after_sections: Vec<crate::contract::SectionHash>,
}

/// Rolling re-simulation checker a peer or test feeds turn by turn.
pub struct SyncChecker<S: Simulation> {
    distance: usize,
    history: VecDeque<Record<S::Command>>,
    /// Turns re-simulated so far.
    resimulated: u64,
}

impl<S: Simulation> SyncChecker<S> {
    /// A checker that re-simulates the last `distance` turns (at least 1).
    #[must_use]
    pub fn new(distance: u32) -> Self {
        Self {
            distance: distance.max(1) as usize,
            history: VecDeque::new(),
            resimulated: 0,
        }
    }

    /// Steps `world` through `turn` with `inputs`, remembering what is needed
    /// to re-simulate it later.
    pub fn step(&mut self, world: &mut S, turn: Turn, inputs: &[Stamped<S::Command>]) {
        let before = world.snapshot();
        let before_hash = world.state_hash();
        world.step(turn, inputs);
        self.history.push_back(Record {
            turn,
            before,
            before_hash,
            inputs: inputs.to_vec(),
            after_hash: world.state_hash(),
            after_sections: world.section_hashes(),
        });
        while self.history.len() > self.distance {
            self.history.pop_front();
        }
    }

    /// Restores the oldest remembered snapshot and re-simulates every
    /// remembered turn, comparing hashes. Returns the number of turns checked.
    pub fn check(&mut self) -> Result<u32, SyncError> {
        let Some(first) = self.history.front() else {
            return Ok(0);
        };
        let mut world = S::restore(&first.before).map_err(|error| SyncError::Restore {
            turn: first.turn,
            error,
        })?;
        let h = world.state_hash();
        if h != first.before_hash {
            return Err(SyncError::RestoreHash {
                turn: first.turn,
                expected: first.before_hash,
                actual: h,
            });
        }
        for r in &self.history {
            world.step(r.turn, &r.inputs);
            let h = world.state_hash();
            if h != r.after_hash {
                return Err(SyncError::Mismatch {
                    turn: r.turn,
                    expected: r.after_hash,
                    actual: h,
                    sections: diff_sections(&r.after_sections, &world.section_hashes()),
                });
            }
            self.resimulated += 1;
        }
        Ok(u32::try_from(self.history.len()).unwrap_or(u32::MAX))
    }

    /// Turns re-simulated so far.
    #[must_use]
    pub const fn resimulated(&self) -> u64 {
        self.resimulated
    }
}

/// Runs `world` through `turns` (turn number and inputs each), and after
/// every turn re-simulates the last `distance` turns from a restored
/// snapshot, requiring identical hashes. Returns the per-turn hashes.
pub fn sync_test<S: Simulation>(
    world: &mut S,
    turns: &[(Turn, Vec<Stamped<S::Command>>)],
    distance: u32,
) -> Result<Vec<StateHash>, SyncError> {
    let mut checker = SyncChecker::<S>::new(distance);
    let mut hashes = Vec::with_capacity(turns.len());
    for (turn, inputs) in turns {
        checker.step(world, *turn, inputs);
        checker.check()?;
        hashes.push(world.state_hash());
    }
    Ok(hashes)
}
