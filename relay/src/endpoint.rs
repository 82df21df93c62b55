//! The whole relay (transport [`Server`], [`Router`], [`RouterGlue`]) as one
//! [`netsim::Endpoint`](lockstep::netsim::Endpoint), so tests, benchmarks and game developers run real
//! relay logic on `lockstep::netsim::Harness`'s virtual network, next to
//! their own peers (`lockstep::peer::Peer` is an endpoint too). A game
//! builds one with [`RelayEndpoint::open`], no low-level type needed.

use crate::RelayConfig;
use crate::event::RouterEvent;
use crate::router::{JoinRefusal, Router};
use crate::router_glue::RouterGlue;
use lockstep::Instant;
use lockstep::low_level::transport::{AuthMode, Server, TransportConfig};
use lockstep::netsim::Endpoint;
use lockstep::token::TokenKey;
use std::net::SocketAddr;

/// A relay on a simulated network: every router event and every refused
/// join is kept for the caller to inspect after the run. Use it to test a
/// game's peers against the real relay under loss, deterministically.
// No `Debug`: the transport `Server` holds keys and does not print itself.
pub struct RelayEndpoint {
    /// The transport server (its counters, connections).
    pub server: Server,
    /// The router (its counters, matches).
    pub router: Router,
    /// The glue between them.
    pub glue: RouterGlue,
    /// The address the relay is known by on the simulated network.
    pub addr: SocketAddr,
    /// Every router event, in order.
    pub events: Vec<RouterEvent>,
    /// Every refused join, as the serve loop would log it.
    pub refusals: Vec<JoinRefusal>,
    /// Most matches (lobbies included) the router held at once.
    pub most_matches: usize,
}

/// The handshake-cookie secret of [`RelayEndpoint::open`]: fixed, so that a
/// run is the same for the same seed (on a simulated network nobody forges
/// cookies).
const SIMULATED_SECRET: [u8; 32] = [7; 32];

impl RelayEndpoint {
    /// A relay with `config` at `addr` on a simulated network, with the
    /// transport `relay serve` gives it
    /// ([`RelayConfig::server_transport`] of the default), open to anyone
    /// (see [`RelayEndpoint::with_token_key`] for token mode) and a fixed
    /// cookie secret, so a run depends on the network's seed alone. For
    /// another transport, build the low-level server yourself and use
    /// [`RelayEndpoint::new`].
    ///
    /// Two bots play the reference game through the real relay over links
    /// that lose a tenth of all datagrams, on a virtual clock:
    ///
    /// ```
    /// use lockstep::netsim::{Endpoint, Harness, LinkConfig, Network, Stopped};
    /// use lockstep::peer::{Autopilot, PeerBuilder};
    /// use lockstep::{Duration, Instant};
    /// use relay::RelayConfig;
    /// use relay::endpoint::RelayEndpoint;
    /// use sim::bot::Bot;
    /// use sim::game::World;
    /// use std::net::SocketAddr;
    ///
    /// let relay_addr = SocketAddr::from(([10, 0, 0, 1], 7777));
    /// let mut relay = RelayEndpoint::open(RelayConfig::default(), relay_addr);
    /// let mut pilots: Vec<_> = (1..=2u8)
    ///     .map(|i| {
    ///         let peer = PeerBuilder::<World>::new("under-loss", 2)
    ///             .with_turns(30)
    ///             // Each peer needs an address of its own on the network.
    ///             .with_local_addr(SocketAddr::from(([10, 0, 0, 10 + i], 7000)))
    ///             .build(Instant::ZERO, relay_addr)
    ///             .unwrap();
    ///         Autopilot::new(peer, move |player| Bot::new(player, u64::from(i), 300))
    ///     })
    ///     .collect();
    /// let lossy = LinkConfig {
    ///     latency: Duration::from_millis(40),
    ///     loss: 0.10,
    ///     ..LinkConfig::default()
    /// };
    /// let mut harness = Harness::new(Network::new(42, lossy));
    /// let mut nodes: Vec<&mut dyn Endpoint> = vec![&mut relay];
    /// nodes.extend(pilots.iter_mut().map(|p| p as &mut dyn Endpoint));
    /// // The relay is always done: the run waits for the peers' matches.
    /// let stopped = harness.run(&mut nodes, Instant::from_millis(120_000));
    /// assert_eq!(stopped, Stopped::Done);
    /// let hashes: Vec<_> = pilots
    ///     .iter()
    ///     .map(|p| p.peer().summary(harness.now()).final_hash)
    ///     .collect();
    /// assert!(hashes[0].is_some() && hashes[0] == hashes[1]);
    /// assert_eq!(relay.router.counters().matches_ended, 1);
    /// ```
    #[must_use]
    pub fn open(config: RelayConfig, addr: SocketAddr) -> Self {
        let transport = config.server_transport(TransportConfig::default());
        Self::new(Server::new(transport, SIMULATED_SECRET), config, addr)
    }

    /// The same in token mode: only holders of a join token sealed under
    /// `key` (see `lockstep::token`) may connect; `unix_at_zero` is the Unix
    /// time in seconds at the simulation's `Instant::ZERO`, against which
    /// the tokens' expiry is checked.
    #[must_use]
    pub fn with_token_key(mut self, key: TokenKey, unix_at_zero: u64) -> Self {
        self.server = self
            .server
            .with_auth(AuthMode::Tokens { key, unix_at_zero });
        self
    }

    /// A relay with `config` serving through `server` at `addr`: for a
    /// transport of your own (`lockstep::low_level`); see
    /// [`RelayEndpoint::open`] for the usual one.
    #[must_use]
    pub fn new(server: Server, config: RelayConfig, addr: SocketAddr) -> Self {
        Self {
            server,
            router: Router::new(config),
            glue: RouterGlue::new(),
            addr,
            events: Vec::new(),
            refusals: Vec::new(),
            most_matches: 0,
        }
    }

    fn drain(&mut self) {
        self.events
            .extend(std::iter::from_fn(|| self.router.poll_event()));
        self.refusals.extend(self.glue.take_refusals());
    }

    /// What the relay holds, by the parts its memory budget counts (a
    /// simulated relay records nothing, so no recordings).
    #[must_use]
    pub fn memory_use(&self) -> crate::limits::MemoryUse {
        self.glue.memory_use(&self.router, &self.server, 0)
    }

    /// Moves what is pending between the server and the router.
    pub fn settle(&mut self, now: Instant) {
        self.glue.pump(now, &mut self.router, &mut self.server);
        self.drain();
    }
}

impl Endpoint for RelayEndpoint {
    fn addr(&self) -> SocketAddr {
        self.addr
    }
    fn pump(&mut self, now: Instant) {
        // Twice: what the router sends in answer to the first pump goes out
        // in this same step.
        self.settle(now);
        self.settle(now);
        self.most_matches = self.most_matches.max(self.router.match_count());
    }
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]) {
        self.server.handle_datagram(now, from, bytes);
    }
    fn handle_timeout(&mut self, now: Instant) {
        // The serve loop's timer step: each side's timers, each followed by
        // a pump, so what a timer produced moves on at once.
        self.glue.step(now, &mut self.router, &mut self.server);
        self.drain();
    }
    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<SocketAddr> {
        self.server.poll_transmit(now, buf)
    }
    fn poll_timeout(&mut self) -> Option<Instant> {
        [self.server.poll_timeout(), self.router.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
    }
    fn is_done(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockstep::netsim::{Harness, LinkConfig, Network};
    use lockstep::peer::PeerBuilder;

    /// `with_token_key` puts the simulated relay in token mode: a peer
    /// without a token never gets a connection (the server counts it
    /// `token_missing`), while the same peer reaches an open one.
    #[test]
    fn with_token_key_admits_only_token_holders() {
        let relay_addr = SocketAddr::from(([10, 0, 0, 1], 7777));
        let peer_addr = SocketAddr::from(([10, 0, 0, 2], 7000));
        let run = |mut relay: RelayEndpoint| {
            let mut peer = PeerBuilder::<sim::game::World>::new("tokens", 2)
                .with_local_addr(peer_addr)
                .build(Instant::ZERO, relay_addr)
                .unwrap();
            let mut harness = Harness::new(Network::new(1, LinkConfig::default()));
            let mut nodes: [&mut dyn Endpoint; 2] = [&mut relay, &mut peer];
            let _ = harness.run_until(&mut nodes, Instant::from_millis(3_000), |_, _| false);
            (
                relay.server.counters().token_missing,
                relay.router.connection_count(),
            )
        };
        let key = TokenKey::from_bytes([9; 32]);
        let (missing, connected) =
            run(RelayEndpoint::open(RelayConfig::default(), relay_addr).with_token_key(key, 0));
        assert!(missing >= 1, "the token-less handshake was refused");
        assert_eq!(connected, 0);
        let (missing, connected) = run(RelayEndpoint::open(RelayConfig::default(), relay_addr));
        assert_eq!(missing, 0);
        assert_eq!(connected, 1, "an open relay lets it in");
    }
}
