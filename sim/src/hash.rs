//! Canonical, sectioned state hashing.
//!
//! Each section is BLAKE3 over the postcard bytes of one part of the state:
//! `"globals"` (tick, RNG, players, counters, outcome), `"map"`, and one
//! section per fixed-size block of entity ids, named like
//! `"entities 1024..2048"`. The root hash is BLAKE3 over the sequence of
//! (name, section hash) pairs, so two peers whose roots differ can compare
//! section lists and name the block of entities that diverged.
//!
//! Also home of [`Fnv1a64`], the one small non-cryptographic hash the
//! workspace uses where a stable `u64` from a few bytes is enough.

use crate::contract::{SectionHash, Simulation, StateHash};
use crate::game::World;
use serde::Serialize;

/// Entity ids per hash section.
pub const ENTITY_BLOCK: u32 = 1024;

const ROOT_DOMAIN: &[u8] = b"lockstep-sim root v1";
const RULES_DOMAIN: &[u8] = b"lockstep-sim rules v1";

/// BLAKE3 of the postcard encoding of `value`, using `buf` as scratch.
pub fn digest_of<T: Serialize + ?Sized>(value: &T, buf: &mut Vec<u8>) -> StateHash {
    buf.clear();
    // Serialising plain in-memory data into a Vec cannot fail; an empty digest
    // would still be the same on every peer.
    let bytes = postcard::to_extend(value, std::mem::take(buf)).unwrap_or_default();
    let h = StateHash(*blake3::hash(&bytes).as_bytes());
    *buf = bytes;
    h
}

/// FNV-1a, 64-bit: a tiny non-cryptographic hash, stable across builds,
/// platforms and releases (it is fully specified by two constants).
///
/// Use it to derive a `u64` from a few bytes where any party must reproduce
/// it (the relay's match seed from a match name) or for a test game's fake
/// state hash. Never where an adversary choosing the input matters
/// (collisions are easy to find): state hashes use BLAKE3, secrets the OS
/// random source. Feed bytes with [`Self::update`], read with
/// [`Self::finish`]; [`fnv1a64`] does both for one slice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fnv1a64(u64);

impl Fnv1a64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0100_0000_01b3;

    /// A hasher that has seen no bytes.
    #[must_use]
    pub const fn new() -> Self {
        Self(Self::OFFSET_BASIS)
    }

    /// Feeds `bytes`; feeding a slice in parts gives the same hash as at once.
    pub fn update(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(Self::PRIME);
        }
    }

    /// The hash of every byte fed so far (the hasher stays usable).
    #[must_use]
    pub const fn finish(&self) -> u64 {
        self.0
    }
}

impl Default for Fnv1a64 {
    fn default() -> Self {
        Self::new()
    }
}

/// FNV-1a (64-bit) of `bytes`; see [`Fnv1a64`] for when to use it.
#[must_use]
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h = Fnv1a64::new();
    h.update(bytes);
    h.finish()
}

/// Combines section hashes into the root hash (order and names matter).
#[must_use]
pub fn combine(sections: &[SectionHash]) -> StateHash {
    let mut h = blake3::Hasher::new();
    h.update(ROOT_DOMAIN);
    for s in sections {
        let len = u32::try_from(s.name.len()).unwrap_or(u32::MAX);
        h.update(&len.to_le_bytes());
        h.update(s.name.as_bytes());
        h.update(&s.hash.0);
    }
    StateHash(*h.finalize().as_bytes())
}

/// Name of the section holding entity ids `block*ENTITY_BLOCK..(block+1)*ENTITY_BLOCK`.
#[must_use]
pub fn entity_section_name(block: u32) -> String {
    let lo = block.saturating_mul(ENTITY_BLOCK);
    format!("entities {lo}..{}", lo.saturating_add(ENTITY_BLOCK))
}

/// Name of the section that holds entity `id`.
#[must_use]
pub fn section_of(id: u32) -> String {
    entity_section_name(id / ENTITY_BLOCK)
}

/// Names of the sections whose hashes differ between two section lists
/// (sections present in only one list count as differing).
#[must_use]
pub fn diff_sections(a: &[SectionHash], b: &[SectionHash]) -> Vec<String> {
    let mut out = Vec::new();
    for s in a {
        match b.iter().find(|t| t.name == s.name) {
            Some(t) if t.hash == s.hash => {}
            _ => out.push(s.name.clone()),
        }
    }
    for t in b {
        if !a.iter().any(|s| s.name == t.name) {
            out.push(t.name.clone());
        }
    }
    out
}

#[derive(Serialize)]
struct Globals<'a> {
    setup: &'a crate::contract::MatchSetup,
    tick: u32,
    last_turn: Option<crate::contract::Turn>,
    rng: &'a crate::rng::Pcg32,
    players: &'a [crate::game::PlayerState],
    next_id: u32,
    rejected: crate::game::RejectStats,
    outcome: Option<crate::game::Outcome>,
}

pub(crate) fn world_sections(w: &World) -> Vec<SectionHash> {
    let s = &w.s;
    let mut buf = Vec::with_capacity(64 * 1024);
    let mut out = vec![
        SectionHash {
            name: "globals".to_owned(),
            hash: globals_hash(w, &mut buf),
        },
        SectionHash {
            name: "map".to_owned(),
            hash: digest_of(&s.map, &mut buf),
        },
    ];
    let blocks = s.next_id.div_ceil(ENTITY_BLOCK).max(1);
    let mut rest = &s.entities[..];
    for b in 0..blocks {
        let hi = (b + 1).saturating_mul(ENTITY_BLOCK);
        let split = rest.partition_point(|e| e.id < hi);
        let (block, tail) = rest.split_at(split);
        rest = tail;
        out.push(SectionHash {
            name: entity_section_name(b),
            hash: crate::forensics::combine_entities(&entity_leaves(block, &mut buf)),
        });
    }
    out
}

/// Leaf hashes of a block of entities (or of some of them, in id order):
/// each entity's id and the digest of its postcard bytes (the section hash
/// combines them, so forensics can check a peer's per-entity list against
/// the section hash).
pub(crate) fn entity_leaves<'a>(
    entities: impl IntoIterator<Item = &'a crate::game::Entity>,
    buf: &mut Vec<u8>,
) -> Vec<crate::forensics::EntityHash> {
    entities
        .into_iter()
        .map(|e| crate::forensics::EntityHash {
            id: u64::from(e.id),
            hash: digest_of(e, buf),
        })
        .collect()
}

/// The globals section of the reference game, as hashed.
pub(crate) fn globals_hash(w: &World, buf: &mut Vec<u8>) -> StateHash {
    let s = &w.s;
    digest_of(
        &Globals {
            setup: &s.setup,
            tick: s.tick,
            last_turn: s.last_turn,
            rng: &s.rng,
            players: &s.players,
            next_id: s.next_id,
            rejected: s.rejected,
            outcome: s.outcome,
        },
        buf,
    )
}

/// The block number of an entity section name (`"entities 1024..2048"` is 1).
pub(crate) fn entity_block_of(section: &str) -> Option<u32> {
    let (lo, hi) = section.strip_prefix("entities ")?.split_once("..")?;
    let lo: u32 = lo.parse().ok()?;
    let hi: u32 = hi.parse().ok()?;
    (lo % ENTITY_BLOCK == 0 && hi == lo.checked_add(ENTITY_BLOCK)?).then_some(lo / ENTITY_BLOCK)
}

pub(crate) fn rules_hash(w: &World) -> StateHash {
    let mut h = blake3::Hasher::new();
    h.update(RULES_DOMAIN);
    h.update(World::GAME_ID.as_bytes());
    h.update(&World::GAME_VERSION.to_le_bytes());
    let mut buf = Vec::new();
    for kind in crate::game::UnitKind::ALL {
        let st = kind.stats();
        let fields = (
            st.hp,
            st.speed,
            st.range,
            st.damage,
            st.cooldown,
            st.sight,
            st.cost,
            st.train_ticks,
            st.radius,
        );
        h.update(&digest_of(&fields, &mut buf).0);
    }
    h.update(&digest_of(&w.s.map, &mut buf).0);
    h.update(&digest_of(&w.s.setup, &mut buf).0);
    StateHash(*h.finalize().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The published FNV-1a 64 test vectors: the hash never changes, so the
    /// relay derives the same match seed on every platform and release.
    #[test]
    fn fnv1a64_matches_the_reference_vectors_and_streams() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
        let mut h = Fnv1a64::default();
        h.update(b"foo");
        h.update(b"");
        h.update(b"bar");
        assert_eq!(h.finish(), fnv1a64(b"foobar"));
    }

    #[test]
    fn root_depends_on_names_and_order() {
        let a = SectionHash {
            name: "a".into(),
            hash: StateHash([1; 32]),
        };
        let b = SectionHash {
            name: "b".into(),
            hash: StateHash([2; 32]),
        };
        let ab = combine(&[a.clone(), b.clone()]);
        assert_ne!(ab, combine(&[b.clone(), a.clone()]));
        let mut a2 = a.clone();
        a2.name = "c".into();
        assert_ne!(ab, combine(&[a2, b.clone()]));
        assert_eq!(ab, combine(&[a.clone(), b.clone()]));
        assert_eq!(
            diff_sections(&[a.clone(), b.clone()], &[a, b]),
            Vec::<String>::new()
        );
        assert_eq!(entity_section_name(1), "entities 1024..2048");
        assert_eq!(section_of(2047), "entities 1024..2048");
    }
}
