//! Link measurements a caller can read at any time (`LinkStats`) and the
//! one-second sliding rate meters behind the per-second figures.

use super::congestion::CongestionMode;
use crate::time::{Duration, Instant};
use serde::Serialize;

/// The part of [`LinkStats`] read for every connection often: what a
/// session is fed on every pump and a relay's router several times a
/// second, cheap to read (no rate meter walk). From
/// [`Client::estimate`](super::Client::estimate) and
/// [`Server::estimate`](super::Server::estimate).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LinkEstimate {
    /// Smoothed round-trip time (as [`LinkStats::rtt`]).
    pub rtt: Duration,
    /// Smoothed RTT mean deviation (as [`LinkStats::jitter`]).
    pub jitter: Duration,
    /// Fraction of recent ack-eliciting packets declared lost (as [`LinkStats::loss`]).
    pub loss: f64,
    /// The RTT tail (as [`LinkStats::rtt_p99`]).
    pub rtt_p99: Duration,
}

/// A snapshot of one connection's measured link quality and traffic.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LinkStats {
    /// Smoothed round-trip time (peer's ack hold time removed).
    pub rtt: Duration,
    /// 99th percentile of the last 64 raw RTT samples (peer's ack hold time
    /// removed; zero before the first): the tail the smoothed RTT hides.
    pub rtt_p99: Duration,
    /// Smoothed RTT mean deviation.
    pub jitter: Duration,
    /// Retransmission timeout: `srtt + 4 * rttvar`, clamped, at least 40 ms.
    pub rto: Duration,
    /// Fraction (0..1) of recent ack-eliciting packets declared lost.
    pub loss: f64,
    /// Bytes per second sent over the last second.
    pub sent_bps: f64,
    /// Bytes per second received over the last second.
    pub recv_bps: f64,
    /// Bytes per second acknowledged by the peer over the last second.
    pub acked_bps: f64,
    /// Packets per second sent over the last second.
    pub sent_pps: f64,
    /// Packets per second received over the last second.
    pub recv_pps: f64,
    /// Packets sent (total).
    pub packets_sent: u64,
    /// Authenticated packets received (total).
    pub packets_received: u64,
    /// Ack-eliciting packets declared lost and never acked later (total).
    pub packets_lost: u64,
    /// Packets acknowledged by the peer (total).
    pub packets_acked: u64,
    /// Bytes sent (total).
    pub bytes_sent: u64,
    /// Bytes received (total).
    pub bytes_received: u64,
    /// Congestion mode in force.
    pub mode: CongestionMode,
    /// Extra copies given to each unreliable message (redundancy sized by loss).
    pub redundancy_copies: u8,
    /// Reliable messages (or fragments) and bulk fragments (queued ones
    /// included) not yet acknowledged.
    pub unacked: usize,
    /// Bytes of bulk messages queued or not yet acknowledged.
    pub bulk_pending_bytes: usize,
    /// Packets dropped for a bad MAC.
    pub dropped_auth: u64,
    /// Packets dropped as replays or duplicates (by the replay window).
    pub dropped_replay: u64,
    /// Packets dropped as malformed.
    pub dropped_malformed: u64,
    /// Bulk messages refused unread: none was asked for (a server's
    /// connection not opened by `Server::set_bulk_receive`), or the cap was
    /// lowered while one was arriving.
    pub bulk_refused: u64,
    /// Incomplete bulk messages thrown away after `bulk_stall_timeout`
    /// without a new fragment.
    pub bulk_expired: u64,
    /// Reliable frames refused because holding them ahead of a gap would
    /// exceed `max_reorder_bytes` (their packet went unacknowledged, so
    /// the peer resent them).
    pub reorder_refused: u64,
}

impl Default for LinkStats {
    fn default() -> Self {
        Self {
            rtt: Duration::ZERO,
            rtt_p99: Duration::ZERO,
            jitter: Duration::ZERO,
            rto: super::rtt::INITIAL_RTO,
            loss: 0.0,
            sent_bps: 0.0,
            recv_bps: 0.0,
            acked_bps: 0.0,
            sent_pps: 0.0,
            recv_pps: 0.0,
            packets_sent: 0,
            packets_received: 0,
            packets_lost: 0,
            packets_acked: 0,
            bytes_sent: 0,
            bytes_received: 0,
            mode: CongestionMode::Good,
            redundancy_copies: 0,
            unacked: 0,
            bulk_pending_bytes: 0,
            dropped_auth: 0,
            dropped_replay: 0,
            dropped_malformed: 0,
            bulk_refused: 0,
            bulk_expired: 0,
            reorder_refused: 0,
        }
    }
}

const BUCKET_US: u64 = 100_000;
const BUCKETS: usize = 10;

/// Amount per second over the last second, in 100 ms buckets.
#[derive(Clone, Debug, Default)]
pub(crate) struct RateMeter {
    /// (bucket index, amount) in 32 bits each: a connection has five
    /// meters, and 64-bit pairs made them 800 of its ~2.9 KiB. An index
    /// wraps after 13 years of uptime; a bucket saturates at 4 GiB per 100 ms.
    buckets: [(u32, u32); BUCKETS],
}

impl RateMeter {
    #[allow(clippy::cast_possible_truncation)] // the index wraps: see `buckets`
    fn index(now: Instant) -> u32 {
        (now.as_micros() / BUCKET_US) as u32
    }

    /// Adds `amount` at `now`.
    pub(crate) fn add(&mut self, now: Instant, amount: u64) {
        let ix = Self::index(now);
        let slot = &mut self.buckets[ix as usize % BUCKETS];
        if slot.0 != ix {
            *slot = (ix, 0);
        }
        slot.1 = slot
            .1
            .saturating_add(u32::try_from(amount).unwrap_or(u32::MAX));
    }

    /// Rate per second over the second ending at `now`.
    #[must_use]
    pub(crate) fn per_sec(&self, now: Instant) -> f64 {
        let ix = Self::index(now);
        let sum: u64 = self
            .buckets
            .iter()
            // Buckets of the last second: at most BUCKETS - 1 behind (wrapping).
            .filter(|(b, _)| ix.wrapping_sub(*b) < BUCKETS as u32)
            .map(|(_, v)| u64::from(*v))
            .sum();
        sum as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_meter_slides() {
        let mut m = RateMeter::default();
        for i in 0..20 {
            m.add(Instant::from_millis(i * 100), 10);
        }
        assert!((m.per_sec(Instant::from_millis(1900)) - 100.0).abs() < 1e-9);
        assert!((m.per_sec(Instant::from_millis(2400)) - 50.0).abs() < 1e-9);
        assert!(m.per_sec(Instant::from_millis(9000)).abs() < 1e-9);
        // Across the 32-bit bucket index's wrap (13 years up) it slides the same.
        let mut m = RateMeter::default();
        let wrap = (1u64 << 32) * BUCKET_US;
        for i in 0..20u64 {
            m.add(Instant::from_micros(wrap - 1_000_000 + i * 100_000), 10);
        }
        let last = Instant::from_micros(wrap + 900_000);
        assert!((m.per_sec(last) - 100.0).abs() < 1e-9);
        assert!((m.per_sec(last + Duration::from_millis(500)) - 50.0).abs() < 1e-9);
    }
}
