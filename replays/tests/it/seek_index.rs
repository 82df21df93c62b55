//! `seek` jumps through the keyframe index: it reads the file's tail and the
//! records from the nearest keyframe on, never the records before it.

use crate::toy::{Plan, Toy, record, simulate_to};
use replays::format::RECORD_HEAD_LEN;
use replays::{Reader, Record, ReplayError, seek, seek_stream};
use sim::{Simulation, Turn};
use std::cell::Cell;
use std::io::{Cursor, Read, Seek, SeekFrom};
use std::rc::Rc;

/// A seekable in-memory file that counts the bytes read from it.
struct Counting {
    inner: Cursor<Vec<u8>>,
    read: Rc<Cell<u64>>,
}

impl Read for Counting {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.set(self.read.get() + n as u64);
        Ok(n)
    }
}

impl Seek for Counting {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        self.inner.seek(pos)
    }
}

fn counting(bytes: &[u8]) -> (Reader<Counting>, Rc<Cell<u64>>) {
    let read = Rc::new(Cell::new(0));
    let file = Counting {
        inner: Cursor::new(bytes.to_vec()),
        read: Rc::clone(&read),
    };
    (Reader::new(file).unwrap(), read)
}

const LONG: Plan = Plan {
    players: 2,
    turns: 2000,
    keyframe_every: 100,
    hash_lag: 0,
    finish: true,
};

/// Offset of the first record matching `pick`.
fn offset_of(bytes: &[u8], mut pick: impl FnMut(&Record) -> bool) -> usize {
    let mut r = Reader::from_bytes(bytes).unwrap();
    while let Some(rec) = r.next() {
        if pick(&rec.unwrap()) {
            return usize::try_from(r.record_offset()).unwrap();
        }
    }
    panic!("no such record");
}

#[test]
fn seek_to_the_last_turn_reads_only_the_tail_and_the_last_keyframe_on() {
    let bytes = record(LONG, |_, _| {});
    let (reader, read) = counting(&bytes);
    let s = seek::<Toy, _>(reader, Turn(1999)).unwrap();
    assert_eq!(s.keyframe, Some(Turn(1900)));
    assert_eq!(s.simulated, 99);
    assert_eq!(s.world, simulate_to(2, Turn(1999)));
    // Everything from keyframe 1900 on, the header and the tail: well under
    // a tenth of the file. The stream seek reads up to the target.
    let kf = offset_of(&bytes, |r| {
        matches!(
            r,
            Record::Keyframe {
                turn: Turn(1900),
                ..
            }
        )
    });
    let jumped = read.get();
    assert!(
        jumped < (bytes.len() - kf) as u64 + 64 * 1024,
        "{jumped} of {}",
        bytes.len()
    );
    let (reader, read) = counting(&bytes);
    let s2 = seek_stream::<Toy, _>(reader, Turn(1999)).unwrap();
    assert_eq!(s2.world, s.world);
    assert!(read.get() >= kf as u64, "{}", read.get());
}

#[test]
fn damage_before_the_keyframe_does_not_reach_a_seek_past_it() {
    let mut bytes = record(LONG, |_, _| {});
    let early = offset_of(&bytes, |r| matches!(r, Record::Turn { turn: Turn(5), .. }));
    bytes[early + RECORD_HEAD_LEN as usize + 1] ^= 0x40;
    // Reading from the start stops at the damage...
    let err = seek_stream::<Toy, _>(Reader::from_bytes(&bytes).unwrap(), Turn(1500))
        .err()
        .unwrap();
    assert!(matches!(err, ReplayError::NoSuchTurn { .. }), "{err}");
    // ...jumping to keyframe 1500 does not read it.
    let s = seek::<Toy, _>(Reader::from_bytes(&bytes).unwrap(), Turn(1550)).unwrap();
    assert_eq!(s.keyframe, Some(Turn(1500)));
    assert_eq!(
        s.world.state_hash(),
        simulate_to(2, Turn(1550)).state_hash()
    );
}

#[test]
fn a_damaged_index_is_an_error_never_a_wrong_jump() {
    let mut bytes = record(LONG, |_, _| {});
    let index = offset_of(&bytes, |r| matches!(r, Record::KeyframeIndex(_)));
    bytes[index + RECORD_HEAD_LEN as usize + 3] ^= 0x01;
    let err = seek::<Toy, _>(Reader::from_bytes(&bytes).unwrap(), Turn(1550))
        .err()
        .unwrap();
    assert!(
        matches!(
            err,
            ReplayError::Checksum { .. } | ReplayError::Malformed { .. }
        ),
        "{err}"
    );
}

#[test]
fn an_unfinished_recording_is_sought_from_the_start() {
    let plan = Plan {
        finish: false,
        turns: 300,
        ..LONG
    };
    let bytes = record(plan, |_, _| {});
    let s = seek::<Toy, _>(Reader::from_bytes(&bytes).unwrap(), Turn(250)).unwrap();
    assert_eq!(s.keyframe, Some(Turn(200)));
    assert_eq!(s.world, simulate_to(2, Turn(250)));
    // The first keyframe is turn 0's.
    let s = seek::<Toy, _>(Reader::from_bytes(&bytes).unwrap(), Turn(42)).unwrap();
    assert_eq!((s.keyframe, s.simulated), (Some(Turn(0)), 42));
}
