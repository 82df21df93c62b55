//! Binds a [`Session`] to a transport [`Client`]: session messages go out on
//! the channel they need, client messages come into the session, and the
//! client's link figures feed the session's stats. Sans-IO like both sides:
//! the driver owns the socket and the clock and calls [`PeerGlue::pump`]
//! after handing either side anything.

use crate::backlog::{Backlog, DropLog, SendDrop};
use crate::proto::Delivery;
use crate::session::Session;
use crate::time::Instant;
use crate::transport::{Channel, Client, ClientEvent, DisconnectReason};

/// Maps the protocol's delivery class onto a transport channel.
#[must_use]
pub const fn channel(d: Delivery) -> Channel {
    match d {
        Delivery::Reliable => Channel::Reliable,
        Delivery::Unreliable => Channel::Unreliable,
        Delivery::Bulk => Channel::Bulk,
        Delivery::Urgent => Channel::Urgent,
    }
}

/// The glue state between one session and one client.
#[derive(Debug, Default)]
pub struct PeerGlue {
    /// Session messages waiting for room in the transport's window.
    backlog: Backlog,
    connected: bool,
    disconnected: Option<DisconnectReason>,
    drops: DropLog<SendDrop>,
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

    /// Messages dropped because the transport refused them or the backlog
    /// overflowed; each is also reported once by [`PeerGlue::poll_drop`].
    #[must_use]
    pub const fn dropped(&self) -> u64 {
        self.drops.total()
    }

    /// The next dropped message, for the driver to log or show: a session
    /// message that never reached the transport (oldest unread reports are
    /// discarded past [`crate::backlog::MAX_DROP_REPORTS`]; all are counted).
    #[must_use]
    pub fn poll_drop(&mut self) -> Option<SendDrop> {
        self.drops.poll()
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
        // Every pump: the cheap figures, not `stats` (its rate meters were
        // 5 % of a load generator driving thousands of peers).
        let link = client.estimate();
        session.handle_link_stats(link.rtt, link.jitter, link.loss);
        session.handle_rtt_p99(link.rtt_p99);
        while let Some((d, bytes)) = session.poll_outgoing() {
            let drops = &mut self.drops;
            self.backlog.push(channel(d), bytes, |d| drops.record(d));
        }
        let drops = &mut self.drops;
        self.backlog
            .flush(|ch, bytes| client.send(ch, bytes), |d| drops.record(d));
    }
}
