//! The replays crate's integration tests (one test binary).

// Helpers are shared between test modules of this one binary.
#![allow(unreachable_pub)]
// Test helpers outside #[test] functions unwrap too: a failure should stop the test.
#![allow(clippy::unwrap_used)]

#[cfg(feature = "cli")]
mod cli;
#[cfg(feature = "cli")]
mod cli_games;
mod damage;
mod golden;
mod hostile_inputs;
mod reopen;
mod seek_index;
mod toy;
mod toy_replays;
