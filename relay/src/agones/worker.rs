//! The threads that talk to the SDK server: the worker (one blocking
//! HTTP/1.1 request at a time, each bounded by a timeout, fed by a
//! bounded channel the event loops only `try_send` into) and the watcher
//! of `GET /watch/gameserver`.

use super::ledger::{Answer, Ledger};
use super::rest::{Dechunker, GameServerView, RestRequest, RestResponse, SdkCall, parse_head};
use super::{AgonesConfig, AgonesNote, Msg};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Longest answer read from the SDK server (a GameServer object is a few KiB).
const MAX_ANSWER: usize = 1024 * 1024;
/// First wait before calling an unreachable SDK again; doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// Longest wait between attempts while the SDK is unreachable.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// What a note callback is: any thread may call it.
pub(super) type NoteFn = Arc<dyn Fn(AgonesNote) + Send + Sync>;

/// One request to the SDK server on `127.0.0.1:port`, the whole exchange
/// (connect, write, read) bounded by `timeout`.
pub(super) fn call(port: u16, req: &RestRequest, timeout: Duration) -> io::Result<RestResponse> {
    let deadline = Instant::now() + timeout;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    let _ = s.set_nodelay(true);
    s.set_write_timeout(Some(timeout))?;
    let mut out = Vec::with_capacity(256);
    req.encode(port, &mut out);
    s.write_all(&out)?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no answer within {} ms", timeout.as_millis()),
            ));
        }
        s.set_read_timeout(Some(left))?;
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no answer within {} ms", timeout.as_millis()),
                ));
            }
            Err(e) => return Err(e),
        }
        if raw.len() > MAX_ANSWER {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "answer too long",
            ));
        }
        // A server that keeps the connection open despite `Connection:
        // close`: a whole answer with a length (or chunked) is enough.
        if let Ok(Some(h)) = parse_head(&raw)
            && (h.chunked || h.length.is_some())
            && let Ok(r) = super::rest::parse_response(&raw)
        {
            return Ok(r);
        }
    }
    super::rest::parse_response(&raw).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// The worker's state between calls.
pub(super) struct Worker {
    pub(super) config: AgonesConfig,
    pub(super) ledger: Ledger,
    pub(super) rx: Receiver<Msg>,
    pub(super) done: Sender<bool>,
    pub(super) lost: Arc<AtomicU64>,
    pub(super) healthy: Box<dyn Fn() -> bool + Send>,
    pub(super) note: NoteFn,
}

impl Worker {
    fn absorb(&mut self, m: Msg) {
        match m {
            Msg::Start(id, values) => self.ledger.start_match(id, values),
            Msg::End(id) => self.ledger.end_match(id),
            Msg::Drain => self.ledger.begin_drain(),
            Msg::Stop => self.ledger.want_shutdown(),
        }
    }

    /// Runs until Shutdown was answered (or the handle was dropped and
    /// every call since is made).
    pub(super) fn run(mut self) {
        let mut next_health = Instant::now();
        let mut retry_at: Option<Instant> = None;
        let mut backoff = FIRST_BACKOFF;
        let mut outage = false;
        let mut lost_said = 0;
        // The last refusal logged: a refusal repeated (a Health ping the
        // SDK keeps refusing) is logged once.
        let mut refusal_said = String::new();
        loop {
            loop {
                match self.rx.try_recv() {
                    Ok(m) => self.absorb(m),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        self.ledger.want_shutdown();
                        break;
                    }
                }
            }
            let lost = self.lost.load(Ordering::Relaxed);
            if lost > lost_said {
                (self.note)(AgonesNote::EventsLost { count: lost });
                lost_said = lost;
            }
            if self.ledger.list_full_first_time() {
                (self.note)(AgonesNote::ListFull {
                    list: self.config.players_list.clone(),
                    capacity: self.config.players_capacity,
                });
            }
            if self.ledger.is_shut() {
                let _ = self.done.send(true);
                return;
            }
            let now = Instant::now();
            if retry_at.is_none_or(|t| now >= t) {
                let due = self.ledger.next_call().or_else(|| {
                    let ping =
                        self.ledger.is_ready() && !self.ledger.is_draining() && now >= next_health;
                    if ping {
                        next_health = now + self.config.health_every;
                    }
                    // Never a ping while `/health` would answer 503.
                    (ping && (self.healthy)()).then_some(SdkCall::Health)
                });
                if let Some(c) = due {
                    match call(self.config.port, &c.request(), self.config.timeout) {
                        Ok(r) if r.is_success() => {
                            if outage {
                                (self.note)(AgonesNote::Reachable);
                                outage = false;
                            }
                            retry_at = None;
                            backoff = FIRST_BACKOFF;
                            self.ledger.answered(&c, Answer::Ok(&r.body));
                        }
                        Ok(r) if (400..500).contains(&r.status) => {
                            let msg = r.message();
                            if let Some(w) =
                                self.ledger.answered(&c, Answer::Refused(r.status, &msg))
                                && w != refusal_said
                            {
                                (self.note)(AgonesNote::Refused { text: w.clone() });
                                refusal_said = w;
                            }
                        }
                        other => {
                            let error = match other {
                                Ok(r) => format!("HTTP {}: {}", r.status, r.message()),
                                Err(e) => e.to_string(),
                            };
                            if !outage {
                                (self.note)(AgonesNote::Unreachable {
                                    call: c.name(),
                                    port: self.config.port,
                                    error,
                                });
                                outage = true;
                            }
                            retry_at = Some(Instant::now() + backoff);
                            backoff = (backoff * 2).min(MAX_BACKOFF);
                        }
                    }
                    continue;
                }
            }
            let now = Instant::now();
            let mut wake = retry_at.unwrap_or(now + self.config.health_every);
            if self.ledger.is_ready() && !self.ledger.is_draining() {
                wake = wake.min(next_health.max(now));
            }
            match self.rx.recv_timeout(wake.saturating_duration_since(now)) {
                Ok(m) => self.absorb(m),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => self.ledger.want_shutdown(),
            }
        }
    }
}

/// Follows `GET /watch/gameserver` for as long as the process lives,
/// reporting the GameServer's state and its `lockstep.dev/` labels and
/// annotations whenever they change; reconnects after a failure.
pub(super) fn watch(port: u16, note: &NoteFn) {
    let mut last: Option<(String, Vec<(String, String)>)> = None;
    let mut backoff = FIRST_BACKOFF;
    loop {
        let r = watch_once(port, &mut |view| {
            let meta: Vec<(String, String)> = view
                .labels
                .iter()
                .chain(&view.annotations)
                .filter(|(k, _)| k.starts_with(super::METADATA_PREFIX))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let now = (view.state.clone(), meta);
            if last.as_ref() != Some(&now) {
                (note)(AgonesNote::GameServer {
                    state: now.0.clone(),
                    metadata: now.1.clone(),
                });
                last = Some(now);
            }
        });
        if r.is_ok() {
            backoff = FIRST_BACKOFF;
        }
        // Pacing between attempts, not synchronisation: the SDK server is
        // down or ended the stream.
        std::thread::sleep(backoff);
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// One watch connection, until it ends; `Ok` if it delivered anything.
fn watch_once(port: u16, seen: &mut dyn FnMut(GameServerView)) -> io::Result<()> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = TcpStream::connect_timeout(&addr, MAX_BACKOFF)?;
    let mut out = Vec::new();
    RestRequest::get("/watch/gameserver").encode(port, &mut out);
    s.write_all(&out)?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    // Whether the body is chunked, once the head is read.
    let mut head: Option<bool> = None;
    let mut dechunk = Dechunker::default();
    let mut body = Vec::new();
    let mut any = false;
    loop {
        let n = s.read(&mut buf)?;
        if n == 0 {
            return if any {
                Ok(())
            } else {
                Err(io::ErrorKind::UnexpectedEof.into())
            };
        }
        if head.is_none() {
            raw.extend_from_slice(&buf[..n]);
            if raw.len() > MAX_ANSWER {
                return Err(io::ErrorKind::InvalidData.into());
            }
            match parse_head(&raw) {
                Ok(Some(h)) => {
                    if !(200..300).contains(&h.status) {
                        return Err(io::Error::other(format!("watch answered {}", h.status)));
                    }
                    head = Some(h.chunked);
                    let rest = raw.split_off(h.start);
                    feed(h.chunked, &mut dechunk, &rest, &mut body)?;
                }
                Ok(None) => continue,
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
            }
        } else if let Some(chunked) = head {
            feed(chunked, &mut dechunk, &buf[..n], &mut body)?;
        }
        while let Some(eol) = body.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = body.drain(..=eol).collect();
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            if let Ok(view) = GameServerView::parse_watch_line(&line) {
                any = true;
                seen(view);
            }
        }
        if body.len() > MAX_ANSWER {
            return Err(io::ErrorKind::InvalidData.into());
        }
    }
}

fn feed(chunked: bool, d: &mut Dechunker, input: &[u8], body: &mut Vec<u8>) -> io::Result<()> {
    if chunked {
        d.push(input, body)
            .map(drop)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    } else {
        body.extend_from_slice(input);
        Ok(())
    }
}
