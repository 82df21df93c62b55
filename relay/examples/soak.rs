//! Soak: many matches of the reference game against one relay process,
//! every peer's link impaired (loss, jitter, duplication), then every replay
//! verified by re-simulation and the relay's memory compared start to end.
//! Not part of the test run; a bounded, documented command:
//!
//! ```text
//! cargo build --release -p lockstep-relay --bins --examples
//! target/release/examples/soak --matches 50 --peers 4 --duration-s 120 \
//!     --loss 0.05 --jitter-ms 20 --dup 0.01
//! ```
//!
//! The relay runs as a separate `relay serve` process (found beside this
//! example's directory, or `--relay-bin`), so its RSS (`/proc/<pid>/status`
//! `VmRSS`) is the relay's alone; the peers are threads of this process.
//! Exit code 0 only if every peer completed without desync, every replay
//! verified, and the relay exited 0 after SIGTERM.

#![allow(clippy::unwrap_used)] // a developer tool: a failure should stop it loudly

use clap::Parser;
use lockstep::Duration;
use lockstep::netsim::LinkConfig;
use lockstep::peer::udp::{PlayOptions, UdpPeer, play};
use lockstep::peer::{PeerBuilder, PeerSummary};
use sim::game::World;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::channel;

#[derive(Parser)]
#[command(about = "Soak a relay with many impaired matches")]
struct Cli {
    /// Matches played at once.
    #[arg(long, default_value_t = 50)]
    matches: u32,
    /// Peers per match.
    #[arg(long, default_value_t = 4)]
    peers: u8,
    /// Game time per match (seconds); turns = duration / turn length.
    #[arg(long, default_value_t = 120)]
    duration_s: u64,
    /// Turn length (ms).
    #[arg(long, default_value_t = 100)]
    turn_ms: u64,
    /// Loss each way on every peer's link.
    #[arg(long, default_value_t = 0.05)]
    loss: f64,
    /// One-way latency (ms).
    #[arg(long, default_value_t = 30)]
    latency_ms: u64,
    /// Jitter (± ms).
    #[arg(long, default_value_t = 20)]
    jitter_ms: u64,
    /// Duplication probability.
    #[arg(long, default_value_t = 0.01)]
    dup: f64,
    /// Bot actions per minute.
    #[arg(long, default_value_t = 120)]
    apm: u32,
    /// The `relay` binary (default: beside this example's directory).
    #[arg(long)]
    relay_bin: Option<PathBuf>,
    /// Where the replays go (default: a fresh temporary directory).
    #[arg(long)]
    record_dir: Option<PathBuf>,
}

fn rss_kb(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn scrape(addr: &str) -> String {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return String::new();
    };
    let _ = write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut r = String::new();
    let _ = s.read_to_string(&mut r);
    r
}

fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let relay_bin = cli.relay_bin.clone().unwrap_or_else(|| {
        let exe = std::env::current_exe().unwrap();
        exe.parent().unwrap().parent().unwrap().join("relay")
    });
    let dir = cli
        .record_dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join(format!("relay-soak-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let turns = u32::try_from(cli.duration_s * 1000 / cli.turn_ms.max(1)).unwrap_or(u32::MAX);

    let mut relay = Command::new(&relay_bin)
        .args([
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--json",
            "--log-level",
            "warn",
        ])
        .args(["--metrics", "127.0.0.1:0", "--grace-s", "10"])
        .args(["--turn-ms", &cli.turn_ms.to_string(), "--record-dir"])
        .arg(&dir)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", relay_bin.display()));
    let (tx, rx) = channel::<serde_json::Value>();
    let out = relay.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str(&line) {
                let _ = tx.send(v);
            }
        }
    });
    let mut relay_addr = None;
    let mut metrics_addr = None;
    while relay_addr.is_none() || metrics_addr.is_none() {
        let v = rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
        match v["event"].as_str() {
            Some("listening") => relay_addr = v["addr"].as_str().map(str::to_owned),
            Some("metrics") => metrics_addr = v["addr"].as_str().map(str::to_owned),
            _ => {}
        }
    }
    let relay_addr: SocketAddr = relay_addr.unwrap().parse().unwrap();
    let metrics_addr = metrics_addr.unwrap();
    let rss_start = rss_kb(relay.id());
    eprintln!(
        "soak: {} matches x {} peers, {turns} turns, loss {} jitter ±{} ms dup {}; relay RSS at start {} kB",
        cli.matches,
        cli.peers,
        cli.loss,
        cli.jitter_ms,
        cli.dup,
        rss_start.unwrap_or(0)
    );
    let started = std::time::Instant::now();
    let impair = LinkConfig {
        latency: Duration::from_millis(cli.latency_ms),
        jitter: Duration::from_millis(cli.jitter_ms),
        loss: cli.loss,
        duplicate: cli.dup,
        ..LinkConfig::default()
    };
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for m in 0..cli.matches {
        for p in 0..cli.peers {
            let seed = u64::from(m) * 100 + u64::from(p) + 1;
            let (name, match_name, players, apm) =
                (format!("m{m}p{p}"), format!("soak{m}"), cli.peers, cli.apm);
            let opts = PlayOptions {
                timeout: Duration::from_secs(cli.duration_s * 3 + 60),
                ..PlayOptions::default()
            };
            let stop = stop.clone();
            handles.push(std::thread::spawn(move || -> Option<PeerSummary> {
                let socket = UdpSocket::bind("127.0.0.1:0").ok()?;
                let builder = PeerBuilder::<World>::new(&match_name, players)
                    .with_name(&name)
                    .with_turns(turns)
                    .with_seed(seed)
                    .with_ticks_per_turn(sim::game::DEFAULT_TICKS_PER_TURN);
                let mut udp = UdpPeer::new(socket, relay_addr, builder)
                    .ok()?
                    .with_impairment(impair, seed);
                let bot = |player| sim::bot::Bot::new(player, seed, apm);
                play(&mut udp, bot, &opts, &stop, |_, _| {}).ok()
            }));
        }
    }
    // Sample the relay's memory about every 10 s while the matches run.
    let mut rss_peak = rss_start.unwrap_or(0);
    let mut rss_mid = Vec::new();
    let mut ticks = 0u64;
    while handles.iter().any(|h| !h.is_finished()) {
        std::thread::sleep(std::time::Duration::from_secs(1));
        ticks += 1;
        if ticks % 10 == 0
            && let Some(r) = rss_kb(relay.id())
        {
            rss_peak = rss_peak.max(r);
            rss_mid.push(r);
        }
    }
    let summaries: Vec<Option<PeerSummary>> = handles
        .into_iter()
        .map(|h| h.join().ok().flatten())
        .collect();
    let rss_end = rss_kb(relay.id());
    let text = scrape(&metrics_addr);
    let _ = Command::new("kill")
        .args(["-TERM", &relay.id().to_string()])
        .status();
    let relay_ok = relay.wait().is_ok_and(|s| s.success());
    let played = started.elapsed().as_secs_f64();

    let completed = summaries
        .iter()
        .filter(|s| s.as_ref().is_some_and(|s| s.completed && s.error.is_none()))
        .count();
    let desyncs: usize = summaries.iter().flatten().map(|s| s.desyncs.len()).sum();
    let stall_ms: f64 = summaries.iter().flatten().map(|s| s.stall_ms).sum();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "lsr"))
        .collect();
    files.sort();
    let mut verified = 0;
    for f in &files {
        let ok = replays::Reader::open(f)
            .ok()
            .and_then(|r| replays::verify::<sim::game::World, _>(r, |_| {}).ok())
            .is_some_and(|rep| {
                rep.first_divergence.is_none() && rep.summary.is_complete() && rep.turns == turns
            });
        if ok {
            verified += 1;
        } else {
            eprintln!("soak: {} did not verify", f.display());
        }
    }
    let peers_total = summaries.len();
    println!(
        "{}",
        serde_json::json!({
            "matches": cli.matches, "peers_per_match": cli.peers, "turns": turns,
            "loss": cli.loss, "latency_ms": cli.latency_ms, "jitter_ms": cli.jitter_ms, "dup": cli.dup,
            "wall_s": (played * 10.0).round() / 10.0,
            "peers_completed": completed, "peers_total": peers_total, "desyncs": desyncs,
            "mean_stall_ms_per_peer": if peers_total > 0 { stall_ms / peers_total as f64 } else { 0.0 },
            "replays": files.len(), "replays_verified": verified,
            "relay_rss_kb": { "start": rss_start, "samples": rss_mid, "peak": rss_peak, "end": rss_end },
            "relay_exit_ok": relay_ok,
            "relay_counters": {
                "packets_in": metric(&text, "relay_packets_in_total"),
                "packets_out": metric(&text, "relay_packets_out_total"),
                "bytes_in": metric(&text, "relay_bytes_in_total"),
                "bytes_out": metric(&text, "relay_bytes_out_total"),
                "desyncs": metric(&text, "relay_desyncs_total"),
                "deadline_closed_turns": metric(&text, "relay_stalls_total{kind=\"deadline_closed\"}"),
                "replayed_dropped": metric(&text, "relay_drops_total{reason=\"replayed\"}"),
                "rate_limited": metric(&text, "relay_drops_total{reason=\"rate_limited_connection\"}")
                    + metric(&text, "relay_drops_total{reason=\"rate_limited_address\"}"),
                "record_errors": metric(&text, "relay_record_errors_total"),
            },
        })
    );
    let all_ok = completed == peers_total
        && desyncs == 0
        && verified == files.len()
        && files.len() == cli.matches as usize
        && relay_ok;
    if cli.record_dir.is_none() && all_ok {
        let _ = std::fs::remove_dir_all(&dir);
    }
    if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
