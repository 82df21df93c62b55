//! Arbitrary records behind a valid checksum chain. The fuzzer cannot forge
//! BLAKE3 checksums, so `reader` rarely gets past them; this target frames
//! its input as records (`kind: u8, len: u32 LE, payload`, repeated) with
//! correct checksums, so payload decoding and record sequencing are fuzzed.
#![no_main]

mod common;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some(file) = replays::format::framed_for_fuzzing(data) {
        common::read_all(&file);
    }
});
