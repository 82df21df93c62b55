//! Rejoin on the virtual network: a peer vanishes mid-match (its process
//! "killed": it is no longer pumped), the relay drops it and holds its slot,
//! and a new peer comes back into that slot with the secret, restores the
//! relay's agreed snapshot, fast-forwards and plays to the end. Its hashes
//! equal everyone's for every turn it simulated; refusals are typed.

use super::netsim::{PeerNode, PeerSpec, RelayNode};
use super::*;
use lockstep::low_level::proto::{RejectReason, RejoinSecret};
use lockstep::low_level::transport::{Server, TransportConfig};
use lockstep::netsim::harness::{Endpoint, Harness};
use lockstep::netsim::{LinkConfig, Network};
use lockstep::peer::PeerSummary;
use relay::rejoin_config::RejoinConfig;

const SERVER: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 7000);

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn spec(players: u8, turns: u32, i: u64, seed: u64) -> PeerSpec<'static> {
    PeerSpec {
        match_name: "rejoin",
        players,
        turns,
        bot_seed: seed * 10 + i,
        apm: 300,
        name: format!("p{i}"),
        client_seed: seed * 100 + i,
        token: None,
        desync_at: None,
    }
}

fn config() -> RelayConfig {
    RelayConfig {
        silence_timeout: Duration::from_secs(1),
        rejoin: RejoinConfig {
            snapshot_every: 20,
            key: relay::rejoin_config::RejoinKey::from_bytes(&[5; 32]).unwrap(),
            ..RejoinConfig::default()
        },
        ..RelayConfig::default()
    }
}

/// One run: `players` peers, peer `victim` vanishes at `kill_ms` and a new
/// peer rejoins its slot at `rejoin_ms` with `secret` (`None`: the real one).
struct Run {
    peers: Vec<PeerNode>,
    rejoiner: PeerNode,
    relay: RelayNode,
    now: Instant,
}

/// Peer `victim` vanishes at `kill_ms`; its replacement comes at `rejoin_ms`.
#[derive(Clone, Copy)]
struct Kill {
    victim: usize,
    kill_ms: u64,
    rejoin_ms: u64,
}

fn run(
    link: LinkConfig,
    seed: u64,
    players: u8,
    turns: u32,
    kill: Kill,
    wrong: Option<(PlayerId, RejoinSecret)>,
) -> Run {
    let Kill {
        victim,
        kill_ms,
        rejoin_ms,
    } = kill;
    let start = Instant::from_millis(1);
    let server = Server::new(TransportConfig::default(), [seed as u8; 32]);
    let mut relay = RelayNode::new(server, config(), SERVER);
    let mut peers: Vec<PeerNode> = (0..u64::from(players))
        .map(|i| {
            PeerNode::new(
                start,
                spec(players, turns, i, seed),
                SERVER,
                addr(7001 + i as u16),
            )
        })
        .collect();
    let mut harness = Harness::new(Network::new(seed, link)).with_start(start);
    {
        let mut nodes: Vec<&mut dyn Endpoint> = vec![&mut relay];
        nodes.extend(peers.iter_mut().map(|p| p as &mut dyn Endpoint));
        harness.run(&mut nodes, Instant::from_millis(kill_ms));
    }
    peers[victim].settle(harness.now());
    let secret = wrong.or(peers[victim].secret);
    let (player, secret) = secret.expect("the relay gave the victim its secret");
    {
        let mut nodes: Vec<&mut dyn Endpoint> = vec![&mut relay];
        for (i, p) in peers.iter_mut().enumerate() {
            if i != victim {
                nodes.push(p);
            }
        }
        harness.run(&mut nodes, Instant::from_millis(rejoin_ms));
    }
    let mut rejoiner = PeerNode::build(
        harness.now(),
        spec(players, turns, victim as u64, seed + 1),
        SERVER,
        addr(7100),
        Some((player, secret)),
    );
    {
        let mut nodes: Vec<&mut dyn Endpoint> = vec![&mut relay, &mut rejoiner];
        for (i, p) in peers.iter_mut().enumerate() {
            if i != victim {
                nodes.push(p);
            }
        }
        harness.run(&mut nodes, Instant::from_millis(180_000));
    }
    let now = harness.now();
    relay.settle(now);
    rejoiner.settle(now);
    for p in &mut peers {
        p.settle(now);
    }
    Run {
        peers,
        rejoiner,
        relay,
        now,
    }
}

/// Hash after each turn a peer simulated, by turn.
fn hashes(p: &PeerNode) -> BTreeMap<u32, StateHash> {
    p.turns
        .iter()
        .zip(&p.executed)
        .map(|(t, (_, h))| (*t, *h))
        .collect()
}

/// Property, at random kill and rejoin times under loss: the rejoined peer
/// restores an agreed snapshot (not turn 0), simulates every later turn to
/// the end, and its hash equals the players' after every one of them; the
/// relay records the drop and the rejoin and never sees a desync.
#[test]
fn a_rejoined_peer_agrees_with_the_players_on_every_later_turn() {
    let link = LinkConfig {
        latency: Duration::from_millis(25),
        jitter: Duration::from_millis(5),
        loss: 0.05,
        ..LinkConfig::default()
    };
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    for seed in 1..=3u64 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let kill_ms = 4_000 + rng % 4_000;
        let rejoin_ms = kill_ms + 2_000 + (rng >> 20) % 3_000;
        let turns = 200;
        let r = run(
            link,
            seed,
            3,
            turns,
            Kill {
                victim: 1,
                kill_ms,
                rejoin_ms,
            },
            None,
        );
        let ctx = format!("seed {seed} kill {kill_ms} rejoin {rejoin_ms}");
        let reference = hashes(&r.peers[0]);
        assert_eq!(reference.len(), turns as usize, "{ctx}");
        assert_eq!(hashes(&r.peers[2]), reference, "{ctx}");
        let back = hashes(&r.rejoiner);
        let first = *back.keys().next().expect("the rejoiner simulated turns");
        assert!(first > 0, "restored from a snapshot, not turn 0: {ctx}");
        assert_eq!(
            back.keys().copied().collect::<Vec<_>>(),
            (first..turns).collect::<Vec<_>>(),
            "{ctx}"
        );
        for (t, h) in &back {
            assert_eq!(Some(h), reference.get(t), "turn {t}: {ctx}");
        }
        let s: PeerSummary = r.rejoiner.peer().summary(r.now);
        assert!(s.completed && s.desyncs.is_empty(), "{ctx}: {s:?}");
        assert_eq!(s.rejoins, 1, "{ctx}");
        let events = &r.relay.events;
        let victim = r.peers[1].secret.unwrap().0;
        let dropped = events
            .iter()
            .any(|e| matches!(e, RouterEvent::Dropped { player, .. } if *player == victim));
        let rejoined = events.iter().find_map(|e| match e {
            RouterEvent::Rejoined { player, turn, .. } if *player == victim => Some(*turn),
            _ => None,
        });
        assert!(dropped, "{ctx}");
        let rejoined = rejoined.expect("the relay saw the catch-up");
        assert!(rejoined.0 > first && rejoined.0 < turns, "{ctx}");
        assert!(
            !events
                .iter()
                .any(|e| matches!(e, RouterEvent::Desync { .. })),
            "{ctx}"
        );
        let c = r.relay.router.counters();
        eprintln!(
            "{ctx}: restored after turn {}, caught up at {rejoined}, rejoin {:?} ms, {} snapshots agreed",
            first - 1,
            s.rejoin_ms,
            c.snapshots_agreed
        );
        assert!(c.snapshots_agreed >= 1 && c.rejoins == 1, "{ctx}: {c:?}");
        // Hash checks resumed for the rejoined player: from its catch-up on
        // every turn was judged with three reports (none disputed).
        assert!(
            c.hash_reports >= u64::from(turns) * 2 + u64::from(turns - rejoined.0),
            "{ctx}: {c:?} rejoined at {rejoined:?} first {first}"
        );
    }
}

/// Spectators joining at seeded random times under loss: each restores the
/// agreed snapshot, simulates every later turn with the players' hashes and
/// ends on the final hash; the relay checked their reports (none differed);
/// one over the cap is refused with `SpectatorsFull`.
#[test]
fn spectators_watch_from_the_snapshot_and_agree_on_every_turn() {
    let link = LinkConfig {
        latency: Duration::from_millis(25),
        jitter: Duration::from_millis(5),
        loss: 0.05,
        ..LinkConfig::default()
    };
    let start = Instant::from_millis(1);
    let mut config = config();
    config.rejoin.max_spectators = 2;
    let mut relay = RelayNode::new(
        Server::new(TransportConfig::default(), [3; 32]),
        config,
        SERVER,
    );
    let turns = 200;
    let mut players: Vec<PeerNode> = (0..3)
        .map(|i| PeerNode::new(start, spec(3, turns, i, 7), SERVER, addr(7001 + i as u16)))
        .collect();
    let mut harness = Harness::new(Network::new(7, link)).with_start(start);
    let mut watchers: Vec<PeerNode> = Vec::new();
    let mut rng = 0x9e37_79b9_u64;
    for k in 0..3u16 {
        rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let at = harness.now() + Duration::from_millis(2_000 + (rng >> 33) % 3_000);
        let mut nodes: Vec<&mut dyn Endpoint> = vec![&mut relay];
        nodes.extend(players.iter_mut().map(|p| p as &mut dyn Endpoint));
        nodes.extend(watchers.iter_mut().map(|p| p as &mut dyn Endpoint));
        harness.run(&mut nodes, at);
        let mut w = PeerNode::spectator(
            harness.now(),
            spec(3, turns, 10 + u64::from(k), 7),
            SERVER,
            addr(7200 + k),
        );
        w.done_when = super::netsim::DoneWhen::Settled;
        watchers.push(w);
    }
    {
        let mut nodes: Vec<&mut dyn Endpoint> = vec![&mut relay];
        nodes.extend(players.iter_mut().map(|p| p as &mut dyn Endpoint));
        nodes.extend(watchers.iter_mut().map(|p| p as &mut dyn Endpoint));
        harness.run(&mut nodes, Instant::from_millis(180_000));
    }
    let now = harness.now();
    relay.settle(now);
    for p in players.iter_mut().chain(watchers.iter_mut()) {
        p.settle(now);
    }
    let reference = hashes(&players[0]);
    assert_eq!(reference.len(), turns as usize);
    for (k, w) in watchers.iter().take(2).enumerate() {
        let seen = hashes(w);
        let first = *seen.keys().next().expect("the spectator simulated turns");
        assert_eq!(
            seen.keys().copied().collect::<Vec<_>>(),
            (first..turns).collect::<Vec<_>>(),
            "spectator {k}"
        );
        for (t, h) in &seen {
            assert_eq!(Some(h), reference.get(t), "spectator {k} turn {t}");
        }
        let s = w.peer().summary(now);
        assert!(
            s.completed && s.desyncs.is_empty() && s.player.is_none(),
            "{s:?}"
        );
    }
    let third = watchers[2].peer().summary(now);
    assert_eq!(
        third.refused.map(|r| r.reason),
        Some(RejectReason::SpectatorsFull)
    );
    let c = relay.router.counters();
    assert_eq!(c.spectators_joined, 2);
    assert_eq!(c.spectator_hash_mismatches, 0);
    assert!(c.spectator_hashes_verified > 100, "{c:?}");
    // Every report was checked: the agreed hashes a match keeps while
    // nobody watches (from the snapshot base on) held every turn the
    // spectators, joining from that base, went on to report.
    assert_eq!(c.spectator_hashes_unchecked, 0, "{c:?}");
    // They never counted for the players: every turn agreed among three.
    assert!(
        !relay
            .events
            .iter()
            .any(|e| matches!(e, RouterEvent::Desync { .. }))
    );
}

/// On a clean link nobody else waits while a player rejoins: the players'
/// stall stays zero through the drop, the snapshot transfer and the catch-up.
#[test]
fn nobody_else_stalls_while_a_player_rejoins() {
    let link = LinkConfig::with_latency(Duration::from_millis(10));
    let r = run(
        link,
        9,
        3,
        150,
        Kill {
            victim: 2,
            kill_ms: 5_000,
            rejoin_ms: 8_000,
        },
        None,
    );
    for p in [&r.peers[0], &r.peers[1]] {
        let s = p.peer().summary(r.now);
        assert!(s.completed, "{s:?}");
        assert_eq!(s.stall_ms, 0.0, "{s:?}");
    }
    let s = r.rejoiner.peer().summary(r.now);
    assert!(s.completed && s.rejoins == 1, "{s:?}");
    assert_eq!(s.final_hash, r.peers[0].peer().summary(r.now).final_hash);
}

/// A rejoin with another slot's secret is refused with `WrongSecret`, and
/// the match goes on without it.
#[test]
fn a_rejoin_with_the_wrong_secret_is_refused() {
    let link = LinkConfig::with_latency(Duration::from_millis(10));
    let r = run(
        link,
        4,
        2,
        80,
        Kill {
            victim: 1,
            kill_ms: 3_000,
            rejoin_ms: 5_000,
        },
        Some((PlayerId(1), RejoinSecret([0; 16]))),
    );
    let s = r.rejoiner.peer().summary(r.now);
    assert_eq!(s.refused.map(|x| x.reason), Some(RejectReason::WrongSecret));
    assert!(r.peers[0].peer().summary(r.now).completed);
    assert_eq!(r.relay.router.counters().rejoins_refused, 1);
}
