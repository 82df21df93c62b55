//! The tile map: walkable ground and rock, generated from the match seed.

use crate::num::Vec2;
use crate::rng::Pcg32;
use serde::{Deserialize, Serialize};

/// A tile coordinate `(column, row)`.
pub type Tile = (u16, u16);

/// Largest map side the game accepts (keeps every fixed-point product far from overflow).
pub const MAX_SIDE: u16 = 1024;

const ROCK: u8 = 1;

/// A rectangular grid of walkable or blocked tiles. Static for a whole match.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Map {
    width: u16,
    height: u16,
    #[serde(with = "tile_bytes")]
    tiles: Vec<u8>,
}

/// The tiles as one byte string rather than a sequence of bytes: the same
/// encoding in postcard (a length, then the bytes), so hashes and snapshots
/// do not change, but written with one copy instead of one call per tile.
/// Every peer hashes (and its forensics history encodes) the world every
/// turn, map included: 65,536 calls per turn on the 32-player map.
mod tile_bytes {
    use serde::de::{Deserializer, SeqAccess, Visitor};
    use serde::ser::Serializer;
    use std::fmt;

    pub(super) fn serialize<S: Serializer>(tiles: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(tiles)
    }

    struct Tiles;

    impl<'de> Visitor<'de> for Tiles {
        type Value = Vec<u8>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("the map's tiles as bytes")
        }

        fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
            Ok(v.to_vec())
        }

        fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
            Ok(v)
        }

        // Formats without a byte string (JSON) write a sequence of numbers.
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
            // The hint comes from the input: cap it, the map's own bound.
            let cap = seq.size_hint().unwrap_or(0).min(1 << 20);
            let mut v = Vec::with_capacity(cap);
            while let Some(b) = seq.next_element()? {
                v.push(b);
            }
            Ok(v)
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        d.deserialize_bytes(Tiles)
    }
}

/// How to build a match's map and starting units.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MapConfig {
    /// Map width in tiles.
    pub width: u16,
    /// Map height in tiles.
    pub height: u16,
    /// Number of random rock blobs.
    pub obstacles: u16,
    /// Mines placed around each base.
    pub mines_per_base: u8,
    /// Mines placed in the middle of the map.
    pub center_mines: u8,
    /// Workers each player starts with.
    pub start_workers: u8,
    /// Soldiers each player starts with.
    pub start_soldiers: u16,
    /// Archers each player starts with.
    pub start_archers: u16,
}

impl MapConfig {
    /// The standard map for `players` players.
    #[must_use]
    pub fn standard(players: u8) -> Self {
        // Up to eight players as ever (their maps and hashes are pinned);
        // more get twice the side, so that 32 bases an eighth of it apart
        // are 32 tiles apart.
        let side = match players {
            0..=2 => 96,
            3..=8 => 128,
            _ => 256,
        };
        Self {
            width: side,
            height: side,
            obstacles: side / 3,
            mines_per_base: 3,
            center_mines: 2 + players / 2,
            start_workers: 4,
            start_soldiers: 0,
            start_archers: 0,
        }
    }
}

impl Map {
    /// An all-walkable map (sides clamped to `1..=MAX_SIDE`).
    #[must_use]
    pub fn open(width: u16, height: u16) -> Self {
        let width = width.clamp(1, MAX_SIDE);
        let height = height.clamp(1, MAX_SIDE);
        Self {
            width,
            height,
            tiles: vec![0; usize::from(width) * usize::from(height)],
        }
    }

    /// Width in tiles.
    #[must_use]
    pub const fn width(&self) -> u16 {
        self.width
    }

    /// Height in tiles.
    #[must_use]
    pub const fn height(&self) -> u16 {
        self.height
    }

    /// Number of tiles.
    #[must_use]
    pub fn len(&self) -> usize {
        self.tiles.len()
    }

    /// True for a map with no tiles (never produced by the constructors).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.tiles.is_empty()
    }

    /// True when the stored tiles match the dimensions (checked on restore).
    #[must_use]
    pub fn is_consistent(&self) -> bool {
        (1..=MAX_SIDE).contains(&self.width)
            && (1..=MAX_SIDE).contains(&self.height)
            && self.tiles.len() == usize::from(self.width) * usize::from(self.height)
    }

    /// Index of an in-map tile.
    #[must_use]
    pub fn index(&self, (x, y): Tile) -> usize {
        usize::from(y) * usize::from(self.width) + usize::from(x)
    }

    /// The tile at an index.
    #[must_use]
    pub fn tile_at(&self, i: usize) -> Tile {
        let w = usize::from(self.width);
        (
            u16::try_from(i % w).unwrap_or(0),
            u16::try_from(i / w).unwrap_or(0),
        )
    }

    /// True when the tile lies inside the map.
    #[must_use]
    pub const fn contains(&self, (x, y): Tile) -> bool {
        x < self.width && y < self.height
    }

    /// True when the tile is inside the map and not rock.
    #[must_use]
    pub fn walkable(&self, t: Tile) -> bool {
        self.contains(t) && self.tiles[self.index(t)] != ROCK
    }

    /// True when the tile at a valid index is not rock.
    pub(crate) fn walkable_index(&self, i: usize) -> bool {
        self.tiles.get(i).is_some_and(|&t| t != ROCK)
    }

    /// True when the point lies on a walkable tile (negative coordinates are outside).
    #[must_use]
    pub fn walkable_point(&self, p: Vec2) -> bool {
        p.x >= 0 && p.y >= 0 && self.walkable(p.tile())
    }

    /// Tile at signed coordinates, if inside the map.
    #[must_use]
    pub fn offset(&self, (x, y): Tile, dx: i32, dy: i32) -> Option<Tile> {
        let nx = u16::try_from(i32::from(x) + dx).ok()?;
        let ny = u16::try_from(i32::from(y) + dy).ok()?;
        self.contains((nx, ny)).then_some((nx, ny))
    }

    /// Turns one tile into rock (map editing for tests).
    #[cfg(test)]
    pub(crate) fn set_rock(&mut self, t: Tile) {
        self.set(t, ROCK);
    }

    fn set(&mut self, t: Tile, v: u8) {
        if self.contains(t) {
            let i = self.index(t);
            self.tiles[i] = v;
        }
    }

    fn fill_disc(&mut self, c: Tile, r: i32, v: u8) {
        for dy in -r..=r {
            for dx in -r..=r {
                if dx * dx + dy * dy <= r * r {
                    if let Some(t) = self.offset(c, dx, dy) {
                        self.set(t, v);
                    }
                }
            }
        }
    }

    /// Clears a 3-wide straight corridor between two tiles.
    fn carve(&mut self, a: Tile, b: Tile) {
        let (ax, ay) = (i32::from(a.0), i32::from(a.1));
        let (bx, by) = (i32::from(b.0), i32::from(b.1));
        let steps = (bx - ax).abs().max((by - ay).abs()).max(1);
        for s in 0..=steps {
            let x = ax + (bx - ax) * s / steps;
            let y = ay + (by - ay) * s / steps;
            if let (Ok(x), Ok(y)) = (u16::try_from(x), u16::try_from(y)) {
                self.fill_disc((x, y), 1, 0);
            }
        }
    }

    /// Generates rock blobs, keeps `clear` discs (tile, radius) open, joins
    /// them by corridors through the centre and walls off unreachable pockets.
    pub(crate) fn generate(
        width: u16,
        height: u16,
        blobs: u16,
        clear: &[(Tile, i32)],
        rng: &mut Pcg32,
    ) -> Self {
        let mut map = Self::open(width, height);
        for _ in 0..blobs {
            let x = u16::try_from(rng.below(u32::from(map.width))).unwrap_or(0);
            let y = u16::try_from(rng.below(u32::from(map.height))).unwrap_or(0);
            let r = i32::try_from(rng.range(1, 3)).unwrap_or(1);
            map.fill_disc((x, y), r, ROCK);
        }
        let center = (map.width / 2, map.height / 2);
        map.fill_disc(center, 3, 0);
        for &(t, r) in clear {
            map.fill_disc(t, r, 0);
            map.carve(t, center);
        }
        map.seal_unreachable(center);
        map
    }

    /// Turns every walkable tile not connected to `from` into rock, so every
    /// open tile is reachable from every other.
    fn seal_unreachable(&mut self, from: Tile) {
        if !self.walkable(from) {
            return;
        }
        let mut seen = vec![false; self.tiles.len()];
        let mut stack = vec![from];
        seen[self.index(from)] = true;
        while let Some(t) = stack.pop() {
            for (dx, dy) in [(0, -1), (1, 0), (0, 1), (-1, 0)] {
                if let Some(n) = self.offset(t, dx, dy) {
                    let i = self.index(n);
                    if !seen[i] && self.tiles[i] != ROCK {
                        seen[i] = true;
                        stack.push(n);
                    }
                }
            }
        }
        for (i, s) in seen.iter().enumerate() {
            if !s {
                self.tiles[i] = ROCK;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_map_keeps_clear_areas_and_is_connected() {
        let mut rng = Pcg32::new(5, 0);
        let clear = [((10, 10), 5), ((80, 80), 5)];
        let map = Map::generate(96, 96, 60, &clear, &mut rng);
        assert!(map.is_consistent());
        assert!(map.walkable((10, 10)) && map.walkable((80, 80)) && map.walkable((48, 48)));
        assert!(!map.walkable((96, 0)));
        let rock = (0..map.len())
            .filter(|&i| !map.walkable(map.tile_at(i)))
            .count();
        assert!(rock > 0, "obstacles were generated");
    }
}
