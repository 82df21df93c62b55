//! One event loop's sans-IO core: its transport `Server`, `Router` and glue,
//! and which loop serves which client address. The driver
//! ([`super::event_loop`]) owns the socket, the clock and the mailboxes; the
//! tests below run several cores against each other on a virtual clock.
//!
//! Who may change a landing loop's forwarding: only the loop that serves
//! the address (it sends `Route`), or the landing loop itself when it moves
//! a connection away. A loop that hands a connection over stops speaking
//! for its address at once; the loop that takes it speaks from then on.
//! Each loop's mailbox is FIFO and a hand-over happens-after everything its
//! sender posted before it, so a landing loop always ends on the word of
//! the loop that serves the address last.

use super::handoff::{Forwarded, Handoff, home_of};
use crate::limits::AddrLimiter;
use crate::router::{ConnId, Router};
use crate::router_glue::{Placement, RouterGlue};
use lockstep::low_level::proto::ToRelay;
use lockstep::low_level::transport::Server;
use lockstep::{Duration, Instant};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;

/// Datagrams per second one source address may send (an honest peer sends
/// 30-60); more are dropped before the transport sees them.
const ADDR_PPS: u32 = 1000;
/// How often a loop looks for addresses it served for another landing loop
/// and no longer does.
const SWEEP_EVERY: Duration = Duration::from_millis(500);

/// What a loop's hand-overs came to, for `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct HandoffCounts {
    /// Connections moved to another loop.
    pub(crate) moved_out: u64,
    /// Datagrams forwarded to the loop serving their sender.
    pub(crate) forwarded: u64,
    /// Forwarded datagrams lost because the receiving mailbox was full.
    pub(crate) datagrams_dropped: u64,
    /// Connections lost in a hand-over: the receiving mailbox, or the
    /// receiving loop's connection table, was full.
    pub(crate) connections_dropped: u64,
}

/// One loop's cores and its share of the routing between loops.
pub(crate) struct LoopCore {
    index: usize,
    loops: usize,
    /// The placement key of [`home_of`].
    home_key: [u8; 32],
    pub(crate) server: Server,
    pub(crate) router: Router,
    pub(crate) glue: RouterGlue,
    pub(crate) per_addr: AddrLimiter,
    /// Addresses whose datagrams land on this loop's socket but whose
    /// connection another loop serves.
    forward: HashMap<SocketAddr, usize>,
    /// Addresses this loop serves whose datagrams land on another loop's
    /// socket, with that loop. Keyed by address, not connection: a client
    /// restarted on the same address gets a new connection here through the
    /// same forwarding.
    landing_of: HashMap<SocketAddr, usize>,
    /// Per landing loop, the routing updates owed to it (the latest per
    /// address), kept until its mailbox takes them.
    routes: Vec<BTreeMap<SocketAddr, Option<usize>>>,
    /// Per other loop, the datagrams to forward at the end of this wake-up.
    outgoing: Vec<Forwarded>,
    /// Connections to hand over at the end of this wake-up.
    conns_out: Vec<(usize, Handoff)>,
    next_sweep: Instant,
    pub(crate) counts: HandoffCounts,
}

impl LoopCore {
    /// Loop `index` of `loops`, placing matches with `home_key`.
    pub(crate) fn new(
        index: usize,
        loops: usize,
        home_key: [u8; 32],
        server: Server,
        router: Router,
        glue: RouterGlue,
    ) -> Self {
        Self {
            index,
            loops,
            home_key,
            server,
            router,
            glue,
            per_addr: AddrLimiter::new(ADDR_PPS, 2 * ADDR_PPS, 65_536),
            forward: HashMap::new(),
            landing_of: HashMap::new(),
            routes: (0..loops).map(|_| BTreeMap::new()).collect(),
            outgoing: (0..loops).map(|_| Forwarded::default()).collect(),
            conns_out: Vec::new(),
            next_sweep: Instant::ZERO,
            counts: HandoffCounts::default(),
        }
    }

    /// A datagram from this loop's socket. The address limit comes first:
    /// a flood is dropped where it lands, not forwarded.
    pub(crate) fn handle_datagram(&mut self, now: Instant, from: SocketAddr, d: &[u8]) {
        if !self.per_addr.allow(now, from) {
        } else if let Some(&to) = self.forward.get(&from) {
            self.counts.forwarded += 1;
            self.outgoing[to].push(from, d);
        } else {
            self.server.handle_datagram(now, from, d);
        }
    }

    /// Something another loop handed over.
    pub(crate) fn handle_handoff(&mut self, now: Instant, h: Handoff) {
        match h {
            // Already counted against their address's limit where they landed.
            Handoff::Datagrams { from, batch } => batch.each(|addr, d| {
                self.server.handle_datagram(now, addr, d);
                // A connection made here from forwarded datagrams (a client
                // restarted on an address whose connection lived here):
                // this loop serves it now, so it speaks for the address.
                if !self.landing_of.contains_key(&addr) && self.server.conn_at(addr).is_some() {
                    self.landing_of.insert(addr, from);
                    self.routes[from].insert(addr, Some(self.index));
                }
            }),
            Handoff::Conn {
                moved,
                landing,
                budget,
            } => {
                let addr = moved.addr();
                if landing == self.index {
                    self.forward.remove(&addr);
                }
                match self.server.attach(moved, now) {
                    Ok(conn) => {
                        if let Some(b) = budget {
                            self.glue.inherit_budget(conn, b);
                        }
                        if landing != self.index {
                            self.landing_of.insert(addr, landing);
                            self.routes[landing].insert(addr, Some(self.index));
                        }
                    }
                    // Over this loop's connection limit the connection is
                    // lost (its client times out and may connect again);
                    // its landing loop must not go on forwarding to anyone.
                    Err(_) => {
                        self.counts.connections_dropped += 1;
                        if landing != self.index {
                            self.landing_of.remove(&addr);
                            self.routes[landing].insert(addr, None);
                        }
                    }
                }
            }
            Handoff::Route { addr, to } => match to {
                Some(to) if to != self.index && to < self.loops => {
                    self.forward.insert(addr, to);
                }
                _ => {
                    self.forward.remove(&addr);
                }
            },
        }
    }

    /// Runs the cores once; a connection whose `Join` (or `Rejoin`,
    /// `Spectate`) names a match hosted by another loop moves there with
    /// it, charged to its rate budget first. Every [`SWEEP_EVERY`], tells
    /// landing loops about addresses this loop no longer serves.
    pub(crate) fn step(&mut self, now: Instant) {
        let Self {
            index,
            loops,
            home_key,
            server,
            router,
            glue,
            forward,
            landing_of,
            routes,
            conns_out,
            counts,
            ..
        } = self;
        let (index, loops) = (*index, *loops);
        let mut place = |server: &mut Server, router: &mut Router, conn: ConnId, bytes: Vec<u8>| {
            // Only a message that enters a match (told by the tag after the
            // version byte) can move a connection: every other message is
            // peeked at and passed on.
            if loops == 1
                || !bytes
                    .get(1)
                    .is_some_and(|t| ToRelay::ENTERING_TAGS.contains(t))
            {
                return Placement::Here(bytes);
            }
            let home = match ToRelay::decode(&bytes) {
                Ok(m) => match m.match_to_enter() {
                    Some(name) => home_of(name, loops, home_key),
                    None => return Placement::Here(bytes),
                },
                Err(_) => return Placement::Here(bytes),
            };
            if home == index {
                return Placement::Here(bytes);
            }
            // A move costs the connection a message of its budget, and the
            // budget goes with it: alternating joins between loops cannot
            // refill it.
            let Some(budget) = router.charge(now, conn) else {
                return Placement::Dropped;
            };
            let Some(moved) = server.detach(conn, Some(bytes)) else {
                return Placement::Moved;
            };
            let addr = moved.addr();
            let landing = landing_of.remove(&addr).unwrap_or(index);
            // The loop taking the connection speaks for its address now.
            routes[landing].remove(&addr);
            if landing == index {
                forward.insert(addr, home);
            }
            counts.moved_out += 1;
            conns_out.push((
                home,
                Handoff::Conn {
                    moved,
                    landing,
                    budget: Some(budget),
                },
            ));
            Placement::Moved
        };
        glue.step_with(now, router, server, &mut place);
        if now >= self.next_sweep {
            self.next_sweep = now + SWEEP_EVERY;
            self.sweep();
        }
    }

    /// Addresses served for another landing loop whose connection is gone
    /// (and no new one from the same address replaced it): that loop
    /// serves them itself again.
    fn sweep(&mut self) {
        let Self {
            server,
            landing_of,
            routes,
            ..
        } = self;
        landing_of.retain(|&addr, &mut landing| {
            let served = server.conn_at(addr).is_some();
            if !served {
                routes[landing].insert(addr, None);
            }
            served
        });
    }

    /// Moves every hand-over of this wake-up into `out`, as (loop, message):
    /// datagram batches, then connections, then routing updates. What a
    /// mailbox refuses goes back through [`LoopCore::handoff_refused`].
    pub(crate) fn drain_handoffs(&mut self, out: &mut Vec<(usize, Handoff)>) {
        for (to, f) in self.outgoing.iter_mut().enumerate() {
            if !f.items.is_empty() {
                out.push((
                    to,
                    Handoff::Datagrams {
                        from: self.index,
                        batch: std::mem::take(f),
                    },
                ));
            }
        }
        out.append(&mut self.conns_out);
        for (to, routes) in self.routes.iter_mut().enumerate() {
            for (addr, route) in std::mem::take(routes) {
                out.push((to, Handoff::Route { addr, to: route }));
            }
        }
    }

    /// Loop `to`'s mailbox had no room for `h`: forwarded datagrams are
    /// lost (as on a congested link), a connection is lost without leaving
    /// forwarding behind, and a routing update waits for the next wake-up.
    pub(crate) fn handoff_refused(&mut self, to: usize, h: Handoff) {
        match h {
            Handoff::Datagrams { batch, .. } => {
                self.counts.datagrams_dropped += batch.items.len() as u64;
            }
            Handoff::Conn { moved, landing, .. } => {
                self.counts.connections_dropped += 1;
                let addr = moved.addr();
                if landing == self.index {
                    self.forward.remove(&addr);
                } else {
                    // This loop served it last: it still speaks for it.
                    self.routes[landing].insert(addr, None);
                }
            }
            Handoff::Route { addr, to: route } => {
                // A newer update for the address, if any, wins.
                self.routes[to].entry(addr).or_insert(route);
            }
        }
    }

    /// Addresses this loop forwards, and to which loop (for tests).
    #[cfg(test)]
    pub(crate) const fn forwarding(&self) -> &HashMap<SocketAddr, usize> {
        &self.forward
    }
}

#[cfg(test)]
#[path = "loop_core_tests.rs"]
mod tests;
