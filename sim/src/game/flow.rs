//! Grid path-finding by flow fields: one Dijkstra from a destination tile
//! gives every tile its distance to it, and every unit heading there follows
//! the field downhill. Fields are a pure function of the static map and the
//! destination, so the cache holding them is neither hashed nor snapshotted:
//! evicting or rebuilding a field can never change the game.

use super::map::{Map, Tile};
use std::collections::BTreeMap;

/// Distance value of an unreachable tile.
pub(crate) const UNREACHABLE: u32 = u32::MAX;

/// Cost of a straight step; a diagonal costs `DIAG`. 2:3 approximates 1:√2.
const STRAIGHT: u32 = 2;
const DIAG: u32 = 3;

/// Neighbour order used for tie-breaking: N, E, S, W, then the diagonals.
pub(crate) const NEIGHBOURS: [(i32, i32); 8] = [
    (0, -1),
    (1, 0),
    (0, 1),
    (-1, 0),
    (1, -1),
    (1, 1),
    (-1, 1),
    (-1, -1),
];

/// Distances from every tile to one destination.
#[derive(Clone, Debug)]
pub(crate) struct FlowField {
    dist: Vec<u32>,
}

impl FlowField {
    /// Computes the field towards `dest` (Dijkstra with a bucket queue, as
    /// step costs are 2 or 3; diagonals may not cut corners).
    pub(crate) fn compute(map: &Map, dest: Tile) -> Self {
        let mut dist = vec![UNREACHABLE; map.len()];
        if !map.walkable(dest) {
            return Self { dist };
        }
        let w = usize::from(map.width());
        let h = usize::from(map.height());
        let open = |x: usize, y: usize| map.walkable_index(y * w + x);
        // Distances grow by at most DIAG per step, so DIAG + 1 rotating buckets suffice.
        let mut buckets: [Vec<u32>; 4] = Default::default();
        let di = map.index(dest);
        dist[di] = 0;
        buckets[0].push(u32::try_from(di).unwrap_or(0));
        let mut d = 0u32;
        let mut pending = 1usize;
        while pending > 0 {
            let slot = (d % 4) as usize;
            let batch = std::mem::take(&mut buckets[slot]);
            pending -= batch.len();
            for &i in &batch {
                let i = i as usize;
                if dist[i] != d {
                    continue;
                }
                let (x, y) = (i % w, i / w);
                for (k, &(dx, dy)) in NEIGHBOURS.iter().enumerate() {
                    let (Some(nx), Some(ny)) = (
                        x.checked_add_signed(dx as isize),
                        y.checked_add_signed(dy as isize),
                    ) else {
                        continue;
                    };
                    if nx >= w || ny >= h || !open(nx, ny) {
                        continue;
                    }
                    let diagonal = k >= 4;
                    if diagonal && !(open(nx, y) && open(x, ny)) {
                        continue;
                    }
                    let nd = d + if diagonal { DIAG } else { STRAIGHT };
                    let ni = ny * w + nx;
                    if nd < dist[ni] {
                        dist[ni] = nd;
                        buckets[(nd % 4) as usize].push(u32::try_from(ni).unwrap_or(0));
                        pending += 1;
                    }
                }
            }
            // Reuse the allocation for later rounds of this slot.
            let mut batch = batch;
            batch.clear();
            if buckets[slot].is_empty() {
                buckets[slot] = batch;
            }
            d += 1;
        }
        Self { dist }
    }

    /// Distance of a tile to the destination ([`UNREACHABLE`] outside the map).
    pub(crate) fn dist(&self, map: &Map, t: Tile) -> u32 {
        if map.contains(t) {
            self.dist[map.index(t)]
        } else {
            UNREACHABLE
        }
    }

    /// The next tile downhill from `t`; ties go to the earliest neighbour in
    /// [`NEIGHBOURS`] order. `None` at the destination or when unreachable.
    pub(crate) fn next(&self, map: &Map, t: Tile) -> Option<Tile> {
        let here = self.dist(map, t);
        if here == 0 || here == UNREACHABLE {
            return None;
        }
        let mut best: Option<(u32, Tile)> = None;
        for (k, &(dx, dy)) in NEIGHBOURS.iter().enumerate() {
            let Some(n) = map.offset(t, dx, dy) else {
                continue;
            };
            if k >= 4 && !diagonal_open(map, t, dx, dy) {
                continue;
            }
            let d = self.dist(map, n);
            if d < here && best.is_none_or(|(bd, _)| d < bd) {
                best = Some((d, n));
            }
        }
        best.map(|(_, n)| n)
    }
}

fn diagonal_open(map: &Map, t: Tile, dx: i32, dy: i32) -> bool {
    map.offset(t, dx, 0).is_some_and(|a| map.walkable(a))
        && map.offset(t, 0, dy).is_some_and(|b| map.walkable(b))
}

/// Most fields kept between ticks; a pure performance knob.
const CACHE_CAP: usize = 64;

/// Flow fields by destination, least recently used evicted first.
#[derive(Clone, Debug, Default)]
pub(crate) struct FlowCache {
    fields: BTreeMap<Tile, (FlowField, u64)>,
    clock: u64,
    /// Fields computed since the world was built (for diagnostics only).
    pub(crate) computed: u64,
}

impl FlowCache {
    /// Makes sure the field for `dest` exists and marks it used now.
    pub(crate) fn ensure(&mut self, map: &Map, dest: Tile) {
        self.clock += 1;
        let now = self.clock;
        if let Some(entry) = self.fields.get_mut(&dest) {
            entry.1 = now;
            return;
        }
        self.computed += 1;
        self.fields
            .insert(dest, (FlowField::compute(map, dest), now));
    }

    /// Evicts the least recently used fields beyond the cap.
    pub(crate) fn trim(&mut self) {
        while self.fields.len() > CACHE_CAP {
            let oldest = self
                .fields
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(t, _)| *t);
            match oldest {
                Some(t) => {
                    self.fields.remove(&t);
                }
                None => break,
            }
        }
    }

    /// The field towards `dest`, if computed.
    pub(crate) fn get(&self, dest: Tile) -> Option<&FlowField> {
        self.fields.get(&dest).map(|(f, _)| f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_goes_around_a_wall() {
        // A wall at x=5 from y=0..=8 forces a detour through y=9.
        let mut map = Map::open(10, 10);
        for y in 0..9 {
            map.set_rock((5, y));
        }
        let f = FlowField::compute(&map, (9, 0));
        assert_eq!(f.dist(&map, (9, 0)), 0);
        assert_eq!(f.dist(&map, (5, 0)), UNREACHABLE);
        // Follow the field from (0,0): must reach the destination.
        let mut t = (0, 0);
        let mut steps = 0;
        while let Some(n) = f.next(&map, t) {
            assert!(map.walkable(n));
            t = n;
            steps += 1;
            assert!(steps < 100);
        }
        assert_eq!(t, (9, 0));
        // Ties are broken the same way every time: straight north-first order.
        let open = Map::open(5, 5);
        let g = FlowField::compute(&open, (2, 0));
        assert_eq!(g.next(&open, (2, 4)), Some((2, 3)));
    }
}
