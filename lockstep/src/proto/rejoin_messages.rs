//! Wire types of rejoining, snapshot upload and late joining: the secret a
//! player comes back with, the snapshot chunks a peer uploads and the relay
//! hands on, and the resume message a rejoining peer starts from.

use super::{Join, Start};
use serde::{Deserialize, Serialize};
use sim::{PlayerId, StateHash, Turn};
use std::fmt;

/// Largest snapshot chunk, in bytes: snapshots travel in pieces of at most
/// this size so that one piece fits the transport's message limit with room
/// to spare, bounds the memory of a half-received upload and lets the relay
/// forward while it still receives.
pub const MAX_SNAPSHOT_CHUNK: usize = 32 * 1024;

/// Largest encoded message carrying one snapshot chunk
/// ([`super::ToRelay::SnapshotChunk`] or [`super::ToPeer::SnapshotChunk`]):
/// [`MAX_SNAPSHOT_CHUNK`] plus the framing (version byte, variant, turn,
/// hash, total, offset and length). The largest bulk message a peer
/// legitimately sends the relay, so the relay opens an uploader's bulk
/// path for this much and no more.
pub const MAX_SNAPSHOT_CHUNK_MESSAGE: usize = MAX_SNAPSHOT_CHUNK + 64;

/// Largest snapshot the protocol can announce (64 MiB); a relay's own limit
/// is usually much lower.
pub(crate) const MAX_SNAPSHOT_TOTAL: u32 = 64 * 1024 * 1024;

/// What a player needs to come back into its held slot in open mode: given
/// by the relay at the start of the match, shown only to that player.
#[derive(Clone, Copy, Serialize, Deserialize)]
pub struct RejoinSecret(pub [u8; 16]);

impl PartialEq for RejoinSecret {
    /// In constant time: how long a comparison takes must not tell an
    /// attacker how many leading bytes of a guessed secret were right.
    fn eq(&self, other: &Self) -> bool {
        crate::transport::auth::ct_eq(&self.0, &other.0)
    }
}

impl Eq for RejoinSecret {}

impl RejoinSecret {
    /// The secret as 32 lowercase hex digits (for a rejoin file or a flag).
    #[must_use]
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parses 32 hex digits.
    #[must_use]
    pub fn from_hex(s: &str) -> Option<Self> {
        let s = s.trim();
        if s.len() != 32 || !s.is_ascii() {
            return None;
        }
        let mut out = [0u8; 16];
        for (i, b) in out.iter_mut().enumerate() {
            *b = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(Self(out))
    }
}

impl fmt::Debug for RejoinSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A secret does not belong in logs.
        f.write_str("RejoinSecret(..)")
    }
}

/// A peer asks to come back into its held slot of a running match.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejoin {
    /// The match, game and rules, as in the first join (they must match).
    pub join: Join,
    /// The slot to come back into.
    pub player: PlayerId,
    /// The slot's secret (open mode); ignored in token mode, where the
    /// connection's token must grant this match and slot.
    pub secret: RejoinSecret,
}

/// A peer that lost its connection to the relay but kept its world comes
/// back into its slot (the relay restarted from its recording, or the path
/// broke and the relay dropped the old connection): it proves the slot as a
/// [`Rejoin`] does and holds every turn before `from`, so the relay sends
/// the bundles from `from` on ([`Reconnected`]) and no snapshot. A relay
/// that no longer holds them answers with a [`Resume`] instead, and the
/// peer restores from its snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reconnect {
    /// The match, slot and proof, as in a rejoin.
    pub rejoin: Rejoin,
    /// The first turn the peer has no bundle for.
    pub from: Turn,
}

/// The most turns a restarted relay asks its players to hand back
/// ([`super::ToPeer::HandBack`]): a relay syncs its recording to the disk
/// every 10 turns by default, so a machine crash loses fewer; each player
/// keeps this many of the bundles it played.
pub const MAX_HAND_BACK_TURNS: u32 = 64;

/// A spectator that lost its connection to the relay but kept its world
/// watches again from `from`: the relay sends [`Reconnected`] and the
/// bundles from `from` on (at the spectator delay), or, if it no longer
/// holds them, a spectator's [`Resume`] and its snapshot, which replace the
/// spectator's world. The join is checked as for
/// [`super::ToRelay::Spectate`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rewatch {
    /// The match to watch, as in the first spectate.
    pub join: Join,
    /// The first turn the spectator has no bundle for.
    pub from: Turn,
}

/// The relay's answer to a [`Reconnect`] (or a [`Rewatch`]) it can serve
/// from its bundles: the
/// bundles from the asked turn up to `live` follow; the peer plays them at
/// full speed and reports [`super::ToRelay::CaughtUp`], as after a resume.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reconnected {
    /// The next turn the relay will close.
    pub live: Turn,
    /// Time since the match started at the relay, in microseconds, as in
    /// [`Resume::elapsed_us`] (a restarted relay counts only the time the
    /// match ran, not its downtime).
    pub elapsed_us: u64,
    /// The input delay in force now.
    pub delay: u8,
}

/// One piece of a snapshot: uploaded by a peer the relay asked
/// ([`super::ToRelay::SnapshotChunk`]) and handed on by the relay to a
/// rejoining peer ([`super::ToPeer::SnapshotChunk`]). Pieces of one snapshot
/// travel in order on the bulk channel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotChunk {
    /// The snapshot is of the world after simulating this turn.
    pub turn: Turn,
    /// The world's hash after that turn (the uploader's own report).
    pub hash: StateHash,
    /// The whole snapshot's length in bytes.
    pub total: u32,
    /// Where this piece starts.
    pub offset: u32,
    /// The piece, at most [`MAX_SNAPSHOT_CHUNK`] bytes.
    pub bytes: Vec<u8>,
}

/// Where a rejoining peer starts: the relay accepted its rejoin.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resume {
    /// The match as a Start describes it (`your_player` is the rejoined slot,
    /// `input_delay` the delay the schedule started with).
    pub start: Start,
    /// Time since the match started at the relay, in microseconds: the peer
    /// sets its turn schedule from it.
    pub elapsed_us: u64,
    /// The input delay in force now.
    pub delay: u8,
    /// The agreed snapshot to restore (its chunks follow) and its hash;
    /// `None`: build the world from the setup and play every turn from
    /// `start.first_turn`.
    pub snapshot: Option<(Turn, StateHash, u32)>,
    /// The next turn the relay will close: bundles before it come as the
    /// tail, later ones live.
    pub live: Turn,
    /// A spectator's resume: `start.your_player` means nothing, the peer
    /// never sends inputs and the relay feeds it bundles a few seconds late.
    pub spectator: bool,
}

/// `--on-desync heal`: the relay re-synchronises this peer, whose world
/// diverged from the majority's, on its live connection. The peer drops its
/// world, restores the snapshot (chunks follow) or the setup's world, plays
/// the tail of bundles that follows at full speed and plays on; its inputs
/// and hashes count again once it reports [`super::ToRelay::CaughtUp`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heal {
    /// The desync being healed.
    pub desync_turn: Turn,
    /// The agreed snapshot to restore, as in [`Resume::snapshot`].
    pub snapshot: Option<(Turn, StateHash, u32)>,
    /// The next turn the relay will close, as in [`Resume::live`].
    pub live: Turn,
}

/// The relay's answer to a peer whose restore failed
/// ([`super::ToRelay::SnapshotFailed`]): a newer agreed snapshot (chunks
/// follow) or, while the relay still holds every bundle, `None`: the
/// setup's world. The peer drops what it buffered and restores from here;
/// the tail of bundles after the base follows, as after a `Resume`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reoffer {
    /// The base to restore, as in [`Resume::snapshot`].
    pub snapshot: Option<(Turn, StateHash, u32)>,
    /// The next turn the relay will close, as in [`Resume::live`].
    pub live: Turn,
}

impl SnapshotChunk {
    /// Checks the chunk's own bounds.
    pub(super) fn valid(&self) -> bool {
        self.bytes.len() <= MAX_SNAPSHOT_CHUNK
            && self.total <= MAX_SNAPSHOT_TOTAL
            && u64::from(self.offset) + self.bytes.len() as u64 <= u64::from(self.total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{ToPeer, ToRelay};

    /// The largest chunk with the largest field values, either way, fits
    /// the bulk cap the relay opens for an uploader.
    #[test]
    fn the_largest_chunk_message_fits_its_cap() {
        let c = SnapshotChunk {
            turn: Turn(u32::MAX),
            hash: StateHash([0xFF; 32]),
            total: MAX_SNAPSHOT_TOTAL,
            offset: MAX_SNAPSHOT_TOTAL - MAX_SNAPSHOT_CHUNK as u32,
            bytes: vec![0xFF; MAX_SNAPSHOT_CHUNK],
        };
        let up = ToRelay::SnapshotChunk(c.clone()).to_bytes().len();
        let down = ToPeer::SnapshotChunk(c).to_bytes().len();
        assert!(up <= MAX_SNAPSHOT_CHUNK_MESSAGE, "{up}");
        assert!(down <= MAX_SNAPSHOT_CHUNK_MESSAGE, "{down}");
    }
}
