//! Bounds on what one connection or match can make the relay hold, so that a
//! hostile or broken peer costs a fixed amount of memory, and rate limits
//! (per connection in the router, per source address in the driver) so that
//! one flooding peer cannot take the relay's time from the others.

use lockstep::{Duration, Instant};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

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
    /// Most established connections from one host (an IPv4 address, or an
    /// IPv6 /64), over all event loops (`--max-connections-per-host`,
    /// default [`DEFAULT_MAX_CONNECTIONS_PER_HOST`]); more are refused
    /// with `RelayFull`, so one host cannot take every connection slot.
    pub max_connections_per_host: usize,
    /// Bytes per second of turn bundles a match may make every connection
    /// carry (`--bundle-kib-per-s`, default [`DEFAULT_BUNDLE_BYTES_PER_SEC`]):
    /// each player's share of a turn ([`Limits::player_turn_bytes`]) is cut
    /// so that a bundle with every player at its share stays under it, and
    /// input over the share is refused (`InputRefused`). So the relay never
    /// builds bundles faster than a connection's pacing delivers them.
    pub bundle_bytes_per_sec: usize,
    /// Bytes of messages one connection may have waiting for room in its
    /// window (`--max-backlog-kib`, default [`DEFAULT_MAX_BACKLOG_BYTES`]):
    /// a receiver so far behind is cut off (`relay_cut_off_total`, reason
    /// `backpressure`) rather than have its turns dropped one by one.
    pub max_backlog_bytes: usize,
}

/// Default of [`Limits::bundle_bytes_per_sec`]: 128 KiB/s, a quarter of
/// what one connection's paced window delivered on loopback (about 550 KB/s
/// in the crowd test), so a lossy link in the transport's bad mode still
/// keeps up; at 50 ms turns it leaves each of 8 players 819 bytes a turn,
/// dozens of RTS commands.
pub const DEFAULT_BUNDLE_BYTES_PER_SEC: usize = 128 * 1024;

/// Default of [`Limits::max_backlog_bytes`]: 2 MiB, above a rejoin's
/// whole bundle tail (at most 400 bundles) at the default bundle budget and
/// 50 ms turns (about 1.3 MB), which is queued at once.
pub const DEFAULT_MAX_BACKLOG_BYTES: usize = 2 * 1024 * 1024;

/// The smallest share of a turn [`Limits::player_turn_bytes`] gives a
/// player, whatever the bundle budget: a handful of commands always fit.
pub const MIN_PLAYER_TURN_BYTES: usize = 256;

impl Limits {
    /// A player's byte budget in one turn's bundle (its own input and
    /// carried late input together) in a match of `players` with turns of
    /// `turn`: the bundle budget's share, between [`MIN_PLAYER_TURN_BYTES`]
    /// and the protocol's share for that many players
    /// (`proto::player_turn_bytes`: `MAX_PLAYER_TURN_BYTES` up to eight
    /// players, 2 KiB at 32), so that the largest bundle stays deliverable.
    #[must_use]
    pub fn player_turn_bytes(&self, players: u8, turn: Duration) -> usize {
        let per_turn = (self.bundle_bytes_per_sec as u128)
            .saturating_mul(u128::from(turn.as_micros()))
            / 1_000_000;
        let share = per_turn / u128::from(players.max(1));
        // The floor (256) is under the protocol's share at every match size
        // (64 KiB over 255 players is 257), so the floor never lifts a share
        // over what the decoders accept.
        usize::try_from(share)
            .unwrap_or(usize::MAX)
            .max(MIN_PLAYER_TURN_BYTES)
            .min(lockstep::low_level::proto::player_turn_bytes(players))
    }
}

/// Default of [`Limits::max_connections_per_host`]: 16, so a LAN party or
/// a household behind one NAT (one public address) can fill an 8-player
/// match and bring as many spectators, while one host still cannot take
/// more than a sliver of the relay's 1,024 default slots.
pub const DEFAULT_MAX_CONNECTIONS_PER_HOST: usize = 16;

impl Limits {
    /// Most matches a relay resumes from its record directory at start-up:
    /// half of [`Self::max_matches`], so that recordings (forged or real)
    /// never take every match place and new players can always start one.
    #[must_use]
    pub const fn max_resumed(&self) -> usize {
        self.max_matches / 2
    }
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
            max_connections_per_host: DEFAULT_MAX_CONNECTIONS_PER_HOST,
            bundle_bytes_per_sec: DEFAULT_BUNDLE_BYTES_PER_SEC,
            max_backlog_bytes: DEFAULT_MAX_BACKLOG_BYTES,
        }
    }
}

/// Default of `relay serve --max-memory-mib`: 1 GiB. A running 4-player
/// match holds about 51 KiB and a connection at every per-connection cap
/// about 600 KiB (BENCHMARKS.md, relay section), so the default admits
/// tens of thousands of matches, and still about 1,000 connections all at
/// their worst at once in the connections' 60 % share.
pub const DEFAULT_MAX_MEMORY_BYTES: usize = 1024 * 1024 * 1024;

/// The relay-wide memory budget (`relay serve --max-memory-mib`), shared by
/// every event loop and split in three parts, each with its own share
/// ([`MEMORY_SHARES`]): connections (transport state and send backlogs),
/// snapshots (agreed copies, uploads in progress, rejoin tails) and
/// recordings (buffered data of open recordings). Each loop publishes what
/// it holds, by part, a few times a second; a part at its share (summed
/// over every loop) refuses what would add to it, whatever the others hold,
/// so one kind of load cannot starve the others:
/// - connections: new connections (`memory_full` at the handshake), joins,
///   rejoins and spectators (`MemoryFull`);
/// - snapshots: no snapshot upload is asked for (the match keeps its last
///   agreed one and asks again later);
/// - recordings: joins (a new match would open a recording).
///
/// Running matches keep every turn: what they hold is bounded per
/// connection and per match, so they cannot grow a part far past its share.
#[derive(Debug)]
pub struct MemoryBudget {
    max: usize,
    /// What each loop held, by part, when it last published.
    held: Vec<[AtomicUsize; 3]>,
    /// Which parts were at their share at the last publish.
    full: [AtomicBool; 3],
}

/// Shares of the memory budget, in percent, by part: connections (with
/// their send backlogs), snapshots, recordings. Connections get most: each
/// player and spectator is one, and their caps are the largest per-client
/// cost; snapshots are one shared copy per match plus its tail; recordings
/// buffer a few KiB per match before writing.
pub const MEMORY_SHARES: MemoryShares = MemoryShares {
    connections: 60,
    snapshots: 30,
    recordings: 10,
};

/// Percent of the budget each part may hold ([`MEMORY_SHARES`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryShares {
    /// Transport connections and their send backlogs.
    pub connections: u8,
    /// Agreed snapshots, uploads in progress and rejoin tails.
    pub snapshots: u8,
    /// Open recordings' buffered data.
    pub recordings: u8,
}

/// What one event loop holds, by part, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryUse {
    /// Transport connections (windows, reorder buffers, bulk transfers).
    pub connections: usize,
    /// Messages waiting for a connection's window.
    pub backlogs: usize,
    /// Agreed snapshots, uploads in progress and rejoin tails.
    pub snapshots: usize,
    /// Open recordings' buffered data.
    pub recordings: usize,
}

impl MemoryUse {
    /// All parts.
    #[must_use]
    pub const fn total(&self) -> usize {
        self.connections + self.backlogs + self.snapshots + self.recordings
    }

    /// By budget part: connections with their backlogs, snapshots, recordings.
    const fn parts(&self) -> [usize; 3] {
        [
            self.connections + self.backlogs,
            self.snapshots,
            self.recordings,
        ]
    }
}

/// Which parts of the memory budget are at their share: what the relay
/// refuses while each is (see [`MemoryBudget`]). The router acts on it
/// (`Router::set_memory`); `Default` is "nothing full".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryPressure {
    /// Connections and backlogs at their share: no new connection, join,
    /// rejoin or spectator.
    pub connections: bool,
    /// Snapshots at their share: no snapshot upload is asked for.
    pub snapshots: bool,
    /// Recordings at their share: no join (no new match).
    pub recordings: bool,
}

impl MemoryPressure {
    /// Every part full (tests, and a relay that must take nothing new).
    pub const ALL: Self = Self {
        connections: true,
        snapshots: true,
        recordings: true,
    };

    /// Whether any part is full.
    #[must_use]
    pub const fn any(&self) -> bool {
        self.connections || self.snapshots || self.recordings
    }
}

impl MemoryBudget {
    /// A budget of `max` bytes for `loops` event loops.
    #[must_use]
    pub fn new(max: usize, loops: usize) -> Self {
        Self {
            max,
            held: (0..loops.max(1)).map(|_| Default::default()).collect(),
            full: Default::default(),
        }
    }

    /// What part `i` (connections, snapshots, recordings) may hold.
    fn share(&self, i: usize) -> usize {
        let pct = [
            MEMORY_SHARES.connections,
            MEMORY_SHARES.snapshots,
            MEMORY_SHARES.recordings,
        ][i];
        self.max / 100 * usize::from(pct) + self.max % 100 * usize::from(pct) / 100
    }

    /// Loop `index` now holds `used`; returns which parts the relay (every
    /// loop's latest figures summed) has at their share.
    pub fn publish(&self, index: usize, used: MemoryUse) -> MemoryPressure {
        if let Some(h) = self.held.get(index) {
            for (slot, v) in h.iter().zip(used.parts()) {
                slot.store(v, Ordering::Relaxed);
            }
        }
        let mut full = [false; 3];
        for (i, f) in full.iter_mut().enumerate() {
            let part: usize = self.held.iter().map(|h| h[i].load(Ordering::Relaxed)).sum();
            *f = part >= self.share(i);
            self.full[i].store(*f, Ordering::Relaxed);
        }
        MemoryPressure {
            connections: full[0],
            snapshots: full[1],
            recordings: full[2],
        }
    }

    /// What every loop held when it last published.
    #[must_use]
    pub fn held(&self) -> usize {
        self.held
            .iter()
            .flat_map(|h| h.iter().map(|v| v.load(Ordering::Relaxed)))
            .sum()
    }

    /// Whether any part was at its share when a loop last published.
    #[must_use]
    pub fn is_full(&self) -> bool {
        self.full.iter().any(|f| f.load(Ordering::Relaxed))
    }

    /// The budget, in bytes.
    #[must_use]
    pub const fn max(&self) -> usize {
        self.max
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
/// forgotten, and when the table is full, addresses it does not hold share
/// one overflow bucket of [`OVERFLOW_SHARE`] addresses' worth.
///
/// Keyed by address and port, not by host, on purpose: a source address is
/// unproven here (UDP can be spoofed), and players behind one NAT share
/// their host, so a per-host rate would have to be many players' worth.
///
/// A full table neither refuses what does not fit nor lets it through
/// unlimited. A flood of spoofed sources can fill the table: refusing every
/// address outside it would lock every new player out for as long as the
/// flood lasts, and letting them all through would hand the flood the
/// relay's time (each datagram a handshake to answer). The overflow bucket
/// bounds what all unknown addresses together cost, whatever their number,
/// while a new player's handshake still gets through, at worst after a few
/// of the transport's resends, in the share the flood leaves (the trade
/// SYN cookies make). Addresses already in the table (players who were
/// playing before the flood) keep their own buckets. Where one host's share
/// is limited is on proven addresses: established connections,
/// [`ConnectionQuota`]'s per-host limit.
#[derive(Debug)]
pub struct AddrLimiter {
    rate: u32,
    burst: u32,
    max_addrs: usize,
    /// Looked up for every datagram; only swept as a whole (order does not
    /// matter): a hash map.
    buckets: HashMap<SocketAddr, TokenBucket>,
    /// Shared by every address the full table does not hold.
    overflow: TokenBucket,
    next_sweep: Instant,
    dropped: u64,
}

/// How many addresses' worth of rate and burst the overflow bucket (every
/// address a full table does not hold, together) is allowed.
pub const OVERFLOW_SHARE: u32 = 16;

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
            overflow: TokenBucket::full(Instant::ZERO, burst.saturating_mul(OVERFLOW_SHARE)),
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
            None if full => self.overflow.take(
                now,
                rate.saturating_mul(OVERFLOW_SHARE),
                burst.saturating_mul(OVERFLOW_SHARE),
            ),
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

    /// The budget is the sum over every loop's latest figure: one loop
    /// alone under it can still make the relay full, and the relay is no
    /// longer full once a loop's figure falls.
    #[test]
    fn the_memory_budget_sums_every_loops_latest_figure_by_part() {
        let b = MemoryBudget::new(1000, 2);
        let conns = |connections, backlogs| MemoryUse {
            connections,
            backlogs,
            ..MemoryUse::default()
        };
        // Connections' share is 600 of 1000, summed over loops, backlogs in.
        assert!(!b.publish(0, conns(300, 100)).any());
        assert!(!b.is_full());
        let p = b.publish(1, conns(150, 50));
        assert_eq!(
            p,
            MemoryPressure {
                connections: true,
                ..MemoryPressure::default()
            }
        );
        assert!(b.is_full());
        assert_eq!(b.held(), 600);
        // A loop's newer figure replaces its older one.
        assert!(!b.publish(0, conns(100, 0)).any());
        assert!(!b.is_full());
        assert_eq!(b.held(), 300);
        // An index past the loops changes nothing.
        assert!(!b.publish(7, conns(10_000, 0)).any());
    }

    /// Each part is held to its own share, whatever the others hold: a
    /// relay full of snapshots still takes connections, and one whose
    /// recordings are at their share still asks for snapshots.
    #[test]
    fn each_part_is_held_to_its_own_share() {
        let b = MemoryBudget::new(1000, 1);
        let snaps = MemoryUse {
            snapshots: 300,
            ..MemoryUse::default()
        };
        assert_eq!(
            b.publish(0, snaps),
            MemoryPressure {
                snapshots: true,
                ..MemoryPressure::default()
            }
        );
        let recs = MemoryUse {
            snapshots: 299,
            recordings: 100,
            connections: 599,
            ..MemoryUse::default()
        };
        assert_eq!(
            b.publish(0, recs),
            MemoryPressure {
                recordings: true,
                ..MemoryPressure::default()
            }
        );
        let parts = MemoryUse {
            connections: 1,
            backlogs: 2,
            snapshots: 3,
            recordings: 4,
        };
        assert_eq!(parts.total(), 10);
        assert_eq!(
            u32::from(MEMORY_SHARES.connections)
                + u32::from(MEMORY_SHARES.snapshots)
                + u32::from(MEMORY_SHARES.recordings),
            100
        );
    }

    /// A player's share of a turn is the bundle budget's, split among the
    /// players, never below the floor nor above the protocol's own cap.
    #[test]
    fn a_players_turn_share_follows_the_bundle_budget() {
        let l = Limits::default();
        let ms = Duration::from_millis;
        // 128 KiB/s x 50 ms / 8 players.
        assert_eq!(l.player_turn_bytes(8, ms(50)), 819);
        assert_eq!(l.player_turn_bytes(2, ms(50)), 3_276);
        // A slow turn or a lone player: the protocol's cap.
        assert_eq!(
            l.player_turn_bytes(1, ms(1_000)),
            lockstep::low_level::proto::MAX_PLAYER_TURN_BYTES
        );
        // 32 players on slow turns: the protocol's share of a bundle at 32
        // (2 KiB), not the eight-player cap, so the bundle stays deliverable.
        let roomy = Limits {
            bundle_bytes_per_sec: 4 * 1024 * 1024,
            ..Limits::default()
        };
        assert_eq!(roomy.player_turn_bytes(32, ms(1_000)), 2048);
        assert_eq!(roomy.player_turn_bytes(8, ms(1_000)), 8192);
        // 32 players at the defaults: the floor.
        assert_eq!(l.player_turn_bytes(32, ms(50)), MIN_PLAYER_TURN_BYTES);
        let tight = Limits {
            bundle_bytes_per_sec: 1024,
            ..Limits::default()
        };
        assert_eq!(tight.player_turn_bytes(8, ms(25)), MIN_PLAYER_TURN_BYTES);
    }

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

    /// A flood of spoofed sources fills the table; past it, every address
    /// the table does not hold shares one overflow bucket: the flood of new
    /// sources is held to it however many there are, a known flooder stays
    /// limited, and a new player's address gets through once the shared
    /// bucket has earned tokens again (its handshake resends do that).
    #[test]
    fn a_full_table_holds_new_addresses_to_one_shared_bucket() {
        let (rate, burst) = (10, 10);
        let mut l = AddrLimiter::new(rate, burst, 100);
        let now = Instant::from_millis(1);
        for i in 0..100u16 {
            let spoofed = SocketAddr::from(([10, 9, (i >> 8) as u8, i as u8], 1000));
            assert!(l.allow(now, spoofed));
        }
        let flooder = SocketAddr::from(([10, 9, 0, 0], 1000));
        assert_eq!((0..50).filter(|_| l.allow(now, flooder)).count(), 9);
        // 10,000 more spoofed sources at once: the shared burst passes, no more.
        let passed = (0..10_000u32)
            .filter(|i| {
                let [_, _, a, b] = i.to_be_bytes();
                l.allow(now, SocketAddr::from(([10, 8, a, b], 2000)))
            })
            .count();
        assert_eq!(passed, (burst * OVERFLOW_SHARE) as usize);
        let player: SocketAddr = "192.0.2.7:4000".parse().unwrap();
        assert!(!l.allow(now, player), "the flood spent the shared bucket");
        // One resend later (the transport's first is 100 ms on), it is in.
        let later = now + Duration::from_millis(100);
        assert!(l.allow(later, player));
    }

    #[test]
    fn hosts_are_ipv4_addresses_and_ipv6_slash_64s() {
        let key = |s: &str| HostKey::of(s.parse().unwrap());
        assert_eq!(key("192.0.2.1:1000"), key("192.0.2.1:2000"));
        assert_ne!(key("192.0.2.1:1000"), key("192.0.2.2:1000"));
        assert_eq!(
            key("[2001:db8:1:2::1]:1000"),
            key("[2001:db8:1:2:ffff::9]:7")
        );
        assert_ne!(key("[2001:db8:1:2::1]:1000"), key("[2001:db8:1:3::1]:1000"));
        // A dual-stack socket's view of an IPv4 client is that client.
        assert_eq!(key("[::ffff:192.0.2.1]:5"), key("192.0.2.1:6"));
    }

    #[test]
    fn the_quota_limits_each_host_and_the_total() {
        let q = ConnectionQuota::new(5).with_per_host(2);
        let a = |port| SocketAddr::from(([192, 0, 2, 1], port));
        let v6 = |last: u16, port| {
            SocketAddr::from((
                std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 7, 0, 0, 0, last),
                port,
            ))
        };
        assert_eq!(q.try_take(a(1)), Ok(()));
        assert_eq!(q.try_take(a(2)), Ok(()));
        assert_eq!(
            q.try_take(a(3)),
            Err(QuotaFull::Host),
            "a third port of one host"
        );
        assert_eq!(q.try_take(v6(1, 1)), Ok(()));
        assert_eq!(q.try_take(v6(2, 1)), Ok(()));
        assert_eq!(q.try_take(v6(3, 9)), Err(QuotaFull::Host), "same /64");
        assert_eq!(q.try_take(SocketAddr::from(([192, 0, 2, 9], 1))), Ok(()));
        assert_eq!(
            q.try_take(SocketAddr::from(([192, 0, 2, 10], 1))),
            Err(QuotaFull::Relay)
        );
        assert_eq!((q.used(), q.used_by(a(9))), (5, 2));
        q.give_back(a(1));
        assert_eq!((q.used(), q.used_by(a(9))), (4, 1));
        assert_eq!(q.try_take(a(3)), Ok(()), "its unit is free again");
        // Giving back for a host holding nothing changes nothing.
        q.give_back(SocketAddr::from(([198, 51, 100, 1], 1)));
        assert_eq!(q.used(), 5);
    }
}

/// Which host an address belongs to, for per-host limits: its IPv4
/// address, or the /64 prefix of an IPv6 one (the usual allocation of one
/// subscriber, who can pick any address in it); an IPv4-mapped IPv6
/// address (a dual-stack socket's view of an IPv4 client) is that IPv4 address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HostKey {
    /// An IPv4 host.
    V4([u8; 4]),
    /// An IPv6 /64.
    V6([u8; 8]),
}

impl HostKey {
    /// The host `addr` belongs to.
    #[must_use]
    pub fn of(addr: SocketAddr) -> Self {
        match addr.ip() {
            IpAddr::V4(v4) => Self::V4(v4.octets()),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Self::V4(v4.octets()),
                None => {
                    let o = v6.octets();
                    Self::V6([o[0], o[1], o[2], o[3], o[4], o[5], o[6], o[7]])
                }
            },
        }
    }
}

/// Why [`ConnectionQuota::try_take`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuotaFull {
    /// Every connection slot is taken.
    Relay,
    /// The host already holds `max_connections_per_host` connections.
    Host,
}

/// The relay's connection limits shared by its event loops: the total
/// (`--max-connections`) and the per-host one (`--max-connections-per-host`).
/// Each loop's transport server and router count only their own
/// connections, and a client's address decides which loop's socket it
/// reaches, so per-loop limits would admit `threads` times as many. Each
/// loop's [`RouterGlue`](crate::router_glue::RouterGlue) takes a unit here for
/// every connection once it is established (the completed handshake proved
/// the address, so a spoofed source cannot use up a host's share) and gives
/// it back when the connection closes or moves to another loop (which takes
/// it again).
#[derive(Debug)]
pub struct ConnectionQuota {
    max: usize,
    per_host: usize,
    /// Taken only when a connection opens, closes or moves: a lock is cheap.
    state: Mutex<QuotaState>,
}

#[derive(Debug, Default)]
struct QuotaState {
    used: usize,
    /// Connections per host; hosts with none are removed.
    hosts: HashMap<HostKey, usize>,
}

impl ConnectionQuota {
    /// A quota of `max` connections, none used, at most
    /// [`DEFAULT_MAX_CONNECTIONS_PER_HOST`] per host.
    #[must_use]
    pub fn new(max: usize) -> Self {
        Self {
            max,
            per_host: DEFAULT_MAX_CONNECTIONS_PER_HOST,
            state: Mutex::default(),
        }
    }

    /// The same with at most `per_host` connections per host.
    #[must_use]
    pub fn with_per_host(mut self, per_host: usize) -> Self {
        self.per_host = per_host;
        self
    }

    fn state(&self) -> MutexGuard<'_, QuotaState> {
        // Each update is a pair of counts changed together under the lock,
        // consistent even if a holder panicked.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes one unit for a connection established from `addr`; refused
    /// (nothing taken) when all `max` are in use or its host holds `per_host`.
    pub fn try_take(&self, addr: SocketAddr) -> Result<(), QuotaFull> {
        let mut s = self.state();
        if s.used >= self.max {
            return Err(QuotaFull::Relay);
        }
        let host = s.hosts.entry(HostKey::of(addr)).or_insert(0);
        if *host >= self.per_host {
            return Err(QuotaFull::Host);
        }
        *host += 1;
        s.used += 1;
        Ok(())
    }

    /// Gives back a unit taken by [`ConnectionQuota::try_take`] for `addr`.
    pub fn give_back(&self, addr: SocketAddr) {
        let mut s = self.state();
        let key = HostKey::of(addr);
        if let Some(n) = s.hosts.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                s.hosts.remove(&key);
            }
            s.used = s.used.saturating_sub(1);
        }
    }

    /// Units in use.
    #[must_use]
    pub fn used(&self) -> usize {
        self.state().used
    }

    /// Units `addr`'s host holds.
    #[must_use]
    pub fn used_by(&self, addr: SocketAddr) -> usize {
        self.state()
            .hosts
            .get(&HostKey::of(addr))
            .copied()
            .unwrap_or(0)
    }
}
