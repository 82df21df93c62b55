//! Binds a [`Session`] to a transport [`Client`]: session messages go out on
//! the channel they need, client messages come into the session, and the
//! client's link figures feed the session's stats. Sans-IO like both sides:
//! the driver owns the socket and the clock and calls [`PeerGlue::pump`]
//! after handing either side anything.

use crate::proto::Delivery;
use crate::session::Session;
use crate::time::Instant;
use crate::transport::{Channel, Client, ClientEvent, DisconnectReason, SendError};
use std::collections::VecDeque;

/// Reliable messages waiting for room in the transport's window; beyond
/// this the session is hopelessly behind and the oldest are dropped.
const MAX_BACKLOG: usize = 4096;

/// Maps the protocol's delivery class onto a transport channel.
#[must_use]
pub const fn channel(d: Delivery) -> Channel {
    match d {
        Delivery::Reliable => Channel::Reliable,
        Delivery::Unreliable => Channel::Unreliable,
    }
}

/// The glue state between one session and one client.
#[derive(Debug, Default)]
pub struct PeerGlue {
    backlog: VecDeque<(Channel, Vec<u8>)>,
    connected: bool,
    disconnected: Option<DisconnectReason>,
    dropped: u64,
}

impl PeerGlue {
    /// Fresh glue for a client that is still handshaking.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the transport handshake completed.
    #[must_use]
    pub const fn is_connected(&self) -> bool {
        self.connected
    }

    /// Why the transport connection ended, if it did.
    #[must_use]
    pub const fn disconnected(&self) -> Option<DisconnectReason> {
        self.disconnected
    }

    /// Whether everything the session sent has left this glue and been
    /// acknowledged by the relay (no reliable message waiting or un-acked):
    /// after the match ended, a driver keeps the connection running until
    /// then (bounded), so the final hashes are not lost with the process.
    #[must_use]
    pub fn is_flushed(&self, client: &Client) -> bool {
        self.backlog.is_empty() && client.stats().unacked == 0
    }

    /// Messages dropped because the transport refused them.
    #[must_use]
    pub const fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Moves everything pending in both directions.
    pub fn pump(&mut self, now: Instant, session: &mut Session, client: &mut Client) {
        while let Some(ev) = client.poll_event() {
            match ev {
                ClientEvent::Connected => self.connected = true,
                ClientEvent::Message(bytes) => session.handle_message(now, &bytes),
                ClientEvent::Backpressure => {}
                ClientEvent::Disconnected(reason) => {
                    self.connected = false;
                    self.disconnected = Some(reason);
                    // A denied handshake is a refusal like a rejected join:
                    // the session reports it typed, with its reason.
                    if let DisconnectReason::Denied(d) = reason {
                        session.handle_denied(d.into());
                    }
                }
            }
        }
        let stats = client.stats();
        session.handle_link_stats(stats.rtt, stats.jitter, stats.loss);
        while let Some((d, bytes)) = session.poll_outgoing() {
            if self.backlog.len() >= MAX_BACKLOG {
                self.backlog.pop_front();
                self.dropped += 1;
            }
            self.backlog.push_back((channel(d), bytes));
        }
        while let Some((ch, bytes)) = self.backlog.front() {
            match client.send(*ch, bytes) {
                Ok(()) => {
                    self.backlog.pop_front();
                }
                // Reliable data waits for acks to free the window; an
                // unreliable message is not worth waiting for.
                Err(SendError::WindowFull { .. }) if *ch == Channel::Reliable => break,
                Err(_) => {
                    self.backlog.pop_front();
                    self.dropped += 1;
                }
            }
        }
    }
}
