//! Golden replays (format version 1) recorded with the reference game and
//! bots: they must keep reading, verifying and seeking. If the sim's hashes
//! change on purpose, regenerate them: `cargo run -p lockstep-replays --example make_fixtures`.

use replays::botmatch::record_bot_match;
use replays::{Reader, Record, SyncPolicy, Writer, fixtures, seek, verify};
use sim::game::World;
use sim::{PlayerId, Simulation, StateHash, Turn};
use std::collections::BTreeMap;

pub const SKIRMISH: &[u8] = include_bytes!("../data/peer_skirmish_2p.replay");
pub const ECONOMY: &[u8] = include_bytes!("../data/relay_economy_4p.replay");
pub const DESYNC: &[u8] = include_bytes!("../data/peer_desync_3p.replay");
/// A relay's recording of a desynced match, with dispute records (kind 11).
pub const DISPUTE: &[u8] = include_bytes!("../data/relay_dispute_3p.replay");
/// A peer's recording of the second game, `sim::arena` (`fixtures::record_arena`).
pub const ARENA: &[u8] = include_bytes!("../data/peer_arena_3p.replay");

fn records(bytes: &[u8]) -> Vec<Record> {
    Reader::from_bytes(bytes)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn golden_v1_files_read_completely() {
    for (bytes, game_turns, players, keyframes) in [
        (SKIRMISH, 300, 2, 3),
        (ECONOMY, 240, 4, 0),
        (DESYNC, 200, 3, 4),
        (DISPUTE, 100, 3, 0),
    ] {
        let r = Reader::from_bytes(bytes).unwrap();
        assert_eq!(r.version(), 1);
        let h = r.header().clone();
        assert_eq!(h.game_id, World::GAME_ID);
        assert_eq!(usize::from(h.setup.players), players);
        let (_, s) = r.scan().unwrap();
        assert!(s.is_complete(), "{s}");
        assert_eq!((s.turns, s.keyframes), (game_turns, keyframes));
    }
}

#[test]
fn writer_reproduces_the_golden_bytes() {
    // The writer and the sim are deterministic: the same recipe gives the same file.
    for ((name, world, opts), golden) in fixtures::all()
        .into_iter()
        .zip([SKIRMISH, ECONOMY, DESYNC, DISPUTE])
    {
        let (bytes, _) = record_bot_match(Vec::new(), world, &opts).unwrap();
        assert!(
            bytes == golden,
            "{name} differs: regenerate with the make_fixtures example"
        );
    }
}

#[test]
fn golden_recordings_verify_and_the_desync_is_found() {
    for bytes in [SKIRMISH, ECONOMY] {
        let report = verify::<World, _>(Reader::from_bytes(bytes).unwrap(), |_| {}).unwrap();
        assert!(report.verified(), "{report:?}");
    }
    let report = verify::<World, _>(Reader::from_bytes(DESYNC).unwrap(), |_| {}).unwrap();
    assert!(report.recorded_desyncs.is_empty());
    let d = report.first_divergence.unwrap();
    assert_eq!(d.turn, Turn(110));
    assert_eq!(d.sections_turn, Some(Turn(150)));
    assert!(!d.sections.is_empty());
}

/// Rewrites `bytes` (relay-style, no keyframes) with `turn`'s inputs replaced.
fn rewrite_with(
    bytes: &[u8],
    turn: Turn,
    replace: impl Fn(&mut Vec<(PlayerId, Vec<u8>)>),
) -> Vec<u8> {
    let mut r = Reader::from_bytes(bytes).unwrap();
    let mut w = Writer::new(Vec::new(), r.header(), SyncPolicy::AtFinish).unwrap();
    for rec in r.by_ref() {
        match rec.unwrap() {
            Record::Turn {
                turn: t,
                mut inputs,
            } => {
                if t == turn {
                    replace(&mut inputs);
                }
                w.record_turn(t, &inputs).unwrap();
            }
            Record::Hash { turn, hash } => w.record_hash(turn, hash).unwrap(),
            Record::Drop { player, turn } => w.record_drop(player, turn).unwrap(),
            Record::DelayChange { delay, from_turn } => {
                w.record_delay_change(delay, from_turn).unwrap();
            }
            Record::Trailer {
                final_turn,
                final_hash,
                ..
            } => w.finish(final_turn, final_hash).unwrap(),
            Record::KeyframeIndex(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    w.into_inner().unwrap()
}

#[test]
fn one_altered_command_fails_at_exactly_that_turn() {
    // The first turns from 60 on where some player issued commands.
    let mut busy = Vec::new();
    for rec in records(ECONOMY) {
        if let Record::Turn { turn, inputs } = rec
            && turn.0 >= 60
            && let Some(i) = inputs.iter().position(|(_, b)| b.len() > 1)
        {
            busy.push((turn, i));
        }
    }
    for &(turn, i) in busy.iter().take(3) {
        // Drop that player's commands for the turn.
        let altered = rewrite_with(ECONOMY, turn, |inputs| {
            inputs[i].1.clear();
            sim::encode_commands::<sim::game::Command>(&[], &mut inputs[i].1);
        });
        // The edit broke nothing at the format level: the writer re-chained it.
        assert!(
            Reader::from_bytes(&altered)
                .unwrap()
                .scan()
                .unwrap()
                .1
                .is_complete()
        );
        let report = verify::<World, _>(Reader::from_bytes(&altered).unwrap(), |_| {}).unwrap();
        assert_eq!(report.first_divergence.map(|d| d.turn), Some(turn));
        // The same edit in place, without re-chaining, is a checksum error.
        let mut naive = ECONOMY.to_vec();
        let pos = ECONOMY.len() / 2;
        naive[pos] ^= 0x10;
        let (_, s) = Reader::from_bytes(&naive).unwrap().scan().unwrap();
        assert!(matches!(s.ending, replays::Ending::Corrupt { .. }));
    }
}

#[test]
fn seek_via_keyframes_equals_simulating_from_start() {
    // Every recorded hash of the skirmish was produced by simulating from the start.
    let mut recorded: BTreeMap<Turn, StateHash> = BTreeMap::new();
    for rec in records(SKIRMISH) {
        if let Record::Hash { turn, hash } = rec {
            recorded.insert(turn, hash);
        }
    }
    let mut x: u64 = 0x9e37_79b9;
    let mut targets = vec![0, 99, 100, 101, 299];
    for _ in 0..6 {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        targets.push(((x >> 33) % 300) as u32);
    }
    for t in targets {
        let s = seek::<World, _>(Reader::from_bytes(SKIRMISH).unwrap(), Turn(t)).unwrap();
        assert_eq!(s.world.state_hash(), recorded[&Turn(t)], "turn {t}");
        assert_eq!(s.keyframe, Some(Turn(t / 100 * 100)), "turn {t}");
        assert!(s.simulated < 100);
    }
    // Without keyframes (relay recording) seek simulates from the start.
    let s = seek::<World, _>(Reader::from_bytes(ECONOMY).unwrap(), Turn(123)).unwrap();
    assert_eq!((s.keyframe, s.simulated), (None, 124));
    assert_eq!(Some(s.world.state_hash()), s.recorded_hash);
}

#[test]
fn reindexed_relay_recording_seeks_from_keyframes() {
    let (out, rep) =
        replays::reindex::<World, _, _>(Reader::from_bytes(ECONOMY).unwrap(), Vec::new(), 40)
            .unwrap();
    assert_eq!((rep.turns, rep.keyframes), (240, 6));
    let report = verify::<World, _>(Reader::from_bytes(&out).unwrap(), |_| {}).unwrap();
    assert!(report.verified());
    let s = seek::<World, _>(Reader::from_bytes(&out).unwrap(), Turn(123)).unwrap();
    assert_eq!((s.keyframe, s.simulated), (Some(Turn(120)), 3));
    assert_eq!(Some(s.world.state_hash()), s.recorded_hash);
}

#[test]
fn truncated_golden_file_at_every_byte_never_panics() {
    let full = records(ECONOMY).len();
    let mut last = 0;
    for cut in 0..ECONOMY.len() {
        let Ok(mut r) = Reader::from_bytes(&ECONOMY[..cut]) else {
            continue;
        };
        let n = r.by_ref().filter(Result::is_ok).count();
        // The recovered prefix only grows as the cut moves right.
        assert!(n >= last && n <= full, "cut {cut}");
        last = n;
        assert!(!r.summary().is_complete());
    }
}

#[test]
fn bit_flips_across_a_golden_file_are_located() {
    let mut bytes = ECONOMY.to_vec();
    for pos in (12..bytes.len()).step_by(7) {
        let bit = 1 << (pos % 8);
        bytes[pos] ^= bit;
        match Reader::from_bytes(&bytes) {
            Err(e) => assert!(
                matches!(e, replays::ReplayError::Checksum { .. }),
                "{pos}: {e}"
            ),
            Ok(mut r) => {
                let err = r.by_ref().find_map(Result::err);
                match err {
                    Some(replays::ReplayError::Checksum { offset, .. }) => {
                        assert!(offset <= pos as u64, "{pos}");
                    }
                    other => panic!("flip at {pos}: {other:?}"),
                }
            }
        }
        bytes[pos] ^= bit;
    }
}

#[test]
fn a_relay_recording_of_a_desync_verifies_against_the_majority_and_lists_every_disputed_turn() {
    let (_, summary) = Reader::from_bytes(DISPUTE).unwrap().scan().unwrap();
    assert_eq!(
        (summary.hashes, summary.disputes, summary.desyncs),
        (100, 40, 1)
    );
    let report = verify::<World, _>(Reader::from_bytes(DISPUTE).unwrap(), |_| {}).unwrap();
    assert!(report.verified(), "{report:?}");
    assert!(!report.clean());
    assert_eq!(
        report.hashes_checked, 101,
        "100 hash records and the trailer"
    );
    let turns: Vec<u32> = report.recorded_desyncs.iter().map(|d| d.turn.0).collect();
    assert_eq!(turns, (60..100).collect::<Vec<_>>());
    for d in &report.recorded_desyncs {
        assert_eq!(d.odd_players(), [PlayerId(2)]);
        assert!(d.majority.is_some());
        assert_eq!(d.sections.is_empty(), d.turn != Turn(60), "{d:?}");
    }
    // The clean goldens record no desync.
    for bytes in [SKIRMISH, ECONOMY] {
        let report = verify::<World, _>(Reader::from_bytes(bytes).unwrap(), |_| {}).unwrap();
        assert!(report.clean());
    }
}

#[test]
fn the_arena_golden_file_reads_verifies_and_reproduces() {
    let r = Reader::from_bytes(ARENA).unwrap();
    assert_eq!(r.header().game_id, sim::arena::Arena::GAME_ID);
    let (_, s) = r.scan().unwrap();
    assert!(s.is_complete(), "{s}");
    assert_eq!((s.turns, s.keyframes, s.hashes), (200, 4, 200));
    let report =
        verify::<sim::arena::Arena, _>(Reader::from_bytes(ARENA).unwrap(), |_| {}).unwrap();
    assert!(report.verified(), "{report:?}");
    assert!(
        fixtures::record_arena().unwrap() == ARENA,
        "{} differs: regenerate with the make_fixtures example",
        fixtures::ARENA
    );
}
