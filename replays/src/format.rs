//! The on-disk layout: preamble, record framing, the checksum chain and the
//! payload of every record kind. The crate root documents it as a table.

use crate::error::ReplayError;
use serde::{Deserialize, Serialize};
use sim::{MatchSetup, PlayerId, StateHash, Turn};

/// The first eight bytes of every replay file.
pub const MAGIC: [u8; 8] = *b"LSRPLAY\0";

/// The format version this build writes (and the newest it reads).
pub const FORMAT_VERSION: u32 = 1;

/// The oldest format version this build still reads.
pub const OLDEST_READABLE_VERSION: u32 = 1;

/// Bytes before the first record: magic + format version.
pub const PREAMBLE_LEN: u64 = 12;

/// Bytes of framing before a record's payload: length, inverted length, kind.
pub const RECORD_HEAD_LEN: u64 = 9;

/// Bytes of a record's checksum (truncated BLAKE3).
pub const CHECKSUM_LEN: usize = 16;

/// Largest payload a record may carry (a snapshot of a very large world fits).
pub const MAX_RECORD_LEN: u32 = 256 * 1024 * 1024;

/// BLAKE3 derive-key context of the record checksum chain.
const CHAIN_CONTEXT: &str = "lockstep-rts replays v1 record checksum chain";

/// A record's checksum; each one covers the previous one (a hash chain).
pub type Checksum = [u8; CHECKSUM_LEN];

/// The checksum the chain starts from: a digest of the preamble, so a record
/// cannot be moved into a file of another version.
#[must_use]
pub fn chain_seed(version: u32) -> Checksum {
    let mut h = blake3::Hasher::new_derive_key(CHAIN_CONTEXT);
    h.update(&MAGIC);
    h.update(&version.to_le_bytes());
    truncate(&h.finalize())
}

/// The checksum of one record given the previous record's checksum.
#[must_use]
pub fn record_checksum(prev: &Checksum, kind: u8, payload: &[u8]) -> Checksum {
    let mut h = blake3::Hasher::new_derive_key(CHAIN_CONTEXT);
    h.update(prev);
    // Bounded by MAX_RECORD_LEN, checked by every caller before framing.
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    h.update(&len.to_le_bytes());
    h.update(&[kind]);
    h.update(payload);
    truncate(&h.finalize())
}

fn truncate(hash: &blake3::Hash) -> Checksum {
    let mut out = [0u8; CHECKSUM_LEN];
    out.copy_from_slice(&hash.as_bytes()[..CHECKSUM_LEN]);
    out
}

/// The 12-byte preamble of a file of the current version.
#[must_use]
pub fn preamble() -> [u8; PREAMBLE_LEN as usize] {
    let mut p = [0u8; PREAMBLE_LEN as usize];
    p[..8].copy_from_slice(&MAGIC);
    p[8..].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    p
}

/// A recording's bytes with a valid checksum chain around arbitrary
/// records, for fuzz targets (the fuzzer cannot forge BLAKE3 checksums):
/// `data` read as `kind: u8, len: u32 LE, payload`, repeated, each framed
/// with [`frame_record`] after the [`preamble`]; leftover bytes become a
/// torn tail. `None` when the writer refuses to frame a record.
#[must_use]
pub fn framed_for_fuzzing(data: &[u8]) -> Option<Vec<u8>> {
    let mut file = preamble().to_vec();
    let mut prev = chain_seed(FORMAT_VERSION);
    let mut rest = data;
    while let [kind, l0, l1, l2, l3, tail @ ..] = rest {
        let len = u32::from_le_bytes([*l0, *l1, *l2, *l3]) as usize;
        let (payload, next) = tail.split_at(len.min(tail.len()));
        prev = frame_record(&prev, *kind, payload, &mut file).ok()?;
        rest = next;
    }
    file.extend_from_slice(rest);
    Some(file)
}

/// Appends one framed record (head, payload, checksum) to `out` and returns its checksum.
pub fn frame_record(
    prev: &Checksum,
    kind: u8,
    payload: &[u8],
    out: &mut Vec<u8>,
) -> Result<Checksum, ReplayError> {
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|l| *l <= MAX_RECORD_LEN)
        .ok_or(ReplayError::TooLarge {
            len: payload.len(),
            max: MAX_RECORD_LEN,
        })?;
    let sum = record_checksum(prev, kind, payload);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&(!len).to_le_bytes());
    out.push(kind);
    out.extend_from_slice(payload);
    out.extend_from_slice(&sum);
    Ok(sum)
}

/// One player in a match.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlayerInfo {
    /// The player's slot.
    pub id: PlayerId,
    /// Display name.
    pub name: String,
}

/// Everything needed to re-simulate a match, stored in the file's first record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Format version of the file (the writer always writes [`FORMAT_VERSION`]).
    pub format_version: u32,
    /// Version of the engine that recorded the file.
    pub engine_version: String,
    /// Version of the network protocol the match was played with.
    pub protocol_version: u32,
    /// [`sim::Simulation::GAME_ID`] of the game played.
    pub game_id: String,
    /// [`sim::Simulation::GAME_VERSION`] of the game played.
    pub game_version: u32,
    /// Hash of the game rules and map ([`sim::Simulation::rules_hash`] of
    /// the recorded setup), or, from a relay that does not know the game,
    /// the rules fingerprint the players joined with
    /// ([`sim::rules_fingerprint`]); verify accepts either.
    pub rules_hash: StateHash,
    /// How the world was built (seed, players, ticks per turn).
    pub setup: MatchSetup,
    /// Wall-clock length of one turn in microseconds.
    pub turn_length_us: u64,
    /// The players.
    pub players: Vec<PlayerInfo>,
    /// Free-form name of the match.
    pub match_name: String,
    /// When the match started, Unix milliseconds.
    pub start_time_unix_ms: u64,
}

impl Header {
    /// A header for a match of game `S` built from `setup`, with this crate's
    /// engine version; the caller fills in protocol version, names and time.
    #[must_use]
    pub fn for_game<S: sim::Simulation>(world: &S, setup: &MatchSetup) -> Self {
        Self {
            format_version: FORMAT_VERSION,
            engine_version: env!("CARGO_PKG_VERSION").to_owned(),
            protocol_version: 0,
            game_id: S::GAME_ID.to_owned(),
            game_version: S::GAME_VERSION,
            rules_hash: world.rules_hash(),
            setup: setup.clone(),
            turn_length_us: 100_000,
            players: (0..setup.players)
                .map(|i| PlayerInfo {
                    id: PlayerId(i),
                    name: format!("player {i}"),
                })
                .collect(),
            match_name: String::new(),
            start_time_unix_ms: 0,
        }
    }
}

/// The header as stored (the format version lives in the preamble, not here).
#[derive(Serialize, Deserialize)]
struct HeaderWire {
    engine_version: String,
    protocol_version: u32,
    game_id: String,
    game_version: u32,
    rules_hash: StateHash,
    setup: MatchSetup,
    turn_length_us: u64,
    players: Vec<PlayerInfo>,
    match_name: String,
    start_time_unix_ms: u64,
}

/// Where a keyframe is in the file, as listed by the keyframe index.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyframeEntry {
    /// Turn the snapshot was taken after.
    pub turn: Turn,
    /// Byte offset of the keyframe record.
    pub offset: u64,
    /// State hash recorded with the snapshot.
    pub hash: StateHash,
}

/// What a relay needs, beside the header, to resume a match from its
/// recording after a restart ([`Record::Match`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MatchFacts {
    /// The relay's number of the match (its players' rejoin secrets are
    /// derived from it).
    pub match_id: u64,
    /// The rules fingerprint the players joined with (the header's
    /// `rules_hash` may be the game's own, recomputed by the relay).
    pub rules_fingerprint: StateHash,
    /// The input delay the match started with (0 under the relay's clock).
    pub input_delay: u8,
    /// The match's first turn.
    pub first_turn: Turn,
    /// Its last turn, if the players agreed on a length.
    pub last_turn: Option<Turn>,
    /// The match instance's random nonce: the relay binds the players'
    /// rejoin secrets to it, so a later match with the same name and
    /// number (match numbers restart with the process) has other secrets.
    /// Encoded as 16 bytes after the other fields; recordings of earlier
    /// relays have none (`None`), and their records read as before.
    #[serde(skip)]
    pub nonce: Option<[u8; 16]>,
    /// The join-token match instance the relay bound the match to, and the
    /// latest expiry among the tokens it had admitted for it when it
    /// started (token mode; `None` in open mode): a resumed relay keeps
    /// refusing other instances' tokens for the match, and remembers the
    /// instance after the match ends until that expiry. Encoded after the
    /// nonce (which it needs) as 16 bytes and a little-endian `u64`;
    /// recordings of earlier relays have none.
    #[serde(skip)]
    pub token: Option<MatchToken>,
}

/// The join-token binding of a recorded match ([`MatchFacts::token`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatchToken {
    /// The match instance every admitted token carried.
    pub instance: [u8; 16],
    /// The latest expiry (Unix seconds) among the tokens admitted.
    pub expire_unix: u64,
}

/// One record of a replay, in file order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// The file's first record.
    Header(Header),
    /// A closed turn: each player's opaque input bytes, as the relay bundled them.
    Turn {
        /// The turn.
        turn: Turn,
        /// Per-player input bytes (`sim::encode_commands` output).
        inputs: Vec<(PlayerId, Vec<u8>)>,
    },
    /// The state hash the peers agreed on after stepping `turn`.
    Hash {
        /// The turn.
        turn: Turn,
        /// The agreed hash.
        hash: StateHash,
    },
    /// Peers reported different hashes for `turn`.
    Desync {
        /// The turn.
        turn: Turn,
        /// Each reporting player's hash.
        hashes: Vec<(PlayerId, StateHash)>,
        /// Names of the sections known to differ (may be empty).
        sections: Vec<String>,
    },
    /// Hash reports for `turn` disagreed (written by the relay for every such
    /// turn, next to the majority's [`Record::Hash`]).
    Dispute {
        /// The turn.
        turn: Turn,
        /// The hash a strict majority of the reporters had (also recorded as
        /// the turn's hash record); `None` when there was no majority.
        majority: Option<StateHash>,
        /// Each player outside the majority with its hash; every reporter
        /// when there was no majority.
        dissent: Vec<(PlayerId, StateHash)>,
    },
    /// A player left or was dropped; from `turn` on they send nothing.
    Drop {
        /// The player.
        player: PlayerId,
        /// First turn without them.
        turn: Turn,
    },
    /// A dropped player came back into its slot; from `turn` on its inputs count again.
    Rejoin {
        /// The player.
        player: PlayerId,
        /// First turn with them again.
        turn: Turn,
    },
    /// The input delay changed, effective from `from_turn`.
    DelayChange {
        /// New delay in turns.
        delay: u32,
        /// First turn it applies to.
        from_turn: Turn,
    },
    /// A full snapshot of the world after stepping `turn`, for seeking.
    Keyframe {
        /// The turn.
        turn: Turn,
        /// The world's hash at that point.
        hash: StateHash,
        /// [`sim::Simulation::snapshot`] bytes.
        snapshot: Vec<u8>,
    },
    /// The world before turn 0, for a match that does not start from
    /// `Simulation::new(setup)` (a scenario); at most one, before any turn.
    Start {
        /// The world's hash.
        hash: StateHash,
        /// [`sim::Simulation::snapshot`] bytes.
        snapshot: Vec<u8>,
    },
    /// Every keyframe of the file (written by `finish`, before the trailer).
    KeyframeIndex(Vec<KeyframeEntry>),
    /// The relay's desync forensics report (entities and fields that differ).
    Forensics(Box<crate::forensics::DesyncReport>),
    /// The relay's facts about the match, right after the header of a
    /// relay's recording: what a restarted relay resumes the match from.
    Match(MatchFacts),
    /// How the match ended, as its relay announced it (`completed`,
    /// `abandoned`, `shutdown`, `desync`), written before the trailer; at
    /// most [`MAX_END_REASON`] bytes.
    End {
        /// The reason, as text.
        reason: String,
    },
    /// The last record of a finished file.
    Trailer {
        /// Last turn of the match.
        final_turn: Turn,
        /// Hash after the last turn.
        final_hash: StateHash,
        /// Number of turn records in the file.
        turns: u32,
    },
}

/// Record kind bytes; they never change meaning within a format version.
pub mod kind {
    /// [`super::Record::Header`]
    pub const HEADER: u8 = 1;
    /// [`super::Record::Turn`]
    pub const TURN: u8 = 2;
    /// [`super::Record::Hash`]
    pub const HASH: u8 = 3;
    /// [`super::Record::Desync`]
    pub const DESYNC: u8 = 4;
    /// [`super::Record::Drop`]
    pub const DROP: u8 = 5;
    /// [`super::Record::DelayChange`]
    pub const DELAY_CHANGE: u8 = 6;
    /// [`super::Record::Keyframe`]
    pub const KEYFRAME: u8 = 7;
    /// [`super::Record::KeyframeIndex`]
    pub const KEYFRAME_INDEX: u8 = 8;
    /// [`super::Record::Trailer`]
    pub const TRAILER: u8 = 9;
    /// [`super::Record::Start`]
    pub const START: u8 = 10;
    /// [`super::Record::Dispute`]
    pub const DISPUTE: u8 = 11;
    /// [`super::Record::Forensics`]
    pub const FORENSICS: u8 = 12;
    /// [`super::Record::Rejoin`]
    pub const REJOIN: u8 = 13;
    /// [`super::Record::Match`]
    pub const MATCH: u8 = 14;
    /// [`super::Record::End`]
    pub const END: u8 = 15;
}

/// The longest end reason an [`Record::End`] holds.
pub const MAX_END_REASON: usize = 64;

/// Name of a record kind byte, for messages and `replay export`.
#[must_use]
pub const fn kind_name(kind: u8) -> &'static str {
    match kind {
        kind::HEADER => "header",
        kind::TURN => "turn",
        kind::HASH => "hash",
        kind::DESYNC => "desync",
        kind::DROP => "drop",
        kind::DELAY_CHANGE => "delay_change",
        kind::KEYFRAME => "keyframe",
        kind::KEYFRAME_INDEX => "keyframe_index",
        kind::TRAILER => "trailer",
        kind::START => "start",
        kind::DISPUTE => "dispute",
        kind::FORENSICS => "forensics",
        kind::REJOIN => "rejoin",
        kind::MATCH => "match",
        kind::END => "end",
        _ => "unknown",
    }
}

#[derive(Serialize, Deserialize)]
struct TurnWire<'a> {
    turn: Turn,
    #[serde(borrow)]
    inputs: Vec<(PlayerId, &'a [u8])>,
}

#[derive(Serialize, Deserialize)]
struct KeyframeWire<'a> {
    turn: Turn,
    hash: StateHash,
    #[serde(borrow)]
    snapshot: &'a [u8],
}

#[derive(Serialize, Deserialize)]
struct StartWire<'a> {
    hash: StateHash,
    #[serde(borrow)]
    snapshot: &'a [u8],
}

impl Record {
    /// This record's kind byte.
    #[must_use]
    pub const fn kind(&self) -> u8 {
        match self {
            Self::Header(_) => kind::HEADER,
            Self::Turn { .. } => kind::TURN,
            Self::Hash { .. } => kind::HASH,
            Self::Desync { .. } => kind::DESYNC,
            Self::Drop { .. } => kind::DROP,
            Self::DelayChange { .. } => kind::DELAY_CHANGE,
            Self::Keyframe { .. } => kind::KEYFRAME,
            Self::KeyframeIndex(_) => kind::KEYFRAME_INDEX,
            Self::Trailer { .. } => kind::TRAILER,
            Self::Start { .. } => kind::START,
            Self::Dispute { .. } => kind::DISPUTE,
            Self::Forensics(_) => kind::FORENSICS,
            Self::Rejoin { .. } => kind::REJOIN,
            Self::Match(_) => kind::MATCH,
            Self::End { .. } => kind::END,
        }
    }

    /// The turn this record is about, when it has one.
    #[must_use]
    pub const fn turn(&self) -> Option<Turn> {
        match self {
            Self::Turn { turn, .. }
            | Self::Hash { turn, .. }
            | Self::Desync { turn, .. }
            | Self::Dispute { turn, .. }
            | Self::Drop { turn, .. }
            | Self::Rejoin { turn, .. }
            | Self::Keyframe { turn, .. } => Some(*turn),
            Self::DelayChange { from_turn, .. } => Some(*from_turn),
            Self::Trailer { final_turn, .. } => Some(*final_turn),
            Self::Forensics(r) => Some(Turn(r.turn)),
            Self::Header(_)
            | Self::KeyframeIndex(_)
            | Self::Start { .. }
            | Self::Match(_)
            | Self::End { .. } => None,
        }
    }

    /// Appends this record's payload (without framing) to `out`.
    pub fn encode_payload(&self, out: &mut Vec<u8>) -> Result<(), ReplayError> {
        let res = match self {
            Self::Header(h) => postcard::to_io(
                &HeaderWire {
                    engine_version: h.engine_version.clone(),
                    protocol_version: h.protocol_version,
                    game_id: h.game_id.clone(),
                    game_version: h.game_version,
                    rules_hash: h.rules_hash,
                    setup: h.setup.clone(),
                    turn_length_us: h.turn_length_us,
                    players: h.players.clone(),
                    match_name: h.match_name.clone(),
                    start_time_unix_ms: h.start_time_unix_ms,
                },
                &mut *out,
            ),
            Self::Turn { turn, inputs } => {
                return encode_turn(*turn, inputs.iter().map(|(p, b)| (*p, b.as_slice())), out);
            }
            Self::Hash { turn, hash } => postcard::to_io(&(turn, hash), &mut *out),
            Self::Desync {
                turn,
                hashes,
                sections,
            } => postcard::to_io(&(turn, hashes, sections), &mut *out),
            Self::Dispute {
                turn,
                majority,
                dissent,
            } => postcard::to_io(&(turn, majority, dissent), &mut *out),
            Self::Drop { player, turn } | Self::Rejoin { player, turn } => {
                postcard::to_io(&(player, turn), &mut *out)
            }
            Self::DelayChange { delay, from_turn } => {
                postcard::to_io(&(delay, from_turn), &mut *out)
            }
            Self::Keyframe {
                turn,
                hash,
                snapshot,
            } => {
                return encode_keyframe(*turn, *hash, snapshot, out);
            }
            Self::Start { hash, snapshot } => {
                return encode_start(*hash, snapshot, out);
            }
            Self::KeyframeIndex(entries) => postcard::to_io(entries, &mut *out),
            Self::Forensics(report) => postcard::to_io(&**report, &mut *out),
            Self::Match(facts) => {
                postcard::to_io(facts, &mut *out).map_err(|e| malformed_out(self.kind(), &e))?;
                // The nonce follows the fields earlier readers know, the
                // token binding the nonce: a reader tells them by length.
                match (&facts.nonce, &facts.token) {
                    (Some(n), token) => {
                        out.extend_from_slice(n);
                        if let Some(t) = token {
                            out.extend_from_slice(&t.instance);
                            out.extend_from_slice(&t.expire_unix.to_le_bytes());
                        }
                    }
                    (None, None) => {}
                    (None, Some(_)) => {
                        return Err(ReplayError::Malformed {
                            offset: 0,
                            kind: kind_name(self.kind()),
                            reason: "cannot encode: a token binding without a nonce".into(),
                        });
                    }
                }
                return Ok(());
            }
            Self::End { reason } => postcard::to_io(reason, &mut *out),
            Self::Trailer {
                final_turn,
                final_hash,
                turns,
            } => postcard::to_io(&(final_turn, final_hash, turns), &mut *out),
        };
        res.map(|_| ()).map_err(|e| malformed_out(self.kind(), &e))
    }

    /// Decodes a payload of kind `kind` found at byte `offset`.
    pub fn decode_payload(
        kind: u8,
        payload: &[u8],
        offset: u64,
        version: u32,
    ) -> Result<Self, ReplayError> {
        let bad = |e: postcard::Error| ReplayError::Malformed {
            offset,
            kind: kind_name(kind),
            reason: e.to_string(),
        };
        let record = match kind {
            kind::HEADER => {
                let w: HeaderWire = exact(payload).map_err(bad)?;
                Self::Header(Header {
                    format_version: version,
                    engine_version: w.engine_version,
                    protocol_version: w.protocol_version,
                    game_id: w.game_id,
                    game_version: w.game_version,
                    rules_hash: w.rules_hash,
                    setup: w.setup,
                    turn_length_us: w.turn_length_us,
                    players: w.players,
                    match_name: w.match_name,
                    start_time_unix_ms: w.start_time_unix_ms,
                })
            }
            kind::TURN => {
                let w: TurnWire<'_> = exact(payload).map_err(bad)?;
                Self::Turn {
                    turn: w.turn,
                    inputs: w.inputs.into_iter().map(|(p, b)| (p, b.to_vec())).collect(),
                }
            }
            kind::HASH => {
                let (turn, hash) = exact(payload).map_err(bad)?;
                Self::Hash { turn, hash }
            }
            kind::DESYNC => {
                let (turn, hashes, sections) = exact(payload).map_err(bad)?;
                Self::Desync {
                    turn,
                    hashes,
                    sections,
                }
            }
            kind::DISPUTE => {
                let (turn, majority, dissent) = exact(payload).map_err(bad)?;
                Self::Dispute {
                    turn,
                    majority,
                    dissent,
                }
            }
            kind::DROP => {
                let (player, turn) = exact(payload).map_err(bad)?;
                Self::Drop { player, turn }
            }
            kind::REJOIN => {
                let (player, turn) = exact(payload).map_err(bad)?;
                Self::Rejoin { player, turn }
            }
            kind::DELAY_CHANGE => {
                let (delay, from_turn) = exact(payload).map_err(bad)?;
                Self::DelayChange { delay, from_turn }
            }
            kind::KEYFRAME => {
                let w: KeyframeWire<'_> = exact(payload).map_err(bad)?;
                Self::Keyframe {
                    turn: w.turn,
                    hash: w.hash,
                    snapshot: w.snapshot.to_vec(),
                }
            }
            kind::START => {
                let w: StartWire<'_> = exact(payload).map_err(bad)?;
                Self::Start {
                    hash: w.hash,
                    snapshot: w.snapshot.to_vec(),
                }
            }
            kind::KEYFRAME_INDEX => Self::KeyframeIndex(exact(payload).map_err(bad)?),
            kind::FORENSICS => Self::Forensics(Box::new(exact(payload).map_err(bad)?)),
            kind::MATCH => {
                let (mut facts, rest): (MatchFacts, _) =
                    postcard::take_from_bytes(payload).map_err(bad)?;
                // Nothing (earliest relays), the nonce, or the nonce and
                // the token binding (instance, expiry).
                let (nonce, token) = match rest.len() {
                    0 => (None, None),
                    16 => (Some(rest), None),
                    40 => {
                        let (nonce, token) = rest.split_at(16);
                        (Some(nonce), Some(token))
                    }
                    _ => return Err(bad(postcard::Error::DeserializeBadEncoding)),
                };
                let bytes16 = |b: &[u8]| {
                    let mut n = [0u8; 16];
                    n.copy_from_slice(&b[..16]);
                    n
                };
                facts.nonce = nonce.map(bytes16);
                facts.token = token.map(|t| {
                    let mut expire = [0u8; 8];
                    expire.copy_from_slice(&t[16..24]);
                    MatchToken {
                        instance: bytes16(t),
                        expire_unix: u64::from_le_bytes(expire),
                    }
                });
                Self::Match(facts)
            }
            kind::END => {
                let reason: String = exact(payload).map_err(bad)?;
                if reason.len() > MAX_END_REASON {
                    return Err(ReplayError::Malformed {
                        offset,
                        kind: kind_name(kind),
                        reason: format!("an end reason of {} bytes", reason.len()),
                    });
                }
                Self::End { reason }
            }
            kind::TRAILER => {
                let (final_turn, final_hash, turns) = exact(payload).map_err(bad)?;
                Self::Trailer {
                    final_turn,
                    final_hash,
                    turns,
                }
            }
            other => {
                return Err(ReplayError::UnknownKind {
                    offset,
                    kind: other,
                });
            }
        };
        Ok(record)
    }
}

/// Encodes a turn payload straight from borrowed inputs (the writer's hot path).
pub(crate) fn encode_turn<'a>(
    turn: Turn,
    inputs: impl Iterator<Item = (PlayerId, &'a [u8])>,
    out: &mut Vec<u8>,
) -> Result<(), ReplayError> {
    let wire = TurnWire {
        turn,
        inputs: inputs.collect(),
    };
    postcard::to_io(&wire, &mut *out)
        .map(|_| ())
        .map_err(|e| malformed_out(kind::TURN, &e))
}

/// Encodes a keyframe payload from a borrowed snapshot.
pub(crate) fn encode_keyframe(
    turn: Turn,
    hash: StateHash,
    snapshot: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), ReplayError> {
    postcard::to_io(
        &KeyframeWire {
            turn,
            hash,
            snapshot,
        },
        &mut *out,
    )
    .map(|_| ())
    .map_err(|e| malformed_out(kind::KEYFRAME, &e))
}

/// Encodes a start-state payload from a borrowed snapshot.
pub(crate) fn encode_start(
    hash: StateHash,
    snapshot: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), ReplayError> {
    postcard::to_io(&StartWire { hash, snapshot }, &mut *out)
        .map(|_| ())
        .map_err(|e| malformed_out(kind::START, &e))
}

fn malformed_out(kind: u8, e: &postcard::Error) -> ReplayError {
    ReplayError::Malformed {
        offset: 0,
        kind: kind_name(kind),
        reason: format!("cannot encode: {e}"),
    }
}

/// Decodes a postcard value that must use every byte of `bytes`.
fn exact<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, postcard::Error> {
    let (v, rest) = postcard::take_from_bytes(bytes)?;
    if rest.is_empty() {
        Ok(v)
    } else {
        Err(postcard::Error::DeserializeBadEncoding)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_records() -> Vec<Record> {
        let h = StateHash([7; 32]);
        vec![
            Record::Header(Header {
                format_version: FORMAT_VERSION,
                engine_version: "0.1.0".into(),
                protocol_version: 3,
                game_id: "g".into(),
                game_version: 2,
                rules_hash: h,
                setup: MatchSetup {
                    seed: 9,
                    players: 2,
                    ticks_per_turn: 4,
                },
                turn_length_us: 100_000,
                players: vec![PlayerInfo {
                    id: PlayerId(0),
                    name: "a".into(),
                }],
                match_name: "m".into(),
                start_time_unix_ms: 5,
            }),
            Record::Turn {
                turn: Turn(3),
                inputs: vec![(PlayerId(0), vec![1, 2]), (PlayerId(1), vec![])],
            },
            Record::Hash {
                turn: Turn(3),
                hash: h,
            },
            Record::Desync {
                turn: Turn(4),
                hashes: vec![(PlayerId(1), h)],
                sections: vec!["units".into()],
            },
            Record::Dispute {
                turn: Turn(4),
                majority: Some(h),
                dissent: vec![(PlayerId(1), StateHash([8; 32]))],
            },
            Record::Dispute {
                turn: Turn(5),
                majority: None,
                dissent: vec![(PlayerId(0), h), (PlayerId(1), StateHash([8; 32]))],
            },
            Record::Drop {
                player: PlayerId(1),
                turn: Turn(5),
            },
            Record::DelayChange {
                delay: 4,
                from_turn: Turn(6),
            },
            Record::Keyframe {
                turn: Turn(6),
                hash: h,
                snapshot: vec![9; 100],
            },
            Record::KeyframeIndex(vec![KeyframeEntry {
                turn: Turn(6),
                offset: 77,
                hash: h,
            }]),
            Record::Trailer {
                final_turn: Turn(6),
                final_hash: h,
                turns: 7,
            },
            Record::Start {
                hash: h,
                snapshot: vec![1, 2, 3],
            },
            Record::Rejoin {
                player: PlayerId(1),
                turn: Turn(7),
            },
            Record::Match(MatchFacts {
                match_id: 12,
                rules_fingerprint: h,
                input_delay: 3,
                first_turn: Turn(0),
                last_turn: Some(Turn(600)),
                nonce: None,
                token: None,
            }),
            Record::Match(MatchFacts {
                match_id: 13,
                rules_fingerprint: h,
                input_delay: 3,
                first_turn: Turn(0),
                last_turn: None,
                nonce: Some([7; 16]),
                token: None,
            }),
            Record::Match(MatchFacts {
                match_id: 14,
                rules_fingerprint: h,
                input_delay: 3,
                first_turn: Turn(0),
                last_turn: None,
                nonce: Some([8; 16]),
                token: Some(MatchToken {
                    instance: [9; 16],
                    expire_unix: 1_700_000_060,
                }),
            }),
            Record::End {
                reason: "abandoned".into(),
            },
        ]
    }

    /// An end reason longer than [`MAX_END_REASON`] is refused on reading
    /// (a writer cuts it).
    #[test]
    fn an_overlong_end_reason_is_malformed() {
        let long = Record::End {
            reason: "x".repeat(MAX_END_REASON + 1),
        };
        let mut buf = Vec::new();
        long.encode_payload(&mut buf).unwrap();
        assert!(matches!(
            Record::decode_payload(kind::END, &buf, 0, FORMAT_VERSION),
            Err(ReplayError::Malformed { .. })
        ));
    }

    #[test]
    fn every_kind_round_trips() {
        for r in sample_records() {
            let mut buf = Vec::new();
            r.encode_payload(&mut buf).unwrap();
            let back = Record::decode_payload(r.kind(), &buf, 0, FORMAT_VERSION).unwrap();
            assert_eq!(back, r);
            // Trailing garbage after a valid payload is malformed, not ignored.
            buf.push(0);
            assert!(matches!(
                Record::decode_payload(r.kind(), &buf, 0, FORMAT_VERSION),
                Err(ReplayError::Malformed { .. })
            ));
        }
    }

    #[test]
    fn checksum_chains_on_previous() {
        let a = record_checksum(&[0; 16], kind::HASH, b"x");
        let b = record_checksum(&[1; 16], kind::HASH, b"x");
        let c = record_checksum(&[0; 16], kind::DROP, b"x");
        assert_ne!(a, b);
        assert_ne!(a, c);
        assert_ne!(chain_seed(1), chain_seed(2));
    }
}

/// Milliseconds since the Unix epoch, read from the wall clock (0 if the
/// clock is set before 1970): the workspace's one wall-clock helper.
///
/// Call it only in drivers and binaries (the relay's serve loop, the peer's
/// runner, a CLI, a benchmark stamp) and pass the value in: protocol cores,
/// recorders and the sim take time as a value and never read a clock.
/// Seconds are `unix_now_ms() / 1000`; [`utc_string`] shows the value.
#[must_use]
pub fn unix_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `y-m-d h:m:s UTC` from Unix milliseconds (proleptic Gregorian calendar), as
/// the header's start time is shown; dependency-free for one line of output.
#[must_use]
pub fn utc_string(ms: u64) -> String {
    let secs = ms / 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    // Days to civil date, after Howard Hinnant's `civil_from_days`.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

#[cfg(test)]
mod utc_tests {
    use super::utc_string;

    #[test]
    fn civil_dates_including_leap_days() {
        assert_eq!(utc_string(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc_string(951_782_400_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc_string(1_795_314_600_000), "2026-11-22 02:30:00 UTC");
    }
}
