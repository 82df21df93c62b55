//! How a serve loop stops and what it publishes ([`ServeOptions`]).

use crate::metrics::Metrics;
use lockstep::Duration;
use lockstep::low_level::transport::AuthMode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// How [`serve_with`](super::serve_with) stops and what it publishes.
#[derive(Clone, Debug)]
pub struct ServeOptions<'a> {
    /// Set (e.g. by SIGTERM) to begin a graceful shutdown: no new matches,
    /// running ones may finish within `grace`, then every match left is
    /// ended (`MatchEnd` to its players) and every replay finalised.
    pub stop: &'a AtomicBool,
    /// Set (e.g. by SIGUSR2) to hand the running matches over to the next
    /// relay process: joins are refused and lobbies closed as in a drain,
    /// then the relay stops at once without ending any match. Their
    /// recordings stay unfinished, and a relay started on the same record
    /// directory and rejoin key resumes them (see [`crate::resume`]).
    pub handover: Option<&'a AtomicBool>,
    /// How long running matches may go on after `stop` is set.
    pub grace: Duration,
    /// Counters to publish for the metrics endpoint, if any.
    pub metrics: Option<Arc<Metrics>>,
    /// Who may connect: anyone ([`AuthMode::Open`], the default) or only
    /// holders of a join token sealed under the relay's key. In token mode
    /// the driver anchors the server's token clock to the wall clock.
    pub auth: AuthMode,
    /// The key of the hash that places each match on one of several event
    /// loops ([`super::home_of`]). `None` (what a relay should use):
    /// a fresh key from the OS CSPRNG, so clients cannot choose match names
    /// that all land on one loop. A fixed key is for tests that must know
    /// where a match lives.
    pub home_key: Option<[u8; 32]>,
    /// The relay-wide memory budget in bytes (`--max-memory-mib`, default
    /// [`crate::limits::DEFAULT_MAX_MEMORY_BYTES`]): see
    /// [`crate::limits::MemoryBudget`] for what is refused at it.
    pub max_memory: usize,
}
