//! What a connection keeps in memory, by part: the figure a relay's
//! capacity per GiB comes from (each match holds four connections).

use serde::Serialize;
use std::ops::AddAssign;

/// Bytes one connection (or, summed, a whole endpoint) holds, by part.
/// Counted from lengths and capacities, not measured from the allocator:
/// deterministic, and cheap enough to read as a metric.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ConnMemory {
    /// The connection's own fields, held inline (keys, counters, rate
    /// meters, the RTT sample ring, the loss window's bits).
    pub inline: usize,
    /// Records of the packets sent and not yet forgotten.
    pub sent: usize,
    /// Reliable frames held ahead of a gap, a message being reassembled,
    /// the unreliable ids seen.
    pub incoming: usize,
    /// Reliable messages queued or un-acked, unreliable ones queued.
    pub outgoing: usize,
    /// Bulk messages queued, un-acked or being reassembled.
    pub bulk: usize,
    /// Scratch and queues: the decrypt buffer, events not yet polled.
    pub other: usize,
}

impl ConnMemory {
    /// All parts.
    #[must_use]
    pub const fn total(&self) -> usize {
        self.inline + self.sent + self.incoming + self.outgoing + self.bulk + self.other
    }
}

impl AddAssign for ConnMemory {
    fn add_assign(&mut self, o: Self) {
        self.inline += o.inline;
        self.sent += o.sent;
        self.incoming += o.incoming;
        self.outgoing += o.outgoing;
        self.bulk += o.bulk;
        self.other += o.other;
    }
}
