//! Sectioned state hashes, the rules hash and snapshots of the arena, built
//! only from the public helpers of [`crate::hash`].
//!
//! Sections: `globals` (set-up, rules, tick, turns, RNG, next id, pickup
//! timer, reject counters, outcome), `arena` (the static map), `ships`,
//! `projectiles`, `pickups`; the root combines them with
//! [`crate::hash::combine`] exactly as the reference game does.

use super::world::{Arena, State};
use crate::forensics::{EntityHash, combine_entities};
use crate::hash::{combine, digest_of};
use crate::num::Fx;
use crate::{MAX_PLAYERS, SectionHash, Simulation, SnapshotError, StateHash};
use serde::Serialize;

const MAGIC: &[u8; 4] = b"ARNA";
const VERSION: u8 = 1;

/// Most pickups waiting at once, for `players` players.
pub(crate) fn max_pickups(players: u8) -> usize {
    2 + usize::from(players) / 2
}

#[derive(Serialize)]
struct Globals<'a> {
    setup: &'a crate::MatchSetup,
    config: &'a super::ArenaConfig,
    tick: u32,
    turns: u32,
    last_turn: Option<crate::Turn>,
    rng: &'a crate::rng::Pcg32,
    next_id: u32,
    next_pickup_at: u32,
    rejected: super::RejectStats,
    outcome: Option<super::Outcome>,
}

pub(crate) fn sections(s: &State) -> Vec<SectionHash> {
    let mut buf = Vec::with_capacity(4096);
    let globals = Globals {
        setup: &s.setup,
        config: &s.config,
        tick: s.tick,
        turns: s.turns,
        last_turn: s.last_turn,
        rng: &s.rng,
        next_id: s.next_id,
        next_pickup_at: s.next_pickup_at,
        rejected: s.rejected,
        outcome: s.outcome,
    };
    let section = |name: &str, hash: StateHash| SectionHash {
        name: name.to_owned(),
        hash,
    };
    vec![
        section("globals", digest_of(&globals, &mut buf)),
        section("arena", digest_of(&s.map, &mut buf)),
        section("ships", combine_entities(&ship_leaves(s, &mut buf))),
        section(
            "projectiles",
            combine_entities(&leaves(&s.projectiles, |p| p.id, &mut buf)),
        ),
        section(
            "pickups",
            combine_entities(&leaves(&s.pickups, |p| p.id, &mut buf)),
        ),
    ]
}

/// Leaf hashes of a list sorted by id: each element's id and digest, the
/// entities forensics compares (the section hash combines them).
pub(crate) fn leaves<T: Serialize>(
    items: &[T],
    id: impl Fn(&T) -> u32,
    buf: &mut Vec<u8>,
) -> Vec<EntityHash> {
    items
        .iter()
        .map(|x| EntityHash {
            id: u64::from(id(x)),
            hash: digest_of(x, buf),
        })
        .collect()
}

/// Ships are entities by player id.
pub(crate) fn ship_leaves(s: &State, buf: &mut Vec<u8>) -> Vec<EntityHash> {
    leaves(&s.ships, |x| u32::from(x.player.0), buf)
}

/// Hash of the game's identity, every rule constant, the rules of the match
/// and its map, as sections combined like a state hash.
pub(crate) fn rules_hash(w: &Arena) -> StateHash {
    use super::*;
    let mut buf = Vec::new();
    let constants = (
        (SHIP_RADIUS, SHIP_HP, MAX_SHIELD, THRUST_ACCEL, MAX_SPEED),
        (BOOST_MAX_SPEED, BOOST_IMPULSE, BOOST_COOLDOWN, DRAG, BRAKE),
        (PROJECTILE_SPEED, PROJECTILE_TTL, PROJECTILE_RADIUS),
        (PROJECTILE_DAMAGE, FIRE_COOLDOWN, RAPID_FIRE_COOLDOWN),
        (RESPAWN_TICKS, SPAWN_SHIELD, PICKUP_REACH, HEALTH_BONUS),
        (SHIELD_BONUS, RAPID_FIRE_TICKS, PICKUP_GAP, HEADINGS),
        (MAX_POWER, MAX_TURN_RATE, MAX_COMMANDS_PER_TURN),
    );
    let s = &w.s;
    let parts = [
        (
            "game",
            digest_of(&(Arena::GAME_ID, Arena::GAME_VERSION), &mut buf),
        ),
        ("constants", digest_of(&constants, &mut buf)),
        ("config", digest_of(&s.config, &mut buf)),
        ("arena", digest_of(&s.map, &mut buf)),
        ("setup", digest_of(&s.setup, &mut buf)),
    ];
    let list: Vec<SectionHash> = parts
        .into_iter()
        .map(|(name, hash)| SectionHash {
            name: format!("rules {name}"),
            hash,
        })
        .collect();
    combine(&list)
}

pub(crate) fn encode(s: &State) -> Vec<u8> {
    crate::snapshot::encode_tagged(MAGIC, VERSION, s, 512 + 48 * s.projectiles.len())
}

pub(crate) fn decode(bytes: &[u8]) -> Result<State, SnapshotError> {
    let s: State = crate::snapshot::decode_tagged(MAGIC, VERSION, bytes)?;
    validate(&s).map_err(SnapshotError::Invalid)?;
    Ok(s)
}

/// The invariants the simulation relies on (bounded values keep every
/// fixed-point product far from overflow), so a corrupt snapshot is an
/// error, never a panic or a different game.
fn validate(s: &State) -> Result<(), String> {
    use super::*;
    use super::{command::MAX_POWER, command::MAX_TURN_RATE, geom::HEADINGS};
    s.map.validate()?;
    let players = s.setup.players;
    if players == 0 || players > MAX_PLAYERS || s.ships.len() != usize::from(players) {
        return Err(format!("{} ships for {players} players", s.ships.len()));
    }
    if !(1..=64).contains(&s.setup.ticks_per_turn) {
        return Err("ticks per turn out of range".into());
    }
    if s.config.side != s.map.side_tiles() || s.config.score_limit == 0 {
        return Err("rules do not match the arena".into());
    }
    let fast = |v: crate::num::Vec2| v.length_sq_bits() > geom_sq(fx_int(2));
    for (i, ship) in s.ships.iter().enumerate() {
        let ok = usize::from(ship.player.0) == i
            && s.map.inside(ship.pos, Fx::ZERO)
            && !fast(ship.vel)
            && ship.heading < HEADINGS
            && ship.hp <= SHIP_HP
            && ship.shield <= MAX_SHIELD
            && ship.thrust <= MAX_POWER
            && (-MAX_TURN_RATE..=MAX_TURN_RATE).contains(&ship.turn)
            && (ship.alive == (ship.hp > 0))
            && ship.respawn_in <= RESPAWN_TICKS;
        if !ok {
            return Err(format!("ship {i} is inconsistent"));
        }
    }
    let mut prev = None;
    for p in &s.projectiles {
        if prev.is_some_and(|q| q >= p.id) || p.id >= s.next_id {
            return Err(format!("projectile id {} out of order", p.id));
        }
        prev = Some(p.id);
        if p.owner.0 >= players
            || !s.map.inside(p.pos, Fx::ZERO)
            || fast(p.vel)
            || p.ttl > PROJECTILE_TTL
        {
            return Err(format!("projectile {} is inconsistent", p.id));
        }
    }
    let mut prev = None;
    for p in &s.pickups {
        if prev.is_some_and(|q| q >= p.id) || p.id >= s.next_id {
            return Err(format!("pickup id {} out of order", p.id));
        }
        prev = Some(p.id);
        if !s.map.inside(p.pos, Fx::ZERO) {
            return Err(format!("pickup {} outside the arena", p.id));
        }
    }
    if s.pickups.len() > max_pickups(players) {
        return Err(format!("{} pickups", s.pickups.len()));
    }
    Ok(())
}

fn geom_sq(r: Fx) -> i64 {
    super::geom::sq_bits(r)
}
