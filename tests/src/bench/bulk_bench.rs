//! The transport's bulk path and message-size latency, in process on the
//! seeded `netsim::Network` with a virtual clock (deterministic): a 325 KB
//! snapshot over `Channel::Bulk` at 50 ms RTT and 5 % loss each way, with
//! the turn latency of the same connection during it; 400-byte against
//! 8-byte reliable messages every 20 ms at 5 % loss; datagrams per second
//! on a lockstep-like and a busy link.

use super::stats::Summary;
use lockstep::low_level::transport::{
    Channel, Client, ClientEvent, ConnId, Server, ServerEvent, TransportConfig,
};
use lockstep::netsim::harness::{Endpoint, Harness};
use lockstep::netsim::{LinkConfig, Network};
use lockstep::{Duration, Instant};
use std::fmt::Write as _;
use std::net::SocketAddr;

/// Size of the reference game's 10,000-unit snapshot.
pub const SNAPSHOT: usize = 325 * 1024;
const SERVER: SocketAddr = SocketAddr::new(
    std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1)),
    7000,
);
const CLIENT: SocketAddr = SocketAddr::new(
    std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 1, 1)),
    9000,
);
/// Every message a node's script sends starts with this tag and its send time.
const TAG: u8 = b't';

/// Stamped reliable messages of `len` bytes every `every`, from `start` to `stop`.
#[derive(Clone, Copy, Debug)]
struct Script {
    len: usize,
    every: Duration,
    next: Instant,
    stop: Instant,
}

enum Kind {
    Client(Box<Client>),
    Server(Box<Server>, Option<ConnId>),
}

/// A transport endpoint that runs a script and records what it receives.
struct Node {
    kind: Kind,
    addr: SocketAddr,
    script: Option<Script>,
    /// A bulk message to send once connected, and when it was sent.
    bulk: Option<Vec<u8>>,
    bulk_sent: Option<Instant>,
    /// One-way latencies (µs) of the stamped messages received, with their send time.
    latencies: Vec<(Instant, u64)>,
    /// Bulk messages received: (arrival, bytes).
    bulk_got: Vec<(Instant, Vec<u8>)>,
}

impl Node {
    fn new(kind: Kind, addr: SocketAddr) -> Self {
        Self {
            kind,
            addr,
            script: None,
            bulk: None,
            bulk_sent: None,
            latencies: Vec::new(),
            bulk_got: Vec::new(),
        }
    }

    fn connected(&self) -> bool {
        match &self.kind {
            Kind::Client(c) => c.is_connected(),
            Kind::Server(_, conn) => conn.is_some(),
        }
    }

    fn send(&mut self, channel: Channel, bytes: &[u8]) {
        let _ = match &mut self.kind {
            Kind::Client(c) => c.send(channel, bytes),
            Kind::Server(s, Some(conn)) => s.send(*conn, channel, bytes),
            Kind::Server(_, None) => return,
        };
    }

    fn on_message(&mut self, now: Instant, bytes: Vec<u8>) {
        if bytes.len() >= 9 && bytes[0] == TAG && bytes.len() < 10_000 {
            let mut stamp = [0u8; 8];
            stamp.copy_from_slice(&bytes[1..9]);
            let sent = Instant::from_micros(u64::from_le_bytes(stamp));
            self.latencies
                .push((sent, now.saturating_since(sent).as_micros()));
        } else {
            self.bulk_got.push((now, bytes));
        }
    }
}

impl Endpoint for Node {
    fn addr(&self) -> SocketAddr {
        self.addr
    }
    fn pump(&mut self, now: Instant) {
        loop {
            match &mut self.kind {
                Kind::Client(c) => match c.poll_event() {
                    Some(ClientEvent::Message(m)) => self.on_message(now, m),
                    Some(_) => {}
                    None => break,
                },
                Kind::Server(s, conn) => match s.poll_event() {
                    Some(ServerEvent::Connected { conn: c, .. }) => *conn = Some(c),
                    Some(ServerEvent::Message { bytes, .. }) => self.on_message(now, bytes),
                    Some(_) => {}
                    None => break,
                },
            }
        }
        if !self.connected() {
            return;
        }
        if let Some(b) = self.bulk.take() {
            self.send(Channel::Bulk, &b);
            self.bulk_sent = Some(now);
        }
        while let Some(s) = self.script.filter(|s| now >= s.next && s.next < s.stop) {
            let mut m = vec![TAG];
            m.extend_from_slice(&now.as_micros().to_le_bytes());
            m.resize(s.len.max(9), 0x5A);
            self.send(Channel::Reliable, &m);
            self.script = Some(Script {
                next: s.next + s.every,
                ..s
            });
        }
    }
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]) {
        match &mut self.kind {
            Kind::Client(c) => c.handle_datagram(now, from, bytes),
            Kind::Server(s, _) => s.handle_datagram(now, from, bytes),
        }
    }
    fn handle_timeout(&mut self, now: Instant) {
        match &mut self.kind {
            Kind::Client(c) => c.handle_timeout(now),
            Kind::Server(s, _) => s.handle_timeout(now),
        }
    }
    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<SocketAddr> {
        match &mut self.kind {
            Kind::Client(c) => c.poll_transmit(now, buf),
            Kind::Server(s, _) => s.poll_transmit(now, buf),
        }
    }
    fn poll_timeout(&mut self) -> Option<Instant> {
        let t = match &self.kind {
            Kind::Client(c) => c.poll_timeout(),
            Kind::Server(s, _) => s.poll_timeout(),
        };
        let script = self.script.filter(|s| s.next < s.stop).map(|s| s.next);
        [t, script].into_iter().flatten().min()
    }
    fn is_done(&self) -> bool {
        false
    }
}

/// A client and a server on a link of 25 ms one way with `loss` each way.
fn pair(loss: f64, seed: u64) -> (Harness, [Node; 2]) {
    let link = LinkConfig {
        latency: Duration::from_millis(25),
        loss,
        ..LinkConfig::default()
    };
    let cfg = TransportConfig::default();
    let server = Node::new(
        Kind::Server(Box::new(Server::new(cfg, [seed as u8; 32])), None),
        SERVER,
    );
    let client = Node::new(
        Kind::Client(Box::new(Client::new(Instant::ZERO, SERVER, cfg, seed))),
        CLIENT,
    );
    (Harness::new(Network::new(seed, link)), [server, client])
}

/// The snapshot's bytes: a seeded pattern, so a misplaced fragment shows.
fn snapshot() -> Vec<u8> {
    (0..SNAPSHOT as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

/// One bulk run: transfer time, datagrams server → client during it, and the
/// latencies (µs) of the turn messages sent during it.
#[derive(Clone, Debug, Default)]
pub struct BulkRun {
    /// Time from `send` to delivery (virtual), if it arrived byte-exact.
    pub transfer: Option<Duration>,
    /// Datagrams server → client during the transfer.
    pub datagrams: u64,
    /// Bytes server → client during the transfer.
    pub bytes: u64,
    /// One-way latencies (µs) of the turn messages sent during the transfer.
    pub turn_latencies: Vec<u64>,
}

/// The server sends a 60-byte turn message every 100 ms; 3 s after the
/// connection (RTT measured), with `bulk`, a 325 KB bulk message. Without
/// `bulk` the turn latencies are those of the same window on the same seed.
#[must_use]
pub fn bulk_run(bulk: bool, loss: f64, seed: u64) -> BulkRun {
    let (mut h, mut nodes) = pair(loss, seed);
    let start = Instant::from_millis(3_000);
    nodes[0].script = Some(Script {
        len: 60,
        every: Duration::from_millis(100),
        next: Instant::from_millis(500),
        stop: Instant::from_millis(30_000),
    });
    let _ = h.run(&mut nodes, start);
    let data = snapshot();
    if bulk {
        nodes[0].bulk = Some(data.clone());
    }
    let before = h.traffic(SERVER, CLIENT);
    let limit = start + Duration::from_secs(20);
    let _ = h.run_until(&mut nodes, limit, |_, n| !n[1].bulk_got.is_empty());
    let end = if bulk {
        h.now()
    } else {
        start + Duration::from_millis(1_600)
    };
    if !bulk {
        let _ = h.run(&mut nodes, end);
    }
    let after = h.traffic(SERVER, CLIENT);
    // Let the last turn messages of the window arrive.
    let _ = h.run(&mut nodes, end + Duration::from_secs(2));
    let sent_at = nodes[0].bulk_sent.unwrap_or(start);
    let transfer = nodes[1]
        .bulk_got
        .first()
        .filter(|(_, b)| *b == data)
        .map(|(t, _)| t.saturating_since(sent_at));
    BulkRun {
        transfer,
        datagrams: after.sent_datagrams - before.sent_datagrams,
        bytes: after.sent_bytes - before.sent_bytes,
        turn_latencies: nodes[1]
            .latencies
            .iter()
            .filter(|(sent, _)| *sent >= sent_at && *sent < end)
            .map(|&(_, l)| l)
            .collect(),
    }
}

/// Latencies (µs, sorted, first 10 % dropped as warm-up) and datagrams/s
/// per direction (client → server, server → client) of a scripted run.
#[derive(Clone, Debug, Default)]
pub struct Stream {
    /// Client → server one-way latencies, sorted.
    pub latencies: Vec<u64>,
    /// Datagrams per second client → server.
    pub up_pps: f64,
    /// Datagrams per second server → client.
    pub down_pps: f64,
}

/// The client sends a `len`-byte reliable message every `every` for `secs`
/// seconds; with `down = Some(len)` the server also sends one every
/// `every`, 37 ms out of phase (a relay's bundles against a peer's inputs).
#[must_use]
pub fn stream(
    len: usize,
    down: Option<usize>,
    every: Duration,
    loss: f64,
    secs: u64,
    seed: u64,
) -> Stream {
    let (mut h, mut nodes) = pair(loss, seed);
    let start = Instant::from_millis(1_000);
    let stop = start + Duration::from_secs(secs);
    nodes[1].script = Some(Script {
        len,
        every,
        next: start,
        stop,
    });
    if let Some(d) = down {
        nodes[0].script = Some(Script {
            len: d,
            every,
            next: start + Duration::from_millis(37),
            stop,
        });
    }
    let _ = h.run(&mut nodes, start);
    let (up0, down0) = (h.traffic(CLIENT, SERVER), h.traffic(SERVER, CLIENT));
    let _ = h.run(&mut nodes, stop);
    let (up1, down1) = (h.traffic(CLIENT, SERVER), h.traffic(SERVER, CLIENT));
    let _ = h.run(&mut nodes, stop + Duration::from_secs(3));
    let mut lat: Vec<u64> = nodes[0].latencies.iter().map(|&(_, l)| l).collect();
    let mut steady = lat.split_off(lat.len() / 10);
    steady.sort_unstable();
    Stream {
        latencies: steady,
        up_pps: (up1.sent_datagrams - up0.sent_datagrams) as f64 / secs as f64,
        down_pps: (down1.sent_datagrams - down0.sent_datagrams) as f64 / secs as f64,
    }
}

fn pct(sorted: &[u64], q: usize) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[(sorted.len() * q / 100).min(sorted.len() - 1)] as f64 / 1000.0
}

/// The section.
#[must_use]
pub fn markdown(quick: bool) -> String {
    let seeds: u64 = if quick { 8 } else { 24 };
    let secs = if quick { 30 } else { 60 };
    let mut md = String::new();
    replays::err_println!("[bulk] 325 KB over 50 ms RTT at 5% loss: {seeds} seeds");
    let busy: Vec<BulkRun> = (0..seeds).map(|s| bulk_run(true, 0.05, 100 + s)).collect();
    let quiet: Vec<BulkRun> = (0..seeds).map(|s| bulk_run(false, 0.05, 100 + s)).collect();
    let done: Vec<f64> = busy
        .iter()
        .filter_map(|r| r.transfer.map(Duration::as_millis_f64))
        .collect();
    let ok = done.len();
    let time = Summary::of(&done);
    let dgrams = Summary::of(&busy.iter().map(|r| r.datagrams as f64).collect::<Vec<_>>());
    let wire =
        busy.iter().map(|r| r.bytes).sum::<u64>() as f64 / (SNAPSHOT as f64 * busy.len() as f64);
    let all = |runs: &[BulkRun]| {
        let mut v: Vec<u64> = runs
            .iter()
            .flat_map(|r| r.turn_latencies.iter().copied())
            .collect();
        v.sort_unstable();
        v
    };
    let (during, without) = (all(&busy), all(&quiet));
    let _ = writeln!(
        md,
        "The transport alone (a `Client` and a `Server`), in process on the seeded `netsim::Network` \
         with a virtual clock: deterministic, so the spread comes from the {seeds} seeds. 25 ms one \
         way (50 ms RTT), 5 % independent loss each way.\n\n\
         **Bulk path.** The server sends a {} KB snapshot over `Channel::Bulk` while it sends a \
         60-byte reliable turn message every 100 ms on the same connection. \"Without\" is the same \
         window on the same seeds with no transfer.\n",
        SNAPSHOT / 1024
    );
    md.push_str("| transfer | completed byte-exact | time to complete (ms) | datagrams | bytes on the wire / snapshot | turn latency p50 / p99 during it | p50 / p99 without it |\n|---|---|---|---|---|---|---|\n");
    let _ = writeln!(
        md,
        "| {} KB, 5 % loss | {ok}/{} | {} | {} | {wire:.2} | {:.1} / {:.1} ms ({} msgs) | {:.1} / {:.1} ms ({} msgs) |",
        SNAPSHOT / 1024,
        busy.len(),
        time.map_or_else(|| "–".to_owned(), |t| t.cell(0)),
        dgrams.map_or_else(|| "–".to_owned(), |d| d.cell(0)),
        pct(&during, 50),
        pct(&during, 99),
        during.len(),
        pct(&without, 50),
        pct(&without, 99),
        without.len(),
    );
    replays::err_println!("[bulk] 8 B vs 400 B reliable messages every 20 ms, {secs} s");
    let mut rows = Vec::new();
    for len in [8usize, 400] {
        for loss in [0.0, 0.05] {
            let runs: Vec<Stream> = (0..3)
                .map(|s| stream(len, None, Duration::from_millis(20), loss, secs, 41 + s))
                .collect();
            let mut lat: Vec<u64> = runs
                .iter()
                .flat_map(|r| r.latencies.iter().copied())
                .collect();
            lat.sort_unstable();
            let up = runs.iter().map(|r| r.up_pps).sum::<f64>() / runs.len() as f64;
            let down = runs.iter().map(|r| r.down_pps).sum::<f64>() / runs.len() as f64;
            rows.push((len, loss, pct(&lat, 50), pct(&lat, 99), up, down));
        }
    }
    let _ = writeln!(
        md,
        "\n**Message size.** A reliable message every 20 ms from client to server for {secs} s \
         (3 seeds pooled, first 10 % dropped as warm-up); one-way latency from `send` to delivery.\n"
    );
    md.push_str("| message | loss | p50 | p99 | p99 vs 8 B at the same loss | datagrams/s up / down |\n|---|---|---|---|---|---|\n");
    for &(len, loss, p50, p99, up, down) in &rows {
        let small = rows
            .iter()
            .find(|r| r.0 == 8 && r.1 == loss)
            .map_or(f64::NAN, |r| r.3);
        let _ = writeln!(
            md,
            "| {len} B | {:.0} % | {p50:.1} ms | {p99:.1} ms | {:.2}x | {up:.1} / {down:.1} |",
            loss * 100.0,
            p99 / small
        );
    }
    replays::err_println!("[bulk] datagrams per second, lockstep-like and busy links");
    let turns = stream(30, Some(120), Duration::from_millis(100), 0.05, secs, 41);
    let busy8 = rows.iter().find(|r| r.0 == 8 && r.1 == 0.05);
    let _ = writeln!(
        md,
        "\n**Datagrams per second** (5 % loss). A packet goes when there is new data, a resend or \
         an owed ack (coalesced for `ack_delay`, 25 ms), or a keep-alive after 250 ms of silence; \
         never at every pacing tick.\n\n\
         | link | datagrams/s client → server | server → client |\n|---|---|---|\n\
         | lockstep-like: 30 B up and 120 B down every 100 ms | {:.1} | {:.1} |\n\
         | busy: 8 B up every 20 ms | {:.1} | {:.1} |\n",
        turns.up_pps,
        turns.down_pps,
        busy8.map_or(f64::NAN, |r| r.4),
        busy8.map_or(f64::NAN, |r| r.5),
    );
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bulk_run_completes_and_is_deterministic() {
        let a = bulk_run(true, 0.05, 3);
        assert!(a.transfer.is_some(), "byte-exact delivery");
        assert!(!a.turn_latencies.is_empty());
        let b = bulk_run(true, 0.05, 3);
        assert_eq!(
            (a.transfer, a.datagrams, a.turn_latencies),
            (b.transfer, b.datagrams, b.turn_latencies)
        );
        let s = stream(400, None, Duration::from_millis(20), 0.05, 5, 1);
        assert_eq!(s.latencies.len(), 250 - 25);
    }
}
