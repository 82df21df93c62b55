//! A peer of any game, in the GGRS style: a sans-IO core that owns the
//! [`Session`](crate::session::Session), the transport [`Client`], the glue between them and the
//! game's world, and reports everything as polled [`PeerEvent`]s.
//!
//! The game loop is yours. Each frame hand the peer what arrived and the
//! time, then drain what it has for you:
//!
//! 1. [`Peer::handle_datagram`] for each datagram from the relay, then
//!    [`Peer::handle_timeout`] once;
//! 2. [`Peer::poll_event`] until `None`: on [`PeerEvent::TurnReady`] the world
//!    is already stepped, its hash reported (and recorded): render it or let
//!    a bot think from [`Peer::world`];
//! 3. [`Peer::submit`] the local player's commands;
//! 4. [`Peer::poll_transmit`] until `None`, sending each datagram; sleep
//!    until [`Peer::poll_timeout`] or the next datagram.
//!
//! Hash reporting is built in; recording ([`PeerBuilder::with_record`]),
//! join tokens, stats ([`Peer::summary`]) and a fault switch for desync
//! drills ([`PeerBuilder::with_fault`]) are switched on with `with_*`
//! options. [`GameSession`] is the same game half without the transport,
//! for another carrier of the session's messages. [`udp::UdpPeer`] runs a
//! peer over a real socket;
//! [`Autopilot`] pairs it with a bot, and as a
//! [`netsim::Endpoint`](crate::netsim::Endpoint) a peer runs under the
//! [`netsim::Harness`](crate::netsim::Harness) on a virtual network.

mod agent;
mod event;
mod forensics;
mod game;
mod record;
mod speculation;
mod summary;
#[cfg(test)]
mod tests;
pub mod udp;

pub use agent::{Agent, Autopilot, MakeAgent};
pub use event::PeerEvent;
pub use forensics::FORENSICS_HISTORY;
pub use game::GameSession;
// The types in the peer's signatures and the settings a user passes to the
// builder, so that a game names them from here.
pub use crate::builder::BuildError;
pub use crate::proto::{
    DesyncEntity, DesyncField, EndReason, PlayerInfo, RejectReason, RejoinSecret,
};
pub use crate::session::{LinkFigures, PlayoutConfig, SessionError, SessionStats};
pub use crate::transport::{CongestionConfig, CongestionMode, LinkStats, TransportConfig};
pub use speculation::{
    CloneFork, CullToArea, SnapshotFork, Speculation, SpeculationConfig, SpeculationHook,
    SpeculationStats, ViewArea,
};
pub use summary::{
    DesyncSummary, LatencyMs, PeerRefusal, PeerSummary, SpeculationSummary, progress_line,
    waiting_line,
};

use crate::builder::SessionBuilder;
use crate::netsim::Endpoint;
use crate::peer_glue::PeerGlue;
use crate::time::{Duration, Instant};
use crate::token::ConnectToken;
use crate::transport::{Client, DisconnectReason};
use record::Recording;
use sim::{PlayerId, Simulation, Turn};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Turns between keyframes in a peer's own replay unless
/// [`PeerBuilder::with_keyframes`] says otherwise.
pub const KEYFRAME_EVERY: u32 = 100;

/// A fault injected into the own world right after simulating a turn (the
/// turn is passed as a salt): desync drills and tests, for any game. A boxed
/// closure, so a drill can capture what it needs (a field to break, a
/// counter); set it with [`PeerBuilder::with_fault`].
pub type Fault<S> = Box<dyn FnMut(&mut S, Turn) + Send>;

/// The rules fingerprint a peer sends in its join (defined in `sim`, where
/// replay tools find it too).
pub use sim::rules_fingerprint;

/// Simulation ticks per turn of a match unless the relay is told otherwise
/// (`relay serve --ticks-per-turn`, `RelayConfig::ticks_per_turn`): the one
/// default the relay's setup and [`PeerBuilder::with_ticks_per_turn`] share.
pub const DEFAULT_TICKS_PER_TURN: u16 = 2;

/// Options of a [`Peer`]: `PeerBuilder::<MyGame>::new("match", 2).with_*(..).build(now, relay)`.
pub struct PeerBuilder<S: Simulation> {
    match_name: String,
    players: u8,
    name: String,
    turns: u32,
    token: Option<ConnectToken>,
    record: Option<PathBuf>,
    record_overwrite: bool,
    keyframes: u32,
    transport: TransportConfig,
    seed: u64,
    entropy: Option<[u8; 32]>,
    fault: Option<(Turn, Fault<S>)>,
    forensics_history: usize,
    ticks_per_turn: u16,
    local_addr: SocketAddr,
    playout: crate::session::PlayoutConfig,
    rejoin: Option<(PlayerId, crate::proto::RejoinSecret)>,
    spectate: bool,
    upload_pacing: Option<(usize, Duration)>,
    speculation: Option<Speculation<S>>,
    reconnect_for: Duration,
}

impl<S: Simulation> std::fmt::Debug for PeerBuilder<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The fault closure has no Debug: only whether one is set and when.
        f.debug_struct("PeerBuilder")
            .field("match_name", &self.match_name)
            .field("players", &self.players)
            .field("name", &self.name)
            .field("turns", &self.turns)
            .field("record", &self.record)
            .field("ticks_per_turn", &self.ticks_per_turn)
            .field("spectate", &self.spectate)
            .field("fault_at", &self.fault.as_ref().map(|(t, _)| *t))
            .field(
                "speculation",
                &self.speculation.as_ref().map(|s| *s.config()),
            )
            .finish_non_exhaustive()
    }
}

impl<S: Simulation> PeerBuilder<S> {
    /// A peer that joins `match_name`, a match of `players` slots.
    #[must_use]
    pub fn new(match_name: &str, players: u8) -> Self {
        Self {
            match_name: match_name.to_owned(),
            players,
            name: String::new(),
            turns: 0,
            token: None,
            record: None,
            record_overwrite: false,
            keyframes: KEYFRAME_EVERY,
            transport: TransportConfig::default(),
            seed: 0,
            entropy: None,
            fault: None,
            forensics_history: FORENSICS_HISTORY,
            ticks_per_turn: DEFAULT_TICKS_PER_TURN,
            local_addr: SocketAddr::from(([0, 0, 0, 0], 0)),
            playout: crate::session::PlayoutConfig::default(),
            rejoin: None,
            spectate: false,
            upload_pacing: None,
            speculation: None,
            reconnect_for: RECONNECT_FOR,
        }
    }

    /// How long a peer whose connection to the relay was lost keeps asking
    /// for its slot (or, for a spectator, its seat) back on new connections
    /// to the same address (default [`RECONNECT_FOR`]; zero: never, the
    /// peer ends with [`PeerEvent::ConnectionLost`] at once). A restarted
    /// relay resumes its matches from their recordings and waits for their
    /// players; a peer that comes back keeps its world and plays (or
    /// watches) on from its turn.
    #[must_use]
    pub const fn with_reconnect(mut self, give_up_after: Duration) -> Self {
        self.reconnect_for = give_up_after;
        self
    }

    /// Opt in to a speculative view: a second, disposable world forked from
    /// the confirmed one and advanced with this player's own pending
    /// commands, so that a click shows in the next frame instead of a round
    /// trip later. Draw [`Peer::speculative_world`] after
    /// [`Peer::handle_frame`] each frame. Hashes, replays and desync
    /// reports stay those of the confirmed world. Forks by snapshot and
    /// restore; see [`with_speculation_hook`](Self::with_speculation_hook)
    /// for a cheaper fork.
    #[must_use]
    pub fn with_speculation(mut self, config: SpeculationConfig) -> Self {
        self.speculation = Some(Speculation::new(config));
        self
    }

    /// [`with_speculation`](Self::with_speculation) with the game's own
    /// fork and step ([`CloneFork`] for a world that is `Clone`).
    #[must_use]
    pub fn with_speculation_hook(
        mut self,
        config: SpeculationConfig,
        hook: impl SpeculationHook<S> + 'static,
    ) -> Self {
        self.speculation = Some(Speculation::with_hook(config, hook));
        self
    }

    /// Pacing of the snapshot uploads the relay asks for
    /// ([`SessionBuilder::with_upload_pacing`]; by default all at once in
    /// the largest chunks, paced by the transport's bulk path). For
    /// comparisons; there is no need to set it.
    #[must_use]
    pub const fn with_upload_pacing(mut self, chunk: usize, interval: Duration) -> Self {
        self.upload_pacing = Some((chunk, interval));
        self
    }

    /// How the jitter buffer is sized when the relay is the clock
    /// ([`SessionBuilder::with_playout`]).
    #[must_use]
    pub const fn with_playout(mut self, playout: crate::session::PlayoutConfig) -> Self {
        self.playout = playout;
        self
    }

    /// Watch the running match instead of playing: read-only, a few
    /// seconds behind live, from the relay's agreed snapshot; the world
    /// steps and its hashes are reported (the relay checks them against the
    /// players'), the game submits nothing. `players` is ignored.
    #[must_use]
    pub const fn with_spectate(mut self) -> Self {
        self.spectate = true;
        self
    }

    /// Come back into `player`'s held slot of the running match instead of
    /// joining: with the secret the relay gave that player
    /// ([`PeerEvent::RejoinSecret`]) in open mode, with a token for that
    /// match and slot in token mode. The peer restores the relay's agreed
    /// snapshot, fast-forwards and plays on.
    #[must_use]
    pub const fn with_rejoin(
        mut self,
        player: PlayerId,
        secret: crate::proto::RejoinSecret,
    ) -> Self {
        self.rejoin = Some((player, secret));
        self
    }

    /// The display name (the relay suffixes a name another player has).
    #[must_use]
    pub fn with_name(mut self, name: &str) -> Self {
        name.clone_into(&mut self.name);
        self
    }

    /// Turns to play (0: until the match ends).
    #[must_use]
    pub const fn with_turns(mut self, turns: u32) -> Self {
        self.turns = turns;
        self
    }

    /// Connect with a join token (a relay in token mode).
    #[must_use]
    pub fn with_token(mut self, token: ConnectToken) -> Self {
        self.token = Some(token);
        self
    }

    /// Record this peer's view of the match to `path` (bundles, own hashes,
    /// drops, delay changes and keyframes), closed when the match ends. The
    /// file is created by [`build`](Self::build), before the join (an
    /// existing file is refused: see
    /// [`with_record_overwrite`](Self::with_record_overwrite)); it is
    /// removed again if the match never starts.
    #[must_use]
    pub fn with_record(mut self, path: impl Into<PathBuf>) -> Self {
        self.record = Some(path.into());
        self
    }

    /// Let [`with_record`](Self::with_record) replace an existing file
    /// (default: refused, like the relay, which never overwrites a recording).
    #[must_use]
    pub const fn with_record_overwrite(mut self, overwrite: bool) -> Self {
        self.record_overwrite = overwrite;
        self
    }

    /// A keyframe every `k` turns in the recording (0: none; default [`KEYFRAME_EVERY`]).
    #[must_use]
    pub const fn with_keyframes(mut self, k: u32) -> Self {
        self.keyframes = k;
        self
    }

    /// Transport settings (default: [`TransportConfig::default`]).
    #[must_use]
    pub const fn with_transport(mut self, config: TransportConfig) -> Self {
        self.transport = config;
        self
    }

    /// Seed of the transport client's handshake salt when no
    /// [`with_entropy`](Self::with_entropy) is given: for simulated
    /// networks and tests only, where runs must repeat. On a real network
    /// a salt an attacker can guess (a seed such as `peer --seed`, whose
    /// default is 1) lets it forge the relay's `Denied` from off the path (the join
    /// fails) or, in open mode, its `Challenge`.
    #[must_use]
    pub const fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Secret randomness for the transport's handshake salts (each
    /// connection attempt, redials included, gets its own salt derived from
    /// it): 32 bytes from the OS CSPRNG. [`UdpPeer::new`](udp::UdpPeer::new)
    /// draws them itself when none were given; a caller without an OS
    /// source (a browser build) passes its own. Overrides
    /// [`with_seed`](Self::with_seed) for the salts.
    #[must_use]
    pub const fn with_entropy(mut self, entropy: [u8; 32]) -> Self {
        self.entropy = Some(entropy);
        self
    }

    /// Whether [`with_entropy`](Self::with_entropy) was given.
    #[must_use]
    pub const fn has_entropy(&self) -> bool {
        self.entropy.is_some()
    }

    /// Fault switch: run `fault` on the own world right after simulating
    /// `turn`, before its hash is taken (a forced desync). Any closure:
    /// it may capture state (`move |world, turn| ...`).
    #[must_use]
    pub fn with_fault(
        mut self,
        turn: Turn,
        fault: impl FnMut(&mut S, Turn) + Send + 'static,
    ) -> Self {
        self.fault = Some((turn, Box::new(fault)));
        self
    }

    /// Keep the world after each of the last `turns` turns (default
    /// [`FORENSICS_HISTORY`]) to answer the relay's desync forensics: which
    /// entities of a differing section differ, and their fields. A desync is
    /// narrowed only while the odd and the majority peers still keep its turn;
    /// 0 keeps nothing (forensics then stops at the section). Costs one
    /// `snapshot` per turn and `turns` snapshots of memory.
    #[must_use]
    pub const fn with_forensics_history(mut self, turns: usize) -> Self {
        self.forensics_history = turns;
        self
    }

    /// Ticks per turn of the match, as the relay runs it (`relay serve
    /// --ticks-per-turn`, default [`DEFAULT_TICKS_PER_TURN`]): the rules
    /// fingerprint of the join is computed for it (see
    /// [`rules_fingerprint`]). If the relay's setup says otherwise and the
    /// game's fingerprint depends on it, the peer leaves at the start with
    /// [`PeerEvent::Refused`] ([`RulesDiffer`](crate::proto::RejectReason::RulesDiffer))
    /// rather than play a match whose recordings would not verify.
    #[must_use]
    pub const fn with_ticks_per_turn(mut self, ticks: u16) -> Self {
        self.ticks_per_turn = ticks;
        self
    }

    /// The address this peer is known by as a [`netsim::Endpoint`](crate::netsim::Endpoint)
    /// (not used otherwise).
    #[must_use]
    pub const fn with_local_addr(mut self, addr: SocketAddr) -> Self {
        self.local_addr = addr;
        self
    }

    /// Builds the peer at `now`: its join is queued and the transport starts
    /// its handshake with `relay`.
    ///
    /// # Errors
    /// Slots outside `1..=MAX_PLAYERS` (32), a name longer than the protocol allows, or a
    /// recording file that cannot be created.
    pub fn build(self, now: Instant, relay: SocketAddr) -> Result<Peer<S>, BuildError> {
        let mut redial = Redial {
            relay,
            token: self.token.clone(),
            transport: self.transport,
            seed: self.seed,
            entropy: self.entropy,
            dials: 0,
            give_up_after: self.reconnect_for,
            lost_at: None,
            reached: false,
            next_at: None,
            attempts: 0,
        };
        let client = redial.client(now);
        let local_addr = self.local_addr;
        Ok(Peer {
            game: self.build_session(now)?,
            client,
            glue: PeerGlue::new(),
            local_addr,
            pending: VecDeque::new(),
            lost_reported: false,
            dirty: false,
            redial,
        })
    }

    /// Builds only the game half at `now`, for a carrier other than the UDP
    /// transport (its first outgoing message is the join). The token and
    /// transport options do not apply.
    ///
    /// # Errors
    /// Slots outside `1..=MAX_PLAYERS` (32), a name longer than the protocol allows, or a
    /// recording file that cannot be created.
    pub fn build_session(self, now: Instant) -> Result<GameSession<S>, BuildError> {
        let fingerprint = rules_fingerprint::<S>(self.players, self.ticks_per_turn);
        let mut builder = SessionBuilder::new()
            .with_match(&self.match_name, self.players)
            .with_simulation::<S>(fingerprint)
            .with_name(&self.name)
            .with_turns(self.turns)
            .with_playout(self.playout);
        if let Some((player, secret)) = self.rejoin {
            builder = builder.with_rejoin(player, secret);
        }
        if self.spectate {
            builder = builder.with_spectate();
        }
        if let Some((chunk, interval)) = self.upload_pacing {
            builder = builder.with_upload_pacing(chunk, interval);
        }
        let session = builder.build(now)?;
        // Last: a file is created only once nothing else can fail.
        let record = self
            .record
            .map(|p| Recording::create(p, self.keyframes, self.record_overwrite))
            .transpose()?;
        Ok(GameSession {
            session,
            match_name: self.match_name,
            world: None,
            player: None,
            fault: self.fault,
            fingerprint,
            history: forensics::History::new(self.forensics_history),
            record,
            now,
            started_at: None,
            last: None,
            desyncs: Vec::new(),
            dropped: Vec::new(),
            completed: false,
            ended: None,
            error: None,
            refused: None,
            unix_anchor: None,
            snapshot_wanted: Vec::new(),
            rejoin_sent: self.rejoin.map(|_| now),
            rejoin_took: None,
            // A rejoining peer holds its slot's secret from the start: it
            // proves the slot again if the relay restarts.
            secret: self.rejoin,
            spectating: self.spectate,
            setup: None,
            recorded_through: None,
            lobby: None,
            speculation: self.speculation,
        })
    }
}

/// A peer of game `S`: see the [module docs](self) for the loop that drives it.
pub struct Peer<S: Simulation> {
    game: GameSession<S>,
    client: Client,
    glue: PeerGlue,
    local_addr: SocketAddr,
    /// Events of the peer's own (the connection's end), before the session's.
    pending: VecDeque<PeerEvent<S::Command>>,
    lost_reported: bool,
    /// The transport got datagrams or timers ran since the last flush.
    dirty: bool,
    /// Finding the relay again after the connection was lost.
    redial: Redial,
}

/// How long a peer asks for its slot back after losing its relay, unless
/// [`PeerBuilder::with_reconnect`] says otherwise: longer than a relay
/// restart takes (a restarted relay waits as long for its players), short
/// enough that a relay gone for good ends the match within a minute.
pub const RECONNECT_FOR: Duration = Duration::from_secs(30);

/// Longest wait between two reconnect attempts (they start at once and
/// double from 250 ms): a relay back after a restart is found within this.
const REDIAL_MAX_GAP: Duration = Duration::from_secs(1);

/// A peer's way back to its relay after the connection was lost: a new
/// transport connection to the same address (and token), asking for the
/// slot with the world kept.
#[derive(Debug)]
struct Redial {
    relay: SocketAddr,
    token: Option<ConnectToken>,
    transport: TransportConfig,
    seed: u64,
    /// Secret randomness the salts come from, when the builder had some.
    entropy: Option<[u8; 32]>,
    /// Clients made so far: never reset (unlike `attempts`), so no two
    /// connection attempts share a salt.
    dials: u64,
    give_up_after: Duration,
    /// When the connection was lost (`None`: connected).
    lost_at: Option<Instant>,
    /// When the next attempt starts.
    next_at: Option<Instant>,
    attempts: u32,
    /// Whether a connection to the relay was ever established: a peer
    /// that never reached it (a wrong address) fails at once, it does not
    /// retry.
    reached: bool,
}

/// How a peer that lost its relay comes back (see `Peer::comeback`).
#[derive(Clone, Copy)]
enum Comeback {
    /// The match had not started for it: join, rejoin or spectate again.
    Again,
    /// A player: its slot back, its world kept.
    Reconnect(PlayerId, crate::proto::RejoinSecret),
    /// A spectator: its seat back, its world kept.
    Rewatch,
}

impl Redial {
    /// A new transport client for the next connection attempt, with a
    /// salt of its own: from the entropy when there is some (keyed BLAKE3
    /// of the attempt number, so salts are unpredictable without it and
    /// never repeat), else from the seed (simulated networks and tests:
    /// another seed per attempt, as before).
    fn client(&mut self, now: Instant) -> Client {
        let salt = match &self.entropy {
            Some(entropy) => {
                let mut h = blake3::Hasher::new_keyed(entropy);
                h.update(b"lockstep peer handshake salt");
                h.update(&self.dials.to_le_bytes());
                let mut salt = [0u8; 8];
                h.finalize_xof().fill(&mut salt);
                u64::from_le_bytes(salt)
            }
            None => self.seed.wrapping_add(u64::from(self.attempts)),
        };
        self.dials = self.dials.wrapping_add(1);
        match &self.token {
            Some(t) => Client::with_token(now, self.relay, self.transport, t, salt),
            None => Client::new(now, self.relay, self.transport, salt),
        }
    }

    /// The wait before attempt `n` (1-based) after a failed one.
    fn gap(n: u32) -> Duration {
        Duration::from_millis(250)
            .saturating_mul(1u64 << n.saturating_sub(1).min(8))
            .min(REDIAL_MAX_GAP)
    }
}

impl<S: Simulation> std::fmt::Debug for Peer<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peer")
            .field("game", &self.game)
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

impl<S: Simulation> Peer<S> {
    /// A datagram from `from` arrived at `now`. Cheap: it only reaches the
    /// transport; what it carried reaches the session at the next
    /// [`poll_event`](Self::poll_event) or [`poll_transmit`](Self::poll_transmit).
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]) {
        self.game.now = now;
        self.client.handle_datagram(now, from, bytes);
        self.dirty = true;
    }

    /// The clock reached `now`: run due timers (resends, pings, stall
    /// detection). Call every frame, after the frame's datagrams; what they
    /// carried reaches the session at the next [`poll_event`](Self::poll_event)
    /// or [`poll_transmit`](Self::poll_transmit) (timers first, then
    /// messages, in the order the peer has always run them).
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.redial.next_at.is_some_and(|t| t <= now) {
            self.redial_now(now);
        }
        self.client.handle_timeout(now);
        self.game.handle_timeout(now);
        self.dirty = true;
    }

    /// Queues the local player's commands for the next open turn.
    ///
    /// # Errors
    /// [`SessionError::Spectating`] for a spectator (it has no
    /// [`player`](Self::player)); before the match started or after it
    /// ended, or when the local queue is full.
    pub fn submit(&mut self, now: Instant, commands: &[S::Command]) -> Result<(), SessionError> {
        self.game.submit(now, commands)
    }

    /// The next datagram to send at `now`, written into `buf`; its
    /// destination returned. `None` when nothing is queued.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<SocketAddr> {
        self.game.now = now;
        self.flush(now);
        self.client.poll_transmit(now, buf)
    }

    /// When the peer next needs [`handle_timeout`](Self::handle_timeout).
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        [
            self.client.poll_timeout(),
            self.game.poll_timeout(),
            self.redial.next_at,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The next event, `None` when there is none. A [`PeerEvent::TurnReady`]
    /// steps the world as it is polled (so the world a game looks at after
    /// polling it is the world after that turn).
    #[must_use]
    pub fn poll_event(&mut self) -> Option<PeerEvent<S::Command>> {
        if self.dirty {
            self.flush(self.game.now);
        }
        if let Some(ev) = self.pending.pop_front() {
            return Some(ev);
        }
        self.game.poll_event()
    }

    /// The world, once the match started.
    #[must_use]
    pub const fn world(&self) -> Option<&S> {
        self.game.world()
    }

    /// The confirmed world: stepped only on complete bundles, the one whose
    /// hashes are reported and recorded (the same as [`world`](Self::world)).
    #[must_use]
    pub const fn confirmed_world(&self) -> Option<&S> {
        self.game.world()
    }

    /// What to draw this frame: the speculative world when speculation is
    /// on and [`handle_frame`](Self::handle_frame) brought it up to date,
    /// else the confirmed world. Never feed it to anything that must agree
    /// with the other peers.
    #[must_use]
    pub fn speculative_world(&self) -> Option<&S> {
        self.game.speculative_world()
    }

    /// One rendered frame at `now` (call it after submitting the frame's
    /// commands, before drawing [`speculative_world`](Self::speculative_world)):
    /// brings the speculative view up to date within its per-frame budget,
    /// measuring its own work with `clock` (the real clock in a game, a
    /// virtual one in tests). Whether the view is speculative this frame;
    /// always `false` without [`PeerBuilder::with_speculation`].
    pub fn handle_frame(&mut self, now: Instant, clock: &mut dyn FnMut() -> Instant) -> bool {
        self.game.handle_frame(now, clock)
    }

    /// The speculative view's state and counters, if speculation is on.
    #[must_use]
    pub const fn speculation(&self) -> Option<&Speculation<S>> {
        self.game.speculation()
    }

    /// This peer's slot, once started; `None` for a spectator, which has
    /// none and submits nothing.
    #[must_use]
    pub fn player(&self) -> Option<PlayerId> {
        self.game.player()
    }

    /// Whether the session is over (match ended, refused, or left), as of
    /// the last [`poll_event`](Self::poll_event) or [`poll_transmit`](Self::poll_transmit).
    #[must_use]
    pub fn is_done(&self) -> bool {
        self.game.is_done()
    }

    /// Players joined and slots of the lobby this peer waits in, before the
    /// start (see [`GameSession::lobby`]).
    #[must_use]
    pub const fn lobby(&self) -> Option<(u8, u8)> {
        self.game.lobby()
    }

    /// This slot's rejoin secret, once the relay gave it (see
    /// [`GameSession::rejoin_secret`]).
    #[must_use]
    pub const fn rejoin_secret(&self) -> Option<(PlayerId, crate::proto::RejoinSecret)> {
        self.game.rejoin_secret()
    }

    /// Whether this peer rejoined and is still fast-forwarding to the live
    /// turn (see [`GameSession::is_catching_up`]).
    #[must_use]
    pub const fn is_catching_up(&self) -> bool {
        self.game.is_catching_up()
    }

    /// Why the connection to the relay ended for good, if it did: `None`
    /// while the peer is reconnecting after a loss (see
    /// [`PeerBuilder::with_reconnect`]), so a game loop that stops on a
    /// disconnect stops only once the peer gave up.
    #[must_use]
    pub fn disconnected(&self) -> Option<DisconnectReason> {
        let reason = self.glue.disconnected()?;
        let over = self.lost_reported
            || self.game.is_done()
            || matches!(reason, DisconnectReason::Denied(_));
        over.then_some(reason)
    }

    /// Whether everything sent reached the relay (nothing queued or
    /// unacknowledged): after the match ended, keep running until then
    /// (bounded) so the final hashes are not lost with the process.
    #[must_use]
    pub fn is_flushed(&self) -> bool {
        self.glue.is_flushed(&self.client)
    }

    /// Anchors the wall clock: `now` is `unix_ms` ms after the Unix epoch.
    /// The peer never reads a clock; without this a recording's start time
    /// is 0 (unknown).
    pub const fn set_unix_time(&mut self, now: Instant, unix_ms: u64) {
        self.game.set_unix_time(now, unix_ms);
    }

    /// Leaves the match at once (the relay frees the slot without waiting
    /// for a timeout), then closes the connection.
    pub fn leave(&mut self, now: Instant) {
        if !self.game.is_done() {
            self.game.leave(now);
            self.flush(now);
        }
        self.client.disconnect(now);
    }

    /// Closes the recording, if one is open: with a trailer when the match
    /// completed, else readable up to its last turn. Done by itself when
    /// [`PeerEvent::MatchEnded`] is polled; call it when giving up early.
    pub fn close_recording(&mut self) {
        self.game.close_recording();
    }

    /// The transport's link figures (RTT, loss, congestion mode, unacked).
    #[must_use]
    pub fn link_stats(&self) -> LinkStats {
        self.client.stats()
    }

    /// Session figures (for a progress line).
    #[must_use]
    pub fn stats(&self, now: Instant) -> SessionStats {
        self.game.stats(now)
    }

    /// The run's summary so far (final at the end).
    #[must_use]
    pub fn summary(&self, now: Instant) -> PeerSummary {
        self.game.summary(now)
    }

    /// Notes an error for the summary (the first one wins).
    pub fn note_error(&mut self, error: impl Into<String>) {
        self.game.note_error(error);
    }

    /// Moves messages both ways between transport and session, and notices
    /// a lost connection.
    pub(crate) fn flush(&mut self, now: Instant) {
        self.dirty = false;
        self.glue
            .pump(now, self.game.session_mut(), &mut self.client);
        if self.glue.is_connected() && !self.game.session().is_reconnecting() {
            // Back in the slot (or never gone): the next loss starts over.
            self.redial.lost_at = None;
            self.redial.reached = true;
            self.redial.attempts = 0;
        }
        if self.lost_reported || self.redial.next_at.is_some() || self.game.is_done() {
            return;
        }
        let Some(reason) = self.glue.disconnected() else {
            return;
        };
        if matches!(reason, DisconnectReason::Denied(_)) {
            return;
        }
        let lost_at = *self.redial.lost_at.get_or_insert(now);
        let in_time = now.saturating_since(lost_at) < self.redial.give_up_after;
        if in_time && self.comeback().is_some() {
            self.redial.attempts += 1;
            let attempt = self.redial.attempts;
            self.redial.next_at = Some(if attempt == 1 {
                now
            } else {
                now + Redial::gap(attempt - 1)
            });
            self.pending
                .push_back(PeerEvent::Reconnecting { attempt, reason });
            return;
        }
        self.lost_reported = true;
        self.game
            .note_error(format!("connection to the relay ended: {reason:?}"));
        self.pending.push_back(PeerEvent::ConnectionLost { reason });
    }

    /// How this peer would come back on a new connection, if it can: a
    /// player proves its seat with its secret, a spectator needs none, and
    /// a peer whose match has not started for it asks again from the start
    /// (a relay restarted from its recordings has no lobbies) if it had
    /// reached the relay at all.
    fn comeback(&self) -> Option<Comeback> {
        let session = self.game.session();
        if !session.is_running() {
            let waiting = self.redial.reached && !session.is_ended();
            return waiting.then_some(Comeback::Again);
        }
        match self.game.rejoin_secret() {
            Some((player, secret)) => Some(Comeback::Reconnect(player, secret)),
            None => self.game.is_spectating().then_some(Comeback::Rewatch),
        }
    }

    /// Opens a new connection to the relay and asks for the slot (or the
    /// spectator's seat) back with the world kept
    /// ([`Session::reconnect`](crate::session::Session::reconnect),
    /// [`Session::rewatch`](crate::session::Session::rewatch)), or, before
    /// the match started for it, asks again from the start.
    fn redial_now(&mut self, now: Instant) {
        self.redial.next_at = None;
        let Some(comeback) = self.comeback() else {
            return;
        };
        self.client = self.redial.client(now);
        self.glue = PeerGlue::new();
        let session = self.game.session_mut();
        match comeback {
            Comeback::Again => session.request_again(),
            Comeback::Reconnect(player, secret) => session.reconnect(player, secret),
            Comeback::Rewatch => session.rewatch(),
        };
        self.dirty = true;
    }
}

impl<S: Simulation> Endpoint for Peer<S> {
    fn addr(&self) -> SocketAddr {
        self.local_addr
    }
    fn pump(&mut self, now: Instant) {
        self.flush(now);
    }
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]) {
        Self::handle_datagram(self, now, from, bytes);
    }
    fn handle_timeout(&mut self, now: Instant) {
        Self::handle_timeout(self, now);
    }
    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<SocketAddr> {
        Self::poll_transmit(self, now, buf)
    }
    fn poll_timeout(&mut self) -> Option<Instant> {
        Self::poll_timeout(self)
    }
    fn is_done(&self) -> bool {
        Self::is_done(self)
    }
}
