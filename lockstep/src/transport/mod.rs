//! The transport: packet-level reliability (sequence numbers, acks, RTT,
//! loss, congestion mode), messages over packets, authenticated connections
//! and the sans-IO `Client` / `Server` endpoints.

pub(crate) mod acks;
pub(crate) mod auth;
pub(crate) mod bulk;
mod client;
mod config;
pub(crate) mod congestion;
mod connection;
mod heap;
pub(crate) mod messages;
pub(crate) mod rtt;
pub(crate) mod sequence;
mod server;
pub(crate) mod stats;

pub use client::{Client, ClientEvent};
pub use config::{Channel, TransportConfig};
pub use congestion::{CongestionConfig, CongestionMode};
pub use connection::DisconnectReason;
pub use heap::ConnMemory;
pub use messages::SendError;
pub use server::{AuthMode, ConnId, Detached, STILL_HEARD, Server, ServerCounters, ServerEvent};
pub use stats::{LinkEstimate, LinkStats};

#[cfg(test)]
mod tests;
