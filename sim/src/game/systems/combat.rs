//! Targeting: army units find the nearest enemy in sight through the spatial
//! grid (ties broken by lower id), and far chases aim at coarse tiles so that
//! many chasers share a few flow fields.

use super::super::grid::Grid;
use super::super::map::{Map, Tile};
use super::super::world::State;

/// Index of the nearest live enemy entity within sight of entity `i`
/// (ties: lower id). Neutral entities are never targets.
pub(crate) fn nearest_enemy(s: &State, grid: &Grid, i: usize) -> Option<usize> {
    let e = &s.entities[i];
    let sight = e.kind.stats().sight;
    let r = sight.to_bits();
    let r2 = r.saturating_mul(r);
    let mut best: Option<(i64, u32, usize)> = None;
    grid.query(e.pos, sight, |j| {
        let t = &s.entities[j];
        if t.owner.is_some() && t.owner != e.owner && t.alive() {
            let d = e.pos.dist_sq_bits(t.pos);
            if d <= r2 && best.is_none_or(|(bd, bid, _)| (d, t.id) < (bd, bid)) {
                best = Some((d, t.id, j));
            }
        }
        true
    });
    best.map(|(_, _, j)| j)
}

/// The flow-field destination used to chase something standing on `t`: the
/// centre of its 4x4 block when walkable, else `t` itself.
pub(crate) fn coarse(map: &Map, t: Tile) -> Tile {
    let c = ((t.0 & !3) + 2, (t.1 & !3) + 2);
    if map.walkable(c) { c } else { t }
}
