//! The transport: packet-level reliability (sequence numbers, acks, RTT,
//! loss, congestion mode), messages over packets, authenticated connections
//! and the sans-IO `Client` / `Server` endpoints.

pub mod acks;
pub mod auth;
pub mod bulk;
mod client;
mod config;
pub mod congestion;
mod connection;
mod heap;
pub mod messages;
pub mod rtt;
pub mod sequence;
mod server;
pub mod stats;

pub use client::{Client, ClientEvent};
pub use config::{Channel, TransportConfig};
pub use congestion::{CongestionConfig, CongestionMode};
pub use connection::DisconnectReason;
pub use heap::ConnMemory;
pub use messages::SendError;
pub use server::{AuthMode, ConnId, Detached, Server, ServerCounters, ServerEvent};
pub use stats::{LinkEstimate, LinkStats};

#[cfg(test)]
mod tests;
