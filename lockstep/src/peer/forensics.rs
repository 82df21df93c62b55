//! What a peer keeps to answer desync forensics: snapshots of its world
//! after each of the last few turns (bounded: [`PeerBuilder::with_forensics_history`](super::PeerBuilder::with_forensics_history)),
//! and the answers built from them.

use crate::proto::EntityDump;
use crate::session::{ForensicsAnswer, ForensicsRequest};
use sim::{Simulation, Turn};
use std::collections::VecDeque;

/// Turns of world snapshots a peer keeps for forensics unless
/// [`PeerBuilder::with_forensics_history`](super::PeerBuilder::with_forensics_history) says otherwise.
pub const FORENSICS_HISTORY: usize = 64;

/// Snapshots of the world after each of the last `keep` turns, oldest first.
#[derive(Debug)]
pub(super) struct History {
    keep: usize,
    turns: VecDeque<(Turn, Vec<u8>)>,
}

impl History {
    pub(super) const fn new(keep: usize) -> Self {
        Self {
            keep,
            turns: VecDeque::new(),
        }
    }

    /// Keeps the world as it is after `turn` (nothing when `keep` is 0).
    pub(super) fn record<S: Simulation>(&mut self, turn: Turn, world: &S) {
        if self.keep == 0 {
            return;
        }
        while self.turns.len() >= self.keep {
            self.turns.pop_front();
        }
        self.turns.push_back((turn, world.snapshot()));
    }

    /// The answer to `request` from the world kept for its turn; an empty
    /// answer when that turn is no longer (or never was) kept.
    pub(super) fn answer<S: Simulation>(&self, request: &ForensicsRequest) -> ForensicsAnswer {
        let world = self
            .turns
            .iter()
            .find(|(t, _)| *t == request.turn())
            .and_then(|(_, bytes)| S::restore(bytes).ok());
        match request {
            ForensicsRequest::EntityHashes { section, .. } => ForensicsAnswer::EntityHashes(
                world.map(|w| w.entity_hashes(section)).unwrap_or_default(),
            ),
            ForensicsRequest::EntityDumps { section, ids, .. } => ForensicsAnswer::EntityDumps(
                world
                    .map(|w| {
                        ids.iter()
                            .map(|&id| EntityDump {
                                id,
                                fields: w.entity_fields(section, id).unwrap_or_default(),
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
            ),
        }
    }
}
