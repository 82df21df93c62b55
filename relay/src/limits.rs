//! Bounds on what one connection or match can make the relay hold, so that a
//! hostile or broken peer costs a fixed amount of memory, and rate limits
//! (per connection in the router, per source address in the driver) so that
//! one flooding peer cannot take the relay's time from the others.

use lockstep::{Duration, Instant};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Memory bounds of a router.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most connections tracked at once; more are refused.
    pub max_connections: usize,
    /// Most matches (lobbies and running) at once.
    pub max_matches: usize,
    /// How far ahead of the next turn to close an input may be (turns);
    /// inputs further ahead are dropped and counted.
    pub max_turns_ahead: u32,
    /// Most turns whose hash reports are kept while waiting for every player.
    pub max_hash_turns: usize,
    /// Messages per second one connection may send (an honest peer sends
    /// ~30: input, hash, pong, report); more are dropped and counted.
    pub messages_per_sec: u32,
    /// Messages one connection may send in a burst (a reliable backlog
    /// delivered at once after an outage).
    pub message_burst: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 4096,
            max_matches: 1024,
            max_turns_ahead: 128,
            max_hash_turns: 256,
            messages_per_sec: 300,
            message_burst: 600,
        }
    }
}

/// A token bucket on the caller's clock: `rate` tokens per second, at most
/// `burst` saved up. Integer arithmetic; fractions of a token carry over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenBucket {
    tokens: u32,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket.
    #[must_use]
    pub const fn full(now: Instant, burst: u32) -> Self {
        Self {
            tokens: burst,
            last: now,
        }
    }

    /// Takes one token if there is one.
    pub fn take(&mut self, now: Instant, rate: u32, burst: u32) -> bool {
        let rate = u64::from(rate.max(1));
        let elapsed = now.saturating_since(self.last).as_micros();
        let earned = elapsed.saturating_mul(rate) / 1_000_000;
        if earned > 0 {
            let added = u32::try_from(earned).unwrap_or(u32::MAX);
            self.tokens = self.tokens.saturating_add(added).min(burst);
            // Advance only by the time the earned tokens cost, keeping the remainder.
            self.last += Duration::from_micros(earned * 1_000_000 / rate);
        }
        if self.tokens == 0 {
            return false;
        }
        self.tokens -= 1;
        true
    }
}

/// Per-source-address datagram limit, applied by the driver before the
/// transport sees a datagram, so one flooding address cannot eat the relay's
/// time for everyone else. Memory is bounded: addresses idle for a while are
/// forgotten, and when the table is full new addresses pass unlimited (the
/// transport's stateless handshake still bounds what they cost).
#[derive(Debug)]
pub struct AddrLimiter {
    rate: u32,
    burst: u32,
    max_addrs: usize,
    /// Looked up for every datagram; only swept as a whole (order does not
    /// matter): a hash map.
    buckets: HashMap<SocketAddr, TokenBucket>,
    next_sweep: Instant,
    dropped: u64,
}

/// Idle time after which an address's bucket is forgotten.
const ADDR_IDLE: Duration = Duration::from_secs(10);

impl AddrLimiter {
    /// Allows `rate` datagrams per second (burst `burst`) per source address.
    #[must_use]
    pub fn new(rate: u32, burst: u32, max_addrs: usize) -> Self {
        Self {
            rate,
            burst,
            max_addrs,
            buckets: HashMap::new(),
            next_sweep: Instant::ZERO,
            dropped: 0,
        }
    }

    /// Whether a datagram from `from` may be processed now.
    pub fn allow(&mut self, now: Instant, from: SocketAddr) -> bool {
        if now >= self.next_sweep {
            self.next_sweep = now + Duration::from_secs(1);
            self.buckets
                .retain(|_, b| now.saturating_since(b.last) < ADDR_IDLE);
        }
        let (rate, burst) = (self.rate, self.burst);
        let full = self.buckets.len() >= self.max_addrs;
        let ok = match self.buckets.get_mut(&from) {
            Some(b) => b.take(now, rate, burst),
            None if full => true,
            None => {
                let mut b = TokenBucket::full(now, burst);
                let ok = b.take(now, rate, burst);
                self.buckets.insert(from, b);
                ok
            }
        };
        if !ok {
            self.dropped += 1;
        }
        ok
    }

    /// Datagrams refused so far.
    #[must_use]
    pub const fn dropped(&self) -> u64 {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_allows_the_burst_then_the_rate() {
        let t0 = Instant::from_millis(5);
        let mut b = TokenBucket::full(t0, 10);
        assert_eq!((0..50).filter(|_| b.take(t0, 100, 10)).count(), 10);
        // 1 s later: 100 more earned but capped at the burst.
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!((0..50).filter(|_| b.take(t1, 100, 10)).count(), 10);
        // Every 10 ms one token at 100/s, fractions carried over.
        let mut got = 0;
        for i in 1..=100u64 {
            let t = t1 + Duration::from_micros(i * 5_000);
            got += u32::from(b.take(t, 100, 10));
        }
        assert_eq!(got, 50);
    }

    #[test]
    fn one_flooding_address_does_not_limit_another() {
        let mut l = AddrLimiter::new(100, 200, 16);
        let bad: SocketAddr = "127.0.0.1:1000".parse().unwrap();
        let good: SocketAddr = "127.0.0.1:2000".parse().unwrap();
        let mut now = Instant::from_millis(1);
        let mut good_ok = 0;
        for _ in 0..100 {
            now += Duration::from_millis(10);
            for _ in 0..100 {
                let _ = l.allow(now, bad);
            }
            good_ok += u32::from(l.allow(now, good));
        }
        assert_eq!(good_ok, 100);
        // 1 s of flood at 10k/s: the burst plus ~1 s of rate passes.
        assert!(l.dropped() >= 10_000 - 200 - 100 - 1, "{}", l.dropped());
    }
}

/// The relay's connection limit (`--max-connections`) shared by its event
/// loops: each loop's transport server and router count only their own
/// connections, and a client's address decides which loop's socket it
/// reaches, so a per-loop limit would admit `threads` times the limit. Each
/// loop's [`RouterGlue`](crate::server::RouterGlue) takes a unit here for
/// every connection it admits and gives it back when the connection closes
/// or moves to another loop (which takes it again).
#[derive(Debug)]
pub struct ConnectionQuota {
    used: AtomicUsize,
    max: usize,
}

impl ConnectionQuota {
    /// A quota of `max` connections, none used.
    #[must_use]
    pub const fn new(max: usize) -> Self {
        Self {
            used: AtomicUsize::new(0),
            max,
        }
    }

    /// Takes one unit; false (nothing taken) when all `max` are in use.
    pub fn try_take(&self) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                (u < self.max).then_some(u + 1)
            })
            .is_ok()
    }

    /// Gives back a unit taken by [`ConnectionQuota::try_take`].
    pub fn give_back(&self) {
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| u.checked_sub(1));
    }

    /// Units in use.
    #[must_use]
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }
}
