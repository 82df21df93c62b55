//! A seeded, virtual-clock network simulator: an impaired one-way [`Link`]
//! (latency, jitter, independent and Gilbert–Elliott burst loss,
//! duplication, reordering, bandwidth cap) and a [`Network`] routing
//! datagrams between addresses through per-direction links. Same seed, same
//! inputs, same deliveries. [`harness`] drives sans-IO endpoints over it on a
//! virtual clock (testing a game under loss); [`proxy`] puts the same model
//! on real UDP.

pub mod harness;
pub mod proxy;
pub mod skew;

pub use harness::{Endpoint, Harness, Stopped, Traffic};

use crate::rng::Rng;
use crate::time::{Duration, Instant};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::net::SocketAddr;

/// Two-state burst-loss model: in the Bad state packets are lost with `loss_in_bad`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GilbertElliott {
    /// Per-packet chance of moving Good → Bad.
    pub p_enter_bad: f64,
    /// Per-packet chance of moving Bad → Good.
    pub p_leave_bad: f64,
    /// Loss probability while Bad.
    pub loss_in_bad: f64,
}

/// Impairments of one direction.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkConfig {
    /// Base one-way delay.
    pub latency: Duration,
    /// Delay varies uniformly within ± this.
    pub jitter: Duration,
    /// Independent loss probability.
    pub loss: f64,
    /// Optional burst loss on top of `loss`.
    pub burst: Option<GilbertElliott>,
    /// Probability a delivered packet arrives twice.
    pub duplicate: f64,
    /// Probability a packet is held back (extra delay) so later ones overtake it.
    pub reorder: f64,
    /// Most extra delay given to a reordered packet (or a duplicate).
    pub reorder_delay: Duration,
    /// Bytes per second the link carries (`None`: unlimited). Excess queues.
    pub bandwidth: Option<u64>,
    /// Queueing delay beyond which the bandwidth-capped link drops (tail drop).
    pub max_queue_delay: Duration,
}

impl Default for LinkConfig {
    fn default() -> Self {
        Self {
            latency: Duration::ZERO,
            jitter: Duration::ZERO,
            loss: 0.0,
            burst: None,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::from_millis(50),
            bandwidth: None,
            max_queue_delay: Duration::from_secs(1),
        }
    }
}

impl LinkConfig {
    /// A perfect link with `latency`.
    #[must_use]
    pub fn with_latency(latency: Duration) -> Self {
        Self {
            latency,
            ..Self::default()
        }
    }
}

/// What a link did with the packets it was given.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct LinkCounters {
    /// Packets offered.
    pub sent: u64,
    /// Packets dropped (independent, burst or queue loss).
    pub lost: u64,
    /// Extra copies created.
    pub duplicated: u64,
    /// Packets held back to reorder.
    pub reordered: u64,
    /// Packets handed out (copies included).
    pub delivered: u64,
    /// Sum of one-way delays of delivered packets, µs.
    pub delay_sum_us: u64,
}

impl LinkCounters {
    /// Mean one-way delay of delivered packets.
    #[must_use]
    pub fn mean_delay(&self) -> Duration {
        Duration::from_micros(self.delay_sum_us.checked_div(self.delivered).unwrap_or(0))
    }

    /// Fraction of offered packets dropped.
    #[must_use]
    pub fn loss_rate(&self) -> f64 {
        if self.sent == 0 {
            0.0
        } else {
            self.lost as f64 / self.sent as f64
        }
    }
}

/// A datagram in flight: (arrival, tie-break order, send time, bytes).
type InFlight = Reverse<(Instant, u64, Instant, Vec<u8>)>;

/// One direction of an impaired path.
#[derive(Clone, Debug)]
pub struct Link {
    cfg: LinkConfig,
    rng: Rng,
    queue: BinaryHeap<InFlight>,
    order: u64,
    in_bad: bool,
    busy_until: Instant,
    counters: LinkCounters,
}

impl Link {
    /// A link with impairments `cfg` driven by `seed`.
    #[must_use]
    pub fn new(cfg: LinkConfig, seed: u64) -> Self {
        Self {
            cfg,
            rng: Rng::new(seed),
            queue: BinaryHeap::new(),
            order: 0,
            in_bad: false,
            busy_until: Instant::ZERO,
            counters: LinkCounters::default(),
        }
    }

    /// Current impairments.
    #[must_use]
    pub fn config(&self) -> &LinkConfig {
        &self.cfg
    }

    /// Changes impairments from now on (packets in flight keep their timing).
    pub fn set_config(&mut self, cfg: LinkConfig) {
        self.cfg = cfg;
    }

    /// What happened so far.
    #[must_use]
    pub fn counters(&self) -> LinkCounters {
        self.counters
    }

    fn jittered(&mut self) -> Duration {
        let j = self.cfg.jitter.as_micros();
        let base = self.cfg.latency.as_micros();
        if j == 0 {
            return self.cfg.latency;
        }
        let offset = self.rng.below(2 * j + 1);
        Duration::from_micros((base + offset).saturating_sub(j))
    }

    fn extra(&mut self) -> Duration {
        Duration::from_micros(1 + self.rng.below(self.cfg.reorder_delay.as_micros().max(1)))
    }

    /// Offers a datagram at `now`.
    pub fn send(&mut self, now: Instant, bytes: Vec<u8>) {
        self.counters.sent += 1;
        if let Some(ge) = self.cfg.burst {
            let flip = if self.in_bad {
                ge.p_leave_bad
            } else {
                ge.p_enter_bad
            };
            if self.rng.chance(flip) {
                self.in_bad = !self.in_bad;
            }
            if self.in_bad && self.rng.chance(ge.loss_in_bad) {
                self.counters.lost += 1;
                return;
            }
        }
        if self.rng.chance(self.cfg.loss) {
            self.counters.lost += 1;
            return;
        }
        let mut depart = now;
        if let Some(bps) = self.cfg.bandwidth.filter(|&b| b > 0) {
            let start = self.busy_until.max(now);
            if start.saturating_since(now) > self.cfg.max_queue_delay {
                self.counters.lost += 1;
                return;
            }
            let tx = Duration::from_micros(bytes.len() as u64 * 1_000_000 / bps);
            depart = start + tx;
            self.busy_until = depart;
        }
        let mut at = depart + self.jittered();
        if self.rng.chance(self.cfg.reorder) {
            self.counters.reordered += 1;
            at += self.extra();
        }
        if self.rng.chance(self.cfg.duplicate) {
            self.counters.duplicated += 1;
            let dup_at = at + self.extra();
            self.push(dup_at, now, bytes.clone());
        }
        self.push(at, now, bytes);
    }

    fn push(&mut self, at: Instant, sent: Instant, bytes: Vec<u8>) {
        self.order += 1;
        self.queue.push(Reverse((at, self.order, sent, bytes)));
    }

    /// When the next datagram arrives.
    #[must_use]
    pub fn next_delivery(&self) -> Option<Instant> {
        self.queue.peek().map(|Reverse((at, ..))| *at)
    }

    /// The next datagram due by `now`.
    pub fn poll_deliver(&mut self, now: Instant) -> Option<Vec<u8>> {
        if self.next_delivery()? > now {
            return None;
        }
        let Reverse((at, _, sent, bytes)) = self.queue.pop()?;
        self.counters.delivered += 1;
        self.counters.delay_sum_us += at.saturating_since(sent).as_micros();
        Some(bytes)
    }
}

fn addr_seed(seed: u64, from: SocketAddr, to: SocketAddr) -> u64 {
    let mut h = blake3::Hasher::new();
    h.update(&seed.to_le_bytes());
    h.update(from.to_string().as_bytes());
    h.update(b">");
    h.update(to.to_string().as_bytes());
    let mut b = [0u8; 8];
    b.copy_from_slice(&h.finalize().as_bytes()[..8]);
    u64::from_le_bytes(b)
}

/// Routes datagrams between addresses through one [`Link`] per direction.
#[derive(Clone, Debug)]
pub struct Network {
    seed: u64,
    default: LinkConfig,
    links: BTreeMap<(SocketAddr, SocketAddr), Link>,
}

impl Network {
    /// A network whose links start with `default` impairments.
    #[must_use]
    pub fn new(seed: u64, default: LinkConfig) -> Self {
        Self {
            seed,
            default,
            links: BTreeMap::new(),
        }
    }

    /// The link carrying `from → to` (created with the default config on first use).
    pub fn link_mut(&mut self, from: SocketAddr, to: SocketAddr) -> &mut Link {
        let (seed, default) = (self.seed, self.default);
        self.links
            .entry((from, to))
            .or_insert_with(|| Link::new(default, addr_seed(seed, from, to)))
    }

    /// Sets the impairments of `from → to`.
    pub fn set_link(&mut self, from: SocketAddr, to: SocketAddr, cfg: LinkConfig) {
        self.link_mut(from, to).set_config(cfg);
    }

    /// Sets the impairments of every existing link and of links created later.
    pub fn set_all(&mut self, cfg: LinkConfig) {
        self.default = cfg;
        for l in self.links.values_mut() {
            l.set_config(cfg);
        }
    }

    /// Counters of `from → to`.
    #[must_use]
    pub fn counters(&self, from: SocketAddr, to: SocketAddr) -> LinkCounters {
        self.links
            .get(&(from, to))
            .map(Link::counters)
            .unwrap_or_default()
    }

    /// Offers a datagram.
    pub fn send(&mut self, now: Instant, from: SocketAddr, to: SocketAddr, bytes: &[u8]) {
        self.link_mut(from, to).send(now, bytes.to_vec());
    }

    /// When the next datagram arrives anywhere.
    #[must_use]
    pub fn next_delivery(&self) -> Option<Instant> {
        self.links.values().filter_map(Link::next_delivery).min()
    }

    /// The earliest datagram due by `now`, as `(from, to, bytes)`.
    pub fn poll_deliver(&mut self, now: Instant) -> Option<(SocketAddr, SocketAddr, Vec<u8>)> {
        let (&key, _) = self
            .links
            .iter()
            .filter_map(|(k, l)| l.next_delivery().map(|t| (k, t)))
            .filter(|&(_, t)| t <= now)
            .min_by_key(|&(_, t)| t)?;
        let bytes = self.links.get_mut(&key)?.poll_deliver(now)?;
        Some((key.0, key.1, bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(link: &mut Link, until: Instant) -> Vec<(Instant, Vec<u8>)> {
        let mut out = Vec::new();
        while let Some(t) = link.next_delivery() {
            if t > until {
                break;
            }
            out.push((t, link.poll_deliver(t).unwrap()));
        }
        out
    }

    #[test]
    fn latency_jitter_and_loss_follow_the_config_deterministically() {
        let cfg = LinkConfig {
            latency: Duration::from_millis(100),
            jitter: Duration::from_millis(30),
            loss: 0.2,
            ..LinkConfig::default()
        };
        let run = |seed| {
            let mut l = Link::new(cfg, seed);
            for i in 0..5000u64 {
                l.send(Instant::from_millis(i), i.to_le_bytes().to_vec());
            }
            let got = drain(&mut l, Instant::from_millis(100_000));
            (got, l.counters())
        };
        let (a, ca) = run(1);
        let (b, _) = run(1);
        assert_eq!(a, b, "same seed, same deliveries");
        assert!((ca.loss_rate() - 0.2).abs() < 0.02, "{}", ca.loss_rate());
        let mean = ca.mean_delay().as_millis();
        assert!((98..=102).contains(&mean), "{mean}");
        let (c, _) = run(2);
        assert_ne!(a, c);
    }

    #[test]
    fn duplication_reordering_bursts_and_bandwidth() {
        let cfg = LinkConfig {
            latency: Duration::from_millis(10),
            duplicate: 0.5,
            reorder: 0.5,
            ..LinkConfig::default()
        };
        let mut l = Link::new(cfg, 3);
        for i in 0..1000u64 {
            l.send(Instant::from_millis(i * 5), i.to_le_bytes().to_vec());
        }
        let got = drain(&mut l, Instant::from_millis(100_000));
        assert!(got.len() > 1400, "duplicates delivered: {}", got.len());
        let ids: Vec<u64> = got
            .iter()
            .map(|(_, b)| u64::from_le_bytes(b[..8].try_into().unwrap()))
            .collect();
        assert!(
            ids.windows(2).any(|w| w[1] < w[0]),
            "some packets overtaken"
        );

        let bursty = LinkConfig {
            burst: Some(GilbertElliott {
                p_enter_bad: 0.05,
                p_leave_bad: 0.25,
                loss_in_bad: 1.0,
            }),
            ..LinkConfig::default()
        };
        let mut l = Link::new(bursty, 4);
        let mut lost_run = 0;
        let mut longest = 0;
        for i in 0..10_000u64 {
            let before = l.counters().lost;
            l.send(Instant::from_millis(i), vec![0]);
            if l.counters().lost > before {
                lost_run += 1;
                longest = longest.max(lost_run);
            } else {
                lost_run = 0;
            }
        }
        // Stationary loss = 0.05 / (0.05 + 0.25) ≈ 16.7 %, in bursts.
        let rate = l.counters().loss_rate();
        assert!((0.13..0.21).contains(&rate), "{rate}");
        assert!(longest >= 8, "bursts: longest run {longest}");

        let capped = LinkConfig {
            bandwidth: Some(10_000),
            ..LinkConfig::default()
        };
        let mut l = Link::new(capped, 5);
        for _ in 0..10 {
            l.send(Instant::ZERO, vec![0; 1000]);
        }
        let got = drain(&mut l, Instant::from_millis(10_000));
        assert_eq!(
            got.last().unwrap().0,
            Instant::from_millis(1000),
            "10 kB at 10 kB/s"
        );
    }

    #[test]
    fn network_routes_per_direction() {
        let a: SocketAddr = "10.0.0.1:1".parse().unwrap();
        let b: SocketAddr = "10.0.0.2:1".parse().unwrap();
        let mut n = Network::new(9, LinkConfig::with_latency(Duration::from_millis(5)));
        n.set_link(b, a, LinkConfig::with_latency(Duration::from_millis(50)));
        n.send(Instant::ZERO, a, b, b"ab");
        n.send(Instant::ZERO, b, a, b"ba");
        assert_eq!(n.next_delivery(), Some(Instant::from_millis(5)));
        assert_eq!(n.poll_deliver(Instant::from_millis(4)), None);
        assert_eq!(
            n.poll_deliver(Instant::from_millis(60)),
            Some((a, b, b"ab".to_vec()))
        );
        assert_eq!(
            n.poll_deliver(Instant::from_millis(60)),
            Some((b, a, b"ba".to_vec()))
        );
        assert_eq!(n.counters(a, b).delivered, 1);
    }
}
