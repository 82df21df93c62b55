//! The impairment model on real UDP: a proxy that listens on one address,
//! gives every client its own upstream socket (so several peers can share
//! one proxy and the server still tells them apart), and passes datagrams
//! through a seeded [`Link`] per direction. Used by the `netsim` binary and
//! in-process by demos and end-to-end tests.

use super::{Link, LinkConfig, LinkCounters};
use crate::time::Instant;
use std::collections::BTreeMap;
use std::io::{self, ErrorKind};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};

/// What the proxy does.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProxyConfig {
    /// Address clients send to.
    pub listen: SocketAddr,
    /// Address of the real server.
    pub upstream: SocketAddr,
    /// Impairments applied in both directions.
    pub link: LinkConfig,
    /// Seed of every link's randomness.
    pub seed: u64,
    /// Stop after this long (`None`: until the stop flag is set).
    pub duration: Option<std::time::Duration>,
    /// Forget a client (and close its upstream socket) after this much silence.
    pub idle_timeout: std::time::Duration,
}

impl ProxyConfig {
    /// A proxy from `listen` to `upstream` with `link` impairments.
    #[must_use]
    pub fn new(listen: SocketAddr, upstream: SocketAddr, link: LinkConfig, seed: u64) -> Self {
        Self {
            listen,
            upstream,
            link,
            seed,
            duration: None,
            idle_timeout: std::time::Duration::from_secs(60),
        }
    }
}

/// Counters reported when the proxy stops.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ProxyReport {
    /// Distinct client addresses seen.
    pub clients: u64,
    /// Client → server direction, summed over clients.
    pub upstream: LinkCounters,
    /// Server → client direction, summed over clients.
    pub downstream: LinkCounters,
    /// Socket errors other than "would block".
    pub io_errors: u64,
}

fn add(a: &mut LinkCounters, b: LinkCounters) {
    a.sent += b.sent;
    a.lost += b.lost;
    a.duplicated += b.duplicated;
    a.reordered += b.reordered;
    a.delivered += b.delivered;
    a.delay_sum_us += b.delay_sum_us;
}

struct Peer {
    socket: UdpSocket,
    up: Link,
    down: Link,
    last_seen: Instant,
}

/// A bound proxy, ready to run.
pub struct Proxy {
    cfg: ProxyConfig,
    listen: UdpSocket,
}

fn mix(seed: u64, addr: SocketAddr, dir: u8) -> u64 {
    let h = blake3::hash(format!("{seed}/{addr}/{dir}").as_bytes());
    let mut b = [0u8; 8];
    b.copy_from_slice(&h.as_bytes()[..8]);
    u64::from_le_bytes(b)
}

impl Proxy {
    /// Binds the listening socket (port 0 picks a free port; see [`Proxy::local_addr`]).
    pub fn bind(cfg: ProxyConfig) -> io::Result<Self> {
        let listen = UdpSocket::bind(cfg.listen)?;
        listen.set_nonblocking(true)?;
        Ok(Self { cfg, listen })
    }

    /// The address clients should send to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listen.local_addr()
    }

    fn upstream_socket(&self) -> io::Result<UdpSocket> {
        let ip: IpAddr = match self.cfg.upstream {
            SocketAddr::V4(a) if a.ip().is_loopback() => Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
            SocketAddr::V6(a) if a.ip().is_loopback() => Ipv6Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
        };
        let s = UdpSocket::bind(SocketAddr::new(ip, 0))?;
        s.connect(self.cfg.upstream)?;
        s.set_nonblocking(true)?;
        Ok(s)
    }

    /// Forwards until `stop` is set or the configured duration passes.
    pub fn run(self, stop: &AtomicBool) -> io::Result<ProxyReport> {
        let epoch = std::time::Instant::now();
        let mut peers: BTreeMap<SocketAddr, Peer> = BTreeMap::new();
        let mut report = ProxyReport::default();
        let mut buf = vec![0u8; 65_536];
        loop {
            let wall = std::time::Instant::now();
            if stop.load(Ordering::Relaxed)
                || self
                    .cfg
                    .duration
                    .is_some_and(|d| wall.duration_since(epoch) >= d)
            {
                break;
            }
            let now = Instant::from_std(epoch, wall);
            loop {
                match self.listen.recv_from(&mut buf) {
                    Ok((n, from)) => {
                        if let std::collections::btree_map::Entry::Vacant(slot) = peers.entry(from)
                        {
                            let Ok(socket) = self.upstream_socket() else {
                                report.io_errors += 1;
                                continue;
                            };
                            report.clients += 1;
                            slot.insert(Peer {
                                socket,
                                up: Link::new(self.cfg.link, mix(self.cfg.seed, from, 0)),
                                down: Link::new(self.cfg.link, mix(self.cfg.seed, from, 1)),
                                last_seen: now,
                            });
                        }
                        if let Some(p) = peers.get_mut(&from) {
                            p.up.send(now, buf[..n].to_vec());
                            p.last_seen = now;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
                    Err(_) => {
                        report.io_errors += 1;
                        break;
                    }
                }
            }
            let mut next = now + crate::time::Duration::from_millis(1);
            for (client, p) in &mut peers {
                loop {
                    match p.socket.recv(&mut buf) {
                        Ok(n) => p.down.send(now, buf[..n].to_vec()),
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        // The server not listening yet shows up as a reset on some systems.
                        Err(e) if e.kind() == ErrorKind::ConnectionRefused => break,
                        Err(e) if e.kind() == ErrorKind::ConnectionReset => break,
                        Err(_) => {
                            report.io_errors += 1;
                            break;
                        }
                    }
                }
                while let Some(b) = p.up.poll_deliver(now) {
                    if p.socket.send(&b).is_err() {
                        report.io_errors += 1;
                    }
                }
                while let Some(b) = p.down.poll_deliver(now) {
                    if self.listen.send_to(&b, client).is_err() {
                        report.io_errors += 1;
                    }
                }
                for t in [p.up.next_delivery(), p.down.next_delivery()]
                    .into_iter()
                    .flatten()
                {
                    next = next.min(t);
                }
            }
            let idle = crate::time::Duration::from_micros(
                u64::try_from(self.cfg.idle_timeout.as_micros()).unwrap_or(u64::MAX),
            );
            let stale: Vec<SocketAddr> = peers
                .iter()
                .filter(|(_, p)| {
                    now.saturating_since(p.last_seen) > idle
                        && p.up.next_delivery().is_none()
                        && p.down.next_delivery().is_none()
                })
                .map(|(a, _)| *a)
                .collect();
            for a in stale {
                if let Some(p) = peers.remove(&a) {
                    add(&mut report.upstream, p.up.counters());
                    add(&mut report.downstream, p.down.counters());
                }
            }
            // Poll at most every millisecond: the proxy has several sockets and no
            // readiness API in std, and 1 ms is below any impairment it simulates.
            let wait = next
                .saturating_since(now)
                .min(crate::time::Duration::from_millis(1));
            std::thread::sleep(wait.to_std());
        }
        for p in peers.into_values() {
            add(&mut report.upstream, p.up.counters());
            add(&mut report.downstream, p.down.counters());
        }
        Ok(report)
    }
}

/// Binds and runs a proxy until `stop` is set (or its duration passes).
pub fn run(cfg: ProxyConfig, stop: &AtomicBool) -> io::Result<ProxyReport> {
    Proxy::bind(cfg)?.run(stop)
}
