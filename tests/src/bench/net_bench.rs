//! Turn latency under real loss, our UDP transport against a TCP baseline:
//! 4 peers of the reference game, 100 ms turns, 30 ms ± 10 ms one-way delay
//! from a user-space proxy on each peer's link, and random loss by the kernel
//! inside a private network namespace (one per loss rate, run side by side).
//! Each run is a child process (`bench --internal-net-run ...`) executed in
//! the namespace; it prints its peers' figures as JSON.

use super::benchpeer::{BenchPeerConfig, PeerFigures, Play};
use super::carrier::{run_tcp_peer, run_udp_peers, serve_tcp, serve_udp};
use super::netns::{self, Namespace};
use super::proxy::{Delay, tcp_proxy, udp_proxy};
use super::stats::{Summary, percentile};
use lockstep::transport::TransportConfig;
use relay::RelayConfig;
use std::io;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The loss rates measured.
pub const LOSSES: [f64; 5] = [0.0, 0.02, 0.05, 0.10, 0.20];
/// Players per match.
pub const PLAYERS: u8 = 4;
/// Bot actions per minute.
pub const APM: u32 = 300;

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

/// Plays one match: relay, one proxy per peer, 4 peers, each in its own thread.
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
    let relay_thread;
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
                .map(|_| ())
            });
            for i in 0..PLAYERS {
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
                serve_tcp(&listener, RelayConfig::default(), &stop2).map(|_| ())
            });
            for i in 0..PLAYERS {
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
    let peers: Vec<_> = fronts
        .iter()
        .enumerate()
        .map(|(i, &front)| {
            let config = BenchPeerConfig {
                match_name: match_name.clone(),
                players: PLAYERS,
                turns: s.turns,
                seed: s.seed.wrapping_mul(31).wrapping_add(i as u64),
                play: Play::Game { apm: APM },
            };
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
        Ok(Ok(())) => Ok(figures),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(io::Error::other("the relay thread panicked")),
    }
}

/// The child side: `--internal-net-run <udp|tcp> <turns> <seed> <proxy_loss> <fixed 0|1>`;
/// prints the peers' figures as one JSON line.
#[must_use]
pub fn internal_main(args: &[String]) -> ExitCode {
    let parsed = (|| {
        let carrier = Carrier::parse(args.first()?)?;
        Some(Scenario {
            carrier,
            turns: args.get(1)?.parse().ok()?,
            seed: args.get(2)?.parse().ok()?,
            delay: standard_delay(),
            proxy_loss: args.get(3)?.parse().ok()?,
            fixed_ports: args.get(4)? == "1",
        })
    })();
    let Some(s) = parsed else {
        replays::err_println!(
            "usage: --internal-net-run <udp|tcp> <turns> <seed> <proxy_loss> <fixed 0|1>"
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

/// TCP segment counters of a namespace (`/proc/net/snmp`), over one run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TcpSegments {
    /// Segments sent (every hop, both directions).
    pub out: u64,
    /// Segments retransmitted.
    pub retrans: u64,
}

/// What a child run prints.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunOutput {
    /// Each peer's figures.
    pub peers: Vec<PeerFigures>,
    /// The namespace's TCP counters over the run (only TCP runs use TCP there).
    pub tcp: Option<TcpSegments>,
}

/// IPv4 + UDP header bytes per datagram.
pub const UDP_IP_HEADER: f64 = 28.0;
/// IPv4 + TCP header bytes per segment with Linux's default timestamp option.
pub const TCP_IP_HEADER: f64 = 52.0;

/// Reads one counter from the text of `/proc/net/snmp` (a header line of
/// names followed by a line of values, both starting with `group:`).
#[must_use]
pub fn snmp_counter(text: &str, group: &str, name: &str) -> Option<u64> {
    let prefix = format!("{group}:");
    let mut lines = text.lines().filter(|l| l.starts_with(&prefix));
    let names = lines.next()?;
    let values = lines.next()?;
    let i = names.split_whitespace().position(|n| n == name)?;
    values.split_whitespace().nth(i)?.parse().ok()
}

fn read_snmp() -> Option<TcpSegments> {
    let text = std::fs::read_to_string("/proc/net/snmp").ok()?;
    Some(TcpSegments {
        out: snmp_counter(&text, "Tcp", "OutSegs")?,
        retrans: snmp_counter(&text, "Tcp", "RetransSegs")?,
    })
}

/// One run's figures for one carrier at one loss rate, pooled over its peers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunFigures {
    /// Every latency sample of every peer, ms.
    pub latencies_ms: Vec<f64>,
    /// Mean over peers of stall time per minute, ms.
    pub stall_per_min_ms: f64,
    /// Mean over peers of carrier bytes per second (up + down).
    pub bytes_per_s: f64,
    /// Mean over peers of bytes per second with IP headers (TCP: from the
    /// namespace's segment count, one hop of two; `NaN` when unknown).
    pub wire_bytes_per_s: f64,
    /// TCP retransmitted segments per peer link per minute (`NaN` for UDP or unknown).
    pub retrans_per_min: f64,
    /// Peers whose match completed.
    pub completed: usize,
    /// Peers.
    pub peers: usize,
    /// Why peers failed.
    pub errors: Vec<String>,
    /// Peers that played every turn but never got the end-of-match message.
    pub end_lost: usize,
}

impl RunFigures {
    /// Pools the peers of one run of `carrier`.
    #[must_use]
    pub fn pool_run(carrier: Carrier, run: &RunOutput) -> Self {
        let peers = &run.peers;
        let n = peers.len().max(1) as f64;
        let mut f = Self::pool(peers);
        let secs = peers.iter().map(|p| p.secs).sum::<f64>() / n;
        match (carrier, run.tcp) {
            (Carrier::Udp, _) => {
                f.wire_bytes_per_s = peers
                    .iter()
                    .map(|p| {
                        p.bytes_per_s()
                            + UDP_IP_HEADER * (p.packets_sent + p.packets_received) as f64
                                / p.secs.max(1e-9)
                    })
                    .sum::<f64>()
                    / n;
            }
            (Carrier::Tcp, Some(t)) if secs > 0.0 => {
                // Every stream crosses two hops (peer-proxy, proxy-relay) of about equal segments;
                // only the first one loses, so retransmissions all belong to it.
                f.wire_bytes_per_s = f.bytes_per_s + TCP_IP_HEADER * t.out as f64 / 2.0 / n / secs;
                f.retrans_per_min = t.retrans as f64 / n / secs * 60.0;
            }
            (Carrier::Tcp, _) => {}
        }
        f
    }

    /// Pools the peers of one run.
    #[must_use]
    pub fn pool(peers: &[PeerFigures]) -> Self {
        let n = peers.len().max(1) as f64;
        Self {
            wire_bytes_per_s: f64::NAN,
            retrans_per_min: f64::NAN,
            latencies_ms: peers
                .iter()
                .flat_map(|p| p.latencies_ms.iter().copied())
                .collect(),
            stall_per_min_ms: peers.iter().map(PeerFigures::stall_per_min_ms).sum::<f64>() / n,
            bytes_per_s: peers.iter().map(PeerFigures::bytes_per_s).sum::<f64>() / n,
            completed: peers.iter().filter(|p| p.completed).count(),
            peers: peers.len(),
            errors: peers
                .iter()
                .filter(|p| !p.completed)
                .filter_map(|p| p.error.clone())
                .collect(),
            end_lost: peers.iter().filter(|p| p.completed && !p.end_seen).count(),
        }
    }
}

/// All runs of one carrier at one loss rate.
#[derive(Clone, Debug, Default)]
pub struct Point {
    /// Loss fraction.
    pub loss: f64,
    /// Carrier.
    pub carrier: Option<Carrier>,
    /// Successful runs.
    pub runs: Vec<RunFigures>,
    /// Failed runs' errors.
    pub errors: Vec<String>,
}

impl Point {
    fn summary(&self, f: impl Fn(&RunFigures) -> f64) -> Option<Summary> {
        let v: Vec<f64> = self.runs.iter().map(f).filter(|x| x.is_finite()).collect();
        Summary::of(&v)
    }
    /// p50 over runs.
    #[must_use]
    pub fn p50(&self) -> Option<Summary> {
        self.summary(|r| percentile(&r.latencies_ms, 50.0))
    }
    /// p99 over runs.
    #[must_use]
    pub fn p99(&self) -> Option<Summary> {
        self.summary(|r| percentile(&r.latencies_ms, 99.0))
    }
    /// Max over runs.
    #[must_use]
    pub fn max(&self) -> Option<Summary> {
        self.summary(|r| r.latencies_ms.iter().copied().fold(f64::NAN, f64::max))
    }
    /// Stall per minute over runs.
    #[must_use]
    pub fn stall(&self) -> Option<Summary> {
        self.summary(|r| r.stall_per_min_ms)
    }
    /// Bytes per second per peer over runs.
    #[must_use]
    pub fn bytes(&self) -> Option<Summary> {
        self.summary(|r| r.bytes_per_s)
    }
    /// Bytes per second per peer with IP headers over runs.
    #[must_use]
    pub fn wire_bytes(&self) -> Option<Summary> {
        self.summary(|r| r.wire_bytes_per_s)
    }
    /// TCP retransmissions per link per minute over runs.
    #[must_use]
    pub fn retrans(&self) -> Option<Summary> {
        self.summary(|r| r.retrans_per_min)
    }
}

/// How the section ran.
#[derive(Debug)]
pub struct NetSection {
    /// Results by loss rate: ours, then TCP.
    pub points: Vec<(Point, Point)>,
    /// Why real loss was unavailable, if it was (then TCP was not run).
    pub fallback: Option<String>,
    /// Turns per run.
    pub turns: u32,
    /// Runs per point.
    pub runs: usize,
}

/// Runs the section: in namespaces when possible, else in-process with
/// proxy-made loss for our transport only.
#[must_use]
pub fn measure(quick: bool) -> NetSection {
    let (turns, runs) = if quick { (80, 2) } else { (300, 5) };
    let fallback = netns::unavailable();
    let mut points: Vec<(Point, Point)> = LOSSES
        .iter()
        .map(|&loss| {
            (
                Point {
                    loss,
                    carrier: Some(Carrier::Udp),
                    ..Point::default()
                },
                Point {
                    loss,
                    carrier: Some(Carrier::Tcp),
                    ..Point::default()
                },
            )
        })
        .collect();
    match &fallback {
        None => {
            if let Err(e) = measure_in_namespaces(turns, runs, &mut points) {
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
            for r in 0..runs {
                replays::err_println!(
                    "[net] run {}/{runs}: udp at every loss rate side by side",
                    r + 1
                );
                // Every loss rate at once, like the namespace runs, to keep --quick quick.
                let handles: Vec<_> = points
                    .iter()
                    .map(|(u, _)| {
                        let s = Scenario {
                            carrier: Carrier::Udp,
                            turns,
                            seed: 1000 + r as u64,
                            delay: standard_delay(),
                            proxy_loss: u.loss,
                            fixed_ports: false,
                        };
                        std::thread::spawn(move || run_scenario(&s))
                    })
                    .collect();
                for ((u, _), h) in points.iter_mut().zip(handles) {
                    match h.join() {
                        Ok(Ok(f)) => u.runs.push(RunFigures::pool_run(
                            Carrier::Udp,
                            &RunOutput {
                                peers: f,
                                tcp: None,
                            },
                        )),
                        Ok(Err(e)) => u.errors.push(e.to_string()),
                        Err(_) => u.errors.push("a run panicked".into()),
                    }
                }
            }
        }
    }
    NetSection {
        points,
        fallback,
        turns,
        runs,
    }
}

fn measure_in_namespaces(
    turns: u32,
    runs: usize,
    points: &mut [(Point, Point)],
) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find own binary: {e}"))?;
    let exe = exe.to_string_lossy().into_owned();
    let mut spaces = Vec::new();
    for (i, (u, _)) in points.iter().enumerate() {
        let ns = Namespace::create(&format!("lsbench-{}-{i}", std::process::id()))?;
        ns.set_loss(u.loss)?;
        spaces.push(ns);
    }
    for r in 0..runs {
        replays::err_println!(
            "[net] run {}/{runs}: {} loss rates × udp+tcp side by side, {turns} turns each, real kernel loss",
            r + 1,
            points.len()
        );
        let seed = (1000 + r).to_string();
        let turns = turns.to_string();
        let mut children = Vec::new();
        for (i, ns) in spaces.iter().enumerate() {
            for carrier in [Carrier::Udp, Carrier::Tcp] {
                let child = ns
                    .exec(
                        &exe,
                        &[
                            "--internal-net-run",
                            carrier.name(),
                            &turns,
                            &seed,
                            "0",
                            "1",
                        ],
                    )
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn();
                children.push((i, carrier, child));
            }
        }
        for (i, carrier, child) in children {
            let point = match carrier {
                Carrier::Udp => &mut points[i].0,
                Carrier::Tcp => &mut points[i].1,
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
                Ok(f) => point.runs.push(RunFigures::pool_run(carrier, &f)),
                Err(e) => {
                    replays::err_println!("[net] {e}");
                    point.errors.push(e);
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
    fn pooling_and_counters() {
        let a = PeerFigures {
            latencies_ms: vec![100.0, 200.0],
            stall_ms: 60.0,
            secs: 60.0,
            bytes_sent: 600,
            bytes_received: 600,
            completed: true,
            ..PeerFigures::default()
        };
        let b = PeerFigures {
            latencies_ms: vec![300.0],
            stall_ms: 0.0,
            ..a.clone()
        };
        let snmp = "Ip: A B\nIp: 1 2\nTcp: RtoAlgorithm OutSegs RetransSegs\nTcp: 1 500 7\n";
        assert_eq!(snmp_counter(snmp, "Tcp", "OutSegs"), Some(500));
        assert_eq!(snmp_counter(snmp, "Tcp", "RetransSegs"), Some(7));
        assert_eq!(snmp_counter(snmp, "Udp", "OutDatagrams"), None);
        let tcp = RunOutput {
            peers: vec![a.clone(), a.clone()],
            tcp: Some(TcpSegments {
                out: 480,
                retrans: 6,
            }),
        };
        let t = RunFigures::pool_run(Carrier::Tcp, &tcp);
        // 20 B/s payload + 52 bytes × 480 / 2 hops / 2 peers / 60 s.
        assert_eq!(t.wire_bytes_per_s, 20.0 + 52.0 * 2.0);
        assert_eq!(t.retrans_per_min, 3.0);
        let r = RunFigures::pool(&[a, b]);
        assert_eq!(r.latencies_ms, vec![100.0, 200.0, 300.0]);
        assert_eq!(r.stall_per_min_ms, 30.0);
        assert_eq!(r.bytes_per_s, 20.0);
        assert_eq!((r.completed, r.peers), (2, 2));
        assert_eq!(Carrier::parse("tcp"), Some(Carrier::Tcp));
        assert_eq!(Carrier::parse("x"), None);
    }

    /// Both carriers play a short match end to end over loopback;
    /// asserts only what does not depend on timing.
    #[test]
    fn both_carriers_play_a_short_match() {
        for carrier in [Carrier::Udp, Carrier::Tcp] {
            let s = Scenario {
                carrier,
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
            assert_eq!(figures.len(), usize::from(PLAYERS));
            for f in &figures {
                assert!(f.completed, "{carrier:?}: {f:?}");
                assert_eq!(f.turns, 20, "{carrier:?}");
                assert!(f.bytes_sent > 0 && f.bytes_received > 0);
                assert!(
                    !f.latencies_ms.is_empty(),
                    "{carrier:?}: bots issued commands"
                );
            }
        }
    }
}
