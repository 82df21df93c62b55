//! A wake-up's cost follows the connections that have something due, not
//! the number of connections (`server::schedule`); the schedule's
//! invariant itself is checked after every step of every harness test.

use super::*;
use std::collections::HashMap;

/// Client `i`'s address, for more clients than `client_addr` numbers.
fn many_addr(i: usize) -> SocketAddr {
    SocketAddr::from(([10, 1, (i / 250) as u8, (i % 250) as u8 + 1], 6000))
}

/// `n` clients handshaken with one server over a perfect direct link, then
/// run until the server has nothing due: every connection idle.
fn idle_server(n: usize) -> (Server, Vec<Client>, Instant) {
    let cfg = TransportConfig {
        max_connections: n,
        ..TransportConfig::default()
    };
    let mut server = Server::new(cfg, [7; 32]);
    let mut clients: Vec<Client> = (0..n)
        .map(|i| Client::new(Instant::ZERO, addr(SERVER), cfg, 100 + i as u64))
        .collect();
    let index: HashMap<SocketAddr, usize> = (0..n).map(|i| (many_addr(i), i)).collect();
    let mut buf = Vec::new();
    let mut now = Instant::ZERO;
    let mut step = |server: &mut Server, clients: &mut [Client], now: Instant| {
        for (i, c) in clients.iter_mut().enumerate() {
            c.handle_timeout(now);
            while c.poll_transmit(now, &mut buf).is_some() {
                server.handle_datagram(now, many_addr(i), &buf);
            }
        }
        server.handle_timeout(now);
        while let Some(to) = server.poll_transmit(now, &mut buf) {
            clients[index[&to]].handle_datagram(now, addr(SERVER), &buf);
        }
        server.check_schedule();
    };
    while clients.iter().any(|c| !c.is_connected()) {
        assert!(now < Instant::from_millis(2_000), "handshakes stalled");
        step(&mut server, &mut clients, now);
        now += Duration::from_millis(10);
    }
    // A few keep-alive rounds, so no ack or first packet is owed any more.
    let settled = now + Duration::from_millis(600);
    while now < settled {
        step(&mut server, &mut clients, now);
        now += Duration::from_millis(1);
    }
    while server.poll_event().is_some() {}
    (server, clients, now)
}

#[test]
fn a_wake_up_with_one_busy_connection_among_a_thousand_idle_ones_visits_only_it() {
    let n = 1000;
    let (mut server, mut clients, now) = idle_server(n);
    assert_eq!(server.connections().count(), n);
    // The next deadline of any connection (a keep-alive) is later: a
    // wake-up now has one connection with work, the one a packet arrives on.
    let next = server.poll_timeout().expect("keep-alives are scheduled");
    assert!(next > now, "{next:?} vs {now:?}");
    let mut buf = Vec::new();
    let busy = 7;
    clients[busy].send(Channel::Reliable, b"move").unwrap();
    let mut from_client = Vec::new();
    while clients[busy].poll_transmit(now, &mut from_client).is_some() {
        let before = server.connections_visited();
        server.handle_datagram(now, many_addr(busy), &from_client);
        server.handle_timeout(now);
        let mut sent = 0;
        while server.poll_transmit(now, &mut buf).is_some() {
            sent += 1;
        }
        let visited = server.connections_visited() - before;
        // Old server: all 1,000 in `handle_timeout` alone, and again in
        // every `poll_transmit` that finds nothing.
        assert!(visited <= 2, "visited {visited} connections, sent {sent}");
    }
    let got = std::iter::from_fn(|| server.poll_event()).find_map(|e| match e {
        ServerEvent::Message { bytes, .. } => Some(bytes),
        _ => None,
    });
    assert_eq!(got.as_deref(), Some(&b"move"[..]));
    // The server's own deadline is still the earliest of all connections'
    // (checked against each connection by `check_schedule`). At it, every
    // connection's keep-alive is due (they all connected together): each
    // is visited once by the timer pass and once to send, and the last
    // `poll_transmit` (nothing left) visits none (the old one: all again).
    server.check_schedule();
    let before = server.connections_visited();
    server.handle_timeout(next);
    let mut sent = 0u64;
    while server.poll_transmit(next, &mut buf).is_some() {
        sent += 1;
    }
    server.check_schedule();
    let visited = server.connections_visited() - before;
    assert!(sent >= 1, "the keep-alive due at {next:?} went out");
    assert!(visited <= 2 * sent, "visited {visited}, sent {sent}");
}

#[test]
fn the_schedule_follows_connections_through_loss_closes_and_replacements() {
    // The harness checks the schedule against every connection's own
    // deadline after each step; this run makes deadlines move in every
    // way: lossy traffic both ways, a server close, an idle client.
    let link = LinkConfig {
        loss: 0.1,
        ..LinkConfig::default()
    };
    let mut h = Harness::new(4, link, TransportConfig::default(), 41);
    h.connect();
    let conns: Vec<ConnId> = (0..4).map(|i| h.conn_of(i)).collect();
    let start = h.now;
    let mut count = 0u32;
    h.run_until(start + Duration::from_secs(3), |h| {
        if h.now >= start + Duration::from_millis(u64::from(count) * 100) {
            for &c in &conns[..3] {
                let _ = h
                    .server
                    .send(c, Channel::Reliable, &numbered(b's', count, 40));
            }
            for c in &mut h.clients[..3] {
                let _ = c.send(Channel::Reliable, &numbered(b'c', count, 40));
            }
            count += 1;
        }
        if count == 10 {
            h.server.disconnect(conns[1], h.now);
        }
    });
    // Client 1 was closed by the server; client 3 only ever sent keep-alives.
    h.run_until(h.now + Duration::from_secs(6), |_| {});
    assert!(h.clients[0].is_connected());
    assert!(!h.clients[1].is_connected());
    assert!(h.server.connections().all(|c| c != conns[1]));
}
