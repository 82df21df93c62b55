//! The replays crate's integration tests (one test binary).

// Helpers are shared between test modules of this one binary.
#![allow(unreachable_pub)]

mod damage;
mod toy;
mod toy_replays;
