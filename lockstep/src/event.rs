//! What a [`Session`](crate::session::Session) reports to the game loop.

use crate::proto::{EndReason, PlayerInfo, RejectReason};
use sim::{MatchSetup, PlayerId, StateHash, Turn};

/// Something the game loop must react to, polled with `Session::poll_event`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Lobby progress before the match starts.
    Lobby {
        /// Players joined so far.
        joined: u8,
        /// Slots to fill.
        slots: u8,
    },
    /// The relay refused this peer: at the transport handshake (see
    /// `Session::handle_denied`) or its join. The session has ended.
    Rejected {
        /// Why, typed; `Display` gives the line to show a human.
        reason: RejectReason,
        /// Optional specifics the relay added.
        detail: Option<String>,
    },
    /// The match started: build the world from `setup`.
    Started {
        /// This peer's slot.
        your_player: PlayerId,
        /// How to build the world.
        setup: MatchSetup,
        /// Every player.
        players: Vec<PlayerInfo>,
        /// First turn to simulate.
        first_turn: Turn,
        /// Last turn, if the match has a fixed length.
        last_turn: Option<Turn>,
        /// Input delay at the start, in turns.
        input_delay: u8,
        /// Length of one turn.
        turn_length: crate::time::Duration,
    },
    /// Simulate `turn` with these inputs now (then call `report_hash`).
    /// Yielded once per turn, in turn order, only when the relay's bundle is here.
    TurnReady {
        /// The turn.
        turn: Turn,
        /// Stamped opaque command chunks; decode with [`crate::proto::decode_turn`].
        inputs: Vec<(PlayerId, Vec<u8>)>,
    },
    /// A player is gone; from `turn` on its slot has empty inputs.
    PlayerDropped {
        /// Who.
        player: PlayerId,
        /// The first turn without them.
        turn: Turn,
    },
    /// The input delay changes from local turn `from_turn` on (same turn on every peer).
    InputDelayChanged {
        /// New delay in turns.
        delay: u8,
        /// First local turn using it.
        from_turn: Turn,
    },
    /// `turn` is due by the local clock but its bundle has been missing for a turn length.
    Stalled {
        /// The turn waited for.
        turn: Turn,
        /// Players the relay says it waits on (empty if not told).
        waiting_on: Vec<PlayerId>,
    },
    /// Hash reports for `turn` disagree.
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
    /// This peer's input for `turn` arrived late and was simulated in `landed_in`.
    LateInput {
        /// Intended turn.
        turn: Turn,
        /// Actual turn.
        landed_in: Turn,
    },
    /// The relay refused our input for `turn` (it would have gone over our
    /// byte budget for the turn it landed in): its commands are not played.
    /// A game tells its player, e.g. "command dropped: too many orders".
    InputRefused {
        /// The turn the input was meant for.
        turn: Turn,
        /// When each of its chunks was submitted (`Session::submit_commands`
        /// calls, in order): which of the game's submissions were dropped.
        submitted: Vec<crate::Instant>,
    },
    /// The relay asks for desync forensics about a past turn: answer with
    /// `Session::answer_forensics` from the state kept for that turn (the
    /// generic peer does this by itself).
    Forensics(crate::session::ForensicsRequest),
    /// The match is over; every turn up to `turn` has been yielded.
    MatchEnded {
        /// Last turn; `None` when the match ended before its first turn.
        turn: Option<Turn>,
        /// Why.
        reason: EndReason,
    },
    /// The relay's secret for coming back into this player's slot after a
    /// drop (open mode): keep it where a restarted peer finds it.
    RejoinSecret {
        /// The secret.
        secret: crate::proto::RejoinSecret,
    },
    /// The relay wants this peer's snapshot of the world after `turn`:
    /// hand it to [`Session::upload_snapshot`](crate::session::Session::upload_snapshot)
    /// once the turn is simulated.
    SnapshotWanted {
        /// The turn to snapshot.
        turn: Turn,
    },
    /// A rejoin was accepted and its snapshot is here: rebuild the world
    /// from it (`None`: from the setup of [`Event::Started`]) before the
    /// next [`Event::TurnReady`].
    Restored {
        /// The turn the snapshot was taken after, its agreed hash and bytes.
        snapshot: Option<(Turn, StateHash, Vec<u8>)>,
    },
    /// A rejoining peer simulated every turn the relay had closed and plays
    /// live again from the next one.
    CaughtUp {
        /// The last turn simulated while catching up.
        turn: Turn,
    },
    /// A dropped player is back from `turn` on (its inputs count again).
    PlayerRejoined {
        /// Who.
        player: PlayerId,
        /// The first turn with them again.
        turn: Turn,
    },
    /// `--on-desync heal`: this peer's world diverged at `desync_turn` and
    /// the relay re-synchronises it. Drop the world and rebuild it from the
    /// setup; an [`Event::Restored`] (the agreed snapshot, or `None`: keep
    /// the setup's world) follows, then the turns after it, then
    /// [`Event::CaughtUp`].
    Healing {
        /// The desync being healed.
        desync_turn: Turn,
    },
}
