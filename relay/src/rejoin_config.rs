//! Rejoin and snapshot settings of a relay, and the rejoin secrets it gives
//! players in open mode.
//!
//! Every `snapshot_every` turns the relay asks one player for its snapshot
//! of that turn and keeps it once its hash equals the turn's agreed hash,
//! plus every bundle since (bounded by `max_snapshot_bytes` and
//! `max_tail_turns`). A dropped player's slot is held for `hold`; the same
//! player comes back with its slot's secret (open mode) or a token for that
//! match and slot (token mode), restores the snapshot and fast-forwards.
//! Spectators (at most `max_spectators` per match) start from the newest
//! agreed snapshot at least `spectator_delay` old (an older copy the relay
//! keeps for them) and watch `spectator_delay` behind live.

use crate::event::MatchId;
use lockstep::Duration;
use lockstep::low_level::proto::RejoinSecret;
use sim::PlayerId;

/// Turns between agreed snapshots unless configured (10 s of 100 ms turns).
pub const DEFAULT_SNAPSHOT_EVERY: u32 = 100;

/// The most bundles a tail may hold: a rejoining peer buffers the whole tail
/// (`lockstep::low_level::MAX_BUFFERED_AHEAD`).
pub const MAX_TAIL_TURNS: u32 = lockstep::low_level::MAX_BUFFERED_AHEAD;

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
    /// Key the rejoin secrets are derived from: drawn from the OS CSPRNG
    /// by [`RejoinConfig::default`]; set it only to share one key between
    /// relays (see [`RejoinKey::from_bytes`]).
    pub key: RejoinKey,
    /// How long a slot's connection must have been silent before a rejoin
    /// with the right secret takes the slot over (default 1 s). A player
    /// that plays is heard every turn, so only a crashed or frozen process
    /// loses its slot to its own restart; a leaked secret cannot take a
    /// live player's slot. The refusal is [`RejectReason::SlotInUse`], which
    /// a restarted peer retries.
    ///
    /// [`RejectReason::SlotInUse`]: lockstep::low_level::proto::RejectReason::SlotInUse
    pub takeover_after: Duration,
    /// How far behind live spectators watch (default 3 s; zero for a LAN).
    pub spectator_delay: Duration,
    /// Most spectators per match (default [`DEFAULT_MAX_SPECTATORS`]).
    pub max_spectators: usize,
    /// How long a match resumed from its recording after a relay restart
    /// waits for its players (default 30 s): it closes no turn until every
    /// player is back or this has passed; then the missing ones are dropped
    /// (their slots held as after any drop) and the match plays on, or ends
    /// abandoned if nobody came back.
    pub resume_wait: Duration,
    /// This process's salt for match nonces ([`RejoinConfig::match_nonce`]):
    /// drawn from the OS CSPRNG by [`RejoinConfig::default`], never stored.
    /// Match numbers restart at 1 with each process; the salt makes each
    /// match instance's nonce, and so its secrets, new.
    pub nonce_salt: [u8; 32],
    /// Whether the relay tags every bundle it sends with its proof that it
    /// sent it (a keyed hash under a key derived from [`Self::key`], the
    /// match's number and its nonce), at 16 bytes per bundle (default
    /// false: one byte, no tag). Turn it on when the relay records its
    /// matches and [`Self::key`] outlives the process (`relay serve` does
    /// with `--record-dir` and `--rejoin-key-file` or a token key): after a
    /// machine crash, a resumed match adopts the turns its players hand
    /// back only with this tag, and refuses a player whose bundles lack it
    /// ([`RejectReason::UnprovenHandBack`]).
    ///
    /// [`RejectReason::UnprovenHandBack`]: lockstep::low_level::proto::RejectReason::UnprovenHandBack
    pub tag_bundles: bool,
}

pub use crate::event::MatchNonce;

impl std::fmt::Debug for RejoinConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RejoinConfig")
            .field("snapshot_every", &self.snapshot_every)
            .field("hold", &self.hold)
            .field("max_snapshot_bytes", &self.max_snapshot_bytes)
            .field("max_tail_turns", &self.max_tail_turns)
            .field("spectator_delay", &self.spectator_delay)
            .field("max_spectators", &self.max_spectators)
            .field("takeover_after", &self.takeover_after)
            .field("resume_wait", &self.resume_wait)
            .field("tag_bundles", &self.tag_bundles)
            .finish_non_exhaustive()
    }
}

/// The key rejoin secrets are derived from: 32 bytes nobody but the relay
/// knows. Make one with [`RejoinKey::random`] (what
/// [`RejoinConfig::default`] does) or, to share it between relays, from
/// bytes of your own secret store with [`RejoinKey::from_bytes`]; a short or
/// all-zero key is refused, since anyone could compute every player's secret
/// from the match's id, name and slot.
#[derive(Clone, PartialEq, Eq)]
pub struct RejoinKey([u8; 32]);

/// Why [`RejoinKey::from_bytes`] refused a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RejoinKeyError {
    /// The key is not 32 bytes long.
    #[error("a rejoin key is 32 bytes, this one is {0}")]
    Length(usize),
    /// Every byte of the key is zero: a placeholder, not a secret.
    #[error("the rejoin key is all zeros; draw it from a random source")]
    AllZero,
}

impl RejoinKey {
    /// A fresh key from the OS CSPRNG.
    ///
    /// # Panics
    /// When the operating system has no random source (no supported
    /// platform lacks one): a guessable key would let anyone rejoin into
    /// any player's slot, so there is no fallback.
    #[must_use]
    pub fn random() -> Self {
        match crate::entropy::os_random("rejoin secrets") {
            Ok(k) => Self(k),
            Err(e) => panic!("{e}"),
        }
    }

    /// A key given by the operator (32 bytes, not all zero).
    ///
    /// # Errors
    /// [`RejoinKeyError`] for a key of another length or of zeros only.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, RejoinKeyError> {
        let key: [u8; 32] = bytes
            .try_into()
            .map_err(|_| RejoinKeyError::Length(bytes.len()))?;
        if key == [0; 32] {
            return Err(RejoinKeyError::AllZero);
        }
        Ok(Self(key))
    }
}

impl std::fmt::Debug for RejoinKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A key does not belong in logs.
        f.write_str("RejoinKey(..)")
    }
}

/// Default of [`RejoinConfig::max_spectators`]: 256, a big battle's
/// audience. A spectator costs the relay a connection and its send backlog
/// like a player; the relay-wide bounds (`--max-connections`, the memory
/// budget's connection share, the per-host limit) hold hostile watchers,
/// whatever this cap.
pub const DEFAULT_MAX_SPECTATORS: usize = 256;

impl Default for RejoinConfig {
    fn default() -> Self {
        Self {
            snapshot_every: DEFAULT_SNAPSHOT_EVERY,
            hold: Duration::from_secs(120),
            max_snapshot_bytes: 16 * 1024 * 1024,
            max_tail_turns: 400,
            key: RejoinKey::random(),
            takeover_after: Duration::from_secs(1),
            spectator_delay: Duration::from_secs(3),
            max_spectators: DEFAULT_MAX_SPECTATORS,
            resume_wait: Duration::from_secs(30),
            nonce_salt: crate::entropy::os_random("match nonces").unwrap_or_else(|_| {
                // No OS randomness: the key, itself random or refused
                // above, still keeps nonces unguessable within a process.
                *blake3::keyed_hash(&RejoinKey::random().0, b"match nonce salt").as_bytes()
            }),
            tag_bundles: false,
        }
    }
}

impl RejoinConfig {
    /// The nonce of the match instance numbered `id` and named `name` that
    /// starts in this process: a keyed hash under the process's
    /// [`Self::nonce_salt`], so instances of two processes differ although
    /// their numbers and names are equal.
    #[must_use]
    pub fn match_nonce(&self, id: MatchId, name: &str) -> MatchNonce {
        let mut h = blake3::Hasher::new_keyed(&self.nonce_salt);
        h.update(b"lockstep relay match nonce v1");
        h.update(&id.0.to_le_bytes());
        h.update(name.as_bytes());
        let mut out = [0u8; 16];
        out.copy_from_slice(&h.finalize().as_bytes()[..16]);
        MatchNonce(out)
    }

    /// The key of the tags on the bundles of match instance `nonce`
    /// numbered `id`: `None` unless [`Self::tag_bundles`], or for a match
    /// resumed from an earlier relay's recording (no nonce; its players
    /// hold no tags of this key to hand back).
    pub(crate) fn bundle_key(
        &self,
        id: MatchId,
        nonce: Option<MatchNonce>,
    ) -> Option<crate::bundle_key::BundleKey> {
        let nonce = nonce.filter(|_| self.tag_bundles)?;
        Some(crate::bundle_key::BundleKey::derive(&self.key.0, id, nonce))
    }

    /// The secret of `player`'s slot in the match instance `nonce`,
    /// numbered `id` and named `name`: a keyed hash, so the relay stores
    /// nothing and nobody without the key can guess another player's
    /// secret. A match resumed from an earlier relay's recording has no
    /// nonce (`None`): its secrets are those that relay gave (`v1`).
    #[must_use]
    pub fn secret(
        &self,
        id: MatchId,
        nonce: Option<MatchNonce>,
        name: &str,
        player: PlayerId,
    ) -> RejoinSecret {
        let mut h = blake3::Hasher::new_keyed(&self.key.0);
        match nonce {
            None => h.update(b"lockstep relay rejoin secret v1"),
            Some(n) => h.update(b"lockstep relay rejoin secret v2").update(&n.0),
        };
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
        let a = c.secret(MatchId(1), None, "m", PlayerId(0));
        assert_eq!(a, c.secret(MatchId(1), None, "m", PlayerId(0)));
        assert_ne!(a, c.secret(MatchId(1), None, "m", PlayerId(1)));
        assert_ne!(a, c.secret(MatchId(2), None, "m", PlayerId(0)));
        assert_ne!(a, c.secret(MatchId(1), None, "n", PlayerId(0)));
        let other = RejoinConfig {
            key: RejoinKey::from_bytes(&[1; 32]).unwrap(),
            ..RejoinConfig::default()
        };
        assert_ne!(a, other.secret(MatchId(1), None, "m", PlayerId(0)));
        assert_eq!(RejoinSecret::from_hex(&a.to_hex()), Some(a));
    }

    #[test]
    fn secrets_differ_by_match_instance() {
        let c = RejoinConfig::default();
        let later = RejoinConfig {
            nonce_salt: [1; 32],
            ..c.clone()
        };
        let (id, p) = (MatchId(1), PlayerId(0));
        let n = c.match_nonce(id, "m");
        assert_ne!(n, later.match_nonce(id, "m"));
        assert_ne!(
            c.secret(id, Some(n), "m", p),
            c.secret(id, Some(later.match_nonce(id, "m")), "m", p)
        );
        assert_ne!(c.secret(id, Some(n), "m", p), c.secret(id, None, "m", p));
    }

    #[test]
    fn every_default_config_has_its_own_random_key() {
        // Before: the default key was all zeros, so anyone could compute a
        // player's secret from the match's id, name and slot.
        let zero = blake3::Hasher::new_keyed(&[0; 32]);
        let (a, b) = (RejoinConfig::default(), RejoinConfig::default());
        assert_ne!(a.key, b.key);
        let mut h = zero.clone();
        h.update(b"lockstep relay rejoin secret v1");
        h.update(&1u64.to_le_bytes());
        h.update(&1u64.to_le_bytes());
        h.update(b"m");
        h.update(&[0]);
        let guess = RejoinSecret(h.finalize().as_bytes()[..16].try_into().unwrap());
        assert_ne!(a.secret(MatchId(1), None, "m", PlayerId(0)), guess);
    }

    #[test]
    fn a_short_or_all_zero_key_is_refused() {
        assert_eq!(
            RejoinKey::from_bytes(&[7; 16]),
            Err(RejoinKeyError::Length(16))
        );
        assert_eq!(
            RejoinKey::from_bytes(&[0; 32]),
            Err(RejoinKeyError::AllZero)
        );
        assert!(RejoinKey::from_bytes(&[7; 32]).is_ok());
    }
}
