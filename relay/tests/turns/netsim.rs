//! The full stack (sessions, glue, transport endpoints, router) over a
//! seeded `lockstep::netsim::Network`.

use super::*;

use lockstep::netsim::harness::{Endpoint, Harness};
use lockstep::netsim::{LinkConfig, Network};
use lockstep::peer_glue::PeerGlue;
use lockstep::transport::{Client, Server, TransportConfig};
use relay::peer::{GamePeer, PeerConfig};
use relay::server::RouterGlue;

/// The relay as a harness endpoint: transport `Server` + `Router` + the
/// glue between them, stepped as the UDP serve loop steps them.
pub(super) struct RelayNode {
    pub(super) server: Server,
    pub(super) router: Router,
    pub(super) glue: RouterGlue,
    pub(super) addr: SocketAddr,
    /// Every router event, in order.
    pub(super) events: Vec<RouterEvent>,
    /// Every refused join, as the serve loop would log it.
    pub(super) refusals: Vec<relay::router::JoinRefusal>,
    /// Most matches (lobbies included) the router held at once.
    pub(super) most_matches: usize,
}

impl RelayNode {
    pub(super) fn new(server: Server, config: RelayConfig, addr: SocketAddr) -> Self {
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
    pub(super) fn settle(&mut self, now: Instant) {
        self.glue.pump(now, &mut self.router, &mut self.server);
        self.drain();
    }
}

impl Endpoint for RelayNode {
    fn addr(&self) -> SocketAddr {
        self.addr
    }
    fn pump(&mut self, now: Instant) {
        // Twice, as the loops this replaces did around the peers' turn: what
        // the router sends in answer to the first pump goes out this step.
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

/// A reference-game peer as a harness endpoint: transport `Client` +
/// `GamePeer` (session, world, bot) + the glue between them; records what
/// it saw.
pub(super) struct PeerNode {
    pub(super) peer: GamePeer,
    pub(super) client: Client,
    pub(super) glue: PeerGlue,
    pub(super) addr: SocketAddr,
    pub(super) done_when: DoneWhen,
    /// Turns simulated, in order.
    pub(super) turns: Vec<u32>,
    /// Input delay changes seen: (delay, from turn).
    pub(super) delay_changes: Vec<(u8, Turn)>,
}

impl PeerNode {
    pub(super) fn new(peer: GamePeer, client: Client, addr: SocketAddr) -> Self {
        Self {
            peer,
            client,
            glue: PeerGlue::new(),
            addr,
            done_when: DoneWhen::SessionEnded,
            turns: Vec::new(),
            delay_changes: Vec::new(),
        }
    }

    /// Hands the session what the client holds and the game what the
    /// session holds (after a run, so that nothing is left unseen).
    pub(super) fn settle(&mut self, now: Instant) {
        self.glue.pump(now, self.peer.session(), &mut self.client);
        self.peer.pump(now);
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
        self.glue.pump(now, self.peer.session(), &mut self.client);
        for ev in self.peer.take_log() {
            match ev {
                Event::TurnReady { turn, .. } => self.turns.push(turn.0),
                Event::InputDelayChanged { delay, from_turn } => {
                    self.delay_changes.push((delay, from_turn));
                }
                _ => {}
            }
        }
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
        match self.done_when {
            DoneWhen::SessionEnded => self.peer.is_done(),
            DoneWhen::Settled => {
                self.glue.disconnected().is_some()
                    || (self.peer.is_done() && self.peer.summary(Instant::ZERO).refused.is_none())
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
            let peer = GamePeer::new(
                start,
                PeerConfig {
                    match_name: "net".into(),
                    players: n as u8,
                    turns,
                    seed: seed + i as u64,
                    apm: 400,
                    name: format!("p{i}"),
                    desync_at: None,
                },
            )
            .unwrap();
            let client = Client::new(
                start,
                server_addr,
                TransportConfig::default(),
                seed * 31 + i as u64,
            );
            PeerNode::new(
                peer,
                client,
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
    let mut nodes: Vec<&mut dyn Endpoint> = vec![&mut relay];
    nodes.extend(peers.iter_mut().map(|p| p as &mut dyn Endpoint));
    // The relay never finishes: the run waits for the peers.
    let _ = harness.run(&mut nodes, Instant::from_millis(180_000));
    let now = harness.now();
    for p in &mut peers {
        p.settle(now);
    }
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
    let summaries: Vec<_> = peers.iter().map(|p| p.peer.summary(now)).collect();
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
        ..RelayConfig::default()
    };
    let (peers, _, now) = netsim_match_with(
        3,
        100,
        LinkConfig::with_latency(Duration::from_millis(1)),
        5,
        Some((2, lag)),
        config,
    );
    let s: Vec<_> = peers.iter().map(|p| p.peer.summary(now)).collect();
    for (i, x) in s.iter().enumerate() {
        assert!(x.completed, "{x:?}");
        assert_eq!(peers[i].turns, (0..100).collect::<Vec<u32>>());
        assert_eq!(x.final_hash, s[0].final_hash);
    }
    assert_eq!(s[0].stall_ms, 0.0);
    assert!(s[2].late_inputs > 10 && s[2].rtt_ms > 450.0, "{:?}", s[2]);
    assert_eq!(
        peers[2].client.stats().mode,
        lockstep::transport::CongestionMode::Bad
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
            let s = p.peer.summary(now);
            if !s.completed {
                bad.push((seed, i, s.final_turn, now.as_micros() / 1000));
            }
        }
    }
    assert!(bad.is_empty(), "{bad:?}");
}
