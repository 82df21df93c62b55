//! A crowd of hostile clients holds every connection slot of a real
//! `relay serve` while an honest 2-player match plays through it. Each
//! hostile client is the worst the protocol lets a client be: it completes
//! the handshake, takes router state (a lobby, a seat in a match of its
//! own kind, or a spectator seat on the honest match), then stops reading
//! the relay, so it never acknowledges anything again, and keeps sending:
//! the largest inputs a turn takes, the largest bulk message it may send
//! (refused unread by the relay), reliable messages at the rate limit,
//! some of them behind holes it leaves on purpose (so the relay holds
//! frames ahead of a gap). The relay cuts each one off after 5 s of acking
//! nothing; it then comes back and takes a slot again, so the slots stay
//! full (more clients than slots keep trying).
//!
//! The honest match must finish with agreeing hashes, the relay must stay
//! up, and its peak resident set must stay under a bound derived from its
//! per-connection caps (see [`CONNECTION_KIB`] and [`PLAYER_BACKLOG_KIB`]).
#![allow(clippy::unwrap_used)] // tests may unwrap

use lockstep::low_level::proto::{Join, ToPeer, ToRelay};
use lockstep::low_level::transport::{Channel, Client, ClientEvent, TransportConfig};
use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Token};
use sim::{Simulation, StateHash, Turn};
use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};
use tests::harness::{
    PeerSpec, Proc, Relay, SplitMix, finish_peer, metric, peer, proc_status_kib, scrape_metrics,
    scratch_dir,
};

/// `--max-connections`: enough slots for the per-connection cost to dwarf
/// the relay's fixed footprint, few enough for two busy cores.
const SLOTS: usize = 256;
/// The honest players (from 127.0.0.1).
const HONEST: usize = 2;
/// Hostile clients beyond the free slots: they keep knocking, so a slot
/// freed by a cut-off is taken again at once.
const EXTRA: usize = 16;
/// Every hostile client.
const CROWD: usize = SLOTS - HONEST + EXTRA;
/// The relay's default `--max-connections-per-host`: the crowd comes from
/// `CROWD / PER_HOST` loopback addresses, 127.0.0.2 and up.
const PER_HOST: usize = 16;
/// Turn length of the relay (and so of every match on it).
const TURN_MS: u64 = 25;
/// Turns of the honest match: 20 s, four cut-off rounds of the crowd.
const TURNS: u32 = 800;
/// The crowd comes in once the honest match has played this far, so a
/// snapshot of it exists (the relay asks for one every 100 turns) and
/// spectators cost what a late spectator costs: the snapshot and the tail.
const CROWD_FROM_TURN: u64 = 150;
/// How long a hostile client that stopped reading keeps its connection
/// before it starts a new one: past the relay's 5 s cut-off of a peer that
/// acknowledges nothing, so every round is cut off by the relay, not
/// replaced by the client (a new handshake from the same address would
/// replace the old connection).
const STALE_AFTER: Duration = Duration::from_millis(6500);
/// How long a hostile client waits for its lobby to fill before it behaves
/// as a lobby squatter anyway.
const HOOK_WITHIN: Duration = Duration::from_secs(3);
/// Pause before a refused client (server full, host limit) tries again.
const RETRY: Duration = Duration::from_millis(250);
/// Players of a hostile match: the most a match has, so every bundle is
/// as large as the inputs can make it.
const HOSTILE_SLOTS: u8 = 8;
/// Reliable messages a flooding client sends per turn: the relay's rate
/// limit is 300 messages/s, 7.5 per 25 ms turn.
const FLOOD_PER_TURN: usize = 8;
/// Size of one flooding message: just under one fragment, so the holes the
/// client leaves are followed by as many held bytes as possible.
const FLOOD_LEN: usize = 1000;
/// Within this the whole test must end (the honest match takes 20 s).
const MATCH: Duration = Duration::from_secs(90);

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

/// What the crowd did, for the assertions and the report.
#[derive(Debug, Default)]
struct CrowdCounts {
    handshakes: u64,
    refused: u64,
    /// Refusals by what the client was told.
    reasons: BTreeMap<String, u64>,
    hooked: u64,
    bulk_sent: u64,
    datagrams_sent: u64,
    datagrams_dropped: u64,
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
    fn new(i: usize, relay: SocketAddr, now: Instant, epoch: Instant) -> Self {
        let kind = kind_of(i);
        // Players of eight consecutive player indices play together.
        let group = (i / 8 * 4 + i % 8) / usize::from(HOSTILE_SLOTS);
        let host = u8::try_from(2 + i / PER_HOST).unwrap();
        let std_socket = std::net::UdpSocket::bind((Ipv4Addr::new(127, 0, 0, host), 0)).unwrap();
        std_socket.set_nonblocking(true).unwrap();
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
        h
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
        // Queued until the handshake completes (the queue is empty).
        self.client
            .send(Channel::Reliable, &msg.to_bytes())
            .unwrap();
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
    lockstep::peer::rules_fingerprint::<sim::game::World>(
        u8::try_from(HONEST).unwrap(),
        sim::game::DEFAULT_TICKS_PER_TURN,
    )
}

/// The transport's clock: microseconds since the test's epoch.
fn clock(epoch: Instant, now: Instant) -> lockstep::Instant {
    lockstep::Instant::from_std(epoch, now)
}

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
const CONNECTION_KIB: u64 = 256 * 1163 / 1024 + 128 + 96 + 64;

/// What a hostile player can make the relay queue beyond its transport, in
/// KiB. The relay's per-connection send backlog is bounded in messages
/// (4096), not in bytes, so what it holds for a player that acknowledges
/// nothing is whatever the router produces for it until the cut-off: the
/// bundles carrying the other seven players' inputs. Each of those sends
/// at most its own un-acked window of input fragments (256 of 1 KiB: it
/// acknowledges nothing, so it never hears an ack either), so a player's
/// backlog holds at most 7 × 256 KiB; and its match keeps those bundles
/// once more in the rejoin tail (its share: its own 256 KiB).
const PLAYER_BACKLOG_KIB: u64 = (HOSTILE_SLOTS as u64 - 1) * 256 + 256;

/// What a spectator of the honest match that acknowledges nothing can
/// have queued at the relay, in KiB, from the relay's gauges while the
/// honest match is the only one: the agreed snapshot, then up to
/// `max_tail_turns` (400) bundles of its tail and 5 s of live bundles
/// (200 turns) until the cut-off, at twice the tail's mean bundle size
/// (the bots' command rate varies over a match).
fn spectator_kib(page: &str) -> u64 {
    let gauge = |k: &str| metric(page, &format!("relay_snapshot_bytes{{kind=\"{k}\"}}"));
    let snapshot = gauge("agreed").unwrap();
    let tail = gauge("tail").unwrap();
    let tail_turns = metric(page, "relay_snapshot_tail_turns").unwrap().max(1);
    let turns = u64::from(relay::rejoin_config::RejoinConfig::default().max_tail_turns) + 200;
    (snapshot + turns * 2 * tail.div_ceil(tail_turns)).div_ceil(1024)
}

#[test]
fn a_hostile_crowd_in_every_slot_leaves_the_honest_match_and_the_relays_memory_intact() {
    let started = Instant::now();
    let dir = scratch_dir("hostile-crowd");
    let slots = SLOTS.to_string();
    let mut relay = Relay::start(
        &dir,
        &[
            "--turn-ms",
            &TURN_MS.to_string(),
            "--max-connections",
            &slots,
            "--metrics",
            "127.0.0.1:0",
        ],
    );
    let pid = relay.proc.pid();
    let metrics_addr = relay.metrics_addr();
    let idle_rss = proc_status_kib(pid, "VmRSS").unwrap();
    let idle_hwm = proc_status_kib(pid, "VmHWM").unwrap();

    let relay_addr = relay.addr;
    let spec = |seed: u64| PeerSpec {
        relay: relay_addr,
        match_name: "honest".to_owned(),
        players: u8::try_from(HONEST).unwrap(),
        turns: TURNS,
        seed,
        extra: Vec::new(),
    };
    let mut honest: Vec<Proc> = (1..=HONEST as u64).map(|s| peer(&spec(s))).collect();
    let started_line = relay.wait_event("the honest match started", MATCH, |v| {
        v["event"] == "match_started" && v["name"] == "honest"
    });
    let honest_id = started_line["match"].clone();
    relay.wait_event("the crowd's turn", MATCH, |v| {
        v["event"] == "turn_closed"
            && v["match"] == honest_id
            && v["turn"].as_u64() >= Some(CROWD_FROM_TURN)
    });
    let honest_rss = proc_status_kib(pid, "VmRSS").unwrap();
    let spectator_kib = spectator_kib(&scrape_metrics(metrics_addr));

    // The crowd, on one poller in this thread.
    let epoch = Instant::now();
    let mut poll = Poll::new().unwrap();
    let mut crowd: Vec<Hostile> = (0..CROWD)
        .map(|i| Hostile::new(i, relay_addr, Instant::now(), epoch))
        .collect();
    for (i, h) in crowd.iter_mut().enumerate() {
        poll.registry()
            .register(&mut h.socket, Token(i), Interest::READABLE)
            .unwrap();
    }
    let mut counts = CrowdCounts::default();
    let mut events = Events::with_capacity(1024);
    let mut rx = vec![0u8; 2048];
    let mut tx = Vec::new();
    let (mut max_peers, mut max_rss, mut scraped_at) = (0, 0, Instant::now());
    let deadline = Instant::now() + MATCH;
    while honest.iter_mut().any(Proc::is_running) {
        assert!(Instant::now() < deadline, "the honest match did not end");
        // Readiness or the next turn of hostility, whichever comes first.
        poll.poll(&mut events, Some(Duration::from_millis(5)))
            .unwrap();
        let now = Instant::now();
        for ev in &events {
            crowd[ev.token().0].receive(now, epoch, &mut rx);
        }
        for h in &mut crowd {
            h.step(relay_addr, now, epoch, &mut counts);
            h.transmit(now, epoch, &mut tx, &mut counts);
        }
        if now >= scraped_at + Duration::from_millis(500) {
            scraped_at = now;
            let page = scrape_metrics(metrics_addr);
            max_peers = max_peers.max(metric(&page, "relay_peers").unwrap_or(0));
            max_rss = max_rss.max(proc_status_kib(pid, "VmRSS").unwrap_or(0));
        }
    }
    // Still hostile to the end: the relay is measured with the crowd in.
    assert!(
        relay.proc.is_running(),
        "relay died:\n{}",
        relay.proc.tail()
    );
    // The kernel syncs its per-thread RSS counters lazily, so a sample of
    // VmRSS can read a little above VmHWM: the larger of the two.
    let peak = proc_status_kib(pid, "VmHWM").unwrap().max(max_rss);
    let page = scrape_metrics(metrics_addr);
    drop(crowd);

    let results: Vec<_> = honest.iter_mut().map(|p| finish_peer(p, MATCH)).collect();
    let hash = results[0].summary["final_hash"]
        .as_str()
        .unwrap()
        .to_owned();
    for r in &results {
        assert_eq!(r.code, Some(0), "{}", r.summary);
        assert_eq!(r.summary["final_turn"], TURNS - 1, "{}", r.summary);
        assert_eq!(r.summary["final_hash"], hash.as_str(), "{}", r.summary);
        assert_eq!(r.summary["desyncs"], serde_json::json!([]), "{}", r.summary);
        eprintln!(
            "hostile_crowd: honest peer: stall {} ms, turn latency {}, rtt {} ms",
            r.summary["stall_ms"], r.summary["turn_latency_ms"], r.summary["rtt_ms"]
        );
    }

    // What the relay saw of the crowd (the lines up to the honest end).
    let end = relay.wait_event("the honest match's end", MATCH, |v| {
        v["event"] == "match_ended" && v["match"] == honest_id
    });
    assert_eq!(end["reason"], "completed", "{end}");
    let m = |name: &str| metric(&page, name).unwrap_or(0);
    let cut_off = m("relay_connections_cut_off_total");
    let bulk_refused = m("relay_transport_drops_total{reason=\"bulk_refused\"}");
    let reorder_refused = m("relay_transport_drops_total{reason=\"reorder_refused\"}");
    let cut_off_lines = relay.events_of("cut_off").len();
    let full_lines = relay
        .events_of("join_refused")
        .iter()
        .filter(|v| v["detail"] == "connection limit reached")
        .count();
    for l in page
        .lines()
        .filter(|l| l.starts_with("relay_") && !l.ends_with(" 0"))
    {
        eprintln!("hostile_crowd: {l}");
    }
    // The bound: the idle relay, every slot at the caps' worst, the players
    // at their backlog's worst, and the spectators each sent what a late
    // spectator gets (never acknowledged, so all of it stays queued).
    let players = (0..CROWD)
        .filter(|&i| kind_of(i) == Kind::Player)
        .count()
        .min(SLOTS - HONEST) as u64;
    let spectators = 32;
    let bound = idle_hwm
        + SLOTS as u64 * CONNECTION_KIB
        + players * PLAYER_BACKLOG_KIB
        + spectators * spectator_kib;
    let per_conn = peak.saturating_sub(idle_hwm) / SLOTS as u64;
    eprintln!(
        "hostile_crowd: relay RSS idle {idle_rss} KiB (peak {idle_hwm}), with the honest match \
         {honest_rss} KiB, max sampled {max_rss} KiB, peak {peak} KiB with {SLOTS} slots: \
         {per_conn} KiB per connection; bound {bound} KiB ({SLOTS} x {CONNECTION_KIB} + \
         {players} x {PLAYER_BACKLOG_KIB} + {spectators} x {} KiB); relay_peers max {max_peers}; \
         crowd {counts:?}; cut off {cut_off} ({cut_off_lines} lines), bulk refused \
         {bulk_refused}, reorder refused {reorder_refused}, {full_lines} relay-full lines; \
         {:.1} s",
        spectator_kib,
        started.elapsed().as_secs_f64()
    );
    // Every slot was taken (the router tracks each connection), and more
    // clients than slots were turned away.
    assert_eq!(max_peers, SLOTS as u64, "relay_peers peaked at {max_peers}");
    let relay_full = counts
        .reasons
        .iter()
        .filter(|(r, _)| r.starts_with("RelayFull"))
        .map(|(_, n)| n)
        .sum::<u64>();
    assert!(relay_full > 0, "the crowd never found the relay full");
    assert!(full_lines > 0, "the relay logged no refusal for being full");
    // The relay cut off clients that acknowledged nothing: at least one
    // round of the whole crowd.
    assert!(cut_off >= (SLOTS - HONEST) as u64, "only {cut_off} cut off");
    assert!(cut_off_lines > 0, "no cut_off line");
    assert!(bulk_refused > 0, "no bulk data was refused");
    // Clients the full relay turned away at establishment are counted.
    let conn_refused = m("relay_drops_total{reason=\"connection_refused\"}");
    assert!(conn_refused > 0, "no refused connection counted");
    assert!(
        peak <= bound,
        "relay peak RSS {peak} KiB over the bound {bound} KiB"
    );
}

/// Turns the budget match below plays before the relay is measured.
const BUDGET_TURNS: u64 = 400;

/// The relay's memory when eight players that acknowledge everything all
/// send half the input the relay accepts every turn (their own and a late
/// one carried beside it make the whole share). The protocol allows
/// 4 KiB a player a turn: ~33 KB bundles 40 times a second, 1.3 MB/s per
/// connection, several times what a connection's paced window delivers, so
/// the relay's send backlogs grew ~6 MB/s (past 100 MB within 15 s) before
/// each player's share was cut to the relay's bundle budget
/// (`Limits::player_turn_bytes`). The bound is the crowd test's: every
/// connection at its caps, plus the match's rejoin tail (`max_tail_turns`
/// bundles of the largest size this match makes).
#[test]
fn eight_acking_players_at_their_input_budget_keep_the_relays_memory_bounded() {
    let dir = scratch_dir("budget-match");
    let mut relay = Relay::start(
        &dir,
        &[
            "--turn-ms",
            &TURN_MS.to_string(),
            "--metrics",
            "127.0.0.1:0",
        ],
    );
    let pid = relay.proc.pid();
    let metrics_addr = relay.metrics_addr();
    let idle_hwm = proc_status_kib(pid, "VmHWM").unwrap();
    let epoch = Instant::now();
    let mut poll = Poll::new().unwrap();
    let mut players: Vec<(UdpSocket, Client)> = (0..HOSTILE_SLOTS)
        .map(|i| {
            let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            s.set_nonblocking(true).unwrap();
            let mut socket = UdpSocket::from_std(s);
            poll.registry()
                .register(&mut socket, Token(usize::from(i)), Interest::READABLE)
                .unwrap();
            let now = clock(epoch, Instant::now());
            let mut c = Client::new(now, relay.addr, TransportConfig::default(), u64::from(i));
            let join = Join {
                match_name: "budget".into(),
                slots: HOSTILE_SLOTS,
                game_id: "g".into(),
                game_version: 1,
                rules_hash: StateHash([0; 32]),
                name: format!("p{i}"),
                turns: 0,
            };
            c.send(Channel::Reliable, &ToRelay::Join(join).to_bytes())
                .unwrap();
            (socket, c)
        })
        .collect();
    // Half of each player's share of a turn (a late input carried into the
    // next turn then fits beside that turn's own), in as many chunks as
    // allowed.
    let share = relay::Limits::default()
        .player_turn_bytes(HOSTILE_SLOTS, lockstep::Duration::from_millis(TURN_MS));
    let chunks = lockstep::low_level::proto::MAX_INPUT_CHUNKS;
    let input = |seq| {
        ToRelay::Input {
            turn: Turn(seq),
            commands: vec![vec![0x5a; share / 2 / chunks]; chunks],
        }
        .to_bytes()
    };
    let (mut seq, mut next_input, mut started) = (0, Instant::now(), 0);
    let (mut max_rss, mut scraped_at, mut closed) = (0, Instant::now(), 0);
    let mut events = Events::with_capacity(64);
    let (mut rx, mut tx) = (vec![0u8; 2048], Vec::new());
    let deadline = Instant::now() + MATCH;
    while closed < BUDGET_TURNS {
        assert!(Instant::now() < deadline, "{closed} turns closed");
        poll.poll(&mut events, Some(Duration::from_millis(5)))
            .unwrap();
        let now = Instant::now();
        let t = clock(epoch, now);
        for (socket, c) in &mut players {
            while let Ok((n, from)) = socket.recv_from(&mut rx) {
                c.handle_datagram(t, from, &rx[..n]);
            }
            if c.poll_timeout().is_some_and(|d| d <= t) {
                c.handle_timeout(t);
            }
            while let Some(ev) = c.poll_event() {
                if let ClientEvent::Message(m) = ev
                    && matches!(ToPeer::decode(&m), Ok(ToPeer::Start(_)))
                {
                    started += 1;
                }
            }
        }
        if started == players.len() && now >= next_input {
            next_input = now + Duration::from_millis(TURN_MS);
            seq += 1;
            for (_, c) in &mut players {
                // A full window waits for acks, as a peer's backlog would.
                let _ = c.send(Channel::Urgent, &input(seq));
            }
        }
        for (socket, c) in &mut players {
            while let Some(to) = c.poll_transmit(t, &mut tx) {
                let _ = socket.send_to(&tx, to);
            }
        }
        if now >= scraped_at + Duration::from_millis(500) {
            scraped_at = now;
            let page = scrape_metrics(metrics_addr);
            closed = metric(&page, "relay_turns_closed_total").unwrap_or(0);
            max_rss = max_rss.max(proc_status_kib(pid, "VmRSS").unwrap_or(0));
        }
    }
    assert!(
        relay.proc.is_running(),
        "relay died:\n{}",
        relay.proc.tail()
    );
    // Input at the share is taken, none refused: the cap is what the
    // relay's bundle budget promises, not a guess.
    let page = scrape_metrics(metrics_addr);
    assert_eq!(metric(&page, "relay_input_over_budget_total"), Some(0));
    let peak = proc_status_kib(pid, "VmHWM").unwrap().max(max_rss);
    // The largest bundle this match makes: eight players at their whole
    // share and the framing, kept `max_tail_turns` times in the rejoin tail.
    let bundle_kib = (u64::from(HOSTILE_SLOTS) * 2 * input(0).len() as u64).div_ceil(1024) + 1;
    let tail_kib =
        u64::from(relay::rejoin_config::RejoinConfig::default().max_tail_turns) * bundle_kib;
    let bound = idle_hwm + u64::from(HOSTILE_SLOTS) * CONNECTION_KIB + tail_kib;
    eprintln!(
        "budget_match: relay RSS idle {idle_hwm} KiB, peak {peak} KiB after {closed} turns; \
         bound {bound} KiB (8 x {CONNECTION_KIB} + a tail of {tail_kib})"
    );
    assert!(
        peak <= bound,
        "relay peak RSS {peak} KiB over the bound {bound} KiB"
    );
}

/// A relay at its memory budget (`--max-memory-mib 1`) turns new
/// connections away with `MemoryFull` (counted, and shown by
/// `relay_memory_full`), through the real binary and real sockets: 300
/// clients from one host (the per-host limit lifted) connect and hold
/// their connections; the relay admits them until what it holds reaches
/// the budget, then refuses the rest.
#[test]
fn a_relay_at_its_memory_budget_refuses_new_connections_with_memory_full() {
    const CLIENTS: usize = 300;
    let dir = scratch_dir("memory-budget");
    let mut relay = Relay::start(
        &dir,
        &[
            "--max-memory-mib",
            "1",
            "--max-connections-per-host",
            "1024",
            "--metrics",
            "127.0.0.1:0",
        ],
    );
    let metrics_addr = relay.metrics_addr();
    let epoch = Instant::now();
    let mut clients: Vec<(std::net::UdpSocket, Client, Option<ToPeer>)> = Vec::new();
    let (mut rx, mut tx) = (vec![0u8; 2048], Vec::new());
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut memory_full = 0;
    while memory_full == 0 {
        assert!(Instant::now() < deadline, "never refused at the budget");
        // A batch of new connections at a time, so the relay measures
        // itself (every 250 ms) between batches.
        if clients.len() < CLIENTS {
            for i in 0..20 {
                let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
                s.set_nonblocking(true).unwrap();
                let now = clock(epoch, Instant::now());
                let seed = (clients.len() + i) as u64;
                let c = Client::new(now, relay.addr, TransportConfig::default(), seed);
                clients.push((s, c, None));
            }
        }
        let until = Instant::now() + Duration::from_millis(300);
        while Instant::now() < until {
            let t = clock(epoch, Instant::now());
            for (s, c, got) in &mut clients {
                while let Ok((n, from)) = s.recv_from(&mut rx) {
                    c.handle_datagram(t, from, &rx[..n]);
                }
                c.handle_timeout(t);
                while let Some(ev) = c.poll_event() {
                    if let ClientEvent::Message(m) = ev
                        && let Ok(msg @ ToPeer::Rejected { .. }) = ToPeer::decode(&m)
                    {
                        *got = Some(msg);
                    }
                }
                while let Some(to) = c.poll_transmit(t, &mut tx) {
                    let _ = s.send_to(&tx, to);
                }
            }
            std::thread::yield_now();
        }
        memory_full = clients
            .iter()
            .filter(|(_, _, got)| {
                matches!(
                    got,
                    Some(ToPeer::Rejected {
                        reason: lockstep::peer::RejectReason::MemoryFull,
                        ..
                    })
                )
            })
            .count();
        if clients.len() >= CLIENTS && memory_full == 0 {
            break;
        }
    }
    assert!(memory_full > 0, "no connection was refused at the budget");
    let admitted = clients
        .iter()
        .filter(|(_, c, got)| got.is_none() && c.is_connected())
        .count();
    assert!(
        admitted > 0,
        "the relay admitted connections below its budget"
    );
    let page = scrape_metrics(metrics_addr);
    assert_eq!(metric(&page, "relay_memory_full"), Some(1));
    assert_eq!(metric(&page, "relay_memory_budget_bytes"), Some(1 << 20));
    assert!(metric(&page, "relay_memory_refused_total").unwrap_or(0) >= memory_full as u64);
    let held = metric(&page, "relay_memory_bytes{part=\"connections\"}").unwrap_or(0);
    assert!(held >= 1 << 20, "{held} bytes held at the budget");
    eprintln!("memory_budget: {admitted} admitted, {memory_full} refused, {held} bytes held");
    assert!(
        relay.proc.is_running(),
        "relay died:\n{}",
        relay.proc.tail()
    );
}
