//! Targeting: army units find the nearest enemy in sight through the spatial
//! grid (ties broken by a fixed mix of the two ids), and far chases aim at
//! coarse tiles so that many chasers share a few flow fields.

use super::super::grid::{Grid, enemies_of};
use super::super::map::{Map, Tile};
use super::super::world::State;

/// Index of the nearest live enemy entity within sight of entity `i`.
/// Neutral entities are never targets. Ties (common in grid formations) go
/// to the lowest `mix(attacker id, target id)`: deterministic, yet not always
/// the enemy with the lowest id, which would systematically favour one side.
pub(crate) fn nearest_enemy(s: &State, grid: &Grid, i: usize) -> Option<usize> {
    let e = &s.entities[i];
    let sight = e.kind.stats().sight;
    let r = sight.to_bits();
    let r2 = r.saturating_mul(r);
    // Only cells holding something of another player can hold a target
    // (each player has its own bit: no id is folded onto another's).
    let enemies = enemies_of(e.owner);
    grid.nearest(e.pos, sight, enemies, |t| {
        if t.owner.is_none() || t.owner == e.owner || !t.alive {
            return None;
        }
        let d = e.pos.dist_sq_bits(t.pos);
        (d <= r2).then(|| (d, mix(e.id, t.id)))
    })
}

/// A cheap integer mix of two ids (Fibonacci hashing of their xor).
fn mix(a: u32, b: u32) -> u32 {
    (a ^ b.rotate_left(16)).wrapping_mul(0x9e37_79b9)
}

/// The flow-field destination used to chase something standing on `t`: the
/// centre of its 4x4 block when walkable, else `t` itself.
pub(crate) fn coarse(map: &Map, t: Tile) -> Tile {
    let c = ((t.0 & !3) + 2, (t.1 & !3) + 2);
    if map.walkable(c) { c } else { t }
}
