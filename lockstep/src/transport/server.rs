//! The sans-IO server endpoint: many connections on one socket. Handshake
//! packets are answered statelessly (a cookie, never a larger reply); a
//! connection is allocated only when a client echoes a valid cookie. In token
//! mode ([`AuthMode::Tokens`]) the request and the response also carry a join
//! token, which is opened and checked both times, so nothing is remembered
//! about a token until its holder completed the cookie round trip.

use super::auth::{ConnKeys, conn_keys, cookie_mac, ct_eq, token_conn_keys, token_cookie_mac};
use super::config::{Channel, TransportConfig};
use super::connection::{ConnEvent, Connection, DisconnectReason, DropReason, Role};
use super::messages::SendError;
use super::stats::{LinkEstimate, LinkStats};
use crate::time::Instant;
use crate::token::ledger::{CookieAdmission, UsedTokens};
use crate::token::{Refusal, SealedToken, TokenClaims, TokenKey};
use crate::wire::{self, Cookie, DecodeError, DenyReason, Packet};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

mod handoff;
mod schedule;
use crate::schedule::Schedule;
pub use handoff::Detached;

/// Identifies one connection on a [`Server`]; never reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct ConnId(pub u32);

/// What a [`Server`] reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerEvent {
    /// A client completed the handshake.
    Connected {
        /// The new connection.
        conn: ConnId,
        /// Its address.
        addr: SocketAddr,
    },
    /// A message arrived on `conn`.
    Message {
        /// Sender.
        conn: ConnId,
        /// Payload.
        bytes: Vec<u8>,
    },
    /// `conn`'s un-acked window is full.
    Backpressure {
        /// The connection.
        conn: ConnId,
    },
    /// `conn` ended; its id is gone.
    Disconnected {
        /// The connection.
        conn: ConnId,
        /// Why.
        reason: DisconnectReason,
    },
}

/// Datagrams the server dropped or refused, by reason.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ServerCounters {
    /// Undecodable datagrams.
    pub malformed: u64,
    /// Handshake packets of another wire version.
    pub wrong_version: u64,
    /// Requests naming another protocol id (answered with `Denied`).
    pub wrong_protocol: u64,
    /// Requests refused because the server was full.
    pub denied_full: u64,
    /// Challenges sent.
    pub challenges_sent: u64,
    /// Responses whose cookie did not verify.
    pub bad_cookie: u64,
    /// Responses whose cookie was too old.
    pub expired_cookie: u64,
    /// Authenticated packets from an address with no connection.
    pub unknown_sender: u64,
    /// Packets failing the connection MAC.
    pub auth_failed: u64,
    /// Replayed, duplicated or too-old packets.
    pub replayed: u64,
    /// Stateless replies dropped because the reply queue was full.
    pub replies_dropped: u64,
    /// Handshake packets a server never expects (Challenge, Denied).
    pub unexpected: u64,
    /// Connections accepted.
    pub accepted: u64,
    /// Token mode: requests without a join token.
    pub token_missing: u64,
    /// Token mode: expired join tokens.
    pub token_expired: u64,
    /// Token mode: join tokens that did not open (forged, corrupted, another key).
    pub token_forged: u64,
    /// Token mode: join tokens already used from another address.
    pub token_reused: u64,
    /// Token mode: the used-token table was full of unexpired tokens.
    pub token_table_full: u64,
    /// Relay layer: the token names another match than the one joined.
    pub token_wrong_match: u64,
    /// Relay layer: the token names another slot than the one claimed.
    pub token_wrong_slot: u64,
    /// Relay layer: a spectator token asked to play, or a player token to spectate.
    pub token_wrong_kind: u64,
    /// Relay layer: the token is of another match instance of the same name
    /// (an earlier match's token).
    pub token_wrong_instance: u64,
    /// Bulk messages refused unread: the connection was not opened for
    /// bulk data ([`Server::set_bulk_receive`]) or was closed mid-message.
    pub bulk_refused: u64,
    /// Incomplete bulk messages thrown away after `bulk_stall_timeout`
    /// without a new fragment.
    pub bulk_expired: u64,
    /// Reliable frames refused by a connection's reorder cap
    /// (`max_reorder_bytes`); their packets went unacknowledged.
    pub reorder_refused: u64,
    /// Handshake responses whose cookie had already opened a connection
    /// (a captured handshake replayed): ignored, nothing allocated.
    pub cookie_replayed: u64,
    /// Handshakes from an address whose connection was heard within
    /// [`STILL_HEARD`]: ignored, the live connection is kept.
    pub handshake_while_heard: u64,
}

/// A connection that sent an authenticated packet this recently is alive:
/// a new handshake from its address does not replace it (netcode.io's
/// rule). Only the holder of the connection's keys can make it heard, so a
/// replayed or spoofed handshake cannot take a live connection's place; a
/// client that really restarted on the same address is admitted once its
/// old connection has been silent this long (its handshake is resent every
/// 250 ms and waits `timeout`, 5 s).
pub const STILL_HEARD: crate::time::Duration = crate::time::Duration::from_secs(2);

/// How a [`Server`] admits clients.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum AuthMode {
    /// Anyone who completes the cookie round trip may connect (LAN, demo);
    /// keys come from the cookie, so an on-path observer could forge packets.
    #[default]
    Open,
    /// Only holders of a join token sealed under `key` may connect; the
    /// connection keys come from the token.
    Tokens {
        /// The relay's token key (shared with the matchmaker only).
        key: TokenKey,
        /// Unix time in seconds at this server's `Instant::ZERO` (the driver
        /// knows the wall clock; see [`Server::set_unix_time`]).
        unix_at_zero: u64,
    },
}

/// Stateless replies waiting for `poll_transmit`; a flood beyond this is dropped.
const MAX_REPLIES: usize = 1024;
/// How often an address that is not a connection is told so at most.
const FORGOTTEN_REPLY_EVERY: crate::time::Duration = crate::time::Duration::from_millis(200);
/// Addresses remembered as told; the table is emptied when it fills.
const MAX_FORGOTTEN_TOLD: usize = 4096;

struct Slot {
    addr: SocketAddr,
    cookie: [u8; wire::COOKIE_LEN],
    /// Boxed: the B-tree's nodes hold eleven slots each, mostly part
    /// empty; 2.5 KiB connections inline in them cost about twice their size.
    conn: Box<Connection>,
    claims: Option<TokenClaims>,
}

/// Many connections on one socket.
pub struct Server {
    cfg: TransportConfig,
    secret: [u8; 32],
    conns: BTreeMap<ConnId, Slot>,
    /// Looked up for every datagram and never iterated: a hash map (a
    /// B-tree of thousands of addresses cost a few cache misses per datagram).
    by_addr: HashMap<SocketAddr, ConnId>,
    next_id: u32,
    replies: VecDeque<(SocketAddr, Vec<u8>)>,
    /// When each recent unknown sender was told it is not a connection.
    forgotten_told: HashMap<SocketAddr, Instant>,
    events: VecDeque<ServerEvent>,
    counters: ServerCounters,
    cursor: Option<ConnId>,
    now: Instant,
    auth: AuthMode,
    /// Shared with the other servers of one process that serve the same
    /// port ([`Server::with_token_ledger_of`]): a token used through one
    /// is used for all.
    used_tokens: Arc<Mutex<UsedTokens>>,
    denials: VecDeque<(SocketAddr, DenyReason)>,
    /// Ids of the connections due, reused by `handle_timeout` on every wake-up.
    scratch: Vec<ConnId>,
    /// Each connection's next deadline, and which are due: a wake-up
    /// touches only those, not every connection.
    schedule: Schedule<ConnId>,
    /// Connections `handle_timeout` and `poll_transmit` looked at, ever.
    visits: u64,
}

impl Server {
    /// A server whose cookies are keyed by `secret` (keep it private and
    /// random). The secret is also the server's entropy for the connection
    /// keys (a cookie is keyed BLAKE3 under it): draw a fresh one from the
    /// OS CSPRNG for every server start (`relay serve` does), or a
    /// handshake captured before a restart could be admitted again.
    #[must_use]
    pub fn new(config: TransportConfig, secret: [u8; 32]) -> Self {
        Self {
            cfg: config,
            secret,
            conns: BTreeMap::new(),
            by_addr: HashMap::new(),
            next_id: 0,
            replies: VecDeque::new(),
            forgotten_told: HashMap::new(),
            events: VecDeque::new(),
            counters: ServerCounters::default(),
            cursor: None,
            now: Instant::ZERO,
            auth: AuthMode::Open,
            used_tokens: Arc::default(),
            denials: VecDeque::new(),
            scratch: Vec::new(),
            schedule: Schedule::default(),
            visits: 0,
        }
    }

    /// Sets how clients are admitted (open by default).
    #[must_use]
    pub fn with_auth(mut self, auth: AuthMode) -> Self {
        self.auth = auth;
        self
    }

    /// How clients are admitted.
    #[must_use]
    pub fn auth(&self) -> &AuthMode {
        &self.auth
    }

    /// Tells a token-mode server that `now` is `unix_secs` on the wall clock
    /// (re-anchors [`AuthMode::Tokens::unix_at_zero`]; no effect in open mode).
    pub fn set_unix_time(&mut self, now: Instant, unix_secs: u64) {
        if let AuthMode::Tokens { unix_at_zero, .. } = &mut self.auth {
            *unix_at_zero = unix_secs.saturating_sub(now.as_micros() / 1_000_000);
        }
    }

    /// The join-token claims `conn` was admitted with (`None` in open mode).
    #[must_use]
    pub fn claims(&self, conn: ConnId) -> Option<&TokenClaims> {
        self.conns.get(&conn).and_then(|s| s.claims.as_ref())
    }

    /// Counts a refusal decided outside the transport (the relay's match and slot checks).
    pub fn count_refusal(&mut self, reason: Refusal) {
        let c = &mut self.counters;
        match reason {
            Refusal::Missing => c.token_missing += 1,
            Refusal::Expired => c.token_expired += 1,
            Refusal::Forged => c.token_forged += 1,
            Refusal::Reused => c.token_reused += 1,
            Refusal::WrongProtocol => c.wrong_protocol += 1,
            Refusal::WrongMatch => c.token_wrong_match += 1,
            Refusal::WrongSlot => c.token_wrong_slot += 1,
            Refusal::TableFull => c.token_table_full += 1,
            Refusal::WrongKind => c.token_wrong_kind += 1,
            Refusal::WrongInstance => c.token_wrong_instance += 1,
        }
    }

    /// Counts `reason` and closes `conn` cleanly (e.g. its token names
    /// another match); like [`Server::disconnect`], the messages already
    /// queued for it (the refusal with its reason) are delivered first.
    pub fn refuse(&mut self, conn: ConnId, reason: Refusal, now: Instant) {
        self.count_refusal(reason);
        self.disconnect(conn, now);
    }

    /// Join-token ids remembered to stop reuse from another address (0 in open mode).
    #[must_use]
    pub fn tracked_tokens(&self) -> usize {
        self.ledger().len()
    }

    /// Handshake cookies remembered as used (each opens one connection at
    /// most; forgotten when they expire).
    #[must_use]
    pub fn admitted_cookies(&self) -> usize {
        self.ledger().cookies_len()
    }

    /// The same, remembering used join tokens in `other`'s ledger: for a
    /// driver running several servers on one port (one per thread), so a
    /// token used through one of them is refused as reused by all.
    #[must_use]
    pub fn with_token_ledger_of(mut self, other: &Self) -> Self {
        self.used_tokens = Arc::clone(&other.used_tokens);
        self
    }

    fn ledger(&self) -> MutexGuard<'_, UsedTokens> {
        // The ledger stays consistent even if a holder panicked mid-update
        // (each update is one insert or remove pair).
        self.used_tokens
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn unix_now(&self, now: Instant) -> u64 {
        match &self.auth {
            AuthMode::Tokens { unix_at_zero, .. } => {
                unix_at_zero.saturating_add(now.as_micros() / 1_000_000)
            }
            AuthMode::Open => 0,
        }
    }

    /// Opens and checks a token for `from` without recording anything but pruning.
    fn check_token(
        &mut self,
        now: Instant,
        from: SocketAddr,
        token: &SealedToken,
    ) -> Result<(TokenClaims, ConnKeys), Refusal> {
        let unix = self.unix_now(now);
        let AuthMode::Tokens { key, .. } = &self.auth else {
            return Err(Refusal::Forged);
        };
        self.ledger().prune(unix);
        if token.protocol_id != self.cfg.protocol_id {
            return Err(Refusal::WrongProtocol);
        }
        // Open before the expiry check, so `token_expired` counts only genuine
        // tokens (a forged one with a past expiry is forged); the cost is the same.
        let opened = token.open(key).map_err(|_| Refusal::Forged)?;
        if unix >= token.expire_unix {
            return Err(Refusal::Expired);
        }
        if self.ledger().used_elsewhere(&token.id(), from) {
            return Err(Refusal::Reused);
        }
        Ok(opened)
    }

    fn deny(&mut self, to: SocketAddr, protocol_id: u64, client_salt: u64, reason: DenyReason) {
        if self.denials.len() < MAX_REPLIES {
            self.denials.push_back((to, reason));
        }
        let p = Packet::Denied {
            protocol_id,
            client_salt,
            reason,
        };
        self.reply(to, &p);
    }

    fn refuse_token(&mut self, to: SocketAddr, protocol_id: u64, salt: u64, reason: Refusal) {
        self.count_refusal(reason);
        // Each refusal its own code on the wire, so the client can say why.
        let deny = match reason {
            Refusal::Missing => DenyReason::TokenMissing,
            Refusal::Expired => DenyReason::TokenExpired,
            Refusal::Reused => DenyReason::TokenReused,
            Refusal::WrongProtocol => DenyReason::WrongProtocol,
            Refusal::TableFull => DenyReason::Full,
            // Match, slot, kind and instance are relay-layer checks, never
            // decided at the handshake.
            Refusal::Forged
            | Refusal::WrongMatch
            | Refusal::WrongSlot
            | Refusal::WrongKind
            | Refusal::WrongInstance => DenyReason::InvalidToken,
        };
        self.deny(to, protocol_id, salt, deny);
    }

    /// Processes one datagram from `from`.
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]) {
        self.set_now(now);
        let Some(&prefix) = bytes.first() else {
            self.counters.malformed += 1;
            return;
        };
        if prefix & 0x80 == 0 {
            let Some(&id) = self.by_addr.get(&from) else {
                self.counters.unknown_sender += 1;
                // Never a reply larger than what came: no amplification.
                if bytes.len() >= wire::DENIED_LEN {
                    self.tell_forgotten(now, from);
                }
                return;
            };
            if let Some(slot) = self.conns.get_mut(&id) {
                match slot.conn.handle_datagram(now, bytes) {
                    Ok(()) => {}
                    Err(DropReason::Malformed) => self.counters.malformed += 1,
                    Err(DropReason::Auth) => self.counters.auth_failed += 1,
                    Err(DropReason::Replay) => self.counters.replayed += 1,
                }
            }
            self.pump(id);
            return;
        }
        match wire::decode(bytes) {
            Err(DecodeError::Version { .. }) => self.counters.wrong_version += 1,
            Err(_) => self.counters.malformed += 1,
            Ok(Packet::ConnectRequest {
                protocol_id,
                client_salt,
            }) => self.on_request(now, from, protocol_id, client_salt),
            Ok(Packet::ChallengeResponse(c)) => self.on_response(now, from, c),
            Ok(Packet::TokenRequest { client_salt, token }) => {
                self.on_token_request(now, from, client_salt, &token);
            }
            Ok(Packet::TokenResponse { cookie, token }) => {
                self.on_token_response(now, from, cookie, &token);
            }
            Ok(_) => self.counters.unexpected += 1,
        }
    }

    /// A data packet came from an address with no connection (this server
    /// restarted, or dropped the connection): the client is told, at most
    /// once per [`FORGOTTEN_REPLY_EVERY`] per address, so a peer whose relay
    /// restarted reconnects at once instead of after its silence timeout.
    /// The notice (19 bytes) goes only to packets of a data packet's
    /// least length or more: no amplification. The table of recent
    /// notices is bounded.
    fn tell_forgotten(&mut self, now: Instant, to: SocketAddr) {
        if self
            .forgotten_told
            .get(&to)
            .is_some_and(|&t| now.saturating_since(t) < FORGOTTEN_REPLY_EVERY)
        {
            return;
        }
        if self.forgotten_told.len() >= MAX_FORGOTTEN_TOLD {
            self.forgotten_told.clear();
        }
        self.forgotten_told.insert(to, now);
        let p = Packet::Denied {
            protocol_id: self.cfg.protocol_id,
            client_salt: 0,
            reason: DenyReason::UnknownConnection,
        };
        self.reply(to, &p);
    }

    fn reply(&mut self, to: SocketAddr, packet: &Packet<'_>) {
        if self.replies.len() >= MAX_REPLIES {
            self.counters.replies_dropped += 1;
            return;
        }
        let mut b = Vec::new();
        packet.encode(&mut b);
        self.replies.push_back((to, b));
    }

    fn on_request(&mut self, now: Instant, from: SocketAddr, protocol_id: u64, client_salt: u64) {
        if matches!(self.auth, AuthMode::Tokens { .. }) {
            self.refuse_token(from, protocol_id, client_salt, Refusal::Missing);
            return;
        }
        if protocol_id != self.cfg.protocol_id {
            self.counters.wrong_protocol += 1;
            self.deny(from, protocol_id, client_salt, DenyReason::WrongProtocol);
            return;
        }
        if self.conns.len() >= self.cfg.max_connections && !self.by_addr.contains_key(&from) {
            self.counters.denied_full += 1;
            self.deny(from, protocol_id, client_salt, DenyReason::Full);
            return;
        }
        let timestamp = now.as_micros();
        let mac = cookie_mac(&self.secret, from, timestamp, client_salt, protocol_id);
        self.counters.challenges_sent += 1;
        let c = Cookie {
            protocol_id,
            client_salt,
            timestamp,
            mac,
        };
        self.reply(from, &Packet::Challenge(c));
    }

    fn on_token_request(
        &mut self,
        now: Instant,
        from: SocketAddr,
        client_salt: u64,
        token: &SealedToken,
    ) {
        let protocol_id = token.protocol_id;
        if self.auth == AuthMode::Open {
            // An open server cannot open tokens, and the keys would not match.
            self.counters.unexpected += 1;
            self.deny(from, protocol_id, client_salt, DenyReason::TokenUnexpected);
            return;
        }
        if let Err(r) = self.check_token(now, from, token) {
            self.refuse_token(from, protocol_id, client_salt, r);
            return;
        }
        if self.conns.len() >= self.cfg.max_connections && !self.by_addr.contains_key(&from) {
            self.counters.denied_full += 1;
            self.deny(from, protocol_id, client_salt, DenyReason::Full);
            return;
        }
        let timestamp = now.as_micros();
        let mac = token_cookie_mac(
            &self.secret,
            from,
            timestamp,
            client_salt,
            protocol_id,
            &token.id(),
        );
        self.counters.challenges_sent += 1;
        let c = Cookie {
            protocol_id,
            client_salt,
            timestamp,
            mac,
        };
        self.reply(from, &Packet::Challenge(c));
    }

    /// Whether a cookie was minted for `from` by this server less than `cookie_lifetime` ago.
    fn cookie_ok(&mut self, now: Instant, c: &Cookie, expect: &[u8; wire::COOKIE_LEN]) -> bool {
        if c.protocol_id != self.cfg.protocol_id || !ct_eq(expect, &c.mac) {
            self.counters.bad_cookie += 1;
            return false;
        }
        let minted = Instant::from_micros(c.timestamp);
        if minted > now || now.saturating_since(minted) > self.cfg.cookie_lifetime {
            self.counters.expired_cookie += 1;
            return false;
        }
        true
    }

    fn on_token_response(
        &mut self,
        now: Instant,
        from: SocketAddr,
        c: Cookie,
        token: &SealedToken,
    ) {
        if self.auth == AuthMode::Open {
            self.counters.unexpected += 1;
            return;
        }
        let expect = token_cookie_mac(
            &self.secret,
            from,
            c.timestamp,
            c.client_salt,
            c.protocol_id,
            &token.id(),
        );
        if !self.cookie_ok(now, &c, &expect) {
            return;
        }
        match self.check_token(now, from, token) {
            Ok((claims, keys)) => self.admit(
                now,
                from,
                c,
                token_conn_keys(&keys, &c),
                Some((claims, token.id())),
            ),
            Err(r) => self.refuse_token(from, c.protocol_id, c.client_salt, r),
        }
    }

    fn on_response(&mut self, now: Instant, from: SocketAddr, c: Cookie) {
        if matches!(self.auth, AuthMode::Tokens { .. }) {
            self.count_refusal(Refusal::Missing);
            return;
        }
        let expect = cookie_mac(
            &self.secret,
            from,
            c.timestamp,
            c.client_salt,
            c.protocol_id,
        );
        if self.cookie_ok(now, &c, &expect) {
            self.admit(now, from, c, conn_keys(&c), None);
        }
    }

    /// Allocates a connection for `from` after a verified cookie (and token, if any).
    fn admit(
        &mut self,
        now: Instant,
        from: SocketAddr,
        c: Cookie,
        keys: ConnKeys,
        token: Option<(TokenClaims, [u8; crate::token::NONCE_LEN])>,
    ) {
        let old = self.by_addr.get(&from).copied();
        if let Some(old) = old
            && let Some(slot) = self.conns.get_mut(&old)
        {
            if slot.cookie == c.mac {
                // Our Accepted was lost: say it again (the same connection,
                // its keys and counters: nothing is rebuilt).
                slot.conn.resend_accepted();
                self.pump(old);
                return;
            }
            if slot.conn.silent_for(now) < STILL_HEARD {
                // Its holder is talking to us: this handshake is a replay,
                // a spoof from an on-path observer, or a stray retry; the
                // live connection wins.
                self.counters.handshake_while_heard += 1;
                return;
            }
        }
        // Each cookie opens at most one connection, ever: a captured
        // handshake re-sent within the cookie's lifetime would otherwise
        // rebuild the same keys with counters from 0 (a keystream used twice,
        // every captured datagram accepted again). Checked before anything
        // is torn down, so a replay costs the server nothing.
        let expires = c
            .timestamp
            .saturating_add(self.cfg.cookie_lifetime.as_micros());
        let admission = self.ledger().admit_cookie(c.mac, expires, now.as_micros());
        match admission {
            CookieAdmission::Fresh => {}
            CookieAdmission::Replayed => {
                self.counters.cookie_replayed += 1;
                return;
            }
            CookieAdmission::Full => {
                self.counters.denied_full += 1;
                self.deny(from, c.protocol_id, c.client_salt, DenyReason::Full);
                return;
            }
        }
        if let Some(old) = old {
            self.remove(old, DisconnectReason::Replaced);
        }
        if self.conns.len() >= self.cfg.max_connections {
            self.counters.denied_full += 1;
            self.deny(from, c.protocol_id, c.client_salt, DenyReason::Full);
            return;
        }
        if let Some((claims, id)) = &token {
            let unix = self.unix_now(now);
            let recorded = {
                let mut ledger = self.ledger();
                // Checked again under the lock: a server sharing the ledger
                // may have admitted the token from another address meanwhile.
                if ledger.used_elsewhere(id, from) {
                    None
                } else {
                    Some(ledger.record(*id, from, claims.expire_unix, unix))
                }
            };
            let Some(recorded) = recorded else {
                self.refuse_token(from, c.protocol_id, c.client_salt, Refusal::Reused);
                return;
            };
            if recorded.is_err() {
                self.counters.token_table_full += 1;
                self.deny(from, c.protocol_id, c.client_salt, DenyReason::Full);
                return;
            }
        }
        let id = ConnId(self.next_id);
        self.next_id = self.next_id.wrapping_add(1);
        let conn = Box::new(Connection::new(
            self.cfg,
            Role::Server,
            keys,
            token.is_some(),
            now,
        ));
        self.conns.insert(
            id,
            Slot {
                addr: from,
                cookie: c.mac,
                conn,
                claims: token.map(|(claims, _)| claims),
            },
        );
        self.by_addr.insert(from, id);
        self.counters.accepted += 1;
        self.events.push_back(ServerEvent::Connected {
            conn: id,
            addr: from,
        });
        self.pump(id);
    }

    fn remove(&mut self, id: ConnId, reason: DisconnectReason) {
        if let Some(slot) = self.conns.remove(&id) {
            self.by_addr.remove(&slot.addr);
            self.schedule.remove(id);
            self.events
                .push_back(ServerEvent::Disconnected { conn: id, reason });
        }
    }

    fn pump(&mut self, id: ConnId) {
        let Some(slot) = self.conns.get_mut(&id) else {
            return;
        };
        let drops = slot.conn.take_drops();
        self.counters.bulk_refused += drops.bulk_refused;
        self.counters.bulk_expired += drops.bulk_expired;
        self.counters.reorder_refused += drops.reorder_refused;
        let mut closed = None;
        while let Some(ev) = slot.conn.poll_event() {
            match ev {
                ConnEvent::Message(bytes) => {
                    self.events
                        .push_back(ServerEvent::Message { conn: id, bytes });
                }
                ConnEvent::Backpressure => {
                    self.events
                        .push_back(ServerEvent::Backpressure { conn: id });
                }
                ConnEvent::Closed(r) => closed = Some(r),
            }
        }
        if let Some(reason) = closed {
            self.remove(id, reason);
        } else {
            // Every call into a connection ends here: its deadline is
            // recomputed while its state is known to have changed.
            self.schedule.set(id, slot.conn.poll_timeout());
        }
    }

    /// Moves this server's clock (never back), and its schedule's with it.
    fn set_now(&mut self, now: Instant) {
        self.now = self.now.max(now);
        self.schedule.advance(self.now);
    }

    /// Advances the timers of the connections that have something due (the
    /// others would do nothing: the cost follows the work, not the number
    /// of connections).
    pub fn handle_timeout(&mut self, now: Instant) {
        self.set_now(now);
        let unix = self.unix_now(now);
        {
            let mut ledger = self.ledger();
            ledger.prune(unix);
            ledger.prune_cookies(now.as_micros());
        }
        // A reused list (this runs on every wake-up): `pump` may remove
        // connections, so the ids are taken first.
        let mut ids = std::mem::take(&mut self.scratch);
        ids.clear();
        ids.extend(self.schedule.due());
        for &id in &ids {
            if let Some(slot) = self.conns.get_mut(&id) {
                self.visits += 1;
                slot.conn.handle_timeout(now);
            }
            self.pump(id);
        }
        self.scratch = ids;
    }

    /// Fills `buf` with the next datagram to send (stateless replies first, then
    /// connections in round-robin order) and returns its destination.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<SocketAddr> {
        self.set_now(now);
        buf.clear();
        if let Some((to, bytes)) = self.replies.pop_front() {
            buf.extend_from_slice(&bytes);
            return Some(to);
        }
        // Round robin over the connections that are due (only they can
        // have a datagram ready), from strictly after the cursor (it may
        // name a connection that is gone, and skipping "the first of c.."
        // would then skip a live one forever), wrapping around, each at
        // most once. Walked in place: this runs once per datagram sent.
        let mut at = self.cursor;
        for _ in 0..self.schedule.due_len() {
            let Some(id) = self.schedule.due_after(at) else {
                break;
            };
            at = Some(id);
            let Some(slot) = self.conns.get_mut(&id) else {
                // Not reachable (a removed connection leaves the schedule);
                // dropping the stale entry keeps the walk finite anyway.
                self.schedule.remove(id);
                continue;
            };
            self.visits += 1;
            let addr = slot.addr;
            let sent = slot.conn.poll_transmit(now, buf);
            self.pump(id);
            if sent {
                self.cursor = Some(id);
                return Some(addr);
            }
        }
        None
    }

    /// When `handle_timeout` (or `poll_transmit`) next has work.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let conns = self.schedule.first();
        if self.replies.is_empty() {
            conns
        } else {
            Some(self.now)
        }
    }

    /// The next event, if any.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<ServerEvent> {
        self.events.pop_front()
    }

    /// Queues a message for `conn`.
    pub fn send(&mut self, conn: ConnId, channel: Channel, msg: &[u8]) -> Result<(), SendError> {
        let Some(slot) = self.conns.get_mut(&conn) else {
            return Err(SendError::UnknownConnection);
        };
        let r = slot.conn.send(channel, msg);
        self.pump(conn);
        r
    }

    /// Lets `conn` send bulk messages (`Channel::Bulk`) of up to
    /// `max_message` bytes; 0 closes it again. A server's connections start
    /// closed: open one only while you expect bulk data from it (a relay,
    /// while a snapshot upload it asked for is under way), sized to the
    /// largest message that upload legitimately sends. Fragments arriving
    /// on a closed connection are refused unread (counted in
    /// [`ServerCounters::bulk_refused`]); closing it mid-message throws the
    /// partial message away. Unknown connections are ignored.
    pub fn set_bulk_receive(&mut self, conn: ConnId, max_message: usize) {
        if let Some(slot) = self.conns.get_mut(&conn) {
            slot.conn.set_bulk_receive(max_message);
        }
        self.pump(conn);
    }

    /// Link measurements of `conn`.
    #[must_use]
    pub fn stats(&self, conn: ConnId) -> Option<LinkStats> {
        self.conns.get(&conn).map(|s| s.conn.stats())
    }

    /// `conn`'s smoothed RTT, jitter, loss and RTT tail (as in
    /// [`Server::stats`]): use it to poll every connection often, it skips
    /// the rate meters' walks.
    #[must_use]
    pub fn estimate(&self, conn: ConnId) -> Option<LinkEstimate> {
        self.conns.get(&conn).map(|s| s.conn.estimate())
    }

    /// Bulk bytes `conn` has queued or in flight and not yet acknowledged:
    /// a sender streaming a large transfer in pieces hands over the next
    /// piece only when this is low, so it never holds the whole transfer
    /// per receiver.
    #[must_use]
    pub fn bulk_pending(&self, conn: ConnId) -> Option<usize> {
        self.conns.get(&conn).map(|s| s.conn.bulk_pending())
    }

    /// What `conn` holds in memory, by part (`inline` includes the
    /// server's slot around the boxed connection).
    #[must_use]
    pub fn conn_memory(&self, conn: ConnId) -> Option<super::ConnMemory> {
        self.conns.get(&conn).map(|s| {
            let mut m = s.conn.memory();
            m.inline += std::mem::size_of::<Slot>();
            m
        })
    }

    /// What all connections hold in memory, by part, summed: walks every
    /// connection, so read it for a metric or a report, not per datagram.
    #[must_use]
    pub fn memory(&self) -> super::ConnMemory {
        let mut total = super::ConnMemory::default();
        for id in self.conns.keys() {
            total += self.conn_memory(*id).unwrap_or_default();
        }
        total
    }

    /// Address of `conn`.
    #[must_use]
    pub fn addr(&self, conn: ConnId) -> Option<SocketAddr> {
        self.conns.get(&conn).map(|s| s.addr)
    }

    /// Open connections, in id order.
    pub fn connections(&self) -> impl Iterator<Item = ConnId> + '_ {
        self.conns.keys().copied()
    }

    /// Closes `conn` cleanly: the reliable messages already queued for it
    /// are delivered first (at most until the silence timeout if the client
    /// stops acking; it gets no new messages meanwhile), then redundant
    /// disconnect packets, then `Disconnected`. So a last message, such as
    /// a refusal with its reason, always precedes the close.
    pub fn disconnect(&mut self, conn: ConnId, now: Instant) {
        self.set_now(now);
        if let Some(slot) = self.conns.get_mut(&conn) {
            slot.conn.close_after_flush(DisconnectReason::Local, now);
        }
        self.pump(conn);
    }

    /// The next handshake this server denied (no connection existed): to
    /// whom and why, for the driver's logs. At most 1024 wait; a flood
    /// beyond that is only counted (see [`ServerCounters`]).
    #[must_use]
    pub fn poll_denied(&mut self) -> Option<(SocketAddr, DenyReason)> {
        self.denials.pop_front()
    }

    /// How many times `handle_timeout` and `poll_transmit` have looked at
    /// a connection since this server was made: for tests and benchmarks
    /// showing that a wake-up's cost follows the connections with work
    /// due, not the number of connections.
    #[must_use]
    pub fn connections_visited(&self) -> u64 {
        self.visits
    }

    /// Drops and refusals by reason.
    #[must_use]
    pub fn counters(&self) -> &ServerCounters {
        &self.counters
    }
}
