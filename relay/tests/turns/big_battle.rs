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
/// The player that vanishes at 2.5 s and whose slot a new peer takes back
/// at 4 s (the last, so the others keep their indices).
const REJOINER: usize = PLAYERS as usize - 1;

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
/// network, one player vanishing at 2.5 s and a new peer taking its slot
/// back with its secret at 4 s: every other player plays every turn; the
/// honest ones end on one hash and every turn's hashes are equal among
/// them, the rejoined peer's too from its snapshot on; the relay and every
/// player name the perturbed one alone (31 against one: a strict
/// majority); the spectators that stayed agree with the honest players on
/// every turn they watched; the relay's recording verifies by
/// re-simulation.
#[test]
fn thirty_two_players_with_spectators_a_rejoin_and_a_forced_desync() {
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
        silence_timeout: Duration::from_secs(1),
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
    // The last player vanishes (no longer pumped: a killed process) ...
    let mut gone = players.pop().unwrap();
    gone.settle(harness.now());
    let (slot, secret) = gone.secret.expect("the relay gave every player its secret");
    // The first spectator leaves a second after it came; the others watch
    // to the end.
    let at = start + Duration::from_millis(2_500);
    run(&mut harness, &mut relay, &mut players, &mut watchers, at);
    watchers[0].pilot.peer_mut().leave(harness.now());
    run(
        &mut harness,
        &mut relay,
        &mut players,
        &mut watchers,
        start + Duration::from_millis(4_000),
    );
    // ... and a new peer comes back into its slot from another address.
    players.push(PeerNode::build(
        harness.now(),
        spec(REJOINER as u64, format!("p{REJOINER}")),
        SERVER,
        addr(7200),
        Some((slot, secret)),
    ));
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
    assert_eq!(seats.len(), usize::from(PLAYERS));
    assert_eq!(
        summaries[REJOINER].player,
        Some(slot.0),
        "the rejoiner has the slot"
    );
    for (i, p) in players.iter().enumerate() {
        let s = &summaries[i];
        assert!(
            s.completed,
            "peer {i}: completed {} turn {:?}",
            s.completed, s.final_turn
        );
        if i == REJOINER {
            // From the snapshot it restored to the end, every turn.
            let from = p.turns[0];
            assert!(from > 0 && from < DESYNC_AT, "rejoined from turn {from}");
            assert_eq!(p.turns, (from..TURNS).collect::<Vec<u32>>());
            assert_eq!(s.rejoins, 1, "{s:?}");
        } else {
            assert_eq!(p.turns, (0..TURNS).collect::<Vec<u32>>(), "peer {i}");
        }
        // Everyone names the perturbed player alone, from its first turn off.
        assert!(!s.desyncs.is_empty(), "peer {i}");
        assert_eq!(s.desyncs[0].turn, DESYNC_AT, "peer {i}");
        assert_eq!(s.desyncs[0].odd_players, vec![odd.0], "peer {i}");
    }
    for &i in &honest {
        let theirs = hashes(&players[i]);
        let from = players[i].turns[0] as usize;
        assert!(theirs == reference[from..], "honest peer {i}");
        assert_eq!(summaries[i].final_hash, summaries[honest[0]].final_hash);
    }
    let c = relay.router.counters();
    assert_eq!((c.drops, c.rejoins), (1, 1), "{c:?}");
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

/// One spectator as [`spectated_battle`] saw it.
struct Spectated {
    /// It was to watch to the end (the other half leaves early).
    stays: bool,
    /// Its match completed.
    completed: bool,
    /// The turns it simulated and the hash after each.
    seen: Vec<(u32, StateHash)>,
}

/// What [`spectated_battle`] saw.
struct Watched {
    /// Per player: (turn, when it was played, hash after it).
    players: Vec<Vec<(u32, Instant, StateHash)>>,
    spectators: Vec<Spectated>,
    counters: relay::RouterCounters,
    /// The relay's snapshot store at its largest (snapshots, uploads, tail):
    /// one copy however many watch.
    snapshot_bytes_peak: usize,
}

const WAVES: usize = 4;
const WATCH_TURNS: u32 = 80;

/// 32 bots over equal, lossless, jitter-free 10 ms links (so the players'
/// timing depends on the protocol alone, not on the network's draws), with
/// `spectators` joining in [`WAVES`] waves from 1.5 s, one wave a second;
/// half of each wave leaves a second after joining, the rest watch to the
/// end.
fn spectated_battle(spectators: usize) -> Watched {
    let start = Instant::from_millis(1);
    let link = LinkConfig {
        latency: Duration::from_millis(10),
        ..LinkConfig::default()
    };
    let config = RelayConfig {
        rejoin: RejoinConfig {
            snapshot_every: 20,
            spectator_delay: Duration::from_millis(500),
            ..RejoinConfig::default()
        },
        ..RelayConfig::default()
    };
    // Room for every player and spectator (the transport's default is 64
    // connections; `relay serve --max-connections` defaults higher).
    let transport = TransportConfig {
        max_connections: 512,
        ..TransportConfig::default()
    };
    let mut relay = RelayNode::new(Server::new(transport, [24; 32]), config, SERVER);
    // Four players' bots give orders; the others' stand by. Every peer,
    // each spectator too, computes the flow field of every order's
    // destination on the 32-player map (Dijkstra over 65,536 tiles): with
    // all 32 bots busy that was most of the test's time.
    let spec = |i: u64, name: String| PeerSpec {
        turns: WATCH_TURNS,
        desync_at: None,
        apm: if i < 4 { 120 } else { 0 },
        ..self::spec(i, name)
    };
    let mut players: Vec<PeerNode> = (0..u16::from(PLAYERS))
        .map(|i| {
            let addr = SocketAddr::from(([127, 0, 0, 1], 7001 + i));
            PeerNode::new(start, spec(u64::from(i), format!("p{i}")), SERVER, addr)
        })
        .collect();
    let mut harness = Harness::new(Network::new(24, link)).with_start(start);
    let mut watchers: Vec<PeerNode> = Vec::new();
    let mut leaving: Vec<(Instant, usize)> = Vec::new();
    let mut snapshot_bytes_peak = 0;
    let per_wave = spectators.div_ceil(WAVES);
    let mut at = start;
    let end = Instant::from_millis(60_000);
    while at < end && !players.iter().all(|p| p.peer().is_done()) {
        at += Duration::from_millis(100);
        run(&mut harness, &mut relay, &mut players, &mut watchers, at);
        let now = harness.now();
        snapshot_bytes_peak = snapshot_bytes_peak.max(relay.memory_use().snapshots);
        // Waves at 1.5, 2.5, 3.5 and 4.5 s.
        let wave = now
            .saturating_since(start)
            .as_millis()
            .saturating_sub(1_500)
            / 1_000;
        let due = if now.saturating_since(start) >= Duration::from_millis(1_500) {
            (usize::try_from(wave).unwrap() + 1).min(WAVES) * per_wave
        } else {
            0
        };
        while watchers.len() < due.min(spectators) {
            let k = watchers.len();
            let addr = SocketAddr::from(([127, 0, 1 + (k / 200) as u8, (k % 200) as u8], 9000));
            let mut w =
                PeerNode::spectator(now, spec(1000 + k as u64, format!("s{k}")), SERVER, addr);
            w.done_when = DoneWhen::Settled;
            if k % 2 == 0 {
                leaving.push((now + Duration::from_secs(1), k));
            }
            watchers.push(w);
        }
        for &(when, k) in &leaving {
            if when <= now && !watchers[k].peer().is_done() {
                watchers[k].pilot.peer_mut().leave(now);
            }
        }
    }
    // A few seconds more: spectators watch half a second behind.
    let until = harness.now() + Duration::from_secs(3);
    run(&mut harness, &mut relay, &mut players, &mut watchers, until);
    let now = harness.now();
    relay.settle(now);
    for p in players.iter_mut().chain(watchers.iter_mut()) {
        p.settle(now);
    }
    let left: std::collections::BTreeSet<usize> = leaving.iter().map(|&(_, k)| k).collect();
    Watched {
        players: players
            .iter()
            .map(|p| {
                p.turns
                    .iter()
                    .zip(&p.played_at)
                    .zip(&p.executed)
                    .map(|((t, at), (_, h))| (*t, *at, *h))
                    .collect()
            })
            .collect(),
        spectators: watchers
            .iter()
            .enumerate()
            .map(|(k, w)| {
                let seen = w
                    .turns
                    .iter()
                    .zip(&w.executed)
                    .map(|(t, (_, h))| (*t, *h))
                    .collect();
                Spectated {
                    stays: !left.contains(&k),
                    completed: w.peer().summary(now).completed,
                    seen,
                }
            })
            .collect(),
        counters: relay.router.counters().clone(),
        snapshot_bytes_peak,
    }
}

/// 256 spectators join a 32-player match in four waves, half of them
/// leave again a second later, and no player notices: every player plays
/// every turn at the same instant and to the same hash as in the same
/// match without spectators (the links are lossless and jitter-free, so
/// only the protocol could make a difference). Every spectator that stayed
/// saw every turn from its snapshot to the last on the players' hashes;
/// the relay counted 256 spectators and no mismatch, and its snapshot
/// store stayed one copy: no larger than without spectators beyond the
/// spectator delay's turns it keeps for them.
#[test]
fn two_hundred_fifty_six_spectators_join_and_leave_without_stalling_a_player() {
    let alone = spectated_battle(0);
    let watched = spectated_battle(256);
    assert_eq!(alone.players.len(), usize::from(PLAYERS));
    let reference = &alone.players[0];
    assert_eq!(reference.len(), WATCH_TURNS as usize);
    for (i, (a, w)) in alone.players.iter().zip(&watched.players).enumerate() {
        assert_eq!(a.len(), WATCH_TURNS as usize, "player {i}");
        for ((ta, at_a, ha), (tw, at_w, hw)) in a.iter().zip(w) {
            assert_eq!((ta, ha), (tw, hw), "player {i}");
            assert_eq!(
                at_a, at_w,
                "player {i} turn {ta}: played later with spectators"
            );
        }
        let hashes: Vec<_> = a.iter().map(|x| x.2).collect();
        let first: Vec<_> = reference.iter().map(|x| x.2).collect();
        assert_eq!(hashes, first, "player {i}");
    }
    let c = &watched.counters;
    assert_eq!(c.spectators_joined, 256, "{c:?}");
    assert_eq!(c.spectator_hash_mismatches, 0, "{c:?}");
    let by_turn: std::collections::HashMap<u32, StateHash> =
        reference.iter().map(|&(t, _, h)| (t, h)).collect();
    let mut stayed = 0;
    for (k, w) in watched.spectators.iter().enumerate() {
        let seen = &w.seen;
        for (t, h) in seen {
            assert_eq!(Some(h), by_turn.get(t), "spectator {k} turn {t}");
        }
        if w.stays {
            stayed += 1;
            assert!(w.completed, "spectator {k}");
            assert_eq!(
                seen.last().map(|s| s.0),
                Some(WATCH_TURNS - 1),
                "spectator {k}"
            );
            let turns: Vec<u32> = seen.iter().map(|s| s.0).collect();
            let from = turns[0];
            assert_eq!(
                turns,
                (from..WATCH_TURNS).collect::<Vec<_>>(),
                "spectator {k}"
            );
        } else {
            assert!(!w.completed, "spectator {k} left");
        }
    }
    assert_eq!(stayed, 128);
    assert!(
        watched.snapshot_bytes_peak <= 2 * alone.snapshot_bytes_peak.max(1),
        "one copy of the snapshots: {} with 256 spectators, {} without",
        watched.snapshot_bytes_peak,
        alone.snapshot_bytes_peak
    );
}
