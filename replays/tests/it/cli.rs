//! The `replay` binary: output snapshots on the golden files, exit codes.

use crate::golden::{DESYNC, ECONOMY, SKIRMISH};
use std::path::PathBuf;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_replay");

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// Writes `bytes` to a scratch file named `name` and returns its path.
fn scratch(name: &str, bytes: &[u8]) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn run(args: &[&std::ffi::OsStr]) -> (i32, String, String) {
    let out = Command::new(BIN).args(args).output().unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn torn_economy() -> PathBuf {
    scratch("torn_economy.replay", &ECONOMY[..ECONOMY.len() - 700])
}

#[test]
fn info_snapshots() {
    for name in [
        "peer_skirmish_2p.replay",
        "relay_economy_4p.replay",
        "peer_desync_3p.replay",
        "relay_dispute_3p.replay",
    ] {
        let (code, out, _) = run(&["info".as_ref(), data(name).as_os_str()]);
        assert_eq!(code, 0);
        insta::assert_snapshot!(format!("info_{name}"), out);
    }
    // A torn file is shown, and exits 1 like `verify` (damaged or incomplete).
    let (code, out, _) = run(&["info".as_ref(), torn_economy().as_os_str()]);
    assert_eq!(code, 1);
    assert!(out.contains("the last record was torn"), "{out}");
    insta::assert_snapshot!("info_torn_economy", out);
}

/// `info` counts rejoins (text and `--json`): the 4-player economy file
/// (one drop) rewritten with the dropped player back 10 turns later.
#[test]
fn info_counts_rejoins() {
    use replays::{Reader, Record, SyncPolicy, Writer};
    let mut r = Reader::from_bytes(ECONOMY).unwrap();
    let mut w = Writer::new(Vec::new(), r.header(), SyncPolicy::AtFinish).unwrap();
    let mut back = None;
    for rec in r.by_ref() {
        match rec.unwrap() {
            Record::Turn { turn, inputs } => {
                if let Some((player, at)) = back
                    && turn >= at
                {
                    w.record_rejoin(player, turn).unwrap();
                    back = None;
                }
                w.record_turn(turn, &inputs).unwrap();
            }
            Record::Hash { turn, hash } => w.record_hash(turn, hash).unwrap(),
            Record::Drop { player, turn } => {
                w.record_drop(player, turn).unwrap();
                back = Some((player, sim::Turn(turn.0 + 10)));
            }
            Record::DelayChange { delay, from_turn } => {
                w.record_delay_change(delay, from_turn).unwrap();
            }
            Record::Trailer {
                final_turn,
                final_hash,
                ..
            } => w.finish(final_turn, final_hash).unwrap(),
            _ => {}
        }
    }
    let path = scratch("rejoined_economy.replay", &w.into_inner().unwrap());
    let (code, out, _) = run(&["info".as_ref(), path.as_os_str()]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("1 drops, 1 rejoins"), "{out}");
    let (_, out, _) = run(&["info".as_ref(), "--json".as_ref(), path.as_os_str()]);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["rejoins"], 1, "{out}");
    assert_eq!(json["drops"], 1, "{out}");
}

#[test]
fn verify_json_snapshots_and_exit_codes() {
    let torn = torn_economy();
    for (label, path, expected_code) in [
        ("skirmish", data("peer_skirmish_2p.replay"), 0),
        ("economy", data("relay_economy_4p.replay"), 0),
        ("desync", data("peer_desync_3p.replay"), 1),
        ("torn_economy", torn, 1),
        ("dispute", data("relay_dispute_3p.replay"), 3),
    ] {
        let (code, out, err) = run(&["verify".as_ref(), "--json".as_ref(), path.as_os_str()]);
        assert_eq!(code, expected_code, "{label}: {out}");
        // Not a terminal: no progress bar on stderr.
        assert!(err.is_empty(), "{label}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        // Exit 3: the (majority) hashes verify, but desyncs are recorded.
        assert_eq!(v["verified"], expected_code != 1);
        assert_eq!(v["clean"], expected_code == 0);
        insta::assert_snapshot!(format!("verify_json_{label}"), out);
    }
}

#[test]
fn verify_print_hashes_lists_every_simulated_turn() {
    let path = data("peer_skirmish_2p.replay");
    let (code, out, _) = run(&[
        "verify".as_ref(),
        "--json".as_ref(),
        "--print-hashes".as_ref(),
        path.as_os_str(),
    ]);
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let list = v["turn_hashes"].as_array().unwrap();
    assert_eq!(list.len() as u64, v["turns"].as_u64().unwrap());
    for (i, entry) in list.iter().enumerate() {
        assert_eq!(entry["turn"].as_u64().unwrap(), i as u64);
    }
    assert_eq!(list.last().unwrap()["hash"], v["final_hash"]);
    // Without the flag the JSON is unchanged (the snapshots above hold it).
    let (_, plain, _) = run(&["verify".as_ref(), "--json".as_ref(), path.as_os_str()]);
    assert!(!plain.contains("turn_hashes"));

    let (code, text, _) = run(&[
        "verify".as_ref(),
        "--print-hashes".as_ref(),
        path.as_os_str(),
    ]);
    assert_eq!(code, 0);
    let first = list[0]["hash"].as_str().unwrap();
    assert!(text.starts_with(&format!("turn 0: {first}\n")), "{text}");
    assert_eq!(
        text.lines().filter(|l| l.starts_with("turn ")).count(),
        list.len()
    );
}

#[test]
fn verify_text_names_the_divergence() {
    let (code, out, _) = run(&["verify".as_ref(), data("peer_desync_3p.replay").as_os_str()]);
    assert_eq!(code, 1);
    insta::assert_snapshot!("verify_text_desync", out);
}

#[test]
fn verify_text_lists_recorded_desyncs_and_exits_3() {
    let (code, out, _) = run(&[
        "verify".as_ref(),
        data("relay_dispute_3p.replay").as_os_str(),
    ]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("turns 60..=99 (40 turns): odd P2"), "{out}");
    assert!(out.contains("VERIFIED WITH DESYNCS"), "{out}");
    insta::assert_snapshot!("verify_text_dispute", out);
    // The same turns in `info --json`, one entry per turn.
    let (code, out, _) = run(&[
        "info".as_ref(),
        "--json".as_ref(),
        data("relay_dispute_3p.replay").as_os_str(),
    ]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let list = v["recorded_desyncs"].as_array().unwrap();
    assert_eq!(list.len(), 40);
    assert_eq!(list[0]["turn"], 60);
    assert_eq!(list[0]["odd_players"], serde_json::json!([2]));
    assert!(!list[0]["sections"].as_array().unwrap().is_empty());
}

#[test]
fn bad_usage_exits_2_and_damage_exits_1() {
    assert_eq!(run(&["verify".as_ref()]).0, 2);
    assert_eq!(run(&["frobnicate".as_ref()]).0, 2);
    assert_eq!(
        run(&[
            "state".as_ref(),
            "x.replay".as_ref(),
            "--turn".as_ref(),
            "-3".as_ref()
        ])
        .0,
        2
    );
    let (code, _, err) = run(&["verify".as_ref(), "/nonexistent/x.replay".as_ref()]);
    assert_eq!(code, 1);
    assert!(err.contains("replay:"), "{err}");

    let mut future = SKIRMISH.to_vec();
    future[8..12].copy_from_slice(&2u32.to_le_bytes());
    let path = scratch("future_version.replay", &future);
    let (code, _, err) = run(&["info".as_ref(), path.as_os_str()]);
    assert_eq!(code, 1);
    assert!(
        err.contains("version 2 is not supported") && err.contains("1..=1"),
        "{err}"
    );

    let mut flipped = SKIRMISH.to_vec();
    flipped[5000] ^= 4;
    let path = scratch("flipped.replay", &flipped);
    let (code, out, _) = run(&["verify".as_ref(), "--json".as_ref(), path.as_os_str()]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["file_status"]["ending"], "corrupt");
    assert!(v["file_status"]["damage_offset"].as_u64().unwrap() <= 5000);
}

/// `info` on a damaged file prints what it recovered and exits 1, as
/// `verify` does; `--json` too.
#[test]
fn info_on_a_damaged_file_exits_1_like_verify() {
    let mut flipped = SKIRMISH.to_vec();
    flipped[5000] ^= 4;
    let path = scratch("flipped_info.replay", &flipped);
    let (code, out, _) = run(&["info".as_ref(), path.as_os_str()]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("status:"), "{out}");
    let (code, out, _) = run(&["info".as_ref(), "--json".as_ref(), path.as_os_str()]);
    assert_eq!(code, 1, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["file_status"]["ending"], "corrupt");
    let (code, _, _) = run(&["verify".as_ref(), path.as_os_str()]);
    assert_eq!(code, 1);
}

/// Every file error names the file it is about.
#[test]
fn file_errors_name_the_path() {
    for cmd in ["info", "verify", "export", "desync"] {
        let (code, _, err) = run(&[cmd.as_ref(), "/nonexistent/x.replay".as_ref()]);
        assert_eq!(code, 1, "{cmd}");
        assert!(err.contains("/nonexistent/x.replay"), "{cmd}: {err}");
    }
    let (code, _, err) = run(&[
        "diff".as_ref(),
        data("peer_skirmish_2p.replay").as_os_str(),
        "/nonexistent/b.replay".as_ref(),
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("/nonexistent/b.replay"), "{err}");
    let (code, _, err) = run(&[
        "reindex".as_ref(),
        data("peer_skirmish_2p.replay").as_os_str(),
        "-o".as_ref(),
        "/nonexistent/dir/out.replay".as_ref(),
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("/nonexistent/dir/out.replay"), "{err}");
}

/// `reindex -o` onto its own input is bad usage (exit 2) and leaves the
/// file as it was, however the path is spelled.
#[test]
fn reindex_onto_its_own_input_exits_2_untouched() {
    let path = scratch("reindex_self.replay", ECONOMY);
    let dir = path.parent().unwrap();
    let respelled = dir.join(".").join(path.file_name().unwrap());
    for out in [path.clone(), respelled] {
        let (code, _, err) = run(&[
            "reindex".as_ref(),
            path.as_os_str(),
            "-o".as_ref(),
            out.as_os_str(),
        ]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("is the input file"), "{err}");
        assert_eq!(
            std::fs::read(&path).unwrap(),
            ECONOMY,
            "the input was touched"
        );
    }
}

#[test]
fn state_uses_keyframes_and_matches_the_recorded_hash() {
    let (code, out, _) = run(&[
        "state".as_ref(),
        data("peer_skirmish_2p.replay").as_os_str(),
        "--turn".as_ref(),
        "150".as_ref(),
    ]);
    assert_eq!(code, 0);
    assert!(
        out.contains("from the keyframe at turn 100, 50 turns simulated"),
        "{out}"
    );
    assert!(out.contains("matches the recorded hash"), "{out}");
    insta::assert_snapshot!("state_skirmish_150", out);
    let (code, _, err) = run(&[
        "state".as_ref(),
        data("peer_skirmish_2p.replay").as_os_str(),
        "--turn".as_ref(),
        "300".as_ref(),
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("turn 300 is not in this replay"), "{err}");
}

#[test]
fn export_writes_one_json_object_per_record() {
    let (code, out, _) = run(&[
        "export".as_ref(),
        data("relay_economy_4p.replay").as_os_str(),
    ]);
    assert_eq!(code, 0);
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // header + 240 turns + 240 hashes + delay change + drop + index + trailer + end
    assert_eq!(lines.len(), 1 + 240 + 240 + 1 + 1 + 1 + 1 + 1);
    assert_eq!(lines[0]["kind"], "header");
    assert_eq!(lines.last().unwrap()["kind"], "end");
    let turns = lines.iter().filter(|l| l["kind"] == "turn").count();
    assert_eq!(turns, 240);
    assert!(lines.iter().any(|l| {
        l["kind"] == "turn"
            && l["inputs"]
                .as_array()
                .unwrap()
                .iter()
                .any(|i| !i["commands"].as_array().unwrap().is_empty())
    }));
}

#[test]
fn diff_and_reindex() {
    let a = data("relay_economy_4p.replay");
    let (code, out, _) = run(&["diff".as_ref(), a.as_os_str(), a.as_os_str()]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("no difference in 240 common turns"), "{out}");

    let out_path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("economy_reindexed.replay");
    let (code, out, _) = run(&[
        "reindex".as_ref(),
        a.as_os_str(),
        "--every".as_ref(),
        "60".as_ref(),
        "--out".as_ref(),
        out_path.as_os_str(),
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("240 turns, 4 keyframes"), "{out}");
    // Same match, now with keyframes: diff sees no difference.
    let (code, _, _) = run(&["diff".as_ref(), a.as_os_str(), out_path.as_os_str()]);
    assert_eq!(code, 0);

    let (code, out, _) = run(&[
        "diff".as_ref(),
        "--json".as_ref(),
        data("peer_skirmish_2p.replay").as_os_str(),
        data("peer_desync_3p.replay").as_os_str(),
    ]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(!v["header_differences"].as_array().unwrap().is_empty());
    let _ = DESYNC;
}
