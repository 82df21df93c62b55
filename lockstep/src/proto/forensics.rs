//! The desync forensics messages' payloads and bounds: after a desync the
//! relay asks one odd and one majority peer for a differing section's
//! entity hashes ([`super::ToPeer::EntityHashRequest`]), then for the
//! canonical dumps of the entities that differ
//! ([`super::ToPeer::EntityDumpRequest`]). Every answer is bounded so that it
//! fits one message; the relay validates it against hashes it already has.
//! Once narrowed, the relay tells every player what it found
//! ([`super::ToPeer::DesyncDetails`]): the entities and fields that differ.

use super::{DecodeError, MAX_MESSAGE_LEN, MAX_NAME_LEN, check, check_name, check_player};
use serde::{Deserialize, Serialize};
use sim::forensics::{EntityHash, Field};
use sim::{PlayerId, Turn};

/// Most entities one [`DesyncDetails`] names (the relay's report may hold
/// more; the rest are in its report file).
pub const MAX_DETAIL_ENTITIES: usize = 16;
/// Most fields per entity in a [`DesyncDetails`].
pub const MAX_DETAIL_FIELDS: usize = 16;
/// Upper bound of an encoded [`DesyncDetails`] message: version and tags,
/// the turn, per entity its section, id, players and per field its path and
/// both values (each with a length varint of at most 2 bytes and an option tag).
pub const MAX_DETAILS_LEN: usize = 1
    + 1
    + 5
    + 1
    + 2
    + MAX_DETAIL_ENTITIES
        * (2 + MAX_NAME_LEN
            + 10
            + 2
            + 2
            + MAX_DETAIL_FIELDS * (3 * 3 + MAX_FIELD_PATH + 2 * MAX_FIELD_VALUE));
const _: () = assert!(MAX_DETAILS_LEN <= MAX_MESSAGE_LEN);

/// What the relay's desync forensics found, sent to every player once the
/// narrowing is done: the entities that differ and, per field, the majority
/// and the odd value ([`super::ToPeer::DesyncDetails`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesyncDetails {
    /// The desynced turn.
    pub turn: Turn,
    /// Whether the narrowing ran to the end (every comparison answered in
    /// time, within the caps).
    pub complete: bool,
    /// The entities found to differ, at most [`MAX_DETAIL_ENTITIES`].
    pub entities: Vec<DesyncEntity>,
}

/// One entity that differs between an odd and a majority peer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesyncEntity {
    /// The section holding it (as in `Simulation::section_hashes`).
    pub section: String,
    /// Its id within the section (`Simulation::entity_hashes`).
    pub id: u64,
    /// The odd peer compared.
    pub odd_player: PlayerId,
    /// The majority peer compared (with no majority: the lowest player's side).
    pub majority_player: PlayerId,
    /// The fields that differ, at most [`MAX_DETAIL_FIELDS`] (empty when the
    /// dumps were not obtained).
    pub fields: Vec<DesyncField>,
}

/// One field that differs: each side's value, as its peer dumped it
/// (`Simulation::entity_fields`; `None`: missing on that side).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesyncField {
    /// The field's path, e.g. `hp` or `body[2].x`.
    pub path: String,
    /// The majority side's value.
    pub majority: Option<String>,
    /// The odd side's value.
    pub odd: Option<String>,
}

impl DesyncDetails {
    /// Cuts the details to the protocol's bounds (entity and field counts,
    /// name, path and value lengths), so the message always fits.
    #[must_use]
    pub fn bounded(mut self) -> Self {
        self.entities.truncate(MAX_DETAIL_ENTITIES);
        for e in &mut self.entities {
            cut(&mut e.section, MAX_NAME_LEN);
            e.fields.truncate(MAX_DETAIL_FIELDS);
            for f in &mut e.fields {
                cut(&mut f.path, MAX_FIELD_PATH);
                for v in [&mut f.majority, &mut f.odd].into_iter().flatten() {
                    cut(v, MAX_FIELD_VALUE);
                }
            }
        }
        self
    }

    pub(super) fn check(&self) -> Result<(), DecodeError> {
        check(
            self.entities.len() <= MAX_DETAIL_ENTITIES,
            "detail entities",
        )?;
        for e in &self.entities {
            check_name(&e.section, "section name")?;
            check_player(e.odd_player)?;
            check_player(e.majority_player)?;
            check(e.fields.len() <= MAX_DETAIL_FIELDS, "detail fields")?;
            for f in &e.fields {
                check(f.path.len() <= MAX_FIELD_PATH, "field path")?;
                for v in [&f.majority, &f.odd].into_iter().flatten() {
                    check(v.len() <= MAX_FIELD_VALUE, "field value")?;
                }
            }
        }
        Ok(())
    }
}

/// Most entity hashes in one answer (an entity block of the reference game
/// is 1,024 entities; 2,048 entries of at most 42 bytes fit a message).
pub const MAX_ENTITY_HASHES: usize = 2048;
/// Most entities whose dumps the relay asks for in one request.
pub const MAX_DUMP_ENTITIES: usize = 4;
/// Most fields of one entity's dump; a peer sends the first ones.
pub(super) const MAX_DUMP_FIELDS: usize = 64;
/// Longest field path (bytes); a peer truncates longer ones.
pub(super) const MAX_FIELD_PATH: usize = MAX_NAME_LEN;
/// Longest field value (bytes); a peer truncates longer ones (ending in `…`).
pub(super) const MAX_FIELD_VALUE: usize = 96;

/// One entity's canonical dump, as a peer answers it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntityDump {
    /// The entity's id within its section.
    pub id: u64,
    /// Its named fields (empty: the peer has no such entity).
    pub fields: Vec<Field>,
}

/// Cuts a dump to the protocol's bounds (field count, path and value
/// lengths, on character boundaries), so an answer always fits.
#[must_use]
pub(crate) fn bounded_fields(mut fields: Vec<Field>) -> Vec<Field> {
    fields.truncate(MAX_DUMP_FIELDS);
    for f in &mut fields {
        cut(&mut f.path, MAX_FIELD_PATH);
        if f.value.len() > MAX_FIELD_VALUE {
            cut(&mut f.value, MAX_FIELD_VALUE - '…'.len_utf8());
            f.value.push('…');
        }
    }
    fields
}

fn cut(s: &mut String, max: usize) {
    if s.len() > max {
        let mut at = max;
        while !s.is_char_boundary(at) {
            at -= 1;
        }
        s.truncate(at);
    }
}

pub(super) fn check_entity_hashes(
    section: &str,
    entities: &[EntityHash],
) -> Result<(), DecodeError> {
    check_name(section, "section name")?;
    check(entities.len() <= MAX_ENTITY_HASHES, "entity hashes")
}

pub(super) fn check_dump_request(section: &str, ids: &[u64]) -> Result<(), DecodeError> {
    check_name(section, "section name")?;
    check(ids.len() <= MAX_DUMP_ENTITIES, "dump ids")
}

pub(super) fn check_dumps(section: &str, dumps: &[EntityDump]) -> Result<(), DecodeError> {
    check_name(section, "section name")?;
    check(dumps.len() <= MAX_DUMP_ENTITIES, "dumps")?;
    for d in dumps {
        check(d.fields.len() <= MAX_DUMP_FIELDS, "dump fields")?;
        for f in &d.fields {
            check(f.path.len() <= MAX_FIELD_PATH, "field path")?;
            check(f.value.len() <= MAX_FIELD_VALUE, "field value")?;
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests {
    use super::super::{MAX_MESSAGE_LEN, ToRelay};
    use super::*;
    use sim::{StateHash, Turn};

    /// The largest answers the bounds allow encode within one message.
    #[test]
    fn the_largest_answers_fit_a_message() {
        let entities = (0..MAX_ENTITY_HASHES)
            .map(|i| EntityHash {
                id: u64::MAX - i as u64,
                hash: StateHash([0xff; 32]),
            })
            .collect();
        let m = ToRelay::EntityHashes {
            turn: Turn(u32::MAX),
            section: "s".repeat(MAX_NAME_LEN),
            entities,
        };
        let bytes = m.to_bytes();
        assert!(bytes.len() <= MAX_MESSAGE_LEN, "{}", bytes.len());
        assert_eq!(ToRelay::decode(&bytes).unwrap(), m);
        let long = Field::new("p".repeat(500), "é".repeat(500));
        let fields = bounded_fields(vec![long; MAX_DUMP_FIELDS + 3]);
        assert_eq!(fields.len(), MAX_DUMP_FIELDS);
        assert!(fields[0].value.ends_with('…') && fields[0].value.len() <= MAX_FIELD_VALUE);
        let m = ToRelay::EntityDumps {
            turn: Turn(u32::MAX),
            section: "s".repeat(MAX_NAME_LEN),
            dumps: vec![
                EntityDump {
                    id: u64::MAX,
                    fields,
                };
                MAX_DUMP_ENTITIES
            ],
        };
        let bytes = m.to_bytes();
        assert!(bytes.len() <= MAX_MESSAGE_LEN, "{}", bytes.len());
        assert_eq!(ToRelay::decode(&bytes).unwrap(), m);
    }

    /// Answers and requests over the caps do not decode.
    #[test]
    fn over_the_caps_is_refused() {
        use super::super::{DecodeError, ToPeer};
        let dumps = |fields: Vec<Field>, n: usize| ToRelay::EntityDumps {
            turn: Turn(1),
            section: "s".into(),
            dumps: vec![EntityDump { id: 1, fields }; n],
        };
        let cases = [
            (
                dumps(vec![Field::new("a", 1); MAX_DUMP_FIELDS + 1], 1).to_bytes(),
                "dump fields",
            ),
            (
                dumps(vec![Field::new("a", "v".repeat(MAX_FIELD_VALUE + 1))], 1).to_bytes(),
                "field value",
            ),
            (
                dumps(vec![Field::new("p".repeat(MAX_FIELD_PATH + 1), 1)], 1).to_bytes(),
                "field path",
            ),
            (dumps(Vec::new(), MAX_DUMP_ENTITIES + 1).to_bytes(), "dumps"),
        ];
        for (bytes, what) in cases {
            assert_eq!(ToRelay::decode(&bytes), Err(DecodeError::Bounds(what)));
        }
        let ask = ToPeer::EntityDumpRequest {
            turn: Turn(1),
            section: "s".into(),
            ids: vec![1; MAX_DUMP_ENTITIES + 1],
        };
        assert_eq!(
            ToPeer::decode(&ask.to_bytes()),
            Err(DecodeError::Bounds("dump ids"))
        );
    }

    fn samples() -> (Vec<ToRelay>, Vec<super::super::ToPeer>) {
        use super::super::{EndReason, ToPeer};
        let h = StateHash([7; 32]);
        let to_relay = vec![
            ToRelay::EntityHashes {
                turn: Turn(9),
                section: "entities 0..1024".into(),
                entities: vec![EntityHash { id: 417, hash: h }],
            },
            ToRelay::EntityDumps {
                turn: Turn(9),
                section: "entities 0..1024".into(),
                dumps: vec![EntityDump {
                    id: 417,
                    fields: vec![Field::new("hp", 96)],
                }],
            },
        ];
        let to_peer = vec![
            ToPeer::MatchEnd {
                turn: Some(Turn(7)),
                reason: EndReason::Desync,
            },
            ToPeer::EntityHashRequest {
                turn: Turn(3),
                section: "ships".into(),
            },
            ToPeer::EntityDumpRequest {
                turn: Turn(3),
                section: "ships".into(),
                ids: vec![1, 2],
            },
        ];
        (to_relay, to_peer)
    }

    /// The forensics messages round-trip, and seeded mutations of them
    /// never panic either decoder.
    #[test]
    fn round_trip_and_mutations_never_panic() {
        use super::super::ToPeer;
        let (a, b) = samples();
        for m in &a {
            assert_eq!(&ToRelay::decode(&m.to_bytes()).unwrap(), m);
        }
        for m in &b {
            assert_eq!(&ToPeer::decode(&m.to_bytes()).unwrap(), m);
        }
        let valid: Vec<Vec<u8>> = a
            .iter()
            .map(ToRelay::to_bytes)
            .chain(b.iter().map(ToPeer::to_bytes))
            .collect();
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..20_000 {
            let mut bytes = valid[(next() % valid.len() as u64) as usize].clone();
            for _ in 0..(1 + next() % 3) {
                let at = (next() % bytes.len() as u64) as usize;
                bytes[at] = next() as u8;
            }
            if next() % 3 == 0 {
                bytes.truncate((next() % bytes.len() as u64) as usize);
            }
            let _ = ToRelay::decode(&bytes);
            let _ = ToPeer::decode(&bytes);
        }
    }
}
