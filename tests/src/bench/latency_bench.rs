//! Command latency against each player's own floor, in virtual time: the
//! reference game's peers (`lockstep::peer::Peer`) and the real relay
//! (`relay::endpoint::RelayEndpoint`, default `clock` policy) on the seeded
//! `netsim::Network`, driven by `netsim::Harness`, so minute-long matches
//! run in seconds and every figure is reproducible.
//!
//! Each peer is played by a clicker: it submits a small command at seeded
//! random instants (exponential gaps, 240 per minute), as a human's clicks
//! fall anywhere in a turn; a bot answering each turn at once would be in
//! phase with the turn clock and measure whole turns. Every command is
//! timestamped and matched, in order, to the turn that executes it.
//!
//! A player's floor is its median RTT (the transport's figure, sampled once a
//! second) plus half a turn: on average a command waits half a turn at the
//! relay for the next turn to close, and no command can be decided sooner
//! than its trip to the relay and back.

use lockstep::low_level::transport::{Server, TransportConfig};
use lockstep::netsim::harness::{Endpoint, Harness};
use lockstep::netsim::skew::Skewed;
use lockstep::netsim::{LinkConfig, Network};
use lockstep::peer::{Peer, PeerBuilder, PeerEvent};
use lockstep::{Duration, Instant};
use relay::{RelayConfig, TurnPolicy};
use sim::game::{Command, World};
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::net::SocketAddr;

/// Clicks per minute of the measuring clicker.
pub const CLICKS_PER_MIN: u64 = 240;
/// Latency samples of commands submitted in the first seconds are left out.
const WARM_UP: Duration = Duration::from_secs(5);

/// A peer played by the clicker; see the module docs.
struct Clicker {
    peer: Peer<World>,
    addr: SocketAddr,
    rng: u64,
    next_click: Option<Instant>,
    /// Submit times of our commands not yet executed, oldest first.
    submitted: VecDeque<Instant>,
    /// (submitted at, latency) per executed command.
    samples: Vec<(Instant, Duration)>,
    /// When each turn was played.
    played: Vec<Instant>,
    started: Option<Instant>,
}

impl Clicker {
    fn draw(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    /// An exponential gap with mean 60 s / CLICKS_PER_MIN.
    fn gap(&mut self) -> Duration {
        let mean = 60_000_000.0 / CLICKS_PER_MIN as f64;
        let u = (self.draw() >> 11) as f64 / (1u64 << 53) as f64;
        Duration::from_micros((-(1.0 - u).ln() * mean) as u64 + 1)
    }

    fn click(&mut self, now: Instant) {
        while self.next_click.is_some_and(|t| t <= now) {
            let me = self.peer.player().map_or(0, |p| u32::from(p.0));
            let order = [Command::Stop { units: vec![me] }];
            if self.peer.submit(now, &order).is_ok() {
                self.submitted.push_back(now);
            }
            let gap = self.gap();
            self.next_click = self.next_click.map(|t| t + gap);
        }
    }

    fn step(&mut self, now: Instant) {
        self.peer.pump(now);
        while let Some(ev) = self.peer.poll_event() {
            match ev {
                PeerEvent::Started { .. } => {
                    self.started = Some(now);
                    let gap = self.gap();
                    self.next_click = Some(now + gap);
                }
                PeerEvent::TurnReady { inputs, .. } => {
                    self.played.push(now);
                    let me = self.peer.player();
                    let mine = inputs.iter().filter(|c| Some(c.player) == me).count();
                    for _ in 0..mine {
                        if let Some(at) = self.submitted.pop_front() {
                            self.samples.push((at, now.saturating_since(at)));
                        }
                    }
                }
                _ => {}
            }
        }
        self.click(now);
    }
}

impl Endpoint for Clicker {
    fn addr(&self) -> SocketAddr {
        self.addr
    }
    fn pump(&mut self, now: Instant) {
        self.step(now);
    }
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]) {
        self.peer.handle_datagram(now, from, bytes);
    }
    fn handle_timeout(&mut self, now: Instant) {
        self.peer.handle_timeout(now);
        self.step(now);
    }
    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<SocketAddr> {
        self.peer.poll_transmit(now, buf)
    }
    fn poll_timeout(&mut self) -> Option<Instant> {
        [self.peer.poll_timeout(), self.next_click]
            .into_iter()
            .flatten()
            .min()
    }
    fn is_done(&self) -> bool {
        self.peer.is_done()
    }
}

/// One player's figures over a match.
#[derive(Clone, Debug, Default)]
pub struct PlayerFigures {
    /// Median transport RTT, ms.
    pub rtt_ms: f64,
    /// Its floor: median RTT plus half a turn, ms.
    pub floor_ms: f64,
    /// Its p99 RTT (`SessionStats::rtt_p99`: the transport's raw-sample
    /// tail, sampled once a second, median), ms.
    pub rtt_p99_ms: f64,
    /// Command latency after the warm-up: median, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Jitter buffer at the end, ms.
    pub buffer_ms: f64,
    /// Latency samples after the warm-up.
    pub samples: usize,
    /// Stall time, ms.
    pub stall_ms: f64,
    /// Played every turn.
    pub completed: bool,
    /// (submit second, latency ms) of every command, for the time plot.
    pub series: Vec<(f64, f64)>,
}

/// How one match of the section runs.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Players.
    pub players: u8,
    /// Turn length.
    pub turn: Duration,
    /// Match length.
    pub secs: u64,
    /// Every player's link, each way.
    pub link: LinkConfig,
    /// Players whose link differs (index, link each way).
    pub special: Vec<(usize, LinkConfig)>,
    /// A frozen player: (index, from, until) in ms of the match.
    pub freeze: Option<(usize, u64, u64)>,
    /// The relay's policy.
    pub policy: TurnPolicy,
    /// Seed.
    pub seed: u64,
    /// The peers' jitter buffer sizing.
    pub playout: lockstep::low_level::session::PlayoutConfig,
    /// The transport's good-mode packet rate and burst, if not the default
    /// (30 packets/s, burst 3): shows how much of the gap to the floor is
    /// the transport's send pacing.
    pub pacing: Option<(u32, u32)>,
}

/// A match's result.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Per player.
    pub players: Vec<PlayerFigures>,
    /// Wall-clock (≈ CPU: one thread) milliseconds spent per second of match.
    pub cpu_ms_per_s: f64,
    /// Every peer executed the same commands for every turn.
    pub same_bundles: bool,
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    super::stats::percentile_sorted(v, p)
}

/// Plays one scenario.
#[must_use]
pub fn run(sc: &Scenario) -> Outcome {
    let start = Instant::from_millis(1);
    let relay_addr = SocketAddr::from(([10, 0, 0, 1], 7000));
    let config = RelayConfig {
        turn_length: sc.turn,
        policy: sc.policy,
        ..RelayConfig::default()
    };
    let mut relay = relay::endpoint::RelayEndpoint::new(
        Server::new(config.server_transport(transport(sc)), [sc.seed as u8; 32]),
        config,
        relay_addr,
    );
    let turns = u32::try_from(sc.secs * 1000 / sc.turn.as_millis().max(1)).unwrap_or(u32::MAX);
    let mut peers: Vec<Skewed<Clicker>> = (0..sc.players)
        .map(|i| {
            let addr = SocketAddr::from(([10, 0, 1, i], 9000));
            let peer = PeerBuilder::<World>::new("lat", sc.players)
                .with_name(&format!("p{i}"))
                .with_turns(turns)
                .with_seed(sc.seed * 31 + u64::from(i))
                .with_ticks_per_turn(sim::game::DEFAULT_TICKS_PER_TURN)
                .with_local_addr(addr)
                .with_playout(sc.playout)
                .with_transport(transport(sc))
                .build(start, relay_addr)
                .expect("a valid bench peer");
            let mut s = Skewed::new(Clicker {
                peer,
                addr,
                // Odd (xorshift must not start at zero) and distinct for every
                // player: `| 1` alone would give players 2k and 2k + 1 one seed.
                rng: (sc.seed * 1000 + u64::from(i)) * 2 + 1,
                next_click: None,
                submitted: VecDeque::new(),
                samples: Vec::new(),
                played: Vec::new(),
                started: None,
            });
            if let Some((p, a, b)) = sc.freeze
                && p == usize::from(i)
            {
                s = s.with_freeze(
                    start + Duration::from_millis(a),
                    start + Duration::from_millis(b),
                );
            }
            s
        })
        .collect();
    let mut harness = Harness::new(Network::new(sc.seed, sc.link)).with_start(start);
    for &(i, cfg) in &sc.special {
        let addr = peers[i].addr();
        harness.network_mut().set_link(addr, relay_addr, cfg);
        harness.network_mut().set_link(relay_addr, addr, cfg);
    }
    let wall = std::time::Instant::now();
    {
        let mut nodes: Vec<&mut dyn Endpoint> = vec![&mut relay];
        nodes.extend(peers.iter_mut().map(|p| p as &mut dyn Endpoint));
        let limit = start + Duration::from_secs(sc.secs + 60);
        let _ = harness.run(&mut nodes, limit);
    }
    let spent = wall.elapsed().as_secs_f64() * 1000.0;
    let now = harness.now();
    let clickers: Vec<Clicker> = peers.into_iter().map(Skewed::into_inner).collect();
    let first = clickers[0].peer.summary(now).final_hash;
    let same_bundles = clickers.iter().all(|c| {
        let s = c.peer.summary(now);
        s.completed && s.final_hash == first && s.desyncs.is_empty()
    });
    let players = clickers
        .iter()
        .map(|c| {
            let st = c.peer.stats(now);
            let begin = c.started.unwrap_or(start);
            let mut steady: Vec<f64> = c
                .samples
                .iter()
                .filter(|(at, _)| *at >= begin + WARM_UP)
                .map(|(_, l)| l.as_millis_f64())
                .collect();
            let n = steady.len();
            PlayerFigures {
                rtt_ms: st.rtt_p50.as_millis_f64(),
                floor_ms: st.rtt_p50.as_millis_f64() + sc.turn.as_millis_f64() / 2.0,
                rtt_p99_ms: st.rtt_p99.as_millis_f64(),
                p50_ms: pct(&mut steady, 50.0),
                p99_ms: pct(&mut steady, 99.0),
                buffer_ms: st.jitter_buffer.as_millis_f64(),
                samples: n,
                stall_ms: st.stall.as_millis_f64(),
                completed: c.peer.summary(now).completed,
                series: c
                    .samples
                    .iter()
                    .map(|(at, l)| (at.saturating_since(begin).as_secs_f64(), l.as_millis_f64()))
                    .collect(),
            }
        })
        .collect();
    Outcome {
        players,
        cpu_ms_per_s: spent / sc.secs as f64,
        same_bundles,
    }
}

fn transport(sc: &Scenario) -> TransportConfig {
    let mut t = TransportConfig::default();
    if let Some((pps, burst)) = sc.pacing {
        t.congestion.good_pps = pps;
        t.burst = burst;
    }
    t
}

/// A link of `latency_ms` ± `jitter_ms` one way losing `loss` of datagrams.
#[must_use]
pub fn link(latency_ms: u64, jitter_ms: u64, loss: f64) -> LinkConfig {
    LinkConfig {
        latency: Duration::from_millis(latency_ms),
        jitter: Duration::from_millis(jitter_ms),
        loss,
        ..LinkConfig::default()
    }
}

/// The section's usual match: `players` clickers, 100 ms turns, 30 ± 10 ms
/// links losing `loss`, the `clock` policy.
#[must_use]
pub fn base(players: u8, secs: u64, loss: f64) -> Scenario {
    Scenario {
        players,
        turn: Duration::from_millis(100),
        secs,
        link: link(30, 10, loss),
        special: Vec::new(),
        freeze: None,
        policy: TurnPolicy::Clock,
        seed: 1,
        playout: lockstep::low_level::session::PlayoutConfig::default(),
        pacing: None,
    }
}

/// The worst of the players' p50/floor ratios.
fn worst_ratio(o: &Outcome) -> f64 {
    o.players
        .iter()
        .map(|p| p.p50_ms / p.floor_ms.max(1e-9))
        .fold(0.0, f64::max)
}

fn mean(o: &Outcome, f: impl Fn(&PlayerFigures) -> f64) -> f64 {
    o.players.iter().map(f).sum::<f64>() / o.players.len().max(1) as f64
}

/// A per-second median latency series of one player, for the time plot.
fn per_second(p: &PlayerFigures, secs: u64) -> Vec<(f64, f64)> {
    (0..secs)
        .filter_map(|s| {
            let mut v: Vec<f64> = p
                .series
                .iter()
                .filter(|(t, _)| *t >= s as f64 && *t < (s + 1) as f64)
                .map(|(_, l)| *l)
                .collect();
            (!v.is_empty()).then(|| (s as f64 + 0.5, pct(&mut v, 50.0)))
        })
        .collect()
}

/// A line chart of latency over time (x seconds, y ms), one line per series.
fn time_plot(title: &str, lines: &[(&str, Vec<(f64, f64)>)], freeze: (f64, f64)) -> String {
    let (w, h) = (760.0_f64, 380.0_f64);
    let (left, right, top, bottom) = (60.0, 200.0, 40.0, 50.0);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let x_max = lines
        .iter()
        .flat_map(|(_, v)| v.iter().map(|p| p.0))
        .fold(1.0, f64::max)
        .ceil();
    let y_max = lines
        .iter()
        .flat_map(|(_, v)| v.iter().map(|p| p.1))
        .fold(1.0, f64::max);
    let y_max = (y_max / 100.0).ceil() * 100.0;
    let x = |v: f64| left + pw * v / x_max;
    let y = |v: f64| top + ph * (1.0 - v / y_max);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="14">{title}</text>"#,
        left + pw / 2.0
    );
    let _ = writeln!(
        s,
        r##"<rect x="{:.1}" y="{top}" width="{:.1}" height="{ph}" fill="#eee"/><text x="{:.1}" y="{:.1}" font-size="11">frozen</text>"##,
        x(freeze.0),
        x(freeze.1) - x(freeze.0),
        x(freeze.0) + 2.0,
        top + 12.0
    );
    for i in 0..=5 {
        let f = f64::from(i) / 5.0;
        let _ = writeln!(
            s,
            r##"<line x1="{left}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{:.0}</text>"##,
            y(y_max * f),
            left + pw,
            y(y_max * f),
            left - 6.0,
            y(y_max * f) + 4.0,
            y_max * f
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{:.0}</text>"#,
            x(x_max * f),
            top + ph + 16.0,
            x_max * f
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">match time (s)</text><text x="14" y="{:.1}" transform="rotate(-90 14 {:.1})" text-anchor="middle">command latency p50 per second (ms)</text>"#,
        left + pw / 2.0,
        h - 10.0,
        top + ph / 2.0,
        top + ph / 2.0
    );
    let palette = ["#d62728", "#1f77b4", "#2ca02c", "#ff7f0e"];
    for (k, (label, pts)) in lines.iter().enumerate() {
        let colour = palette[k % palette.len()];
        let path: Vec<String> = pts
            .iter()
            .map(|&(a, b)| format!("{:.1},{:.1}", x(a), y(b)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{}"/>"#,
            path.join(" ")
        );
        let ly = top + 20.0 + 18.0 * k as f64;
        let _ = writeln!(
            s,
            r#"<line x1="{:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{colour}" stroke-width="2"/><text x="{:.1}" y="{:.1}">{label}</text>"#,
            left + pw + 10.0,
            left + pw + 30.0,
            left + pw + 36.0,
            ly + 4.0
        );
    }
    s.push_str("</svg>\n");
    s
}

/// The section's markdown, and the freeze plot's SVG.
#[must_use]
pub fn measure(quick: bool, svg_name: &str) -> (String, String) {
    // Virtual time costs milliseconds per match second, so even --quick
    // plays two minutes: a player's p99 over one minute (~240 commands) is
    // its third-worst command, which a couple of double losses decide.
    let secs = if quick { 125 } else { 245 };
    let mut md = String::new();
    let _ = writeln!(
        md,
        "**Mode: virtual time.** Every row is one match on the deterministic \
         `netsim::Network` with a virtual clock (no sockets, no kernel loss): the real \
         relay (`clock` policy unless the row says otherwise) and the reference game's \
         peers, played by clickers submitting {CLICKS_PER_MIN} commands a minute at random \
         instants. Latency is measured from a command's submission to the turn that \
         executes it, for commands submitted after the first 5 s; a player's **floor** is its \
         median RTT (the transport's) plus half a turn. The issue's p99 budget is the p99 RTT + one turn + the \
         player's jitter buffer, with the player's p99 RTT taken from the transport's raw RTT samples (the p99 of its \
         last 64, sampled once a second, median over the match); the budget and p99 columns are means over the players, \
         and the last column counts the players whose own p99 is within their own budget. Links are 30 ± 10 ms one way unless the row says otherwise; \
         {secs} s matches, 60 s and more after the warm-up (`--quick`: 125 s, full run: 245 s). The figures of the section \
         \"Turn latency under loss\" below are real sockets and real kernel loss (see its top).\n"
    );

    // Uniform links, 4 and 8 players, 0-10 % loss.
    md.push_str("### Each player against its own floor\n\n");
    md.push_str(
        "| players | loss | RTT p50 (ms) | floor (ms) | latency p50 (ms) | p50 / floor (worst player) | \
         latency p99 (ms) | RTT p99 (ms) | RTT p99 + turn + jitter buffer (ms) | jitter buffer (ms) | \
         players with p99 within their budget | same bundles everywhere |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|\n",
    );
    for players in [4u8, 8] {
        for loss in [0.0, 0.05, 0.10] {
            eprintln!("[latency] {players} players, {:.0} % loss", loss * 100.0);
            let o = run(&base(players, secs, loss));
            let turn_ms = base(players, secs, loss).turn.as_millis_f64();
            let own_budget = |p: &PlayerFigures| p.rtt_p99_ms + turn_ms + p.buffer_ms;
            let budget = mean(&o, own_budget);
            let within = o
                .players
                .iter()
                .filter(|p| p.p99_ms <= own_budget(p))
                .count();
            let _ = writeln!(
                md,
                "| {players} | {:.0} % | {:.1} | {:.1} | {:.1} | {:.2} | {:.1} | {:.1} | {:.1} | {:.1} | {within}/{} | {} |",
                loss * 100.0,
                mean(&o, |p| p.rtt_ms),
                mean(&o, |p| p.floor_ms),
                mean(&o, |p| p.p50_ms),
                worst_ratio(&o),
                mean(&o, |p| p.p99_ms),
                mean(&o, |p| p.rtt_p99_ms),
                budget,
                mean(&o, |p| p.buffer_ms),
                o.players.len(),
                if o.same_bundles { "yes" } else { "**no**" }
            );
        }
    }

    // Mixed links: one far player, three near ones, clock vs deadline.
    md.push_str(
        "\n### Mixed links: one player 250 ms away (each way), three 10 ms away\n\n\
         | policy | player | RTT (ms) | floor (ms) | latency p50 (ms) | p50 / floor | latency p99 (ms) |\n\
         |---|---:|---:|---:|---:|---:|---:|\n",
    );
    for policy in [TurnPolicy::Clock, TurnPolicy::Deadline] {
        eprintln!("[latency] mixed links, {policy}");
        let sc = Scenario {
            link: link(10, 2, 0.0),
            special: vec![(3, link(250, 5, 0.0))],
            policy,
            ..base(4, secs, 0.0)
        };
        let o = run(&sc);
        for (i, p) in o.players.iter().enumerate() {
            let _ = writeln!(
                md,
                "| {policy} | {}{} | {:.1} | {:.1} | {:.1} | {:.2} | {:.1} |",
                i,
                if i == 3 { " (far)" } else { "" },
                p.rtt_ms,
                p.floor_ms,
                p.p50_ms,
                p.p50_ms / p.floor_ms.max(1e-9),
                p.p99_ms
            );
        }
    }

    // Turn lengths.
    md.push_str(
        "\n### Turn length: 100, 50 and 33 ms (4 players, 5 % loss)\n\n\
         | turn (ms) | floor (ms) | latency p50 (ms) | p50 / floor (worst player) | latency p99 (ms) | \
         CPU ms per match second (relay + 4 peers + network, one thread) |\n\
         |---:|---:|---:|---:|---:|---:|\n",
    );
    for (turn_ms, pacing) in [
        (100u64, None),
        (50, None),
        (33, None),
        (100, Some((120, 16))),
        (33, Some((120, 16))),
    ] {
        eprintln!("[latency] {turn_ms} ms turns, pacing {pacing:?}");
        let sc = Scenario {
            turn: Duration::from_millis(turn_ms),
            pacing,
            ..base(4, secs, 0.05)
        };
        let o = run(&sc);
        let label = match pacing {
            None => format!("{turn_ms}"),
            Some((pps, burst)) => {
                format!("{turn_ms}, transport at {pps} packets/s (burst {burst})")
            }
        };
        let _ = writeln!(
            md,
            "| {label} | {:.1} | {:.1} | {:.2} | {:.1} | {:.1} |",
            mean(&o, |p| p.floor_ms),
            mean(&o, |p| p.p50_ms),
            worst_ratio(&o),
            mean(&o, |p| p.p99_ms),
            o.cpu_ms_per_s
        );
    }

    md.push_str(
        "\nThe transport's turn bucket charges each packet by its size (a full packet is one \
         token of the 30 packets/s), so inputs, hashes and bundles of a few dozen bytes no \
         longer wait for a send token at short turns; the rows with the packet rate raised \
         (120 packets/s) now measure about the same, i.e. pacing no longer shows. What is \
         left between a player's p50 and its floor is the jitter buffer (the median arrival) \
         and, under loss, the messages that needed a second copy: from 2.5 % measured loss \
         each new input and bundle (the transport's urgent channel; hashes, pings and reports \
         get none) gets an early copy half a packet interval (17 ms) later, from 7.5 % two, \
         a third of an interval apart.\n",
    );

    // Freeze.
    let (from, until) = (20_000, 23_000);
    let fsecs = secs.max(45);
    eprintln!("[latency] one peer frozen for 3 s");
    let sc = Scenario {
        freeze: Some((3, from, until)),
        ..base(4, fsecs, 0.0)
    };
    let o = run(&sc);
    let frozen = &o.players[3];
    let window = |p: &PlayerFigures, a: f64, b: f64| {
        let mut v: Vec<f64> = p
            .series
            .iter()
            .filter(|(t, _)| *t >= a && *t < b)
            .map(|(_, l)| *l)
            .collect();
        if v.is_empty() {
            f64::NAN
        } else {
            pct(&mut v, 50.0)
        }
    };
    let (f, u) = (from as f64 / 1000.0, until as f64 / 1000.0);
    let _ = writeln!(
        md,
        "\n### One peer frozen for 3 s (SIGSTOP-like, at {f:.0} s; {fsecs} s match, 4 players)\n\n\
         ![latency over time](tests/benchmarks/{svg_name})\n\n\
         | player | p50 before (ms) | p50 of commands issued in the 5 s after the thaw (ms) | p50 from 5 s after the thaw (ms) | floor (ms) |\n\
         |---|---:|---:|---:|---:|"
    );
    for (i, p) in o.players.iter().enumerate() {
        let _ = writeln!(
            md,
            "| {i}{} | {:.1} | {:.1} | {:.1} | {:.1} |",
            if i == 3 { " (frozen)" } else { "" },
            window(p, 5.0, f),
            window(p, u, u + 5.0),
            window(p, u + 5.0, fsecs as f64),
            p.floor_ms
        );
    }
    let _ = writeln!(
        md,
        "\nThe frozen peer's commands issued before the freeze execute after the thaw \
         (that is the freeze, not the network); the others never notice it. Every peer \
         executed the same bundles: {}.",
        if o.same_bundles { "yes" } else { "**no**" }
    );
    let svg = time_plot(
        "Command latency over time, one peer frozen for 3 s",
        &[
            ("frozen peer", per_second(frozen, fsecs)),
            ("another peer", per_second(&o.players[0], fsecs)),
        ],
        (f, u),
    );
    (md, svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue #13's p99 goal: every player's p99 command latency at most its
    /// own p99 RTT (the transport's raw samples) + one turn + its jitter
    /// buffer, 4 players at 5 % loss, the bench's scenario (clickers, 30 ±
    /// 10 ms each way) over two minutes (~450 samples a player). It failed
    /// with no early copies below 7.5 % loss: a lost input or bundle waited
    /// for the next packet, up to a turn (p99 above 200 ms against a budget
    /// of about 186 ms).
    #[test]
    fn every_players_p99_is_within_its_p99_rtt_plus_a_turn_and_its_buffer_at_5_percent_loss() {
        let sc = base(4, 120, 0.05);
        let turn = sc.turn.as_millis_f64();
        let o = run(&sc);
        assert!(o.same_bundles);
        for (i, p) in o.players.iter().enumerate() {
            let budget = p.rtt_p99_ms + turn + p.buffer_ms;
            eprintln!(
                "player {i}: p99 {:.1} ms, budget {budget:.1} ms (RTT p50 {:.1}, p99 {:.1}, buffer {:.1}, {} samples)",
                p.p99_ms, p.rtt_ms, p.rtt_p99_ms, p.buffer_ms, p.samples
            );
            assert!(p.samples > 300);
            assert!(p.rtt_p99_ms > p.rtt_ms);
            assert!(
                p.p99_ms <= budget,
                "player {i}: p99 {:.1} ms over {budget:.1} ms",
                p.p99_ms
            );
        }
    }
}
