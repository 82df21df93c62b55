//! Reads one replay image to the end and checks what the reader promises on
//! any input: no panic, an iterator that stays ended after its one error, and
//! an intact prefix that reads back the same records without damage.

use replays::{Ending, Reader};

/// Reads `data` as a replay and asserts the reader's invariants.
pub fn read_all(data: &[u8]) {
    let Ok(mut reader) = Reader::from_bytes(data) else {
        return;
    };
    let _ = reader.header();
    let mut records = 0u64;
    let mut damaged = false;
    for item in reader.by_ref() {
        match item {
            Ok(_) => records += 1,
            Err(e) => {
                damaged = true;
                let _ = e.to_string();
                let _ = e.is_damage();
            }
        }
    }
    assert!(
        reader.next().is_none(),
        "the iterator resumed after it ended"
    );
    let summary = reader.summary().clone();
    let _ = summary.to_string();
    assert_eq!(summary.records, records, "summary counts other records");
    assert!(summary.intact_bytes <= data.len() as u64);
    match summary.ending {
        Ending::Complete => assert!(summary.trailer.is_some() && !damaged),
        Ending::NoTrailer => assert!(!damaged),
        Ending::Torn { .. } | Ending::Corrupt { .. } => assert!(damaged),
        Ending::Unread => panic!("ended without saying how"),
    }

    // The intact prefix is a clean file holding exactly the records read.
    let Ok(intact) = usize::try_from(summary.intact_bytes) else {
        return;
    };
    let mut again = Reader::from_bytes(&data[..intact]).expect("the intact prefix has a header");
    let mut n = 0u64;
    for item in again.by_ref() {
        assert!(item.is_ok(), "the intact prefix is damaged: {item:?}");
        n += 1;
    }
    assert_eq!(n, records, "the intact prefix holds other records");
}
