//! A big battle on the virtual network: 32 players of the reference game,
//! some on far, lossy links, spectators joining and leaving, one player's
//! world forced out of sync. Everything issue 42 bounds at 8 before (seat
//! sets, the grid's owners, start positions, the protocol's player ids and
//! bundle budget) is on the path.

use super::game_peers::record_and_verify;
use super::netsim::{DoneWhen, PeerNode, PeerSpec, RelayNode};
use super::*;
use lockstep::low_level::transport::{Server, TransportConfig};
use lockstep::netsim::harness::{Endpoint, Harness};
use lockstep::netsim::{LinkConfig, Network};
use relay::rejoin_config::RejoinConfig;

const SERVER: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 7000);
const PLAYERS: u8 = sim::MAX_PLAYERS;
const TURNS: u32 = 60;
/// The peer (index) whose world the fault switch perturbs.
const ODD: usize = 13;
const DESYNC_AT: u32 = 40;
/// Peers on far links (150 ms each way, jitter, 5 % loss).
const FAR: [usize; 4] = [3, 8, 21, 30];

fn spec(i: u64, name: String) -> PeerSpec<'static> {
    PeerSpec {
        match_name: "battle",
        players: PLAYERS,
        turns: TURNS,
        bot_seed: 420 + i,
        apm: 300,
        name,
        client_seed: 4200 + i,
        token: None,
        desync_at: (i == ODD as u64).then_some(Turn(DESYNC_AT)),
    }
}

fn run(
    harness: &mut Harness,
    relay: &mut RelayNode,
    players: &mut [PeerNode],
    watchers: &mut [PeerNode],
    until: Instant,
) {
    let mut nodes: Vec<&mut dyn Endpoint> = vec![relay];
    nodes.extend(players.iter_mut().map(|p| p as &mut dyn Endpoint));
    nodes.extend(watchers.iter_mut().map(|p| p as &mut dyn Endpoint));
    let _ = harness.run(&mut nodes, until);
}

/// 32 players and three spectators (one leaves early) over a seeded
/// network: every player plays every turn; the 31 honest ones end on one
/// hash and every turn's hashes are equal among them; the relay and every
/// player name the perturbed one alone (31 against one: a strict
/// majority); the spectators that stayed agree with the honest players on
/// every turn they watched; the relay's recording verifies by
/// re-simulation.
#[test]
fn thirty_two_players_with_spectators_and_a_forced_desync() {
    let start = Instant::from_millis(1);
    let near = LinkConfig {
        latency: Duration::from_millis(10),
        jitter: Duration::from_millis(3),
        ..LinkConfig::default()
    };
    let far = LinkConfig {
        latency: Duration::from_millis(150),
        jitter: Duration::from_millis(20),
        loss: 0.05,
        ..LinkConfig::default()
    };
    let config = RelayConfig {
        rejoin: RejoinConfig {
            snapshot_every: 10,
            spectator_delay: Duration::from_millis(500),
            ..RejoinConfig::default()
        },
        ..RelayConfig::default()
    };
    let mut relay = RelayNode::new(
        Server::new(TransportConfig::default(), [42; 32]),
        config,
        SERVER,
    );
    let addr = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
    let mut players: Vec<PeerNode> = (0..usize::from(PLAYERS))
        .map(|i| {
            let port = 7001 + u16::try_from(i).unwrap();
            PeerNode::new(start, spec(i as u64, format!("p{i}")), SERVER, addr(port))
        })
        .collect();
    let mut harness = Harness::new(Network::new(42, near)).with_start(start);
    for &i in &FAR {
        let a = players[i].addr;
        harness.network_mut().set_link(a, SERVER, far);
        harness.network_mut().set_link(SERVER, a, far);
    }
    let mut watchers: Vec<PeerNode> = Vec::new();
    // Spectators come at 1.5, 2 and 2.5 s (turns 15 to 25 at 100 ms turns).
    for k in 0..3u16 {
        let at = start + Duration::from_millis(1_500 + 500 * u64::from(k));
        run(&mut harness, &mut relay, &mut players, &mut watchers, at);
        let mut w = PeerNode::spectator(
            harness.now(),
            spec(100 + u64::from(k), format!("s{k}")),
            SERVER,
            addr(7100 + k),
        );
        w.done_when = DoneWhen::Settled;
        watchers.push(w);
    }
    // The first spectator leaves a second later; the others watch to the end.
    let at = harness.now() + Duration::from_millis(1_000);
    run(&mut harness, &mut relay, &mut players, &mut watchers, at);
    watchers[0].pilot.peer_mut().leave(harness.now());
    run(
        &mut harness,
        &mut relay,
        &mut players,
        &mut watchers,
        Instant::from_millis(120_000),
    );
    let now = harness.now();
    relay.settle(now);
    for p in players.iter_mut().chain(watchers.iter_mut()) {
        p.settle(now);
    }

    let summaries: Vec<_> = players.iter().map(|p| p.peer().summary(now)).collect();
    let odd = PlayerId(summaries[ODD].player.unwrap());
    let honest: Vec<usize> = (0..players.len()).filter(|&i| i != ODD).collect();
    let seats: std::collections::BTreeSet<u8> =
        summaries.iter().map(|s| s.player.unwrap()).collect();
    assert_eq!(seats, (0..PLAYERS).collect(), "32 distinct seats");
    let hashes = |p: &PeerNode| p.executed.iter().map(|(_, h)| *h).collect::<Vec<_>>();
    let reference = hashes(&players[honest[0]]);
    assert_eq!(reference.len(), TURNS as usize);
    for (i, p) in players.iter().enumerate() {
        let s = &summaries[i];
        assert!(
            s.completed,
            "peer {i}: completed {} turn {:?}",
            s.completed, s.final_turn
        );
        assert_eq!(p.turns, (0..TURNS).collect::<Vec<u32>>(), "peer {i}");
        // Everyone names the perturbed player alone, from its first turn off.
        assert!(!s.desyncs.is_empty(), "peer {i}");
        assert_eq!(s.desyncs[0].turn, DESYNC_AT, "peer {i}");
        assert_eq!(s.desyncs[0].odd_players, vec![odd.0], "peer {i}");
    }
    for &i in &honest {
        assert!(hashes(&players[i]) == reference, "honest peer {i}");
        assert_eq!(summaries[i].final_hash, summaries[honest[0]].final_hash);
    }
    let theirs = hashes(&players[ODD]);
    let split = theirs.iter().zip(&reference).position(|(a, b)| a != b);
    assert_eq!(split, Some(DESYNC_AT as usize));
    // The relay saw 32 reports a turn and named the same one.
    let desyncs: Vec<_> = relay
        .events
        .iter()
        .filter_map(|e| match e {
            RouterEvent::Desync {
                turn,
                hashes,
                odd_players,
                ..
            } => Some((*turn, hashes.len(), odd_players.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(desyncs.first(), Some(&(Turn(DESYNC_AT), 32, vec![odd])));
    // Spectators: the first left early; the others agree with the honest
    // players on every turn they watched and watched to the end.
    let c = relay.router.counters();
    assert_eq!(c.spectators_joined, 3, "{c:?}");
    assert_eq!(c.spectator_hash_mismatches, 0, "{c:?}");
    let first = watchers[0].peer().summary(now);
    assert!(!first.completed, "the first spectator left");
    for (k, w) in watchers.iter().enumerate().skip(1) {
        let s = w.peer().summary(now);
        assert!(s.completed && s.player.is_none(), "spectator {k}: {s:?}");
        let seen = w.turns.iter().zip(hashes(w));
        let mut count = 0;
        for (t, h) in seen {
            assert_eq!(h, reference[*t as usize], "spectator {k} turn {t}");
            count += 1;
        }
        assert!(
            count > 10 && w.turns.last() == Some(&(TURNS - 1)),
            "spectator {k}"
        );
    }
    // The recording follows the majority and verifies.
    let report = record_and_verify(&relay.events, "big-battle");
    assert!(report.verified(), "{report:?}");
    assert_eq!(report.turns, TURNS);
    let named: Vec<u32> = report.recorded_desyncs.iter().map(|d| d.turn.0).collect();
    assert_eq!(named, (DESYNC_AT..TURNS).collect::<Vec<_>>());
    assert!(
        report
            .recorded_desyncs
            .iter()
            .all(|d| d.odd_players() == [odd])
    );
}
