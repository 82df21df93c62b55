//! Prediction culling, the optional part of the contract for speculative
//! views: a game that can step only the part of its world a player looks at
//! implements [`CulledStep`], and a speculative view (`lockstep::peer::
//! CullToArea`) then steps only that part. The authoritative world never
//! culls: only a disposable speculative copy does, and it is re-derived
//! from the confirmed world at every confirmed turn.
//!
//! Why: stepping a whole world of 10,000 engaged units takes milliseconds
//! per turn, so re-deriving a view a few turns ahead of the confirmed one
//! cannot fit a frame; the units on screen are a small share of it.

use crate::contract::{Simulation, Stamped, Turn};
use crate::forensics::EntityHash;

/// A world that can advance only what lies within an area, for a
/// speculative view of that area. Implement it when whole speculative steps
/// do not fit a frame (thousands of units); every other game needs nothing.
pub trait CulledStep: Simulation {
    /// The part of the world a view shows (the reference RTS: a rectangle
    /// of tiles, [`crate::game::TileRect`]).
    type Area: Clone + PartialEq + Send + 'static;

    /// Makes `into` the part of this world a view of `area` needs, reusing
    /// its memory when it holds a world already: the speculative fork.
    /// Everything outside it must be something `step_culled` within `area`
    /// never reads (the reference RTS keeps the units within the area and
    /// its sight range around it, and every building and mine).
    fn fork_within(&self, area: &Self::Area, into: &mut Option<Self>);

    /// Advances by one turn: commands apply as in [`Simulation::step`],
    /// entities within `area` act, the rest wait where they are. The result
    /// is only for showing; it is never hashed against other peers.
    fn step_culled(&mut self, turn: Turn, inputs: &[Stamped<Self::Command>], area: &Self::Area);

    /// The entity hashes of `section` (as [`Simulation::entity_hashes`]
    /// lists them) of the entities within `area` only: what a culled step
    /// computed, for counting the view's corrections. Empty for a section
    /// that is not made of entities.
    fn entity_hashes_within(&self, section: &str, area: &Self::Area) -> Vec<EntityHash>;
}
