//! Packet-level acknowledgement: what we received (to build `ack` /
//! `ack_bits` / `ack_delay`), and what we sent (to turn incoming acks into
//! `Acked(seq)` events and unanswered packets into `Lost(seq)` events, with
//! RTT samples and a windowed loss fraction).

use super::rtt::RttEstimator;
use super::sequence::{SeqBits, SequenceBuffer, sequence_greater_than};
use crate::time::{Duration, Instant};
use crate::wire::ACK_DELAY_UNKNOWN;
use smallvec::SmallVec;
use std::collections::VecDeque;

/// The reliable message ids one packet carried: inline up to 8 (a packet
/// carries a few), so recording a sent packet allocates nothing.
pub(crate) type MessageIds = SmallVec<[u16; 8]>;
/// The bulk fragment serials one packet carried (inline up to 2).
pub(crate) type BulkSerials = SmallVec<[u64; 2]>;

/// Received packets remembered (more than the 33 an ack covers, for late arrivals).
pub(crate) const RECEIVED_WINDOW: usize = 256;
/// Sent packets remembered at most; also the window of the loss estimate.
pub(crate) const SENT_WINDOW: usize = 1024;
/// Sent packets whose records (time, size, what they carried) are kept at
/// least: the records follow what is in flight, from this up to
/// [`SENT_WINDOW`], so an idle or steady connection holds 32, not 1024
/// (80 bytes each). Dozens of packets after its send a record is still
/// there for a late ack; past that a late ack still undoes a loss.
pub(crate) const MIN_SENT_RECORDS: usize = 32;

/// What the sent-packet tracker reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum AckEvent {
    /// The packet with this sequence was acknowledged (possibly after being declared lost).
    Acked {
        /// Its sequence.
        seq: u16,
        /// Reliable message ids it carried.
        messages: MessageIds,
        /// Bulk fragments it carried (the bulk sender's fragment serials).
        bulk: BulkSerials,
    },
    /// The packet was not acknowledged within the loss bound.
    Lost(u16),
}

/// Tracks packets received from the peer.
#[derive(Clone, Debug)]
pub(crate) struct ReceivedPackets {
    /// Which of the last [`RECEIVED_WINDOW`] packets arrived: a bit each
    /// (32 bytes, not a 6 KiB ring of arrival times: only the newest
    /// packet's time is ever read, for its ack delay).
    seen: SeqBits<{ RECEIVED_WINDOW / 64 }>,
    /// When the newest packet arrived.
    newest_at: Instant,
    /// Bit `n` set: packet `newest - n` was received. Kept as packets
    /// arrive, so an outgoing header's `ack_bits` is a shift, not 32
    /// look-ups in the buffer (every packet sent builds one).
    recent: u64,
}

impl Default for ReceivedPackets {
    fn default() -> Self {
        Self {
            seen: SeqBits::default(),
            newest_at: Instant::ZERO,
            recent: 0,
        }
    }
}

impl ReceivedPackets {
    /// Records packet `seq` as received at `now`; false if already known or too old.
    pub(crate) fn record(&mut self, seq: u16, now: Instant) -> bool {
        if self.seen.contains(seq) {
            return false;
        }
        let before = self.seen.newest();
        self.seen.advance(seq);
        if !self.seen.insert(seq) {
            return false;
        }
        if self.seen.newest() != before {
            self.newest_at = now;
        }
        match before {
            Some(newest) if sequence_greater_than(seq, newest) => {
                let ahead = u32::from(seq.wrapping_sub(newest));
                self.recent = self.recent.checked_shl(ahead).unwrap_or(0) | 1;
            }
            Some(newest) => {
                let behind = u32::from(newest.wrapping_sub(seq));
                if behind < 64 {
                    self.recent |= 1 << behind;
                }
            }
            None => self.recent = 1,
        }
        true
    }

    /// Whether anything was received yet.
    #[must_use]
    pub(crate) fn any(&self) -> bool {
        self.seen.newest().is_some()
    }

    /// Whether packet `seq` (one of the last [`RECEIVED_WINDOW`]) arrived.
    #[must_use]
    #[cfg(test)]
    pub(crate) fn contains(&self, seq: u16) -> bool {
        self.seen.contains(seq)
    }

    /// `(ack, ack_bits, ack_delay)` for an outgoing header at `now`.
    #[must_use]
    pub(crate) fn ack_fields(&self, now: Instant) -> (u16, u32, u8) {
        let Some(ack) = self.seen.newest() else {
            return (0, 0, ACK_DELAY_UNKNOWN);
        };
        // Bits 1..=32 of `recent`: the 32 packets before `ack`.
        #[allow(clippy::cast_possible_truncation)]
        let bits = (self.recent >> 1) as u32;
        let ms = (now.saturating_since(self.newest_at).as_micros() + 500) / 1000;
        let delay = u8::try_from(ms)
            .ok()
            .filter(|&d| d != ACK_DELAY_UNKNOWN)
            .unwrap_or(ACK_DELAY_UNKNOWN);
        (ack, bits, delay)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    InFlight,
    Acked,
    Lost,
}

#[derive(Clone, Debug)]
struct Sent {
    at: Instant,
    bytes: usize,
    /// Bytes sent on the connection up to and including this packet.
    through: u64,
    eliciting: bool,
    fate: Fate,
    messages: MessageIds,
    bulk: BulkSerials,
}

/// Tracks packets we sent until they are acked or declared lost.
#[derive(Clone, Debug)]
pub(crate) struct SentPackets {
    /// Records of the packets in flight and of the latest resolved ones:
    /// sized to what is in flight (from [`MIN_SENT_RECORDS`] up to
    /// [`SENT_WINDOW`]), so an ack-eliciting packet still awaited is never
    /// overwritten below the full window.
    buf: SequenceBuffer<Sent>,
    /// Ack-eliciting packets among the last [`SENT_WINDOW`] sent that were
    /// acked, and those declared lost: the loss estimate's window, kept in
    /// bits because most of those packets' records are gone.
    acked_bits: SeqBits<{ SENT_WINDOW / 64 }>,
    lost_bits: SeqBits<{ SENT_WINDOW / 64 }>,
    /// Ack-eliciting packets not yet resolved, oldest first.
    outstanding: VecDeque<u16>,
    acked_in_window: u32,
    lost_in_window: u32,
    /// Packets acknowledged (total).
    pub total_acked: u64,
    /// Packets declared lost and never acked later (total).
    pub total_lost: u64,
    /// Bytes acknowledged (total), for the acked-bandwidth meter.
    pub bytes_acked: u64,
    /// When the most recently sent of the packets acknowledged so far was
    /// sent: data whose last copy went out clearly before it and is still
    /// un-acked was presumably lost (the ack bitfield's gap), which lets
    /// the message layer resend it without waiting for a timer.
    pub newest_acked_sent: Option<Instant>,
    /// The highest sequence any header acked, and bit `n` set: packet
    /// `top - n` is known acked. A header repeats the 33 packets before
    /// its `ack`, most of them acked by the previous header already; only
    /// the new ones are looked up in the 1024-slot buffer (a cache miss
    /// each, a few percent of a busy relay's CPU).
    acked_known: Option<(u16, u64)>,
    /// Bytes sent (total).
    bytes_sent: u64,
    /// Bytes sent up to and including the newest packet acknowledged.
    acked_through: u64,
}

impl Default for SentPackets {
    fn default() -> Self {
        Self {
            buf: SequenceBuffer::new(MIN_SENT_RECORDS),
            acked_bits: SeqBits::default(),
            lost_bits: SeqBits::default(),
            outstanding: VecDeque::new(),
            acked_in_window: 0,
            lost_in_window: 0,
            total_acked: 0,
            total_lost: 0,
            bytes_acked: 0,
            newest_acked_sent: None,
            acked_known: None,
            bytes_sent: 0,
            acked_through: 0,
        }
    }
}

impl SentPackets {
    /// Records a packet just sent. Only ack-eliciting packets count towards loss.
    pub(crate) fn on_sent(
        &mut self,
        seq: u16,
        now: Instant,
        bytes: usize,
        eliciting: bool,
        messages: MessageIds,
        bulk: BulkSerials,
    ) {
        self.fit_records(seq);
        // Packets leaving the loss window (and the old fate of `seq`, were
        // it sent again: never, from a connection).
        self.acked_in_window -=
            self.acked_bits.advance(seq) + u32::from(self.acked_bits.remove(seq));
        self.lost_in_window -= self.lost_bits.advance(seq) + u32::from(self.lost_bits.remove(seq));
        self.bytes_sent += bytes as u64;
        let entry = Sent {
            at: now,
            bytes,
            through: self.bytes_sent,
            eliciting,
            fate: Fate::InFlight,
            messages,
            bulk,
        };
        // What this pushes out is resolved (or the window is full): its
        // fate, all the loss window needs, is in the bits.
        let _ = self.buf.insert(seq, entry);
        if eliciting {
            self.outstanding.push_back(seq);
        }
    }

    /// Applies an incoming header's acks; takes an RTT sample from `ack` when it
    /// is newly acknowledged and the peer says how long it held it.
    pub(crate) fn on_ack(
        &mut self,
        ack: u16,
        ack_bits: u32,
        ack_delay: u8,
        now: Instant,
        rtt: &mut RttEstimator,
        events: &mut Vec<AckEvent>,
    ) {
        // Bit n: packet `ack - n` (the header's ack itself, then its bits).
        let incoming = 1 | (u64::from(ack_bits) << 1);
        let known = match self.acked_known {
            None => 0,
            Some((top, mask)) if sequence_greater_than(ack, top) => mask
                .checked_shl(u32::from(ack.wrapping_sub(top)))
                .unwrap_or(0),
            Some((top, mask)) => mask
                .checked_shr(u32::from(top.wrapping_sub(ack)))
                .unwrap_or(0),
        };
        self.acked_known = Some(match self.acked_known {
            Some((top, mask)) if !sequence_greater_than(ack, top) => {
                let behind = u32::from(top.wrapping_sub(ack));
                (top, mask | incoming.checked_shl(behind).unwrap_or(0))
            }
            _ => (ack, known | incoming),
        });
        let fresh = incoming & !known;
        for n in 0..=32u16 {
            let seq = ack.wrapping_sub(n);
            if fresh & (1 << n) == 0 {
                continue;
            }
            let Some(e) = self.buf.get_mut(seq) else {
                self.ack_unrecorded(seq, events);
                continue;
            };
            if e.fate == Fate::Acked {
                continue;
            }
            if n == 0 && ack_delay != ACK_DELAY_UNKNOWN {
                let held = Duration::from_millis(u64::from(ack_delay));
                let sample = now.saturating_since(e.at).saturating_sub(held);
                rtt.sample(sample);
            }
            if e.eliciting {
                if e.fate == Fate::Lost {
                    self.lost_in_window -= u32::from(self.lost_bits.remove(seq));
                    self.total_lost -= 1;
                }
                self.acked_in_window += u32::from(self.acked_bits.insert(seq));
                self.total_acked += 1;
            }
            e.fate = Fate::Acked;
            self.bytes_acked += e.bytes as u64;
            self.acked_through = self.acked_through.max(e.through);
            if self.newest_acked_sent.is_none_or(|t| e.at > t) {
                self.newest_acked_sent = Some(e.at);
            }
            events.push(AckEvent::Acked {
                seq,
                messages: std::mem::take(&mut e.messages),
                bulk: std::mem::take(&mut e.bulk),
            });
        }
        // Resolved packets leave the front of `outstanding` now, so
        // `next_loss_deadline` (asked on every wake-up) finds the oldest
        // packet in flight at the front instead of walking past them.
        while let Some(&s) = self.outstanding.front() {
            if self.buf.get(s).is_some_and(|e| e.fate == Fate::InFlight) {
                break;
            }
            self.outstanding.pop_front();
        }
    }

    /// A late ack of a packet whose record was overwritten: if it had been
    /// declared lost, the loss is undone (its fate is still in the bits);
    /// what it carried was sent again meanwhile, so nothing else is owed.
    fn ack_unrecorded(&mut self, seq: u16, events: &mut Vec<AckEvent>) {
        if !self.lost_bits.remove(seq) {
            return;
        }
        self.lost_in_window -= 1;
        self.total_lost -= 1;
        self.acked_in_window += u32::from(self.acked_bits.insert(seq));
        self.total_acked += 1;
        events.push(AckEvent::Acked {
            seq,
            messages: MessageIds::new(),
            bulk: BulkSerials::new(),
        });
    }

    /// Sizes the records for sending `seq`: at least every packet from the
    /// oldest still awaited to `seq` (doubling up to [`SENT_WINDOW`]), and
    /// halved when those span an eighth of it or less, so a burst (a bulk
    /// transfer, a stall) does not keep its memory.
    fn fit_records(&mut self, seq: u16) {
        let span = self
            .outstanding
            .front()
            .map_or(1, |&old| usize::from(seq.wrapping_sub(old)) + 1);
        let cap = self.buf.capacity();
        if span > cap && cap < SENT_WINDOW {
            self.buf.resize(span.next_power_of_two().min(SENT_WINDOW));
        } else if span <= cap / 8 && cap > MIN_SENT_RECORDS {
            self.buf.resize(cap / 2);
        }
    }

    /// Bytes this tracker keeps on the heap.
    #[must_use]
    pub(crate) fn heap_bytes(&self) -> usize {
        self.buf.heap_bytes() + self.outstanding.capacity() * std::mem::size_of::<u16>()
    }

    /// Packets whose records are kept now (see [`MIN_SENT_RECORDS`]).
    #[must_use]
    #[cfg(test)]
    pub(crate) fn records(&self) -> usize {
        self.buf.capacity()
    }

    /// Bytes sent after the newest packet the peer acknowledged: what it
    /// has not confirmed receiving, whatever became of it (lost or not).
    /// A peer that acks keeps this near one round trip of sending; one
    /// that never acks makes it grow with everything sent to it.
    #[must_use]
    pub(crate) const fn unconfirmed_bytes(&self) -> u64 {
        self.bytes_sent - self.acked_through
    }

    /// Whether our packet `seq` (still in the window) was ack-eliciting.
    #[must_use]
    pub(crate) fn is_eliciting(&self, seq: u16) -> bool {
        self.buf.get(seq).is_some_and(|e| e.eliciting)
    }

    /// Declares lost every ack-eliciting packet older than `bound`.
    pub(crate) fn detect_lost(
        &mut self,
        now: Instant,
        bound: Duration,
        events: &mut Vec<AckEvent>,
    ) {
        while let Some(&seq) = self.outstanding.front() {
            let Some(e) = self.buf.get_mut(seq) else {
                self.outstanding.pop_front();
                continue;
            };
            if e.fate != Fate::InFlight {
                self.outstanding.pop_front();
                continue;
            }
            if e.at + bound > now {
                break;
            }
            e.fate = Fate::Lost;
            self.lost_in_window += u32::from(self.lost_bits.insert(seq));
            self.total_lost += 1;
            self.outstanding.pop_front();
            events.push(AckEvent::Lost(seq));
        }
    }

    /// When the oldest in-flight packet will be declared lost.
    #[must_use]
    pub(crate) fn next_loss_deadline(&self, bound: Duration) -> Option<Instant> {
        self.outstanding
            .iter()
            .find_map(|&s| self.buf.get(s).filter(|e| e.fate == Fate::InFlight))
            .map(|e| e.at + bound)
    }

    /// Fraction of resolved ack-eliciting packets in the window that were lost.
    #[must_use]
    pub(crate) fn loss(&self) -> f64 {
        let total = self.acked_in_window + self.lost_in_window;
        if total == 0 {
            0.0
        } else {
            f64::from(self.lost_in_window) / f64::from(total)
        }
    }

    /// Whether `a` is newer than the newest packet sent.
    #[must_use]
    pub(crate) fn is_future(&self, a: u16) -> bool {
        self.buf
            .newest()
            .is_none_or(|n| sequence_greater_than(a, n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Instant {
        Instant::from_millis(v)
    }

    /// The kept bitfield answers exactly what 32 look-ups in the buffer
    /// would, under reordering, duplicates, stale packets, jumps past the
    /// window and sequence wraparound.
    #[test]
    fn the_kept_ack_bits_equal_the_buffer_look_ups() {
        let mut r = ReceivedPackets::default();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = 65_000u16;
        for i in 0..20_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let seq = match x % 10 {
                0 => next.wrapping_sub((x >> 8) as u16 % 80),
                1 => next.wrapping_add((x >> 8) as u16 % 300),
                _ => next,
            };
            next = next.wrapping_add(1 + u16::from(x % 7 == 0));
            r.record(seq, ms(u64::from(i)));
            let (ack, bits, _) = r.ack_fields(ms(u64::from(i)));
            let mut want = 0u32;
            for n in 0..32u16 {
                if r.contains(ack.wrapping_sub(n + 1)) {
                    want |= 1 << n;
                }
            }
            assert_eq!(bits, want, "after {i} packets, ack {ack}");
        }
    }

    /// Headers arriving reordered, repeated and with random bits ack each
    /// packet exactly once, exactly when some header first covers it (the
    /// kept mask of known acks only spares the look-ups).
    #[test]
    fn every_covered_packet_is_acked_once_whatever_the_header_order() {
        let mut s = SentPackets::default();
        let mut rtt = RttEstimator::default();
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let mut rand = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut covered = std::collections::BTreeSet::new();
        let mut acked = Vec::new();
        let base = 65_000u16;
        for i in 0..3_000u16 {
            let seq = base.wrapping_add(i);
            s.on_sent(
                seq,
                ms(u64::from(i)),
                50,
                true,
                MessageIds::new(),
                BulkSerials::new(),
            );
            for _ in 0..2 {
                // A header about a packet up to 100 behind the newest.
                let back = (rand() % 100) as u16;
                if back > i {
                    continue;
                }
                let ack = seq.wrapping_sub(back);
                let bits = rand() as u32;
                let mut ev = Vec::new();
                s.on_ack(
                    ack,
                    bits,
                    ACK_DELAY_UNKNOWN,
                    ms(u64::from(i)),
                    &mut rtt,
                    &mut ev,
                );
                for n in 0..=32u16 {
                    if n == 0 || bits & (1 << (n - 1)) != 0 {
                        let c = ack.wrapping_sub(n);
                        // Only packets sent (and still in the window) count.
                        if i.wrapping_sub(c.wrapping_sub(base)) < 1024 && c.wrapping_sub(base) <= i
                        {
                            covered.insert(c);
                        }
                    }
                }
                for e in ev {
                    if let AckEvent::Acked { seq, .. } = e {
                        acked.push(seq);
                    }
                }
            }
        }
        let once: std::collections::BTreeSet<u16> = acked.iter().copied().collect();
        assert_eq!(once.len(), acked.len(), "a packet acked twice");
        assert_eq!(once, covered);
    }

    #[test]
    fn received_packets_build_the_bitfield() {
        let mut r = ReceivedPackets::default();
        assert_eq!(r.ack_fields(ms(0)).2, ACK_DELAY_UNKNOWN);
        for s in [65533u16, 65535, 1, 3] {
            assert!(r.record(s, ms(10)));
        }
        assert!(!r.record(3, ms(11)), "duplicate");
        let (ack, bits, delay) = r.ack_fields(ms(15));
        assert_eq!(ack, 3);
        // 2 missing (bit0), 1 present (bit1), 0 missing, 65535 present (bit3), 65533 (bit5).
        assert_eq!(bits, 0b10_1010);
        assert_eq!(delay, 5);
        assert_eq!(r.ack_fields(ms(1000)).2, ACK_DELAY_UNKNOWN, "held too long");
    }

    #[test]
    fn acks_resolve_packets_sample_rtt_and_late_acks_undo_losses() {
        let mut s = SentPackets::default();
        let mut rtt = RttEstimator::default();
        let mut ev = Vec::new();
        for seq in 0..5u16 {
            s.on_sent(
                seq,
                ms(u64::from(seq) * 10),
                100,
                true,
                [seq].into_iter().collect(),
                BulkSerials::new(),
            );
        }
        s.on_sent(5, ms(50), 30, false, MessageIds::new(), BulkSerials::new());
        // Peer got 4 (held 5 ms), 2 and 0.
        s.on_ack(4, 0b1010, 5, ms(145), &mut rtt, &mut ev);
        assert_eq!(rtt.srtt(), Some(Duration::from_millis(100)));
        let acked: Vec<u16> = ev
            .iter()
            .map(|e| match e {
                AckEvent::Acked { seq, .. } => *seq,
                AckEvent::Lost(_) => unreachable!(),
            })
            .collect();
        assert_eq!(acked, vec![4, 2, 0]);
        assert_eq!(
            s.newest_acked_sent,
            Some(ms(40)),
            "packet 4 was sent at 40 ms"
        );
        ev.clear();
        // A duplicate ack changes nothing.
        s.on_ack(4, 0b1010, 5, ms(146), &mut rtt, &mut ev);
        assert!(ev.is_empty());
        assert_eq!(
            s.next_loss_deadline(Duration::from_millis(500)),
            Some(ms(510))
        );
        s.detect_lost(ms(525), Duration::from_millis(500), &mut ev);
        assert_eq!(ev, vec![AckEvent::Lost(1)]);
        ev.clear();
        s.detect_lost(ms(600), Duration::from_millis(500), &mut ev);
        assert_eq!(ev, vec![AckEvent::Lost(3)]);
        assert!(
            (s.loss() - 0.4).abs() < 1e-9,
            "2 of 5 eliciting packets lost"
        );
        assert_eq!(
            s.next_loss_deadline(Duration::from_millis(500)),
            None,
            "non-eliciting never lost"
        );
        ev.clear();
        // The ack for 3 arrives late: the loss is undone.
        s.on_ack(3, 0, ACK_DELAY_UNKNOWN, ms(700), &mut rtt, &mut ev);
        assert_eq!(
            ev,
            vec![AckEvent::Acked {
                seq: 3,
                messages: [3u16].into_iter().collect(),
                bulk: BulkSerials::new()
            }]
        );
        assert!((s.loss() - 0.2).abs() < 1e-9);
        assert_eq!((s.total_acked, s.total_lost), (4, 1));
        assert_eq!(rtt.samples(), 1, "unknown ack delay gives no sample");
    }
}
