//! One driver for sans-IO endpoints on a seeded [`Network`] and a virtual
//! clock: the loop that tests, benchmarks and game developers share.
//!
//! # Testing your game under loss
//!
//! Wrap each party of a match (your peers, a transport [`Server`], a relay)
//! in a small [`Endpoint`] adapter, hand them to a [`Harness`] over a
//! [`Network`] with the impairments you want, and [`Harness::run`] until every
//! endpoint [is done](Endpoint::is_done). There are no sockets, no threads
//! and no wall clock: the clock jumps to the next timer or delivery, so a
//! minute of play runs in milliseconds, and the same seed gives the same run
//! every time, which makes a failure under 20 % loss reproducible.
//!
//! Here a transport [`Client`] sends ten reliable messages to a [`Server`]
//! over links that lose a fifth of all datagrams; the reliable channel still
//! delivers each one exactly once and in order:
//!
//! ```
//! use lockstep::netsim::harness::{Endpoint, Harness, Stopped};
//! use lockstep::netsim::{LinkConfig, Network};
//! use lockstep::low_level::transport::{Channel, Client, Server, ServerEvent, TransportConfig};
//! use lockstep::{Duration, Instant};
//! use std::net::SocketAddr;
//!
//! struct Receiver { server: Server, addr: SocketAddr, got: Vec<Vec<u8>> }
//! struct Sender { client: Client, addr: SocketAddr }
//!
//! impl Endpoint for Receiver {
//!     fn addr(&self) -> SocketAddr { self.addr }
//!     fn pump(&mut self, _now: Instant) {
//!         while let Some(ev) = self.server.poll_event() {
//!             if let ServerEvent::Message { bytes, .. } = ev { self.got.push(bytes) }
//!         }
//!     }
//!     fn handle_datagram(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]) {
//!         self.server.handle_datagram(now, from, bytes);
//!     }
//!     fn handle_timeout(&mut self, now: Instant) { self.server.handle_timeout(now) }
//!     fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<SocketAddr> {
//!         self.server.poll_transmit(now, buf)
//!     }
//!     fn poll_timeout(&mut self) -> Option<Instant> { self.server.poll_timeout() }
//!     fn is_done(&self) -> bool { self.got.len() == 10 }
//! }
//!
//! impl Endpoint for Sender {
//!     fn addr(&self) -> SocketAddr { self.addr }
//!     fn handle_datagram(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]) {
//!         self.client.handle_datagram(now, from, bytes);
//!     }
//!     fn handle_timeout(&mut self, now: Instant) { self.client.handle_timeout(now) }
//!     fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<SocketAddr> {
//!         self.client.poll_transmit(now, buf)
//!     }
//!     fn poll_timeout(&mut self) -> Option<Instant> { self.client.poll_timeout() }
//!     // The sender has no goal of its own: the receiver decides when the run ends.
//!     fn is_done(&self) -> bool { true }
//! }
//!
//! let server_addr: SocketAddr = "10.0.0.1:7000".parse().unwrap();
//! let cfg = TransportConfig::default();
//! let mut client = Client::new(Instant::ZERO, server_addr, cfg, 1);
//! for i in 0..10u8 {
//!     client.send(Channel::Reliable, &[i]).unwrap(); // queued until connected
//! }
//! let lossy = LinkConfig {
//!     latency: Duration::from_millis(30),
//!     jitter: Duration::from_millis(10),
//!     loss: 0.20,
//!     ..LinkConfig::default()
//! };
//! let mut receiver = Receiver { server: Server::new(cfg, [42; 32]), addr: server_addr, got: Vec::new() };
//! let mut sender = Sender { client, addr: "10.0.0.2:7000".parse().unwrap() };
//!
//! let mut harness = Harness::new(Network::new(7, lossy));
//! // Different kinds of endpoint share one run as `&mut dyn Endpoint`.
//! let stopped = harness.run(&mut [&mut receiver as &mut dyn Endpoint, &mut sender], Instant::from_millis(10_000));
//!
//! assert_eq!(stopped, Stopped::Done);
//! assert_eq!(receiver.got, (0..10u8).map(|i| vec![i]).collect::<Vec<_>>());
//! let up = harness.traffic(sender.addr, server_addr);
//! assert!(up.delivered_datagrams < up.sent_datagrams, "the loss bit: {up:?}");
//! ```
//!
//! A game's peer adapter typically owns the game's session, its transport
//! `Client` and the glue between them, does the glue's and the game's work in
//! [`Endpoint::pump`], and is done when its session ended. Impair one player's
//! links with [`Network::set_link`] (through [`Harness::network_mut`]) to
//! test a laggard; read [`Harness::traffic`] to measure bandwidth.
//!
//! **A peer's position in the endpoint list is not its player id.** The
//! relay seats players in the order their joins arrive, and under loss or
//! jitter a later peer's join can arrive first: read each peer's slot from
//! [`Peer::player`](crate::peer::Peer::player) (or the
//! [`PeerEvent::Started`](crate::peer::PeerEvent::Started) event) once the
//! match started. The guide's step 8 has a compiled match of a game's
//! peers and the real relay under loss.
//!
//! [`Server`]: crate::transport::Server
//! [`Client`]: crate::transport::Client

use super::Network;
use crate::time::{Duration, Instant};
use std::collections::BTreeMap;
use std::net::SocketAddr;

/// A sans-IO party of a simulated network, as the [`Harness`] drives it.
///
/// Implement it with a small adapter around your own cores (a transport
/// client plus your game's session, a server, a relay). Each step the
/// harness calls, in this order: [`pump`](Self::pump) on every endpoint,
/// [`poll_transmit`](Self::poll_transmit) until `None` on every endpoint,
/// [`poll_timeout`](Self::poll_timeout) on every endpoint; then it advances
/// the clock, hands out the datagrams due with
/// [`handle_datagram`](Self::handle_datagram) and calls
/// [`handle_timeout`](Self::handle_timeout) on every endpoint. Endpoints are
/// visited in the order they are given.
pub trait Endpoint {
    /// The address this endpoint sends from and receives on; unique in a run.
    fn addr(&self) -> SocketAddr;

    /// Per-step work at `now` before anything is sent: move messages between
    /// your cores (transport ↔ session), simulate ready turns, let a bot act,
    /// record what the test wants to look at. Default: nothing.
    fn pump(&mut self, now: Instant) {
        let _ = now;
    }

    /// A datagram from `from` arrived at `now`.
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]);

    /// The clock reached `now`: run the timers that are due (the harness calls
    /// this every step, due or not, as a real driver does after waking).
    fn handle_timeout(&mut self, now: Instant);

    /// The next datagram to send at `now`: written into `buf` (cleared by the
    /// endpoint), its destination returned; `None` when nothing is queued.
    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<SocketAddr>;

    /// When this endpoint next needs [`handle_timeout`](Self::handle_timeout)
    /// (the earliest of its timers), `None` when it waits only for datagrams.
    /// Takes `&mut self` so that adapters can reach cores that are only
    /// lent mutably (a peer's `session()`).
    fn poll_timeout(&mut self) -> Option<Instant>;

    /// Whether this endpoint reached what the run waits for ([`Harness::run`]
    /// stops when every endpoint is done). An endpoint with no goal of its own
    /// (a server, a relay) returns `true` so that it never holds a run open.
    fn is_done(&self) -> bool;
}

impl<T: Endpoint + ?Sized> Endpoint for &mut T {
    fn addr(&self) -> SocketAddr {
        (**self).addr()
    }
    fn pump(&mut self, now: Instant) {
        (**self).pump(now);
    }
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]) {
        (**self).handle_datagram(now, from, bytes);
    }
    fn handle_timeout(&mut self, now: Instant) {
        (**self).handle_timeout(now);
    }
    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<SocketAddr> {
        (**self).poll_transmit(now, buf)
    }
    fn poll_timeout(&mut self) -> Option<Instant> {
        (**self).poll_timeout()
    }
    fn is_done(&self) -> bool {
        (**self).is_done()
    }
}

impl<T: Endpoint + ?Sized> Endpoint for Box<T> {
    fn addr(&self) -> SocketAddr {
        (**self).addr()
    }
    fn pump(&mut self, now: Instant) {
        (**self).pump(now);
    }
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]) {
        (**self).handle_datagram(now, from, bytes);
    }
    fn handle_timeout(&mut self, now: Instant) {
        (**self).handle_timeout(now);
    }
    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<SocketAddr> {
        (**self).poll_transmit(now, buf)
    }
    fn poll_timeout(&mut self) -> Option<Instant> {
        (**self).poll_timeout()
    }
    fn is_done(&self) -> bool {
        (**self).is_done()
    }
}

/// Datagrams and payload bytes one direction (`from → to`) carried, counted
/// by the harness: offered to the network, and handed to an endpoint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Datagrams the sender transmitted (before any loss).
    pub sent_datagrams: u64,
    /// Payload bytes the sender transmitted (no IP/UDP headers).
    pub sent_bytes: u64,
    /// Datagrams handed to the receiving endpoint (copies included).
    pub delivered_datagrams: u64,
    /// Payload bytes handed to the receiving endpoint.
    pub delivered_bytes: u64,
}

impl Traffic {
    fn add(&mut self, other: &Self) {
        self.sent_datagrams += other.sent_datagrams;
        self.sent_bytes += other.sent_bytes;
        self.delivered_datagrams += other.delivered_datagrams;
        self.delivered_bytes += other.delivered_bytes;
    }
}

/// Why a run returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// Every endpoint is done ([`Harness::run`]) or the stop condition held
    /// ([`Harness::run_until`]).
    Done,
    /// The clock reached the limit first.
    Limit,
    /// Nothing is left to happen: no datagram in flight and no timer armed.
    Idle,
}

/// The smallest step the clock takes by default, so that a timer reported as
/// already due cannot stall the run.
pub const DEFAULT_MIN_STEP: Duration = Duration::from_micros(100);

/// Drives [`Endpoint`]s over a seeded [`Network`] on a virtual clock.
///
/// The harness owns the network, the clock and the traffic counters; the
/// endpoints stay yours and are lent to each call, so you can inspect them
/// between runs. Runs are deterministic: same seed, same endpoints, same
/// order, same result.
#[derive(Clone, Debug)]
pub struct Harness {
    net: Network,
    now: Instant,
    min_step: Duration,
    traffic: BTreeMap<(SocketAddr, SocketAddr), Traffic>,
    steps: u64,
    buf: Vec<u8>,
}

impl Harness {
    /// A harness over `net` with the clock at [`Instant::ZERO`].
    #[must_use]
    pub fn new(net: Network) -> Self {
        Self {
            net,
            now: Instant::ZERO,
            min_step: DEFAULT_MIN_STEP,
            traffic: BTreeMap::new(),
            steps: 0,
            buf: Vec::new(),
        }
    }

    /// Starts the clock at `now` (use the instant your endpoints were built at).
    #[must_use]
    pub const fn with_start(mut self, now: Instant) -> Self {
        self.now = now;
        self
    }

    /// Sets the smallest clock advance per step ([`DEFAULT_MIN_STEP`]); the
    /// clock never stands still, even when a timer is already due.
    #[must_use]
    pub const fn with_min_step(mut self, step: Duration) -> Self {
        self.min_step = step;
        self
    }

    /// The virtual clock.
    #[must_use]
    pub const fn now(&self) -> Instant {
        self.now
    }

    /// Steps taken so far.
    #[must_use]
    pub const fn steps(&self) -> u64 {
        self.steps
    }

    /// The network, for its per-link [`LinkCounters`](super::LinkCounters).
    #[must_use]
    pub const fn network(&self) -> &Network {
        &self.net
    }

    /// The network, to change impairments between or before runs
    /// ([`Network::set_link`], [`Network::set_all`]).
    pub fn network_mut(&mut self) -> &mut Network {
        &mut self.net
    }

    /// What `from → to` carried so far.
    #[must_use]
    pub fn traffic(&self, from: SocketAddr, to: SocketAddr) -> Traffic {
        self.traffic.get(&(from, to)).copied().unwrap_or_default()
    }

    /// What `addr` sent to anyone, summed over destinations.
    #[must_use]
    pub fn sent_by(&self, addr: SocketAddr) -> Traffic {
        let mut sum = Traffic::default();
        for (_, t) in self.traffic.iter().filter(|((from, _), _)| *from == addr) {
            sum.add(t);
        }
        sum
    }

    /// What anyone sent to `addr`, summed over senders.
    #[must_use]
    pub fn sent_to(&self, addr: SocketAddr) -> Traffic {
        let mut sum = Traffic::default();
        for (_, t) in self.traffic.iter().filter(|((_, to), _)| *to == addr) {
            sum.add(t);
        }
        sum
    }

    /// Runs until every endpoint [is done](Endpoint::is_done), the clock
    /// reaches `limit`, or nothing is left to happen.
    pub fn run<E: Endpoint>(&mut self, endpoints: &mut [E], limit: Instant) -> Stopped {
        self.run_until(endpoints, limit, |_, eps| eps.iter().all(Endpoint::is_done))
    }

    /// Runs until `stop(now, endpoints)` holds (checked before every step),
    /// the clock reaches `limit`, or nothing is left to happen. The clock is
    /// not clamped: the last step may carry it past `limit` to the next event.
    pub fn run_until<E: Endpoint>(
        &mut self,
        endpoints: &mut [E],
        limit: Instant,
        mut stop: impl FnMut(Instant, &[E]) -> bool,
    ) -> Stopped {
        loop {
            if stop(self.now, endpoints) {
                return Stopped::Done;
            }
            if self.now >= limit {
                return Stopped::Limit;
            }
            if !self.step(endpoints) {
                return Stopped::Idle;
            }
        }
    }

    /// One step: pump, transmit, advance the clock to the next delivery or
    /// timer (at least the minimum step), deliver what is due, run timers.
    /// Returns `false`, without advancing, when nothing is left to happen.
    pub fn step<E: Endpoint>(&mut self, endpoints: &mut [E]) -> bool {
        let now = self.now;
        for e in endpoints.iter_mut() {
            e.pump(now);
        }
        for e in endpoints.iter_mut() {
            let from = e.addr();
            while let Some(to) = e.poll_transmit(now, &mut self.buf) {
                let t = self.traffic.entry((from, to)).or_default();
                t.sent_datagrams += 1;
                t.sent_bytes += self.buf.len() as u64;
                self.net.send(now, from, to, &self.buf);
            }
        }
        let mut next = self.net.next_delivery();
        for e in endpoints.iter_mut() {
            if let Some(t) = e.poll_timeout() {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        }
        let Some(next) = next else {
            return false;
        };
        // Never stand still: a timer that is already due is handled below.
        let now = next.max(now + self.min_step);
        self.now = now;
        self.steps += 1;
        while let Some((from, to, bytes)) = self.net.poll_deliver(now) {
            // A datagram to an address nobody holds is lost, as on a real network.
            if let Some(e) = endpoints.iter_mut().find(|e| e.addr() == to) {
                let t = self.traffic.entry((from, to)).or_default();
                t.delivered_datagrams += 1;
                t.delivered_bytes += bytes.len() as u64;
                e.handle_datagram(now, from, &bytes);
            }
        }
        for e in endpoints.iter_mut() {
            e.handle_timeout(now);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netsim::LinkConfig;

    /// Sends `left` numbered datagrams to `peer`, one per timer tick.
    struct Ticker {
        addr: SocketAddr,
        peer: SocketAddr,
        period: Duration,
        next: Option<Instant>,
        left: u8,
        due: u8,
        sent: u8,
        got: Vec<(Instant, SocketAddr, Vec<u8>)>,
        want: usize,
        pumps: Vec<Instant>,
    }

    impl Ticker {
        fn new(addr: &str, peer: &str, first: Option<Instant>, left: u8, want: usize) -> Self {
            Self {
                addr: addr.parse().unwrap(),
                peer: peer.parse().unwrap(),
                period: Duration::from_millis(10),
                next: first,
                left,
                due: 0,
                sent: 0,
                got: Vec::new(),
                want,
                pumps: Vec::new(),
            }
        }
    }

    impl Endpoint for Ticker {
        fn addr(&self) -> SocketAddr {
            self.addr
        }
        fn pump(&mut self, now: Instant) {
            self.pumps.push(now);
        }
        fn handle_datagram(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]) {
            self.got.push((now, from, bytes.to_vec()));
        }
        fn handle_timeout(&mut self, now: Instant) {
            if self.next.is_some_and(|t| t <= now) && self.left > 0 {
                self.left -= 1;
                self.due += 1;
                self.next = (self.left > 0).then(|| now + self.period);
            }
        }
        fn poll_transmit(&mut self, _now: Instant, buf: &mut Vec<u8>) -> Option<SocketAddr> {
            if self.due == 0 {
                return None;
            }
            self.due -= 1;
            self.sent += 1;
            buf.clear();
            buf.extend_from_slice(&[self.sent, 0, 0]);
            Some(self.peer)
        }
        fn poll_timeout(&mut self) -> Option<Instant> {
            self.next
        }
        fn is_done(&self) -> bool {
            self.got.len() >= self.want
        }
    }

    const A: &str = "10.0.0.1:1";
    const B: &str = "10.0.0.2:1";

    fn ms(n: u64) -> Instant {
        Instant::from_millis(n)
    }

    fn net(latency_ms: u64) -> Network {
        Network::new(
            1,
            LinkConfig::with_latency(Duration::from_millis(latency_ms)),
        )
    }

    #[test]
    fn the_clock_jumps_to_the_next_event() {
        // A's only timer is at 50 ms; its datagram then takes 20 ms to B.
        let mut eps = [
            Ticker::new(A, B, Some(ms(50)), 1, 0),
            Ticker::new(B, A, None, 0, 1),
        ];
        let mut h = Harness::new(net(20));
        assert!(h.step(&mut eps));
        assert_eq!(h.now(), ms(50), "straight to the timer");
        assert!(h.step(&mut eps), "the datagram is sent at 50 ms");
        assert_eq!(h.now(), ms(70), "straight to the delivery");
        assert_eq!(
            eps[1].got,
            vec![(ms(70), A.parse().unwrap(), vec![1, 0, 0])]
        );
        assert!(!h.step(&mut eps), "nothing left: no step");
        assert_eq!(h.now(), ms(70), "an idle step does not move the clock");
        assert_eq!(h.steps(), 2);
        assert_eq!(eps[0].pumps, vec![Instant::ZERO, ms(50), ms(70)]);
    }

    #[test]
    fn a_timer_already_due_still_moves_the_clock_by_the_minimum_step() {
        // A timer stuck in the past (an endpoint that never clears it) must
        // not freeze the run: each step advances by the minimum step.
        let mut eps = [Ticker::new(A, B, Some(Instant::ZERO), 0, 1)];
        let mut h = Harness::new(net(20))
            .with_start(ms(10))
            .with_min_step(Duration::from_millis(3));
        for expected in [13, 16] {
            assert!(h.step(&mut eps));
            assert_eq!(h.now(), ms(expected));
        }
        assert_eq!(h.run(&mut eps, ms(20)), Stopped::Limit);
        assert_eq!(eps[0].pumps, vec![ms(10), ms(13), ms(16), ms(19)]);
        assert_eq!(h.now(), ms(22), "the last step may pass the limit");
    }

    #[test]
    fn run_stops_when_every_endpoint_is_done_or_nothing_is_left() {
        // A sends at 10, 20, ... 50 ms, B at 15, 25, ... 55 ms; 1 ms one way.
        let mut eps = [
            Ticker::new(A, B, Some(ms(10)), 5, 3),
            Ticker::new(B, A, Some(ms(15)), 5, 4),
        ];
        let mut h = Harness::new(net(1));
        assert_eq!(h.run(&mut eps, ms(1_000)), Stopped::Done);
        assert!(eps.iter().all(Endpoint::is_done));
        // B's fourth datagram arrives at 41 ms; A had its three by 36 ms.
        assert_eq!((eps[0].got.len(), eps[1].got.len()), (3, 4));
        assert_eq!(h.now(), ms(41));
        assert_eq!(h.run(&mut eps, ms(1_000)), Stopped::Done, "still done");

        // Nobody will ever be done, but everything stops happening.
        let mut eps = [
            Ticker::new(A, B, Some(ms(0)), 2, 9),
            Ticker::new(B, A, None, 0, 9),
        ];
        let mut h = Harness::new(net(1));
        assert_eq!(h.run(&mut eps, ms(1_000)), Stopped::Idle);
        assert_eq!(eps[1].got.len(), 2);

        // A custom stop condition sees the clock and the endpoints.
        let mut eps = [
            Ticker::new(A, B, Some(ms(10)), 50, 99),
            Ticker::new(B, A, None, 0, 99),
        ];
        let mut h = Harness::new(net(1));
        let stopped = h.run_until(&mut eps, ms(1_000), |_, e| e[1].got.len() == 3);
        assert_eq!(
            (stopped, eps[1].got.len(), h.now()),
            (Stopped::Done, 3, ms(31))
        );
        let stopped = h.run_until(&mut eps, ms(1_000), |now, _| now >= ms(100));
        assert_eq!(stopped, Stopped::Done);
        assert_eq!(h.run(&mut eps, ms(150)), Stopped::Limit);
    }

    #[test]
    fn per_link_impairment_applies_to_its_direction_only() {
        let (a, b): (SocketAddr, SocketAddr) = (A.parse().unwrap(), B.parse().unwrap());
        let mut eps = [
            Ticker::new(A, B, Some(ms(10)), 3, 3),
            Ticker::new(B, A, Some(ms(10)), 3, 3),
        ];
        let mut h = Harness::new(net(5));
        h.network_mut()
            .set_link(a, b, LinkConfig::with_latency(Duration::from_millis(100)));
        assert_eq!(h.run(&mut eps, ms(1_000)), Stopped::Done);
        let arrivals = |e: &Ticker| e.got.iter().map(|(t, ..)| *t).collect::<Vec<_>>();
        // Sent at 10, 20 and 30 ms each way.
        assert_eq!(
            arrivals(&eps[1]),
            vec![ms(110), ms(120), ms(130)],
            "a → b slow"
        );
        assert_eq!(
            arrivals(&eps[0]),
            vec![ms(15), ms(25), ms(35)],
            "b → a untouched"
        );

        // A dead link in one direction: everything lost that way only.
        let mut eps = [
            Ticker::new(A, B, Some(ms(0)), 3, 0),
            Ticker::new(B, A, Some(ms(0)), 3, 0),
        ];
        let mut h = Harness::new(net(5));
        let dead = LinkConfig {
            loss: 1.0,
            ..LinkConfig::default()
        };
        h.network_mut().set_link(b, a, dead);
        assert_eq!(
            h.run_until(&mut eps, ms(1_000), |_, _| false),
            Stopped::Idle
        );
        assert_eq!((eps[0].got.len(), eps[1].got.len()), (0, 3));
        assert_eq!(h.network().counters(b, a).lost, 3);
    }

    #[test]
    fn traffic_counts_datagrams_and_bytes_per_direction() {
        let (a, b): (SocketAddr, SocketAddr) = (A.parse().unwrap(), B.parse().unwrap());
        let lossy = LinkConfig {
            latency: Duration::from_millis(5),
            loss: 0.3,
            ..LinkConfig::default()
        };
        let run = || {
            let mut eps = [
                Ticker::new(A, B, Some(ms(0)), 40, 0),
                Ticker::new(B, A, Some(ms(0)), 10, 0),
                // Sends to an address nobody holds.
                Ticker::new("10.0.0.3:1", "10.0.0.9:1", Some(ms(0)), 2, 0),
            ];
            let mut h = Harness::new(Network::new(3, lossy));
            assert_eq!(
                h.run_until(&mut eps, ms(10_000), |_, _| false),
                Stopped::Idle
            );
            (h, eps.map(|e| e.got.len()))
        };
        let (h, got) = run();
        let ab = h.traffic(a, b);
        assert_eq!((ab.sent_datagrams, ab.sent_bytes), (40, 120));
        assert_eq!(ab.delivered_datagrams, got[1] as u64);
        assert_eq!(ab.delivered_bytes, 3 * ab.delivered_datagrams);
        assert!(ab.delivered_datagrams < 40, "30 % loss bites: {ab:?}");
        assert_eq!(ab.delivered_datagrams, h.network().counters(a, b).delivered);
        let ba = h.traffic(b, a);
        assert_eq!((ba.sent_datagrams, ba.sent_bytes), (10, 30));
        assert_eq!(ba.delivered_datagrams, got[0] as u64);
        assert_eq!(h.sent_by(a), ab);
        assert_eq!(h.sent_to(a), ba);
        let stray = h.sent_by("10.0.0.3:1".parse().unwrap());
        assert_eq!((stray.sent_datagrams, stray.delivered_datagrams), (2, 0));
        let (again, got_again) = run();
        assert_eq!(
            (again.traffic(a, b), got_again),
            (ab, got),
            "same seed, same run"
        );
    }

    #[test]
    fn endpoints_of_different_kinds_share_a_run_by_reference() {
        let mut a = Ticker::new(A, B, Some(ms(0)), 2, 0);
        let mut b = Box::new(Ticker::new(B, A, None, 0, 2));
        let mut h = Harness::new(net(1));
        let mut eps: [&mut dyn Endpoint; 2] = [&mut a, &mut b];
        assert_eq!(h.run(&mut eps, ms(1_000)), Stopped::Done);
        assert_eq!(b.got.len(), 2);
        assert_eq!(a.sent, 2);
    }
}
