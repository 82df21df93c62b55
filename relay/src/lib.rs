//! The relay: authority on what each lockstep turn contains.
//!
//! [`Router`] is the sans-IO core: it takes connection events and messages
//! from the transport, runs many matches at once (each a match room), closes
//! turns by the configured [`TurnPolicy`], stamps every command with the
//! sender's slot, adapts the input delay, compares state hashes and names the
//! odd peer out on a desync. It reports everything as [`RouterEvent`]s that a
//! driver logs and records into replays.
//!
//! The whole protocol in miniature: two sessions and a router exchanging
//! messages directly (a real driver puts the transport in between), a
//! virtual clock, and a "game" that just hashes its inputs.
//!
//! ```
//! use lockstep::low_level::session::SessionBuilder;
//! use lockstep::low_level::session::Event;
//! use lockstep::{Duration, Instant};
//! use relay::{ConnId, RelayConfig, Router};
//! use sim::StateHash;
//!
//! let mut now = Instant::from_millis(0);
//! let mut router = Router::new(RelayConfig::default());
//! let mut peers: Vec<_> = (0..2u32)
//!     .map(|i| {
//!         router.handle_connected(now, ConnId(i), ([127, 0, 0, 1], 9000 + i as u16).into());
//!         SessionBuilder::new().with_match("doc", 2).with_turns(20).build(now).unwrap()
//!     })
//!     .collect();
//! let mut simulated = [0u32; 2];
//! while !peers.iter().all(|s| s.is_ended()) {
//!     for (i, s) in peers.iter_mut().enumerate() {
//!         while let Some((_, bytes)) = s.poll_outgoing() {
//!             router.handle_message(now, ConnId(i as u32), &bytes);
//!         }
//!         while let Some(ev) = s.poll_event() {
//!             if let Event::TurnReady { turn, inputs } = ev {
//!                 // Step the game with `inputs` here, then report its hash.
//!                 simulated[i] += 1;
//!                 let hash = StateHash([inputs.len() as u8; 32]);
//!                 s.report_hash(turn, hash, Vec::new()).unwrap();
//!                 s.submit_commands(now, &[turn.0]).unwrap();
//!             }
//!         }
//!     }
//!     while let Some((conn, _, bytes)) = router.poll_outgoing() {
//!         peers[conn.0 as usize].handle_message(now, &bytes);
//!     }
//!     let next = peers.iter().filter_map(|s| s.poll_timeout()).chain(router.poll_timeout()).min();
//!     now = next.unwrap_or(now).max(now + Duration::from_micros(1));
//!     router.handle_timeout(now);
//!     peers.iter_mut().for_each(|s| s.handle_timeout(now));
//! }
//! assert_eq!(simulated, [20, 20]);
//! ```
//!
//! # Layering
//!
//! The modules import one way, top to bottom; nothing imports upward, and
//! a unit test (`layering_tests`) fails on a circle, naming the file and
//! line:
//!
//! ```text
//! demo         the one-command match (a relay, bot peers, a verified replay); nothing imports it
//! http         the HTTP side: listeners, request reading, routing; mounts metrics and the live view
//! agones       the Agones SDK over its REST gateway: a worker thread fed by router events
//! udp          the one-loop entry points of `serve` under their first path
//! endpoint     the relay as a netsim endpoint, for tests under loss
//!   ↓
//! serve        the serve loops: sockets, the real clock, threads; never the HTTP side
//! live         the live view: the match list, a spectator bridge per browser
//!   ↓
//! router_glue  transport ↔ router        recorder, games   replay files, rules hashes
//! metrics      counters and their text (no server, no live view)
//!   ↓
//! router       the sans-IO core: connections, match rooms by name
//!   ↓
//! matchroom    one match: seats, turns, hashes, desync, snapshots, rejoin
//!   ↓
//! delay · desync · names · outbox · resume · turn_policy · rejoin_config · bundle_key · limits · config · event · entropy
//! ```
//!
//! Data flows down as calls and back up as polled events: the serve loop
//! feeds the router datagrams and the clock, polls its [`RouterEvent`]s,
//! records them, stores counters into [`metrics::Metrics`] and hands each
//! event to its caller as a [`serve::RelayNote`]; the binary passes those
//! on to the live view, which the HTTP side serves beside the counters.

pub mod agones;
mod bundle_key;
pub mod config;
mod delay;
pub mod demo;
mod desync;
pub mod endpoint;
pub mod entropy;
pub mod event;
pub mod games;
pub mod http;
#[cfg(test)]
mod layering_tests;
pub mod limits;
pub mod live;
mod matchroom;
pub mod metrics;
#[doc = include_str!("../docs/operations.md")]
pub mod operations {}
mod names;
mod outbox;
pub mod recorder;
pub mod rejoin_config;
pub mod resume;
pub mod router;
pub mod router_glue;
pub mod serve;
#[cfg(test)]
mod test_support;
pub mod turn_policy;
pub mod udp;

pub use config::{InvalidSetting, RelayConfig};
pub use event::{DropReason, MatchId, MatchInfo, RouterEvent, TokenBinding};
pub use limits::Limits;
pub use router::{ConnId, Router, RouterCounters};
pub use turn_policy::TurnPolicy;
