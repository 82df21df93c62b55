//! Bandwidth against the Age of Empires budget: a busy 8-player match of the
//! reference game (bots at a high APM) over our transport and the real relay,
//! in process on the deterministic `netsim::Network` with a virtual clock
//! (`lockstep::netsim::Harness`, which counts every datagram per direction).
//! Also the per-packet header overhead of our wire format, measured on
//! packets the wire encoder writes and checked against a datagram the
//! transport really sends.

use super::benchpeer::{BenchPeer, BenchPeerConfig, Play};
use lockstep::low_level::peer_glue::PeerGlue;
use lockstep::low_level::transport::{Client, Server, TransportConfig};
use lockstep::low_level::wire::{self, AuthKind, Frame, Header};
use lockstep::netsim::harness::{Endpoint, Harness};
use lockstep::netsim::{LinkConfig, Network};
use lockstep::peer::{Autopilot, PeerBuilder};
use lockstep::{Duration, Instant};
use relay::RelayConfig;
use sim::game::World;
use std::fmt::Write as _;
use std::net::SocketAddr;

/// IPv4 (20) + UDP (8) header bytes per datagram.
pub const IP_UDP_HEADER: u64 = 28;
/// The modem of "1500 Archers on a 28.8", bytes per second each way.
pub const MODEM_BYTES_PER_S: f64 = 28_800.0 / 8.0;
/// Players in the busy match.
pub const PLAYERS: u8 = 8;
/// Bot actions per minute asked for.
pub const APM: u32 = 1000;

/// One peer's traffic over the match.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Traffic {
    /// Datagram payload bytes peer → relay.
    pub up_bytes: u64,
    /// Datagram payload bytes relay → peer.
    pub down_bytes: u64,
    /// Datagrams peer → relay.
    pub up_packets: u64,
    /// Datagrams relay → peer.
    pub down_packets: u64,
}

/// Result of one busy match.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Busy {
    /// Link loss used.
    pub loss: f64,
    /// Per peer traffic.
    pub peers: Vec<Traffic>,
    /// Match duration (virtual), seconds.
    pub secs: f64,
    /// Commands executed per player per minute (measured).
    pub commands_per_min: f64,
    /// Peers whose match completed.
    pub completed: usize,
}

impl Busy {
    fn mean(&self, f: impl Fn(&Traffic) -> u64) -> f64 {
        self.peers.iter().map(|t| f(t) as f64).sum::<f64>()
            / self.peers.len().max(1) as f64
            / self.secs.max(1e-9)
    }
    /// Mean per peer: (up payload B/s, down payload B/s).
    #[must_use]
    pub fn payload(&self) -> (f64, f64) {
        (self.mean(|t| t.up_bytes), self.mean(|t| t.down_bytes))
    }
    /// Mean per peer with IP + UDP headers: (up, down) B/s.
    #[must_use]
    pub fn with_headers(&self) -> (f64, f64) {
        (
            self.mean(|t| t.up_bytes + IP_UDP_HEADER * t.up_packets),
            self.mean(|t| t.down_bytes + IP_UDP_HEADER * t.down_packets),
        )
    }
    /// Mean per peer: (up, down) datagrams per second.
    #[must_use]
    pub fn packets(&self) -> (f64, f64) {
        (self.mean(|t| t.up_packets), self.mean(|t| t.down_packets))
    }
}

/// A bench peer as a harness endpoint: transport `Client` + `BenchPeer` + glue.
struct PeerNode {
    peer: BenchPeer,
    client: Client,
    glue: PeerGlue,
    addr: SocketAddr,
    /// When this peer first saw its session running.
    running_since: Option<Instant>,
}

impl Endpoint for PeerNode {
    fn addr(&self) -> SocketAddr {
        self.addr
    }
    fn pump(&mut self, now: Instant) {
        self.glue.pump(now, self.peer.session(), &mut self.client);
        self.peer.pump(now);
        self.glue.pump(now, self.peer.session(), &mut self.client);
        if self.running_since.is_none() && self.peer.session().is_running() {
            self.running_since = Some(now);
        }
    }
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]) {
        self.client.handle_datagram(now, from, bytes);
    }
    fn handle_timeout(&mut self, now: Instant) {
        self.client.handle_timeout(now);
        self.peer.session().handle_timeout(now);
    }
    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<SocketAddr> {
        self.client.poll_transmit(now, buf)
    }
    fn poll_timeout(&mut self) -> Option<Instant> {
        let session = self.peer.session().poll_timeout();
        [self.client.poll_timeout(), session]
            .into_iter()
            .flatten()
            .min()
    }
    fn is_done(&self) -> bool {
        self.peer.is_done()
    }
}

/// Plays one busy match of `turns` turns on a virtual network with `loss`
/// and 30 ms ± 10 ms one-way delay; deterministic for a given seed.
/// `snapshots`: the relay asks for its agreed rejoin snapshots (every 100
/// turns by default) as in production; without them the figures are the
/// turn traffic alone.
#[must_use]
pub fn busy_match(turns: u32, loss: f64, seed: u64, snapshots: bool) -> Busy {
    busy(&BusySpec {
        players: PLAYERS,
        turns,
        loss,
        seed,
        snapshots,
        play: Play::Game { apm: APM },
        spectators: 0,
        spectators_from: Duration::ZERO,
    })
    .busy
}

/// A busy match for [`busy`]: who plays how, and who watches.
#[derive(Clone, Copy, Debug)]
pub struct BusySpec {
    /// Players.
    pub players: u8,
    /// Turns of the match.
    pub turns: u32,
    /// Loss on every link, each way.
    pub loss: f64,
    /// Seed of the network, the peers and their bots.
    pub seed: u64,
    /// The relay takes its agreed rejoin snapshots.
    pub snapshots: bool,
    /// How every player plays.
    pub play: Play,
    /// Spectators joining from `spectators_from`, one every
    /// [`SPECTATOR_EVERY`], each watching to its end.
    pub spectators: usize,
    /// When the first spectator joins (from the start of the run).
    pub spectators_from: Duration,
}

/// How often another spectator of [`BusySpec::spectators`] joins.
pub const SPECTATOR_EVERY: Duration = Duration::from_millis(20);

/// What [`busy`] measured besides the players' traffic.
#[derive(Clone, Debug, Default)]
pub struct BusyRun {
    /// The players' traffic and commands.
    pub busy: Busy,
    /// Every player ended on the same hash, with no desync.
    pub same_hashes: bool,
    /// Mean relay → spectator payload bytes per second watched (from the
    /// spectator's join to the match's end).
    pub spectator_down_bytes_per_s: f64,
    /// Mean spectator → relay payload bytes per second watched (acks).
    pub spectator_up_bytes_per_s: f64,
    /// Spectators that watched to the end on the players' final hash.
    pub spectators_completed: usize,
    /// The relay's own CPU by stage (real clock around its entry points).
    pub relay: super::hotpath::Stages,
    /// Snapshot bytes the relay sent (to the spectators: nobody rejoins).
    pub snapshot_bytes_out: u64,
    /// The relay's accounted memory at its highest (sampled every simulated
    /// second): connections, backlogs, snapshots (recordings are not held
    /// by a simulated relay).
    pub relay_memory_peak: usize,
}

/// Plays `spec`'s match on the virtual network (30 ms ± 10 ms one way,
/// `spec.loss`), with the relay's entry points timed and its memory
/// sampled every simulated second; deterministic but for the timings.
#[must_use]
pub fn busy(spec: &BusySpec) -> BusyRun {
    let BusySpec {
        players,
        turns,
        loss,
        seed,
        snapshots,
        play,
        spectators,
        spectators_from,
    } = *spec;
    let mut config = RelayConfig::default();
    if !snapshots {
        config.rejoin.snapshot_every = 0;
    }
    let start = Instant::from_millis(1);
    let relay_addr = SocketAddr::from(([10, 0, 0, 1], 7000));
    let link = LinkConfig {
        latency: Duration::from_millis(30),
        jitter: Duration::from_millis(10),
        loss,
        ..LinkConfig::default()
    };
    // Room for every player and spectator (the transport's default is 64
    // connections; `relay serve --max-connections` defaults higher).
    let transport = TransportConfig {
        max_connections: 1024,
        ..TransportConfig::default()
    };
    let mut relay = super::hotpath::Timed::new(relay::endpoint::RelayEndpoint::new(
        Server::new(config.server_transport(transport), [seed as u8; 32]),
        config,
        relay_addr,
    ));
    let mut peers: Vec<PeerNode> = (0..players)
        .filter_map(|i| {
            let peer = BenchPeer::new(
                start,
                BenchPeerConfig {
                    match_name: "busy".into(),
                    players,
                    turns,
                    seed: seed * 100 + u64::from(i),
                    play,
                },
            )
            .ok()?;
            Some(PeerNode {
                peer,
                client: Client::new(
                    start,
                    relay_addr,
                    TransportConfig::default(),
                    seed * 31 + u64::from(i),
                ),
                glue: PeerGlue::new(),
                addr: SocketAddr::from(([10, 0, 1, i], 9000)),
                running_since: None,
            })
        })
        .collect();
    // Autopilots: a peer's world steps as its events are polled (a
    // spectator's never gets a player, so its bot never acts).
    let mut watchers: Vec<(Instant, Autopilot<World, sim::bot::Bot>)> = Vec::new();
    let mut harness = Harness::new(Network::new(seed, link)).with_start(start);
    let limit = Instant::from_millis(u64::from(turns) * 100 + 60_000);
    let join_from = start + spectators_from;
    let mut memory_peak = 0;
    // The relay never finishes: the run waits for the players, then a few
    // seconds more for the spectators to see the end.
    let mut players_done: Option<Instant> = None;
    while harness.now() < limit {
        let now = harness.now();
        while watchers.len() < spectators
            && join_from
                + Duration::from_micros(SPECTATOR_EVERY.as_micros() * watchers.len() as u64)
                <= now
        {
            let k = watchers.len();
            let addr = SocketAddr::from(([10, 0, 2 + (k / 250) as u8, (k % 250) as u8], 9000));
            let Ok(w) = PeerBuilder::<World>::new("busy", players)
                .with_spectate()
                .with_turns(turns)
                .with_ticks_per_turn(sim::game::DEFAULT_TICKS_PER_TURN)
                .with_name(&format!("s{k}"))
                .with_seed(seed * 7 + k as u64)
                .with_local_addr(addr)
                .build(now, relay_addr)
            else {
                break;
            };
            watchers.push((now, Autopilot::new(w, |p| sim::bot::Bot::new(p, 0, 0))));
        }
        let mut nodes: Vec<&mut dyn Endpoint> = vec![&mut relay];
        nodes.extend(peers.iter_mut().map(|p| p as &mut dyn Endpoint));
        nodes.extend(watchers.iter_mut().map(|(_, w)| w as &mut dyn Endpoint));
        let stopped = harness.run(&mut nodes, (now + Duration::from_millis(100)).min(limit));
        memory_peak = memory_peak.max(relay.relay.memory_use().total());
        if players_done.is_none() && peers.iter().all(|p| p.peer.is_done()) {
            players_done = Some(harness.now());
        }
        let settled = players_done.is_some_and(|at| harness.now() >= at + Duration::from_secs(5));
        if stopped == lockstep::netsim::Stopped::Done || settled {
            break;
        }
    }
    let now = players_done.unwrap_or_else(|| harness.now());
    let started = peers.iter().filter_map(|p| p.running_since).min();
    let secs = now.saturating_since(started.unwrap_or(now)).as_secs_f64();
    let figures: Vec<_> = peers.iter().map(|p| p.peer.figures(now)).collect();
    let commands: usize = figures.iter().map(|f| f.latencies_ms.len()).sum();
    let outcomes: Vec<_> = peers.iter().map(|p| p.peer.outcome()).collect();
    let final_hash = outcomes.first().and_then(|o| o.0);
    let same_hashes = final_hash.is_some()
        && outcomes
            .iter()
            .all(|(h, desyncs)| *h == final_hash && *desyncs == 0);
    let mut spectators_completed = 0;
    let (mut down, mut up) = (0.0, 0.0);
    let end = harness.now();
    for (joined, w) in &watchers {
        let watched = end.saturating_since(*joined).as_secs_f64().max(1e-9);
        down += harness.traffic(relay_addr, Endpoint::addr(w)).sent_bytes as f64 / watched;
        up += harness.traffic(Endpoint::addr(w), relay_addr).sent_bytes as f64 / watched;
        let s = w.peer().summary(end);
        spectators_completed +=
            usize::from(s.completed && s.final_hash == final_hash.map(|h| h.to_hex()));
    }
    let n = watchers.len().max(1) as f64;
    let mut stages = relay.stages;
    stages.matches = 1;
    stages.completed = figures.iter().filter(|f| f.completed).count();
    BusyRun {
        busy: Busy {
            loss,
            peers: peers
                .iter()
                .map(|p| {
                    let (up, down) = (
                        harness.traffic(p.addr, relay_addr),
                        harness.traffic(relay_addr, p.addr),
                    );
                    Traffic {
                        up_bytes: up.sent_bytes,
                        down_bytes: down.sent_bytes,
                        up_packets: up.sent_datagrams,
                        down_packets: down.sent_datagrams,
                    }
                })
                .collect(),
            secs,
            commands_per_min: commands as f64 / f64::from(players) / secs.max(1e-9) * 60.0,
            completed: figures.iter().filter(|f| f.completed).count(),
        },
        same_hashes,
        spectator_down_bytes_per_s: down / n,
        spectator_up_bytes_per_s: up / n,
        spectators_completed,
        snapshot_bytes_out: relay.relay.router.counters().snapshot_bytes_out,
        relay: stages,
        relay_memory_peak: memory_peak,
    }
}

/// Our per-packet and per-message overhead, measured on packets encoded by
/// the wire encoder (`wire::Packet::encode`, what the transport sends):
/// ((packet best, packet worst), (message frame best, message frame worst)).
/// Best: every ack bit set and the ack within 255 of the sequence number;
/// worst: a 16-bit ack and no full ack-bit byte; frames: an unfragmented
/// 50-byte message, and a fragment of a 200-byte one.
#[must_use]
pub fn our_overhead() -> ((usize, usize), (usize, usize)) {
    let clean = Header {
        kind: AuthKind::Data,
        seq: 1000,
        ack: 999,
        ack_bits: u32::MAX,
        ack_delay: 0,
    };
    let worst = Header {
        kind: AuthKind::Data,
        seq: 1000,
        ack: 0,
        ack_bits: 0x5555_5555,
        ack_delay: 0,
    };
    let encoded = |header: Header, frames: Vec<Frame<'_>>| {
        let mut out = Vec::new();
        wire::Packet::Authed {
            header,
            frames,
            tag: [0; wire::TAG_LEN],
        }
        .encode(&mut out);
        out.len()
    };
    let data = [0u8; 200];
    let best = encoded(clean, Vec::new());
    let small = encoded(
        clean,
        vec![Frame::Reliable {
            id: 7,
            fragment: None,
            data: &data[..50],
        }],
    ) - best
        - 50;
    let large = encoded(
        clean,
        vec![Frame::Reliable {
            id: 7,
            fragment: Some(wire::Fragment { index: 1, count: 3 }),
            data: &data,
        }],
    ) - best
        - data.len();
    ((best, encoded(worst, Vec::new())), (small, large))
}

/// The section: busy matches on a clean and a lossy link, and the overhead table.
#[must_use]
pub fn markdown(quick: bool) -> String {
    let turns = if quick { 300 } else { 1200 };
    let mut md = String::new();
    let runs: Vec<(bool, Busy)> = [(0.0, true), (0.05, true), (0.05, false)]
        .into_iter()
        .map(|(loss, snapshots)| {
            replays::err_println!(
                "[bandwidth] {PLAYERS}-player match, {turns} turns, {:.0}% loss, snapshots {} (virtual time)",
                loss * 100.0,
                if snapshots { "on" } else { "off" }
            );
            (snapshots, busy_match(turns, loss, 11, snapshots))
        })
        .collect();
    let _ = writeln!(
        md,
        "A busy {PLAYERS}-player match of the reference game (bots asked for {APM} APM; the rate they \
         reach is measured) over our transport and the real relay, run in process on the seeded \
         `netsim::Network` with a virtual clock (deterministic: one run), 30 ms ± 10 ms one way, \
         {turns} turns. Bytes are counted per datagram per peer; \"+ headers\" adds 28 bytes of IPv4 + UDP \
         per datagram. The budget is the 28.8 kbit/s modem ({MODEM_BYTES_PER_S:.0} B/s each way) that \
         \"1500 Archers on a 28.8\" fit eight players into. Rows with rejoin snapshots include the \
         agreed snapshot the relay asks one player for every 100 turns (10 s); the last row is the \
         turn traffic alone.\n"
    );
    md.push_str("| link | commands/min per player | up B/s | down B/s | up + headers | down + headers | datagrams/s up / down | busier direction vs 28.8k budget | completed |\n");
    md.push_str("|---|---|---|---|---|---|---|---|---|\n");
    for (snapshots, b) in &runs {
        let (pu, pd) = b.payload();
        let (hu, hd) = b.with_headers();
        let (nu, nd) = b.packets();
        let _ = writeln!(
            md,
            "| {:.0} % loss, rejoin snapshots {} | {:.0} | {pu:.0} | {pd:.0} | {hu:.0} | {hd:.0} | {nu:.1} / {nd:.1} | {:.0} % | {}/{} |",
            b.loss * 100.0,
            if *snapshots { "on" } else { "off" },
            b.commands_per_min,
            hu.max(hd) / MODEM_BYTES_PER_S * 100.0,
            b.completed,
            b.peers.len()
        );
    }
    let ((best, worst), (msg_best, msg_worst)) = our_overhead();
    let _ = writeln!(
        md,
        "\nHeader overhead per packet (excluding IP/UDP), ours computed with `lockstep::low_level::wire`'s encoder:\n\n\
         | protocol | bytes per packet | notes |\n|---|---|---|\n\
         | ours | {best} clean link – {worst} worst case | prefix, seq, ack (1 byte as a delta when close), ack bits (bytes that are all ones are left out), ack delay, 16-byte keyed-BLAKE3 MAC; plus {msg_best}–{msg_worst} bytes per message frame |\n\
         | reliable.io | 4–9 | no authentication |\n\
         | laminar | 16 | no authentication |\n\
         | KCP | 24 | per segment, no authentication |\n\n\
         Most of ours is the 16-byte MAC that lets the relay reject forged or spoofed packets; the \
         others carry none."
    );
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The overhead table against a datagram the transport really sent: a
    /// client connects to a server (sans-IO, virtual clock, no loss), sends
    /// one 50-byte reliable message, and the datagram carrying it is the
    /// message plus a packet header, a MAC and one frame header.
    #[test]
    fn overhead_matches_a_datagram_the_transport_sent() {
        use lockstep::low_level::transport::Channel;
        let ((best, worst), (msg_best, msg_worst)) = our_overhead();
        assert!(best < worst && msg_best < msg_worst);
        let server_addr: SocketAddr = ([127, 0, 0, 1], 7777).into();
        let client_addr: SocketAddr = ([127, 0, 0, 1], 40000).into();
        let mut now = Instant::from_millis(0);
        let mut server = Server::new(TransportConfig::default(), [7; 32]);
        let mut client = Client::new(now, server_addr, TransportConfig::default(), 1);
        let mut buf = Vec::new();
        let mut exchange = |now: Instant, client: &mut Client, server: &mut Server| {
            while client.poll_transmit(now, &mut buf).is_some() {
                server.handle_datagram(now, client_addr, &buf);
            }
            while server.poll_transmit(now, &mut buf).is_some() {
                client.handle_datagram(now, server_addr, &buf);
            }
        };
        for _ in 0..100 {
            exchange(now, &mut client, &mut server);
            if client.is_connected() {
                break;
            }
            now += Duration::from_millis(10);
        }
        assert!(client.is_connected());
        // Settle the handshake's acks, then send one message.
        for _ in 0..5 {
            now += Duration::from_millis(40);
            exchange(now, &mut client, &mut server);
        }
        let msg = [0xA5u8; 50];
        client.send(Channel::Reliable, &msg).unwrap();
        let mut sent = Vec::new();
        assert!(client.poll_transmit(now, &mut sent).is_some());
        // The datagram holds exactly that message and nothing else ...
        match wire::decode(&sent).unwrap() {
            wire::Packet::Authed { frames, .. } => match frames.as_slice() {
                [
                    Frame::Reliable {
                        data,
                        fragment: None,
                        ..
                    },
                ] => assert_eq!(*data, &msg[..]),
                other => panic!("expected one reliable frame, got {other:?}"),
            },
            other => panic!("expected a data packet, got {other:?}"),
        }
        // ... so everything beyond it is overhead, within the table's range.
        let overhead = sent.len() - msg.len();
        assert!(
            (best + msg_best..=worst + msg_best).contains(&overhead),
            "real overhead {overhead} outside {}..={}",
            best + msg_best,
            worst + msg_best
        );
    }

    /// The table's figures are what the encoder writes for the documented
    /// layout: prefix, 16-bit seq, 1-byte ack delta, ack delay, MAC (best);
    /// a 16-bit ack and four ack-bit bytes on top (worst); frame tag, 16-bit
    /// id, 1-byte length (small message) and fragment index and count on
    /// top with a 2-byte length (fragment).
    #[test]
    fn overhead_follows_the_documented_layout() {
        let ((best, worst), (msg_best, msg_worst)) = our_overhead();
        assert_eq!(best, 1 + 2 + 1 + 1 + 16);
        assert_eq!(worst, 1 + 2 + 2 + 4 + 1 + 16);
        assert_eq!((msg_best, msg_worst), (1 + 2 + 1, 1 + 2 + 2 + 2));
    }

    /// Spectators joining a busy match from its second second watch it to
    /// the end on the players' final hash, and what the relay sends them
    /// is counted; the players' figures are as without them.
    #[test]
    fn spectators_of_a_busy_match_watch_to_the_end_on_the_players_hash() {
        let spec = BusySpec {
            players: 4,
            turns: 60,
            loss: 0.05,
            seed: 5,
            snapshots: true,
            play: Play::GameReacting {
                apm: 300,
                clicks_per_min: 300,
            },
            spectators: 6,
            spectators_from: Duration::from_secs(2),
        };
        let r = busy(&spec);
        assert!(r.same_hashes);
        assert_eq!(r.busy.completed, 4);
        assert_eq!(r.spectators_completed, 6);
        assert!(r.spectator_down_bytes_per_s > 100.0, "{r:?}");
        assert!(r.relay.datagrams() > 0 && r.relay_memory_peak > 0);
        assert!(
            r.busy.commands_per_min > 300.0,
            "{}",
            r.busy.commands_per_min
        );
    }

    #[test]
    fn a_short_busy_match_is_counted_and_deterministic() {
        let a = busy_match(40, 0.05, 3, true);
        assert_eq!(a.completed, usize::from(PLAYERS));
        assert!(
            a.peers
                .iter()
                .all(|t| t.up_packets > 0 && t.down_bytes > t.down_packets * 20)
        );
        assert_eq!(a, busy_match(40, 0.05, 3, true));
    }

    /// Issue #13's bandwidth goal: the busy 8-player match at 5 % loss
    /// within 40 % of the 28.8 kbit/s budget per peer and direction, IP and
    /// UDP headers included. It failed at 48-50 % with acks held 5 ms (a
    /// standalone ack for nearly every bundle and hash) and a ping each way
    /// every 250 ms under the clock policy. The turn traffic alone: the
    /// rejoin snapshots (one upload per 10 s, by one player) come on top and
    /// are reported beside it by the bench.
    #[test]
    fn the_busy_match_at_5_percent_loss_fits_40_percent_of_the_modem() {
        let b = busy_match(300, 0.05, 11, false);
        assert_eq!(b.completed, usize::from(PLAYERS));
        let (up, down) = b.with_headers();
        let share = up.max(down) / MODEM_BYTES_PER_S;
        eprintln!("up {up:.0} B/s, down {down:.0} B/s: {:.1} %", share * 100.0);
        assert!(share <= 0.40, "{:.1} % of the budget", share * 100.0);
    }
}
