//! Replay files: crash-safe, checksummed command logs of lockstep matches,
//! and the tools that re-simulate them ([`verify()`], [`seek()`], [`diff()`]).
//!
//! A replay stores the commands that drove a match, not its states, so the
//! deterministic [`sim::Simulation`] can rebuild every state; recorded state
//! hashes prove it did. The relay writes one per match with [`Writer`];
//! `peer --record` writes one with keyframes.
//!
//! The `replay` tool is a library entry point too ([`cli`], behind the
//! default `cli` feature): a game ships its own replay tool in a main of a
//! few lines.
//!
//! # Format (version 1)
//!
//! All integers in the framing are little-endian; payloads are
//! [postcard](https://docs.rs/postcard) (varint integers, length-prefixed
//! byte strings).
//!
//! | bytes | content |
//! |---|---|
//! | 8 | magic `LSRPLAY\0` |
//! | 4 | format version (`u32`): readers refuse versions they do not know, naming both |
//! | ... | records, the first of which is the header |
//!
//! Each record:
//!
//! | bytes | content |
//! |---|---|
//! | 4 | payload length `L` (`u32`, at most [`format::MAX_RECORD_LEN`]) |
//! | 4 | `!L`, a guard: a damaged length is caught before it is trusted |
//! | 1 | kind |
//! | L | payload |
//! | 16 | checksum: BLAKE3 (derive-key mode, context `"lockstep-rts replays v1 record checksum chain"`) of previous checksum ‖ `L` ‖ kind ‖ payload, truncated to 16 bytes |
//!
//! The chain starts from the same hash of the 12-byte preamble. Because each
//! checksum covers the previous one, editing, removing or reordering any
//! record breaks every later checksum: the file is tamper-evident against
//! accidents and naive edits. (The key is public, so a deliberate forger who
//! recomputes the whole chain is not stopped; the relay's own copy is the
//! authority to compare against with `replay diff`.)
//!
//! | kind | record | payload |
//! |---|---|---|
//! | 1 | header | engine version, protocol version, game id + version, rules hash, setup (seed, players, ticks per turn), turn length µs, players (id, name), match name, start time (Unix ms) |
//! | 2 | turn | turn, list of (player id, opaque input bytes from `sim::encode_commands`) |
//! | 3 | hash | turn, agreed 32-byte state hash after stepping it |
//! | 4 | desync | turn, list of (player, hash), names of the differing sections |
//! | 5 | drop | player, first turn without them |
//! | 6 | delay change | new input delay, first turn it applies to |
//! | 7 | keyframe | turn, hash, `Simulation::snapshot` bytes (state after stepping the turn) |
//! | 8 | keyframe index | list of (turn, byte offset, hash), written by `finish` |
//! | 9 | trailer | final turn, final hash, number of turn records |
//! | 10 | start | hash, snapshot of the world before turn 0, for a match that starts from a scenario rather than `Simulation::new(setup)` |
//! | 11 | dispute | turn, majority hash (optional), list of (player, hash) of the players outside the majority (every reporter when there is none) |
//!
//! Kind 11 was added within version 1: files without it read as before; a
//! build older than it refuses a file holding one as an unknown record kind.
//! The relay writes, for every turn whose hash reports disagreed, the
//! majority's hash as the turn's hash record (so verification and the
//! trailer follow the majority) plus a dispute record; the first desync of a
//! match also gets a desync record with the differing sections.
//!
//! Rules: a start record, if any, comes before the first turn; turn records strictly increase; a hash record may come after later
//! turns (the peers agree on a hash after the relay closed further turns);
//! nothing follows the trailer. A turn missing between two recorded turns is
//! simulated as empty.
//!
//! # Crash safety
//!
//! The writer appends and flushes every turn to the operating system, so a
//! crash of the recording process loses at most the record being written.
//! A file cut at any byte reads cleanly up to the last complete record; the
//! [`Reader`] then reports [`Ending::Torn`] or [`Ending::NoTrailer`] with what
//! was recovered. A flipped bit anywhere is a [`ReplayError::Checksum`] with
//! the offset of the damaged record, never a panic or wrong data.
//!
//! ```
//! use replays::{Header, Reader, Record, SyncPolicy, Writer};
//! use sim::{MatchSetup, PlayerId, StateHash, Turn};
//! let setup = MatchSetup { seed: 1, players: 2, ticks_per_turn: 4 };
//! let header = Header {
//!     format_version: replays::FORMAT_VERSION,
//!     engine_version: "0.1.0".into(),
//!     protocol_version: 1,
//!     game_id: "demo".into(),
//!     game_version: 1,
//!     rules_hash: StateHash([0; 32]),
//!     setup,
//!     turn_length_us: 100_000,
//!     players: vec![],
//!     match_name: "doc".into(),
//!     start_time_unix_ms: 0,
//! };
//! // The relay's loop: one turn record per closed turn, one hash per agreed hash.
//! let mut w = Writer::new(Vec::new(), &header, SyncPolicy::AtFinish)?;
//! w.record_turn(Turn(0), &[(PlayerId(0), vec![0])])?;
//! w.record_hash(Turn(0), StateHash([1; 32]))?;
//! w.finish(Turn(0), StateHash([1; 32]))?;
//! let bytes = w.into_inner()?;
//!
//! let mut r = Reader::from_bytes(&bytes)?;
//! assert_eq!(r.header().match_name, "doc");
//! let records: Vec<Record> = r.by_ref().collect::<Result<_, _>>()?;
//! assert_eq!(records.len(), 4); // turn, hash, keyframe index, trailer
//! assert!(r.summary().is_complete());
//! # Ok::<(), replays::ReplayError>(())
//! ```

pub mod botmatch;
#[cfg(feature = "cli")]
pub mod cli;
pub mod diff;
pub mod error;
pub mod fixtures;
pub mod forensics;
pub mod format;
pub mod index;
#[doc = include_str!("../docs/manual.md")]
pub mod manual {}
pub mod reader;
pub mod seek;
pub mod stdio;
pub mod verify;
pub mod web;
pub mod writer;

pub use diff::{DiffReport, Difference, diff};
pub use error::ReplayError;
pub use forensics::DesyncReport;
pub use format::{
    FORMAT_VERSION, Header, KeyframeEntry, MAX_END_REASON, MatchFacts, MatchToken, PlayerInfo,
    Record,
};
pub use reader::{Ending, ReadSummary, Reader};
pub use seek::{ReindexReport, Seeked, reindex, seek, seek_stream};
pub use verify::{
    Divergence, Progress, RecordedDesync, Replayer, SectionDiff, VerifyReport, restore_checked,
    verify,
};
pub use writer::{DEFAULT_SYNC, Reopened, Sink, SyncPolicy, Writer};
