//! One turn: apply the turn's commands in canonical order (validating and
//! counting hostile ones), then run the tick pipeline `ticks_per_turn` times.
//!
//! Tick pipeline: respawns → ships fly (turn, boost, thrust, brake, drag,
//! speed cap, rocks, walls) and fire → projectiles travel and hit the first
//! ship or rock on their path → pickups are collected, then spawned. Ships
//! are handled in player order and projectiles and pickups in id order, so
//! every tie (two shots killing one ship, two ships on one pickup) is decided
//! the same way on every peer.

use super::codec::max_pickups;
use super::command::{MAX_COMMANDS_PER_TURN, MAX_POWER, MAX_TURN_RATE};
use super::geom::{HEADINGS, closest_approach, heading_vector, sq_bits};
use super::world::{Arena, Outcome, Pickup, PickupKind, Projectile};
use super::*;
use crate::num::{Fx, Vec2, fx_int};
use crate::{PlayerId, Stamped, Turn, canonical_order};

impl Arena {
    pub(crate) fn step_turn(&mut self, turn: Turn, inputs: &[Stamped<Command>]) {
        self.s.last_turn = Some(turn);
        self.s.turns = self.s.turns.saturating_add(1);
        if self.s.outcome.is_some() {
            // The match is over: the world is frozen, commands are moot.
            return;
        }
        let mut ordered: Vec<Stamped<Command>> = inputs.to_vec();
        // Exact duplicates of (player, seq) are first ordered by their encoded
        // bytes, so the stable canonical sort leaves nothing to arrival order.
        ordered.sort_by_cached_key(|s| postcard::to_allocvec(&s.command).unwrap_or_default());
        canonical_order(&mut ordered);
        let mut counts = [0u16; 256];
        for s in &ordered {
            self.apply(s.player, s.command, &mut counts);
        }
        for _ in 0..self.s.setup.ticks_per_turn {
            self.tick_once();
            if self.s.outcome.is_some() {
                break;
            }
        }
        for ship in &mut self.s.ships {
            ship.brake = false;
            ship.trigger = false;
            ship.boost = false;
        }
        if self.s.outcome.is_none() && self.s.turns >= self.s.config.turn_limit {
            let best = self.s.ships.iter().map(|s| s.score).max().unwrap_or(0);
            let mut leaders = self.s.ships.iter().filter(|s| s.score == best);
            self.s.outcome = Some(match (leaders.next(), leaders.next()) {
                (Some(s), None) => Outcome::TimeLimit(s.player),
                _ => Outcome::Draw,
            });
        }
    }

    /// Applies one command; anything hostile is ignored or clamped, and counted.
    fn apply(&mut self, player: PlayerId, cmd: Command, counts: &mut [u16; 256]) {
        let s = &mut self.s;
        let Some(ship) = s.ships.get_mut(usize::from(player.0)) else {
            s.rejected.unknown_player = s.rejected.unknown_player.saturating_add(1);
            return;
        };
        let n = &mut counts[usize::from(player.0)];
        *n = n.saturating_add(1);
        if *n > MAX_COMMANDS_PER_TURN {
            s.rejected.over_cap = s.rejected.over_cap.saturating_add(1);
            return;
        }
        if !ship.alive {
            s.rejected.dead_ship = s.rejected.dead_ship.saturating_add(1);
            return;
        }
        let clamped = match cmd {
            Command::Thrust { power } => {
                ship.thrust = power.min(MAX_POWER);
                power > MAX_POWER
            }
            Command::Turn { rate } => {
                ship.turn = rate.clamp(-MAX_TURN_RATE, MAX_TURN_RATE);
                ship.turn != rate
            }
            Command::Brake => {
                ship.brake = true;
                false
            }
            Command::Fire => {
                ship.trigger = true;
                false
            }
            Command::Boost => {
                ship.boost = true;
                false
            }
        };
        if clamped {
            s.rejected.clamped = s.rejected.clamped.saturating_add(1);
        }
    }

    fn tick_once(&mut self) {
        self.s.tick = self.s.tick.wrapping_add(1);
        for i in 0..self.s.ships.len() {
            let ship = &mut self.s.ships[i];
            if !ship.alive {
                ship.respawn_in = ship.respawn_in.saturating_sub(1);
                if ship.respawn_in == 0 {
                    self.respawn(i);
                }
            }
        }
        for i in 0..self.s.ships.len() {
            if self.s.ships[i].alive {
                self.fly(i);
                self.shoot(i);
            }
        }
        self.move_projectiles();
        self.collect_pickups();
        self.spawn_pickup();
    }

    /// Turning, boost, thrust, brake, drag, the speed cap, then the move
    /// with bounces off rocks and walls.
    fn fly(&mut self, i: usize) {
        let map = &self.s.map;
        let ship = &mut self.s.ships[i];
        let h = (i16::from(ship.heading) + i16::from(ship.turn)).rem_euclid(i16::from(HEADINGS));
        ship.heading = u8::try_from(h).unwrap_or(0);
        let dir = heading_vector(ship.heading);
        // Above cruising speed (after a boost) a ship sheds 1/32 of its speed
        // per tick whatever its thrust; a boost itself may reach the hard cap.
        let mut allowed = (ship.vel.length() * 31 / 32).max(MAX_SPEED);
        if std::mem::take(&mut ship.boost) && ship.boost_cooldown == 0 {
            ship.vel += dir.scale(BOOST_IMPULSE);
            ship.boost_cooldown = BOOST_COOLDOWN;
            allowed = BOOST_MAX_SPEED;
        }
        if ship.thrust > 0 {
            ship.vel += dir
                .scale(THRUST_ACCEL)
                .mul_ratio(i64::from(ship.thrust), i64::from(MAX_POWER));
        }
        if ship.brake {
            ship.vel = ship.vel.mul_ratio(BRAKE.0, BRAKE.1);
        }
        ship.vel = ship.vel.mul_ratio(DRAG.0, DRAG.1);
        let allowed = allowed.min(BOOST_MAX_SPEED);
        if ship.vel.length() > allowed {
            ship.vel = ship.vel.with_length(allowed);
        }
        ship.pos += ship.vel;
        for o in map.obstacles() {
            let d = ship.pos - o.pos;
            let reach = o.radius + SHIP_RADIUS;
            if d.length_sq_bits() < sq_bits(reach) {
                let n = if d == Vec2::ZERO {
                    Vec2::new(fx_int(1), Fx::ZERO)
                } else {
                    d.with_length(fx_int(1))
                };
                ship.pos = o.pos + n.scale(reach);
                let vn = ship.vel.dot(n);
                if vn < 0 {
                    // Bounce: the normal component reverses at half speed.
                    ship.vel -= n.scale(vn * 3 / 2);
                }
            }
        }
        let (lo, hi) = (SHIP_RADIUS, map.side() - SHIP_RADIUS);
        for (p, v) in [
            (&mut ship.pos.x, &mut ship.vel.x),
            (&mut ship.pos.y, &mut ship.vel.y),
        ] {
            if *p < lo {
                *p = lo;
                if *v < 0 {
                    *v = -*v / 2;
                }
            } else if *p > hi {
                *p = hi;
                if *v > 0 {
                    *v = -*v / 2;
                }
            }
        }
        ship.cooldown = ship.cooldown.saturating_sub(1);
        ship.boost_cooldown = ship.boost_cooldown.saturating_sub(1);
        ship.rapid = ship.rapid.saturating_sub(1);
    }

    /// Fires when the trigger is held and the gun is cool. A shot whose
    /// muzzle is inside a rock or a wall is spent without a projectile.
    fn shoot(&mut self, i: usize) {
        let ship = &self.s.ships[i];
        if !ship.trigger || ship.cooldown > 0 {
            return;
        }
        let dir = heading_vector(ship.heading);
        let pos = ship.pos + dir.scale(SHIP_RADIUS + PROJECTILE_RADIUS);
        let vel = dir.scale(PROJECTILE_SPEED) + ship.vel;
        let owner = ship.player;
        let muzzle_free = self.s.map.inside(pos, Fx::ZERO) && !self.s.map.blocked(pos, Fx::ZERO);
        let id = if muzzle_free { self.new_id() } else { None };
        let ship = &mut self.s.ships[i];
        ship.shots = ship.shots.saturating_add(1);
        ship.cooldown = if ship.rapid > 0 {
            RAPID_FIRE_COOLDOWN
        } else {
            FIRE_COOLDOWN
        };
        if let Some(id) = id {
            // Ids only grow, so pushing keeps the list sorted.
            self.s.projectiles.push(Projectile {
                id,
                owner,
                pos,
                vel,
                ttl: PROJECTILE_TTL,
            });
        }
    }

    fn new_id(&mut self) -> Option<u32> {
        let id = self.s.next_id;
        self.s.next_id = id.checked_add(1)?;
        Some(id)
    }

    /// Moves every projectile along its path for one tick; the first ship or
    /// rock it passes closest to (earliest along the path, ships before rocks,
    /// lower player first) takes the hit.
    fn move_projectiles(&mut self) {
        let projectiles = std::mem::take(&mut self.s.projectiles);
        let mut kept = Vec::with_capacity(projectiles.len());
        for mut p in projectiles {
            let mut hit: Option<(i64, u8, usize)> = None;
            let mut consider = |t: i64, kind: u8, index: usize| {
                if hit.is_none_or(|h| (t, kind, index) < h) {
                    hit = Some((t, kind, index));
                }
            };
            for (i, s) in self.s.ships.iter().enumerate() {
                if s.alive && s.player != p.owner {
                    let (t, d) = closest_approach(p.pos, p.vel, s.pos);
                    if d <= sq_bits(SHIP_RADIUS + PROJECTILE_RADIUS) {
                        consider(t, 0, i);
                    }
                }
            }
            for (i, o) in self.s.map.obstacles().iter().enumerate() {
                let (t, d) = closest_approach(p.pos, p.vel, o.pos);
                if d <= sq_bits(o.radius + PROJECTILE_RADIUS) {
                    consider(t, 1, i);
                }
            }
            match hit {
                Some((_, 0, victim)) => self.hit(victim, p.owner),
                Some(_) => {}
                None => {
                    p.pos += p.vel;
                    p.ttl = p.ttl.saturating_sub(1);
                    if p.ttl > 0 && self.s.map.inside(p.pos, Fx::ZERO) {
                        kept.push(p);
                    }
                }
            }
        }
        self.s.projectiles = kept;
    }

    /// One hit on ship `victim` by `shooter`: shield first, then hull; a
    /// destroyed ship scores the shooter a kill and waits to respawn.
    fn hit(&mut self, victim: usize, shooter: PlayerId) {
        let k = usize::from(shooter.0);
        if let Some(s) = self.s.ships.get_mut(k) {
            s.hits = s.hits.saturating_add(1);
        }
        let v = &mut self.s.ships[victim];
        let absorbed = v.shield.min(PROJECTILE_DAMAGE);
        v.shield -= absorbed;
        v.hp = v.hp.saturating_sub(PROJECTILE_DAMAGE - absorbed);
        if v.hp > 0 {
            return;
        }
        v.alive = false;
        v.respawn_in = RESPAWN_TICKS;
        v.deaths = v.deaths.saturating_add(1);
        v.vel = Vec2::ZERO;
        v.shield = 0;
        v.rapid = 0;
        v.thrust = 0;
        v.turn = 0;
        v.brake = false;
        v.trigger = false;
        v.boost = false;
        let limit = u32::from(self.s.config.score_limit);
        if let Some(s) = self.s.ships.get_mut(k) {
            s.score = s.score.saturating_add(1);
            if s.score >= limit && self.s.outcome.is_none() {
                self.s.outcome = Some(Outcome::ScoreLimit(shooter));
            }
        }
    }

    /// Each pickup goes to the first live ship (in player order) within reach.
    fn collect_pickups(&mut self) {
        let s = &mut self.s;
        s.pickups.retain(|p| {
            let Some(ship) = s
                .ships
                .iter_mut()
                .find(|sh| sh.alive && sh.pos.dist_sq_bits(p.pos) <= sq_bits(PICKUP_REACH))
            else {
                return true;
            };
            match p.kind {
                PickupKind::Health => ship.hp = (ship.hp + HEALTH_BONUS).min(SHIP_HP),
                PickupKind::RapidFire => ship.rapid = RAPID_FIRE_TICKS,
                PickupKind::Shield => ship.shield = (ship.shield + SHIELD_BONUS).min(MAX_SHIELD),
            }
            false
        });
    }

    /// When the pickup timer is due and there is room, places a seeded
    /// pickup on a free spot (clear of walls, rocks and other pickups).
    fn spawn_pickup(&mut self) {
        if self.s.tick < self.s.next_pickup_at {
            return;
        }
        let (lo, hi) = PICKUP_GAP;
        if self.s.pickups.len() >= max_pickups(self.s.setup.players) {
            // Full: look again a little later.
            self.s.next_pickup_at = self.s.tick.saturating_add(lo);
            return;
        }
        let side = u32::from(self.s.map.side_tiles());
        for _ in 0..16 {
            let x = fx_int(i64::from(self.s.rng.range(3, side - 3)));
            let y = fx_int(i64::from(self.s.rng.range(3, side - 3)));
            let pos = Vec2::new(x, y);
            let free = !self.s.map.blocked(pos, fx_int(2))
                && self
                    .s
                    .pickups
                    .iter()
                    .all(|p| p.pos.dist_sq_bits(pos) > sq_bits(fx_int(4)));
            if free {
                let kind = PickupKind::ALL[self.s.rng.below(3) as usize];
                if let Some(id) = self.new_id() {
                    self.s.pickups.push(Pickup { id, kind, pos });
                }
                break;
            }
        }
        self.s.next_pickup_at = self.s.tick.saturating_add(self.s.rng.range(lo, hi));
    }
}
