//! Arbitrary records behind a valid checksum chain, as a recording in a
//! relay's record directory: what `relay serve` reads at start-up to resume
//! a match (`relay::resume::scan`). The input is framed like the replay
//! reader's `reader_framed` target (`kind: u8, len: u32 LE, payload`,
//! repeated, leftover bytes a torn tail) so the fuzzer gets past the
//! checksums to the facts, turns, drops and delays resume validates. The
//! promise: no panic, no hang, and a resumed match's next turn is within
//! the resumable range.
#![no_main]

use replays::format::{self, FORMAT_VERSION};
use std::path::PathBuf;
use std::sync::OnceLock;

/// One directory per fuzzing process, reused for every input.
fn dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("relay_fuzz_resume_{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("a temporary directory");
        d
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut file = format::preamble().to_vec();
    let mut prev = format::chain_seed(FORMAT_VERSION);
    let mut rest = data;
    while let [kind, l0, l1, l2, l3, tail @ ..] = rest {
        let len = u32::from_le_bytes([*l0, *l1, *l2, *l3]) as usize;
        let (payload, next) = tail.split_at(len.min(tail.len()));
        match format::frame_record(&prev, *kind, payload, &mut file) {
            Ok(sum) => prev = sum,
            Err(_) => return,
        }
        rest = next;
    }
    file.extend_from_slice(rest);
    let path = dir().join("m.lsr");
    std::fs::write(&path, &file).expect("the recording is written");
    let (found, skipped) = relay::resume::scan(dir(), 64, 4);
    assert!(found.len() + skipped.len() <= 1);
    for m in &found {
        assert!(m.next_turn().0 <= relay::resume::MAX_RESUMABLE_TURN + 1);
        assert!(m.match_id() <= relay::resume::MAX_RESUMABLE_MATCH_ID);
    }
    drop(found);
    let _ = std::fs::remove_file(&path);
});
