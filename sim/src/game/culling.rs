//! Prediction culling for the reference RTS ([`crate::culling::CulledStep`]):
//! a speculative view forks only a rectangle of tiles (the screen), what
//! lies within sight of it and every building and mine, and steps only the
//! units on the screen; the others keep their confirmed state until the
//! next re-derive.

use super::World;
use crate::contract::{Stamped, Turn};
use crate::culling::CulledStep;
use crate::forensics::EntityHash;
use crate::num::Vec2;

/// A rectangle of tiles, `x0..x1` by `y0..y1` (ends excluded): the part of
/// the map a view shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileRect {
    /// First column.
    pub x0: u16,
    /// First row.
    pub y0: u16,
    /// Column after the last.
    pub x1: u16,
    /// Row after the last.
    pub y1: u16,
}

impl TileRect {
    /// The `width` × `height` tiles centred on tile `(cx, cy)`, clamped at
    /// the map's origin: a screen's worth of map around a point.
    #[must_use]
    pub const fn around(cx: u16, cy: u16, width: u16, height: u16) -> Self {
        let x0 = cx.saturating_sub(width / 2);
        let y0 = cy.saturating_sub(height / 2);
        Self {
            x0,
            y0,
            x1: x0.saturating_add(width),
            y1: y0.saturating_add(height),
        }
    }

    /// The rectangle grown by `by` tiles on every side.
    #[must_use]
    pub const fn grown(&self, by: u16) -> Self {
        Self {
            x0: self.x0.saturating_sub(by),
            y0: self.y0.saturating_sub(by),
            x1: self.x1.saturating_add(by),
            y1: self.y1.saturating_add(by),
        }
    }

    /// Whether the point lies within.
    #[must_use]
    pub fn holds(&self, p: Vec2) -> bool {
        let (x, y) = p.tile();
        (self.x0..self.x1).contains(&x) && (self.y0..self.y1).contains(&y)
    }
}

/// How far around a screen a culled fork keeps units, in tiles: the
/// longest sight, within which a unit on screen picks its target.
const MARGIN: u16 = 8;

/// The tiles a step's spatial grid covers: the whole map, or for a culled
/// step the area and every tile its units can see (their sight reaches at
/// most [`MARGIN`] tiles) with two to spare, within the map.
pub(crate) fn grid_window(area: Option<&TileRect>, width: u16, height: u16) -> TileRect {
    let whole = TileRect {
        x0: 0,
        y0: 0,
        x1: width,
        y1: height,
    };
    area.map_or(whole, |a| {
        let near = a.grown(MARGIN + 2);
        TileRect {
            x0: near.x0.min(width),
            y0: near.y0.min(height),
            x1: near.x1.min(width),
            y1: near.y1.min(height),
        }
    })
}

impl CulledStep for World {
    type Area = TileRect;

    fn fork_within(&self, area: &TileRect, into: &mut Option<Self>) {
        let near = area.grown(MARGIN);
        let kept = self
            .s
            .entities
            .iter()
            .filter(|e| !e.kind.is_mobile() || near.holds(e.pos));
        // Reuse the last fork's allocations (entities, map, players, caches);
        // the struct below names every field, so none is left stale.
        let (mut entities, map, players, mut cache) = match into.take() {
            Some(w) => {
                let (mut map, mut players) = (w.s.map, w.s.players);
                map.clone_from(&self.s.map);
                players.clone_from(&self.s.players);
                (w.s.entities, map, players, w.cache)
            }
            None => (
                Vec::new(),
                self.s.map.clone(),
                self.s.players.clone(),
                super::world::Cache::default(),
            ),
        };
        entities.clear();
        entities.extend(kept.cloned());
        // Flow fields are the same map's: reuse them rather than recompute.
        cache.flow.clone_from(&self.cache.flow);
        *into = Some(Self {
            s: super::world::State {
                setup: self.s.setup.clone(),
                map,
                tick: self.s.tick,
                last_turn: self.s.last_turn,
                rng: self.s.rng.clone(),
                players,
                entities,
                next_id: self.s.next_id,
                rejected: self.s.rejected,
                outcome: self.s.outcome,
            },
            cache,
        });
    }

    fn step_culled(&mut self, turn: Turn, inputs: &[Stamped<Self::Command>], area: &TileRect) {
        self.step_turn_in(turn, inputs, Some(area));
    }

    fn entity_hashes_within(&self, section: &str, area: &TileRect) -> Vec<EntityHash> {
        super::forensics::entity_hashes_within(self, section, area)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests may unwrap
    use super::*;
    use crate::Simulation;

    fn engaged(units: u32) -> World {
        let mut w = crate::scenarios::melee(units, 3);
        for t in 0..60 {
            w.step(Turn(t), &[]);
        }
        w
    }

    /// A screen covering the whole map steps exactly as the full step: the
    /// culled path changes nothing but what it skips.
    #[test]
    fn a_culled_step_over_the_whole_map_is_the_full_step() {
        let mut full = crate::scenarios::skirmish(9);
        let mut culled = full.clone();
        let all = TileRect {
            x0: 0,
            y0: 0,
            x1: u16::MAX,
            y1: u16::MAX,
        };
        let mut bots = crate::scenarios::bots(&full, 9, 600);
        for t in 0..80 {
            let inputs = crate::scenarios::bot_inputs(&full, &mut bots, Turn(t));
            full.step(Turn(t), &inputs);
            culled.step_culled(Turn(t), &inputs, &all);
            assert_eq!(full.state_hash(), culled.state_hash(), "turn {t}");
        }
    }

    /// Off screen nothing moves; on screen the battle goes on; the culled
    /// entity hashes are exactly the on-screen part of the full list.
    #[test]
    fn a_culled_step_moves_only_what_is_on_screen() {
        let start = engaged(2_000);
        let map = start.map();
        let screen = TileRect::around(map.width() / 2, map.height() / 2, 20, 12);
        let mut w = start.clone();
        for t in 60..63 {
            w.step_culled(Turn(t), &[], &screen);
        }
        let mut moved_on_screen = 0;
        for e in start.entities() {
            let Some(now) = w.entities().iter().find(|x| x.id == e.id) else {
                continue; // killed, possibly by a unit on screen
            };
            if screen.holds(e.pos) {
                moved_on_screen += usize::from(now.pos != e.pos);
            } else {
                assert_eq!(now.pos, e.pos, "unit {} moved off screen", e.id);
                assert_eq!(now.order, e.order, "unit {} replanned off screen", e.id);
            }
        }
        assert!(moved_on_screen > 0, "nothing moved on screen");
        for s in w.section_hashes() {
            let within = w.entity_hashes_within(&s.name, &screen);
            let expected: Vec<EntityHash> = w
                .entity_hashes(&s.name)
                .into_iter()
                .filter(|h| {
                    w.entities()
                        .iter()
                        .any(|e| u64::from(e.id) == h.id && screen.holds(e.pos))
                })
                .collect();
            assert_eq!(within, expected, "section {}", s.name);
        }
    }

    /// A fork of the screen and its margin steps the screen exactly as the
    /// whole world stepped culled: nothing a unit on screen reads is left out.
    #[test]
    fn a_fork_within_steps_the_screen_as_the_whole_world_culled() {
        let start = engaged(4_000);
        let map = start.map();
        let screen = TileRect::around(map.width() / 2, map.height() / 2, 24, 14);
        let mut whole = start.clone();
        let mut part = None;
        start.fork_within(&screen, &mut part);
        let mut part = part.unwrap();
        assert!(part.entities().len() < start.entities().len() / 2);
        for t in 60..66 {
            whole.step_culled(Turn(t), &[], &screen);
            part.step_culled(Turn(t), &[], &screen);
            for s in whole.section_hashes() {
                assert_eq!(
                    part.entity_hashes_within(&s.name, &screen),
                    whole.entity_hashes_within(&s.name, &screen),
                    "turn {t}, section {}",
                    s.name
                );
            }
        }
        // A second fork into the same world reuses it and starts over.
        let mut again = Some(part);
        start.fork_within(&screen, &mut again);
        let again = again.unwrap();
        let mut fresh = None;
        start.fork_within(&screen, &mut fresh);
        assert!(again == fresh.unwrap(), "a reused fork equals a fresh one");
    }
}
