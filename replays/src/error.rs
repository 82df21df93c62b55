//! The crate's one error type: every way reading, writing, verifying or
//! seeking a replay can fail, each with the byte offset or turn it concerns.

use sim::{SnapshotError, StateHash, Turn};

/// Why a replay could not be written, read, verified or seeked.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The operating system refused a read, write or sync.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),

    /// The file does not start with the replay magic bytes.
    #[error("not a replay file (bad magic bytes)")]
    NotAReplay,

    /// The file was written in a format version this reader does not know.
    #[error(
        "replay format version {found} is not supported: this build reads versions {oldest}..={newest}"
    )]
    UnsupportedVersion {
        /// Version found in the file.
        found: u32,
        /// Oldest version this build reads.
        oldest: u32,
        /// Newest version this build reads (and the one it writes).
        newest: u32,
    },

    /// The file ends inside a record: everything before `offset` is intact.
    #[error("the last record (at byte {offset}) was torn: {lost_bytes} bytes after it are lost")]
    Torn {
        /// Offset of the first byte of the incomplete record.
        offset: u64,
        /// Bytes present after `offset` that could not be used.
        lost_bytes: u64,
    },

    /// A record's length guard or checksum does not match: the file was damaged
    /// or edited at or before `offset`.
    #[error("checksum error in the record at byte {offset}: {what}")]
    Checksum {
        /// Offset of the first byte of the damaged record.
        offset: u64,
        /// Which check failed.
        what: &'static str,
    },

    /// [`crate::Writer::reopen`] found a bad record with intact-looking
    /// bytes after it: the damage is inside the file, not a torn tail, so
    /// the file is left as it is (cutting it would destroy those bytes).
    #[error(
        "damaged inside (record at byte {offset}: {what}); the bytes after it are kept and nothing is appended"
    )]
    DamagedInside {
        /// Offset of the first byte of the damaged record.
        offset: u64,
        /// Which check failed.
        what: &'static str,
    },

    /// A record's checksum is valid but its payload does not decode.
    #[error("malformed {kind} record at byte {offset}: {reason}")]
    Malformed {
        /// Offset of the record.
        offset: u64,
        /// Record kind name.
        kind: &'static str,
        /// What was wrong.
        reason: String,
    },

    /// A record kind this version of the format does not define.
    #[error("unknown record kind {kind} at byte {offset}")]
    UnknownKind {
        /// Offset of the record.
        offset: u64,
        /// The kind byte.
        kind: u8,
    },

    /// The records are valid but their order breaks the format's rules.
    #[error("record at byte {offset} is out of place: {reason}")]
    Sequence {
        /// Offset of the record.
        offset: u64,
        /// Which rule was broken.
        reason: String,
    },

    /// A record is larger than the format allows.
    #[error("record of {len} bytes exceeds the {max}-byte limit")]
    TooLarge {
        /// Payload length requested.
        len: usize,
        /// The limit, [`crate::format::MAX_RECORD_LEN`].
        max: u32,
    },

    /// The writer was asked to record a turn that is not after the last one.
    #[error("turn {got} recorded after turn {last}: turns must increase")]
    TurnOrder {
        /// Last recorded turn.
        last: Turn,
        /// Turn given.
        got: Turn,
    },

    /// A turn record jumps further ahead than any real recording does; simulating
    /// the gap as empty turns would let a forged file keep `verify` busy for hours.
    #[error(
        "turn {got} follows turn {after:?} with a gap over {max} turns: refusing to simulate it"
    )]
    TurnGap {
        /// The last turn simulated before the gap, if any.
        after: Option<Turn>,
        /// The turn after the gap.
        got: Turn,
        /// The largest gap accepted ([`crate::verify::MAX_TURN_GAP`]).
        max: u32,
    },

    /// The writer was used after [`crate::Writer::finish`] or a failed write.
    #[error("the writer is closed")]
    Closed,

    /// [`crate::Writer::reopen`] was given a finished file: it has a trailer,
    /// and nothing may follow one.
    #[error("the replay is finished (it has a trailer): nothing can be appended to it")]
    Finished,

    /// The replay was recorded for another game than the one replaying it.
    #[error(
        "replay is of game {file:?} version {file_version}, this tool plays {ours:?} version {ours_version}"
    )]
    WrongGame {
        /// Game id in the file.
        file: String,
        /// Game version in the file.
        file_version: u32,
        /// Game id of the simulation used.
        ours: String,
        /// Game version of the simulation used.
        ours_version: u32,
    },

    /// The world built from the header has other rules or map than recorded.
    #[error("rules hash differs: file has {file}, this build computes {ours}")]
    RulesMismatch {
        /// Rules hash in the header.
        file: StateHash,
        /// Rules hash of the freshly built world.
        ours: StateHash,
    },

    /// A keyframe's snapshot does not restore.
    #[error("keyframe at turn {turn} does not restore: {source}")]
    Snapshot {
        /// Keyframe turn.
        turn: Turn,
        /// Why the game refused it.
        source: SnapshotError,
    },

    /// A keyframe restores to a world whose hash differs from the recorded one.
    #[error("keyframe at turn {turn} restores to hash {actual}, recorded {expected}")]
    KeyframeHash {
        /// Keyframe turn.
        turn: Turn,
        /// Hash recorded next to the snapshot.
        expected: StateHash,
        /// Hash of the restored world.
        actual: StateHash,
    },

    /// Re-simulation disagrees with a recorded hash where agreement is required.
    #[error("turn {turn} re-simulates to hash {actual}, recorded {expected}")]
    Diverged {
        /// The turn.
        turn: Turn,
        /// Recorded hash.
        expected: StateHash,
        /// Re-simulated hash.
        actual: StateHash,
    },

    /// The requested turn is not in the replay.
    #[error("turn {turn} is not in this replay (last recorded turn: {last})")]
    NoSuchTurn {
        /// Turn asked for.
        turn: Turn,
        /// Last turn the replay holds, if any.
        last: LastTurn,
    },
}

/// The last turn of a replay, for messages ("none" when it holds no turn).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastTurn(pub Option<Turn>);

impl std::fmt::Display for LastTurn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(t) => write!(f, "{t}"),
            None => f.write_str("none"),
        }
    }
}

impl ReplayError {
    /// True when the error means the file's bytes are damaged (torn or corrupt)
    /// rather than the file being unreadable or of another kind.
    #[must_use]
    pub const fn is_damage(&self) -> bool {
        matches!(
            self,
            Self::Torn { .. }
                | Self::Checksum { .. }
                | Self::DamagedInside { .. }
                | Self::Malformed { .. }
                | Self::UnknownKind { .. }
                | Self::Sequence { .. }
        )
    }
}
