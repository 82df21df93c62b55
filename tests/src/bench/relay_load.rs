//! The relay capacity bench's worker processes. Each prints one JSON line
//! on stdout and runs as its own process, so the load can be spread over
//! as many processes (and cores, or machines) as it takes for the load
//! generator never to be the bottleneck:
//!
//! - `bench relay-load --relay ADDR --matches M --turns T --seed S`: plays
//!   M fake 4-player matches against a relay, prints [`LoadFigures`](super::relay_bench::LoadFigures);
//! - `bench echo-load --target ADDR --sockets K --pps P --secs S --size B`:
//!   sends P datagrams/s of B bytes from K sockets to an echo server and
//!   counts the echoes, prints [`EchoLoad`];
//! - `bench --internal-relay THREADS` / `bench --internal-echo THREADS`:
//!   the relay's real serve loops (or the echo baseline on the same socket
//!   code) on a free loopback port; print the address, serve until stdin
//!   closes, then print their datagram counts and peak RSS.

use super::relay_bench::loadgen;
use relay::RelayConfig;
use relay::metrics::{Metric, Metrics};
use relay::udp::ServeOptions;
use std::io::Read;
use std::net::{SocketAddr, UdpSocket};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// What a relay or echo worker moved, printed when it stops.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WorkerCounters {
    /// Datagrams received.
    pub packets_in: u64,
    /// Datagrams sent.
    pub packets_out: u64,
    /// Peak resident set size, KiB (`VmHWM`).
    pub peak_rss_kib: u64,
}

/// What `echo-load` measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EchoLoad {
    /// Datagrams sent.
    pub sent: u64,
    /// Echoes received.
    pub received: u64,
}

/// The value after `--name` in `args`.
fn flag<T: std::str::FromStr>(args: &[String], name: &str) -> Option<T> {
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1)?.parse().ok()
}

/// The address after `--name` in `args`: `HOST:PORT`, a host name
/// resolved (IPv4 first); one that does not resolve is said on stderr.
fn addr_flag(args: &[String], name: &str) -> Option<SocketAddr> {
    let i = args.iter().position(|a| a == name)?;
    let text = args.get(i + 1)?;
    lockstep::peer::udp::resolve(text)
        .map_err(|e| replays::err_println!("bench: {name}: {e}"))
        .ok()
}

/// `bench relay-load --relay ADDR --matches M --turns T --seed S`.
#[must_use]
pub fn relay_load_main(args: &[String]) -> ExitCode {
    let parsed = (|| {
        Some((
            addr_flag(args, "--relay")?,
            flag::<usize>(args, "--matches")?,
            flag::<u32>(args, "--turns")?,
            flag::<u64>(args, "--seed")?,
        ))
    })();
    let Some((relay, matches, turns, seed)) = parsed else {
        replays::err_println!(
            "usage: bench relay-load --relay ADDR --matches M --turns T --seed S"
        );
        return ExitCode::from(2);
    };
    match loadgen(relay, matches, turns, seed) {
        Ok(f) => {
            replays::out_println!("{}", serde_json::to_string(&f).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Err(e) => {
            replays::err_println!("error: load generator failed: {e}");
            ExitCode::from(1)
        }
    }
}

/// `bench echo-load --target ADDR --sockets K --pps P --secs S --size B`.
#[must_use]
pub fn echo_load_main(args: &[String]) -> ExitCode {
    let parsed = (|| {
        Some((
            addr_flag(args, "--target")?,
            flag::<usize>(args, "--sockets")?,
            flag::<u64>(args, "--pps")?,
            flag::<f64>(args, "--secs")?,
            flag::<usize>(args, "--size")?,
        ))
    })();
    let Some((target, sockets, pps, secs, size)) = parsed else {
        replays::err_println!(
            "usage: bench echo-load --target ADDR --sockets K --pps P --secs S --size B"
        );
        return ExitCode::from(2);
    };
    match echo_load(target, sockets.max(1), pps, secs, size) {
        Ok(f) => {
            replays::out_println!("{}", serde_json::to_string(&f).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Err(e) => {
            replays::err_println!("error: echo load failed: {e}");
            ExitCode::from(1)
        }
    }
}

/// Paced sends from `sockets` sockets (one reader thread each, blocked in
/// `recv` like the load generator's peers), `pps` datagrams a second.
///
/// # Errors
/// A socket error.
pub fn echo_load(
    target: SocketAddr,
    sockets: usize,
    pps: u64,
    secs: f64,
    size: usize,
) -> std::io::Result<EchoLoad> {
    let stop = Arc::new(AtomicBool::new(false));
    let received = Arc::new(AtomicU64::new(0));
    let mut socks = Vec::with_capacity(sockets);
    let mut readers = Vec::with_capacity(sockets);
    for _ in 0..sockets {
        let s = UdpSocket::bind(("127.0.0.1", 0))?;
        s.set_read_timeout(Some(std::time::Duration::from_millis(50)))?;
        let r = s.try_clone()?;
        let (stop, received) = (Arc::clone(&stop), Arc::clone(&received));
        readers.push(
            std::thread::Builder::new()
                .stack_size(128 * 1024)
                .spawn(move || {
                    let mut buf = [0u8; 2048];
                    while !stop.load(Ordering::Relaxed) {
                        if r.recv(&mut buf).is_ok() {
                            received.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })?,
        );
        socks.push(s);
    }
    let payload = vec![0x5a_u8; size];
    let start = std::time::Instant::now();
    let mut sent = 0u64;
    let total = (pps as f64 * secs) as u64;
    while sent < total {
        // Pace by the clock: send what is due, then sleep a millisecond.
        let due = ((start.elapsed().as_secs_f64() * pps as f64) as u64).min(total);
        while sent < due {
            let s = &socks[(sent as usize) % sockets];
            if s.send_to(&payload, target).is_ok() {
                sent += 1;
            } else {
                break;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    // Let the last echoes arrive.
    std::thread::sleep(std::time::Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        let _ = r.join();
    }
    Ok(EchoLoad {
        sent,
        received: received.load(Ordering::Relaxed),
    })
}

/// Binds `threads` sockets on one free loopback port.
fn bind(threads: usize) -> std::io::Result<(Vec<UdpSocket>, SocketAddr)> {
    let sockets = if threads <= 1 {
        vec![UdpSocket::bind(("127.0.0.1", 0))?]
    } else {
        relay::serve::bind_reuseport(SocketAddr::from(([127, 0, 0, 1], 0)), threads)?
    };
    let addr = sockets
        .first()
        .ok_or_else(|| std::io::Error::other("no socket"))?
        .local_addr()?;
    Ok((sockets, addr))
}

/// A flag set when stdin closes (the parent's way to stop a worker).
fn stop_on_stdin_close() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = Arc::clone(&stop);
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
        stop2.store(true, Ordering::Relaxed);
    });
    stop
}

/// Peak RSS of this process in KiB (`VmHWM` in `/proc/self/status`).
#[must_use]
pub fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| crate::harness::status_field_kib(&s, "VmHWM"))
        .unwrap_or(0)
}

/// `--internal-relay THREADS`: `relay::serve::serve_loops` with THREADS loops.
#[must_use]
pub fn relay_worker_main(args: &[String]) -> ExitCode {
    let threads = args.first().and_then(|a| a.parse().ok()).unwrap_or(1usize);
    let (sockets, addr) = match bind(threads) {
        Ok(x) => x,
        Err(e) => {
            replays::err_println!("error: relay cannot bind: {e}");
            return ExitCode::from(1);
        }
    };
    replays::out_println!("{addr}");
    let stop = stop_on_stdin_close();
    let metrics = Arc::new(Metrics::new().with_loops(threads));
    let opts = ServeOptions {
        stop: &stop,
        handover: None,
        grace: lockstep::Duration::ZERO,
        metrics: Some(Arc::clone(&metrics)),
        auth: lockstep::low_level::transport::AuthMode::Open,
        home_key: None,
        max_memory: relay::limits::DEFAULT_MAX_MEMORY_BYTES,
    };
    let config = RelayConfig {
        limits: relay::Limits {
            max_matches: 8192,
            max_connections: 32_768,
            // Every load generator runs on this host: one host is the
            // whole load here, not a hostile share of it.
            max_connections_per_host: usize::MAX,
            ..relay::Limits::default()
        },
        ..RelayConfig::default()
    };
    // The transport `relay serve` gives its relay (its acks ride on bundles).
    let transport = config.server_transport(lockstep::low_level::transport::TransportConfig {
        max_connections: 8192,
        ..lockstep::low_level::transport::TransportConfig::default()
    });
    let r = relay::serve::serve_loops(sockets, config, transport, Vec::new(), &opts, &|_| {});
    if let Err(e) = r {
        replays::err_println!("error: relay failed: {e}");
        return ExitCode::from(1);
    }
    let c = WorkerCounters {
        packets_in: metrics.get(Metric::PacketsIn),
        packets_out: metrics.get(Metric::PacketsOut),
        peak_rss_kib: peak_rss_kib(),
    };
    replays::out_println!("{}", serde_json::to_string(&c).unwrap_or_default());
    ExitCode::SUCCESS
}

/// `--internal-echo THREADS`: `relay::serve::serve_echo` on THREADS sockets.
#[must_use]
pub fn echo_worker_main(args: &[String]) -> ExitCode {
    let threads = args.first().and_then(|a| a.parse().ok()).unwrap_or(1usize);
    let (sockets, addr) = match bind(threads) {
        Ok(x) => x,
        Err(e) => {
            replays::err_println!("error: echo cannot bind: {e}");
            return ExitCode::from(1);
        }
    };
    replays::out_println!("{addr}");
    let stop = stop_on_stdin_close();
    match relay::serve::serve_echo(sockets, &stop) {
        Ok(c) => {
            let c = WorkerCounters {
                packets_in: c.packets_in,
                packets_out: c.packets_out,
                peak_rss_kib: peak_rss_kib(),
            };
            replays::out_println!("{}", serde_json::to_string(&c).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Err(e) => {
            replays::err_println!("error: echo failed: {e}");
            ExitCode::from(1)
        }
    }
}
