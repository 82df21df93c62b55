//! Unit tests of the message layer: the resend policy, ride-along copies,
//! windows, reassembly and redundancy.

use super::*;
use crate::wire::{Packet, decode};

fn frames_of(bytes: &[u8]) -> Vec<(u16, Option<Fragment>, Vec<u8>, bool)> {
    // Wrap the frames in a fake packet to reuse the decoder.
    let mut p = vec![0x1F, 0, 0, 0, 0];
    p.extend_from_slice(bytes);
    p.extend_from_slice(&[0; TAG_LEN]);
    match decode(&p).unwrap() {
        Packet::Authed { frames, .. } => frames
            .into_iter()
            .map(|f| match f {
                Frame::Reliable { id, fragment, data } => (id, fragment, data.to_vec(), true),
                Frame::Unreliable { id, data } => (id, None, data.to_vec(), false),
                Frame::Ping | Frame::Bulk { .. } => unreachable!(),
            })
            .collect(),
        _ => unreachable!(),
    }
}

const T0: Instant = Instant::from_millis(0);
const GAP: Duration = Duration::from_millis(33);

const MS: Duration = Duration::from_millis(1);

fn at(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

fn policy(lost_before: Option<Instant>) -> Resend {
    Resend {
        interval: GAP,
        lost_before,
        timeout: Duration::from_millis(100),
    }
}

#[test]
fn reliable_messages_are_resent_only_when_presumed_lost_and_ride_along_in_spare_room() {
    let mut o = Outgoing::new(64, 1 << 20);
    for i in 0..3u8 {
        o.send_reliable(&[i; 400]).unwrap();
    }
    let r = policy(None);
    let fill = |o: &mut Outgoing, now: Instant, r: Resend, budget: usize| {
        let (mut buf, mut ids) = (Vec::new(), crate::transport::acks::MessageIds::new());
        o.fill(now, r, budget, 0, &mut buf, &mut ids);
        ids.to_vec()
    };
    assert_eq!(
        fill(&mut o, at(0), r, 900),
        vec![0, 1],
        "oldest first, third does not fit"
    );
    assert_eq!(fill(&mut o, at(10), r, 410), vec![2], "no room for a copy");
    assert!(!o.has_fresh());
    assert_eq!(
        o.next_due(r),
        Some(at(100)),
        "no repeat before the backstop"
    );
    // New data gets the packet first; the room left carries a copy of an
    // un-acked message, fewest copies first (then oldest).
    o.send_reliable(b"fresh").unwrap();
    assert_eq!(fill(&mut o, at(20), r, 500), vec![3, 0]);
    // The packet of 10 ms (message 2) is acked: message 1, last sent at 0,
    // fell in the gap; message 0 has a younger copy (20 ms) still in flight.
    o.on_acked(&[2]);
    let r = policy(Some(at(10) - MS));
    assert_eq!(o.next_due(r), Some(at(0)), "message 1 is due at once");
    assert_eq!(
        fill(&mut o, at(30), r, 1200),
        vec![1, 3, 0],
        "resend, then ride-along"
    );
    assert_eq!(
        o.next_due(r),
        Some(at(130)),
        "every copy is younger than the acked packet"
    );
    o.on_acked(&[1]);
    assert_eq!(o.unacked(), 4, "window slides only past the oldest");
    o.on_acked(&[0, 3]);
    assert_eq!(o.unacked(), 0);
    assert_eq!(o.next_due(r), None);
}

#[test]
fn ride_along_leaves_room_for_the_bulk_fragment() {
    let mut o = Outgoing::new(64, 1 << 20);
    o.send_reliable(&[1; 300]).unwrap();
    let (mut buf, mut ids) = (Vec::new(), crate::transport::acks::MessageIds::new());
    o.fill(T0, Resend::every(GAP), 1000, 0, &mut buf, &mut ids);
    ids.clear();
    // Not due: it may only ride along, and only outside the kept room.
    o.fill(at(1), policy(None), 1000, 800, &mut buf, &mut ids);
    assert!(ids.is_empty());
    o.fill(at(2), policy(None), 1000, 600, &mut buf, &mut ids);
    assert_eq!(ids.to_vec(), vec![0]);
}

#[test]
fn window_full_and_size_limits() {
    let mut o = Outgoing::new(4, 3000);
    o.send_reliable(&[0; 2500]).unwrap(); // 3 fragments
    assert_eq!(o.unacked(), 3);
    assert_eq!(
        o.send_reliable(&[0; 2000]),
        Err(SendError::WindowFull { unacked: 3, max: 4 })
    );
    o.send_reliable(b"x").unwrap();
    assert!(o.is_full());
    assert_eq!(
        o.send_reliable(&[0; 3001]),
        Err(SendError::TooLarge {
            len: 3001,
            max: 3000
        })
    );
    assert!(matches!(
        o.send_unreliable(&[0; MAX_UNRELIABLE + 1]),
        Err(SendError::TooLarge { .. })
    ));
}

#[test]
fn in_order_exactly_once_with_reassembly() {
    let mut o = Outgoing::new(64, 1 << 20);
    let no_loss = Resend {
        timeout: Duration::from_secs(1),
        ..Resend::every(GAP)
    };
    let big: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
    o.send_reliable(b"a").unwrap();
    o.send_reliable(&big).unwrap();
    o.send_reliable(b"c").unwrap();
    let mut all = Vec::new();
    let mut now = T0;
    for _ in 0..4 {
        let (mut buf, mut ids) = (Vec::new(), crate::transport::acks::MessageIds::new());
        o.fill(now, no_loss, 1150, 0, &mut buf, &mut ids);
        all.extend(frames_of(&buf));
        now += GAP;
    }
    let mut inc = Incoming::new(1 << 20);
    let mut out = VecDeque::new();
    // Deliver in reverse, twice: order and uniqueness must come out right.
    for (id, frag, data, _) in all.iter().rev().chain(all.iter()) {
        inc.on_reliable(*id, *frag, data, &mut out);
    }
    let got: Vec<Vec<u8>> = out.into_iter().collect();
    assert!(
        got == vec![b"a".to_vec(), big, b"c".to_vec()],
        "wrong delivery"
    );
    assert!(inc.duplicates > 0);
}

#[test]
fn reassembly_caps_and_broken_sequences_drop_the_message_only() {
    let mut inc = Incoming::new(1500);
    let mut out = VecDeque::new();
    let f = |index, count| Some(Fragment { index, count });
    inc.on_reliable(0, f(0, 2), &[1; 1024], &mut out);
    inc.on_reliable(1, f(1, 2), &[1; 1024], &mut out); // 2048 > 1500
    assert!(out.is_empty());
    assert_eq!(inc.reassembly_dropped, 1);
    // A fragment tail without its head, then a wrong count.
    inc.on_reliable(2, f(1, 3), b"t", &mut out);
    inc.on_reliable(3, f(0, 2), b"h", &mut out);
    inc.on_reliable(4, f(1, 3), b"x", &mut out);
    assert_eq!(inc.reassembly_dropped, 2);
    inc.on_reliable(5, None, b"ok", &mut out);
    assert_eq!(out, VecDeque::from(vec![b"ok".to_vec()]));
    // Far outside the window: ignored.
    inc.on_reliable(5 + RECV_WINDOW as u16, None, b"far", &mut out);
    assert_eq!(out.len(), 1);
}

/// Packet send times (ms after `T0`) of message 0 over 100 ms when the
/// sender is polled every millisecond and sends whenever it asks to.
fn send_times(o: &mut Outgoing) -> Vec<u64> {
    let mut times = Vec::new();
    let mut now = T0;
    while now < T0 + Duration::from_millis(100) {
        let fresh = o.has_fresh().then_some(T0);
        let want = [fresh, o.next_copy(GAP), o.next_due(Resend::every(GAP))]
            .into_iter()
            .flatten()
            .min();
        if want.is_some_and(|t| t <= now) {
            let (mut buf, mut ids) = (Vec::new(), crate::transport::acks::MessageIds::new());
            o.fill(now, Resend::every(GAP), 1000, 0, &mut buf, &mut ids);
            assert_eq!(ids.to_vec(), vec![0]);
            times.push(now.as_micros() / 1000);
        }
        now += Duration::from_millis(1);
    }
    times
}

#[test]
fn redundancy_repeats_new_urgent_messages_early() {
    let mut o = Outgoing::new(8, 1 << 16);
    o.copies = 2;
    o.send_urgent(b"turn").unwrap();
    assert!(o.has_fresh());
    // Two early copies 11 ms apart, then one repeat per 33 ms interval.
    assert_eq!(send_times(&mut o), vec![0, 11, 22, 55, 88]);
    o.copies = 0;
    assert_eq!(o.next_copy(GAP), None);
    assert_eq!(
        o.next_due(Resend::every(GAP)),
        Some(Instant::from_millis(121))
    );
}

#[test]
fn an_urgent_message_gets_its_early_copy_and_a_plain_reliable_one_does_not() {
    // One copy, as at 5 % measured loss.
    assert_eq!(copies_for_loss(0.05), 1);
    let mut urgent = Outgoing::new(8, 1 << 16);
    urgent.copies = 1;
    urgent.send_urgent(b"input").unwrap();
    // The copy half an interval (16.5 ms) later, then the repeats of the policy.
    assert_eq!(send_times(&mut urgent), vec![0, 17, 50, 83]);
    let mut plain = Outgoing::new(8, 1 << 16);
    plain.copies = 1;
    plain.send_reliable(b"hash").unwrap();
    // Sent once, then only the interval's repeats.
    assert_eq!(send_times(&mut plain), vec![0, 33, 66, 99]);
}

#[test]
fn copies_follow_the_measured_loss_and_unreliable_messages_go_once() {
    assert_eq!(copies_for_loss(0.0), 0);
    assert_eq!(copies_for_loss(0.02), 0);
    assert_eq!(copies_for_loss(0.025), 1);
    assert_eq!(copies_for_loss(0.05), 1);
    assert_eq!(copies_for_loss(0.07), 1);
    assert_eq!(copies_for_loss(0.075), 2);
    assert_eq!(copies_for_loss(0.1), 2);
    assert_eq!(copies_for_loss(0.2), 2);
    assert_eq!(copies_for_loss(0.25), 3);
    assert_eq!(copies_for_loss(0.9), 3);
    let mut o = Outgoing::new(8, 1 << 16);
    o.copies = 2;
    o.send_unreliable(b"ping").unwrap();
    let mut inc = Incoming::new(1 << 16);
    let mut delivered = 0;
    for k in 0..3 {
        let (mut buf, mut ids) = (Vec::new(), crate::transport::acks::MessageIds::new());
        o.fill(T0, Resend::every(GAP), 1000, 0, &mut buf, &mut ids);
        let frames = frames_of(&buf);
        assert_eq!(frames.len(), usize::from(k < 1), "packet {k}");
        for (id, _, data, _) in frames {
            delivered += usize::from(inc.on_unreliable(id, &data).is_some());
        }
    }
    assert_eq!(delivered, 1);
    assert!(!o.has_fresh() && o.next_due(Resend::every(GAP)).is_none());
}

/// A peer that sends frames far ahead of a gap cannot make the receiver
/// hold more than the reorder cap: frames beyond it are refused (the
/// caller leaves their packet unacknowledged), the next in-order frame is
/// always taken, and the refused ones, sent again, complete the stream.
#[test]
fn frames_ahead_of_a_gap_are_held_only_up_to_the_reorder_cap() {
    let cap = 10 * 1000;
    let mut inc = Incoming::new(1 << 20).with_reorder_cap(cap);
    let mut out = VecDeque::new();
    let msg = |id: u16| vec![id as u8; 1000];
    // Ids 1..1023 arrive, 0 is missing: only ten fit the cap.
    let taken: Vec<u16> = (1..RECV_WINDOW as u16)
        .filter(|&id| inc.on_reliable(id, None, &msg(id), &mut out))
        .collect();
    assert_eq!(taken, (1..=10).collect::<Vec<u16>>());
    assert_eq!(inc.held_bytes(), cap);
    assert_eq!(inc.reorder_refused, RECV_WINDOW as u64 - 11);
    assert!(out.is_empty());
    // The gap fills: 0..=10 are delivered, and the buffer is empty again.
    assert!(inc.on_reliable(0, None, &msg(0), &mut out));
    assert_eq!(out.len(), 11);
    assert_eq!(inc.held_bytes(), 0);
    // The sender resends what was refused: everything arrives, in order.
    for id in 11..RECV_WINDOW as u16 {
        assert!(inc.on_reliable(id, None, &msg(id), &mut out));
    }
    let got: Vec<Vec<u8>> = out.into_iter().collect();
    assert_eq!(got, (0..RECV_WINDOW as u16).map(msg).collect::<Vec<_>>());
}
