//! The command lines of the `peer`, `netsim` and `relay` binaries, through
//! the real binaries on 127.0.0.1: what they accept, what they refuse and
//! what they say while they wait.

use std::path::Path;
use std::time::Duration;
use tests::harness::{Proc, Relay, STARTUP, bins, scratch_dir};

/// Bound on a process that should exit at once (bad usage).
const QUICK: Duration = Duration::from_secs(20);
/// Bound on a short match.
const MATCH: Duration = Duration::from_secs(60);

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// Runs `program args` to its exit (bounded); its exit code, its whole
/// stdout, then its last lines of both streams (stderr prefixed with `! `).
fn run(name: &str, program: &Path, list: &[&str]) -> (Option<i32>, String) {
    let mut p = Proc::spawn(name, program, &args(list));
    let (status, stdout) = p.wait_exit(QUICK);
    (status.code(), format!("{stdout}{}", p.tail()))
}

#[test]
fn a_peer_reaches_the_relay_by_host_name() {
    let dir = scratch_dir("peer-cli-host-name");
    let mut relay = Relay::start(&dir, &["--turn-ms", "20"]);
    let by_name = format!("localhost:{}", relay.addr.port());
    let mut peer = Proc::spawn(
        "peer",
        &bins().peer,
        &args(&[
            "--relay",
            &by_name,
            "--match",
            "named",
            "--players",
            "1",
            "--turns",
            "5",
            "--timeout-s",
            "60",
        ]),
    );
    let (status, _) = peer.wait_exit(MATCH);
    assert!(status.success(), "{status}:\n{}", peer.tail());
    let started = relay.wait_event("match_started", STARTUP, |v| {
        v["event"] == "match_started" && v["name"] == "named"
    });
    assert_eq!(started["last_turn"], 4, "{started}");
    relay.proc.kill();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn netsim_forwards_to_an_upstream_given_by_host_name() {
    let mut netsim = Proc::spawn(
        "netsim",
        &bins().netsim,
        &args(&[
            "--listen",
            "localhost:0",
            "--upstream",
            "localhost:7",
            "--duration-s",
            "0.1",
        ]),
    );
    // `netsim: LISTEN -> UPSTREAM (seed S)`: both names resolved to IPv4.
    let line = netsim.wait_line("listening line", STARTUP, |l| {
        l.text.strip_prefix("netsim: ").map(str::to_owned)
    });
    assert!(
        line.starts_with("127.0.0.1:") && line.contains("-> 127.0.0.1:7 "),
        "{line}"
    );
    let (status, _) = netsim.wait_exit(QUICK);
    assert!(status.success(), "{status}:\n{}", netsim.tail());
}

#[test]
fn an_address_that_does_not_resolve_is_refused_naming_it() {
    let bad = "no-such-relay.invalid:7777";
    let (code, out) = run(
        "peer",
        &bins().peer,
        &["--relay", bad, "--players", "1", "--turns", "5"],
    );
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("cannot resolve `no-such-relay.invalid:7777`"),
        "{out}"
    );
    let (code, out) = run(
        "netsim",
        &bins().netsim,
        &["--listen", "127.0.0.1:0", "--upstream", bad],
    );
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("no-such-relay.invalid:7777"), "{out}");
    let (code, out) = run(
        "relay token",
        &bins().relay,
        &[
            "token",
            "--match",
            "m",
            "--slot",
            "0",
            "--key-file",
            "/nonexistent/k",
            "--relay",
            bad,
        ],
    );
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("no-such-relay.invalid:7777"), "{out}");
}

#[test]
fn turns_zero_is_refused_and_unbounded_must_be_said() {
    let (code, out) = run(
        "peer",
        &bins().peer,
        &["--relay", "127.0.0.1:9", "--players", "1", "--turns", "0"],
    );
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("--turns unbounded"), "{out}");

    let dir = scratch_dir("peer-cli-unbounded");
    let mut relay = Relay::start(&dir, &["--turn-ms", "20"]);
    let addr = relay.addr.to_string();
    let mut peer = Proc::spawn(
        "peer",
        &bins().peer,
        &args(&[
            "--relay",
            &addr,
            "--match",
            "forever",
            "--players",
            "1",
            "--turns",
            "unbounded",
            "--timeout-s",
            "60",
        ]),
    );
    let started = relay.wait_event("match_started", STARTUP, |v| {
        v["event"] == "match_started" && v["name"] == "forever"
    });
    // No last turn: the match runs until it is ended.
    assert!(started["last_turn"].is_null(), "{started}");
    // Still playing turns after the start.
    relay.wait_event("a closed turn", STARTUP, |v| {
        v["event"] == "turn_closed" && v["turn"].as_u64().is_some_and(|t| t >= 20)
    });
    peer.kill();
    relay.proc.kill();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `--record` path that cannot be created stops the peer before it joins
/// (exit 1, naming the path): against a relay address nobody answers on,
/// a peer that joined first would wait out its 600 s timeout instead.
#[test]
fn a_recording_that_cannot_be_created_stops_the_peer_before_it_joins() {
    let dir = scratch_dir("peer-cli-record-missing");
    let missing = dir.join("no-such-dir").join("me.lsr");
    let missing = missing.display().to_string();
    let (code, out) = run(
        "peer",
        &bins().peer,
        &[
            "--relay",
            "127.0.0.1:9",
            "--players",
            "2",
            "--record",
            &missing,
        ],
    );
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(&format!("cannot create the recording {missing}")),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--record` onto an existing file refuses (the file is left alone)
/// unless `--force`, which replaces it with a replay of the match.
#[test]
fn a_recording_never_overwrites_a_file_unless_forced() {
    let dir = scratch_dir("peer-cli-record-exists");
    let mut relay = Relay::start(&dir.join("relay"), &["--turn-ms", "20"]);
    let addr = relay.addr.to_string();
    let file = dir.join("mine.lsr");
    std::fs::write(&file, b"keep me").unwrap();
    let path = file.display().to_string();
    let solo = |extra: &[&str]| {
        let mut list = vec![
            "--relay",
            &addr,
            "--match",
            "rec",
            "--players",
            "1",
            "--turns",
            "5",
            "--timeout-s",
            "60",
            "--record",
            &path,
        ];
        list.extend_from_slice(extra);
        let mut p = Proc::spawn("peer", &bins().peer, &args(&list));
        let (status, _) = p.wait_exit(MATCH);
        (status.code(), p.tail())
    };
    let (code, out) = solo(&[]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(&path) && out.contains("already exists") && out.contains("--force"),
        "{out}"
    );
    assert_eq!(std::fs::read(&file).unwrap(), b"keep me");

    let (code, out) = solo(&["--force"]);
    assert_eq!(code, Some(0), "{out}");
    let (code, report) = tests::harness::replay_verify(&file);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["turns"], 5, "{report}");
    relay.proc.kill();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A peer alone in a two-player lobby says that it waits, for how many of
/// how many players, in which match (not "turn 0"); the relay logs the
/// lobby's opening; `--timeout-s` ends the wait (exit 1, saying where it
/// waited), and `--help` says the lobby wait counts.
#[test]
fn a_peer_waiting_in_a_lobby_says_so_and_the_relay_logs_the_lobby() {
    let dir = scratch_dir("peer-cli-lobby");
    let mut relay = Relay::start(&dir, &[]);
    let addr = relay.addr.to_string();
    let mut peer = Proc::spawn(
        "peer",
        &bins().peer,
        &args(&[
            "--relay",
            &addr,
            "--match",
            "lobby-m",
            "--players",
            "2",
            "--timeout-s",
            "3",
        ]),
    );
    let opened = relay.wait_event("lobby_opened", STARTUP, |v| v["event"] == "lobby_opened");
    assert_eq!(opened["name"], "lobby-m", "{opened}");
    assert_eq!(opened["slots"], 2, "{opened}");
    assert_eq!(opened["game"], "lockstep-rts", "{opened}");
    let line = peer.wait_line("a waiting line", STARTUP, |l| {
        (l.stderr && l.text.contains("lobby")).then(|| l.text.clone())
    });
    assert_eq!(
        line,
        "peer: waiting in the lobby of match \"lobby-m\": 1 of 2 players joined"
    );
    let (status, _) = peer.wait_exit(MATCH);
    let out = peer.tail();
    assert_eq!(status.code(), Some(1), "{out}");
    assert!(
        out.contains("gave up after")
            && out.contains("waiting in the lobby (1 of 2 players joined)"),
        "{out}"
    );
    assert!(
        !out.contains("turn     0"),
        "no turn progress before the start:\n{out}"
    );
    relay.proc.kill();
    let _ = std::fs::remove_dir_all(&dir);

    let (code, help) = run("peer --help", &bins().peer, &["--help"]);
    assert_eq!(code, Some(0));
    let timeout = help
        .split("--timeout-s")
        .nth(1)
        .unwrap_or_else(|| panic!("no --timeout-s in --help:\n{help}"));
    // Long help: one paragraph per option, a blank line between them.
    let timeout = &timeout[..timeout.find("\n\n").unwrap_or(timeout.len())];
    assert!(
        timeout.contains("lobby") && timeout.contains("[default: 600]"),
        "{timeout}"
    );
}

/// `relay demo` with a replay directory it cannot make names it (exit 1).
#[test]
fn a_demo_record_dir_that_cannot_be_made_is_named() {
    let dir = scratch_dir("peer-cli-demo-dir");
    let file = dir.join("a-file");
    std::fs::write(&file, b"not a directory").unwrap();
    let bad = file.join("replays").display().to_string();
    let (code, out) = run(
        "relay demo",
        &bins().relay,
        &["demo", "--peers", "1", "--turns", "5", "--record-dir", &bad],
    );
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains(&format!("cannot use {bad}")), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}
