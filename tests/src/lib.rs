//! End-to-end tests and benchmarks for the lockstep engine.
//!
//! `harness` spawns a relay and peers over loopback UDP for the end-to-end
//! tests; `bench` is the harness behind the benchmark command that
//! regenerates `BENCHMARKS.md`.

pub mod bench;
#[doc = include_str!("../docs/development.md")]
pub mod development {}
pub mod harness;
