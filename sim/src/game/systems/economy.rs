//! Economy: workers gather from mines and hand resources in at the nearest
//! own base; bases train units from a paid queue; workers build new bases.

use super::super::world::{Order, State};
use super::super::{CARRY, GATHER_TICKS, POPULATION_CAP, UnitKind};
use super::{BASE_REACH, Intent, Lookups, MINE_REACH, Plan, walk_to, within};
use crate::contract::PlayerId;
use crate::num::{Vec2, fx_int};

pub(super) fn plan_gather(
    s: &State,
    lookups: &Lookups,
    i: usize,
    mine: u32,
    returning: bool,
    plan: &mut Plan,
) {
    let e = &s.entities[i];
    if returning {
        let Some(b) = lookups.nearest_base(s, e.owner, e.pos) else {
            plan.order = Some(Order::Idle);
            return;
        };
        let base = &s.entities[b];
        if within(e.pos, base.pos, BASE_REACH) {
            plan.intent = Intent::Deposit;
        } else {
            plan.goal = walk_to(&s.map, e.pos, base.pos, base.pos.tile());
        }
        return;
    }
    let current = lookups
        .index_of(s, mine)
        .filter(|&m| s.entities[m].kind == UnitKind::Mine && s.entities[m].cargo > 0);
    let Some(m) = current.or_else(|| lookups.nearest_mine(s, e.pos)) else {
        plan.order = Some(Order::Idle);
        return;
    };
    if s.entities[m].id != mine {
        plan.order = Some(Order::Gather {
            mine: s.entities[m].id,
            returning: false,
        });
    }
    let mpos = s.entities[m].pos;
    if within(e.pos, mpos, MINE_REACH) {
        plan.intent = Intent::Mine(m);
    } else {
        plan.goal = walk_to(&s.map, e.pos, mpos, mpos.tile());
    }
}

pub(super) fn work_mine(s: &mut State, i: usize, m: usize) {
    let w = &mut s.entities[i];
    w.timer = w.timer.saturating_add(1);
    if w.timer < GATHER_TICKS {
        return;
    }
    let take = CARRY.min(s.entities[m].cargo);
    s.entities[m].cargo -= take;
    let w = &mut s.entities[i];
    w.timer = 0;
    w.cargo = w.cargo.saturating_add(take);
    if let Order::Gather { returning, .. } = &mut w.order {
        *returning = true;
    }
}

pub(super) fn deposit(s: &mut State, i: usize) {
    let w = &mut s.entities[i];
    let cargo = std::mem::take(&mut w.cargo);
    if let Order::Gather { returning, .. } = &mut w.order {
        *returning = false;
    }
    if let Some(p) = w.owner.and_then(|o| s.players.get_mut(usize::from(o.0))) {
        p.resources = p.resources.saturating_add(cargo);
    }
}

/// A worker at its site builds a base if the player can pay and the site is
/// free (no base or mine within 5 tiles); otherwise the order is dropped and counted.
pub(super) fn build(
    s: &mut State,
    i: usize,
    spawns: &mut Vec<(Option<PlayerId>, UnitKind, (u16, u16))>,
) {
    let Order::Build { site } = s.entities[i].order else {
        return;
    };
    s.entities[i].order = Order::Idle;
    let owner = s.entities[i].owner;
    let center = Vec2::tile_center(site.0, site.1);
    let crowded = s.entities.iter().any(|e| {
        matches!(e.kind, UnitKind::Base | UnitKind::Mine) && within(e.pos, center, fx_int(5))
    }) || spawns.iter().any(|(_, k, _)| *k == UnitKind::Base);
    let cost = UnitKind::Base.stats().cost;
    let player = owner.and_then(|o| s.players.get_mut(usize::from(o.0)));
    match player {
        Some(p) if !crowded && p.resources >= cost => {
            p.resources -= cost;
            spawns.push((owner, UnitKind::Base, site));
        }
        _ => s.rejected.commands = s.rejected.commands.saturating_add(1),
    }
}

/// Advances every base's training queue; finished units appear next to the base.
pub(crate) fn train_tick(
    s: &mut State,
    spawns: &mut Vec<(Option<PlayerId>, UnitKind, (u16, u16))>,
) {
    let mut population = vec![0u32; s.players.len()];
    for e in &s.entities {
        if let (Some(o), true) = (e.owner, e.kind.is_mobile()) {
            if let Some(n) = population.get_mut(usize::from(o.0)) {
                *n += 1;
            }
        }
    }
    for i in 0..s.entities.len() {
        let e = &s.entities[i];
        if e.kind != UnitKind::Base || !e.alive() {
            continue;
        }
        let Some(&kind) = e.queue.first() else {
            continue;
        };
        let Some(owner) = e.owner else { continue };
        let p = usize::from(owner.0);
        if population.get(p).is_none_or(|&n| n >= POPULATION_CAP) {
            continue;
        }
        let e = &mut s.entities[i];
        e.timer = e.timer.saturating_add(1);
        if e.timer < kind.stats().train_ticks {
            continue;
        }
        e.timer = 0;
        e.queue.remove(0);
        let home = e.pos.tile();
        let trained = s.players[p].trained;
        s.players[p].trained = trained.saturating_add(1);
        population[p] += 1;
        // Spawn points cycle through the ring around the base so new units do not stack.
        let ring = super::super::world::ring_offsets();
        let start = 9 + (trained as usize % 24);
        let spot = ring[start..]
            .iter()
            .filter_map(|&(dx, dy)| s.map.offset(home, dx, dy))
            .find(|&t| s.map.walkable(t))
            .unwrap_or(home);
        spawns.push((Some(owner), kind, spot));
    }
}
