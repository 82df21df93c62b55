//! The turn protocol: versioned, postcard-encoded messages between a peer's
//! [`Session`](crate::session::Session) and the relay's router.
//!
//! Every message is one byte of [`PROTOCOL_VERSION`] followed by the postcard
//! encoding of a [`ToRelay`] or [`ToPeer`] value. The decoder never panics: it
//! checks the length, the version, that the whole buffer was consumed, and the
//! bounds of every collection ([`ToRelay::validate`], [`ToPeer::validate`]),
//! and reports a typed [`DecodeError`]. Commands are opaque bytes here: the
//! relay routes them for any game.

use serde::{Deserialize, Serialize, de::DeserializeOwned};
use sim::{MAX_PLAYERS, MatchSetup, PlayerId, SectionHash, Stamped, StateHash, Turn};
use std::fmt;

mod forensics;
mod reject;
pub(crate) use forensics::bounded_fields;
pub use forensics::{
    DesyncDetails, DesyncEntity, DesyncField, EntityDump, MAX_DETAIL_ENTITIES, MAX_DETAIL_FIELDS,
    MAX_DETAILS_LEN, MAX_DUMP_ENTITIES, MAX_ENTITY_HASHES,
};
mod rejoin_messages;
pub use reject::RejectReason;
pub(crate) use rejoin_messages::MAX_SNAPSHOT_TOTAL;
pub use rejoin_messages::{
    Heal, MAX_HAND_BACK_TURNS, MAX_SNAPSHOT_CHUNK, MAX_SNAPSHOT_CHUNK_MESSAGE, Reconnect,
    Reconnected, Rejoin, RejoinSecret, Reoffer, Resume, Rewatch, SnapshotChunk,
};

/// Version byte that prefixes every message; a peer and relay of different versions do not talk.
/// Version 2: a [`Bundle`] carries the relay's [`BundleTag`], and matches
/// hold up to 32 players (ids, slots and bundles a version 1 peer would
/// refuse to decode).
pub const PROTOCOL_VERSION: u8 = 2;
/// Largest encoded message accepted: the largest bundle the relay can build
/// ([`MAX_BUNDLE_LEN`]) fits, and the transport's default message limit is
/// the same (`TransportConfig::max_message`).
pub const MAX_MESSAGE_LEN: usize = 96 * 1024;
/// Longest match, player, game or section name.
pub const MAX_NAME_LEN: usize = 64;
/// Longest free-text reason (a rejection's detail, match end).
pub const MAX_REASON_LEN: usize = 160;
/// Most command chunks one player may put in one turn's input.
pub const MAX_INPUT_CHUNKS: usize = 16;
/// Most command bytes (all chunks together) one player may put in one turn.
pub const MAX_INPUT_BYTES: usize = 4096;
/// Most command bytes of late inputs (inputs that arrived after their turn
/// closed) the relay carries into one turn for one player.
pub const MAX_CARRY_BYTES: usize = MAX_INPUT_BYTES;
/// A player's byte budget in one bundle: its own input plus carried-over
/// late input, in a match of up to eight players (more share
/// [`MAX_BUNDLE_INPUT_BYTES`]: [`player_turn_bytes`]). The relay refuses
/// (with [`ToPeer::InputRefused`]) input that would go over it, so every
/// bundle it builds stays deliverable.
pub const MAX_PLAYER_TURN_BYTES: usize = MAX_INPUT_BYTES + MAX_CARRY_BYTES;
/// Most command bytes in one bundle, all players together: eight players
/// at [`MAX_PLAYER_TURN_BYTES`] (64 KiB). A match of more players shares it
/// ([`player_turn_bytes`]: 2 KiB each at 32), so the largest bundle stays
/// under [`MAX_MESSAGE_LEN`] and its 255 fragments whatever the match size.
pub const MAX_BUNDLE_INPUT_BYTES: usize = 8 * MAX_PLAYER_TURN_BYTES;
/// A player's byte budget in one bundle of a match of `players`: the whole
/// [`MAX_PLAYER_TURN_BYTES`] up to eight players, an equal share of
/// [`MAX_BUNDLE_INPUT_BYTES`] beyond (2,048 bytes at 32 players, still
/// dozens of RTS commands a turn). The relay's own bundle budget may cut it
/// further.
#[must_use]
pub const fn player_turn_bytes(players: u8) -> usize {
    let players = if players == 0 { 1 } else { players as usize };
    let share = MAX_BUNDLE_INPUT_BYTES / players;
    if share < MAX_PLAYER_TURN_BYTES {
        share
    } else {
        MAX_PLAYER_TURN_BYTES
    }
}
/// Most entries one player may have in one bundle: its own chunks plus as
/// many again carried from late inputs.
pub const MAX_PLAYER_TURN_ENTRIES: usize = 2 * MAX_INPUT_CHUNKS;
/// Most entries in one bundle: every player's chunks plus late ones that landed there.
pub const MAX_BUNDLE_ENTRIES: usize = MAX_PLAYERS as usize * MAX_PLAYER_TURN_ENTRIES;
/// Upper bound of one encoded notice (postcard: tag, player or delay byte,
/// a varint turn of at most 5 bytes).
const MAX_NOTICE_LEN: usize = 1 + 1 + 5;
/// Upper bound of the encoded [`ToPeer::Bundle`] with every byte of
/// [`MAX_BUNDLE_INPUT_BYTES`] and every entry used and every notice slot
/// used: version and message tag, the turn (varint), two collection lengths
/// (varints), per entry its player byte and a chunk length of at most 2
/// varint bytes ([`MAX_INPUT_BYTES`] < 2^14), and the tag (one byte, and
/// the 16 of a [`BundleTag`]). 68,860 bytes: at 8 players as at 32, under
/// [`MAX_MESSAGE_LEN`] and 68 fragments of the transport's 255.
pub const MAX_BUNDLE_LEN: usize = 1
    + 1
    + 5
    + 3
    + MAX_BUNDLE_INPUT_BYTES
    + MAX_BUNDLE_ENTRIES * (1 + 2)
    + 1
    + MAX_NOTICES * MAX_NOTICE_LEN
    + 1
    + BUNDLE_TAG_LEN;
const _: () = assert!(MAX_BUNDLE_LEN <= MAX_MESSAGE_LEN);
const _: () =
    assert!(player_turn_bytes(MAX_PLAYERS) * MAX_PLAYERS as usize <= MAX_BUNDLE_INPUT_BYTES);
const _: () = assert!(MAX_INPUT_BYTES < 1 << 14);
/// Most notices piggybacked on one bundle.
pub(crate) const MAX_NOTICES: usize = 32;
/// Most section hashes in one report.
pub(crate) const MAX_SECTIONS: usize = 256;
/// The largest input delay, in turns, the protocol can announce.
pub const MAX_INPUT_DELAY: u8 = 50;

/// How a message should travel: every turn message needs reliable ordered
/// delivery; pings and stats are fine to lose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Reliable and ordered (maps onto `transport::Channel::Reliable`).
    Reliable,
    /// Best effort (maps onto `transport::Channel::Unreliable`).
    Unreliable,
    /// Large, reliable and ordered, behind turn traffic: snapshots (maps onto
    /// `transport::Channel::Bulk`).
    Bulk,
    /// Reliable and ordered with the `Reliable` messages, plus loss-sized
    /// early copies: the turn traffic whose every loss shows as command
    /// latency, inputs and bundles (maps onto `transport::Channel::Urgent`).
    Urgent,
}

/// A peer asks to join (or create) a named match.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Join {
    /// Name of the match; peers giving the same name play together.
    pub match_name: String,
    /// Number of player slots; the match starts when all are filled.
    pub slots: u8,
    /// The game's [`sim::Simulation::GAME_ID`]; all players must agree.
    pub game_id: String,
    /// The game's [`sim::Simulation::GAME_VERSION`]; all players must agree.
    pub game_version: u32,
    /// The game's rules hash; all players must agree.
    pub rules_hash: StateHash,
    /// The player's display name.
    pub name: String,
    /// How many turns the player wants to play (0 = until everyone leaves);
    /// the match lasts the smallest non-zero request.
    pub turns: u32,
}

/// One player of a started match.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlayerInfo {
    /// The player's slot.
    pub id: PlayerId,
    /// The player's display name.
    pub name: String,
}

/// The relay starts a match: identical for every player except `your_player`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Start {
    /// The receiving peer's slot.
    pub your_player: PlayerId,
    /// How every peer builds its world.
    pub setup: MatchSetup,
    /// Length of one turn in microseconds.
    pub turn_length_us: u64,
    /// Every player in slot order.
    pub players: Vec<PlayerInfo>,
    /// Input delay, in turns, in force from `first_turn`.
    pub input_delay: u8,
    /// The first turn to simulate.
    pub first_turn: Turn,
    /// The last turn of the match, if it has a fixed length.
    pub last_turn: Option<Turn>,
}

/// A change that takes effect at an agreed turn, carried inside a bundle so
/// every peer learns it before it can matter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Notice {
    /// From `turn` on the player's slot has empty inputs (it left or timed out).
    PlayerDropped {
        /// Who was dropped.
        player: PlayerId,
        /// The first turn without them (always the turn of the carrying bundle).
        turn: Turn,
    },
    /// From local turn `from_turn` on, commands are scheduled `delay` turns ahead.
    DelayChange {
        /// The new input delay in turns.
        delay: u8,
        /// The first local turn that uses it (after the carrying bundle's turn).
        from_turn: Turn,
    },
    /// From `turn` on the player, back after a drop, has inputs again.
    PlayerRejoined {
        /// Who came back.
        player: PlayerId,
        /// The first turn with them again (the turn of the carrying bundle).
        turn: Turn,
    },
}

/// Everything that happens in one turn, as the relay closed it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bundle {
    /// The turn.
    pub turn: Turn,
    /// Command chunks, stamped by the relay with the sender's slot. A player
    /// may have several entries (several chunks, or a late input that landed here)
    /// or none (no commands).
    pub inputs: Vec<(PlayerId, Vec<u8>)>,
    /// Agreed changes, applied before this turn is simulated.
    pub notices: Vec<Notice>,
    /// The relay's proof that it sent this bundle, for a relay that can
    /// restart and take turns it lost back from its players
    /// ([`ToPeer::HandBack`]); `None` from a relay that cannot (it costs one
    /// byte then). A peer keeps it with the bundle and returns it
    /// unchanged in [`ToRelay::HandedBack`]; only the relay can check it.
    /// Last in the encoding, so the bytes it covers are a prefix of the
    /// message ([`Bundle::set_encoded_tag`]).
    pub tag: Option<BundleTag>,
}

/// Length of a [`BundleTag`] in bytes.
pub const BUNDLE_TAG_LEN: usize = 16;

/// A relay's message authentication code on one [`Bundle`] it sent: a
/// keyed hash, under a key only the relay can derive for that match, of
/// the bundle's message encoded without a tag. A peer cannot make one, so a
/// bundle handed back to a restarted relay is adopted only if that relay
/// sent it: no player can put commands in another player's name.
#[derive(Clone, Copy, Serialize, Deserialize)]
pub struct BundleTag(pub [u8; BUNDLE_TAG_LEN]);

impl PartialEq for BundleTag {
    /// In constant time: how long a comparison takes must not tell a
    /// forger how many leading bytes of a guessed tag were right.
    fn eq(&self, other: &Self) -> bool {
        crate::transport::auth::ct_eq(&self.0, &other.0)
    }
}

impl Eq for BundleTag {}

impl fmt::Debug for BundleTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BundleTag(")?;
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))?;
        write!(f, ")")
    }
}

impl Bundle {
    /// The bytes a [`BundleTag`] covers: `ToPeer::Bundle` of this bundle
    /// with no tag, encoded (the tag this bundle holds is left out). For
    /// the relay, which checks what is handed back (it clones the bundle:
    /// not for a hot path; [`Bundle::set_encoded_tag`] is).
    #[must_use]
    pub fn untagged_bytes(&self) -> Vec<u8> {
        ToPeer::Bundle(Self {
            tag: None,
            ..self.clone()
        })
        .to_bytes()
    }

    /// Sets the tag of an encoded `ToPeer::Bundle` whose tag is `None` (as
    /// [`Bundle::untagged_bytes`] or [`ToPeer::to_bytes`] make it), in
    /// place: the relay encodes a closed turn once, tags those bytes and
    /// shares them between every recipient. Postcard encodes the tag last,
    /// `None` as one 0 byte and `Some` as a 1 byte and the 16 tag bytes.
    /// Returns false, leaving `bytes` as they are, when they do not end
    /// with a `None` tag.
    pub fn set_encoded_tag(bytes: &mut Vec<u8>, tag: BundleTag) -> bool {
        let is_bundle = bytes.get(..2) == Some(&[PROTOCOL_VERSION, ToPeer::BUNDLE_TAG][..]);
        if !is_bundle || bytes.last() != Some(&0) {
            return false;
        }
        bytes.pop();
        bytes.push(1);
        bytes.extend_from_slice(&tag.0);
        true
    }
}

/// The relay's verdict on disagreeing hash reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesyncReport {
    /// The first turn whose hashes disagree.
    pub turn: Turn,
    /// Each reporting player's hash for that turn.
    pub hashes: Vec<(PlayerId, StateHash)>,
    /// The players outside the majority; empty when no majority exists (e.g. 2 players).
    pub odd_players: Vec<PlayerId>,
}

/// Why a match ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EndReason {
    /// The agreed number of turns was played.
    Completed,
    /// Every other player left or was dropped.
    Abandoned,
    /// The relay is shutting down and ended the match early.
    Shutdown,
    /// Hashes disagreed and the relay's policy is to end a desynced match
    /// (`relay serve --on-desync end`).
    Desync,
}

/// Link and session figures a peer reports to the relay (for its logs and the demo table).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerReport {
    /// Smoothed round-trip time the peer measures, in microseconds.
    pub rtt_us: u32,
    /// Round-trip jitter, in microseconds.
    pub jitter_us: u32,
    /// Packet loss in thousandths.
    pub loss_permille: u16,
    /// Total time turns were due but their bundle was missing, in microseconds.
    pub stall_us: u64,
    /// The last turn the peer simulated.
    pub executed: Option<Turn>,
}

/// Messages from a peer to the relay.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToRelay {
    /// Join or create a match.
    Join(Join),
    /// This peer's commands for one turn; sent for every turn, empty too, so
    /// the relay can close turns early. The player is never in the payload:
    /// the relay stamps it from the connection.
    Input {
        /// The turn the commands are for.
        turn: Turn,
        /// Opaque command chunks (each one `sim::encode_commands` list).
        commands: Vec<Vec<u8>>,
    },
    /// The state hash after simulating `turn`.
    Hash {
        /// The simulated turn.
        turn: Turn,
        /// `state_hash()` after it.
        hash: StateHash,
    },
    /// Answer to [`ToPeer::SectionRequest`]; empty if the peer no longer has them.
    Sections {
        /// The turn asked about.
        turn: Turn,
        /// Section hashes after simulating it.
        sections: Vec<SectionHash>,
    },
    /// Echo of a [`ToPeer::Ping`].
    Pong {
        /// The ping's stamp, unchanged.
        stamp_us: u64,
    },
    /// Periodic figures.
    Report(PeerReport),
    /// A clean leave.
    Leave,
    /// Answer to [`ToPeer::EntityHashRequest`]: the section's entities after
    /// simulating `turn` (`Simulation::entity_hashes`), sorted by id; empty if
    /// the peer no longer has that turn.
    EntityHashes {
        /// The turn asked about.
        turn: Turn,
        /// The section asked about.
        section: String,
        /// At most [`MAX_ENTITY_HASHES`] entries.
        entities: Vec<sim::forensics::EntityHash>,
    },
    /// Answer to [`ToPeer::EntityDumpRequest`]: the canonical dumps of the
    /// asked entities after simulating `turn`; empty if the peer no longer
    /// has that turn.
    EntityDumps {
        /// The turn asked about.
        turn: Turn,
        /// The section asked about.
        section: String,
        /// One per asked id that exists, at most [`MAX_DUMP_ENTITIES`].
        dumps: Vec<EntityDump>,
    },
    /// A piece of the snapshot the relay asked for ([`ToPeer::SnapshotRequest`]).
    SnapshotChunk(SnapshotChunk),
    /// Come back into a held slot of a running match (instead of [`ToRelay::Join`]).
    Rejoin(Rejoin),
    /// A rejoining peer simulated every turn up to `turn` and plays live
    /// from the next one: its inputs count again.
    CaughtUp {
        /// The last turn it simulated.
        turn: Turn,
    },
    /// Watch a running match (read-only), a few seconds behind: the join's
    /// match, game and rules must match; slots and turns are ignored.
    Spectate(Join),
    /// The snapshot of `turn` the relay sent (with a `Resume`, `Heal` or
    /// `Reoffer`) did not restore to its agreed hash: the peer keeps its
    /// place and waits for [`ToPeer::Reoffer`].
    SnapshotFailed {
        /// The turn of the snapshot that failed.
        turn: Turn,
    },
    /// Come back into a held slot keeping the world (instead of
    /// [`ToRelay::Rejoin`]): the connection to the relay was lost (the relay
    /// restarted, or the path broke) while this peer kept simulating.
    /// Appended last, so every older message keeps its encoding.
    Reconnect(Reconnect),
    /// Watch again keeping the world (instead of [`ToRelay::Spectate`]): a
    /// spectator lost its connection to the relay (the relay restarted, or
    /// the path broke) while it kept its world. Appended last.
    Rewatch(Rewatch),
    /// One bundle this player played and the relay asked back
    /// ([`ToPeer::HandBack`]): the relay lost it in a crash. Sent exactly
    /// as received, tag included: the relay adopts only bundles whose
    /// [`BundleTag`] proves it sent them. Appended last.
    HandedBack(Bundle),
}

/// Messages from the relay to a peer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToPeer {
    /// Lobby progress.
    Lobby {
        /// The match.
        match_name: String,
        /// Players in the lobby so far.
        joined: u8,
        /// Slots to fill.
        slots: u8,
    },
    /// The join was refused; the connection may be closed after it.
    Rejected {
        /// Why, typed so the client can act on it.
        reason: RejectReason,
        /// Optional specifics for humans (at most [`MAX_REASON_LEN`] bytes).
        detail: Option<String>,
    },
    /// The match starts.
    Start(Start),
    /// A closed turn.
    Bundle(Bundle),
    /// Hashes for a turn disagree.
    Desync(DesyncReport),
    /// Send your section hashes for this turn.
    SectionRequest {
        /// The desynced turn.
        turn: Turn,
    },
    /// Which sections differ between the disagreeing peers.
    SectionDiff {
        /// The desynced turn.
        turn: Turn,
        /// The peers whose sections were compared.
        players: Vec<PlayerId>,
        /// Names of the sections whose hashes differ.
        sections: Vec<String>,
    },
    /// Your input for `turn` arrived after it closed; it was put into `landed_in`.
    LateInput {
        /// The turn the input was meant for.
        turn: Turn,
        /// The turn that carries it instead.
        landed_in: Turn,
    },
    /// `turn` is past its deadline and waits for these players (strict policy).
    Waiting {
        /// The held turn.
        turn: Turn,
        /// Who has not sent input for it.
        players: Vec<PlayerId>,
    },
    /// Round-trip probe; answer with [`ToRelay::Pong`].
    Ping {
        /// Relay-side stamp to echo.
        stamp_us: u64,
    },
    /// The match is over after simulating `turn`.
    MatchEnd {
        /// The last turn of the match (the last the relay closed); `None`
        /// when it ended before any turn closed, so there is nothing left
        /// to simulate.
        turn: Option<Turn>,
        /// Why.
        reason: EndReason,
    },
    /// Your input for `turn` was refused: with it your share of the turn it
    /// would have landed in would exceed [`MAX_PLAYER_TURN_BYTES`] or
    /// [`MAX_PLAYER_TURN_ENTRIES`]. Its commands are not played.
    InputRefused {
        /// The turn the input was meant for.
        turn: Turn,
    },
    /// Desync forensics: send the entity hashes of `section` after `turn`.
    EntityHashRequest {
        /// The desynced turn.
        turn: Turn,
        /// A section whose hash differed.
        section: String,
    },
    /// Desync forensics: send the canonical dumps of these entities of
    /// `section` after `turn`.
    EntityDumpRequest {
        /// The desynced turn.
        turn: Turn,
        /// The section holding them.
        section: String,
        /// Entity ids, at most [`MAX_DUMP_ENTITIES`].
        ids: Vec<u64>,
    },
    /// The secret this player needs to come back into its slot after a
    /// drop (sent to that player only, right after [`ToPeer::Start`]).
    RejoinSecret(RejoinSecret),
    /// Upload your snapshot of the world after simulating `turn`, in
    /// [`ToRelay::SnapshotChunk`]s (sent before that turn's bundle).
    SnapshotRequest {
        /// The turn to snapshot.
        turn: Turn,
    },
    /// The rejoin was accepted: restore from here (snapshot chunks and the
    /// tail of bundles follow).
    Resume(Resume),
    /// A piece of the snapshot named in [`ToPeer::Resume`] or [`ToPeer::Heal`].
    SnapshotChunk(SnapshotChunk),
    /// `--on-desync heal`: drop your world and restore the agreed one
    /// (snapshot chunks and the tail of bundles follow).
    Heal(Heal),
    /// The snapshot this peer reported as failed is replaced: restore this
    /// one instead (snapshot chunks and the tail of bundles follow).
    Reoffer(Reoffer),
    /// Desync forensics are done: the entities and fields that differ
    /// (after [`ToPeer::SectionDiff`]; sent to every player). Appended last,
    /// so every older message keeps its encoding; a peer that predates it
    /// drops it as undecodable, as it drops any message it does not know.
    DesyncDetails(DesyncDetails),
    /// The relay took a [`ToRelay::Reconnect`] back into its slot: the
    /// bundles from the turn it asked for follow, the peer's world stands.
    Reconnected(Reconnected),
    /// The relay restarted without the turns from `from` on (its recording
    /// had not reached the disk) and this player holds some of them: send
    /// each bundle from `from` on that you played, as
    /// [`ToRelay::HandedBack`]. The relay adopts a turn only when its
    /// [`BundleTag`] proves the relay sent it and every player that holds
    /// it handed back the same bundle; a player that hands back a bundle
    /// the tag does not prove is refused with
    /// [`RejectReason::UnprovenHandBack`]. Appended last.
    HandBack {
        /// The first turn the relay lacks.
        from: Turn,
    },
}

/// The bounds of a bundle, from the relay or handed back to it.
fn check_bundle(b: &Bundle) -> Result<(), DecodeError> {
    check(b.inputs.len() <= MAX_BUNDLE_ENTRIES, "bundle entries")?;
    check(b.notices.len() <= MAX_NOTICES, "notices")?;
    let mut per_player = [0usize; MAX_PLAYERS as usize];
    let mut total = 0usize;
    for (p, bytes) in &b.inputs {
        check_player(*p)?;
        check(bytes.len() <= MAX_INPUT_BYTES, "input bytes")?;
        total += bytes.len();
        check(total <= MAX_BUNDLE_INPUT_BYTES, "bundle input bytes")?;
        if let Some(n) = per_player.get_mut(usize::from(p.0)) {
            *n += bytes.len();
            check(*n <= MAX_PLAYER_TURN_BYTES, "player bytes in bundle")?;
        }
    }
    b.notices.iter().try_for_each(|n| match n {
        Notice::PlayerDropped { player, .. } => check_player(*player),
        Notice::DelayChange { delay, .. } => check(*delay <= MAX_INPUT_DELAY, "input delay"),
        Notice::PlayerRejoined { player, .. } => check_player(*player),
    })
}

/// Why bytes are not a valid protocol message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// No bytes at all.
    #[error("empty message")]
    Empty,
    /// Longer than [`MAX_MESSAGE_LEN`].
    #[error("message of {0} bytes exceeds {MAX_MESSAGE_LEN}")]
    TooLong(usize),
    /// Another protocol version.
    #[error("protocol version {got}, expected {PROTOCOL_VERSION}")]
    Version {
        /// The version byte received.
        got: u8,
    },
    /// The body does not decode.
    #[error("malformed message body")]
    Malformed,
    /// Bytes left after the message.
    #[error("{0} trailing bytes")]
    Trailing(usize),
    /// A field is out of bounds.
    #[error("out of bounds: {0}")]
    Bounds(&'static str),
}

fn encode_into<T: Serialize>(msg: &T, out: &mut Vec<u8>) {
    out.push(PROTOCOL_VERSION);
    // Serialising plain data into a Vec cannot fail; an undecodable
    // one-byte message is the (unreachable) fallback rather than a panic.
    if let Ok(bytes) = postcard::to_allocvec(msg) {
        out.extend_from_slice(&bytes);
    }
}

fn decode_from<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, DecodeError> {
    let (&version, body) = bytes.split_first().ok_or(DecodeError::Empty)?;
    if bytes.len() > MAX_MESSAGE_LEN {
        return Err(DecodeError::TooLong(bytes.len()));
    }
    if version != PROTOCOL_VERSION {
        return Err(DecodeError::Version { got: version });
    }
    let (msg, rest) = postcard::take_from_bytes::<T>(body).map_err(|_| DecodeError::Malformed)?;
    if !rest.is_empty() {
        return Err(DecodeError::Trailing(rest.len()));
    }
    Ok(msg)
}

fn check(ok: bool, what: &'static str) -> Result<(), DecodeError> {
    if ok {
        Ok(())
    } else {
        Err(DecodeError::Bounds(what))
    }
}

fn check_name(s: &str, what: &'static str) -> Result<(), DecodeError> {
    check(s.len() <= MAX_NAME_LEN, what)
}

fn check_player(p: PlayerId) -> Result<(), DecodeError> {
    check(p.0 < MAX_PLAYERS, "player id")
}

fn check_input(commands: &[Vec<u8>]) -> Result<(), DecodeError> {
    check(commands.len() <= MAX_INPUT_CHUNKS, "input chunks")?;
    let total: usize = commands.iter().map(Vec::len).sum();
    check(total <= MAX_INPUT_BYTES, "input bytes")
}

fn check_sections(sections: &[SectionHash]) -> Result<(), DecodeError> {
    check(sections.len() <= MAX_SECTIONS, "section count")?;
    sections
        .iter()
        .try_for_each(|s| check_name(&s.name, "section name"))
}

impl ToRelay {
    /// Appends the encoded message to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        encode_into(self, out);
    }

    /// The encoded message in a fresh buffer.
    #[must_use]
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }

    /// Decodes and bounds-checks one message.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let msg: Self = decode_from(bytes)?;
        msg.validate()?;
        Ok(msg)
    }

    /// Checks the bounds of every field.
    pub fn validate(&self) -> Result<(), DecodeError> {
        match self {
            Self::Join(j) => {
                check_name(&j.match_name, "match name")?;
                check_name(&j.game_id, "game id")?;
                check_name(&j.name, "player name")?;
                check(j.slots >= 1 && j.slots <= MAX_PLAYERS, "slots")
            }
            Self::Input { commands, .. } => check_input(commands),
            Self::Sections { sections, .. } => check_sections(sections),
            Self::EntityHashes {
                section, entities, ..
            } => forensics::check_entity_hashes(section, entities),
            Self::EntityDumps { section, dumps, .. } => forensics::check_dumps(section, dumps),
            Self::SnapshotChunk(c) => check(c.valid(), "snapshot chunk"),
            Self::Rejoin(r) | Self::Reconnect(Reconnect { rejoin: r, .. }) => {
                check_player(r.player)?;
                Self::Join(r.join.clone()).validate()
            }
            Self::Spectate(j) | Self::Rewatch(Rewatch { join: j, .. }) => {
                Self::Join(j.clone()).validate()
            }
            Self::HandedBack(b) => check_bundle(b),
            Self::Hash { .. }
            | Self::Pong { .. }
            | Self::Report(_)
            | Self::Leave
            | Self::CaughtUp { .. }
            | Self::SnapshotFailed { .. } => Ok(()),
        }
    }

    /// The wire tags (variant index, after the version byte) of the
    /// messages that name a match to enter: `Join`, `Rejoin`, `Spectate`,
    /// `Reconnect`. A driver that hosts matches on several event loops
    /// decodes only these to route a new connection (see
    /// [`ToRelay::match_to_enter`]).
    pub const ENTERING_TAGS: [u8; 5] = [0, 10, 12, 14, 15];

    /// The match this message asks to enter (`Join`, `Rejoin`, `Spectate`,
    /// `Reconnect`, `Rewatch`).
    #[must_use]
    pub fn match_to_enter(&self) -> Option<&str> {
        match self {
            Self::Join(j) | Self::Spectate(j) | Self::Rewatch(Rewatch { join: j, .. }) => {
                Some(&j.match_name)
            }
            Self::Rejoin(r) | Self::Reconnect(Reconnect { rejoin: r, .. }) => {
                Some(&r.join.match_name)
            }
            _ => None,
        }
    }

    /// Which channel the message needs.
    #[must_use]
    pub const fn delivery(&self) -> Delivery {
        match self {
            Self::Pong { .. } | Self::Report(_) => Delivery::Unreliable,
            Self::SnapshotChunk(_) => Delivery::Bulk,
            Self::Input { .. } => Delivery::Urgent,
            _ => Delivery::Reliable,
        }
    }
}

impl ToPeer {
    /// The wire tag (variant index, after the version byte) of
    /// [`ToPeer::Bundle`].
    const BUNDLE_TAG: u8 = 3;

    /// Appends the encoded message to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        encode_into(self, out);
    }

    /// The encoded message in a fresh buffer.
    #[must_use]
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }

    /// Decodes and bounds-checks one message.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let msg: Self = decode_from(bytes)?;
        msg.validate()?;
        Ok(msg)
    }

    /// Checks the bounds of every field.
    pub fn validate(&self) -> Result<(), DecodeError> {
        match self {
            Self::Lobby {
                match_name, slots, ..
            } => {
                check_name(match_name, "match name")?;
                check(*slots <= MAX_PLAYERS, "slots")
            }
            Self::Rejected { detail, .. } => check(
                detail.as_ref().is_none_or(|d| d.len() <= MAX_REASON_LEN),
                "reason detail",
            ),
            Self::Start(s) => {
                check_player(s.your_player)?;
                check(
                    s.setup.players >= 1 && s.setup.players <= MAX_PLAYERS,
                    "setup players",
                )?;
                check(s.players.len() == usize::from(s.setup.players), "players")?;
                check(s.turn_length_us > 0, "turn length")?;
                check(s.input_delay <= MAX_INPUT_DELAY, "input delay")?;
                check(s.your_player.0 < s.setup.players, "your player")?;
                s.players.iter().try_for_each(|p| {
                    check_player(p.id)?;
                    check_name(&p.name, "player name")
                })
            }
            Self::Bundle(b) => check_bundle(b),
            Self::Desync(d) => {
                check(d.hashes.len() <= usize::from(MAX_PLAYERS), "hashes")?;
                check(
                    d.odd_players.len() <= usize::from(MAX_PLAYERS),
                    "odd players",
                )?;
                d.hashes.iter().try_for_each(|(p, _)| check_player(*p))?;
                d.odd_players.iter().try_for_each(|p| check_player(*p))
            }
            Self::SectionDiff {
                players, sections, ..
            } => {
                check(players.len() <= usize::from(MAX_PLAYERS), "players")?;
                check(sections.len() <= MAX_SECTIONS, "sections")?;
                sections
                    .iter()
                    .try_for_each(|s| check_name(s, "section name"))
            }
            Self::Waiting { players, .. } => {
                check(players.len() <= usize::from(MAX_PLAYERS), "players")
            }
            Self::EntityHashRequest { section, .. } => check_name(section, "section name"),
            Self::EntityDumpRequest { section, ids, .. } => {
                forensics::check_dump_request(section, ids)
            }
            Self::Resume(r) => {
                Self::Start(r.start.clone()).validate()?;
                check(r.delay <= MAX_INPUT_DELAY, "input delay")?;
                check(
                    r.snapshot.is_none_or(|(_, _, n)| n <= MAX_SNAPSHOT_TOTAL),
                    "snapshot length",
                )
            }
            Self::SnapshotChunk(c) => check(c.valid(), "snapshot chunk"),
            Self::Heal(h) => check(
                h.snapshot.is_none_or(|(_, _, n)| n <= MAX_SNAPSHOT_TOTAL),
                "snapshot length",
            ),
            Self::Reoffer(r) => check(
                r.snapshot.is_none_or(|(_, _, n)| n <= MAX_SNAPSHOT_TOTAL),
                "snapshot length",
            ),
            Self::DesyncDetails(d) => d.check(),
            Self::Reconnected(r) => check(r.delay <= MAX_INPUT_DELAY, "input delay"),
            Self::HandBack { .. } => Ok(()),
            Self::SectionRequest { .. }
            | Self::LateInput { .. }
            | Self::InputRefused { .. }
            | Self::Ping { .. }
            | Self::MatchEnd { .. }
            | Self::RejoinSecret(_)
            | Self::SnapshotRequest { .. } => Ok(()),
        }
    }

    /// Which channel the message needs.
    #[must_use]
    pub const fn delivery(&self) -> Delivery {
        match self {
            Self::Ping { .. } => Delivery::Unreliable,
            Self::SnapshotChunk(_) => Delivery::Bulk,
            Self::Bundle(_) => Delivery::Urgent,
            _ => Delivery::Reliable,
        }
    }
}

impl fmt::Display for EndReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Completed => "completed",
            Self::Abandoned => "abandoned",
            Self::Shutdown => "shutdown",
            Self::Desync => "desync",
        })
    }
}

/// Decodes one turn's inputs (as carried in a [`Bundle`] or
/// [`Event::TurnReady`](crate::event::Event::TurnReady)) into stamped game
/// commands, in canonical order: [`sim::decode_turn`] bounded by
/// [`MAX_PLAYERS`] instead of the match's player count.
///
/// For callers that do not hold the match's player count. A peer that
/// simulates should call `sim::decode_turn(inputs, setup.players)`, as
/// `replays::verify` does; the two agree on every bundle an honest relay
/// sends (it stamps only seated players, all below the match's count).
#[must_use]
pub fn decode_turn<C: DeserializeOwned>(inputs: &[(PlayerId, Vec<u8>)]) -> Vec<Stamped<C>> {
    sim::decode_turn(inputs, MAX_PLAYERS).commands
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
pub(crate) mod tests;
