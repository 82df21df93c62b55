//! End-to-end transport tests: a real `Server` and `Client`s driven through
//! the seeded `netsim::Network` on a virtual clock. This file holds the harness.

mod bulk;
mod connection;
mod latency;
mod memory;
mod reliability;
mod replay;
mod schedule;
mod tokens;

use super::*;
use crate::netsim::{LinkConfig, Network};
use crate::time::{Duration, Instant};
use crate::wire;
use std::net::SocketAddr;

const SERVER: &str = "10.0.0.1:5000";

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn client_addr(i: usize) -> SocketAddr {
    addr(&format!("10.0.1.{}:6000", i + 1))
}

#[derive(Default)]
struct Seen {
    client: Vec<Vec<ClientEvent>>,
    server: Vec<ServerEvent>,
}

struct Harness {
    net: Network,
    server: Server,
    clients: Vec<Client>,
    now: Instant,
    seen: Seen,
    /// Largest datagram the server sent in reply to each handshake datagram size seen.
    sizes: Vec<(SocketAddr, SocketAddr, usize)>,
    /// Every datagram delivered, as an observer on the path saw it, when
    /// a test asked for them (`Some`).
    tap: Option<Vec<Vec<u8>>>,
}

impl Harness {
    fn new(n: usize, link: LinkConfig, cfg: TransportConfig, seed: u64) -> Self {
        let now = Instant::ZERO;
        let clients = (0..n)
            .map(|i| Client::new(now, addr(SERVER), cfg, seed + i as u64))
            .collect();
        Self::from_parts(link, seed, Server::new(cfg, [7; 32]), clients)
    }

    /// A harness around a given server and clients (client `i` sits at `client_addr(i)`).
    fn from_parts(link: LinkConfig, seed: u64, server: Server, clients: Vec<Client>) -> Self {
        let n = clients.len();
        let now = Instant::ZERO;
        Self {
            net: Network::new(seed, link),
            server,
            clients,
            now,
            seen: Seen {
                client: vec![Vec::new(); n],
                server: Vec::new(),
            },
            sizes: Vec::new(),
            tap: None,
        }
    }

    fn flush(&mut self) {
        let mut buf = Vec::new();
        self.server.check_schedule();
        while let Some(to) = self.server.poll_transmit(self.now, &mut buf) {
            self.server.check_schedule();
            assert!(buf.len() <= wire::MAX_PACKET);
            self.sizes.push((addr(SERVER), to, buf.len()));
            self.net.send(self.now, addr(SERVER), to, &buf);
        }
        for (i, c) in self.clients.iter_mut().enumerate() {
            while let Some(to) = c.poll_transmit(self.now, &mut buf) {
                assert!(buf.len() <= wire::MAX_PACKET);
                self.sizes.push((client_addr(i), to, buf.len()));
                self.net.send(self.now, client_addr(i), to, &buf);
            }
        }
        self.collect();
    }

    fn collect(&mut self) {
        while let Some(e) = self.server.poll_event() {
            self.seen.server.push(e);
        }
        for (i, c) in self.clients.iter_mut().enumerate() {
            while let Some(e) = c.poll_event() {
                self.seen.client[i].push(e);
            }
        }
    }

    /// Runs the virtual clock to `end`, calling `each` at every step.
    fn run_until(&mut self, end: Instant, mut each: impl FnMut(&mut Self)) {
        let mut spins = 0u32;
        loop {
            each(self);
            self.flush();
            let mut next = end;
            for t in [self.server.poll_timeout(), self.net.next_delivery()]
                .into_iter()
                .chain(self.clients.iter().map(Client::poll_timeout))
                .flatten()
            {
                next = next.min(t);
            }
            if next <= self.now {
                spins += 1;
                assert!(spins < 10_000, "endpoint keeps asking for the same instant");
            } else {
                spins = 0;
            }
            self.now = self.now.max(next);
            while let Some((from, to, bytes)) = self.net.poll_deliver(self.now) {
                if let Some(tap) = &mut self.tap {
                    tap.push(bytes.clone());
                }
                if to == addr(SERVER) {
                    self.server.handle_datagram(self.now, from, &bytes);
                } else if let Some(i) = (0..self.clients.len()).find(|&i| client_addr(i) == to) {
                    self.clients[i].handle_datagram(self.now, from, &bytes);
                }
            }
            self.server.handle_timeout(self.now);
            self.server.check_schedule();
            for c in &mut self.clients {
                c.handle_timeout(self.now);
            }
            self.collect();
            if self.now >= end {
                return;
            }
        }
    }

    fn conn_of(&self, i: usize) -> ConnId {
        self.seen
            .server
            .iter()
            .find_map(|e| match e {
                ServerEvent::Connected { conn, addr } if *addr == client_addr(i) => Some(*conn),
                _ => None,
            })
            .expect("client connected")
    }

    fn connect(&mut self) {
        let deadline = self.now + Duration::from_secs(5);
        self.run_until(deadline, |_| {});
        for (i, c) in self.clients.iter().enumerate() {
            assert!(c.is_connected(), "client {i} did not connect");
        }
    }

    fn conn_of_any(&self) -> ConnId {
        self.server.connections().next().expect("a connection")
    }

    fn client_messages(&self, i: usize) -> Vec<Vec<u8>> {
        self.seen.client[i]
            .iter()
            .filter_map(|e| match e {
                ClientEvent::Message(m) => Some(m.clone()),
                _ => None,
            })
            .collect()
    }

    fn server_messages(&self, conn: ConnId) -> Vec<Vec<u8>> {
        self.seen
            .server
            .iter()
            .filter_map(|e| match e {
                ServerEvent::Message { conn: c, bytes } if *c == conn => Some(bytes.clone()),
                _ => None,
            })
            .collect()
    }
}

fn numbered(tag: u8, i: u32, len: usize) -> Vec<u8> {
    let mut m = vec![tag];
    m.extend_from_slice(&i.to_le_bytes());
    m.resize(len.max(5), tag);
    m
}

/// Both directions send a reliable message every 100 ms for `secs` seconds; returns the harness.
fn turn_traffic(link: LinkConfig, seed: u64, secs: u64, drain_secs: u64) -> (Harness, u32) {
    let mut h = Harness::new(1, link, TransportConfig::default(), seed);
    h.connect();
    let conn = h.conn_of(0);
    let start = h.now;
    let stop = start + Duration::from_secs(secs);
    let mut next = start;
    let mut count = 0u32;
    h.run_until(stop, |h| {
        while h.now >= next && next < stop {
            let len = 20 + (count as usize * 37) % 180;
            h.clients[0]
                .send(Channel::Reliable, &numbered(b'c', count, len))
                .unwrap();
            h.server
                .send(conn, Channel::Reliable, &numbered(b's', count, len * 2))
                .unwrap();
            count += 1;
            next += Duration::from_millis(100);
        }
    });
    let end = h.now + Duration::from_secs(drain_secs);
    h.run_until(end, |_| {});
    (h, count)
}

fn assert_exactly_once_in_order(h: &Harness, count: u32) {
    let conn = h.conn_of(0);
    let at_client = h.client_messages(0);
    let at_server = h.server_messages(conn);
    assert_eq!(
        at_client.len(),
        count as usize,
        "server→client delivered count"
    );
    assert_eq!(
        at_server.len(),
        count as usize,
        "client→server delivered count"
    );
    for (i, (c, s)) in at_client.iter().zip(&at_server).enumerate() {
        let len = 20 + (i * 37) % 180;
        assert!(*c == numbered(b's', i as u32, len * 2), "client msg {i}");
        assert!(*s == numbered(b'c', i as u32, len), "server msg {i}");
    }
    assert!(
        h.seen.client[0]
            .iter()
            .all(|e| !matches!(e, ClientEvent::Disconnected(_))),
        "no disconnect"
    );
}

fn true_rtt(h: &Harness) -> f64 {
    let up = h.net.counters(client_addr(0), addr(SERVER)).mean_delay();
    let down = h.net.counters(addr(SERVER), client_addr(0)).mean_delay();
    (up + down).as_millis_f64()
}
