//! Crash safety and tamper evidence: a replay cut at every byte offset and
//! with every single bit flipped reads as exactly the right prefix, or fails
//! with a located error; never a panic, never wrong data.

use crate::toy::{Plan, record};
use replays::format::{FORMAT_VERSION, PREAMBLE_LEN};
use replays::{Ending, Reader, Record, ReplayError};

/// Each record of `bytes` with the offset range it occupies (header first).
fn layout(bytes: &[u8]) -> (Vec<Record>, Vec<(u64, u64)>) {
    let mut r = Reader::from_bytes(bytes).unwrap();
    let mut records = vec![Record::Header(r.header().clone())];
    let mut ranges = vec![(PREAMBLE_LEN, r.position())];
    while let Some(item) = r.next() {
        records.push(item.unwrap());
        ranges.push((r.record_offset(), r.position()));
    }
    assert!(r.summary().is_complete());
    assert_eq!(ranges.last().unwrap().1, bytes.len() as u64);
    (records, ranges)
}

fn small() -> Vec<u8> {
    record(
        Plan {
            players: 2,
            turns: 12,
            keyframe_every: 5,
            hash_lag: 2,
            finish: true,
        },
        |_, _| {},
    )
}

#[test]
fn cut_at_every_byte_reads_the_complete_prefix() {
    let bytes = small();
    let (records, ranges) = layout(&bytes);
    let all_turns = records
        .iter()
        .filter(|r| matches!(r, Record::Turn { .. }))
        .count();
    for cut in 0..bytes.len() {
        let prefix = &bytes[..cut];
        let complete = ranges.iter().filter(|(_, end)| *end <= cut as u64).count();
        let mut reader = match Reader::from_bytes(prefix) {
            Ok(r) => r,
            Err(ReplayError::Torn { offset, lost_bytes }) => {
                // Nothing usable: the preamble or the header is incomplete.
                assert_eq!(complete, 0, "cut {cut}");
                assert_eq!(offset + lost_bytes, cut as u64, "cut {cut}");
                continue;
            }
            Err(e) => panic!("cut {cut}: unexpected {e}"),
        };
        let mut got = vec![Record::Header(reader.header().clone())];
        let mut errors = Vec::new();
        for item in reader.by_ref() {
            match item {
                Ok(r) => got.push(r),
                Err(e) => errors.push(e),
            }
        }
        assert_eq!(got.len(), complete, "cut {cut}");
        assert_eq!(got[..], records[..complete], "cut {cut}");
        let boundary = ranges[complete - 1].1;
        let summary = reader.summary();
        if boundary == cut as u64 {
            assert!(errors.is_empty(), "cut {cut}");
            assert_eq!(summary.ending, Ending::NoTrailer, "cut {cut}");
        } else {
            assert!(
                matches!(errors[..], [ReplayError::Torn { offset, .. }] if offset == boundary),
                "cut {cut}: {errors:?}"
            );
            assert_eq!(
                summary.ending,
                Ending::Torn {
                    offset: boundary,
                    lost_bytes: cut as u64 - boundary
                }
            );
            assert!(summary.to_string().contains("the last record was torn"));
        }
        assert!(!summary.is_complete());
        assert!(summary.turns as usize <= all_turns);
        assert_eq!(summary.intact_bytes, boundary);
    }
}

#[test]
fn every_single_bit_flip_is_a_located_error() {
    let bytes = small();
    let (records, ranges) = layout(&bytes);
    let mut flipped = bytes.clone();
    for i in 0..bytes.len() {
        for bit in 0..8 {
            flipped[i] ^= 1 << bit;
            check_flip(&flipped, i, &records, &ranges);
            flipped[i] ^= 1 << bit;
        }
    }
}

fn check_flip(bytes: &[u8], i: usize, records: &[Record], ranges: &[(u64, u64)]) {
    let i64 = i as u64;
    let reader = Reader::from_bytes(bytes);
    if i < 8 {
        assert!(matches!(reader, Err(ReplayError::NotAReplay)), "byte {i}");
        return;
    }
    if i < PREAMBLE_LEN as usize {
        assert!(
            matches!(reader, Err(ReplayError::UnsupportedVersion { found, newest: FORMAT_VERSION, .. }) if found != FORMAT_VERSION),
            "byte {i}"
        );
        return;
    }
    let k = ranges
        .iter()
        .position(|(s, e)| (*s..*e).contains(&i64))
        .unwrap();
    let start = ranges[k].0;
    let mut reader = match reader {
        Ok(r) => r,
        Err(ReplayError::Checksum { offset, .. }) => {
            assert_eq!((k, offset), (0, start), "byte {i}");
            return;
        }
        Err(e) => panic!("byte {i}: {e}"),
    };
    assert!(k > 0, "byte {i}: damaged header accepted");
    let mut got = Vec::new();
    let mut error = None;
    for item in reader.by_ref() {
        match item {
            Ok(r) => got.push(r),
            Err(e) => error = Some(e),
        }
    }
    assert_eq!(got[..], records[1..k], "byte {i}");
    assert!(
        matches!(error, Some(ReplayError::Checksum { offset, .. }) if offset == start),
        "byte {i}: {error:?}"
    );
    assert!(!reader.summary().is_complete());
}

#[test]
fn unknown_version_is_refused_naming_both_versions() {
    let mut bytes = small();
    bytes[8..12].copy_from_slice(&7u32.to_le_bytes());
    let err = Reader::from_bytes(&bytes).err().unwrap();
    let msg = err.to_string();
    assert!(msg.contains("version 7"), "{msg}");
    assert!(msg.contains(&format!("{FORMAT_VERSION}")), "{msg}");
}

#[test]
fn not_a_replay() {
    assert!(matches!(
        Reader::from_bytes(b"hello world, this is text"),
        Err(ReplayError::NotAReplay)
    ));
}

#[test]
fn zero_filled_tail_is_a_torn_write() {
    let mut bytes = record(
        Plan {
            finish: false,
            ..Plan::default()
        },
        |_, _| {},
    );
    let len = bytes.len() as u64;
    bytes.extend_from_slice(&[0; 700]);
    let mut r = Reader::from_bytes(&bytes).unwrap();
    let n = r.by_ref().filter(Result::is_ok).count();
    assert!(n > 40);
    assert_eq!(
        r.summary().ending,
        Ending::Torn {
            offset: len,
            lost_bytes: 700
        }
    );
}

#[test]
fn data_after_the_trailer_is_refused() {
    let mut bytes = small();
    // A well-formed record that chains correctly, but after the trailer.
    let prev: [u8; 16] = bytes[bytes.len() - 16..].try_into().unwrap();
    let mut payload = Vec::new();
    Record::Drop {
        player: sim::PlayerId(0),
        turn: sim::Turn(99),
    }
    .encode_payload(&mut payload)
    .unwrap();
    let end = bytes.len() as u64;
    replays::format::frame_record(&prev, replays::format::kind::DROP, &payload, &mut bytes)
        .unwrap();
    let mut r = Reader::from_bytes(&bytes).unwrap();
    let errors: Vec<_> = r.by_ref().filter_map(Result::err).collect();
    assert!(
        matches!(errors[..], [ReplayError::Sequence { offset, .. }] if offset == end),
        "{errors:?}"
    );
    assert!(!r.summary().is_complete());
}

#[test]
fn recovered_message_counts_turns() {
    let bytes = record(
        Plan {
            turns: 1412,
            keyframe_every: 0,
            finish: false,
            ..Plan::default()
        },
        |_, _| {},
    );
    let cut = &bytes[..bytes.len() - 3];
    let (_, summary) = Reader::from_bytes(cut).unwrap().scan().unwrap();
    let msg = summary.to_string();
    // The last hash record is torn: every turn record survived.
    assert!(
        msg.starts_with("recovered 1,412 turns; the last record was torn"),
        "{msg}"
    );
}

mod random {
    use super::*;
    use proptest::prelude::*;

    fn original() -> (Vec<u8>, Vec<Record>) {
        let bytes = small();
        let records = Reader::from_bytes(&bytes)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        (bytes, records)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Several bytes overwritten anywhere: never a panic, and whatever is
        /// read is a prefix of the real records (a damaged file never reads
        /// as something else).
        #[test]
        fn random_edits_never_panic_nor_invent_records(
            edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8)
        ) {
            let (mut bytes, records) = original();
            let len = bytes.len();
            for (pos, val) in edits {
                bytes[pos % len] = val;
            }
            if let Ok(mut r) = Reader::from_bytes(&bytes) {
                let got: Vec<Record> = r.by_ref().filter_map(Result::ok).collect();
                prop_assert!(got.len() <= records.len());
                prop_assert_eq!(&got[..], &records[..got.len()]);
                if r.summary().is_complete() {
                    prop_assert_eq!(got, records);
                }
            }
        }

        /// Random bytes after a valid header: never a panic, never complete.
        #[test]
        fn random_tail_never_panics(tail in proptest::collection::vec(any::<u8>(), 0..600)) {
            let (bytes, _) = original();
            let header_end = usize::try_from(Reader::from_bytes(&bytes).unwrap().position()).unwrap();
            let mut file = bytes[..header_end].to_vec();
            file.extend_from_slice(&tail);
            let mut r = Reader::from_bytes(&file).unwrap();
            let n = r.by_ref().filter(Result::is_ok).count();
            prop_assert_eq!(n, 0);
            prop_assert!(!r.summary().is_complete());
        }
    }
}
