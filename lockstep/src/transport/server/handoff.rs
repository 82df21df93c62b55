//! Moving a live connection from one [`Server`] to another, for drivers
//! that run several servers on one port (one per thread) and want every
//! connection of a match on the server that hosts the match. The moved
//! connection keeps its keys, sequence numbers, acks and unsent messages:
//! the client sees nothing but possibly a lost packet or two.

use super::{ConnId, Server, ServerEvent, Slot};
use crate::time::Instant;
use crate::token::TokenClaims;
use std::net::SocketAddr;

/// A connection taken out of one server by [`Server::detach`], to be put
/// into another by [`Server::attach`]. Opaque: it holds the connection's keys.
pub struct Detached {
    slot: Slot,
    /// Messages that arrived on the connection but were not handled where it
    /// was: the new server reports them again, in order, after `Connected`.
    pending: Vec<Vec<u8>>,
}

impl std::fmt::Debug for Detached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // No keys in logs.
        f.debug_struct("Detached")
            .field("addr", &self.slot.addr)
            .field("pending", &self.pending.len())
            .finish_non_exhaustive()
    }
}

impl Detached {
    /// The client's address.
    #[must_use]
    pub const fn addr(&self) -> SocketAddr {
        self.slot.addr
    }

    /// The join-token claims the connection was admitted with, if any.
    #[must_use]
    pub const fn claims(&self) -> Option<&TokenClaims> {
        self.slot.claims.as_ref()
    }
}

impl Server {
    /// Takes `conn` out of this server without closing it: no `Disconnected`
    /// event, no packet to the client. `first` is a message the caller
    /// already took from this connection and did not handle (it is reported
    /// first by the server the connection is attached to); every event still
    /// queued for `conn` here moves along with it. `None` if `conn` is unknown.
    pub fn detach(&mut self, conn: ConnId, first: Option<Vec<u8>>) -> Option<Detached> {
        let slot = self.conns.remove(&conn)?;
        self.by_addr.remove(&slot.addr);
        let mut pending: Vec<Vec<u8>> = first.into_iter().collect();
        let mut rest = std::collections::VecDeque::with_capacity(self.events.len());
        for ev in self.events.drain(..) {
            match ev {
                ServerEvent::Message { conn: c, bytes } if c == conn => pending.push(bytes),
                ServerEvent::Connected { conn: c, .. } | ServerEvent::Backpressure { conn: c }
                    if c == conn => {}
                other => rest.push_back(other),
            }
        }
        self.events = rest;
        Some(Detached { slot, pending })
    }

    /// Adopts a connection detached from another server (sharing this one's
    /// configuration): reports `Connected` with a new id of this server,
    /// then each pending message. A connection already open here from the
    /// same address is replaced, as a new handshake would replace it. Over
    /// the connection limit the connection is refused: it comes back as `Err`.
    ///
    /// # Errors
    /// The connection, when this server is full.
    pub fn attach(&mut self, moved: Detached, now: Instant) -> Result<ConnId, Detached> {
        self.now = self.now.max(now);
        let addr = moved.slot.addr;
        if let Some(&old) = self.by_addr.get(&addr) {
            self.remove(old, super::DisconnectReason::Replaced);
        }
        if self.conns.len() >= self.cfg.max_connections {
            return Err(moved);
        }
        let id = ConnId(self.next_id);
        self.next_id = self.next_id.wrapping_add(1);
        self.conns.insert(id, moved.slot);
        self.by_addr.insert(addr, id);
        self.events
            .push_back(ServerEvent::Connected { conn: id, addr });
        for bytes in moved.pending {
            self.events
                .push_back(ServerEvent::Message { conn: id, bytes });
        }
        // Whatever the connection produced meanwhile (nothing, normally).
        self.pump(id);
        Ok(id)
    }
}
