//! End-to-end transport tests: a real `Server` and `Client`s driven through
//! the seeded `netsim::Network` on a virtual clock.

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
}

impl Harness {
    fn new(n: usize, link: LinkConfig, cfg: TransportConfig, seed: u64) -> Self {
        let now = Instant::ZERO;
        let clients = (0..n)
            .map(|i| Client::new(now, addr(SERVER), cfg, seed + i as u64))
            .collect();
        Self {
            net: Network::new(seed, link),
            server: Server::new(cfg, [7; 32]),
            clients,
            now,
            seen: Seen {
                client: vec![Vec::new(); n],
                server: Vec::new(),
            },
            sizes: Vec::new(),
        }
    }

    fn flush(&mut self) {
        let mut buf = Vec::new();
        while let Some(to) = self.server.poll_transmit(self.now, &mut buf) {
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
                if to == addr(SERVER) {
                    self.server.handle_datagram(self.now, from, &bytes);
                } else if let Some(i) = (0..self.clients.len()).find(|&i| client_addr(i) == to) {
                    self.clients[i].handle_datagram(self.now, from, &bytes);
                }
            }
            self.server.handle_timeout(self.now);
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

#[test]
fn sixty_seconds_at_20pct_loss_jitter_dup_reorder() {
    let link = LinkConfig {
        latency: Duration::from_millis(100),
        jitter: Duration::from_millis(30),
        loss: 0.2,
        duplicate: 0.05,
        reorder: 0.05,
        ..LinkConfig::default()
    };
    let (h, count) = turn_traffic(link, 11, 60, 5);
    assert_eq!(count, 600);
    assert_exactly_once_in_order(&h, count);
    let stats = h.clients[0].stats();
    let truth = true_rtt(&h);
    let est = stats.rtt.as_millis_f64();
    assert!(
        (est - truth).abs() <= truth * 0.10,
        "rtt estimate {est:.1} ms vs true mean {truth:.1} ms"
    );
    let true_loss = h.net.counters(client_addr(0), addr(SERVER)).loss_rate();
    eprintln!(
        "20% soak: rtt {est:.1} ms (true {truth:.1}), jitter {}, rto {}, loss {:.3} (true {true_loss:.3}), sent {:.0} B/s",
        stats.jitter, stats.rto, stats.loss, stats.sent_bps
    );
    assert!((true_loss - 0.2).abs() < 0.02);
    assert!(
        (stats.loss - true_loss).abs() <= 0.03,
        "loss estimate {:.3} vs true {true_loss:.3}",
        stats.loss
    );
    let sstats = h.server.stats(h.conn_of(0)).unwrap();
    assert!(
        (sstats.loss - 0.2).abs() <= 0.03,
        "server loss {:.3}",
        sstats.loss
    );
    assert!(stats.packets_lost > 0 && stats.packets_acked > 1000);
    assert!(
        stats.dropped_replay > 0,
        "duplicates were dropped by the replay window"
    );
}

#[test]
fn yojimbo_soak_settings() {
    let link = LinkConfig {
        latency: Duration::from_millis(1000),
        jitter: Duration::from_millis(100),
        loss: 0.25,
        duplicate: 0.25,
        ..LinkConfig::default()
    };
    let (h, count) = turn_traffic(link, 12, 60, 15);
    assert_exactly_once_in_order(&h, count);
    let stats = h.clients[0].stats();
    let truth = true_rtt(&h);
    let est = stats.rtt.as_millis_f64();
    assert!(
        (est - truth).abs() <= truth * 0.10,
        "rtt estimate {est:.1} ms vs true mean {truth:.1} ms"
    );
    eprintln!(
        "yojimbo soak: rtt {est:.1} ms (true {truth:.1}), loss {:.3}",
        stats.loss
    );
    assert_eq!(
        stats.mode,
        CongestionMode::Bad,
        "2 s RTT is over the threshold"
    );
    assert!((stats.loss - 0.25).abs() <= 0.04, "loss {:.3}", stats.loss);
}

#[test]
fn total_outage_for_three_seconds_recovers_without_reconnect() {
    let link = LinkConfig::with_latency(Duration::from_millis(30));
    let mut h = Harness::new(1, link, TransportConfig::default(), 13);
    h.connect();
    let conn = h.conn_of(0);
    let cut = h.now;
    let mut sent = 0u32;
    let mut next = cut;
    let end = cut + Duration::from_secs(8);
    h.run_until(end, |h| {
        let offset = h.now.saturating_since(cut);
        let dead = offset < Duration::from_secs(3);
        let cfg = LinkConfig {
            loss: if dead { 1.0 } else { 0.0 },
            ..link
        };
        h.net.set_all(cfg);
        while h.now >= next && sent < 50 {
            h.clients[0]
                .send(Channel::Reliable, &numbered(b'x', sent, 30))
                .unwrap();
            sent += 1;
            next += Duration::from_millis(100);
        }
    });
    assert_eq!(h.server_messages(conn).len(), 50);
    assert!(h.clients[0].is_connected());
    assert!(
        h.seen
            .server
            .iter()
            .all(|e| !matches!(e, ServerEvent::Disconnected { .. }))
    );
    assert_eq!(
        h.seen.client[0]
            .iter()
            .filter(|e| matches!(e, ClientEvent::Connected))
            .count(),
        1,
        "no reconnect"
    );
    assert!(
        h.clients[0].stats().packets_lost > 10,
        "the outage was measured as loss"
    );
}

#[test]
fn one_way_traffic_still_gets_acks() {
    let link = LinkConfig {
        latency: Duration::from_millis(40),
        loss: 0.1,
        ..LinkConfig::default()
    };
    let mut h = Harness::new(1, link, TransportConfig::default(), 14);
    h.connect();
    let conn = h.conn_of(0);
    let mut sent = 0u32;
    let stop = h.now + Duration::from_secs(20);
    h.run_until(stop, |h| {
        if h.clients[0].stats().unacked < 8 && h.now < stop - Duration::from_secs(2) {
            h.clients[0]
                .send(Channel::Reliable, &numbered(b'o', sent, 64))
                .unwrap();
            sent += 1;
        }
    });
    let stats = h.clients[0].stats();
    assert_eq!(stats.unacked, 0, "every message acked");
    assert_eq!(h.server_messages(conn).len(), sent as usize);
    assert!(stats.packets_acked > 100);
    assert!(
        (stats.loss - 0.1).abs() <= 0.04,
        "loss measured from acks: {}",
        stats.loss
    );
    assert!(h.client_messages(0).is_empty());
}

#[test]
fn new_reliable_data_leaves_on_the_next_poll() {
    let link = LinkConfig::with_latency(Duration::from_millis(50));
    let mut h = Harness::new(1, link, TransportConfig::default(), 15);
    h.connect();
    let conn = h.conn_of(0);
    let mut buf = Vec::new();
    // A message every 50 ms (below the 30 packets/s token rate) while earlier ones
    // are still un-acked and being repeated: each leaves on the very next poll.
    for k in 0..20u32 {
        let t = h.now + Duration::from_millis(50);
        h.run_until(t, |_| {});
        h.flush();
        h.clients[0]
            .send(Channel::Reliable, &numbered(b'p', k, 40))
            .unwrap();
        let to = h.clients[0].poll_transmit(h.now, &mut buf);
        assert_eq!(to, Some(addr(SERVER)), "message {k} left at once");
        assert!(buf.windows(5).any(|w| w == &numbered(b'p', k, 40)[..5]));
        h.net.send(h.now, client_addr(0), addr(SERVER), &buf);
    }
    let t = h.now + Duration::from_secs(1);
    h.run_until(t, |_| {});
    assert_eq!(h.server_messages(conn).len(), 20);
}

#[test]
fn redundancy_buys_unreliable_delivery_under_loss() {
    let run = |redundancy: bool| {
        let link = LinkConfig {
            latency: Duration::from_millis(50),
            loss: 0.2,
            ..LinkConfig::default()
        };
        let cfg = TransportConfig {
            redundancy,
            ..TransportConfig::default()
        };
        let mut h = Harness::new(1, link, cfg, 16);
        h.connect();
        let conn = h.conn_of(0);
        // Warm up so the loss estimate is measured.
        let warm = h.now + Duration::from_secs(10);
        h.run_until(warm, |h| {
            if h.clients[0].stats().unacked < 2 {
                let _ = h.clients[0].send(Channel::Reliable, b"w");
            }
        });
        let before = h.server_messages(conn).len();
        let mut sent = 0;
        let mut next = h.now;
        let stop = h.now + Duration::from_secs(30);
        h.run_until(stop, |h| {
            while h.now >= next && h.now < stop {
                h.clients[0].send(Channel::Unreliable, b"u").unwrap();
                sent += 1;
                next += Duration::from_millis(100);
            }
        });
        let got = h.server_messages(conn)[before..]
            .iter()
            .filter(|m| m.as_slice() == b"u")
            .count();
        (
            got as f64 / f64::from(sent),
            h.clients[0].stats().redundancy_copies,
        )
    };
    let (plain, c0) = run(false);
    let (redundant, c2) = run(true);
    eprintln!("redundancy: {plain:.3} delivered plain, {redundant:.3} with {c2} copies");
    assert_eq!(c0, 0);
    assert_eq!(c2, 2, "20 % loss gives two extra copies");
    assert!(plain < 0.86, "without redundancy ~80 % arrive: {plain:.3}");
    assert!(
        redundant > 0.97,
        "with 2 copies ~99 % arrive: {redundant:.3}"
    );
}

#[test]
fn handshake_never_amplifies_and_allocates_only_after_a_valid_cookie() {
    let link = LinkConfig::with_latency(Duration::from_millis(10));
    let mut h = Harness::new(2, link, TransportConfig::default(), 17);
    h.connect();
    // Every server datagram to a not-yet-connected client is no larger than
    // what the client had sent before it.
    let first_client_packet = h
        .sizes
        .iter()
        .find(|(f, _, _)| *f == client_addr(0))
        .unwrap()
        .2;
    assert_eq!(first_client_packet, wire::CONNECT_REQUEST_LEN);
    for &(from, _, len) in &h.sizes {
        if from == addr(SERVER) {
            assert!(len <= wire::CONNECT_REQUEST_LEN);
        }
    }
    // Spoofed requests: a challenge each, no state.
    let mut server = Server::new(TransportConfig::default(), [1; 32]);
    let mut req = Vec::new();
    wire::Packet::ConnectRequest {
        protocol_id: TransportConfig::default().protocol_id,
        client_salt: 5,
    }
    .encode(&mut req);
    let mut buf = Vec::new();
    for i in 0..100 {
        let from = addr(&format!("10.9.{}.{}:1", i / 250, i % 250));
        server.handle_datagram(Instant::ZERO, from, &req);
        assert_eq!(server.poll_transmit(Instant::ZERO, &mut buf), Some(from));
        assert!(buf.len() < req.len());
    }
    assert_eq!(server.connections().count(), 0);
    assert_eq!(server.counters().challenges_sent, 100);
    // A forged cookie, a cookie for another address, and an expired one.
    let wire::Packet::Challenge(cookie) = wire::decode(&buf).unwrap() else {
        panic!("challenge expected")
    };
    let owner = addr("10.9.0.99:1");
    let mut forged = cookie;
    forged.mac[0] ^= 1;
    let mut resp = Vec::new();
    wire::Packet::ChallengeResponse(forged).encode(&mut resp);
    server.handle_datagram(Instant::ZERO, owner, &resp);
    resp.clear();
    wire::Packet::ChallengeResponse(cookie).encode(&mut resp);
    server.handle_datagram(Instant::ZERO, addr("10.9.0.98:1"), &resp);
    assert_eq!(server.counters().bad_cookie, 2);
    server.handle_datagram(Instant::from_millis(11_000), owner, &resp);
    assert_eq!(server.counters().expired_cookie, 1);
    assert_eq!(server.connections().count(), 0);
    server.handle_datagram(Instant::from_millis(100), owner, &resp);
    assert_eq!(server.connections().count(), 1);
    assert!(matches!(
        server.poll_event(),
        Some(ServerEvent::Connected { .. })
    ));
    // Accepted is smaller than the response that earned it.
    assert_eq!(
        server.poll_transmit(Instant::from_millis(100), &mut buf),
        Some(owner)
    );
    assert!(buf.len() <= resp.len());
}

#[test]
fn wrong_protocol_and_full_server_are_denied() {
    let link = LinkConfig::with_latency(Duration::from_millis(10));
    let cfg = TransportConfig {
        max_connections: 1,
        ..TransportConfig::default()
    };
    let mut h = Harness::new(2, link, cfg, 18);
    h.clients[1] = Client::new(
        Instant::ZERO,
        addr(SERVER),
        TransportConfig {
            protocol_id: 99,
            ..cfg
        },
        3,
    );
    h.run_until(Instant::from_millis(2000), |_| {});
    assert!(h.clients[0].is_connected());
    assert_eq!(
        h.seen.client[1],
        vec![ClientEvent::Disconnected(DisconnectReason::Denied(
            wire::DenyReason::WrongProtocol
        ))]
    );
    h.clients.push(Client::new(h.now, addr(SERVER), cfg, 4));
    h.seen.client.push(Vec::new());
    let t = h.now + Duration::from_secs(2);
    h.run_until(t, |_| {});
    assert_eq!(
        h.seen.client[2],
        vec![ClientEvent::Disconnected(DisconnectReason::Denied(
            wire::DenyReason::Full
        ))]
    );
}

#[test]
fn tampered_and_replayed_packets_are_dropped_and_counted() {
    let link = LinkConfig::with_latency(Duration::from_millis(10));
    let mut h = Harness::new(1, link, TransportConfig::default(), 19);
    h.connect();
    let conn = h.conn_of(0);
    h.clients[0].send(Channel::Reliable, b"once").unwrap();
    let mut buf = Vec::new();
    let to = h.clients[0].poll_transmit(h.now, &mut buf).unwrap();
    let now = h.now;
    let mut bad = buf.clone();
    let last = bad.len() - 20;
    bad[last] ^= 0x40;
    h.server.handle_datagram(now, client_addr(0), &bad);
    assert_eq!(h.server.counters().auth_failed, 1);
    h.server.handle_datagram(now, client_addr(0), &buf);
    h.server.handle_datagram(now, client_addr(0), &buf);
    assert_eq!(h.server.counters().replayed, 1);
    // From another address, the same bytes are refused too.
    h.server.handle_datagram(now, addr("10.0.9.9:1"), &buf);
    assert_eq!(h.server.counters().unknown_sender, 1);
    assert_eq!(to, addr(SERVER));
    h.collect();
    assert_eq!(h.server_messages(conn), vec![b"once".to_vec()]);
}

#[test]
fn silence_times_out_and_clean_disconnect_reaches_the_peer() {
    let link = LinkConfig {
        latency: Duration::from_millis(20),
        loss: 0.2,
        ..LinkConfig::default()
    };
    let mut h = Harness::new(2, link, TransportConfig::default(), 20);
    h.connect();
    let c1 = h.conn_of(1);
    h.clients[1].disconnect(h.now);
    let t = h.now + Duration::from_secs(1);
    h.run_until(t, |_| {});
    assert!(h.seen.server.contains(&ServerEvent::Disconnected {
        conn: c1,
        reason: DisconnectReason::Remote
    }));
    assert!(h.seen.client[1].contains(&ClientEvent::Disconnected(DisconnectReason::Local)));
    // Now the server goes silent for client 0.
    let start = h.now;
    let t = h.now + Duration::from_secs(7);
    h.run_until(t, |h| {
        let cut = LinkConfig { loss: 1.0, ..link };
        h.net.set_link(addr(SERVER), client_addr(0), cut);
    });
    assert!(h.seen.client[0].contains(&ClientEvent::Disconnected(DisconnectReason::Timeout)));
    assert!(!h.clients[0].is_connected());
    assert!(h.now >= start + Duration::from_secs(5));
}

#[test]
fn full_window_raises_backpressure_then_disconnects() {
    let link = LinkConfig::with_latency(Duration::from_millis(20));
    let cfg = TransportConfig {
        max_unacked: 16,
        backpressure_timeout: Duration::from_secs(1),
        ..TransportConfig::default()
    };
    let mut h = Harness::new(1, link, cfg, 21);
    h.connect();
    // Acks stop coming back (the server's packets are lost), the client keeps producing.
    let mut refused = 0;
    let end = h.now + Duration::from_secs(3);
    h.run_until(end, |h| {
        let cut = LinkConfig { loss: 1.0, ..link };
        h.net.set_link(addr(SERVER), client_addr(0), cut);
        if h.clients[0].is_connected() {
            match h.clients[0].send(Channel::Reliable, b"more") {
                Ok(()) => {}
                Err(SendError::WindowFull { unacked, max }) => {
                    assert_eq!((unacked, max), (16, 16));
                    refused += 1;
                }
                Err(e) => panic!("{e}"),
            }
        }
    });
    assert!(refused > 0);
    let ev = &h.seen.client[0];
    let bp = ev
        .iter()
        .position(|e| *e == ClientEvent::Backpressure)
        .unwrap();
    let dc = ev
        .iter()
        .position(|e| *e == ClientEvent::Disconnected(DisconnectReason::Backpressure))
        .unwrap();
    assert!(bp < dc);
    assert_eq!(
        ev.iter()
            .filter(|e| **e == ClientEvent::Backpressure)
            .count(),
        1
    );
}

#[test]
fn large_messages_are_fragmented_and_reassembled_over_loss() {
    let link = LinkConfig {
        latency: Duration::from_millis(30),
        loss: 0.1,
        reorder: 0.1,
        ..LinkConfig::default()
    };
    let mut h = Harness::new(1, link, TransportConfig::default(), 22);
    h.connect();
    let conn = h.conn_of(0);
    let big: Vec<u8> = (0..50_000u32).map(|i| (i * 7) as u8).collect();
    h.server.send(conn, Channel::Reliable, &big).unwrap();
    h.server.send(conn, Channel::Reliable, b"after").unwrap();
    assert!(matches!(
        h.server.send(conn, Channel::Reliable, &vec![0; 70_000]),
        Err(SendError::TooLarge { .. })
    ));
    let t = h.now + Duration::from_secs(10);
    h.run_until(t, |_| {});
    let got = h.client_messages(0);
    assert_eq!(got.len(), 2);
    assert!(got[0] == big);
    assert_eq!(got[1], b"after");
}
