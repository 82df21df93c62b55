//! Arbitrary records behind a valid checksum chain, as a recording in a
//! relay's record directory: what `relay serve` reads at start-up to resume
//! a match (`relay::resume::scan`). The input is framed like the replay
//! reader's `reader_framed` target (`kind: u8, len: u32 LE, payload`,
//! repeated, leftover bytes a torn tail) so the fuzzer gets past the
//! checksums to the facts, turns, drops and delays resume validates. The
//! promise: no panic, no hang, and a resumed match's next turn is within
//! the resumable range. The body is `relay::resume::check_fuzz_input`, which
//! the relay's tests also run on every corpus file on stable Rust.
#![no_main]

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
    if let Err(broken) = relay::resume::check_fuzz_input(dir(), data) {
        panic!("the resume path broke its promise: {broken}");
    }
});
