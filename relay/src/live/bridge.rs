//! One browser's live view: a spectator client of this relay over loopback
//! UDP (the library's session and transport, as any spectator), whose
//! events become a recording's bytes sent over the browser's WebSocket, and
//! whose hash reports come from the browser. It runs on a thread of its own
//! with the real clock, like a peer's UDP runner.

use super::websocket::{
    self, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG, OP_TEXT, Overflow, SendQueue, decode_frame,
};
use super::{Listed, LiveConfig, MAX_CLIENT_FRAME, SEND_QUEUE_BYTES};
use lockstep::low_level::peer_glue::PeerGlue;
use lockstep::low_level::session::{Event, Session, SessionBuilder};
use lockstep::low_level::transport::Client;
use lockstep::token::ConnectToken;
use lockstep::{Duration, Instant};
use replays::{DEFAULT_SYNC, ReplayError, Sink, Writer};
use serde_json::json;
use sim::{StateHash, Turn};
use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, UdpSocket};
use std::rc::Rc;
use std::time::Duration as StdDuration;

/// Longest wait for a datagram before the browser's socket is looked at again.
const POLL: StdDuration = StdDuration::from_millis(10);

/// After the match ended: how long the bridge waits for the last bytes to
/// reach the browser and its last hashes to reach the relay.
const LINGER: StdDuration = StdDuration::from_secs(5);

/// A std duration as the protocol's (milliseconds, saturating).
fn to_lockstep(d: StdDuration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// How often the bridge queues a ping behind the feed ([`ReadCheck`]).
const PING_EVERY: Duration = Duration::from_millis(1000);

/// Whether the browser reads its feed. A ping queued behind the feed is
/// answered (browsers answer pings themselves) only once the browser has
/// read every byte before it, so the oldest unanswered ping's age is how
/// long the browser has left the feed unread, whatever the kernel's buffers
/// absorb meanwhile. Sans-IO: time is passed in.
#[derive(Debug)]
pub(super) struct ReadCheck {
    limit: Duration,
    next: u64,
    last: Option<Instant>,
    /// Pings queued and not yet answered, oldest first.
    waiting: std::collections::VecDeque<(u64, Instant)>,
}

impl ReadCheck {
    /// A check that cuts after `limit` unread ([`super::stall_limit`]).
    pub(super) fn new(limit: Duration) -> Self {
        Self {
            limit,
            next: 0,
            last: None,
            waiting: std::collections::VecDeque::new(),
        }
    }

    /// The payload of a ping to queue now, every [`PING_EVERY`].
    pub(super) fn poll_ping(&mut self, now: Instant) -> Option<[u8; 8]> {
        if self
            .last
            .is_some_and(|l| now.saturating_since(l) < PING_EVERY)
        {
            return None;
        }
        self.last = Some(now);
        let seq = self.next;
        self.next += 1;
        self.waiting.push_back((seq, now));
        Some(seq.to_be_bytes())
    }

    /// A pong: its ping and every earlier one are answered (a browser may
    /// answer only the latest of several). Anything else is ignored.
    pub(super) fn handle_pong(&mut self, payload: &[u8]) {
        let Ok(bytes) = <[u8; 8]>::try_from(payload) else {
            return;
        };
        let seq = u64::from_be_bytes(bytes);
        while self.waiting.front().is_some_and(|(s, _)| *s <= seq) {
            self.waiting.pop_front();
        }
    }

    /// Whether the oldest unanswered ping has waited longer than the limit.
    pub(super) fn is_stalled(&self, now: Instant) -> bool {
        self.waiting
            .front()
            .is_some_and(|(_, at)| now.saturating_since(*at) > self.limit)
    }
}

/// One hash report in a browser's binary message: the turn (u32, little
/// endian) and the 32-byte state hash after it.
pub(super) const HASH_REPORT_LEN: usize = 36;

/// A recording's bytes as the writer produces them, taken out after each
/// batch of events.
#[derive(Clone, Default)]
struct Pipe(Rc<RefCell<Vec<u8>>>);

impl Write for Pipe {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Sink for Pipe {
    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// What a spectator session's events write: the header (as the relay's own
/// recording of the match has it), the agreed snapshot as a keyframe when
/// the view joined late, then every turn, drop, rejoin and delay change.
struct LiveRecording {
    writer: Writer<Pipe>,
    pipe: Pipe,
    /// Whether the start is known (the spectator's `Restored`, or a first
    /// turn): the header waits for it, so the page's first message holds
    /// the header and the world to start from together.
    started: bool,
}

impl LiveRecording {
    fn new(listed: &Listed) -> Result<Self, ReplayError> {
        let pipe = Pipe::default();
        let header = crate::recorder::header(
            &listed.info,
            crate::games::known_rules_hash(&listed.info),
            listed.started_unix_ms,
        );
        Ok(Self {
            writer: Writer::new(pipe.clone(), &header, DEFAULT_SYNC)?,
            pipe,
            started: false,
        })
    }

    /// Writes what `ev` adds to the recording; returns a status line for
    /// the page (JSON text) when it is one.
    fn handle(&mut self, ev: Event) -> Result<Option<serde_json::Value>, ReplayError> {
        match ev {
            Event::Restored { snapshot } => {
                if let Some((turn, hash, bytes)) = snapshot {
                    self.writer.record_keyframe(turn, &bytes, hash)?;
                }
                self.started = true;
            }
            Event::TurnReady { turn, inputs } => {
                self.writer.record_turn(turn, &inputs)?;
                self.started = true;
            }
            Event::PlayerDropped { player, turn } => self.writer.record_drop(player, turn)?,
            Event::PlayerRejoined { player, turn } => self.writer.record_rejoin(player, turn)?,
            Event::InputDelayChanged { delay, from_turn } => self
                .writer
                .record_delay_change(u32::from(delay), from_turn)?,
            Event::MatchEnded { turn, reason } => {
                return Ok(Some(
                    json!({"event": "ended", "turn": turn.map(|t| t.0), "reason": format!("{reason:?}")}),
                ));
            }
            Event::Desync { turn, .. } => {
                return Ok(Some(json!({"event": "desync", "turn": turn.0})));
            }
            Event::Rejected { reason, detail } => {
                return Ok(Some(
                    json!({"event": "refused", "reason": reason.to_string(), "detail": detail}),
                ));
            }
            _ => {}
        }
        Ok(None)
    }

    /// The bytes written since the last call (none before the start is known).
    fn take(&mut self) -> Vec<u8> {
        if self.started {
            std::mem::take(&mut *self.pipe.0.borrow_mut())
        } else {
            Vec::new()
        }
    }
}

/// Reads the hash reports of one binary message: whole 36-byte entries,
/// anything else ignored.
pub(super) fn hash_reports(payload: &[u8]) -> impl Iterator<Item = (Turn, StateHash)> + '_ {
    payload.chunks_exact(HASH_REPORT_LEN).map(|c| {
        let turn = Turn(u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
        let mut h = [0u8; 32];
        h.copy_from_slice(&c[4..]);
        (turn, StateHash(h))
    })
}

/// Why a bridge stopped (for the close frame; the log has no line per browser).
enum End {
    /// The browser closed its tab or socket.
    Browser,
    /// The match is over and its last bytes went out.
    Ended,
    /// The browser read too slowly.
    Slow,
    /// The browser broke the WebSocket protocol.
    Protocol(u16),
    /// The relay refused the spectator or the connection was lost.
    Relay,
}

/// The spectator's connection to the relay and the browser's socket.
struct Bridge {
    ws: TcpStream,
    udp: UdpSocket,
    client: Client,
    session: Session,
    glue: PeerGlue,
    rec: LiveRecording,
    out: SendQueue,
    inbuf: Vec<u8>,
    epoch: std::time::Instant,
    buf: Vec<u8>,
    reads: ReadCheck,
}

/// Runs one browser's live view of `listed` until the tab closes, the
/// match ends, or the browser falls behind.
///
/// # Errors
/// The sockets could not be set up.
pub(super) fn run(
    ws: TcpStream,
    listed: &Listed,
    config: &LiveConfig,
    token: Option<ConnectToken>,
) -> io::Result<()> {
    let local: SocketAddr = if config.relay.is_ipv4() {
        (Ipv4Addr::LOCALHOST, 0).into()
    } else {
        (Ipv6Addr::LOCALHOST, 0).into()
    };
    let udp = UdpSocket::bind(local)?;
    let entropy = crate::entropy::os_random("a live view's connection")?;
    let mut seed = [0u8; 8];
    seed.copy_from_slice(&entropy[..8]);
    let seed = u64::from_le_bytes(seed);
    let now = Instant::ZERO;
    let name = &listed.info.match_name;
    let client = match (&config.token_key, token) {
        // The viewer's own spectator token, checked by the route: the relay
        // admits the view on the viewer's credential, not on the bridge's.
        (Some(_), Some(token)) => {
            Client::with_token(now, config.relay, config.transport, &token, seed)
        }
        (Some(_), None) => {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "token mode: a live view needs the viewer's spectator token",
            ));
        }
        (None, _) => Client::new(now, config.relay, config.transport, seed),
    };
    let session = SessionBuilder::new()
        .with_match(name, listed.info.setup.players.max(1))
        .with_game(
            &listed.info.game_id,
            listed.info.game_version,
            listed.info.rules_hash,
        )
        .with_name("browser")
        .with_spectate()
        .build(now)
        .map_err(io::Error::other)?;
    ws.set_nonblocking(true)?;
    let mut bridge = Bridge {
        ws,
        udp,
        client,
        session,
        glue: PeerGlue::new(),
        rec: LiveRecording::new(listed).map_err(io::Error::other)?,
        out: SendQueue::new(SEND_QUEUE_BYTES),
        inbuf: Vec::new(),
        epoch: std::time::Instant::now(),
        buf: Vec::with_capacity(2048),
        reads: ReadCheck::new(to_lockstep(super::stall_limit(config.spectator_delay))),
    };
    let end = bridge.pump_until_done();
    bridge.finish(&end);
    Ok(())
}

impl Bridge {
    fn now(&self) -> Instant {
        Instant::from_std(self.epoch, std::time::Instant::now())
    }

    fn send_datagrams(&mut self, now: Instant) {
        while let Some(to) = self.client.poll_transmit(now, &mut self.buf) {
            // A lost datagram is resent by the transport.
            let _ = self.udp.send_to(&self.buf, to);
        }
    }

    /// Waits up to [`POLL`] for datagrams and hands them to the client.
    fn read_datagrams(&mut self) -> io::Result<()> {
        let now = self.now();
        let wait = [self.client.poll_timeout(), self.session.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
            .map_or(POLL, |t| t.saturating_since(now).to_std().min(POLL))
            .max(StdDuration::from_millis(1));
        self.udp.set_nonblocking(false)?;
        self.udp.set_read_timeout(Some(wait))?;
        let mut recv = [0u8; 2048];
        for i in 0..256 {
            match self.udp.recv_from(&mut recv) {
                Ok((n, from)) => {
                    let now = self.now();
                    self.client.handle_datagram(now, from, &recv[..n]);
                }
                Err(e)
                    if lockstep::peer::udp::is_timeout(&e)
                        || lockstep::peer::udp::is_transient(&e) =>
                {
                    break;
                }
                Err(e) => return Err(e),
            }
            if i == 0 {
                self.udp.set_nonblocking(true)?;
            }
        }
        Ok(())
    }

    /// Reads what the browser sent: hash reports go to the relay, a ping
    /// is answered, a close ends the view.
    fn read_browser(&mut self, now: Instant) -> Result<(), End> {
        let mut chunk = [0u8; 4096];
        loop {
            match self.ws.read(&mut chunk) {
                Ok(0) => return Err(End::Browser),
                Ok(n) => self.inbuf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Err(End::Browser),
            }
            // Frames are taken as they complete, so the buffer holds at
            // most one frame under the cap and a read's worth.
            self.take_frames(now)?;
        }
        self.take_frames(now)
    }

    fn take_frames(&mut self, now: Instant) -> Result<(), End> {
        loop {
            let (frame, used) = match decode_frame(&self.inbuf, MAX_CLIENT_FRAME) {
                Ok(Some(f)) => f,
                Ok(None) => return Ok(()),
                Err(e) => return Err(End::Protocol(e.close_code())),
            };
            self.inbuf.drain(..used);
            match frame.opcode {
                OP_BINARY => {
                    for (turn, hash) in hash_reports(&frame.payload) {
                        // A turn not yet seen or already reported is refused
                        // by the session, as any spectator's would be.
                        let _ = self.session.report_hash(turn, hash, Vec::new());
                    }
                    self.glue.pump(now, &mut self.session, &mut self.client);
                }
                OP_PING => self
                    .out
                    .push(OP_PONG, &frame.payload)
                    .map_err(|Overflow| End::Slow)?,
                OP_PONG => self.reads.handle_pong(&frame.payload),
                OP_CLOSE => return Err(End::Browser),
                // Text means nothing here.
                _ => {}
            }
        }
    }

    /// Writes what the browser can take now.
    fn write_browser(&mut self) -> Result<(), End> {
        while !self.out.is_empty() {
            match self.ws.write(self.out.front()) {
                Ok(0) => return Err(End::Browser),
                Ok(n) => self.out.consume(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Err(End::Browser),
            }
        }
        Ok(())
    }

    /// The session's events into the recording; its bytes and status lines
    /// into the browser's queue.
    fn forward_events(&mut self, ended: &mut Option<std::time::Instant>) -> Result<(), End> {
        while let Some(ev) = self.session.poll_event() {
            let refused = matches!(ev, Event::Rejected { .. });
            let over = matches!(ev, Event::MatchEnded { .. });
            let status = self.rec.handle(ev).map_err(|_| End::Relay)?;
            let bytes = self.rec.take();
            if !bytes.is_empty() {
                self.out.push(OP_BINARY, &bytes).map_err(|_| End::Slow)?;
            }
            if let Some(s) = status {
                self.out
                    .push(OP_TEXT, s.to_string().as_bytes())
                    .map_err(|_| End::Slow)?;
            }
            if refused {
                return Err(End::Relay);
            }
            if over {
                ended.get_or_insert_with(std::time::Instant::now);
            }
        }
        Ok(())
    }

    fn pump_until_done(&mut self) -> End {
        let mut ended: Option<std::time::Instant> = None;
        loop {
            let now = self.now();
            self.glue.pump(now, &mut self.session, &mut self.client);
            self.send_datagrams(now);
            if self.read_datagrams().is_err() {
                return End::Relay;
            }
            let now = self.now();
            self.client.handle_timeout(now);
            self.session.handle_timeout(now);
            self.glue.pump(now, &mut self.session, &mut self.client);
            if let Err(end) = self.forward_events(&mut ended) {
                return end;
            }
            if let Err(end) = self.read_browser(now) {
                return end;
            }
            if let Some(ping) = self.reads.poll_ping(now)
                && self.out.push(OP_PING, &ping).is_err()
            {
                return End::Slow;
            }
            if ended.is_none() && self.reads.is_stalled(now) {
                return End::Slow;
            }
            if let Err(end) = self.write_browser() {
                return end;
            }
            self.send_datagrams(now);
            if ended.is_none() && self.glue.disconnected().is_some() {
                return End::Relay;
            }
            if let Some(at) = ended {
                let flushed = self.out.is_empty() && self.glue.is_flushed(&self.client);
                if flushed || at.elapsed() > LINGER {
                    return End::Ended;
                }
            }
        }
    }

    /// The rest of the closing handshake, after our close frame: no more
    /// from us (FIN), then what the browser still sends (hash reports in
    /// flight) is read and dropped until its close frame or its FIN, for at
    /// most a second. A socket closed with unread bytes is reset instead,
    /// and the reset can discard our close frame and the last turns before
    /// the browser reads them.
    fn await_close(&mut self) {
        let _ = self.ws.shutdown(std::net::Shutdown::Write);
        let _ = self
            .ws
            .set_read_timeout(Some(StdDuration::from_millis(100)));
        let until = std::time::Instant::now() + StdDuration::from_secs(1);
        let mut chunk = [0u8; 4096];
        while std::time::Instant::now() < until {
            loop {
                match decode_frame(&self.inbuf, MAX_CLIENT_FRAME) {
                    Ok(Some((frame, used))) => {
                        self.inbuf.drain(..used);
                        if frame.opcode == OP_CLOSE {
                            return;
                        }
                    }
                    Ok(None) => break,
                    Err(_) => return,
                }
            }
            match std::io::Read::read(&mut self.ws, &mut chunk) {
                Ok(0) => return,
                Ok(n) => self.inbuf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => return,
            }
        }
    }

    /// Leaves the match at once (the relay frees the spectator's place
    /// without a timeout) and closes the WebSocket with a code saying why.
    fn finish(&mut self, end: &End) {
        let now = self.now();
        self.session.leave(now);
        self.glue.pump(now, &mut self.session, &mut self.client);
        self.client.disconnect(now);
        self.send_datagrams(now);
        let (code, reason): (u16, &str) = match end {
            End::Browser | End::Ended => (1000, "match over"),
            End::Slow => (1008, "too slow: dropped"),
            End::Protocol(code) => (*code, "protocol error"),
            End::Relay => (1011, "the relay refused or lost the view"),
        };
        let mut payload = code.to_be_bytes().to_vec();
        payload.extend_from_slice(reason.as_bytes());
        let mut frame = Vec::new();
        websocket::encode_frame(OP_CLOSE, &payload, &mut frame);
        // Best effort, bounded: whatever is queued, then the close.
        let _ = self.ws.set_nonblocking(false);
        let _ = self.ws.set_write_timeout(Some(StdDuration::from_secs(1)));
        if !matches!(end, End::Slow | End::Browser) {
            while !self.out.is_empty() {
                match self.ws.write(self.out.front()) {
                    Ok(n) if n > 0 => self.out.consume(n),
                    _ => break,
                }
            }
        }
        let _ = self.ws.write_all(&frame);
        if !matches!(end, End::Browser) {
            self.await_close();
        }
        let _ = self.ws.shutdown(std::net::Shutdown::Both);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a virtual clock: a browser that answers pings is never cut; one
    /// that reads nothing is cut once its oldest ping is older than the
    /// limit, max(10 s, 2 × delay), and not before.
    #[test]
    fn a_viewer_that_reads_nothing_is_cut_after_the_stall_limit() {
        let ms = Instant::from_micros;
        let at = |m: u64| ms(m * 1000);
        for (delay_ms, limit_ms) in [(3_000, 10_000), (200, 10_000), (8_000, 16_000)] {
            let limit = super::super::stall_limit(StdDuration::from_millis(delay_ms));
            assert_eq!(limit, StdDuration::from_millis(limit_ms));
            let mut reader = ReadCheck::new(to_lockstep(limit));
            let mut idle = ReadCheck::new(to_lockstep(limit));
            let mut cut_at = None;
            for t in (0..60_000u64).step_by(10) {
                if let Some(p) = reader.poll_ping(at(t)) {
                    reader.handle_pong(&p);
                }
                assert!(!reader.is_stalled(at(t)), "a reading browser at {t} ms");
                let _ = idle.poll_ping(at(t));
                if cut_at.is_none() && idle.is_stalled(at(t)) {
                    cut_at = Some(t);
                }
            }
            // The first ping goes at 0: cut in the first step past the limit.
            assert_eq!(cut_at, Some(limit_ms + 10), "delay {delay_ms} ms");
        }
        // A pong for a later ping answers the earlier ones too; junk is ignored.
        let mut c = ReadCheck::new(Duration::from_millis(10_000));
        let _ = c.poll_ping(at(0));
        let p1 = c.poll_ping(at(1_000)).unwrap();
        c.handle_pong(b"junk");
        assert!(c.is_stalled(at(10_001)));
        c.handle_pong(&p1);
        assert!(!c.is_stalled(at(10_001)));
    }

    #[test]
    fn hash_reports_are_whole_36_byte_entries() {
        let mut msg = Vec::new();
        for t in [7u32, 8] {
            msg.extend_from_slice(&t.to_le_bytes());
            msg.extend_from_slice(&[t as u8; 32]);
        }
        msg.extend_from_slice(&[1, 2, 3]); // a torn tail is ignored
        let got: Vec<(Turn, StateHash)> = hash_reports(&msg).collect();
        assert_eq!(
            got,
            vec![(Turn(7), StateHash([7; 32])), (Turn(8), StateHash([8; 32]))]
        );
    }
}
