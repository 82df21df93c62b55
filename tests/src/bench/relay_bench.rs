//! Relay capacity: the relay's real serve loops as their own process
//! (`bench --internal-relay THREADS`) against load generator processes
//! (`bench relay-load`, as many as the machine has cores) playing M
//! concurrent 4-player matches of fake-game peers that speak the real
//! protocol over our UDP transport on 127.0.0.1 (commands at the bot's
//! rate, a deterministic fake hash per turn). M steps up until p99 turn
//! latency exceeds the unloaded value by more than one turn, a peer fails,
//! or a side saturates; for `--threads 1` and `--threads 2`. The echo
//! baseline (`bench --internal-echo`, the same socket code doing nothing
//! else) moves as many datagrams per second as the relay's largest step,
//! for the CPU per datagram the relay is compared with. CPU and RSS come
//! from `/proc`.

use super::benchpeer::{BenchPeerConfig, PeerFigures, Play};
use super::relay_load::EchoLoad;
use super::relay_procs::{
    busiest_second, busiest_steady_second, clock_ticks_per_sec, process_ticks, read_machine_ticks,
    start_worker, stop_worker, wait_sampling,
};
use super::stats::percentile;
use super::udp_loop::run_peers_on_one_loop;
use lockstep::low_level::transport::TransportConfig;
#[cfg(test)]
use relay::RelayConfig;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
#[cfg(test)]
use std::sync::Arc;
#[cfg(test)]
use std::sync::atomic::{AtomicBool, Ordering};

/// Turn length in ms (the relay default).
pub const TURN_MS: f64 = 100.0;
/// Relay CPU (percent of one core) counted as saturated.
pub const CPU_SATURATED: f64 = 90.0;
/// Fake peers submit one command every this many turns (300 APM, like the bench bots).
pub const EVERY: u32 = 2;

fn transport() -> TransportConfig {
    TransportConfig {
        max_connections: 8192,
        ..TransportConfig::default()
    }
}

/// What the load generator measured.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LoadFigures {
    /// Peers run.
    pub peers: usize,
    /// Peers whose match completed.
    pub completed: usize,
    /// Turn latency p50 over all peers' samples, ms.
    pub p50_ms: f64,
    /// Turn latency p99, ms.
    pub p99_ms: f64,
    /// Mean stall per minute, ms.
    pub stall_per_min_ms: f64,
    /// Every latency sample, in whole milliseconds: (ms, count), so that
    /// the figures of several load generator processes pool exactly.
    #[serde(default)]
    pub latency_hist: Vec<(u32, u64)>,
    /// Steady play, in seconds since the load generator began: from the
    /// last of its matches' start to the end of the first one's play
    /// (every match running in between); `None` if a peer never started.
    #[serde(default)]
    pub steady_secs: Option<(f64, f64)>,
}

impl LoadFigures {
    /// Pools the figures of several load generator processes.
    #[must_use]
    pub fn merge(parts: &[Self]) -> Self {
        let mut hist = std::collections::BTreeMap::<u32, u64>::new();
        for p in parts {
            for &(ms, n) in &p.latency_hist {
                *hist.entry(ms).or_default() += n;
            }
        }
        let peers: usize = parts.iter().map(|p| p.peers).sum();
        let pct = |q: f64| {
            let total: u64 = hist.values().sum();
            let want = ((q / 100.0) * total as f64).ceil().max(1.0) as u64;
            let mut seen = 0;
            for (&ms, &n) in &hist {
                seen += n;
                if seen >= want {
                    return f64::from(ms);
                }
            }
            0.0
        };
        Self {
            peers,
            completed: parts.iter().map(|p| p.completed).sum(),
            p50_ms: pct(50.0),
            p99_ms: pct(99.0),
            stall_per_min_ms: parts
                .iter()
                .map(|p| p.stall_per_min_ms * p.peers as f64)
                .sum::<f64>()
                / peers.max(1) as f64,
            latency_hist: hist.into_iter().collect(),
            // The processes start together (within milliseconds), so their
            // windows overlap where every match of every process runs.
            steady_secs: overlap(parts.iter().map(|p| p.steady_secs)),
        }
    }
}

/// Runs `matches` fake 4-player matches against `relay` in this thread,
/// on one event loop (`udp_loop`).
pub fn loadgen(
    relay: SocketAddr,
    matches: usize,
    turns: u32,
    seed: u64,
) -> std::io::Result<LoadFigures> {
    let peers: Vec<(BenchPeerConfig, SocketAddr)> = (0..matches)
        .flat_map(|m| {
            (0..4u64).map(move |i| {
                (
                    BenchPeerConfig {
                        match_name: format!("load-{seed}-{m}"),
                        players: 4,
                        turns,
                        seed: seed ^ ((m as u64) << 4 | i),
                        play: Play::Fake { every: EVERY },
                    },
                    relay,
                )
            })
        })
        .collect();
    let timeout = std::time::Duration::from_millis(u64::from(turns) * 100 + 30_000);
    let figures = run_peers_on_one_loop(peers, transport(), timeout)?;
    Ok(summarise(&figures))
}

/// Pools peers' figures.
#[must_use]
pub fn summarise(figures: &[PeerFigures]) -> LoadFigures {
    let all: Vec<f64> = figures
        .iter()
        .flat_map(|f| f.latencies_ms.iter().copied())
        .collect();
    LoadFigures {
        peers: figures.len(),
        completed: figures.iter().filter(|f| f.completed).count(),
        p50_ms: percentile(&all, 50.0),
        p99_ms: percentile(&all, 99.0),
        stall_per_min_ms: figures
            .iter()
            .map(PeerFigures::stall_per_min_ms)
            .sum::<f64>()
            / figures.len().max(1) as f64,
        latency_hist: {
            let mut h = std::collections::BTreeMap::<u32, u64>::new();
            for &l in &all {
                *h.entry(l.round() as u32).or_default() += 1;
            }
            h.into_iter().collect()
        },
        steady_secs: overlap(
            figures
                .iter()
                .map(|f| f.started_at_secs.map(|start| (start, start + f.secs))),
        ),
    }
}

/// Where every one of `windows` (seconds, from and to) runs at once;
/// `None` if any is missing. Peers' play windows make a load generator's
/// steady play, and the processes' steady windows the step's.
fn overlap(mut windows: impl Iterator<Item = Option<(f64, f64)>>) -> Option<(f64, f64)> {
    windows.try_fold((0.0f64, f64::INFINITY), |(a, b), w| {
        w.map(|(from, to)| (a.max(from), b.min(to)))
    })
}

/// One load step.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Step {
    /// Relay event loops (`relay serve --threads`).
    pub threads: usize,
    /// Concurrent matches.
    pub matches: usize,
    /// Load generator processes.
    pub procs: usize,
    /// What the load generators measured, pooled.
    pub load: LoadFigures,
    /// Relay CPU, percent of one core, over the run (joins included).
    pub relay_cpu: f64,
    /// Relay CPU over its busiest second of the run, joins included (the
    /// thousands of handshakes of a step's first second).
    pub relay_cpu_peak: f64,
    /// Relay CPU over its busiest second of steady play (every match
    /// running, no handshakes): what the per-core figure is planned with;
    /// `None` when steady play lasted under a second (a step that failed).
    pub relay_cpu_steady: Option<f64>,
    /// Load generator CPU, percent of one core, all processes together.
    pub loadgen_cpu: f64,
    /// The whole machine's CPU over the run, percent of one core (up to
    /// 100 × cores): the relay, the load generators and any other work.
    pub machine_cpu: f64,
    /// Datagrams per second into the relay.
    pub pps_in: f64,
    /// Datagrams per second out of the relay.
    pub pps_out: f64,
    /// The relay's peak RSS, KiB.
    pub peak_rss_kib: u64,
    /// Wall time of the run, seconds.
    pub secs: f64,
}

impl Step {
    /// Relay CPU per datagram moved (in + out), ns.
    #[must_use]
    pub fn relay_ns_per_datagram(&self) -> f64 {
        self.relay_cpu / 100.0 * 1e9 / (self.pps_in + self.pps_out).max(1e-9)
    }
}

fn run_step(
    exe: &str,
    threads: usize,
    matches: usize,
    turns: u32,
    seed: u64,
    procs: usize,
) -> Result<Step, String> {
    let relay = start_worker(exe, "--internal-relay", threads)?;
    let procs = procs.clamp(1, matches.max(1));
    let result = (|| {
        let t0 = std::time::Instant::now();
        let r0 = process_ticks(relay.pid).ok_or("cannot read the relay's /proc stat")?;
        let m0 = read_machine_ticks();
        let mut children = Vec::with_capacity(procs);
        for i in 0..procs {
            let share = matches / procs + usize::from(i < matches % procs);
            children.push(
                Command::new(exe)
                    .args(["relay-load", "--relay", &relay.addr])
                    .args([
                        "--matches",
                        &share.to_string(),
                        "--turns",
                        &turns.to_string(),
                    ])
                    .args(["--seed", &(seed * 1000 + i as u64).to_string()])
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|e| format!("cannot start a load generator: {e}"))?,
            );
        }
        let (outs, g_ticks, watched) = wait_sampling(children, relay.pid)?;
        let secs = t0.elapsed().as_secs_f64();
        let r1 = process_ticks(relay.pid).ok_or("cannot read the relay's /proc stat")?;
        let machine = match (m0, read_machine_ticks()) {
            (Some((b0, t0)), Some((b1, t1))) if t1 > t0 => {
                let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
                (b1 - b0) as f64 / (t1 - t0) as f64 * 100.0 * cores as f64
            }
            _ => 0.0,
        };
        let mut parts = Vec::with_capacity(outs.len());
        for out in outs {
            if !out.status.success() {
                return Err(format!(
                    "load generator exited with {}: {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            parts.push(
                serde_json::from_slice::<LoadFigures>(&out.stdout).map_err(|e| e.to_string())?,
            );
        }
        let hz = clock_ticks_per_sec();
        let load = LoadFigures::merge(&parts);
        let steady = load
            .steady_secs
            .and_then(|window| busiest_steady_second(&watched, t0, window));
        Ok::<_, String>((
            load,
            (r1 - r0) as f64 / hz / secs * 100.0,
            g_ticks as f64 / hz / secs * 100.0,
            machine,
            secs,
            busiest_second(&watched),
            steady,
        ))
    })();
    let counters = stop_worker(relay);
    let (load, relay_cpu, loadgen_cpu, machine_cpu, secs, relay_cpu_peak, relay_cpu_steady) =
        result?;
    let counters = counters?;
    Ok(Step {
        threads,
        matches,
        procs,
        load,
        relay_cpu,
        relay_cpu_peak,
        relay_cpu_steady,
        loadgen_cpu,
        machine_cpu,
        pps_in: counters.packets_in as f64 / secs,
        pps_out: counters.packets_out as f64 / secs,
        peak_rss_kib: counters.peak_rss_kib,
        secs,
    })
}

/// The echo baseline at one rate.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Echo {
    /// Event loops (sockets, threads) of the echo server.
    pub threads: usize,
    /// Datagrams moved per second (in + out).
    pub pps: f64,
    /// Echo server CPU, percent of one core.
    pub cpu: f64,
    /// Echo server CPU per datagram moved, ns.
    pub ns_per_datagram: f64,
}

/// Runs the echo server with `threads` loops while `sockets` sockets send
/// it `pps_total / 2` datagrams a second of `size` bytes for `secs`.
fn run_echo(
    exe: &str,
    threads: usize,
    pps_total: f64,
    sockets: usize,
    size: usize,
    secs: f64,
) -> Result<Echo, String> {
    let echo = start_worker(exe, "--internal-echo", threads)?;
    let result = (|| {
        let t0 = std::time::Instant::now();
        let r0 = process_ticks(echo.pid).ok_or("cannot read the echo server's /proc stat")?;
        let child = Command::new(exe)
            .args(["echo-load", "--target", &echo.addr])
            .args(["--sockets", &sockets.to_string()])
            .args(["--pps", &((pps_total / 2.0) as u64).to_string()])
            .args(["--secs", &secs.to_string(), "--size", &size.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start echo-load: {e}"))?;
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        let wall = t0.elapsed().as_secs_f64();
        let r1 = process_ticks(echo.pid).ok_or("cannot read the echo server's /proc stat")?;
        let _: EchoLoad = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
        Ok::<_, String>(((r1 - r0) as f64 / clock_ticks_per_sec(), wall))
    })();
    let counters = stop_worker(echo);
    let (cpu_secs, wall) = result?;
    let c = counters?;
    let moved = (c.packets_in + c.packets_out) as f64;
    Ok(Echo {
        threads,
        pps: moved / wall,
        cpu: cpu_secs / wall * 100.0,
        ns_per_datagram: cpu_secs * 1e9 / moved.max(1.0),
    })
}

/// One ladder of steps for one thread count.
#[derive(Debug, Default)]
pub struct Ladder {
    /// Relay event loops.
    pub threads: usize,
    /// Every step run, in order.
    pub steps: Vec<Step>,
    /// The largest step that held.
    pub held: Option<Step>,
    /// Why stepping stopped.
    pub stopped: String,
    /// The echo baseline at the largest held step's datagram rate.
    pub echo: Option<Echo>,
}

/// The section's results.
#[derive(Debug, Default)]
pub struct Capacity {
    /// One ladder per thread count.
    pub ladders: Vec<Ladder>,
    /// Turns per step.
    pub turns: u32,
    /// Load generator processes per step.
    pub procs: usize,
    /// Cores of the machine.
    pub cores: usize,
    /// The 1-minute load average when the section started (other work on the machine).
    pub load_average: Option<f64>,
    /// The relay's CPU per datagram by stage, in process (`hotpath`), at a
    /// few match counts: what the protocol costs without the kernel's part.
    pub stages: Vec<super::hotpath::Stages>,
}

impl Capacity {
    /// Why the section measured nothing for some thread count (no step
    /// held: a worker could not start, or even one match failed), if so:
    /// the run must then fail rather than print an empty table.
    #[must_use]
    pub fn unmeasured(&self) -> Option<String> {
        if self.ladders.is_empty() {
            return Some("no ladder ran".into());
        }
        let failed: Vec<String> = self
            .ladders
            .iter()
            .filter(|l| l.held.is_none())
            .map(|l| format!("--threads {}: {}", l.threads, l.stopped))
            .collect();
        (!failed.is_empty()).then(|| failed.join("; "))
    }
}

/// Whether `step` holds against the unloaded p99.
pub fn holds(step: &Step, unloaded_p99: f64) -> Result<(), String> {
    if step.load.completed < step.load.peers {
        return Err(format!(
            "{} of {} peers did not complete",
            step.load.peers - step.load.completed,
            step.load.peers
        ));
    }
    if step.load.p99_ms > unloaded_p99 + TURN_MS {
        return Err(format!(
            "p99 {:.0} ms exceeds the unloaded {:.0} ms by more than one turn",
            step.load.p99_ms, unloaded_p99
        ));
    }
    if step.relay_cpu >= CPU_SATURATED * step.threads.max(1) as f64 {
        return Err(format!(
            "relay CPU saturated ({:.0} % of {} core(s))",
            step.relay_cpu, step.threads
        ));
    }
    Ok(())
}

/// Which side ran out of CPU at `step`, if any: the relay (its threads'
/// cores), the load generators (theirs), or the machine (both together).
#[must_use]
pub fn saturated(step: &Step, cores: usize) -> Option<String> {
    let full = |n: usize| CPU_SATURATED * n.max(1) as f64;
    if step.relay_cpu_peak.max(step.relay_cpu) >= full(step.threads) {
        Some(format!("the relay saturated its {} core(s)", step.threads))
    } else if step.loadgen_cpu >= full(step.procs) {
        Some(format!(
            "the load generators saturated their {} core(s), so the relay's own limit is higher",
            step.procs
        ))
    } else if step.relay_cpu + step.loadgen_cpu >= full(cores) {
        Some(format!(
            "the machine's {cores} cores saturated (relay {:.0} % + load generators {:.0} %), so the relay's own limit is higher",
            step.relay_cpu, step.loadgen_cpu
        ))
    } else {
        None
    }
}

/// Whether other work filled the machine's cores during `step` (neither
/// side did): said beside a step that did not hold, since its late turns
/// then tell nothing about the relay's own limit. A step that held under
/// such load simply held.
#[must_use]
pub fn busy_with_other_work(step: &Step, cores: usize) -> Option<String> {
    (step.machine_cpu >= CPU_SATURATED * cores.max(1) as f64).then(|| {
        format!(
            "the machine's {cores} cores were saturated by other work (relay {:.0} % + load \
             generators {:.0} % of {:.0} % busy), so neither side reached its own limit",
            step.relay_cpu, step.loadgen_cpu, step.machine_cpu
        )
    })
}

fn ladder(
    exe: &str,
    threads: usize,
    turns: u32,
    rungs: &[usize],
    procs: usize,
    cores: usize,
) -> Ladder {
    let mut lad = Ladder {
        threads,
        ..Ladder::default()
    };
    let mut unloaded = None;
    for (i, &m) in rungs.iter().enumerate() {
        replays::err_println!(
            "[relay] --threads {threads}: {m} concurrent 4-player matches, {turns} turns, {procs} load generator process(es)"
        );
        let seed = 7 + i as u64 + 50 * threads as u64;
        let step = match run_step(exe, threads, m, turns, seed, procs) {
            Ok(s) => s,
            Err(e) => {
                lad.stopped = format!("step of {m} matches failed: {e}");
                break;
            }
        };
        let base = *unloaded.get_or_insert(step.load.p99_ms);
        let mut verdict = holds(&step, base);
        let mut step = step;
        if verdict.is_err() && i > 0 {
            // Other work on a shared machine causes spikes: a step must fail twice.
            replays::err_println!("[relay] {m} matches did not hold; running it once more");
            if let Ok(again) = run_step(exe, threads, m, turns, seed + 100, procs) {
                lad.steps.push(step);
                verdict = holds(&again, base);
                step = again;
            }
        }
        lad.steps.push(step.clone());
        match verdict {
            Ok(()) => {
                let side = saturated(&step, cores);
                lad.held = Some(step);
                if let Some(side) = side {
                    lad.stopped = format!("stopped at {m} matches: {side}");
                    break;
                }
            }
            Err(why) => {
                // Say also when the cores were busy: a late turn then
                // tells nothing about the relay's own limit.
                lad.stopped =
                    match saturated(&step, cores).or_else(|| busy_with_other_work(&step, cores)) {
                        Some(side) => format!("stopped at {m} matches: {why}; {side}"),
                        None => format!("stopped at {m} matches: {why}"),
                    };
                break;
            }
        }
    }
    if lad.stopped.is_empty() {
        lad.stopped = "every step held (the ladder's largest step is a lower bound)".into();
    }
    if let Some(h) = &lad.held {
        replays::err_println!(
            "[relay] --threads {threads}: echo baseline at {:.0} datagrams/s",
            h.pps_in + h.pps_out
        );
        let sockets = (h.load.peers).clamp(1, 1024);
        match run_echo(exe, threads, h.pps_in + h.pps_out, sockets, 60, 4.0) {
            Ok(e) => lad.echo = Some(e),
            Err(e) => replays::err_println!("[relay] echo baseline failed: {e}"),
        }
    }
    lad
}

/// Steps the load up, with one relay event loop and with two.
#[must_use]
pub fn measure(quick: bool) -> Capacity {
    let (turns, rungs): (u32, &[usize]) = if quick {
        (40, &[1, 256, 512, 768, 1024, 1536, 2048])
    } else {
        (150, &[1, 128, 256, 512, 768, 1024, 1536, 2048, 3072, 4096])
    };
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let mut cap = Capacity {
        turns,
        procs: cores,
        cores,
        load_average: std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok()),
        ..Capacity::default()
    };
    let exe = match std::env::current_exe() {
        Ok(p) => p.to_string_lossy().into_owned(),
        Err(e) => {
            cap.ladders.push(Ladder {
                stopped: format!("cannot find own binary: {e}"),
                ..Ladder::default()
            });
            return cap;
        }
    };
    for m in [64, 512] {
        replays::err_println!("[relay] CPU per datagram by stage, in process: {m} matches");
        cap.stages.push(super::hotpath::measure(
            m,
            turns,
            7,
            super::hotpath::Auth::Open,
        ));
    }
    for threads in [1, 2] {
        cap.ladders
            .push(ladder(&exe, threads, turns, rungs, cores, cores));
    }
    cap
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each peer's start and play length give the window where every match
    /// of a load generator runs; processes' windows intersect.
    #[test]
    fn steady_play_runs_from_the_last_start_to_the_first_end() {
        let peer = |start: Option<f64>, secs: f64| PeerFigures {
            started_at_secs: start,
            secs,
            ..PeerFigures::default()
        };
        let a = summarise(&[peer(Some(0.5), 4.0), peer(Some(1.5), 4.0)]);
        assert_eq!(a.steady_secs, Some((1.5, 4.5)));
        let b = summarise(&[peer(Some(1.0), 3.0)]);
        assert_eq!(
            LoadFigures::merge(&[a.clone(), b]).steady_secs,
            Some((1.5, 4.0))
        );
        let never = summarise(&[peer(Some(0.5), 4.0), peer(None, 0.0)]);
        assert_eq!(never.steady_secs, None, "a peer that never started");
        assert_eq!(LoadFigures::merge(&[a, never]).steady_secs, None);
    }

    #[test]
    fn a_step_holds_only_within_one_turn_and_with_every_peer_done() {
        let mut s = Step {
            threads: 1,
            matches: 2,
            load: LoadFigures {
                peers: 8,
                completed: 8,
                p99_ms: 390.0,
                ..LoadFigures::default()
            },
            relay_cpu: 40.0,
            ..Step::default()
        };
        assert!(holds(&s, 300.0).is_ok());
        s.load.p99_ms = 401.0;
        assert!(holds(&s, 300.0).is_err());
        s.load.p99_ms = 300.0;
        s.relay_cpu = 95.0;
        assert!(holds(&s, 300.0).is_err());
        s.relay_cpu = 10.0;
        s.load.completed = 7;
        assert!(holds(&s, 300.0).is_err());
    }

    /// Three fake matches against the real serve loops (two threads) in
    /// process: every peer completes and measures latency (no timing asserted).
    #[test]
    fn load_generator_plays_fake_matches_against_two_event_loops() {
        use relay::metrics::{Metric, Metrics};
        let sockets = relay::serve::bind_reuseport(([127, 0, 0, 1], 0).into(), 2).unwrap();
        let addr = sockets[0].local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let metrics = Arc::new(Metrics::new().with_loops(2));
        let relay = {
            let (stop, metrics) = (Arc::clone(&stop), Arc::clone(&metrics));
            std::thread::spawn(move || {
                let opts = relay::udp::ServeOptions {
                    stop: &stop,
                    handover: None,
                    grace: lockstep::Duration::ZERO,
                    metrics: Some(metrics),
                    auth: lockstep::low_level::transport::AuthMode::Open,
                    home_key: None,
                    max_memory: relay::limits::DEFAULT_MAX_MEMORY_BYTES,
                };
                relay::serve::serve_loops(
                    sockets,
                    RelayConfig::default(),
                    transport(),
                    Vec::new(),
                    &opts,
                    &|_| {},
                )
            })
        };
        let f = loadgen(addr, 3, 20, 3).unwrap();
        stop.store(true, Ordering::Relaxed);
        relay.join().unwrap().unwrap();
        assert_eq!((f.peers, f.completed), (12, 12));
        assert!(f.p99_ms >= f.p50_ms && f.p50_ms > 0.0);
        assert_eq!(metrics.get(Metric::MatchesEnded), 3);
        assert!(metrics.get(Metric::PacketsIn) > 0 && metrics.get(Metric::PacketsOut) > 0);
    }

    /// A worker that cannot start leaves a ladder without a held step:
    /// the section reports it as unmeasured (the run then fails) instead
    /// of an empty table.
    #[test]
    fn a_ladder_that_held_no_step_makes_the_section_unmeasured() {
        let exe = "/nonexistent/bench-worker";
        let lad = ladder(exe, 1, 10, &[1], 1, 2);
        assert!(lad.held.is_none() && lad.steps.is_empty(), "{lad:?}");
        assert!(lad.stopped.contains("cannot start"), "{}", lad.stopped);
        let mut cap = Capacity {
            ladders: vec![lad],
            ..Capacity::default()
        };
        let why = cap.unmeasured().unwrap();
        assert!(
            why.contains("--threads 1") && why.contains("cannot start"),
            "{why}"
        );
        cap.ladders[0].held = Some(Step::default());
        assert_eq!(cap.unmeasured(), None);
        assert!(Capacity::default().unmeasured().is_some());
    }

    #[test]
    fn pooled_figures_take_percentiles_over_every_process_sample() {
        let part = |samples: &[u32]| {
            let mut h = std::collections::BTreeMap::<u32, u64>::new();
            for &s in samples {
                *h.entry(s).or_default() += 1;
            }
            LoadFigures {
                peers: 4,
                completed: 4,
                latency_hist: h.into_iter().collect(),
                ..LoadFigures::default()
            }
        };
        let a = part(&[300; 99]);
        let b = part(&[500]);
        let m = LoadFigures::merge(&[a, b]);
        assert_eq!((m.peers, m.completed), (8, 8));
        assert_eq!((m.p50_ms, m.p99_ms), (300.0, 300.0));
        let m = LoadFigures::merge(&[part(&[300; 98]), part(&[500, 500])]);
        assert_eq!(m.p99_ms, 500.0);
    }

    #[test]
    fn the_side_that_saturated_is_named() {
        let s = |relay_cpu, loadgen_cpu| Step {
            threads: 2,
            procs: 2,
            relay_cpu,
            loadgen_cpu,
            ..Step::default()
        };
        assert!(saturated(&s(185.0, 10.0), 2).unwrap().contains("relay"));
        assert!(
            saturated(&s(50.0, 181.0), 2)
                .unwrap()
                .contains("load generators")
        );
        assert!(saturated(&s(100.0, 90.0), 2).unwrap().contains("machine"));
        assert_eq!(saturated(&s(100.0, 40.0), 2), None);
        let busy = Step {
            machine_cpu: 195.0,
            ..s(30.0, 35.0)
        };
        assert_eq!(saturated(&busy, 2), None, "a step that held goes on");
        assert!(
            busy_with_other_work(&busy, 2)
                .unwrap()
                .contains("other work")
        );
        assert_eq!(busy_with_other_work(&s(30.0, 35.0), 2), None);
    }
}
