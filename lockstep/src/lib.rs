//! Sans-IO UDP transport and lockstep turn sessions.
//!
//! Filled by the transport and turn-session work: see the README's crate map.

pub mod driver;
pub mod netsim;
pub mod rng;
pub mod time;
pub mod transport;
pub mod wire;

pub use time::{Duration, Instant};
