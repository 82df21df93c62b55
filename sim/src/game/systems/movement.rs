//! Movement: steering along flow fields (or straight when the way ahead is
//! clear and downhill), sliding along rock, and separation so units do not
//! stack. Everything is integer fixed-point; no square roots in separation.

use super::super::UnitKind;
use super::super::culling::TileRect;
use super::super::flow::{FlowCache, UNREACHABLE};
use super::super::grid::{Body, CellRow, Grid};
use super::super::map::Map;
use super::super::world::{Entity, State};
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

/// How far a body may lie from the grid cell it was filed in when
/// separation runs: the grid is refreshed, not rebuilt, after the tick's
/// walking, which moves a unit at most its speed (and a rounding bit or
/// two, spared here by a 64th of a tile).
const DRIFT: Fx = {
    let mut most = 0;
    let mut k = 0;
    while k < UnitKind::ALL.len() {
        let v = UnitKind::ALL[k].stats().speed.to_bits();
        if v > most {
            most = v;
        }
        k += 1;
    }
    Fx::from_bits(most + crate::num::ONE_BITS / 64)
};

// `all_on` allows one tile of drift: a unit kind faster than that needs a
// wider margin there.
const _: () = assert!(
    DRIFT.to_bits() < crate::num::ONE_BITS,
    "DRIFT must stay under a tile"
);

/// Pushes overlapping mobile units apart. Pushes are computed from the
/// positions at the start of the pass and applied afterwards, so the result
/// does not depend on iteration order. With an `area`, only the units
/// inside it are pushed (prediction culling). `grid` may be refreshed
/// since its rebuild, with bodies up to [`DRIFT`] from their cells.
///
/// The rule: a unit is pushed by the first [`MAX_NEIGHBOURS`] units
/// overlapping it, in block order. Pushes add up exactly, so when no more
/// than that many overlap, any order gives the same sum, and two pushed
/// units push each other equally and oppositely (the spring's division
/// truncates towards zero, and the split of units on top of each other goes
/// by id). So each such pair is measured once, by the unit filed first in
/// the grid; a unit past the cap is then measured again alone, its
/// overlapping units put in block order.
pub(crate) fn separate(s: &mut State, grid: &Grid, area: Option<&TileRect>) {
    let pushed: Vec<bool> = s
        .entities
        .iter()
        .map(|e| e.kind.is_mobile() && e.alive() && area.is_none_or(|a| a.holds(e.pos)))
        .collect();
    // Per entity: the sum of the pushes found so far and how many.
    let mut sums = vec![(Vec2::ZERO, 0u32); s.entities.len()];
    for (i, e) in s.entities.iter().enumerate() {
        if !pushed[i] {
            continue;
        }
        let me = Pushed::of(e, i);
        let own = grid.slot_of(i);
        for row in grid.rows_near(e.pos, me.query_reach()) {
            // Bodies filed after this unit's: this unit measures the pair.
            let split = (own + 1).clamp(row.first, row.first + row.bodies.len()) - row.first;
            let (before, after) = row.bodies.split_at(split);
            for o in after {
                measure(&me, o, &pushed, &mut sums, false);
            }
            // Bodies filed before it measured the pair themselves if they
            // are pushed: only the others (off the area) are left, and a
            // row whose bodies all lie on the area has none.
            if area.is_some_and(|a| !all_on(a, &row)) {
                for o in before {
                    measure(&me, o, &pushed, &mut sums, true);
                }
            }
        }
    }
    let mut pushes: Vec<(usize, Vec2)> = Vec::new();
    let mut crowd: Vec<((u32, u32), u32, Vec2)> = Vec::new();
    for (i, e) in s.entities.iter().enumerate() {
        let (mut push, seen) = sums[i];
        if seen > MAX_NEIGHBOURS {
            // Past the cap: the first ones in block order count.
            let me = Pushed::of(e, i);
            crowd.clear();
            for row in grid.rows_near(e.pos, me.query_reach()) {
                for o in row.bodies.iter().filter(|o| me.overlaps(o)) {
                    crowd.push((grid.block_of(o.pos), o.index, me.push_from(o)));
                }
            }
            crowd.sort_unstable_by_key(|&(block, index, _)| (block, index));
            push = Vec2::ZERO;
            for &(_, _, p) in crowd.iter().take(MAX_NEIGHBOURS as usize) {
                push += p;
            }
        }
        if push != Vec2::ZERO {
            pushes.push((i, capped(push)));
        }
    }
    apply_pushes(s, pushes);
}

/// Adds the push body `o` gives unit `me` to its sum, and the opposite to
/// `o`'s if `o` is pushed too, when they overlap; with `unless_pushed`,
/// only if `o` is not pushed (it measured the pair itself).
#[inline(always)]
fn measure(me: &Pushed, o: &Body, pushed: &[bool], sums: &mut [(Vec2, u32)], unless_pushed: bool) {
    let j = o.index as usize;
    // The cheap distance test first: most candidates end there.
    if me.overlaps(o) && !(unless_pushed && pushed[j]) {
        let p = me.push_from(o);
        sums[me.index].0 += p;
        sums[me.index].1 += 1;
        if pushed[j] {
            sums[j].0 -= p;
            sums[j].1 += 1;
        }
    }
}

/// Whether every body filed in `row` lies on `area`: its cells' tiles and
/// the tile on each side (a body drifts less than a tile from its cell)
/// are all on it.
fn all_on(area: &TileRect, row: &CellRow<'_>) -> bool {
    let (x0, x1, y) = row.tiles;
    row.inner
        && i64::from(area.x0) < x0
        && x1 + 1 < i64::from(area.x1)
        && i64::from(area.y0) < y
        && y + 1 < i64::from(area.y1)
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

/// A unit being pushed, in raw bits, read once for all its neighbours.
struct Pushed {
    x: i64,
    y: i64,
    /// Its radius.
    radius: i64,
    /// Its radius plus the largest: no farther apart along an axis can overlap.
    reach: i64,
    index: usize,
    id: u32,
}

impl Pushed {
    fn of(e: &Entity, index: usize) -> Self {
        let radius = e.kind.stats().radius.to_bits();
        Self {
            x: e.pos.x.to_bits(),
            y: e.pos.y.to_bits(),
            radius,
            reach: radius + MAX_RADIUS.to_bits(),
            index,
            id: e.id,
        }
    }

    /// How far around the unit its query must reach: the largest overlap
    /// plus how far a body may have drifted from its cell.
    fn query_reach(&self) -> Fx {
        Fx::from_bits(self.reach) + DRIFT
    }

    /// Whether body `o` is another live mobile unit overlapping this one.
    /// Inlined: it runs for every unit near every unit, and most calls end
    /// at the first test.
    #[inline(always)]
    fn overlaps(&self, o: &Body) -> bool {
        let (dx, dy) = (
            self.x.wrapping_sub(o.pos.x.to_bits()),
            self.y.wrapping_sub(o.pos.y.to_bits()),
        );
        // Farther than any two bodies can overlap along an axis: the common
        // case. |d| < reach, i.e. 0 <= d + reach - 1 <= 2 (reach - 1), as
        // one unsigned comparison per axis, and both axes as one comparison
        // of the larger: a single branch, which no predictor can learn in a
        // crowd, instead of two. Positions are under 2^32 raw, so the
        // wrapping operations never wrap; they only spare overflow checks.
        let (shift, width) = (self.reach - 1, (2 * (self.reach - 1)).cast_unsigned());
        let (ux, uy) = (
            dx.wrapping_add(shift).cast_unsigned(),
            dy.wrapping_add(shift).cast_unsigned(),
        );
        if ux.max(uy) > width {
            return false;
        }
        if o.index as usize == self.index || !o.kind.is_mobile() || !o.alive {
            return false;
        }
        // Both offsets are under `reach` (under a tile): no overflow.
        let min = self.radius + i64::from(o.radius);
        dx * dx + dy * dy < min * min
    }

    /// The push body `o` gives this unit, which it overlaps
    /// ([`Pushed::overlaps`]). Both offsets are under a tile, so the
    /// squares and products cannot overflow: plain arithmetic gives exactly
    /// what the checked `Vec2` helpers would. Equal and opposite to the push
    /// this unit gives `o`.
    #[inline(always)]
    fn push_from(&self, o: &Body) -> Vec2 {
        let (dx, dy) = (self.x - o.pos.x.to_bits(), self.y - o.pos.y.to_bits());
        let min = self.radius + i64::from(o.radius);
        let min2 = min * min;
        let d2 = dx * dx + dy * dy;
        if d2 < 64 {
            // (Nearly) on top of each other: split along x by id.
            let half = Fx::from_bits(min / 4);
            Vec2::new(if self.id < o.id { -half } else { half }, Fx::ZERO)
        } else {
            // Soft spring without a square root: delta * (1 - d²/min²) / 2,
            // truncated towards zero.
            let (k_num, den) = (min2 - d2, min2 * 2);
            Vec2::from_bits(dx * k_num / den, dy * k_num / den)
        }
    }

    /// The push body `o` gives this unit when they overlap: the rule's
    /// reference for the tests.
    #[cfg(test)]
    fn from(&self, o: &Body) -> Option<Vec2> {
        self.overlaps(o).then(|| self.push_from(o))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests may unwrap
    use super::*;
    use crate::Simulation;
    use crate::contract::Turn;

    /// Separation as the rule states it: the first `MAX_NEIGHBOURS`
    /// overlapping units in block order push, whatever the crowd; with an
    /// `area`, only the units on it are pushed.
    fn separate_by_the_rule(s: &mut State, grid: &Grid, area: Option<&TileRect>) {
        let mut pushes = Vec::new();
        let mut scratch = Vec::new();
        for (i, e) in s.entities.iter().enumerate() {
            if !e.kind.is_mobile() || !e.alive() || area.is_some_and(|a| !a.holds(e.pos)) {
                continue;
            }
            let (mut push, mut seen) = (Vec2::ZERO, 0);
            let reach = e.kind.stats().radius + MAX_RADIUS;
            let me = Pushed::of(e, i);
            grid.query_blocks(e.pos, reach, &mut scratch, |o| {
                if let Some(p) = me.from(o) {
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

    /// Every mobile unit takes a seeded step of up to its speed, as a
    /// tick's walking would.
    fn walk(s: &mut State, seed: u64) {
        let mut rng = crate::rng::Pcg32::new(seed, 9);
        for e in &mut s.entities {
            if e.kind.is_mobile() {
                // Each axis up to 7/10 of the speed: under the speed in all.
                let most = u32::try_from(e.kind.stats().speed.to_bits() * 7 / 10).unwrap();
                let mut axis = || i64::from(rng.below(2 * most + 1)) - i64::from(most);
                e.pos += Vec2::from_bits(axis(), axis());
            }
        }
    }

    /// A row of cells that `all_on` says lies on an area holds only bodies
    /// on it, after every unit drifted as far as [`DRIFT`] allows,
    /// each way along each axis; rows that straddle the area's edges say
    /// no.
    #[test]
    fn rows_all_on_an_area_hold_only_bodies_on_it() {
        let mut world = crate::scenarios::melee(1_200, 5);
        for t in 0..90 {
            world.step(Turn(t), &[]);
        }
        let (w, h) = (world.map().width(), world.map().height());
        let (mut on, mut straddling) = (0, 0);
        // Areas whose edges run through the crowds: around the centre, and
        // with a bottom or top edge along the front line.
        let (cx, cy) = (w / 2, h / 2);
        let areas = [
            TileRect::around(cx, cy, 24, 14),
            TileRect {
                x0: w / 4,
                y0: cy,
                x1: w - w / 4,
                y1: h,
            },
            TileRect {
                x0: w / 4,
                y0: 0,
                x1: w - w / 4,
                y1: cy + 1,
            },
        ];
        for (area, (sx, sy)) in areas
            .iter()
            .flat_map(|a| [(1, 0), (-1, 0), (0, 1), (0, -1)].map(|d| (a, d)))
        {
            let window = crate::game::culling::grid_window(Some(area), w, h);
            let mut s = world.s.clone();
            let mut grid = Grid::default();
            grid.rebuild(&window, &s.entities);
            // As far as a body may drift from its cell.
            let most = DRIFT.to_bits() - 1;
            for e in &mut s.entities {
                if e.kind.is_mobile() {
                    e.pos += Vec2::from_bits(sx * most, sy * most);
                }
            }
            assert!(grid.refresh(&s.entities));
            for e in &s.entities {
                for row in grid.rows_near(e.pos, MAX_RADIUS + MAX_RADIUS + DRIFT) {
                    let off = row.bodies.iter().any(|b| !area.holds(b.pos));
                    if all_on(area, &row) {
                        assert!(!off, "{row:?}");
                        on += 1;
                    }
                    straddling += usize::from(off && !row.bodies.is_empty());
                }
            }
        }
        assert!(
            on > 1_000 && straddling > 100,
            "{on} rows on, {straddling} straddling"
        );
    }

    /// Crowds thin and dense, piles where dozens of units overlap (past the
    /// cap, where order matters), over the whole map and culled to an area
    /// that cuts through the crowd, on a grid refreshed after the units
    /// walked: the fast separation is the rule's on a fresh grid.
    #[test]
    fn separation_is_the_rules_in_thin_and_dense_crowds() {
        let mut world = crate::scenarios::melee(1_200, 5);
        for t in 0..90 {
            world.step(Turn(t), &[]);
        }
        let (cx, cy) = (world.map().width() / 2, world.map().height() / 2);
        let centre = Vec2::tile_center(cx, cy);
        for (k, e) in world.entities_mut().iter_mut().enumerate() {
            // Every seventh unit into one of three piles of a tile or less.
            if k % 7 == 0 && e.kind.is_mobile() {
                let spread = i64::try_from(k % 97).unwrap() * 400;
                e.pos = centre + Vec2::from_bits(spread * i64::try_from(k % 3).unwrap(), spread);
            }
        }
        let (w, h) = (world.map().width(), world.map().height());
        let whole = crate::game::culling::grid_window(None, w, h);
        // A screen whose top edge runs along the front line, and so
        // through the crowds where the armies meet; and one inside the map
        // on every side, around the piles.
        let front = TileRect {
            x0: 0,
            y0: cy,
            x1: w,
            y1: h,
        };
        let inside = TileRect::around(cx, cy, 24, 14);
        for area in [None, Some(&front), Some(&inside)] {
            // The fast pass's grid covers what a culled tick's does (bodies
            // beyond it filed on its border); the rule's, the whole map.
            let window = crate::game::culling::grid_window(area, w, h);
            let mut fast = world.s.clone();
            let mut rule = world.s.clone();
            let (mut piled, mut straddling) = (0, 0);
            for pass in 0..5 {
                // The grid as a tick builds it before walking; then every
                // unit walks up to its speed, and the grid is refreshed.
                let mut own = Grid::default();
                own.rebuild(&window, &fast.entities);
                walk(&mut fast, pass);
                walk(&mut rule, pass);
                assert!(own.refresh(&fast.entities));
                let mut grid = Grid::default();
                grid.rebuild(&whole, &rule.entities);
                if pass == 0 {
                    let mut scratch = Vec::new();
                    for (i, e) in rule.entities.iter().enumerate() {
                        let (mut n, mut outside) = (0, false);
                        let reach = e.kind.stats().radius + MAX_RADIUS;
                        let me = Pushed::of(e, i);
                        grid.query_blocks(e.pos, reach, &mut scratch, |o| {
                            let pushes = me.from(o).is_some();
                            n += u32::from(pushes);
                            outside |= pushes && area.is_some_and(|a| !a.holds(o.pos));
                            true
                        });
                        if area.is_none_or(|a| a.holds(e.pos)) {
                            piled += usize::from(n > MAX_NEIGHBOURS);
                            straddling += usize::from(outside && n <= MAX_NEIGHBOURS);
                        }
                    }
                }
                separate(&mut fast, &own, area);
                separate_by_the_rule(&mut rule, &grid, area);
                assert!(fast.entities == rule.entities, "{area:?}, pass {pass}");
            }
            if area.is_none() {
                assert!(
                    piled > 20,
                    "only {piled} units had more than the cap overlapping"
                );
            } else {
                assert!(
                    straddling > 10,
                    "only {straddling} units under the cap overlapped one off screen"
                );
            }
        }
    }
}
