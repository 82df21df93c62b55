//! Movement: steering along flow fields (or straight when the way ahead is
//! clear and downhill), sliding along rock, and separation so units do not
//! stack. Everything is integer fixed-point; no square roots in separation.

use super::super::culling::TileRect;
use super::super::flow::{FlowCache, UNREACHABLE};
use super::super::grid::{Body, Grid};
use super::super::map::Map;
use super::super::world::{Entity, State};
use super::Goal;
use crate::num::{Fx, Vec2, fx_int, fx_ratio, mul_div};

/// The largest body radius of any mobile unit (bounds the separation query).
const MAX_RADIUS: Fx = fx_ratio(35, 100);
/// Largest separation push per tick (tiles).
const MAX_PUSH: Fx = fx_ratio(8, 100);
/// Neighbours considered per unit per tick (bounds the cost in dense crowds).
const MAX_NEIGHBOURS: u32 = 16;

/// The unit's position after one tick of walking towards `goal` at `speed`.
pub(crate) fn steer(map: &Map, flow: &FlowCache, pos: Vec2, goal: Goal, speed: Fx) -> Vec2 {
    let aim = match goal {
        Goal::None => return pos,
        Goal::Point(p) => p,
        Goal::Field { dest, point } => {
            let here_tile = pos.tile();
            match flow.get(dest) {
                Some(f) if here_tile != dest => {
                    let here = f.dist(map, here_tile);
                    let ahead = pos.step_towards(point, fx_int(1)).tile();
                    let straight_ok = here != UNREACHABLE
                        && ahead != here_tile
                        && map.walkable(ahead)
                        && f.dist(map, ahead) < here;
                    if straight_ok || here == UNREACHABLE {
                        point
                    } else {
                        f.next(map, here_tile)
                            .map_or(point, |n| Vec2::tile_center(n.0, n.1))
                    }
                }
                _ => point,
            }
        }
    };
    slide(map, pos, pos.step_towards(aim, speed))
}

/// True when every tile the segment `a`-`b` passes over (sampled every
/// quarter tile) is walkable.
pub(crate) fn clear_line(map: &Map, a: Vec2, b: Vec2) -> bool {
    let d = b - a;
    let len = d.length().to_bits();
    let quarter = crate::num::ONE_BITS / 4;
    let steps = (len / quarter).clamp(1, 256);
    (0..=steps).all(|k| {
        let p = Vec2::from_bits(
            a.x.to_bits() + d.x.to_bits() * k / steps,
            a.y.to_bits() + d.y.to_bits() * k / steps,
        );
        map.walkable_point(p)
    })
}

/// `to` if walkable; else the walkable axis-aligned part of the move; else `from`.
fn slide(map: &Map, from: Vec2, to: Vec2) -> Vec2 {
    if map.walkable_point(to) {
        return to;
    }
    let xo = Vec2::new(to.x, from.y);
    if map.walkable_point(xo) {
        return xo;
    }
    let yo = Vec2::new(from.x, to.y);
    if map.walkable_point(yo) {
        return yo;
    }
    from
}

/// Pushes overlapping mobile units apart. Pushes are computed from the
/// positions at the start of the pass and applied afterwards, so the result
/// does not depend on iteration order. With an `area`, only the units
/// inside it are pushed (prediction culling).
pub(crate) fn separate(s: &mut State, grid: &Grid, area: Option<&TileRect>) {
    let mut pushes: Vec<(usize, Vec2)> = Vec::new();
    let mut scratch = Vec::new();
    for (i, e) in s.entities.iter().enumerate() {
        if !e.kind.is_mobile() || !e.alive() || area.is_some_and(|a| !a.holds(e.pos)) {
            continue;
        }
        let reach = e.kind.stats().radius + MAX_RADIUS;
        // The rule: the push from the first MAX_NEIGHBOURS overlapping units
        // in block order. Pushes add up, so when no more than that many
        // overlap, any order gives the same sum: take them from the fine
        // cells, and visit in block order only past the cap.
        let mut push = Vec2::ZERO;
        let mut seen = 0u32;
        grid.query(e.pos, reach, |o| {
            if let Some(p) = push_from(e, i, o) {
                seen += 1;
                push += p;
            }
        });
        if seen > MAX_NEIGHBOURS {
            (push, seen) = (Vec2::ZERO, 0);
            grid.query_blocks(e.pos, reach, &mut scratch, |o| {
                if let Some(p) = push_from(e, i, o) {
                    seen += 1;
                    push += p;
                }
                seen < MAX_NEIGHBOURS
            });
        }
        if push != Vec2::ZERO {
            pushes.push((i, capped(push)));
        }
    }
    apply_pushes(s, pushes);
}

/// A unit's summed push, at most `MAX_PUSH` long.
fn capped(push: Vec2) -> Vec2 {
    let cap = MAX_PUSH.to_bits();
    if push.length_sq_bits() > cap * cap {
        push.with_length(MAX_PUSH)
    } else {
        push
    }
}

/// Moves each unit by its push, sliding along rock: after every push is
/// known, so none depends on another's result.
fn apply_pushes(s: &mut State, pushes: Vec<(usize, Vec2)>) {
    for (i, push) in pushes {
        let from = s.entities[i].pos;
        s.entities[i].pos = slide(&s.map, from, from + push);
    }
}

/// The push body `o` gives unit `e` (at index `i`) when they overlap.
/// Inlined: it runs for every unit near every unit, and most calls end at
/// the first distance test.
#[inline(always)]
fn push_from(e: &Entity, i: usize, o: &Body) -> Option<Vec2> {
    let ri = e.kind.stats().radius.to_bits();
    let (dx, dy) = ((e.pos.x - o.pos.x).to_bits(), (e.pos.y - o.pos.y).to_bits());
    // Farther than any two bodies can overlap along an axis: the common case.
    let most = ri + MAX_RADIUS.to_bits();
    if dx.abs() >= most || dy.abs() >= most {
        return None;
    }
    if o.index as usize == i || !o.kind.is_mobile() || !o.alive {
        return None;
    }
    let min = ri + i64::from(o.radius);
    let min2 = min * min;
    let d = e.pos - o.pos;
    let d2 = d.length_sq_bits();
    if d2 >= min2 {
        return None;
    }
    Some(if d2 < 64 {
        // (Nearly) on top of each other: split along x by id.
        let half = Fx::from_bits(min / 4);
        Vec2::new(if e.id < o.id { -half } else { half }, Fx::ZERO)
    } else {
        // Soft spring without a square root: delta * (1 - d²/min²) / 2.
        let (k_num, den) = (min2 - d2, min2 * 2);
        Vec2::from_bits(
            mul_div(d.x.to_bits(), k_num, den).unwrap_or(0),
            mul_div(d.y.to_bits(), k_num, den).unwrap_or(0),
        )
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests may unwrap
    use super::*;
    use crate::Simulation;
    use crate::contract::Turn;

    /// Separation as the rule states it: the first `MAX_NEIGHBOURS`
    /// overlapping units in block order push, whatever the crowd.
    fn separate_by_the_rule(s: &mut State, grid: &Grid) {
        let mut pushes = Vec::new();
        let mut scratch = Vec::new();
        for (i, e) in s.entities.iter().enumerate() {
            if !e.kind.is_mobile() || !e.alive() {
                continue;
            }
            let (mut push, mut seen) = (Vec2::ZERO, 0);
            let reach = e.kind.stats().radius + MAX_RADIUS;
            grid.query_blocks(e.pos, reach, &mut scratch, |o| {
                if let Some(p) = push_from(e, i, o) {
                    seen += 1;
                    push += p;
                }
                seen < MAX_NEIGHBOURS
            });
            if push != Vec2::ZERO {
                pushes.push((i, capped(push)));
            }
        }
        apply_pushes(s, pushes);
    }

    /// Crowds thin and dense, piles where dozens of units overlap (past the
    /// cap, where order matters): the fast separation is the rule's.
    #[test]
    fn separation_is_the_rules_in_thin_and_dense_crowds() {
        let mut world = crate::scenarios::melee(1_200, 5);
        for t in 0..30 {
            world.step(Turn(t), &[]);
        }
        let centre = Vec2::tile_center(world.map().width() / 2, world.map().height() / 2);
        for (k, e) in world.entities_mut().iter_mut().enumerate() {
            // Every seventh unit into one of three piles of a tile or less.
            if k % 7 == 0 && e.kind.is_mobile() {
                let spread = i64::try_from(k % 97).unwrap() * 400;
                e.pos = centre + Vec2::from_bits(spread * i64::try_from(k % 3).unwrap(), spread);
            }
        }
        let window =
            crate::game::culling::grid_window(None, world.map().width(), world.map().height());
        let mut fast = world.s.clone();
        let mut rule = world.s.clone();
        let mut piled = 0;
        for pass in 0..5 {
            let mut grid = Grid::default();
            grid.rebuild(&window, &fast.entities);
            if pass == 0 {
                let mut scratch = Vec::new();
                for (i, e) in fast.entities.iter().enumerate() {
                    let mut n = 0;
                    let reach = e.kind.stats().radius + MAX_RADIUS;
                    grid.query_blocks(e.pos, reach, &mut scratch, |o| {
                        n += u32::from(push_from(e, i, o).is_some());
                        true
                    });
                    piled += usize::from(n > MAX_NEIGHBOURS);
                }
            }
            separate(&mut fast, &grid, None);
            let mut grid = Grid::default();
            grid.rebuild(&window, &rule.entities);
            separate_by_the_rule(&mut rule, &grid);
            assert!(fast.entities == rule.entities, "pass {pass}");
        }
        assert!(
            piled > 20,
            "only {piled} units had more than the cap overlapping"
        );
    }
}
