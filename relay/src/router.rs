//! The relay's sans-IO core: routes turn-protocol messages between
//! connections and matches. It never owns a socket or reads a clock; a thin
//! driver binds it to the transport `Server`.
//!
//! The sender of every message is the connection it came on: the router maps
//! connections to player slots and stamps commands with that slot, never
//! with anything the payload claims.

use crate::config::RelayConfig;
use crate::event::{MatchId, RouterEvent};
use crate::limits::{MemoryPressure, TokenBucket};
use crate::matchroom::MatchRoom;
use crate::outbox::Outbox;
use lockstep::low_level::proto::{Delivery, MAX_REASON_LEN, RejectReason, ToPeer, ToRelay};
use lockstep::token::{Refusal, TokenClaims, TokenKind};
use lockstep::{Duration, Instant};
use sim::PlayerId;
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;

pub use crate::outbox::RouterCounters;

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod instance_tests;
mod instances;
#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod reconnect_tests;
mod rooms;
#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod scripted_match;
mod seat_reclaim;
#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod snapshot_tests;
/// A transport connection, as numbered by the transport `Server`.
pub use lockstep::low_level::transport::ConnId;

/// A join the router refused: the peer got [`ToPeer::Rejected`] with the
/// same reason; the driver logs it and, for a token refusal, closes the
/// connection through `Server::refuse` (after that message is delivered).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinRefusal {
    /// The refused connection.
    pub conn: ConnId,
    /// Its address.
    pub addr: SocketAddr,
    /// The match the join named.
    pub match_name: String,
    /// Why.
    pub reason: RejectReason,
    /// Specifics sent along, if any.
    pub detail: Option<String>,
    /// The connection's join token does not admit this join: the transport
    /// counts it and closes the connection. `None`: the connection stays
    /// open (the peer may leave or join another match).
    pub token: Option<Refusal>,
}

/// Where a connection is.
#[derive(Debug)]
struct Conn {
    addr: SocketAddr,
    room: Option<(MatchId, Option<PlayerId>)>,
    bucket: TokenBucket,
    /// What the connection's join token grants (token mode); `None`: open.
    claims: Option<TokenClaims>,
    /// The match this connection watches, if it is a spectator.
    spectating: Option<MatchId>,
}

/// The relay's router; see the module docs.
#[derive(Debug)]
pub struct Router {
    config: RelayConfig,
    conns: BTreeMap<ConnId, Conn>,
    matches: rooms::Rooms,
    /// Reused buffer of the matches a timer pass ticks.
    due: Vec<MatchId>,
    /// Lobbies and running matches by name.
    names: BTreeMap<String, MatchId>,
    next_match: u64,
    /// How far apart this router's match ids are (see [`Router::with_match_ids`]).
    match_id_step: u64,
    /// Set by [`Router::begin_drain`]: new joins are refused.
    draining: bool,
    out: Outbox,
    /// Refused joins for the driver (logs; token ones go to `Server::refuse`).
    refusals: VecDeque<JoinRefusal>,
    /// Token mode: ended matches' instances, until their tokens expire.
    ended: instances::EndedMatches,
    /// The Unix second of `Instant` zero ([`Router::set_unix_time`]).
    unix_at_zero: u64,
}

impl Router {
    /// A router with no connections.
    #[must_use]
    pub fn new(config: RelayConfig) -> Self {
        Self {
            config,
            conns: BTreeMap::new(),
            matches: rooms::Rooms::default(),
            due: Vec::new(),
            names: BTreeMap::new(),
            next_match: 1,
            match_id_step: 1,
            draining: false,
            out: Outbox::default(),
            refusals: VecDeque::new(),
            ended: instances::EndedMatches::default(),
            unix_at_zero: 0,
        }
    }

    /// The same, numbering its matches `first`, `first + step`, ...: a
    /// relay running `step` routers (one per thread) gives router `i` the
    /// ids `i + 1`, `i + 1 + step`, ..., so match ids (in logs and replay
    /// file names) stay unique across the process.
    #[must_use]
    pub fn with_match_ids(mut self, first: u64, step: u64) -> Self {
        self.next_match = first;
        self.match_id_step = step.max(1);
        self
    }

    /// Numbers this router's next matches after `id` (a relay resuming
    /// matches from its recordings: their numbers are taken).
    pub fn skip_match_ids_through(&mut self, id: u64) {
        // Computed, not stepped: a recording names the number, and a large
        // one must neither loop for long nor overflow (ids past the range
        // saturate; `resume` refuses numbers past `MAX_RESUMABLE_MATCH_ID`).
        if self.next_match <= id {
            let steps = (id - self.next_match) / self.match_id_step + 1;
            self.next_match = steps
                .checked_mul(self.match_id_step)
                .and_then(|d| self.next_match.checked_add(d))
                .unwrap_or(u64::MAX);
        }
    }

    /// Rebuilds a match found unfinished in the record directory when the
    /// relay started (see [`crate::resume`]): every seat is held for its
    /// player's reconnect, and the match closes no turn until they are
    /// back or the rejoin config's `resume_wait` has passed.
    ///
    /// # Errors
    /// A match of that name or number is already here (two recordings of
    /// one match), or resumed matches already fill their share of the
    /// match limit ([`crate::limits::Limits::max_resumed`]): this one is
    /// not resumed.
    pub fn resume(&mut self, now: Instant, m: crate::resume::Unfinished) -> Result<(), String> {
        let resumed = self.matches.values().filter(|r| r.was_resumed()).count();
        let max = self.config.limits.max_resumed();
        if resumed >= max || self.matches.len() >= self.config.limits.max_matches {
            return Err(format!(
                "the relay resumes at most {max} matches (half its match limit)"
            ));
        }
        let name = m.match_name().to_owned();
        if self.names.contains_key(&name) || self.matches.get(&m.id).is_some() {
            return Err(format!(
                "match {name:?} (number {}) is resumed already",
                m.id.0
            ));
        }
        self.skip_match_ids_through(m.id.0);
        let room = MatchRoom::resumed(now, m.id, &m.info, m.state, &self.config, &mut self.out);
        self.matches.insert(m.id, room);
        self.names.insert(name, m.id);
        self.out.counters.matches_resumed += 1;
        self.matches.reschedule(&self.config);
        Ok(())
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

    /// Matches whose game is running (not lobbies).
    #[must_use]
    pub fn running_count(&self) -> usize {
        self.matches.values().filter(|m| m.is_running()).count()
    }

    /// Connections tracked.
    #[must_use]
    pub fn connection_count(&self) -> usize {
        self.conns.len()
    }

    /// Tells the router which parts of the relay's memory budget are at
    /// their share (`limits::MemoryBudget`): connections full, joins and
    /// spectators are refused with `MemoryFull`; recordings full, joins
    /// are; snapshots full, no snapshot upload is asked for. Running
    /// matches and rejoins of their players go on.
    pub fn set_memory(&mut self, pressure: MemoryPressure) {
        self.out.memory = pressure;
    }

    /// Which parts of the memory budget the router was last told are full.
    #[must_use]
    pub const fn memory(&self) -> MemoryPressure {
        self.out.memory
    }

    /// Counts a refusal the driver made at the memory budget (a new
    /// connection refused at its handshake).
    pub fn count_memory_refusal(&mut self) {
        self.out.counters.memory_refused += 1;
        self.out.counters.connections_refused += 1;
    }

    /// Whether [`Router::begin_drain`] was called.
    #[must_use]
    pub const fn is_draining(&self) -> bool {
        self.draining
    }

    /// Starts a graceful shutdown: every later join is refused and lobbies
    /// that have not started are closed (their members refused); running
    /// matches go on until they end or [`Router::end_all`] is called.
    pub fn begin_drain(&mut self) {
        self.draining = true;
        let lobbies: Vec<MatchId> = self
            .matches
            .iter()
            .filter(|(_, m)| !m.is_running())
            .map(|(id, _)| *id)
            .collect();
        for id in lobbies {
            self.shut_down(id);
        }
        self.matches.reschedule(&self.config);
    }

    /// Ends match `id` for a shutdown; a lobby's members are refused with
    /// `ShuttingDown` (by the room) and reported for the log here.
    fn shut_down(&mut self, id: MatchId) {
        let Some(m) = self.matches.get_mut(&id) else {
            return;
        };
        if !m.is_running() {
            let name = m.name.clone();
            for (&conn, c) in &self.conns {
                if c.room == Some((id, None)) {
                    self.refusals.push_back(JoinRefusal {
                        conn,
                        addr: c.addr,
                        match_name: name.clone(),
                        reason: RejectReason::ShuttingDown,
                        detail: None,
                        token: None,
                    });
                }
            }
        }
        m.shut_down(&self.config, &mut self.out);
        self.reap(id);
    }

    /// Ends every match now (grace period over): players get `MatchEnd`, and
    /// a `MatchEnded` event per running match lets the recorder finalise it.
    pub fn end_all(&mut self) {
        self.draining = true;
        let ids: Vec<MatchId> = self.matches.keys().copied().collect();
        for id in ids {
            self.shut_down(id);
        }
        self.matches.reschedule(&self.config);
    }

    /// A connection was established; false if the router refuses it (limit).
    pub fn handle_connected(&mut self, now: Instant, conn: ConnId, addr: SocketAddr) -> bool {
        self.handle_connected_with_claims(now, conn, addr, None)
    }

    /// A connection was established with a join token's `claims` (token
    /// mode; `None` is the same as [`Router::handle_connected`]). Its Join
    /// must then name the token's match, and it plays in the token's slot;
    /// otherwise the join is refused, counted (`token_wrong_match`,
    /// `token_wrong_slot`) and queued for [`Router::poll_refusal`] with its
    /// token refusal, so the driver closes the connection.
    /// False if the router refuses the connection (limit).
    pub fn handle_connected_with_claims(
        &mut self,
        now: Instant,
        conn: ConnId,
        addr: SocketAddr,
        claims: Option<TokenClaims>,
    ) -> bool {
        if self.conns.len() >= self.config.limits.max_connections {
            self.out.counters.connections_refused += 1;
            return false;
        }
        let bucket = TokenBucket::full(now, self.config.limits.message_burst);
        self.conns.insert(
            conn,
            Conn {
                addr,
                room: None,
                bucket,
                claims,
                spectating: None,
            },
        );
        true
    }

    /// Takes one message from `conn`'s rate budget, as a message handled
    /// here would, and returns what is left of the budget: for a driver that
    /// moves the connection to another router (another event loop), which
    /// gets that budget with it ([`Router::set_budget`]), so moving between
    /// loops never refills a connection's budget. `None` when the budget is
    /// spent (counted as `rate_limited`: the caller drops the message) or
    /// the connection is unknown.
    pub fn charge(&mut self, now: Instant, conn: ConnId) -> Option<TokenBucket> {
        let limits = &self.config.limits;
        let c = self.conns.get_mut(&conn)?;
        if c.bucket
            .take(now, limits.messages_per_sec, limits.message_burst)
        {
            Some(c.bucket)
        } else {
            self.out.counters.rate_limited += 1;
            None
        }
    }

    /// Gives `conn` the rate budget it had on the router it came from
    /// ([`Router::charge`]) instead of the full one a new connection gets.
    pub fn set_budget(&mut self, conn: ConnId, budget: TokenBucket) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.bucket = budget;
        }
    }

    /// A connection closed (timeout or clean disconnect): its player is dropped.
    pub fn handle_disconnected(&mut self, now: Instant, conn: ConnId) {
        self.disconnected(now, conn);
        self.matches.reschedule(&self.config);
    }

    fn disconnected(&mut self, now: Instant, conn: ConnId) {
        let Some(c) = self.conns.remove(&conn) else {
            return;
        };
        self.out.in_flight.remove(&conn);
        if let Some(id) = c.spectating
            && let Some(m) = self.matches.get_mut(&id)
        {
            m.spectator_gone(conn);
        }
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
        self.matches.reschedule(&self.config);
    }

    /// One message from a connection.
    pub fn handle_message(&mut self, now: Instant, conn: ConnId, bytes: &[u8]) {
        self.route(now, conn, bytes);
        self.matches.reschedule(&self.config);
    }

    /// [`Router::handle_message`] before the touched matches are rescheduled.
    fn route(&mut self, now: Instant, conn: ConnId, bytes: &[u8]) {
        self.out.counters.messages += 1;
        self.out.counters.bytes_in += bytes.len() as u64;
        let limits = &self.config.limits;
        let Some(c) = self.conns.get_mut(&conn) else {
            self.out.counters.bad_state += 1;
            return;
        };
        if !c
            .bucket
            .take(now, limits.messages_per_sec, limits.message_burst)
        {
            self.out.counters.rate_limited += 1;
            return;
        }
        let Ok(msg) = ToRelay::decode(bytes) else {
            self.out.counters.decode_errors += 1;
            return;
        };
        if let Some(id) = c.spectating {
            if msg == ToRelay::Leave {
                c.spectating = None;
                if let Some(m) = self.matches.get_mut(&id) {
                    m.spectator_gone(conn);
                }
            } else if let Some(m) = self.matches.get_mut(&id) {
                m.spectator_message(conn, msg, &self.config, &mut self.out);
            }
            return;
        }
        match (c.room, msg) {
            (None, ToRelay::Join(join)) => self.join(now, conn, &join),
            (None, ToRelay::Spectate(join)) => self.spectate(now, conn, &join, None),
            (None, ToRelay::Rewatch(r)) => self.spectate(now, conn, &r.join, Some(r.from)),
            (None, ToRelay::Rejoin(rejoin)) => self.rejoin(now, conn, &rejoin, None),
            (None, ToRelay::Reconnect(r)) => self.rejoin(now, conn, &r.rejoin, Some(r.from)),
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

    /// Runs the timers (deadlines, pings, silence, match end) of the
    /// matches that have one due; the others are not visited.
    pub fn handle_timeout(&mut self, now: Instant) {
        let mut due = std::mem::take(&mut self.due);
        self.matches.due(now, &mut due);
        for &id in &due {
            if let Some(m) = self.matches.get_mut(&id) {
                m.tick(now, &self.config, &mut self.out);
            }
            self.reap(id);
        }
        self.due = due;
        self.matches.reschedule(&self.config);
    }

    /// The next instant [`Router::handle_timeout`] has work to do.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        #[cfg(debug_assertions)]
        self.matches.check(&self.config);
        self.matches.first()
    }

    /// The next message to send: to which connection, on which channel.
    #[must_use]
    pub fn poll_outgoing(&mut self) -> Option<(ConnId, Delivery, Vec<u8>)> {
        self.out.msgs.pop_front()
    }

    /// The next change to a connection's bulk receive cap: the largest
    /// bulk message it may now send (0: none). Pass it on to
    /// `Server::set_bulk_receive` before the router's messages: the relay
    /// accepts bulk data (a snapshot upload) only from the player it asked,
    /// one chunk at a time.
    #[must_use]
    pub fn poll_bulk_grant(&mut self) -> Option<(ConnId, usize)> {
        self.out.bulk_grants.pop_front()
    }

    /// Connections with snapshot chunks still to send. The driver hands
    /// each one chunk at a time ([`Router::stream_snapshot`]) while its
    /// bulk path has room, so every receiver streams from the match's one
    /// copy instead of holding its own in the send queue.
    #[must_use]
    pub fn snapshot_receivers(&self) -> Vec<ConnId> {
        self.out
            .in_flight
            .iter()
            .filter(|(_, s)| s.streaming())
            .map(|(c, _)| *c)
            .collect()
    }

    /// Hands `conn`'s next snapshot chunk messages (bulk delivery) to
    /// `send` while it takes them (returns `true`) and chunks remain.
    pub fn stream_snapshot(&mut self, conn: ConnId, mut send: impl FnMut(&[u8]) -> bool) {
        let Some(stream) = self.out.in_flight.get_mut(&conn) else {
            return;
        };
        while let Some((msg, piece)) = stream.next_chunk() {
            if !send(&msg) {
                break;
            }
            stream.advance(piece);
            self.out.counters.bytes_out += msg.len() as u64;
        }
    }

    /// The next refused join, for the driver's log; one whose
    /// [`JoinRefusal::token`] is set goes to `Server::refuse` (which counts
    /// it and closes the connection after the `Rejected` message).
    #[must_use]
    pub fn poll_refusal(&mut self) -> Option<JoinRefusal> {
        self.refusals.pop_front()
    }

    /// The next event for logs and the replay recorder.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<RouterEvent> {
        self.out.events.pop_front()
    }

    /// Refuses `join`: the peer gets the typed reason, the driver a [`JoinRefusal`].
    fn reject(
        &mut self,
        conn: ConnId,
        join: &lockstep::low_level::proto::Join,
        reason: RejectReason,
        detail: Option<String>,
        token: Option<Refusal>,
    ) {
        self.out.counters.joins_refused += 1;
        let detail = detail.map(|mut d| {
            // Cut at a char boundary: the limit is in bytes.
            let mut end = d.len().min(MAX_REASON_LEN);
            while !d.is_char_boundary(end) {
                end -= 1;
            }
            d.truncate(end);
            d
        });
        self.out.send(
            conn,
            &ToPeer::Rejected {
                reason,
                detail: detail.clone(),
            },
        );
        let addr = self
            .conns
            .get(&conn)
            .map_or(SocketAddr::from(([0, 0, 0, 0], 0)), |c| c.addr);
        self.refusals.push_back(JoinRefusal {
            conn,
            addr,
            match_name: join.match_name.clone(),
            reason,
            detail,
            token,
        });
    }

    /// Refuses a join, rejoin or spectate its connection's token does not
    /// admit: counted by kind, with the detail of what the token grants.
    fn refuse_token(
        &mut self,
        conn: ConnId,
        join: &lockstep::low_level::proto::Join,
        refusal: Refusal,
    ) {
        let detail = match refusal {
            Refusal::WrongMatch => {
                self.out.counters.token_wrong_match += 1;
                let granted = self.conns.get(&conn).and_then(|c| c.claims.as_ref());
                granted.map(|c| format!("the token admits match {:?}", c.match_name))
            }
            Refusal::WrongKind => {
                self.out.counters.token_wrong_kind += 1;
                let granted = self.conns.get(&conn).and_then(|c| c.claims.as_ref());
                granted.map(|c| match c.kind {
                    TokenKind::Spectator => "a spectator token cannot play".to_owned(),
                    TokenKind::Player => {
                        "a player token cannot spectate; ask for a spectator token".to_owned()
                    }
                })
            }
            Refusal::WrongInstance => {
                self.out.counters.token_wrong_instance += 1;
                Some(
                    "the token is of another match of this name (an earlier one): ask for a new token"
                        .to_owned(),
                )
            }
            _ => {
                self.out.counters.token_wrong_slot += 1;
                let granted = self.conns.get(&conn).and_then(|c| c.claims.as_ref());
                granted.map(|c| format!("the token admits slot {}", c.slot))
            }
        };
        self.reject(conn, join, refusal.into(), detail, Some(refusal));
    }

    /// Refuses a new player (`player`) or spectator the relay takes none
    /// of right now: it is draining (`ShuttingDown`) or the part of its
    /// memory budget the newcomer would add to is full (`MemoryFull`,
    /// counted): connections for both, recordings too for a player (a
    /// join may start a match, which opens a recording). Whether it did.
    fn refused_at_the_door(
        &mut self,
        conn: ConnId,
        join: &lockstep::low_level::proto::Join,
        player: bool,
    ) -> bool {
        let memory = self.out.memory;
        let reason = if self.draining {
            RejectReason::ShuttingDown
        } else if memory.connections || (player && memory.recordings) {
            self.out.counters.memory_refused += 1;
            RejectReason::MemoryFull
        } else {
            return false;
        };
        self.reject(conn, join, reason, None, None);
        true
    }

    fn join(&mut self, now: Instant, conn: ConnId, join: &lockstep::low_level::proto::Join) {
        if self.refused_at_the_door(conn, join, true) {
            return;
        }
        let slot = self
            .conns
            .get(&conn)
            .and_then(|c| c.claims.as_ref())
            .map(|c| {
                (
                    c.match_name != join.match_name,
                    c.kind != TokenKind::Player,
                    c.slot,
                )
            });
        if let Some((wrong_match, wrong_kind, slot)) = slot {
            if wrong_match {
                self.refuse_token(conn, join, Refusal::WrongMatch);
                return;
            }
            if wrong_kind {
                self.refuse_token(conn, join, Refusal::WrongKind);
                return;
            }
            if slot >= join.slots {
                self.refuse_token(conn, join, Refusal::WrongSlot);
                return;
            }
        }
        let slot = slot.map(|(_, _, s)| s);
        let claims = self.conns.get(&conn).and_then(|c| c.claims.clone());
        let room = self.names.get(&join.match_name).copied();
        if let Some(c) = &claims
            && self.wrong_instance(now, c, room)
        {
            self.refuse_token(conn, join, Refusal::WrongInstance);
            return;
        }
        let id = if let Some(id) = room {
            if let Some((why, detail)) = self.matches.get(&id).and_then(|m| m.refuse(join)) {
                self.reject(conn, join, why, detail, None);
                return;
            }
            if let Some(s) = slot
                && !self.matches.get(&id).is_some_and(|m| m.slot_free(s))
            {
                self.refuse_token(conn, join, Refusal::WrongSlot);
                return;
            }
            id
        } else {
            if self.matches.len() >= self.config.limits.max_matches {
                let detail = format!("match limit {} reached", self.config.limits.max_matches);
                self.reject(conn, join, RejectReason::RelayFull, Some(detail), None);
                return;
            }
            let id = MatchId(self.next_match);
            self.next_match += self.match_id_step;
            self.matches.insert(id, MatchRoom::new(id, join));
            self.names.insert(join.match_name.clone(), id);
            self.out.events.push_back(RouterEvent::LobbyOpened {
                id,
                match_name: join.match_name.clone(),
                slots: join.slots,
                game_id: join.game_id.clone(),
            });
            id
        };
        // Bound before the room may start (the start records the binding).
        self.admit_token(id, claims.as_ref());
        if let Some(c) = self.conns.get_mut(&conn) {
            c.room = Some((id, None));
        }
        let Some(m) = self.matches.get_mut(&id) else {
            return;
        };
        if let Some(assigned) = m.join(now, conn, join, slot, &self.config, &mut self.out) {
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
        for conn in std::mem::take(&mut self.out.detached) {
            if let Some(c) = self.conns.get_mut(&conn) {
                c.room = None;
            }
        }
        let Some(m) = self.matches.get(&id) else {
            return;
        };
        if !m.is_ended() {
            return;
        }
        self.out.counters.matches_ended += 1;
        self.names.remove(&m.name);
        if let Some(m) = self.matches.remove(&id) {
            self.remember_ended(&m.name, m.token());
        }
        for c in self.conns.values_mut() {
            if c.room.is_some_and(|(m, _)| m == id) {
                c.room = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockstep::low_level::proto::ToPeer;
    use sim::Turn;
    use std::net::{Ipv4Addr, SocketAddr};

    fn join(name: &str) -> Vec<u8> {
        crate::test_support::join_bytes("m", name)
    }

    fn started_router() -> (Router, Instant, BTreeMap<ConnId, PlayerId>) {
        started_router_with(RelayConfig::default())
    }

    fn started_router_with(config: RelayConfig) -> (Router, Instant, BTreeMap<ConnId, PlayerId>) {
        let mut r = Router::new(config);
        let now = Instant::from_millis(10);
        for c in 0..2 {
            let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, 5000 + c as u16));
            assert!(r.handle_connected(now, ConnId(c), addr));
            r.handle_message(now, ConnId(c), &join(&format!("p{c}")));
        }
        let mut players = BTreeMap::new();
        while let Some((conn, _, bytes)) = r.poll_outgoing() {
            if let Ok(ToPeer::Start(s)) = ToPeer::decode(&bytes) {
                players.insert(conn, s.your_player);
            }
        }
        assert_eq!(players.len(), 2);
        (r, now, players)
    }

    #[test]
    fn commands_are_stamped_with_the_connections_slot() {
        let (mut r, now, players) = started_router();
        for c in 0..2u32 {
            let input = ToRelay::Input {
                turn: Turn(0),
                commands: vec![vec![c as u8 + 10]],
            };
            r.handle_message(now, ConnId(c), &input.to_bytes());
        }
        // The default `clock` policy closes turn 0 one turn after the start.
        r.handle_timeout(now + Duration::from_millis(100));
        let closed = std::iter::from_fn(|| r.poll_event())
            .find_map(|e| match e {
                RouterEvent::TurnClosed { turn, inputs, .. } => Some((turn, inputs)),
                _ => None,
            })
            .unwrap();
        assert_eq!(closed.0, Turn(0));
        let mut want: Vec<(PlayerId, Vec<u8>)> = (0..2u32)
            .map(|c| (players[&ConnId(c)], vec![c as u8 + 10]))
            .collect();
        want.sort();
        assert_eq!(closed.1, want);
    }

    /// Under the default `clock` policy the relay closes turns by its clock
    /// only and stamps each input into the turn it closes next, whatever the
    /// input's number (the peer's sequence), which `InputRefused` echoes.
    #[test]
    fn under_clock_inputs_land_in_the_next_turn_to_close_and_turns_close_by_the_clock() {
        let (mut r, now, players) = started_router();
        let ms = Duration::from_millis;
        let input = |seq: u32, chunks: usize| {
            ToRelay::Input {
                turn: Turn(seq),
                commands: vec![vec![seq as u8]; chunks],
            }
            .to_bytes()
        };
        type Closed = Vec<(Turn, Vec<(PlayerId, Vec<u8>)>)>;
        let closed = |r: &mut Router| -> Closed {
            std::iter::from_fn(|| r.poll_event())
                .filter_map(|e| match e {
                    RouterEvent::TurnClosed { turn, inputs, .. } => Some((turn, inputs)),
                    _ => None,
                })
                .collect()
        };
        r.handle_message(now, ConnId(0), &input(7, 1));
        r.handle_message(now + ms(50), ConnId(1), &input(0, 1));
        // Every input is in, yet turn 0 closes only at its time.
        r.handle_timeout(now + ms(99));
        assert!(closed(&mut r).is_empty());
        r.handle_timeout(now + ms(100));
        let mut want = vec![
            (players[&ConnId(0)], vec![7]),
            (players[&ConnId(1)], vec![0]),
        ];
        want.sort();
        assert_eq!(closed(&mut r), vec![(Turn(0), want)]);
        // An input at 150 ms goes into turn 1, closed at 200 ms.
        r.handle_message(now + ms(150), ConnId(0), &input(8, 1));
        r.handle_timeout(now + ms(200));
        assert_eq!(
            closed(&mut r),
            vec![(Turn(1), vec![(players[&ConnId(0)], vec![8])])]
        );
        // A player's budget per turn is two full inputs: the third is refused
        // by its sequence number.
        let _ = std::iter::from_fn(|| r.poll_outgoing()).count();
        for seq in 9..12 {
            r.handle_message(now + ms(210), ConnId(0), &input(seq, 16));
        }
        let refused: Vec<ToPeer> = std::iter::from_fn(|| r.poll_outgoing())
            .filter(|(c, _, _)| *c == ConnId(0))
            .filter_map(|(_, _, b)| ToPeer::decode(&b).ok())
            .filter(|m| matches!(m, ToPeer::InputRefused { .. }))
            .collect();
        assert_eq!(refused, vec![ToPeer::InputRefused { turn: Turn(11) }]);
    }

    /// Under `clock` the input's number only names it: a repeated or
    /// far-jumping number is stamped like any input and counted; an input
    /// after the match's last turn is refused and the sender is told.
    #[test]
    fn under_clock_odd_sequence_numbers_are_counted_and_every_refusal_is_announced() {
        let mut r = Router::new(RelayConfig::default());
        let now = Instant::from_millis(10);
        for c in 0..2u32 {
            let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, 5000 + c as u16));
            assert!(r.handle_connected(now, ConnId(c), addr));
            let mut j = crate::test_support::join("m", &format!("p{c}"));
            j.turns = 2;
            r.handle_message(now, ConnId(c), &ToRelay::Join(j).to_bytes());
        }
        let input = |seq: u32| {
            ToRelay::Input {
                turn: Turn(seq),
                commands: vec![vec![1]],
            }
            .to_bytes()
        };
        let ms = Duration::from_millis;
        r.handle_message(now, ConnId(0), &input(5));
        r.handle_message(now, ConnId(0), &input(5));
        r.handle_message(now, ConnId(0), &input(4));
        r.handle_message(now, ConnId(0), &input(5 + 129));
        let c = r.counters();
        assert_eq!((c.clock_seq_repeated, c.clock_seq_jumped), (2, 1), "{c:?}");
        assert_eq!(c.inputs, 4, "odd numbers are stamped all the same");
        // Turns 0 and 1 close; the match has no turn left for an input.
        r.handle_timeout(now + ms(100));
        r.handle_timeout(now + ms(200));
        while r.poll_outgoing().is_some() {}
        let before = r.counters().inputs_refused;
        r.handle_message(now + ms(210), ConnId(1), &input(0));
        assert_eq!(r.counters().inputs_refused, before + 1);
        let told: Vec<ToPeer> = std::iter::from_fn(|| r.poll_outgoing())
            .filter(|(c, _, _)| *c == ConnId(1))
            .filter_map(|(_, _, b)| ToPeer::decode(&b).ok())
            .filter(|m| matches!(m, ToPeer::InputRefused { .. }))
            .collect();
        assert_eq!(told, vec![ToPeer::InputRefused { turn: Turn(0) }]);
    }

    #[test]
    fn garbage_and_out_of_state_messages_are_counted_not_fatal() {
        // `deadline`: it refuses input for a turn far ahead (`clock` stamps
        // every input into the next turn, whatever its number).
        let (mut r, mut now, _) = started_router_with(RelayConfig {
            policy: crate::TurnPolicy::Deadline,
            ..RelayConfig::default()
        });
        let mut x = 12345u64;
        for _ in 0..2000 {
            // Spread over 2 s so the per-connection rate limit lets it all in.
            now += Duration::from_millis(1);
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 64) as usize;
            let bytes: Vec<u8> = (0..len).map(|i| (x >> (i % 8)) as u8).collect();
            r.handle_message(now, ConnId((x % 3) as u32), &bytes);
        }
        let c = r.counters().clone();
        assert!(c.decode_errors > 1000, "{c:?}");
        assert_eq!(r.match_count(), 1);
        // Each targeted action is counted by exactly its own counter: the
        // garbage above may have bumped these already, so compare deltas.
        now += Duration::from_secs(1);
        // A second join on a playing connection.
        r.handle_message(now, ConnId(0), &join("again"));
        let after_join = r.counters().clone();
        assert_eq!(after_join.bad_state, c.bad_state + 1, "{after_join:?}");
        assert_eq!(after_join.inputs_refused, c.inputs_refused);
        assert_eq!(after_join.joins_refused, c.joins_refused);
        // Input far in the future.
        r.handle_message(
            now,
            ConnId(1),
            &ToRelay::Input {
                turn: Turn(100_000),
                commands: vec![],
            }
            .to_bytes(),
        );
        let after_input = r.counters();
        assert_eq!(after_input.inputs_refused, c.inputs_refused + 1);
        assert_eq!(after_input.bad_state, after_join.bad_state);
        assert_eq!(r.match_count(), 1);
    }

    #[test]
    fn a_mismatched_join_is_rejected() {
        let (mut r, now, _) = started_router();
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, 6000));
        r.handle_connected(now, ConnId(9), addr);
        r.handle_message(now, ConnId(9), &join("late"));
        let rejected: Vec<ToPeer> = std::iter::from_fn(|| r.poll_outgoing())
            .filter(|(c, _, _)| *c == ConnId(9))
            .filter_map(|(_, _, b)| ToPeer::decode(&b).ok())
            .collect();
        assert_eq!(
            rejected,
            vec![ToPeer::Rejected {
                reason: RejectReason::MatchRunning,
                detail: None
            }]
        );
        assert_eq!(r.counters().joins_refused, 1);
        let logged = r.poll_refusal().unwrap();
        assert_eq!(
            (logged.conn, logged.addr, logged.reason, logged.token),
            (ConnId(9), addr, RejectReason::MatchRunning, None)
        );
        assert_eq!(logged.match_name, "m");
        assert_eq!(r.poll_refusal(), None);
    }

    /// At the memory budget a new lobby's player and a spectator are
    /// refused with `MemoryFull` (counted), while the running match keeps
    /// closing turns; below it again they are admitted.
    #[test]
    fn at_the_memory_budget_new_joins_and_spectators_are_refused_and_the_match_plays_on() {
        let (mut r, mut now, _) = started_router();
        let closed = |r: &Router| r.counters().turns_closed;
        r.set_memory(MemoryPressure::ALL);
        assert!(r.memory().any());
        let addr = |p| SocketAddr::from((Ipv4Addr::LOCALHOST, p));
        r.handle_connected(now, ConnId(20), addr(6020));
        r.handle_message(
            now,
            ConnId(20),
            &crate::test_support::join_bytes("other", "q"),
        );
        r.handle_connected(now, ConnId(21), addr(6021));
        let watch = ToRelay::Spectate(crate::test_support::join("m", "w")).to_bytes();
        r.handle_message(now, ConnId(21), &watch);
        let refused: Vec<(ConnId, ToPeer)> = std::iter::from_fn(|| r.poll_outgoing())
            .filter(|(c, _, _)| c.0 >= 20)
            .filter_map(|(c, _, b)| Some((c, ToPeer::decode(&b).ok()?)))
            .collect();
        let memory_full = ToPeer::Rejected {
            reason: RejectReason::MemoryFull,
            detail: None,
        };
        assert_eq!(
            refused,
            vec![(ConnId(20), memory_full.clone()), (ConnId(21), memory_full)]
        );
        assert_eq!(r.counters().memory_refused, 2);
        assert_eq!(r.match_count(), 1, "no lobby was made");
        // The running match goes on closing turns meanwhile.
        let before = closed(&r);
        for _ in 0..20 {
            now += r.config().turn_length;
            r.handle_timeout(now);
            while r.poll_outgoing().is_some() {}
        }
        assert!(closed(&r) > before, "turns kept closing");
        // Only recordings at their share: a join (a new match) is still
        // refused, a spectator (no recording of its own) is admitted.
        r.set_memory(MemoryPressure {
            recordings: true,
            ..MemoryPressure::default()
        });
        r.handle_connected(now, ConnId(23), addr(6023));
        r.handle_message(
            now,
            ConnId(23),
            &crate::test_support::join_bytes("other", "q"),
        );
        r.handle_connected(now, ConnId(24), addr(6024));
        r.handle_message(now, ConnId(24), &watch);
        let got: Vec<(ConnId, ToPeer)> = std::iter::from_fn(|| r.poll_outgoing())
            .filter(|(c, _, _)| c.0 >= 23)
            .filter_map(|(c, _, b)| Some((c, ToPeer::decode(&b).ok()?)))
            .collect();
        assert!(
            got.iter().any(|(c, m)| *c == ConnId(23)
                && matches!(
                    m,
                    ToPeer::Rejected {
                        reason: RejectReason::MemoryFull,
                        ..
                    }
                )),
            "{got:?}"
        );
        assert!(
            !got.iter()
                .any(|(c, m)| *c == ConnId(24) && matches!(m, ToPeer::Rejected { .. })),
            "{got:?}"
        );
        assert_eq!(r.counters().memory_refused, 3);
        // Only snapshots at their share, or below the budget again: the
        // same join is admitted.
        r.set_memory(MemoryPressure {
            snapshots: true,
            ..MemoryPressure::default()
        });
        r.handle_connected(now, ConnId(22), addr(6022));
        r.handle_message(
            now,
            ConnId(22),
            &crate::test_support::join_bytes("other", "q"),
        );
        assert_eq!(r.match_count(), 2);
    }
}
