//! The relay as the match clock (the default `clock` policy) over the full
//! stack on a seeded `netsim::Network`: each player's command latency is its
//! own RTT plus about half a turn whatever the others' links; every peer
//! plays the same bundle for every turn, exactly once and in order, under
//! loss, duplication, reordering, clock drift and a frozen peer.

use super::netsim::{PeerNode, PeerSpec, RelayNode};
use super::*;

use lockstep::low_level::transport::{Server, TransportConfig};
use lockstep::netsim::harness::{Endpoint, Harness};
use lockstep::netsim::skew::Skewed;
use lockstep::netsim::{LinkConfig, Network};

const TURN_MS: f64 = 100.0;

/// A peer that also notes when (network time) each turn was played.
struct Timed {
    node: PeerNode,
    played_at: Vec<Instant>,
}

impl Endpoint for Timed {
    fn addr(&self) -> SocketAddr {
        self.node.addr
    }
    fn pump(&mut self, now: Instant) {
        self.node.pump(now);
        while self.played_at.len() < self.node.turns.len() {
            self.played_at.push(now);
        }
    }
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]) {
        self.node.handle_datagram(now, from, bytes);
    }
    fn handle_timeout(&mut self, now: Instant) {
        self.node.handle_timeout(now);
    }
    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<SocketAddr> {
        self.node.poll_transmit(now, buf)
    }
    fn poll_timeout(&mut self) -> Option<Instant> {
        self.node.poll_timeout()
    }
    fn is_done(&self) -> bool {
        self.node.is_done()
    }
}

/// How one peer of a [`clock_match`] runs.
#[derive(Clone, Copy, Default)]
struct PeerClock {
    /// Its link both ways (`None`: the match's link).
    link: Option<LinkConfig>,
    drift_ppm: i32,
    /// Frozen from .. until (ms of network time).
    freeze_ms: Option<(u64, u64)>,
}

/// A match of `peers.len()` reference-game peers on the relay's default
/// policy; returns the peers (unwrapped) and the end time.
fn clock_match(
    turns: u32,
    link: LinkConfig,
    seed: u64,
    peers: &[PeerClock],
) -> (Vec<Timed>, Vec<RouterEvent>, Instant) {
    clock_match_turns(Duration::from_millis(100), turns, link, seed, peers)
}

/// [`clock_match`] with another turn length.
fn clock_match_turns(
    turn: Duration,
    turns: u32,
    link: LinkConfig,
    seed: u64,
    peers: &[PeerClock],
) -> (Vec<Timed>, Vec<RouterEvent>, Instant) {
    let start = Instant::from_millis(1);
    let server_addr = SocketAddr::from(([127, 0, 0, 1], 7000));
    let config = RelayConfig {
        turn_length: turn,
        ..RelayConfig::default()
    };
    let server = Server::new(
        config.server_transport(TransportConfig::default()),
        [seed as u8; 32],
    );
    let mut relay = RelayNode::new(server, config, server_addr);
    let n = peers.len();
    let mut nodes: Vec<Skewed<Timed>> = peers
        .iter()
        .enumerate()
        .map(|(i, pc)| {
            let spec = PeerSpec {
                match_name: "clock",
                players: n as u8,
                turns,
                bot_seed: seed + i as u64,
                apm: 1000,
                name: format!("p{i}"),
                client_seed: seed * 31 + i as u64,
                token: None,
                desync_at: None,
            };
            let addr = SocketAddr::from(([127, 0, 0, 1], 7001 + i as u16));
            let mut node = PeerNode::new(start, spec, server_addr, addr);
            // Orders at random instants within a turn, as a human's clicks:
            // a bot answering each turn at once is in phase with the clock.
            let pilot = std::mem::replace(&mut node.pilot, dummy_pilot(server_addr));
            node.pilot = pilot.with_reaction(turn, seed * 7 + i as u64);
            let mut s = Skewed::new(Timed {
                node,
                played_at: Vec::new(),
            })
            .with_drift_ppm(pc.drift_ppm);
            if let Some((a, b)) = pc.freeze_ms {
                s = s.with_freeze(Instant::from_millis(a), Instant::from_millis(b));
            }
            s
        })
        .collect();
    let mut harness = Harness::new(Network::new(seed, link)).with_start(start);
    for (i, pc) in peers.iter().enumerate() {
        if let Some(cfg) = pc.link {
            let addr = nodes[i].addr();
            harness.network_mut().set_link(addr, server_addr, cfg);
            harness.network_mut().set_link(server_addr, addr, cfg);
        }
    }
    let mut all: Vec<&mut dyn Endpoint> = vec![&mut relay];
    all.extend(nodes.iter_mut().map(|p| p as &mut dyn Endpoint));
    let _ = harness.run(&mut all, Instant::from_millis(600_000));
    let now = harness.now();
    relay.settle(now);
    let peers = nodes
        .into_iter()
        .map(|mut s| {
            let local = s.local(now);
            s.inner_mut().node.settle(local);
            s.into_inner()
        })
        .collect();
    (peers, relay.events, now)
}

/// A placeholder pilot, for the moment the real one is being rebuilt.
fn dummy_pilot(server: SocketAddr) -> lockstep::peer::Autopilot<sim::game::World, sim::bot::Bot> {
    let peer = lockstep::peer::PeerBuilder::<sim::game::World>::new("x", 1)
        .build(Instant::ZERO, server)
        .unwrap();
    lockstep::peer::Autopilot::new(peer, |p| sim::bot::Bot::new(p, 0, 0))
}

/// Own floor of a peer: its RTT plus half a turn, in ms.
fn floor_ms(s: &SessionStats) -> f64 {
    s.link.rtt.as_millis_f64() + TURN_MS / 2.0
}

fn stats(p: &Timed, now: Instant) -> SessionStats {
    p.node.peer().stats(now)
}

/// Every peer played every turn once, in order, with the same inputs and
/// the same hash after it.
fn assert_same_bundles(peers: &[Timed], turns: u32) {
    for (i, p) in peers.iter().enumerate() {
        assert_eq!(p.node.turns, (0..turns).collect::<Vec<u32>>(), "peer {i}");
        assert!(
            p.node.executed == peers[0].node.executed,
            "peer {i} diverged"
        );
    }
}

#[test]
fn mixed_links_near_players_keep_their_own_floor() {
    let near = LinkConfig {
        latency: Duration::from_millis(10),
        jitter: Duration::from_millis(2),
        ..LinkConfig::default()
    };
    let far = PeerClock {
        link: Some(LinkConfig::with_latency(Duration::from_millis(125))),
        ..PeerClock::default()
    };
    let nearby = PeerClock::default();
    let (peers, _, now) = clock_match(600, near, 3, &[nearby, nearby, nearby, far]);
    assert_same_bundles(&peers, 600);
    for (i, p) in peers.iter().enumerate() {
        let s = stats(p, now);
        let floor = floor_ms(&s);
        let p50 = s.steady_latency_p50.as_millis_f64();
        eprintln!(
            "peer {i}: rtt {:.1} floor {floor:.1} p50 {p50:.1} p99 {:.1} buffer {:?}",
            s.link.rtt.as_millis_f64(),
            s.steady_latency_p99.as_millis_f64(),
            s.jitter_buffer
        );

        assert!(s.steady_latency_samples > 20, "{s:?}");
        // Near players pay their own floor, not the far player's link
        // (under the input-delay policies they all paid ~6 turns). The far
        // one pays its own link, plus its transport's bad-network pacing
        // (10 packets/s above 250 ms RTT).
        let bound = if i < 3 { 1.2 * floor } else { floor + TURN_MS };
        assert!(p50 <= bound, "peer {i}: p50 {p50} floor {floor}");
    }
}

#[test]
fn every_peer_plays_the_same_bundles_under_loss_dup_reorder_drift_and_a_freeze() {
    let link = LinkConfig {
        latency: Duration::from_millis(30),
        jitter: Duration::from_millis(10),
        loss: 0.10,
        duplicate: 0.05,
        reorder: 0.10,
        ..LinkConfig::default()
    };
    let peers = [
        PeerClock::default(),
        PeerClock {
            drift_ppm: 1000,
            ..PeerClock::default()
        },
        PeerClock {
            drift_ppm: -1000,
            ..PeerClock::default()
        },
        PeerClock {
            freeze_ms: Some((8_000, 11_000)),
            ..PeerClock::default()
        },
    ];
    for seed in [1, 2] {
        let (peers, events, now) = clock_match(250, link, seed, &peers);
        assert_same_bundles(&peers, 250);
        let agreed = events
            .iter()
            .filter(|e| matches!(e, RouterEvent::HashAgreed { .. }))
            .count();
        assert_eq!(agreed, 250, "seed {seed}");
        for p in &peers {
            let s = p.node.peer().summary(now);
            assert!(s.completed && s.desyncs.is_empty(), "{s:?}");
        }
        // The frozen peer saw a backlog and did not take it for its link.
        assert!(stats(&peers[3], now).backlog_samples > 0);
    }
}

#[test]
fn a_frozen_peer_catches_up_within_5_s_and_hurts_only_itself() {
    let link = LinkConfig {
        latency: Duration::from_millis(20),
        jitter: Duration::from_millis(5),
        ..LinkConfig::default()
    };
    let frozen = PeerClock {
        freeze_ms: Some((10_000, 13_000)),
        ..PeerClock::default()
    };
    let ok = PeerClock::default();
    let (peers, _, now) = clock_match(300, link, 5, &[ok, ok, ok, frozen]);
    assert_same_bundles(&peers, 300);
    for (i, p) in peers.iter().enumerate().take(3) {
        let s = stats(p, now);
        let (p50, floor) = (s.steady_latency_p50.as_millis_f64(), floor_ms(&s));
        // Its own floor (under the input-delay policies a freeze raised
        // everyone's delay to 23 turns).
        assert!(p50 <= 1.2 * floor, "peer {i}: p50 {p50} floor {floor}");
    }
    // From 5 s after the thaw on, the frozen peer plays each turn when the
    // others do (same links): its schedule is back in step with the relay.
    let thaw_turn = peers[3]
        .played_at
        .iter()
        .position(|&t| t >= Instant::from_millis(18_000))
        .unwrap();
    let behind: Vec<u64> = (thaw_turn..300)
        .map(|t| {
            peers[3].played_at[t]
                .saturating_since(peers[0].played_at[t])
                .as_millis()
        })
        .collect();
    let worst = behind.iter().max().copied().unwrap_or(0);
    assert!(
        worst <= 20,
        "frozen peer still {worst} ms behind: {behind:?}"
    );
    // During the freeze it fell behind: what the others played at 10.5 s
    // it played after the thaw at 13 s, all at once.
    let t = peers[0]
        .played_at
        .iter()
        .position(|&t| t >= Instant::from_millis(10_500))
        .unwrap();
    assert!(peers[3].played_at[t] >= Instant::from_millis(13_000));
    assert!(stats(&peers[3], now).backlog_samples > 0);
}

/// Issue #13's goal on uniform links at short turns: p50 command latency
/// at most 1.1x each player's own floor (median RTT plus half a turn), 33 ms
/// turns, 4 players, 5 % loss. Judged on the mean of the players' ratios
/// (each player's p50 rests on ~200 bot commands, a few ms of sampling
/// noise), with each player within 1.15x. It failed with the transport
/// pacing by packet count (~1.2x: the hashes used up the 30 packets/s and
/// inputs and bundles waited for a token).
#[test]
fn short_turns_stay_within_1_1_of_each_players_floor() {
    let link = LinkConfig {
        latency: Duration::from_millis(30),
        jitter: Duration::from_millis(10),
        loss: 0.05,
        ..LinkConfig::default()
    };
    let (turn_ms, turns) = (33u64, 1200u32);
    let turn = Duration::from_millis(turn_ms);
    let (peers, _, now) = clock_match_turns(turn, turns, link, 9, &[PeerClock::default(); 4]);
    assert_same_bundles(&peers, turns);
    let mut ratios = Vec::new();
    for (i, p) in peers.iter().enumerate() {
        let s = stats(p, now);
        let floor = s.rtt_p50.as_millis_f64() + turn_ms as f64 / 2.0;
        let p50 = s.steady_latency_p50.as_millis_f64();
        eprintln!(
            "peer {i}: floor {floor:.1} p50 {p50:.1} ({:.3}x, {} samples, buffer {:?})",
            p50 / floor,
            s.steady_latency_samples,
            s.jitter_buffer
        );
        assert!(s.steady_latency_samples > 100, "{s:?}");
        assert!(p50 <= 1.15 * floor, "peer {i}: p50 {p50} floor {floor}");
        ratios.push(p50 / floor);
    }
    let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
    assert!(mean <= 1.1, "mean p50 / floor {mean:.3}: {ratios:?}");
}
