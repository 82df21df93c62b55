//! The hostile crowd: the driver that fills every connection slot of a real
//! `relay serve` with the worst clients the protocol allows while an honest
//! 2-player match plays through it, and measures what the relay holds. One
//! copy, used by the `hostile_crowd` test (which asserts on the report) and
//! by the `crowd` section of the benchmark command (which reports it).
//!
//! Each hostile client completes the handshake, takes router state (a
//! lobby, a seat in a match of its own kind, or a spectator seat on the
//! honest match), then stops reading the relay, so it never acknowledges
//! anything again, and keeps sending: the largest inputs a turn takes, the
//! largest bulk message it may send (refused unread by the relay), reliable
//! messages at the rate limit, some of them behind holes it leaves on
//! purpose (so the relay holds frames ahead of a gap). The relay cuts each
//! one off after 5 s of acking nothing; it then comes back and takes a slot
//! again, so the slots stay full (more clients than slots keep trying).
//!
//! The relay's memory is read from `/proc/<pid>/status` (`VmHWM`, the peak
//! resident set, and `VmRSS` sampled every 500 ms) and compared with a
//! bound derived from its per-connection caps ([`CONNECTION_KIB`],
//! [`PLAYER_BACKLOG_KIB`]); its own accounting comes from `/metrics`.

use crate::bench::relay_procs::{clock_ticks_per_sec, process_ticks, read_machine_ticks};
use crate::harness::{
    Bins, PeerResult, PeerSpec, Proc, Relay, SplitMix, metric, proc_status_kib, scrape_metrics,
    try_finish_peer, try_peer,
};
use lockstep::low_level::proto::{Join, ToPeer, ToRelay};
use lockstep::low_level::transport::{Channel, Client, ClientEvent, TransportConfig};
use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Token};
use sim::{Simulation, StateHash, Turn};
use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The honest players (from 127.0.0.1).
pub const HONEST: usize = 2;
/// Hostile clients beyond the free slots: they keep knocking, so a slot
/// freed by a cut-off is taken again at once.
pub const EXTRA: usize = 16;
/// The relay's default `--max-connections-per-host`: the crowd comes from
/// `crowd / PER_HOST` loopback addresses, 127.0.0.2 and up.
pub const PER_HOST: usize = 16;
/// Turn length of the relay (and so of every match on it).
pub const TURN_MS: u64 = 25;
/// The crowd comes in once the honest match has played this far, so a
/// snapshot of it exists (the relay asks for one every 100 turns) and
/// spectators cost what a late spectator costs: the snapshot and the tail.
pub const CROWD_FROM_TURN: u64 = 150;
/// How long a hostile client that stopped reading keeps its connection
/// before it starts a new one: past the relay's 5 s cut-off of a peer that
/// acknowledges nothing, so every round is cut off by the relay, not
/// replaced by the client (a new handshake from the same address would
/// replace the old connection).
pub const STALE_AFTER: Duration = Duration::from_millis(6500);
/// How long a hostile client waits for its lobby to fill before it behaves
/// as a lobby squatter anyway.
pub const HOOK_WITHIN: Duration = Duration::from_secs(3);
/// Pause before a refused client (server full, host limit) tries again.
pub const RETRY: Duration = Duration::from_millis(250);
/// Players of a hostile match: the most a match has, so every bundle is
/// as large as the inputs can make it.
pub const HOSTILE_SLOTS: u8 = 8;
/// Reliable messages a flooding client sends per turn: the relay's rate
/// limit is 300 messages/s, 7.5 per 25 ms turn.
pub const FLOOD_PER_TURN: usize = 8;
/// Size of one flooding message: just under one fragment, so the holes the
/// client leaves are followed by as many held bytes as possible.
pub const FLOOD_LEN: usize = 1000;
/// Within this the honest match must end and each wait must be over (an
/// 800-turn match takes 20 s).
pub const MATCH: Duration = Duration::from_secs(90);
/// Spectators of the honest match the relay admits (its per-match cap):
/// the rest of the spectating eighth is refused and knocks again.
pub const SPECTATORS: u64 = 32;

/// What the relay's caps let any connection cost it, in KiB, at most:
///
/// - send side: the transport's un-acked window, 256 fragments of at most
///   1163 bytes (`max_unacked`; the 256 KiB `max_unconfirmed_bytes` caps
///   what is on the wire, the window what is queued), 290 KiB;
/// - receive side: frames held ahead of a gap, 128 KiB
///   (`max_reorder_bytes`), plus the reliable message being reassembled, at
///   most 96 KiB (`max_message`); bulk data is refused unread (the relay
///   asks only a player of the honest match for a 32 KiB snapshot chunk);
/// - the router's and the transport's own state for a connection (a seat,
///   a lobby, rate buckets, sequence buffers of 256 and 1024 entries),
///   generously 64 KiB.
pub const CONNECTION_KIB: u64 = 256 * 1163 / 1024 + 128 + 96 + 64;

/// What a hostile player can make the relay queue beyond its transport, in
/// KiB. The relay's per-connection send backlog is bounded in messages
/// (4096), not in bytes, so what it holds for a player that acknowledges
/// nothing is whatever the router produces for it until the cut-off: the
/// bundles carrying the other seven players' inputs. Each of those sends
/// at most its own un-acked window of input fragments (256 of 1 KiB: it
/// acknowledges nothing, so it never hears an ack either), so a player's
/// backlog holds at most 7 × 256 KiB; and its match keeps those bundles
/// once more in the rejoin tail (its share: its own 256 KiB).
pub const PLAYER_BACKLOG_KIB: u64 = (HOSTILE_SLOTS as u64 - 1) * 256 + 256;

/// The parts of `relay_memory_bytes{part=...}`, the relay's own accounting.
pub const MEMORY_PARTS: [&str; 4] = ["connections", "backlogs", "snapshots", "recordings"];

/// What one crowd run is asked to do: build it with [`CrowdOptions::new`].
#[derive(Clone, Debug)]
pub struct CrowdOptions {
    /// The `relay` binary to run (debug for the test, release for the bench).
    pub relay_bin: PathBuf,
    /// The `peer` binary the honest players run.
    pub peer_bin: PathBuf,
    /// `--max-connections` of the relay: every one is taken.
    pub slots: usize,
    /// Turns of the honest match (800 at 25 ms: 20 s, four cut-off rounds).
    pub turns: u32,
    /// The relay's record directory (a scratch directory).
    pub dir: PathBuf,
}

impl CrowdOptions {
    /// A run of `slots` connection slots with the relay and peers of `bins`,
    /// recording into `dir`, with an 800-turn honest match.
    #[must_use]
    pub fn new(bins: &Bins, slots: usize, dir: PathBuf) -> Self {
        Self {
            relay_bin: bins.relay.clone(),
            peer_bin: bins.peer.clone(),
            slots,
            turns: 800,
            dir,
        }
    }

    /// The honest match plays `turns` turns (at least [`CROWD_FROM_TURN`]
    /// plus one cut-off round, 200 turns, for a meaningful run).
    #[must_use]
    pub const fn with_turns(mut self, turns: u32) -> Self {
        self.turns = turns;
        self
    }

    /// Every hostile client: the free slots and [`EXTRA`].
    #[must_use]
    pub const fn crowd(&self) -> usize {
        self.slots.saturating_sub(HONEST) + EXTRA
    }
}

/// What the crowd did, for the assertions and the report.
#[derive(Clone, Debug, Default)]
pub struct CrowdCounts {
    /// Handshakes completed.
    pub handshakes: u64,
    /// Refusals (the relay full, the host limit, a rejected join).
    pub refused: u64,
    /// Refusals by what the client was told.
    pub reasons: BTreeMap<String, u64>,
    /// Clients that took router state and turned hostile.
    pub hooked: u64,
    /// Largest bulk messages sent.
    pub bulk_sent: u64,
    /// Datagrams sent.
    pub datagrams_sent: u64,
    /// Datagrams a squatter left out on purpose (holes).
    pub datagrams_dropped: u64,
}

/// The bound on the relay's peak RSS the caps promise, and its terms.
#[derive(Clone, Copy, Debug)]
pub struct Bound {
    /// The bound, KiB: the idle relay, every slot at [`CONNECTION_KIB`],
    /// the players at [`PLAYER_BACKLOG_KIB`], the spectators at
    /// `spectator_kib`.
    pub kib: u64,
    /// Hostile players that can hold a slot.
    pub players: u64,
    /// Spectators of the honest match.
    pub spectators: u64,
    /// What a never-acking spectator can have queued, KiB (from the
    /// relay's snapshot gauges once the honest match has played a while).
    pub spectator_kib: u64,
}

/// Everything one crowd run measured.
#[derive(Debug)]
pub struct CrowdReport {
    /// The relay's `--max-connections`.
    pub slots: usize,
    /// Hostile clients.
    pub crowd: usize,
    /// The relay's resident set before anyone connected, KiB.
    pub idle_rss_kib: u64,
    /// Its peak resident set by then (`VmHWM`), KiB.
    pub idle_hwm_kib: u64,
    /// Its resident set with the honest match playing, before the crowd.
    pub honest_rss_kib: u64,
    /// The highest `VmRSS` sampled while the crowd was in, KiB.
    pub max_sampled_rss_kib: u64,
    /// The peak resident set: `VmHWM` at the end, or the highest sample
    /// if larger (the kernel syncs per-thread counters lazily), KiB.
    pub peak_kib: u64,
    /// The bound the caps promise.
    pub bound: Bound,
    /// The most connections the relay tracked (`relay_peers`).
    pub max_peers: u64,
    /// `relay_memory_bytes{part}` at the sample of the highest `VmRSS`.
    pub memory_at_peak: BTreeMap<String, u64>,
    /// The highest sum of `relay_memory_bytes` over every sample, bytes.
    pub memory_max_bytes: u64,
    /// The crowd's own counts.
    pub counts: CrowdCounts,
    /// Whether the relay was still running when the crowd left.
    pub relay_alive: bool,
    /// The honest peers' exits and summaries.
    pub honest: Vec<PeerResult>,
    /// The `reason` of the honest match's `match_ended` line.
    pub end_reason: String,
    /// The metrics page scraped when the crowd was still in, at the end.
    pub metrics: String,
    /// `cut_off` lines the relay logged.
    pub cut_off_lines: usize,
    /// `join_refused` lines for a full relay.
    pub full_lines: usize,
    /// The relay's CPU while the crowd was in, percent of one core.
    pub relay_cpu_pct: f64,
    /// This process's CPU (the crowd's driver) over the same time, percent
    /// of one core: near 100 the driver, not the relay, was the limit.
    pub crowd_cpu_pct: f64,
    /// The whole machine's CPU over the same time (every process, other
    /// work included), percent of all its cores.
    pub machine_cpu_pct: f64,
    /// The driver loop's mean period, ms (it polls with a 5 ms timeout).
    pub loop_mean_ms: f64,
    /// Seconds the crowd was in.
    pub crowd_secs: f64,
    /// Seconds of the whole run.
    pub secs: f64,
}

impl CrowdReport {
    /// The peak RSS above the idle relay's, per connection slot, KiB.
    #[must_use]
    pub fn per_connection_kib(&self) -> u64 {
        self.peak_kib.saturating_sub(self.idle_hwm_kib) / self.slots.max(1) as u64
    }

    /// A counter or gauge from the final metrics page (0 if absent).
    #[must_use]
    pub fn metric(&self, name: &str) -> u64 {
        metric(&self.metrics, name).unwrap_or(0)
    }

    /// Refusals the crowd heard because the relay was full.
    #[must_use]
    pub fn relay_full_refusals(&self) -> u64 {
        self.counts
            .reasons
            .iter()
            .filter(|(r, _)| r.starts_with("RelayFull"))
            .map(|(_, n)| n)
            .sum()
    }

    /// Whether every honest peer exited 0 after its last turn, with the
    /// same final hash and no desync.
    #[must_use]
    pub fn honest_agreed(&self, turns: u32) -> bool {
        let hash = self.honest.first().map(|r| &r.summary["final_hash"]);
        !self.honest.is_empty()
            && self.honest.iter().all(|r| {
                r.code == Some(0)
                    && r.summary["final_turn"] == turns.saturating_sub(1)
                    && Some(&r.summary["final_hash"]) == hash
                    && r.summary["desyncs"] == serde_json::json!([])
            })
    }

    /// The total stall (time waiting for turns) of the honest peer that
    /// stalled most, ms.
    #[must_use]
    pub fn max_stall_ms(&self) -> f64 {
        self.honest
            .iter()
            .filter_map(|r| r.summary["stall_ms"].as_f64())
            .fold(0.0, f64::max)
    }

    /// One line of the figures, for test output and bench progress.
    #[must_use]
    pub fn summary(&self) -> String {
        let b = &self.bound;
        format!(
            "relay RSS idle {} KiB (peak {}), with the honest match {} KiB, max sampled {} KiB, \
             peak {} KiB with {} slots: {} KiB per connection; bound {} KiB ({} x {CONNECTION_KIB} \
             + {} x {PLAYER_BACKLOG_KIB} + {} x {} KiB); relay_peers max {}; accounted at the \
             peak {:?}; crowd {:?}; cut off {} ({} lines), bulk refused {}, reorder refused {}, \
             {} relay-full lines; relay CPU {:.0} %, crowd CPU {:.0} %, machine {:.0} %, loop {:.1} ms; {:.1} s",
            self.idle_rss_kib,
            self.idle_hwm_kib,
            self.honest_rss_kib,
            self.max_sampled_rss_kib,
            self.peak_kib,
            self.slots,
            self.per_connection_kib(),
            b.kib,
            self.slots,
            b.players,
            b.spectators,
            b.spectator_kib,
            self.max_peers,
            self.memory_at_peak,
            self.counts,
            self.metric("relay_connections_cut_off_total"),
            self.cut_off_lines,
            self.metric("relay_transport_drops_total{reason=\"bulk_refused\"}"),
            self.metric("relay_transport_drops_total{reason=\"reorder_refused\"}"),
            self.full_lines,
            self.relay_cpu_pct,
            self.crowd_cpu_pct,
            self.machine_cpu_pct,
            self.loop_mean_ms,
            self.secs,
        )
    }
}

/// What one hostile client does once it holds a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Joins an 8-slot match with seven others of its kind; once it starts,
    /// sends the largest input every turn (bundles as large as they get,
    /// for every one of the eight, none of whom acknowledges them).
    Player,
    /// Opens a lobby of its own; sends the largest bulk message and floods
    /// reliable messages at the rate limit, dropping a quarter of its own
    /// datagrams so the relay holds frames ahead of the holes.
    Squatter,
    /// Spectates the honest match (a snapshot and the tail of bundles to
    /// send, never acknowledged); sends a bulk message and floods.
    Spectator,
}

/// Where one hostile client is in its round.
#[derive(Clone, Copy, Debug)]
enum Phase {
    /// The transport handshake.
    Connecting,
    /// Connected and still reading, until its hook (`Start`, `Lobby` or the
    /// first spectator message) arrives; since when.
    Hooking(Instant),
    /// Reads nothing any more and sends; since when.
    Hostile(Instant),
    /// Refused or timed out; tries again at.
    Waiting(Instant),
}

/// One hostile client: its socket (one address per client: the relay knows
/// a connection by it) and its current connection.
struct Hostile {
    kind: Kind,
    /// The match it joins in round `round` (players: shared with its group).
    group: usize,
    socket: UdpSocket,
    client: Client,
    phase: Phase,
    round: u32,
    /// The sequence number of its next input.
    seq: u32,
    next_act: Instant,
    rng: SplitMix,
}

/// Half the crowd plays, three eighths squat lobbies, an eighth spectates
/// (about the relay's 32 spectators of a match: the rest are refused and
/// knock again).
const fn kind_of(i: usize) -> Kind {
    match i % 8 {
        0..=3 => Kind::Player,
        4..=6 => Kind::Squatter,
        _ => Kind::Spectator,
    }
}

impl Hostile {
    fn new(i: usize, relay: SocketAddr, now: Instant, epoch: Instant) -> Result<Self, String> {
        let kind = kind_of(i);
        // Players of eight consecutive player indices play together.
        let group = (i / 8 * 4 + i % 8) / usize::from(HOSTILE_SLOTS);
        let host = u8::try_from(2 + i / PER_HOST)
            .map_err(|_| format!("client {i}: more hosts than 127.0.0.0/24 has"))?;
        let ip = Ipv4Addr::new(127, 0, 0, host);
        let std_socket = std::net::UdpSocket::bind((ip, 0))
            .and_then(|s| s.set_nonblocking(true).map(|()| s))
            .map_err(|e| format!("client {i}: cannot bind {ip}: {e}"))?;
        let seed = 0x4057_11e0 ^ i as u64;
        let mut h = Self {
            kind,
            group,
            socket: UdpSocket::from_std(std_socket),
            client: Client::new(clock(epoch, now), relay, hostile_transport(), seed),
            phase: Phase::Connecting,
            round: 0,
            seq: 0,
            next_act: now,
            rng: SplitMix(seed),
        };
        h.restart(relay, now, epoch, now);
        Ok(h)
    }

    /// A new connection (a new client salt) from the same address, from `at`.
    fn restart(&mut self, relay: SocketAddr, now: Instant, epoch: Instant, at: Instant) {
        self.round += 1;
        let seed = self.rng.next_u64();
        self.client = Client::new(clock(epoch, now), relay, hostile_transport(), seed);
        self.phase = if at > now {
            Phase::Waiting(at)
        } else {
            Phase::Connecting
        };
        let join = self.join();
        let msg = match self.kind {
            Kind::Spectator => ToRelay::Spectate(join),
            Kind::Player | Kind::Squatter => ToRelay::Join(join),
        };
        // Queued until the handshake completes; the queue of a new client
        // is empty, so this cannot be refused (and a refusal would only
        // leave the client idle until its stale timer).
        let _ = self.client.send(Channel::Reliable, &msg.to_bytes());
    }

    fn join(&self) -> Join {
        let (match_name, slots) = match self.kind {
            Kind::Player => (
                format!("crowd-{}-{}", self.group, self.round),
                HOSTILE_SLOTS,
            ),
            Kind::Squatter => (
                format!("squat-{}-{}", self.rng.0, self.round),
                HOSTILE_SLOTS,
            ),
            Kind::Spectator => ("honest".to_owned(), 2),
        };
        // The honest match's game, so spectating it is accepted.
        Join {
            match_name,
            slots,
            game_id: sim::game::World::GAME_ID.into(),
            game_version: sim::game::World::GAME_VERSION,
            rules_hash: honest_rules(),
            name: "hostile".into(),
            turns: 0,
        }
    }

    /// Reads the socket dry; feeds the client only while it still reads.
    fn receive(&mut self, now: Instant, epoch: Instant, buf: &mut [u8]) {
        loop {
            match self.socket.recv_from(buf) {
                Ok((n, from)) => {
                    if !matches!(self.phase, Phase::Hostile(_) | Phase::Waiting(_)) {
                        self.client
                            .handle_datagram(clock(epoch, now), from, &buf[..n]);
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                // ICMP errors from the loopback: nothing to read.
                Err(_) => {}
            }
        }
    }

    /// Runs the client's timers, its events and this round's behaviour.
    fn step(&mut self, relay: SocketAddr, now: Instant, epoch: Instant, counts: &mut CrowdCounts) {
        let t = clock(epoch, now);
        match self.phase {
            Phase::Waiting(at) if now >= at => self.phase = Phase::Connecting,
            Phase::Hostile(since) if now >= since + STALE_AFTER => {
                // Cut off by now (it acknowledged nothing for 5 s): again.
                self.restart(relay, now, epoch, now);
            }
            Phase::Hooking(since) if now >= since + HOOK_WITHIN => {
                // A lobby that did not fill: squat it.
                self.go_hostile(now, counts);
            }
            _ => {}
        }
        if matches!(self.phase, Phase::Waiting(_)) {
            return;
        }
        if self.client.poll_timeout().is_some_and(|d| d <= t) {
            self.client.handle_timeout(t);
        }
        while let Some(ev) = self.client.poll_event() {
            match ev {
                ClientEvent::Connected => {
                    counts.handshakes += 1;
                    self.phase = Phase::Hooking(now);
                }
                ClientEvent::Message(bytes) => self.on_message(now, &bytes, relay, epoch, counts),
                ClientEvent::Backpressure => {}
                // Once hostile it hears nothing: only its stale timer ends it.
                ClientEvent::Disconnected(_) if matches!(self.phase, Phase::Hostile(_)) => {}
                ClientEvent::Disconnected(why) => {
                    counts.refused += 1;
                    *counts.reasons.entry(format!("{why:?}")).or_default() += 1;
                    self.restart(relay, now, epoch, now + RETRY);
                    return;
                }
            }
        }
        if let Phase::Hostile(_) = self.phase
            && now >= self.next_act
        {
            self.next_act = now + Duration::from_millis(TURN_MS);
            self.act();
        }
    }

    fn on_message(
        &mut self,
        now: Instant,
        bytes: &[u8],
        relay: SocketAddr,
        epoch: Instant,
        counts: &mut CrowdCounts,
    ) {
        if !matches!(self.phase, Phase::Hooking(_)) {
            return;
        }
        let hooked = match ToPeer::decode(bytes) {
            // Relay full, host limit, or a spectate that came too early.
            Ok(ToPeer::Rejected { reason, detail }) => {
                counts.refused += 1;
                *counts
                    .reasons
                    .entry(format!("{reason:?} {detail:?}"))
                    .or_default() += 1;
                self.restart(relay, now, epoch, now + RETRY);
                return;
            }
            Ok(ToPeer::Lobby { .. }) => self.kind == Kind::Squatter,
            Ok(ToPeer::Start(_)) => true,
            Ok(_) => self.kind == Kind::Spectator,
            Err(_) => false,
        };
        if hooked {
            self.go_hostile(now, counts);
        }
    }

    /// Stops reading and starts sending what costs the relay most.
    fn go_hostile(&mut self, now: Instant, counts: &mut CrowdCounts) {
        counts.hooked += 1;
        self.phase = Phase::Hostile(now);
        self.next_act = now;
        if self.kind != Kind::Player {
            // The largest bulk message a client may send: the relay did not
            // ask for it, so it must skip it unread. Without acks only the
            // first window of fragments ever leaves.
            let big = vec![0xb0; TransportConfig::default().max_bulk_message];
            if self.client.send(Channel::Bulk, &big).is_ok() {
                counts.bulk_sent += 1;
            }
        }
    }

    /// One turn's worth of hostility. Sends that fail (the un-acked window
    /// is full: nothing is ever acknowledged) are the point, not an error.
    fn act(&mut self) {
        match self.kind {
            Kind::Player => {
                // The per-turn maximum: 16 chunks, 4 KiB in all.
                let chunk = lockstep::low_level::proto::MAX_INPUT_BYTES
                    / lockstep::low_level::proto::MAX_INPUT_CHUNKS;
                let commands =
                    vec![vec![0x5a; chunk]; lockstep::low_level::proto::MAX_INPUT_CHUNKS];
                let msg = ToRelay::Input {
                    turn: Turn(self.seq),
                    commands,
                };
                self.seq += 1;
                let _ = self.client.send(Channel::Urgent, &msg.to_bytes());
            }
            Kind::Squatter | Kind::Spectator => {
                for _ in 0..FLOOD_PER_TURN {
                    let mut junk = vec![0; FLOOD_LEN];
                    junk[0] = lockstep::low_level::proto::PROTOCOL_VERSION;
                    for b in &mut junk[1..] {
                        *b = self.rng.next_u64() as u8;
                    }
                    let _ = self.client.send(Channel::Reliable, &junk);
                }
            }
        }
    }

    /// Sends what the client has; a squatter drops a quarter of it.
    fn transmit(&mut self, now: Instant, epoch: Instant, buf: &mut Vec<u8>, c: &mut CrowdCounts) {
        if matches!(self.phase, Phase::Waiting(_)) {
            return;
        }
        let t = clock(epoch, now);
        while let Some(to) = self.client.poll_transmit(t, buf) {
            let hole = self.kind == Kind::Squatter
                && matches!(self.phase, Phase::Hostile(_))
                && self.rng.next_u64() % 4 == 0;
            if hole {
                c.datagrams_dropped += 1;
                continue;
            }
            // A full socket buffer loses the datagram, as the wire would.
            if self.socket.send_to(buf, to).is_ok() {
                c.datagrams_sent += 1;
            }
        }
    }
}

/// A hostile client's transport: the defaults, except that it never gives
/// up on its own (it hears nothing and its window stays full once it stops
/// reading); the relay must be the one to cut it off.
fn hostile_transport() -> TransportConfig {
    TransportConfig {
        timeout: lockstep::Duration::from_secs(60),
        backpressure_timeout: lockstep::Duration::from_secs(60),
        ..TransportConfig::default()
    }
}

/// The rules fingerprint of the honest match (`peer`'s default game).
fn honest_rules() -> StateHash {
    // HONEST is 2: the cast cannot truncate.
    lockstep::peer::rules_fingerprint::<sim::game::World>(
        HONEST as u8,
        sim::game::DEFAULT_TICKS_PER_TURN,
    )
}

/// The transport's clock: microseconds since the driver's epoch. Use it
/// for any `Client` driven from real time beside the crowd.
#[must_use]
pub fn clock(epoch: Instant, now: Instant) -> lockstep::Instant {
    lockstep::Instant::from_std(epoch, now)
}

/// What a spectator of the honest match that acknowledges nothing can
/// have queued at the relay, in KiB, from the relay's gauges while the
/// honest match is the only one: the agreed snapshot, then up to
/// `max_tail_turns` (400) bundles of its tail and 5 s of live bundles
/// (200 turns) until the cut-off, at twice the tail's mean bundle size
/// (the bots' command rate varies over a match). `None` if the page has
/// no snapshot gauges.
fn spectator_kib(page: &str) -> Option<u64> {
    let gauge = |k: &str| metric(page, &format!("relay_snapshot_bytes{{kind=\"{k}\"}}"));
    let snapshot = gauge("agreed")?;
    let tail = gauge("tail")?;
    let tail_turns = metric(page, "relay_snapshot_tail_turns")?.max(1);
    let turns = u64::from(relay::rejoin_config::RejoinConfig::default().max_tail_turns) + 200;
    Some((snapshot + turns * 2 * tail.div_ceil(tail_turns)).div_ceil(1024))
}

/// `relay_memory_bytes{part}` of a metrics page, by part.
fn memory_parts(page: &str) -> BTreeMap<String, u64> {
    MEMORY_PARTS
        .iter()
        .filter_map(|p| {
            let v = metric(page, &format!("relay_memory_bytes{{part=\"{p}\"}}"))?;
            Some(((*p).to_owned(), v))
        })
        .collect()
}

/// A `/proc/<pid>/status` field that must be readable.
fn status_kib(pid: u32, field: &str) -> Result<u64, String> {
    proc_status_kib(pid, field).ok_or_else(|| format!("cannot read {field} of process {pid}"))
}

/// Runs the relay, the honest match and the crowd; returns what it
/// measured. The caller judges it (the test asserts, the bench reports).
///
/// # Errors
/// When the run could not measure: a process that does not start, a wait
/// that times out, the relay dying, a socket that cannot be made, or the
/// honest match not ending within [`MATCH`].
pub fn run(opts: &CrowdOptions) -> Result<CrowdReport, String> {
    let started = Instant::now();
    let slots = opts.slots.to_string();
    let mut relay = Relay::try_start(
        &opts.relay_bin,
        &opts.dir,
        &[
            "--turn-ms",
            &TURN_MS.to_string(),
            "--max-connections",
            &slots,
            "--metrics",
            "127.0.0.1:0",
        ],
    )?;
    let pid = relay.proc.pid();
    let metrics_addr = relay.try_metrics_addr()?;
    let idle_rss_kib = status_kib(pid, "VmRSS")?;
    let idle_hwm_kib = status_kib(pid, "VmHWM")?;

    let relay_addr = relay.addr;
    let spec = |seed: u64| PeerSpec {
        relay: relay_addr,
        match_name: "honest".to_owned(),
        players: HONEST as u8,
        turns: opts.turns,
        seed,
        extra: Vec::new(),
    };
    let mut honest: Vec<Proc> = (1..=HONEST as u64)
        .map(|s| try_peer(&opts.peer_bin, &spec(s)))
        .collect::<Result<_, _>>()?;
    let started_line = relay.try_wait_event("the honest match started", MATCH, |v| {
        v["event"] == "match_started" && v["name"] == "honest"
    })?;
    let honest_id = started_line["match"].clone();
    relay.try_wait_event("the crowd's turn", MATCH, |v| {
        v["event"] == "turn_closed"
            && v["match"] == honest_id
            && v["turn"].as_u64() >= Some(CROWD_FROM_TURN)
    })?;
    let honest_rss_kib = status_kib(pid, "VmRSS")?;
    let spectator_kib = spectator_kib(&scrape_metrics(metrics_addr))
        .ok_or("the relay's metrics have no snapshot of the honest match")?;

    // The crowd, on one poller in this thread.
    let crowd_size = opts.crowd();
    let epoch = Instant::now();
    let io = |e: std::io::Error| format!("crowd poller: {e}");
    let mut poll = Poll::new().map_err(io)?;
    let mut crowd: Vec<Hostile> = (0..crowd_size)
        .map(|i| Hostile::new(i, relay_addr, Instant::now(), epoch))
        .collect::<Result<_, _>>()?;
    for (i, h) in crowd.iter_mut().enumerate() {
        poll.registry()
            .register(&mut h.socket, Token(i), Interest::READABLE)
            .map_err(io)?;
    }
    let ticks_at_start = (process_ticks(pid), process_ticks(std::process::id()));
    let machine_at_start = read_machine_ticks();
    let crowd_in = Instant::now();
    let mut counts = CrowdCounts::default();
    let mut events = Events::with_capacity(1024);
    let mut rx = vec![0u8; 2048];
    let mut tx = Vec::new();
    let (mut max_peers, mut max_rss, mut scraped_at) = (0, 0, Instant::now());
    let (mut memory_at_peak, mut memory_max_bytes) = (BTreeMap::new(), 0);
    let mut loops = 0u64;
    let deadline = Instant::now() + MATCH;
    while honest.iter_mut().any(Proc::is_running) {
        if Instant::now() >= deadline {
            return Err(format!(
                "the honest match did not end within {MATCH:?}; relay output:\n{}",
                relay.proc.tail()
            ));
        }
        // Readiness or the next turn of hostility, whichever comes first.
        match poll.poll(&mut events, Some(Duration::from_millis(5))) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(io(e)),
        }
        loops += 1;
        let now = Instant::now();
        for ev in &events {
            if let Some(h) = crowd.get_mut(ev.token().0) {
                h.receive(now, epoch, &mut rx);
            }
        }
        for h in &mut crowd {
            h.step(relay_addr, now, epoch, &mut counts);
            h.transmit(now, epoch, &mut tx, &mut counts);
        }
        if now >= scraped_at + Duration::from_millis(500) {
            scraped_at = now;
            if !relay.proc.is_running() {
                return Err(format!("the relay died:\n{}", relay.proc.tail()));
            }
            let page = scrape_metrics(metrics_addr);
            max_peers = max_peers.max(metric(&page, "relay_peers").unwrap_or(0));
            let rss = proc_status_kib(pid, "VmRSS").unwrap_or(0);
            let parts = memory_parts(&page);
            memory_max_bytes = memory_max_bytes.max(parts.values().sum());
            if rss > max_rss || memory_at_peak.is_empty() {
                memory_at_peak = parts;
            }
            max_rss = max_rss.max(rss);
        }
    }
    let crowd_secs = crowd_in.elapsed().as_secs_f64();
    // Still hostile to the end: the relay is measured with the crowd in.
    let relay_alive = relay.proc.is_running();
    let peak_kib = status_kib(pid, "VmHWM")?.max(max_rss);
    let metrics = scrape_metrics(metrics_addr);
    let cpu = |at_start: Option<u64>, now: Option<u64>| match (at_start, now) {
        (Some(a), Some(b)) => {
            b.saturating_sub(a) as f64 / clock_ticks_per_sec() / crowd_secs * 100.0
        }
        _ => 0.0,
    };
    let relay_cpu_pct = cpu(ticks_at_start.0, process_ticks(pid));
    let crowd_cpu_pct = cpu(ticks_at_start.1, process_ticks(std::process::id()));
    let machine_cpu_pct = match (machine_at_start, read_machine_ticks()) {
        (Some((b0, t0)), Some((b1, t1))) if t1 > t0 => {
            b1.saturating_sub(b0) as f64 / (t1 - t0) as f64 * 100.0
        }
        _ => 0.0,
    };
    drop(crowd);

    let honest = honest
        .iter_mut()
        .map(|p| try_finish_peer(p, MATCH))
        .collect::<Result<Vec<_>, _>>()?;
    // What the relay saw of the crowd (the lines up to the honest end).
    let end = relay.try_wait_event("the honest match's end", MATCH, |v| {
        v["event"] == "match_ended" && v["match"] == honest_id
    })?;
    let cut_off_lines = relay.events_of("cut_off").len();
    let full_lines = relay
        .events_of("join_refused")
        .iter()
        .filter(|v| v["detail"] == "connection limit reached")
        .count();
    // The bound: the idle relay, every slot at the caps' worst, the players
    // at their backlog's worst, and the spectators each sent what a late
    // spectator gets (never acknowledged, so all of it stays queued).
    let players = (0..crowd_size)
        .filter(|&i| kind_of(i) == Kind::Player)
        .count()
        .min(opts.slots.saturating_sub(HONEST)) as u64;
    let bound = Bound {
        kib: idle_hwm_kib
            + opts.slots as u64 * CONNECTION_KIB
            + players * PLAYER_BACKLOG_KIB
            + SPECTATORS * spectator_kib,
        players,
        spectators: SPECTATORS,
        spectator_kib,
    };
    Ok(CrowdReport {
        slots: opts.slots,
        crowd: crowd_size,
        idle_rss_kib,
        idle_hwm_kib,
        honest_rss_kib,
        max_sampled_rss_kib: max_rss,
        peak_kib,
        bound,
        max_peers,
        memory_at_peak,
        memory_max_bytes,
        counts,
        relay_alive,
        honest,
        end_reason: end["reason"].as_str().unwrap_or("").to_owned(),
        metrics,
        cut_off_lines,
        full_lines,
        relay_cpu_pct,
        crowd_cpu_pct,
        machine_cpu_pct,
        loop_mean_ms: crowd_secs * 1000.0 / loops.max(1) as f64,
        crowd_secs,
        secs: started.elapsed().as_secs_f64(),
    })
}
