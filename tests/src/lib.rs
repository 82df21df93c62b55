//! End-to-end tests and benchmarks for the lockstep engine.
//!
//! `browser` drives headless Chromium for the replay viewer's tests;
//! `harness` spawns a relay and peers over loopback UDP for the end-to-end
//! tests; `crowd` fills a real relay with hostile clients and measures its
//! memory (for a test and a bench section alike); `bench` is the harness behind the benchmark command that
//! regenerates `BENCHMARKS.md`.

pub mod bench;
pub mod browser;
pub mod crowd;
#[doc = include_str!("../docs/development.md")]
pub mod development {}
pub mod harness;
