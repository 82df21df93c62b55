//! Socket drivers carrying the same sans-IO session and router over two
//! carriers: our UDP transport (`Client`/`Server` with the real glue) and a
//! TCP baseline (one `TCP_NODELAY` stream per peer, length-prefixed frames of
//! the same protocol messages, a listener feeding the router one `ConnId`
//! per stream). Reader threads turn blocking reads into channel messages so
//! each driver loop sleeps exactly until its next timer or input.
//!
//! On TCP the transport's link figures do not exist; the router still gets
//! RTT samples from its own app-level Ping/Pong, and the session gets none
//! (they only feed its stats report). So that both carriers' players get a
//! floor, the TCP relay driver times those same Ping/Pong exchanges itself
//! ([`PingRtts`]), per player name.

use super::benchpeer::{BenchPeer, BenchPeerConfig, PeerFigures};
use super::framing::{FrameDecoder, encode_frame};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, unbounded};
use lockstep::low_level::peer_glue::PeerGlue;
use lockstep::low_level::proto::ToRelay;
use lockstep::low_level::transport::{Client, Server, TransportConfig};
use lockstep::{Duration, Instant};
use relay::RelayConfig;
use relay::router::{ConnId, Router};
use relay::router_glue::RouterGlue;
use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

/// Longest a driver waits before looking at its timers and stop flag again.
const MAX_WAIT: Duration = Duration::from_millis(20);
/// Longest a TCP write may block (a stuck receiver must not hang a run).
pub const WRITE_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);
/// How often blocked reader threads look at the stop flag.
const READ_POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// Traffic a relay driver saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RelayCounters {
    /// Datagrams (or frames) received.
    pub packets_in: u64,
    /// Datagrams (or frames) sent.
    pub packets_out: u64,
    /// Bytes received.
    pub bytes_in: u64,
    /// Bytes sent.
    pub bytes_out: u64,
}

/// RTT samples the TCP relay driver took from the router's own Ping/Pong:
/// a pong echoes the ping's stamp, which is the router's `now` in this
/// driver's clock, so arrival time minus stamp is the round trip (proxy
/// delay, kernel retransmissions and the peer's loop included, as for any
/// app-level ping). Keyed by the name the connection joined with.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PingRtts {
    names: BTreeMap<ConnId, String>,
    samples: BTreeMap<String, Vec<Duration>>,
}

impl PingRtts {
    /// Looks at one message from `conn` arriving at `now`: a join names the
    /// connection, a pong is a sample (a stamp from the future is none).
    pub fn observe(&mut self, now: Instant, conn: ConnId, msg: &[u8]) {
        match ToRelay::decode(msg) {
            Ok(ToRelay::Join(join)) => {
                self.names.insert(conn, join.name);
            }
            Ok(ToRelay::Pong { stamp_us }) => {
                let sent = Instant::from_micros(stamp_us);
                if let Some(name) = self.names.get(&conn)
                    && sent <= now
                {
                    self.samples
                        .entry(name.clone())
                        .or_default()
                        .push(now.saturating_since(sent));
                }
            }
            _ => {}
        }
    }

    /// The median sample of the player who joined as `name`, if any.
    #[must_use]
    pub fn median(&self, name: &str) -> Option<Duration> {
        self.percentile(name, 50)
    }

    /// The `p`-th percentile sample (nearest rank) of the player who joined
    /// as `name`, if any.
    #[must_use]
    pub fn percentile(&self, name: &str, p: usize) -> Option<Duration> {
        let mut v = self.samples.get(name)?.clone();
        v.sort_unstable();
        v.get(v.len().checked_sub(1)? * p.min(100) / 100).copied()
    }
}

/// A clock in protocol time since the driver started.
#[derive(Clone, Copy, Debug)]
struct Clock(std::time::Instant);

impl Clock {
    fn new() -> Self {
        Self(std::time::Instant::now())
    }
    fn now(self) -> Instant {
        Instant::from_std(self.0, std::time::Instant::now())
    }
}

fn wait_until(now: Instant, next: Option<Instant>) -> std::time::Duration {
    next.map_or(MAX_WAIT, |t| t.saturating_since(now))
        .min(MAX_WAIT)
        .to_std()
}

fn min_time(times: impl IntoIterator<Item = Option<Instant>>) -> Option<Instant> {
    times.into_iter().flatten().min()
}

/// Spawns a thread that forwards every datagram on `socket` as `(tag, from, bytes)`.
fn udp_reader<T: Copy + Send + 'static>(
    socket: &UdpSocket,
    tag: T,
    tx: Sender<(T, SocketAddr, Vec<u8>)>,
    stop: Arc<AtomicBool>,
) -> io::Result<JoinHandle<()>> {
    let socket = socket.try_clone()?;
    socket.set_read_timeout(Some(READ_POLL))?;
    // Small stacks: the load generator runs one reader per simulated peer.
    std::thread::Builder::new()
        .stack_size(128 * 1024)
        .spawn(move || {
            let mut buf = vec![0u8; 2048];
            while !stop.load(Ordering::Relaxed) {
                match socket.recv_from(&mut buf) {
                    Ok((n, from)) => {
                        if tx.send((tag, from, buf[..n].to_vec())).is_err() {
                            return;
                        }
                    }
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                        ) => {}
                    // ICMP unreachable from a peer that left: not fatal.
                    Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {}
                    Err(_) => return,
                }
            }
        })
}

/// Receives whatever is ready within `wait` (at least one item, or none on timeout).
fn drain<T>(rx: &Receiver<T>, wait: std::time::Duration) -> Vec<T> {
    let mut out = Vec::new();
    match rx.recv_timeout(wait) {
        Ok(x) => out.push(x),
        Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return out,
    }
    out.extend(rx.try_iter());
    out
}

struct UdpPeer {
    peer: BenchPeer,
    client: Client,
    glue: PeerGlue,
    socket: UdpSocket,
    target: SocketAddr,
    figures: PeerFigures,
    finished: bool,
    last_rx: Instant,
}

/// Plays each `(config, relay address)` as a peer over our UDP transport, all
/// in this thread (one socket each), until every match ends or `timeout`.
pub fn run_udp_peers(
    peers: Vec<(BenchPeerConfig, SocketAddr)>,
    transport: TransportConfig,
    timeout: std::time::Duration,
) -> io::Result<Vec<PeerFigures>> {
    let clock = Clock::new();
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = unbounded();
    let mut readers = Vec::new();
    let mut list = Vec::new();
    let now = clock.now();
    for (i, (config, target)) in peers.into_iter().enumerate() {
        let seed = config.seed;
        let socket = UdpSocket::bind(("127.0.0.1", 0))?;
        readers.push(udp_reader(&socket, i, tx.clone(), Arc::clone(&stop))?);
        list.push(UdpPeer {
            peer: BenchPeer::new(now, config)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?,
            client: Client::new(now, target, transport, seed ^ 0x00c1_1e47),
            glue: PeerGlue::new(),
            socket,
            target,
            figures: PeerFigures::default(),
            finished: false,
            last_rx: now,
        });
    }
    drop(tx);
    let deadline = now + Duration::from_micros(timeout.as_micros() as u64);
    let mut buf = Vec::new();
    loop {
        let now = clock.now();
        for p in &mut list {
            p.glue.pump(now, p.peer.session(), &mut p.client);
            p.peer.pump(now);
            p.glue.pump(now, p.peer.session(), &mut p.client);
            if !p.finished && (p.peer.is_done() || p.glue.disconnected().is_some()) {
                p.finished = true;
                if let Some(reason) = p.glue.disconnected() {
                    let stats = p.client.stats();
                    p.peer.note(format!(
                        "transport disconnected: {reason:?} (last datagram arrived {} ms before; \
                         {} datagrams arrived, the client accepted {})",
                        now.saturating_since(p.last_rx).as_millis(),
                        p.figures.packets_received,
                        stats.packets_received
                    ));
                }
                p.figures = PeerFigures {
                    bytes_sent: p.figures.bytes_sent,
                    bytes_received: p.figures.bytes_received,
                    packets_sent: p.figures.packets_sent,
                    packets_received: p.figures.packets_received,
                    ..p.peer.figures(now)
                };
            }
            while let Some(to) = p.client.poll_transmit(now, &mut buf) {
                if !p.finished {
                    p.figures.bytes_sent += buf.len() as u64;
                    p.figures.packets_sent += 1;
                }
                let _ = p.socket.send_to(&buf, to);
            }
        }
        if list.iter().all(|p| p.finished) || now >= deadline {
            break;
        }
        let next = min_time(list.iter_mut().flat_map(|p| {
            [
                p.client.poll_timeout(),
                p.peer.session().poll_timeout(),
                p.peer.next_wake(),
            ]
        }));
        let got = drain(&rx, wait_until(now, next));
        let now = clock.now();
        for (i, from, bytes) in got {
            let Some(p) = list.get_mut(i) else { continue };
            p.last_rx = now;
            if !p.finished {
                p.figures.bytes_received += bytes.len() as u64;
                p.figures.packets_received += 1;
            }
            p.client.handle_datagram(now, from, &bytes);
        }
        for p in &mut list {
            p.client.handle_timeout(now);
            p.peer.session().handle_timeout(now);
        }
    }
    let now = clock.now();
    let mut out = Vec::new();
    for mut p in list {
        if !p.finished {
            let counted = p.figures.clone();
            p.figures = PeerFigures {
                bytes_sent: counted.bytes_sent,
                bytes_received: counted.bytes_received,
                packets_sent: counted.packets_sent,
                packets_received: counted.packets_received,
                ..p.peer.figures(now)
            };
            p.figures.error.get_or_insert_with(|| "timed out".into());
            p.peer.session().leave(now);
            p.glue.pump(now, p.peer.session(), &mut p.client);
        }
        p.client.disconnect(now);
        while p.client.poll_transmit(now, &mut buf).is_some() {
            let _ = p.socket.send_to(&buf, p.target);
        }
        out.push(p.figures);
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        let _ = r.join();
    }
    Ok(out)
}

/// Serves matches over our UDP transport on `socket` until `stop` is set.
pub fn serve_udp(
    socket: &UdpSocket,
    config: RelayConfig,
    transport: TransportConfig,
    stop: &Arc<AtomicBool>,
) -> io::Result<RelayCounters> {
    let clock = Clock::new();
    let (tx, rx) = unbounded();
    let reader = udp_reader(socket, (), tx, Arc::clone(stop))?;
    let mut server = Server::new(transport, relay::udp::process_secret()?);
    let mut router = Router::new(config);
    let mut glue = RouterGlue::new();
    let mut counters = RelayCounters::default();
    let mut buf = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let now = clock.now();
        let next = min_time([server.poll_timeout(), router.poll_timeout()]);
        let got = drain(&rx, wait_until(now, next));
        let now = clock.now();
        for ((), from, bytes) in got {
            counters.packets_in += 1;
            counters.bytes_in += bytes.len() as u64;
            server.handle_datagram(now, from, &bytes);
        }
        glue.step(now, &mut router, &mut server);
        while let Some(ev) = router.poll_event() {
            // Drops are rare and worth a line on stderr (a worker's stderr is shown on failure).
            if let relay::RouterEvent::Dropped { .. } = ev {
                replays::err_println!("relay: {ev:?} at {} ms", now.as_micros() / 1000);
            }
        }
        while let Some(to) = server.poll_transmit(now, &mut buf) {
            counters.packets_out += 1;
            counters.bytes_out += buf.len() as u64;
            let _ = socket.send_to(&buf, to);
        }
    }
    let _ = reader.join();
    Ok(counters)
}

/// What a TCP reader thread reports.
enum TcpInput {
    Accepted(ConnId, SocketAddr, TcpStream),
    Message(ConnId, Vec<u8>),
    Closed(ConnId),
}

/// Reads frames from `stream` until it closes or `stop`, reporting them as `tag`.
fn tcp_reader<T: Send + 'static>(
    stream: TcpStream,
    on_frame: impl Fn(Vec<u8>) -> T + Send + 'static,
    on_close: T,
    tx: Sender<T>,
    stop: Arc<AtomicBool>,
) -> io::Result<JoinHandle<()>> {
    let mut stream = stream;
    stream.set_read_timeout(Some(READ_POLL))?;
    Ok(std::thread::spawn(move || {
        let mut decoder = FrameDecoder::new();
        let mut buf = vec![0u8; 64 * 1024];
        while !stop.load(Ordering::Relaxed) {
            match stream.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    decoder.push(&buf[..n]);
                    loop {
                        match decoder.next_frame() {
                            Ok(Some(msg)) => {
                                if tx.send(on_frame(msg)).is_err() {
                                    return;
                                }
                            }
                            Ok(None) => break,
                            Err(_) => {
                                let _ = tx.send(on_close);
                                return;
                            }
                        }
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => break,
            }
        }
        let _ = tx.send(on_close);
    }))
}

/// Serves matches over TCP on `listener` until `stop` is set: one `ConnId`
/// per accepted stream, the router's messages framed onto it. Returns the
/// traffic and the players' Ping/Pong RTTs.
pub fn serve_tcp(
    listener: &TcpListener,
    config: RelayConfig,
    stop: &Arc<AtomicBool>,
) -> io::Result<(RelayCounters, PingRtts)> {
    let clock = Clock::new();
    let (tx, rx) = unbounded();
    let acceptor = {
        let listener = listener.try_clone()?;
        listener.set_nonblocking(true)?;
        let stop = Arc::clone(stop);
        std::thread::spawn(move || {
            let mut next = 1u32;
            let mut readers = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, addr)) => {
                        let conn = ConnId(next);
                        next += 1;
                        let ok = stream.set_nonblocking(false).is_ok()
                            && stream.set_nodelay(true).is_ok()
                            && stream.set_write_timeout(Some(WRITE_LIMIT)).is_ok();
                        let (Ok(writer), true) = (stream.try_clone(), ok) else {
                            continue;
                        };
                        if tx.send(TcpInput::Accepted(conn, addr, writer)).is_err() {
                            break;
                        }
                        let reader = tcp_reader(
                            stream,
                            move |m| TcpInput::Message(conn, m),
                            TcpInput::Closed(conn),
                            tx.clone(),
                            Arc::clone(&stop),
                        );
                        if let Ok(r) = reader {
                            readers.push(r);
                        }
                    }
                    // Accept is polled: the listener is non-blocking so the stop flag is seen.
                    Err(_) => std::thread::sleep(std::time::Duration::from_millis(5)),
                }
            }
            for r in readers {
                let _ = r.join();
            }
        })
    };
    let mut router = Router::new(config);
    let mut streams: BTreeMap<ConnId, TcpStream> = BTreeMap::new();
    let mut counters = RelayCounters::default();
    let mut rtts = PingRtts::default();
    let mut frame = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let now = clock.now();
        let got = drain(&rx, wait_until(now, router.poll_timeout()));
        let now = clock.now();
        for input in got {
            match input {
                TcpInput::Accepted(conn, addr, stream) => {
                    if router.handle_connected(now, conn, addr) {
                        streams.insert(conn, stream);
                    } else {
                        let _ = stream.shutdown(Shutdown::Both);
                    }
                }
                TcpInput::Message(conn, msg) => {
                    counters.packets_in += 1;
                    counters.bytes_in += 4 + msg.len() as u64;
                    rtts.observe(now, conn, &msg);
                    router.handle_message(now, conn, &msg);
                }
                TcpInput::Closed(conn) => {
                    if streams.remove(&conn).is_some() {
                        router.handle_disconnected(now, conn);
                    }
                }
            }
        }
        router.handle_timeout(now);
        while router.poll_event().is_some() {}
        let mut broken = Vec::new();
        while let Some((conn, _delivery, msg)) = router.poll_outgoing() {
            let Some(stream) = streams.get_mut(&conn) else {
                continue;
            };
            frame.clear();
            encode_frame(&msg, &mut frame);
            counters.packets_out += 1;
            counters.bytes_out += frame.len() as u64;
            if stream.write_all(&frame).is_err() {
                broken.push(conn);
            }
        }
        for conn in broken {
            if let Some(s) = streams.remove(&conn) {
                let _ = s.shutdown(Shutdown::Both);
                router.handle_disconnected(now, conn);
            }
        }
    }
    for s in streams.values() {
        let _ = s.shutdown(Shutdown::Both);
    }
    let _ = acceptor.join();
    Ok((counters, rtts))
}

/// Plays one match as a peer over TCP to `target` (the relay or a proxy).
pub fn run_tcp_peer(
    config: BenchPeerConfig,
    target: SocketAddr,
    timeout: std::time::Duration,
) -> io::Result<PeerFigures> {
    let clock = Clock::new();
    let stop = Arc::new(AtomicBool::new(false));
    let mut stream = TcpStream::connect_timeout(&target, timeout)?;
    stream.set_nodelay(true)?;
    stream.set_write_timeout(Some(WRITE_LIMIT))?;
    let (tx, rx) = unbounded();
    let reader = tcp_reader(stream.try_clone()?, Some, None, tx, Arc::clone(&stop))?;
    let now = clock.now();
    let mut peer =
        BenchPeer::new(now, config).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let deadline = now + Duration::from_micros(timeout.as_micros() as u64);
    let mut counted = PeerFigures::default();
    let mut frame = Vec::new();
    let mut closed = false;
    loop {
        let now = clock.now();
        peer.pump(now);
        while let Some((_delivery, msg)) = peer.session().poll_outgoing() {
            frame.clear();
            encode_frame(&msg, &mut frame);
            counted.bytes_sent += frame.len() as u64;
            counted.packets_sent += 1;
            if stream.write_all(&frame).is_err() {
                closed = true;
            }
        }
        if peer.is_done() || closed || now >= deadline {
            break;
        }
        let next = min_time([peer.session().poll_timeout(), peer.next_wake()]);
        let got = drain(&rx, wait_until(now, next));
        let now = clock.now();
        for msg in got {
            match msg {
                Some(msg) => {
                    counted.bytes_received += 4 + msg.len() as u64;
                    counted.packets_received += 1;
                    peer.session().handle_message(now, &msg);
                }
                None => closed = true,
            }
        }
        peer.session().handle_timeout(now);
    }
    let now = clock.now();
    peer.pump(now);
    if closed {
        peer.note("stream closed".into());
    } else if !peer.is_done() {
        peer.note("timed out".into());
    }
    let figures = PeerFigures {
        bytes_sent: counted.bytes_sent,
        bytes_received: counted.bytes_received,
        packets_sent: counted.packets_sent,
        packets_received: counted.packets_received,
        ..peer.figures(now)
    };
    if !peer.is_done() {
        peer.session().leave(now);
        while let Some((_d, msg)) = peer.session().poll_outgoing() {
            frame.clear();
            encode_frame(&msg, &mut frame);
            let _ = stream.write_all(&frame);
        }
    }
    let _ = stream.shutdown(Shutdown::Both);
    stop.store(true, Ordering::Relaxed);
    let _ = reader.join();
    Ok(figures)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockstep::low_level::proto::Join;
    use sim::StateHash;

    fn join(name: &str) -> Vec<u8> {
        ToRelay::Join(Join {
            match_name: "m".into(),
            slots: 2,
            game_id: "g".into(),
            game_version: 1,
            rules_hash: StateHash([0; 32]),
            name: name.into(),
            turns: 0,
        })
        .to_bytes()
    }

    fn pong(stamp: Instant) -> Vec<u8> {
        ToRelay::Pong {
            stamp_us: stamp.as_micros(),
        }
        .to_bytes()
    }

    #[test]
    fn ping_rtts_are_pong_arrival_minus_stamp_per_joined_name() {
        let mut r = PingRtts::default();
        let t = |ms| Instant::from_millis(ms);
        // A pong before the join names nobody.
        r.observe(t(50), ConnId(1), &pong(t(10)));
        r.observe(t(60), ConnId(1), &join("a"));
        r.observe(t(60), ConnId(2), &join("b"));
        for (sent, back) in [(100, 160), (200, 270), (300, 355)] {
            r.observe(t(back), ConnId(1), &pong(t(sent)));
        }
        r.observe(t(500), ConnId(2), &pong(t(400)));
        // A stamp from the future, and a message that is no pong, are no samples.
        r.observe(t(500), ConnId(2), &pong(t(900)));
        r.observe(t(500), ConnId(2), &ToRelay::Leave.to_bytes());
        assert_eq!(r.median("a"), Some(Duration::from_millis(60)));
        assert_eq!(r.median("b"), Some(Duration::from_millis(100)));
        assert_eq!(r.median("c"), None);
    }
}
