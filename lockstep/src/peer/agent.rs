//! A peer paired with a player that is not a human: a bot (or a test
//! script) that thinks after every turn, from the world the turn left.

use super::{Peer, PeerEvent};
use crate::netsim::Endpoint;
use crate::time::{Duration, Instant};
use sim::{PlayerId, Simulation};
use std::collections::VecDeque;
use std::net::SocketAddr;

pub use sim::Agent;

/// Builds the agent once the match started and this peer's slot is known.
pub type MakeAgent<A> = Box<dyn FnMut(PlayerId) -> A + Send>;

/// A [`Peer`] played by an [`Agent`]: polls every event, lets the agent
/// think after every turn and submits what it returns. Use it for headless
/// peers (the `peer` binary, `relay demo`) and, as a
/// [`netsim::Endpoint`](crate::netsim::Endpoint), for tests under loss.
pub struct Autopilot<S: Simulation, A> {
    peer: Peer<S>,
    make: MakeAgent<A>,
    agent: Option<A>,
    log: Option<Vec<PeerEvent<S::Command>>>,
    /// Reaction time: orders are submitted up to this long after the turn
    /// they answer, at a seeded random instant (`None`: at once).
    reaction: Option<(Duration, u64)>,
    /// Orders waiting for their reaction time, with their submit instant.
    held: VecDeque<(Instant, Vec<S::Command>)>,
}

impl<S: Simulation, A> std::fmt::Debug for Autopilot<S, A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Autopilot")
            .field("player", &self.peer.player())
            .field("started", &self.agent.is_some())
            .finish_non_exhaustive()
    }
}

impl<S: Simulation, A: Agent<S>> Autopilot<S, A> {
    /// Plays `peer` with the agent `make` builds at the start.
    #[must_use]
    pub fn new(peer: Peer<S>, make: impl FnMut(PlayerId) -> A + Send + 'static) -> Self {
        Self {
            peer,
            make: Box::new(make),
            agent: None,
            log: None,
            reaction: None,
            held: VecDeque::new(),
        }
    }

    /// Submits each turn's orders at a seeded random instant up to `max`
    /// after the turn, as a human's clicks fall anywhere in a turn, instead
    /// of at once. A bot that answers every turn at once is in phase with
    /// the turn clock, which makes its command latency a whole number of
    /// turns; latency measurements use this to see what players see.
    #[must_use]
    pub fn with_reaction(mut self, max: Duration, seed: u64) -> Self {
        self.reaction = Some((max, seed | 1));
        self
    }

    /// Submits the held orders whose instant has come.
    fn submit_due(&mut self, now: Instant) {
        while self.held.front().is_some_and(|(at, _)| *at <= now) {
            if let Some((_, orders)) = self.held.pop_front() {
                // A full queue only delays the agent; nothing to do about it here.
                let _ = self.peer.submit(now, &orders);
            }
        }
    }

    /// Keeps every event polled, for [`take_log`](Self::take_log) (tests, logs).
    #[must_use]
    pub fn with_log(mut self) -> Self {
        self.log = Some(Vec::new());
        self
    }

    /// The peer.
    #[must_use]
    pub const fn peer(&self) -> &Peer<S> {
        &self.peer
    }

    /// The peer, to feed it (datagrams, time) or to leave.
    pub const fn peer_mut(&mut self) -> &mut Peer<S> {
        &mut self.peer
    }

    /// The events polled since the last call (empty without [`with_log`](Self::with_log)).
    pub fn take_log(&mut self) -> Vec<PeerEvent<S::Command>> {
        self.log.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Polls every pending event at `now`: the agent is built at the start
    /// and thinks after every turn; what it returns is submitted.
    pub fn step(&mut self, now: Instant) {
        while let Some(ev) = self.peer.poll_event() {
            match &ev {
                PeerEvent::Started { player, .. } => self.agent = Some((self.make)(*player)),
                // A rejoining peer's orders would come too late to matter.
                PeerEvent::TurnReady { turn, .. } if !self.peer.is_catching_up() => {
                    if let (Some(agent), Some(world)) = (self.agent.as_mut(), self.peer.world()) {
                        let orders = agent.think(world, *turn);
                        if orders.is_empty() {
                        } else if let Some((max, rng)) = &mut self.reaction {
                            // xorshift64: a seeded, platform-independent draw.
                            *rng ^= *rng << 13;
                            *rng ^= *rng >> 7;
                            *rng ^= *rng << 17;
                            let wait = Duration::from_micros(*rng % max.as_micros().max(1));
                            // Kept in submit order: a later turn's orders
                            // never overtake an earlier turn's.
                            let at = self
                                .held
                                .back()
                                .map_or(now + wait, |(t, _)| (*t).max(now + wait));
                            self.held.push_back((at, orders));
                        } else {
                            // A full queue only delays the agent; nothing to do about it here.
                            let _ = self.peer.submit(now, &orders);
                        }
                    }
                }
                _ => {}
            }
            if let Some(log) = self.log.as_mut() {
                log.push(ev);
            }
        }
        self.submit_due(now);
    }
}

impl<S: Simulation, A: Agent<S>> Endpoint for Autopilot<S, A> {
    fn addr(&self) -> SocketAddr {
        Endpoint::addr(&self.peer)
    }
    fn pump(&mut self, now: Instant) {
        self.peer.flush(now);
        self.step(now);
    }
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]) {
        self.peer.handle_datagram(now, from, bytes);
    }
    fn handle_timeout(&mut self, now: Instant) {
        self.peer.handle_timeout(now);
        self.submit_due(now);
    }
    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<SocketAddr> {
        self.peer.poll_transmit(now, buf)
    }
    fn poll_timeout(&mut self) -> Option<Instant> {
        let held = self.held.front().map(|(at, _)| *at);
        [self.peer.poll_timeout(), held].into_iter().flatten().min()
    }
    fn is_done(&self) -> bool {
        self.peer.is_done()
    }
}
