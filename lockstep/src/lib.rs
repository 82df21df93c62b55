//! Sans-IO UDP transport and lockstep turn sessions.
//!
//! Filled by the transport and turn-session work: see the README's crate map.

pub mod netsim;
pub mod rng;
pub mod time;
pub mod transport;
pub mod wire;

pub mod builder;
pub mod event;
pub mod input_delay;
pub mod peer_glue;
pub mod proto;
pub mod session;
pub mod turn_buffer;

pub use time::{Duration, Instant};
