//! What a connection holds in memory: sized to what is in flight, not to
//! the largest windows (a relay holds four connections per match, so its
//! matches per GiB come from these figures). Counted from lengths and
//! capacities (`ConnMemory`), so the bounds are exact, not timing.

use super::*;
use crate::transport::acks::{
    AckEvent, BulkSerials, MIN_SENT_RECORDS, MessageIds, SENT_WINDOW, SentPackets,
};
use crate::transport::messages::Incoming;
use crate::transport::rtt::RttEstimator;
use std::collections::VecDeque;

const KIB: usize = 1024;

/// Before: 1024 sent-packet records (80 KiB), a 1024-slot reorder ring
/// (32 KiB), 256 receive times (6 KiB), 256 unreliable-id slots (1 KiB)
/// and 2.5 KiB inline: about 122 KiB per connection whatever its traffic.
/// Now the inline fields (keys, counters, rate meters, the RTT sample
/// ring, the loss window's bits) are most of it.
const STEADY_BOUND: usize = 7 * KIB;

/// The records of the fewest packets kept (32 of 80-odd bytes) and the
/// list of those in flight.
const MIN_RECORDS_BOUND: usize = 3 * KIB;

fn assert_steady(what: &str, m: &ConnMemory) {
    eprintln!("{what}: {m:?} = {} B", m.total());
    assert!(m.sent <= MIN_RECORDS_BOUND, "{what}: {m:?}");
    assert!(m.total() <= STEADY_BOUND, "{what}: {m:?}");
}

#[test]
fn steady_turn_traffic_holds_a_few_kib_per_connection() {
    let link = LinkConfig::with_latency(Duration::from_millis(40));
    let (h, count) = turn_traffic(link, 3, 120, 2);
    assert_exactly_once_in_order(&h, count);
    let server = h.server.conn_memory(h.conn_of(0)).unwrap();
    assert_steady("server, steady", &server);
    assert_steady("client, steady", &h.clients[0].memory());
    // Nothing waits ahead of a gap on a link that loses nothing.
    assert!(server.incoming <= 16 * 32, "{server:?}");
    assert_eq!(h.server.memory(), server, "one connection: the sum is it");
}

#[test]
fn lossy_turn_traffic_holds_a_few_kib_per_connection() {
    let link = LinkConfig {
        latency: Duration::from_millis(100),
        jitter: Duration::from_millis(30),
        loss: 0.2,
        duplicate: 0.05,
        reorder: 0.05,
        ..LinkConfig::default()
    };
    let (h, count) = turn_traffic(link, 11, 60, 5);
    assert_exactly_once_in_order(&h, count);
    assert_steady(
        "server, 20% loss",
        &h.server.conn_memory(h.conn_of(0)).unwrap(),
    );
    assert_steady("client, 20% loss", &h.clients[0].memory());
}

/// A 325 KB bulk transfer puts more packets in flight: the sent
/// records grow to cover them (none still awaited is overwritten), then
/// shrink back once the transfer is done.
#[test]
fn sent_records_grow_for_a_burst_and_shrink_after_it() {
    let link = LinkConfig {
        latency: Duration::from_millis(25),
        loss: 0.05,
        ..LinkConfig::default()
    };
    let mut h = Harness::new(1, link, TransportConfig::default(), 5);
    h.connect();
    let conn = h.conn_of(0);
    let data: Vec<u8> = (0..325 * 1024u32)
        .map(|i| (i * 7 + i / 251) as u8)
        .collect();
    h.server.send(conn, Channel::Bulk, &data).unwrap();
    let mut most = 0;
    let mut next = h.now;
    let mut k = 0u32;
    let stop = h.now + Duration::from_secs(15);
    h.run_until(stop, |h| {
        most = most.max(h.server.conn_memory(conn).map_or(0, |m| m.sent));
        while h.now >= next {
            h.server
                .send(conn, Channel::Reliable, &numbered(b't', k, 60))
                .unwrap();
            k += 1;
            next += Duration::from_millis(100);
        }
    });
    assert!(
        h.client_messages(0).contains(&data),
        "the transfer completed"
    );
    eprintln!("bulk burst: sent records peaked at {most} B");
    // At 50 ms RTT the bulk path keeps some 40 packets in flight: 64 records.
    assert!(most > MIN_RECORDS_BOUND, "the records grew: {most} B");
    assert_steady(
        "server, after the burst",
        &h.server.conn_memory(conn).unwrap(),
    );
}

/// The records follow the packets awaited: 500 in flight keep 512
/// records, and every one of them is acked with what it carried; once
/// they are resolved the records halve back down to the fewest.
#[test]
fn sent_records_cover_every_packet_in_flight() {
    let mut s = SentPackets::default();
    let mut rtt = RttEstimator::default();
    let ms = Instant::from_millis;
    assert_eq!(s.records(), MIN_SENT_RECORDS);
    for seq in 0..500u16 {
        let ids: MessageIds = [seq].into_iter().collect();
        s.on_sent(seq, ms(u64::from(seq)), 100, true, ids, BulkSerials::new());
    }
    assert_eq!(s.records(), 512);
    assert!(s.records() <= SENT_WINDOW);
    // Ack them all, 33 at a time from the oldest: each ack hands back the
    // message id its packet carried.
    let mut acked = Vec::new();
    let mut ev = Vec::new();
    for top in (32..500u16).step_by(33).chain([499]) {
        s.on_ack(top, u32::MAX, 0, ms(600), &mut rtt, &mut ev);
        for e in ev.drain(..) {
            if let AckEvent::Acked { seq, messages, .. } = e {
                assert_eq!(messages.as_slice(), [seq]);
                acked.push(seq);
            }
        }
    }
    acked.sort_unstable();
    assert_eq!(acked, (0..500).collect::<Vec<_>>());
    // Non-eliciting keep-alive traffic now: the records halve per packet
    // sent down to the fewest; the loss window still counts all 500.
    for seq in 500..520u16 {
        s.on_sent(
            seq,
            ms(700),
            30,
            false,
            MessageIds::new(),
            BulkSerials::new(),
        );
    }
    assert_eq!(s.records(), MIN_SENT_RECORDS);
    assert!(s.loss() == 0.0 && s.total_acked == 500);
}

/// A late ack of a packet declared lost undoes the loss even after its
/// record is gone (the loss window keeps its fate in bits).
#[test]
fn a_late_ack_undoes_a_loss_after_the_record_is_gone() {
    let mut s = SentPackets::default();
    let mut rtt = RttEstimator::default();
    let ms = Instant::from_millis;
    let mut ev = Vec::new();
    s.on_sent(0, ms(0), 100, true, MessageIds::new(), BulkSerials::new());
    s.detect_lost(ms(2000), Duration::from_millis(500), &mut ev);
    assert_eq!(ev, [AckEvent::Lost(0)]);
    assert!((s.loss() - 1.0).abs() < 1e-9);
    // 100 packets later its record was overwritten (32 are kept); each of
    // those is acked as it goes.
    for seq in 1..=100u16 {
        s.on_sent(
            seq,
            ms(2000),
            100,
            true,
            MessageIds::new(),
            BulkSerials::new(),
        );
        s.on_ack(seq, 0, 0, ms(2001), &mut rtt, &mut Vec::new());
    }
    assert_eq!(s.records(), MIN_SENT_RECORDS);
    assert_eq!((s.total_acked, s.total_lost), (100, 1));
    ev.clear();
    // A stale header acks packet 0 at last.
    s.on_ack(0, 0, 0, ms(2100), &mut rtt, &mut ev);
    assert_eq!(
        ev,
        [AckEvent::Acked {
            seq: 0,
            messages: MessageIds::new(),
            bulk: BulkSerials::new()
        }]
    );
    assert_eq!((s.total_acked, s.total_lost), (101, 0));
    assert!(s.loss() == 0.0);
}

/// Frames ahead of a gap are held as deep as the gap, and the room goes
/// once the gap is filled.
#[test]
fn the_reorder_room_follows_the_gap() {
    let mut inc = Incoming::new(64 * 1024);
    let mut out = VecDeque::new();
    assert_eq!(inc.heap_bytes(), 0);
    for id in 1..=500u16 {
        inc.on_reliable(id, None, &[1, 2, 3], &mut out);
    }
    assert!(out.is_empty(), "all wait for id 0");
    let deep = inc.heap_bytes();
    assert!(deep >= 500 * 3, "{deep} B");
    inc.on_reliable(0, None, &[0], &mut out);
    assert_eq!(out.len(), 501);
    assert_eq!(inc.heap_bytes(), 0, "the room of a deep gap is freed");
    // In order, nothing is held.
    inc.on_reliable(501, None, &[5], &mut out);
    assert_eq!(out.len(), 502);
    assert!(inc.heap_bytes() <= 16 * 64);
}
