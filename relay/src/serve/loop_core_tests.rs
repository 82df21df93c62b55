//! Several loop cores against each other on a virtual clock, with real
//! transport clients whose datagrams land on the loop a test chooses (the
//! kernel's choice, with real sockets).

#![allow(clippy::unwrap_used)] // tests may unwrap

use super::*;
use crate::RelayConfig;
use crate::test_support::join_bytes;
use lockstep::low_level::proto::ToPeer;
use lockstep::low_level::transport::{Channel, Client, ClientEvent, TransportConfig};
use std::collections::VecDeque;

const KEY: [u8; 32] = [9; 32];

fn relay_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 7000))
}

/// The first name `m0`, `m1`, ... whose match lives on loop `home` of 2.
fn name_on(home: usize) -> String {
    (0..)
        .map(|i| format!("m{i}"))
        .find(|n| home_of(n, 2, &KEY) == home)
        .unwrap()
}

/// A client at `addr` whose datagrams land on loop `landing`.
struct Peer {
    client: Client,
    addr: SocketAddr,
    landing: usize,
    said: Vec<ToPeer>,
}

impl Peer {
    fn lobbies(&self) -> usize {
        self.said
            .iter()
            .filter(|m| matches!(m, ToPeer::Lobby { .. }))
            .count()
    }
}

struct Cluster {
    cfg: TransportConfig,
    cores: Vec<LoopCore>,
    /// Each loop's mailbox, with room for `room` messages.
    mail: Vec<VecDeque<Handoff>>,
    room: usize,
    /// A loop that does not read its mailbox for now (it is busy).
    held: Option<usize>,
    now: Instant,
}

impl Cluster {
    fn new(cfg: TransportConfig) -> Self {
        let cores = (0..2)
            .map(|i| {
                let router = Router::new(RelayConfig::default()).with_match_ids(i as u64 + 1, 2);
                LoopCore::new(
                    i,
                    2,
                    KEY,
                    Server::new(cfg, [3; 32]),
                    router,
                    RouterGlue::new(),
                )
            })
            .collect();
        Self {
            cfg,
            cores,
            mail: vec![VecDeque::new(), VecDeque::new()],
            room: usize::MAX,
            held: None,
            now: Instant::from_millis(1),
        }
    }

    fn peer(&self, port: u16, landing: usize) -> Peer {
        Peer {
            client: Client::new(self.now, relay_addr(), self.cfg, u64::from(port)),
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            landing,
            said: Vec::new(),
        }
    }

    /// One wake-up of every loop (mail, then its socket's datagrams, then
    /// the cores, then its hand-overs posted), with everything the peers
    /// sent and everything sent back to them delivered; then `dt` passes.
    fn round(&mut self, peers: &mut [&mut Peer], dt: Duration) {
        let now = self.now;
        let mut buf = Vec::new();
        let mut landed: Vec<Vec<(SocketAddr, Vec<u8>)>> = vec![Vec::new(); self.cores.len()];
        for p in peers.iter_mut() {
            while p.client.poll_transmit(now, &mut buf).is_some() {
                landed[p.landing].push((p.addr, buf.clone()));
            }
        }
        for (i, landed) in landed.iter().enumerate() {
            while self.held != Some(i)
                && let Some(h) = self.mail[i].pop_front()
            {
                self.cores[i].handle_handoff(now, h);
            }
            for (from, d) in landed {
                self.cores[i].handle_datagram(now, *from, d);
            }
            self.cores[i].step(now);
            let mut out = Vec::new();
            self.cores[i].drain_handoffs(&mut out);
            for (to, h) in out {
                if self.mail[to].len() < self.room {
                    self.mail[to].push_back(h);
                } else {
                    self.cores[i].handoff_refused(to, h);
                }
            }
            while let Some(to) = self.cores[i].server.poll_transmit(now, &mut buf) {
                if let Some(p) = peers.iter_mut().find(|p| p.addr == to) {
                    p.client.handle_datagram(now, relay_addr(), &buf);
                }
            }
        }
        for p in peers.iter_mut() {
            while let Some(ev) = p.client.poll_event() {
                if let ClientEvent::Message(m) = ev
                    && let Ok(msg) = ToPeer::decode(&m)
                {
                    p.said.push(msg);
                }
            }
        }
        self.now += dt;
    }

    /// Rounds of 10 ms until `done` holds (at most 5 s of virtual time).
    fn until(&mut self, peers: &mut [&mut Peer], done: impl Fn(&[&mut Peer]) -> bool) -> bool {
        for _ in 0..500 {
            if done(peers) {
                return true;
            }
            self.round(peers, Duration::from_millis(10));
        }
        done(peers)
    }

    /// Rounds of 10 ms for `d` of virtual time (sweeps run meanwhile).
    fn run_for(&mut self, peers: &mut [&mut Peer], d: Duration) {
        let end = self.now + d;
        while self.now < end {
            self.round(peers, Duration::from_millis(10));
        }
    }

    fn rate_limited(&self) -> u64 {
        self.cores
            .iter()
            .map(|c| c.router.counters().rate_limited)
            .sum()
    }
}

/// Connects `p` and has it join `name`; true once the relay answered with
/// the lobby.
fn join(c: &mut Cluster, p: &mut Peer, name: &str) -> bool {
    if !c.until(&mut [&mut *p], |ps| ps[0].client.is_connected()) {
        return false;
    }
    let before = p.lobbies();
    p.client
        .send(Channel::Reliable, &join_bytes(name, "p"))
        .unwrap();
    c.until(&mut [&mut *p], |ps| ps[0].lobbies() > before)
}

/// A client restarted on the same address and port while its connection
/// lives on another loop than the one its datagrams land on: its new
/// handshake is forwarded to that loop, which serves the new connection,
/// and the sweep that sees the old connection gone must not stop the
/// forwarding (it did: the new connection was starved and dropped).
#[test]
fn a_client_restarted_on_its_address_is_still_forwarded_after_the_sweep() {
    let mut c = Cluster::new(TransportConfig::default());
    let mut old = c.peer(9001, 0);
    assert!(join(&mut c, &mut old, &name_on(1)));
    assert_eq!(
        c.cores[1].server.connections().count(),
        1,
        "moved to loop 1"
    );
    drop(old);
    let mut new = c.peer(9001, 0);
    assert!(c.until(&mut [&mut new], |ps| ps[0].client.is_connected()));
    assert_eq!(
        c.cores[1].server.connections().count(),
        1,
        "served on loop 1"
    );
    // Past several sweeps: the old connection is gone, the new one is not.
    c.run_for(&mut [&mut new], Duration::from_secs(2));
    assert_eq!(c.cores[0].forwarding().get(&new.addr), Some(&1));
    assert!(join(&mut c, &mut new, &name_on(1)), "{:?}", new.said);
    assert!(new.client.is_connected());
}

/// The restarted client's new connection (made on loop 1 through loop 0's
/// forwarding) joins a match on loop 0, its landing loop: it moves there
/// and no loop keeps forwarding state for its address.
#[test]
fn a_rehandshake_then_a_move_home_leaves_no_forwarding_behind() {
    let mut c = Cluster::new(TransportConfig::default());
    let mut old = c.peer(9001, 0);
    assert!(join(&mut c, &mut old, &name_on(1)));
    drop(old);
    let mut new = c.peer(9001, 0);
    assert!(join(&mut c, &mut new, &name_on(0)), "{:?}", new.said);
    assert_eq!(c.cores[0].server.connections().count(), 1);
    assert_eq!(c.cores[1].server.connections().count(), 0);
    c.run_for(&mut [&mut new], Duration::from_secs(2));
    assert!(c.cores[0].forwarding().is_empty());
    assert!(
        c.cores[1].forwarding().is_empty(),
        "loop 1 is no landing loop"
    );
    assert!(new.client.is_connected());
}

/// The race of a restart with the sweep: loop 1 has told loop 0 to stop
/// forwarding a closed connection's address, but loop 0 has not read it
/// yet when the restarted client's handshake lands there, is forwarded,
/// and makes a new connection on loop 1. Loop 1 serves that address again,
/// so it says so after its stop: loop 0 ends up forwarding, and the new
/// connection is served.
#[test]
fn a_restart_racing_the_sweep_ends_with_the_address_forwarded() {
    let mut c = Cluster::new(TransportConfig::default());
    let mut old = c.peer(9001, 0);
    assert!(join(&mut c, &mut old, &name_on(1)));
    drop(old);
    c.held = Some(0);
    for _ in 0..10 {
        if c.cores[1].server.connections().count() == 0 {
            break;
        }
        c.run_for(&mut [], Duration::from_secs(1));
    }
    assert_eq!(c.cores[1].server.connections().count(), 0, "timed out");
    c.run_for(&mut [], Duration::from_secs(1));
    assert!(!c.mail[0].is_empty(), "the stop waits in loop 0's mailbox");
    let mut new = c.peer(9001, 0);
    assert!(c.until(&mut [&mut new], |ps| ps[0].client.is_connected()));
    assert_eq!(c.cores[1].server.connections().count(), 1);
    c.held = None;
    c.run_for(&mut [&mut new], Duration::from_secs(1));
    assert_eq!(c.cores[0].forwarding().get(&new.addr), Some(&1));
    assert!(join(&mut c, &mut new, &name_on(1)), "{:?}", new.said);
}

/// Loop 1 is full when a connection moves there: the hand-over is refused,
/// counted, and the landing loop stops forwarding the address, so the
/// client's next connection is served where it lands (before, it was
/// forwarded to the full loop for ever and refused there).
#[test]
fn a_refused_hand_over_leaves_no_forwarding_behind() {
    let cfg = TransportConfig {
        max_connections: 1,
        ..TransportConfig::default()
    };
    let mut c = Cluster::new(cfg);
    let mut filler = c.peer(9002, 1);
    assert!(c.until(&mut [&mut filler], |ps| ps[0].client.is_connected()));
    let mut old = c.peer(9001, 0);
    assert!(
        !join(&mut c, &mut old, &name_on(1)),
        "lost in the hand-over"
    );
    assert_eq!(c.cores[1].counts.connections_dropped, 1);
    assert!(c.cores[0].forwarding().is_empty());
    drop(old);
    let mut again = c.peer(9001, 0);
    assert!(join(&mut c, &mut again, &name_on(0)), "{:?}", again.said);
    assert_eq!(c.cores[0].server.connections().count(), 1);
}

/// A full mailbox: the connection handed over is lost and counted where
/// it was posted, and no forwarding is left behind.
#[test]
fn a_hand_over_a_full_mailbox_refuses_is_counted_and_leaves_no_forwarding() {
    let mut c = Cluster::new(TransportConfig::default());
    c.room = 0;
    let mut old = c.peer(9001, 0);
    assert!(!join(&mut c, &mut old, &name_on(1)));
    assert_eq!(c.cores[0].counts.connections_dropped, 1);
    assert!(c.cores[0].forwarding().is_empty());
    drop(old);
    c.room = usize::MAX;
    let mut again = c.peer(9001, 0);
    assert!(join(&mut c, &mut again, &name_on(1)), "{:?}", again.said);
}

/// Forwarded datagrams a full mailbox refuses are dropped and counted.
#[test]
fn forwarded_datagrams_a_full_mailbox_refuses_are_counted() {
    let mut c = Cluster::new(TransportConfig::default());
    let mut p = c.peer(9001, 0);
    assert!(join(&mut c, &mut p, &name_on(1)));
    c.room = 0;
    p.client.send(Channel::Reliable, b"x").unwrap();
    c.round(&mut [&mut p], Duration::from_millis(10));
    assert!(c.cores[0].counts.datagrams_dropped > 0);
    assert_eq!(
        c.cores[0].counts.datagrams_dropped,
        c.cores[0].counts.forwarded
    );
}

/// 3,000 `Join`s in 1.8 s, alternating between a match on each loop, so the
/// connection moves at every one: the rate budget (burst 600, 300/s)
/// follows it, so at most 600 + 540 of them get through (before, a move
/// gave it a full budget each time and none was limited).
#[test]
fn alternating_joins_between_loops_spend_one_rate_budget() {
    let mut c = Cluster::new(TransportConfig::default());
    let mut p = c.peer(9001, 0);
    assert!(c.until(&mut [&mut p], |ps| ps[0].client.is_connected()));
    let names = [name_on(1), name_on(0)];
    let mut sent = 0u64;
    for i in 0..3000 {
        if p.client
            .send(Channel::Reliable, &join_bytes(&names[i % 2], "p"))
            .is_ok()
        {
            sent += 1;
        }
        c.round(&mut [&mut p], Duration::from_micros(300));
        c.round(&mut [&mut p], Duration::from_micros(300));
    }
    c.run_for(&mut [&mut p], Duration::from_millis(100));
    assert_eq!(sent, 3000);
    let limits = crate::Limits::default();
    let budget = u64::from(limits.message_burst) + u64::from(limits.messages_per_sec) * 19 / 10;
    assert!(
        c.rate_limited() >= sent - budget,
        "{} of {sent} limited",
        c.rate_limited()
    );
    let moved: u64 = c.cores.iter().map(|c| c.counts.moved_out).sum();
    assert!(moved <= budget, "{moved} moves");
}
