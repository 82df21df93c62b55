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
//! (`Grid::query_blocks`, kept as the tests' reference); that order only
//! matters where a query stops early, so queries visit the cells in any
//! order, and a caller whose answer could depend on the order sorts what it
//! found by [`Grid::block_of`] and index.

use super::culling::TileRect;
use super::{Entity, UnitKind};
use crate::contract::PlayerId;
use crate::num::{FRAC_BITS, Fx, Vec2};
use std::cmp::Ordering;

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

/// Part of a row of cells that a query overlaps ([`Grid::rows_near`]).
#[derive(Debug)]
pub(crate) struct CellRow<'a> {
    /// The tiles of its cells: columns `.0` to `.1` (inclusive) of row `.2`.
    pub(crate) tiles: (i64, i64, i64),
    /// None of its cells is on the grid's border, where entities outside
    /// the window are filed: every body in it was within its cell's tile.
    pub(crate) inner: bool,
    /// The slot of `bodies[0]`; the others follow in order.
    pub(crate) first: usize,
    pub(crate) bodies: &'a [Body],
}

/// The rows of cells a query overlaps, in order ([`Grid::rows_near`]).
pub(crate) struct RowsNear<'a> {
    grid: &'a Grid,
    /// First and last column.
    cols: (u32, u32),
    /// The next row and the last.
    next: u32,
    last: u32,
}

impl<'a> Iterator for RowsNear<'a> {
    type Item = CellRow<'a>;

    // Inlined into the query's loop: a call per row would cost as much as
    // the row's work in a thin crowd.
    #[inline(always)]
    fn next(&mut self) -> Option<CellRow<'a>> {
        if self.next > self.last {
            return None;
        }
        let (g, cy, (x0, x1)) = (self.grid, self.next, self.cols);
        self.next += 1;
        // A row's cells are contiguous in `items`.
        let (first, last) = ((cy * g.cols + x0) as usize, (cy * g.cols + x1) as usize);
        let (a, b) = (g.starts[first] as usize, g.starts[last + 1] as usize);
        Some(CellRow {
            tiles: (
                g.origin.0 + i64::from(x0),
                g.origin.0 + i64::from(x1),
                g.origin.1 + i64::from(cy),
            ),
            inner: x0 > 0 && x1 + 1 < g.cols && cy > 0 && cy + 1 < g.rows,
            first: a,
            bodies: &g.items[a..b],
        })
    }
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
    /// Where each entity's body is in `items`, by entity index.
    slot_of: Vec<u32>,
    /// 64-column words per row of [`Grid::occupied`].
    words: u32,
    /// Per row, per 64-column word, per player: a bit for each column
    /// whose cell holds something that player owns (neutral: nothing), at
    /// `((row * words + word) * stride) + player`; then, at `+ slots`, the
    /// union of the players' bits, and at `+ slots + 1` the columns whose
    /// cell holds two or more owners. A targeting query tests a row of its
    /// sight square a word at a time instead of a cell at a time, and
    /// visits only the cells with a possible target. Its usual mask, every
    /// player present but one, reads three words (the union, that player's
    /// and the shared cells) instead of one per player: 31 at 32 players.
    occupied: Vec<u64>,
    /// Player slots per word of [`Grid::occupied`]: one more than the
    /// highest owner's id, so that a match of eight players clears and
    /// sums no more words than it needs and each of 32 has its own.
    slots: usize,
    /// Words per 64 columns of a row in [`Grid::occupied`]: the players'
    /// slots, the union and the shared cells.
    stride: usize,
    /// A bit per player owning anything in the grid.
    present: u32,
}

// A query's mask and `present` hold one bit per player id.
const _: () = assert!(crate::MAX_PLAYERS as u32 <= u32::BITS);

/// The last slot of [`Grid::occupied`]: every id from it up shares it (no
/// match has such ids; a made-up one costs visits, never a missed target).
const MAX_SLOT: usize = u32::BITS as usize - 1;

/// The mask of [`Grid::nearest`] for a unit of `owner`: every player but
/// `owner` (every player for a neutral unit, and for an id sharing the last
/// slot with others).
pub(crate) fn enemies_of(owner: Option<PlayerId>) -> u32 {
    match owner {
        Some(o) if usize::from(o.0) < MAX_SLOT => !(1u32 << o.0),
        _ => u32::MAX,
    }
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
        self.words = self.cols.div_ceil(64);
        // Owners are told apart by their whole id: folding them (say modulo
        // 8) would hide player 8's units from player 0's queries. Ids past
        // a mask's 32 bits share the last slot, which only costs a visit.
        self.slots = entities
            .iter()
            .filter_map(|e| e.owner)
            .map(|o| usize::from(o.0).min(MAX_SLOT) + 1)
            .max()
            .unwrap_or(0);
        self.stride = self.slots + 2;
        self.occupied.clear();
        self.occupied
            .resize((self.rows * self.words) as usize * self.stride, 0);
        self.present = 0;
        // Each entity's cell, counted; `extend` over a slice reserves once.
        let (cols, words, origin, slots) = (self.cols, self.words, self.origin, self.slots);
        let stride = self.stride;
        let rows = self.rows;
        let (starts, occupied, present) = (&mut self.starts, &mut self.occupied, &mut self.present);
        self.cell_of.extend(entities.iter().map(|e| {
            let col = Self::axis(e.pos.x, origin.0, cols);
            let row = Self::axis(e.pos.y, origin.1, rows);
            let c = row * cols + col;
            starts[c as usize + 1] += 1;
            if let Some(o) = e.owner {
                let p = usize::from(o.0).min(MAX_SLOT);
                let base = (row * words + col / 64) as usize * stride;
                let bit = 1u64 << (col % 64);
                // Another owner is there already: the cell is shared.
                if occupied[base + slots] & !occupied[base + p] & bit != 0 {
                    occupied[base + slots + 1] |= bit;
                }
                occupied[base + p] |= bit;
                occupied[base + slots] |= bit;
                *present |= 1u32 << p;
            }
            c
        }));
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
        let (fill, items) = (&mut self.fill, &mut self.items);
        self.slot_of.clear();
        // Ascending index order inside each cell.
        self.slot_of.extend(
            self.cell_of
                .iter()
                .zip(entities)
                .enumerate()
                .map(|(i, (&c, e))| {
                    let slot = &mut fill[c as usize];
                    let at = *slot;
                    items[at as usize] = Body {
                        pos: e.pos,
                        index: u32::try_from(i).unwrap_or(u32::MAX),
                        id: e.id,
                        radius: i32::try_from(e.kind.stats().radius.to_bits()).unwrap_or(i32::MAX),
                        owner: e.owner,
                        kind: e.kind,
                        alive: e.alive(),
                    };
                    *slot += 1;
                    at
                }),
        );
    }

    /// Copies the entities' positions and liveness into their bodies, which
    /// stay in the cells of the positions they had at the last rebuild:
    /// cheaper than a rebuild when entities have moved a little. A query
    /// after a refresh must reach farther by as much as any body may have
    /// moved since the rebuild, and must not rely on the cells matching the
    /// positions (block order, the occupancy bits: [`Grid::nearest`] does);
    /// the slots ([`Grid::slot_of`]) stay those of the rebuild.
    ///
    /// `entities` must be the list the grid was built from, perhaps with
    /// entities appended (a spawn); then it returns false, changing
    /// nothing, and the caller rebuilds. It cannot tell a different list of
    /// the same length, so nothing may be removed or reordered in between.
    pub(crate) fn refresh(&mut self, entities: &[Entity]) -> bool {
        if entities.len() != self.slot_of.len() {
            return false;
        }
        for (e, &slot) in entities.iter().zip(&self.slot_of) {
            let body = &mut self.items[slot as usize];
            body.pos = e.pos;
            body.alive = e.alive();
        }
        true
    }

    /// The 2 × 2-tile block a point lies in, as (row, column) of blocks,
    /// clamped to the grid as a rebuild would: sorting by it, then by
    /// index, gives the rules' visiting order.
    pub(crate) fn block_of(&self, p: Vec2) -> (u32, u32) {
        (self.row(p.y) >> BLOCK_SHIFT, self.col(p.x) >> BLOCK_SHIFT)
    }

    /// The cell column (row) of coordinate `v`, clamped to the grid.
    #[inline(always)]
    fn axis(v: Fx, origin: i64, limit: u32) -> u32 {
        // Clamped into 0..limit (limit is at most 2^16 + 1), so the cast
        // keeps every bit.
        ((v.to_bits() >> FRAC_BITS) - origin)
            .min(i64::from(limit) - 1)
            .max(0) as u32
    }

    fn col(&self, x: Fx) -> u32 {
        Self::axis(x, self.origin.0, self.cols)
    }

    fn row(&self, y: Fx) -> u32 {
        Self::axis(y, self.origin.1, self.rows)
    }

    /// The cells overlapping the square of half-side `radius` around
    /// `center`: first and last column, first and last row.
    #[inline(always)]
    fn span(&self, center: Vec2, radius: Fx) -> (u32, u32, u32, u32) {
        (
            self.col(center.x - radius),
            self.col(center.x + radius),
            self.row(center.y - radius),
            self.row(center.y + radius),
        )
    }

    /// Calls `f`, in ascending order, with each column from `c0` to `c1`
    /// (inclusive) of `row` whose cell holds something a player in `mask`
    /// owns: a word of 64 cells at a time, so empty stretches cost nothing.
    #[inline(always)]
    fn occupied_cols(&self, row: u32, (c0, c1): (u32, u32), mask: u32, mut f: impl FnMut(u32)) {
        // The present players the mask leaves out.
        let left_out = self.present & !mask;
        for w in c0 / 64..=c1 / 64 {
            let base = (row * self.words + w) as usize * self.stride;
            let union = self.occupied[base + self.slots];
            let bits = if mask & self.present == self.present {
                union
            } else if left_out.count_ones() == 1 {
                // Cells held by someone else than the one left out: its
                // own cells are out unless another owner shares them.
                let mine = self.occupied[base + left_out.trailing_zeros() as usize];
                (union & !mine) | self.occupied[base + self.slots + 1]
            } else {
                let mut bits = 0u64;
                let mut players = mask;
                while players != 0 {
                    bits |= self.occupied[base + players.trailing_zeros() as usize];
                    players &= players - 1;
                }
                bits
            };
            // Only the columns from c0 to c1 of this word.
            let lo = if w == c0 / 64 { c0 % 64 } else { 0 };
            let hi = if w == c1 / 64 { c1 % 64 } else { 63 };
            let mut bits = bits & (u64::MAX << lo) & (u64::MAX >> (63 - hi));
            while bits != 0 {
                f(w * 64 + bits.trailing_zeros());
                bits &= bits - 1;
            }
        }
    }

    /// The rows of cells overlapping the square of half-side `radius` around
    /// `center`, each with its bodies in slot order (cell by cell, in no
    /// order the rules may rely on): for queries whose answer does not
    /// depend on the order, and that loop over a row themselves.
    pub(crate) fn rows_near(&self, center: Vec2, radius: Fx) -> RowsNear<'_> {
        let (x0, x1, y0, y1) = if self.cols == 0 {
            (1, 0, 1, 0)
        } else {
            self.span(center, radius)
        };
        RowsNear {
            grid: self,
            cols: (x0, x1),
            next: y0,
            last: y1,
        }
    }

    /// The slot of entity `index`'s body, in the order of [`CellRow::first`]:
    /// by cell, then ascending index.
    pub(crate) fn slot_of(&self, index: usize) -> usize {
        self.slot_of[index] as usize
    }

    /// Calls `f` with every entity in the 2 × 2 blocks overlapping the square
    /// of half-side `radius` around `center`, block by block in row-major
    /// order and ascending index within a block, stopping early when `f`
    /// returns false: the rules' order, for a query that stops early.
    /// `scratch` holds a block's entities while they are put in order.
    #[cfg(test)]
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
    /// for player `p`; [`enemies_of`] builds a unit's). `key` gives `None` for an
    /// entity that does not count, else its squared distance to `center`
    /// (raw bits) and a tie-break that no two entities share. Needs a grid
    /// rebuilt, not refreshed, since the entities last moved.
    ///
    /// Rows are visited outwards from `center`'s, and within a row only the
    /// cells that hold something of a player in `mask` (a bit test each) and
    /// that are not wholly farther than the best so far. The search stops at
    /// the first pair of rows that lie wholly farther. The answer is the full
    /// scan's (the key is unique, so the order of the visit cannot change
    /// it), but in a crowd the nearest entity is a few cells away while the
    /// sight range covers hundreds of cells, and a unit with nothing in sight
    /// reads one word per row.
    pub(crate) fn nearest(
        &self,
        center: Vec2,
        radius: Fx,
        mask: u32,
        mut key: impl FnMut(&Body) -> Option<(i64, u32)>,
    ) -> Option<usize> {
        if self.cols == 0 {
            return None;
        }
        let (x0, x1, y0, y1) = self.span(center, radius);
        let mask = mask & self.present;
        let (ccx, ccy) = (self.col(center.x), self.row(center.y));
        // The least distance along one axis from the centre to any point of
        // the cell `c` cells away from its own (raw bits): whole cells in
        // between plus the way to its own cell's edge on that side.
        let side = 1i64 << FRAC_BITS;
        let offset = |v: Fx, origin: i64, c: u32| {
            (v.to_bits() - (origin + i64::from(c)) * side).clamp(0, side)
        };
        let (ox, oy) = (
            offset(center.x, self.origin.0, ccx),
            offset(center.y, self.origin.1, ccy),
        );
        let gap = |from: u32, to: u32, off: i64| match to.cmp(&from) {
            Ordering::Equal => 0,
            Ordering::Less => i64::from(from - to - 1) * side + off,
            Ordering::Greater => i64::from(to - from - 1) * side + (side - off),
        };
        let mut best: Option<(i64, u32, usize)> = None;
        // Farther than the best so far: nothing in it can win (the key is
        // unique, so neither can a tie).
        let beyond = |best: &Option<(i64, u32, usize)>, gx: i64, gy: i64| {
            best.is_some_and(|(d, _, _)| {
                gx.saturating_mul(gx).saturating_add(gy.saturating_mul(gy)) > d
            })
        };
        let rows = (ccy - y0).max(y1 - ccy);
        for dy in 0..=rows {
            let mut open = false;
            for cy in [ccy.checked_sub(dy), (dy > 0).then_some(ccy + dy)] {
                let Some(cy) = cy.filter(|r| (y0..=y1).contains(r)) else {
                    continue;
                };
                let gy = gap(ccy, cy, oy);
                if beyond(&best, 0, gy) {
                    continue;
                }
                open = true;
                self.occupied_cols(cy, (x0, x1), mask, |cx| {
                    if beyond(&best, gap(ccx, cx, ox), gy) {
                        return;
                    }
                    let c = (cy * self.cols + cx) as usize;
                    let (a, b) = (self.starts[c] as usize, self.starts[c + 1] as usize);
                    for body in &self.items[a..b] {
                        if let Some((d, tie)) = key(body) {
                            if best.is_none_or(|(bd, bt, _)| (d, tie) < (bd, bt)) {
                                best = Some((d, tie, body.index as usize));
                            }
                        }
                    }
                });
            }
            // Both rows this far out lie beyond the best: so do all farther.
            if !open && best.is_some() {
                break;
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
    /// `n` entities of `players` players (and neutral mines) on a `w` x `h`
    /// map, a fifth of them piled on its centre.
    fn scatter(n: u32, w: u16, h: u16, seed: u64, players: u32) -> Vec<Entity> {
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
                let owner = (kind != UnitKind::Mine).then(|| PlayerId(rng.below(players) as u8));
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
        let entities = scatter(600, w, h, 7, 4);
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

    /// The nearest search finds what a scan of every entity finds.
    #[test]
    fn nearest_is_the_answer_of_a_scan_of_every_entity() {
        // A small map, one wider than a 64-column word, and a culled step's
        // window inside it (queries from well within, entities outside
        // clamped to its border).
        let inner = TileRect {
            x0: 31,
            y0: 3,
            x1: 117,
            y1: 27,
        };
        // Four players, and the 32 a match can hold: ids 8 and up must not
        // be taken for 0 to 7 (a grid folding ids modulo 8 hides player 8's
        // units from player 0's search).
        let cases = [
            (48, 36, whole(48, 36), None, 4),
            (150, 30, whole(150, 30), None, 4),
            (150, 30, inner.grown(10), Some(inner), 4),
            (48, 36, whole(48, 36), None, u32::from(crate::MAX_PLAYERS)),
            (
                150,
                30,
                inner.grown(10),
                Some(inner),
                u32::from(crate::MAX_PLAYERS),
            ),
        ];
        for (case, &(w, h, window, from, players)) in cases.iter().enumerate() {
            let seed = u64::try_from(case).unwrap();
            let n = 900 + 600 * u32::try_from(case % 3).unwrap();
            let entities = scatter(n, w, h, seed, players);
            let mut grid = Grid::default();
            grid.rebuild(&window, &entities);
            for (i, e) in entities.iter().enumerate() {
                let Some(own) = e.owner else { continue };
                if from.is_some_and(|a| !a.holds(e.pos)) {
                    continue;
                }
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
                let mask = enemies_of(Some(own));
                let found = grid.nearest(e.pos, sight, mask, |b| key(&entities[b.index as usize]));
                assert_eq!(found, scan, "case {case}, entity {i}");
            }
        }
    }

    /// In a match of 32, player 0's search finds a unit of player 8 (and
    /// of 16, 24) standing alone beside it, and player 8's finds player 0's.
    #[test]
    fn ids_eight_apart_are_enemies() {
        assert_eq!(crate::MAX_PLAYERS, 32);
        for other in [8u8, 16, 24, 31] {
            let at = |x: i64| Vec2::from_bits(x << FRAC_BITS, 10 << FRAC_BITS);
            let entities = vec![
                Entity::new(0, Some(PlayerId(0)), UnitKind::Soldier, at(10)),
                Entity::new(1, Some(PlayerId(other)), UnitKind::Soldier, at(12)),
            ];
            let mut grid = Grid::default();
            grid.rebuild(&whole(32, 32), &entities);
            let sight = fx_ratio(6, 1);
            for (me, them) in [(0, 1), (1, 0)] {
                let own = entities[me].owner;
                let found = grid.nearest(entities[me].pos, sight, enemies_of(own), |b| {
                    (b.owner != own).then(|| (entities[me].pos.dist_sq_bits(b.pos), 0))
                });
                assert_eq!(found, Some(them), "player {other}, entity {me}");
            }
        }
    }
}
