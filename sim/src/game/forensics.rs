//! Desync forensics for the reference game: per-entity hashes of an entity
//! block and the canonical named dump of an entity or of the globals.

use super::world::World;
use crate::forensics::{EntityHash, Field, WHOLE_SECTION};
use crate::hash::{ENTITY_BLOCK, entity_block_of, entity_leaves, globals_hash};
use crate::{SectionHash, Simulation};

/// `Simulation::entity_hashes` of the reference game: entity blocks split
/// into their entities; `globals` and `map` are whole sections.
pub(crate) fn entity_hashes(w: &World, section: &str) -> Vec<EntityHash> {
    let mut buf = Vec::new();
    match section {
        "globals" => vec![EntityHash {
            id: WHOLE_SECTION,
            hash: globals_hash(w, &mut buf),
        }],
        "map" => whole(w.section_hashes(), section),
        _ => match entity_block_of(section) {
            Some(b) if b < w.s.next_id.div_ceil(ENTITY_BLOCK).max(1) => {
                entity_leaves(block(w, b), &mut buf)
            }
            _ => Vec::new(),
        },
    }
}

/// [`entity_hashes`] of the entities within `area` only (none for the
/// globals and the map): what a culled speculative step computed.
pub(crate) fn entity_hashes_within(
    w: &World,
    section: &str,
    area: &super::culling::TileRect,
) -> Vec<EntityHash> {
    let Some(b) = entity_block_of(section) else {
        return Vec::new();
    };
    if b >= w.s.next_id.div_ceil(ENTITY_BLOCK).max(1) {
        return Vec::new();
    }
    entity_leaves(
        block(w, b).iter().filter(|e| area.holds(e.pos)),
        &mut Vec::new(),
    )
}

fn whole(sections: Vec<SectionHash>, name: &str) -> Vec<EntityHash> {
    sections
        .into_iter()
        .find(|s| s.name == name)
        .map(|s| {
            vec![EntityHash {
                id: WHOLE_SECTION,
                hash: s.hash,
            }]
        })
        .unwrap_or_default()
}

fn block(w: &World, b: u32) -> &[super::Entity] {
    let lo = b.saturating_mul(ENTITY_BLOCK);
    let hi = lo.saturating_add(ENTITY_BLOCK);
    let e = &w.s.entities;
    let start = e.partition_point(|x| x.id < lo);
    let end = e.partition_point(|x| x.id < hi);
    &e[start..end]
}

/// `Simulation::entity_fields` of the reference game.
pub(crate) fn entity_fields(w: &World, section: &str, id: u64) -> Option<Vec<Field>> {
    if section == "globals" {
        return (id == WHOLE_SECTION).then(|| globals(w));
    }
    if section == "map" {
        return (id == WHOLE_SECTION).then(|| whole_fields(w, section));
    }
    let b = entity_block_of(section)?;
    let id = u32::try_from(id).ok()?;
    let e = block(w, b).iter().find(|e| e.id == id)?;
    Some(vec![
        Field::new("id", e.id),
        Field::debug("owner", &e.owner),
        Field::debug("kind", &e.kind),
        Field::new("pos.x", e.pos.x),
        Field::new("pos.y", e.pos.y),
        Field::new("hp", e.hp),
        Field::new("cooldown", e.cooldown),
        Field::debug("order", &e.order),
        Field::debug("target", &e.target),
        Field::new("cargo", e.cargo),
        Field::new("timer", e.timer),
        Field::debug("queue", &e.queue),
    ])
}

fn whole_fields(w: &World, section: &str) -> Vec<Field> {
    whole(w.section_hashes(), section)
        .into_iter()
        .map(|e| Field::new("section_hash", e.hash))
        .collect()
}

fn globals(w: &World) -> Vec<Field> {
    let s = &w.s;
    let mut out = vec![
        Field::debug("setup", &s.setup),
        Field::new("tick", s.tick),
        Field::debug("last_turn", &s.last_turn),
        Field::debug("rng", &s.rng),
        Field::new("next_id", s.next_id),
        Field::debug("rejected", &s.rejected),
        Field::debug("outcome", &s.outcome),
    ];
    for (i, p) in s.players.iter().enumerate() {
        out.push(Field::new(format!("players[{i}].resources"), p.resources));
        out.push(Field::new(format!("players[{i}].alive"), p.alive));
        out.push(Field::new(format!("players[{i}].trained"), p.trained));
        out.push(Field::new(format!("players[{i}].lost"), p.lost));
    }
    out
}
