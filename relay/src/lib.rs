//! The relay: authority on what each lockstep turn contains.
//!
//! [`Router`] is the sans-IO core: it takes connection events and messages
//! from the transport, runs many matches at once (each a match room), closes
//! turns by the configured [`TurnPolicy`], stamps every command with the
//! sender's slot, adapts the input delay, compares state hashes and names the
//! odd peer out on a desync. It reports everything as [`RouterEvent`]s that a
//! driver logs and records into replays.

pub mod config;
mod delay;
mod desync;
pub mod event;
pub mod limits;
mod matchroom;
pub mod peer;
pub mod recorder;
pub mod router;
pub mod server;
pub mod turn_policy;

pub use config::RelayConfig;
pub use event::{DropReason, MatchId, MatchInfo, RouterEvent};
pub use limits::Limits;
pub use router::{ConnId, Router, RouterCounters};
pub use turn_policy::TurnPolicy;
