//! The relay as an Agones game server (`relay serve --agones`): it speaks
//! the Agones SDK itself, over the SDK server's REST gateway on
//! `127.0.0.1:$AGONES_SDK_HTTP_PORT` (written against Agones
//! [`AGONES_VERSION`]), so no gRPC toolchain and no sidecar of its own.
//!
//! What it tells the SDK, in order (see [`crate::operations`], "Agones"):
//!
//! 1. labels (`SetLabel`): the relay's version and whether it resumes
//!    matches after a restart;
//! 2. the `players` List's current values (`GetList`: a restarted
//!    container clears what its predecessor left), the `matches` Counter's
//!    capacity (the relay's match budget) and the List's capacity;
//! 3. `Ready`, once the UDP socket is bound;
//! 4. `Health` every [`AgonesConfig::health_every`] while the event loops
//!    are healthy (never while `/health` would answer 503: draining or a
//!    stalled loop);
//! 5. as matches start and end, the Counter's count and the List's values
//!    (`match/slot` per player), kept exact;
//! 6. on SIGTERM, the Counter's capacity follows the running count down
//!    (no room for the allocator), and once the drain is over `Shutdown`.
//!
//! Nothing here runs on an event loop: [`Agones::handle_event`] converts a
//! router event and `try_send`s it into a bounded channel; a worker thread
//! owns the HTTP client (std `TcpStream`, one request at a time, each
//! bounded by [`AgonesConfig::timeout`]). A missing, late or hung SDK
//! server costs the relay nothing but log lines ([`AgonesNote`]).

mod labels;
mod ledger;
mod rest;
mod worker;

use crate::event::{MatchInfo, RouterEvent};
use crossbeam_channel::{Receiver, Sender, TrySendError};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The Agones release whose SDK REST API this client is written against
/// (counters and lists under `/v1beta1`, the stable calls at the root).
pub const AGONES_VERSION: &str = "1.57";
/// The environment variable Agones sets to the SDK server's REST port.
pub const PORT_ENV: &str = "AGONES_SDK_HTTP_PORT";
/// The REST port when [`PORT_ENV`] is not set.
pub const DEFAULT_PORT: u16 = 9358;
/// The Counter of running matches (declare it in the Fleet's `counters`).
pub const MATCHES_COUNTER: &str = "matches";
/// The List of seated players, `match/slot` (declare it in the Fleet's `lists`).
pub const PLAYERS_LIST: &str = "players";
/// Most values an Agones List holds: the `players` capacity is capped to it.
pub const MAX_LIST_CAPACITY: i64 = 1000;
/// The prefix of the allocation metadata (labels and annotations) the relay
/// reads from the watch stream and logs: `lockstep.dev/token-key-id`, ...
pub const METADATA_PREFIX: &str = "lockstep.dev/";
/// Room in the channel from the event loops to the worker: two messages
/// per match (start, end), so thousands of matches starting and ending
/// while one request is on its way.
pub const CHANNEL_CAPACITY: usize = 4096;

/// How the relay talks to the SDK.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgonesConfig {
    /// The REST gateway's port on 127.0.0.1.
    pub port: u16,
    /// Time between Health pings (below the Fleet's `health.periodSeconds`).
    pub health_every: Duration,
    /// Bound on one request: connect, send, answer.
    pub timeout: Duration,
    /// The Counter of running matches.
    pub matches_counter: String,
    /// Its capacity: the relay's match budget.
    pub matches_capacity: i64,
    /// The List of seated players.
    pub players_list: String,
    /// Its capacity (at most [`MAX_LIST_CAPACITY`]).
    pub players_capacity: i64,
    /// Labels set before Ready: (key, value), the key without the SDK's
    /// `agones.dev/sdk-` prefix. Invalid ones are refused by [`Agones::start`].
    pub labels: Vec<(String, String)>,
    /// Follow `GET /watch/gameserver` and report allocation metadata.
    pub watch: bool,
}

impl AgonesConfig {
    /// The defaults for a relay with `matches_capacity` matches and
    /// `players_capacity` players, on the port of [`PORT_ENV`] (else
    /// [`DEFAULT_PORT`]; an unparsable value is an error).
    ///
    /// # Errors
    /// [`PORT_ENV`] set to something other than a port number.
    pub fn from_env(matches_capacity: i64, players_capacity: i64) -> Result<Self, String> {
        let port = match std::env::var(PORT_ENV) {
            Ok(p) => p
                .trim()
                .parse()
                .map_err(|_| format!("{PORT_ENV}={p:?} is not a port number"))?,
            Err(_) => DEFAULT_PORT,
        };
        Ok(Self {
            port,
            health_every: Duration::from_secs(2),
            timeout: Duration::from_secs(2),
            matches_counter: MATCHES_COUNTER.to_owned(),
            matches_capacity,
            players_list: PLAYERS_LIST.to_owned(),
            players_capacity: players_capacity.clamp(0, MAX_LIST_CAPACITY),
            labels: Vec::new(),
            watch: true,
        })
    }

    /// The same with a label (`key` without the SDK prefix; `value` made
    /// valid with [`label_value`]).
    #[must_use]
    pub fn with_label(mut self, key: &str, value: &str) -> Self {
        self.labels.push((key.to_owned(), label_value(value)));
        self
    }
}

/// Whether the SDK's environment is present ([`PORT_ENV`] set): `relay
/// serve` then speaks to it without `--agones`.
#[must_use]
pub fn sdk_present() -> bool {
    std::env::var_os(PORT_ENV).is_some()
}

/// `text` as a valid Kubernetes label value (`0.1.0+x` becomes `0.1.0_x`).
#[must_use]
pub fn label_value(text: &str) -> String {
    labels::label_value_from(text)
}

/// What the Agones side reports, for the relay's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AgonesNote {
    /// A call could not reach the SDK server (connection refused, no
    /// answer within the timeout, a 5xx): said once per outage; the worker
    /// retries with backoff and the relay keeps serving.
    Unreachable {
        /// The call.
        call: &'static str,
        /// The port tried.
        port: u16,
        /// Why.
        error: String,
    },
    /// The SDK server answers again after an outage.
    Reachable,
    /// The SDK refused a call (4xx): what it said and what the relay does.
    Refused {
        /// The warning.
        text: String,
    },
    /// The `players` List is full: values beyond its capacity are not added.
    ListFull {
        /// The list.
        list: String,
        /// Its capacity.
        capacity: i64,
    },
    /// Match events the channel had no room for (the counter may be off).
    EventsLost {
        /// How many, in total.
        count: u64,
    },
    /// The GameServer as the watch stream shows it, when its state or its
    /// `lockstep.dev/` metadata changed (an allocation sets them).
    GameServer {
        /// `Ready`, `Allocated`, `Shutdown`, ...
        state: String,
        /// Labels and annotations under [`METADATA_PREFIX`].
        metadata: Vec<(String, String)>,
    },
}

/// Why [`Agones::start`] did not start.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AgonesError {
    /// A label Kubernetes would refuse (key or value syntax, length).
    #[error("{0}")]
    BadLabel(String),
    /// The OS refused a thread.
    #[error("cannot start the Agones {what} thread: {error}")]
    Thread {
        /// `worker` or `watch`.
        what: &'static str,
        /// The OS's error.
        error: String,
    },
}

/// From the handle to the worker.
enum Msg {
    Start(u64, Vec<String>),
    End(u64),
    Drain,
    Stop,
}

/// The handle the relay keeps: event loops call [`Agones::handle_event`]
/// (never blocks), the binary calls [`Agones::begin_drain`] and, once the
/// loops returned, [`Agones::finish`].
pub struct Agones {
    tx: Sender<Msg>,
    lost: Arc<AtomicU64>,
    done: Receiver<bool>,
}

impl std::fmt::Debug for Agones {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agones")
            .field("lost", &self.lost.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Agones {
    /// Starts the worker (and the watcher, if [`AgonesConfig::watch`]):
    /// labels, capacities and Ready go out at once. `healthy` says whether
    /// a Health ping may go out now (the relay passes what `/health`
    /// judges); `note` gets every [`AgonesNote`], from the worker's threads.
    ///
    /// # Errors
    /// A label Kubernetes would refuse ([`AgonesError::BadLabel`]), or no
    /// thread.
    pub fn start(
        config: AgonesConfig,
        healthy: impl Fn() -> bool + Send + 'static,
        note: impl Fn(AgonesNote) + Send + Sync + 'static,
    ) -> Result<Self, AgonesError> {
        for (k, v) in &config.labels {
            labels::check_label_key(k).map_err(|e| AgonesError::BadLabel(e.to_string()))?;
            labels::check_label_value(v).map_err(|e| AgonesError::BadLabel(e.to_string()))?;
        }
        let (tx, rx) = crossbeam_channel::bounded(CHANNEL_CAPACITY);
        let (done_tx, done) = crossbeam_channel::bounded(1);
        let lost = Arc::new(AtomicU64::new(0));
        let note: worker::NoteFn = Arc::new(note);
        let ledger = ledger::Ledger::new(
            &config.matches_counter,
            &config.players_list,
            config.matches_capacity,
            config.players_capacity,
            config.labels.clone(),
        );
        if config.watch {
            let (port, note) = (config.port, Arc::clone(&note));
            std::thread::Builder::new()
                .name("agones-watch".into())
                .spawn(move || worker::watch(port, &note))
                .map_err(|e| AgonesError::Thread {
                    what: "watch",
                    error: e.to_string(),
                })?;
        }
        let w = worker::Worker {
            config,
            ledger,
            rx,
            done: done_tx,
            lost: Arc::clone(&lost),
            healthy: Box::new(healthy),
            note,
        };
        std::thread::Builder::new()
            .name("agones".into())
            .spawn(move || w.run())
            .map_err(|e| AgonesError::Thread {
                what: "worker",
                error: e.to_string(),
            })?;
        Ok(Self { tx, lost, done })
    }

    /// Passes a router event on: a match that started or was resumed, or
    /// ended. Never blocks: with the channel full the event is counted as
    /// lost ([`AgonesNote::EventsLost`]).
    pub fn handle_event(&self, ev: &RouterEvent) {
        let msg = match ev {
            RouterEvent::MatchStarted { id, info } | RouterEvent::MatchResumed { id, info, .. } => {
                Msg::Start(id.0, list_values(info))
            }
            RouterEvent::MatchEnded { id, .. } => Msg::End(id.0),
            _ => return,
        };
        self.send(msg);
    }

    /// The drain began (SIGTERM): the Counter's capacity follows the
    /// running count down and Health pings stop.
    pub fn begin_drain(&self) {
        self.send(Msg::Drain);
    }

    fn send(&self, msg: Msg) {
        if let Err(TrySendError::Full(_)) = self.tx.try_send(msg) {
            self.lost.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The relay stopped: the worker settles the Counter and List, then
    /// calls Shutdown. Waits at most `wait`; returns whether Shutdown was
    /// answered (a missing or hung SDK server: `false`, and the relay exits
    /// all the same).
    pub fn finish(self, wait: Duration) -> bool {
        let end = Instant::now() + wait;
        if self.tx.send_timeout(Msg::Stop, wait).is_err() {
            return false;
        }
        self.done
            .recv_timeout(end.saturating_duration_since(Instant::now()))
            .unwrap_or(false)
    }
}

/// The `players` List values of a match: `match/slot` per player.
fn list_values(info: &MatchInfo) -> Vec<String> {
    info.players
        .iter()
        .map(|p| format!("{}/{}", info.match_name, p.id.0))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_values_name_match_and_slot() {
        let info = MatchInfo::two_players("duel", "g");
        assert_eq!(list_values(&info), ["duel/0", "duel/1"]);
    }

    #[test]
    fn bad_labels_are_refused_before_anything_starts() {
        let mut c = AgonesConfig::from_env(8, 16).unwrap();
        c.watch = false;
        c.port = 1;
        c.labels.push(("bad key".into(), "v".into()));
        let e = Agones::start(c, || true, |_| {}).unwrap_err();
        assert!(e.to_string().contains("bad key"), "{e}");
    }

    #[test]
    fn with_label_makes_the_value_valid() {
        let c = AgonesConfig::from_env(1, 5000)
            .unwrap()
            .with_label("relay-version", "1.2.3+dirty");
        assert_eq!(c.labels, [("relay-version".into(), "1.2.3_dirty".into())]);
        assert_eq!(c.players_capacity, MAX_LIST_CAPACITY);
    }
}
