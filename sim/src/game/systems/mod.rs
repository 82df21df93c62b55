//! The per-tick systems. [`plan_all`] decides, read-only, what every unit
//! wants this tick (so every unit sees the same start-of-tick world);
//! [`act`] then carries the plans out in id order.

pub(crate) mod combat;
pub(crate) mod economy;
pub(crate) mod movement;

use super::UnitKind;
use super::culling::TileRect;
use super::flow::FlowCache;
use super::grid::Grid;
use super::map::Map;
use super::world::{Order, State};
use crate::contract::PlayerId;
use crate::num::{Fx, Vec2, fx_int, fx_ratio};

/// Where a unit walks this tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Goal {
    /// Stand still.
    None,
    /// Straight towards a point.
    Point(Vec2),
    /// Follow the flow field towards `dest`, ending at `point`.
    Field { dest: (u16, u16), point: Vec2 },
}

/// What a unit does besides walking.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Intent {
    None,
    /// Hit the entity at this index.
    Hit(usize),
    /// Work the mine at this index.
    Mine(usize),
    /// Hand the cargo in.
    Deposit,
    /// Build a base at the order's site.
    Build,
    /// Close to the formation point: give up after a while if a crowd keeps
    /// the unit from reaching it exactly.
    Settle,
}

/// One unit's decision for this tick.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    pub(crate) goal: Goal,
    pub(crate) intent: Intent,
    /// Replacement order, when the current one finished or became invalid.
    pub(crate) order: Option<Order>,
    /// Replacement target (`Some(None)` clears it).
    pub(crate) target: Option<Option<u32>>,
}

impl Plan {
    const IDLE: Self = Self {
        goal: Goal::None,
        intent: Intent::None,
        order: None,
        target: None,
    };
}

/// Reach for arriving at a formation point (tiles).
const ARRIVE: Fx = fx_ratio(1, 2);
/// Within this distance of its formation point a unit may settle (tiles).
const NEAR: Fx = fx_int(2);
/// Ticks spent near the formation point before a unit stops trying.
const SETTLE_TICKS: u16 = 40;
/// Within this distance of its goal a unit walks straight (tiles).
const DIRECT: Fx = fx_int(5);
/// Within this distance a chased target is approached straight (tiles).
const CHASE_DIRECT: Fx = fx_int(12);
/// Reach for working a mine / handing in at a base / building (tiles).
const MINE_REACH: Fx = fx_ratio(3, 2);
const BASE_REACH: Fx = fx_ratio(5, 2);
const BUILD_REACH: Fx = fx_ratio(3, 2);
/// How far a worker looks for another mine when its own runs dry (tiles).
const MINE_SEARCH: Fx = fx_int(30);
/// Extra distance beyond sight at which an auto-acquired target is given up.
const LEASH: Fx = fx_int(4);

/// What planning looks up, gathered once per tick: the indices of the
/// world's mines with resources left, of its bases, and of every entity by
/// id.
pub(crate) struct Lookups {
    pub(crate) mines: Vec<usize>,
    pub(crate) bases: Vec<usize>,
    /// `by_id[id - first_id]` is the index of the entity with that id
    /// (`u32::MAX`: none); empty when ids are too sparse for a table.
    by_id: Vec<u32>,
    first_id: u32,
}

/// Most table entries per entity in [`Lookups::by_id`]: past it (ids spread
/// thin, as after long play), lookups search the sorted list instead.
const IDS_PER_ENTITY: usize = 8;

impl Lookups {
    fn of(s: &State) -> Self {
        let mut mines = Vec::new();
        let mut bases = Vec::new();
        for (i, e) in s.entities.iter().enumerate() {
            match e.kind {
                UnitKind::Mine if e.cargo > 0 => mines.push(i),
                UnitKind::Base if e.alive() => bases.push(i),
                _ => {}
            }
        }
        // Entities are sorted by id, so the table spans first to last.
        let (first_id, span) = match (s.entities.first(), s.entities.last()) {
            (Some(first), Some(last)) => (first.id, (last.id - first.id) as usize + 1),
            _ => (0, 0),
        };
        let mut by_id = Vec::new();
        if span <= IDS_PER_ENTITY * s.entities.len() + 1024 {
            by_id.resize(span, u32::MAX);
            for (i, e) in s.entities.iter().enumerate() {
                // Indices fit u32, as everywhere in the grid.
                by_id[(e.id - first_id) as usize] = i as u32;
            }
        }
        Self {
            mines,
            bases,
            by_id,
            first_id,
        }
    }

    /// The index of the entity with this id: one load, where a binary
    /// search over thousands of entities would take a dozen steps whose
    /// branches scattered ids make unpredictable.
    pub(crate) fn index_of(&self, s: &State, id: u32) -> Option<usize> {
        if self.by_id.is_empty() {
            return s.index_of(id);
        }
        let at = *self.by_id.get(id.wrapping_sub(self.first_id) as usize)?;
        (at != u32::MAX).then_some(at as usize)
    }

    /// Nearest base owned by `owner` (ties: lower id).
    fn nearest_base(&self, s: &State, owner: Option<PlayerId>, from: Vec2) -> Option<usize> {
        self.bases
            .iter()
            .copied()
            .filter(|&b| s.entities[b].owner == owner)
            .min_by_key(|&b| (from.dist_sq_bits(s.entities[b].pos), s.entities[b].id))
    }

    /// Nearest mine with resources within `MINE_SEARCH` (ties: lower id).
    fn nearest_mine(&self, s: &State, from: Vec2) -> Option<usize> {
        let r = MINE_SEARCH.to_bits();
        self.mines
            .iter()
            .copied()
            .filter(|&m| from.dist_sq_bits(s.entities[m].pos) <= r * r)
            .min_by_key(|&m| (from.dist_sq_bits(s.entities[m].pos), s.entities[m].id))
    }
}

fn within(a: Vec2, b: Vec2, r: Fx) -> bool {
    let rb = r.to_bits();
    a.dist_sq_bits(b) <= rb.saturating_mul(rb)
}

/// A goal that walks to `point`: straight when near with nothing in the
/// way, by the flow field towards `dest` otherwise.
fn walk_to(map: &Map, from: Vec2, point: Vec2, dest: (u16, u16)) -> Goal {
    if within(from, point, DIRECT) && movement::clear_line(map, from, point) {
        Goal::Point(point)
    } else {
        Goal::Field { dest, point }
    }
}

/// Plans every entity's tick from the start-of-tick state; with an `area`,
/// only the units inside it (the others idle: prediction culling).
pub(crate) fn plan_all(s: &State, grid: &Grid, area: Option<&TileRect>) -> Vec<Plan> {
    let lookups = Lookups::of(s);
    s.entities
        .iter()
        .enumerate()
        .map(|(i, e)| {
            if e.kind.is_mobile() && e.alive() && area.is_none_or(|a| a.holds(e.pos)) {
                plan_unit(s, grid, &lookups, i)
            } else {
                Plan::IDLE
            }
        })
        .collect()
}

fn plan_unit(s: &State, grid: &Grid, lookups: &Lookups, i: usize) -> Plan {
    let e = &s.entities[i];
    let stats = e.kind.stats();
    let mut plan = Plan::IDLE;

    // 1. Validate the current target; army units on Idle/AttackMove look for one.
    let explicit = matches!(e.order, Order::Attack { .. });
    let mut target = e.target.and_then(|id| {
        let ti = lookups.index_of(s, id)?;
        let t = &s.entities[ti];
        let leash = stats.sight + LEASH;
        let valid = t.alive()
            && t.owner.is_some()
            && t.owner != e.owner
            && (explicit || within(e.pos, t.pos, leash));
        valid.then_some(ti)
    });
    if target.is_none() && e.target.is_some() {
        plan.target = Some(None);
        if explicit {
            plan.order = Some(Order::Idle);
        }
    }
    let seeks = e.kind.is_army() && matches!(e.order, Order::Idle | Order::AttackMove { .. });
    let slot = s.tick.wrapping_add(e.id);
    if seeks && ((target.is_none() && slot % 4 == 0) || slot % 16 == 0) {
        if let Some(ti) = combat::nearest_enemy(s, grid, i) {
            if target != Some(ti) {
                plan.target = Some(Some(s.entities[ti].id));
            }
            target = Some(ti);
        }
    }

    // 2. Fight if there is a target.
    if let Some(ti) = target {
        if !explicit || plan.order.is_none() {
            let t = &s.entities[ti];
            if within(e.pos, t.pos, stats.range + t.kind.stats().radius) {
                if e.cooldown == 0 {
                    plan.intent = Intent::Hit(ti);
                }
            } else {
                // Near targets are chased straight; far ones through a flow
                // field to a coarse tile that many chasers share.
                plan.goal = if within(e.pos, t.pos, CHASE_DIRECT) {
                    Goal::Point(t.pos)
                } else {
                    let (tx, ty) = t.pos.tile();
                    Goal::Field {
                        dest: combat::coarse(&s.map, (tx, ty)),
                        point: t.pos,
                    }
                };
            }
            return plan;
        }
    }

    // 3. Otherwise follow the order.
    match &e.order {
        Order::Idle | Order::Attack { .. } => {}
        Order::Move { dest, slot } | Order::AttackMove { dest, slot } => {
            if within(e.pos, *slot, ARRIVE) {
                plan.order = Some(Order::Idle);
            } else {
                plan.goal = walk_to(&s.map, e.pos, *slot, *dest);
                if within(e.pos, *slot, NEAR) {
                    plan.intent = Intent::Settle;
                }
            }
        }
        Order::Gather { mine, returning } => {
            economy::plan_gather(s, lookups, i, *mine, *returning, &mut plan);
        }
        Order::Build { site } => {
            let point = Vec2::tile_center(site.0, site.1);
            if within(e.pos, point, BUILD_REACH) {
                plan.intent = Intent::Build;
            } else {
                plan.goal = walk_to(&s.map, e.pos, point, *site);
            }
        }
    }
    plan
}

/// Carries out the plans in id order. Damage is accumulated, not applied, so
/// every unit alive at the start of the tick acts (simultaneous combat).
pub(crate) fn act(
    s: &mut State,
    flow: &FlowCache,
    plans: &[Plan],
    damage: &mut [i32],
    spawns: &mut Vec<(Option<PlayerId>, UnitKind, (u16, u16))>,
) {
    for (i, plan) in plans.iter().enumerate() {
        let e = &mut s.entities[i];
        e.cooldown = e.cooldown.saturating_sub(1);
        if let Some(order) = &plan.order {
            e.order = order.clone();
            if matches!(order, Order::Idle) {
                e.timer = 0;
            }
        }
        if let Some(t) = plan.target {
            e.target = t;
        }
        match plan.intent {
            Intent::None => {}
            Intent::Hit(ti) => {
                let stats = s.entities[i].kind.stats();
                let bonus = s.rng.below(3);
                damage[ti] = damage[ti].saturating_add(stats.damage + bonus as i32);
                s.entities[i].cooldown = stats.cooldown;
            }
            Intent::Mine(mi) => economy::work_mine(s, i, mi),
            Intent::Deposit => economy::deposit(s, i),
            Intent::Build => economy::build(s, i, spawns),
            Intent::Settle => {
                let e = &mut s.entities[i];
                e.timer = e.timer.saturating_add(1);
                if e.timer >= SETTLE_TICKS {
                    e.order = Order::Idle;
                    e.timer = 0;
                    continue;
                }
            }
        }
        if plan.goal != Goal::None {
            let e = &s.entities[i];
            let speed = e.kind.stats().speed;
            let next = movement::steer(&s.map, flow, e.pos, plan.goal, speed);
            s.entities[i].pos = next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Simulation;
    use crate::contract::Turn;

    /// Every id, present or not, below, inside and past the list's range,
    /// is found where a binary search finds it: with the table (ids dense,
    /// with the gaps of dead units), without it (ids sparse), and empty.
    #[test]
    fn lookups_find_every_entity_by_id() {
        let mut world = crate::scenarios::melee(600, 3);
        for t in 0..120 {
            world.step(Turn(t), &[]);
        }
        let dense = world.s.clone();
        // A few entities with ids far apart, as a long match could leave.
        let mut sparse = world.s.clone();
        sparse.entities.truncate(5);
        for (e, id) in sparse
            .entities
            .iter_mut()
            .zip([3, 1_000, 5_000, 9_000, 12_000])
        {
            e.id = id;
        }
        let mut empty = world.s.clone();
        empty.entities.clear();
        for (s, table) in [(&dense, true), (&sparse, false), (&empty, false)] {
            let lookups = Lookups::of(s);
            assert_eq!(!lookups.by_id.is_empty(), table);
            let last = s.entities.last().map_or(0, |e| e.id);
            for id in (0..last + 50).chain([u32::MAX - 1, u32::MAX]) {
                let want = s.entities.binary_search_by_key(&id, |e| e.id).ok();
                assert_eq!(lookups.index_of(s, id), want, "id {id}");
            }
        }
        assert!(dense.entities.len() < dense.entities.last().map_or(0, |e| e.id as usize));
    }
}
