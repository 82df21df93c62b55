//! Why the relay refused a peer, as one typed value whichever layer refused
//! it: the transport handshake (no connection exists yet, the reason rides
//! in the `Denied` packet as a [`DenyReason`]) or the router (the join was
//! refused, the reason rides in [`super::ToPeer::Rejected`]). A client can
//! act on the variant (ask the matchmaker for a fresh token, try another
//! relay, give up); [`fmt::Display`] gives the one line a human reads.

use crate::token::Refusal;
use crate::wire::DenyReason;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Why the relay refused to let a peer connect or join. New variants are a
/// wire change (postcard encodes the variant index): append, never reorder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RejectReason {
    /// The join token names another match than the one the peer asked for.
    WrongMatch,
    /// The join token's slot is outside the match or held by another player.
    WrongSlot,
    /// The join token's expiry time has passed: get a fresh one.
    TokenExpired,
    /// The join token was already used from another address.
    TokenReused,
    /// The relay admits only holders of a join token, and none was given.
    TokenMissing,
    /// The join token did not open: forged, corrupted, or sealed under
    /// another relay's key.
    TokenInvalid,
    /// The peer sent a join token to a relay in open mode, which cannot check it.
    TokenUnexpected,
    /// The peer speaks another transport protocol id (another game or build).
    WrongProtocol,
    /// The named match has already started; no one can join it now.
    MatchRunning,
    /// The lobby of that name was created with another number of slots.
    SlotCountDiffers,
    /// The lobby of that name plays another game or game version.
    GameDiffers,
    /// The lobby of that name plays the same game with other rules.
    RulesDiffer,
    /// The relay has no room for another connection or match.
    RelayFull,
    /// The relay is shutting down and accepts no new joins.
    ShuttingDown,
    /// A rejoin gave the wrong secret for that match and slot.
    WrongSecret,
    /// A rejoin came after its slot's hold time ran out (or for a slot
    /// never dropped in that match).
    HoldExpired,
    /// The relay holds no snapshot to rejoin from right now (its bundle tail
    /// overflowed, or the latest upload failed): try again in a few seconds.
    NoSnapshot,
    /// The match has as many spectators as the relay allows.
    SpectatorsFull,
    /// The join token is of the other kind: a spectator token cannot join
    /// or rejoin as a player, a player token cannot spectate.
    WrongTokenKind,
    /// A rejoin named a slot whose connection is still playing: a slot is
    /// taken over only once its connection has fallen silent (a crashed or
    /// frozen process), never while it plays. A restarted peer retries until
    /// the relay has noticed its old connection is gone.
    SlotInUse,
    /// The relay is at its memory budget (`relay serve --max-memory-mib`):
    /// it takes no new match, player or spectator until running matches
    /// end or shrink; running matches play on. Try again later or another
    /// relay.
    MemoryFull,
    /// A rejoin named a slot that another process took back by a rejoin
    /// moments ago and now plays: two processes were started for one seat
    /// and this one lost. Not retried: the seat has its player.
    SlotTaken,
    /// The relay does not know this connection any more (it restarted):
    /// connect again and ask for the slot back.
    ConnectionUnknown,
    /// After a relay restart this peer handed back a bundle whose
    /// [`super::BundleTag`] does not prove that the relay sent it (forged,
    /// altered, from another match, or sent by a relay that did not tag
    /// its bundles): nothing it handed back is adopted, and it is ahead of
    /// the match, so it cannot play on in its world. Not retried; a rejoin
    /// from a snapshot takes it back.
    UnprovenHandBack,
}

impl RejectReason {
    /// A stable snake_case name for logs, metrics and JSON output.
    #[must_use]
    pub const fn code(self) -> &'static str {
        match self {
            Self::WrongMatch => "wrong_match",
            Self::WrongSlot => "wrong_slot",
            Self::TokenExpired => "token_expired",
            Self::TokenReused => "token_reused",
            Self::TokenMissing => "token_missing",
            Self::TokenInvalid => "token_invalid",
            Self::TokenUnexpected => "token_unexpected",
            Self::WrongProtocol => "wrong_protocol",
            Self::MatchRunning => "match_running",
            Self::SlotCountDiffers => "slot_count_differs",
            Self::GameDiffers => "game_differs",
            Self::RulesDiffer => "rules_differ",
            Self::RelayFull => "relay_full",
            Self::ShuttingDown => "shutting_down",
            Self::WrongSecret => "wrong_secret",
            Self::HoldExpired => "hold_expired",
            Self::NoSnapshot => "no_snapshot",
            Self::SpectatorsFull => "spectators_full",
            Self::WrongTokenKind => "wrong_token_kind",
            Self::SlotInUse => "slot_in_use",
            Self::MemoryFull => "memory_full",
            Self::SlotTaken => "slot_taken",
            Self::ConnectionUnknown => "connection_unknown",
            Self::UnprovenHandBack => "unproven_hand_back",
        }
    }

    /// Every reason, in wire order (for documentation and exhaustive tests).
    pub const ALL: [Self; 24] = [
        Self::WrongMatch,
        Self::WrongSlot,
        Self::TokenExpired,
        Self::TokenReused,
        Self::TokenMissing,
        Self::TokenInvalid,
        Self::TokenUnexpected,
        Self::WrongProtocol,
        Self::MatchRunning,
        Self::SlotCountDiffers,
        Self::GameDiffers,
        Self::RulesDiffer,
        Self::RelayFull,
        Self::ShuttingDown,
        Self::WrongSecret,
        Self::HoldExpired,
        Self::NoSnapshot,
        Self::SpectatorsFull,
        Self::WrongTokenKind,
        Self::SlotInUse,
        Self::MemoryFull,
        Self::SlotTaken,
        Self::ConnectionUnknown,
        Self::UnprovenHandBack,
    ];
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::WrongMatch => "the join token is for another match",
            Self::WrongSlot => "the join token's slot is outside the match or already taken",
            Self::TokenExpired => "the join token has expired",
            Self::TokenReused => "the join token was already used from another address",
            Self::TokenMissing => "the relay requires a join token and none was given",
            Self::TokenInvalid => {
                "the join token is invalid (forged, corrupted or issued for another relay)"
            }
            Self::TokenUnexpected => "the relay is in open mode and does not take join tokens",
            Self::WrongProtocol => "the relay speaks another protocol (another game or build)",
            Self::MatchRunning => "the match is already running",
            Self::SlotCountDiffers => "the match has another number of player slots",
            Self::GameDiffers => "the match plays another game or game version",
            Self::RulesDiffer => "the match plays other rules",
            Self::RelayFull => "the relay is full",
            Self::ShuttingDown => "the relay is shutting down",
            Self::WrongSecret => "the rejoin secret is wrong for that match and slot",
            Self::HoldExpired => "the slot is no longer held for a rejoin",
            Self::NoSnapshot => "the relay has no snapshot to rejoin from yet; try again shortly",
            Self::SpectatorsFull => "the match has no room for another spectator",
            Self::WrongTokenKind => {
                "the join token is of the other kind (a spectator token cannot play, a player token cannot spectate)"
            }
            Self::SlotInUse => {
                "the slot's connection is still playing; it is taken over only once that connection falls silent"
            }
            Self::MemoryFull => "the relay is at its memory budget; running matches play on, new ones wait",
            Self::SlotTaken => {
                "another process rejoined this slot moments ago and plays it; this one is not needed"
            }
            Self::ConnectionUnknown => {
                "the relay does not know this connection (it restarted); connect again"
            }
            Self::UnprovenHandBack => {
                "a handed-back bundle does not carry the relay's proof that it sent it; nothing handed back is adopted"
            }
        })
    }
}

impl From<DenyReason> for RejectReason {
    fn from(d: DenyReason) -> Self {
        match d {
            DenyReason::Full => Self::RelayFull,
            DenyReason::WrongProtocol => Self::WrongProtocol,
            DenyReason::InvalidToken => Self::TokenInvalid,
            DenyReason::TokenMissing => Self::TokenMissing,
            DenyReason::TokenExpired => Self::TokenExpired,
            DenyReason::TokenReused => Self::TokenReused,
            DenyReason::TokenUnexpected => Self::TokenUnexpected,
            DenyReason::UnknownConnection => Self::ConnectionUnknown,
        }
    }
}

impl From<Refusal> for RejectReason {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::Missing => Self::TokenMissing,
            Refusal::Expired => Self::TokenExpired,
            Refusal::Forged => Self::TokenInvalid,
            Refusal::Reused => Self::TokenReused,
            Refusal::WrongProtocol => Self::WrongProtocol,
            Refusal::WrongMatch => Self::WrongMatch,
            Refusal::WrongSlot => Self::WrongSlot,
            Refusal::TableFull => Self::RelayFull,
            Refusal::WrongKind => Self::WrongTokenKind,
            // On the wire it is another match (it is: another match of that
            // name), so peers of this protocol version read it unchanged;
            // the relay counts and logs it as its own reason.
            Refusal::WrongInstance => Self::WrongMatch,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::ToPeer;

    #[test]
    fn every_reason_round_trips_with_a_distinct_text_and_code() {
        let mut texts = std::collections::BTreeSet::new();
        let mut codes = std::collections::BTreeSet::new();
        for reason in RejectReason::ALL {
            for detail in [None, Some("lobby has 4 slots".to_owned())] {
                let msg = ToPeer::Rejected {
                    reason,
                    detail: detail.clone(),
                };
                assert_eq!(ToPeer::decode(&msg.to_bytes()), Ok(msg));
            }
            assert!(texts.insert(reason.to_string()), "{reason:?}");
            assert!(codes.insert(reason.code()), "{reason:?}");
            assert!(!reason.to_string().contains('\n'));
        }
    }

    #[test]
    fn an_oversized_detail_does_not_decode() {
        let msg = ToPeer::Rejected {
            reason: RejectReason::RelayFull,
            detail: Some("x".repeat(crate::proto::MAX_REASON_LEN + 1)),
        };
        assert!(ToPeer::decode(&msg.to_bytes()).is_err());
    }
}
