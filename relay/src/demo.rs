//! The one-command match: a relay and N headless peers on loopback UDP (each
//! peer a thread with its own socket, optionally behind an in-process
//! impaired link), recorded to a replay that is then verified by
//! re-simulation, with a per-peer summary table or one JSON object. Either
//! shipped game plays ([`DemoGame`]); each peer is a public
//! [`lockstep::peer::Peer`] with its game's bot, nothing private.
//!
//! This module, [`crate::games`] and the relay binary's `main.rs` are the
//! only places of the relay crate that know a game: the server modules host
//! any game. Nothing in the library imports this module: it sits on top.

mod heal;
mod spectate;
use spectate::watch;

pub use heal::DemoHeal;

/// The rules hash of the shipped games, kept at its first path; it lives in
/// [`crate::games`], which the live view and `relay serve` use too.
pub use crate::games::known_rules_hash;

use crate::config::RelayConfig;
use crate::event::RouterEvent;
use crate::recorder::{Recorded, Recorder};
use crate::serve::{RelayNote, serve};
use lockstep::low_level::transport::TransportConfig;
use lockstep::netsim::LinkConfig;
use lockstep::peer::SpeculationConfig;
use lockstep::peer::udp::{PlayOptions, SPECULATION_FRAME, UdpPeer, play};
use lockstep::peer::{Agent, PeerBuilder, PeerSummary};
use lockstep::{Duration, Instant};
use serde::Serialize;
use sim::{PlayerId, Simulation, Turn};
use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;

/// The game a demo plays.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DemoGame {
    /// The reference RTS ([`sim::game::World`]).
    #[default]
    Rts,
    /// The arena shooter ([`sim::arena::Arena`]).
    Arena,
}

impl DemoGame {
    /// The bot's default actions per minute (the arena bot steers every turn).
    #[must_use]
    pub const fn default_apm(self) -> u32 {
        match self {
            Self::Rts => 300,
            Self::Arena => sim::arena::BOT_APM,
        }
    }
}

/// What the demo runs.
#[derive(Clone, Debug)]
pub struct DemoConfig {
    /// The game.
    pub game: DemoGame,
    /// Number of peers.
    pub peers: u8,
    /// Turns to play.
    pub turns: u32,
    /// Relay settings (turn length, policy, ...).
    pub relay: RelayConfig,
    /// Impairment on every peer's link, each way (`None`: direct).
    pub impair: Option<LinkConfig>,
    /// Where the replay goes.
    pub record_dir: PathBuf,
    /// Base seed for bots, clients and impairment.
    pub seed: u64,
    /// Bot actions per minute.
    pub apm: u32,
    /// Fault switch: (turn, peer index) whose world gets perturbed.
    pub desync: Option<(u32, u8)>,
    /// Per-peer impairment overriding `impair` (peer index, link each way).
    pub peer_impair: Vec<(u8, LinkConfig)>,
    /// Fault switch: (peer index, after how long) the peer crashes silently.
    pub vanish: Option<(u8, Duration)>,
    /// Restart the crashed peer this long after it crashed: it rejoins its
    /// held slot (with its secret) and plays on.
    pub rejoin_after: Option<Duration>,
    /// Spectators that join a third of the way into the match (up to 256,
    /// a match's most with `relay serve`'s default `--max-spectators`).
    pub spectators: u16,
    /// Every peer keeps a speculative view (`PeerBuilder::with_speculation`)
    /// and renders 60 frames a second; each peer's summary then reports
    /// `own_feedback_ms` and `speculation`.
    pub speculate: bool,
}

/// One spectator's row of the result.
#[derive(Clone, Debug, Serialize)]
pub struct DemoSpectator {
    /// Spectator index (0-based).
    pub spectator: u16,
    /// The last turn it simulated.
    pub final_turn: Option<u32>,
    /// Its hash after that turn (must be the players').
    pub final_hash: Option<String>,
    /// It watched to the end of the match.
    pub completed: bool,
    /// Hash mismatches the relay told it about.
    pub desyncs: usize,
    /// Why it stopped early, if it did (including a refusal).
    pub error: Option<String>,
}

/// One peer's row of the result.
#[derive(Clone, Debug, Serialize)]
pub struct DemoPeer {
    /// Peer index (0-based, in start order).
    pub peer: u8,
    /// Crashed on purpose by the fault switch and not restarted (left out
    /// of the hash agreement).
    pub killed: bool,
    /// Its summary (includes its slot, `player`).
    #[serde(flatten)]
    pub summary: PeerSummary,
}

/// A desync as the relay reported it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DemoDesync {
    /// The turn.
    pub turn: u32,
    /// Odd players' slots.
    pub odd_players: Vec<u8>,
    /// The peers (indices) those slots belong to.
    pub odd_peers: Vec<u8>,
    /// Differing sections.
    pub sections: Vec<String>,
    /// The relay's forensics: every entity that differs, with `id`,
    /// `section` and `fields` of `{path, majority, odd}`.
    pub entities: Vec<replays::forensics::EntityReport>,
    /// Whether the forensics ran to the end (see `notes`).
    pub complete: bool,
    /// No strict majority: the relay cannot tell who is odd.
    pub no_majority: bool,
    /// What stopped or limited the narrowing.
    pub notes: Vec<String>,
    /// The desync report written next to the replay.
    pub report: Option<String>,
    /// What the fault switch changed, found independently by re-simulating
    /// the replay to the desynced turn and perturbing that world the same
    /// way: the report should name exactly this.
    pub fault: Option<DemoFault>,
}

/// The field the demo's fault switch perturbed, with both values.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DemoFault {
    /// The section.
    pub section: String,
    /// The entity.
    pub id: u64,
    /// The field.
    pub path: String,
    /// Its value on the majority (unperturbed) side.
    pub majority: Option<String>,
    /// Its value on the perturbed peer.
    pub odd: Option<String>,
}

/// A game's `perturb_target`: the (section, entity id, field) its fault
/// switch changes with this salt.
type PerturbTarget<S> = fn(&S, u32) -> Option<(String, u64, &'static str)>;

/// What the fault switch (`World::perturb` / `Arena::perturb` with the turn
/// as salt) changes at `turn` of the match recorded in `path`: re-simulates
/// the replay to that turn and perturbs a copy of the world.
fn fault_truth<S: Simulation + Clone>(
    path: &str,
    turn: u32,
    perturb: fn(&mut S, Turn),
    target: PerturbTarget<S>,
) -> Option<DemoFault> {
    let reader = replays::Reader::open(path).ok()?;
    let world = replays::seek::<S, _>(reader, Turn(turn)).ok()?.world;
    let (section, id, field) = target(&world, turn)?;
    let mut odd = world.clone();
    perturb(&mut odd, Turn(turn));
    let value = |w: &S| {
        w.entity_fields(&section, id)?
            .into_iter()
            .find(|f| f.path == field)
            .map(|f| f.value)
    };
    Some(DemoFault {
        majority: value(&world),
        odd: value(&odd),
        section,
        id,
        path: field.to_owned(),
    })
}

/// A drop as the relay reported it.
#[derive(Clone, Debug, Serialize)]
pub struct DemoDrop {
    /// The dropped player's slot.
    pub player: u8,
    /// First turn without them.
    pub turn: u32,
    /// Why (timeout, disconnected, left).
    pub reason: String,
}

/// The recorded replay and its verification.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DemoReplay {
    /// File path.
    pub path: Option<String>,
    /// Re-simulation matched every recorded hash.
    pub verified: bool,
    /// Turns re-simulated.
    pub turns: u32,
    /// Why verification failed, if it did.
    pub error: Option<String>,
}

/// The whole result (`relay demo --json`).
#[derive(Clone, Debug, Serialize)]
pub struct DemoReport {
    /// Per-peer rows.
    pub peers: Vec<DemoPeer>,
    /// Spectators (`--spectators`), each with its final hash.
    pub spectators: Vec<DemoSpectator>,
    /// Desyncs the relay detected.
    pub desyncs: Vec<DemoDesync>,
    /// Heals (`--on-desync heal`): turn, players, time to agreement.
    pub heals: Vec<DemoHeal>,
    /// Players the relay dropped: (player, first turn without them, reason).
    pub drops: Vec<DemoDrop>,
    /// The replay.
    pub replay: DemoReplay,
    /// Whether every peer finished every turn with the same final hash.
    pub hashes_agree: bool,
    /// Wall-clock seconds the match took.
    pub seconds: f64,
}

impl DemoReport {
    /// The text report's word on the final hashes: whether everyone who
    /// finished agrees, and who did not finish (a dropped peer or a refused
    /// spectator ends at another turn, which is not a desync).
    fn hash_verdict(&self) -> String {
        if self.hashes_agree {
            return "agree".to_owned();
        }
        let done: Vec<&Option<String>> = self
            .peers
            .iter()
            .filter(|p| !p.killed && p.summary.completed)
            .map(|p| &p.summary.final_hash)
            .chain(
                self.spectators
                    .iter()
                    .filter(|s| s.completed)
                    .map(|s| &s.final_hash),
            )
            .collect();
        let unfinished =
            self.peers.iter().filter(|p| !p.killed).count() + self.spectators.len() - done.len();
        if unfinished > 0 && done.windows(2).all(|w| w[0] == w[1]) && !done.is_empty() {
            format!(
                "agree among the {} that finished ({unfinished} did not finish)",
                done.len()
            )
        } else {
            "DIFFER".to_owned()
        }
    }

    /// Process exit code: 0 all good (with `--on-desync heal`: every
    /// desync healed and the hashes agree at the end), 3 desync detected,
    /// 1 anything else.
    #[must_use]
    pub fn exit_code(&self) -> i32 {
        if !self.desyncs.is_empty() && !self.all_healed() {
            3
        } else if self.hashes_agree && self.replay.verified {
            0
        } else {
            1
        }
    }

    /// The human-readable table.
    #[must_use]
    pub fn table(&self) -> String {
        let mut s = String::new();
        s.push_str(
            "peer player final_turn final_hash        stall_ms  lat_p50  lat_p99   rtt_ms  rtt_p99 floor_ms  loss%  bytes/s  delay\n",
        );
        for p in &self.peers {
            let m = &p.summary;
            s.push_str(&format!(
                "{:>4} {:>6} {:>10} {:<16} {:>9.0} {:>8.0} {:>8.0} {:>8.1} {:>8.1} {:>8.1} {:>6.1} {:>8.0} {:>6}\n",
                p.peer,
                m.player.map_or("-".to_owned(), |x| format!("P{x}")),
                m.final_turn.map_or("-".to_owned(), |t| t.to_string()),
                m.final_hash
                    .as_deref()
                    .map_or("-", |h| &h[..16.min(h.len())]),
                m.stall_ms,
                m.turn_latency_ms.p50,
                m.turn_latency_ms.p99,
                m.rtt_ms,
                m.rtt_p99_ms,
                m.floor_ms,
                m.loss * 100.0,
                m.bytes_per_s,
                m.input_delay,
            ));
            if let Some(e) = &m.error {
                s.push_str(&format!("     peer {} error: {e}\n", p.peer));
            }
        }
        for p in &self.peers {
            if let (Some(f), Some(sp)) = (p.summary.own_feedback_ms, p.summary.speculation) {
                s.push_str(&format!(
                    "peer {} speculation: own command shown p50 {:.1} ms p99 {:.1} ms, frames {}, fallbacks {}, corrections {} ({:.0}/min)\n",
                    p.peer, f.p50, f.p99, sp.frames, sp.fallbacks, sp.corrections, sp.corrections_per_min
                ));
            }
        }
        for d in &self.drops {
            s.push_str(&format!(
                "player P{} dropped from turn {} ({})\n",
                d.player, d.turn, d.reason
            ));
        }
        for w in &self.spectators {
            s.push_str(&format!(
                "spectator {} final turn {} hash {}{}\n",
                w.spectator,
                w.final_turn.map_or("-".to_owned(), |t| t.to_string()),
                w.final_hash
                    .as_deref()
                    .map_or("-", |h| &h[..16.min(h.len())]),
                w.error
                    .as_deref()
                    .map_or(String::new(), |e| format!(" ({e})")),
            ));
        }
        for p in self.peers.iter().filter(|p| p.summary.rejoins > 0) {
            s.push_str(&format!(
                "peer {} rejoined {} time(s), caught up {:.0} ms after reconnecting\n",
                p.peer,
                p.summary.rejoins,
                p.summary.rejoin_ms.unwrap_or(0.0)
            ));
        }
        s.push_str(&self.heal_lines());
        for d in &self.desyncs {
            s.push_str(&format!(
                "DESYNC at turn {}: odd players {:?} (peers {:?}), differing sections {:?}\n",
                d.turn, d.odd_players, d.odd_peers, d.sections
            ));
            for e in &d.entities {
                for f in &e.fields {
                    s.push_str(&format!(
                        "  entity {} ({}): {} majority {} odd {}\n",
                        e.id,
                        e.section,
                        f.path,
                        f.majority.as_deref().unwrap_or("-"),
                        f.odd.as_deref().unwrap_or("-")
                    ));
                }
            }
            for n in &d.notes {
                s.push_str(&format!("  note: {n}\n"));
            }
            if let Some(r) = &d.report {
                s.push_str(&format!("  report: {r}\n"));
            }
        }
        s.push_str(&format!(
            "final hashes {}; replay {} {}{}\n",
            self.hash_verdict(),
            self.replay.path.as_deref().unwrap_or("(none)"),
            if self.replay.verified {
                "verified"
            } else {
                "NOT verified"
            },
            self.replay
                .error
                .as_deref()
                .map_or(String::new(), |e| format!(" ({e})")),
        ));
        s
    }
}

/// The relay's settings for the demo: `config.relay` with room for every
/// peer and spectator, which all connect from this host (loopback). The
/// per-host limit (16 by default, a bound on hostile clients of a public
/// relay) would refuse the 17th, and the spectator cap the 33rd
/// spectator; the per-relay bounds (`max_connections`, the memory budget)
/// stay as configured. Twice as many connections as peers and spectators:
/// a peer or spectator that lost its path (on a loaded machine, a starved
/// one) reconnects on a new connection before the relay timed out its old
/// one.
#[must_use]
pub(crate) fn fit_on_one_host(config: &DemoConfig) -> RelayConfig {
    let mut relay = config.relay.clone();
    let needed = 2 * (usize::from(config.peers) + usize::from(config.spectators));
    let limits = &mut relay.limits;
    limits.max_connections_per_host = limits.max_connections_per_host.max(needed);
    relay.rejoin.max_spectators = relay
        .rejoin
        .max_spectators
        .max(usize::from(config.spectators));
    relay
}

/// Runs the demo; `progress` gets one line per second for stderr.
pub fn run(config: &DemoConfig, mut progress: impl FnMut(&str)) -> std::io::Result<DemoReport> {
    let started = std::time::Instant::now();
    let relay_socket = UdpSocket::bind("127.0.0.1:0")?;
    let relay_addr: SocketAddr = relay_socket.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    // The error names the directory: the bare OS message does not say which path.
    let recorder = Recorder::new(&config.record_dir, known_rules_hash).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("cannot use {}: {e}", config.record_dir.display()),
        )
    })?;
    let (note_tx, note_rx) = mpsc::channel::<Note>();
    let relay = {
        let stop = Arc::clone(&stop);
        let cfg = fit_on_one_host(config);
        // As `relay serve --max-connections`: the transport's own default
        // (64) would refuse a big battle's spectators.
        let transport = cfg.server_transport(TransportConfig {
            max_connections: cfg.limits.max_connections,
            ..TransportConfig::default()
        });
        std::thread::spawn(move || {
            serve(&relay_socket, cfg, transport, Some(recorder), &stop, |n| {
                let note = match n {
                    RelayNote::Event(e, _) => Note::Event(e.clone()),
                    RelayNote::Recorded(r) => Note::Recorded(r.clone()),
                    RelayNote::RecordError(e) => Note::RecordError(e),
                    RelayNote::Draining { .. }
                    | RelayNote::HandingOver { .. }
                    | RelayNote::CutOff { .. }
                    | RelayNote::Refused { .. }
                    | RelayNote::SendDropped { .. }
                    | RelayNote::RefusalsSuppressed { .. } => return,
                };
                let _ = note_tx.send(note);
            })
        })
    };
    let turn_length = config.relay.turn_length;
    let timeout = turn_length.saturating_mul(u64::from(config.turns) * 4) + Duration::from_secs(30);
    let (prog_tx, prog_rx) = mpsc::channel::<String>();
    let mut handles = Vec::new();
    for i in 0..config.peers {
        let socket = UdpSocket::bind("127.0.0.1:0")?;
        let seat = Seat {
            index: i,
            relay: relay_addr,
            timeout,
            config: config.clone(),
        };
        let stop = Arc::clone(&stop);
        let prog_tx = prog_tx.clone();
        handles.push(std::thread::spawn(move || {
            let progress = |line: String| {
                if i == 0 {
                    let _ = prog_tx.send(line);
                }
            };
            match seat.config.game {
                DemoGame::Rts => seat.play::<sim::game::World, _>(
                    socket,
                    &stop,
                    |w, t| w.perturb(t.0),
                    sim::bot::Bot::new,
                    progress,
                ),
                DemoGame::Arena => seat.play::<sim::arena::Arena, _>(
                    socket,
                    &stop,
                    |w, t| w.perturb(t.0),
                    sim::arena::Bot::new,
                    progress,
                ),
            }
        }));
        // Staggered joins keep slot order close to start order (not relied on).
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    drop(prog_tx);
    let watchers: Vec<_> = (0..config.spectators)
        .map(|k| {
            let (config, stop) = (config.clone(), Arc::clone(&stop));
            std::thread::spawn(move || watch(&config, relay_addr, k, timeout, &stop))
        })
        .collect();
    let mut peers = Vec::new();
    let mut notes = Vec::new();
    for (i, h) in handles.into_iter().enumerate() {
        loop {
            // Forward progress lines and collect relay notes while waiting.
            while let Ok(line) = prog_rx.try_recv() {
                progress(&line);
            }
            notes.extend(note_rx.try_iter());
            if h.is_finished() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let summary = match h.join() {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => PeerSummary {
                error: Some(e.to_string()),
                ..PeerSummary::default()
            },
            Err(_) => PeerSummary {
                error: Some("peer thread panicked".into()),
                ..PeerSummary::default()
            },
        };
        peers.push(DemoPeer {
            peer: u8::try_from(i).unwrap_or(u8::MAX),
            killed: config.vanish.is_some_and(|(p, _)| usize::from(p) == i)
                && config.rejoin_after.is_none(),
            summary,
        });
    }
    let spectators = watchers
        .into_iter()
        .zip(0u16..)
        .map(|(h, k)| {
            let s = match h.join() {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => PeerSummary {
                    error: Some(e.to_string()),
                    ..PeerSummary::default()
                },
                Err(_) => PeerSummary {
                    error: Some("spectator thread panicked".into()),
                    ..PeerSummary::default()
                },
            };
            DemoSpectator {
                spectator: k,
                final_turn: s.final_turn,
                final_hash: s.final_hash,
                completed: s.completed,
                desyncs: s.desyncs.len(),
                error: s
                    .error
                    .or_else(|| s.refused.map(|r| format!("refused by the relay: {r}"))),
            }
        })
        .collect();
    // The relay closes the replay when the match ends; give it a moment.
    notes.extend(note_rx.try_iter());
    let wait_until = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !notes.iter().any(|n| matches!(n, Note::Recorded(_)))
        && std::time::Instant::now() < wait_until
    {
        if let Ok(n) = note_rx.recv_timeout(std::time::Duration::from_millis(100)) {
            notes.push(n);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = relay.join();
    notes.extend(note_rx.try_iter());
    Ok(report(
        config.game,
        config.desync.map(|(turn, _)| turn),
        peers,
        spectators,
        &notes,
        started.elapsed().as_secs_f64(),
    ))
}

/// One demo peer: its index and what it needs to play.
struct Seat {
    index: u8,
    relay: SocketAddr,
    timeout: Duration,
    config: DemoConfig,
}

impl Seat {
    /// Plays the match as a public `lockstep::peer` with the game's bot.
    fn play<S: Simulation + 'static, A: Agent<S>>(
        &self,
        socket: UdpSocket,
        stop: &AtomicBool,
        fault: fn(&mut S, Turn),
        bot: fn(PlayerId, u64, u32) -> A,
        progress: impl Fn(String),
    ) -> std::io::Result<PeerSummary> {
        let (c, i) = (&self.config, self.index);
        let transport_seed = c.seed.wrapping_mul(1000).wrapping_add(u64::from(i));
        let mut builder = PeerBuilder::<S>::new("demo", c.peers)
            .with_name(&format!("peer{i}"))
            .with_turns(c.turns)
            .with_seed(transport_seed)
            .with_ticks_per_turn(c.relay.ticks_per_turn);
        if let Some((turn, _)) = c.desync.filter(|&(_, p)| p == i) {
            builder = builder.with_fault(Turn(turn), fault);
        }
        if c.speculate {
            builder = builder.with_speculation(SpeculationConfig::default());
        }
        let mut udp = UdpPeer::new(socket, self.relay, builder)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
        let impair = c
            .peer_impair
            .iter()
            .find(|(p, _)| *p == i)
            .map(|(_, l)| *l)
            .or(c.impair);
        if let Some(link) = impair {
            udp = udp.with_impairment(link, transport_seed);
        }
        let opts = PlayOptions {
            timeout: self.timeout,
            vanish_after: c.vanish.filter(|(p, _)| *p == i).map(|(_, d)| d),
            // Orders at random instants within a turn, like a player's
            // clicks: a bot answering each turn at once would wait a whole
            // turn for the next, and report that as latency.
            reaction: Some((c.relay.turn_length, bot_seed_of(c.seed, i))),
            frames: c.speculate.then_some(SPECULATION_FRAME),
            ..PlayOptions::default()
        };
        let (bot_seed, apm) = (c.seed.wrapping_add(u64::from(i)), c.apm);
        let summary = play(
            &mut udp,
            |player| bot(player, bot_seed, apm),
            &opts,
            stop,
            |peer, now: Instant| progress(lockstep::peer::progress_line(&peer.stats(now))),
        )?;
        let (Some(after), Some(_)) = (c.rejoin_after, opts.vanish_after) else {
            return Ok(summary);
        };
        let Some((player, secret)) = udp.peer().rejoin_secret() else {
            return Ok(summary);
        };
        // The restart: a new socket and a new peer, as a new process would
        // have; it knows only its match, slot and secret.
        drop(udp);
        std::thread::sleep(std::time::Duration::from_micros(after.as_micros()));
        let builder = PeerBuilder::<S>::new("demo", c.peers)
            .with_name(&format!("peer{i}"))
            .with_turns(c.turns)
            .with_seed(transport_seed ^ 0x7e57_a127)
            .with_ticks_per_turn(c.relay.ticks_per_turn)
            .with_rejoin(player, secret);
        let builder = if c.speculate {
            builder.with_speculation(SpeculationConfig::default())
        } else {
            builder
        };
        let socket = UdpSocket::bind("127.0.0.1:0")?;
        let mut udp = UdpPeer::new(socket, self.relay, builder)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
        if let Some(link) = impair {
            udp = udp.with_impairment(link, transport_seed ^ 0x7e57_a127);
        }
        let opts = PlayOptions {
            vanish_after: None,
            ..opts
        };
        play(
            &mut udp,
            |player| bot(player, bot_seed, apm),
            &opts,
            stop,
            |peer, now: Instant| progress(lockstep::peer::progress_line(&peer.stats(now))),
        )
    }
}

/// The seed of peer `i`'s reaction times.
const fn bot_seed_of(seed: u64, i: u8) -> u64 {
    seed.wrapping_mul(7919).wrapping_add(i as u64) | 1
}

/// What the relay thread passes back.
#[derive(Debug)]
enum Note {
    Event(RouterEvent),
    Recorded(Recorded),
    RecordError(String),
}

fn report(
    game: DemoGame,
    fault_turn: Option<u32>,
    peers: Vec<DemoPeer>,
    spectators: Vec<DemoSpectator>,
    notes: &[Note],
    seconds: f64,
) -> DemoReport {
    let peer_of = |player: u8| {
        peers
            .iter()
            .find(|p| p.summary.player == Some(player))
            .map(|p| p.peer)
    };
    let mut desyncs: Vec<DemoDesync> = Vec::new();
    let mut replay = DemoReplay::default();
    let mut drops = Vec::new();
    for n in notes {
        match n {
            Note::Event(RouterEvent::Dropped {
                player,
                turn,
                reason,
                ..
            }) => drops.push(DemoDrop {
                player: player.0,
                turn: turn.0,
                reason: reason.to_string(),
            }),
            Note::Event(RouterEvent::Desync {
                turn, odd_players, ..
            }) => desyncs.push(DemoDesync {
                turn: turn.0,
                odd_players: odd_players.iter().map(|p| p.0).collect(),
                odd_peers: odd_players.iter().filter_map(|p| peer_of(p.0)).collect(),
                ..DemoDesync::default()
            }),
            Note::Event(RouterEvent::DesyncReport { report, .. }) => {
                if let Some(d) = desyncs.iter_mut().find(|d| d.turn == report.turn) {
                    d.entities.clone_from(&report.entities);
                    d.complete = report.complete;
                    d.no_majority = report.no_majority;
                    d.notes.clone_from(&report.notes);
                }
            }
            Note::Event(RouterEvent::DesyncSections { turn, sections, .. }) => {
                if let Some(d) = desyncs.iter_mut().find(|d| d.turn == turn.0) {
                    d.sections.clone_from(sections);
                }
            }
            Note::Recorded(r) => {
                replay.path = Some(r.path.display().to_string());
                for d in &mut desyncs {
                    d.report = r.report.as_ref().map(|p| p.display().to_string());
                }
            }
            Note::RecordError(e) => replay.error = Some(e.clone()),
            Note::Event(_) => {}
        }
    }
    if let Some(path) = &replay.path {
        let verified = replays::Reader::open(path).and_then(|r| match game {
            DemoGame::Rts => replays::verify::<sim::game::World, _>(r, |_| {}),
            DemoGame::Arena => replays::verify::<sim::arena::Arena, _>(r, |_| {}),
        });
        match verified {
            Ok(v) => {
                replay.turns = v.turns;
                replay.verified = v.first_divergence.is_none();
                if let Some(d) = v.first_divergence {
                    replay.error = Some(format!("diverges at turn {}", d.turn));
                }
            }
            Err(e) => replay.error = Some(e.to_string()),
        }
    }
    if let Some(path) = &replay.path {
        for d in desyncs.iter_mut().filter(|d| Some(d.turn) == fault_turn) {
            d.fault = match game {
                DemoGame::Rts => fault_truth::<sim::game::World>(
                    path,
                    d.turn,
                    |w, t| w.perturb(t.0),
                    sim::game::World::perturb_target,
                ),
                DemoGame::Arena => fault_truth::<sim::arena::Arena>(
                    path,
                    d.turn,
                    |w, t| w.perturb(t.0),
                    sim::arena::Arena::perturb_target,
                ),
            };
        }
    }
    let mut live = peers.iter().filter(|p| !p.killed);
    let first = live.next().and_then(|p| p.summary.final_hash.clone());
    let hashes_agree = first.is_some()
        && peers
            .iter()
            .filter(|p| !p.killed)
            .all(|p| p.summary.completed && p.summary.final_hash == first)
        && spectators
            .iter()
            .all(|s| s.completed && s.final_hash == first);
    DemoReport {
        peers,
        spectators,
        heals: heal::heals(notes),
        desyncs,
        drops,
        replay,
        hashes_agree,
        seconds,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::{ConnectionQuota, QuotaFull};

    /// A demo of 32 peers and 256 spectators, every one from 127.0.0.1,
    /// gets a relay that admits them all: the per-host limit (16 by
    /// default) and the spectator cap (256) are raised to fit, and the
    /// connection after them is still refused (the bound is the demo's
    /// need, not lifted).
    #[test]
    fn the_demo_relay_admits_32_peers_and_256_spectators_from_one_host() {
        let config = DemoConfig {
            game: DemoGame::Rts,
            peers: sim::MAX_PLAYERS,
            turns: 10,
            relay: RelayConfig::default(),
            impair: None,
            record_dir: PathBuf::from("unused"),
            seed: 1,
            apm: 300,
            desync: None,
            peer_impair: Vec::new(),
            vanish: None,
            rejoin_after: None,
            spectators: 256,
            speculate: false,
        };
        let loopback = SocketAddr::from(([127, 0, 0, 1], 9000));
        let max = 4096;
        // The serve defaults would refuse the 17th.
        let plain =
            ConnectionQuota::new(max).with_per_host(config.relay.limits.max_connections_per_host);
        assert_eq!(
            (0..17).map(|_| plain.try_take(loopback)).last(),
            Some(Err(QuotaFull::Host))
        );
        let relay = fit_on_one_host(&config);
        assert!(relay.rejoin.max_spectators >= 256);
        let quota = ConnectionQuota::new(max).with_per_host(relay.limits.max_connections_per_host);
        // Every peer and spectator, each with a second connection while
        // its old one times out.
        for k in 0..2 * (32 + 256) {
            assert_eq!(quota.try_take(loopback), Ok(()), "connection {k}");
        }
        assert_eq!(quota.try_take(loopback), Err(QuotaFull::Host));
    }
}
