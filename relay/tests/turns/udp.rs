//! The demo over real loopback UDP (threads, bounded time).

use super::*;

/// The one-command match over real loopback UDP, short and fast (20 ms turns).
fn quick_demo(desync: Option<(u32, u8)>, tag: &str) -> relay::demo::DemoReport {
    quick_demo_with(desync, None, tag)
}

/// The same with a chosen game (its bot at its default APM).
fn quick_demo_of(
    game: relay::demo::DemoGame,
    desync: Option<(u32, u8)>,
    tag: &str,
) -> relay::demo::DemoReport {
    quick_demo_config(game, desync, None, tag)
}

/// Enough turns that a crash and its detection happen well inside the match.
fn turns(vanish: Option<(u8, Duration)>) -> u32 {
    if vanish.is_some() { 150 } else { 60 }
}

fn quick_demo_with(
    desync: Option<(u32, u8)>,
    vanish: Option<(u8, Duration)>,
    tag: &str,
) -> relay::demo::DemoReport {
    quick_demo_config(relay::demo::DemoGame::Rts, desync, vanish, tag)
}

fn quick_demo_config(
    game: relay::demo::DemoGame,
    desync: Option<(u32, u8)>,
    vanish: Option<(u8, Duration)>,
    tag: &str,
) -> relay::demo::DemoReport {
    let dir = std::env::temp_dir().join(format!("turns-demo-{}-{tag}", std::process::id()));
    let config = relay::demo::DemoConfig {
        game,
        peers: 3,
        turns: turns(vanish),
        relay: RelayConfig {
            turn_length: Duration::from_millis(20),
            // Long enough that a peer thread starved by a loaded CI machine is
            // not mistaken for a crash; the crash test still detects its drop
            // well inside its 3 s match.
            silence_timeout: Duration::from_millis(if vanish.is_some() { 1000 } else { 3000 }),
            ..RelayConfig::default()
        },
        impair: Some(lockstep::netsim::LinkConfig {
            latency: Duration::from_millis(5),
            jitter: Duration::from_millis(2),
            loss: 0.05,
            ..lockstep::netsim::LinkConfig::default()
        }),
        record_dir: dir.clone(),
        seed: 3,
        apm: match game {
            relay::demo::DemoGame::Rts => 600,
            relay::demo::DemoGame::Arena => game.default_apm(),
        },
        desync,
        peer_impair: Vec::new(),
        vanish,
        rejoin_after: None,
        spectators: 0,
        speculate: false,
    };
    let report = relay::demo::run(&config, |_| {}).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    report
}

#[test]
fn udp_demo_plays_records_and_verifies() {
    let ok = quick_demo(None, "ok");
    assert_eq!(ok.exit_code(), 0, "{}", ok.table());
    assert!(ok.peers.iter().all(|p| p.summary.final_turn == Some(59)));
    assert!(ok.replay.verified && ok.replay.turns == 60);
    // `--json` names each peer's RTT, its floor (RTT + half a 20 ms turn)
    // and its command latency.
    for p in &ok.peers {
        let j = serde_json::to_value(p).unwrap();
        let (rtt, floor) = (
            j["rtt_ms"].as_f64().unwrap(),
            j["floor_ms"].as_f64().unwrap(),
        );
        assert!(rtt > 0.0 && (floor - rtt - 10.0).abs() < 1e-9, "{j}");
        assert!(j["turn_latency_ms"]["p50"].as_f64().unwrap() > 0.0, "{j}");
        assert!(j["turn_latency_ms"]["p99"].is_number(), "{j}");
    }
    let bad = quick_demo(Some((30, 1)), "bad");
    assert_eq!(bad.exit_code(), 3, "{}", bad.table());
    assert_eq!(bad.desyncs.len(), 1);
    assert_eq!(bad.desyncs[0].turn, 30);
    assert_eq!(bad.desyncs[0].odd_peers, vec![1]);
    assert!(!bad.desyncs[0].sections.is_empty());
}

/// `relay demo --game arena`: the second game plays through the same public
/// peer, its recording verifies as the arena, and the forced desync works
/// for it (the arena's fault switch changes exactly the `ships` section).
#[test]
fn udp_demo_plays_the_arena_and_catches_its_forced_desync() {
    use relay::demo::DemoGame;
    let ok = quick_demo_of(DemoGame::Arena, None, "arena-ok");
    assert_eq!(ok.exit_code(), 0, "{}", ok.table());
    assert!(ok.peers.iter().all(|p| p.summary.final_turn == Some(59)));
    assert!(
        ok.replay.verified && ok.replay.turns == 60,
        "{}",
        ok.table()
    );
    let bad = quick_demo_of(DemoGame::Arena, Some((30, 2)), "arena-bad");
    assert_eq!(bad.exit_code(), 3, "{}", bad.table());
    assert_eq!(bad.desyncs.len(), 1);
    assert_eq!(bad.desyncs[0].turn, 30);
    assert_eq!(bad.desyncs[0].odd_peers, vec![2]);
    assert_eq!(bad.desyncs[0].sections, vec!["ships".to_owned()]);
    assert!(bad.replay.verified, "{}", bad.table());
}

#[test]
fn udp_demo_survives_a_crashed_peer_and_records_the_drop() {
    let r = quick_demo_with(None, Some((2, Duration::from_millis(900))), "kill");
    assert_eq!(r.exit_code(), 0, "{}", r.table());
    let killed = r.peers[2].summary.player.unwrap();
    assert_eq!(r.drops.len(), 1, "{}", r.table());
    assert_eq!(r.drops[0].player, killed);
    assert_eq!(r.drops[0].reason, "timeout");
    for p in &r.peers[..2] {
        assert_eq!(p.summary.final_turn, Some(149));
        assert_eq!(p.summary.dropped, vec![(killed, r.drops[0].turn)]);
    }
    assert!(r.replay.verified);
}

/// `relay demo --kill-peer 2 --kill-after-ms 900 --rejoin-after-ms 1200`:
/// the crashed peer restarts with a new socket and its secret, rejoins its
/// held slot from the agreed snapshot and ends with everyone's final hash;
/// the recording holds the drop and the rejoin and verifies.
#[test]
fn udp_demo_restarts_a_crashed_peer_which_rejoins_and_agrees() {
    let dir = std::env::temp_dir().join(format!("turns-demo-{}-rejoin", std::process::id()));
    let config = relay::demo::DemoConfig {
        game: relay::demo::DemoGame::Rts,
        peers: 3,
        turns: 400,
        relay: RelayConfig {
            turn_length: Duration::from_millis(20),
            // Long enough that a peer thread starved by a loaded machine is
            // not dropped; the restarted peer comes back before it runs
            // out, so its secret takes the slot over from the dead one.
            silence_timeout: Duration::from_millis(3000),
            rejoin: relay::rejoin_config::RejoinConfig {
                snapshot_every: 100,
                ..relay::rejoin_config::RejoinConfig::default()
            },
            ..RelayConfig::default()
        },
        impair: None,
        record_dir: dir.clone(),
        seed: 8,
        apm: 600,
        desync: None,
        peer_impair: Vec::new(),
        vanish: Some((2, Duration::from_millis(900))),
        rejoin_after: Some(Duration::from_millis(1200)),
        spectators: 2,
        speculate: false,
    };
    let r = relay::demo::run(&config, |_| {}).unwrap();
    let path = r.replay.path.clone().unwrap();
    let (_, read) = replays::Reader::open(&path).unwrap().scan().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!((read.drops, read.rejoins), (1, 1), "{}", r.table());
    assert_eq!(r.exit_code(), 0, "{}", r.table());
    let back = &r.peers[2];
    assert!(!back.killed && back.summary.completed, "{}", r.table());
    assert_eq!(back.summary.rejoins, 1);
    assert!(back.summary.rejoin_ms.is_some());
    assert!(r.hashes_agree, "{}", r.table());
    // Two spectators watched from a third of the way in and ended on the
    // players' final hash.
    assert_eq!(r.spectators.len(), 2);
    for w in &r.spectators {
        assert!(w.completed && w.desyncs == 0, "{}", r.table());
        assert_eq!(w.final_hash, r.peers[0].summary.final_hash, "{}", r.table());
    }
    assert_eq!(r.drops.len(), 1, "{}", r.table());
    assert_eq!(r.drops[0].player, back.summary.player.unwrap());
    assert!(r.replay.verified && r.replay.turns == 400, "{path}");
}

/// Two relays, one after the other, recording into one directory (the same
/// match name and match number, as after a restart): both recordings survive
/// intact and verify.
#[test]
fn a_restarted_relay_keeps_the_previous_runs_recordings() {
    let dir = std::env::temp_dir().join(format!("turns-demo-{}-restart", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = relay::demo::DemoConfig {
        game: relay::demo::DemoGame::Rts,
        peers: 2,
        turns: 30,
        relay: RelayConfig {
            turn_length: Duration::from_millis(20),
            silence_timeout: Duration::from_millis(3000),
            ..RelayConfig::default()
        },
        impair: None,
        record_dir: dir.clone(),
        seed: 5,
        apm: 600,
        desync: None,
        peer_impair: Vec::new(),
        vanish: None,
        rejoin_after: None,
        spectators: 0,
        speculate: false,
    };
    let first = relay::demo::run(&config, |_| {}).unwrap();
    let first_path = first.replay.path.clone().unwrap();
    assert!(first.replay.verified, "{}", first.table());
    let first_bytes = std::fs::read(&first_path).unwrap();
    let second = relay::demo::run(&config, |_| {}).unwrap();
    let second_path = second.replay.path.clone().unwrap();
    assert!(second.replay.verified, "{}", second.table());
    assert_ne!(first_path, second_path);
    assert_eq!(std::fs::read(&first_path).unwrap(), first_bytes);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 2, "{files:?}");
    for f in &files {
        let (_, s) = replays::Reader::open(f).unwrap().scan().unwrap();
        assert!(s.is_complete() && s.turns == 30, "{}: {s}", f.display());
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
