//! One turn: apply the turn's commands in canonical order (validating each),
//! then run the tick pipeline `ticks_per_turn` times.
//!
//! Tick pipeline: spatial grid → plan (targets, goals; read-only) → flow
//! fields for the planned goals → act (move, attack, gather, build) →
//! training → damage → separation → removal of the dead and win check.

use super::command::{Command, MAX_PATH_COMMANDS_PER_TURN, MAX_TRAIN_COUNT, MAX_UNITS_PER_COMMAND};
use super::culling::TileRect;
use super::systems::{self, Goal, Plan};
use super::world::{Entity, Order, Outcome, World};
use super::{MAX_QUEUE, UnitKind};
use crate::contract::{MAX_COMMANDS_PER_TURN, PlayerId, Stamped, Turn};
use std::collections::BTreeSet;

impl World {
    pub(crate) fn step_turn(&mut self, turn: Turn, inputs: &[Stamped<Command>]) {
        self.step_turn_in(turn, inputs, None);
    }

    /// [`World::step_turn`], with only the units inside `area` planning,
    /// acting and being pushed apart when it is given (a speculative view's
    /// prediction culling: `super::culling`). Commands apply everywhere.
    pub(crate) fn step_turn_in(
        &mut self,
        turn: Turn,
        inputs: &[Stamped<Command>],
        area: Option<&TileRect>,
    ) {
        // Canonical order: player, then seq; exact duplicates of (player, seq)
        // are further ordered by their encoded bytes so arrival order never matters.
        let mut keyed: Vec<(PlayerId, u16, Vec<u8>, &Command)> = inputs
            .iter()
            .map(|s| {
                let bytes = postcard::to_allocvec(&s.command).unwrap_or_default();
                (s.player, s.seq, bytes, &s.command)
            })
            .collect();
        keyed.sort_by(|a, b| (a.0, a.1, &a.2).cmp(&(b.0, b.1, &b.2)));
        let mut per_player = [0usize; 256];
        let mut paths = [0usize; 256];
        for (player, _, _, cmd) in keyed {
            let n = &mut per_player[usize::from(player.0)];
            *n += 1;
            if *n > MAX_COMMANDS_PER_TURN {
                self.reject();
                continue;
            }
            if matches!(
                cmd,
                Command::Move { .. } | Command::AttackMove { .. } | Command::Build { .. }
            ) {
                let p = &mut paths[usize::from(player.0)];
                *p += 1;
                if *p > MAX_PATH_COMMANDS_PER_TURN {
                    self.reject();
                    continue;
                }
            }
            self.apply(player, cmd);
        }
        for _ in 0..self.ticks_per_turn() {
            self.tick_once(area);
        }
        self.s.last_turn = Some(turn);
    }

    fn reject(&mut self) {
        self.s.rejected.commands = self.s.rejected.commands.saturating_add(1);
    }

    /// Indices of the listed units that `player` owns, alive and of a kind
    /// `ok` accepts; other ids are skipped and counted. `None` when the list
    /// is empty, too long, or names no usable unit.
    fn own_units(
        &mut self,
        player: PlayerId,
        units: &[u32],
        ok: impl Fn(UnitKind) -> bool,
    ) -> Option<Vec<usize>> {
        if units.is_empty() || units.len() > MAX_UNITS_PER_COMMAND {
            return None;
        }
        let mut out = Vec::with_capacity(units.len());
        for &id in units {
            match self.index_of(id) {
                Some(i)
                    if self.s.entities[i].alive()
                        && self.s.entities[i].owner == Some(player)
                        && ok(self.s.entities[i].kind)
                        && !out.contains(&i) =>
                {
                    out.push(i);
                }
                _ => self.s.rejected.unit_refs = self.s.rejected.unit_refs.saturating_add(1),
            }
        }
        (!out.is_empty()).then_some(out)
    }

    /// Applies one validated command; anything invalid is ignored and counted.
    fn apply(&mut self, player: PlayerId, cmd: &Command) {
        if usize::from(player.0) >= self.s.players.len() {
            return self.reject();
        }
        match cmd {
            Command::Move { units, x, y } | Command::AttackMove { units, x, y } => {
                let dest = (*x, *y);
                if !self.s.map.walkable(dest) {
                    return self.reject();
                }
                let Some(idx) = self.own_units(player, units, UnitKind::is_mobile) else {
                    return self.reject();
                };
                let slots = self.slots(dest, idx.len());
                let attack = matches!(cmd, Command::AttackMove { .. });
                for (&i, slot) in idx.iter().zip(slots) {
                    let e = &mut self.s.entities[i];
                    e.order = if attack {
                        Order::AttackMove { dest, slot }
                    } else {
                        Order::Move { dest, slot }
                    };
                    e.target = None;
                    e.timer = 0;
                }
            }
            Command::Attack { units, target } => {
                let valid = self
                    .entity(*target)
                    .is_some_and(|t| t.alive() && t.owner.is_some() && t.owner != Some(player));
                if !valid {
                    return self.reject();
                }
                let Some(idx) = self.own_units(player, units, UnitKind::is_mobile) else {
                    return self.reject();
                };
                for i in idx {
                    let e = &mut self.s.entities[i];
                    e.order = Order::Attack { target: *target };
                    e.target = Some(*target);
                }
            }
            Command::Stop { units } => {
                let Some(idx) = self.own_units(player, units, UnitKind::is_mobile) else {
                    return self.reject();
                };
                for i in idx {
                    let e = &mut self.s.entities[i];
                    e.order = Order::Idle;
                    e.target = None;
                }
            }
            Command::Gather { units, mine } => {
                if self.entity(*mine).is_none_or(|m| m.kind != UnitKind::Mine) {
                    return self.reject();
                }
                let Some(idx) = self.own_units(player, units, |k| k == UnitKind::Worker) else {
                    return self.reject();
                };
                for i in idx {
                    let e = &mut self.s.entities[i];
                    e.order = Order::Gather {
                        mine: *mine,
                        returning: e.cargo > 0,
                    };
                    e.target = None;
                    e.timer = 0;
                }
            }
            Command::Train { base, kind, count } => self.train(player, *base, *kind, *count),
            Command::Build { worker, x, y } => {
                let site = (*x, *y);
                if !self.s.map.walkable(site) {
                    return self.reject();
                }
                let Some(idx) = self.own_units(player, &[*worker], |k| k == UnitKind::Worker)
                else {
                    return self.reject();
                };
                for i in idx {
                    let e = &mut self.s.entities[i];
                    e.order = Order::Build { site };
                    e.target = None;
                }
            }
        }
    }

    fn train(&mut self, player: PlayerId, base: u32, kind: UnitKind, count: u8) {
        let Some(bi) = self.index_of(base) else {
            return self.reject();
        };
        let b = &self.s.entities[bi];
        let ok = b.kind == UnitKind::Base
            && b.alive()
            && b.owner == Some(player)
            && kind.is_trainable()
            && (1..=MAX_TRAIN_COUNT).contains(&count)
            && b.queue.len() + usize::from(count) <= MAX_QUEUE;
        let cost = kind.stats().cost * u32::from(count);
        let p = usize::from(player.0);
        if !ok || self.s.players[p].resources < cost {
            return self.reject();
        }
        self.s.players[p].resources -= cost;
        let b = &mut self.s.entities[bi];
        b.queue
            .extend(std::iter::repeat_n(kind, usize::from(count)));
    }

    /// Formation points for `n` units: the `n` tiles around `dest` with the
    /// shortest paths to it (ties in ring order), so a slot is never on the
    /// far side of a wall when a nearer one exists.
    fn slots(&mut self, dest: (u16, u16), n: usize) -> Vec<crate::num::Vec2> {
        self.cache.flow.ensure(&self.s.map, dest);
        let mut ranked: Vec<(u32, usize, (u16, u16))> = Vec::new();
        if let Some(field) = self.cache.flow.get(dest) {
            for (k, &(dx, dy)) in super::world::ring_offsets().iter().enumerate() {
                if let Some(t) = self.s.map.offset(dest, dx, dy) {
                    let d = field.dist(&self.s.map, t);
                    if d != super::flow::UNREACHABLE {
                        ranked.push((d, k, t));
                    }
                }
            }
        }
        ranked.sort_unstable();
        let mut out: Vec<crate::num::Vec2> = ranked
            .iter()
            .take(n)
            .map(|&(_, _, t)| crate::num::Vec2::tile_center(t.0, t.1))
            .collect();
        // More units than ring tiles: the rest share the destination itself.
        while out.len() < n {
            out.push(crate::num::Vec2::tile_center(dest.0, dest.1));
        }
        out
    }

    /// One simulation tick.
    pub(crate) fn tick_once(&mut self, area: Option<&TileRect>) {
        self.s.tick = self.s.tick.wrapping_add(1);
        let window = super::culling::grid_window(area, self.s.map.width(), self.s.map.height());
        self.cache.grid.rebuild(&window, &self.s.entities);

        let plans: Vec<Plan> = systems::plan_all(&self.s, &self.cache.grid, area);

        let dests: BTreeSet<(u16, u16)> = plans
            .iter()
            .filter_map(|p| match p.goal {
                Goal::Field { dest, .. } => Some(dest),
                _ => None,
            })
            .collect();
        for d in dests {
            self.cache.flow.ensure(&self.s.map, d);
        }
        self.cache.flow.trim();

        let mut damage = vec![0i32; self.s.entities.len()];
        let mut spawns: Vec<(Option<PlayerId>, UnitKind, (u16, u16))> = Vec::new();
        systems::act(
            &mut self.s,
            &self.cache.flow,
            &plans,
            &mut damage,
            &mut spawns,
        );
        systems::economy::train_tick(&mut self.s, &mut spawns);
        for (owner, kind, t) in spawns {
            self.spawn_at(owner, kind, t);
        }
        for (e, d) in self.s.entities.iter_mut().zip(&damage) {
            e.hp = e.hp.saturating_sub(*d);
        }
        // Units walked at most a step since the rebuild: refresh the bodies
        // in place, unless something was spawned.
        if !self.cache.grid.refresh(&self.s.entities) {
            self.cache.grid.rebuild(&window, &self.s.entities);
        }
        systems::movement::separate(&mut self.s, &self.cache.grid, area);
        self.remove_dead();
    }

    fn remove_dead(&mut self) {
        let players = &mut self.s.players;
        self.s.entities.retain(|e: &Entity| {
            let gone = !e.alive() || (e.kind == UnitKind::Mine && e.cargo == 0);
            if gone {
                if let Some(p) = e.owner.and_then(|o| players.get_mut(usize::from(o.0))) {
                    p.lost = p.lost.saturating_add(1);
                }
            }
            !gone
        });
        for p in players.iter_mut() {
            p.alive = false;
        }
        for e in &self.s.entities {
            if e.kind == UnitKind::Base {
                if let Some(p) = e.owner.and_then(|o| players.get_mut(usize::from(o.0))) {
                    p.alive = true;
                }
            }
        }
        if self.s.outcome.is_none() && players.len() > 1 {
            let mut alive = players.iter().filter(|p| p.alive);
            match (alive.next(), alive.next()) {
                (None, _) => self.s.outcome = Some(Outcome::Draw),
                (Some(p), None) => self.s.outcome = Some(Outcome::Winner(p.id)),
                _ => {}
            }
        }
    }
}
