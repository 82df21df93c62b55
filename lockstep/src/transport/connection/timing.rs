//! When a connection may send and when it resends: the pacing budget
//! (tokens charged by packet size, the bulk budget), the reliable resend
//! policy (loss inference, the backstop that waits for the peer's ack
//! hold), the peer's learned ack hold and when an owed ack is due. Split
//! from `connection.rs`, which owns the packet handling these decide for.

use super::Connection;
use crate::time::{Duration, Instant};
use crate::transport::messages::Resend;
use crate::wire::MAX_PACKET;

impl Connection {
    pub(super) fn capacity(&self) -> u64 {
        let tokens = u64::from(self.cfg.burst.max(2)) + u64::from(self.out.copies);
        self.congestion.interval().as_micros() * tokens
    }

    /// The most `peer_ack_delay` is believed (a peer frozen for seconds
    /// is not holding acks).
    pub(super) const MAX_PEER_ACK_DELAY: Duration = Duration::from_millis(250);

    /// Bulk packets that may leave back to back.
    pub(super) const BULK_BURST: u64 = 4;
    /// New reliable data of at least this many bytes leaves at once on the
    /// bulk budget instead of waiting for a turn token: small messages
    /// coalesce at the turn pace, large ones (where waiting would leave no
    /// room for redundancy) go now.
    pub(super) const LARGE_FRESH: usize = 256;

    /// Moves the clock forward and refills send tokens.
    pub(super) fn advance(&mut self, now: Instant) {
        if now > self.now {
            let elapsed = now.saturating_since(self.now).as_micros();
            self.credit = self.credit.saturating_add(elapsed);
            self.bulk_credit = self.bulk_credit.saturating_add(elapsed);
            self.now = now;
        }
        self.credit = self.credit.min(self.capacity());
        self.bulk_credit = self
            .bulk_credit
            .min(self.congestion.bulk_interval().as_micros() * Self::BULK_BURST);
    }

    /// How much later than the newest acked packet a packet must have been
    /// sent before it counts as lost for a resend (reordering tolerance).
    pub(super) fn reorder_margin(&self) -> Duration {
        let srtt = self.rtt.srtt_or(Duration::ZERO);
        (Duration::from_micros(srtt.as_micros() / 8) + self.rtt.rttvar())
            .max(Duration::from_millis(1))
    }

    /// Backstop resend timeout of a bulk fragment no later ack reveals as lost:
    /// RTO plus the time the peer may hold its ack (two packet intervals, or
    /// its learned ack delay if longer).
    pub(super) fn bulk_timeout(&self) -> Duration {
        self.rtt.rto()
            + self
                .congestion
                .interval()
                .saturating_mul(2)
                .max(self.peer_hold())
    }

    /// The ack hold the resend backstops allow for: the peer's learned
    /// hold when it is a peer that holds acks by design (beyond twice our
    /// own `ack_delay`, e.g. a relay holding them for a turn), else our own
    /// `ack_delay` (symmetric ends: rounding and jitter of the learned
    /// value would only postpone resends).
    pub(super) fn peer_hold(&self) -> Duration {
        if self.peer_ack_delay > self.cfg.ack_delay.saturating_mul(2) {
            self.peer_ack_delay
        } else {
            self.cfg.ack_delay
        }
    }

    /// How long an ack owed only for duplicates may wait for a packet that
    /// goes anyway: half a keep-alive, or our own ack delay if longer.
    pub(super) fn lazy_ack_delay(&self) -> Duration {
        Duration::from_micros(self.cfg.keepalive.as_micros() / 2).max(self.cfg.ack_delay)
    }

    /// Folds the ack delay of a header that acked a new packet into
    /// `peer_ack_delay`: a new maximum at once, a smaller value pulls it
    /// down by a sixteenth of the gap (so one frozen moment of the peer
    /// does not stretch every later resend).
    pub(super) fn learn_peer_ack_delay(&mut self, held: Duration) {
        let (old, new) = (self.peer_ack_delay.as_micros(), held.as_micros());
        self.peer_ack_delay = Duration::from_micros(if new >= old {
            new
        } else {
            old - (old - new) / 16
        });
    }

    /// The reliable resend policy in force: presumed lost when a packet
    /// sent `reorder_margin` after its latest copy was acked; backstop when
    /// the ack is overdue: RTO plus the time the peer may hold its ack
    /// ([`Connection::peer_hold`]; three packet intervals before the first
    /// RTT sample, instead of the 1 s initial RTO).
    pub(super) fn resend(&self) -> Resend {
        let interval = self.congestion.interval();
        let timeout = match self.rtt.srtt() {
            Some(_) => self.rtt.rto() + self.peer_hold() + self.reorder_margin(),
            None => interval.saturating_mul(3),
        };
        Resend {
            interval,
            lost_before: self
                .sent
                .newest_acked_sent
                .map(|t| t - self.reorder_margin()),
            timeout,
        }
    }

    /// When the owed ack is due: coalesced for `ack_delay` after the first
    /// unanswered ack-eliciting packet (so it can ride on data sent
    /// meanwhile, and one ack answers a burst), at once when four are
    /// unanswered (a bulk transfer's sender needs its acks to move on).
    pub(super) fn ack_due(&self) -> Option<Instant> {
        let lazy = self.lazy_ack_owed.map(|t| t + self.lazy_ack_delay());
        let Some(since) = self.ack_owed else {
            return lazy;
        };
        let due = if self.eliciting_unacked >= 4 {
            since
        } else {
            since + self.cfg.ack_delay
        };
        Some(lazy.map_or(due, |l| l.min(due)))
    }

    pub(super) fn detect_bulk_loss(&mut self, now: Instant) {
        let (margin, timeout) = (self.reorder_margin(), self.bulk_timeout());
        self.bulk_out
            .detect_lost(now, self.sent.newest_acked_sent, margin, timeout);
    }

    /// What a packet of `len` bytes costs from the turn bucket (µs of
    /// credit): a full-size packet one whole token (one packet interval), a
    /// smaller one its share of that, IP/UDP headers counted. The congestion
    /// mode's packet rate is thus a byte budget of that many full packets a
    /// second: an input or a bundle of a few dozen bytes does not wait behind
    /// the hashes and acks of the turn before (which a pure packet count made
    /// it do once turns came as fast as the packet rate), while large packets
    /// (full of ride-along copies, as on a congested link) are paced as before.
    /// A packet still needs a whole token in the bucket to leave.
    pub(super) fn charge(&self, len: usize) -> u64 {
        const IP_UDP: u64 = 28;
        let token = self.congestion.interval().as_micros();
        let len = (len as u64).min(MAX_PACKET as u64) + IP_UDP;
        token * len / (MAX_PACKET as u64 + IP_UDP)
    }

    pub(super) fn tokens_at(&self, tokens: u64) -> Instant {
        let need = tokens * self.congestion.interval().as_micros();
        if self.credit >= need {
            self.now
        } else {
            self.now + Duration::from_micros(need - self.credit)
        }
    }

    /// When the next data packet may go. A packet goes only when there is
    /// something to say: new data or a resend (one token each), an owed ack
    /// once its coalescing delay is over (no token), a bulk fragment or large
    /// new data (a bulk token), a keep-alive after `keepalive` of silence
    /// (two tokens, so one stays in reserve for new data).
    pub(super) fn next_send_time(&self) -> Option<Instant> {
        if !self.received.any() {
            // Our ack fields would be meaningless until we hear from the peer.
            return None;
        }
        let interval = self.congestion.interval();
        let reserve = self.tokens_at(2);
        let mut best: Option<Instant> = None;
        let mut consider = |t: Instant| best = Some(best.map_or(t, |b: Instant| b.min(t)));
        if self.unconfirmed_full() {
            // No data until the peer acks: the owed ack and the keep-alive only.
            if let Some(due) = self.ack_due() {
                consider(due);
            }
            consider((self.last_send + self.cfg.keepalive).max(reserve));
            return best;
        }
        if self.out.has_fresh() {
            consider(self.tokens_at(1));
        }
        // Early redundant copies are the opted-in bandwidth-for-latency trade:
        // they do not wait for tokens (at most `copies` per new message).
        if let Some(copy) = self.out.next_copy(interval) {
            consider(copy);
        }
        // A resend needs one token like new data. An owed ack needs none:
        // ack-only packets are paced by the peer's own (paced) ack-eliciting
        // packets, and an ack held back by pacing would look like a loss.
        if let Some(due) = self.out.next_due(self.resend()) {
            consider(due.max(self.tokens_at(1)));
        }
        if let Some(due) = self.ack_due() {
            consider(due);
        }
        if self.bulk_out.wants_packet() || self.out.fresh_bytes() >= Self::LARGE_FRESH {
            let token = self.congestion.bulk_interval().as_micros();
            consider(if self.bulk_credit >= token {
                self.now
            } else {
                self.now + Duration::from_micros(token - self.bulk_credit)
            });
        }
        consider((self.last_send + self.cfg.keepalive).max(reserve));
        best
    }
}
