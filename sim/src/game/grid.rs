//! A uniform spatial grid over entity positions, rebuilt each tick by a
//! counting sort, so neighbour queries (separation, targeting) visit only
//! nearby cells instead of all pairs.
//!
//! Each cell's entities are kept as compact [`Body`] copies, contiguous in
//! cell order: a query reads a few dense cache lines instead of one whole
//! `Entity` (order, queue, ...) per neighbour, which made neighbour loops
//! memory-bound with thousands of units.
//!
//! Cells are one tile. The simulation's rules were written against 2 × 2
//! tile "blocks" visited in row-major order, ascending index within a block
//! ([`Grid::query_blocks`]); that order only matters where a query stops
//! early, so the common queries visit the finer cells in any order and fall
//! back to block order only when the order could change the answer.

use super::culling::TileRect;
use super::{Entity, UnitKind};
use crate::contract::PlayerId;
use crate::num::{FRAC_BITS, Fx, Vec2};

/// What neighbour queries read of an entity, as it was when the grid was
/// rebuilt.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Body {
    /// Centre position.
    pub(crate) pos: Vec2,
    /// Index in the entity list.
    pub(crate) index: u32,
    /// The entity's id.
    pub(crate) id: u32,
    /// Its body radius in raw bits (what separation reads).
    pub(crate) radius: i32,
    /// Owning player (`None`: neutral).
    pub(crate) owner: Option<PlayerId>,
    /// What it is.
    pub(crate) kind: UnitKind,
    /// Hit points above zero.
    pub(crate) alive: bool,
}

/// log2 of a block's side in cells: the rules' visiting order is by 2 × 2 blocks.
const BLOCK_SHIFT: u32 = 1;

/// Entities bucketed by one-tile cell; valid until the entity list changes.
#[derive(Clone, Debug, Default)]
pub(crate) struct Grid {
    /// The tile of the first column and row (even: blocks stay aligned).
    origin: (i64, i64),
    cols: u32,
    rows: u32,
    /// `starts[c]..starts[c + 1]` is cell `c`'s slice of `items`.
    starts: Vec<u32>,
    /// The entities, grouped by cell, ascending index within a cell.
    items: Vec<Body>,
    cell_of: Vec<u32>,
    /// Scratch for the counting sort: each cell's next free slot.
    fill: Vec<u32>,
    /// Per cell, a bit per player owning something in it (neutral: none).
    owners: Vec<u8>,
}

impl Grid {
    /// Rebuilds the grid over the tiles of `window` and one more column and
    /// row (a point on the far edge of the map falls there); an entity
    /// outside lies in the nearest cell, which keeps every query's answer
    /// for a centre inside the window. The whole map for a full step; the
    /// screen and what its units can reach for a culled one, which spares
    /// clearing and summing cells no query looks at.
    pub(crate) fn rebuild(&mut self, window: &TileRect, entities: &[Entity]) {
        let (x0, y0) = (window.x0 & !1, window.y0 & !1);
        self.origin = (i64::from(x0), i64::from(y0));
        self.cols = u32::from(window.x1.saturating_sub(x0)) + 1;
        self.rows = u32::from(window.y1.saturating_sub(y0)) + 1;
        let cells = (self.cols * self.rows) as usize;
        self.starts.clear();
        self.starts.resize(cells + 1, 0);
        self.cell_of.clear();
        self.owners.clear();
        self.owners.resize(cells, 0);
        for e in entities {
            let (col, row) = (self.col(e.pos.x), self.row(e.pos.y));
            let c = row * self.cols + col;
            self.cell_of.push(c);
            self.starts[c as usize + 1] += 1;
            if let Some(o) = e.owner {
                self.owners[c as usize] |= 1u8 << (o.0 & 7);
            }
        }
        for c in 0..cells {
            self.starts[c + 1] += self.starts[c];
        }
        self.items.clear();
        self.items.resize(
            entities.len(),
            Body {
                pos: Vec2::ZERO,
                index: 0,
                id: 0,
                radius: 0,
                owner: None,
                kind: UnitKind::Mine,
                alive: false,
            },
        );
        self.fill.clone_from(&self.starts);
        let fill = &mut self.fill;
        // Ascending index order inside each cell.
        for (i, (&c, e)) in self.cell_of.iter().zip(entities).enumerate() {
            let slot = &mut fill[c as usize];
            self.items[*slot as usize] = Body {
                pos: e.pos,
                index: u32::try_from(i).unwrap_or(u32::MAX),
                id: e.id,
                radius: i32::try_from(e.kind.stats().radius.to_bits()).unwrap_or(i32::MAX),
                owner: e.owner,
                kind: e.kind,
                alive: e.alive(),
            };
            *slot += 1;
        }
    }

    /// The cell column (row) of coordinate `v`, clamped to the grid.
    fn axis(v: Fx, origin: i64, limit: u32) -> u32 {
        let t = ((v.to_bits() >> FRAC_BITS) - origin).max(0);
        u32::try_from(t).unwrap_or(u32::MAX).min(limit - 1)
    }

    fn col(&self, x: Fx) -> u32 {
        Self::axis(x, self.origin.0, self.cols)
    }

    fn row(&self, y: Fx) -> u32 {
        Self::axis(y, self.origin.1, self.rows)
    }

    /// The cells overlapping the square of half-side `radius` around
    /// `center`: first and last column, first and last row.
    fn span(&self, center: Vec2, radius: Fx) -> (u32, u32, u32, u32) {
        (
            self.col(center.x - radius),
            self.col(center.x + radius),
            self.row(center.y - radius),
            self.row(center.y + radius),
        )
    }

    /// Calls `f` with every entity in the cells overlapping the square of
    /// half-side `radius` around `center`, in no order the rules may rely on:
    /// for queries whose answer does not depend on it.
    pub(crate) fn query(&self, center: Vec2, radius: Fx, mut f: impl FnMut(&Body)) {
        if self.cols == 0 {
            return;
        }
        let (x0, x1, y0, y1) = self.span(center, radius);
        for cy in y0..=y1 {
            // A row's cells are contiguous in `items`.
            let (first, last) = (
                (cy * self.cols + x0) as usize,
                (cy * self.cols + x1) as usize,
            );
            let (a, b) = (self.starts[first] as usize, self.starts[last + 1] as usize);
            self.items[a..b].iter().for_each(&mut f);
        }
    }

    /// Calls `f` with every entity in the 2 × 2 blocks overlapping the square
    /// of half-side `radius` around `center`, block by block in row-major
    /// order and ascending index within a block, stopping early when `f`
    /// returns false: the rules' order, for a query that stops early.
    /// `scratch` holds a block's entities while they are put in order.
    pub(crate) fn query_blocks(
        &self,
        center: Vec2,
        radius: Fx,
        scratch: &mut Vec<Body>,
        mut f: impl FnMut(&Body) -> bool,
    ) {
        if self.cols == 0 {
            return;
        }
        let (x0, x1, y0, y1) = self.span(center, radius);
        for by in (y0 >> BLOCK_SHIFT)..=(y1 >> BLOCK_SHIFT) {
            for bx in (x0 >> BLOCK_SHIFT)..=(x1 >> BLOCK_SHIFT) {
                scratch.clear();
                for cy in (by << BLOCK_SHIFT)..((by + 1) << BLOCK_SHIFT).min(self.rows) {
                    let first = (cy * self.cols + (bx << BLOCK_SHIFT)) as usize;
                    let last = (cy * self.cols + ((bx + 1) << BLOCK_SHIFT).min(self.cols)) as usize;
                    let (a, b) = (self.starts[first] as usize, self.starts[last] as usize);
                    scratch.extend_from_slice(&self.items[a..b]);
                }
                scratch.sort_unstable_by_key(|b| b.index);
                for body in scratch.iter() {
                    if !f(body) {
                        return;
                    }
                }
            }
        }
    }

    /// The entity with the smallest `key` among those in the cells
    /// overlapping the square of half-side `radius` around `center`,
    /// skipping cells holding nothing owned by a player in `mask` (bit `p`
    /// for player `p`). `key` gives `None` for an entity that does not count,
    /// else its squared distance to `center` (raw bits) and a tie-break that
    /// no two entities share.
    ///
    /// Cells are visited in square rings outwards from `center`'s cell, and
    /// the search stops before a ring every point of which is farther than
    /// the best so far: the answer is the full scan's (the key is unique, so
    /// the order of the visit cannot change it), but in a crowd the nearest
    /// entity is a few rings away while the sight range covers hundreds of
    /// cells.
    pub(crate) fn nearest(
        &self,
        center: Vec2,
        radius: Fx,
        mask: u8,
        mut key: impl FnMut(&Body) -> Option<(i64, u32)>,
    ) -> Option<usize> {
        if self.cols == 0 {
            return None;
        }
        let (x0, x1, y0, y1) = self.span(center, radius);
        let (ccx, ccy) = (self.col(center.x), self.row(center.y));
        // Every point of ring k is at least (k - 1) cells plus the centre's
        // distance to the nearest edge of its own cell away, along one axis.
        let side = 1i64 << FRAC_BITS;
        let inner = |v: Fx, origin: i64, c: u32| {
            let off = v.to_bits() - (origin + i64::from(c)) * side;
            off.min(side - off).max(0)
        };
        let edge = inner(center.x, self.origin.0, ccx).min(inner(center.y, self.origin.1, ccy));
        let rings = (ccx - x0).max(x1 - ccx).max(ccy - y0).max(y1 - ccy);
        let mut best: Option<(i64, u32, usize)> = None;
        for k in 0..=rings {
            if k > 0 {
                let near = i64::from(k - 1) * side + edge;
                if best.is_some_and(|(d, _, _)| near.saturating_mul(near) > d) {
                    break;
                }
            }
            // Ring k: its top and bottom rows whole, the rows between at
            // its two ends only; clipped to the square.
            let (rx0, rx1) = (ccx.saturating_sub(k).max(x0), (ccx + k).min(x1));
            let (ry0, ry1) = (ccy.saturating_sub(k).max(y0), (ccy + k).min(y1));
            for cy in ry0..=ry1 {
                let whole_row = cy + k == ccy || cy == ccy + k;
                let mut visit = |cx0: u32, cx1: u32| {
                    let row = cy * self.cols;
                    for c in (row + cx0) as usize..=(row + cx1) as usize {
                        if self.owners[c] & mask == 0 {
                            continue;
                        }
                        let (a, b) = (self.starts[c] as usize, self.starts[c + 1] as usize);
                        for body in &self.items[a..b] {
                            if let Some((d, tie)) = key(body) {
                                if best.is_none_or(|(bd, bt, _)| (d, tie) < (bd, bt)) {
                                    best = Some((d, tie, body.index as usize));
                                }
                            }
                        }
                    }
                };
                if whole_row {
                    visit(rx0, rx1);
                } else {
                    if ccx >= k && ccx - k >= x0 {
                        visit(ccx - k, ccx - k);
                    }
                    if k > 0 && ccx + k <= x1 {
                        visit(ccx + k, ccx + k);
                    }
                }
            }
        }
        best.map(|(_, _, i)| i)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests may unwrap
    use super::*;
    use crate::num::fx_ratio;

    fn whole(w: u16, h: u16) -> TileRect {
        super::super::culling::grid_window(None, w, h)
    }

    /// `n` entities of up to four players (and neutral mines) scattered
    /// over a `w` x `h` map, a few of them dead, some piled on one spot.
    fn scatter(n: u32, w: u16, h: u16, seed: u64) -> Vec<Entity> {
        let mut rng = crate::rng::Pcg32::new(seed, 1);
        (0..n)
            .map(|id| {
                let pile = id % 5 == 0;
                let (x, y) = if pile {
                    (i64::from(w / 2) << FRAC_BITS, i64::from(h / 2) << FRAC_BITS)
                } else {
                    (
                        i64::from(rng.below(u32::from(w) << FRAC_BITS)),
                        i64::from(rng.below(u32::from(h) << FRAC_BITS)),
                    )
                };
                let jitter = i64::from(rng.below(1 << 14));
                let kind = [
                    UnitKind::Soldier,
                    UnitKind::Archer,
                    UnitKind::Worker,
                    UnitKind::Mine,
                ][rng.below(4) as usize];
                let owner = (kind != UnitKind::Mine).then(|| PlayerId(rng.below(4) as u8));
                let mut e = Entity::new(id, owner, kind, Vec2::from_bits(x + jitter, y + jitter));
                if rng.below(10) == 0 {
                    e.hp = 0;
                }
                e
            })
            .collect()
    }

    /// The rules' block order: 2 × 2 tile blocks in row-major order, each
    /// entity in the block its clamped tile falls in, ascending index.
    #[test]
    fn query_blocks_visits_blocks_in_row_major_order_ascending_index() {
        let (w, h) = (40, 30);
        let entities = scatter(600, w, h, 7);
        let mut grid = Grid::default();
        grid.rebuild(&whole(w, h), &entities);
        let block = |v: Fx, limit: u16| {
            let t = (v.to_bits() >> FRAC_BITS).clamp(0, i64::from(limit));
            u32::try_from(t).unwrap() >> BLOCK_SHIFT
        };
        let mut scratch = Vec::new();
        for (k, c) in entities.iter().enumerate().step_by(7) {
            let radius = fx_ratio(i64::try_from(k % 9).unwrap() + 1, 3);
            let (bx0, bx1) = (block(c.pos.x - radius, w), block(c.pos.x + radius, w));
            let (by0, by1) = (block(c.pos.y - radius, h), block(c.pos.y + radius, h));
            let mut expected: Vec<(u32, u32, u32)> = entities
                .iter()
                .enumerate()
                .map(|(i, e)| {
                    (
                        block(e.pos.y, h),
                        block(e.pos.x, w),
                        u32::try_from(i).unwrap(),
                    )
                })
                .filter(|&(by, bx, _)| (by0..=by1).contains(&by) && (bx0..=bx1).contains(&bx))
                .collect();
            expected.sort_unstable();
            let mut seen = Vec::new();
            grid.query_blocks(c.pos, radius, &mut scratch, |b| {
                seen.push(b.index);
                true
            });
            let expected: Vec<u32> = expected.into_iter().map(|(_, _, i)| i).collect();
            assert_eq!(seen, expected, "query around entity {k}");
        }
    }

    /// The ring search finds what a scan of every entity finds.
    #[test]
    fn nearest_is_the_answer_of_a_scan_of_every_entity() {
        let (w, h) = (48, 36);
        for seed in 0..4 {
            let entities = scatter(900, w, h, seed);
            let mut grid = Grid::default();
            grid.rebuild(&whole(w, h), &entities);
            for (i, e) in entities.iter().enumerate() {
                let Some(own) = e.owner else { continue };
                let sight = fx_ratio(i64::try_from(i % 13).unwrap() + 2, 2);
                let r2 = sight.to_bits() * sight.to_bits();
                let key = |t: &Entity| {
                    let d = e.pos.dist_sq_bits(t.pos);
                    (t.owner.is_some() && t.owner != Some(own) && t.alive() && d <= r2)
                        .then(|| (d, t.id.wrapping_mul(0x9e37_79b9)))
                };
                let scan = entities
                    .iter()
                    .enumerate()
                    .filter_map(|(j, t)| key(t).map(|k| (k, j)))
                    .min()
                    .map(|(_, j)| j);
                let mask = !(1u8 << own.0);
                let found = grid.nearest(e.pos, sight, mask, |b| key(&entities[b.index as usize]));
                assert_eq!(found, scan, "seed {seed}, entity {i}");
            }
        }
    }
}
