//! The bulk path behind `Channel::Bulk`: large messages (snapshots) cut into
//! fixed [`BULK_CHUNK`]-byte fragments, each sent once and resent only when
//! the packet carrying it is known lost (a later packet was acked while it
//! was not: the ack bitfield's gap) or, as a backstop, after a timeout. The
//! connection paces bulk packets with their own token bucket and gives them
//! only the room turn traffic leaves, so a transfer never delays a turn.
//!
//! Memory is bounded on both sides: the sender queues at most
//! `2 × max_message` bytes and keeps at most [`BULK_WINDOW`] fragments in
//! flight; the receiver assembles one message at a time, at most
//! `max_message` bytes, on the fixed fragment grid (a fragment can neither
//! overlap another nor land outside its message), holding only the
//! fragments that arrived, and throws a message away when it stalls.

use super::messages::SendError;
use crate::time::{Duration, Instant};
use crate::wire::{
    BULK_CHUNK, Frame, MAX_BULK_FRAGMENTS, bulk_fragments, bulk_range, encode_frame, frame_len,
};
use std::collections::{BTreeMap, VecDeque};

/// Most bulk fragments in flight (sent, neither acked nor presumed lost).
pub(crate) const BULK_WINDOW: usize = 128;
/// Largest bulk message the fragment grid can address.
pub(crate) const MAX_BULK_MESSAGE: usize = BULK_CHUNK * MAX_BULK_FRAGMENTS;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Frag {
    Pending,
    InFlight(Instant),
    Acked,
}

/// The bulk message being sent.
#[derive(Clone, Debug)]
struct Current {
    msg: u16,
    data: Vec<u8>,
    /// Serial of fragment 0 (serials are unique across messages, so a late
    /// ack of an earlier message's packet never acks this one's fragments).
    base: u64,
    state: Vec<Frag>,
    next_new: usize,
    resend: VecDeque<usize>,
    /// Sends in time order; entries whose fragment was since acked or
    /// resent are stale and skipped.
    sends: VecDeque<(usize, Instant)>,
    flying: usize,
    acked: usize,
}

/// Sending side of the bulk path.
#[derive(Clone, Debug)]
pub(crate) struct BulkOut {
    queue: VecDeque<Vec<u8>>,
    /// Bytes queued or not yet fully acked (the current message included).
    pending_bytes: usize,
    max_message: usize,
    cur: Option<Current>,
    next_msg: u16,
    next_serial: u64,
    /// Fragments sent again after a presumed loss (total).
    pub resent: u64,
    /// Fragments sent (total, first sends and resends).
    pub sent: u64,
}

impl BulkOut {
    /// A sender of bulk messages up to `max_message` bytes (capped at [`MAX_BULK_MESSAGE`]).
    #[must_use]
    pub(crate) fn new(max_message: usize) -> Self {
        Self {
            queue: VecDeque::new(),
            pending_bytes: 0,
            max_message: max_message.min(MAX_BULK_MESSAGE),
            cur: None,
            next_msg: 0,
            next_serial: 0,
            resent: 0,
            sent: 0,
        }
    }

    /// Queues a message. Refused when it exceeds `max_message`, or with
    /// `WindowFull` (in bytes) when the bytes not yet acked would exceed
    /// twice `max_message`: the caller retries after acks.
    pub(crate) fn send(&mut self, msg: &[u8]) -> Result<(), SendError> {
        if msg.len() > self.max_message {
            return Err(SendError::TooLarge {
                len: msg.len(),
                max: self.max_message,
            });
        }
        let max = 2 * self.max_message;
        if self.pending_bytes + msg.len() > max {
            return Err(SendError::WindowFull {
                unacked: self.pending_bytes,
                max,
            });
        }
        self.pending_bytes += msg.len();
        self.queue.push_back(msg.to_vec());
        Ok(())
    }

    /// Whether nothing is queued or un-acked.
    #[must_use]
    pub(crate) fn is_idle(&self) -> bool {
        self.cur.is_none() && self.queue.is_empty()
    }

    /// Bytes queued or not yet acknowledged.
    #[must_use]
    pub(crate) fn pending_bytes(&self) -> usize {
        self.pending_bytes
    }

    /// Fragments not yet acknowledged, queued messages included.
    #[must_use]
    pub(crate) fn pending_fragments(&self) -> usize {
        let cur = self.cur.as_ref().map_or(0, |c| c.state.len() - c.acked);
        cur + self
            .queue
            .iter()
            .map(|m| bulk_fragments(m.len()))
            .sum::<usize>()
    }

    fn start(&mut self) {
        if self.cur.is_some() {
            return;
        }
        let Some(data) = self.queue.pop_front() else {
            return;
        };
        let count = bulk_fragments(data.len());
        self.cur = Some(Current {
            msg: self.next_msg,
            data,
            base: self.next_serial,
            state: vec![Frag::Pending; count],
            next_new: 0,
            resend: VecDeque::new(),
            sends: VecDeque::new(),
            flying: 0,
            acked: 0,
        });
        self.next_msg = self.next_msg.wrapping_add(1);
        self.next_serial += count as u64;
    }

    /// Whether a fragment is ready to go (something unsent or presumed lost,
    /// and room in the in-flight window).
    #[must_use]
    pub(crate) fn wants_packet(&self) -> bool {
        match &self.cur {
            Some(c) => {
                c.flying < BULK_WINDOW && (!c.resend.is_empty() || c.next_new < c.state.len())
            }
            None => !self.queue.is_empty(),
        }
    }

    /// When the oldest fragment in flight times out (the backstop for a loss
    /// no later ack reveals, e.g. the tail of a transfer).
    #[must_use]
    pub(crate) fn next_timeout(&self, timeout: Duration) -> Option<Instant> {
        let c = self.cur.as_ref()?;
        c.sends
            .iter()
            .find(|&&(i, at)| c.state[i] == Frag::InFlight(at))
            .map(|&(_, at)| at + timeout)
    }

    /// Writes fragments into `out` within `budget` bytes, resends first,
    /// recording their serials in `serials`.
    pub(crate) fn fill(
        &mut self,
        now: Instant,
        budget: usize,
        out: &mut Vec<u8>,
        serials: &mut super::acks::BulkSerials,
    ) {
        self.start();
        let mut left = budget;
        let Some(c) = self.cur.as_mut() else {
            return;
        };
        while c.flying < BULK_WINDOW {
            let (i, resend) = match c.resend.front() {
                Some(&i) => (i, true),
                None if c.next_new < c.state.len() => (c.next_new, false),
                None => break,
            };
            let Some(range) = bulk_range(c.data.len(), i) else {
                break;
            };
            let f = Frame::Bulk {
                msg: c.msg,
                // Both fit: max_message <= MAX_BULK_MESSAGE < 2^32 and i < 2^16.
                total: c.data.len() as u32,
                index: i as u16,
                data: &c.data[range],
            };
            let len = frame_len(&f);
            if len > left {
                break;
            }
            encode_frame(&f, out);
            left -= len;
            if resend {
                c.resend.pop_front();
                self.resent += 1;
            } else {
                c.next_new += 1;
            }
            self.sent += 1;
            c.state[i] = Frag::InFlight(now);
            c.sends.push_back((i, now));
            c.flying += 1;
            serials.push(c.base + i as u64);
        }
    }

    /// Marks fragments carried by an acked packet as delivered; moves on to
    /// the next message once every fragment of the current one is acked.
    pub(crate) fn on_acked(&mut self, serials: &[u64]) {
        let Some(c) = self.cur.as_mut() else {
            return;
        };
        for &s in serials {
            let Some(i) = s
                .checked_sub(c.base)
                .and_then(|i| usize::try_from(i).ok())
                .filter(|&i| i < c.state.len())
            else {
                continue;
            };
            match c.state[i] {
                Frag::Acked => {}
                Frag::InFlight(_) => {
                    c.flying -= 1;
                    c.state[i] = Frag::Acked;
                    c.acked += 1;
                }
                // Presumed lost and queued for a resend, but the first copy made it.
                Frag::Pending => {
                    c.state[i] = Frag::Acked;
                    c.acked += 1;
                    c.resend.retain(|&r| r != i);
                }
            }
        }
        while let Some(&(i, at)) = c.sends.front() {
            if c.state[i] == Frag::InFlight(at) {
                break;
            }
            c.sends.pop_front();
        }
        if c.acked == c.state.len() {
            self.pending_bytes -= c.data.len();
            self.cur = None;
            self.start();
        }
    }

    /// Queues for a resend every fragment in flight that was sent more than
    /// `margin` before the newest packet the peer has acknowledged (its packet
    /// fell in the ack bitfield's gap), or more than `timeout` ago.
    pub(crate) fn detect_lost(
        &mut self,
        now: Instant,
        newest_acked_sent: Option<Instant>,
        margin: Duration,
        timeout: Duration,
    ) {
        let Some(c) = self.cur.as_mut() else {
            return;
        };
        while let Some(&(i, at)) = c.sends.front() {
            if c.state[i] == Frag::InFlight(at) {
                let gap = newest_acked_sent.is_some_and(|t| t >= at + margin);
                if !gap && now < at + timeout {
                    // Sends are in time order: the later ones are not lost either.
                    break;
                }
                c.state[i] = Frag::Pending;
                c.flying -= 1;
                c.resend.push_back(i);
            }
            c.sends.pop_front();
        }
    }
}

/// The message being reassembled. Memory follows the fragments that
/// arrived, never the total the sender claims: in-order fragments are
/// appended to `data`, early ones wait in `ahead` until the gap before them
/// fills.
#[derive(Clone, Debug)]
struct Assembly {
    total: usize,
    count: usize,
    /// Fragments `0..next`, concatenated.
    data: Vec<u8>,
    next: usize,
    ahead: BTreeMap<usize, Vec<u8>>,
    ahead_bytes: usize,
    /// When the last new fragment arrived (the stall clock).
    last_progress: Instant,
}

/// Receiving side of the bulk path: one message at a time, in order.
#[derive(Clone, Debug)]
pub(crate) struct BulkIn {
    next_msg: u16,
    max_message: usize,
    cur: Option<Assembly>,
    /// Fragments ignored as already received or of an earlier message.
    pub duplicates: u64,
    /// Fragments refused: a total that disagrees with the message being
    /// assembled, or a message over `max_message` (that message is skipped).
    pub dropped: u64,
    /// Messages refused because this side accepts no bulk data at all
    /// (`max_message` 0: a server's connection the application has not
    /// opened with `Server::set_bulk_receive`), or whose assembly was cut
    /// short by a lowered cap; each is skipped.
    pub refused: u64,
    /// Incomplete messages thrown away after a stall (no new fragment for
    /// the stall timeout); each is skipped.
    pub expired: u64,
}

impl BulkIn {
    /// A receiver of bulk messages up to `max_message` bytes (capped at
    /// [`MAX_BULK_MESSAGE`]; 0 refuses every bulk message).
    #[must_use]
    pub(crate) fn new(max_message: usize) -> Self {
        Self {
            next_msg: 0,
            max_message: max_message.min(MAX_BULK_MESSAGE),
            cur: None,
            duplicates: 0,
            dropped: 0,
            refused: 0,
            expired: 0,
        }
    }

    /// Changes the largest message accepted from now on (0: none). A
    /// message being assembled that no longer fits is thrown away and skipped.
    pub(crate) fn set_max_message(&mut self, max_message: usize) {
        self.max_message = max_message.min(MAX_BULK_MESSAGE);
        if self
            .cur
            .as_ref()
            .is_some_and(|a| self.max_message == 0 || a.total > self.max_message)
        {
            self.refused += 1;
            self.skip();
        }
    }

    /// Bytes held for the message being reassembled.
    #[must_use]
    pub(crate) fn buffered(&self) -> usize {
        self.cur
            .as_ref()
            .map_or(0, |a| a.data.len() + a.ahead_bytes)
    }

    /// Gives up on the current message (if any) and waits for the next:
    /// the sender moves on once every fragment it sent is acked, which
    /// they are (packets are acked whatever their frames did), so the
    /// message ids stay in step.
    fn skip(&mut self) {
        self.cur = None;
        self.next_msg = self.next_msg.wrapping_add(1);
    }

    /// Appends a fragment, growing `data` geometrically (amortised copies)
    /// but never past the message's `total`, so the buffer stays within
    /// what the message can hold, not twice it.
    fn append(data: &mut Vec<u8>, total: usize, fragment: &[u8]) {
        let need = data.len() + fragment.len();
        if need > data.capacity() {
            let grow = need.max(data.capacity().saturating_mul(2)).min(total);
            data.reserve_exact(grow.max(need) - data.len());
        }
        data.extend_from_slice(fragment);
    }

    /// When the message being assembled expires if nothing new arrives.
    #[must_use]
    pub(crate) fn deadline(&self, stall: Duration) -> Option<Instant> {
        self.cur.as_ref().map(|a| a.last_progress + stall)
    }

    /// Throws away a message that made no progress for `stall` (counted in
    /// [`BulkIn::expired`]), so a sender that stops mid-message cannot pin
    /// its partial message for the life of the connection.
    pub(crate) fn expire(&mut self, now: Instant, stall: Duration) {
        if self.deadline(stall).is_some_and(|d| now >= d) {
            self.expired += 1;
            self.skip();
        }
    }

    /// Accepts one fragment; returns the whole message when this completed it.
    /// Never panics, never allocates more than `max_message` bytes, and
    /// allocates only for fragments that arrived (never from the total a
    /// fragment claims).
    pub(crate) fn on_fragment(
        &mut self,
        now: Instant,
        msg: u16,
        total: u32,
        index: u16,
        data: &[u8],
    ) -> Option<Vec<u8>> {
        if msg != self.next_msg {
            // The sender starts a message only after the previous one was
            // fully acked, so anything else is a late copy of an earlier one.
            self.duplicates += 1;
            return None;
        }
        let total = total as usize;
        if bulk_range(total, usize::from(index)).is_none_or(|r| r.len() != data.len()) {
            self.dropped += 1;
            return None;
        }
        if self.max_message == 0 {
            // Nothing asked for: skip the message, as an oversize one.
            self.refused += 1;
            self.skip();
            return None;
        }
        if total > self.max_message {
            // Too large for this side: skip the message rather than stall the path.
            self.dropped += 1;
            self.skip();
            return None;
        }
        let a = self.cur.get_or_insert_with(|| Assembly {
            total,
            count: bulk_fragments(total),
            data: Vec::new(),
            next: 0,
            ahead: BTreeMap::new(),
            ahead_bytes: 0,
            last_progress: now,
        });
        if a.total != total {
            self.dropped += 1;
            return None;
        }
        let i = usize::from(index);
        if i < a.next || a.ahead.contains_key(&i) {
            self.duplicates += 1;
            return None;
        }
        a.last_progress = now;
        if i > a.next {
            a.ahead_bytes += data.len();
            a.ahead.insert(i, data.to_vec());
            return None;
        }
        Self::append(&mut a.data, a.total, data);
        a.next += 1;
        while let Some(d) = a.ahead.remove(&a.next) {
            a.ahead_bytes -= d.len();
            Self::append(&mut a.data, a.total, &d);
            a.next += 1;
        }
        if a.next < a.count {
            return None;
        }
        let done = self.cur.take().map(|a| a.data);
        self.next_msg = self.next_msg.wrapping_add(1);
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Packet, decode};

    fn t(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    /// Frames written by one `fill`, decoded through a fake packet.
    fn bulk_frames(bytes: &[u8]) -> Vec<(u16, u32, u16, Vec<u8>)> {
        let mut p = vec![0x1F, 0, 0, 0, 0];
        p.extend_from_slice(bytes);
        p.extend_from_slice(&[0; crate::wire::TAG_LEN]);
        match decode(&p).unwrap() {
            Packet::Authed { frames, .. } => frames
                .into_iter()
                .map(|f| match f {
                    Frame::Bulk {
                        msg,
                        total,
                        index,
                        data,
                    } => (msg, total, index, data.to_vec()),
                    other => panic!("not bulk: {other:?}"),
                })
                .collect(),
            _ => unreachable!(),
        }
    }

    const BUDGET: usize = 1174;

    #[test]
    fn fragments_go_once_and_only_presumed_lost_ones_again() {
        let msg: Vec<u8> = (0..5000u32).map(|i| (i * 13) as u8).collect();
        let mut o = BulkOut::new(1 << 20);
        o.send(&msg).unwrap();
        assert_eq!(o.pending_fragments(), 5);
        let mut packets = Vec::new();
        for k in 0..5u64 {
            let (mut buf, mut serials) = (Vec::new(), crate::transport::acks::BulkSerials::new());
            o.fill(t(k), BUDGET, &mut buf, &mut serials);
            assert_eq!(
                serials.to_vec(),
                vec![k],
                "one fragment per packet, in order"
            );
            packets.push(buf);
        }
        let (mut buf, mut serials) = (Vec::new(), crate::transport::acks::BulkSerials::new());
        o.fill(t(5), BUDGET, &mut buf, &mut serials);
        assert!(
            serials.is_empty() && !o.wants_packet(),
            "nothing sent twice"
        );
        // Packets 0, 2, 3 acked; 1 and 4 not. Packet 3 (sent at 3 ms) reveals
        // that 1 (sent at 1 ms) was lost; 4 is younger than every ack.
        o.on_acked(&[0, 2, 3]);
        o.detect_lost(
            t(60),
            Some(t(3)),
            Duration::from_millis(1),
            Duration::from_secs(1),
        );
        let (mut buf, mut serials) = (Vec::new(), crate::transport::acks::BulkSerials::new());
        o.fill(t(61), BUDGET, &mut buf, &mut serials);
        assert_eq!(
            serials.to_vec(),
            vec![1],
            "only the fragment in the gap is resent"
        );
        assert_eq!(o.resent, 1);
        // The timeout backstop catches the tail.
        assert_eq!(o.next_timeout(Duration::from_secs(1)), Some(t(1004)));
        o.detect_lost(
            t(1004),
            Some(t(3)),
            Duration::from_millis(1),
            Duration::from_secs(1),
        );
        let (mut buf, mut serials) = (Vec::new(), crate::transport::acks::BulkSerials::new());
        o.fill(t(1005), BUDGET, &mut buf, &mut serials);
        assert_eq!(serials.to_vec(), vec![4]);
        o.on_acked(&[1, 4]);
        assert!(o.is_idle());
        assert_eq!(o.pending_bytes(), 0);
        // The receiver gets it byte-exact whatever the order and duplicates.
        let mut inc = BulkIn::new(1 << 20);
        let mut got = None;
        for p in packets.iter().rev().chain(packets.iter()) {
            for (m, total, index, data) in bulk_frames(p) {
                if let Some(done) = inc.on_fragment(t(0), m, total, index, &data) {
                    got = Some(done);
                }
            }
        }
        assert!(got == Some(msg), "reassembled byte-exact");
        assert_eq!(inc.duplicates, 5, "second pass was all duplicates");
    }

    #[test]
    fn window_and_queue_are_bounded() {
        let mut o = BulkOut::new(400_000);
        o.send(&vec![1; 400_000]).unwrap();
        o.send(&vec![2; 400_000]).unwrap();
        assert_eq!(
            o.send(b"x"),
            Err(SendError::WindowFull {
                unacked: 800_000,
                max: 800_000
            })
        );
        assert!(matches!(
            o.send(&vec![0; 400_001]),
            Err(SendError::TooLarge { .. })
        ));
        let mut serials = crate::transport::acks::BulkSerials::new();
        for _ in 0..1000 {
            let mut buf = Vec::new();
            o.fill(t(0), BUDGET, &mut buf, &mut serials);
        }
        assert_eq!(
            serials.len(),
            BULK_WINDOW,
            "no more than the window in flight"
        );
        assert!(!o.wants_packet());
        // Acks open the window again; a late ack of an unknown serial is ignored.
        o.on_acked(&serials[..10]);
        o.on_acked(&[u64::MAX, 1 << 40]);
        assert!(o.wants_packet());
    }

    #[test]
    fn messages_are_delivered_in_order_and_a_late_copy_of_an_earlier_one_is_ignored() {
        let mut o = BulkOut::new(10_000);
        o.send(b"first").unwrap();
        o.send(b"").unwrap();
        o.send(&[9; 3000]).unwrap();
        let mut inc = BulkIn::new(10_000);
        let mut got = Vec::new();
        let mut old = Vec::new();
        for k in 0..10u64 {
            let (mut buf, mut serials) = (Vec::new(), crate::transport::acks::BulkSerials::new());
            o.fill(t(k), BUDGET, &mut buf, &mut serials);
            for (m, total, index, data) in bulk_frames(&buf) {
                got.extend(inc.on_fragment(t(0), m, total, index, &data));
            }
            if k == 0 {
                old = buf.clone();
            }
            o.on_acked(&serials);
        }
        assert_eq!(got, vec![b"first".to_vec(), Vec::new(), vec![9; 3000]]);
        for (m, total, index, data) in bulk_frames(&old) {
            assert_eq!(inc.on_fragment(t(0), m, total, index, &data), None);
        }
        assert!(o.is_idle());
    }

    #[test]
    fn hostile_fragments_neither_panic_nor_allocate_beyond_the_cap() {
        let mut inc = BulkIn::new(10_000);
        // Off the grid: bad index, wrong length, index past the end.
        assert_eq!(inc.on_fragment(t(0), 0, 5000, 9, &[0; 10]), None);
        assert_eq!(inc.on_fragment(t(0), 0, 5000, 0, &[0; 10]), None);
        assert_eq!(inc.on_fragment(t(0), 0, 0, 1, &[]), None);
        assert_eq!(inc.dropped, 3);
        assert_eq!(inc.buffered(), 0, "nothing allocated for refused fragments");
        // An oversize total is refused before any allocation, and its message skipped.
        let huge = u32::MAX - 7;
        assert_eq!(inc.on_fragment(t(0), 0, huge, 0, &[0; BULK_CHUNK]), None);
        assert_eq!(inc.buffered(), 0);
        // The next message: a second total for the same message is refused.
        assert_eq!(
            inc.on_fragment(t(0), 1, 2 * BULK_CHUNK as u32, 0, &[1; BULK_CHUNK]),
            None
        );
        assert_eq!(inc.buffered(), BULK_CHUNK, "only what arrived is held");
        assert_eq!(
            inc.on_fragment(t(0), 1, 3 * BULK_CHUNK as u32, 2, &[1; BULK_CHUNK]),
            None
        );
        // Repeating a fragment cannot overwrite or double count it.
        assert_eq!(
            inc.on_fragment(t(0), 1, 2 * BULK_CHUNK as u32, 0, &[7; BULK_CHUNK]),
            None
        );
        let done = inc
            .on_fragment(t(0), 1, 2 * BULK_CHUNK as u32, 1, &[2; BULK_CHUNK])
            .unwrap();
        assert!(done[..BULK_CHUNK].iter().all(|&b| b == 1));
        assert!(done[BULK_CHUNK..].iter().all(|&b| b == 2));
        assert_eq!(inc.dropped, 5);
        assert_eq!(inc.duplicates, 1);
        assert_eq!(inc.buffered(), 0);
    }

    #[test]
    fn a_claimed_total_allocates_nothing_until_fragments_arrive() {
        let max = 4 << 20;
        let mut inc = BulkIn::new(max);
        // One fragment claiming the largest message: only the fragment is held.
        assert_eq!(
            inc.on_fragment(t(0), 0, max as u32, 0, &[1; BULK_CHUNK]),
            None
        );
        assert_eq!(inc.buffered(), BULK_CHUNK);
        let capacity = inc.cur.as_ref().map_or(0, |a| a.data.capacity());
        assert_eq!(capacity, BULK_CHUNK, "nor reserved");
        // Fragments ahead of a gap are held as they come, not as a full buffer.
        let last = (max / BULK_CHUNK) as u16 - 1;
        assert_eq!(
            inc.on_fragment(t(0), 0, max as u32, last, &[2; BULK_CHUNK]),
            None
        );
        assert_eq!(inc.buffered(), 2 * BULK_CHUNK);
        // A small message arriving backwards is still reassembled byte-exact.
        let mut inc = BulkIn::new(max);
        let msg: Vec<u8> = (0..3 * BULK_CHUNK + 7).map(|i| (i * 7) as u8).collect();
        let total = msg.len() as u32;
        let chunks: Vec<&[u8]> = msg.chunks(BULK_CHUNK).collect();
        let mut got = None;
        for (i, c) in chunks.iter().enumerate().rev() {
            got = inc.on_fragment(t(0), 0, total, i as u16, c);
        }
        assert!(got == Some(msg), "reassembled byte-exact");
        assert_eq!(inc.buffered(), 0);
    }

    #[test]
    fn a_stalled_message_expires_and_the_next_one_goes_through() {
        let stall = Duration::from_secs(10);
        let mut inc = BulkIn::new(1 << 20);
        let total = 2 * BULK_CHUNK as u32;
        assert_eq!(inc.on_fragment(t(0), 0, total, 0, &[1; BULK_CHUNK]), None);
        assert_eq!(inc.deadline(stall), Some(t(10_000)));
        inc.expire(t(9_999), stall);
        assert_eq!((inc.buffered(), inc.expired), (BULK_CHUNK, 0), "not yet");
        inc.expire(t(10_000), stall);
        assert_eq!(
            (inc.buffered(), inc.expired),
            (0, 1),
            "thrown away, counted"
        );
        assert_eq!(inc.deadline(stall), None);
        // The rest of the expired message is a late copy; the next one arrives.
        assert_eq!(
            inc.on_fragment(t(10_001), 0, total, 1, &[1; BULK_CHUNK]),
            None
        );
        assert_eq!(inc.buffered(), 0);
        assert_eq!(
            inc.on_fragment(t(10_002), 1, 3, 0, b"abc"),
            Some(b"abc".to_vec())
        );
    }

    #[test]
    fn a_closed_receiver_refuses_every_message_and_an_opened_one_takes_the_next() {
        let mut inc = BulkIn::new(0);
        assert_eq!(
            inc.on_fragment(t(0), 0, 0, 0, &[]),
            None,
            "even an empty one"
        );
        assert_eq!(inc.on_fragment(t(0), 1, 5, 0, b"12345"), None);
        assert_eq!((inc.refused, inc.buffered()), (2, 0));
        inc.set_max_message(100);
        assert_eq!(
            inc.on_fragment(t(0), 2, 3, 0, b"abc"),
            Some(b"abc".to_vec())
        );
        // Closing mid-message throws the partial message away.
        let total = 2 * BULK_CHUNK as u32;
        inc.set_max_message(1 << 20);
        assert_eq!(inc.on_fragment(t(0), 3, total, 0, &[1; BULK_CHUNK]), None);
        inc.set_max_message(0);
        assert_eq!((inc.refused, inc.buffered()), (3, 0));
    }
}
