//! Desync forensics at the session level: the relay's requests for a
//! section's entity hashes or for entity dumps become an
//! [`Event::Forensics`](crate::event::Event::Forensics); the game answers
//! from the state it kept for that turn with [`Session::answer_forensics`].

use super::Session;
use crate::proto::{EntityDump, MAX_DUMP_ENTITIES, MAX_ENTITY_HASHES, ToRelay, bounded_fields};
use sim::Turn;
use sim::forensics::EntityHash;

/// What the relay asks about a desynced turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ForensicsRequest {
    /// The entity hashes of `section` after `turn` (`Simulation::entity_hashes`).
    EntityHashes {
        /// The desynced turn.
        turn: Turn,
        /// The section.
        section: String,
    },
    /// The canonical dumps of entities `ids` of `section` after `turn`
    /// (`Simulation::entity_fields`).
    EntityDumps {
        /// The desynced turn.
        turn: Turn,
        /// The section.
        section: String,
        /// The entities.
        ids: Vec<u64>,
    },
}

impl ForensicsRequest {
    /// The turn asked about.
    #[must_use]
    pub const fn turn(&self) -> Turn {
        match self {
            Self::EntityHashes { turn, .. } | Self::EntityDumps { turn, .. } => *turn,
        }
    }
}

/// A game's answer to a [`ForensicsRequest`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ForensicsAnswer {
    /// The section's entity hashes, sorted by id (empty: the turn is no longer kept).
    EntityHashes(Vec<EntityHash>),
    /// The asked entities' dumps (empty: the turn is no longer kept).
    EntityDumps(Vec<EntityDump>),
}

impl Session {
    /// Answers a [`ForensicsRequest`] (from [`Event::Forensics`](crate::event::Event::Forensics)).
    /// Answers are cut to the protocol's bounds so they always fit one
    /// message; the relay checks them against the hashes it has.
    pub fn answer_forensics(&mut self, request: &ForensicsRequest, answer: ForensicsAnswer) {
        let msg = match (request, answer) {
            (
                ForensicsRequest::EntityHashes { turn, section },
                ForensicsAnswer::EntityHashes(mut e),
            ) => {
                e.truncate(MAX_ENTITY_HASHES);
                ToRelay::EntityHashes {
                    turn: *turn,
                    section: section.clone(),
                    entities: e,
                }
            }
            (
                ForensicsRequest::EntityDumps { turn, section, .. },
                ForensicsAnswer::EntityDumps(mut d),
            ) => {
                d.truncate(MAX_DUMP_ENTITIES);
                for dump in &mut d {
                    dump.fields = bounded_fields(std::mem::take(&mut dump.fields));
                }
                ToRelay::EntityDumps {
                    turn: *turn,
                    section: section.clone(),
                    dumps: d,
                }
            }
            // An answer of the other kind answers nothing.
            _ => return,
        };
        self.send(&msg);
    }
}
