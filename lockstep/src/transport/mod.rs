//! The transport: packet-level reliability (sequence numbers, acks, RTT,
//! loss, congestion mode), messages over packets, authenticated connections
//! and the sans-IO `Client` / `Server` endpoints.

pub mod acks;
pub mod auth;
mod client;
pub mod congestion;
mod connection;
pub mod messages;
pub mod rtt;
pub mod sequence;
mod server;
pub mod stats;

pub use client::{Client, ClientEvent};
pub use congestion::{CongestionConfig, CongestionMode};
pub use connection::{Channel, DisconnectReason, TransportConfig};
pub use messages::SendError;
pub use server::{AuthMode, ConnId, Detached, Server, ServerCounters, ServerEvent};
pub use stats::LinkStats;

#[cfg(test)]
mod tests;
