//! End-to-end rejoin: a `peer` process SIGKILLed mid-match is restarted with
//! the same `--rejoin-file`, comes back into its slot, restores the relay's
//! agreed snapshot, fast-forwards and finishes the match with everyone's
//! final hash; the relay's recording holds the drop and the rejoin and
//! `replay verify` passes through them.
#![allow(clippy::unwrap_used)] // tests may unwrap

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tests::harness::{PeerSpec, Relay, SplitMix, finish_peer, peer, replay_verify, scratch_dir};

const MATCH: Duration = Duration::from_secs(120);

/// Where peer `i` of a test keeps its rejoin secret.
fn rejoin_file(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("peer{i}.rejoin"))
}

/// A relay with 25 ms turns, the given silence timeout and a snapshot every
/// 40 turns, and the spec of peer `i` of a `players`-player match on it,
/// each with its own rejoin file.
fn rejoin_match(
    dir: &Path,
    name: &str,
    players: u8,
    turns: u32,
    silence_ms: &str,
) -> (Relay, impl Fn(usize) -> PeerSpec) {
    let relay = Relay::start(
        dir,
        &[
            "--turn-ms",
            "25",
            "--silence-timeout-ms",
            silence_ms,
            "--snapshot-every",
            "40",
        ],
    );
    let (addr, name, dir) = (relay.addr, name.to_owned(), dir.to_owned());
    let spec = move |i: usize| PeerSpec {
        relay: addr,
        match_name: name.clone(),
        players,
        turns,
        seed: i as u64 + 1,
        extra: vec![
            "--rejoin-file".into(),
            rejoin_file(&dir, i).display().to_string(),
        ],
    };
    (relay, spec)
}

#[test]
fn a_sigkilled_peer_restarts_rejoins_its_slot_and_agrees() {
    let dir = scratch_dir("rejoin");
    let mut rng = SplitMix(0x5e70_1e5e);
    let kill_turn = rng.range(100, 180);
    let victim = usize::try_from(rng.range(0, 3)).unwrap();
    eprintln!("rejoin: peer {victim} killed at turn {kill_turn}");
    let turns = 400;
    let (mut relay, spec) = rejoin_match(&dir, "rejoin", 3, turns, "2500");
    let rejoin_file = |i: usize| rejoin_file(&dir, i);
    let mut procs: Vec<_> = (0..3).map(|i| peer(&spec(i))).collect();
    relay.wait_event("the kill turn", MATCH, |v| {
        v["event"] == "turn_closed" && v["turn"].as_u64() >= Some(u64::from(kill_turn))
    });
    // The peer writes its secret within a second of the start; the kill turn
    // is seconds later. Polling a file, bounded, not waiting on time.
    let deadline = Instant::now() + MATCH;
    while !rejoin_file(victim).exists() {
        assert!(Instant::now() < deadline, "no rejoin file");
        std::thread::sleep(Duration::from_millis(10));
    }
    procs[victim].kill();
    // The same command again: it finds the rejoin file and comes back.
    procs[victim] = peer(&spec(victim));
    let results: Vec<_> = procs.iter_mut().map(|p| finish_peer(p, MATCH)).collect();
    let hash = results[0].summary["final_hash"]
        .as_str()
        .unwrap()
        .to_owned();
    for r in &results {
        assert_eq!(r.code, Some(0), "{}", r.summary);
        assert_eq!(r.summary["final_turn"], turns - 1, "{}", r.summary);
        assert_eq!(r.summary["final_hash"], hash.as_str(), "{}", r.summary);
        assert_eq!(r.summary["desyncs"], serde_json::json!([]), "{}", r.summary);
    }
    let back = &results[victim].summary;
    assert_eq!(back["rejoins"], 1, "{back}");
    assert!(back["rejoin_ms"].as_f64().is_some(), "{back}");
    let path = relay.wait_recorded(MATCH);
    let rejoined = relay.events_of("rejoined");
    assert_eq!(rejoined.len(), 1, "{:?}", relay.events_of("rejoining"));
    let (mut drops, mut rejoins) = (0, 0);
    for r in replays::Reader::open(&path).unwrap() {
        match r.unwrap() {
            replays::Record::Drop { .. } => drops += 1,
            replays::Record::Rejoin { .. } => rejoins += 1,
            _ => {}
        }
    }
    assert_eq!((drops, rejoins), (1, 1));
    let (code, report) = replay_verify(&path);
    assert_eq!(code, Some(0), "{report:#}");
    assert_eq!(report["verified"], true, "{report:#}");
    assert_eq!(report["final_hash"], hash.as_str(), "{report:#}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A second process given a playing peer's rejoin file (a leaked secret)
/// cannot take that player's slot: the relay refuses it `slot_in_use` while
/// the player plays, the impostor exits refused (code 5), and the match
/// finishes with nobody dropped and everyone's hash equal.
#[test]
fn a_leaked_secret_cannot_take_the_slot_of_a_player_that_plays() {
    let dir = scratch_dir("impostor");
    // 25 ms turns: 700 turns is 17.5 s, past the impostor's 10 s of retries.
    let turns = 700;
    let relay = Relay::start(&dir, &["--turn-ms", "25", "--snapshot-every", "40"]);
    let rejoin_file = |i: usize| dir.join(format!("peer{i}.rejoin"));
    let relay_addr = relay.addr;
    let spec = |i: usize| PeerSpec {
        relay: relay_addr,
        match_name: "impostor".to_owned(),
        players: 2,
        turns,
        seed: i as u64 + 1,
        extra: vec!["--rejoin-file".into(), rejoin_file(i).display().to_string()],
    };
    let mut procs: Vec<_> = (0..2).map(|i| peer(&spec(i))).collect();
    let deadline = Instant::now() + MATCH;
    while !rejoin_file(1).exists() {
        assert!(Instant::now() < deadline, "no rejoin file");
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut impostor = peer(&spec(1));
    let refused = finish_peer(&mut impostor, MATCH);
    assert_eq!(refused.code, Some(5), "{}", refused.summary);
    assert_eq!(
        refused.summary["refused"]["reason"], "SlotInUse",
        "{}",
        refused.summary
    );
    let results: Vec<_> = procs.iter_mut().map(|p| finish_peer(p, MATCH)).collect();
    for r in &results {
        assert_eq!(r.code, Some(0), "{}", r.summary);
        assert_eq!(r.summary["final_hash"], results[0].summary["final_hash"]);
        assert_eq!(r.summary["dropped"], serde_json::json!([]), "{}", r.summary);
    }
    assert!(relay.events_of("rejoining").is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A SIGKILLed peer is restarted twice at once with the same rejoin file
/// (two processes for one seat): exactly one takes the slot back and
/// finishes with everyone's hash; the other is refused `slot_taken`, which
/// the peer does not retry, and exits refused (code 5) while the match is
/// still playing, instead of retrying or sitting at one turn to its timeout.
#[test]
fn of_two_processes_restarted_for_one_seat_one_rejoins_and_the_other_is_told_at_once() {
    let dir = scratch_dir("two-rejoiners");
    let turns = 800;
    let (mut relay, spec) = rejoin_match(&dir, "two-rejoiners", 2, turns, "5000");
    let rejoin_file = |i: usize| rejoin_file(&dir, i);
    let mut procs: Vec<_> = (0..2).map(|i| peer(&spec(i))).collect();
    relay.wait_event("turn 100", MATCH, |v| {
        v["event"] == "turn_closed" && v["turn"].as_u64() >= Some(100)
    });
    let deadline = Instant::now() + MATCH;
    while !rejoin_file(1).exists() {
        assert!(Instant::now() < deadline, "no rejoin file");
        std::thread::sleep(Duration::from_millis(10));
    }
    procs[1].kill();
    let mut twins = [peer(&spec(1)), peer(&spec(1))];
    // Whichever loses exits first: poll both, bounded.
    let deadline = Instant::now() + MATCH;
    let loser = loop {
        if let Some(i) = twins.iter_mut().position(|p| !p.is_running()) {
            break i;
        }
        assert!(Instant::now() < deadline, "neither twin ended");
        std::thread::sleep(Duration::from_millis(20));
    };
    let refused = finish_peer(&mut twins[loser], MATCH);
    assert_eq!(refused.code, Some(5), "{}", refused.summary);
    assert_eq!(
        refused.summary["refused"]["reason"], "SlotTaken",
        "{}",
        refused.summary
    );
    // Told at once: the match is still being played when the loser is gone.
    assert!(
        procs[0].is_running(),
        "the match ended before the loser was told"
    );
    let winner = finish_peer(&mut twins[1 - loser], MATCH);
    let first = finish_peer(&mut procs[0], MATCH);
    for r in [&winner, &first] {
        assert_eq!(r.code, Some(0), "{}", r.summary);
        assert_eq!(r.summary["final_turn"], turns - 1, "{}", r.summary);
    }
    assert_eq!(winner.summary["final_hash"], first.summary["final_hash"]);
    assert_eq!(winner.summary["rejoins"], 1, "{}", winner.summary);
    // The relay's log is complete once the match is recorded.
    let _ = relay.wait_recorded(MATCH);
    assert_eq!(relay.events_of("rejoined").len(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}
