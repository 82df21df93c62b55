//! Turn latency under real loss, our UDP transport against a TCP baseline:
//! 4 and 8 peers of the reference game (the bot's orders submitted after a
//! random reaction time, plus clicks at random instants:
//! [`Play::GameReacting`]), 100 ms turns, the relay's default
//! (`clock`) turn policy on both carriers, 30 ms ± 10 ms one-way delay from a
//! user-space proxy on each peer's link, and random loss by the kernel inside
//! a private network namespace (one per loss rate, run side by side). Each
//! run is a child process (`bench --internal-net-run ...`) executed in the
//! namespace; it prints its peers' figures as JSON.
//!
//! Each player is set against its own floor, its median RTT to the relay plus
//! half a turn, as in the virtual-time `latency` section: on UDP the RTT is the
//! transport's (the session samples it), on TCP the relay driver times the
//! router's own Ping/Pong ([`PingRtts`]). Latency counts commands submitted
//! after the first 5 s ([`WARMUP`](super::benchpeer::WARMUP)).

use super::benchpeer::{BenchPeerConfig, PeerFigures, Play};
use super::carrier::{PingRtts, run_tcp_peer, run_udp_peers, serve_tcp, serve_udp};
use super::net_figures::{Point, RunFigures, RunOutput, TcpSegments, snmp_counter};
use super::netns::{self, Namespace};
use super::proxy::{Delay, tcp_proxy, udp_proxy};
use lockstep::low_level::transport::TransportConfig;
use relay::RelayConfig;
use std::io;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The loss rates measured.
pub const LOSSES: [f64; 5] = [0.0, 0.02, 0.05, 0.10, 0.20];
/// Players per match, one batch of runs each.
pub const PLAYER_COUNTS: [u8; 2] = [4, 8];
/// The loss rates 8 players play under `--quick` (every rate in the full run):
/// the range, 0 to 10 %, to keep the section under three minutes.
pub const QUICK_LOSSES_8: [f64; 3] = [0.0, 0.05, 0.10];
/// Bot actions per minute.
pub const APM: u32 = 300;
/// Measuring clicks per minute per player, on top of the bot's orders (as
/// the `latency` section's clickers).
pub const CLICKS_PER_MIN: u32 = 240;
/// Most players a run may have: the fixed proxy ports of the two carriers
/// (from 20 001 and 20 011) must not overlap.
pub const MAX_PLAYERS: u8 = 9;

/// Which carrier a run uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Carrier {
    /// Our transport over UDP.
    Udp,
    /// Length-prefixed messages over TCP with `TCP_NODELAY`.
    Tcp,
}

impl Carrier {
    /// Name on the command line and in tables.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Udp => "udp",
            Self::Tcp => "tcp",
        }
    }

    /// Parses [`Carrier::name`].
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Udp, Self::Tcp].into_iter().find(|c| c.name() == s)
    }

    /// Fixed ports inside a namespace: relay, first proxy. Proxies sit in
    /// [`netns::LOSSY_PORTS`], relays outside it.
    const fn ports(self) -> (u16, u16) {
        match self {
            Self::Udp => (20_100, 20_001),
            Self::Tcp => (20_101, 20_011),
        }
    }
}

/// One match run.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Carrier.
    pub carrier: Carrier,
    /// Players in the match (at most 9: the fixed ports leave room for that many).
    pub players: u8,
    /// Turns to play.
    pub turns: u32,
    /// Seed of bots and proxies.
    pub seed: u64,
    /// Delay on each link direction.
    pub delay: Delay,
    /// Loss added by the UDP proxy itself (the fallback without namespaces).
    pub proxy_loss: f64,
    /// Bind the fixed namespace ports (else any free port).
    pub fixed_ports: bool,
}

/// The link: 30 ms ± 10 ms one way.
#[must_use]
pub const fn standard_delay() -> Delay {
    Delay {
        base: std::time::Duration::from_millis(30),
        jitter: std::time::Duration::from_millis(10),
    }
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// The relay's turn length (the default, which the section measures), ms.
#[must_use]
pub fn turn_ms() -> f64 {
    RelayConfig::default().turn_length.as_millis_f64()
}

/// Plays one match: relay, one proxy per peer, `s.players` peers, each in its
/// own thread. On TCP each peer's `rtt_p50_ms` is the relay's Ping/Pong median.
pub fn run_scenario(s: &Scenario) -> io::Result<Vec<PeerFigures>> {
    let stop = Arc::new(AtomicBool::new(false));
    let (relay_port, proxy_base) = if s.fixed_ports {
        s.carrier.ports()
    } else {
        (0, 0)
    };
    let match_name = format!("net-{}", s.seed);
    let timeout = std::time::Duration::from_millis(u64::from(s.turns) * 100 + 30_000);
    let mut threads = Vec::new();
    let mut fronts = Vec::new();
    let relay_thread: std::thread::JoinHandle<io::Result<Option<PingRtts>>>;
    match s.carrier {
        Carrier::Udp => {
            let socket = UdpSocket::bind(addr(relay_port))?;
            let relay_addr = socket.local_addr()?;
            let stop2 = Arc::clone(&stop);
            relay_thread = std::thread::spawn(move || {
                serve_udp(
                    &socket,
                    RelayConfig::default(),
                    TransportConfig::default(),
                    &stop2,
                )
                .map(|_| None)
            });
            for i in 0..s.players {
                let port = if s.fixed_ports {
                    proxy_base + u16::from(i)
                } else {
                    0
                };
                let front = UdpSocket::bind(addr(port))?;
                fronts.push(front.local_addr()?);
                threads.extend(udp_proxy(
                    front,
                    relay_addr,
                    s.delay,
                    s.proxy_loss,
                    s.seed ^ u64::from(i) << 8,
                    &stop,
                )?);
            }
        }
        Carrier::Tcp => {
            let listener = TcpListener::bind(addr(relay_port))?;
            let relay_addr = listener.local_addr()?;
            let stop2 = Arc::clone(&stop);
            relay_thread = std::thread::spawn(move || {
                serve_tcp(&listener, RelayConfig::default(), &stop2).map(|(_, rtts)| Some(rtts))
            });
            for i in 0..s.players {
                let port = if s.fixed_ports {
                    proxy_base + u16::from(i)
                } else {
                    0
                };
                let front = TcpListener::bind(addr(port))?;
                fronts.push(front.local_addr()?);
                threads.push(tcp_proxy(
                    front,
                    relay_addr,
                    s.delay,
                    s.seed ^ u64::from(i) << 8,
                    &stop,
                )?);
            }
        }
    }
    let configs: Vec<BenchPeerConfig> = (0..fronts.len())
        .map(|i| BenchPeerConfig {
            match_name: match_name.clone(),
            players: s.players,
            turns: s.turns,
            seed: s.seed.wrapping_mul(31).wrapping_add(i as u64),
            play: Play::GameReacting {
                apm: APM,
                clicks_per_min: CLICKS_PER_MIN,
            },
        })
        .collect();
    let names: Vec<String> = configs.iter().map(BenchPeerConfig::peer_name).collect();
    let peers: Vec<_> = fronts
        .iter()
        .zip(configs)
        .map(|(&front, config)| {
            let carrier = s.carrier;
            std::thread::spawn(move || match carrier {
                Carrier::Udp => {
                    run_udp_peers(vec![(config, front)], TransportConfig::default(), timeout)
                        .map(|mut v| v.pop().unwrap_or_default())
                }
                Carrier::Tcp => run_tcp_peer(config, front, timeout),
            })
        })
        .collect();
    let mut figures = Vec::new();
    let mut error = None;
    for p in peers {
        match p.join() {
            Ok(Ok(f)) => figures.push(f),
            Ok(Err(e)) => error = Some(e),
            Err(_) => error = Some(io::Error::other("a peer thread panicked")),
        }
    }
    stop.store(true, Ordering::Relaxed);
    let relay = relay_thread.join();
    for t in threads {
        let _ = t.join();
    }
    if let Some(e) = error {
        return Err(e);
    }
    match relay {
        Ok(Ok(rtts)) => {
            if let Some(rtts) = rtts {
                for (f, name) in figures.iter_mut().zip(&names) {
                    f.rtt_p50_ms = rtts.median(name).map_or(0.0, |d| d.as_millis_f64());
                    f.rtt_p99_ms = rtts.percentile(name, 99).map_or(0.0, |d| d.as_millis_f64());
                }
            }
            Ok(figures)
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(io::Error::other("the relay thread panicked")),
    }
}

/// The child side: `--internal-net-run <udp|tcp> <players> <turns> <seed> <proxy_loss> <fixed 0|1>`;
/// prints the peers' figures as one JSON line.
#[must_use]
pub fn internal_main(args: &[String]) -> ExitCode {
    let parsed = (|| {
        let carrier = Carrier::parse(args.first()?)?;
        Some(Scenario {
            carrier,
            players: args
                .get(1)?
                .parse()
                .ok()
                .filter(|p| (1..=MAX_PLAYERS).contains(p))?,
            turns: args.get(2)?.parse().ok()?,
            seed: args.get(3)?.parse().ok()?,
            delay: standard_delay(),
            proxy_loss: args.get(4)?.parse().ok()?,
            fixed_ports: args.get(5)? == "1",
        })
    })();
    let Some(s) = parsed else {
        replays::err_println!(
            "usage: --internal-net-run <udp|tcp> <players 1-{MAX_PLAYERS}> <turns> <seed> <proxy_loss> <fixed 0|1>"
        );
        return ExitCode::from(2);
    };
    let before = read_snmp();
    let result = run_scenario(&s);
    let after = read_snmp();
    let tcp = match (before, after) {
        (Some(b), Some(a)) => Some(TcpSegments {
            out: a.out.saturating_sub(b.out),
            retrans: a.retrans.saturating_sub(b.retrans),
        }),
        _ => None,
    };
    match result.map(|peers| RunOutput { peers, tcp }) {
        Ok(figures) => match serde_json::to_string(&figures) {
            Ok(json) => {
                replays::out_println!("{json}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                replays::err_println!("error: {e}");
                ExitCode::from(1)
            }
        },
        Err(e) => {
            replays::err_println!("error: {} run failed: {e}", s.carrier.name());
            ExitCode::from(1)
        }
    }
}

fn read_snmp() -> Option<TcpSegments> {
    let text = std::fs::read_to_string("/proc/net/snmp").ok()?;
    Some(TcpSegments {
        out: snmp_counter(&text, "Tcp", "OutSegs")?,
        retrans: snmp_counter(&text, "Tcp", "RetransSegs")?,
    })
}

/// How the section ran.
#[derive(Debug)]
pub struct NetSection {
    /// Results by player count, then loss rate: ours, then TCP.
    pub points: Vec<(Point, Point)>,
    /// Why real loss was unavailable, if it was (then TCP was not run).
    pub fallback: Option<String>,
    /// Turns per run.
    pub turns: u32,
    /// Runs per point.
    pub runs: usize,
    /// Turn length, ms.
    pub turn_ms: f64,
}

impl NetSection {
    /// Why some point has no figures (every run of it failed), if so: the
    /// run must then fail rather than print a table of gaps. The TCP
    /// baseline counts only where it was run (real loss available).
    #[must_use]
    pub fn unmeasured(&self) -> Option<String> {
        let tcp_ran = self.fallback.is_none();
        let failed: Vec<String> = self
            .points
            .iter()
            .flat_map(|(u, t)| [Some(u), tcp_ran.then_some(t)])
            .flatten()
            .filter(|p| p.runs.is_empty())
            .map(|p| {
                format!(
                    "{} players, {:.0} % loss, {}: {}",
                    p.players,
                    p.loss * 100.0,
                    p.carrier.map_or("?", |c| c.name()),
                    p.errors.first().map_or("no run", String::as_str)
                )
            })
            .collect();
        (!failed.is_empty()).then(|| failed.join("; "))
    }
}

/// The loss rates `players` play (all of [`LOSSES`], or [`QUICK_LOSSES_8`]
/// for more than 4 players under `--quick`).
#[must_use]
pub fn losses_for(players: u8, quick: bool) -> Vec<f64> {
    if quick && players > 4 {
        QUICK_LOSSES_8.to_vec()
    } else {
        LOSSES.to_vec()
    }
}

/// Runs the section: in namespaces when possible, else in-process with
/// proxy-made loss for our transport only. Each player count is one batch
/// (every loss rate and both carriers side by side), the batches one after
/// the other so that 8-player matches do not share the cores with 4-player ones.
#[must_use]
pub fn measure(quick: bool) -> NetSection {
    // 5 s of warm-up, then 25 s (--quick) or 60 s of steady state.
    let (turns, runs) = if quick { (300, 2) } else { (650, 3) };
    let turn_ms = turn_ms();
    let fallback = netns::unavailable();
    let mut points: Vec<(Point, Point)> = PLAYER_COUNTS
        .iter()
        .flat_map(|&players| {
            losses_for(players, quick).into_iter().map(move |loss| {
                let point = |c| Point {
                    players,
                    loss,
                    carrier: Some(c),
                    ..Point::default()
                };
                (point(Carrier::Udp), point(Carrier::Tcp))
            })
        })
        .collect();
    match &fallback {
        None => {
            if let Err(e) = measure_in_namespaces(turns, runs, turn_ms, &mut points) {
                for (u, t) in &mut points {
                    u.errors.push(e.clone());
                    t.errors.push(e.clone());
                }
            }
        }
        Some(why) => {
            replays::err_println!(
                "warning: [net] real kernel loss unavailable ({why}): the loss is made by the \
                 UDP proxy in user space and the TCP baseline is not run; BENCHMARKS.md says so \
                 at the top of the section. For real loss run as root with `ip` (iproute2) and \
                 `iptables` installed (e.g. `apt-get install iproute2 iptables`)."
            );
            measure_in_process(turns, runs, turn_ms, &mut points);
        }
    }
    NetSection {
        points,
        fallback,
        turns,
        runs,
        turn_ms,
    }
}

/// The fallback: our carrier only, loss made by the proxy, in this process.
fn measure_in_process(turns: u32, runs: usize, turn_ms: f64, points: &mut [(Point, Point)]) {
    for r in 0..runs {
        for players in PLAYER_COUNTS {
            replays::err_println!(
                "[net] run {}/{runs}, {players} players: udp at every loss rate side by side, \
                 {turns} turns each, loss made by the proxy",
                r + 1
            );
            // Every loss rate at once, like the namespace runs, to keep --quick quick.
            let handles: Vec<_> = points
                .iter()
                .enumerate()
                .filter(|(_, (u, _))| u.players == players)
                .map(|(k, (u, _))| {
                    let s = Scenario {
                        carrier: Carrier::Udp,
                        players,
                        turns,
                        seed: 1000 + r as u64,
                        delay: standard_delay(),
                        proxy_loss: u.loss,
                        fixed_ports: false,
                    };
                    (k, std::thread::spawn(move || run_scenario(&s)))
                })
                .collect();
            for (k, h) in handles {
                let u = &mut points[k].0;
                match h.join() {
                    Ok(Ok(f)) => u.runs.push(RunFigures::pool_run(
                        Carrier::Udp,
                        &RunOutput {
                            peers: f,
                            tcp: None,
                        },
                        turn_ms,
                    )),
                    Ok(Err(e)) => u.errors.push(e.to_string()),
                    Err(_) => u.errors.push("a run panicked".into()),
                }
            }
        }
    }
}

fn measure_in_namespaces(
    turns: u32,
    runs: usize,
    turn_ms: f64,
    points: &mut [(Point, Point)],
) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find own binary: {e}"))?;
    let exe = exe.to_string_lossy().into_owned();
    // One namespace per loss rate, shared by the player counts (they run one after the other).
    let mut spaces = Vec::new();
    for (i, &loss) in LOSSES.iter().enumerate() {
        let ns = Namespace::create(&format!("lsbench-{}-{i}", std::process::id()))?;
        ns.set_loss(loss)?;
        spaces.push((loss, ns));
    }
    for r in 0..runs {
        for players in PLAYER_COUNTS {
            let batch: Vec<usize> = (0..points.len())
                .filter(|&k| points[k].0.players == players)
                .collect();
            replays::err_println!(
                "[net] run {}/{runs}, {players} players: {} loss rates × udp+tcp side by side, \
                 {turns} turns each, real kernel loss",
                r + 1,
                batch.len()
            );
            let args = [
                players.to_string(),
                turns.to_string(),
                (1000 + r).to_string(),
            ];
            let mut children = Vec::new();
            for &k in &batch {
                let loss = points[k].0.loss;
                let Some((_, ns)) = spaces.iter().find(|(l, _)| *l == loss) else {
                    return Err(format!("no namespace for {loss} loss"));
                };
                for carrier in [Carrier::Udp, Carrier::Tcp] {
                    let child = ns
                        .exec(
                            &exe,
                            &[
                                "--internal-net-run",
                                carrier.name(),
                                &args[0],
                                &args[1],
                                &args[2],
                                "0",
                                "1",
                            ],
                        )
                        .stdin(Stdio::null())
                        .stdout(Stdio::piped())
                        .stderr(Stdio::piped())
                        .spawn();
                    children.push((k, carrier, child));
                }
            }
            for (k, carrier, child) in children {
                let point = match carrier {
                    Carrier::Udp => &mut points[k].0,
                    Carrier::Tcp => &mut points[k].1,
                };
                let result = child
                    .map_err(|e| e.to_string())
                    .and_then(|c| c.wait_with_output().map_err(|e| e.to_string()))
                    .and_then(|out| {
                        if !out.status.success() {
                            return Err(format!(
                                "{} run exited with {}: {}",
                                carrier.name(),
                                out.status,
                                String::from_utf8_lossy(&out.stderr).trim()
                            ));
                        }
                        serde_json::from_slice::<RunOutput>(&out.stdout).map_err(|e| e.to_string())
                    });
                match result {
                    Ok(f) => point.runs.push(RunFigures::pool_run(carrier, &f, turn_ms)),
                    Err(e) => {
                        replays::err_println!("[net] {e}");
                        point.errors.push(e);
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_runs_8_players_at_0_to_10_percent_only() {
        assert_eq!(losses_for(4, true), LOSSES.to_vec());
        assert_eq!(losses_for(8, true), vec![0.0, 0.05, 0.10]);
        assert_eq!(losses_for(8, false), LOSSES.to_vec());
    }

    /// Both carriers play a short match end to end over loopback;
    /// asserts only what does not depend on timing.
    #[test]
    fn both_carriers_play_a_short_match() {
        for carrier in [Carrier::Udp, Carrier::Tcp] {
            let s = Scenario {
                carrier,
                players: 4,
                turns: 20,
                seed: 5,
                delay: Delay {
                    base: std::time::Duration::from_millis(2),
                    jitter: std::time::Duration::from_millis(1),
                },
                // The fallback's user-space loss on our carrier; none on TCP (it cannot lose).
                proxy_loss: if carrier == Carrier::Udp { 0.05 } else { 0.0 },
                fixed_ports: false,
            };
            let figures = run_scenario(&s).unwrap();
            assert_eq!(figures.len(), 4);
            for f in &figures {
                assert!(f.completed, "{carrier:?}: {f:?}");
                assert_eq!(f.turns, 20, "{carrier:?}");
                assert!(f.bytes_sent > 0 && f.bytes_received > 0);
                assert!(
                    !f.latencies_ms.is_empty(),
                    "{carrier:?}: bots issued commands"
                );
                // Every player has an RTT, hence a floor: the transport's on
                // UDP, the relay's Ping/Pong (one at the start) on TCP.
                assert!(f.rtt_p50_ms > 0.0, "{carrier:?}: {f:?}");
            }
        }
    }
}
