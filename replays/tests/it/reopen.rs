//! `Writer::reopen`: a recording cut short by a crash is continued in the
//! same file, which then reads and verifies as one complete replay.

use crate::toy::{Toy, ToyCmd, header, inputs_for, simulate_to};
use replays::format;
use replays::{Reader, Record, Reopened, ReplayError, SyncPolicy, Writer, verify};
use sim::{Simulation, Turn};
use std::path::PathBuf;

const PLAYERS: u8 = 2;

fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("reopen_{name}.replay"))
}

/// The error of a reopen that must fail (`Writer` is not `Debug`).
fn reopen_err(path: &PathBuf) -> ReplayError {
    match Writer::reopen(path, SyncPolicy::AtFinish) {
        Ok(_) => panic!("{} reopened", path.display()),
        Err(e) => e,
    }
}

/// Records turns `from..to` (each followed by its hash) stepping `world`,
/// with a keyframe after each turn in `keyframes_at`.
fn play(w: &mut Writer, world: &mut Toy, from: u32, to: u32, keyframes_at: &[u32]) {
    for t in from..to {
        let turn = Turn(t);
        let inputs = inputs_for(turn, PLAYERS);
        world.step(turn, &sim::decode_turn::<ToyCmd>(&inputs, PLAYERS).commands);
        w.record_turn(turn, &inputs).unwrap();
        w.record_hash(turn, world.state_hash()).unwrap();
        if keyframes_at.contains(&t) {
            w.record_keyframe(turn, &world.snapshot(), world.state_hash())
                .unwrap();
        }
    }
}

/// Writes the first 50 turns (a keyframe after turn 20) and drops the
/// writer without finishing, as a crash would leave the file.
fn crashed_recording(path: &PathBuf) -> u64 {
    let mut w = Writer::create(path, &header(PLAYERS)).unwrap();
    play(
        &mut w,
        &mut Toy::new(&crate::toy::setup(PLAYERS)),
        0,
        50,
        &[20],
    );
    let written = w.bytes_written();
    drop(w);
    written
}

/// What a restarted recorder does with [`Reopened`]: rebuilds the world from
/// the last keyframe and the turns after it, records the hash of a last turn
/// whose hash record was lost, and returns the world and the next turn.
fn resume(w: &mut Writer, reopened: &Reopened) -> (Toy, u32) {
    let records = &reopened.records;
    let start = records
        .iter()
        .rposition(|r| matches!(r, Record::Keyframe { .. }));
    let mut world = match start.map(|i| &records[i]) {
        Some(Record::Keyframe { snapshot, .. }) => Toy::restore(snapshot).unwrap(),
        _ => Toy::new(&crate::toy::setup(PLAYERS)),
    };
    let mut last_turn = None;
    let mut last_hash = None;
    for (i, r) in records.iter().enumerate() {
        match r {
            Record::Turn { turn, inputs } => {
                if start.is_none_or(|s| i > s) {
                    let decoded = sim::decode_turn::<ToyCmd>(inputs, PLAYERS);
                    world.step(*turn, &decoded.commands);
                }
                last_turn = Some(*turn);
            }
            Record::Hash { turn, .. } => last_hash = Some(*turn),
            _ => {}
        }
    }
    let last = last_turn.unwrap();
    if last_hash != Some(last) {
        w.record_hash(last, world.state_hash()).unwrap();
    }
    (world, last.0 + 1)
}

/// Continues a reopened recording to 100 turns (a keyframe after turn 70),
/// finishes it and checks that it reads and verifies as one match.
fn continue_and_check(path: &PathBuf, mut w: Writer, reopened: &Reopened) {
    let (mut world, next) = resume(&mut w, reopened);
    play(&mut w, &mut world, next, 100, &[70]);
    w.finish(Turn(99), world.state_hash()).unwrap();
    drop(w);

    let report = verify::<Toy, _>(Reader::open(path).unwrap(), |_| {}).unwrap();
    assert!(report.verified(), "{report:?}");
    assert_eq!(report.turns, 100);
    assert_eq!(report.summary.turns, 100);
    assert_eq!(report.keyframes_checked, 2);
    assert_eq!(
        report.final_hash,
        Some(simulate_to(PLAYERS, Turn(99)).state_hash())
    );

    // The index (written by finish) lists the keyframe from before the crash
    // at its real offset, and the one after.
    let mut r = Reader::open(path).unwrap();
    let index = r.keyframe_index().unwrap().unwrap();
    let turns: Vec<Turn> = index.iter().map(|e| e.turn).collect();
    assert_eq!(turns, [Turn(20), Turn(70)]);
    for entry in &index {
        r.jump_to(entry.offset).unwrap();
        match r.next() {
            Some(Ok(Record::Keyframe { turn, hash, .. })) => {
                assert_eq!((turn, hash), (entry.turn, entry.hash));
            }
            other => panic!("no keyframe at {}: {other:?}", entry.offset),
        }
    }
}

#[test]
fn a_crashed_recording_continues_in_the_same_file() {
    let path = tmp("crashed");
    let written = crashed_recording(&path);
    let (w, reopened) = Writer::reopen(&path, SyncPolicy::AtFinish).unwrap();
    assert_eq!(reopened.cut_bytes, 0);
    assert_eq!(reopened.header, header(PLAYERS));
    // 50 turns, 50 hashes, 1 keyframe.
    assert_eq!(reopened.records.len(), 101);
    assert_eq!(w.turns_written(), 50);
    assert_eq!(w.bytes_written(), written);
    continue_and_check(&path, w, &reopened);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_torn_or_damaged_tail_is_cut_then_continued() {
    // (label, damage to the crashed file, records kept of the 101 written)
    type Damage = fn(&mut Vec<u8>);
    let cases: [(&str, Damage, usize); 4] = [
        // Torn inside the last record (turn 49's hash).
        ("torn", |b| b.truncate(b.len() - 5), 100),
        // Torn inside turn 49's record: its hash record is gone entirely.
        ("torn_deeper", |b| b.truncate(b.len() - 70), 99),
        // A flipped bit in the last record's checksum.
        ("flipped", |b| *b.last_mut().unwrap() ^= 1, 100),
        // The file grew before the data landed: a zero-filled tail.
        ("zeros", |b| b.extend_from_slice(&[0; 100]), 101),
    ];
    for (label, damage, kept) in cases {
        let path = tmp(label);
        crashed_recording(&path);
        let mut bytes = std::fs::read(&path).unwrap();
        let intact = Reader::from_bytes(&bytes).unwrap().scan().unwrap().1;
        damage(&mut bytes);
        std::fs::write(&path, &bytes).unwrap();

        let (w, reopened) = Writer::reopen(&path, SyncPolicy::AtFinish).unwrap();
        assert_eq!(reopened.records.len(), kept, "{label}");
        assert!(reopened.cut_bytes > 0, "{label}");
        let len = std::fs::metadata(&path).unwrap().len();
        assert_eq!(len + reopened.cut_bytes, bytes.len() as u64, "{label}");
        assert_eq!(w.bytes_written(), len, "{label}");
        if kept == 101 {
            assert_eq!(len, intact.intact_bytes, "{label}");
        }
        continue_and_check(&path, w, &reopened);
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn a_crash_inside_finish_continues_too() {
    // The keyframe index landed, the trailer did not: the stale index stays
    // (an intact record), and the index finish writes last is the one read.
    let path = tmp("inside_finish");
    let mut w = Writer::create(&path, &header(PLAYERS)).unwrap();
    let mut world = Toy::new(&crate::toy::setup(PLAYERS));
    play(&mut w, &mut world, 0, 50, &[20]);
    w.finish(Turn(49), world.state_hash()).unwrap();
    let mut r = Reader::open(&path).unwrap();
    let mut trailer_at = 0;
    while let Some(item) = r.next() {
        if let Record::Trailer { .. } = item.unwrap() {
            trailer_at = r.record_offset();
        }
    }
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(trailer_at).unwrap();
    drop(file);

    let (w, reopened) = Writer::reopen(&path, SyncPolicy::AtFinish).unwrap();
    assert_eq!(reopened.cut_bytes, 0);
    assert!(matches!(
        reopened.records.last(),
        Some(Record::KeyframeIndex(_))
    ));
    continue_and_check(&path, w, &reopened);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_finished_file_is_not_reopened_nor_changed() {
    let path = tmp("finished");
    let mut w = Writer::create(&path, &header(PLAYERS)).unwrap();
    let mut world = Toy::new(&crate::toy::setup(PLAYERS));
    play(&mut w, &mut world, 0, 10, &[]);
    w.finish(Turn(9), world.state_hash()).unwrap();
    drop(w);
    let before = std::fs::read(&path).unwrap();
    let err = reopen_err(&path);
    assert!(matches!(err, ReplayError::Finished), "{err}");
    assert!(err.to_string().contains("finished"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn an_intact_record_this_build_refuses_is_not_cut() {
    // A record of a kind this build does not know, chained correctly (a
    // newer build wrote it): cutting it would destroy data, not a torn tail.
    let path = tmp("unknown_kind");
    crashed_recording(&path);
    let mut bytes = std::fs::read(&path).unwrap();
    let mut prev = [0u8; format::CHECKSUM_LEN];
    prev.copy_from_slice(&bytes[bytes.len() - format::CHECKSUM_LEN..]);
    format::frame_record(&prev, 200, b"new", &mut bytes).unwrap();
    std::fs::write(&path, &bytes).unwrap();
    let err = reopen_err(&path);
    assert!(
        matches!(err, ReplayError::UnknownKind { kind: 200, .. }),
        "{err}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_file_without_a_readable_header_is_refused_as_the_reader_does() {
    let path = tmp("no_header");
    crashed_recording(&path);
    let bytes = std::fs::read(&path).unwrap();
    // The preamble and part of the header only.
    std::fs::write(&path, &bytes[..20]).unwrap();
    let err = reopen_err(&path);
    assert!(matches!(err, ReplayError::Torn { .. }), "{err}");
    assert_eq!(std::fs::read(&path).unwrap().len(), 20);
    std::fs::remove_file(&path).unwrap();
}

/// Before: a bad checksum anywhere ended the read, and the reopen cut the
/// file there, destroying every intact record after it.
#[test]
fn damage_inside_the_file_is_not_cut() {
    let path = tmp("damaged_inside");
    crashed_recording(&path);
    let mut bytes = std::fs::read(&path).unwrap();
    // A flipped bit in the middle of the file, far from its last record.
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x10;
    std::fs::write(&path, &bytes).unwrap();
    let err = reopen_err(&path);
    assert!(matches!(err, ReplayError::DamagedInside { .. }), "{err}");
    assert!(err.is_damage());
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "the bytes are left");
    std::fs::remove_file(&path).unwrap();
}
