//! What a [`Peer`](super::Peer) tells the game loop, polled with
//! [`Peer::poll_event`](super::Peer::poll_event).

use crate::proto::{EndReason, PlayerInfo, RejectReason};
use crate::time::Duration;
use crate::transport::DisconnectReason;
use sim::{MatchSetup, PlayerId, Stamped, StateHash, Turn};

/// Something the game loop reacts to. Poll every event each frame: the
/// world is stepped (and its hash reported and recorded) as its
/// [`PeerEvent::TurnReady`] is polled, never ahead of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerEvent<C> {
    /// Lobby progress before the match starts (show "2/4 joined").
    Lobby {
        /// Players joined so far.
        joined: u8,
        /// Slots to fill.
        slots: u8,
    },
    /// The match started and the world is built: [`Peer::world`](super::Peer::world)
    /// is `Some` from now on.
    Started {
        /// This peer's slot.
        player: PlayerId,
        /// What the world was built from.
        setup: MatchSetup,
        /// Every player.
        players: Vec<PlayerInfo>,
        /// Length of one turn.
        turn_length: Duration,
    },
    /// The world was stepped through `turn` with `inputs` (canonical order,
    /// invalid entries skipped) and its hash is `hash`: render, or let a bot
    /// think, from [`Peer::world`](super::Peer::world) now.
    TurnReady {
        /// The turn just simulated.
        turn: Turn,
        /// Its decoded inputs, stamped with each sender's slot.
        inputs: Vec<Stamped<C>>,
        /// State hash after it (already reported to the relay).
        hash: StateHash,
    },
    /// A turn is due by the clock but its bundle has been missing for a turn
    /// length (show a "waiting for players" hint).
    Stalled {
        /// The turn waited for.
        turn: Turn,
        /// Players the relay says it waits on (empty if not told).
        waiting_on: Vec<PlayerId>,
    },
    /// Hash reports for `turn` disagree: the match has diverged.
    Desync {
        /// The turn.
        turn: Turn,
        /// Every reporting player's hash.
        hashes: Vec<(PlayerId, StateHash)>,
        /// Players outside the majority; empty when the relay cannot tell.
        odd_players: Vec<PlayerId>,
    },
    /// Which sections differ for a desynced turn.
    DesyncSections {
        /// The turn.
        turn: Turn,
        /// Players compared.
        players: Vec<PlayerId>,
        /// Names of the differing sections.
        sections: Vec<String>,
    },
    /// What the relay's desync forensics found for a desynced turn: the
    /// entities and fields that differ, each side's value (after
    /// `DesyncSections`; every player gets it).
    DesyncDetails {
        /// The desynced turn.
        turn: Turn,
        /// Whether the narrowing ran to the end.
        complete: bool,
        /// The entities that differ, with their differing fields.
        entities: Vec<crate::proto::DesyncEntity>,
    },
    /// A player is gone; from `turn` on its slot has empty inputs.
    PlayerDropped {
        /// Who.
        player: PlayerId,
        /// The first turn without them.
        turn: Turn,
    },
    /// The input delay changes from local turn `from_turn` on.
    DelayChanged {
        /// New delay in turns.
        delay: u8,
        /// First local turn using it.
        from_turn: Turn,
    },
    /// Our input for `turn` arrived late and was simulated in `landed_in`.
    LateInput {
        /// Intended turn.
        turn: Turn,
        /// Actual turn.
        landed_in: Turn,
    },
    /// The relay refused our input for `turn` (over our byte budget): its
    /// commands are not played.
    InputRefused {
        /// The turn the input was meant for.
        turn: Turn,
    },
    /// The relay refused this peer (handshake or join); the peer is done.
    Refused {
        /// Why, typed; `Display` gives the line to show a human.
        reason: RejectReason,
        /// Specifics the relay added, if any.
        detail: Option<String>,
    },
    /// The peer answered the relay's desync forensics request about `turn`
    /// from the world it kept (`kept` false: that turn is no longer kept, see
    /// `PeerBuilder::with_forensics_history`). Informational.
    ForensicsAnswered {
        /// The desynced turn asked about.
        turn: Turn,
        /// Whether the peer still had that turn.
        kept: bool,
    },
    /// The match is over; every turn up to `turn` has been yielded (and the
    /// recording, if any, closed).
    MatchEnded {
        /// Last turn; `None` when the match ended before its first turn.
        turn: Option<Turn>,
        /// Why.
        reason: EndReason,
    },
    /// The connection to the relay was lost while the match ran (the relay
    /// restarted, or the path broke): the peer keeps its world and is
    /// asking for its slot (a spectator: its seat) back on a new connection
    /// to the same address, for at most
    /// [`PeerBuilder::with_reconnect`](super::PeerBuilder::with_reconnect)
    /// in all. Show "reconnecting"; turns resume by themselves, and for a
    /// player a [`PeerEvent::CaughtUp`] follows once it plays live again. If
    /// it gives up, [`PeerEvent::ConnectionLost`] follows.
    Reconnecting {
        /// 1 for the first try after the loss, counting up.
        attempt: u32,
        /// Why the previous connection ended.
        reason: DisconnectReason,
    },
    /// The transport connection to the relay ended before the match did,
    /// and no reconnect brought it back: the peer is done.
    ConnectionLost {
        /// Why.
        reason: DisconnectReason,
    },
    /// The relay's secret for coming back into this slot after a drop
    /// (open mode): keep it where a restarted peer finds it (the `peer`
    /// binary writes it to its `--rejoin-file`).
    RejoinSecret {
        /// This peer's slot.
        player: PlayerId,
        /// The secret.
        secret: crate::proto::RejoinSecret,
    },
    /// A rejoin was accepted: the world is restored from the relay's agreed
    /// snapshot of `turn` (`None`: rebuilt from the setup) and fast-forwards.
    Restored {
        /// The snapshot's turn.
        turn: Option<Turn>,
    },
    /// The rejoined peer caught up with the live turn and plays again.
    CaughtUp {
        /// The last turn simulated while catching up.
        turn: Turn,
    },
    /// A dropped player came back; its inputs count from `turn` on.
    PlayerRejoined {
        /// Who.
        player: PlayerId,
        /// The first turn with them again.
        turn: Turn,
    },
}
