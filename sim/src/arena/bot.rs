//! A seeded bot that plays the arena from the state it sees: it seeks
//! pickups it needs, keeps a preferred distance from the nearest enemy
//! (closing in, backing off or strafing), steers around rocks and walls,
//! aims with lead and fires when the shot is lined up and the line of fire
//! is clear. Its pace is an APM budget; its choices depend only on its seed
//! and the worlds it has seen.

use super::geom::{heading_delta, heading_towards, heading_vector};
use super::world::{Arena, Pickup, PickupKind, Ship};
use super::{
    Command, MAX_POWER, MAX_SPEED, MAX_TURN_RATE, PROJECTILE_RADIUS, PROJECTILE_SPEED,
    PROJECTILE_TTL, SHIP_HP, SHIP_RADIUS, TICK_MS,
};
use crate::num::{Fx, Vec2, fx_int, fx_ratio};
use crate::rng::Pcg32;
use crate::{PlayerId, Stamped, Turn};

/// An APM that lets the bot steer, aim and shoot every 100 ms turn (three
/// commands per turn); far lower rates make it a clumsy pilot.
pub const BOT_APM: u32 = 1800;

/// Most commands a bot sends in one turn, whatever its APM.
const MAX_ACTIONS_PER_TURN: u32 = 4;

/// A deterministic computer pilot.
#[derive(Clone, Debug)]
pub struct Bot {
    player: PlayerId,
    apm: u32,
    rng: Pcg32,
    /// APM budget carried between turns, in action-milliseconds.
    budget: u64,
    /// Preferred distance to the enemy it fights (tiles).
    standoff: Fx,
    /// Which way it circles an enemy at its preferred distance.
    strafe: i64,
}

impl Bot {
    /// A bot for `player`, seeded, sending at most `apm` commands per game minute.
    #[must_use]
    pub fn new(player: PlayerId, seed: u64, apm: u32) -> Self {
        let mut rng = Pcg32::from_seed(seed, 0xa7b0 + u64::from(player.0));
        let standoff = fx_int(6 + i64::from(rng.below(5)));
        let strafe = if rng.chance(1, 2) { 1 } else { -1 };
        Self {
            player,
            apm,
            rng,
            budget: 0,
            standoff,
            strafe,
        }
    }

    /// The player this bot flies for.
    #[must_use]
    pub const fn player(&self) -> PlayerId {
        self.player
    }

    /// The commands for `turn`, decided from `world`.
    pub fn think(&mut self, world: &Arena, _turn: Turn) -> Vec<Command> {
        let tpt = i64::from(world.setup().ticks_per_turn);
        self.budget += u64::from(self.apm) * u64::try_from(tpt).unwrap_or(1) * u64::from(TICK_MS);
        let actions = u32::try_from(self.budget / 60_000)
            .unwrap_or(u32::MAX)
            .min(MAX_ACTIONS_PER_TURN);
        self.budget %= 60_000;
        let mut out = Vec::new();
        let me = match world.ship(self.player) {
            Some(s) if s.alive && actions > 0 && !world.is_over() => s,
            _ => return out,
        };
        let enemy = world
            .ships()
            .iter()
            .filter(|s| s.alive && s.player != me.player)
            .min_by_key(|s| (me.pos.dist_sq_bits(s.pos), s.player));
        let enemy_dist = enemy.map_or(fx_int(1000), |e| me.pos.distance(e.pos));
        let pickup = pickup_goal(world, me, enemy_dist);
        let goal = match (pickup, enemy) {
            (Some(p), _) => p.pos,
            (None, Some(e)) => self.fighting_spot(me, e),
            (None, None) => world.map().centre(),
        };
        let steer = steer(world, me, goal);
        let steer_dir = steer.with_length(fx_int(1));

        // Aim with lead at the nearest enemy in range with a clear line of fire.
        let aim = enemy
            .filter(|e| world.map().line_clear(me.pos, e.pos, PROJECTILE_RADIUS))
            .and_then(|e| lead_heading(me, e));
        let combat = aim.is_some() && (pickup.is_none() || enemy_dist < fx_int(10));
        let want = match aim {
            Some(h) if combat => h,
            _ => heading_towards(steer),
        };
        let delta = heading_delta(me.heading, want);
        let rate = turn_rate(delta, tpt);
        let fire = combat && (delta - i16::from(rate)).abs() <= 1 && i64::from(me.cooldown) < tpt;

        let align = heading_vector(me.heading).dot(steer_dir);
        let power = if align > fx_ratio(7, 10) {
            MAX_POWER
        } else if align > fx_ratio(3, 10) {
            MAX_POWER / 2
        } else {
            0
        };
        let brake = me.vel.length() > MAX_SPEED / 2 && me.vel.dot(steer_dir) < 0;
        let far_pickup = pickup.is_some_and(|p| me.pos.distance(p.pos) > fx_int(12));
        let fleeing = me.hp < SHIP_HP / 3 && enemy_dist < fx_int(6);
        let boost = me.boost_cooldown == 0
            && align > fx_ratio(7, 10)
            && (far_pickup || fleeing)
            && self.rng.chance(1, 4);

        let turn_cmd = (rate != me.turn).then_some(Command::Turn { rate });
        let fire_cmd = fire.then_some(Command::Fire);
        let (first, second) = if fire {
            (fire_cmd, turn_cmd)
        } else {
            (turn_cmd, fire_cmd)
        };
        let wanted = [
            first,
            second,
            (power != me.thrust).then_some(Command::Thrust { power }),
            brake.then_some(Command::Brake),
            boost.then_some(Command::Boost),
        ];
        out.extend(wanted.into_iter().flatten().take(actions as usize));
        out
    }

    /// Where to fly against enemy `e`: closer when far, away when too
    /// close, circling it at the preferred distance.
    fn fighting_spot(&self, me: &Ship, e: &Ship) -> Vec2 {
        let d = e.pos - me.pos;
        let dist = d.length();
        if dist > self.standoff + fx_int(3) {
            e.pos
        } else if dist < self.standoff - fx_int(2) {
            me.pos - d
        } else {
            let side = Vec2::new(-d.y, d.x).mul_ratio(self.strafe, 1);
            me.pos + side
        }
    }
}

/// The pickup worth fetching: the nearest after a bonus for what the ship
/// needs, if close enough to be worth the detour (any one when no enemy is alive).
fn pickup_goal<'a>(world: &'a Arena, me: &Ship, enemy_dist: Fx) -> Option<&'a Pickup> {
    let need = |p: &Pickup| match p.kind {
        PickupKind::Health if me.hp <= SHIP_HP * 3 / 5 => fx_int(15),
        PickupKind::Health => Fx::ZERO,
        PickupKind::Shield => fx_int(5),
        PickupKind::RapidFire if me.rapid == 0 => fx_int(5),
        PickupKind::RapidFire => Fx::ZERO,
    };
    let (cost, p) = world
        .pickups()
        .iter()
        .map(|p| (me.pos.distance(p.pos) - need(p), p))
        .min_by_key(|(c, p)| (*c, p.id))?;
    (cost < fx_int(12) || enemy_dist > fx_int(40)).then_some(p)
}

/// The velocity change that heads for `goal`: around the first rock in the
/// way, away from rocks and walls too close.
fn steer(world: &Arena, me: &Ship, goal: Vec2) -> Vec2 {
    let map = world.map();
    let mut target = goal;
    let blocking = map
        .obstacles()
        .iter()
        .filter(|o| {
            !map.line_clear(me.pos, goal, SHIP_RADIUS + fx_ratio(1, 2))
                && super::geom::closest_approach(me.pos, goal - me.pos, o.pos).1
                    < super::geom::sq_bits(o.radius + SHIP_RADIUS + fx_ratio(1, 2))
        })
        .min_by_key(|o| me.pos.dist_sq_bits(o.pos));
    if let Some(o) = blocking {
        // Aim past the rock's flank on the goal's side.
        let to_rock = o.pos - me.pos;
        let mut perp = Vec2::new(-to_rock.y, to_rock.x);
        if perp.dot(goal - o.pos) < 0 {
            perp = -perp;
        }
        target = o.pos + perp.with_length(o.radius + fx_int(2));
    }
    let mut desired = (target - me.pos).with_length(MAX_SPEED);
    for o in map.obstacles() {
        let d = me.pos - o.pos;
        let clearance = d.length() - o.radius - SHIP_RADIUS;
        if clearance < fx_int(3) {
            desired += d.with_length(MAX_SPEED * (fx_int(3) - clearance) / 3);
        }
    }
    let side = map.side();
    let margin = fx_int(4);
    let push = |dist: Fx| MAX_SPEED * (margin - dist) / 4;
    if me.pos.x < margin {
        desired.x += push(me.pos.x);
    }
    if me.pos.y < margin {
        desired.y += push(me.pos.y);
    }
    if side - me.pos.x < margin {
        desired.x -= push(side - me.pos.x);
    }
    if side - me.pos.y < margin {
        desired.y -= push(side - me.pos.y);
    }
    desired - me.vel
}

/// The heading that hits `e` if it keeps its velocity, when within range.
/// Projectiles inherit the shooter's velocity, so the lead works on
/// relative position and velocity (two refinement steps).
fn lead_heading(me: &Ship, e: &Ship) -> Option<u8> {
    let r = e.pos - me.pos;
    let v = e.vel - me.vel;
    let mut aim = r;
    for _ in 0..2 {
        let t = aim.length() / PROJECTILE_SPEED;
        aim = r + v.scale(t);
    }
    let flight = aim.length() / PROJECTILE_SPEED;
    (flight < fx_int(i64::from(PROJECTILE_TTL)) * 9 / 10).then(|| heading_towards(aim))
}

/// A turn rate that reaches a heading `delta` away within about one turn
/// without overshooting by more than a heading.
fn turn_rate(delta: i16, ticks_per_turn: i64) -> i8 {
    let per_tick = i64::from(delta) / ticks_per_turn.max(1);
    let per_tick = if per_tick == 0 {
        i64::from(delta.signum())
    } else {
        per_tick
    };
    let max = i64::from(MAX_TURN_RATE);
    i8::try_from(per_tick.clamp(-max, max)).unwrap_or(0)
}

/// One bot per player of `world`, seeded from `seed`.
#[must_use]
pub fn bots(world: &Arena, seed: u64, apm: u32) -> Vec<Bot> {
    (0..world.setup().players)
        .map(|p| Bot::new(PlayerId(p), seed, apm))
        .collect()
}

/// The stamped inputs the bots produce for `turn` (player order, seq order).
pub fn bot_inputs(world: &Arena, bots: &mut [Bot], turn: Turn) -> Vec<Stamped<Command>> {
    crate::agent_inputs(world, bots, turn)
}

impl crate::Agent<Arena> for Bot {
    fn player(&self) -> PlayerId {
        Self::player(self)
    }
    fn think(&mut self, world: &Arena, turn: Turn) -> Vec<Command> {
        Self::think(self, world, turn)
    }
}
