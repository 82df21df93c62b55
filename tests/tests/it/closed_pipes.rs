//! Every binary survives a closed output stream: `replay state ... | head`
//! must not panic. Each test starts a real process whose stdout (or stderr)
//! is a pipe whose read end the test closes before the process writes, so
//! every write fails with EPIPE, and checks that the process exits with the
//! status it has with an open pipe, without a panic message.
//!
//! The closed pipe is made deterministically (the read end is dropped right
//! after spawning, before the child can have written), not by racing a
//! reader that stops early.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use tests::harness::{Relay, bins, scratch_dir};

/// Which of the child's output streams is closed.
#[derive(Clone, Copy, Debug)]
enum Closed {
    Stdout,
    Stderr,
}

/// Runs `program args` with `closed` a pipe whose read end is already
/// closed; returns the exit code and what the other stream held.
fn run_closed(program: &Path, args: &[&str], closed: Closed) -> (Option<i32>, String) {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()));
    // Close our read end now: the child's first write to it gets EPIPE.
    let other = match closed {
        Closed::Stdout => {
            drop(child.stdout.take());
            child.stderr.take().map(|mut e| {
                std::thread::spawn(move || {
                    let mut s = String::new();
                    let _ = std::io::Read::read_to_string(&mut e, &mut s);
                    s
                })
            })
        }
        Closed::Stderr => {
            drop(child.stderr.take());
            child.stdout.take().map(|mut o| {
                std::thread::spawn(move || {
                    let mut s = String::new();
                    let _ = std::io::Read::read_to_string(&mut o, &mut s);
                    s
                })
            })
        }
    };
    let status = child.wait().expect("wait for the child");
    let other = other
        .map(|h| h.join().unwrap_or_default())
        .unwrap_or_default();
    (status.code(), other)
}

fn assert_quiet(what: &str, (code, other): (Option<i32>, String), expected: i32) {
    assert!(
        !other.contains("panicked"),
        "{what}: panicked on a closed pipe:\n{other}"
    );
    assert_eq!(
        code,
        Some(expected),
        "{what}: exit status on a closed pipe; other stream:\n{other}"
    );
}

fn golden() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../replays/tests/data/relay_economy_4p.replay")
}

#[test]
fn replay_exits_quietly_with_its_own_status_when_stdout_is_closed() {
    let replay = &bins().replay;
    let file = golden();
    let file = file.to_str().expect("utf-8 path");
    for args in [
        vec!["info", file],
        vec!["export", file],
        vec!["state", file, "--turn", "10"],
        vec!["state", file, "--turn", "10", "--json"],
    ] {
        assert_quiet(
            &format!("replay {}", args[0]),
            run_closed(replay, &args, Closed::Stdout),
            0,
        );
    }
    // A failure keeps its status: a missing file is 1, closed pipe or not.
    assert_quiet(
        "replay info (missing file)",
        run_closed(replay, &["info", "/nonexistent/x.lsr"], Closed::Stdout),
        1,
    );
}

#[test]
fn relay_exits_quietly_when_stdout_or_stderr_is_closed() {
    let dir = scratch_dir("closed-pipes-relay");
    let key = dir.join("relay.key");
    let key = key.to_str().expect("utf-8 path");
    assert_quiet(
        "relay token",
        run_closed(
            &bins().relay,
            &[
                "token",
                "--create-key",
                "--key-file",
                key,
                "--match",
                "m",
                "--slot",
                "0",
            ],
            Closed::Stdout,
        ),
        0,
    );
    // An error message to a closed stderr: still bad usage (2), no panic.
    assert_quiet(
        "relay demo --loss 2",
        run_closed(&bins().relay, &["demo", "--loss", "2"], Closed::Stderr),
        2,
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn netsim_exits_quietly_when_stdout_is_closed() {
    // Its report is printed when --duration-s elapses.
    assert_quiet(
        "netsim",
        run_closed(
            &bins().netsim,
            &[
                "--listen",
                "127.0.0.1:0",
                "--upstream",
                "127.0.0.1:9",
                "--duration-s",
                "0.1",
            ],
            Closed::Stdout,
        ),
        0,
    );
}

#[test]
fn peer_keeps_its_exit_status_when_stdout_is_closed() {
    let dir = scratch_dir("closed-pipes-peer");
    let mut relay = Relay::start(&dir, &["--turn-ms", "20"]);
    let addr = relay.addr.to_string();
    let got = run_closed(
        &bins().peer,
        &[
            "--relay",
            &addr,
            "--match",
            "pipe",
            "--players",
            "1",
            "--turns",
            "10",
            "--timeout-s",
            "60",
        ],
        Closed::Stdout,
    );
    assert_quiet("peer", got, 0);
    relay.proc.kill();
    let _ = relay.proc.wait_exit(Duration::from_secs(10));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bench_exits_quietly_when_stderr_is_closed() {
    // Bad usage reported to a closed stderr: status 2, no panic.
    assert_quiet(
        "bench --only nosuchsection",
        run_closed(
            Path::new(env!("CARGO_BIN_EXE_bench")),
            &["--only", "nosuchsection", "--out", "/nonexistent/b.md"],
            Closed::Stderr,
        ),
        2,
    );
}
