//! The guide (`lockstep/docs/guide.md`, rendered as `lockstep::guide`), run:
//! its example game, Snakes (`tests/examples/snakes.rs`, written against the
//! public API only), plays through a real relay over loopback UDP with the
//! guide's glue, in process and as the example binary; the recordings verify
//! with the game's own replay tool; its hashes are snapshot-tested with
//! insta; and the guide's code is the example's, verbatim, with the glue
//! count it states.

#![allow(clippy::unwrap_used)] // tests may unwrap

// The example is a binary's code: here only part of it is used, and its
// public items are public for the reader, not for another crate. Its
// `snakes_hashes` test (the guide's insta step) runs in this binary.
#[allow(dead_code, unreachable_pub)]
#[path = "../../examples/snakes.rs"]
mod snakes;

use lockstep::peer::PeerBuilder;
use snakes::{Snakes, hungry, play};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tests::harness::{Proc, Relay, bins, scratch_dir};

/// The guide's markdown.
fn guide() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../lockstep/docs/guide.md"
    ))
    .unwrap()
}

const EXAMPLE: &str = include_str!("../../examples/snakes.rs");

/// The code between `// --- guide: NAME ---` and its end marker.
fn section(name: &str) -> &'static str {
    EXAMPLE
        .split(&format!("// --- guide: {name} ---\n"))
        .nth(1)
        .and_then(|g| g.split(&format!("// --- end guide: {name} ---")).next())
        .unwrap()
}

/// Lines of code (not blank, not comments) of the glue a game needs beyond
/// its `Simulation` for a networked, recorded, verified match: the peer loop
/// and the `main` that plays, records and is the replay tool.
fn glue_lines() -> usize {
    ["glue", "main"]
        .iter()
        .flat_map(|s| section(s).lines())
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with("//"))
        .count()
}

/// `step` applies inputs in canonical order whatever order it is given
/// (the trait's contract; the engine itself always hands them sorted).
#[test]
fn step_ignores_the_order_inputs_are_given_in() {
    use sim::{MatchSetup, PlayerId, Simulation, Stamped, Turn};
    let setup = MatchSetup {
        seed: 9,
        players: 4,
        ticks_per_turn: 2,
    };
    let (mut a, mut b) = (Snakes::new(&setup), Snakes::new(&setup));
    for t in 0..40 {
        let mut inputs: Vec<Stamped<snakes::Command>> = (0..4)
            .map(PlayerId)
            .flat_map(|player| {
                // Two commands a player: their order within the player matters.
                let mut c = hungry(&a, player);
                c.push(snakes::Command::Turn(snakes::Dir::Left));
                c.into_iter()
                    .zip(0u16..)
                    .map(move |(command, seq)| Stamped {
                        player,
                        seq,
                        command,
                    })
            })
            .collect();
        a.step(Turn(t), &inputs);
        inputs.reverse();
        b.step(Turn(t), &inputs);
        assert_eq!(a.state_hash(), b.state_hash(), "turn {t}");
    }
}

/// Three players of Snakes meet through a real relay (`relay::udp::serve`,
/// open mode, recording) that runs 3 ticks per turn: with
/// `with_ticks_per_turn(3)` they play 40 turns with the guide's glue and end
/// with the same hash. Snakes' rules hash mixes in the seed (its walls), so
/// the relay, which does not know the game, records the join's fingerprint;
/// the recording still verifies, with `replays::verify` and with the game's
/// own replay tool (`Games::with_simulation`). A peer built for the default
/// ticks is refused at the start with the relay's value. A spectator runs
/// the same loop to the same final hash, submitting nothing.
#[test]
fn snakes_plays_through_a_real_relay_and_its_recordings_verify() {
    use sim::{Simulation, Turn};
    let dir = scratch_dir("guide-relay");
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let relay = socket.local_addr().unwrap();
    let recorder = relay::recorder::Recorder::new(&dir, relay::demo::known_rules_hash).unwrap();
    let config = relay::RelayConfig {
        ticks_per_turn: 3,
        turn_length: lockstep::Duration::from_millis(40),
        rejoin: relay::rejoin_config::RejoinConfig {
            spectator_delay: lockstep::Duration::ZERO,
            ..relay::rejoin_config::RejoinConfig::default()
        },
        ..relay::RelayConfig::default()
    };
    let stop = AtomicBool::new(false);
    let mine = dir.join("mine.lsr");
    // The spectator joins once the match runs (turn 10 closed).
    let (running, started) = std::sync::mpsc::channel();
    let mut running = Some(running);
    let (results, wrong, watched) = std::thread::scope(|scope| {
        let server = scope.spawn(|| {
            relay::udp::serve(
                &socket,
                config,
                lockstep::peer::TransportConfig::default(),
                Some(recorder),
                &stop,
                move |note| {
                    if let relay::udp::RelayNote::Event(
                        relay::RouterEvent::TurnClosed { turn: Turn(10), .. },
                        _,
                    ) = note
                        && let Some(tx) = running.take()
                    {
                        let _ = tx.send(());
                    }
                },
            )
        });
        let spectator = scope.spawn(move || {
            started.recv_timeout(Duration::from_secs(60)).unwrap();
            let watch = PeerBuilder::<Snakes>::new("guide", 3)
                .with_spectate()
                .with_ticks_per_turn(3);
            // The guide's loop, unchanged: a spectator has no player, so it
            // is never asked for commands and never submits.
            play(relay, watch, |_: &Snakes, _| {
                unreachable!("a spectator never chooses")
            })
        });
        let players: Vec<_> = (0..3)
            .map(|i| {
                let mut builder = PeerBuilder::<Snakes>::new("guide", 3)
                    .with_turns(40)
                    .with_ticks_per_turn(3);
                if i == 0 {
                    builder = builder.with_record(&mine);
                }
                scope.spawn(move || play(relay, builder, hungry))
            })
            .collect();
        let wrong = PeerBuilder::<Snakes>::new("wrong-ticks", 1).with_turns(5);
        let wrong = scope.spawn(move || play(relay, wrong, hungry));
        let results: Vec<_> = players.into_iter().map(|p| p.join().unwrap()).collect();
        let wrong = wrong.join().unwrap();
        let watched = spectator.join().unwrap();
        stop.store(true, Ordering::Relaxed);
        server.join().unwrap().unwrap();
        (results, wrong, watched)
    });
    let (turn, hash) = results[0].as_ref().unwrap().to_owned();
    assert_eq!(turn, Turn(39));
    for r in &results {
        assert_eq!(r.as_ref().unwrap(), &(turn, hash));
    }
    assert_eq!(
        watched.unwrap(),
        (turn, hash),
        "the spectator watched to the end"
    );
    let refused = wrong.unwrap_err().to_string();
    assert!(refused.contains("rules"), "{refused}");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("guide"))
        })
        .collect();
    assert_eq!(
        files.len(),
        1,
        "the relay's recording of the match: {files:?}"
    );
    let relays = files[0].clone();
    let header = replays::Reader::open(&relays).unwrap().header().clone();
    assert_eq!(header.setup.ticks_per_turn, 3);
    assert_eq!(
        header.rules_hash,
        sim::rules_fingerprint::<Snakes>(3, 3),
        "a game the relay does not know: the join's fingerprint"
    );
    assert_ne!(
        header.rules_hash,
        Snakes::new(&header.setup).rules_hash(),
        "the rules hash depends on the seed (the case that failed)"
    );
    files.push(mine);
    for f in &files {
        let report = replays::verify::<Snakes, _>(replays::Reader::open(f).unwrap(), |_| {})
            .unwrap_or_else(|e| panic!("{f:?}: {e}"));
        assert!(report.verified() && report.clean(), "{f:?}: {report:?}");
        assert_eq!(report.final_hash, Some(hash), "{f:?}");
        let games = replays::cli::Games::new().with_simulation::<Snakes>();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let args = ["snakes".as_ref(), "verify".as_ref(), f.as_os_str()];
        let code = replays::cli::run(&games, args, &mut out, &mut err);
        assert_eq!(code, 0, "{}", String::from_utf8_lossy(&err));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The example binary, built once (a no-op when fresh): `cargo test -p
/// tests --test it guide::` does not build examples itself.
fn snakes_bin() -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let relay = &bins().relay;
        let dir = relay.parent().unwrap();
        let target = dir.parent().unwrap();
        let bin = dir
            .join("examples")
            .join(format!("snakes{}", std::env::consts::EXE_SUFFIX));
        // `cargo test --workspace` builds the examples already; building it
        // again with this package's feature set alone recompiles half the
        // workspace (tens of seconds of CI). `E2E_REBUILD=1` forces it.
        let rebuild = std::env::var_os("E2E_REBUILD").is_some_and(|v| v != "0");
        if !rebuild && bin.exists() {
            return bin;
        }
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args([
            "build",
            "-p",
            "lockstep-tests",
            "--example",
            "snakes",
            "--target-dir",
        ])
        .arg(target);
        if dir.file_name() == Some("release".as_ref()) {
            cmd.arg("--release");
        }
        assert!(
            cmd.status().unwrap().success(),
            "cargo build --example snakes"
        );
        bin
    })
    .clone()
}

/// The runnable example, as the guide runs it: a real `relay serve`
/// process and three `snakes` processes over loopback UDP play a match,
/// each records its own replay, and the game's own replay tool
/// (`snakes replay verify`) verifies every peer's recording and the
/// relay's. Bounded: 120 turns of 30 ms, every wait with a deadline.
#[test]
fn the_snakes_example_plays_records_and_verifies_with_its_own_replay_tool() {
    let dir = scratch_dir("guide-snakes");
    let rec = dir.join("relay");
    let mut relay = Relay::start(&rec, &["--open", "--turn-ms", "30"]);
    let addr = relay.addr.to_string();
    let bin = snakes_bin();
    let mut procs: Vec<(Proc, PathBuf)> = (0..3)
        .map(|i| {
            let own = dir.join(format!("p{i}.lsr"));
            let args = [addr.clone(), "3".into(), own.display().to_string()];
            (Proc::spawn(&format!("snakes{i}"), &bin, &args), own)
        })
        .collect();
    let mut finals = Vec::new();
    for (p, _) in &mut procs {
        let (status, out) = p.wait_exit(Duration::from_secs(60));
        assert!(status.success(), "{}: {out}", p.name());
        let last = out
            .lines()
            .find(|l| l.starts_with("turn 119: "))
            .unwrap_or_else(|| panic!("{out}"))
            .to_owned();
        finals.push(last);
    }
    assert!(finals.iter().all(|f| *f == finals[0]), "{finals:?}");
    let recorded = relay.wait_recorded(Duration::from_secs(30));
    let files: Vec<&Path> = procs
        .iter()
        .map(|(_, own)| own.as_path())
        .chain([recorded.as_path()])
        .collect();
    for f in files {
        let out = Command::new(&bin)
            .args(["replay".as_ref(), "verify".as_ref(), f.as_os_str()])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{f:?}: {text}");
        assert!(text.contains("VERIFIED"), "{text}");
    }
    drop(relay);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `relay serve --ticks-per-turn` and `peer --ticks-per-turn` are
/// validated: 0 is bad usage (exit 2), naming the flag.
#[test]
fn zero_ticks_per_turn_is_refused_by_relay_and_peer() {
    let runs = [
        (
            &bins().relay,
            vec!["serve", "--bind", "127.0.0.1:0", "--open"],
        ),
        (&bins().peer, vec!["--relay", "127.0.0.1:9"]),
    ];
    for (bin, mut args) in runs {
        args.extend(["--ticks-per-turn", "0"]);
        let out = Command::new(bin)
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bin:?}: {err}");
        assert!(err.contains("--ticks-per-turn"), "{err}");
    }
}

/// Every Rust block of the guide is the example's code: its shown lines
/// are one piece of `tests/examples/snakes.rs`, verbatim, and its hidden
/// lines (`# `, context for the doctest) are lines of it too. The guide
/// states the glue's size, counted here.
#[test]
fn the_guide_shows_the_example_code() {
    let guide = guide();
    let example_lines: std::collections::BTreeSet<&str> = EXAMPLE.lines().collect();
    let mut blocks = 0;
    let mut rest = guide.as_str();
    while let Some(i) = rest.find("```rust") {
        let body = &rest[i..];
        let body = &body[body.find('\n').unwrap() + 1..];
        let end = body.find("```").unwrap();
        let (mut shown, mut hidden) = (String::new(), Vec::new());
        for line in body[..end].lines() {
            match line.strip_prefix("# ").or((line == "#").then_some("")) {
                Some(h) => hidden.push(h),
                None => {
                    shown.push_str(line);
                    shown.push('\n');
                }
            }
        }
        assert!(
            EXAMPLE.contains(&shown),
            "a guide block is not in tests/examples/snakes.rs:\n{shown}"
        );
        for h in hidden.iter().filter(|h| !h.is_empty()) {
            assert!(
                example_lines.contains(h),
                "a hidden line is not the example's: {h}"
            );
        }
        blocks += 1;
        rest = &body[end + 3..];
    }
    assert!(blocks >= 4, "the guide shows its code ({blocks} blocks)");
    for name in ["game", "glue", "main", "hash test"] {
        assert!(
            guide.contains(section(name).trim_end()),
            "the guide shows the example's {name} section whole"
        );
    }
    let stated = format!("**{} lines of glue**", glue_lines());
    assert!(
        guide.contains(&stated),
        "the guide must state the glue's size as {stated}"
    );
    assert!(glue_lines() <= 60, "the goal: at most 60 lines of glue");
}
