//! Deterministic lockstep networking for games: the generic peer with its
//! UDP runner, a seeded network simulator for tests, and join tokens.
//!
//! A game implements [`Simulation`] (re-exported from `sim` with the types
//! it uses) and plays through [`peer::PeerBuilder`] → [`peer::Peer`]
//! (sans-IO: feed it datagrams and the time, poll it for datagrams, the next
//! timer and [`peer::PeerEvent`]s) or the ready loop [`peer::udp::play`].
//! [`netsim`] runs peers and relays over a seeded impaired network on a
//! virtual clock; [`token`] issues the join tokens a matchmaker hands out.
//!
//! Under the peer sit sans-IO cores that never touch a socket or a clock:
//! the transport, where reliable messages ride in every packet until acked
//! (a lost packet costs one packet interval, not a retransmission timeout),
//! and the lockstep session. They are reached through [`low_level`], for
//! relay implementers and tests, with no stability promise; the example
//! below drives the transport alone over the simulated network.
//!
//! ```
//! use lockstep::netsim::{LinkConfig, Network};
//! use lockstep::low_level::transport::{Channel, Client, ClientEvent, Server, ServerEvent, TransportConfig};
//! use lockstep::{Duration, Instant};
//!
//! let (srv_addr, cli_addr) = ("10.0.0.1:7000".parse().unwrap(), "10.0.0.2:7000".parse().unwrap());
//! let cfg = TransportConfig::default();
//! let mut server = Server::new(cfg, [42; 32]);
//! let mut client = Client::new(Instant::ZERO, srv_addr, cfg, 1);
//! let mut net = Network::new(7, LinkConfig { latency: Duration::from_millis(20), loss: 0.1, ..LinkConfig::default() });
//! client.send(Channel::Reliable, b"hello").unwrap(); // queued until connected
//! let (mut now, mut buf, mut got) = (Instant::ZERO, Vec::new(), None);
//! while got.is_none() && now < Instant::from_millis(5_000) {
//!     while let Some(to) = client.poll_transmit(now, &mut buf) { net.send(now, cli_addr, to, &buf); }
//!     while let Some(to) = server.poll_transmit(now, &mut buf) { net.send(now, srv_addr, to, &buf); }
//!     // Sleep (virtually) until the next thing happens.
//!     let next = [client.poll_timeout(), server.poll_timeout(), net.next_delivery()]
//!         .into_iter().flatten().min().unwrap_or(now + Duration::from_millis(10));
//!     now = now.max(next);
//!     while let Some((from, to, bytes)) = net.poll_deliver(now) {
//!         if to == srv_addr { server.handle_datagram(now, from, &bytes) } else { client.handle_datagram(now, from, &bytes) }
//!     }
//!     client.handle_timeout(now);
//!     server.handle_timeout(now);
//!     while let Some(ev) = server.poll_event() {
//!         if let ServerEvent::Message { bytes, .. } = ev { got = Some(bytes) }
//!     }
//!     while let Some(ev) = client.poll_event() { assert!(!matches!(ev, ClientEvent::Disconnected(_))); }
//! }
//! assert_eq!(got.as_deref(), Some(&b"hello"[..]));
//! ```

// The surface a game developer uses: the peer and its UDP runner, the
// simulated network for tests, join tokens, time values and the simulation
// contract (re-exported so that the peer side needs only this crate).
pub mod netsim;
pub mod peer;
pub mod token;
#[doc = include_str!("../docs/reference.md")]
pub mod reference {}
#[cfg(test)]
mod reference_figures;

/// Integrating your own game, step by step: from a `sim::Simulation` to a
/// networked, recorded, verified match (read this first). Every code block
/// is the example game `tests/examples/snakes.rs`, compiled as a doctest.
#[doc = include_str!("../docs/guide.md")]
// The guide shows the hash test a game writes (`#[test]`); the doctest only
// compiles it, `tests/tests/it/guide.rs` runs it.
#[allow(clippy::test_attr_in_doctest)]
pub mod guide {}

pub use sim::forensics::{EntityHash, Field};
pub use sim::{
    InputError, MatchSetup, PlayerId, SectionHash, Simulation, SnapshotError, Stamped, StateHash,
    Turn, TurnInputs, canonical_order, decode_commands, encode_commands,
};
pub use time::{Duration, Instant};

// For relay implementers and tests, with no stability promise: the cores
// under the peer, reached only through `low_level`.
pub mod low_level;

mod backlog;
mod builder;
mod event;
mod idhash;
mod input_delay;
mod peer_glue;
mod proto;
mod rng;
mod schedule;
mod session;
mod time;
mod transport;
mod turn_buffer;
mod wire;
