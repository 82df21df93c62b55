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
    // Boxed: a connection's state is large, and a refused attach hands it back.
    slot: Box<Slot>,
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
        self.schedule.remove(conn);
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
        Some(Detached {
            slot: Box::new(slot),
            pending,
        })
    }

    /// The open connection from `addr`, if any. A driver that forwards
    /// datagrams between servers asks this to know whether it still serves
    /// an address after the connection it moved in has closed (a client
    /// restarted on the same address may have a new connection here).
    #[must_use]
    pub fn conn_at(&self, addr: SocketAddr) -> Option<ConnId> {
        self.by_addr.get(&addr).copied()
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
        self.set_now(now);
        let addr = moved.slot.addr;
        if let Some(&old) = self.by_addr.get(&addr) {
            self.remove(old, super::DisconnectReason::Replaced);
        }
        if self.conns.len() >= self.cfg.max_connections {
            return Err(moved);
        }
        let id = ConnId(self.next_id);
        self.next_id = self.next_id.wrapping_add(1);
        self.conns.insert(id, *moved.slot);
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests may unwrap
    use super::*;
    use crate::time::Duration;
    use crate::transport::{Channel, Client, ClientEvent, TransportConfig};

    /// Delivers everything both ways, directly, until nothing moves.
    fn exchange(client: &mut Client, server: &mut Server, now: Instant, at: SocketAddr) {
        let mut buf = Vec::new();
        for _ in 0..8 {
            while client.poll_transmit(now, &mut buf).is_some() {
                server.handle_datagram(now, at, &buf);
            }
            while server.poll_transmit(now, &mut buf).is_some() {
                client.handle_datagram(now, SocketAddr::from(([127, 0, 0, 1], 7000)), &buf);
            }
        }
    }

    fn events(server: &mut Server) -> Vec<ServerEvent> {
        std::iter::from_fn(|| server.poll_event()).collect()
    }

    #[test]
    fn a_detached_connection_goes_on_through_the_server_it_is_attached_to() {
        let cfg = TransportConfig::default();
        let srv = SocketAddr::from(([127, 0, 0, 1], 7000));
        let cli = SocketAddr::from(([127, 0, 0, 1], 7001));
        let (mut one, mut two) = (Server::new(cfg, [3; 32]), Server::new(cfg, [3; 32]));
        let mut client = Client::new(Instant::ZERO, srv, cfg, 9);
        let mut now = Instant::ZERO;
        while !client.is_connected() && now < Instant::from_millis(1000) {
            exchange(&mut client, &mut one, now, cli);
            now += Duration::from_millis(10);
        }
        client.send(Channel::Reliable, b"join").unwrap();
        client.send(Channel::Reliable, b"next").unwrap();
        exchange(&mut client, &mut one, now, cli);
        let evs = events(&mut one);
        let conn = match evs.as_slice() {
            [
                ServerEvent::Connected { conn, .. },
                ServerEvent::Message { bytes, .. },
                ..,
            ] => {
                assert_eq!(bytes, b"join");
                *conn
            }
            other => panic!("{other:?}"),
        };
        // "join" was taken and not handled: it moves first; "next" was
        // already taken too, so it is handed back the same way here.
        let moved = one.detach(conn, Some(b"join".to_vec())).unwrap();
        assert!(
            one.detach(conn, None).is_none(),
            "gone from the first server"
        );
        assert_eq!(moved.addr(), cli);
        assert!(one.connections().next().is_none());
        assert!(
            events(&mut one).is_empty(),
            "no Disconnected for a moved connection"
        );
        let id = two.attach(moved, now).unwrap();
        let evs = events(&mut two);
        assert!(
            matches!(evs[0], ServerEvent::Connected { conn, addr } if conn == id && addr == cli)
        );
        assert!(matches!(&evs[1], ServerEvent::Message { bytes, .. } if bytes == b"join"));
        // Both ways go on with the same keys and sequence numbers.
        two.send(id, Channel::Reliable, b"welcome").unwrap();
        client.send(Channel::Reliable, b"after").unwrap();
        exchange(&mut client, &mut two, now, cli);
        let got: Vec<ClientEvent> = std::iter::from_fn(|| client.poll_event()).collect();
        assert!(
            got.iter()
                .any(|e| matches!(e, ClientEvent::Message(m) if m == b"welcome")),
            "{got:?}"
        );
        let evs = events(&mut two);
        assert!(
            evs.iter()
                .any(|e| matches!(e, ServerEvent::Message { bytes, .. } if bytes == b"after")),
            "{evs:?}"
        );
        assert_eq!(two.counters().auth_failed, 0);
        assert_eq!(two.counters().unknown_sender, 0);
        assert!(client.is_connected());
    }

    #[test]
    fn a_full_server_hands_the_connection_back() {
        let cfg = TransportConfig {
            max_connections: 0,
            ..TransportConfig::default()
        };
        let srv = SocketAddr::from(([127, 0, 0, 1], 7000));
        let cli = SocketAddr::from(([127, 0, 0, 1], 7001));
        let mut one = Server::new(TransportConfig::default(), [3; 32]);
        let mut client = Client::new(Instant::ZERO, srv, TransportConfig::default(), 9);
        let mut now = Instant::ZERO;
        while !client.is_connected() && now < Instant::from_millis(1000) {
            exchange(&mut client, &mut one, now, cli);
            now += Duration::from_millis(10);
        }
        let conn = one.connections().next().unwrap();
        let moved = one.detach(conn, None).unwrap();
        let mut full = Server::new(cfg, [3; 32]);
        assert!(full.attach(moved, now).is_err());
        assert!(events(&mut full).is_empty());
    }
}
