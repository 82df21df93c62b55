//! A uniform spatial grid over entity positions, rebuilt each tick by a
//! counting sort, so neighbour queries (separation, targeting) visit only
//! nearby cells instead of all pairs.

use super::Entity;
use crate::num::{FRAC_BITS, Fx, Vec2};

/// log2 of a cell's side in tiles (cells are 2x2 tiles).
const CELL_SHIFT: u32 = 1;

/// Entity indices bucketed by cell; valid until the entity list changes.
#[derive(Clone, Debug, Default)]
pub(crate) struct Grid {
    cols: u32,
    rows: u32,
    /// `starts[c]..starts[c + 1]` is cell `c`'s slice of `items`.
    starts: Vec<u32>,
    items: Vec<u32>,
    cell_of: Vec<u32>,
    /// Per cell, a bit per player owning something in it (neutral: none).
    owners: Vec<u8>,
}

impl Grid {
    /// Rebuilds the grid for a `width` x `height` tile map.
    pub(crate) fn rebuild(&mut self, width: u16, height: u16, entities: &[Entity]) {
        self.cols = (u32::from(width) >> CELL_SHIFT) + 1;
        self.rows = (u32::from(height) >> CELL_SHIFT) + 1;
        let cells = (self.cols * self.rows) as usize;
        self.starts.clear();
        self.starts.resize(cells + 1, 0);
        self.cell_of.clear();
        self.owners.clear();
        self.owners.resize(cells, 0);
        for e in entities {
            let c = self.cell(e.pos);
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
        self.items.resize(entities.len(), 0);
        let mut fill = self.starts.clone();
        // Ascending index order inside each cell: queries are deterministic.
        for (i, &c) in self.cell_of.iter().enumerate() {
            let slot = &mut fill[c as usize];
            self.items[*slot as usize] = u32::try_from(i).unwrap_or(u32::MAX);
            *slot += 1;
        }
    }

    fn axis(&self, v: Fx, limit: u32) -> u32 {
        let t = (v.to_bits() >> (FRAC_BITS + CELL_SHIFT)).max(0);
        u32::try_from(t).unwrap_or(u32::MAX).min(limit - 1)
    }

    fn cell(&self, p: Vec2) -> u32 {
        self.axis(p.y, self.rows) * self.cols + self.axis(p.x, self.cols)
    }

    /// Calls `f` with the index of every entity in the cells overlapping the
    /// square of half-side `radius` around `center`, cell by cell in row-major
    /// order, stopping early when `f` returns false.
    pub(crate) fn query(&self, center: Vec2, radius: Fx, f: impl FnMut(usize) -> bool) {
        self.query_owners(center, radius, u8::MAX, f);
    }

    /// Like [`Grid::query`], but skips cells holding nothing owned by a player
    /// in `mask` (bit `p` for player `p`); neutral entities only appear in
    /// cells that pass for another reason.
    pub(crate) fn query_owners(
        &self,
        center: Vec2,
        radius: Fx,
        mask: u8,
        mut f: impl FnMut(usize) -> bool,
    ) {
        if self.cols == 0 {
            return;
        }
        let x0 = self.axis(center.x - radius, self.cols);
        let x1 = self.axis(center.x + radius, self.cols);
        let y0 = self.axis(center.y - radius, self.rows);
        let y1 = self.axis(center.y + radius, self.rows);
        for cy in y0..=y1 {
            for cx in x0..=x1 {
                let c = (cy * self.cols + cx) as usize;
                if mask != u8::MAX && self.owners[c] & mask == 0 {
                    continue;
                }
                let (a, b) = (self.starts[c] as usize, self.starts[c + 1] as usize);
                for &i in &self.items[a..b] {
                    if !f(i as usize) {
                        return;
                    }
                }
            }
        }
    }
}
