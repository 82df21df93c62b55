//! Desync forensics for the arena: ships (by player id), projectiles and
//! pickups (by id) are the entities of their sections; `globals` and
//! `arena` are whole sections.

use super::codec::{leaves, ship_leaves};
use super::world::Arena;
use crate::Simulation;
use crate::forensics::{EntityHash, Field, WHOLE_SECTION};

/// `Simulation::entity_hashes` of the arena.
pub(crate) fn entity_hashes(w: &Arena, section: &str) -> Vec<EntityHash> {
    let s = &w.s;
    let mut buf = Vec::new();
    match section {
        "ships" => ship_leaves(s, &mut buf),
        "projectiles" => leaves(&s.projectiles, |p| p.id, &mut buf),
        "pickups" => leaves(&s.pickups, |p| p.id, &mut buf),
        _ => w
            .section_hashes()
            .into_iter()
            .find(|x| x.name == section)
            .map(|x| {
                vec![EntityHash {
                    id: WHOLE_SECTION,
                    hash: x.hash,
                }]
            })
            .unwrap_or_default(),
    }
}

/// `Simulation::entity_fields` of the arena.
pub(crate) fn entity_fields(w: &Arena, section: &str, id: u64) -> Option<Vec<Field>> {
    let s = &w.s;
    match section {
        "ships" => {
            let x = s.ships.iter().find(|x| u64::from(x.player.0) == id)?;
            Some(vec![
                Field::new("player", x.player),
                Field::new("pos.x", x.pos.x),
                Field::new("pos.y", x.pos.y),
                Field::new("vel.x", x.vel.x),
                Field::new("vel.y", x.vel.y),
                Field::new("heading", x.heading),
                Field::new("hp", x.hp),
                Field::new("shield", x.shield),
                Field::new("alive", x.alive),
                Field::new("respawn_in", x.respawn_in),
                Field::new("cooldown", x.cooldown),
                Field::new("boost_cooldown", x.boost_cooldown),
                Field::new("rapid", x.rapid),
                Field::new("thrust", x.thrust),
                Field::new("turn", x.turn),
                Field::new("brake", x.brake),
                Field::new("trigger", x.trigger),
                Field::new("boost", x.boost),
                Field::new("score", x.score),
                Field::new("deaths", x.deaths),
                Field::new("shots", x.shots),
                Field::new("hits", x.hits),
            ])
        }
        "projectiles" => {
            let p = s.projectiles.iter().find(|p| u64::from(p.id) == id)?;
            Some(vec![
                Field::new("id", p.id),
                Field::new("owner", p.owner),
                Field::new("pos.x", p.pos.x),
                Field::new("pos.y", p.pos.y),
                Field::new("vel.x", p.vel.x),
                Field::new("vel.y", p.vel.y),
                Field::new("ttl", p.ttl),
            ])
        }
        "pickups" => {
            let p = s.pickups.iter().find(|p| u64::from(p.id) == id)?;
            Some(vec![
                Field::new("id", p.id),
                Field::debug("kind", &p.kind),
                Field::new("pos.x", p.pos.x),
                Field::new("pos.y", p.pos.y),
            ])
        }
        "globals" if id == WHOLE_SECTION => Some(vec![
            Field::debug("setup", &s.setup),
            Field::debug("config", &s.config),
            Field::new("tick", s.tick),
            Field::new("turns", s.turns),
            Field::debug("last_turn", &s.last_turn),
            Field::debug("rng", &s.rng),
            Field::new("next_id", s.next_id),
            Field::new("next_pickup_at", s.next_pickup_at),
            Field::debug("rejected", &s.rejected),
            Field::debug("outcome", &s.outcome),
        ]),
        _ if id == WHOLE_SECTION => w
            .section_hashes()
            .into_iter()
            .find(|x| x.name == section)
            .map(|x| vec![Field::new("section_hash", x.hash)]),
        _ => None,
    }
}
