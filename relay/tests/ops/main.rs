//! Process-level operations tests: a real `relay serve` and real `peer`
//! processes on loopback. The relay is stopped with SIGTERM (graceful drain)
//! or SIGKILL (crash) mid-match, and its replay files are read back.
//! Synchronisation is by the relay's JSON log lines; every wait is bounded.
//! Every relay here runs two event loops (`--threads 2`).

#![allow(clippy::unwrap_used)] // tests may unwrap

use replays::{Ending, Reader};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

/// Upper bound on any wait; generous for a loaded 2-core machine.
const BOUND: Duration = Duration::from_secs(60);

struct Relay {
    child: Child,
    lines: Receiver<Value>,
    addr: String,
    seen: Vec<Value>,
}

/// The `peer` binary (lockstep crate) beside this crate's `relay` binary:
/// `cargo test -p lockstep-relay` builds only the relay's binaries, so it is built
/// (or found fresh, a no-op) once here.
fn peer_bin() -> PathBuf {
    static PEER: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PEER.get_or_init(|| {
        let relay = Path::new(env!("CARGO_BIN_EXE_relay"));
        let peer = relay.with_file_name(format!("peer{}", std::env::consts::EXE_SUFFIX));
        // Built by `cargo test --workspace` already; building it again with
        // this package's feature set alone would recompile the transport
        // crate (half a minute of CI). `E2E_REBUILD=1` forces it (a stale
        // binary after editing `lockstep-net` and testing only this crate).
        let rebuild = std::env::var_os("E2E_REBUILD").is_some_and(|v| v != "0");
        if rebuild || !peer.exists() {
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            // target/<profile>/relay -> target
            let target = relay.parent().and_then(Path::parent).unwrap();
            let mut cmd = Command::new(cargo);
            cmd.args([
                "build",
                "-p",
                "lockstep-net",
                "--bin",
                "peer",
                "--target-dir",
            ])
            .arg(target);
            if relay.parent().and_then(Path::file_name) == Some("release".as_ref()) {
                cmd.arg("--release");
            }
            assert!(cmd.status().unwrap().success(), "cargo build --bin peer");
        }
        peer
    })
    .clone()
}

/// `GET path` from the relay's HTTP address: the status line and the body.
fn http_get(addr: impl std::net::ToSocketAddrs, path: &str) -> (String, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(BOUND)).unwrap();
    // An IP address as Host: the live view refuses other names (DNS rebinding).
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    (
        head.lines().next().unwrap_or_default().to_owned(),
        body.to_owned(),
    )
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("relay-ops-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

impl Relay {
    fn start(dir: &Path, extra: &[&str]) -> Self {
        Self::start_with_turn_ms(dir, "50", extra)
    }

    fn start_with_turn_ms(dir: &Path, turn_ms: &str, extra: &[&str]) -> Self {
        Self::start_with_env(dir, turn_ms, &[], extra)
    }

    /// A relay with `env` set (and no Agones SDK port unless `env` gives one).
    fn start_with_env(dir: &Path, turn_ms: &str, env: &[(&str, String)], extra: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_relay"))
            .env_remove("AGONES_SDK_HTTP_PORT")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .args(["serve", "--bind", "127.0.0.1:0", "--json", "--verbose"])
            // Two event loops in every test here: matches and their peers
            // spread over both, so drain, tokens and recording are checked
            // across threads.
            .args(["--threads", "2", "--turn-ms", turn_ms, "--record-dir"])
            .arg(dir)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if let Ok(v) = serde_json::from_str::<Value>(&line)
                    && tx.send(v).is_err()
                {
                    break;
                }
            }
        });
        let mut relay = Self {
            child,
            lines,
            addr: String::new(),
            seen: Vec::new(),
        };
        let v = relay.wait_for(|v| v["event"] == "listening");
        relay.addr = v["addr"].as_str().unwrap().to_owned();
        relay
    }

    /// The next log line matching `pred` (lines before it are kept in `seen`).
    fn wait_for(&mut self, pred: impl Fn(&Value) -> bool) -> Value {
        let end = Instant::now() + BOUND;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(v) => {
                    self.seen.push(v.clone());
                    if pred(&v) {
                        return v;
                    }
                }
                Err(RecvTimeoutError::Timeout) => panic!("relay log line not seen in time"),
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("relay stdout closed: {:?}", self.seen.last())
                }
            }
        }
    }

    /// A log line matching `pred`, already seen or the next one to come.
    fn seen_or_wait(&mut self, pred: impl Fn(&Value) -> bool) -> Value {
        match self.seen.iter().find(|v| pred(v)) {
            Some(v) => v.clone(),
            None => self.wait_for(pred),
        }
    }

    /// Every remaining log line until the relay closes stdout (it exited).
    fn drain(&mut self) {
        let end = Instant::now() + BOUND;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(v) => self.seen.push(v),
                Err(RecvTimeoutError::Disconnected) => return,
                Err(RecvTimeoutError::Timeout) => panic!("relay did not exit in time"),
            }
        }
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} failed");
    }

    fn wait(&mut self) -> ExitStatus {
        wait_bounded(&mut self.child)
    }

    /// SIGTERM, every log line until it exits, and a clean exit.
    fn stop(&mut self) {
        self.signal("-TERM");
        self.drain();
        let status = self.wait();
        assert!(status.success(), "relay exit status {status:?}");
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits for a child that is known to be exiting (its stdout closed or it was
/// killed); bounded by `BOUND`.
fn wait_bounded(child: &mut Child) -> ExitStatus {
    let end = Instant::now() + BOUND;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(Instant::now() < end, "process did not exit in time");
        // Not synchronisation: the process has already been told to stop;
        // this only paces the polling of its exit status.
        std::thread::sleep(Duration::from_millis(10));
    }
}

struct Peers(Vec<Child>);

/// Waits for a peer that the relay is expected to refuse: its exit code,
/// its stderr and its stdout. Bounded: its `--timeout-s` is below `BOUND`.
fn refused_peer_output(child: Child) -> (Option<i32>, String, String) {
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// The refusal a peer printed: the one stderr line "refused by the relay: ...".
fn refusal_line(stderr: &str) -> Option<&str> {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("refused by the relay: "))
}

impl Peers {
    fn start(relay: &str, name: &str, n: u8, turns: u32) -> Self {
        Self(
            (0..n)
                .map(|i| {
                    Command::new(peer_bin())
                        .args(["--relay", relay, "--match", name])
                        .args(["--players", &n.to_string(), "--turns", &turns.to_string()])
                        .args([
                            "--seed",
                            &(u64::from(i) + 1).to_string(),
                            "--timeout-s",
                            "60",
                        ])
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .spawn()
                        .unwrap()
                })
                .collect(),
        )
    }
}

impl Drop for Peers {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn turn_closed_at_least(t: u64) -> impl Fn(&Value) -> bool {
    move |v| v["event"] == "turn_closed" && v["turn"].as_u64().is_some_and(|x| x >= t)
}

fn replay_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "lsr"))
        .collect();
    v.sort();
    v
}

#[test]
fn sigterm_after_grace_ends_matches_finalises_replays_and_exits_zero() {
    let dir = scratch("term");
    let mut relay = Relay::start(&dir, &["--grace-s", "0"]);
    // Two matches far longer than the test: the grace period must end them.
    let _a = Peers::start(&relay.addr, "a", 2, 100_000);
    let _b = Peers::start(&relay.addr, "b", 2, 100_000);
    relay.wait_for(|v| v["event"] == "match_started");
    relay.wait_for(|v| v["event"] == "match_started");
    relay.wait_for(turn_closed_at_least(20));
    relay.stop();
    assert!(relay.seen.iter().any(|v| v["event"] == "draining"));
    let recorded: Vec<&Value> = relay
        .seen
        .iter()
        .filter(|v| v["event"] == "recorded")
        .collect();
    assert_eq!(recorded.len(), 2, "{:?}", relay.seen.last());
    assert!(recorded.iter().all(|v| v["finished"] == true));
    let files = replay_files(&dir);
    assert_eq!(files.len(), 2);
    for f in files {
        let (_, summary) = Reader::open(&f).unwrap().scan().unwrap();
        assert_eq!(summary.ending, Ending::Complete, "{}", f.display());
        assert!(
            summary.turns >= 20,
            "{} turns in {}",
            summary.turns,
            f.display()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigterm_lets_a_running_match_finish_within_the_grace_period() {
    let dir = scratch("grace");
    let mut relay = Relay::start(&dir, &["--grace-s", "60"]);
    // 120 turns of 50 ms: the late peers below have seconds to join while it runs.
    let mut peers = Peers::start(&relay.addr, "g", 2, 120);
    relay.wait_for(|v| v["event"] == "match_started");
    relay.wait_for(turn_closed_at_least(10));
    relay.signal("-TERM");
    relay.wait_for(|v| v["event"] == "draining");
    // A join after the drain began is refused, with its reason: each late
    // peer says why and exits 5, and the relay logs each refusal.
    let late: Vec<Child> = (0..2)
        .map(|i| {
            Command::new(peer_bin())
                .args(["--relay", &relay.addr, "--match", "late", "--players", "2"])
                .args(["--seed", &(10 + i).to_string(), "--timeout-s", "30"])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in late {
        let (code, stderr, _) = refused_peer_output(c);
        assert_eq!(code, Some(5), "{stderr}");
        assert_eq!(
            refusal_line(&stderr),
            Some("the relay is shutting down"),
            "{stderr}"
        );
    }
    let ended = relay.seen_or_wait(|v| v["event"] == "match_ended");
    assert_eq!(ended["reason"], "completed", "{ended}");
    relay.drain();
    assert!(relay.wait().success());
    assert_eq!(
        relay
            .seen
            .iter()
            .filter(|v| v["event"] == "match_started")
            .count(),
        1
    );
    let refusals: Vec<&Value> = relay
        .seen
        .iter()
        .filter(|v| v["event"] == "join_refused")
        .collect();
    assert_eq!(refusals.len(), 2, "{refusals:?}");
    for r in refusals {
        assert_eq!(r["reason"], "shutting_down", "{r}");
        assert_eq!(r["match"], "late", "{r}");
        assert_eq!(r["level"], "warn", "{r}");
    }
    for c in &mut peers.0 {
        assert!(
            wait_bounded(c).success(),
            "a peer of the finished match failed"
        );
    }
    let files = replay_files(&dir);
    assert_eq!(files.len(), 1);
    let (_, summary) = Reader::open(&files[0]).unwrap().scan().unwrap();
    assert_eq!(summary.ending, Ending::Complete);
    assert_eq!(summary.last_turn.map(|t| t.0), Some(119));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigkill_leaves_every_replay_readable_to_its_last_complete_turn() {
    let dir = scratch("kill");
    let mut relay = Relay::start(&dir, &[]);
    let _a = Peers::start(&relay.addr, "a", 2, 100_000);
    let _b = Peers::start(&relay.addr, "b", 2, 100_000);
    relay.wait_for(|v| v["event"] == "match_started");
    relay.wait_for(|v| v["event"] == "match_started");
    relay.wait_for(turn_closed_at_least(25));
    relay.signal("-KILL");
    relay.drain();
    assert!(!relay.wait().success());
    // The log line of turn T is printed before T is recorded, so every turn
    // before the last one logged per match must be in its file.
    let mut logged = std::collections::BTreeMap::new();
    for v in relay.seen.iter().filter(|v| v["event"] == "turn_closed") {
        let (id, turn) = (v["match"].as_u64().unwrap(), v["turn"].as_u64().unwrap());
        let e = logged.entry(id).or_insert(0);
        *e = turn.max(*e);
    }
    let files = replay_files(&dir);
    assert_eq!(files.len(), 2);
    for f in files {
        let stem = f.file_stem().unwrap().to_str().unwrap().to_owned();
        let id: u64 = stem.rsplit('-').next().unwrap().parse().unwrap();
        let (_, summary) = Reader::open(&f).unwrap().scan().unwrap();
        assert!(summary.trailer.is_none());
        assert!(
            matches!(summary.ending, Ending::NoTrailer | Ending::Torn { .. }),
            "{:?}",
            summary.ending
        );
        let last = u64::from(summary.last_turn.map_or(0, |t| t.0));
        let logged_last = logged[&id];
        assert!(
            last + 1 >= logged_last && logged_last >= 1,
            "{last} readable, {logged_last} logged in {}",
            f.display()
        );
        assert_eq!(
            u64::from(summary.turns),
            last + 1,
            "turns are contiguous from 0"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `relay token` for one slot and returns the hex token.
fn issue(key_file: &Path, match_name: &str, slot: u8, create: bool) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_relay"));
    cmd.args(["token", "--match", match_name, "--slot", &slot.to_string()])
        .args(["--expires-in", "5m", "--key-file"])
        .arg(key_file);
    if create {
        cmd.arg("--create-key");
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Issues a spectator token for `match_name` with an existing key file.
fn issue_spectator(key_file: &Path, match_name: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_relay"))
        .args(["token", "--spectator", "--match", match_name])
        .args(["--expires-in", "5m", "--key-file"])
        .arg(key_file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Starts a `peer --json` process, with a join token or without.
fn token_peer(relay: &str, seed: u64, token: Option<&str>, timeout_s: u64) -> Child {
    let mut cmd = Command::new(peer_bin());
    cmd.args(["--relay", relay, "--match", "tok", "--players", "2"])
        .args(["--turns", "40", "--json", "--seed", &seed.to_string()])
        .args(["--timeout-s", &timeout_s.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(t) = token {
        cmd.args(["--token", t]);
    }
    cmd.spawn().unwrap()
}

#[test]
fn token_mode_relay_admits_token_holders_in_their_slots_and_refuses_others() {
    let dir = scratch("tokens");
    let key = dir.join("relay.key");
    // Slot 1 first: the relay must seat by token, not by join order.
    let t1 = issue(&key, "tok", 1, true);
    let t0 = issue(&key, "tok", 0, false);
    let elsewhere = issue(&key, "elsewhere", 0, false);

    // A bad key file is a start-up error (exit 2), as is --open with a key.
    let bad = dir.join("bad.key");
    std::fs::write(&bad, "not hex\n").unwrap();
    for extra in [
        vec!["--token-key-file", bad.to_str().unwrap()],
        vec!["--open", "--token-key-file", key.to_str().unwrap()],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_relay"))
            .args(["serve", "--bind", "127.0.0.1:0"])
            .args(&extra)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
    }

    let mut relay = Relay::start(&dir, &["--token-key-file", key.to_str().unwrap()]);
    let auth = relay.wait_for(|v| v["event"] == "auth");
    assert_eq!(auth["mode"], "tokens");

    // Without a token the handshake is denied; a token for another match
    // connects but its join is refused. Each peer prints the reason and
    // exits 5 (long before its timeout), and the relay logs each refusal.
    let stranger = token_peer(&relay.addr, 9, None, 30);
    let astray = token_peer(&relay.addr, 8, Some(&elsewhere), 30);
    for (child, text, code, variant) in [
        (
            stranger,
            "the relay requires a join token and none was given",
            "token_missing",
            "TokenMissing",
        ),
        (
            astray,
            "the join token is for another match (the token admits match \"elsewhere\")",
            "wrong_match",
            "WrongMatch",
        ),
    ] {
        let (exit, stderr, stdout) = refused_peer_output(child);
        assert_eq!(exit, Some(5), "{stderr}");
        let summary: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(summary["refused"]["reason"], variant, "{summary}");
        assert!(summary["player"].is_null(), "{summary}");
        assert_eq!(refusal_line(&stderr), Some(text), "{stderr}");
        let logged = relay.seen_or_wait(|v| v["event"] == "join_refused" && v["reason"] == code);
        assert_eq!(logged["text"], text.split(" (").next().unwrap(), "{logged}");
        assert_eq!(logged["level"], "warn");
    }
    let mut a = token_peer(&relay.addr, 1, Some(&t1), 60);
    let mut b = token_peer(&relay.addr, 2, Some(&t0), 60);
    let mut summaries = Vec::new();
    for c in [&mut a, &mut b] {
        let mut out = String::new();
        std::io::Read::read_to_string(c.stdout.as_mut().unwrap(), &mut out).unwrap();
        assert!(wait_bounded(c).success(), "{out}");
        summaries.push(serde_json::from_str::<Value>(&out).unwrap());
    }
    assert_eq!(summaries[0]["player"], 1, "{:?}", summaries[0]);
    assert_eq!(summaries[1]["player"], 0);
    assert_eq!(summaries[0]["completed"], true);
    assert_eq!(summaries[0]["final_hash"], summaries[1]["final_hash"]);

    relay.stop();
    let started = relay
        .seen
        .iter()
        .filter(|v| v["event"] == "match_started")
        .count();
    assert_eq!(started, 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn open_mode_says_so_at_start_up() {
    let dir = scratch("open");
    let mut relay = Relay::start(&dir, &["--open"]);
    let auth = relay.wait_for(|v| v["event"] == "auth");
    assert_eq!(auth["mode"], "open");
    assert_eq!(auth["level"], "warn");
    relay.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The wedge reproduction: a solo peer of an unbounded match joins and
/// leaves. The relay ends that match as abandoned at once, and stays
/// responsive: a second match plays to its end on it, and SIGTERM then
/// stops it (before the fix it spun at 100 % CPU, grew by ~0.5 GB/s,
/// answered no handshake and ignored SIGTERM).
#[test]
fn a_solo_peer_leaving_an_unbounded_match_does_not_wedge_the_relay() {
    let dir = scratch("wedge");
    let mut relay = Relay::start(&dir, &["--grace-s", "0"]);
    for turns in ["unbounded", "1000000"] {
        let mut solo = Command::new(peer_bin())
            .args(["--relay", &relay.addr, "--match", "solo", "--players", "1"])
            .args(["--turns", turns, "--timeout-s", "2"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        relay.wait_for(|v| v["event"] == "match_started");
        // The peer gives up after its timeout (no end comes) and leaves.
        let _ = wait_bounded(&mut solo);
        let ended = relay.wait_for(|v| v["event"] == "match_ended");
        assert_eq!(ended["reason"], "abandoned", "{ended}");
    }
    let mut peers = Peers::start(&relay.addr, "after", 2, 20);
    let ended = relay.wait_for(|v| v["event"] == "match_ended" && v["reason"] == "completed");
    assert!(ended["turn"].as_u64().is_some(), "{ended}");
    for c in &mut peers.0 {
        assert!(
            wait_bounded(c).success(),
            "a peer of the second match failed"
        );
    }
    relay.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `peer` whose stderr is kept (for its last words) and whose exit is awaited.
fn peer_with_stderr(relay: &str, name: &str, seed: u64, turns: u32) -> Child {
    Command::new(peer_bin())
        .args(["--relay", relay, "--match", name, "--players", "2"])
        .args(["--turns", &turns.to_string(), "--seed", &seed.to_string()])
        .args(["--timeout-s", "60"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits (bounded) for a peer and returns its exit code and stderr.
fn finish(mut child: Child) -> (Option<i32>, String) {
    let status = wait_bounded(&mut child);
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        std::io::Read::read_to_string(&mut e, &mut err).unwrap();
    }
    (status.code(), err)
}

/// With a fixed 25-turn delay at 100 ms turns (2.5 s, more than the old
/// fixed 2 s end grace), both peers play to the end and exit 0, and the
/// relay's replay holds a hash record for each of the 50 turns.
#[test]
fn a_25_turn_delay_match_ends_cleanly_with_every_hash_recorded() {
    let dir = scratch("delay25");
    let mut relay =
        Relay::start_with_turn_ms(&dir, "100", &["--fixed-delay", "--input-delay", "25"]);
    let peers: Vec<Child> = (1..=2)
        .map(|seed| peer_with_stderr(&relay.addr, "d25", seed, 50))
        .collect();
    let ended = relay.wait_for(|v| v["event"] == "match_ended");
    assert_eq!(ended["reason"], "completed", "{ended}");
    assert_eq!(ended["turn"], 49, "{ended}");
    for p in peers {
        let (code, err) = finish(p);
        assert_eq!(code, Some(0), "peer stderr: {err}");
    }
    relay.wait_for(|v| v["event"] == "recorded");
    let agreed = relay
        .seen
        .iter()
        .filter(|v| v["event"] == "hash_agreed")
        .count();
    assert_eq!(agreed, 50);
    let files = replay_files(&dir);
    assert_eq!(files.len(), 1);
    let (_, summary) = Reader::open(&files[0]).unwrap().scan().unwrap();
    assert_eq!(summary.ending, Ending::Complete);
    assert_eq!(summary.hashes, 50);
    relay.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A match ended by the relay's shutdown: each peer says why and exits 4.
#[test]
fn peers_of_a_match_ended_by_shutdown_say_so_and_exit_4() {
    let dir = scratch("shutdown");
    let mut relay = Relay::start(&dir, &["--grace-s", "0"]);
    let peers: Vec<Child> = (1..=2)
        .map(|seed| peer_with_stderr(&relay.addr, "s", seed, 100_000))
        .collect();
    relay.wait_for(|v| v["event"] == "match_started");
    relay.wait_for(turn_closed_at_least(10));
    relay.signal("-TERM");
    let ended = relay.wait_for(|v| v["event"] == "match_ended");
    assert_eq!(ended["reason"], "shutdown", "{ended}");
    for p in peers {
        let (code, err) = finish(p);
        assert_eq!(code, Some(4), "peer stderr: {err}");
        assert!(
            err.lines().any(|l| l == "match ended: relay shutting down"),
            "{err}"
        );
    }
    relay.drain();
    assert!(relay.wait().success());
    let _ = std::fs::remove_dir_all(&dir);
}

mod agones;
mod agones_sdk;
mod live;
mod threads;

/// 60 handshakes of another protocol from one address, then silence: the
/// relay logs 20 refusals (its per-second cap) and then, with no later
/// refusal to open a new window, one `refusals_suppressed` line with the
/// 40 others (before, that count waited for the next refusal, for ever).
#[test]
fn a_refusal_floods_last_suppressed_count_is_logged_without_another_refusal() {
    use lockstep::low_level::transport::{Client, TransportConfig};
    let dir = scratch("suppressed");
    let mut relay = Relay::start(&dir, &[]);
    let to: std::net::SocketAddr = relay.addr.parse().unwrap();
    let cfg = TransportConfig {
        protocol_id: TransportConfig::default().protocol_id ^ 1,
        ..TransportConfig::default()
    };
    let mut client = Client::new(lockstep::Instant::ZERO, to, cfg, 7);
    let mut hello = Vec::new();
    assert!(
        client
            .poll_transmit(lockstep::Instant::ZERO, &mut hello)
            .is_some()
    );
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    for _ in 0..60 {
        socket.send_to(&hello, to).unwrap();
    }
    let suppressed = relay.wait_for(|v| v["event"] == "refusals_suppressed");
    let refused = relay
        .seen
        .iter()
        .filter(|v| v["event"] == "join_refused" && v["reason"] == "wrong_protocol")
        .count() as u64;
    assert_eq!(refused, 20);
    assert_eq!(
        suppressed["count"].as_u64(),
        Some(60 - refused),
        "{suppressed}"
    );
    relay.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
