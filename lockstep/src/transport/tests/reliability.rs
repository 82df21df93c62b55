//! Delivery, measurement, pacing, redundancy and congestion under impairment.

use super::*;

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
    // The cheap figures a session is fed on every pump are the same ones.
    let cheap = h.clients[0].estimate();
    assert_eq!(
        (cheap.rtt, cheap.jitter, cheap.loss, cheap.rtt_p99),
        (stats.rtt, stats.jitter, stats.loss, stats.rtt_p99)
    );
    assert!(cheap.rtt_p99 > cheap.rtt && cheap.loss > 0.1);
    let sstats = h.server.stats(h.conn_of(0)).unwrap();
    assert!(
        (sstats.loss - 0.2).abs() <= 0.03,
        "server loss {:.3}",
        sstats.loss
    );
    // Packets go when there is something to say: about one per message each way.
    assert!(stats.packets_lost > 0 && stats.packets_acked > 400);
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
fn small_messages_above_the_packet_rate_are_not_held_by_pacing() {
    // 33 ms turns: a hash every turn (30/s, the good-mode packet rate) and
    // the player's commands between them, 40 small messages a second. The
    // bucket is charged by size, so none waits for a token; a pure packet
    // count held every message past the thirtieth of each second.
    let link = LinkConfig::with_latency(Duration::from_millis(30));
    let mut h = Harness::new(1, link, TransportConfig::default(), 15);
    h.connect();
    let conn = h.conn_of(0);
    let mut buf = Vec::new();
    for k in 0..80u32 {
        let t = h.now + Duration::from_millis(25);
        h.run_until(t, |_| {});
        h.flush();
        h.clients[0]
            .send(Channel::Reliable, &numbered(b's', k, 20))
            .unwrap();
        let to = h.clients[0].poll_transmit(h.now, &mut buf);
        assert_eq!(to, Some(addr(SERVER)), "message {k} left at once");
        h.net.send(h.now, client_addr(0), addr(SERVER), &buf);
    }
    let t = h.now + Duration::from_secs(1);
    h.run_until(t, |_| {});
    assert_eq!(h.server_messages(conn).len(), 80);
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
        h.server.send(
            conn,
            Channel::Reliable,
            &vec![0; crate::proto::MAX_MESSAGE_LEN + 1]
        ),
        Err(SendError::TooLarge { .. })
    ));
    let t = h.now + Duration::from_secs(10);
    h.run_until(t, |_| {});
    let got = h.client_messages(0);
    assert_eq!(got.len(), 2);
    assert!(got[0] == big);
    assert_eq!(got[1], b"after");
}

/// The largest bundle a match of 32 players can be sent (every player at
/// its share of the bundle's input budget) passes the transport's default
/// message limit, fragments and is reassembled over a lossy link, and
/// decodes to what was sent.
#[test]
fn the_largest_32_player_bundle_is_fragmented_delivered_and_decoded() {
    let link = LinkConfig {
        latency: Duration::from_millis(30),
        loss: 0.05,
        reorder: 0.05,
        ..LinkConfig::default()
    };
    let mut h = Harness::new(1, link, TransportConfig::default(), 32);
    h.connect();
    let conn = h.conn_of(0);
    let bundle = crate::proto::tests::largest_bundle(sim::MAX_PLAYERS);
    let bytes = bundle.to_bytes();
    // More fragments than one, fewer than the reassembly cap.
    let pieces = bytes.len().div_ceil(crate::wire::FRAGMENT_SIZE);
    assert!(
        (2..=crate::wire::MAX_FRAGMENTS).contains(&pieces),
        "{pieces}"
    );
    h.server.send(conn, Channel::Reliable, &bytes).unwrap();
    let t = h.now + Duration::from_secs(10);
    h.run_until(t, |_| {});
    let got = h.client_messages(0);
    assert_eq!(got.len(), 1);
    // Not `assert_eq!`: a failure would print 68 KB of bundle.
    assert!(crate::proto::ToPeer::decode(&got[0]) == Ok(bundle));
}

#[test]
fn redundancy_cuts_the_urgent_latency_tail_under_loss_and_spares_plain_reliable() {
    let run = |redundancy: bool, channel: Channel| {
        let link = LinkConfig {
            latency: Duration::from_millis(50),
            loss: 0.2,
            ..LinkConfig::default()
        };
        let cfg = TransportConfig {
            redundancy,
            ..TransportConfig::default()
        };
        let mut h = Harness::new(1, link, cfg, 23);
        h.connect();
        let conn = h.conn_of(0);
        let mut delays: Vec<u64> = Vec::new();
        let mut seen = 0;
        let mut next = h.now;
        let stop = h.now + Duration::from_secs(60);
        let end = stop + Duration::from_secs(2);
        h.run_until(end, |h| {
            let msgs = h.server_messages(conn);
            for m in &msgs[seen..] {
                let sent = u64::from_le_bytes(m[..8].try_into().unwrap());
                delays.push(h.now.as_micros() - sent);
            }
            seen = msgs.len();
            while h.now >= next && h.now < stop {
                let stamp = h.now.as_micros().to_le_bytes();
                h.clients[0].send(channel, &stamp).unwrap();
                next += Duration::from_millis(100);
            }
        });
        // The first seconds measure loss; judge the steady state.
        let steady = &mut delays[50..];
        steady.sort_unstable();
        let p = |q: usize| steady[steady.len() * q / 100] as f64 / 1000.0;
        (p(50), p(90), p(99), h.clients[0].stats().redundancy_copies)
    };
    let (p50a, p90a, p99a, _) = run(false, Channel::Urgent);
    let (p50b, p90b, p99b, copies) = run(true, Channel::Urgent);
    // Plain reliable messages get no copies: the same tail as without redundancy.
    let (_, p90c, _, _) = run(true, Channel::Reliable);
    eprintln!(
        "reliable one-way latency at 20% loss, 50 ms link: plain p50/p90/p99 {p50a:.0}/{p90a:.0}/{p99a:.0} ms, \
         redundant ({copies} copies) {p50b:.0}/{p90b:.0}/{p99b:.0} ms"
    );
    assert_eq!(copies, 2);
    assert!((50.0..52.0).contains(&p50a) && (50.0..52.0).contains(&p50b));
    assert!(
        p90a >= 80.0,
        "without redundancy a lost packet costs one interval"
    );
    assert!(p90b < 65.0, "early copies hide most single losses: {p90b}");
    assert!(p99b < p99a, "tail shrinks: {p99b} vs {p99a}");
    assert!(
        p90c >= 80.0,
        "plain reliable messages get no early copy: {p90c}"
    );
}

#[test]
fn congestion_mode_follows_rtt_and_throttles_the_packet_rate() {
    let fast = LinkConfig::with_latency(Duration::from_millis(40));
    let slow = LinkConfig::with_latency(Duration::from_millis(200));
    let mut h = Harness::new(1, fast, TransportConfig::default(), 24);
    h.connect();
    let mut k = 0u32;
    // Continuous reliable traffic, a message every 20 ms.
    let mut feed = |h: &mut Harness| {
        if h.clients[0].stats().unacked < 64 {
            let _ = h.clients[0].send(Channel::Reliable, &numbered(b'f', k, 30));
            k += 1;
        }
    };
    let t = h.now + Duration::from_secs(3);
    h.run_until(t, &mut feed);
    let good = h.clients[0].stats();
    assert_eq!(good.mode, CongestionMode::Good);
    assert!(
        good.sent_pps > 25.0,
        "good mode sends ~30 packets/s: {}",
        good.sent_pps
    );
    h.net.set_all(slow);
    let t = h.now + Duration::from_secs(3);
    h.run_until(t, &mut feed);
    let bad = h.clients[0].stats();
    assert_eq!(bad.mode, CongestionMode::Bad, "400 ms RTT is over 250 ms");
    assert!(
        bad.sent_pps <= 13.0,
        "bad mode throttles to ~10 packets/s: {}",
        bad.sent_pps
    );
    h.net.set_all(fast);
    // Good again after the recovery time t (8 s: Good lasted < 10 s, so 4 s doubled).
    let t = h.now + Duration::from_secs(5);
    h.run_until(t, &mut feed);
    assert_eq!(
        h.clients[0].stats().mode,
        CongestionMode::Bad,
        "still serving t"
    );
    let t = h.now + Duration::from_secs(5);
    h.run_until(t, &mut feed);
    assert_eq!(h.clients[0].stats().mode, CongestionMode::Good);
    // Delivered in order, nothing lost; only the last few may still be un-acked.
    let got = h.server_messages(h.conn_of(0));
    let unacked = h.clients[0].stats().unacked as u32;
    assert!(got.len() as u32 >= k - unacked && got.len() as u32 <= k);
    for (i, m) in got.iter().enumerate() {
        assert!(*m == numbered(b'f', i as u32, 30));
    }
}

/// With a reorder cap far below what the sender has in flight, the frames
/// refused ahead of a gap are resent (their packets went unacknowledged):
/// every message arrives once, in order, under 10 % loss, and the cap held.
#[test]
fn a_small_reorder_cap_refuses_frames_ahead_of_a_gap_but_loses_nothing() {
    let link = LinkConfig {
        latency: Duration::from_millis(30),
        loss: 0.1,
        reorder: 0.1,
        ..LinkConfig::default()
    };
    let cfg = TransportConfig {
        max_reorder_bytes: 8 * 1024,
        ..TransportConfig::default()
    };
    let mut h = Harness::new(1, link, cfg, 29);
    h.connect();
    let conn = h.conn_of(0);
    let sent: Vec<Vec<u8>> = (0..200).map(|i| numbered(b'r', i, 1000)).collect();
    let mut queued = 0;
    let t = h.now + Duration::from_secs(30);
    h.run_until(t, |h| {
        while queued < sent.len() && h.clients[0].send(Channel::Reliable, &sent[queued]).is_ok() {
            queued += 1;
        }
    });
    assert_eq!(
        h.server_messages(conn),
        sent,
        "every message once, in order"
    );
    let stats = h.server.stats(conn).unwrap();
    assert!(stats.reorder_refused > 0, "the cap was reached: {stats:?}");
    assert_eq!(h.server.counters().reorder_refused, stats.reorder_refused);
    assert!(h.clients[0].is_connected());
}
