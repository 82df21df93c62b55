//! Gaffer's binary congestion avoidance: a Good mode (fast send rate) and a
//! Bad mode (slow rate), switched by RTT against a threshold, with a
//! recovery time `t` that doubles on flapping and halves while stable.

use crate::time::{Duration, Instant};

/// Which send rate is in force.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CongestionMode {
    /// Conditions are good: send at the fast rate.
    Good,
    /// RTT is above the threshold: send at the slow rate.
    Bad,
}

/// Tuning of the good/bad mode machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CongestionConfig {
    /// Packets per second in Good mode.
    pub good_pps: u32,
    /// Packets per second in Bad mode.
    pub bad_pps: u32,
    /// Bulk packets per second in Good mode (the bulk path's own budget, on
    /// top of the turn traffic's, which always goes first).
    pub bulk_good_pps: u32,
    /// Bulk packets per second in Bad mode.
    pub bulk_bad_pps: u32,
    /// RTT above which conditions are bad.
    pub rtt_threshold: Duration,
    /// Recovery time `t` at start.
    pub initial_recovery: Duration,
    /// Floor of `t`.
    pub min_recovery: Duration,
    /// Ceiling of `t`.
    pub max_recovery: Duration,
    /// Dropping back to Bad within this long of reaching Good doubles `t`;
    /// each such period spent in Good halves it.
    pub stable_period: Duration,
}

impl Default for CongestionConfig {
    fn default() -> Self {
        Self {
            good_pps: 30,
            bad_pps: 10,
            bulk_good_pps: 200,
            bulk_bad_pps: 20,
            rtt_threshold: Duration::from_millis(250),
            initial_recovery: Duration::from_secs(4),
            min_recovery: Duration::from_secs(1),
            max_recovery: Duration::from_secs(60),
            stable_period: Duration::from_secs(10),
        }
    }
}

/// The mode machine. Starts in Good: lockstep latency matters from the first turn,
/// and one RTT sample above the threshold drops it at once.
#[derive(Clone, Debug)]
pub(crate) struct Congestion {
    cfg: CongestionConfig,
    mode: CongestionMode,
    recovery: Duration,
    mode_since: Instant,
    good_since: Option<Instant>,
    last_halving: Instant,
}

impl Congestion {
    /// A machine in Good mode at `now`.
    #[must_use]
    pub(crate) fn new(cfg: CongestionConfig, now: Instant) -> Self {
        Self {
            cfg,
            mode: CongestionMode::Good,
            recovery: cfg.initial_recovery,
            mode_since: now,
            good_since: None,
            last_halving: now,
        }
    }

    /// Current mode.
    #[must_use]
    pub(crate) fn mode(&self) -> CongestionMode {
        self.mode
    }

    /// Current recovery time `t`.
    #[must_use]
    #[cfg(test)]
    pub(crate) fn recovery(&self) -> Duration {
        self.recovery
    }

    /// Packets per second allowed in the current mode.
    #[must_use]
    pub(crate) fn pps(&self) -> u32 {
        match self.mode {
            CongestionMode::Good => self.cfg.good_pps,
            CongestionMode::Bad => self.cfg.bad_pps,
        }
        .max(1)
    }

    /// Time between packets in the current mode.
    #[must_use]
    pub(crate) fn interval(&self) -> Duration {
        Duration::from_micros(1_000_000 / u64::from(self.pps()))
    }

    /// Time between bulk packets in the current mode.
    #[must_use]
    pub(crate) fn bulk_interval(&self) -> Duration {
        let pps = match self.mode {
            CongestionMode::Good => self.cfg.bulk_good_pps,
            CongestionMode::Bad => self.cfg.bulk_bad_pps,
        }
        .max(1);
        Duration::from_micros(1_000_000 / u64::from(pps))
    }

    /// When [`Congestion::update`] would change the mode with no new RTT
    /// sample: back to Good once conditions have been good for `t`. (The
    /// other changes follow a new sample, or are caught up by the next
    /// update whenever it comes.) Lets a driver that only wakes a
    /// connection at its deadline switch at the same instant.
    #[must_use]
    pub(crate) fn next_change(&self) -> Option<Instant> {
        match self.mode {
            CongestionMode::Good => None,
            CongestionMode::Bad => self.good_since.map(|s| s + self.recovery),
        }
    }

    /// Re-evaluates the mode given the current smoothed RTT.
    pub(crate) fn update(&mut self, now: Instant, rtt: Duration) {
        let bad = rtt > self.cfg.rtt_threshold;
        match self.mode {
            CongestionMode::Good => {
                // Time already spent in Good earns its halvings even if this sample is bad.
                while now.saturating_since(self.last_halving) >= self.cfg.stable_period {
                    self.recovery = Duration::from_micros(self.recovery.as_micros() / 2)
                        .max(self.cfg.min_recovery);
                    self.last_halving += self.cfg.stable_period;
                }
                if bad {
                    if now.saturating_since(self.mode_since) < self.cfg.stable_period {
                        self.recovery =
                            (self.recovery.saturating_mul(2)).min(self.cfg.max_recovery);
                    }
                    self.mode = CongestionMode::Bad;
                    self.mode_since = now;
                    self.good_since = None;
                }
            }
            CongestionMode::Bad => {
                if bad {
                    self.good_since = None;
                } else {
                    let since = *self.good_since.get_or_insert(now);
                    if now.saturating_since(since) >= self.recovery {
                        self.mode = CongestionMode::Good;
                        self.mode_since = now;
                        self.last_halving = now;
                        self.good_since = None;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: Duration = Duration::from_millis(100);
    const BAD: Duration = Duration::from_millis(300);

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    fn machine() -> Congestion {
        Congestion::new(CongestionConfig::default(), at(0))
    }

    #[test]
    fn rates_are_thirty_and_ten_pps() {
        let mut c = machine();
        assert_eq!((c.mode(), c.pps()), (CongestionMode::Good, 30));
        assert_eq!(c.interval(), Duration::from_micros(33_333));
        assert_eq!(c.bulk_interval(), Duration::from_millis(5));
        c.update(at(1), BAD);
        assert_eq!((c.mode(), c.pps()), (CongestionMode::Bad, 10));
        assert_eq!(c.interval(), Duration::from_millis(100));
        assert_eq!(c.bulk_interval(), Duration::from_millis(50));
    }

    #[test]
    fn next_change_is_when_t_of_good_conditions_is_over() {
        let mut c = machine();
        assert_eq!(c.next_change(), None, "Good changes only on a sample");
        c.update(at(1_000), BAD);
        assert_eq!(c.next_change(), None, "Bad with bad samples stays");
        c.update(at(2_000), GOOD);
        let due = c.next_change().unwrap();
        assert_eq!(due, at(2_000) + c.recovery());
        c.update(due - Duration::from_micros(1), GOOD);
        assert_eq!(c.mode(), CongestionMode::Bad);
        c.update(due, GOOD);
        assert_eq!((c.mode(), c.next_change()), (CongestionMode::Good, None));
    }

    #[test]
    fn drops_to_bad_at_once_when_rtt_passes_threshold() {
        let mut c = machine();
        c.update(at(20_000), Duration::from_millis(250));
        assert_eq!(
            c.mode(),
            CongestionMode::Good,
            "threshold itself is still good"
        );
        c.update(at(20_001), Duration::from_millis(251));
        assert_eq!(c.mode(), CongestionMode::Bad);
    }

    #[test]
    fn returns_to_good_after_t_of_good_conditions() {
        let mut c = machine();
        c.update(at(30_000), BAD);
        let t = c.recovery().as_millis();
        c.update(at(30_100), GOOD);
        c.update(at(30_100 + t - 1), GOOD);
        assert_eq!(c.mode(), CongestionMode::Bad);
        // A bad sample restarts the good streak.
        c.update(at(30_100 + t - 1), BAD);
        c.update(at(30_100 + t), GOOD);
        c.update(at(30_100 + 2 * t - 1), GOOD);
        assert_eq!(c.mode(), CongestionMode::Bad);
        c.update(at(30_100 + 2 * t), GOOD);
        assert_eq!(c.mode(), CongestionMode::Good);
    }

    #[test]
    fn t_doubles_when_good_turns_bad_within_ten_seconds_clamped_at_sixty() {
        let mut c = machine();
        assert_eq!(c.recovery(), Duration::from_secs(4));
        // Started Good at 0; bad at 5 s (< 10 s in Good): t doubles.
        c.update(at(5_000), BAD);
        assert_eq!(c.recovery(), Duration::from_secs(8));
        let mut now = 5_000;
        for expected in [16, 32, 60, 60] {
            now += 1;
            c.update(at(now), GOOD);
            now += c.recovery().as_millis();
            c.update(at(now), GOOD);
            assert_eq!(c.mode(), CongestionMode::Good);
            now += 9_999;
            c.update(at(now), BAD);
            assert_eq!(c.recovery(), Duration::from_secs(expected));
        }
    }

    #[test]
    fn t_halves_for_each_ten_seconds_of_good_clamped_at_one() {
        let mut c = machine();
        c.update(at(9_999), GOOD);
        assert_eq!(c.recovery(), Duration::from_secs(4), "not yet 10 s in good");
        c.update(at(10_000), BAD);
        assert_eq!(
            c.recovery(),
            Duration::from_secs(2),
            "10 s of good halved t, no doubling"
        );
        c.update(at(10_001), GOOD);
        c.update(at(12_001), GOOD);
        assert_eq!(c.mode(), CongestionMode::Good);
        c.update(at(22_000), GOOD);
        assert_eq!(c.recovery(), Duration::from_secs(2));
        c.update(at(22_001), GOOD);
        assert_eq!(c.recovery(), Duration::from_secs(1));
        c.update(at(92_001), GOOD);
        assert_eq!(
            c.recovery(),
            Duration::from_secs(1),
            "clamped at the minimum"
        );
    }
}
