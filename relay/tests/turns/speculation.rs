//! The speculative view never touches the authoritative stream: the same
//! seeded matches (loss, reordering, duplication, jitter, a 3 s freeze of
//! one peer) played with speculation on and off give the same bundles, the
//! same per-turn hashes, the same relay events (so the same recording and
//! the same desync reports) and no desync at all.
//!
//! The default test plays [`SEEDS`] seeds; the benchmark (`bench --only
//! speculation`) plays 1,000.

use super::netsim::{PeerNode, PeerSpec, RelayNode};
use super::*;
use lockstep::low_level::transport::{Server, TransportConfig};
use lockstep::netsim::harness::{Endpoint, Harness};
use lockstep::netsim::skew::Skewed;
use lockstep::netsim::{LinkConfig, Network};
use lockstep::peer::{SpeculationConfig, SpeculationStats};

/// Seeds the default test plays (the benchmark plays 1,000).
const SEEDS: u64 = 100;
/// One rendered frame at 60 fps.
const FRAME: Duration = Duration::from_micros(16_667);

/// A peer with a 60 fps frame timer: at every frame it hands the peer a
/// frame ([`lockstep::peer::Peer::handle_frame`]) if `speculate`, and does
/// nothing else otherwise, so that both runs wake at the same instants.
struct Framed {
    node: PeerNode,
    speculate: bool,
    next_frame: Instant,
}

impl Endpoint for Framed {
    fn addr(&self) -> SocketAddr {
        self.node.addr
    }
    fn pump(&mut self, now: Instant) {
        self.node.pump(now);
    }
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]) {
        self.node.handle_datagram(now, from, bytes);
    }
    fn handle_timeout(&mut self, now: Instant) {
        self.node.handle_timeout(now);
        if now < self.next_frame {
            return;
        }
        while self.next_frame <= now {
            self.next_frame += FRAME;
        }
        if self.speculate {
            // The frame's own work, measured on a virtual clock: every
            // reading 50 µs later.
            let mut t = now;
            let mut clock = move || {
                t += Duration::from_micros(50);
                t
            };
            let _ = self.node.pilot.peer_mut().handle_frame(now, &mut clock);
        }
    }
    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<SocketAddr> {
        self.node.poll_transmit(now, buf)
    }
    fn poll_timeout(&mut self) -> Option<Instant> {
        [self.node.poll_timeout(), Some(self.next_frame)]
            .into_iter()
            .flatten()
            .min()
    }
    fn is_done(&self) -> bool {
        self.node.is_done()
    }
}

/// What one run leaves to compare: per peer every turn's inputs and hash,
/// the relay's events (what its recorder writes and its desync reports),
/// and the speculation counters.
struct Run {
    executed: Vec<Vec<(Vec<sim::Stamped<sim::game::Command>>, StateHash)>>,
    events: Vec<String>,
    desyncs: usize,
    stats: Vec<Option<SpeculationStats>>,
}

/// Two reference-game peers with bots over impaired links; on seeds
/// divisible by 3 the second peer is frozen for 3 s from 2 s in.
fn run(seed: u64, turns: u32, speculate: bool) -> Run {
    let start = Instant::from_millis(1);
    let server_addr = SocketAddr::from(([127, 0, 0, 1], 7000));
    let server = Server::new(TransportConfig::default(), [seed as u8; 32]);
    // One salt for both runs: the match instances' nonces (in the events
    // compared) are then equal.
    let config = RelayConfig {
        rejoin: relay::rejoin_config::RejoinConfig {
            nonce_salt: [0; 32],
            ..Default::default()
        },
        ..RelayConfig::default()
    };
    let mut relay = RelayNode::new(server, config, server_addr);
    let mut nodes: Vec<Skewed<Framed>> = (0..2u64)
        .map(|i| {
            let spec = PeerSpec {
                match_name: "spec",
                players: 2,
                turns,
                bot_seed: seed * 2 + i,
                apm: 600,
                name: format!("p{i}"),
                client_seed: seed * 10 + i,
                token: None,
                desync_at: None,
            };
            let addr = SocketAddr::from(([127, 0, 0, 1], 7001 + i as u16));
            let node = PeerNode::with(start, spec, server_addr, addr, |b| {
                if speculate {
                    b.with_speculation(SpeculationConfig::default())
                } else {
                    b
                }
            });
            let framed = Skewed::new(Framed {
                node,
                speculate,
                next_frame: start,
            });
            if i == 1 && seed % 3 == 0 {
                framed.with_freeze(Instant::from_millis(2_000), Instant::from_millis(5_000))
            } else {
                framed
            }
        })
        .collect();
    let link = LinkConfig {
        latency: Duration::from_millis(10 + seed % 60),
        jitter: Duration::from_millis(seed % 20),
        loss: 0.05,
        duplicate: 0.02,
        reorder: 0.05,
        ..LinkConfig::default()
    };
    let mut harness = Harness::new(Network::new(seed, link)).with_start(start);
    {
        let mut eps: Vec<&mut dyn Endpoint> = vec![&mut relay];
        eps.extend(nodes.iter_mut().map(|n| n as &mut dyn Endpoint));
        let _ = harness.run(&mut eps, Instant::from_millis(60_000));
    }
    let now = harness.now();
    relay.settle(now);
    for n in &mut nodes {
        n.inner_mut().node.settle(now);
    }
    Run {
        executed: nodes
            .iter()
            .map(|n| n.inner().node.executed.clone())
            .collect(),
        events: relay.events.iter().map(|e| format!("{e:?}")).collect(),
        desyncs: relay
            .events
            .iter()
            .filter(|e| matches!(e, RouterEvent::Desync { .. }))
            .count(),
        stats: nodes
            .iter()
            .map(|n| n.inner().node.peer().speculation().map(|s| s.stats()))
            .collect(),
    }
}

#[test]
fn speculation_on_and_off_give_the_same_authoritative_stream() {
    let turns = 70;
    let mut shown = 0;
    let mut corrections = 0;
    for seed in 0..SEEDS {
        let off = run(seed, turns, false);
        let on = run(seed, turns, true);
        for (i, (a, b)) in off.executed.iter().zip(&on.executed).enumerate() {
            assert_eq!(
                a.len(),
                turns as usize,
                "seed {seed} peer {i} did not finish"
            );
            assert!(
                a == b,
                "seed {seed} peer {i}: turns differ with speculation"
            );
        }
        assert_eq!(off.events, on.events, "seed {seed}: relay events differ");
        assert_eq!((off.desyncs, on.desyncs), (0, 0), "seed {seed}: a desync");
        assert!(off.stats.iter().all(Option::is_none));
        for s in on.stats.iter().flatten() {
            assert!(s.frames > 0 && s.compared_turns > 0, "seed {seed}: {s:?}");
            shown += s.shown;
            corrections += s.corrections;
        }
    }
    // The bots' commands were shown speculatively, and the other bot's
    // (predicted as none) were corrected.
    assert!(shown > SEEDS, "{shown}");
    assert!(corrections > 0);
}
