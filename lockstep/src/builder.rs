//! Configuration for a [`Session`]: `SessionBuilder::new().with_*(..).build(now)?`.

use crate::proto::{Join, MAX_NAME_LEN, RejoinSecret};
use crate::session::Session;
use crate::time::{Duration, Instant};
use sim::{MAX_PLAYERS, PlayerId, StateHash};

/// Why a session could not be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// Slots outside `1..=MAX_PLAYERS`.
    #[error("{0} slots; a match has 1..={MAX_PLAYERS}")]
    Slots(u8),
    /// A name longer than the protocol allows.
    #[error("{0} is longer than {MAX_NAME_LEN} bytes")]
    NameTooLong(&'static str),
    /// The peer's recording file could not be created (it is created when
    /// the peer is built, before it joins, so nothing is played unrecorded).
    #[error("cannot create the recording {}: {reason}", path.display())]
    Record {
        /// The file asked for.
        path: std::path::PathBuf,
        /// What kind of failure (`AlreadyExists`: the file is there and
        /// overwriting was not asked for).
        kind: std::io::ErrorKind,
        /// What the operating system said.
        reason: String,
    },
    /// No secret randomness for the handshake salts: the OS random source
    /// is unavailable (or absent on this target) and none was passed in
    /// ([`PeerBuilder::with_entropy`](crate::peer::PeerBuilder::with_entropy)).
    #[error("no randomness for the handshake salt: {0}")]
    Entropy(String),
}

/// Default snapshot upload chunk: the largest a chunk message may carry
/// ([`MAX_SNAPSHOT_CHUNK`](crate::proto::MAX_SNAPSHOT_CHUNK)). Chunks travel
/// on the transport's bulk path, which sends turn traffic first and paces
/// itself with its own budget, so nothing is gained by cutting the upload
/// finer or spacing it out (an upload used to be 960-byte chunks every 50 ms
/// when it shared the ordered reliable path with inputs).
pub const DEFAULT_UPLOAD_CHUNK: usize = crate::proto::MAX_SNAPSHOT_CHUNK;

/// Options of a session.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// The join request sent to the relay.
    pub join: Join,
    /// How often the peer reports its figures to the relay.
    pub report_interval: Duration,
    /// How many recent turns' section hashes are kept to answer section requests.
    pub section_history: usize,
    /// How the jitter buffer is sized under the relay's clock.
    pub playout: crate::session::PlayoutConfig,
    /// Come back into this held slot of a running match with its secret,
    /// instead of joining (see [`SessionBuilder::with_rejoin`]).
    pub rejoin: Option<(PlayerId, RejoinSecret)>,
    /// Watch a running match instead of joining (see [`SessionBuilder::with_spectate`]).
    pub spectate: bool,
    /// Time between two chunks of a snapshot upload (default zero: every
    /// chunk is handed to the transport's bulk path at once, which paces it
    /// behind turn traffic). A pause only makes the upload slower.
    pub upload_interval: Duration,
    /// Largest chunk of a snapshot upload (default [`DEFAULT_UPLOAD_CHUNK`],
    /// at most [`MAX_SNAPSHOT_CHUNK`](crate::proto::MAX_SNAPSHOT_CHUNK)).
    pub upload_chunk: usize,
}

/// Builds a [`Session`].
#[derive(Clone, Debug)]
pub struct SessionBuilder {
    config: SessionConfig,
}

impl Default for SessionBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl SessionBuilder {
    /// A builder for a 2-player match named "default" of an unnamed game.
    #[must_use]
    pub fn new() -> Self {
        Self {
            config: SessionConfig {
                join: Join {
                    match_name: "default".into(),
                    slots: 2,
                    game_id: String::new(),
                    game_version: 0,
                    rules_hash: StateHash([0; 32]),
                    name: "player".into(),
                    turns: 0,
                },
                report_interval: Duration::from_secs(1),
                section_history: 128,
                playout: crate::session::PlayoutConfig::default(),
                rejoin: None,
                spectate: false,
                upload_interval: Duration::ZERO,
                upload_chunk: DEFAULT_UPLOAD_CHUNK,
            },
        }
    }

    /// The match to join and its number of slots.
    #[must_use]
    pub fn with_match(mut self, name: &str, slots: u8) -> Self {
        self.config.join.match_name = name.to_owned();
        self.config.join.slots = slots;
        self
    }

    /// The game every player must run (id, version and rules hash).
    #[must_use]
    pub fn with_game(mut self, id: &str, version: u32, rules_hash: StateHash) -> Self {
        self.config.join.game_id = id.to_owned();
        self.config.join.game_version = version;
        self.config.join.rules_hash = rules_hash;
        self
    }

    /// The game of a [`sim::Simulation`] type (its id, version and the given rules hash).
    #[must_use]
    pub fn with_simulation<S: sim::Simulation>(self, rules_hash: StateHash) -> Self {
        self.with_game(S::GAME_ID, S::GAME_VERSION, rules_hash)
    }

    /// The player's display name.
    #[must_use]
    pub fn with_name(mut self, name: &str) -> Self {
        self.config.join.name = name.to_owned();
        self
    }

    /// How many turns this player wants to play (0 = open-ended).
    #[must_use]
    pub fn with_turns(mut self, turns: u32) -> Self {
        self.config.join.turns = turns;
        self
    }

    /// How often to send figures to the relay.
    #[must_use]
    pub fn with_report_interval(mut self, every: Duration) -> Self {
        self.config.report_interval = every;
        self
    }

    /// Rejoin instead of join: come back into `player`'s held slot of the
    /// running match with the secret the relay gave at the start (in token
    /// mode the secret is not checked: the token must grant that slot).
    #[must_use]
    pub const fn with_rejoin(mut self, player: PlayerId, secret: RejoinSecret) -> Self {
        self.config.rejoin = Some((player, secret));
        self
    }

    /// Watch the running match instead of joining: read-only, a few
    /// seconds behind live (the relay's setting), from its agreed snapshot;
    /// the session reports hashes (the relay checks them) and sends no input.
    #[must_use]
    pub const fn with_spectate(mut self) -> Self {
        self.config.spectate = true;
        self
    }

    /// Pacing of snapshot uploads: chunks of at most `chunk` bytes (capped
    /// at [`MAX_SNAPSHOT_CHUNK`](crate::proto::MAX_SNAPSHOT_CHUNK)), one
    /// every `interval` (defaults: [`DEFAULT_UPLOAD_CHUNK`], zero: all at once,
    /// paced by the transport's bulk path).
    #[must_use]
    pub fn with_upload_pacing(mut self, chunk: usize, interval: Duration) -> Self {
        self.config.upload_chunk = chunk.clamp(1, crate::proto::MAX_SNAPSHOT_CHUNK);
        self.config.upload_interval = interval;
        self
    }

    /// How many turns of section hashes to keep for desync diagnosis.
    #[must_use]
    pub fn with_section_history(mut self, turns: usize) -> Self {
        self.config.section_history = turns.max(1);
        self
    }

    /// How the jitter buffer is sized when the relay is the clock (its
    /// default `clock` policy): the arrival percentile turns are due at and
    /// the most it may add. Lower plays with less latency, higher smoother.
    #[must_use]
    pub fn with_playout(mut self, playout: crate::session::PlayoutConfig) -> Self {
        self.config.playout = playout;
        self
    }

    /// Validates the options and starts the session (its first outgoing message is the join).
    pub fn build(self, now: Instant) -> Result<Session, BuildError> {
        let j = &self.config.join;
        if j.slots == 0 || j.slots > MAX_PLAYERS {
            return Err(BuildError::Slots(j.slots));
        }
        for (s, what) in [
            (&j.match_name, "match name"),
            (&j.name, "player name"),
            (&j.game_id, "game id"),
        ] {
            if s.len() > MAX_NAME_LEN {
                return Err(BuildError::NameTooLong(what));
            }
        }
        Ok(Session::new(now, self.config))
    }
}
