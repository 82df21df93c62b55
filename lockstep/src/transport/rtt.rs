//! Round-trip time estimation: TCP/KCP-style smoothed RTT and variance and a
//! retransmission timeout with a floor in the tens of milliseconds.

use crate::time::Duration;

/// The smallest RTO: the KCP article recommends 40-60 ms for games.
pub(crate) const MIN_RTO: Duration = Duration::from_millis(40);
/// The largest RTO.
pub(crate) const MAX_RTO: Duration = Duration::from_secs(10);
/// RTO before any sample (RFC 6298's one second).
pub(crate) const INITIAL_RTO: Duration = Duration::from_secs(1);

/// Raw samples kept for the tail figure ([`RttEstimator::p99`]).
pub(crate) const RECENT_SAMPLES: usize = 64;

/// srtt / rttvar estimator (alpha = 1/8, beta = 1/4), plus a ring of the
/// last [`RECENT_SAMPLES`] raw samples: the smoothed RTT hides the tail a
/// latency budget ("p99 RTT + one turn") is about.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RttEstimator {
    srtt: Option<Duration>,
    rttvar: Duration,
    latest: Duration,
    samples: u64,
    /// The last raw samples in µs (saturated at `u32::MAX`), oldest overwritten.
    recent: [u32; RECENT_SAMPLES],
}

impl Default for RttEstimator {
    fn default() -> Self {
        Self {
            srtt: None,
            rttvar: Duration::ZERO,
            latest: Duration::ZERO,
            samples: 0,
            recent: [0; RECENT_SAMPLES],
        }
    }
}

impl RttEstimator {
    /// Folds one RTT sample in.
    pub(crate) fn sample(&mut self, rtt: Duration) {
        self.latest = rtt;
        self.recent[(self.samples % RECENT_SAMPLES as u64) as usize] =
            u32::try_from(rtt.as_micros()).unwrap_or(u32::MAX);
        self.samples += 1;
        match self.srtt {
            None => {
                self.srtt = Some(rtt);
                self.rttvar = Duration::from_micros(rtt.as_micros() / 2);
            }
            Some(srtt) => {
                let (s, r) = (srtt.as_micros(), rtt.as_micros());
                let dev = s.abs_diff(r);
                self.rttvar = Duration::from_micros((3 * self.rttvar.as_micros() + dev) / 4);
                self.srtt = Some(Duration::from_micros((7 * s + r) / 8));
            }
        }
    }

    /// Smoothed RTT, if any sample was taken.
    #[must_use]
    pub(crate) fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    /// Smoothed RTT, or `default` before the first sample.
    #[must_use]
    pub(crate) fn srtt_or(&self, default: Duration) -> Duration {
        self.srtt.unwrap_or(default)
    }

    /// Smoothed mean deviation: the jitter figure reported in stats.
    #[must_use]
    pub(crate) fn rttvar(&self) -> Duration {
        self.rttvar
    }

    /// The 99th percentile (nearest rank) of the last [`RECENT_SAMPLES`]
    /// raw samples, `None` before the first: about the last few seconds'
    /// worst round trip. Of fewer than 100 samples the nearest rank of the
    /// 99th percentile is the last, so it is their maximum (no sort).
    #[must_use]
    pub(crate) fn p99(&self) -> Option<Duration> {
        const _: () = assert!(
            RECENT_SAMPLES < 100,
            "p99 is the maximum only below 100 samples"
        );
        let n = usize::try_from(self.samples).map_or(RECENT_SAMPLES, |n| n.min(RECENT_SAMPLES));
        let max = self.recent[..n].iter().max()?;
        Some(Duration::from_micros(u64::from(*max)))
    }

    /// Number of samples taken.
    #[must_use]
    pub(crate) fn samples(&self) -> u64 {
        self.samples
    }

    /// `srtt + 4 * rttvar`, clamped to `[MIN_RTO, MAX_RTO]`.
    #[must_use]
    pub(crate) fn rto(&self) -> Duration {
        match self.srtt {
            None => INITIAL_RTO,
            Some(srtt) => {
                let rto = srtt + self.rttvar.saturating_mul(4);
                rto.clamp(MIN_RTO, MAX_RTO)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_sample_sets_srtt_and_half_variance() {
        let mut r = RttEstimator::default();
        assert_eq!(r.rto(), INITIAL_RTO);
        r.sample(Duration::from_millis(100));
        assert_eq!(r.srtt(), Some(Duration::from_millis(100)));
        assert_eq!(r.rttvar(), Duration::from_millis(50));
        assert_eq!(r.rto(), Duration::from_millis(300));
    }

    #[test]
    fn p99_is_the_tail_of_the_recent_raw_samples() {
        let mut r = RttEstimator::default();
        assert_eq!(r.p99(), None);
        for i in 0..100u64 {
            // One slow round trip in 50: the smoothed RTT barely moves.
            r.sample(Duration::from_millis(if i % 50 == 7 { 90 } else { 60 }));
        }
        assert_eq!(r.p99(), Some(Duration::from_millis(90)));
        assert!(r.srtt().unwrap() < Duration::from_millis(65));
        // The slow one leaves the ring after 64 newer samples.
        for _ in 0..RECENT_SAMPLES {
            r.sample(Duration::from_millis(60));
        }
        assert_eq!(r.p99(), Some(Duration::from_millis(60)));
    }

    #[test]
    fn smoothing_converges_and_rto_has_a_floor() {
        let mut r = RttEstimator::default();
        for _ in 0..200 {
            r.sample(Duration::from_millis(2));
        }
        assert_eq!(r.srtt(), Some(Duration::from_millis(2)));
        assert_eq!(r.rto(), MIN_RTO, "a 2 ms LAN still gets a tens-of-ms RTO");
        r.sample(Duration::from_millis(10));
        // srtt moves 1/8 of the way; rttvar 1/4 of the deviation.
        assert_eq!(r.srtt(), Some(Duration::from_millis(3)));
        assert_eq!(r.rttvar(), Duration::from_millis(2));
        for _ in 0..500 {
            r.sample(Duration::from_secs(30));
        }
        assert_eq!(r.rto(), MAX_RTO);
    }
}
