//! Desync forensics: the entity-level view of a section that lets the relay
//! narrow a desync from "section `entities 0..1024` differs" to "entity 417,
//! field `hp`: 96 on the majority, 95 on the odd peer".
//!
//! A section is a list of entities (each an id and a leaf hash), and its
//! section hash is [`combine_entities`] of that list, so anyone holding the
//! section hash can check a claimed list ([`entities_match_section`]) without
//! knowing the game. A section a game does not split (the default of
//! [`Simulation::entity_hashes`](crate::Simulation::entity_hashes)) is one
//! entity, id [`WHOLE_SECTION`], whose hash is the section hash itself.
//! An entity's canonical dump is a list of named fields ([`Field`]); two
//! dumps compare field by field ([`diff_fields`]).

use crate::contract::StateHash;
use serde::{Deserialize, Serialize};
use std::fmt;

const ENTITIES_DOMAIN: &[u8] = b"lockstep-sim entities v1";

/// The id of the one entity of a section a game does not split into entities.
pub const WHOLE_SECTION: u64 = 0;

/// One entity's hash within a section.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntityHash {
    /// The entity's id, unique within its section (lists are sorted by it).
    pub id: u64,
    /// Digest of the entity's canonical bytes.
    pub hash: StateHash,
}

/// One named field of an entity's canonical dump.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Field {
    /// Path of the field, e.g. `hp` or `pos.x` or `players[1].resources`.
    pub path: String,
    /// Its value, rendered exactly (fixed-point numbers in decimal).
    pub value: String,
}

impl Field {
    /// A field named `path` with `value` rendered by `Display`.
    pub fn new(path: impl Into<String>, value: impl fmt::Display) -> Self {
        Self {
            path: path.into(),
            value: value.to_string(),
        }
    }

    /// A field named `path` with `value` rendered by `Debug` (enums, options, lists).
    pub fn debug(path: impl Into<String>, value: &impl fmt::Debug) -> Self {
        Self {
            path: path.into(),
            value: format!("{value:?}"),
        }
    }
}

/// One field that differs between two dumps of the same entity.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldDiff {
    /// The field's path.
    pub path: String,
    /// Its value in the first dump (`None`: the field is missing there).
    pub a: Option<String>,
    /// Its value in the second dump.
    pub b: Option<String>,
}

/// The section hash of a section made of `entities` (sorted by id): BLAKE3
/// over a domain tag, the count, then each id and leaf hash. Games that split
/// a section into entities build its section hash with this, so the relay
/// can check entity lists against section hashes it already has.
#[must_use]
pub fn combine_entities(entities: &[EntityHash]) -> StateHash {
    let mut h = blake3::Hasher::new();
    h.update(ENTITIES_DOMAIN);
    h.update(
        &u64::try_from(entities.len())
            .unwrap_or(u64::MAX)
            .to_le_bytes(),
    );
    for e in entities {
        h.update(&e.id.to_le_bytes());
        h.update(&e.hash.0);
    }
    StateHash(*h.finalize().as_bytes())
}

/// Whether `entities` is a valid entity list of a section whose hash is
/// `section`: ids strictly ascending, and either the whole section as one
/// entity (its hash is the section hash) or [`combine_entities`] of the list
/// equals it. What the relay checks every answer against.
#[must_use]
pub fn entities_match_section(entities: &[EntityHash], section: &StateHash) -> bool {
    if !entities.windows(2).all(|w| w[0].id < w[1].id) {
        return false;
    }
    match entities {
        [one] if one.hash == *section => true,
        _ => combine_entities(entities) == *section,
    }
}

/// Ids whose hashes differ between two entity lists of one section (an id in
/// only one list counts), ascending.
#[must_use]
pub fn diff_entities(a: &[EntityHash], b: &[EntityHash]) -> Vec<u64> {
    let mut out: Vec<u64> = a
        .iter()
        .filter(|x| !b.iter().any(|y| y.id == x.id && y.hash == x.hash))
        .map(|x| x.id)
        .chain(
            b.iter()
                .filter(|y| !a.iter().any(|x| x.id == y.id))
                .map(|y| y.id),
        )
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The fields whose values differ between two dumps of one entity, in the
/// first dump's order, then fields only the second has.
#[must_use]
pub fn diff_fields(a: &[Field], b: &[Field]) -> Vec<FieldDiff> {
    let mut out = Vec::new();
    for f in a {
        let other = b.iter().find(|g| g.path == f.path).map(|g| &g.value);
        if other != Some(&f.value) {
            out.push(FieldDiff {
                path: f.path.clone(),
                a: Some(f.value.clone()),
                b: other.cloned(),
            });
        }
    }
    for g in b {
        if !a.iter().any(|f| f.path == g.path) {
            out.push(FieldDiff {
                path: g.path.clone(),
                a: None,
                b: Some(g.value.clone()),
            });
        }
    }
    out
}

/// One entity that differs between two worlds, with its differing fields.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntityDiff {
    /// The section holding it.
    pub section: String,
    /// Its id within the section.
    pub id: u64,
    /// Fields whose values differ (`a`: first world, `b`: second world).
    pub fields: Vec<FieldDiff>,
}

/// Narrows the difference between two worlds of the same game down to
/// entities and fields, locally: the same steps the relay takes over the
/// network (differing sections, then differing entities, then their dumps),
/// at most `max_entities` entities. For tests, tools and a referee.
#[must_use]
pub fn narrow<S: crate::Simulation>(a: &S, b: &S, max_entities: usize) -> Vec<EntityDiff> {
    let mut out = Vec::new();
    for section in crate::hash::diff_sections(&a.section_hashes(), &b.section_hashes()) {
        let ids = diff_entities(&a.entity_hashes(&section), &b.entity_hashes(&section));
        for id in ids {
            if out.len() >= max_entities {
                return out;
            }
            let fa = a.entity_fields(&section, id).unwrap_or_default();
            let fb = b.entity_fields(&section, id).unwrap_or_default();
            out.push(EntityDiff {
                section: section.clone(),
                id,
                fields: diff_fields(&fa, &fb),
            });
        }
    }
    out
}

/// The entity list of a section a game does not split into entities: the
/// whole section as one entity, id [`WHOLE_SECTION`], whose hash is the
/// section hash (empty for a section `world` does not have). It is the
/// default of [`Simulation::entity_hashes`](crate::Simulation::entity_hashes):
/// use it in an override that splits some sections and not others, for the
/// sections it does not split (an empty list there fails
/// [`sections_are_consistent`] and leaves the relay nothing to check).
///
/// ```
/// use sim::forensics::{EntityHash, combine_entities, sections_are_consistent, whole_section};
/// use sim::{MatchSetup, SectionHash, Simulation, SnapshotError, Stamped, StateHash, Turn};
///
/// /// Two counters: `units` split into entities, `clock` not.
/// struct Tiny { units: Vec<u32>, clock: u32 }
///
/// impl Tiny {
///     fn unit_hashes(&self) -> Vec<EntityHash> {
///         let mut buf = Vec::new();
///         (0u64..).zip(&self.units)
///             .map(|(id, u)| EntityHash { id, hash: sim::hash::digest_of(u, &mut buf) })
///             .collect()
///     }
/// }
///
/// impl Simulation for Tiny {
///     type Command = u8;
///     const GAME_ID: &'static str = "tiny";
///     const GAME_VERSION: u32 = 1;
///     fn new(_: &MatchSetup) -> Self { Self { units: vec![1, 2, 3], clock: 0 } }
///     fn rules_hash(&self) -> StateHash { StateHash([0; 32]) }
///     fn step(&mut self, _: Turn, _: &[Stamped<u8>]) { self.clock += 1 }
///     fn state_hash(&self) -> StateHash { sim::hash::combine(&self.section_hashes()) }
///     fn section_hashes(&self) -> Vec<SectionHash> {
///         vec![
///             SectionHash { name: "units".into(), hash: combine_entities(&self.unit_hashes()) },
///             SectionHash { name: "clock".into(), hash: sim::hash::digest_of(&self.clock, &mut Vec::new()) },
///         ]
///     }
///     fn entity_hashes(&self, section: &str) -> Vec<EntityHash> {
///         match section {
///             "units" => self.unit_hashes(),
///             // Not `Vec::new()`: the section is one entity.
///             _ => whole_section(self, section),
///         }
///     }
///     fn snapshot(&self) -> Vec<u8> { Vec::new() }
///     fn restore(_: &[u8]) -> Result<Self, SnapshotError> { Err(SnapshotError::Invalid("n/a".into())) }
/// }
///
/// let world = Tiny::new(&MatchSetup { seed: 1, players: 1, ticks_per_turn: 1 });
/// assert_eq!(whole_section(&world, "clock").len(), 1);
/// assert!(whole_section(&world, "no such section").is_empty());
/// assert!(sections_are_consistent(&world));
/// ```
#[must_use]
pub fn whole_section<S: crate::Simulation>(world: &S, section: &str) -> Vec<EntityHash> {
    world
        .section_hashes()
        .into_iter()
        .find(|s| s.name == section)
        .map(|s| {
            vec![EntityHash {
                id: WHOLE_SECTION,
                hash: s.hash,
            }]
        })
        .unwrap_or_default()
}

/// The canonical dump of a section a game does not split into entities:
/// the section hash as one field, `section_hash`, for entity
/// [`WHOLE_SECTION`] (`None` for another id or an unknown section). It is
/// the default of [`Simulation::entity_fields`](crate::Simulation::entity_fields):
/// use it in an override for the sections that [`whole_section`] lists.
#[must_use]
pub fn whole_section_fields<S: crate::Simulation>(
    world: &S,
    section: &str,
    id: u64,
) -> Option<Vec<Field>> {
    if id != WHOLE_SECTION {
        return None;
    }
    world
        .section_hashes()
        .into_iter()
        .find(|s| s.name == section)
        .map(|s| vec![Field::new("section_hash", s.hash)])
}

/// Checks a world's forensics contract: every section's entity list is
/// valid against its section hash. For a game's own tests.
#[must_use]
pub fn sections_are_consistent<S: crate::Simulation>(world: &S) -> bool {
    world
        .section_hashes()
        .iter()
        .all(|s| entities_match_section(&world.entity_hashes(&s.name), &s.hash))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(id: u64, b: u8) -> EntityHash {
        EntityHash {
            id,
            hash: StateHash([b; 32]),
        }
    }

    #[test]
    fn lists_check_against_their_section_hash() {
        let list = [e(1, 1), e(5, 2), e(9, 3)];
        let section = combine_entities(&list);
        assert!(entities_match_section(&list, &section));
        // A changed leaf, a dropped entity, or a reordered list all fail.
        assert!(!entities_match_section(
            &[e(1, 1), e(5, 7), e(9, 3)],
            &section
        ));
        assert!(!entities_match_section(&[e(1, 1), e(9, 3)], &section));
        assert!(!entities_match_section(
            &[e(5, 2), e(1, 1), e(9, 3)],
            &section
        ));
        // The whole section as one entity.
        assert!(entities_match_section(
            &[e(WHOLE_SECTION, 4)],
            &StateHash([4; 32])
        ));
        assert!(!entities_match_section(&[], &StateHash([4; 32])));
    }

    /// A game with only the required methods (like the guide's `Paint`):
    /// forensics stops at the section, whole sections are entity 0 with
    /// their hash as the one field, and the lists check.
    #[test]
    fn the_defaults_stop_at_the_section() {
        use crate::{MatchSetup, SectionHash, Simulation, SnapshotError, Stamped, Turn};
        #[derive(Clone)]
        struct Two(u32, u32);
        impl Simulation for Two {
            type Command = u8;
            const GAME_ID: &'static str = "two";
            const GAME_VERSION: u32 = 1;
            fn new(_: &MatchSetup) -> Self {
                Self(0, 0)
            }
            fn rules_hash(&self) -> StateHash {
                StateHash([0; 32])
            }
            fn step(&mut self, _: Turn, _: &[Stamped<u8>]) {}
            fn state_hash(&self) -> StateHash {
                crate::hash::combine(&self.section_hashes())
            }
            fn section_hashes(&self) -> Vec<SectionHash> {
                let mut buf = Vec::new();
                vec![
                    SectionHash {
                        name: "a".into(),
                        hash: crate::hash::digest_of(&self.0, &mut buf),
                    },
                    SectionHash {
                        name: "b".into(),
                        hash: crate::hash::digest_of(&self.1, &mut buf),
                    },
                ]
            }
            fn snapshot(&self) -> Vec<u8> {
                Vec::new()
            }
            fn restore(_: &[u8]) -> Result<Self, SnapshotError> {
                Ok(Self(0, 0))
            }
        }
        let a = Two(1, 2);
        let b = Two(1, 3);
        assert!(sections_are_consistent(&a));
        assert_eq!(a.entity_hashes("nope"), vec![]);
        assert_eq!(a.entity_fields("b", 7), None);
        let d = narrow(&a, &b, 8);
        assert_eq!(d.len(), 1);
        assert_eq!((d[0].section.as_str(), d[0].id), ("b", WHOLE_SECTION));
        assert_eq!(d[0].fields.len(), 1);
        assert_eq!(d[0].fields[0].path, "section_hash");
    }

    #[test]
    fn diffs_name_ids_and_fields() {
        assert_eq!(
            diff_entities(&[e(1, 1), e(2, 2), e(3, 3)], &[e(1, 1), e(2, 9), e(4, 4)]),
            vec![2, 3, 4]
        );
        let a = [Field::new("hp", 96), Field::new("pos.x", "1.5")];
        let b = [
            Field::new("hp", 95),
            Field::new("pos.x", "1.5"),
            Field::new("x", 1),
        ];
        assert_eq!(
            diff_fields(&a, &b),
            vec![
                FieldDiff {
                    path: "hp".into(),
                    a: Some("96".into()),
                    b: Some("95".into())
                },
                FieldDiff {
                    path: "x".into(),
                    a: None,
                    b: Some("1".into())
                }
            ]
        );
    }
}
