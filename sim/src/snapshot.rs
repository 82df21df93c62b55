//! Snapshot encoding of the world state: a magic tag and version, then the
//! postcard bytes of the whole hashed state. Restore validates the invariants
//! the simulation relies on, so a corrupt snapshot is an error, never a panic.

use crate::contract::{MAX_PLAYERS, SnapshotError};
use crate::game::world::State;
use crate::game::{Order, World};

const MAGIC: &[u8; 4] = b"SIMW";
const VERSION: u8 = 1;

/// Highest entity id a world may reach; a snapshot claiming more is corrupt
/// (a real match spawns orders of magnitude fewer).
pub const MAX_ENTITY_ID: u32 = 1 << 30;

pub(crate) fn encode(s: &State) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + s.entities.len() * 48);
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    // Serialising plain in-memory data into a Vec cannot fail.
    postcard::to_extend(s, out).unwrap_or_default()
}

pub(crate) fn decode(bytes: &[u8]) -> Result<State, SnapshotError> {
    let body = bytes
        .strip_prefix(MAGIC)
        .ok_or_else(|| SnapshotError::Decode("missing SIMW magic".into()))?;
    let (&version, body) = body
        .split_first()
        .ok_or_else(|| SnapshotError::Decode("missing version".into()))?;
    if version != VERSION {
        return Err(SnapshotError::Decode(format!(
            "snapshot version {version}, expected {VERSION}"
        )));
    }
    let (s, rest): (State, _) =
        postcard::take_from_bytes(body).map_err(|e| SnapshotError::Decode(e.to_string()))?;
    if !rest.is_empty() {
        return Err(SnapshotError::Decode(format!(
            "{} trailing bytes",
            rest.len()
        )));
    }
    validate(&s)?;
    Ok(s)
}

fn validate(s: &State) -> Result<(), SnapshotError> {
    let bad = |m: String| Err(SnapshotError::Invalid(m));
    if !s.map.is_consistent() {
        return bad("map dimensions do not match its tiles".into());
    }
    let players = s.setup.players;
    if players == 0 || players > MAX_PLAYERS || s.players.len() != usize::from(players) {
        return bad(format!(
            "{} player records for {players} players",
            s.players.len()
        ));
    }
    if s.setup.ticks_per_turn == 0 {
        return bad("zero ticks per turn".into());
    }
    if s.next_id > MAX_ENTITY_ID {
        return bad(format!("next id {} beyond {MAX_ENTITY_ID}", s.next_id));
    }
    let mut prev: Option<u32> = None;
    for e in &s.entities {
        if prev.is_some_and(|p| p >= e.id) || e.id >= s.next_id {
            return bad(format!("entity id {} out of order or beyond next id", e.id));
        }
        prev = Some(e.id);
        if e.owner.is_some_and(|o| o.0 >= players) {
            return bad(format!(
                "entity {} owned by a player not in the match",
                e.id
            ));
        }
        if e.pos.x < 0 || e.pos.y < 0 || !s.map.contains(e.pos.tile()) {
            return bad(format!("entity {} outside the map", e.id));
        }
        let dest = match &e.order {
            Order::Move { dest, .. } | Order::AttackMove { dest, .. } => Some(*dest),
            Order::Build { site } => Some(*site),
            _ => None,
        };
        if dest.is_some_and(|d| !s.map.contains(d)) {
            return bad(format!("entity {} has an order outside the map", e.id));
        }
        if e.queue.iter().any(|k| !k.is_trainable()) {
            return bad(format!("entity {} queues an untrainable kind", e.id));
        }
        if e.queue.len() > crate::game::MAX_QUEUE {
            return bad(format!("entity {} has an oversized queue", e.id));
        }
    }
    Ok(())
}

/// Convenience: snapshot bytes of a world (same as `Simulation::snapshot`).
#[must_use]
pub fn snapshot_bytes(w: &World) -> Vec<u8> {
    encode(&w.s)
}
