//! The sans-IO client endpoint: runs the handshake (ConnectRequest →
//! Challenge → ChallengeResponse → Accepted) against one server, then
//! carries one authenticated [`Connection`]. With a join token the request
//! and the response carry the token's sealed part and the connection keys
//! come from the token's secret keys.

use super::auth::{ConnKeys, conn_keys, token_conn_keys};
use super::config::{Channel, TransportConfig};
use super::connection::{ConnEvent, Connection, DisconnectReason, Role};
use super::messages::SendError;
use super::stats::{LinkEstimate, LinkStats};
use crate::rng::Rng;
use crate::time::Duration;
use crate::time::Instant;
use crate::token::{ConnectToken, SealedToken};
use crate::wire::{self, Cookie, DenyReason, Packet};
use std::collections::VecDeque;

/// How long a connection must have heard nothing before the server's "I do
/// not know this connection" closes it: a relay sends every turn, so a
/// second of silence means it is gone (restarted), not a lossy moment.
const FORGOTTEN_AFTER: Duration = Duration::from_secs(1);
use std::net::SocketAddr;

/// What a [`Client`] reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientEvent {
    /// The handshake completed.
    Connected,
    /// A message arrived (reliable ones exactly once and in order).
    Message(Vec<u8>),
    /// The un-acked reliable window is full; `send` fails until acks free it.
    Backpressure,
    /// The connection ended; no further events follow.
    Disconnected(DisconnectReason),
}

enum Phase {
    Requesting,
    Responding {
        cookie: Cookie,
        conn: Box<Connection>,
    },
    Connected(Box<Connection>),
    Closed(Option<Box<Connection>>),
}

/// One connection to a server. Feed it datagrams and timeouts; poll it for
/// datagrams to send and events.
pub struct Client {
    cfg: TransportConfig,
    server: SocketAddr,
    salt: u64,
    phase: Phase,
    started: Instant,
    next_handshake: Instant,
    now: Instant,
    pending: VecDeque<(Channel, Vec<u8>)>,
    events: VecDeque<ClientEvent>,
    dropped_foreign: u64,
    token: Option<Box<(SealedToken, ConnKeys)>>,
}

impl Client {
    /// Starts connecting to `server`; the first `poll_transmit` sends the request.
    ///
    /// The handshake salt comes from `salt_entropy`: the server's replies
    /// are believed only if they echo it, so on a real network pass 8 bytes
    /// from the OS CSPRNG (`getrandom`; [`crate::peer::udp::UdpPeer`] does):
    /// an attacker who guesses the salt forges `Denied` from off the path
    /// (the join fails) or, in open mode, a `Challenge` that makes it the
    /// server. A seed is fine on a simulated network and in tests, where
    /// runs must repeat. The transport never draws randomness itself, so it
    /// builds for `wasm32-unknown-unknown` without a JavaScript binding.
    #[must_use]
    pub fn new(
        now: Instant,
        server: SocketAddr,
        config: TransportConfig,
        salt_entropy: u64,
    ) -> Self {
        let salt = Rng::new(salt_entropy).next_u64();
        Self {
            cfg: config,
            server,
            salt,
            phase: Phase::Requesting,
            started: now,
            next_handshake: now,
            now,
            pending: VecDeque::new(),
            events: VecDeque::new(),
            dropped_foreign: 0,
            token: None,
        }
    }

    /// Starts connecting to `server` (normally one of `token.servers`) with a join
    /// token; the token's protocol id replaces `config.protocol_id`.
    /// `salt_entropy` as in [`Client::new`]: from the OS CSPRNG on a real
    /// network.
    #[must_use]
    pub fn with_token(
        now: Instant,
        server: SocketAddr,
        config: TransportConfig,
        token: &ConnectToken,
        salt_entropy: u64,
    ) -> Self {
        let config = TransportConfig {
            protocol_id: token.protocol_id(),
            ..config
        };
        let mut c = Self::new(now, server, config, salt_entropy);
        c.token = Some(Box::new((token.private, token.keys)));
        c
    }

    /// Processes one datagram received from `from`.
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]) {
        self.now = self.now.max(now);
        if from != self.server {
            self.dropped_foreign += 1;
            return;
        }
        let authed = bytes.first().is_some_and(|b| b & 0x80 == 0);
        match &mut self.phase {
            Phase::Requesting | Phase::Responding { .. } if !authed => {
                self.on_handshake(now, bytes);
            }
            Phase::Responding { conn, .. } => {
                let verified = conn.handle_datagram(now, bytes).is_ok();
                if verified {
                    self.establish();
                }
            }
            Phase::Connected(conn) if authed => {
                let _ = conn.handle_datagram(now, bytes);
            }
            Phase::Connected(conn) => {
                // The server forgot us (it restarted): believed only after
                // a silence no healthy link has, so a forged notice cannot
                // break a connection that works.
                if let Ok(Packet::Denied {
                    reason: DenyReason::UnknownConnection,
                    ..
                }) = wire::decode(bytes)
                    && conn.silent_for(now) >= FORGOTTEN_AFTER
                    && let Phase::Connected(c) =
                        std::mem::replace(&mut self.phase, Phase::Closed(None))
                {
                    self.phase = Phase::Closed(Some(c));
                    self.events
                        .push_back(ClientEvent::Disconnected(DisconnectReason::Forgotten));
                }
            }
            _ => {}
        }
        self.pump();
    }

    fn establish(&mut self) {
        let Phase::Responding { conn, .. } =
            std::mem::replace(&mut self.phase, Phase::Closed(None))
        else {
            return;
        };
        let mut conn = conn;
        while let Some((ch, msg)) = self.pending.pop_front() {
            // The window is empty and pending is bounded by it, so this cannot fail.
            let _ = conn.send(ch, &msg);
        }
        self.phase = Phase::Connected(conn);
        self.events.push_back(ClientEvent::Connected);
    }

    fn on_handshake(&mut self, now: Instant, bytes: &[u8]) {
        let Ok(packet) = wire::decode(bytes) else {
            return;
        };
        match packet {
            Packet::Challenge(c)
                if c.client_salt == self.salt
                    && c.protocol_id == self.cfg.protocol_id
                    && matches!(self.phase, Phase::Requesting) =>
            {
                let keys = match self.token.as_deref() {
                    Some((_, token_keys)) => token_conn_keys(token_keys, &c),
                    None => conn_keys(&c),
                };
                let conn = Connection::new(self.cfg, Role::Client, keys, self.token.is_some(), now);
                self.phase = Phase::Responding {
                    cookie: c,
                    conn: Box::new(conn),
                };
                self.next_handshake = now;
            }
            Packet::Denied {
                client_salt,
                reason,
                ..
            } if client_salt == self.salt => {
                self.phase = Phase::Closed(None);
                self.events
                    .push_back(ClientEvent::Disconnected(DisconnectReason::Denied(reason)));
            }
            _ => {}
        }
    }

    fn pump(&mut self) {
        let Phase::Connected(conn) = &mut self.phase else {
            return;
        };
        let mut closed = None;
        while let Some(ev) = conn.poll_event() {
            match ev {
                ConnEvent::Message(m) => self.events.push_back(ClientEvent::Message(m)),
                ConnEvent::Backpressure => self.events.push_back(ClientEvent::Backpressure),
                ConnEvent::Closed(r) => closed = Some(r),
            }
        }
        if let Some(r) = closed {
            self.events.push_back(ClientEvent::Disconnected(r));
            if let Phase::Connected(c) = std::mem::replace(&mut self.phase, Phase::Closed(None)) {
                self.phase = Phase::Closed(Some(c));
            }
        }
    }

    /// Advances timers: handshake resends and timeout, keep-alives, loss detection.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = self.now.max(now);
        match &mut self.phase {
            Phase::Requesting | Phase::Responding { .. } => {
                if now >= self.started + self.cfg.timeout {
                    self.phase = Phase::Closed(None);
                    self.events.push_back(ClientEvent::Disconnected(
                        DisconnectReason::HandshakeTimeout,
                    ));
                }
            }
            Phase::Connected(conn) => conn.handle_timeout(now),
            Phase::Closed(_) => {}
        }
        self.pump();
    }

    /// Fills `buf` with the next datagram to send and returns its destination.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<SocketAddr> {
        self.now = self.now.max(now);
        buf.clear();
        let sent = match &mut self.phase {
            Phase::Requesting if now >= self.next_handshake => {
                match self.token.as_deref() {
                    Some((token, _)) => Packet::TokenRequest {
                        client_salt: self.salt,
                        token: *token,
                    },
                    None => Packet::ConnectRequest {
                        protocol_id: self.cfg.protocol_id,
                        client_salt: self.salt,
                    },
                }
                .encode(buf);
                self.next_handshake = now + self.cfg.handshake_resend;
                true
            }
            Phase::Responding { cookie, .. } if now >= self.next_handshake => {
                match self.token.as_deref() {
                    Some((token, _)) => Packet::TokenResponse {
                        cookie: *cookie,
                        token: *token,
                    },
                    None => Packet::ChallengeResponse(*cookie),
                }
                .encode(buf);
                self.next_handshake = now + self.cfg.handshake_resend;
                true
            }
            Phase::Connected(conn) => conn.poll_transmit(now, buf),
            _ => false,
        };
        self.pump();
        sent.then_some(self.server)
    }

    /// When `handle_timeout` (or `poll_transmit`) next has work.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        match &self.phase {
            Phase::Requesting | Phase::Responding { .. } => {
                Some(self.next_handshake.min(self.started + self.cfg.timeout))
            }
            Phase::Connected(conn) => conn.poll_timeout(),
            Phase::Closed(_) => None,
        }
    }

    /// The next event, if any.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<ClientEvent> {
        self.events.pop_front()
    }

    /// Queues a message; before the handshake completes it waits in a bounded queue.
    pub fn send(&mut self, channel: Channel, msg: &[u8]) -> Result<(), SendError> {
        match &mut self.phase {
            Phase::Connected(conn) => {
                let r = conn.send(channel, msg);
                self.pump();
                r
            }
            Phase::Requesting | Phase::Responding { .. } => {
                if self.pending.len() >= self.cfg.max_unacked {
                    return Err(SendError::WindowFull {
                        unacked: self.pending.len(),
                        max: self.cfg.max_unacked,
                    });
                }
                self.pending.push_back((channel, msg.to_vec()));
                Ok(())
            }
            Phase::Closed(_) => Err(SendError::NotConnected),
        }
    }

    /// Tests only: from now on this client acknowledges nothing (a broken
    /// or hostile peer the server must cut off).
    #[cfg(test)]
    pub(crate) fn never_ack(&mut self) {
        if let Phase::Connected(conn) = &mut self.phase {
            conn.never_ack = true;
        }
    }

    /// Link measurements (defaults before the handshake completes).
    #[must_use]
    pub fn stats(&self) -> LinkStats {
        match &self.phase {
            Phase::Connected(c) | Phase::Closed(Some(c)) => c.stats(),
            _ => LinkStats::default(),
        }
    }

    /// What the connection holds in memory, by part (zero before the
    /// handshake completes).
    #[must_use]
    pub fn memory(&self) -> super::ConnMemory {
        match &self.phase {
            Phase::Connected(c) | Phase::Closed(Some(c)) => c.memory(),
            _ => super::ConnMemory::default(),
        }
    }

    /// The figures a session is given on every pump: smoothed RTT, jitter,
    /// loss and the RTT tail (as in [`Client::stats`], zero before the
    /// handshake completes). Use it where `stats` would run often: it skips
    /// the rate meters' walks.
    #[must_use]
    pub fn estimate(&self) -> LinkEstimate {
        match &self.phase {
            Phase::Connected(c) | Phase::Closed(Some(c)) => c.estimate(),
            _ => LinkEstimate::default(),
        }
    }

    /// Closes cleanly: the disconnect packet is sent several times, then `Disconnected(Local)`.
    pub fn disconnect(&mut self, now: Instant) {
        self.now = self.now.max(now);
        match &mut self.phase {
            Phase::Connected(conn) => conn.close(DisconnectReason::Local),
            Phase::Requesting | Phase::Responding { .. } => {
                self.phase = Phase::Closed(None);
                self.events
                    .push_back(ClientEvent::Disconnected(DisconnectReason::Local));
            }
            Phase::Closed(_) => {}
        }
        self.pump();
    }

    /// Whether the handshake completed and the connection is open.
    #[must_use]
    pub fn is_connected(&self) -> bool {
        matches!(&self.phase, Phase::Connected(c) if c.is_open())
    }

    /// Datagrams ignored because they did not come from the server's address.
    #[must_use]
    pub fn dropped_foreign(&self) -> u64 {
        self.dropped_foreign
    }
}
