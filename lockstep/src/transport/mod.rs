//! The transport: packet-level reliability (sequence numbers, acks, RTT,
//! loss, congestion mode), messages over packets, authenticated connections
//! and the sans-IO `Client` / `Server` endpoints.

pub mod acks;
pub mod congestion;
pub mod messages;
pub mod rtt;
pub mod sequence;
