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

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests {
    use super::*;
    use sim::game::World;

    /// Answers come from the world as it was after the asked turn; a turn
    /// beyond the history (or never kept) gets an empty answer.
    #[test]
    fn answers_from_the_kept_turn_and_forgets_beyond_the_bound() {
        let mut w = sim::scenarios::skirmish(3);
        let mut h = History::new(2);
        let mut kept = Vec::new();
        for t in 0..3 {
            w.step(Turn(t), &[]);
            h.record(Turn(t), &w);
            kept.push(w.clone());
        }
        let section = "entities 0..1024".to_owned();
        let ask = |turn| ForensicsRequest::EntityHashes {
            turn: Turn(turn),
            section: section.clone(),
        };
        assert_eq!(
            h.answer::<World>(&ask(1)),
            ForensicsAnswer::EntityHashes(kept[1].entity_hashes(&section))
        );
        assert_eq!(
            h.answer::<World>(&ask(0)),
            ForensicsAnswer::EntityHashes(Vec::new())
        );
        assert_eq!(
            h.answer::<World>(&ask(9)),
            ForensicsAnswer::EntityHashes(Vec::new())
        );
        let id = kept[2].entity_hashes(&section)[0].id;
        let dumps = h.answer::<World>(&ForensicsRequest::EntityDumps {
            turn: Turn(2),
            section: section.clone(),
            ids: vec![id, 999_999],
        });
        let ForensicsAnswer::EntityDumps(d) = dumps else {
            panic!("dumps expected");
        };
        assert_eq!(d.len(), 2);
        assert_eq!(
            Some(d[0].fields.clone()),
            kept[2].entity_fields(&section, id)
        );
        assert!(d[1].fields.is_empty(), "no such entity: no fields");
        // Nothing kept at all.
        let mut none = History::new(0);
        none.record(Turn(0), &w);
        assert_eq!(
            none.answer::<World>(&ask(0)),
            ForensicsAnswer::EntityHashes(Vec::new())
        );
    }
}
