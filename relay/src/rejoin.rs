//! Rejoin and snapshot settings of a relay, and the rejoin secrets it gives
//! players in open mode.
//!
//! Every `snapshot_every` turns the relay asks one player for its snapshot
//! of that turn and keeps it once its hash equals the turn's agreed hash,
//! plus every bundle since (bounded by `max_snapshot_bytes` and
//! `max_tail_turns`). A dropped player's slot is held for `hold`; the same
//! player comes back with its slot's secret (open mode) or a token for that
//! match and slot (token mode), restores the snapshot and fast-forwards.
//! Spectators (at most `max_spectators` per match) start from the same
//! snapshot and watch `spectator_delay` behind live.

use crate::event::MatchId;
use lockstep::Duration;
use lockstep::proto::RejoinSecret;
use sim::PlayerId;

/// Turns between agreed snapshots unless configured (10 s of 100 ms turns).
pub const DEFAULT_SNAPSHOT_EVERY: u32 = 100;

/// The most bundles a tail may hold: a rejoining peer buffers the whole tail
/// (`lockstep::turn_buffer::MAX_BUFFERED_AHEAD`).
pub const MAX_TAIL_TURNS: u32 = lockstep::turn_buffer::MAX_BUFFERED_AHEAD;

/// How a relay keeps snapshots and holds dropped players' slots.
#[derive(Clone, PartialEq, Eq)]
pub struct RejoinConfig {
    /// Turns between agreed snapshots (default [`DEFAULT_SNAPSHOT_EVERY`];
    /// 0: none, so a rejoin is possible only while the tail still reaches
    /// back to the first turn).
    pub snapshot_every: u32,
    /// How long a dropped player's slot is held for its rejoin (default 120 s).
    pub hold: Duration,
    /// Largest snapshot accepted from an uploader, in bytes (default 16 MiB).
    pub max_snapshot_bytes: u32,
    /// Most bundles kept after the snapshot (default 400, at most
    /// [`MAX_TAIL_TURNS`]); when the tail would grow past it the snapshot
    /// is useless and dropped until the next one is agreed.
    pub max_tail_turns: u32,
    /// Key the rejoin secrets are derived from: keep it secret (`relay
    /// serve` and `relay demo` draw it from the OS at start-up).
    pub key: [u8; 32],
    /// How far behind live spectators watch (default 3 s; zero for a LAN).
    pub spectator_delay: Duration,
    /// Most spectators per match (default 32).
    pub max_spectators: usize,
}

impl std::fmt::Debug for RejoinConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RejoinConfig")
            .field("snapshot_every", &self.snapshot_every)
            .field("hold", &self.hold)
            .field("max_snapshot_bytes", &self.max_snapshot_bytes)
            .field("max_tail_turns", &self.max_tail_turns)
            .field("spectator_delay", &self.spectator_delay)
            .field("max_spectators", &self.max_spectators)
            .finish_non_exhaustive()
    }
}

impl Default for RejoinConfig {
    fn default() -> Self {
        Self {
            snapshot_every: DEFAULT_SNAPSHOT_EVERY,
            hold: Duration::from_secs(120),
            max_snapshot_bytes: 16 * 1024 * 1024,
            max_tail_turns: 400,
            key: [0; 32],
            spectator_delay: Duration::from_secs(3),
            max_spectators: 32,
        }
    }
}

impl RejoinConfig {
    /// The secret of `player`'s slot in match `id` named `name`: a keyed
    /// hash, so the relay stores nothing and nobody without the key can
    /// guess another player's secret.
    #[must_use]
    pub fn secret(&self, id: MatchId, name: &str, player: PlayerId) -> RejoinSecret {
        let mut h = blake3::Hasher::new_keyed(&self.key);
        h.update(b"lockstep relay rejoin secret v1");
        h.update(&id.0.to_le_bytes());
        h.update(&(name.len() as u64).to_le_bytes());
        h.update(name.as_bytes());
        h.update(&[player.0]);
        let mut out = [0u8; 16];
        out.copy_from_slice(&h.finalize().as_bytes()[..16]);
        RejoinSecret(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_differ_by_slot_match_and_key() {
        let c = RejoinConfig::default();
        let a = c.secret(MatchId(1), "m", PlayerId(0));
        assert_eq!(a, c.secret(MatchId(1), "m", PlayerId(0)));
        assert_ne!(a, c.secret(MatchId(1), "m", PlayerId(1)));
        assert_ne!(a, c.secret(MatchId(2), "m", PlayerId(0)));
        assert_ne!(a, c.secret(MatchId(1), "n", PlayerId(0)));
        let other = RejoinConfig {
            key: [1; 32],
            ..RejoinConfig::default()
        };
        assert_ne!(a, other.secret(MatchId(1), "m", PlayerId(0)));
        assert_eq!(RejoinSecret::from_hex(&a.to_hex()), Some(a));
    }
}
