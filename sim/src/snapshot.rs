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

/// Encodes a game's whole state as a snapshot: its 4-byte `magic`, a format
/// `version` byte, then the postcard bytes of `state`. Use it (with
/// [`decode_tagged`]) in a game's `Simulation::snapshot`, so that a snapshot
/// of another game or format version is refused rather than misread.
#[must_use]
pub fn encode_tagged<T: serde::Serialize>(
    magic: &[u8; 4],
    version: u8,
    state: &T,
    capacity: usize,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(capacity);
    out.extend_from_slice(magic);
    out.push(version);
    // Serialising plain in-memory data into a Vec cannot fail.
    postcard::to_extend(state, out).unwrap_or_default()
}

/// Decodes a snapshot written by [`encode_tagged`] with the same `magic`
/// and `version`: a missing or other magic, another version, bytes that do
/// not decode or trailing bytes are a [`SnapshotError::Decode`], never a
/// panic. The game then checks its own invariants.
pub fn decode_tagged<T: serde::de::DeserializeOwned>(
    magic: &[u8; 4],
    version: u8,
    bytes: &[u8],
) -> Result<T, SnapshotError> {
    let tag = String::from_utf8_lossy(magic);
    let body = bytes
        .strip_prefix(magic.as_slice())
        .ok_or_else(|| SnapshotError::Decode(format!("missing {tag} magic")))?;
    let (&found, body) = body
        .split_first()
        .ok_or_else(|| SnapshotError::Decode("missing version".into()))?;
    if found != version {
        return Err(SnapshotError::Decode(format!(
            "{tag} snapshot version {found}, expected {version}"
        )));
    }
    let (state, rest): (T, _) =
        postcard::take_from_bytes(body).map_err(|e| SnapshotError::Decode(e.to_string()))?;
    if !rest.is_empty() {
        return Err(SnapshotError::Decode(format!(
            "{} trailing bytes",
            rest.len()
        )));
    }
    Ok(state)
}

pub(crate) fn encode(s: &State) -> Vec<u8> {
    encode_tagged(MAGIC, VERSION, s, 64 + s.entities.len() * 48)
}

pub(crate) fn decode(bytes: &[u8]) -> Result<State, SnapshotError> {
    let s: State = decode_tagged(MAGIC, VERSION, bytes)?;
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
