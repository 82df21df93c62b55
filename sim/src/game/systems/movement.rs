//! Movement: steering along flow fields (or straight when the way ahead is
//! clear and downhill), sliding along rock, and separation so units do not
//! stack. Everything is integer fixed-point; no square roots in separation.

use super::super::culling::TileRect;
use super::super::flow::{FlowCache, UNREACHABLE};
use super::super::grid::Grid;
use super::super::map::Map;
use super::super::world::State;
use super::Goal;
use crate::num::{Fx, Vec2, fx_int, fx_ratio};

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
    for (i, e) in s.entities.iter().enumerate() {
        if !e.kind.is_mobile() || !e.alive() || area.is_some_and(|a| !a.holds(e.pos)) {
            continue;
        }
        let ri = e.kind.stats().radius;
        let mut push = Vec2::ZERO;
        let mut seen = 0u32;
        grid.query(e.pos, ri + MAX_RADIUS, |j| {
            if j == i {
                return true;
            }
            let o = &s.entities[j];
            if !o.kind.is_mobile() || !o.alive() {
                return true;
            }
            let min = (ri + o.kind.stats().radius).to_bits();
            let min2 = min * min;
            let d = e.pos - o.pos;
            let d2 = d.length_sq_bits();
            if d2 >= min2 {
                return true;
            }
            seen += 1;
            if d2 < 64 {
                // (Nearly) on top of each other: split along x by id.
                let half = Fx::from_bits(min / 4);
                push.x += if e.id < o.id { -half } else { half };
            } else {
                // Soft spring without a square root: delta * (1 - d²/min²) / 2.
                let k_num = i128::from(min2 - d2);
                let den = i128::from(min2) * 2;
                let px = i128::from(d.x.to_bits()) * k_num / den;
                let py = i128::from(d.y.to_bits()) * k_num / den;
                push += Vec2::from_bits(
                    i64::try_from(px).unwrap_or(0),
                    i64::try_from(py).unwrap_or(0),
                );
            }
            seen < MAX_NEIGHBOURS
        });
        if push != Vec2::ZERO {
            let cap = MAX_PUSH.to_bits();
            if push.length_sq_bits() > cap * cap {
                push = push.with_length(MAX_PUSH);
            }
            pushes.push((i, push));
        }
    }
    for (i, push) in pushes {
        let from = s.entities[i].pos;
        s.entities[i].pos = slide(&s.map, from, from + push);
    }
}
