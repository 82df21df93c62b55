//! An endpoint with its own clock: it runs fast or slow by a rate in parts
//! per million, and it can be frozen for a while (a SIGSTOP, a laptop lid, a
//! stop-the-world pause). Wrap any [`Endpoint`] to test that clock drift
//! between peers and a frozen peer break nothing, on the virtual network.
//!
//! While frozen the endpoint does nothing: datagrams sent to it queue (as in
//! a socket buffer), its timers do not fire and it sends nothing; when it
//! thaws it is handed the whole queue at once, then runs on.

use super::harness::Endpoint;
use crate::time::Instant;
use std::net::SocketAddr;

/// Parts per million in a second.
const MILLION: i128 = 1_000_000;

/// An [`Endpoint`] whose clock drifts and which can be frozen.
#[derive(Debug)]
pub struct Skewed<E> {
    inner: E,
    /// How much faster (positive) or slower its clock runs, in ppm.
    rate_ppm: i32,
    /// Frozen from the first instant until the second (network time).
    freeze: Option<(Instant, Instant)>,
    queued: Vec<(SocketAddr, Vec<u8>)>,
}

impl<E: Endpoint> Skewed<E> {
    /// `inner` with an exact clock and no freeze.
    pub const fn new(inner: E) -> Self {
        Self {
            inner,
            rate_ppm: 0,
            freeze: None,
            queued: Vec::new(),
        }
    }

    /// Its clock runs `ppm` parts per million fast (negative: slow); 1000
    /// is 0.1 %.
    #[must_use]
    pub const fn with_drift_ppm(mut self, ppm: i32) -> Self {
        self.rate_ppm = ppm;
        self
    }

    /// Frozen from `from` until `until` (network time).
    #[must_use]
    pub const fn with_freeze(mut self, from: Instant, until: Instant) -> Self {
        self.freeze = Some((from, until));
        self
    }

    /// The wrapped endpoint.
    pub const fn inner(&self) -> &E {
        &self.inner
    }

    /// The wrapped endpoint, after the run.
    pub fn into_inner(self) -> E {
        self.inner
    }

    /// The wrapped endpoint, mutably.
    pub const fn inner_mut(&mut self) -> &mut E {
        &mut self.inner
    }

    /// Network time `now` on this endpoint's clock.
    #[must_use]
    pub fn local(&self, now: Instant) -> Instant {
        let t = i128::from(now.as_micros());
        let l = t + t * i128::from(self.rate_ppm) / MILLION;
        Instant::from_micros(u64::try_from(l.max(0)).unwrap_or(u64::MAX))
    }

    /// The first network instant at which this clock reads `local` or later.
    fn global(&self, local: Instant) -> Instant {
        let l = i128::from(local.as_micros());
        let den = MILLION + i128::from(self.rate_ppm);
        let mut g = (l * MILLION + den - 1) / den.max(1);
        while self.local(Instant::from_micros(u64::try_from(g).unwrap_or(0))) < local {
            g += 1;
        }
        Instant::from_micros(u64::try_from(g.max(0)).unwrap_or(u64::MAX))
    }

    fn frozen(&self, now: Instant) -> bool {
        self.freeze.is_some_and(|(a, b)| now >= a && now < b)
    }

    /// After a freeze: hands over what queued, once.
    fn thaw(&mut self, now: Instant) {
        if self.queued.is_empty() || self.frozen(now) {
            return;
        }
        let local = self.local(now);
        for (from, bytes) in std::mem::take(&mut self.queued) {
            self.inner.handle_datagram(local, from, &bytes);
        }
    }
}

impl<E: Endpoint> Endpoint for Skewed<E> {
    fn addr(&self) -> SocketAddr {
        self.inner.addr()
    }
    fn pump(&mut self, now: Instant) {
        if !self.frozen(now) {
            self.thaw(now);
            let local = self.local(now);
            self.inner.pump(local);
        }
    }
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]) {
        if self.frozen(now) || !self.queued.is_empty() {
            self.queued.push((from, bytes.to_vec()));
            self.thaw(now);
        } else {
            let local = self.local(now);
            self.inner.handle_datagram(local, from, bytes);
        }
    }
    fn handle_timeout(&mut self, now: Instant) {
        if !self.frozen(now) {
            self.thaw(now);
            let local = self.local(now);
            self.inner.handle_timeout(local);
        }
    }
    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<SocketAddr> {
        if self.frozen(now) {
            return None;
        }
        let local = self.local(now);
        self.inner.poll_transmit(local, buf)
    }
    fn poll_timeout(&mut self) -> Option<Instant> {
        let t = self.inner.poll_timeout().map(|l| self.global(l));
        let Some((from, until)) = self.freeze else {
            return t;
        };
        // No timer fires while frozen: they all wait for the thaw, and so
        // does the queue.
        let t = t.map(|t| if t >= from && t < until { until } else { t });
        if self.queued.is_empty() {
            t
        } else {
            Some(t.map_or(until, |t| t.min(until)))
        }
    }
    fn is_done(&self) -> bool {
        self.inner.is_done()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Nop;
    impl Endpoint for Nop {
        fn addr(&self) -> SocketAddr {
            SocketAddr::from(([127, 0, 0, 1], 1))
        }
        fn handle_datagram(&mut self, _: Instant, _: SocketAddr, _: &[u8]) {}
        fn handle_timeout(&mut self, _: Instant) {}
        fn poll_transmit(&mut self, _: Instant, _: &mut Vec<u8>) -> Option<SocketAddr> {
            None
        }
        fn poll_timeout(&mut self) -> Option<Instant> {
            None
        }
        fn is_done(&self) -> bool {
            true
        }
    }

    #[test]
    fn a_fast_clock_reads_ahead_and_its_timers_map_back() {
        let s = Skewed::new(Nop).with_drift_ppm(1000);
        assert_eq!(
            s.local(Instant::from_millis(10_000)),
            Instant::from_millis(10_010)
        );
        let g = s.global(Instant::from_millis(10_010));
        assert_eq!(g, Instant::from_millis(10_000));
        let slow = Skewed::new(Nop).with_drift_ppm(-1000);
        assert_eq!(
            slow.local(Instant::from_millis(10_000)),
            Instant::from_millis(9_990)
        );
        let l = Instant::from_micros(123_457);
        assert!(slow.local(slow.global(l)) >= l);
    }
}
