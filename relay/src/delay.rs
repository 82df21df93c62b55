//! Adaptive input delay: the relay picks `d` so that an input sent `d` turns
//! ahead reaches it before the turn's deadline for (nearly) every player.
//!
//! `needed = ceil((p95 RTT of the worst player + margin) / turn length)`,
//! clamped to the configured range. The delay grows to `needed` at once
//! (a worse network must not cost late inputs for long) and shrinks by one
//! step only after `needed` has stayed lower for a hold period (so it does
//! not flap on a noisy link).

use crate::config::RelayConfig;
use lockstep::{Duration, Instant};
use std::collections::VecDeque;

/// RTT samples kept per player for the percentile.
const WINDOW: usize = 40;
/// Samples needed from a player before they count.
const MIN_SAMPLES: usize = 3;

/// Chooses the input delay from RTT samples.
#[derive(Debug)]
pub(crate) struct DelayController {
    current: u8,
    samples: Vec<VecDeque<Duration>>,
    lower_since: Option<Instant>,
}

impl DelayController {
    pub(crate) fn new(players: usize, initial: u8) -> Self {
        Self {
            current: initial,
            samples: vec![VecDeque::new(); players],
            lower_since: None,
        }
    }

    /// One RTT sample for `player`.
    pub(crate) fn sample(&mut self, player: usize, rtt: Duration) {
        if let Some(w) = self.samples.get_mut(player) {
            if w.len() >= WINDOW {
                w.pop_front();
            }
            w.push_back(rtt);
        }
    }

    /// The delay in force (the last one decided, or the initial one).
    pub(crate) const fn current(&self) -> u8 {
        self.current
    }

    /// Forgets a player who left.
    pub(crate) fn forget(&mut self, player: usize) {
        if let Some(w) = self.samples.get_mut(player) {
            w.clear();
        }
    }

    /// The worst player's 95th-percentile RTT, if anyone has enough samples.
    pub(crate) fn high_rtt(&self) -> Option<Duration> {
        self.samples
            .iter()
            .filter(|w| w.len() >= MIN_SAMPLES)
            .map(|w| {
                let mut v: Vec<Duration> = w.iter().copied().collect();
                v.sort_unstable();
                v[(v.len() - 1) * 95 / 100]
            })
            .max()
    }

    /// The delay the network needs now.
    pub(crate) fn needed(&self, config: &RelayConfig) -> Option<u8> {
        let rtt = self.high_rtt()?;
        let len = config.turn_length.as_micros().max(1);
        let turns = (rtt + config.delay_margin).as_micros().div_ceil(len);
        let turns = u8::try_from(turns).unwrap_or(u8::MAX);
        Some(turns.clamp(config.min_delay, config.max_delay.max(config.min_delay)))
    }

    /// A new delay to announce, if one is due.
    pub(crate) fn decide(&mut self, now: Instant, config: &RelayConfig) -> Option<u8> {
        let needed = self.needed(config)?;
        if needed > self.current {
            self.current = needed;
            self.lower_since = None;
            return Some(needed);
        }
        if needed == self.current {
            self.lower_since = None;
            return None;
        }
        let since = *self.lower_since.get_or_insert(now);
        if now.saturating_since(since) >= config.shrink_hold {
            self.current -= 1;
            // The next step down needs another full hold.
            self.lower_since = Some(now);
            return Some(self.current);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_fast_shrinks_slow() {
        let config = RelayConfig::default();
        let mut c = DelayController::new(2, 3);
        let t0 = Instant::from_millis(0);
        assert_eq!(c.decide(t0, &config), None);
        for _ in 0..10 {
            c.sample(0, Duration::from_millis(50));
            c.sample(1, Duration::from_millis(480));
        }
        // (480 + 20) / 100 = 5 turns, at once.
        assert_eq!(c.decide(t0, &config), Some(5));
        for _ in 0..WINDOW {
            c.sample(1, Duration::from_millis(50));
        }
        // Needs 1 now, but shrinking waits for the hold and goes one step at a time.
        assert_eq!(c.decide(t0 + Duration::from_secs(1), &config), None);
        assert_eq!(c.decide(t0 + Duration::from_secs(5), &config), None);
        assert_eq!(c.decide(t0 + Duration::from_secs(6), &config), Some(4));
        assert_eq!(c.decide(t0 + Duration::from_secs(7), &config), None);
        assert_eq!(c.decide(t0 + Duration::from_secs(11), &config), Some(3));
    }
}
