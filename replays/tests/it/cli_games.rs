//! The replay tool across games: the shipped binary on the arena's golden
//! file and on a file of a game it does not know, and `replays::cli` as the
//! entry point of a developer's own game's replay tool (the toy game).

use crate::golden::{ARENA, SKIRMISH};
use crate::toy::{Plan, Toy, record};
use replays::cli::{Games, ReplayGame};
use sim::{Simulation, Turn};
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_replay");

/// The toy game's replay tool needs nothing beyond the defaults.
impl ReplayGame for Toy {}

/// Writes `bytes` to a scratch file named `name` and returns its path.
fn scratch(name: &str, bytes: &[u8]) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// The shipped `replay` binary: exit code, stdout, stderr.
fn replay(args: &[&std::ffi::OsStr]) -> (i32, String, String) {
    let out = Command::new(BIN).args(args).output().unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// `replays::cli::run` in-process with `games`: exit code, stdout, stderr.
fn run_lib(games: &Games, args: &[&std::ffi::OsStr]) -> (u8, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let argv = std::iter::once("my-replay".as_ref()).chain(args.iter().copied());
    let code = replays::cli::run(games, argv, &mut out, &mut err);
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

/// The arena's golden file under a scratch name (one per test: tests run
/// in parallel and must not rewrite a file another one reads).
fn arena_file(name: &str) -> PathBuf {
    scratch(name, ARENA)
}

/// A complete recording of the toy game (game id "toy").
fn toy_file(name: &str) -> PathBuf {
    scratch(name, &record(Plan::default(), |_, _| {}))
}

#[test]
fn arena_info_verify_state_export() {
    let f = arena_file("arena_3p.replay");
    let (code, out, err) = replay(&["info".as_ref(), f.as_os_str()]);
    assert_eq!((code, err.as_str()), (0, ""));
    assert!(out.contains("game:        arena version 1"), "{out}");
    insta::assert_snapshot!("arena_info", out);

    let (code, out, err) = replay(&["verify".as_ref(), f.as_os_str()]);
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    assert!(
        out.contains("VERIFIED: every recorded hash matches"),
        "{out}"
    );
    insta::assert_snapshot!("arena_verify", out);
    let (code, out, _) = replay(&["verify".as_ref(), "--json".as_ref(), f.as_os_str()]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["verified"].clone(), v["turns"].clone()),
        (true.into(), 200.into())
    );
    assert_eq!(v["keyframes_checked"], 4);

    // The arena's own summary (scores and hulls), from the keyframe at 100.
    let (code, out, err) = replay(&[
        "state".as_ref(),
        f.as_os_str(),
        "--turn".as_ref(),
        "120".as_ref(),
    ]);
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    assert!(
        out.contains("from the keyframe at turn 100, 20 turns simulated"),
        "{out}"
    );
    assert!(out.contains("matches the recorded hash"), "{out}");
    assert!(out.contains("kills"), "{out}");
    insta::assert_snapshot!("arena_state_120", out);
    let (code, out, _) = replay(&[
        "state".as_ref(),
        f.as_os_str(),
        "--turn".as_ref(),
        "120".as_ref(),
        "--json".as_ref(),
    ]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["summary"]["ships"].as_array().unwrap().len(), 3);

    // Arena commands decoded with serde; the first records and the end line.
    let (code, out, err) = replay(&["export".as_ref(), f.as_os_str()]);
    assert_eq!((code, err.as_str()), (0, ""));
    let lines: Vec<&str> = out.lines().collect();
    // header + 200 turns + 200 hashes + 4 keyframes + index + trailer + end
    assert_eq!(lines.len(), 1 + 200 + 200 + 4 + 1 + 1 + 1);
    let excerpt = [&lines[..4], &lines[lines.len() - 2..]].concat().join("\n");
    insta::assert_snapshot!("arena_export_excerpt", excerpt);
}

#[test]
fn a_file_of_an_unknown_game_is_refused() {
    let f = toy_file("unknown_game.replay");
    let refusal =
        "replay: this replay is game toy version 1; this tool knows: lockstep-rts 1, arena 1\n";
    for args in [
        vec!["verify".as_ref(), f.as_os_str()],
        vec![
            "state".as_ref(),
            f.as_os_str(),
            "--turn".as_ref(),
            "3".as_ref(),
        ],
        vec!["export".as_ref(), f.as_os_str()],
        vec![
            "reindex".as_ref(),
            f.as_os_str(),
            "--out".as_ref(),
            scratch("unknown_reindexed.replay", b"").as_os_str(),
        ],
        vec!["diff".as_ref(), f.as_os_str(), f.as_os_str()],
    ] {
        let (code, out, err) = replay(&args);
        assert_eq!(
            (code, out.as_str(), err.as_str()),
            (1, "", refusal),
            "{args:?}"
        );
    }
    // `verify --json` still prints its one object, with the refusal in it.
    let (code, out, err) = replay(&["verify".as_ref(), "--json".as_ref(), f.as_os_str()]);
    assert_eq!((code, err.as_str()), (1, refusal));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["verified"], false);
    assert_eq!(v["error"], refusal["replay: ".len()..].trim_end());
    // `info` plays nothing: it reads a file of any game.
    let (code, out, _) = replay(&["info".as_ref(), f.as_os_str()]);
    assert_eq!(code, 0);
    assert!(out.contains("game:        toy version 1"), "{out}");
}

#[test]
fn diff_of_two_games_says_so() {
    let (a, b) = (
        arena_file("arena_for_diff.replay"),
        scratch("skirmish_for_diff.replay", SKIRMISH),
    );
    let (code, out, err) = replay(&["diff".as_ref(), a.as_os_str(), b.as_os_str()]);
    assert_eq!((code, err.as_str()), (1, ""));
    assert_eq!(
        out,
        "A (arena_for_diff.replay) is game arena version 1, B (skirmish_for_diff.replay) is game \
         lockstep-rts version 1: recordings of different games\n"
    );
    let (code, out, _) = replay(&[
        "diff".as_ref(),
        "--json".as_ref(),
        a.as_os_str(),
        b.as_os_str(),
    ]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["same"], false);
    assert_eq!(v["different_games"], true);
    assert_eq!(v["b"]["game_id"], "lockstep-rts");
}

#[test]
fn a_developers_own_game_gets_the_whole_tool_from_the_library() {
    let games = Games::new().with::<Toy>();
    assert_eq!(games.known(), "toy 1");
    let f = toy_file("own_game.replay");

    let (code, out, err) = run_lib(&games, &["verify".as_ref(), f.as_os_str()]);
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    assert!(out.contains("re-simulated 40 turns"), "{out}");
    assert!(
        out.ends_with("VERIFIED: every recorded hash matches\n"),
        "{out}"
    );

    // Default summary: the state hash and the section hashes.
    let (code, out, _) = run_lib(
        &games,
        &[
            "state".as_ref(),
            f.as_os_str(),
            "--turn".as_ref(),
            "25".as_ref(),
        ],
    );
    assert_eq!(code, 0, "{out}");
    let world = crate::toy::simulate_to(2, Turn(25));
    let mut expected = format!("state hash {}\n", world.state_hash());
    for s in world.section_hashes() {
        expected.push_str(&format!("  {}: {}\n", s.name, s.hash));
    }
    assert!(out.ends_with(&expected), "{out}");
    let (_, out, _) = run_lib(
        &games,
        &[
            "state".as_ref(),
            f.as_os_str(),
            "--turn".as_ref(),
            "25".as_ref(),
            "--json".as_ref(),
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["summary"]["state_hash"], world.state_hash().to_hex());
    assert_eq!(v["summary"]["sections"][1]["name"], "player 0");

    // Default command display: serde in export, Debug in diff.
    let (code, out, _) = run_lib(&games, &["export".as_ref(), f.as_os_str()]);
    assert_eq!(code, 0);
    assert!(
        out.contains(r#""commands":[{"Add":{"amount":0,"slot":0}},"Scramble"]"#),
        "{out}"
    );
    let altered = scratch(
        "own_game_altered.replay",
        &record(Plan::default(), |t, inputs| {
            if t == Turn(6) {
                inputs[0].1.clear();
                sim::encode_commands(&[crate::toy::ToyCmd::Scramble], &mut inputs[0].1);
            }
        }),
    );
    let (code, out, _) = run_lib(
        &games,
        &["diff".as_ref(), f.as_os_str(), altered.as_os_str()],
    );
    assert_eq!(code, 1);
    assert!(out.contains("first difference at turn 6:"), "{out}");
    assert!(out.contains("    B: [Scramble]"), "{out}");

    // The developer's tool knows only their game.
    let (code, out, err) = run_lib(
        &games,
        &[
            "verify".as_ref(),
            arena_file("arena_for_toy_tool.replay").as_os_str(),
        ],
    );
    assert_eq!((code, out.as_str()), (1, ""));
    assert_eq!(
        err,
        "replay: this replay is game arena version 1; this tool knows: toy 1\n"
    );

    // Usage: help is a result (exit 0), a bad flag is bad usage (exit 2).
    let (code, out, _) = run_lib(&games, &["--help".as_ref()]);
    assert_eq!(code, 0);
    assert!(out.contains("Usage:"), "{out}");
    let (code, out, err) = run_lib(&games, &["verify".as_ref(), "--frobnicate".as_ref()]);
    assert_eq!((code, out.as_str()), (2, ""));
    assert!(err.contains("--frobnicate"), "{err}");
}

/// A stdout that fails every write with `kind`.
struct Failing(io::ErrorKind);

impl Write for Failing {
    fn write(&mut self, _: &[u8]) -> io::Result<usize> {
        Err(self.0.into())
    }
    fn flush(&mut self) -> io::Result<()> {
        Err(self.0.into())
    }
}

#[test]
fn a_closed_stdout_keeps_the_status_and_a_failing_one_is_exit_1() {
    let games = Games::new().with::<Toy>();
    let f = toy_file("own_game_pipes.replay");
    let args = ["my-replay".as_ref(), "verify".as_ref(), f.as_os_str()];
    // `| head`: the reader left; the verdict (exit 0) stands, nothing is said.
    let mut err = Vec::new();
    let code = replays::cli::run(
        &games,
        args,
        &mut Failing(io::ErrorKind::BrokenPipe),
        &mut err,
    );
    assert_eq!((code, err.as_slice()), (0, &b""[..]));
    // A full disk loses the result: exit 1 and a diagnostic.
    let code = replays::cli::run(
        &games,
        args,
        &mut Failing(io::ErrorKind::StorageFull),
        &mut err,
    );
    assert_eq!(code, 1);
    assert!(
        String::from_utf8(err)
            .unwrap()
            .starts_with("cannot write to stdout:")
    );
}

/// `Games::with_simulation` registers a game with no `ReplayGame` impl (a
/// binary whose game lives in a library crate cannot write
/// `impl ReplayGame for TheirGame {}`: E0117) and gives exactly the tool the
/// defaults give: the same verify, state, state --json and export output.
#[test]
fn a_game_without_a_replay_game_impl_gets_the_default_tool() {
    let with_impl = Games::new().with::<Toy>();
    let plain = Games::new().with_simulation::<Toy>();
    assert_eq!(plain.known(), "toy 1");
    let f = toy_file("plain_game.replay");
    let f = f.as_os_str();
    let runs: [&[&std::ffi::OsStr]; 4] = [
        &["verify".as_ref(), f],
        &["state".as_ref(), f, "--turn".as_ref(), "25".as_ref()],
        &[
            "state".as_ref(),
            f,
            "--turn".as_ref(),
            "25".as_ref(),
            "--json".as_ref(),
        ],
        &["export".as_ref(), f],
    ];
    for args in runs {
        let expected = run_lib(&with_impl, args);
        assert_eq!(expected.0, 0, "{args:?}: {expected:?}");
        assert_eq!(run_lib(&plain, args), expected, "{args:?}");
    }
}
