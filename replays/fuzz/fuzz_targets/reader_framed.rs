//! Arbitrary records behind a valid checksum chain. The fuzzer cannot forge
//! BLAKE3 checksums, so `reader` rarely gets past them; this target frames
//! its input as records (`kind: u8, len: u32 LE, payload`, repeated) with
//! correct checksums, so payload decoding and record sequencing are fuzzed.
#![no_main]

mod common;

use replays::format::{self, FORMAT_VERSION};

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
    // Leftover bytes become a torn tail.
    file.extend_from_slice(rest);
    common::read_all(&file);
});
