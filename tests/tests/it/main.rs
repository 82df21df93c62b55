//! The tests crate's integration tests, one test binary: a module per
//! subject. One binary links the whole tree once instead of once per file
//! (the link, not the compile, was most of CI's test build on two cores).
//! Tests that run several CPU-hungry processes share one lock
//! (`tests::harness::heavy`), so merging the binaries did not let them run
//! at the same time.
//!
//! Run one group: `cargo test -p lockstep-tests --test it e2e::` (the
//! module's name is the filter; see `tests::development`).

// Test helpers outside #[test] functions unwrap too: a failure should stop the test.
#![allow(clippy::unwrap_used)]

mod bench_only;
mod big_battle;
mod browser;
mod closed_pipes;
mod e2e;
mod guide;
mod heal;
mod hostile_crowd;
mod peer_cli;
mod public_api;
mod readme;
mod rejoin;
mod relay_killed;
