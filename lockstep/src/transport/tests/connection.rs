//! Handshake, authentication, robustness, timeouts, disconnects and back-pressure.

use super::*;

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
fn a_server_close_delivers_the_messages_queued_before_it() {
    // A lossy link, so the last messages need resends after the close began.
    let link = LinkConfig {
        latency: Duration::from_millis(20),
        loss: 0.3,
        ..LinkConfig::default()
    };
    let mut h = Harness::new(1, link, TransportConfig::default(), 31);
    h.connect();
    let conn = h.conn_of(0);
    let sent: Vec<Vec<u8>> = (0..5).map(|i| numbered(9, i, 300)).collect();
    for m in &sent {
        h.server.send(conn, Channel::Reliable, m).unwrap();
    }
    // The close comes right after the messages, before any packet left.
    h.server.disconnect(conn, h.now);
    // Closing: nothing new is accepted, and what the client still sends is not delivered.
    assert_eq!(
        h.server.send(conn, Channel::Reliable, b"late"),
        Err(SendError::NotConnected)
    );
    h.clients[0].send(Channel::Reliable, b"ignored").unwrap();
    let t = h.now + Duration::from_secs(4);
    h.run_until(t, |_| {});
    assert_eq!(h.client_messages(0), sent, "every queued message, in order");
    let ended = h.seen.client[0].last().cloned();
    assert_eq!(
        ended,
        Some(ClientEvent::Disconnected(DisconnectReason::Remote)),
        "then the close"
    );
    assert!(h.seen.server.contains(&ServerEvent::Disconnected {
        conn,
        reason: DisconnectReason::Local
    }));
    assert!(h.server_messages(conn).is_empty());
    assert_eq!(h.server.connections().count(), 0);
}

#[test]
fn a_server_close_stops_waiting_for_a_client_that_never_acks() {
    let link = LinkConfig::with_latency(Duration::from_millis(10));
    let mut h = Harness::new(1, link, TransportConfig::default(), 32);
    h.connect();
    let conn = h.conn_of(0);
    h.net.set_link(
        client_addr(0),
        addr(SERVER),
        LinkConfig { loss: 1.0, ..link },
    );
    h.server.send(conn, Channel::Reliable, b"bye").unwrap();
    h.server.disconnect(conn, h.now);
    let limit = h.now + TransportConfig::default().timeout + Duration::from_secs(1);
    h.run_until(limit, |_| {});
    assert_eq!(
        h.server.connections().count(),
        0,
        "closed within the timeout"
    );
    assert!(
        h.seen
            .server
            .iter()
            .any(|e| matches!(e, ServerEvent::Disconnected { conn: c, .. } if *c == conn))
    );
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
fn endpoints_survive_mutated_and_random_datagrams() {
    use crate::rng::Rng;
    let link = LinkConfig::with_latency(Duration::from_millis(10));
    let mut h = Harness::new(1, link, TransportConfig::default(), 25);
    h.connect();
    // Capture real traffic in both directions.
    let mut captured: Vec<Vec<u8>> = Vec::new();
    let mut buf = Vec::new();
    for k in 0..20u32 {
        h.clients[0]
            .send(Channel::Reliable, &numbered(b'm', k, 40))
            .unwrap();
        let t = h.now + Duration::from_millis(40);
        h.run_until(t, |_| {});
        if let Some(to) = h.clients[0].poll_transmit(h.now, &mut buf) {
            captured.push(buf.clone());
            h.net.send(h.now, client_addr(0), to, &buf);
        }
    }
    let mut req = Vec::new();
    wire::Packet::ConnectRequest {
        protocol_id: TransportConfig::default().protocol_id,
        client_salt: 1,
    }
    .encode(&mut req);
    captured.push(req);
    let mut rng = Rng::new(99);
    let now = h.now;
    for i in 0..20_000 {
        let mut b = captured[rng.below(captured.len() as u64) as usize].clone();
        match i % 4 {
            0 => {
                let at = rng.below(b.len() as u64) as usize;
                b[at] ^= 1 << rng.below(8);
            }
            1 => b.truncate(rng.below(b.len() as u64 + 1) as usize),
            2 => {
                let len = rng.below(1300) as usize;
                b = vec![0; len];
                rng.fill(&mut b);
            }
            _ => b.push(rng.below(256) as u8),
        }
        h.server.handle_datagram(now, client_addr(0), &b);
        h.clients[0].handle_datagram(now, addr(SERVER), &b);
    }
    let c = h.server.counters().clone();
    assert!(c.malformed + c.auth_failed + c.replayed > 10_000, "{c:?}");
    assert_eq!(h.server.connections().count(), 1);
    // The genuine connection still works.
    h.collect();
    h.seen.server.clear();
    h.clients[0].send(Channel::Reliable, b"still here").unwrap();
    let t = h.now + Duration::from_secs(1);
    h.run_until(t, |_| {});
    assert!(
        h.server_messages(h.conn_of_any())
            .contains(&b"still here".to_vec())
    );
    assert!(h.clients[0].is_connected());
}

/// Server datagrams sent in `(from, to]`.
fn server_sent_between(h: &Harness, before: usize) -> Vec<usize> {
    h.sizes[before..]
        .iter()
        .filter(|(f, _, _)| *f == addr(SERVER))
        .map(|&(_, _, len)| len)
        .collect()
}

#[test]
fn a_packet_of_duplicates_only_is_acked_by_the_next_packet_not_its_own() {
    let link = LinkConfig::with_latency(Duration::from_millis(25));
    let mut h = Harness::new(1, link, TransportConfig::default(), 41);
    h.connect();
    let conn = h.conn_of(0);
    let t = h.now + Duration::from_secs(1);
    h.run_until(t, |_| {});
    let before = h.sizes.len();
    // The client's "a" reaches the server at +25 ms (ack owed, ack-only
    // packet at +50); the server's "s" reaches the client at +35, whose ack
    // leaves at +60 carrying a ride-along copy of the still un-acked "a": a
    // packet of duplicates only, at the server at +85.
    h.clients[0].send(Channel::Reliable, b"a").unwrap();
    h.flush();
    let t = h.now + Duration::from_millis(10);
    h.run_until(t, |_| {});
    h.server.send(conn, Channel::Reliable, b"s").unwrap();
    let t = h.now + Duration::from_millis(200);
    h.run_until(t, |_| {});
    assert_eq!(h.server_messages(conn).last().unwrap(), b"a");
    assert_eq!(h.client_messages(0).last().unwrap(), b"s");
    // The server sent "s" and its ack of "a", and nothing for the duplicate
    // within the 200 ms (it waits for a packet that goes anyway, at most
    // half a keep-alive).
    let sent = server_sent_between(&h, before);
    assert_eq!(sent.len(), 2, "server datagrams: {sent:?}");
}

#[test]
fn a_peer_that_holds_its_acks_a_turn_is_waited_for_before_a_resend() {
    // The server holds its acks up to 100 ms (a relay's turn) and sends
    // nothing else; the client keeps the default 25 ms and learns the
    // server's hold from its headers.
    let link = LinkConfig::with_latency(Duration::from_millis(25));
    let client_cfg = TransportConfig::default();
    let server_cfg = TransportConfig {
        ack_delay: Duration::from_millis(100),
        ..client_cfg
    };
    let clients = vec![Client::new(Instant::ZERO, addr(SERVER), client_cfg, 43)];
    let mut h = Harness::from_parts(link, 43, Server::new(server_cfg, [7; 32]), clients);
    h.connect();
    let conn = h.conn_of(0);
    // Messages 300 ms apart: each one's ack is held the full 100 ms.
    let start = h.now;
    let stop = start + Duration::from_secs(6);
    let mut next = start;
    let mut sent = 0u32;
    let before = h.sizes.len();
    h.run_until(stop + Duration::from_secs(1), |h| {
        while h.now >= next && next < stop {
            h.clients[0]
                .send(Channel::Reliable, &sent.to_le_bytes())
                .unwrap();
            sent += 1;
            next += Duration::from_millis(300);
        }
    });
    assert_eq!(h.server_messages(conn).len(), sent as usize);
    let up: Vec<usize> = h.sizes[before..]
        .iter()
        .filter(|(f, _, _)| *f == client_addr(0))
        .map(|&(_, _, len)| len)
        .collect();
    let stats = h.clients[0].stats();
    eprintln!(
        "{} datagrams for {sent} messages: {up:?}; {stats:?}",
        up.len()
    );
    // Each message, the acks of the server's keep-alives (with ride-along
    // copies) and no resend: with our own 25 ms as the allowance the
    // backstop fired before the held ack came back (51 datagrams).
    assert!(up.len() <= 45, "{} datagrams", up.len());
    assert_eq!(stats.packets_lost, 0);
    let rtt = stats.rtt.as_millis_f64();
    assert!(
        (49.0..53.0).contains(&rtt),
        "rtt {rtt} ms: the hold is not RTT"
    );
}

#[test]
fn a_silent_peer_gets_no_early_copies() {
    // 20 % loss: the server's urgent messages get two copies.
    let link = LinkConfig {
        latency: Duration::from_millis(25),
        loss: 0.2,
        ..LinkConfig::default()
    };
    let mut h = Harness::new(1, link, TransportConfig::default(), 47);
    h.connect();
    let conn = h.conn_of(0);
    let mut next = h.now;
    let stop = h.now + Duration::from_secs(10);
    h.run_until(stop, |h| {
        while h.now >= next {
            let _ = h.clients[0].send(Channel::Urgent, b"in");
            let _ = h.server.send(conn, Channel::Urgent, b"bundle");
            next += Duration::from_millis(100);
        }
    });
    let copies = |h: &Harness| h.server.stats(conn).map(|s| s.redundancy_copies);
    assert_eq!(copies(&h), Some(2));
    // The client goes silent (its packets no longer arrive): once nothing
    // was heard for the loss bound, the server stops sending copies.
    let dead = LinkConfig { loss: 1.0, ..link };
    h.net.set_link(client_addr(0), addr(SERVER), dead);
    let stop = h.now + Duration::from_secs(2);
    h.run_until(stop, |h| {
        while h.now >= next {
            let _ = h.server.send(conn, Channel::Urgent, b"bundle");
            next += Duration::from_millis(100);
        }
    });
    assert_eq!(copies(&h), Some(0));
}

/// Two connected clients 20 ms from the server under the default
/// transport config, seeded with `seed`: client 0 never acknowledges
/// anything, client 1 is honest. The harness and their connections (the
/// non-acking one first).
fn never_acking_beside_honest(seed: u64) -> (Harness, ConnId, ConnId) {
    let link = LinkConfig {
        latency: Duration::from_millis(20),
        ..LinkConfig::default()
    };
    let mut h = Harness::new(2, link, TransportConfig::default(), seed);
    h.connect();
    h.clients[0].never_ack();
    let (bad, good) = (h.conn_of(0), h.conn_of(1));
    (h, bad, good)
}

/// A client that keeps sending but never acknowledges anything: the
/// server sends it at most `max_unconfirmed_bytes` of data (then only acks
/// and keep-alives), and drops it with `NoAcks` once its data waited
/// `backpressure_timeout`, instead of sending to it for as long as it talks.
/// An honest client under the same traffic is neither capped nor dropped.
#[test]
fn a_client_that_never_acks_is_capped_then_dropped() {
    let (mut h, bad, good) = never_acking_beside_honest(31);
    let cfg = TransportConfig::default();
    let start = h.now;
    let mark = h.sizes.len();
    // 40 s of the relay's turn traffic: a 600-byte bundle every 50 ms to
    // each client, an input every 50 ms from each.
    let mut next = h.now;
    let mut k = 0u32;
    let mut dropped_at = None;
    h.run_until(start + Duration::from_secs(40), |h| {
        while h.now >= next {
            for conn in [bad, good] {
                let _ = h.server.send(conn, Channel::Urgent, &numbered(b'b', k, 600));
            }
            for c in &mut h.clients {
                let _ = c.send(Channel::Urgent, &numbered(b'i', k, 20));
            }
            k += 1;
            next += Duration::from_millis(50);
        }
        if dropped_at.is_none()
            && h.seen.server.iter().any(|e| {
                matches!(e, ServerEvent::Disconnected { conn, reason: DisconnectReason::NoAcks } if *conn == bad)
            })
        {
            dropped_at = Some(h.now);
        }
    });
    let dropped_at = dropped_at.expect("the client that never acks was dropped");
    let after = dropped_at.saturating_since(start);
    assert!(
        after <= cfg.backpressure_timeout + Duration::from_secs(1),
        "dropped {after:?} after it stopped acking"
    );
    let to_bad: usize = h.sizes[mark..]
        .iter()
        .filter(|&&(from, to, _)| from == addr(SERVER) && to == client_addr(0))
        .map(|&(_, _, len)| len)
        .sum();
    assert!(
        to_bad <= cfg.max_unconfirmed_bytes + 16 * 1024,
        "{to_bad} bytes sent to a client that acked none"
    );
    assert!(h.clients[1].is_connected(), "the honest client stays");
    assert!(h.server.stats(good).is_some());
    assert_eq!(h.client_messages(1).len() as u32, k, "and got every bundle");
}

/// The amplification bound: a client that completes the handshake and then
/// acknowledges nothing receives at most 16 KiB, or three times what it
/// sent, whichever is larger, until it is cut off: the initial send window
/// (`initial_window`) grows only as acks arrive, and the bulk path (a
/// snapshot queued for it) is held by the same window. Before, it received
/// up to the 256 KiB cap (228 KB in 5 s, 18 times what it sent). The
/// honest client beside it, on the same traffic plus the same snapshot,
/// gets everything, in no more time than the window's growth costs.
#[test]
fn a_client_that_never_acks_receives_at_most_16_kib_or_three_times_what_it_sent() {
    let (mut h, bad, good) = never_acking_beside_honest(33);
    let start = h.now;
    let mark = h.sizes.len();
    let snapshot = numbered(b'S', 0, 300_000);
    for conn in [bad, good] {
        h.server.send(conn, Channel::Bulk, &snapshot).unwrap();
    }
    let mut next = h.now;
    let mut k = 0u32;
    let mut dropped = false;
    h.run_until(start + Duration::from_secs(12), |h| {
        while h.now >= next {
            for conn in [bad, good] {
                let _ = h.server.send(conn, Channel::Urgent, &numbered(b'b', k, 600));
            }
            for c in &mut h.clients {
                let _ = c.send(Channel::Urgent, &numbered(b'i', k, 20));
            }
            k += 1;
            next += Duration::from_millis(50);
        }
        dropped |= h.seen.server.iter().any(|e| {
            matches!(e, ServerEvent::Disconnected { conn, reason: DisconnectReason::NoAcks } if *conn == bad)
        });
    });
    assert!(dropped, "the client that never acks was cut off");
    let between = |from: SocketAddr, to: SocketAddr| -> usize {
        h.sizes[mark..]
            .iter()
            .filter(|&&(f, t, _)| f == from && t == to)
            .map(|&(_, _, len)| len)
            .sum()
    };
    let received = between(addr(SERVER), client_addr(0));
    let sent = between(client_addr(0), addr(SERVER));
    let bound = (16 * 1024).max(3 * sent);
    assert!(
        received <= bound,
        "received {received} bytes having sent {sent} and acked none (bound {bound})"
    );
    assert!(h.clients[1].is_connected(), "the honest client stays");
    let got = h.client_messages(1);
    assert!(
        got.contains(&snapshot),
        "the honest client got the snapshot"
    );
    assert_eq!(got.len() as u32, k + 1, "and every bundle");
}

/// A server that restarted (a new process: no connections) tells a client
/// whose data it cannot place that it does not know it, in a reply no
/// larger than the packet; the client, silent since the restart, closes
/// with `Forgotten` after 1 s instead of waiting out its 5 s timeout, and a
/// healthy client ignores the same notice forged.
#[test]
fn a_restarted_server_makes_its_old_clients_reconnect_within_a_second_of_silence() {
    let cfg = TransportConfig::default();
    let link = LinkConfig::with_latency(Duration::from_millis(10));
    let mut h = Harness::new(2, link, cfg, 5);
    h.connect();
    // A forged notice to a healthy client (heard from the server just now).
    let mut forged = Vec::new();
    wire::Packet::Denied {
        protocol_id: cfg.protocol_id,
        client_salt: 0,
        reason: wire::DenyReason::UnknownConnection,
    }
    .encode(&mut forged);
    let now = h.now;
    h.clients[1].handle_datagram(now, addr(SERVER), &forged);
    assert!(
        h.clients[1].is_connected(),
        "a forged notice broke a live link"
    );
    // The server restarts.
    h.server = Server::new(cfg, [9; 32]);
    let restarted = h.now;
    h.run_until(restarted + Duration::from_secs(4), |_| {});
    assert!(h.server.counters().unknown_sender > 0);
    for i in 0..2 {
        let reason = h.seen.client[i].iter().find_map(|e| match e {
            ClientEvent::Disconnected(r) => Some(*r),
            _ => None,
        });
        assert_eq!(reason, Some(DisconnectReason::Forgotten), "client {i}");
        assert!(!h.clients[i].is_connected());
    }
    for &(from, _, len) in &h.sizes {
        if from == addr(SERVER) {
            assert!(len <= 64, "a reply of {len} bytes");
        }
    }
}
