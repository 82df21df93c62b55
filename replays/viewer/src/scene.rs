//! What the page draws: a world turned into a flat list of shapes
//! ([`Scene::draw`]) and per-player figures for the plots
//! ([`Scene::figures`]). A flat `i32` list crosses into JavaScript as one
//! typed array, with no per-frame allocation on either side.
//!
//! Each shape is [`SHAPE_LEN`] integers: `[shape, x, y, size, owner, id, extra]`,
//! coordinates and sizes in 1/256 of a tile, `owner` -1 for neutral. The
//! first shape of every scene is [`Shape::Bounds`] (`size` = width,
//! `extra` = height), so the page can fit the view.

use sim::arena::Arena;
use sim::game::{Order, UnitKind, World};
use sim::num::Fx;
use sim::{PlayerId, Simulation};

/// Integers per shape in a scene.
pub const SHAPE_LEN: usize = 7;

/// The kinds of shape the page knows how to draw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum Shape {
    /// The world's extent: `size` wide, `extra` high.
    Bounds = 0,
    /// A run of blocked tiles: from (`x`, `y`), `size` long, one tile high.
    Rock = 1,
    /// A mobile unit: `extra` = kind (0 worker, 1 soldier, 2 archer) + 256 × hit points in percent.
    Unit = 2,
    /// A building: `extra` = hit points in percent × 256.
    Base = 3,
    /// A resource node.
    Mine = 4,
    /// A shot in flight.
    Shot = 5,
    /// A ship: `extra` = heading (0..=255, a full turn) + 256 × hull in percent.
    Ship = 6,
    /// A round obstacle of radius `size`.
    Obstacle = 7,
    /// A pickup: `extra` = kind.
    Pickup = 8,
    /// A fight: a line from (`x`, `y`) to (`size`, `extra`).
    Fight = 9,
}

/// Per-player figures: (name, one value per player in player order).
pub type Figures = Vec<(&'static str, Vec<i64>)>;

/// A world the page can draw. Every game on the [`Simulation`] contract
/// gets a view: the default draws nothing (the page then shows the
/// entity table from [`Simulation::entity_hashes`]).
pub trait Scene: Simulation {
    /// Appends this world's shapes to `out` (see the module doc for the layout).
    fn draw(&self, out: &mut Vec<i32>) {
        let _ = out;
    }

    /// Per-player figures worth plotting over time, as (name, one value
    /// per player in player order). Default: none.
    fn figures(&self) -> Figures {
        Vec::new()
    }
}

/// A fixed-point coordinate in 1/256 of a tile.
fn px(v: Fx) -> i32 {
    i32::try_from(v.to_bits() >> 8).unwrap_or(0)
}

fn owner(p: Option<PlayerId>) -> i32 {
    p.map_or(-1, |p| i32::from(p.0))
}

fn push(
    out: &mut Vec<i32>,
    shape: Shape,
    (x, y): (i32, i32),
    size: i32,
    owner: i32,
    id: u32,
    extra: i32,
) {
    out.extend_from_slice(&[
        shape as i32,
        x,
        y,
        size,
        owner,
        i32::try_from(id).unwrap_or(-1),
        extra,
    ]);
}

fn percent(hp: i32, max: i32) -> i32 {
    if max <= 0 {
        100
    } else {
        (hp.clamp(0, max) * 100) / max
    }
}

/// The reference RTS: the map's rock, resources, bases, units by owner and
/// every unit fighting a target.
impl Scene for World {
    fn draw(&self, out: &mut Vec<i32>) {
        let map = self.map();
        let (w, h) = (i32::from(map.width()), i32::from(map.height()));
        push(out, Shape::Bounds, (0, 0), w * 256, -1, 0, h * 256);
        for y in 0..map.height() {
            let mut run: Option<u16> = None;
            for x in 0..=map.width() {
                let rock = x < map.width() && !map.walkable((x, y));
                match (rock, run) {
                    (true, None) => run = Some(x),
                    (false, Some(start)) => {
                        let len = i32::from(x - start);
                        push(
                            out,
                            Shape::Rock,
                            (i32::from(start) * 256, i32::from(y) * 256),
                            len * 256,
                            -1,
                            0,
                            0,
                        );
                        run = None;
                    }
                    _ => {}
                }
            }
        }
        for e in self.entities() {
            let (x, y) = (px(e.pos.x), px(e.pos.y));
            let hp = percent(e.hp, e.kind.stats().hp);
            let who = owner(e.owner);
            match e.kind {
                UnitKind::Mine => push(out, Shape::Mine, (x, y), 256, -1, e.id, 0),
                UnitKind::Base => push(out, Shape::Base, (x, y), 512, who, e.id, hp * 256),
                kind => {
                    let k = match kind {
                        UnitKind::Worker => 0,
                        UnitKind::Soldier => 1,
                        _ => 2,
                    };
                    push(out, Shape::Unit, (x, y), 96, who, e.id, k + hp * 256);
                }
            }
        }
        for e in self.entities() {
            let fighting =
                !matches!(e.order, Order::Move { .. } | Order::Idle) || e.target.is_some();
            if let Some(target) = e.target.filter(|_| fighting)
                && let Some(t) = self.entity(target)
                && t.owner != e.owner
                && t.kind != UnitKind::Mine
            {
                push(
                    out,
                    Shape::Fight,
                    (px(e.pos.x), px(e.pos.y)),
                    px(t.pos.x),
                    owner(e.owner),
                    e.id,
                    px(t.pos.y),
                );
            }
        }
    }

    fn figures(&self) -> Figures {
        let s = self.summary();
        vec![
            (
                "resources",
                s.players.iter().map(|p| i64::from(p.resources)).collect(),
            ),
            (
                "units",
                s.players
                    .iter()
                    .map(|p| i64::from(p.workers + p.soldiers + p.archers))
                    .collect(),
            ),
        ]
    }
}

/// The arena: its rocks, ships by owner with heading and hull, shots and pickups.
impl Scene for Arena {
    fn draw(&self, out: &mut Vec<i32>) {
        let side = i32::from(self.map().side_tiles()) * 256;
        push(out, Shape::Bounds, (0, 0), side, -1, 0, side);
        for rock in self.map().obstacles() {
            push(
                out,
                Shape::Obstacle,
                (px(rock.pos.x), px(rock.pos.y)),
                px(rock.radius),
                -1,
                0,
                0,
            );
        }
        for p in self.pickups() {
            push(
                out,
                Shape::Pickup,
                (px(p.pos.x), px(p.pos.y)),
                128,
                -1,
                p.id,
                p.kind as i32,
            );
        }
        for s in self.ships().iter().filter(|s| s.alive) {
            let hull = percent(i32::from(s.hp), i32::from(sim::arena::SHIP_HP));
            push(
                out,
                Shape::Ship,
                (px(s.pos.x), px(s.pos.y)),
                160,
                i32::from(s.player.0),
                u32::from(s.player.0),
                i32::from(s.heading) + hull * 256,
            );
        }
        for shot in self.projectiles() {
            push(
                out,
                Shape::Shot,
                (px(shot.pos.x), px(shot.pos.y)),
                40,
                i32::from(shot.owner.0),
                shot.id,
                0,
            );
        }
    }

    fn figures(&self) -> Figures {
        vec![
            (
                "score",
                self.ships().iter().map(|s| i64::from(s.score)).collect(),
            ),
            (
                "deaths",
                self.ships().iter().map(|s| i64::from(s.deaths)).collect(),
            ),
        ]
    }
}
