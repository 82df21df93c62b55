//! The whole relay (transport [`Server`], [`Router`], [`RouterGlue`]) as one
//! [`netsim::Endpoint`](lockstep::netsim::Endpoint), so tests, benchmarks and game developers run real
//! relay logic on `lockstep::netsim::Harness`'s virtual network, next to
//! their own peers (`lockstep::peer::Peer` is an endpoint too).

use crate::RelayConfig;
use crate::event::RouterEvent;
use crate::router::{JoinRefusal, Router};
use crate::router_glue::RouterGlue;
use lockstep::Instant;
use lockstep::low_level::transport::Server;
use lockstep::netsim::Endpoint;
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

impl RelayEndpoint {
    /// A relay with `config` serving through `server` at `addr`.
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
