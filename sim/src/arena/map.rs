//! The arena's static layout: a walled square, round rocks and spawn
//! points, all generated from the match seed.

use super::geom::{HEADINGS, closest_approach, heading_vector, sq_bits};
use crate::num::{Fx, Vec2, fx_int, fx_ratio};
use crate::rng::Pcg32;
use serde::{Deserialize, Serialize};

/// Smallest and largest arena side (tiles).
pub(crate) const SIDE_RANGE: (u16, u16) = (24, 256);
/// Most rocks an arena may hold.
pub(crate) const MAX_OBSTACLES: u8 = 48;
/// Most spawn points an arena may hold.
const MAX_SPAWNS: usize = 64;

/// A round rock: ships bounce off it, projectiles break on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Obstacle {
    /// Centre (tiles).
    pub pos: Vec2,
    /// Radius (tiles).
    pub radius: Fx,
}

/// The static arena: side length, rocks and spawn points (constant for a match).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ArenaMap {
    side: u16,
    obstacles: Vec<Obstacle>,
    spawns: Vec<Vec2>,
}

impl ArenaMap {
    /// A square arena of `side` tiles with up to `obstacles` rocks and
    /// `2 * max(players, 4)` spawn points on a ring around the centre, the
    /// rocks kept clear of the spawn points and of each other.
    pub(crate) fn generate(side: u16, obstacles: u8, players: u8, rng: &mut Pcg32) -> Self {
        let side = side.clamp(SIDE_RANGE.0, SIDE_RANGE.1);
        let s = fx_int(i64::from(side));
        let centre = Vec2::new(s / 2, s / 2);
        let n = 2 * u32::from(players.max(4));
        let base = rng.below(u32::from(HEADINGS));
        let ring = s * 3 / 8;
        let spawns = (0..n)
            .map(|i| {
                let h = (base + i * u32::from(HEADINGS) / n) % u32::from(HEADINGS);
                centre + heading_vector(u8::try_from(h).unwrap_or(0)).scale(ring)
            })
            .collect::<Vec<_>>();
        let mut rocks: Vec<Obstacle> = Vec::new();
        for _ in 0..obstacles.min(MAX_OBSTACLES) {
            // A few tries per rock; a crowded arena simply gets fewer rocks.
            for _ in 0..32 {
                let radius = fx_ratio(i64::from(rng.range(3, 7)), 2);
                let margin = radius + fx_int(3);
                let span = (s - margin - margin).to_num::<i64>().max(1);
                let x = margin + fx_int(i64::from(rng.below(u32::try_from(span).unwrap_or(1))));
                let y = margin + fx_int(i64::from(rng.below(u32::try_from(span).unwrap_or(1))));
                let pos = Vec2::new(x, y);
                let near_spawn = spawns
                    .iter()
                    .any(|&p| p.dist_sq_bits(pos) < sq_bits(radius + fx_int(4)));
                let near_rock = rocks
                    .iter()
                    .any(|r| r.pos.dist_sq_bits(pos) < sq_bits(r.radius + radius + fx_int(3)));
                if !near_spawn && !near_rock {
                    rocks.push(Obstacle { pos, radius });
                    break;
                }
            }
        }
        Self {
            side,
            obstacles: rocks,
            spawns,
        }
    }

    /// Side length in tiles; the arena spans `0..side` on both axes.
    #[must_use]
    pub const fn side_tiles(&self) -> u16 {
        self.side
    }

    /// Side length as a scalar.
    #[must_use]
    pub fn side(&self) -> Fx {
        fx_int(i64::from(self.side))
    }

    /// The centre of the arena.
    #[must_use]
    pub fn centre(&self) -> Vec2 {
        let h = self.side() / 2;
        Vec2::new(h, h)
    }

    /// The rocks.
    #[must_use]
    pub fn obstacles(&self) -> &[Obstacle] {
        &self.obstacles
    }

    /// The spawn points, in ring order.
    #[must_use]
    pub fn spawns(&self) -> &[Vec2] {
        &self.spawns
    }

    /// True when a disc of radius `r` at `p` lies inside the walls.
    #[must_use]
    pub fn inside(&self, p: Vec2, r: Fx) -> bool {
        let s = self.side();
        p.x >= r && p.y >= r && p.x <= s - r && p.y <= s - r
    }

    /// True when a disc of radius `r` at `p` overlaps a rock.
    #[must_use]
    pub fn blocked(&self, p: Vec2, r: Fx) -> bool {
        self.obstacles
            .iter()
            .any(|o| o.pos.dist_sq_bits(p) < sq_bits(o.radius + r))
    }

    /// True when a disc of radius `r` can travel in a straight line from `a`
    /// to `b` without touching a rock (line of fire, line of flight).
    #[must_use]
    pub fn line_clear(&self, a: Vec2, b: Vec2, r: Fx) -> bool {
        self.obstacles
            .iter()
            .all(|o| closest_approach(a, b - a, o.pos).1 >= sq_bits(o.radius + r))
    }

    /// Checks what a restored snapshot must satisfy for the simulation to be safe.
    pub(crate) fn validate(&self) -> Result<(), String> {
        if !(SIDE_RANGE.0..=SIDE_RANGE.1).contains(&self.side) {
            return Err(format!("arena side {} out of range", self.side));
        }
        if self.obstacles.len() > usize::from(MAX_OBSTACLES) {
            return Err(format!("{} rocks", self.obstacles.len()));
        }
        if self.spawns.is_empty() || self.spawns.len() > MAX_SPAWNS {
            return Err(format!("{} spawn points", self.spawns.len()));
        }
        for o in &self.obstacles {
            if o.radius <= Fx::ZERO || o.radius > fx_int(8) || !self.inside(o.pos, Fx::ZERO) {
                return Err("a rock is outside the arena or of absurd size".into());
            }
        }
        if self.spawns.iter().any(|&p| !self.inside(p, Fx::ZERO)) {
            return Err("a spawn point is outside the arena".into());
        }
        Ok(())
    }
}
