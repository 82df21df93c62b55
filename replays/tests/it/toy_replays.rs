//! verify, seek, reindex and diff on recordings of the toy game.

use crate::toy::{Plan, Toy, ToyCmd, record, simulate_to};
use replays::verify::DivergenceSource;
use replays::{Reader, ReplayError, SyncPolicy, Writer, diff, reindex, seek, verify};
use sim::{PlayerId, Simulation, Turn};

fn verify_bytes(bytes: &[u8]) -> replays::VerifyReport {
    verify::<Toy, _>(Reader::from_bytes(bytes).unwrap(), |_| {}).unwrap()
}

/// Replaces the first command of `player`'s input at `turn` with another one.
fn alter(at: Turn) -> impl FnMut(Turn, &mut Vec<(PlayerId, Vec<u8>)>) {
    move |turn, inputs| {
        if turn == at {
            let mut bytes = Vec::new();
            sim::encode_commands(
                &[ToyCmd::Add {
                    slot: 1,
                    amount: 1000,
                }],
                &mut bytes,
            );
            inputs[0].1 = bytes;
        }
    }
}

#[test]
fn a_recording_verifies_with_progress_per_turn() {
    for hash_lag in [0, 3] {
        let bytes = record(
            Plan {
                hash_lag,
                ..Plan::default()
            },
            |_, _| {},
        );
        let mut turns_seen = Vec::new();
        let report = verify::<Toy, _>(Reader::from_bytes(&bytes).unwrap(), |p| {
            turns_seen.push(p.turn.0)
        })
        .unwrap();
        assert!(report.verified(), "{report:?}");
        assert_eq!(report.turns, 40);
        assert_eq!(turns_seen, (0..40).collect::<Vec<_>>());
        // 40 hash records + 4 keyframes + the trailer.
        assert_eq!(report.hashes_checked, 45);
        assert_eq!(report.keyframes_checked, 4);
        assert_eq!(
            report.final_hash,
            Some(simulate_to(2, Turn(39)).state_hash())
        );
    }
}

#[test]
fn one_altered_command_fails_at_exactly_that_turn() {
    for (at, hash_lag) in [(Turn(0), 0), (Turn(17), 0), (Turn(23), 5), (Turn(39), 0)] {
        let bytes = record(
            Plan {
                hash_lag,
                ..Plan::default()
            },
            alter(at),
        );
        let report = verify_bytes(&bytes);
        assert!(!report.verified());
        let d = report.first_divergence.unwrap();
        assert_eq!(d.turn, at, "lag {hash_lag}");
        assert_eq!(d.source, DivergenceSource::Hash);
        assert_ne!(d.expected, d.actual);
        // The altered input is player 0's, so player 0's section differs,
        // found at the next keyframe (there is none after turn 30).
        if at.0 <= 30 {
            let names: Vec<_> = d.sections.iter().map(|s| s.name.as_str()).collect();
            assert!(names.contains(&"player 0"), "{names:?}");
            // Turns divisible by 11 lose a Scramble, which also moves the shared RNG.
            if at.0 % 11 != 0 {
                assert_eq!(names, ["player 0"]);
            }
            assert!(d.sections_turn.unwrap() >= at);
        }
    }
}

#[test]
fn a_rejected_input_counts_as_empty() {
    // Garbage bytes for player 1 at turn 4 are recorded; the recording side
    // simulated them as empty too, so the file verifies.
    let bytes = record(Plan::default(), |turn, inputs| {
        if turn == Turn(4) {
            let mut empty = Vec::new();
            sim::encode_commands::<ToyCmd>(&[], &mut empty);
            if inputs[1].1 == empty {
                inputs[1].1 = vec![0xff, 0xff, 0xff];
            }
        }
    });
    let report = verify_bytes(&bytes);
    assert!(report.verified(), "{report:?}");
    assert_eq!(report.rejected_inputs, 1);
}

#[test]
fn a_torn_recording_verifies_its_prefix_but_is_not_verified() {
    let bytes = record(Plan::default(), |_, _| {});
    let report = verify_bytes(&bytes[..bytes.len() / 2]);
    assert!(report.first_divergence.is_none());
    assert!(!report.verified());
    assert!(report.turns > 10 && report.turns < 40);
}

#[test]
fn another_game_is_refused() {
    let mut header = crate::toy::header(2);
    header.game_id = "chess".into();
    let w = Writer::new(Vec::new(), &header, SyncPolicy::AtFinish).unwrap();
    let bytes = w.into_inner().unwrap();
    let err = verify::<Toy, _>(Reader::from_bytes(&bytes).unwrap(), |_| {}).unwrap_err();
    assert!(matches!(err, ReplayError::WrongGame { .. }), "{err}");
}

#[test]
fn seek_via_keyframes_equals_simulating_from_start() {
    let plan = Plan {
        players: 3,
        turns: 120,
        keyframe_every: 16,
        hash_lag: 2,
        finish: true,
    };
    let bytes = record(plan, |_, _| {});
    // Seeded pseudo-random turns, plus the edges.
    let mut x: u32 = 12345;
    let mut targets = vec![0, 16, 17, 119];
    for _ in 0..12 {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
        targets.push((x >> 8) % 120);
    }
    for t in targets {
        let s = seek::<Toy, _>(Reader::from_bytes(&bytes).unwrap(), Turn(t)).unwrap();
        let expected = simulate_to(3, Turn(t));
        assert_eq!(s.world.state_hash(), expected.state_hash(), "turn {t}");
        assert_eq!(s.world, expected, "turn {t}");
        assert_eq!(s.recorded_hash, Some(expected.state_hash()), "turn {t}");
        let kf = (t / 16) * 16;
        assert_eq!(s.keyframe, Some(Turn(kf)), "turn {t}");
        assert_eq!(s.simulated, t - kf, "turn {t}");
    }
    let err = seek::<Toy, _>(Reader::from_bytes(&bytes).unwrap(), Turn(120))
        .err()
        .unwrap();
    assert!(matches!(err, ReplayError::NoSuchTurn { .. }), "{err}");
}

#[test]
fn seek_rejects_a_keyframe_whose_hash_lies() {
    let plan = Plan::default();
    let mut world = Toy::new(&crate::toy::setup(2));
    let mut w = Writer::new(Vec::new(), &crate::toy::header(2), SyncPolicy::AtFinish).unwrap();
    world.step(Turn(0), &[]);
    w.record_turn(Turn(0), &[]).unwrap();
    w.record_keyframe(Turn(0), &world.snapshot(), sim::StateHash([3; 32]))
        .unwrap();
    w.record_turn(Turn(1), &[]).unwrap();
    let bytes = w.into_inner().unwrap();
    let _ = plan;
    let err = seek::<Toy, _>(Reader::from_bytes(&bytes).unwrap(), Turn(1))
        .err()
        .unwrap();
    assert!(
        matches!(err, ReplayError::KeyframeHash { turn: Turn(0), .. }),
        "{err}"
    );
}

#[test]
fn reindex_adds_keyframes_to_a_relay_recording() {
    let plan = Plan {
        turns: 60,
        keyframe_every: 0,
        hash_lag: 3,
        ..Plan::default()
    };
    let bytes = record(plan, |_, _| {});
    let (out, rep) =
        reindex::<Toy, _, _>(Reader::from_bytes(&bytes).unwrap(), Vec::new(), 20).unwrap();
    assert_eq!((rep.turns, rep.keyframes), (60, 3));
    let report = verify_bytes(&out);
    assert!(report.verified(), "{report:?}");
    assert_eq!(report.keyframes_checked, 3);
    let s = seek::<Toy, _>(Reader::from_bytes(&out).unwrap(), Turn(45)).unwrap();
    assert_eq!(s.keyframe, Some(Turn(40)));
    assert_eq!(s.world, simulate_to(2, Turn(45)));
    // A recording that does not verify cannot be given keyframes.
    let bad = record(plan, alter(Turn(7)));
    let err = reindex::<Toy, _, _>(Reader::from_bytes(&bad).unwrap(), Vec::new(), 20)
        .err()
        .unwrap();
    assert!(
        matches!(err, ReplayError::Diverged { turn: Turn(7), .. }),
        "{err}"
    );
}

#[test]
fn diff_finds_the_first_differing_turn() {
    let a = record(Plan::default(), |_, _| {});
    let same = diff(
        Reader::from_bytes(&a).unwrap(),
        Reader::from_bytes(&a).unwrap(),
    )
    .unwrap();
    assert!(same.same());
    assert_eq!(same.common_turns, 40);

    // Same turns, different layout (relay-style lag, no keyframes): still the same match.
    let relay = record(
        Plan {
            keyframe_every: 0,
            hash_lag: 4,
            ..Plan::default()
        },
        |_, _| {},
    );
    assert!(
        diff(
            Reader::from_bytes(&a).unwrap(),
            Reader::from_bytes(&relay).unwrap()
        )
        .unwrap()
        .same()
    );

    let b = record(Plan::default(), alter(Turn(13)));
    let rep = diff(
        Reader::from_bytes(&a).unwrap(),
        Reader::from_bytes(&b).unwrap(),
    )
    .unwrap();
    let first = rep.first.unwrap();
    assert_eq!(first.turn, Turn(13));
    assert_eq!(first.inputs.len(), 1);
    assert_eq!(first.inputs[0].player, PlayerId(0));
    assert!(first.inputs[0].b.is_some());
    // b recorded hashes of what was really simulated: hashes agree at turn 13.
    assert!(!first.hashes_differ());
}

#[test]
fn writer_refuses_turns_out_of_order_and_use_after_finish() {
    let mut w = Writer::new(Vec::new(), &crate::toy::header(2), SyncPolicy::EveryTurn).unwrap();
    w.record_turn(Turn(5), &[]).unwrap();
    assert!(matches!(
        w.record_turn(Turn(5), &[]),
        Err(ReplayError::TurnOrder { .. })
    ));
    w.finish(Turn(5), sim::StateHash([0; 32])).unwrap();
    assert!(matches!(
        w.record_hash(Turn(6), sim::StateHash([0; 32])),
        Err(ReplayError::Closed)
    ));
}

#[test]
fn writer_streams_to_a_file() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join("writer_streams_to_a_file.replay");
    let mut w = Writer::create(&path, &crate::toy::header(2)).unwrap();
    for t in 0..100 {
        w.record_turn(Turn(t), &crate::toy::inputs_for(Turn(t), 2))
            .unwrap();
        // Each turn is flushed: a reader sees it before the writer finishes.
        if t == 50 {
            let (_, s) = Reader::open(&path).unwrap().scan().unwrap();
            assert_eq!(s.turns, 51);
            assert_eq!(s.ending, replays::Ending::NoTrailer);
        }
    }
    w.finish(Turn(99), simulate_to(2, Turn(99)).state_hash())
        .unwrap();
    let report = verify::<Toy, _>(Reader::open(&path).unwrap(), |_| {}).unwrap();
    assert!(report.verified(), "{report:?}");
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_forged_turn_gap_is_refused_not_simulated() {
    // The checksum key is public, so anyone can write a well-formed file whose
    // next turn is near u32::MAX; verify must refuse rather than run for hours.
    let mut w = Writer::new(Vec::new(), &crate::toy::header(2), SyncPolicy::AtFinish).unwrap();
    w.record_turn(Turn(0), &[]).unwrap();
    w.record_turn(Turn(u32::MAX - 1), &[]).unwrap();
    let bytes = w.into_inner().unwrap();
    let err = verify::<Toy, _>(Reader::from_bytes(&bytes).unwrap(), |_| {}).unwrap_err();
    assert!(
        matches!(
            err,
            ReplayError::TurnGap { after: Some(Turn(0)), got: Turn(g), max: replays::verify::MAX_TURN_GAP } if g == u32::MAX - 1
        ),
        "{err}"
    );

    // A gap within the bound is still simulated as empty turns.
    let mut w = Writer::new(Vec::new(), &crate::toy::header(2), SyncPolicy::AtFinish).unwrap();
    w.record_turn(Turn(0), &[]).unwrap();
    w.record_turn(Turn(replays::verify::MAX_TURN_GAP), &[])
        .unwrap();
    let bytes = w.into_inner().unwrap();
    let report = verify::<Toy, _>(Reader::from_bytes(&bytes).unwrap(), |_| {}).unwrap();
    assert_eq!(report.turns, replays::verify::MAX_TURN_GAP + 1);
}
