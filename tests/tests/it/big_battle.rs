//! Issue 42 in real processes: a 32-player match of `peer` processes on
//! loopback through `relay serve`, each player bound to its own 127.0.0.x
//! source address, with spectator processes joining mid-match and one of
//! them SIGKILLed before the end; recorded and verified.
#![allow(clippy::unwrap_used)] // tests may unwrap

use serde_json::Value;
use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;
use tests::harness::{
    PeerResult, PeerSpec, Proc, Relay, finish_peer, heavy, peer, progress_turn, replay_verify,
    scratch_dir,
};

/// Upper bound for any one wait (generous: a loaded 2-core machine).
const WAIT: Duration = Duration::from_secs(120);
/// Players: the engine's most.
const PLAYERS: u8 = sim::MAX_PLAYERS;
/// 150 turns of 100 ms: 15 s of play.
const TURNS: u32 = 150;
/// Spectators join once the relay closed these turns; the second one is
/// SIGKILLed once the relay closed `KILL_AT`.
const SPECTATE_AT: [u64; 3] = [30, 30, 60];
const KILL_AT: u64 = 90;
/// The spectator (index) that leaves before the end.
const LEAVER: usize = 1;

/// The source address of player `i`: 127.0.0.10 to 127.0.0.41, one each
/// (Linux routes all of 127/8 to the loopback interface).
fn player_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, 10 + u8::try_from(i).unwrap())
}

/// The source address of spectator `i`: 127.0.0.100 and on.
fn spectator_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, 100 + u8::try_from(i).unwrap())
}

fn spec(relay: SocketAddr, seed: u64, bind: Ipv4Addr, spectate: bool) -> PeerSpec {
    PeerSpec {
        relay,
        match_name: "battle32".to_owned(),
        players: PLAYERS,
        turns: TURNS,
        seed,
        extra: Vec::new(),
    }
    .from_address(bind, spectate)
}

/// The IPv4 addresses the UDP sockets of process `pid` are bound to: its
/// socket inodes (`/proc/<pid>/fd`) looked up in `/proc/net/udp`.
fn udp_bound_ips(pid: u32) -> BTreeSet<Ipv4Addr> {
    let inodes: BTreeSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_str()?.to_owned();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
        })
        .collect();
    let table = std::fs::read_to_string("/proc/net/udp").unwrap();
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            let f: Vec<&str> = line.split_whitespace().collect();
            if !inodes.contains(*f.get(9)?) {
                return None;
            }
            let hex = f.get(1)?.split(':').next()?;
            // The kernel prints the network-order address as a native u32.
            let raw = u32::from_str_radix(hex, 16).ok()?;
            Some(Ipv4Addr::from(raw.to_ne_bytes()))
        })
        .collect()
}

/// Waits until spectator `p` prints a progress line past turn 0: it has
/// its world and steps it.
fn wait_watching(p: &mut Proc) {
    p.wait_line("a progress line past turn 0", WAIT, |l| {
        (progress_turn(&l.text)? > 0).then_some(())
    });
}

fn s<'a>(r: &'a PeerResult, key: &str) -> &'a Value {
    &r.summary[key]
}

/// 32 `peer` processes, each from its own 127.0.0.x, play 150 turns of
/// 100 ms through `relay serve` (bots at their default 300 APM). Three
/// `peer --spectate` processes join mid-match; one is SIGKILLed before the
/// end. Every player completes every turn with one final hash and 32
/// distinct player ids; the two spectators that stayed watch to the same
/// hash; the relay announces a 32-player match, records it, and
/// `replay verify` re-simulates the recording to that hash.
#[test]
fn thirty_two_peer_processes_from_distinct_addresses_play_spectators_come_and_go() {
    // About one core for 16 s: it shares the machine with other heavy
    // tests, so starvation must not fake a drop (a long silence timeout).
    let _cpu = heavy();
    let dir = scratch_dir("big-battle");
    let mut relay = Relay::start(
        &dir,
        &[
            "--turn-ms",
            "100",
            // A snapshot mid-match: the later spectators start from it.
            "--snapshot-every",
            "50",
            "--spectator-delay-ms",
            "1000",
            "--silence-timeout-ms",
            "20000",
        ],
    );
    let mut players: Vec<Proc> = (0..usize::from(PLAYERS))
        .map(|i| peer(&spec(relay.addr, i as u64 + 1, player_ip(i), false)))
        .collect();
    let started = relay.wait_event("match_started", WAIT, |v| v["event"] == "match_started");
    assert_eq!(
        started["players"].as_array().unwrap().len(),
        usize::from(PLAYERS),
        "{started}"
    );
    assert_eq!(started["last_turn"], TURNS - 1, "{started}");
    // Every player process is bound where it was told: 32 source addresses.
    for (i, p) in players.iter().enumerate() {
        assert_eq!(
            udp_bound_ips(p.pid()),
            BTreeSet::from([player_ip(i)]),
            "{}",
            p.name()
        );
    }
    let mut spectators: Vec<Proc> = Vec::new();
    for (i, at) in SPECTATE_AT.iter().enumerate() {
        relay.wait_turn_closed(*at, WAIT);
        let mut p = peer(&spec(relay.addr, 100 + i as u64, spectator_ip(i), true));
        wait_watching(&mut p);
        spectators.push(p);
    }
    relay.wait_turn_closed(KILL_AT, WAIT);
    assert!(
        spectators[LEAVER].is_running(),
        "{}",
        spectators[LEAVER].tail()
    );
    spectators[LEAVER].kill();

    let results: Vec<PeerResult> = players.iter_mut().map(|p| finish_peer(p, WAIT)).collect();
    let hash = s(&results[0], "final_hash").as_str().unwrap().to_owned();
    for r in &results {
        assert_eq!(r.code, Some(0), "{}", r.summary);
        assert_eq!(s(r, "completed"), true, "{}", r.summary);
        assert_eq!(s(r, "turns"), TURNS, "{}", r.summary);
        assert_eq!(s(r, "final_turn"), TURNS - 1, "{}", r.summary);
        assert_eq!(s(r, "final_hash"), hash.as_str(), "{}", r.summary);
        assert_eq!(s(r, "desyncs"), &serde_json::json!([]), "{}", r.summary);
        assert_eq!(s(r, "dropped"), &serde_json::json!([]), "{}", r.summary);
    }
    let ids: BTreeSet<u64> = results
        .iter()
        .map(|r| s(r, "player").as_u64().unwrap())
        .collect();
    assert_eq!(ids, (0..u64::from(PLAYERS)).collect(), "player ids");

    for (i, p) in spectators.iter_mut().enumerate() {
        if i == LEAVER {
            continue;
        }
        let r = finish_peer(p, WAIT);
        assert_eq!(r.code, Some(0), "{}", r.summary);
        assert_eq!(s(&r, "player"), &Value::Null, "{}", r.summary);
        assert_eq!(s(&r, "completed"), true, "{}", r.summary);
        assert_eq!(s(&r, "final_turn"), TURNS - 1, "{}", r.summary);
        assert_eq!(s(&r, "final_hash"), hash.as_str(), "{}", r.summary);
        assert_eq!(s(&r, "desyncs"), &serde_json::json!([]), "{}", r.summary);
    }

    let path = relay.wait_recorded(WAIT);
    let (code, report) = replay_verify(&path);
    assert_eq!(code, Some(0), "{report:#}");
    assert_eq!(report["verified"], true, "{report:#}");
    assert_eq!(report["turns"], TURNS, "{report:#}");
    assert_eq!(report["final_hash"], hash.as_str(), "{report:#}");

    let lobby = relay.events_of("lobby_opened");
    assert_eq!(lobby.len(), 1, "{lobby:?}");
    assert_eq!(lobby[0]["slots"], PLAYERS, "{lobby:?}");
    let ended = relay.events_of("match_ended");
    assert_eq!(ended.len(), 1, "{ended:?}");
    assert_eq!(ended[0]["turn"], TURNS - 1, "{ended:?}");
    assert!(relay.events_of("dropped").is_empty());
    assert!(relay.events_of("desync").is_empty());
    // Every turn closed once, the last one the match's last.
    let closed: Vec<u64> = relay
        .events_of("turn_closed")
        .iter()
        .map(|v| v["turn"].as_u64().unwrap())
        .collect();
    assert_eq!(closed, (0..u64::from(TURNS)).collect::<Vec<_>>());
    let _ = std::fs::remove_dir_all(&dir);
}
