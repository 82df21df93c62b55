//! What a connection is configured with: the delivery channels and the
//! transport's tuning (`TransportConfig`, whose `Default` gives the documented values).

use super::congestion::CongestionConfig;
use crate::time::Duration;

/// Which delivery guarantee a message gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Channel {
    /// Reliable and ordered: sent once, resent when known lost or its ack
    /// is overdue, riding along in spare room until acked; delivered once,
    /// in order.
    Reliable,
    /// Sent once, may be lost, unordered.
    Unreliable,
    /// Large transfers (snapshots, up to `max_bulk_message`): reliable and
    /// ordered among bulk messages, cut into fragments that are sent once and
    /// resent only when known lost, paced by their own packet budget and
    /// given only the room turn traffic leaves, so a transfer never delays a turn.
    Bulk,
    /// Latency-critical turn traffic (a peer's inputs, the relay's bundles):
    /// reliable and ordered in the same stream as `Reliable` (an urgent and a
    /// reliable message are delivered in the order they were sent), plus
    /// early redundant copies sized from the measured loss when
    /// `redundancy` is on, so a lost packet rarely costs a resend.
    Urgent,
}

/// Transport tuning. `Default` gives the documented values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TransportConfig {
    /// Application protocol id; peers with another id cannot connect.
    pub protocol_id: u64,
    /// Silence after which a connection is dropped (5 s).
    pub timeout: Duration,
    /// Longest gap between ack-eliciting packets on an idle link (250 ms).
    pub keepalive: Duration,
    /// Un-acked reliable window in messages/fragments (256, at most 1024).
    pub max_unacked: usize,
    /// Largest reliable message after reassembly (default `proto::MAX_MESSAGE_LEN`,
    /// 96 KiB: the largest bundle fits; at most 255 KiB).
    pub max_message: usize,
    /// Largest bulk message (`Channel::Bulk`, default 4 MiB, at most
    /// `bulk::MAX_BULK_MESSAGE`) a client accepts and either side sends;
    /// the receiver holds only the fragments that arrived (never the total
    /// a fragment claims), at most this for one connection's bulk path, the
    /// sender at most twice this. A server's connections accept no bulk data
    /// until the application opens them with `Server::set_bulk_receive`
    /// (a server asks for what it receives: a relay, a snapshot chunk).
    pub max_bulk_message: usize,
    /// How long a bulk message being received may go without a new
    /// fragment before it is thrown away (10 s; counted in
    /// `LinkStats::bulk_expired`): an honest sender resends a lost
    /// fragment within about a second, so only a sender that stopped
    /// mid-message trips it, twice the silence `timeout` after it went quiet.
    pub bulk_stall_timeout: Duration,
    /// Bytes of reliable frames a connection holds ahead of a gap (default
    /// `messages::DEFAULT_MAX_REORDER_BYTES`, 128 KiB; keep it at least
    /// `max_message`). Frames beyond it are refused and their packet left
    /// unacknowledged, so the sender resends them later (counted in
    /// `LinkStats::reorder_refused`): a peer cannot make the receiver hold
    /// its whole 1,024-frame receive window (~1.2 MiB).
    pub max_reorder_bytes: usize,
    /// Redundancy sized from measured loss (on by default; none below 2.5 %
    /// loss, one copy up to 15 %): new urgent messages (`Channel::Urgent`)
    /// get extra early repeats within one packet interval, so a lost input
    /// or bundle costs a fraction of a packet interval instead of a resend.
    /// Plain reliable and unreliable messages never get copies.
    pub redundancy: bool,
    /// Good/bad mode rates and thresholds.
    pub congestion: CongestionConfig,
    /// Send tokens the bucket can hold (burst size).
    pub burst: u32,
    /// How long an owed ack may wait for data to ride on (25 ms: a peer's
    /// ack of a bundle rides on the hash it sends once it has played the
    /// turn; the relay uses one turn, `RelayConfig::server_transport`, so
    /// its acks ride on the next bundle; the other side learns the hold
    /// from the headers and waits for it before a resend); once four
    /// ack-eliciting packets are unanswered it is due at once.
    pub ack_delay: Duration,
    /// Handshake packet resend interval (250 ms).
    pub handshake_resend: Duration,
    /// Copies of the clean-disconnect packet (3).
    pub disconnect_copies: u8,
    /// How long the un-acked window may stay full before the connection is
    /// dropped (5 s; `DisconnectReason::Backpressure`); also how long a peer
    /// that keeps sending may leave our data unacknowledged before it is
    /// dropped (`DisconnectReason::NoAcks`).
    pub backpressure_timeout: Duration,
    /// Most bytes sent after the newest packet the peer acknowledged (256
    /// KiB): at the cap only acks and keep-alives go out until it acks, so
    /// a peer that never acks gets at most this much data. Above what an
    /// honest peer has unconfirmed (a round trip of turn traffic plus the
    /// bulk path's 128-fragment window, ~150 KB).
    pub max_unconfirmed_bytes: usize,
    /// The send window a new connection starts with (8 KiB, about seven
    /// full packets, under QUIC's initial window of ten): bytes sent after
    /// the newest packet the peer acknowledged may not exceed it until acks
    /// arrive. Every byte the peer acknowledges widens it by two, up to
    /// `max_unconfirmed_bytes` (it roughly triples per round trip while
    /// the peer acks everything), so a peer that acknowledges nothing
    /// receives this much data and then only acks and keep-alives.
    pub initial_window: usize,
    /// Most connections a server accepts (64).
    pub max_connections: usize,
    /// How long a challenge cookie stays valid (10 s).
    pub cookie_lifetime: Duration,
}

impl Default for TransportConfig {
    fn default() -> Self {
        Self {
            protocol_id: 0x4C4F_434B_5354_4550, // "LOCKSTEP"
            timeout: Duration::from_secs(5),
            keepalive: Duration::from_millis(250),
            max_unacked: 256,
            max_message: crate::proto::MAX_MESSAGE_LEN,
            max_bulk_message: 4 << 20,
            bulk_stall_timeout: Duration::from_secs(10),
            max_reorder_bytes: super::messages::DEFAULT_MAX_REORDER_BYTES,
            redundancy: true,
            congestion: CongestionConfig::default(),
            burst: 3,
            ack_delay: Duration::from_millis(25),
            handshake_resend: Duration::from_millis(250),
            disconnect_copies: 3,
            backpressure_timeout: Duration::from_secs(5),
            max_unconfirmed_bytes: 256 * 1024,
            initial_window: 8 * 1024,
            max_connections: 64,
            cookie_lifetime: Duration::from_secs(10),
        }
    }
}
