//! The relay's sans-IO core: routes turn-protocol messages between
//! connections and matches. It never owns a socket or reads a clock; a thin
//! driver binds it to the transport `Server`.
//!
//! The sender of every message is the connection it came on: the router maps
//! connections to player slots and stamps commands with that slot, never
//! with anything the payload claims.

use crate::config::RelayConfig;
use crate::event::{MatchId, RouterEvent};
use crate::matchroom::MatchRoom;
use lockstep::proto::{Delivery, MAX_REASON_LEN, ToPeer, ToRelay};
use lockstep::{Duration, Instant};
use sim::PlayerId;
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;

/// A transport connection, as numbered by the transport `Server`.
pub use lockstep::transport::ConnId;

/// Counters of everything the router did or refused.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RouterCounters {
    /// Messages received.
    pub messages: u64,
    /// Message bytes received.
    pub bytes_in: u64,
    /// Message bytes queued for sending.
    pub bytes_out: u64,
    /// Messages that did not decode.
    pub decode_errors: u64,
    /// Messages that made no sense in the connection's state.
    pub bad_state: u64,
    /// Connections refused (limit reached).
    pub connections_refused: u64,
    /// Joins refused.
    pub joins_refused: u64,
    /// Inputs accepted on time.
    pub inputs: u64,
    /// Inputs that arrived after their turn closed.
    pub inputs_late: u64,
    /// Inputs for a turn the player already sent.
    pub inputs_duplicate: u64,
    /// Inputs refused (too far ahead, past the end, dropped player, full turn).
    pub inputs_refused: u64,
    /// Turns closed.
    pub turns_closed: u64,
    /// Turns closed by the deadline with inputs missing.
    pub turns_closed_by_deadline: u64,
    /// Turns that passed their deadline waiting (strict policy).
    pub turns_waiting: u64,
    /// Hash reports accepted.
    pub hash_reports: u64,
    /// Hash reports refused (stale, duplicate, for an open turn).
    pub hashes_refused: u64,
    /// Turns whose hashes disagreed.
    pub desynced_turns: u64,
    /// Players dropped.
    pub drops: u64,
    /// Input delay changes announced.
    pub delay_changes: u64,
    /// Matches started.
    pub matches_started: u64,
    /// Matches ended.
    pub matches_ended: u64,
}

/// Messages and events produced while handling an input; shared with the match rooms.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    pub(crate) msgs: VecDeque<(ConnId, Delivery, Vec<u8>)>,
    pub(crate) events: VecDeque<RouterEvent>,
    pub(crate) counters: RouterCounters,
}

impl Outbox {
    pub(crate) fn send(&mut self, conn: ConnId, msg: &ToPeer) {
        self.push(conn, msg.delivery(), msg.to_bytes());
    }

    pub(crate) fn push(&mut self, conn: ConnId, delivery: Delivery, bytes: Vec<u8>) {
        self.counters.bytes_out += bytes.len() as u64;
        self.msgs.push_back((conn, delivery, bytes));
    }
}

/// Where a connection is.
#[derive(Debug)]
struct Conn {
    #[allow(dead_code)] // kept for logs and future per-address limits
    addr: SocketAddr,
    room: Option<(MatchId, Option<PlayerId>)>,
}

/// The relay's router; see the module docs.
#[derive(Debug)]
pub struct Router {
    config: RelayConfig,
    conns: BTreeMap<ConnId, Conn>,
    matches: BTreeMap<MatchId, MatchRoom>,
    /// Lobbies and running matches by name.
    names: BTreeMap<String, MatchId>,
    next_match: u64,
    out: Outbox,
}

impl Router {
    /// A router with no connections.
    #[must_use]
    pub fn new(config: RelayConfig) -> Self {
        Self {
            config,
            conns: BTreeMap::new(),
            matches: BTreeMap::new(),
            names: BTreeMap::new(),
            next_match: 1,
            out: Outbox::default(),
        }
    }

    /// The configuration.
    #[must_use]
    pub const fn config(&self) -> &RelayConfig {
        &self.config
    }

    /// Counters so far.
    #[must_use]
    pub const fn counters(&self) -> &RouterCounters {
        &self.out.counters
    }

    /// Matches in lobby or running.
    #[must_use]
    pub fn match_count(&self) -> usize {
        self.matches.len()
    }

    /// A connection was established; false if the router refuses it (limit).
    pub fn handle_connected(&mut self, _now: Instant, conn: ConnId, addr: SocketAddr) -> bool {
        if self.conns.len() >= self.config.limits.max_connections {
            self.out.counters.connections_refused += 1;
            return false;
        }
        self.conns.insert(conn, Conn { addr, room: None });
        true
    }

    /// A connection closed (timeout or clean disconnect): its player is dropped.
    pub fn handle_disconnected(&mut self, now: Instant, conn: ConnId) {
        let Some(c) = self.conns.remove(&conn) else {
            return;
        };
        match c.room {
            Some((id, Some(player))) => {
                if let Some(m) = self.matches.get_mut(&id) {
                    m.disconnected(now, player, &self.config, &mut self.out);
                }
                self.reap(id);
            }
            Some((id, None)) => {
                if let Some(m) = self.matches.get_mut(&id)
                    && m.leave_lobby(conn)
                {
                    self.names.remove(&m.name);
                    self.matches.remove(&id);
                }
            }
            None => {}
        }
    }

    /// Link figures the transport measured for a connection (used for the input delay).
    pub fn handle_link_stats(&mut self, conn: ConnId, rtt: Duration, jitter: Duration, _loss: f64) {
        if let Some(Conn {
            room: Some((id, Some(player))),
            ..
        }) = self.conns.get(&conn)
            && let Some(m) = self.matches.get_mut(id)
        {
            m.link_stats(*player, rtt, jitter);
        }
    }

    /// One message from a connection.
    pub fn handle_message(&mut self, now: Instant, conn: ConnId, bytes: &[u8]) {
        self.out.counters.messages += 1;
        self.out.counters.bytes_in += bytes.len() as u64;
        let Some(c) = self.conns.get(&conn) else {
            self.out.counters.bad_state += 1;
            return;
        };
        let Ok(msg) = ToRelay::decode(bytes) else {
            self.out.counters.decode_errors += 1;
            return;
        };
        match (c.room, msg) {
            (None, ToRelay::Join(join)) => self.join(now, conn, &join),
            (Some((id, Some(player))), msg) => {
                let leaving = msg == ToRelay::Leave;
                if let Some(m) = self.matches.get_mut(&id) {
                    m.handle(now, player, msg, &self.config, &mut self.out);
                }
                if leaving && let Some(c) = self.conns.get_mut(&conn) {
                    c.room = None;
                }
                self.reap(id);
            }
            (Some((id, None)), ToRelay::Leave) => {
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.room = None;
                }
                if let Some(m) = self.matches.get_mut(&id)
                    && m.leave_lobby(conn)
                {
                    self.names.remove(&m.name);
                    self.matches.remove(&id);
                }
            }
            _ => self.out.counters.bad_state += 1,
        }
    }

    /// Runs every match's timers (deadlines, pings, silence, match end).
    pub fn handle_timeout(&mut self, now: Instant) {
        let ids: Vec<MatchId> = self.matches.keys().copied().collect();
        for id in ids {
            if let Some(m) = self.matches.get_mut(&id) {
                m.tick(now, &self.config, &mut self.out);
            }
            self.reap(id);
        }
    }

    /// The next instant [`Router::handle_timeout`] has work to do.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.matches
            .values()
            .filter_map(|m| m.poll_timeout(&self.config))
            .min()
    }

    /// The next message to send: to which connection, on which channel.
    #[must_use]
    pub fn poll_outgoing(&mut self) -> Option<(ConnId, Delivery, Vec<u8>)> {
        self.out.msgs.pop_front()
    }

    /// The next event for logs and the replay recorder.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<RouterEvent> {
        self.out.events.pop_front()
    }

    fn reject(&mut self, conn: ConnId, reason: &str) {
        self.out.counters.joins_refused += 1;
        let mut reason = reason.to_owned();
        reason.truncate(MAX_REASON_LEN);
        self.out.send(conn, &ToPeer::Rejected { reason });
    }

    fn join(&mut self, now: Instant, conn: ConnId, join: &lockstep::proto::Join) {
        let id = if let Some(&id) = self.names.get(&join.match_name) {
            if let Some(why) = self.matches.get(&id).and_then(|m| m.refuse(join)) {
                self.reject(conn, why);
                return;
            }
            id
        } else {
            if self.matches.len() >= self.config.limits.max_matches {
                self.reject(conn, "relay is full");
                return;
            }
            let id = MatchId(self.next_match);
            self.next_match += 1;
            self.matches.insert(id, MatchRoom::new(id, join));
            self.names.insert(join.match_name.clone(), id);
            id
        };
        if let Some(c) = self.conns.get_mut(&conn) {
            c.room = Some((id, None));
        }
        let Some(m) = self.matches.get_mut(&id) else {
            return;
        };
        if let Some(assigned) = m.join(now, conn, join, &self.config, &mut self.out) {
            self.out.counters.matches_started += 1;
            for (c, p) in assigned {
                if let Some(conn) = self.conns.get_mut(&c) {
                    conn.room = Some((id, Some(p)));
                }
            }
        }
        self.reap(id);
    }

    /// Removes a match that ended and detaches its connections (they may join again).
    fn reap(&mut self, id: MatchId) {
        let Some(m) = self.matches.get(&id) else {
            return;
        };
        if !m.is_ended() {
            return;
        }
        self.out.counters.matches_ended += 1;
        self.names.remove(&m.name);
        self.matches.remove(&id);
        for c in self.conns.values_mut() {
            if c.room.is_some_and(|(m, _)| m == id) {
                c.room = None;
            }
        }
    }
}
