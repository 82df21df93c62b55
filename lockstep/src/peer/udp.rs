//! A thin UDP runner for a [`Peer`]: the only peer code that touches a
//! socket and the real clock. Optionally it puts an in-process impaired
//! [`Link`] on each direction, so a demo can show a bad network without an
//! external proxy.
//!
//! Your game loop calls [`UdpPeer::pump`] once per frame (it waits at most
//! the time given for datagrams, feeds them and the time to the peer and
//! sends what the peer has), then polls the peer's events and submits the
//! local commands through [`UdpPeer::peer_mut`]. [`play`] is that loop for
//! a headless peer played by an [`Agent`].

use super::{Agent, Peer, PeerBuilder, PeerEvent, PeerSummary};
use crate::builder::BuildError;
use crate::netsim::{Link, LinkConfig};
use crate::time::{Duration, Instant};
use sim::{PlayerId, Simulation};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};

/// Largest datagram accepted.
const MAX_DATAGRAM: usize = 2048;
/// Most datagrams one [`UdpPeer::pump`] reads unless
/// [`UdpPeer::with_max_batch`] says otherwise: a flood cannot keep a frame
/// from ending (the rest wait in the socket for the next frame).
pub const MAX_DATAGRAMS_PER_PUMP: usize = 256;
/// A frame at 60 fps: what `peer --speculate` and `relay demo --speculate`
/// render at ([`PlayOptions::frames`]).
pub const SPECULATION_FRAME: Duration = Duration::from_micros(16_667);
/// The shortest socket wait (a zero read timeout means "block forever").
const MIN_WAIT: Duration = Duration::from_micros(200);

/// The one wall-clock helper (`replays::format::unix_now_ms`), re-exported
/// for drivers built on this runner.
pub use replays::format::unix_now_ms;

/// Errors a UDP socket reports for one datagram or one remote that must not
/// stop the loop: an ICMP "port unreachable" from a remote that went away
/// surfaces as `ConnectionRefused`/`ConnectionReset` on the next receive.
#[must_use]
pub fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
    )
}

/// Why an address given on a command line could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The name lookup failed (or the text is not `HOST:PORT`).
    #[error("cannot resolve `{name}`: {source} (expected HOST:PORT, e.g. localhost:7777)")]
    Lookup {
        /// The text given.
        name: String,
        /// What the resolver said.
        source: io::Error,
    },
    /// The name resolved, but to no address.
    #[error("`{name}` resolves to no address")]
    NoAddress {
        /// The text given.
        name: String,
    },
}

/// Resolves a `HOST:PORT` (an IP address or a host name such as
/// `localhost:7777`) to one socket address, preferring the first IPv4
/// address (a relay bound to `127.0.0.1` does not answer on `::1`). Use it
/// for every relay or peer address a binary takes, as a clap value parser.
///
/// # Errors
/// A name that does not resolve, or resolves to nothing.
pub fn resolve(text: &str) -> Result<SocketAddr, ResolveError> {
    use std::net::ToSocketAddrs;
    let all: Vec<SocketAddr> = text
        .to_socket_addrs()
        .map_err(|source| ResolveError::Lookup {
            name: text.to_owned(),
            source,
        })?
        .collect();
    all.iter()
        .find(|a| a.is_ipv4())
        .or_else(|| all.first())
        .copied()
        .ok_or_else(|| ResolveError::NoAddress {
            name: text.to_owned(),
        })
}

/// Whether a receive error only means "nothing arrived in time".
#[must_use]
pub fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// 32 bytes from the OS CSPRNG for the handshake salts.
#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
fn os_entropy() -> Result<[u8; 32], BuildError> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).map_err(|e| BuildError::Entropy(e.to_string()))?;
    Ok(b)
}

/// `wasm32-unknown-unknown` has no OS random source without a JavaScript
/// binding, which the library does not pull in: the caller passes entropy.
#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
fn os_entropy() -> Result<[u8; 32], BuildError> {
    Err(BuildError::Entropy(
        "no OS random source on this target: pass PeerBuilder::with_entropy".into(),
    ))
}

/// A [`Peer`] on a UDP socket, with the real clock.
#[derive(Debug)]
pub struct UdpPeer<S: Simulation> {
    socket: UdpSocket,
    relay: SocketAddr,
    peer: Peer<S>,
    epoch: std::time::Instant,
    up: Option<Link>,
    down: Option<Link>,
    buf: Vec<u8>,
    recv: Vec<u8>,
    max_batch: usize,
}

impl<S: Simulation> UdpPeer<S> {
    /// Builds the peer (its clock starts now, anchored to the wall clock)
    /// to play through `socket` with the relay at `relay`.
    ///
    /// A real network: unless the builder was given entropy
    /// ([`PeerBuilder::with_entropy`]), the entropy for the handshake salts is
    /// drawn here
    /// from the OS CSPRNG, never from the builder's seed.
    ///
    /// # Errors
    /// The builder's (bad slot count or name), or
    /// [`BuildError::Entropy`] without an OS random source.
    pub fn new(
        socket: UdpSocket,
        relay: SocketAddr,
        builder: PeerBuilder<S>,
    ) -> Result<Self, BuildError> {
        let builder = if builder.has_entropy() {
            builder
        } else {
            builder.with_entropy(os_entropy()?)
        };
        let epoch = std::time::Instant::now();
        let now = Instant::ZERO;
        let mut peer = builder.build(now, relay)?;
        peer.set_unix_time(now, unix_now_ms());
        Ok(Self {
            socket,
            relay,
            peer,
            epoch,
            up: None,
            down: None,
            buf: Vec::with_capacity(MAX_DATAGRAM),
            recv: vec![0; MAX_DATAGRAM],
            max_batch: MAX_DATAGRAMS_PER_PUMP,
        })
    }

    /// Puts a seeded impaired link on each direction (loss, latency, jitter
    /// as if the network did it).
    #[must_use]
    pub fn with_impairment(mut self, link: LinkConfig, seed: u64) -> Self {
        self.up = Some(Link::new(link, seed ^ 0x5eed_0001));
        self.down = Some(Link::new(link, seed ^ 0x5eed_0002));
        self
    }

    /// Reads at most `n` datagrams per [`pump`](Self::pump) (at least 1;
    /// default [`MAX_DATAGRAMS_PER_PUMP`]).
    #[must_use]
    pub fn with_max_batch(mut self, n: usize) -> Self {
        self.max_batch = n.max(1);
        self
    }

    /// The runner's clock (zero when it was made).
    #[must_use]
    pub fn now(&self) -> Instant {
        Instant::from_std(self.epoch, std::time::Instant::now())
    }

    /// The peer.
    #[must_use]
    pub const fn peer(&self) -> &Peer<S> {
        &self.peer
    }

    /// The peer, to poll its events and submit commands.
    pub const fn peer_mut(&mut self) -> &mut Peer<S> {
        &mut self.peer
    }

    /// One frame of I/O: sends what the peer has, waits up to `max_wait`
    /// (less when a timer is due sooner) for datagrams, reads at most a
    /// bounded batch, hands them and the time to the peer, and sends what
    /// that produced. Then poll the peer's events.
    ///
    /// # Errors
    /// Socket errors other than a timeout or a transient ICMP report.
    pub fn pump(&mut self, max_wait: Duration) -> io::Result<()> {
        let now = self.now();
        self.send_all(now);
        let timers = [
            self.peer.poll_timeout(),
            self.up.as_ref().and_then(Link::next_delivery),
            self.down.as_ref().and_then(Link::next_delivery),
        ];
        let wait = timers
            .into_iter()
            .flatten()
            .min()
            .map_or(max_wait, |t| t.saturating_since(now))
            .min(max_wait)
            .max(MIN_WAIT);
        self.socket.set_nonblocking(false)?;
        self.socket.set_read_timeout(Some(wait.to_std()))?;
        let mut first = true;
        for _ in 0..self.max_batch {
            match self.socket.recv_from(&mut self.recv) {
                Ok((n, from)) => {
                    let now = self.now();
                    match self.down.as_mut() {
                        Some(link) if from == self.relay => {
                            link.send(now, self.recv[..n].to_vec());
                        }
                        _ => self.peer.handle_datagram(now, from, &self.recv[..n]),
                    }
                }
                Err(e) if is_timeout(&e) => break,
                Err(e) if is_transient(&e) => {
                    if first {
                        break;
                    }
                }
                Err(e) => return Err(e),
            }
            if first {
                first = false;
                self.socket.set_nonblocking(true)?;
            }
        }
        let now = self.now();
        if let Some(link) = self.down.as_mut() {
            while let Some(bytes) = link.poll_deliver(now) {
                self.peer.handle_datagram(now, self.relay, &bytes);
            }
        }
        self.peer.handle_timeout(now);
        self.send_all(now);
        Ok(())
    }

    /// After the match: keeps pumping until everything sent reached the
    /// relay ([`Peer::is_flushed`]: the last hashes, which the relay needs
    /// to close the recording) or `max` passed. Call it before exiting.
    ///
    /// # Errors
    /// Socket errors, as [`pump`](Self::pump).
    pub fn linger(&mut self, max: Duration) -> io::Result<()> {
        let until = self.now() + max;
        while !self.peer.is_flushed() && self.now() < until {
            self.pump(Duration::from_millis(16))?;
        }
        Ok(())
    }

    /// Sends everything the peer has at `now` (through the impaired link, if any).
    pub fn send_all(&mut self, now: Instant) {
        while let Some(to) = self.peer.poll_transmit(now, &mut self.buf) {
            match self.up.as_mut() {
                Some(link) => link.send(now, self.buf.clone()),
                // A send error (e.g. unreachable) is a lost datagram; the transport resends.
                None => {
                    let _ = self.socket.send_to(&self.buf, to);
                }
            }
        }
        if let Some(link) = self.up.as_mut() {
            while let Some(bytes) = link.poll_deliver(now) {
                let _ = self.socket.send_to(&bytes, self.relay);
            }
        }
    }

    /// Leaves the match (if it is still on) and closes the connection,
    /// sending the goodbye directly (an impaired link would hold it back).
    pub fn close(&mut self) {
        let now = self.now();
        self.peer.leave(now);
        while let Some(to) = self.peer.poll_transmit(now, &mut self.buf) {
            let _ = self.socket.send_to(&self.buf, to);
        }
    }
}

/// How [`play`] runs a headless match.
#[derive(Clone, Copy, Debug)]
pub struct PlayOptions {
    /// Give up (error) after this long.
    pub timeout: Duration,
    /// After the match ended, keep the connection up at most this long until
    /// the last reliable messages (the final hashes) are acknowledged.
    pub linger: Duration,
    /// Fault switch: after this long, go silent without a goodbye (a crash).
    pub vanish_after: Option<Duration>,
    /// Longest wait per frame.
    pub frame: Duration,
    /// Submit each turn's orders at a seeded random instant up to this long
    /// after the turn, as a human's clicks (`None`: at once). A bot
    /// answering every turn at once is in phase with the relay's clock, so
    /// its commands wait a whole turn; `relay demo` sets a turn length so
    /// that its latency figures are what players see. (max, seed).
    pub reaction: Option<(Duration, u64)>,
    /// Render a frame this often ([`Peer::handle_frame`] on the real clock,
    /// right after the frame's commands are submitted), for a peer built
    /// with [`PeerBuilder::with_speculation`]: a headless stand-in for a
    /// game's render loop, so the speculative view and its own-feedback
    /// figures are measured (`None`: no frames).
    pub frames: Option<Duration>,
}

impl Default for PlayOptions {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(600),
            linger: Duration::from_secs(2),
            vanish_after: None,
            frame: Duration::from_millis(20),
            reaction: None,
            frames: None,
        }
    }
}

/// Plays one match with an agent built by `make_agent` at the start, until
/// the match ends (then lingers, see [`PlayOptions::linger`]), `stop` is
/// set, the connection is lost or the time is up. `progress` is called about
/// every second (for stderr progress lines), and at once when the relay's
/// rejoin secret arrives ([`PeerEvent::RejoinSecret`], right after the
/// start): [`Peer::rejoin_secret`] is then `Some`, so a game saves it where
/// a restarted process finds it (`peer --rejoin-file` does) before anything
/// can kill this one, not up to a second later.
///
/// # Errors
/// Socket errors.
pub fn play<S: Simulation, A: Agent<S>>(
    udp: &mut UdpPeer<S>,
    mut make_agent: impl FnMut(PlayerId) -> A,
    opts: &PlayOptions,
    stop: &AtomicBool,
    mut progress: impl FnMut(&Peer<S>, Instant),
) -> io::Result<PeerSummary> {
    let start = udp.now();
    let deadline = start + opts.timeout;
    let mut next_progress = start + Duration::from_secs(1);
    let mut linger_until: Option<Instant> = None;
    let mut agent: Option<A> = None;
    let mut error = None;
    let mut held = Held::new(opts.reaction);
    let mut next_frame = opts.frames.map(|_| start);
    loop {
        let now = udp.now();
        if think(udp.peer_mut(), &mut agent, &mut make_agent, now, &mut held) {
            progress(udp.peer(), now);
        }
        held.submit_due(udp.peer_mut(), now);
        if let (Some(every), Some(at)) = (opts.frames, next_frame)
            && now >= at
        {
            let epoch = udp.epoch;
            let mut clock = move || Instant::from_std(epoch, std::time::Instant::now());
            let _ = udp.peer_mut().handle_frame(now, &mut clock);
            // A late frame is not made up for: the next one is a frame from now.
            next_frame = Some((at + every).max(now + Duration::from_micros(every.as_micros() / 2)));
        }
        udp.send_all(now);
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let peer = udp.peer();
        if peer.is_done() {
            let until = *linger_until.get_or_insert(now + opts.linger);
            if peer.is_flushed() || peer.disconnected().is_some() || now >= until {
                break;
            }
        }
        if opts
            .vanish_after
            .is_some_and(|d| now.saturating_since(Instant::ZERO) >= d)
        {
            // A crash: no Leave, no disconnect; the relay finds out by timeout.
            let _ = think(udp.peer_mut(), &mut agent, &mut make_agent, now, &mut held);
            let mut summary = udp.peer().summary(now);
            summary.error = Some("vanished (fault switch)".into());
            return Ok(summary);
        }
        if peer.disconnected().is_some() {
            break;
        }
        if now >= deadline {
            if !peer.is_done() {
                // Say what it was still waiting for, if the match never began.
                error = Some(match (peer.world(), peer.lobby()) {
                    (None, Some((joined, slots))) => format!(
                        "gave up after {} waiting in the lobby ({joined} of {slots} players joined)",
                        opts.timeout
                    ),
                    (None, None) => format!(
                        "gave up after {} waiting for the relay to seat this peer",
                        opts.timeout
                    ),
                    (Some(_), _) => format!("gave up after {}", opts.timeout),
                });
            }
            break;
        }
        if now >= next_progress {
            next_progress = now + Duration::from_secs(1);
            progress(peer, now);
        }
        let wait = linger_until.map_or(opts.frame, |u| u.saturating_since(now).min(opts.frame));
        let wait = held
            .next()
            .map_or(wait, |t| t.saturating_since(now).min(wait));
        let wait = next_frame.map_or(wait, |t| t.saturating_since(now).min(wait));
        udp.pump(wait)?;
    }
    udp.close();
    let now = udp.now();
    let _ = think(udp.peer_mut(), &mut agent, &mut make_agent, now, &mut held);
    udp.peer_mut().close_recording();
    let mut summary = udp.peer().summary(now);
    if summary.error.is_none() {
        summary.error = error;
    }
    Ok(summary)
}

/// Polls every event: builds the agent at the start, lets it think after
/// every turn and submits what it returns. Whether the rejoin secret
/// arrived among them (the caller reports it at once).
fn think<S: Simulation, A: Agent<S>>(
    peer: &mut Peer<S>,
    agent: &mut Option<A>,
    make_agent: &mut impl FnMut(PlayerId) -> A,
    now: Instant,
    held: &mut Held<S::Command>,
) -> bool {
    let mut secret = false;
    while let Some(ev) = peer.poll_event() {
        match ev {
            PeerEvent::Started { player, .. } => *agent = Some(make_agent(player)),
            PeerEvent::RejoinSecret { .. } => secret = true,
            // A rejoining peer's orders would come too late to matter.
            PeerEvent::TurnReady { turn, .. } if !peer.is_catching_up() => {
                if let (Some(a), Some(world)) = (agent.as_mut(), peer.world()) {
                    let orders = a.think(world, turn);
                    if !orders.is_empty() {
                        held.push(peer, now, orders);
                    }
                }
            }
            _ => {}
        }
    }
    secret
}

/// Orders waiting for their reaction time ([`PlayOptions::reaction`]).
struct Held<C> {
    reaction: Option<(Duration, u64)>,
    orders: std::collections::VecDeque<(Instant, Vec<C>)>,
}

impl<C> Held<C> {
    const fn new(reaction: Option<(Duration, u64)>) -> Self {
        Self {
            reaction,
            orders: std::collections::VecDeque::new(),
        }
    }

    /// Submits `orders` now, or holds them for a random reaction time
    /// (kept in order: a later turn's orders never overtake an earlier one's).
    fn push<S: Simulation<Command = C>>(
        &mut self,
        peer: &mut Peer<S>,
        now: Instant,
        orders: Vec<C>,
    ) {
        let Some((max, rng)) = &mut self.reaction else {
            // A full queue only delays the agent; nothing to do about it here.
            let _ = peer.submit(now, &orders);
            return;
        };
        // xorshift64: seeded, the same on every platform.
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        let at = now + Duration::from_micros(*rng % max.as_micros().max(1));
        let at = self.orders.back().map_or(at, |(t, _)| (*t).max(at));
        self.orders.push_back((at, orders));
    }

    fn submit_due<S: Simulation<Command = C>>(&mut self, peer: &mut Peer<S>, now: Instant) {
        while self.orders.front().is_some_and(|(at, _)| *at <= now) {
            if let Some((_, orders)) = self.orders.pop_front() {
                let _ = peer.submit(now, &orders);
            }
        }
    }

    fn next(&self) -> Option<Instant> {
        self.orders.front().map(|(at, _)| *at)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests may unwrap
    use super::*;

    /// One frame's work is bounded: with more datagrams queued than the
    /// batch size (junk from a stranger here), `pump` reads exactly a batch
    /// and leaves the rest in the socket for the next frame, instead of
    /// draining an endless flood.
    #[test]
    fn a_pump_reads_a_bounded_batch_and_leaves_the_rest_for_the_next() {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = socket.local_addr().unwrap();
        // A relay address nobody answers on: the handshake just waits.
        let relay = UdpSocket::bind("127.0.0.1:0").unwrap();
        let builder = PeerBuilder::<sim::arena::Arena>::new("m", 2);
        let batch = 8;
        let mut udp = UdpPeer::new(socket, relay.local_addr().unwrap(), builder)
            .unwrap()
            .with_max_batch(batch);
        let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
        let extra = 12;
        for i in 0..batch + extra {
            stranger.send_to(&[0xEE, (i % 251) as u8], addr).unwrap();
        }
        udp.pump(Duration::from_millis(200)).unwrap();
        udp.socket.set_nonblocking(true).unwrap();
        let mut left = 0;
        let mut buf = [0u8; 16];
        while udp.socket.recv_from(&mut buf).is_ok() {
            left += 1;
        }
        assert_eq!(left, extra);
    }

    /// The handshake salt of a peer on a real network comes from the OS
    /// CSPRNG, not from its seed: two peers with the same `--seed` (the
    /// default is 1, and a seed is often guessable) send different salts,
    /// so nobody can forge the relay's `Denied` or `Challenge` for them
    /// from off the path.
    #[test]
    fn peers_with_the_same_seed_send_unguessable_distinct_handshake_salts() {
        let relay = UdpSocket::bind("127.0.0.1:0").unwrap();
        relay
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let salt_of = || {
            let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
            let builder = PeerBuilder::<sim::arena::Arena>::new("m", 2).with_seed(1);
            let mut udp = UdpPeer::new(socket, relay.local_addr().unwrap(), builder).unwrap();
            let now = udp.now();
            udp.send_all(now);
            let mut buf = [0u8; 2048];
            let (n, _) = relay.recv_from(&mut buf).unwrap();
            let Ok(crate::wire::Packet::ConnectRequest { client_salt, .. }) =
                crate::wire::decode(&buf[..n])
            else {
                panic!("a connect request expected");
            };
            client_salt
        };
        let (a, b) = (salt_of(), salt_of());
        assert_ne!(a, b, "the same seed gave the same salt");
        // Neither is the salt the seed alone would give.
        let seeded = crate::transport::Client::new(
            Instant::ZERO,
            relay.local_addr().unwrap(),
            crate::transport::TransportConfig::default(),
            1,
        );
        let mut buf = Vec::new();
        let mut seeded = seeded;
        seeded.poll_transmit(Instant::ZERO, &mut buf).unwrap();
        let Ok(crate::wire::Packet::ConnectRequest { client_salt, .. }) = crate::wire::decode(&buf)
        else {
            panic!("a connect request expected");
        };
        assert!(a != client_salt && b != client_salt);
    }

    /// The rejoin secret reaches the game as soon as it arrives: `play`
    /// calls `progress` at once, well before its first once-a-second tick,
    /// so a peer killed in its first second can still rejoin. (The relay's
    /// Start and secret are handed straight to the peer's session here, as
    /// the transport would deliver them.)
    #[test]
    fn play_hands_the_rejoin_secret_to_progress_before_the_first_tick() {
        use crate::proto::{RejoinSecret, ToPeer};
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        // A relay address nobody answers on: only the delivered messages count.
        let relay = UdpSocket::bind("127.0.0.1:0").unwrap();
        let builder = PeerBuilder::<sim::arena::Arena>::new("m", 2);
        let mut udp = UdpPeer::new(socket, relay.local_addr().unwrap(), builder).unwrap();
        let start = super::super::tests::start_msg_as(PlayerId(1), 2, 100);
        let secret = RejoinSecret([9; 16]);
        let now = udp.now();
        udp.peer.game.handle_message(now, &start);
        udp.peer
            .game
            .handle_message(now, &ToPeer::RejoinSecret(secret).to_bytes());
        let stop = AtomicBool::new(false);
        // A timeout shorter than the once-a-second report: play gives up
        // before its first periodic report, so a report at all is one made
        // when the secret arrived (no wall-clock threshold to assert).
        let opts = PlayOptions {
            timeout: Duration::from_millis(500),
            linger: Duration::ZERO,
            ..PlayOptions::default()
        };
        let mut seen = Vec::new();
        let bot = |p| sim::arena::Bot::new(p, 1, 60);
        play(&mut udp, bot, &opts, &stop, |peer, now| {
            seen.push((now, peer.rejoin_secret()));
            stop.store(true, Ordering::Relaxed);
        })
        .unwrap();
        let Some(&(_, got)) = seen.first() else {
            panic!("no report before the timeout: the secret waited for the periodic one");
        };
        assert_eq!(got, Some((PlayerId(1), secret)));
        assert_eq!(seen.len(), 1, "stopped at the first report");
    }
}
