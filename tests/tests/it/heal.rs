//! End-to-end `--on-desync heal`: `relay demo --on-desync heal --desync-at T
//! --desync-peer P --json` heals the perturbed peer from the relay's agreed
//! snapshot, exits 0 because the hashes agree at the end, lists the heal
//! (turn, players, time to agreement) in its JSON, and its replay verifies
//! through the heal; with two players the heal is refused and the demo
//! exits 3 as any desynced run.
#![allow(clippy::unwrap_used)] // tests may unwrap

use serde_json::Value;
use tests::harness::{bins, replay_verify, scratch_dir};

/// Runs `relay demo ARGS --json` and returns its exit code and JSON.
fn demo_json(args: &[&str]) -> (Option<i32>, Value) {
    let out = std::process::Command::new(&bins().relay)
        .arg("demo")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("demo JSON: {e}\n{}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code(), v)
}

#[test]
fn the_demo_heals_the_perturbed_peer_and_exits_0() {
    let dir = scratch_dir("heal-demo");
    let dir_s = dir.display().to_string();
    let (code, v) = demo_json(&[
        "--peers",
        "3",
        "--turns",
        "200",
        "--turn-ms",
        "25",
        "--snapshot-every",
        "20",
        "--on-desync",
        "heal",
        "--desync-at",
        "150",
        "--desync-peer",
        "2",
        "--record-dir",
        &dir_s,
    ]);
    assert_eq!(code, Some(0), "{v:#}");
    assert_eq!(v["hashes_agree"], true, "{v:#}");
    let d = &v["desyncs"][0];
    assert_eq!(d["turn"], 150, "{v:#}");
    let heals = v["heals"].as_array().unwrap();
    assert_eq!(heals.len(), 1, "{v:#}");
    let h = &heals[0];
    assert_eq!(h["desync_turn"], 150);
    assert_eq!(h["players"], d["odd_players"]);
    // An agreed snapshot before the desync (uploads are paced: not
    // necessarily the latest one due).
    let base = h["snapshot_turn"].as_u64().unwrap();
    assert!(base < 150 && base % 20 == 0, "{h:#}");
    assert!(h["turn"].as_u64().unwrap() > 150, "{h:#}");
    assert!(h["ms"].as_f64().unwrap() > 0.0, "{h:#}");
    let notes = d["notes"].as_array().unwrap();
    assert!(
        notes
            .iter()
            .any(|n| n.as_str().unwrap().starts_with("healed: P")),
        "{notes:?}"
    );
    // Every peer ran every turn; the replay verifies through the heal (3:
    // every recorded hash matches, and the recording holds the desync).
    assert_eq!(v["replay"]["verified"], true, "{v:#}");
    let replay = std::path::PathBuf::from(v["replay"]["path"].as_str().unwrap());
    let (code, _) = replay_verify(&replay);
    assert_eq!(code, Some(3));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn with_two_players_the_demo_refuses_the_heal_and_exits_3() {
    let dir = scratch_dir("heal-demo-two");
    let dir_s = dir.display().to_string();
    let (code, v) = demo_json(&[
        "--peers",
        "2",
        "--turns",
        "80",
        "--turn-ms",
        "25",
        "--on-desync",
        "heal",
        "--desync-at",
        "30",
        "--desync-peer",
        "1",
        "--record-dir",
        &dir_s,
    ]);
    assert_eq!(code, Some(3), "{v:#}");
    assert_eq!(v["heals"], serde_json::json!([]));
    assert_eq!(v["hashes_agree"], false);
    let notes = v["desyncs"][0]["notes"].as_array().unwrap();
    assert!(
        notes
            .iter()
            .any(|n| n.as_str().unwrap().starts_with("heal refused: no majority")),
        "{notes:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
