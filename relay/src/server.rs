//! Binds the [`Router`] to a transport [`Server`]: connection events and
//! messages go into the router, its messages go out on the channel they need,
//! and each connection's link figures feed the input-delay choice. Sans-IO:
//! the driver owns the socket and the clock and calls [`RouterGlue::pump`].

use crate::limits::{ConnectionQuota, TokenBucket};
use crate::router::{ConnId, JoinRefusal, Router};
use lockstep::backlog::{Backlog, DropLog, SendDrop, refused};
use lockstep::peer_glue::channel;
use lockstep::proto::{RejectReason, ToPeer};
use lockstep::transport::{Channel, Server, ServerEvent};
use lockstep::{Duration, Instant};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
/// How often link figures are passed to the router.
const STATS_EVERY: Duration = Duration::from_millis(250);

/// Where a message arriving on a connection goes (see [`RouterGlue::step_with`]).
#[derive(Debug)]
pub enum Placement {
    /// To this router.
    Here(Vec<u8>),
    /// Nowhere here: the connection moved to another router with it.
    Moved,
    /// Nowhere: the message was refused (e.g. a move over the connection's
    /// rate budget, already counted); the connection stays here.
    Dropped,
}

impl Placement {
    /// The single-router placement: everything stays here.
    pub fn here(_: &mut Server, _: &mut Router, _: ConnId, bytes: Vec<u8>) -> Self {
        Self::Here(bytes)
    }
}

/// The glue state between one router and one transport server.
#[derive(Debug, Default)]
pub struct RouterGlue {
    /// Per connection, router messages waiting for room in its window.
    backlog: BTreeMap<ConnId, Backlog>,
    next_stats: Instant,
    drops: DropLog<(ConnId, SendDrop)>,
    /// Refused joins (and connections) since the last [`RouterGlue::take_refusals`].
    refused: Vec<JoinRefusal>,
    /// The connection limit shared with other loops' glue, if any.
    quota: Option<Arc<ConnectionQuota>>,
    /// Connections holding a unit of `quota`.
    held: BTreeSet<ConnId>,
    /// Rate budgets of connections moved in from another router, given to
    /// the router when their `Connected` comes (see [`RouterGlue::inherit_budget`]).
    budgets: BTreeMap<ConnId, TokenBucket>,
}

impl RouterGlue {
    /// Fresh glue.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The same, admitting a connection only when `quota` (shared with the
    /// glue of the relay's other event loops) has room: over it the
    /// connection is refused with `RelayFull`, as over the router's own limit.
    #[must_use]
    pub fn with_quota(mut self, quota: Arc<ConnectionQuota>) -> Self {
        self.quota = Some(quota);
        self
    }

    /// Takes a unit of the shared quota for `conn`; false (nothing taken)
    /// when the quota is full. Always true without a quota.
    fn take(&mut self, conn: ConnId) -> bool {
        match &self.quota {
            None => true,
            Some(q) if q.try_take() => {
                self.held.insert(conn);
                true
            }
            Some(_) => false,
        }
    }

    /// Gives back `conn`'s unit of the shared quota, if it holds one.
    fn release(&mut self, conn: ConnId) {
        if self.held.remove(&conn)
            && let Some(q) = &self.quota
        {
            q.give_back();
        }
    }

    /// `conn` (just attached to the transport server) moved in from another
    /// router with what was left of its rate budget there
    /// ([`Router::charge`]): the router gets that budget, not a full one, so
    /// a connection cannot refill its budget by moving between loops.
    pub fn inherit_budget(&mut self, conn: ConnId, budget: TokenBucket) {
        self.budgets.insert(conn, budget);
    }

    /// Messages dropped because the transport refused them or a backlog
    /// overflowed; each is also reported once by [`RouterGlue::poll_drop`].
    #[must_use]
    pub const fn dropped(&self) -> u64 {
        self.drops.total()
    }

    /// The next dropped message and its connection, for the driver's log
    /// (oldest unread reports are discarded past
    /// [`lockstep::backlog::MAX_DROP_REPORTS`]; all are counted).
    #[must_use]
    pub fn poll_drop(&mut self) -> Option<(ConnId, SendDrop)> {
        self.drops.poll()
    }

    /// Every join refused since the last call, for the driver's logs: the
    /// router's (token ones were handed to `Server::refuse`) and connections
    /// over the router's limit (`RelayFull`, closed after the message).
    pub fn take_refusals(&mut self) -> Vec<JoinRefusal> {
        std::mem::take(&mut self.refused)
    }

    /// One driver step, after the wake-up's datagrams went into `server`:
    /// runs the transport's timers, hands the router every message that
    /// arrived *before* running the router's timers (an input that came in
    /// just before its turn's deadline is on time, not late), then moves the
    /// router's output to the transport. Drivers call this once per wake-up.
    pub fn step(&mut self, now: Instant, router: &mut Router, server: &mut Server) {
        self.step_with(now, router, server, &mut Placement::here);
    }

    /// [`RouterGlue::step`] for a driver that runs several routers (one per
    /// thread): `place` sees every arriving message first and either hands
    /// it back for this router or takes the connection away (typically with
    /// [`Server::detach`], to the router that hosts the match it joins);
    /// this router then forgets the connection, as if it had closed. The
    /// hook also sees the router, to charge a move to the connection's rate
    /// budget ([`Router::charge`]) before making it.
    pub fn step_with(
        &mut self,
        now: Instant,
        router: &mut Router,
        server: &mut Server,
        place: &mut impl FnMut(&mut Server, &mut Router, ConnId, Vec<u8>) -> Placement,
    ) {
        server.handle_timeout(now);
        self.pump_with(now, router, server, place);
        router.handle_timeout(now);
        self.pump_with(now, router, server, place);
    }

    /// Moves everything pending in both directions.
    pub fn pump(&mut self, now: Instant, router: &mut Router, server: &mut Server) {
        self.pump_with(now, router, server, &mut Placement::here);
    }

    /// [`RouterGlue::pump`] with a placement hook (see [`RouterGlue::step_with`]).
    pub fn pump_with(
        &mut self,
        now: Instant,
        router: &mut Router,
        server: &mut Server,
        place: &mut impl FnMut(&mut Server, &mut Router, ConnId, Vec<u8>) -> Placement,
    ) {
        while let Some(ev) = server.poll_event() {
            match ev {
                ServerEvent::Connected { conn, addr } => {
                    let claims = server.claims(conn).cloned();
                    let budget = self.budgets.remove(&conn);
                    if self.take(conn)
                        && router.handle_connected_with_claims(now, conn, addr, claims)
                    {
                        if let Some(b) = budget {
                            router.set_budget(conn, b);
                        }
                    } else {
                        self.release(conn);
                        // Say why before closing: the close delivers it first.
                        let reason = RejectReason::RelayFull;
                        let detail = Some("connection limit reached".to_owned());
                        let msg = ToPeer::Rejected {
                            reason,
                            detail: detail.clone(),
                        };
                        let _ = server.send(conn, Channel::Reliable, &msg.to_bytes());
                        server.disconnect(conn, now);
                        self.refused.push(JoinRefusal {
                            conn,
                            addr,
                            match_name: String::new(),
                            reason,
                            detail,
                            token: None,
                        });
                    }
                }
                ServerEvent::Message { conn, bytes } => match place(server, router, conn, bytes) {
                    Placement::Here(bytes) => router.handle_message(now, conn, &bytes),
                    Placement::Dropped => {}
                    Placement::Moved => {
                        self.backlog.remove(&conn);
                        self.release(conn);
                        router.handle_disconnected(now, conn);
                    }
                },
                ServerEvent::Backpressure { .. } => {}
                ServerEvent::Disconnected { conn, .. } => {
                    self.backlog.remove(&conn);
                    self.release(conn);
                    router.handle_disconnected(now, conn);
                }
            }
        }
        if now >= self.next_stats {
            self.next_stats = now + STATS_EVERY;
            for conn in server.connections() {
                if let Some(link) = server.estimate(conn) {
                    router.handle_link_stats(conn, link.rtt, link.jitter, link.loss);
                }
            }
        }
        while let Some((conn, d, bytes)) = router.poll_outgoing() {
            let ch = channel(d);
            // Nothing waiting for this connection: straight to the
            // transport, without a backlog entry made and removed again
            // for each message (most messages go out at once).
            if !self.backlog.contains_key(&conn) {
                match server
                    .send(conn, ch, &bytes)
                    .map_err(|e| refused(ch, bytes.len(), e))
                {
                    Ok(()) => continue,
                    Err(None) => {}
                    Err(Some(drop)) => {
                        self.drops.record((conn, drop));
                        continue;
                    }
                }
            }
            let q = self.backlog.entry(conn).or_default();
            let drops = &mut self.drops;
            q.push(ch, bytes, |d| drops.record((conn, d)));
        }
        for (&conn, q) in &mut self.backlog {
            let drops = &mut self.drops;
            q.flush(
                |ch, bytes| server.send(conn, ch, bytes),
                |d| drops.record((conn, d)),
            );
        }
        self.backlog.retain(|_, q| !q.is_empty());
        // Refusals last, so the `Rejected` message is already in the
        // transport, which delivers it before the close.
        while let Some(r) = router.poll_refusal() {
            if let Some(refusal) = r.token {
                self.backlog.remove(&r.conn);
                server.refuse(r.conn, refusal, now);
            }
            self.refused.push(r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RelayConfig;
    use lockstep::backlog::DropCause;
    use lockstep::transport::{Client, SendError, TransportConfig};
    use std::net::SocketAddr;

    #[test]
    fn a_message_the_transport_refuses_is_reported_once() {
        let (srv, cli) = (
            SocketAddr::from(([127, 0, 0, 1], 7000)),
            SocketAddr::from(([127, 0, 0, 1], 7001)),
        );
        let cfg = TransportConfig::default();
        let mut server = Server::new(cfg, [1; 32]);
        let mut client = Client::new(Instant::ZERO, srv, cfg, 5);
        let mut router = Router::new(RelayConfig::default());
        let mut glue = RouterGlue::new();
        let mut now = Instant::ZERO;
        let mut buf = Vec::new();
        // Handshake by direct delivery until the router knows the connection.
        while router.connection_count() == 0 && now < Instant::from_millis(1000) {
            while let Some(_to) = client.poll_transmit(now, &mut buf) {
                server.handle_datagram(now, cli, &buf);
            }
            while let Some(_to) = server.poll_transmit(now, &mut buf) {
                client.handle_datagram(now, srv, &buf);
            }
            glue.pump(now, &mut router, &mut server);
            now += Duration::from_millis(10);
        }
        let conn = server.connections().next().expect("connected");
        let join = crate::test_support::join_bytes("m", "p");
        client.send(Channel::Reliable, &join).unwrap();
        while let Some(_to) = client.poll_transmit(now, &mut buf) {
            server.handle_datagram(now, cli, &buf);
        }
        // The relay closes the connection before the router's answer to the
        // join (its `Lobby` message) reaches the transport.
        server.disconnect(conn, now);
        glue.pump(now, &mut router, &mut server);
        let drops: Vec<_> = std::iter::from_fn(|| glue.poll_drop()).collect();
        assert_eq!(drops.len(), 1, "{drops:?}");
        let (to, drop) = drops[0];
        assert_eq!((to, drop.channel), (conn, Channel::Reliable));
        assert_eq!(drop.cause, DropCause::Refused(SendError::NotConnected));
        assert_eq!(glue.dropped(), 1);
        glue.pump(now + Duration::from_millis(10), &mut router, &mut server);
        assert_eq!(glue.poll_drop(), None, "reported once");
        assert_eq!(glue.dropped(), 1);
    }

    /// Two loops' glue sharing a quota of 2: whichever loop connections
    /// reach, the third is refused with `RelayFull` (each loop alone was
    /// under its limit), and a closed connection frees its unit for another.
    #[test]
    fn loops_sharing_a_quota_admit_at_most_its_connections_in_all() {
        let srv = SocketAddr::from(([127, 0, 0, 1], 7000));
        let cfg = TransportConfig::default();
        let quota = Arc::new(ConnectionQuota::new(2));
        let mut loops: Vec<(Server, Router, RouterGlue)> = (0..2u8)
            .map(|i| {
                (
                    Server::new(cfg, [i; 32]),
                    Router::new(RelayConfig::default()),
                    RouterGlue::new().with_quota(Arc::clone(&quota)),
                )
            })
            .collect();
        let mut now = Instant::ZERO;
        // Connects a client from port `port` to a loop; what the relay said.
        let connect = |lp: &mut (Server, Router, RouterGlue), port: u16, now: &mut Instant| {
            let cli = SocketAddr::from(([127, 0, 0, 1], port));
            let mut client = Client::new(*now, srv, cfg, u64::from(port));
            let (server, router, glue) = lp;
            let (mut said, mut buf) = (Vec::new(), Vec::new());
            for _ in 0..20 {
                while client.poll_transmit(*now, &mut buf).is_some() {
                    server.handle_datagram(*now, cli, &buf);
                }
                glue.pump(*now, router, server);
                while server.poll_transmit(*now, &mut buf).is_some() {
                    client.handle_datagram(*now, srv, &buf);
                }
                while let Some(ev) = client.poll_event() {
                    if let lockstep::transport::ClientEvent::Message(bytes) = ev
                        && let Ok(m) = ToPeer::decode(&bytes)
                    {
                        said.push(m);
                    }
                }
                *now += Duration::from_millis(10);
            }
            (client, said)
        };
        let full = |said: &[ToPeer]| {
            said.iter().any(|m| {
                matches!(
                    m,
                    ToPeer::Rejected {
                        reason: RejectReason::RelayFull,
                        ..
                    }
                )
            })
        };
        let (mut a, said) = connect(&mut loops[0], 9001, &mut now);
        assert!(!full(&said));
        let (_b, said) = connect(&mut loops[1], 9002, &mut now);
        assert!(!full(&said));
        assert_eq!(quota.used(), 2);
        let (_c, said) = connect(&mut loops[1], 9003, &mut now);
        assert!(full(&said), "the third connection is refused: {said:?}");
        assert_eq!(quota.used(), 2);
        assert_eq!(
            loops[1].1.connection_count(),
            1,
            "loop 1 kept only its first"
        );
        // The first connection closes: its unit is free for the next one.
        let (server, router, glue) = &mut loops[0];
        let conn = server.connections().next().expect("loop 0's connection");
        server.disconnect(conn, now);
        let mut buf = Vec::new();
        for _ in 0..20 {
            now += Duration::from_millis(10);
            while server.poll_transmit(now, &mut buf).is_some() {
                a.handle_datagram(now, srv, &buf);
            }
            while a.poll_transmit(now, &mut buf).is_some() {
                server.handle_datagram(now, SocketAddr::from(([127, 0, 0, 1], 9001)), &buf);
            }
            server.handle_timeout(now);
            glue.pump(now, router, server);
        }
        assert_eq!(router.connection_count(), 0);
        assert_eq!(quota.used(), 1);
        let (_d, said) = connect(&mut loops[1], 9004, &mut now);
        assert!(!full(&said), "{said:?}");
        assert_eq!(quota.used(), 2);
    }
}
