//! What a session reports: its error type and its counters (turns, stalls,
//! latency, link figures), readable at any time through `Session::stats`,
//! which computes its percentiles here.

use super::{LATENCY_SAMPLES, Phase, WARM_UP};
use crate::time::{Duration, Instant};
use sim::Turn;
use std::collections::VecDeque;

/// Why a call was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// The match has not started or is over.
    #[error("the match is not running")]
    NotRunning,
    /// Too many commands queued, or one chunk above the per-turn byte cap.
    #[error("command queue full or chunk too large ({0} bytes)")]
    Overloaded(usize),
    /// This session watches the match (`with_spectate`): a spectator has no
    /// slot and submits nothing.
    #[error("a spectator submits no commands")]
    Spectating,
    /// A hash for a turn that was not yielded, or reported twice.
    #[error("turn {0} was not simulated yet or already reported")]
    BadTurn(Turn),
}

/// Link figures measured by the transport, passed in by the driver.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LinkFigures {
    /// Smoothed round-trip time.
    pub rtt: Duration,
    /// Round-trip jitter.
    pub jitter: Duration,
    /// 99th percentile of the transport's recent raw RTT samples (see
    /// `LinkStats::rtt_p99`); zero until the driver passes it in.
    pub rtt_p99: Duration,
    /// Loss fraction 0..1.
    pub loss: f64,
}

/// The session's figures, from [`Session::stats`](super::Session::stats).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SessionStats {
    /// Turns yielded so far.
    pub turns_executed: u32,
    /// Last turn yielded.
    pub last_turn: Option<Turn>,
    /// Total time some due turn could not run because its bundle was
    /// missing, counted as it passes (so a wait that never ends, e.g. until
    /// the peer gives up, is counted too).
    pub stall: Duration,
    /// Number of turns that were late (executed after their due time).
    pub stalled_turns: u32,
    /// Turn latency (command submitted → its turn yielded), median.
    pub latency_p50: Duration,
    /// Turn latency, 99th percentile.
    pub latency_p99: Duration,
    /// Number of latency samples.
    pub latency_samples: usize,
    /// Inputs of ours that arrived late at the relay.
    pub late_inputs: u32,
    /// Inputs of ours the relay refused (over our byte budget for a turn).
    pub inputs_refused: u32,
    /// Messages that did not decode or made no sense now.
    pub bad_messages: u32,
    /// Bundles dropped as duplicates or stale.
    pub duplicate_bundles: u32,
    /// Message bytes sent.
    pub bytes_sent: u64,
    /// Message bytes received.
    pub bytes_received: u64,
    /// The latest link figures from the transport.
    pub link: LinkFigures,
    /// The input delay in force (latest announced); 0 under the relay's clock.
    pub input_delay: u8,
    /// Turn latency of commands submitted after the first 5 s, median.
    pub steady_latency_p50: Duration,
    /// Turn latency of commands submitted after the first 5 s, 99th percentile.
    pub steady_latency_p99: Duration,
    /// Number of those samples.
    pub steady_latency_samples: usize,
    /// Turn latency of commands submitted at least 5 s after the relay
    /// last took this peer back on a new connection (a relay restart),
    /// median: with [`SessionStats::steady_latency_p50`], whether latency
    /// is back at its floor 5 s after a restart. Zero before any reconnect.
    pub recovered_latency_p50: Duration,
    /// The same, 99th percentile.
    pub recovered_latency_p99: Duration,
    /// Number of those samples.
    pub recovered_latency_samples: usize,
    /// Under the relay's clock: how long the jitter buffer holds a bundle
    /// that arrives as fast as the fastest recent one.
    pub jitter_buffer: Duration,
    /// Under the relay's clock: bundle arrivals not taken as link samples
    /// (queued while this peer was not running, or a released backlog).
    pub backlog_samples: u32,
    /// Median of the transport's RTT, sampled once a report interval over
    /// the match (the latest figure alone may be a freeze's backlog).
    pub rtt_p50: Duration,
    /// Median of the transport's RTT p99 (over its last 64 raw samples),
    /// sampled once a report interval over the match: the player's p99 RTT,
    /// the first term of its latency budget "p99 RTT + one turn + jitter
    /// buffer". Zero if the driver never passed one in.
    pub rtt_p99: Duration,
    /// The match's turn length (zero before the start).
    pub turn_length: Duration,
    /// Snapshots this peer was asked for and uploaded.
    pub snapshots_uploaded: u32,
    /// Times the relay re-synchronised this peer (`--on-desync heal`).
    pub heals: u32,
    /// Snapshots the relay sent that the game could not restore to their
    /// agreed hash ([`Session::snapshot_failed`](super::Session::snapshot_failed)):
    /// each was reported and replaced by the relay.
    pub snapshots_failed: u32,
    /// Times the relay took this peer back on a new connection after its
    /// connection was lost ([`Session::reconnect`](super::Session::reconnect),
    /// [`Session::rewatch`](super::Session::rewatch)): with its world kept,
    /// or, when the relay could no longer serve the turns it lacked, from
    /// the relay's snapshot.
    pub reconnects: u32,
}

/// The `p`th percentile of `sorted` (zero when empty).
pub(super) fn percentile(sorted: &[Duration], p: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = (sorted.len() - 1) * p / 100;
    sorted[idx]
}

/// Appends `v` to a ring of samples, dropping the oldest past
/// [`LATENCY_SAMPLES`].
pub(super) fn push_sample(ring: &mut VecDeque<Duration>, v: Duration) {
    if ring.len() >= LATENCY_SAMPLES {
        ring.pop_front();
    }
    ring.push_back(v);
}

/// A ring's samples, sorted for [`percentile`].
fn sorted(ring: &VecDeque<Duration>) -> Vec<Duration> {
    let mut v: Vec<Duration> = ring.iter().copied().collect();
    v.sort_unstable();
    v
}

/// The median of a ring of samples, or `latest` while it has none.
fn median_or(ring: &VecDeque<Duration>, latest: Duration) -> Duration {
    if ring.is_empty() {
        latest
    } else {
        percentile(&sorted(ring), 50)
    }
}

/// The figures a session computes from what it keeps: percentiles of its
/// latency and RTT samples (kept here beside the counters they fill).
impl super::Session {
    /// Figures so far; `now` accounts an ongoing stall.
    #[must_use]
    pub fn stats(&self, now: Instant) -> SessionStats {
        let mut s = self.stats.clone();
        if let Phase::Running(r) = &self.phase {
            s.stall += r.stall_since_accounted(now);
            s.input_delay = r.delay.latest();
        }
        let all = sorted(&self.latencies);
        s.latency_samples = all.len();
        s.latency_p50 = percentile(&all, 50);
        s.latency_p99 = percentile(&all, 99);
        let steady = sorted(&self.steady);
        s.steady_latency_samples = steady.len();
        s.steady_latency_p50 = percentile(&steady, 50);
        s.steady_latency_p99 = percentile(&steady, 99);
        let recovered = sorted(&self.recovered);
        s.recovered_latency_samples = recovered.len();
        s.recovered_latency_p50 = percentile(&recovered, 50);
        s.recovered_latency_p99 = percentile(&recovered, 99);
        let r = match &self.phase {
            Phase::Running(r) => Some(r),
            _ => self.finished.as_ref(),
        };
        if let Some(r) = r {
            s.turn_length = r.turn_length;
        }
        s.rtt_p50 = median_or(&self.rtts, s.link.rtt);
        s.rtt_p99 = median_or(&self.rtt_p99s, s.link.rtt_p99);
        if let Some(p) = r.and_then(|r| r.playout.as_ref()) {
            s.jitter_buffer = p.buffer();
            s.backlog_samples = p.discarded();
        }
        s
    }

    /// One command's latency: submitted `at`, its turn yielded `now`.
    pub(super) fn record_latency(&mut self, start: Instant, at: Instant, now: Instant) {
        let l = now.saturating_since(at);
        push_sample(&mut self.latencies, l);
        if at >= start + WARM_UP {
            push_sample(&mut self.steady, l);
        }
        if self.reconnected_at.is_some_and(|t| at >= t + WARM_UP) {
            push_sample(&mut self.recovered, l);
        }
    }
}
