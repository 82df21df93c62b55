//! The relay capacity bench's load generator: many fake peers on one event
//! loop, so that one process drives hundreds of matches for a fraction of
//! the relay's CPU and the load generator is never what saturates first.
//!
//! The earlier driver (`carrier::run_udp_peers`, still used where a few
//! peers suffice) gave every peer a reader thread that copied each datagram
//! into a channel, and asked every peer for its timers on every wake-up:
//! thousands of threads, a context switch and an allocation per datagram,
//! and O(peers) work per wake-up. Here every peer's socket (each peer needs
//! its own address: the relay knows a connection by it) is registered with
//! one `mio` poller; a ready socket is drained with `recvmmsg` batches
//! through `quinn-udp` into receive buffers the loop owns and reuses for
//! every socket; and a timer heap keyed by each peer's next deadline (its
//! transport's and its session's `poll_timeout`) means a wake-up runs only
//! the peers that received something or whose deadline came.

use super::benchpeer::{BenchPeer, BenchPeerConfig, PeerFigures};
use lockstep::low_level::peer_glue::PeerGlue;
use lockstep::low_level::transport::{Client, TransportConfig};
use lockstep::peer::udp::is_transient;
use lockstep::{Duration, Instant};
use mio::net::UdpSocket as MioSocket;
use mio::{Events, Interest, Poll, Token};
use quinn_udp::{BATCH_SIZE, RecvMeta, Transmit, UdpSocketState};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{self, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};

/// Longest wait before the loop looks at its end deadline again.
const MAX_WAIT: Duration = Duration::from_millis(20);

/// Bytes per receive slot: GRO may coalesce several datagrams from one
/// sender into one slot (the largest UDP payload fits).
const SLOT: usize = 64 * 1024;

/// One fake peer and its socket.
struct Peer {
    peer: BenchPeer,
    client: Client,
    glue: PeerGlue,
    socket: MioSocket,
    state: UdpSocketState,
    target: SocketAddr,
    figures: PeerFigures,
    finished: bool,
    last_rx: Instant,
    /// The deadline this peer is filed under in the heap (`None`: not filed).
    deadline: Option<Instant>,
    /// Already in this wake-up's list of peers to run.
    touched: bool,
}

impl Peer {
    fn send(&mut self, to: SocketAddr, bytes: &[u8]) {
        let t = Transmit {
            destination: to,
            ecn: None,
            contents: bytes,
            segment_size: None,
            src_ip: None,
        };
        // A full send buffer drops the datagram: the transport resends
        // what matters, as it would after a loss on the wire.
        let _ = self.state.try_send((&self.socket).into(), &t);
    }

    /// Runs this peer's timers, moves messages between its session and its
    /// transport, sends what is due and returns its next deadline.
    fn run(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Instant> {
        self.client.handle_timeout(now);
        self.peer.session().handle_timeout(now);
        self.glue.pump(now, self.peer.session(), &mut self.client);
        self.peer.pump(now);
        self.glue.pump(now, self.peer.session(), &mut self.client);
        if !self.finished && (self.peer.is_done() || self.glue.disconnected().is_some()) {
            self.finish(now);
        }
        while let Some(to) = self.client.poll_transmit(now, buf) {
            if !self.finished {
                self.figures.bytes_sent += buf.len() as u64;
                self.figures.packets_sent += 1;
            }
            let out = std::mem::take(buf);
            self.send(to, &out);
            *buf = out;
        }
        [
            self.client.poll_timeout(),
            self.peer.session().poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Freezes the figures (the carrier's counters stay the loop's own).
    fn finish(&mut self, now: Instant) {
        self.finished = true;
        if let Some(reason) = self.glue.disconnected() {
            let stats = self.client.stats();
            self.peer.note(format!(
                "transport disconnected: {reason:?} (last datagram arrived {} ms before; \
                 {} datagrams arrived, the client accepted {})",
                now.saturating_since(self.last_rx).as_millis(),
                self.figures.packets_received,
                stats.packets_received
            ));
        }
        self.keep_counters(now);
    }

    fn keep_counters(&mut self, now: Instant) {
        let f = &self.figures;
        self.figures = PeerFigures {
            bytes_sent: f.bytes_sent,
            bytes_received: f.bytes_received,
            packets_sent: f.packets_sent,
            packets_received: f.packets_received,
            ..self.peer.figures(now)
        };
    }
}

/// The loop's receive buffers, shared by every socket (only one socket is
/// read at a time), allocated once.
struct RecvBufs {
    bytes: Vec<u8>,
    meta: [RecvMeta; BATCH_SIZE],
}

impl RecvBufs {
    fn new() -> Self {
        Self {
            bytes: vec![0; SLOT * BATCH_SIZE],
            meta: [RecvMeta::default(); BATCH_SIZE],
        }
    }

    /// Reads `p`'s socket until it is empty and hands every datagram to its
    /// transport; returns how many arrived.
    fn drain(&mut self, p: &mut Peer, now: Instant) -> io::Result<usize> {
        let mut total = 0;
        loop {
            let n = {
                let mut chunks = self.bytes.chunks_mut(SLOT).map(IoSliceMut::new);
                let mut iovs: [IoSliceMut<'_>; BATCH_SIZE] = std::array::from_fn(|_| {
                    chunks.next().unwrap_or_else(|| IoSliceMut::new(&mut []))
                });
                match p.state.recv((&p.socket).into(), &mut iovs, &mut self.meta) {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(total),
                    // ICMP unreachable after the relay left: not fatal.
                    Err(e) if is_transient(&e) => continue,
                    Err(e) => return Err(e),
                }
            };
            for (meta, slot) in self.meta[..n].iter().zip(self.bytes.chunks(SLOT)) {
                let stride = meta.stride.max(1);
                for d in slot[..meta.len.min(SLOT)].chunks(stride) {
                    p.last_rx = now;
                    if !p.finished {
                        p.figures.bytes_received += d.len() as u64;
                        p.figures.packets_received += 1;
                    }
                    p.client.handle_datagram(now, meta.addr, d);
                    total += 1;
                }
            }
            if n < BATCH_SIZE {
                return Ok(total);
            }
        }
    }
}

/// Plays each `(config, relay address)` as a peer over our UDP transport,
/// all on one event loop in this thread (one socket each), until every
/// match ends or `timeout`; the same figures as `carrier::run_udp_peers`.
///
/// # Errors
/// A socket or poller error.
pub fn run_peers_on_one_loop(
    peers: Vec<(BenchPeerConfig, SocketAddr)>,
    transport: TransportConfig,
    timeout: std::time::Duration,
) -> io::Result<Vec<PeerFigures>> {
    let epoch = std::time::Instant::now();
    let clock = || Instant::from_std(epoch, std::time::Instant::now());
    let mut poll = Poll::new()?;
    let now = clock();
    let mut list = Vec::with_capacity(peers.len());
    for (i, (config, target)) in peers.into_iter().enumerate() {
        let seed = config.seed;
        let std_socket = UdpSocket::bind(("127.0.0.1", 0))?;
        let state = UdpSocketState::new((&std_socket).into())?;
        let mut socket = MioSocket::from_std(std_socket);
        poll.registry()
            .register(&mut socket, Token(i), Interest::READABLE)?;
        list.push(Peer {
            peer: BenchPeer::new(now, config)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?,
            client: Client::new(now, target, transport, seed ^ 0x00c1_1e47),
            glue: PeerGlue::new(),
            socket,
            state,
            target,
            figures: PeerFigures::default(),
            finished: false,
            last_rx: now,
            deadline: None,
            touched: true,
        });
    }
    let end = now + Duration::from_micros(timeout.as_micros() as u64);
    let mut heap: BinaryHeap<Reverse<(Instant, usize)>> = BinaryHeap::new();
    // Every peer runs on the first pass (handshakes start there).
    let mut due: Vec<usize> = (0..list.len()).collect();
    let mut events = Events::with_capacity(1024);
    let mut bufs = RecvBufs::new();
    let mut buf = Vec::new();
    let mut finished = 0;
    loop {
        let now = clock();
        while let Some(&Reverse((t, i))) = heap.peek() {
            if t > now {
                break;
            }
            heap.pop();
            // Entries whose peer has been refiled since are stale.
            if let Some(p) = list.get_mut(i)
                && p.deadline == Some(t)
            {
                p.deadline = None;
                if !std::mem::replace(&mut p.touched, true) {
                    due.push(i);
                }
            }
        }
        for i in due.drain(..) {
            let Some(p) = list.get_mut(i) else { continue };
            p.touched = false;
            let was_finished = p.finished;
            let next = p.run(now, &mut buf);
            finished += usize::from(p.finished && !was_finished);
            if next != p.deadline {
                p.deadline = next;
                if let Some(t) = next {
                    heap.push(Reverse((t, i)));
                }
            }
        }
        if finished == list.len() || now >= end {
            break;
        }
        let wait = heap
            .peek()
            .map_or(MAX_WAIT, |&Reverse((t, _))| t.saturating_since(now))
            .min(MAX_WAIT);
        match poll.poll(&mut events, Some(wait.to_std())) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        let now = clock();
        for ev in &events {
            let i = ev.token().0;
            let Some(p) = list.get_mut(i) else { continue };
            if bufs.drain(p, now)? > 0 && !std::mem::replace(&mut p.touched, true) {
                due.push(i);
            }
        }
    }
    let now = clock();
    let mut out = Vec::with_capacity(list.len());
    for mut p in list {
        if !p.finished {
            p.keep_counters(now);
            p.figures.error.get_or_insert_with(|| "timed out".into());
            p.peer.session().leave(now);
            p.glue.pump(now, p.peer.session(), &mut p.client);
        }
        p.client.disconnect(now);
        while p.client.poll_transmit(now, &mut buf).is_some() {
            let out = std::mem::take(&mut buf);
            p.send(p.target, &out);
            buf = out;
        }
        out.push(p.figures);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::benchpeer::Play;

    #[test]
    fn many_peers_on_one_loop_complete_their_matches_against_a_real_relay() {
        // Loopback only, bounded: two matches of 10 turns, 30 s at most.
        let socket = UdpSocket::bind(("127.0.0.1", 0)).unwrap();
        let relay = socket.local_addr().unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let server = {
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                super::super::carrier::serve_udp(
                    &socket,
                    relay::RelayConfig::default(),
                    TransportConfig::default(),
                    &stop,
                )
            })
        };
        let peers = (0..2)
            .flat_map(|m| {
                (0..4u64).map(move |i| {
                    (
                        BenchPeerConfig {
                            match_name: format!("loop-{m}"),
                            players: 4,
                            turns: 10,
                            seed: (m as u64) << 4 | i,
                            play: Play::Fake { every: 2 },
                        },
                        relay,
                    )
                })
            })
            .collect();
        let figures = run_peers_on_one_loop(
            peers,
            TransportConfig::default(),
            std::time::Duration::from_secs(30),
        )
        .unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let counters = server.join().unwrap().unwrap();
        assert_eq!(figures.len(), 8);
        for f in &figures {
            assert!(f.completed, "{:?}", f.error);
            assert_eq!(f.turns, 10);
            assert!(f.packets_sent > 0 && f.packets_received > 0);
        }
        assert!(counters.packets_in > 0 && counters.packets_out > 0);
    }
}
