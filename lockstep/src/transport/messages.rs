//! Messages over packets. Reliable-ordered messages get consecutive ids and
//! are sent once; they are sent again when the packet carrying their latest
//! copy is known lost (a later packet was acked while it was not) or a
//! backstop timeout passes, and meanwhile ride along in the room other
//! packets leave (fewest copies first), so small messages still travel in
//! every packet until acked without ever crowding out new data. The
//! receiver de-duplicates by id and delivers in order, reassembling
//! fragments under hard caps.
//! Urgent messages (turn traffic: inputs, bundles) are reliable messages
//! of the same ordered stream that also get loss-sized early copies; plain
//! reliable messages get none (their loss costs a resend, not a turn).
//! Unreliable messages are sent once and de-duplicated by id.

use super::sequence::SeqBits;
use crate::time::{Duration, Instant};
use crate::wire::{
    FRAGMENT_SIZE, Fragment, Frame, MAX_FRAGMENTS, MAX_FRAME_OVERHEAD, MAX_HEADER_LEN, MAX_PACKET,
    MAX_UNFRAGMENTED, TAG_LEN, encode_frame, frame_len,
};
use std::collections::VecDeque;
use thiserror::Error;

/// Ids the receiver buffers ahead of the next in-order id; also the ceiling of
/// the sender's un-acked window, so a sender never gets ahead of this.
pub(crate) const RECV_WINDOW: usize = 1024;
/// Default cap on the bytes of reliable frames held ahead of a gap, per
/// connection (128 KiB: the largest reliable message, 96 KiB, arriving
/// whole behind its lost first fragment, plus turn traffic meanwhile).
/// A sender within its window keeps well under it at the loss the
/// transport is built for; beyond it frames are refused and their packet
/// left unacknowledged, so the sender resends them: flow control, never loss.
pub(crate) const DEFAULT_MAX_REORDER_BYTES: usize = 128 * 1024;
/// Largest unreliable message: it must fit one packet.
pub(crate) const MAX_UNRELIABLE: usize = MAX_PACKET - MAX_HEADER_LEN - TAG_LEN - MAX_FRAME_OVERHEAD;
/// Unreliable messages waiting for a packet; beyond this the oldest is dropped.
pub(crate) const MAX_UNRELIABLE_QUEUE: usize = 256;

/// Why `send` refused a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum SendError {
    /// The un-acked reliable window is full: back off (a `Backpressure` event was raised).
    #[error("un-acked window full ({unacked} of {max} slots)")]
    WindowFull {
        /// Slots in use.
        unacked: usize,
        /// Window size.
        max: usize,
    },
    /// The message exceeds the limit for its channel.
    #[error("message of {len} bytes exceeds the {max}-byte limit")]
    TooLarge {
        /// Message length.
        len: usize,
        /// Limit.
        max: usize,
    },
    /// The connection is closed (or closing).
    #[error("not connected")]
    NotConnected,
    /// No connection has this id.
    #[error("unknown connection")]
    UnknownConnection,
}

#[derive(Clone, Debug)]
struct OutMsg {
    id: u16,
    fragment: Option<Fragment>,
    data: Vec<u8>,
    last_sent: Option<Instant>,
    /// Sends that were new data, resends or early redundant copies.
    sends: u8,
    /// Packets that carried it (ride-along copies included).
    carried: u8,
    acked: bool,
    /// Turn traffic (`Channel::Urgent`): gets the early redundant copies.
    urgent: bool,
}

/// When the sender considers a reliable message due for another copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Resend {
    /// The packet interval; redundant early copies (with `copies > 0`) are
    /// spread over it.
    pub interval: Duration,
    /// A message whose latest copy went out at or before this instant and is
    /// still un-acked is presumed lost: a packet sent later has been acked.
    pub lost_before: Option<Instant>,
    /// Backstop: a copy un-acked for this long is sent again.
    pub timeout: Duration,
}

impl Resend {
    /// The old "repeat every packet interval" policy: due after `interval`,
    /// no loss inference (unit tests of the early-copy schedule).
    #[must_use]
    #[cfg(test)]
    pub(crate) const fn every(interval: Duration) -> Self {
        Self {
            interval,
            lost_before: None,
            timeout: interval,
        }
    }
}

#[derive(Clone, Debug)]
struct OutUnreliable {
    id: u16,
    data: Vec<u8>,
}

/// Sending side of the message layer.
#[derive(Clone, Debug)]
pub(crate) struct Outgoing {
    next_id: u16,
    unacked: VecDeque<OutMsg>,
    unreliable: VecDeque<OutUnreliable>,
    next_unreliable_id: u16,
    max_unacked: usize,
    max_message: usize,
    /// Redundancy sized from loss: extra early repeats of each new urgent
    /// message (0 = off); plain reliable and unreliable messages get none.
    pub copies: u8,
    /// Unreliable messages dropped because the queue overflowed.
    pub unreliable_dropped: u64,
}

impl Outgoing {
    /// A sender with an un-acked window of `max_unacked` slots (capped at [`RECV_WINDOW`]).
    #[must_use]
    pub(crate) fn new(max_unacked: usize, max_message: usize) -> Self {
        Self {
            next_id: 0,
            unacked: VecDeque::new(),
            unreliable: VecDeque::new(),
            next_unreliable_id: 0,
            max_unacked: max_unacked.clamp(1, RECV_WINDOW),
            max_message: max_message.min(FRAGMENT_SIZE * MAX_FRAGMENTS),
            copies: 0,
            unreliable_dropped: 0,
        }
    }

    /// Slots in use in the un-acked window.
    #[must_use]
    pub(crate) fn unacked(&self) -> usize {
        self.unacked.len()
    }

    /// Bytes this sender keeps on the heap (messages queued or un-acked).
    #[must_use]
    pub(crate) fn heap_bytes(&self) -> usize {
        self.unacked.capacity() * std::mem::size_of::<OutMsg>()
            + self
                .unacked
                .iter()
                .map(|m| m.data.capacity())
                .sum::<usize>()
            + self.unreliable.capacity() * std::mem::size_of::<OutUnreliable>()
            + self
                .unreliable
                .iter()
                .map(|m| m.data.capacity())
                .sum::<usize>()
    }

    /// Window size.
    #[must_use]
    pub(crate) fn max_unacked(&self) -> usize {
        self.max_unacked
    }

    /// Whether the window is full.
    #[must_use]
    pub(crate) fn is_full(&self) -> bool {
        self.unacked.len() >= self.max_unacked
    }

    /// Queues a reliable-ordered message, split into fragments if needed.
    pub(crate) fn send_reliable(&mut self, msg: &[u8]) -> Result<(), SendError> {
        self.send_ordered(msg, false)
    }

    /// Queues an urgent message: reliable and ordered in the same stream as
    /// [`Outgoing::send_reliable`], plus `copies` early redundant copies.
    pub(crate) fn send_urgent(&mut self, msg: &[u8]) -> Result<(), SendError> {
        self.send_ordered(msg, true)
    }

    fn send_ordered(&mut self, msg: &[u8], urgent: bool) -> Result<(), SendError> {
        if msg.len() > self.max_message {
            return Err(SendError::TooLarge {
                len: msg.len(),
                max: self.max_message,
            });
        }
        let pieces = if msg.len() <= MAX_UNFRAGMENTED {
            1
        } else {
            msg.len().div_ceil(FRAGMENT_SIZE)
        };
        if self.unacked.len() + pieces > self.max_unacked {
            return Err(SendError::WindowFull {
                unacked: self.unacked.len(),
                max: self.max_unacked,
            });
        }
        if pieces == 1 {
            self.push(None, msg.to_vec(), urgent);
        } else {
            for (i, chunk) in msg.chunks(FRAGMENT_SIZE).enumerate() {
                // pieces <= MAX_FRAGMENTS (255) because of the max_message cap.
                let fragment = Fragment {
                    index: i as u8,
                    count: pieces as u8,
                };
                self.push(Some(fragment), chunk.to_vec(), urgent);
            }
        }
        Ok(())
    }

    fn push(&mut self, fragment: Option<Fragment>, data: Vec<u8>, urgent: bool) {
        self.unacked.push_back(OutMsg {
            id: self.next_id,
            fragment,
            data,
            last_sent: None,
            sends: 0,
            carried: 0,
            acked: false,
            urgent,
        });
        self.next_id = self.next_id.wrapping_add(1);
    }

    /// Queues an unreliable message (sent once, never resent after loss).
    pub(crate) fn send_unreliable(&mut self, msg: &[u8]) -> Result<(), SendError> {
        if msg.len() > MAX_UNRELIABLE {
            return Err(SendError::TooLarge {
                len: msg.len(),
                max: MAX_UNRELIABLE,
            });
        }
        if self.unreliable.len() >= MAX_UNRELIABLE_QUEUE {
            self.unreliable.pop_front();
            self.unreliable_dropped += 1;
        }
        self.unreliable.push_back(OutUnreliable {
            id: self.next_unreliable_id,
            data: msg.to_vec(),
        });
        self.next_unreliable_id = self.next_unreliable_id.wrapping_add(1);
        Ok(())
    }

    /// Spacing of the early redundant copies: `1 + copies` per packet interval.
    fn early_gap(&self, interval: Duration) -> Duration {
        Duration::from_micros(interval.as_micros() / (u64::from(self.copies) + 1))
    }

    fn is_early(&self, m: &OutMsg) -> bool {
        self.copies > 0 && m.urgent && m.sends <= self.copies
    }

    /// When `m` is due for another copy: an early redundant copy one early
    /// gap after the last; a presumed loss at once; otherwise the backstop.
    fn due_at(&self, m: &OutMsg, r: Resend) -> Option<Instant> {
        if m.acked {
            return None;
        }
        let t = m.last_sent?;
        if self.is_early(m) {
            return Some(t + self.early_gap(r.interval));
        }
        if r.lost_before.is_some_and(|b| t <= b) {
            return Some(t);
        }
        Some(t + r.timeout)
    }

    /// Earliest time an early redundant copy of a new urgent message is due.
    #[must_use]
    pub(crate) fn next_copy(&self, interval: Duration) -> Option<Instant> {
        if self.copies == 0 {
            return None;
        }
        self.unacked
            .iter()
            .filter(|m| !m.acked && m.sends > 0 && self.is_early(m))
            .filter_map(|m| m.last_sent.map(|t| t + self.early_gap(interval)))
            .min()
    }

    /// Bytes of reliable messages never sent yet.
    #[must_use]
    pub(crate) fn fresh_bytes(&self) -> usize {
        self.unacked
            .iter()
            .filter(|m| m.last_sent.is_none())
            .map(|m| m.data.len())
            .sum()
    }

    /// Whether something never sent is waiting.
    #[must_use]
    pub(crate) fn has_fresh(&self) -> bool {
        !self.unreliable.is_empty() || self.unacked.iter().any(|m| m.last_sent.is_none())
    }

    /// Earliest time a resend (or a queued unreliable message) wants a packet.
    #[must_use]
    pub(crate) fn next_due(&self, r: Resend) -> Option<Instant> {
        let unrel = (!self.unreliable.is_empty()).then_some(Instant::ZERO);
        let rel = self
            .unacked
            .iter()
            .filter(|m| !self.is_early(m))
            .filter_map(|m| self.due_at(m, r))
            .min();
        match (unrel, rel) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Writes frames into `out` within `budget` bytes: due reliable messages
    /// (presumed lost, timed out, early copies), then never-sent ones,
    /// oldest first; then queued unreliable ones; then, in the room left,
    /// ride-along copies of the other un-acked messages, fewest copies
    /// first. Ride-along copies leave `keep` bytes of the budget free (for
    /// the bulk fragment a packet is being sent for). Records the reliable
    /// ids written.
    pub(crate) fn fill(
        &mut self,
        now: Instant,
        r: Resend,
        budget: usize,
        keep: usize,
        out: &mut Vec<u8>,
        ids: &mut super::acks::MessageIds,
    ) {
        let mut left = budget;
        // Pass 0: due (presumed lost, timed out, early copies), oldest first:
        // delivery is in order, so the oldest missing message holds up every
        // later one and goes first. Losses are rare and each is resent once
        // per loss, so this cannot starve new data. Pass 1: never sent.
        // Both count as sends; a message that does not fit waits for the next
        // packet.
        for pass in 0..2 {
            for i in 0..self.unacked.len() {
                let m = &self.unacked[i];
                let wanted = match (pass, m.last_sent) {
                    (0, Some(t)) => t < now && self.due_at(m, r).is_some_and(|d| d <= now),
                    (1, None) => true,
                    _ => false,
                };
                if m.acked || !wanted {
                    continue;
                }
                let m = &mut self.unacked[i];
                if Self::put(m, now, &mut left, out, ids) {
                    m.sends = m.sends.saturating_add(1);
                }
            }
        }
        self.fill_unreliable(&mut left, out);
        // Ride-along: free redundancy in room nobody else wants. Fewest
        // copies first, so the messages that have the least protection (sent
        // once, in the previous packet) get it; not counted as sends, so it
        // neither delays a presumed-loss resend nor uses up the early copies.
        let mut order: Vec<usize> = (0..self.unacked.len())
            .filter(|&i| {
                let m = &self.unacked[i];
                !m.acked && m.last_sent.is_some_and(|t| t < now)
            })
            .collect();
        order.sort_by_key(|&i| self.unacked[i].carried);
        for i in order {
            let room = left.saturating_sub(keep);
            let mut after = room;
            if Self::put(&mut self.unacked[i], now, &mut after, out, ids) {
                left -= room - after;
            }
        }
    }

    /// Writes one copy of `m` if it fits in `left`.
    fn put(
        m: &mut OutMsg,
        now: Instant,
        left: &mut usize,
        out: &mut Vec<u8>,
        ids: &mut super::acks::MessageIds,
    ) -> bool {
        let f = Frame::Reliable {
            id: m.id,
            fragment: m.fragment,
            data: &m.data,
        };
        let len = frame_len(&f);
        if len > *left {
            return false;
        }
        encode_frame(&f, out);
        *left -= len;
        m.carried = m.carried.saturating_add(1);
        m.last_sent = Some(now);
        ids.push(m.id);
        true
    }

    fn fill_unreliable(&mut self, left: &mut usize, out: &mut Vec<u8>) {
        let mut i = 0;
        while i < self.unreliable.len() {
            let u = &mut self.unreliable[i];
            let f = Frame::Unreliable {
                id: u.id,
                data: &u.data,
            };
            let len = frame_len(&f);
            if len <= *left {
                encode_frame(&f, out);
                *left -= len;
                self.unreliable.remove(i);
                continue;
            }
            i += 1;
        }
    }

    /// Marks messages carried by an acked packet as delivered and slides the window.
    pub(crate) fn on_acked(&mut self, ids: &[u16]) {
        let Some(base) = self.unacked.front().map(|m| m.id) else {
            return;
        };
        for &id in ids {
            let idx = usize::from(id.wrapping_sub(base));
            if let Some(m) = self.unacked.get_mut(idx) {
                m.acked = true;
            }
        }
        while self.unacked.front().is_some_and(|m| m.acked) {
            self.unacked.pop_front();
        }
    }
}

/// Number of extra copies of each urgent message sized from measured loss:
/// none below 2.5 %, one below 7.5 %, two from there, three from 25 % (the
/// redundancy article's one copy per 10 points, at most 3, raised to two
/// around 10 %). From 2.5 % a lost input or bundle, which would wait a
/// whole turn for the next packet to carry it again in a few percent of
/// the turns (the p99), is worth a second packet; around 10 % a message
/// loses both copies in about 1 % of the turns, the p99 again, so it gets
/// a third. Only turn traffic gets copies, so the bandwidth of a busy
/// match at 5 % loss stays within its budget.
#[must_use]
pub(crate) fn copies_for_loss(loss: f64) -> u8 {
    if loss < 0.025 {
        0
    } else if loss < 0.075 {
        1
    } else if loss < 0.25 {
        2
    } else {
        3
    }
}

#[derive(Clone, Debug)]
struct InMsg {
    fragment: Option<Fragment>,
    data: Vec<u8>,
}

#[derive(Clone, Debug)]
struct Assembly {
    count: u8,
    next: u8,
    data: Vec<u8>,
}

/// Receiving side of the message layer.
#[derive(Clone, Debug)]
pub(crate) struct Incoming {
    next_id: u16,
    /// Frames by id from `next_id` on, as far ahead as one has arrived: empty
    /// on a link that delivers in order, a gap's depth under loss (not a
    /// fixed [`RECV_WINDOW`] ring of 32 KiB per connection).
    slots: VecDeque<Option<InMsg>>,
    assembly: Option<Assembly>,
    /// The last 256 unreliable ids, those seen set (a bit each, not a
    /// 1 KiB slot ring).
    unreliable_seen: SeqBits<4>,
    max_message: usize,
    /// Bytes of the frames held in `slots` (all ahead of `next_id`).
    held: usize,
    max_held: usize,
    /// Reliable frames ignored as already delivered or outside the window.
    pub duplicates: u64,
    /// Reliable frames refused because holding them ahead of a gap would
    /// exceed the reorder cap (their packet goes unacknowledged, so the
    /// sender resends them).
    pub reorder_refused: u64,
    /// Messages discarded by the reassembly caps or a broken fragment sequence.
    pub reassembly_dropped: u64,
}

impl Incoming {
    /// A receiver accepting reassembled messages up to `max_message` bytes.
    #[must_use]
    pub(crate) fn new(max_message: usize) -> Self {
        Self {
            next_id: 0,
            slots: VecDeque::new(),
            assembly: None,
            unreliable_seen: SeqBits::default(),
            max_message: max_message.min(FRAGMENT_SIZE * MAX_FRAGMENTS),
            held: 0,
            max_held: DEFAULT_MAX_REORDER_BYTES,
            duplicates: 0,
            reorder_refused: 0,
            reassembly_dropped: 0,
        }
    }

    /// Room for frames ahead of a gap kept once the gap is filled: small
    /// gaps come and go under steady loss, a deep one's room is freed.
    const KEPT_SLOTS: usize = 16;

    /// Bytes this receiver keeps on the heap (frames held ahead of a gap,
    /// a message being reassembled).
    #[must_use]
    pub(crate) fn heap_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Option<InMsg>>()
            + self
                .slots
                .iter()
                .flatten()
                .map(|m| m.data.capacity())
                .sum::<usize>()
            + self.assembly.as_ref().map_or(0, |a| a.data.capacity())
    }

    /// Caps the bytes of frames held ahead of a gap (default
    /// [`DEFAULT_MAX_REORDER_BYTES`]); the next in-order frame is always taken.
    #[must_use]
    pub(crate) const fn with_reorder_cap(mut self, bytes: usize) -> Self {
        self.max_held = bytes;
        self
    }

    /// Bytes of frames held ahead of a gap.
    #[must_use]
    #[cfg(test)]
    pub(crate) const fn held_bytes(&self) -> usize {
        self.held
    }

    /// Accepts one reliable frame and appends every message now deliverable
    /// in order. False when the frame was refused because holding it ahead
    /// of a gap would exceed the reorder cap: the caller must then leave
    /// its packet unacknowledged, so the sender resends the frame.
    pub(crate) fn on_reliable(
        &mut self,
        id: u16,
        fragment: Option<Fragment>,
        data: &[u8],
        out: &mut VecDeque<Vec<u8>>,
    ) -> bool {
        let ahead = usize::from(id.wrapping_sub(self.next_id));
        if ahead >= RECV_WINDOW {
            self.duplicates += 1;
            return true;
        }
        if self.slots.get(ahead).is_some_and(Option::is_some) {
            self.duplicates += 1;
            return true;
        }
        if ahead > 0 && self.held + data.len() > self.max_held {
            self.reorder_refused += 1;
            return false;
        }
        // Room up to `ahead` only for a frame kept (a refused one takes none).
        if self.slots.len() <= ahead {
            self.slots.resize_with(ahead + 1, || None);
        }
        self.slots[ahead] = Some(InMsg {
            fragment,
            data: data.to_vec(),
        });
        self.held += data.len();
        self.drain(out);
        true
    }

    fn drain(&mut self, out: &mut VecDeque<Vec<u8>>) {
        loop {
            let Some(m) = self.slots.front_mut().and_then(Option::take) else {
                // A gap's frames all delivered: its room goes too.
                if self.slots.is_empty() && self.slots.capacity() > Self::KEPT_SLOTS {
                    self.slots = VecDeque::new();
                }
                return;
            };
            self.held -= m.data.len();
            self.slots.pop_front();
            self.next_id = self.next_id.wrapping_add(1);
            match m.fragment {
                None => {
                    if self.assembly.take().is_some() {
                        self.reassembly_dropped += 1;
                    }
                    out.push_back(m.data);
                }
                Some(f) => self.on_fragment(f, m.data, out),
            }
        }
    }

    fn on_fragment(&mut self, f: Fragment, data: Vec<u8>, out: &mut VecDeque<Vec<u8>>) {
        if f.index == 0 {
            if self.assembly.is_some() {
                self.reassembly_dropped += 1;
            }
            self.assembly = Some(Assembly {
                count: f.count,
                next: 0,
                data: Vec::new(),
            });
        }
        let Some(a) = self.assembly.as_mut() else {
            // A tail of a message already discarded.
            return;
        };
        if a.count != f.count || a.next != f.index {
            self.assembly = None;
            self.reassembly_dropped += 1;
            return;
        }
        if a.data.len() + data.len() > self.max_message {
            self.assembly = None;
            self.reassembly_dropped += 1;
            return;
        }
        a.data.extend_from_slice(&data);
        a.next += 1;
        if a.next == a.count {
            if let Some(done) = self.assembly.take() {
                out.push_back(done.data);
            }
        }
    }

    /// Accepts an unreliable frame; `None` for a redundant copy already seen or a stale id.
    pub(crate) fn on_unreliable(&mut self, id: u16, data: &[u8]) -> Option<Vec<u8>> {
        if self.unreliable_seen.contains(id) {
            return None;
        }
        self.unreliable_seen.advance(id);
        self.unreliable_seen.insert(id).then(|| data.to_vec())
    }
}

#[cfg(test)]
#[path = "messages_tests.rs"]
mod tests;
