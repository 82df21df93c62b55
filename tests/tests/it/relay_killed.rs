//! A relay killed mid-match (SIGKILL: no goodbye, no flush at exit): its
//! recording is the match's write-ahead log. Each turn's record reaches the
//! file (the OS, not necessarily the disk) before that turn's bundle leaves
//! the relay, so the recording holds every turn any peer simulated, and a
//! relay restarted on the same directory resumes the match from it.
#![allow(clippy::unwrap_used)] // tests may unwrap

use std::path::PathBuf;
use std::time::Duration;
use tests::harness::{
    PeerResult, PeerSpec, Proc, Relay, SplitMix, cut_last_turns, finish_peer, peer, replay_verify,
    scratch_dir,
};

const MATCH: Duration = Duration::from_secs(120);

/// A relay with 25 ms turns on a fresh scratch directory for `test`
/// (`records/` holds its recordings, `rejoin.key` its rejoin key across
/// restarts) and `extra` flags; the directory and its flags, to restart it
/// the same way.
fn resumable_relay(test: &str, extra: &[&str]) -> (PathBuf, Vec<String>, Relay) {
    let dir = scratch_dir(test);
    let key = dir.join("rejoin.key").display().to_string();
    let mut flags: Vec<String> = vec![
        "--turn-ms".into(),
        "25".into(),
        "--rejoin-key-file".into(),
        key,
    ];
    flags.extend(extra.iter().map(|s| (*s).to_owned()));
    let relay = Relay::start(&dir.join("records"), &strs(&flags));
    (dir, flags, relay)
}

/// Flags as `Relay` takes them.
fn strs(flags: &[String]) -> Vec<&str> {
    flags.iter().map(String::as_str).collect()
}

/// 4 peers and a spectator play 600 turns; the relay is SIGKILLed twice at
/// seeded turns (the first as a snapshot is uploaded) and each time
/// restarted after a seeded 0.5-1.5 s on the same address, record directory
/// and rejoin key; the second time the recording also loses its last 12
/// turns, as in a machine crash, and the players hand them back. Every
/// peer and the spectator keep their world, reconnect and finish the match
/// (exit 0, equal final hashes), and the recording verifies as one
/// complete match.
#[test]
fn a_match_goes_on_when_its_relay_is_killed_and_restarted_twice() {
    let turns = 600u32;
    let mut rng = SplitMix(25);
    // The first kill as the relay closes a snapshot turn: the snapshot it
    // asked for is being uploaded.
    let first_kill = 40 * rng.range(3, 6);
    let second_kill = rng.range(first_kill + 100, 480);
    let (dir, flags, mut relay) = resumable_relay("relay-restarted", &["--snapshot-every", "40"]);
    let records = dir.join("records");
    let relay_addr = relay.addr;
    let spec = |i: usize| PeerSpec {
        relay: relay_addr,
        match_name: "restarted".to_owned(),
        players: 4,
        turns,
        seed: i as u64 + 1,
        extra: vec![],
    };
    let mut peers: Vec<_> = (0..4).map(|i| peer(&spec(i))).collect();
    // A spectator watches from the start (the base is the setup's world).
    relay.wait_event("the start", MATCH, |v| v["event"] == "turn_closed");
    let mut watch = spec(9);
    watch.extra = vec!["--spectate".to_owned()];
    peers.push(peer(&watch));
    for kill_at in [first_kill, second_kill] {
        relay.wait_event("the kill turn", MATCH, |v| {
            v["event"] == "turn_closed" && v["turn"].as_u64() >= Some(u64::from(kill_at))
        });
        relay.proc.kill();
        // Down for a seeded 0.5-1.5 s (the fault, not a wait for anything).
        std::thread::sleep(std::time::Duration::from_millis(u64::from(
            rng.range(500, 1500),
        )));
        // The second time, as after a machine crash: the recording lost
        // its last 12 turns, which the players hold and hand back.
        let lost = if kill_at == second_kill {
            lose_last_turns(&records, 12)
        } else {
            None
        };
        relay = relay.restart(&strs(&flags));
        let resumed = relay.wait_event("match_resumed", MATCH, |v| v["event"] == "match_resumed");
        let next = resumed["next_turn"].as_u64().unwrap();
        match lost {
            // The relay logs a turn's event just before it records it (and
            // before its bundle leaves): killed on that line, it may resume
            // at that very turn, never before it.
            None => assert!(next >= u64::from(kill_at), "{resumed}"),
            Some(first_lost) => {
                assert_eq!(next, u64::from(first_lost), "{resumed}");
                // Every lost turn comes back, handed back by the players.
                relay.wait_event("the lost turns closed again", MATCH, |v| {
                    v["event"] == "turn_closed" && v["turn"].as_u64() >= Some(u64::from(kill_at))
                });
            }
        }
    }
    let results = finish_alike(&mut peers);
    for r in &results {
        assert_eq!(r.summary["reconnects"], 2, "{}", r.summary);
        assert_eq!(r.summary["turns"], turns, "{}", r.summary);
    }
    let report = verified_recording(&mut relay, turns);
    assert_eq!(
        report["final_hash"], results[0].summary["final_hash"],
        "{report:#}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Waits for every peer: each exits 0 having completed the match, all
/// with the first one's final hash.
fn finish_alike(peers: &mut [Proc]) -> Vec<PeerResult> {
    let results: Vec<_> = peers.iter_mut().map(|p| finish_peer(p, MATCH)).collect();
    for r in &results {
        assert_eq!(r.code, Some(0), "{}", r.summary);
        assert_eq!(r.summary["completed"], true, "{}", r.summary);
        assert_eq!(
            r.summary["final_hash"], results[0].summary["final_hash"],
            "{}",
            r.summary
        );
    }
    results
}

/// The relay's finished recording, verified as one complete match of
/// `turns` turns; the report.
fn verified_recording(relay: &mut Relay, turns: u32) -> serde_json::Value {
    let path = relay.wait_recorded(MATCH);
    let (code, report) = replay_verify(&path);
    assert_eq!(code, Some(0), "{report:#}");
    assert_eq!(report["verified"], true, "{report:#}");
    assert_eq!(report["turns"], turns, "{report:#}");
    report
}

/// A relay SIGKILLed mid-match has recorded every turn any peer simulated
/// (its peers, told not to reconnect, end). Then the bad input a restart
/// may meet: the recording torn mid-record, a file of another format
/// version, a file that is no recording, and players that never return.
/// Started without a rejoin key file, the relay resumes nothing and names
/// every file with its reason; started with one, it cuts the torn record,
/// resumes the match, ends it abandoned when nobody came back within
/// `--resume-wait-ms`, and closes its recording with that reason; the
/// other files are named and left as they were. Either way it serves new
/// matches.
/// [`cut_last_turns`] of the one recording in `dir`.
fn lose_last_turns(dir: &std::path::Path, n: usize) -> Option<u32> {
    let file = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "lsr"))?;
    cut_last_turns(&file, n)
}

#[test]
fn a_sigkilled_relay_has_recorded_every_turn_and_a_restart_resumes_what_it_can() {
    let dir = scratch_dir("relay-killed");
    let mut relay = Relay::start(&dir, &["--turn-ms", "25"]);
    let relay_addr = relay.addr;
    let spec = |i: usize| PeerSpec {
        relay: relay_addr,
        match_name: "killed".to_owned(),
        players: 3,
        turns: 100_000,
        seed: i as u64 + 1,
        extra: vec!["--reconnect-s".into(), "0".into()],
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

    // Bad input for the restart.
    let recording = &files[0];
    let bytes = std::fs::read(recording).unwrap();
    let torn = bytes.len() - 3;
    std::fs::write(recording, &bytes[..torn]).unwrap();
    let mut future = bytes.clone();
    future[8..12].copy_from_slice(&99u32.to_le_bytes());
    let future_path = dir.join("future.lsr");
    std::fs::write(&future_path, &future).unwrap();
    let notes_path = dir.join("notes.lsr");
    std::fs::write(&notes_path, b"not a recording at all").unwrap();
    let reason_for = |relay: &Relay, path: &std::path::Path| {
        let shown = path.display().to_string();
        relay
            .events_of("not_resumed")
            .iter()
            .find(|v| v["path"] == shown.as_str())
            .map(|v| v["reason"].as_str().unwrap().to_owned())
            .unwrap_or_else(|| panic!("{shown} not named: {:?}", relay.events))
    };

    // No key file: the players' secrets came from the killed process.
    let mut keyless = relay.restart(&["--turn-ms", "25"]);
    assert!(reason_for(&keyless, recording).contains("--rejoin-key-file"));
    assert!(keyless.events_of("resuming").is_empty());
    keyless.proc.kill();

    let key = dir.join("rejoin.key");
    let key_arg = key.display().to_string();
    let flags = [
        "--turn-ms",
        "25",
        "--rejoin-key-file",
        &key_arg,
        "--resume-wait-ms",
        "1000",
    ];
    let mut relay = relay.restart(&flags);
    assert!(
        reason_for(&relay, &future_path).contains("version"),
        "{:?}",
        relay.events
    );
    assert!(
        reason_for(&relay, &notes_path).contains("not a"),
        "{:?}",
        relay.events
    );
    let resuming = relay.events_of("resuming");
    assert_eq!(resuming.len(), 1, "{:?}", relay.events);
    assert!(
        resuming[0]["cut_bytes"].as_u64() > Some(0),
        "{}",
        resuming[0]
    );
    let ended = relay.wait_event("the abandoned end", MATCH, |v| v["event"] == "match_ended");
    assert_eq!(ended["reason"], "abandoned", "{ended}");
    let path = relay.wait_recorded(MATCH);
    assert_eq!(&path, recording);
    let (_, report) = replay_verify(&path);
    assert_eq!(
        report["file_status"]["match_end"], "abandoned",
        "{report:#}"
    );
    assert_eq!(report["file_status"]["complete"], true, "{report:#}");
    assert_eq!(
        report["first_divergence"],
        serde_json::Value::Null,
        "{report:#}"
    );
    // Left as they were.
    assert_eq!(std::fs::read(&future_path).unwrap(), future);

    // And a new match plays on the restarted relay.
    let after = |i: usize| PeerSpec {
        relay: relay_addr,
        match_name: "after".to_owned(),
        players: 2,
        turns: 40,
        seed: i as u64 + 1,
        extra: vec![],
    };
    let mut peers: Vec<_> = (0..2).map(|i| peer(&after(i))).collect();
    for p in &mut peers {
        let r = finish_peer(p, MATCH);
        assert_eq!(r.code, Some(0), "{}", r.summary);
        assert_eq!(r.summary["completed"], true, "{}", r.summary);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// An upgrade: 8 matches run when the relay gets SIGUSR2 (hand over). It
/// stops at once without ending them, and the next process, started on the
/// same address, record directory and rejoin key, resumes every one: every
/// peer completes its match, both players of a match end with the same
/// hash, and every recording verifies as one complete match.
#[test]
fn a_relay_handed_over_to_a_new_process_ends_none_of_its_8_matches() {
    let turns = 240u32;
    let (dir, flags, mut relay) = resumable_relay("relay-handover", &[]);
    let mut peers = Vec::new();
    for m in 0..8u64 {
        for seat in 0..2u64 {
            peers.push((
                m,
                peer(&PeerSpec {
                    relay: relay.addr,
                    match_name: format!("upgrade{m}"),
                    players: 2,
                    turns,
                    seed: m * 2 + seat + 1,
                    extra: vec![],
                }),
            ));
        }
    }
    let mut started = 0;
    relay.wait_event("8 matches past turn 60", MATCH, |v| {
        if v["event"] == "match_started" {
            started += 1;
        }
        started == 8 && v["event"] == "turn_closed" && v["turn"].as_u64() >= Some(60)
    });
    let usr2 = std::process::Command::new("kill")
        .args(["-USR2", &relay.proc.pid().to_string()])
        .status()
        .unwrap();
    assert!(usr2.success());
    let (status, out) = relay.proc.wait_exit(MATCH);
    assert!(status.success(), "{status}");
    // One line per event loop, each with the matches it left running.
    let running: u64 = out
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] == "handing_over")
        .filter_map(|v| v["running"].as_u64())
        .sum();
    assert_eq!(running, 8, "{out}");
    let mut next = relay.restart(&strs(&flags));
    let mut resumed = 0;
    next.wait_event("8 matches resumed", MATCH, |v| {
        if v["event"] == "match_resumed" {
            resumed += 1;
        }
        resumed == 8
    });
    let mut hashes = std::collections::BTreeMap::new();
    for (m, p) in &mut peers {
        let r = finish_peer(p, MATCH);
        assert_eq!(r.code, Some(0), "{}", r.summary);
        assert_eq!(r.summary["turns"], turns, "{}", r.summary);
        let h = r.summary["final_hash"].clone();
        assert_eq!(
            hashes.entry(*m).or_insert_with(|| h.clone()),
            &h,
            "match {m}"
        );
    }
    for _ in 0..8 {
        let path = next.wait_recorded(MATCH);
        let (code, report) = replay_verify(&path);
        assert_eq!(code, Some(0), "{report:#}");
        assert_eq!(report["turns"], turns, "{report:#}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Where peer `i` of a test keeps its rejoin secret.
fn rejoin_file(dir: &std::path::Path, i: usize) -> std::path::PathBuf {
    dir.join(format!("peer{i}.rejoin"))
}

/// The relay dies while a player rejoins: peer 1 is SIGKILLed past turn
/// 440 and restarted on its rejoin file, and the relay is SIGKILLed as it
/// takes the rejoin (the snapshot and the tail on their way). The restarted
/// relay holds the last 400 turns, not the whole match, and no agreed
/// snapshot: a rejoiner that has no world yet is refused `no_snapshot`,
/// dropped so the match does not wait for it, and asks again; the match
/// agrees a snapshot as soon as it runs and takes it back. Every peer
/// finishes with the same hash; the recording verifies.
#[test]
fn a_relay_killed_during_a_rejoin_takes_the_rejoiner_back() {
    let turns = 600u32;
    let extra = ["--snapshot-every", "40", "--silence-timeout-ms", "2500"];
    let (dir, flags, mut relay) = resumable_relay("killed-rejoin", &extra);
    let relay_addr = relay.addr;
    let peer_dir = dir.clone();
    let spec = move |i: usize| PeerSpec {
        relay: relay_addr,
        match_name: "rejoin-kill".to_owned(),
        players: 3,
        turns,
        seed: i as u64 + 1,
        extra: vec![
            "--rejoin-file".into(),
            rejoin_file(&peer_dir, i).display().to_string(),
        ],
    };
    let mut peers: Vec<_> = (0..3).map(|i| peer(&spec(i))).collect();
    relay.wait_event("turn 440", MATCH, |v| {
        v["event"] == "turn_closed" && v["turn"].as_u64() >= Some(440)
    });
    // Written within a second of the start, long before turn 440.
    assert!(rejoin_file(&dir, 1).exists());
    peers[1].kill();
    peers[1] = peer(&spec(1));
    relay.wait_event("the rejoin", MATCH, |v| v["event"] == "rejoining");
    relay.proc.kill();
    relay = relay.restart(&strs(&flags));
    relay.wait_event("match_resumed", MATCH, |v| v["event"] == "match_resumed");
    finish_alike(&mut peers);
    verified_recording(&mut relay, turns);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The relay dies while it narrows a desync (peer 2 diverges at turn 60;
/// the relay is SIGKILLed as it reports the desync, its section and entity
/// requests in flight). The restarted relay knows nothing of it: the
/// diverged peer's next hashes differ again, and the new process catches
/// the desync at the first turn it judges and narrows it to sections.
/// Every peer plays the match to its end and exits 3 (desync), and the
/// recording verifies with the desync recorded.
#[test]
fn a_relay_killed_during_a_desync_narrowing_catches_the_desync_again() {
    let turns = 240u32;
    let (dir, flags, mut relay) = resumable_relay("killed-desync", &[]);
    let relay_addr = relay.addr;
    let spec = |i: usize| PeerSpec {
        relay: relay_addr,
        match_name: "desync-kill".to_owned(),
        players: 3,
        turns,
        seed: i as u64 + 1,
        extra: if i == 2 {
            vec!["--desync-at".into(), "60".into()]
        } else {
            vec![]
        },
    };
    let mut peers: Vec<_> = (0..3).map(|i| peer(&spec(i))).collect();
    let first = relay.wait_event("the desync", MATCH, |v| v["event"] == "desync");
    assert_eq!(first["turn"], 60, "{first}");
    relay.proc.kill();
    relay = relay.restart(&strs(&flags));
    let resumed = relay.wait_event("match_resumed", MATCH, |v| v["event"] == "match_resumed");
    let again = relay.wait_event("the desync again", MATCH, |v| v["event"] == "desync");
    assert!(
        again["turn"].as_u64() >= resumed["next_turn"].as_u64(),
        "{again}"
    );
    relay.wait_event("its sections", MATCH, |v| v["event"] == "desync_sections");
    for p in &mut peers {
        let r = finish_peer(p, MATCH);
        assert_eq!(r.code, Some(3), "{}", r.summary);
        assert_eq!(r.summary["turns"], turns, "{}", r.summary);
    }
    let path = relay.wait_recorded(MATCH);
    let (code, report) = replay_verify(&path);
    assert_eq!(code, Some(3), "{report:#}");
    assert_eq!(report["verified"], true, "{report:#}");
    assert_eq!(report["recorded_desyncs"][0]["turn"], 60, "{report:#}");
    let _ = std::fs::remove_dir_all(&dir);
}
