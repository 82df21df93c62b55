//! Sans-IO UDP transport for deterministic lockstep games, a seeded network
//! simulator, and a thin UDP driver.
//!
//! The transport cores ([`transport::Client`], [`transport::Server`]) never
//! touch a socket or a clock: feed them datagrams and the time, poll them for
//! datagrams to send, the next timer and events. Reliable messages ride in
//! every packet until acked; a lost packet costs one packet interval, not a
//! retransmission timeout. [`netsim`] runs them over a seeded impaired
//! network on a virtual clock; [`driver`] runs them over a real `UdpSocket`.
//!
//! ```
//! use lockstep::netsim::{LinkConfig, Network};
//! use lockstep::transport::{Channel, Client, ClientEvent, Server, ServerEvent, TransportConfig};
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

pub mod backlog;
pub mod driver;
pub mod idhash;
pub mod netsim;
pub mod rng;
pub mod schedule;
pub mod time;
pub mod token;
pub mod transport;
pub mod wire;

pub mod builder;
pub mod event;
pub mod input_delay;
pub mod peer;

/// Integrating your own game, step by step: from a `sim::Simulation` to a
/// networked, recorded, verified match (read this first). Every code block
/// is the example game `tests/examples/snakes.rs`, compiled as a doctest.
#[doc = include_str!("../docs/guide.md")]
// The guide shows the hash test a game writes (`#[test]`); the doctest only
// compiles it, `tests/tests/guide.rs` runs it.
#[allow(clippy::test_attr_in_doctest)]
pub mod guide {}
pub mod peer_glue;
pub mod proto;
pub mod session;
pub mod turn_buffer;

pub use time::{Duration, Instant};
