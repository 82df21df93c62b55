//! Where the relay's CPU goes per datagram, by stage: the real relay
//! (`relay::endpoint::RelayEndpoint`: transport `Server`, `RouterGlue`,
//! `Router`) with M fake 4-player matches on the seeded in-process
//! `netsim` network and a virtual clock, each of the relay's entry points
//! timed with the real clock. No socket: this is the protocol's own cost,
//! which the serve loop adds to the kernel's.

use super::benchpeer::{BenchPeer, BenchPeerConfig, Play};
use lockstep::low_level::peer_glue::PeerGlue;
use lockstep::low_level::transport::{AuthMode, Client, ConnMemory, Server, TransportConfig};
use lockstep::netsim::harness::{Endpoint, Harness};
use lockstep::netsim::{LinkConfig, Network};
use lockstep::token::{TokenClaims, TokenKey, issue_token};
use lockstep::{Duration, Instant};
use relay::RelayConfig;
use relay::endpoint::RelayEndpoint;
use std::net::SocketAddr;
use std::time::Instant as Wall;

/// A fake peer on the virtual network.
struct FakePeer {
    peer: BenchPeer,
    client: Client,
    glue: PeerGlue,
    addr: SocketAddr,
}

impl Endpoint for FakePeer {
    fn addr(&self) -> SocketAddr {
        self.addr
    }
    fn pump(&mut self, now: Instant) {
        self.glue.pump(now, self.peer.session(), &mut self.client);
        self.peer.pump(now);
        self.glue.pump(now, self.peer.session(), &mut self.client);
    }
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]) {
        self.client.handle_datagram(now, from, bytes);
    }
    fn handle_timeout(&mut self, now: Instant) {
        self.client.handle_timeout(now);
        self.peer.session().handle_timeout(now);
    }
    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<SocketAddr> {
        self.client.poll_transmit(now, buf)
    }
    fn poll_timeout(&mut self) -> Option<Instant> {
        let session = self.peer.session().poll_timeout();
        [self.client.poll_timeout(), session]
            .into_iter()
            .flatten()
            .min()
    }
    fn is_done(&self) -> bool {
        self.peer.is_done()
    }
}

/// The relay with a stopwatch on each entry point: what the relay's own
/// code costs on a virtual network, without the kernel's share.
pub struct Timed {
    /// The relay.
    pub relay: RelayEndpoint,
    /// CPU by stage so far.
    pub stages: Stages,
}

impl Timed {
    /// `relay`, its stopwatches at zero.
    #[must_use]
    pub fn new(relay: RelayEndpoint) -> Self {
        Self {
            relay,
            stages: Stages::default(),
        }
    }
}

/// Relay CPU by stage over a run, and the datagrams it moved.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Stages {
    /// `Server::handle_datagram`: header, MAC check, acks, message decode.
    pub receive_ns: u64,
    /// `RouterGlue::step` (timers, routing, turn closing, bundles, hashes)
    /// and the glue's pumps.
    pub route_ns: u64,
    /// `Server::poll_transmit`: packing messages, encoding, MAC.
    pub transmit_ns: u64,
    /// `poll_timeout` of the server and the router: when to wake next
    /// (once asked of every connection and match on every wake-up).
    pub timeout_ns: u64,
    /// Datagrams into the relay.
    pub datagrams_in: u64,
    /// Datagrams out of the relay.
    pub datagrams_out: u64,
    /// Matches run.
    pub matches: usize,
    /// Peers that completed.
    pub completed: usize,
}

impl Stages {
    /// Datagrams moved (in + out).
    #[must_use]
    pub const fn datagrams(&self) -> u64 {
        self.datagrams_in + self.datagrams_out
    }

    /// Nanoseconds per datagram moved, for a stage's total.
    #[must_use]
    pub fn per_datagram(&self, ns: u64) -> f64 {
        ns as f64 / self.datagrams().max(1) as f64
    }

    /// All stages, ns per datagram moved.
    #[must_use]
    pub fn total_per_datagram(&self) -> f64 {
        self.per_datagram(self.receive_ns + self.route_ns + self.transmit_ns + self.timeout_ns)
    }
}

fn timed<T>(acc: &mut u64, f: impl FnOnce() -> T) -> T {
    let t = Wall::now();
    let r = f();
    *acc += u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX);
    r
}

impl Endpoint for Timed {
    fn addr(&self) -> SocketAddr {
        self.relay.addr
    }
    fn pump(&mut self, now: Instant) {
        let relay = &mut self.relay;
        timed(&mut self.stages.route_ns, || relay.pump(now));
    }
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]) {
        self.stages.datagrams_in += 1;
        let relay = &mut self.relay;
        timed(&mut self.stages.receive_ns, || {
            relay.handle_datagram(now, from, bytes);
        });
    }
    fn handle_timeout(&mut self, now: Instant) {
        let relay = &mut self.relay;
        timed(&mut self.stages.route_ns, || relay.handle_timeout(now));
    }
    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<SocketAddr> {
        let relay = &mut self.relay;
        let to = timed(&mut self.stages.transmit_ns, || {
            relay.poll_transmit(now, buf)
        });
        if to.is_some() {
            self.stages.datagrams_out += 1;
        }
        to
    }
    fn poll_timeout(&mut self) -> Option<Instant> {
        let relay = &mut self.relay;
        timed(&mut self.stages.timeout_ns, || relay.poll_timeout())
    }
    fn is_done(&self) -> bool {
        true
    }
}

/// Unix time at the virtual clock's zero, for token mode's tokens.
const UNIX0: u64 = 1_700_000_000;

/// How the relay admits peers in a hot-path run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Auth {
    /// Open mode: MAC only, payloads readable (`relay serve` without a key).
    Open,
    /// Token mode: each peer joins with a token for its match and slot, and
    /// every payload is encrypted (`relay serve --token-key`).
    Tokens,
}

/// The relay and `matches` fake 4-player matches of `turns` turns on a
/// virtual lossless network (5 ms one way), not started yet.
fn setup(matches: usize, turns: u32, seed: u64, auth: Auth) -> (Timed, Vec<FakePeer>, Harness) {
    let start = Instant::from_millis(1);
    let relay_addr = SocketAddr::from(([10, 0, 0, 1], 7000));
    let peer_transport = TransportConfig {
        max_connections: 8192,
        ..TransportConfig::default()
    };
    // The transport `relay serve` gives its relay (its acks ride on bundles).
    let transport = RelayConfig::default().server_transport(peer_transport);
    let key = TokenKey::from_bytes([0x5a ^ seed as u8; 32]);
    let mut server = Server::new(transport, [seed as u8; 32]);
    if auth == Auth::Tokens {
        server = server.with_auth(AuthMode::Tokens {
            key: key.clone(),
            unix_at_zero: UNIX0,
        });
    }
    let mut relay = Timed::new(RelayEndpoint::new(
        server,
        RelayConfig::default(),
        relay_addr,
    ));
    relay.stages.matches = matches;
    let peers: Vec<FakePeer> = (0..matches)
        .flat_map(|m| (0..4u8).map(move |i| (m, i)))
        .filter_map(|(m, i)| {
            let peer = BenchPeer::new(
                start,
                BenchPeerConfig {
                    match_name: format!("hot-{m}"),
                    players: 4,
                    turns,
                    seed: seed ^ ((m as u64) << 4 | u64::from(i)),
                    play: Play::Fake { every: 2 },
                },
            )
            .ok()?;
            let n = u32::try_from(m).ok()? * 4 + u32::from(i);
            let client_seed = seed * 31 + u64::from(n);
            let client = match auth {
                Auth::Open => Client::new(start, relay_addr, peer_transport, client_seed),
                Auth::Tokens => {
                    let claims = TokenClaims::new(
                        peer_transport.protocol_id,
                        format!("hot-{m}"),
                        i,
                        UNIX0,
                        3600,
                    );
                    let entropy = blake3::hash(&client_seed.to_le_bytes());
                    let token =
                        issue_token(&key, &claims, &[relay_addr], entropy.as_bytes()).ok()?;
                    Client::with_token(start, relay_addr, peer_transport, &token, client_seed)
                }
            };
            Some(FakePeer {
                peer,
                client,
                glue: PeerGlue::new(),
                addr: SocketAddr::from(([10, 1, (n >> 8) as u8, n as u8], 9000)),
            })
        })
        .collect();
    let link = LinkConfig::with_latency(Duration::from_millis(5));
    let harness = Harness::new(Network::new(seed, link)).with_start(start);
    (relay, peers, harness)
}

/// Runs `matches` fake 4-player matches of `turns` turns through the real
/// relay on a virtual lossless network (5 ms one way) and times the relay.
#[must_use]
pub fn measure(matches: usize, turns: u32, seed: u64, auth: Auth) -> Stages {
    let (mut relay, mut peers, mut harness) = setup(matches, turns, seed, auth);
    let limit = Instant::from_millis(u64::from(turns) * 100 + 60_000);
    {
        let mut nodes: Vec<&mut dyn Endpoint> = vec![&mut relay];
        nodes.extend(peers.iter_mut().map(|p| p as &mut dyn Endpoint));
        let _ = harness.run(&mut nodes, limit);
    }
    let now = harness.now();
    relay.stages.completed = peers
        .iter()
        .filter(|p| p.peer.figures(now).completed)
        .count();
    relay.stages
}

/// What the relay's transport holds per match in steady play.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryFigures {
    /// Matches playing when it was read.
    pub matches: usize,
    /// The turn they were at (virtual time / 100 ms).
    pub turn: u32,
    /// The relay's connections then.
    pub connections: usize,
    /// What they held, summed ([`Server::memory`]).
    pub relay: ConnMemory,
    /// What the peers' connections held, summed.
    pub peers: ConnMemory,
}

/// Runs `matches` fake 4-player matches of `turns` turns through the real
/// relay (as [`measure`]) and reads what the relay's transport and the
/// peers' connections hold at 3/4 of the match: deterministic (counted
/// from capacities on the virtual clock), so two runs print the same.
#[must_use]
pub fn memory(matches: usize, turns: u32, seed: u64) -> MemoryFigures {
    let (mut relay, mut peers, mut harness) = setup(matches, turns, seed, Auth::Open);
    let at = Instant::from_millis(u64::from(turns) * 75);
    {
        let mut nodes: Vec<&mut dyn Endpoint> = vec![&mut relay];
        nodes.extend(peers.iter_mut().map(|p| p as &mut dyn Endpoint));
        let _ = harness.run(&mut nodes, at);
    }
    let mut figures = MemoryFigures {
        matches: relay.relay.router.match_count(),
        turn: u32::try_from(harness.now().as_micros() / 100_000).unwrap_or(u32::MAX),
        connections: relay.relay.server.connections().count(),
        relay: relay.relay.server.memory(),
        peers: ConnMemory::default(),
    };
    for p in &peers {
        figures.peers += p.client.memory();
    }
    figures
}

/// `--internal-memory <matches> <turns>`: prints what the relay's
/// transport holds per match and per connection, by part, at 3/4 of the
/// matches (see [`memory`]).
#[must_use]
pub fn memory_main(args: &[String]) -> std::process::ExitCode {
    let matches = args.first().and_then(|a| a.parse().ok()).unwrap_or(64);
    let turns = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(400);
    let f = memory(matches, turns, 7);
    let per = |m: &ConnMemory, n: usize| {
        let n = n.max(1);
        format!(
            "total {} B (inline {}, sent {}, incoming {}, outgoing {}, bulk {}, other {})",
            m.total() / n,
            m.inline / n,
            m.sent / n,
            m.incoming / n,
            m.outgoing / n,
            m.bulk / n,
            m.other / n
        )
    };
    replays::out_println!(
        "matches {} at turn {}, relay connections {}\nrelay transport per match: {}\nrelay transport per connection: {}\npeer transport per connection: {}",
        f.matches,
        f.turn,
        f.connections,
        per(&f.relay, f.matches),
        per(&f.relay, f.connections),
        per(&f.peers, matches * 4)
    );
    std::process::ExitCode::SUCCESS
}

/// `--internal-hotpath <matches> <turns>`: prints the stages as one line
/// of ns per datagram (receive, route, transmit, timeout, total) and the datagram count.
#[must_use]
pub fn hotpath_main(args: &[String]) -> std::process::ExitCode {
    let matches = args.first().and_then(|a| a.parse().ok()).unwrap_or(256);
    let turns = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(40);
    let s = measure(matches, turns, 7, Auth::Open);
    replays::out_println!(
        "matches {matches} completed {}/{} datagrams {} in {} out | ns/datagram: receive {:.0} route {:.0} transmit {:.0} timeout {:.0} total {:.0}",
        s.completed,
        matches * 4,
        s.datagrams_in,
        s.datagrams_out,
        s.per_datagram(s.receive_ns),
        s.per_datagram(s.route_ns),
        s.per_datagram(s.transmit_ns),
        s.per_datagram(s.timeout_ns),
        s.total_per_datagram()
    );
    std::process::ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The relay's transport holds a few KiB per connection in steady
    /// play (it held ~122 KiB before its rings followed what is in
    /// flight), and the figure is deterministic.
    #[test]
    fn the_relay_transport_holds_a_few_kib_per_match() {
        let f = memory(2, 40, 1);
        assert_eq!((f.matches, f.connections), (2, 8));
        assert!(f.turn >= 25, "playing: {f:?}");
        let per_match = f.relay.total() / 2;
        assert!(per_match <= 28 * 1024, "{per_match} B per match: {f:?}");
        assert!(f.relay.sent / 8 <= 3 * 1024, "{f:?}");
        assert_eq!(memory(2, 40, 1), f, "deterministic");
    }

    #[test]
    fn every_stage_is_timed_and_every_peer_completes_in_both_modes() {
        for auth in [Auth::Open, Auth::Tokens] {
            let s = measure(2, 10, 1, auth);
            assert_eq!(s.completed, 8, "{auth:?}");
            assert!(s.datagrams_in > 0 && s.datagrams_out > 0);
            assert!(s.receive_ns > 0 && s.route_ns > 0 && s.transmit_ns > 0 && s.timeout_ns > 0);
        }
    }
}
