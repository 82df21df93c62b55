//! What the router reports to its driver: enough to log every match event
//! and to write a replay (`replays::Writer`) of each match.

use lockstep::low_level::proto::{EndReason, PeerReport, PlayerInfo};
use sim::{MatchSetup, PlayerId, StateHash, Turn};
use std::fmt;

/// A match's number on this relay (unique for the router's lifetime).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MatchId(pub u64);

impl fmt::Display for MatchId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// Why a player was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// Silent past the timeout.
    Timeout,
    /// The transport connection closed.
    Disconnected,
    /// The player sent Leave.
    Left,
    /// `--on-desync heal`: it desynced again after being healed as often as
    /// [`RelayConfig::heal_limit`](crate::RelayConfig::heal_limit) allows;
    /// its slot is given up (a rejoin would only desync again).
    TooManyHeals,
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Timeout => "timeout",
            Self::Disconnected => "disconnected",
            Self::Left => "left",
            Self::TooManyHeals => "too_many_heals",
        })
    }
}

/// A match instance's random nonce (16 bytes), drawn when the match starts
/// and kept in its recording ([`replays::MatchFacts::nonce`]; made by
/// [`crate::rejoin_config::RejoinConfig::match_nonce`]): the rejoin
/// secrets of its seats are bound to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MatchNonce(pub [u8; 16]);

/// The join-token match instance a match is bound to (token mode): the
/// instance of the first token the relay admitted for it, and the latest
/// expiry among the tokens it admitted since. Tokens of another instance
/// are refused ([`lockstep::token::Refusal::WrongInstance`]); after the
/// match ends the relay remembers the binding until that expiry, so the
/// match's tokens cannot open a new match of its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenBinding {
    /// The instance every token admitted for the match carries.
    pub instance: lockstep::token::MatchInstance,
    /// The latest expiry (Unix seconds) among those tokens.
    pub expire_unix: u64,
}

impl TokenBinding {
    /// The binding a match takes from the first token admitted to it.
    #[must_use]
    pub const fn of(claims: &lockstep::token::TokenClaims) -> Self {
        Self {
            instance: claims.instance,
            expire_unix: claims.expire_unix,
        }
    }

    /// The same, with one more admitted token's claims: the expiry is the
    /// later of the two (the instance is already checked equal).
    #[must_use]
    pub const fn admitting(self, claims: &lockstep::token::TokenClaims) -> Self {
        Self {
            instance: self.instance,
            expire_unix: if claims.expire_unix > self.expire_unix {
                claims.expire_unix
            } else {
                self.expire_unix
            },
        }
    }
}

/// Match start parameters, as a replay header needs them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MatchInfo {
    /// The match's name.
    pub match_name: String,
    /// Game id all players run.
    pub game_id: String,
    /// Game version.
    pub game_version: u32,
    /// Rules hash.
    pub rules_hash: StateHash,
    /// World setup.
    pub setup: MatchSetup,
    /// Turn length in microseconds.
    pub turn_length_us: u64,
    /// Players in slot order.
    pub players: Vec<PlayerInfo>,
    /// Input delay at the start.
    pub input_delay: u8,
    /// First turn.
    pub first_turn: Turn,
    /// Last turn, if fixed.
    pub last_turn: Option<Turn>,
    /// The match instance's nonce (`None` for a match resumed from an
    /// earlier relay's recording, which had none).
    pub nonce: Option<MatchNonce>,
    /// The join-token instance the match is bound to (token mode; `None`
    /// in open mode and for a match resumed from a recording that had none).
    pub token: Option<TokenBinding>,
}

#[cfg(test)]
impl MatchInfo {
    /// A two-player match `name` of game `game_id` (players `p0` and `p1`,
    /// two turns), for unit tests.
    pub(crate) fn two_players(name: &str, game_id: &str) -> Self {
        Self {
            match_name: name.into(),
            game_id: game_id.into(),
            game_version: 1,
            rules_hash: StateHash([3; 32]),
            setup: MatchSetup {
                seed: 1,
                players: 2,
                ticks_per_turn: 2,
            },
            turn_length_us: 100_000,
            players: (0..2)
                .map(|i| PlayerInfo {
                    id: PlayerId(i),
                    name: format!("p{i}"),
                })
                .collect(),
            input_delay: 3,
            first_turn: Turn(0),
            last_turn: Some(Turn(1)),
            nonce: None,
            token: None,
        }
    }
}

/// A router event, polled with `Router::poll_event`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouterEvent {
    /// A join named a match the relay did not have: its lobby is open and
    /// waits for `slots` players (the first join is in it).
    LobbyOpened {
        /// Which match.
        id: MatchId,
        /// Its name.
        match_name: String,
        /// Slots to fill before it starts.
        slots: u8,
        /// Game id the lobby plays.
        game_id: String,
    },
    /// All slots filled; the match started.
    MatchStarted {
        /// Which match.
        id: MatchId,
        /// Its parameters.
        info: MatchInfo,
    },
    /// A turn closed and its bundle went to every player.
    TurnClosed {
        /// Which match.
        id: MatchId,
        /// The turn.
        turn: Turn,
        /// The stamped inputs exactly as bundled.
        inputs: Vec<(PlayerId, Vec<u8>)>,
        /// Live players whose own input for the turn was missing at close.
        missing: Vec<PlayerId>,
    },
    /// Every reporting player had the same hash for a turn.
    HashAgreed {
        /// Which match.
        id: MatchId,
        /// The turn.
        turn: Turn,
        /// The agreed hash.
        hash: StateHash,
    },
    /// Hash reports for a turn disagreed. Sent for every such turn (unlike
    /// [`RouterEvent::Desync`], which announces only the first), so a
    /// recording keeps one hash per turn after a desync.
    HashDisputed {
        /// Which match.
        id: MatchId,
        /// The turn.
        turn: Turn,
        /// The hash a strict majority of the reporters had; `None` when no
        /// hash has one (e.g. two players who disagree).
        majority: Option<StateHash>,
        /// Each player outside the majority with its hash; every reporter
        /// when there is no majority.
        dissent: Vec<(PlayerId, StateHash)>,
    },
    /// Hash reports disagreed (only the first desync of a match is reported).
    Desync {
        /// Which match.
        id: MatchId,
        /// The turn.
        turn: Turn,
        /// Each player's hash.
        hashes: Vec<(PlayerId, StateHash)>,
        /// Players outside the majority; empty when there is none.
        odd_players: Vec<PlayerId>,
    },
    /// The section comparison of a desync finished.
    DesyncSections {
        /// Which match.
        id: MatchId,
        /// The turn.
        turn: Turn,
        /// Players compared.
        players: Vec<PlayerId>,
        /// Differing section names.
        sections: Vec<String>,
    },
    /// Desync forensics of the first desync of a match is done (complete
    /// or not): the entities and fields that differ. The recorder writes it
    /// as JSON next to the replay and as a record in it.
    DesyncReport {
        /// The match.
        id: MatchId,
        /// The report (`inputs` still empty: the recorder adds them).
        report: Box<replays::DesyncReport>,
    },
    /// A player was dropped; from `turn` on its slot is empty.
    Dropped {
        /// Which match.
        id: MatchId,
        /// Who.
        player: PlayerId,
        /// First turn without them.
        turn: Turn,
        /// Why.
        reason: DropReason,
    },
    /// A new input delay was announced.
    DelayChanged {
        /// Which match.
        id: MatchId,
        /// New delay.
        delay: u8,
        /// First local turn using it.
        from_turn: Turn,
    },
    /// Figures a peer reported.
    PeerReport {
        /// Which match.
        id: MatchId,
        /// Who.
        player: PlayerId,
        /// The figures.
        report: PeerReport,
    },
    /// A match unfinished at a relay restart was rebuilt from its
    /// recording: it waits for its players, then plays on from `next_turn`.
    MatchResumed {
        /// Which match (its number before the restart).
        id: MatchId,
        /// Its parameters, as recorded.
        info: MatchInfo,
        /// The next turn it closes.
        next_turn: Turn,
    },
    /// The match is over.
    MatchEnded {
        /// Which match.
        id: MatchId,
        /// The last closed turn.
        turn: Option<Turn>,
        /// Why.
        reason: EndReason,
    },
    /// A dropped player came back into its held slot and is catching up
    /// (from the agreed snapshot of `snapshot`, `None`: from the first turn).
    Rejoining {
        /// Which match.
        id: MatchId,
        /// Who.
        player: PlayerId,
        /// The snapshot's turn.
        snapshot: Option<Turn>,
        /// Bundles sent to it to catch up with (the tail after the snapshot,
        /// or after the turn a reconnect asked for).
        bundles: u32,
        /// A reconnect: the player kept its world (no snapshot sent).
        kept_world: bool,
    },
    /// A rejoined player caught up: its inputs and hashes count from `turn` on.
    Rejoined {
        /// Which match.
        id: MatchId,
        /// Who.
        player: PlayerId,
        /// First turn with them again.
        turn: Turn,
    },
    /// `--on-desync heal`: the odd `players` of the desync of `desync_turn`
    /// are being re-synchronised from the agreed snapshot of turn
    /// `snapshot` (`None`: from the setup) and the bundles after it.
    Healing {
        /// Which match.
        id: MatchId,
        /// The desync being healed.
        desync_turn: Turn,
        /// Who is healed.
        players: Vec<PlayerId>,
        /// The snapshot they restore.
        snapshot: Option<Turn>,
    },
    /// A heal is done: every player's hash agrees again at `turn`, the
    /// first judged turn the healed players count in; `took_us` from the
    /// relay judging the desync to that agreement.
    Healed {
        /// Which match.
        id: MatchId,
        /// The desync healed.
        desync_turn: Turn,
        /// Who was healed.
        players: Vec<PlayerId>,
        /// The first agreeing turn with them.
        turn: Turn,
        /// Microseconds from the desync's verdict to that agreement.
        took_us: u64,
    },
}
