//! Arbitrary bytes as a replay file: framing, checksums, torn and corrupt endings.
#![no_main]

mod common;

libfuzzer_sys::fuzz_target!(|data: &[u8]| common::read_all(data));
