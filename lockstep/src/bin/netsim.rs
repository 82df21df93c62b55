//! `netsim`: a UDP proxy that adds seeded loss, latency, jitter, duplication,
//! reordering and an optional bandwidth cap between clients and a server, to
//! try any game under a bad network.
//!
//! ```text
//! netsim --listen 127.0.0.1:7000 --upstream 127.0.0.1:7777 \
//!        --loss 0.1 --latency-ms 50 --jitter-ms 20 --dup 0.01 --reorder 0.05 --seed 1
//! ```

use clap::Parser;

// Results on stdout without a panic on a closed pipe (`netsim ... | head`):
// a closed stdout is quiet and leaves the exit status alone, as in the other
// binaries (`replays::stdio`, which this crate does not depend on).
macro_rules! println {
    ($($arg:tt)*) => {
        write_out(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// Writes a result line to stdout; see the `println` macro above.
fn write_out(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            return;
        }
        let _ = writeln!(std::io::stderr(), "netsim: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}
use lockstep::Duration;
use lockstep::netsim::proxy::{Proxy, ProxyConfig, ProxyReport};
use lockstep::netsim::{GilbertElliott, LinkConfig};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;

/// UDP impairment proxy: clients talk to --listen, the proxy forwards to --upstream
/// through a seeded impaired link in each direction (one upstream socket per client).
#[derive(Parser, Debug)]
#[command(name = "netsim", version)]
struct Args {
    /// Address clients send to, e.g. 127.0.0.1:7000 (a host name is resolved, IPv4 first).
    #[arg(long, value_parser = resolve)]
    listen: SocketAddr,
    /// Address of the real server, e.g. 127.0.0.1:7777 or localhost:7777.
    #[arg(long, value_parser = resolve)]
    upstream: SocketAddr,
    /// Independent loss probability per datagram (0..1).
    #[arg(long, default_value_t = 0.0, value_parser = probability)]
    loss: f64,
    /// One-way base latency in milliseconds.
    #[arg(long, default_value_t = 0)]
    latency_ms: u64,
    /// Uniform jitter (±) in milliseconds.
    #[arg(long, default_value_t = 0)]
    jitter_ms: u64,
    /// Duplication probability per datagram (0..1).
    #[arg(long, default_value_t = 0.0, value_parser = probability)]
    dup: f64,
    /// Probability a datagram is held back so later ones overtake it (0..1).
    #[arg(long, default_value_t = 0.0, value_parser = probability)]
    reorder: f64,
    /// Most extra delay of a reordered or duplicated datagram, in milliseconds.
    #[arg(long, default_value_t = 50)]
    reorder_ms: u64,
    /// Bandwidth cap per direction per client, bytes per second.
    #[arg(long)]
    bandwidth: Option<u64>,
    /// Gilbert–Elliott burst loss: per-datagram chance of entering the bad state.
    #[arg(long, value_parser = probability, requires = "burst_leave")]
    burst_enter: Option<f64>,
    /// Gilbert–Elliott burst loss: per-datagram chance of leaving the bad state.
    #[arg(long, value_parser = probability, requires = "burst_enter")]
    burst_leave: Option<f64>,
    /// Seed of all randomness (same seed, same impairment decisions).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Stop after this many seconds and print the counters (default: run until killed).
    #[arg(long)]
    duration_s: Option<f64>,
    /// Print the final counters as JSON.
    #[arg(long)]
    json: bool,
}

/// Resolves an address flag (clap shows the error, naming the text, exit 2).
fn resolve(text: &str) -> Result<SocketAddr, String> {
    lockstep::peer::udp::resolve(text).map_err(|e| e.to_string())
}

fn probability(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("`{s}` is not a number"))?;
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is not a probability between 0 and 1"))
    }
}

fn print_report(r: &ProxyReport, json: bool) {
    if json {
        match serde_json::to_string_pretty(r) {
            Ok(s) => println!("{s}"),
            Err(e) => eprintln!("netsim: cannot encode report: {e}"),
        }
        return;
    }
    println!("clients: {}", r.clients);
    for (name, c) in [("upstream", r.upstream), ("downstream", r.downstream)] {
        println!(
            "{name}: sent {} lost {} ({:.1}%) duplicated {} reordered {} delivered {} mean delay {}",
            c.sent,
            c.lost,
            c.loss_rate() * 100.0,
            c.duplicated,
            c.reordered,
            c.delivered,
            c.mean_delay()
        );
    }
    println!("io errors: {}", r.io_errors);
}

fn main() -> ExitCode {
    let args = Args::parse();
    let duration = match args.duration_s {
        Some(d) if !(d.is_finite() && d > 0.0) => {
            eprintln!("netsim: --duration-s must be a positive number of seconds");
            return ExitCode::from(2);
        }
        Some(d) => Some(std::time::Duration::from_secs_f64(d)),
        None => None,
    };
    let link = LinkConfig {
        latency: Duration::from_millis(args.latency_ms),
        jitter: Duration::from_millis(args.jitter_ms),
        loss: args.loss,
        burst: args
            .burst_enter
            .zip(args.burst_leave)
            .map(|(p_enter_bad, p_leave_bad)| GilbertElliott {
                p_enter_bad,
                p_leave_bad,
                loss_in_bad: 1.0,
            }),
        duplicate: args.dup,
        reorder: args.reorder,
        reorder_delay: Duration::from_millis(args.reorder_ms.max(1)),
        bandwidth: args.bandwidth,
        ..LinkConfig::default()
    };
    let mut cfg = ProxyConfig::new(args.listen, args.upstream, link, args.seed);
    cfg.duration = duration;
    let proxy = match Proxy::bind(cfg) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("netsim: cannot listen on {}: {e}", args.listen);
            return ExitCode::FAILURE;
        }
    };
    match proxy.local_addr() {
        Ok(a) => eprintln!("netsim: {a} -> {} (seed {})", args.upstream, args.seed),
        Err(e) => eprintln!("netsim: listening ({e})"),
    }
    let stop = AtomicBool::new(false);
    match proxy.run(&stop) {
        Ok(report) => {
            print_report(&report, args.json);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("netsim: {e}");
            ExitCode::FAILURE
        }
    }
}
