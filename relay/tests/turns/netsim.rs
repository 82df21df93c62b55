//! The full stack (sessions, glue, transport endpoints, router) over a
//! seeded `lockstep::netsim::Network`.

use super::*;

use lockstep::low_level::transport::{Server, TransportConfig};
use lockstep::netsim::harness::{Endpoint, Harness};
use lockstep::netsim::{LinkConfig, Network};
use lockstep::peer::{Autopilot, Peer, PeerBuilder, PeerEvent};
use lockstep::token::ConnectToken;
use sim::game::World;

/// The relay as a harness endpoint (the crate's own, public one).
pub(super) use relay::endpoint::RelayEndpoint as RelayNode;

/// Runs the relay and `peers` on `harness` until every peer is done or
/// `limit`, then moves what is still pending on each side (the last events
/// and summaries); returns the run's end time.
pub(super) fn run_match(
    harness: &mut Harness,
    relay: &mut RelayNode,
    peers: &mut [PeerNode],
    limit: Instant,
) -> Instant {
    let mut nodes: Vec<&mut dyn Endpoint> = vec![relay];
    nodes.extend(peers.iter_mut().map(|p| p as &mut dyn Endpoint));
    // The relay never finishes: the run waits for the peers.
    let _ = harness.run(&mut nodes, limit);
    let now = harness.now();
    relay.settle(now);
    for p in peers {
        p.settle(now);
    }
    now
}

/// When a [`PeerNode`] counts as done for the run.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum DoneWhen {
    /// Its session ended; it keeps pumping until everyone is done.
    SessionEnded,
    /// It played to the end without a refusal, or the relay closed its
    /// connection (so a refusal is seen arriving before the close); it
    /// stops pumping then.
    Settled,
}

/// A reference-game peer as a harness endpoint: the public
/// `lockstep::peer::Peer` played by the game's bot; records what it saw.
pub(super) struct PeerNode {
    pub(super) pilot: Autopilot<World, sim::bot::Bot>,
    pub(super) addr: SocketAddr,
    pub(super) done_when: DoneWhen,
    /// Turns simulated, in order.
    pub(super) turns: Vec<u32>,
    /// When each of them was handed to the game (the pump that saw it).
    pub(super) played_at: Vec<Instant>,
    /// Input delay changes seen: (delay, from turn).
    pub(super) delay_changes: Vec<(u8, Turn)>,
    /// Every simulated turn's inputs and the hash after it, in order.
    pub(super) executed: Vec<(Vec<sim::Stamped<sim::game::Command>>, StateHash)>,
    /// The relay's rejoin secret for this peer's slot, once given.
    pub(super) secret: Option<(PlayerId, lockstep::low_level::proto::RejoinSecret)>,
}

/// How to build a [`PeerNode`].
pub(super) struct PeerSpec<'a> {
    pub(super) match_name: &'a str,
    pub(super) players: u8,
    pub(super) turns: u32,
    pub(super) bot_seed: u64,
    pub(super) apm: u32,
    pub(super) name: String,
    pub(super) client_seed: u64,
    pub(super) token: Option<ConnectToken>,
    pub(super) desync_at: Option<Turn>,
}

impl PeerNode {
    /// A peer built at `at`, sending from `addr` to the relay at `server`.
    pub(super) fn new(
        at: Instant,
        spec: PeerSpec<'_>,
        server: SocketAddr,
        addr: SocketAddr,
    ) -> Self {
        Self::build(at, spec, server, addr, None)
    }

    /// A spectator of the running match named in `spec`.
    pub(super) fn spectator(
        at: Instant,
        spec: PeerSpec<'_>,
        server: SocketAddr,
        addr: SocketAddr,
    ) -> Self {
        Self::with(at, spec, server, addr, PeerBuilder::with_spectate)
    }

    /// A peer that comes back into `rejoin`'s held slot (player, secret).
    pub(super) fn build(
        at: Instant,
        spec: PeerSpec<'_>,
        server: SocketAddr,
        addr: SocketAddr,
        rejoin: Option<(PlayerId, lockstep::low_level::proto::RejoinSecret)>,
    ) -> Self {
        Self::with(at, spec, server, addr, move |b| match rejoin {
            Some((player, secret)) => b.with_rejoin(player, secret),
            None => b,
        })
    }

    pub(super) fn with(
        at: Instant,
        spec: PeerSpec<'_>,
        server: SocketAddr,
        addr: SocketAddr,
        tweak: impl FnOnce(PeerBuilder<World>) -> PeerBuilder<World>,
    ) -> Self {
        let mut b = PeerBuilder::<World>::new(spec.match_name, spec.players)
            .with_name(&spec.name)
            .with_turns(spec.turns)
            .with_seed(spec.client_seed)
            .with_ticks_per_turn(sim::game::DEFAULT_TICKS_PER_TURN)
            .with_local_addr(addr);
        if let Some(t) = spec.token {
            b = b.with_token(t);
        }
        if let Some(t) = spec.desync_at {
            b = b.with_fault(t, |w, t| w.perturb(t.0));
        }
        b = tweak(b);
        let (seed, apm) = (spec.bot_seed, spec.apm);
        let pilot = Autopilot::new(b.build(at, server).unwrap(), move |p| {
            sim::bot::Bot::new(p, seed, apm)
        })
        .with_log();
        Self {
            pilot,
            addr,
            done_when: DoneWhen::SessionEnded,
            turns: Vec::new(),
            played_at: Vec::new(),
            delay_changes: Vec::new(),
            executed: Vec::new(),
            secret: None,
        }
    }

    /// The peer.
    pub(super) fn peer(&self) -> &Peer<World> {
        self.pilot.peer()
    }

    /// Hands the game what the transport and session hold (after a run, so
    /// that nothing is left unseen).
    pub(super) fn settle(&mut self, now: Instant) {
        self.pilot.pump(now);
        for ev in self.pilot.take_log() {
            match ev {
                PeerEvent::TurnReady { turn, inputs, hash } => {
                    self.turns.push(turn.0);
                    self.played_at.push(now);
                    self.executed.push((inputs, hash));
                }
                PeerEvent::DelayChanged { delay, from_turn } => {
                    self.delay_changes.push((delay, from_turn));
                }
                PeerEvent::RejoinSecret { player, secret } => {
                    self.secret = Some((player, secret));
                }
                _ => {}
            }
        }
    }
}

impl Endpoint for PeerNode {
    fn addr(&self) -> SocketAddr {
        self.addr
    }
    fn pump(&mut self, now: Instant) {
        if self.done_when == DoneWhen::Settled && self.is_done() {
            return;
        }
        self.settle(now);
    }
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]) {
        self.pilot.handle_datagram(now, from, bytes);
    }
    fn handle_timeout(&mut self, now: Instant) {
        self.pilot.handle_timeout(now);
    }
    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<SocketAddr> {
        self.pilot.poll_transmit(now, buf)
    }
    fn poll_timeout(&mut self) -> Option<Instant> {
        self.pilot.poll_timeout()
    }
    fn is_done(&self) -> bool {
        let peer = self.peer();
        match self.done_when {
            DoneWhen::SessionEnded => peer.is_done(),
            DoneWhen::Settled => {
                peer.disconnected().is_some()
                    || (peer.is_done() && peer.summary(Instant::ZERO).refused.is_none())
            }
        }
    }
}

/// Relay + N reference-game peers over real transport endpoints and a
/// seeded `netsim::Network` (loss, duplication, reordering, jitter).
fn netsim_match(
    n: usize,
    turns: u32,
    link: LinkConfig,
    seed: u64,
) -> (Vec<PeerNode>, Vec<RouterEvent>, Instant) {
    netsim_match_with(n, turns, link, seed, None, RelayConfig::default())
}

/// As [`netsim_match`], with one peer's link (both ways) replaced.
fn netsim_match_with(
    n: usize,
    turns: u32,
    link: LinkConfig,
    seed: u64,
    lagger: Option<(usize, LinkConfig)>,
    config: RelayConfig,
) -> (Vec<PeerNode>, Vec<RouterEvent>, Instant) {
    let start = Instant::from_millis(1);
    let server_addr = SocketAddr::from(([127, 0, 0, 1], 7000));
    let server = Server::new(TransportConfig::default(), [seed as u8; 32]);
    let mut relay = RelayNode::new(server, config, server_addr);
    let mut peers: Vec<PeerNode> = (0..n)
        .map(|i| {
            let spec = PeerSpec {
                match_name: "net",
                players: n as u8,
                turns,
                bot_seed: seed + i as u64,
                apm: 400,
                name: format!("p{i}"),
                client_seed: seed * 31 + i as u64,
                token: None,
                desync_at: None,
            };
            PeerNode::new(
                start,
                spec,
                server_addr,
                SocketAddr::from(([127, 0, 0, 1], 7001 + i as u16)),
            )
        })
        .collect();
    let mut harness = Harness::new(Network::new(seed, link)).with_start(start);
    if let Some((i, cfg)) = lagger {
        let addr = peers[i].addr;
        harness.network_mut().set_link(addr, server_addr, cfg);
        harness.network_mut().set_link(server_addr, addr, cfg);
    }
    let now = run_match(
        &mut harness,
        &mut relay,
        &mut peers,
        Instant::from_millis(180_000),
    );
    (peers, relay.events, now)
}

#[test]
fn over_netsim_with_loss_dup_and_reorder_every_peer_plays_every_turn_once() {
    let link = LinkConfig {
        latency: Duration::from_millis(40),
        jitter: Duration::from_millis(20),
        loss: 0.10,
        duplicate: 0.05,
        reorder: 0.10,
        ..LinkConfig::default()
    };
    let (peers, events, now) = netsim_match(4, 150, link, 17);
    let summaries: Vec<_> = peers.iter().map(|p| p.peer().summary(now)).collect();
    eprintln!(
        "netsim: {:?} delay changes {:?}",
        summaries[0], peers[0].delay_changes
    );
    for (i, p) in peers.iter().enumerate() {
        let s = &summaries[i];
        assert!(s.completed, "peer {i}: {s:?}");
        assert_eq!(p.turns, (0..150).collect::<Vec<u32>>(), "peer {i}");
        assert_eq!(s.final_hash, summaries[0].final_hash);
        assert!(s.desyncs.is_empty());
        assert_eq!(p.delay_changes, peers[0].delay_changes);
        assert!(s.rtt_ms > 50.0, "transport RTT reaches the stats: {s:?}");
    }
    let agreed = events
        .iter()
        .filter(|e| matches!(e, RouterEvent::HashAgreed { .. }))
        .count();
    assert_eq!(agreed, 150);
}

/// The transport in bad-network mode (RTT 500 ms > its 250 ms threshold) with
/// a deadline relay: the laggard's inputs land late, nobody stalls, all finish.
#[test]
fn lagging_peer_over_netsim_deadline_keeps_everyone_playing() {
    let lag = LinkConfig::with_latency(Duration::from_millis(250));
    let config = RelayConfig {
        adaptive_delay: false,
        ..deadline_config()
    };
    let (peers, _, now) = netsim_match_with(
        3,
        100,
        LinkConfig::with_latency(Duration::from_millis(1)),
        5,
        Some((2, lag)),
        config,
    );
    let s: Vec<_> = peers.iter().map(|p| p.peer().summary(now)).collect();
    for (i, x) in s.iter().enumerate() {
        assert!(x.completed, "{x:?}");
        assert_eq!(peers[i].turns, (0..100).collect::<Vec<u32>>());
        assert_eq!(x.final_hash, s[0].final_hash);
    }
    assert_eq!(s[0].stall_ms, 0.0);
    assert!(s[2].late_inputs > 10 && s[2].rtt_ms > 450.0, "{:?}", s[2]);
    assert_eq!(
        peers[2].peer().link_stats().mode,
        lockstep::low_level::transport::CongestionMode::Bad
    );
}

/// Every peer learns that the match ended, whichever packets the loss takes:
/// the relay's `MatchEnd` is reliable and the connection outlives the match.
#[test]
fn at_20_percent_loss_every_peer_sees_the_match_end_for_many_seeds() {
    let link = LinkConfig {
        latency: Duration::from_millis(30),
        jitter: Duration::from_millis(10),
        loss: 0.20,
        ..LinkConfig::default()
    };
    let mut bad = Vec::new();
    for seed in 1..=20 {
        let (peers, _, now) = netsim_match(4, 40, link, seed);
        for (i, p) in peers.iter().enumerate() {
            let s = p.peer().summary(now);
            if !s.completed {
                bad.push((seed, i, s.final_turn, now.as_micros() / 1000));
            }
        }
    }
    assert!(bad.is_empty(), "{bad:?}");
}
