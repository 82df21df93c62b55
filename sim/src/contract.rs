//! The contract between a game and the engine: identifiers, per-turn inputs,
//! state hashes and the [`Simulation`] trait any lockstep game implements.

use crate::forensics::{EntityHash, Field};
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use smallvec::SmallVec;
use std::fmt;

/// A player's slot in a match (0-based, at most [`MAX_PLAYERS`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PlayerId(pub u8);

/// The most players a match can have: 32. Every per-player structure is
/// sized for it (the reference RTS's start positions and target grid, the
/// relay's seat sets, the protocol's bundle budget, which shares 64 KiB of
/// commands a turn among more than eight players).
pub const MAX_PLAYERS: u8 = 32;

impl fmt::Display for PlayerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "P{}", self.0)
    }
}

/// A lockstep turn number; turn 0 is the first simulated turn.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Turn(pub u32);

impl Turn {
    /// The turn after this one.
    #[must_use]
    pub const fn next(self) -> Self {
        Self(self.0 + 1)
    }
}

impl fmt::Display for Turn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A 256-bit BLAKE3 digest of a world state (or of one section of it).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct StateHash(pub [u8; 32]);

impl StateHash {
    /// The digest as lowercase hex.
    #[must_use]
    pub fn to_hex(&self) -> String {
        let mut s = String::with_capacity(64);
        for b in self.0 {
            s.push(char::from(HEX[usize::from(b >> 4)]));
            s.push(char::from(HEX[usize::from(b & 0xf)]));
        }
        s
    }

    /// The first 8 bytes as hex, for logs and tables.
    #[must_use]
    pub fn short(&self) -> String {
        self.to_hex()[..16].to_owned()
    }

    /// Parses 64 hex digits.
    pub fn from_hex(s: &str) -> Option<Self> {
        let bytes = s.as_bytes();
        if bytes.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, pair) in bytes.chunks_exact(2).enumerate() {
            let hi = hex_val(pair[0])?;
            let lo = hex_val(pair[1])?;
            out[i] = (hi << 4) | lo;
        }
        Some(Self(out))
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

impl fmt::Debug for StateHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StateHash({})", self.short())
    }
}

impl fmt::Display for StateHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// One section of a state hash: which part of the world it covers and its digest.
///
/// A desync report compares two peers' section lists to say which entity
/// ranges differ.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SectionHash {
    /// Human-readable name of the section, e.g. `"globals"` or `"entities 1024..2048"`.
    pub name: String,
    /// Digest of the section's canonical bytes.
    pub hash: StateHash,
}

/// A command stamped by the relay with the player who sent it and its position
/// in that player's input for the turn.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamped<C> {
    /// The sender, as stamped by the relay from the connection (never read from the payload).
    pub player: PlayerId,
    /// Position of the command within the player's input for this turn.
    pub seq: u16,
    /// The game command.
    pub command: C,
}

/// All commands of one turn. Most turns carry few commands.
pub type TurnInputs<C> = SmallVec<[Stamped<C>; 8]>;

/// Sorts a turn's inputs into the canonical application order: by player id,
/// then by the order that player issued them. Arrival order never matters.
pub fn canonical_order<C>(inputs: &mut [Stamped<C>]) {
    inputs.sort_by_key(|s| (s.player, s.seq));
}

/// How a match starts; every peer builds its world from exactly this.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MatchSetup {
    /// Seed of the world's RNG (map generation, combat rolls, bots).
    pub seed: u64,
    /// Number of player slots; players are `PlayerId(0..players)`.
    pub players: u8,
    /// Simulation ticks per lockstep turn.
    pub ticks_per_turn: u16,
}

/// The rules fingerprint of game `S` for a match of `players` players at
/// `ticks_per_turn`: [`Simulation::rules_hash`] of the canonical setup
/// (seed 0). Peers send it in their join, before the relay draws the seed,
/// so every player of a match computes the same one whatever the rules hash
/// depends on; a relay records it for a game it does not know, and
/// `replays::verify` accepts it as well as the rules hash of the recorded
/// setup. This is the one definition: peers, relays and replay tools all
/// call it.
#[must_use]
pub fn rules_fingerprint<S: Simulation>(players: u8, ticks_per_turn: u16) -> StateHash {
    S::new(&MatchSetup {
        seed: 0,
        players,
        ticks_per_turn,
    })
    .rules_hash()
}

/// Why a snapshot could not be restored.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SnapshotError {
    /// The bytes do not decode as a snapshot of this game.
    #[error("snapshot does not decode: {0}")]
    Decode(String),
    /// The snapshot decoded but is internally inconsistent.
    #[error("snapshot is inconsistent: {0}")]
    Invalid(String),
}

/// A deterministic lockstep game.
///
/// Every peer builds the world from the same [`MatchSetup`] and steps it with
/// the same inputs; the state hash must then be equal bit for bit.
pub trait Simulation: Sized {
    /// The game's command type; travels the network as opaque postcard bytes.
    type Command: Serialize + DeserializeOwned + Clone + fmt::Debug;

    /// Stable identifier of the game, recorded in replays.
    const GAME_ID: &'static str;
    /// Version of the game rules; a replay of another version may not verify.
    const GAME_VERSION: u32;

    /// Builds the world at the start of turn 0.
    fn new(setup: &MatchSetup) -> Self;

    /// Hash of the rules and the map this world was built with (constant for a match).
    fn rules_hash(&self) -> StateHash;

    /// Advances the world by one turn.
    ///
    /// The engine (a `lockstep` peer, `replays::verify`) always passes the
    /// output of [`decode_turn`](crate::decode_turn): already in
    /// [`canonical_order`]. Other callers (tests, tools) may pass any order,
    /// and the result must not depend on it: implementations apply the
    /// inputs in canonical order (sorting a copy with [`canonical_order`]
    /// costs next to nothing for a turn's few commands).
    fn step(&mut self, turn: Turn, inputs: &[Stamped<Self::Command>]);

    /// Root hash of the whole state, combined from [`Simulation::section_hashes`].
    fn state_hash(&self) -> StateHash;

    /// The section hashes the root hash is built from.
    fn section_hashes(&self) -> Vec<SectionHash>;

    /// Serialises the whole state, such that [`Simulation::restore`] gives a world
    /// whose hash and future are identical.
    fn snapshot(&self) -> Vec<u8>;

    /// Rebuilds a world from [`Simulation::snapshot`] bytes.
    fn restore(bytes: &[u8]) -> Result<Self, SnapshotError>;

    /// The entities of one section (named as in [`Simulation::section_hashes`]),
    /// sorted by id, for desync forensics: the relay compares two peers'
    /// lists to find the entities that differ. A game that splits a section
    /// must build that section's hash with
    /// [`combine_entities`](crate::forensics::combine_entities) of this list.
    ///
    /// The default, for games that cannot do better, is the whole section as
    /// one entity ([`WHOLE_SECTION`](crate::forensics::WHOLE_SECTION)) whose
    /// hash is the section hash ([`whole_section`](crate::forensics::whole_section)).
    /// Empty for an unknown section. An override that splits only some
    /// sections returns `whole_section(self, section)` for the others.
    fn entity_hashes(&self, section: &str) -> Vec<EntityHash> {
        crate::forensics::whole_section(self, section)
    }

    /// The canonical named dump of entity `id` of `section` (field names and
    /// exact values), which forensics diffs field by field between a majority
    /// and an odd peer; `None` if there is no such entity.
    ///
    /// The default, for games that cannot do better, dumps the whole section
    /// as one field, `section_hash`
    /// ([`whole_section_fields`](crate::forensics::whole_section_fields)).
    fn entity_fields(&self, section: &str, id: u64) -> Option<Vec<Field>> {
        crate::forensics::whole_section_fields(self, section, id)
    }
}

/// The most commands one player may put in one turn; more is hostile and dropped.
pub const MAX_COMMANDS_PER_TURN: usize = 64;

/// Why a player's input bytes were rejected (they then count as an empty input).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InputError {
    /// Not a postcard-encoded command list of this game.
    #[error("input does not decode")]
    Decode,
    /// More than [`MAX_COMMANDS_PER_TURN`] commands.
    #[error("{0} commands in one turn exceeds the cap of {MAX_COMMANDS_PER_TURN}")]
    TooMany(usize),
    /// Bytes left over after the command list.
    #[error("{0} trailing bytes after the command list")]
    Trailing(usize),
}

/// Encodes one player's commands for one turn as the opaque bytes the relay carries.
pub fn encode_commands<C: Serialize>(commands: &[C], out: &mut Vec<u8>) {
    // Serialising plain data into a Vec cannot fail; an empty input is the fallback.
    match postcard::to_allocvec(commands) {
        Ok(bytes) => out.extend_from_slice(&bytes),
        Err(_) => out.push(0),
    }
}

/// Decodes one player's opaque input bytes into stamped commands.
///
/// Deterministic: every peer rejects the same bytes the same way, so a hostile
/// input is uniformly treated as empty.
pub fn decode_commands<C: DeserializeOwned>(
    player: PlayerId,
    bytes: &[u8],
) -> Result<Vec<Stamped<C>>, InputError> {
    // Check the length prefix before decoding so a hostile count cannot allocate.
    let (count, _) = postcard::take_from_bytes::<u32>(bytes).map_err(|_| InputError::Decode)?;
    let count = usize::try_from(count).map_err(|_| InputError::Decode)?;
    if count > MAX_COMMANDS_PER_TURN {
        return Err(InputError::TooMany(count));
    }
    let (commands, rest) =
        postcard::take_from_bytes::<Vec<C>>(bytes).map_err(|_| InputError::Decode)?;
    if !rest.is_empty() {
        return Err(InputError::Trailing(rest.len()));
    }
    Ok(commands
        .into_iter()
        .enumerate()
        .map(|(i, command)| Stamped {
            player,
            // Bounded by MAX_COMMANDS_PER_TURN above.
            seq: u16::try_from(i).unwrap_or(u16::MAX),
            command,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip() {
        let h = StateHash(core::array::from_fn(|i| i as u8 * 7));
        assert_eq!(StateHash::from_hex(&h.to_hex()), Some(h));
        assert_eq!(StateHash::from_hex("zz"), None);
    }

    #[test]
    fn canonical_order_ignores_arrival() {
        let mut v = vec![
            Stamped {
                player: PlayerId(2),
                seq: 0,
                command: 'c',
            },
            Stamped {
                player: PlayerId(0),
                seq: 1,
                command: 'b',
            },
            Stamped {
                player: PlayerId(0),
                seq: 0,
                command: 'a',
            },
        ];
        canonical_order(&mut v);
        let order: String = v.iter().map(|s| s.command).collect();
        assert_eq!(order, "abc");
    }

    #[test]
    fn commands_round_trip_and_caps() {
        let mut buf = Vec::new();
        encode_commands(&[1u32, 2, 3], &mut buf);
        let back = decode_commands::<u32>(PlayerId(3), &buf).unwrap();
        assert_eq!(back.len(), 3);
        assert_eq!(back[2].seq, 2);
        assert_eq!(back[2].player, PlayerId(3));

        let many: Vec<u32> = (0..65).collect();
        let mut buf = Vec::new();
        encode_commands(&many, &mut buf);
        assert_eq!(
            decode_commands::<u32>(PlayerId(0), &buf),
            Err(InputError::TooMany(65))
        );

        let mut buf = Vec::new();
        encode_commands(&[1u32], &mut buf);
        buf.push(9);
        assert_eq!(
            decode_commands::<u32>(PlayerId(0), &buf),
            Err(InputError::Trailing(1))
        );
        assert_eq!(
            decode_commands::<u32>(PlayerId(0), &[0xff]),
            Err(InputError::Decode)
        );
    }
}
