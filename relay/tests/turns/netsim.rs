//! The full stack (sessions, glue, transport endpoints, router) over a
//! seeded `lockstep::netsim::Network`.

use super::*;

/// What a peer saw in a match over the simulated network.
struct NetPeer {
    peer: relay::peer::GamePeer,
    client: lockstep::transport::Client,
    glue: lockstep::peer_glue::PeerGlue,
    addr: SocketAddr,
    turns: Vec<u32>,
    delay_changes: Vec<(u8, Turn)>,
}

/// Relay + N reference-game peers over real transport endpoints and a
/// seeded `netsim::Network` (loss, duplication, reordering, jitter).
fn netsim_match(
    n: usize,
    turns: u32,
    link: lockstep::netsim::LinkConfig,
    seed: u64,
) -> (Vec<NetPeer>, Vec<RouterEvent>, Instant) {
    netsim_match_with(n, turns, link, seed, None, RelayConfig::default())
}

/// As [`netsim_match`], with one peer's link (both ways) replaced.
fn netsim_match_with(
    n: usize,
    turns: u32,
    link: lockstep::netsim::LinkConfig,
    seed: u64,
    lagger: Option<(usize, lockstep::netsim::LinkConfig)>,
    config: RelayConfig,
) -> (Vec<NetPeer>, Vec<RouterEvent>, Instant) {
    use lockstep::netsim::Network;
    use lockstep::transport::{Client, Server, TransportConfig};
    use relay::peer::{GamePeer, PeerConfig};
    let mut now = Instant::from_millis(1);
    let server_addr = SocketAddr::from(([127, 0, 0, 1], 7000));
    let mut net = Network::new(seed, link);
    let mut server = Server::new(TransportConfig::default(), [seed as u8; 32]);
    let mut router = Router::new(config);
    let mut rglue = relay::server::RouterGlue::new();
    let mut peers: Vec<NetPeer> = (0..n)
        .map(|i| NetPeer {
            peer: GamePeer::new(
                now,
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
            .unwrap(),
            client: Client::new(
                now,
                server_addr,
                TransportConfig::default(),
                seed * 31 + i as u64,
            ),
            glue: lockstep::peer_glue::PeerGlue::new(),
            addr: SocketAddr::from(([127, 0, 0, 1], 7001 + i as u16)),
            turns: Vec::new(),
            delay_changes: Vec::new(),
        })
        .collect();
    if let Some((i, cfg)) = lagger {
        let addr = SocketAddr::from(([127, 0, 0, 1], 7001 + i as u16));
        net.set_link(addr, server_addr, cfg);
        net.set_link(server_addr, addr, cfg);
    }
    let mut events = Vec::new();
    let mut buf = Vec::new();
    let limit = Instant::from_millis(180_000);
    while now < limit && !peers.iter().all(|p| p.peer.is_done()) {
        rglue.pump(now, &mut router, &mut server);
        events.extend(std::iter::from_fn(|| router.poll_event()));
        for p in &mut peers {
            p.glue.pump(now, p.peer.session(), &mut p.client);
            p.peer.pump(now);
            p.glue.pump(now, p.peer.session(), &mut p.client);
            for ev in p.peer.take_log() {
                match ev {
                    Event::TurnReady { turn, .. } => p.turns.push(turn.0),
                    Event::InputDelayChanged { delay, from_turn } => {
                        p.delay_changes.push((delay, from_turn));
                    }
                    _ => {}
                }
            }
        }
        rglue.pump(now, &mut router, &mut server);
        events.extend(std::iter::from_fn(|| router.poll_event()));
        while let Some(to) = server.poll_transmit(now, &mut buf) {
            net.send(now, server_addr, to, &buf);
        }
        for p in &mut peers {
            while let Some(to) = p.client.poll_transmit(now, &mut buf) {
                net.send(now, p.addr, to, &buf);
            }
        }
        let mut next = net.next_delivery();
        let mut at = |t: Option<Instant>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n: Instant| n.min(t)));
            }
        };
        at(server.poll_timeout());
        at(router.poll_timeout());
        for p in &mut peers {
            at(p.client.poll_timeout());
            at(p.peer.session().poll_timeout());
        }
        let Some(next) = next else { break };
        // Never stand still: a timer that is already due gets handled below.
        now = next.max(now + Duration::from_micros(100));
        while let Some((from, to, bytes)) = net.poll_deliver(now) {
            if to == server_addr {
                server.handle_datagram(now, from, &bytes);
            } else if let Some(p) = peers.iter_mut().find(|p| p.addr == to) {
                p.client.handle_datagram(now, from, &bytes);
            }
        }
        server.handle_timeout(now);
        router.handle_timeout(now);
        for p in &mut peers {
            p.client.handle_timeout(now);
            p.peer.session().handle_timeout(now);
        }
    }
    for p in &mut peers {
        p.glue.pump(now, p.peer.session(), &mut p.client);
        p.peer.pump(now);
    }
    (peers, events, now)
}

#[test]
fn over_netsim_with_loss_dup_and_reorder_every_peer_plays_every_turn_once() {
    let link = lockstep::netsim::LinkConfig {
        latency: Duration::from_millis(40),
        jitter: Duration::from_millis(20),
        loss: 0.10,
        duplicate: 0.05,
        reorder: 0.10,
        ..lockstep::netsim::LinkConfig::default()
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
    let lag = lockstep::netsim::LinkConfig::with_latency(Duration::from_millis(250));
    let config = RelayConfig {
        adaptive_delay: false,
        ..RelayConfig::default()
    };
    let (peers, _, now) = netsim_match_with(
        3,
        100,
        lockstep::netsim::LinkConfig::with_latency(Duration::from_millis(1)),
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
    let link = lockstep::netsim::LinkConfig {
        latency: Duration::from_millis(30),
        jitter: Duration::from_millis(10),
        loss: 0.20,
        ..lockstep::netsim::LinkConfig::default()
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
