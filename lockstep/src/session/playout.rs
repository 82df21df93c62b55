//! Playout under the relay's clock (`input_delay` 0 in `Start`): when each
//! turn is due at this peer, kept in step with the relay throughout, and the
//! ledger that matches our commands to the bundles they landed in.
//!
//! The relay closes turn `T` every turn length on its own clock, so bundle
//! `T` arrives at about `offset + (T - first) * turn_length + down-link
//! delay` on our clock. Each arrival is a sample `s = arrival - (T - first) *
//! turn_length`; a turn is due at `(T - first) * turn_length + base`, where
//! `base` is a percentile of the recent samples: a small jitter buffer sized
//! from this peer's own down-link, nobody else's. Because the samples keep
//! coming, the schedule follows the relay's clock through drift, a late
//! `Start`, or a freeze: it is never fixed by a single arrival.
//!
//! Samples that are not link delay are discarded: bundles handed over in the
//! first wake-up after this peer was not run for a while (it was frozen or
//! descheduled: they queued in the socket), and bundles far behind the
//! schedule (a backlog released at once after a freeze of the path). A
//! bundle that arrives after its due time is played at once: lateness costs
//! smoothness, never extra latency.

use crate::time::{Duration, Instant};
use sim::Turn;
use std::collections::VecDeque;

/// Arrival samples kept for the percentiles.
const WINDOW: usize = 64;
/// Consecutive far-behind samples after which they are taken as the link's
/// new delay (the window restarts from them).
const OUTLIERS_TO_RESET: u32 = 8;

/// How the jitter buffer is sized; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlayoutConfig {
    /// The percentile of recent arrival samples a turn is due at (0..=100):
    /// higher plays more smoothly, lower with less latency.
    pub percentile: u8,
    /// Most the buffer may add above the lowest recent arrivals, in turn
    /// lengths per mille (1000: one turn).
    pub max_buffer_permille: u32,
}

impl Default for PlayoutConfig {
    fn default() -> Self {
        Self {
            percentile: 50,
            max_buffer_permille: 500,
        }
    }
}

/// The peer's playout schedule under the relay's clock.
#[derive(Clone, Debug)]
pub(crate) struct Playout {
    config: PlayoutConfig,
    first: Turn,
    turn_length: Duration,
    /// Recent samples `arrival - (T - first) * turn_length`, in µs of our clock.
    samples: VecDeque<i64>,
    /// The due offset from the samples (µs), recomputed on each new sample.
    base: i64,
    /// Far-behind samples in a row.
    outliers: u32,
    /// The wake-up instant whose arrivals are a backlog (after a gap).
    backlog_at: Option<Instant>,
    /// Samples discarded as backlog.
    discarded: u32,
}

impl Playout {
    /// A schedule for a match whose `Start` arrived at `start`: until the
    /// first bundle arrives, turn `first` is taken as due one turn length
    /// after it (the relay closes it one turn length after sending `Start`,
    /// and the down-link delay is in both).
    pub(crate) fn new(
        config: PlayoutConfig,
        start: Instant,
        first: Turn,
        turn_length: Duration,
    ) -> Self {
        let base = i64::try_from((start + turn_length).as_micros()).unwrap_or(i64::MAX);
        Self {
            config,
            first,
            turn_length,
            samples: VecDeque::new(),
            base,
            outliers: 0,
            backlog_at: None,
            discarded: 0,
        }
    }

    fn nominal(&self, turn: Turn) -> i64 {
        let n = i64::from(turn.0.saturating_sub(self.first.0));
        n.saturating_mul(i64::try_from(self.turn_length.as_micros()).unwrap_or(i64::MAX))
    }

    /// When `turn` is due on our clock.
    pub(crate) fn due(&self, turn: Turn) -> Instant {
        let at = self.base.saturating_add(self.nominal(turn));
        Instant::from_micros(u64::try_from(at).unwrap_or(0))
    }

    /// The driver handed us control at `now` after not doing so since
    /// `previous`: if the gap is much longer than any timer we asked for,
    /// this peer was not running, and what arrives now was queued.
    pub(crate) fn handle_wakeup(&mut self, previous: Instant, now: Instant) {
        let gap = self
            .turn_length
            .saturating_mul(2)
            .max(Duration::from_millis(100));
        if now.saturating_since(previous) > gap {
            self.backlog_at = Some(now);
        }
    }

    /// Bundle `turn` arrived at `now`: one sample, unless it is backlog.
    pub(crate) fn handle_arrival(&mut self, now: Instant, turn: Turn) {
        if self.backlog_at == Some(now) {
            self.discarded += 1;
            return;
        }
        let s = i64::try_from(now.as_micros())
            .unwrap_or(i64::MAX)
            .saturating_sub(self.nominal(turn));
        let len = i64::try_from(self.turn_length.as_micros()).unwrap_or(i64::MAX);
        // Far behind the schedule: a backlog released at once, not the link.
        let far = len.saturating_mul(8).max(1_000_000);
        if let Some(low) = self.low()
            && s > low.saturating_add(far)
        {
            self.outliers += 1;
            if self.outliers < OUTLIERS_TO_RESET {
                self.discarded += 1;
                return;
            }
            // Eight in a row: the link itself got that slow; start over.
            self.samples.clear();
        }
        self.outliers = 0;
        if self.samples.len() >= WINDOW {
            self.samples.pop_front();
        }
        self.samples.push_back(s);
        self.recompute();
    }

    /// The lowest recent sample (the fastest recent down-link trip).
    fn low(&self) -> Option<i64> {
        self.samples.iter().copied().min()
    }

    fn recompute(&mut self) {
        let mut v: Vec<i64> = self.samples.iter().copied().collect();
        if v.is_empty() {
            return;
        }
        v.sort_unstable();
        let p = usize::from(self.config.percentile.min(100));
        let at = v[(v.len() - 1) * p / 100];
        let len = i64::try_from(self.turn_length.as_micros()).unwrap_or(i64::MAX);
        let cap = len.saturating_mul(i64::from(self.config.max_buffer_permille)) / 1000;
        self.base = at.min(v[0].saturating_add(cap));
    }

    /// How long the buffer holds a bundle that arrives as fast as the
    /// fastest recent one: the jitter buffer.
    pub(crate) fn buffer(&self) -> Duration {
        let low = self.low().unwrap_or(self.base);
        Duration::from_micros(u64::try_from(self.base.saturating_sub(low)).unwrap_or(0))
    }

    /// Samples discarded as backlog so far.
    pub(crate) const fn discarded(&self) -> u32 {
        self.discarded
    }
}

/// Our sent inputs under the relay's clock, oldest first: their sequence
/// numbers and their chunks' submit times. The relay stamps each input into
/// the turn it closes next, in the order they arrive (the reliable channel
/// keeps ours in order), so our entries in successive bundles are these
/// chunks in this order, minus the inputs it refused.
#[derive(Clone, Debug, Default)]
pub(crate) struct Ledger {
    next_seq: u32,
    sent: VecDeque<(u32, VecDeque<Instant>)>,
}

impl Ledger {
    /// Records an input of chunks submitted at `times`; its sequence number.
    pub(crate) fn record(&mut self, times: VecDeque<Instant>) -> u32 {
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        if !times.is_empty() {
            self.sent.push_back((seq, times));
        }
        seq
    }

    /// The relay refused input `seq`: its chunks will be in no bundle. Their
    /// submit times, oldest first.
    pub(crate) fn refuse(&mut self, seq: u32) -> Vec<Instant> {
        let Some(i) = self.sent.iter().position(|(s, _)| *s == seq) else {
            return Vec::new();
        };
        self.sent
            .remove(i)
            .map(|(_, times)| times.into())
            .unwrap_or_default()
    }

    /// The sequence number the next input gets.
    pub(crate) const fn next_seq(&self) -> u32 {
        self.next_seq
    }

    /// Forgets the inputs numbered before `seq` still waiting for a
    /// bundle: they went to a relay that lost them (it restarted), so no
    /// bundle will carry them, and matching later chunks to their submit
    /// times would count every later command as that much later.
    pub(crate) fn forget_before(&mut self, seq: u32) {
        // Sequence numbers wrap: "before" is a positive distance back.
        while self
            .sent
            .front()
            .is_some_and(|(s, _)| i32::try_from(seq.wrapping_sub(*s)).is_ok_and(|d| d > 0))
        {
            self.sent.pop_front();
        }
    }

    /// The submit times of our next `n` chunks, which a bundle carried.
    pub(crate) fn take(&mut self, n: usize) -> Vec<Instant> {
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let Some((_, times)) = self.sent.front_mut() else {
                break;
            };
            match times.pop_front() {
                Some(t) => out.push(t),
                None => {
                    self.sent.pop_front();
                }
            }
        }
        if self.sent.front().is_some_and(|(_, t)| t.is_empty()) {
            self.sent.pop_front();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(x: u64) -> Instant {
        Instant::from_millis(x)
    }

    fn playout() -> Playout {
        Playout::new(
            PlayoutConfig::default(),
            ms(1000),
            Turn(0),
            Duration::from_millis(100),
        )
    }

    #[test]
    fn before_any_bundle_the_first_turn_is_due_one_turn_after_the_start() {
        let p = playout();
        assert_eq!(p.due(Turn(0)), ms(1100));
        assert_eq!(p.due(Turn(3)), ms(1400));
    }

    #[test]
    fn the_schedule_follows_the_arrivals_not_the_start() {
        // The Start was slow (or lost and resent): bundles come 250 ms later
        // than the Start suggested; the schedule moves to them.
        let mut p = playout();
        for t in 0..20u32 {
            p.handle_arrival(ms(1350 + 100 * u64::from(t)), Turn(t));
        }
        assert_eq!(p.due(Turn(20)), ms(1350 + 2000));
        assert_eq!(p.buffer(), Duration::ZERO);
    }

    #[test]
    fn a_drifting_clock_is_followed() {
        // Our clock runs 0.1 % fast: arrivals drift by 0.1 ms per turn.
        let mut p = playout();
        for t in 0..1000u32 {
            p.handle_arrival(
                Instant::from_micros(1_100_000 + 100_100 * u64::from(t)),
                Turn(t),
            );
        }
        let due = p.due(Turn(1000)).as_micros();
        let expected = 1_100_000 + 100_100 * 1000;
        assert!(due.abs_diff(expected) < 10_000, "{due} vs {expected}");
    }

    #[test]
    fn backlog_after_a_gap_is_not_a_sample() {
        let mut p = playout();
        for t in 0..10u32 {
            p.handle_arrival(ms(1100 + 100 * u64::from(t)), Turn(t));
        }
        let before = p.due(Turn(40));
        // Frozen for 3 s: thirty bundles handed over at once on waking.
        p.handle_wakeup(ms(2000), ms(5000));
        for t in 10..40u32 {
            p.handle_arrival(ms(5000), Turn(t));
        }
        assert_eq!(p.discarded(), 30);
        assert_eq!(p.due(Turn(40)), before);
    }

    #[test]
    fn far_behind_samples_are_discarded_until_they_persist() {
        let mut p = playout();
        for t in 0..10u32 {
            p.handle_arrival(ms(1100 + 100 * u64::from(t)), Turn(t));
        }
        // A released backlog, arriving without a gap on our side.
        for t in 10..15u32 {
            p.handle_arrival(ms(4000 + u64::from(t)), Turn(t));
        }
        assert_eq!(p.due(Turn(20)), ms(3100));
        // The link really became 2 s slower: after eight, it is the new normal.
        for t in 15..30u32 {
            p.handle_arrival(ms(3100 + 100 * u64::from(t)), Turn(t));
        }
        assert_eq!(p.due(Turn(30)), ms(3100 + 3000));
    }

    #[test]
    fn the_buffer_covers_jitter_up_to_its_cap() {
        let mut p = playout();
        // Down-link jitter of 0..40 ms.
        for t in 0..64u32 {
            let jitter = u64::from(t % 5) * 10;
            p.handle_arrival(ms(1100 + 100 * u64::from(t) + jitter), Turn(t));
        }
        assert_eq!(p.buffer(), Duration::from_millis(20));
        // Jitter of 0..400 ms: capped at half a turn.
        for t in 64..128u32 {
            let jitter = u64::from(t % 5) * 100;
            p.handle_arrival(ms(1100 + 100 * u64::from(t) + jitter), Turn(t));
        }
        assert_eq!(p.buffer(), Duration::from_millis(50));
    }

    #[test]
    fn the_ledger_matches_chunks_in_order_and_skips_refused_inputs() {
        let mut l = Ledger::default();
        let a = l.record([ms(1), ms(2)].into());
        let b = l.record([ms(3)].into());
        let _c = l.record([ms(4), ms(5)].into());
        assert_eq!((a, b), (0, 1));
        assert_eq!(l.refuse(b), vec![ms(3)]);
        assert!(l.refuse(b).is_empty(), "refused once");
        assert_eq!(l.take(1), vec![ms(1)]);
        assert_eq!(l.take(2), vec![ms(2), ms(4)]);
        assert_eq!(l.take(5), vec![ms(5)]);
        assert!(l.take(1).is_empty());
    }

    /// Inputs sent to a relay that restarted without them are forgotten:
    /// the next bundle's chunk is matched to the first input after them,
    /// across the wrap of the sequence numbers.
    #[test]
    fn inputs_lost_with_the_relay_are_forgotten() {
        let mut l = Ledger {
            next_seq: u32::MAX - 1,
            ..Ledger::default()
        };
        for t in [10, 20, 30] {
            l.record(VecDeque::from([ms(t)]));
        }
        // Inputs u32::MAX - 1 and u32::MAX went to the lost relay.
        let cut = l.next_seq().wrapping_sub(1);
        l.forget_before(cut);
        assert_eq!(l.take(1), vec![ms(30)]);
        l.forget_before(cut);
        assert!(l.take(1).is_empty());
    }
}
