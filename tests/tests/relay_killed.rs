//! A relay killed mid-match (SIGKILL: no goodbye, no flush at exit): its
//! recording is the match's write-ahead log. Each turn's record reaches the
//! file (the OS, not necessarily the disk) before that turn's bundle leaves
//! the relay, so the recording holds every turn any peer simulated.
#![allow(clippy::unwrap_used)] // tests may unwrap

use std::time::Duration;
use tests::harness::{PeerSpec, Relay, finish_peer, peer, scratch_dir};

const MATCH: Duration = Duration::from_secs(120);

#[test]
fn a_sigkilled_relay_has_recorded_every_turn_any_peer_simulated() {
    let dir = scratch_dir("relay-killed");
    let mut relay = Relay::start(&dir, &["--turn-ms", "25"]);
    let relay_addr = relay.addr;
    let spec = |i: usize| PeerSpec {
        relay: relay_addr,
        match_name: "killed".to_owned(),
        players: 3,
        turns: 100_000,
        seed: i as u64 + 1,
        extra: vec![],
    };
    let mut peers: Vec<_> = (0..3).map(|i| peer(&spec(i))).collect();
    relay.wait_event("turn 150", MATCH, |v| {
        v["event"] == "turn_closed" && v["turn"].as_u64() >= Some(150)
    });
    relay.proc.kill();
    // The peers lose the relay and end on their own (not completed).
    let simulated: Vec<u64> = peers
        .iter_mut()
        .map(|p| {
            let r = finish_peer(p, MATCH);
            assert_ne!(r.code, Some(0), "{}", r.summary);
            r.summary["turns"].as_u64().unwrap()
        })
        .collect();
    let most = *simulated.iter().max().unwrap();
    assert!(most >= 150, "peers simulated {simulated:?}");
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "lsr"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    // Read up to the torn end a kill may leave (a partly written record).
    let mut recorded = 0u64;
    for r in replays::Reader::open(&files[0]).unwrap() {
        match r {
            Ok(replays::Record::Turn { .. }) => recorded += 1,
            Ok(_) => {}
            Err(_) => break,
        }
    }
    assert!(
        recorded >= most,
        "the recording holds {recorded} turns, a peer simulated {most}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
