//! The bounded queue between a protocol core and a transport: messages wait
//! here for room in the transport's reliable window, and every message that
//! cannot be delivered (backlog full, transport refused it) is reported once
//! as a [`SendDrop`]. Both glues use it: `PeerGlue` (session → client) and
//! the relay's `RouterGlue` (router → server, one backlog per connection).

use crate::transport::{Channel, SendError};
use std::collections::VecDeque;
use std::fmt;

/// Messages a [`Backlog`] holds by default: far more than any honest match
/// has in flight; beyond it the receiver is hopelessly behind.
pub const MAX_BACKLOG: usize = 4096;

/// Bytes a [`Backlog`] holds by default (16 MiB): what waits beyond the
/// transport's own window. The largest snapshot a relay accepts by default
/// (16 MiB, half of which the bulk window takes) and its bundle tail fit;
/// a receiver that never acks cannot make one connection hold more.
pub const MAX_BACKLOG_BYTES: usize = 16 * 1024 * 1024;

/// Drop reports a [`DropLog`] keeps for its reader; beyond this the oldest
/// report is discarded (its drop stays counted in [`DropLog::total`]).
pub const MAX_DROP_REPORTS: usize = 256;

/// Why a message was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropCause {
    /// The backlog was full: the oldest waiting message made room.
    Overflow,
    /// The transport refused the message (too large for its channel, the
    /// connection closed, an unreliable message with the window full).
    Refused(SendError),
}

impl fmt::Display for DropCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Overflow => f.write_str("send backlog full"),
            Self::Refused(e) => write!(f, "transport refused it: {e}"),
        }
    }
}

/// One message that was never handed to the transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendDrop {
    /// The channel it was meant for.
    pub channel: Channel,
    /// Its length in bytes.
    pub len: usize,
    /// Why.
    pub cause: DropCause,
}

impl fmt::Display for SendDrop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} message of {} bytes dropped: {}",
            self.channel, self.len, self.cause
        )
    }
}

/// Messages waiting for the transport, oldest first, at most a capacity in
/// messages and one in bytes. Use one per transport connection:
/// [`Backlog::push`] what the core produced, then [`Backlog::flush`] into
/// the transport. Reliable and bulk messages wait while the window is full;
/// anything else the transport refuses is dropped and reported.
#[derive(Debug)]
pub struct Backlog {
    queue: VecDeque<(Channel, Vec<u8>)>,
    capacity: usize,
    max_bytes: usize,
    /// Bytes of the messages in `queue`.
    bytes: usize,
}

impl Default for Backlog {
    fn default() -> Self {
        Self::with_limits(MAX_BACKLOG, MAX_BACKLOG_BYTES)
    }
}

impl Backlog {
    /// An empty backlog holding at most `capacity` messages (at least one)
    /// and [`MAX_BACKLOG_BYTES`].
    #[must_use]
    pub fn new(capacity: usize) -> Self {
        Self::with_limits(capacity, MAX_BACKLOG_BYTES)
    }

    /// An empty backlog holding at most `capacity` messages (at least one)
    /// and `max_bytes` bytes (the newest message is always kept, however
    /// large: the transport bounds a message's size).
    #[must_use]
    pub fn with_limits(capacity: usize, max_bytes: usize) -> Self {
        Self {
            queue: VecDeque::new(),
            capacity: capacity.max(1),
            max_bytes,
            bytes: 0,
        }
    }

    /// Queues a message; while the backlog is over either limit with it,
    /// the oldest message is dropped and its report passed to `on_drop`
    /// (a receiver that never acks must not grow the sender's memory: its
    /// messages are bounded in bytes as well as in number).
    pub fn push(&mut self, channel: Channel, bytes: Vec<u8>, mut on_drop: impl FnMut(SendDrop)) {
        self.bytes += bytes.len();
        self.queue.push_back((channel, bytes));
        while self.queue.len() > self.capacity
            || (self.bytes > self.max_bytes && self.queue.len() > 1)
        {
            let Some((channel, b)) = self.queue.pop_front() else {
                break;
            };
            self.bytes -= b.len();
            on_drop(SendDrop {
                channel,
                len: b.len(),
                cause: DropCause::Overflow,
            });
        }
    }

    /// Hands waiting messages to `send` in order until a reliable one meets
    /// a full window (it waits for acks); every other refusal drops that
    /// message and passes its report to `on_drop`.
    pub fn flush(
        &mut self,
        mut send: impl FnMut(Channel, &[u8]) -> Result<(), SendError>,
        mut on_drop: impl FnMut(SendDrop),
    ) {
        while let Some((channel, bytes)) = self.queue.front() {
            let (channel, len) = (*channel, bytes.len());
            if let Err(e) = send(channel, bytes) {
                match refused(channel, len, e) {
                    None => break,
                    Some(drop) => on_drop(drop),
                }
            }
            self.bytes -= len;
            self.queue.pop_front();
        }
    }

    /// Bytes waiting.
    #[must_use]
    pub const fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether nothing is waiting.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Messages waiting.
    #[must_use]
    pub fn len(&self) -> usize {
        self.queue.len()
    }
}

/// Drop reports for a driver to log or show, with an exact count: each drop
/// is counted once and reported once (until [`MAX_DROP_REPORTS`] unread
/// reports pile up; older ones are then discarded, still counted).
#[derive(Debug)]
pub struct DropLog<T> {
    total: u64,
    reports: VecDeque<T>,
}

impl<T> Default for DropLog<T> {
    fn default() -> Self {
        Self {
            total: 0,
            reports: VecDeque::new(),
        }
    }
}

impl<T> DropLog<T> {
    /// Counts one drop and keeps its report.
    pub fn record(&mut self, report: T) {
        self.total += 1;
        if self.reports.len() >= MAX_DROP_REPORTS {
            self.reports.pop_front();
        }
        self.reports.push_back(report);
    }

    /// Drops recorded so far.
    #[must_use]
    pub const fn total(&self) -> u64 {
        self.total
    }

    /// The oldest unread report.
    #[must_use]
    pub fn poll(&mut self) -> Option<T> {
        self.reports.pop_front()
    }
}

/// What becomes of a message the transport refused with `e`: `None` when it
/// should wait (reliable data meeting a full window waits for acks to free
/// it), else the drop to report (an unreliable message is not worth waiting
/// for, and any other refusal is final). For drivers that send directly
/// while a connection has no [`Backlog`], and for the backlog itself.
#[must_use]
pub fn refused(channel: Channel, len: usize, e: SendError) -> Option<SendDrop> {
    match e {
        SendError::WindowFull { .. } if channel != Channel::Unreliable => None,
        e => Some(SendDrop {
            channel,
            len,
            cause: DropCause::Refused(e),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::messages::MAX_UNRELIABLE;

    /// A transport stand-in: accepts messages up to `max` bytes while it has
    /// `room` reliable slots; unreliable ones always fit if small enough.
    struct Fake {
        room: usize,
        max: usize,
        sent: Vec<Vec<u8>>,
    }

    impl Fake {
        fn send(&mut self, ch: Channel, b: &[u8]) -> Result<(), SendError> {
            if b.len() > self.max {
                return Err(SendError::TooLarge {
                    len: b.len(),
                    max: self.max,
                });
            }
            if ch != Channel::Unreliable {
                if self.room == 0 {
                    return Err(SendError::WindowFull { unacked: 1, max: 1 });
                }
                self.room -= 1;
            }
            self.sent.push(b.to_vec());
            Ok(())
        }
    }

    fn push(b: &mut Backlog, ch: Channel, bytes: Vec<u8>) -> Vec<SendDrop> {
        let mut drops = Vec::new();
        b.push(ch, bytes, |d| drops.push(d));
        drops
    }

    /// A receiver that never acks: bulk messages wait for the window, and
    /// the backlog drops its oldest ones (each reported once) to stay within
    /// its bytes however many arrive, keeping the newest.
    #[test]
    fn a_backlog_stays_within_its_bytes_dropping_the_oldest() {
        let mut b = Backlog::with_limits(MAX_BACKLOG, 100 * 1024);
        let mut t = Fake {
            room: 0,
            max: usize::MAX,
            sent: Vec::new(),
        };
        let mut drops = Vec::new();
        for i in 0..50u8 {
            drops.extend(push(&mut b, Channel::Bulk, vec![i; 32 * 1024]));
            drops.extend(flush(&mut b, &mut t));
            assert!(b.bytes() <= 100 * 1024, "{}", b.bytes());
        }
        assert_eq!((b.len(), b.bytes()), (3, 3 * 32 * 1024));
        assert_eq!(drops.len(), 47);
        assert!(drops.iter().all(|d| d.cause == DropCause::Overflow));
        // The newest wait, in order, and go once there is room.
        t.room = 10;
        assert_eq!(flush(&mut b, &mut t), vec![]);
        let firsts: Vec<u8> = t.sent.iter().map(|m| m[0]).collect();
        assert_eq!(firsts, vec![47, 48, 49]);
        assert_eq!(b.bytes(), 0);
        // A message larger than the bound alone is kept.
        assert_eq!(push(&mut b, Channel::Bulk, vec![0; 200 * 1024]), vec![]);
        assert_eq!(b.len(), 1);
    }

    /// The default backlog is bounded in bytes too: 4 MiB messages for a
    /// receiver that never acks (far fewer than its message cap) leave at
    /// most `MAX_BACKLOG_BYTES` waiting.
    #[test]
    fn the_default_backlog_holds_at_most_its_bytes() {
        let mut b = Backlog::default();
        let mut dropped = 0;
        for _ in 0..40 {
            b.push(Channel::Bulk, vec![0; 4 * 1024 * 1024], |_| dropped += 1);
        }
        assert!(b.bytes() <= MAX_BACKLOG_BYTES);
        assert_eq!(b.len() + dropped, 40);
        assert_eq!(b.len(), MAX_BACKLOG_BYTES / (4 * 1024 * 1024));
    }

    fn flush(b: &mut Backlog, t: &mut Fake) -> Vec<SendDrop> {
        let mut drops = Vec::new();
        b.flush(|ch, m| t.send(ch, m), |d| drops.push(d));
        drops
    }

    #[test]
    fn an_oversize_message_is_reported_exactly_once() {
        let mut b = Backlog::default();
        let mut t = Fake {
            room: 10,
            max: MAX_UNRELIABLE,
            sent: Vec::new(),
        };
        let big = vec![7; MAX_UNRELIABLE + 1];
        assert_eq!(push(&mut b, Channel::Unreliable, big), vec![]);
        assert_eq!(push(&mut b, Channel::Reliable, vec![1]), vec![]);
        let drops = flush(&mut b, &mut t);
        let want = SendDrop {
            channel: Channel::Unreliable,
            len: MAX_UNRELIABLE + 1,
            cause: DropCause::Refused(SendError::TooLarge {
                len: MAX_UNRELIABLE + 1,
                max: MAX_UNRELIABLE,
            }),
        };
        assert_eq!(drops, vec![want]);
        // The message behind it still went out, and nothing is left to report.
        assert_eq!(t.sent, vec![vec![1]]);
        assert!(b.is_empty());
        assert_eq!(flush(&mut b, &mut t), vec![]);
    }

    #[test]
    fn an_overflowing_backlog_reports_its_oldest_message_exactly_once() {
        let mut b = Backlog::new(2);
        let mut t = Fake {
            room: 0,
            max: 100,
            sent: Vec::new(),
        };
        assert_eq!(push(&mut b, Channel::Reliable, vec![1]), vec![]);
        assert_eq!(push(&mut b, Channel::Reliable, vec![2, 2]), vec![]);
        assert_eq!(flush(&mut b, &mut t), vec![], "a full window only waits");
        let over = push(&mut b, Channel::Reliable, vec![3, 3, 3]);
        assert_eq!(
            over,
            vec![SendDrop {
                channel: Channel::Reliable,
                len: 1,
                cause: DropCause::Overflow,
            }]
        );
        assert_eq!(b.len(), 2);
        t.room = 10;
        assert_eq!(flush(&mut b, &mut t), vec![]);
        assert_eq!(t.sent, vec![vec![2, 2], vec![3, 3, 3]]);
    }

    #[test]
    fn an_unreliable_message_does_not_wait_for_the_window() {
        let mut b = Backlog::default();
        let mut t = Fake {
            room: 0,
            max: 100,
            sent: Vec::new(),
        };
        let full = |_: Channel, _: &[u8]| Err(SendError::WindowFull { unacked: 1, max: 1 });
        assert_eq!(push(&mut b, Channel::Unreliable, vec![1]), vec![]);
        assert_eq!(push(&mut b, Channel::Reliable, vec![2]), vec![]);
        let mut drops = Vec::new();
        b.flush(full, |d| drops.push(d));
        assert_eq!(drops.len(), 1);
        assert_eq!(drops[0].channel, Channel::Unreliable);
        assert_eq!(b.len(), 1, "the reliable one waits");
        t.room = 1;
        assert_eq!(flush(&mut b, &mut t), vec![]);
        assert_eq!(t.sent, vec![vec![2]]);
    }

    #[test]
    fn a_drop_log_counts_every_drop_and_keeps_the_newest_reports() {
        let mut log = DropLog::default();
        for i in 0..MAX_DROP_REPORTS + 3 {
            log.record(i);
        }
        assert_eq!(log.total(), (MAX_DROP_REPORTS + 3) as u64);
        let kept: Vec<usize> = std::iter::from_fn(|| log.poll()).collect();
        assert_eq!(kept, (3..MAX_DROP_REPORTS + 3).collect::<Vec<_>>());
        assert_eq!(log.poll(), None);
    }
}
