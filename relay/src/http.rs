//! The relay's HTTP side: listeners, request reading and routing, above
//! both [`crate::metrics`] (counters) and [`crate::live`] (the live view),
//! never imported by the serve loop, which only stores into atomics and
//! tells the live view about its events.
//!
//! # Layout
//!
//! Two listeners, each opt-in with a flag of its own, so that what an
//! orchestrator probes never waits on what a browser does:
//!
//! - [`spawn_metrics`] (`relay serve --metrics ADDR`): `GET /metrics`
//!   (Prometheus text) and `GET /health` (also `/healthz`), and the
//!   watchdog ([`Metrics::watch`]) on a thread of its own. Nothing else.
//! - [`spawn_live`] (`relay serve --live ADDR`): the live view's routes
//!   ([`crate::live`]: `/`, `/watch`, `/matches.json`, `/viewer.wasm` and
//!   the `/live` WebSocket), and the pages that come after it. Its clients,
//!   WebSockets included, run on threads of this listener and count
//!   against its caps ([`MAX_PAGE_REQUESTS`], then
//!   [`LiveConfig::max_viewers`](crate::live::LiveConfig::max_viewers)),
//!   never against `/health`'s.
//!
//! [`spawn_shared`] (`relay serve --http ADDR`) serves both route sets on
//! one listener, as the relay did before the split: one accept thread for
//! all, the live view's requests capped at [`MAX_SCRAPERS`] threads. It
//! stays for setups and scripts that use one address; production uses the
//! two flags, so that browsers and probes share nothing.
//!
//! Every listener reads request heads (up to [`MAX_REQUEST`] bytes) on one
//! non-blocking thread, so a slow client costs a table entry, not a
//! thread; `/metrics`, `/health` and refusals are answered there at once,
//! the live view's routes on threads of their own. At most [`MAX_OPEN`]
//! connections, [`MAX_PER_ADDRESS`] from one source address, are being
//! read at once, and a newcomer over either bound displaces the oldest,
//! never waits behind it. Every connection is cut [`REQUEST_TIME`] after
//! its accept whatever it is doing (a total deadline on the request and
//! the answer, not one per read or write call). So `/health` is answered
//! however many slow clients crowd its listener.

use crate::live::Live;
use crate::metrics::{Metric, Metrics};
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

/// Longest request (request line and headers) a listener reads; a longer
/// one is cut off. A scrape's request is a few hundred bytes.
pub const MAX_REQUEST: usize = 8 * 1024;
/// Longest a request may take from accept to the last byte of the answer,
/// however slowly its client sends (one byte a second would never trip a
/// per-read timeout). A WebSocket's upgrade answer counts; the stream
/// that follows runs on the live view's own thread.
pub const REQUEST_TIME: StdDuration = StdDuration::from_secs(2);
/// Most live-view requests the shared listener of [`spawn_shared`]
/// answers at once, each on its own thread (more are answered `503`);
/// `/metrics` and `/health` take no thread, so they are never refused.
pub const MAX_SCRAPERS: usize = 16;
/// Most requests the live view's listener ([`spawn_live`]) answers at once
/// on threads (more are answered `503`), counted apart from
/// [`MAX_SCRAPERS`]; a WebSocket leaves this count once upgraded (its
/// viewer place bounds it from then on).
pub const MAX_PAGE_REQUESTS: usize = 16;
/// How often the watchdog looks at the loops' heartbeats.
const WATCH_EVERY: StdDuration = StdDuration::from_millis(50);

/// Binds an HTTP address (any of the listeners).
///
/// # Errors
/// When the address cannot be bound.
pub fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    TcpListener::bind(addr)
}

/// The routes a listener answers.
#[derive(Clone)]
enum Routes {
    /// `/metrics` and `/health`.
    Metrics(Arc<Metrics>),
    /// The live view's.
    Live(Arc<Live>),
    /// Both, on one listener (`--http`).
    Both(Arc<Metrics>, Arc<Live>),
}

impl Routes {
    fn metrics(&self) -> Option<&Metrics> {
        match self {
            Self::Metrics(m) | Self::Both(m, _) => Some(m),
            Self::Live(_) => None,
        }
    }

    fn live(&self) -> Option<&Arc<Live>> {
        match self {
            Self::Live(l) | Self::Both(_, l) => Some(l),
            Self::Metrics(_) => None,
        }
    }
}

/// Serves `GET /metrics` and `GET /health` (200 while up, 503 while
/// draining or while the watchdog finds an event loop stalled) on
/// `listener` until `stop` is set; any other path is 404. Requests are
/// read up to [`MAX_REQUEST`] bytes on one non-blocking thread and
/// answered there at once, every connection cut [`REQUEST_TIME`] after its
/// accept, so a slow or hostile client never delays another's `/health`
/// (see the [module docs](self)); the watchdog
/// ([`Metrics::watch`]) runs on a thread of its own, so no client can delay
/// it either. The handle is the accepting thread's; it joins the
/// watchdog's before it ends.
///
/// # Errors
/// When the listener cannot be made non-blocking or a thread cannot start.
pub fn spawn_metrics(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    stop: Arc<AtomicBool>,
) -> io::Result<std::thread::JoinHandle<()>> {
    let watchdog = spawn_watchdog(Arc::clone(&metrics), Arc::clone(&stop))?;
    spawn_listener(
        listener,
        Routes::Metrics(metrics),
        MAX_SCRAPERS,
        "relay-metrics",
        Some(watchdog),
        stop,
    )
}

/// Serves the live view ([`crate::live`]) on `listener` until `stop` is
/// set: `/` (to `/watch`), `/watch` (the viewer page: the match list, and
/// with `?match=ID` the live view), `/matches.json`, `/viewer.wasm` and
/// `/live?match=ID` (the WebSocket); any other path, `/metrics` and
/// `/health` included, is 404. Its accept thread, request threads (at most
/// [`MAX_PAGE_REQUESTS`]) and WebSocket threads are its own: a crowd of
/// browsers never takes a thread or a place from [`spawn_metrics`].
///
/// # Errors
/// When the listener cannot be made non-blocking or a thread cannot start.
pub fn spawn_live(
    listener: TcpListener,
    live: Arc<Live>,
    stop: Arc<AtomicBool>,
) -> io::Result<std::thread::JoinHandle<()>> {
    spawn_listener(
        listener,
        Routes::Live(live),
        MAX_PAGE_REQUESTS,
        "relay-live-http",
        None,
        stop,
    )
}

/// Serves both [`spawn_metrics`]'s routes and [`spawn_live`]'s on one
/// listener (`relay serve --http`), sharing one accept thread; the live
/// view's requests take at most [`MAX_SCRAPERS`] threads, `/health` none;
/// the watchdog still runs on its own thread. Prefer the two listeners.
///
/// # Errors
/// As [`spawn_metrics`].
pub fn spawn_shared(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    live: Arc<Live>,
    stop: Arc<AtomicBool>,
) -> io::Result<std::thread::JoinHandle<()>> {
    let watchdog = spawn_watchdog(Arc::clone(&metrics), Arc::clone(&stop))?;
    spawn_listener(
        listener,
        Routes::Both(metrics, live),
        MAX_SCRAPERS,
        "relay-http",
        Some(watchdog),
        stop,
    )
}

/// The watchdog's thread: [`Metrics::watch`] every [`WATCH_EVERY`] until `stop`.
fn spawn_watchdog(
    metrics: Arc<Metrics>,
    stop: Arc<AtomicBool>,
) -> io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("relay-watchdog".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let _ = metrics.watch(std::time::Instant::now());
                std::thread::sleep(WATCH_EVERY);
            }
        })
}

/// Accepts on `listener` until `stop`, then joins `then` (the watchdog,
/// if this listener started one).
///
/// One thread reads every connection's request head, non-blocking (one
/// `mio` poll): a slow client costs a table entry, not a thread, so no
/// crowd of them can keep another request from being read. The table
/// holds at most [`MAX_OPEN`] connections, [`MAX_PER_ADDRESS`] from one
/// source address; a newcomer over either bound displaces the *oldest*
/// (of its address, else of all) rather than being refused: an honest
/// head arrives with the connection and is read at the next poll, so the
/// oldest is the slow one. `/metrics`, `/health` and every refusal are
/// answered on that thread at once (a small answer fits the socket's
/// buffer); the live view's routes each get a thread (at most `cap`; over
/// it `503`). Every connection, in the table or on a thread, is cut
/// [`REQUEST_TIME`] after its accept whatever it is doing: a total
/// deadline on the request and the answer, not one per read or write call.
fn spawn_listener(
    listener: TcpListener,
    routes: Routes,
    cap: usize,
    name: &str,
    then: Option<std::thread::JoinHandle<()>>,
    stop: Arc<AtomicBool>,
) -> io::Result<std::thread::JoinHandle<()>> {
    listener.set_nonblocking(true)?;
    let mut listener = mio::net::TcpListener::from_std(listener);
    let poll = mio::Poll::new()?;
    poll.registry()
        .register(&mut listener, LISTENER, mio::Interest::READABLE)?;
    let mut server = Server {
        poll,
        listener,
        routes,
        heads: Requests::new(MAX_OPEN, MAX_PER_ADDRESS),
        reading: HashMap::new(),
        answering: Arc::new(Mutex::new(Requests::new(cap, cap))),
        cap,
        next: 0,
    };
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let mut events = mio::Events::with_capacity(256);
            let mut backlog = false;
            while !stop.load(Ordering::Relaxed) {
                // With accepts left over, only look for what is ready now.
                let wait = if backlog {
                    StdDuration::ZERO
                } else {
                    POLL_EVERY
                };
                if server.poll.poll(&mut events, Some(wait)).is_err() {
                    std::thread::sleep(POLL_EVERY);
                    continue;
                }
                let now = std::time::Instant::now();
                let mut accept = backlog;
                for ev in &events {
                    if ev.token() == LISTENER {
                        accept = true;
                    } else {
                        server.read_head(ev.token(), now);
                    }
                }
                if accept {
                    backlog = server.accept(now);
                }
                server.sweep(now);
            }
            if let Some(h) = then {
                let _ = h.join();
            }
        })
}

/// The listener's token in the poll; connections count up from 0.
const LISTENER: mio::Token = mio::Token(usize::MAX);
/// Longest the poll sleeps: the pace of the deadline sweep.
const POLL_EVERY: StdDuration = StdDuration::from_millis(20);
/// Most connections accepted between two reads of those already accepted:
/// a flood of connections cannot push a read head out of the table
/// before it is read (the table holds many times more).
const ACCEPT_BATCH: usize = 16;

/// Most connections one listener's table holds (heads being read): far
/// more than honest clients need, far fewer than a process's descriptors.
pub const MAX_OPEN: usize = 256;

/// Most connections one source address may have in a listener's table at
/// once; the next one displaces that address's oldest. A reverse proxy or
/// a NAT of honest clients has room; one host cannot fill the table.
pub const MAX_PER_ADDRESS: usize = 64;

/// Closes connections both ways: a request thread blocked on them returns
/// at once, and with no linger the answer still queued in the kernel is
/// discarded (a reset), not delivered at the slow reader's pace.
fn cut(streams: Vec<TcpStream>) {
    for s in streams {
        let _ = socket2::SockRef::from(&s).set_linger(Some(StdDuration::ZERO));
        let _ = s.shutdown(std::net::Shutdown::Both);
    }
}

/// A connection whose request head is being read.
struct Reading {
    stream: mio::net::TcpStream,
    head: Vec<u8>,
    /// Its entry in the table (for taking it out when read).
    id: u64,
}

/// One listener's state, on its thread.
struct Server {
    poll: mio::Poll,
    listener: mio::net::TcpListener,
    routes: Routes,
    /// Connections whose head is being read, by token.
    heads: Requests<mio::Token>,
    reading: HashMap<mio::Token, Reading>,
    /// Connections answered on threads of their own (the live view's).
    answering: Arc<Mutex<Requests<TcpStream>>>,
    cap: usize,
    next: usize,
}

impl Server {
    /// Accepts up to [`ACCEPT_BATCH`] connections; `true` if more may wait.
    fn accept(&mut self, now: std::time::Instant) -> bool {
        for _ in 0..ACCEPT_BATCH {
            let (mut stream, from) = match self.listener.accept() {
                Ok(c) => c,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                // Out of descriptors or an aborted handshake: try again later.
                Err(_) => return false,
            };
            let token = mio::Token(self.next);
            self.next = (self.next + 1) % LISTENER.0;
            if self
                .poll
                .registry()
                .register(&mut stream, token, mio::Interest::READABLE)
                .is_err()
            {
                continue;
            }
            let (id, evicted) = self.heads.admit(from.ip(), now, token);
            for t in evicted {
                self.drop_reading(t);
            }
            self.reading.insert(
                token,
                Reading {
                    stream,
                    head: Vec::with_capacity(512),
                    id,
                },
            );
            // The head usually came with the connection: read it now,
            // before later accepts can displace it.
            self.read_head(token, now);
        }
        true
    }

    /// Forgets a connection whose head was being read, closing it.
    fn drop_reading(&mut self, token: mio::Token) {
        if let Some(mut r) = self.reading.remove(&token) {
            let _ = self.poll.registry().deregister(&mut r.stream);
            self.heads.remove(r.id);
        }
    }

    /// Reads what `token`'s client sent; a whole head is answered.
    fn read_head(&mut self, token: mio::Token, now: std::time::Instant) {
        let Some(r) = self.reading.get_mut(&token) else {
            return;
        };
        let mut chunk = [0u8; 1024];
        let done = loop {
            // Never past the cap, and never past the blank line: what
            // follows a head belongs to the route (a WebSocket's frames).
            let room = (MAX_REQUEST - r.head.len()).min(chunk.len());
            if room == 0 {
                break Some(Err(()));
            }
            match r.stream.peek(&mut chunk[..room]) {
                Ok(0) => break Some(Err(())),
                Ok(n) => {
                    let seen = r.head.len();
                    r.head.extend_from_slice(&chunk[..n]);
                    let end = head_end(&r.head, seen);
                    let take = end.map_or(n, |e| e - seen);
                    r.head.truncate(seen + take);
                    // Consumes what was peeked, up to the head's end.
                    if io::Read::read_exact(&mut r.stream, &mut chunk[..take]).is_err() {
                        break Some(Err(()));
                    }
                    if end.is_some() {
                        break Some(Ok(()));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break None,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break Some(Err(())),
            }
        };
        let Some(done) = done else {
            return;
        };
        let Some(mut r) = self.reading.remove(&token) else {
            return;
        };
        let _ = self.poll.registry().deregister(&mut r.stream);
        self.heads.remove(r.id);
        if done.is_err() {
            return;
        }
        let request = replays::web::Request::parse(&r.head);
        let stream = TcpStream::from(r.stream);
        self.route(stream, &request, now);
    }

    /// Answers a whole request: `/metrics`, `/health` and 404s on this
    /// thread, the live view's routes on a thread of their own.
    fn route(&self, stream: TcpStream, request: &replays::web::Request, now: std::time::Instant) {
        let text = "text/plain; version=0.0.4";
        if let Some(metrics) = self.routes.metrics() {
            match request.path() {
                "/metrics" => {
                    let body = metrics.render();
                    return self.send(stream, answer_bytes("200 OK", text, body.as_bytes()), now);
                }
                "/health" | "/healthz" => {
                    let (status, body) = health(metrics);
                    return self.send(stream, answer_bytes(status, text, body.as_bytes()), now);
                }
                _ => {}
            }
        }
        let Some(live) = self.routes.live() else {
            return self.send(
                stream,
                answer_bytes("404 Not Found", text, b"not found\n"),
                now,
            );
        };
        let (live, request) = (Arc::clone(live), request.clone());
        self.on_thread(stream, now, move |stream| {
            answer_live(stream, &request, &live)
        });
    }

    /// Writes `answer` without blocking this thread: what the socket's
    /// buffer takes at once (all of it, for a client that reads), the rest
    /// on a thread of its own.
    fn send(&self, mut stream: TcpStream, answer: Vec<u8>, now: std::time::Instant) {
        let mut sent = 0;
        while sent < answer.len() {
            match io::Write::write(&mut stream, &answer[sent..]) {
                Ok(0) => return,
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => return,
            }
        }
        if sent < answer.len() {
            self.on_thread(stream, now, move |mut stream| {
                stream.set_nonblocking(false)?;
                io::Write::write_all(&mut stream, &answer[sent..])
            });
        }
    }

    /// Runs `work` on a thread of its own, counted among the listener's
    /// answering threads (at most `cap`; over it the connection is
    /// answered `503`) and cut with them at the deadline.
    fn on_thread(
        &self,
        mut stream: TcpStream,
        now: std::time::Instant,
        work: impl FnOnce(TcpStream) -> io::Result<()> + Send + 'static,
    ) {
        let Ok(handle) = stream.try_clone() else {
            return;
        };
        let Ok(id) = self.answering.lock().map(|mut t| {
            (t.len() < self.cap).then(|| t.admit(IpAddr::from([0, 0, 0, 0]), now, handle).0)
        }) else {
            return;
        };
        let Some(id) = id else {
            let _ = replays::web::respond(
                &mut stream,
                "503 Service Unavailable",
                "text/plain",
                b"busy\n",
            );
            return;
        };
        let done = Done(Arc::clone(&self.answering), id);
        let spawned = std::thread::Builder::new()
            .name("relay-request".into())
            .stack_size(REQUEST_STACK)
            .spawn(move || {
                let _done = done;
                // A failed request concerns only that client.
                let _ = work(stream);
            });
        // A thread that cannot start drops its connection (and its place).
        drop(spawned);
    }

    /// Cuts every connection past [`REQUEST_TIME`], read or answered.
    fn sweep(&mut self, now: std::time::Instant) {
        for t in self.heads.expired(now) {
            if let Some(mut r) = self.reading.remove(&t) {
                let _ = self.poll.registry().deregister(&mut r.stream);
            }
        }
        cut(self
            .answering
            .lock()
            .map(|mut t| t.expired(now))
            .unwrap_or_default());
    }
}

/// A whole answer's bytes, as [`replays::web::respond`] writes them.
fn answer_bytes(status: &str, kind: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// Where a request head ends (one past its blank line), looking from a
/// little before `seen` (the blank line may straddle two reads).
fn head_end(head: &[u8], seen: usize) -> Option<usize> {
    let from = seen.saturating_sub(3);
    (from..head.len()).find_map(|i| {
        let rest = &head[i..];
        if rest.starts_with(b"\r\n\r\n") {
            Some(i + 4)
        } else if rest.starts_with(b"\n\n") {
            Some(i + 2)
        } else {
            None
        }
    })
}

/// Stack of a request thread: it writes an answer or starts a bridge.
const REQUEST_STACK: usize = 256 * 1024;

/// Takes request `.1` out of the table when its thread ends.
struct Done(Arc<Mutex<Requests<TcpStream>>>, u64);

impl Drop for Done {
    fn drop(&mut self) {
        if let Ok(mut t) = self.0.lock() {
            t.remove(self.1);
        }
    }
}

/// The connections a listener is answering (sans-IO: the handle `H` is a
/// stream in the server and anything in tests; time is passed in).
#[derive(Debug)]
struct Requests<H> {
    cap: usize,
    per_address: usize,
    next: u64,
    /// In accept order: the first is the oldest.
    open: Vec<Open<H>>,
}

#[derive(Debug)]
struct Open<H> {
    id: u64,
    from: IpAddr,
    at: std::time::Instant,
    handle: H,
}

impl<H> Requests<H> {
    fn new(cap: usize, per_address: usize) -> Self {
        Self {
            cap: cap.max(1),
            per_address: per_address.max(1),
            next: 0,
            open: Vec::new(),
        }
    }

    /// Admits a connection from `from`; returns its id and the handles it
    /// displaces (the oldest of its address over the per-address bound,
    /// then the oldest of all over the cap), which the caller closes.
    fn admit(&mut self, from: IpAddr, at: std::time::Instant, handle: H) -> (u64, Vec<H>) {
        let mut evicted = Vec::new();
        if self.open.iter().filter(|o| o.from == from).count() >= self.per_address
            && let Some(i) = self.open.iter().position(|o| o.from == from)
        {
            evicted.push(self.open.remove(i).handle);
        }
        while self.open.len() >= self.cap {
            evicted.push(self.open.remove(0).handle);
        }
        let id = self.next;
        self.next += 1;
        self.open.push(Open {
            id,
            from,
            at,
            handle,
        });
        (id, evicted)
    }

    /// Takes out the connections accepted [`REQUEST_TIME`] or longer
    /// before `now`, for the caller to close.
    fn expired(&mut self, now: std::time::Instant) -> Vec<H> {
        let old = |o: &Open<H>| now.saturating_duration_since(o.at) >= REQUEST_TIME;
        let n = self.open.iter().take_while(|o| old(o)).count();
        self.open.drain(..n).map(|o| o.handle).collect()
    }

    /// Forgets connection `id` (answered, or already cut).
    fn remove(&mut self, id: u64) {
        self.open.retain(|o| o.id != id);
    }

    fn len(&self) -> usize {
        self.open.len()
    }
}

/// `/health`'s answer: 503 `stalled` when the watchdog finds a loop
/// stalled, 200 `ok` while up and not draining, else 503 `draining`.
fn health(metrics: &Metrics) -> (&'static str, &'static str) {
    if metrics.watch(std::time::Instant::now()) {
        ("503 Service Unavailable", "stalled\n")
    } else if metrics.get(Metric::Up) == 1 && metrics.get(Metric::Draining) == 0 {
        ("200 OK", "ok\n")
    } else {
        ("503 Service Unavailable", "draining\n")
    }
}

/// Answers one of the live view's requests on its own thread (the
/// connection is blocking again; the sweep cuts it at the deadline).
fn answer_live(
    mut stream: TcpStream,
    request: &replays::web::Request,
    live: &Arc<Live>,
) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    // Each call's bound; the whole answer's is the sweep's.
    stream.set_write_timeout(Some(REQUEST_TIME))?;
    if live.answer(&mut stream, request)? {
        return Ok(());
    }
    replays::web::respond(&mut stream, "404 Not Found", "text/plain", b"not found\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::LiveConfig;
    use std::io::{Read, Write};

    /// GETs `path` on a fresh connection; `None` if no answer came within
    /// a bound far above any honest answer's time.
    fn get(addr: SocketAddr, path: &str) -> Option<String> {
        let mut s = TcpStream::connect(addr).ok()?;
        s.set_read_timeout(Some(StdDuration::from_secs(30))).ok()?;
        write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").ok()?;
        let mut r = String::new();
        s.read_to_string(&mut r).ok()?;
        Some(r)
    }

    fn listener() -> (TcpListener, SocketAddr) {
        let l = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = l.local_addr().unwrap();
        (l, addr)
    }

    fn live() -> Arc<Live> {
        Arc::new(Live::new(live_config()))
    }

    fn live_config() -> LiveConfig {
        LiveConfig {
            relay: "127.0.0.1:7777".parse().unwrap(),
            wasm: None,
            max_viewers: 1,
            token_key: None,
            transport: lockstep::low_level::transport::TransportConfig::default(),
            allowed_hosts: Vec::new(),
            spectator_delay: StdDuration::from_secs(3),
        }
    }

    /// A scraper that sends its request a byte at a time and never ends it
    /// (each read succeeds, so no per-read timeout ever fires) holds the
    /// connection accepted first. Another scraper's `/metrics` and
    /// `/health` are answered meanwhile, and the watchdog finds the stalled
    /// loop with no request asking (before, all three waited on the slow
    /// scraper for ever: one thread read one request at a time and ran the
    /// watchdog between requests).
    #[test]
    fn a_slow_scraper_blocks_neither_another_scrapers_health_nor_the_watchdog() {
        let (listener, addr) = listener();
        let m = Arc::new(Metrics::new().with_watchdog(StdDuration::from_millis(20)));
        m.set(Metric::Up, 1);
        m.beat();
        let stop = Arc::new(AtomicBool::new(false));
        let h = spawn_metrics(listener, Arc::clone(&m), Arc::clone(&stop)).unwrap();
        let done = Arc::new(AtomicBool::new(false));
        // Connected before the other scraper: the accept queue is FIFO.
        let mut slow = TcpStream::connect(addr).unwrap();
        slow.write_all(b"GET /metr").unwrap();
        let trickle = {
            let done = Arc::clone(&done);
            std::thread::spawn(move || {
                while !done.load(Ordering::Relaxed) && slow.write_all(b"i").is_ok() {
                    // The attacker's pace, not synchronisation.
                    std::thread::sleep(StdDuration::from_millis(100));
                }
            })
        };
        let end = std::time::Instant::now() + StdDuration::from_secs(30);
        let stalled = loop {
            let page = get(addr, "/metrics").expect("answered beside the slow scraper");
            if page.contains("relay_loop_stalled 1\n") {
                break page;
            }
            assert!(
                std::time::Instant::now() < end,
                "the watchdog never ran: {page}"
            );
            // Paces the polling of a condition; the bound is above.
            std::thread::sleep(StdDuration::from_millis(10));
        };
        assert!(
            stalled.contains("relay_watchdog_trips_total 1\n"),
            "{stalled}"
        );
        let health = get(addr, "/health").expect("answered beside the slow scraper");
        assert!(health.starts_with("HTTP/1.1 503"), "{health}");
        assert!(health.ends_with("stalled\n"), "{health}");
        done.store(true, Ordering::Relaxed);
        trickle.join().unwrap();
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap();
    }

    /// The table's bounds on a virtual clock: a newcomer over the
    /// per-address bound displaces its address's oldest, over the cap the
    /// oldest of all; nothing outlives `REQUEST_TIME`.
    #[test]
    fn the_request_table_displaces_the_oldest_and_expires_at_the_deadline() {
        let t0 = std::time::Instant::now();
        let ms = |n| t0 + StdDuration::from_millis(n);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let mut t = Requests::new(4, 2);
        assert!(t.admit(a, ms(0), "a0").1.is_empty());
        assert!(t.admit(a, ms(1), "a1").1.is_empty());
        assert_eq!(t.admit(a, ms(2), "a2").1, vec!["a0"], "per address");
        assert!(t.admit(b, ms(3), "b0").1.is_empty());
        assert!(t.admit(b, ms(4), "b1").1.is_empty());
        let c: IpAddr = "10.0.0.3".parse().unwrap();
        assert_eq!(t.admit(c, ms(5), "c0").1, vec!["a1"], "the oldest of all");
        assert_eq!(t.len(), 4);
        let (id, evicted) = t.admit(c, ms(6), "c1");
        assert_eq!(evicted, vec!["a2"]);
        t.remove(id);
        assert_eq!(t.len(), 3);
        let late = REQUEST_TIME.as_millis() as u64;
        assert!(t.expired(ms(late + 1)).is_empty(), "none is 2 s old yet");
        assert_eq!(t.expired(ms(late + 4)), vec!["b0", "b1"]);
        assert_eq!(t.expired(ms(10 * late)), vec!["c0"]);
        assert_eq!(t.len(), 0);
    }

    /// An answer's total deadline: a client that asks for a large body and
    /// reads it a little at a time (so every write call makes progress and
    /// no per-call timeout fires) is cut within `REQUEST_TIME` of its
    /// accept, plus the sweep's pace. Before, it held its thread for as
    /// long as the body lasted (here minutes).
    #[test]
    fn a_slow_reader_is_cut_at_the_total_deadline() {
        let (listener, addr) = listener();
        let stop = Arc::new(AtomicBool::new(false));
        let mut cfg = live_config();
        cfg.wasm = Some(vec![0; 32 * 1024 * 1024]);
        let h = spawn_live(listener, Arc::new(Live::new(cfg)), Arc::clone(&stop)).unwrap();
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(StdDuration::from_secs(5))).unwrap();
        write!(s, "GET /viewer.wasm HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
        let t0 = std::time::Instant::now();
        let mut chunk = [0u8; 4096];
        let mut got = 0usize;
        // 40 KiB/s: the 32 MiB body would take over 13 minutes.
        while t0.elapsed() < StdDuration::from_secs(20) {
            match s.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n,
            }
            // The slow reader's pace, not synchronisation.
            std::thread::sleep(StdDuration::from_millis(100));
        }
        assert!(
            t0.elapsed() < REQUEST_TIME + StdDuration::from_secs(3),
            "still answering after {:?} ({got} bytes)",
            t0.elapsed()
        );
        assert!(got < 32 * 1024 * 1024);
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap();
    }

    /// The issue's attack, on real sockets over loopback, for both layouts
    /// (two listeners, and the shared `--http` one): a slow-loris crowd
    /// (more connections on each listener than one address may hold, each
    /// trickling a head it never ends and renewed at once when cut, so
    /// the crowd keeps displacing its own oldest) and a flood of WebSocket upgrades on every listener, while
    /// `/health` is probed every 100 ms for 3 s. Every probe must be
    /// answered 200, each within the 1 s its read timeout allows. Before,
    /// sixteen idle connections held every request place: no probe was
    /// answered.
    #[test]
    fn health_answers_every_probe_under_a_slowloris_crowd_and_an_upgrade_flood() {
        for shared in [false, true] {
            let m = Arc::new(Metrics::new());
            m.set(Metric::Up, 1);
            let stop = Arc::new(AtomicBool::new(false));
            let (health_at, mut handles, targets) = if shared {
                let (l, at) = listener();
                let h = spawn_shared(l, Arc::clone(&m), live(), Arc::clone(&stop)).unwrap();
                (at, vec![h], vec![at])
            } else {
                let (ml, mat) = listener();
                let (ll, lat) = listener();
                let hs = vec![
                    spawn_metrics(ml, Arc::clone(&m), Arc::clone(&stop)).unwrap(),
                    spawn_live(ll, live(), Arc::clone(&stop)).unwrap(),
                ];
                (mat, hs, vec![mat, lat])
            };
            let attack = Arc::new(AtomicBool::new(true));
            let mut attackers = Vec::new();
            for i in 0..(MAX_PER_ADDRESS + 16) * targets.len() {
                let (attack, to) = (Arc::clone(&attack), targets[i % targets.len()]);
                attackers.push(std::thread::spawn(move || {
                    while attack.load(Ordering::Relaxed) {
                        let Ok(mut s) = TcpStream::connect(to) else {
                            continue;
                        };
                        let _ = s.write_all(b"GET /health HTTP/1.1\r\nHo");
                        // Trickles until cut, then connects again.
                        while attack.load(Ordering::Relaxed) && s.write_all(b"s").is_ok() {
                            // The attacker's pace, not synchronisation.
                            std::thread::sleep(StdDuration::from_millis(100));
                        }
                    }
                }));
            }
            for i in 0..2 {
                let (attack, to) = (Arc::clone(&attack), targets[i % targets.len()]);
                attackers.push(std::thread::spawn(move || {
                    while attack.load(Ordering::Relaxed) {
                        let Ok(mut s) = TcpStream::connect(to) else {
                            continue;
                        };
                        let _ = s.write_all(
                            b"GET /live?match=1 HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
                        );
                        // The flood does not wait for answers.
                    }
                }));
            }
            // The crowd in place before the first probe.
            std::thread::sleep(StdDuration::from_millis(300));
            let mut failed = Vec::new();
            for probe in 0..30 {
                let t = std::time::Instant::now();
                let answer = (|| {
                    let mut s = TcpStream::connect(health_at).ok()?;
                    s.set_read_timeout(Some(StdDuration::from_secs(1))).ok()?;
                    s.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                        .ok()?;
                    let mut r = String::new();
                    s.read_to_string(&mut r).ok()?;
                    Some(r)
                })();
                if !answer
                    .as_deref()
                    .is_some_and(|r| r.starts_with("HTTP/1.1 200"))
                {
                    failed.push((probe, answer));
                }
                // The orchestrator's probing pace.
                std::thread::sleep(StdDuration::from_millis(100).saturating_sub(t.elapsed()));
            }
            attack.store(false, Ordering::Relaxed);
            for a in attackers {
                a.join().unwrap();
            }
            assert!(failed.is_empty(), "shared {shared}: unanswered {failed:?}");
            stop.store(true, Ordering::Relaxed);
            for h in handles.drain(..) {
                h.join().unwrap();
            }
        }
    }

    /// Sends `head` to `addr`; the answer's status line.
    fn status_of(addr: SocketAddr, head: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(StdDuration::from_secs(30)))
            .unwrap();
        s.write_all(head.as_bytes()).unwrap();
        let mut r = String::new();
        let _ = s.read_to_string(&mut r);
        r.lines().next().unwrap_or_default().to_owned()
    }

    /// The Origin and Host matrix on the relay's live-view routes: same
    /// origin and no origin are answered, another site's origin is 403, a
    /// rebinding host 421; a name given in `allowed_hosts` is accepted.
    /// `/metrics` and `/health` stay open to any Host (scrapers name the
    /// relay as they like). Before, every case was answered.
    #[test]
    fn the_live_view_checks_origin_and_host() {
        let (ll, laddr) = listener();
        let (ml, maddr) = listener();
        let stop = Arc::new(AtomicBool::new(false));
        let mut cfg = live_config();
        cfg.allowed_hosts = vec!["watch.example.org".into()];
        let handles = [
            spawn_live(ll, Arc::new(Live::new(cfg)), Arc::clone(&stop)).unwrap(),
            spawn_metrics(ml, Arc::new(Metrics::new()), Arc::clone(&stop)).unwrap(),
        ];
        let upgrade = "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n";
        let me = laddr.to_string();
        let evil = format!("evil.example:{}", laddr.port());
        // (route, extra headers, answer when allowed)
        let routes = [
            ("/watch", "", "HTTP/1.1 200 OK"),
            ("/matches.json", "", "HTTP/1.1 200 OK"),
            // No such match: the checks come first, then the 404.
            ("/live?match=9", upgrade, "HTTP/1.1 404 Not Found"),
        ];
        for (path, extra, allowed) in routes {
            let cases = [
                (me.clone(), Some(format!("http://{me}")), allowed),
                (
                    "watch.example.org".to_owned(),
                    Some("https://watch.example.org".to_owned()),
                    allowed,
                ),
                (
                    me.clone(),
                    Some("http://evil.example".to_owned()),
                    "HTTP/1.1 403 Forbidden",
                ),
                (me.clone(), None, allowed),
                (
                    evil.clone(),
                    Some(format!("http://{evil}")),
                    "HTTP/1.1 421 Misdirected Request",
                ),
                (evil.clone(), None, "HTTP/1.1 421 Misdirected Request"),
            ];
            for (host, origin, want) in cases {
                let origin = origin
                    .map(|o| format!("Origin: {o}\r\n"))
                    .unwrap_or_default();
                let got = status_of(
                    laddr,
                    &format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{origin}{extra}\r\n"),
                );
                assert_eq!(got, want, "{path} Host {host} {origin}");
            }
        }
        let health = status_of(
            maddr,
            &format!("GET /health HTTP/1.1\r\nHost: {evil}\r\n\r\n"),
        );
        assert_eq!(
            health, "HTTP/1.1 503 Service Unavailable",
            "answered (not up yet)"
        );
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            h.join().unwrap();
        }
    }

    /// Token mode: `/matches.json` and `/live` answer only a viewer with a
    /// spectator token the relay's key sealed, and show it only its own
    /// match. No token is 401; a token of another key, or a player's, 403;
    /// another match's feed is 404 as if it did not run. Before, both
    /// routes answered anyone (the bridge sealed itself a token).
    #[test]
    fn in_token_mode_the_match_list_and_feed_need_a_spectator_token() {
        use crate::event::{MatchId, MatchInfo, RouterEvent};
        use lockstep::token::{TokenClaims, TokenKey, issue_token};
        let key = TokenKey::from_bytes([7; 32]);
        let other_key = TokenKey::from_bytes([8; 32]);
        let protocol = lockstep::low_level::transport::TransportConfig::default().protocol_id;
        let now = replays::format::unix_now_ms() / 1000;
        let relay: SocketAddr = "127.0.0.1:7777".parse().unwrap();
        let token = |key: &TokenKey, claims: TokenClaims| {
            issue_token(key, &claims, &[relay], &[3; 32])
                .unwrap()
                .to_hex()
        };
        let watch_duel = token(&key, TokenClaims::spectator(protocol, "duel", now, 300));
        let foreign = token(
            &other_key,
            TokenClaims::spectator(protocol, "duel", now, 300),
        );
        let player = token(&key, TokenClaims::new(protocol, "duel", 0, now, 300));
        let mut cfg = live_config();
        cfg.token_key = Some(key);
        let live = Arc::new(Live::new(cfg));
        for (id, name) in [(1, "duel"), (2, "other")] {
            live.handle_event(
                &RouterEvent::MatchStarted {
                    id: MatchId(id),
                    info: MatchInfo::two_players(name, "lockstep-rts"),
                },
                0,
            );
        }
        let (ll, laddr) = listener();
        let stop = Arc::new(AtomicBool::new(false));
        let h = spawn_live(ll, live, Arc::clone(&stop)).unwrap();
        let ask = |target: &str, extra: &str| {
            let mut s = TcpStream::connect(laddr).unwrap();
            s.set_read_timeout(Some(StdDuration::from_secs(30)))
                .unwrap();
            write!(s, "GET {target} HTTP/1.1\r\nHost: {laddr}\r\n{extra}\r\n").unwrap();
            let mut r = String::new();
            let _ = s.read_to_string(&mut r);
            r
        };
        let status = |r: &str| r.lines().next().unwrap_or_default().to_owned();
        assert_eq!(
            status(&ask("/matches.json", "")),
            "HTTP/1.1 401 Unauthorized"
        );
        assert_eq!(
            status(&ask("/matches.json?token=zz", "")),
            "HTTP/1.1 403 Forbidden"
        );
        for bad in [&foreign, &player] {
            let r = ask(&format!("/matches.json?token={bad}"), "");
            assert_eq!(status(&r), "HTTP/1.1 403 Forbidden");
        }
        let r = ask(&format!("/matches.json?token={watch_duel}"), "");
        assert_eq!(status(&r), "HTTP/1.1 200 OK");
        let (_, body) = r.split_once("\r\n\r\n").unwrap();
        let list: serde_json::Value = serde_json::from_str(body).unwrap();
        let names: Vec<&str> = list["matches"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|m| m["name"].as_str())
            .collect();
        assert_eq!(names, ["duel"], "another match is not shown");
        let upgrade = "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n";
        assert_eq!(
            status(&ask("/live?match=1", upgrade)),
            "HTTP/1.1 401 Unauthorized"
        );
        let r = ask(&format!("/live?match=1&token={foreign}"), upgrade);
        assert_eq!(status(&r), "HTTP/1.1 403 Forbidden");
        let r = ask(&format!("/live?match=2&token={watch_duel}"), upgrade);
        assert_eq!(status(&r), "HTTP/1.1 404 Not Found", "another match's feed");
        // The page itself holds nothing about a match: public.
        assert_eq!(status(&ask("/watch", "")), "HTTP/1.1 200 OK");
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap();
    }

    /// A request that never ends its headers is cut off at `MAX_REQUEST`
    /// bytes: the server closes the connection, so the client's writes
    /// fail long before 64 MiB (before, it read them all into memory).
    #[test]
    fn a_request_longer_than_the_cap_is_cut_off() {
        let (listener, addr) = listener();
        let stop = Arc::new(AtomicBool::new(false));
        let h = spawn_metrics(listener, Arc::new(Metrics::new()), Arc::clone(&stop)).unwrap();
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_write_timeout(Some(StdDuration::from_secs(30)))
            .unwrap();
        let chunk = vec![b'X'; 64 * 1024];
        let sent = (0..1024)
            .take_while(|_| s.write_all(&chunk).is_ok())
            .count();
        assert!(sent < 1024, "all 64 MiB were read");
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap();
    }

    #[test]
    fn http_endpoint_serves_metrics_and_health() {
        let (listener, addr) = listener();
        let m = Arc::new(Metrics::new());
        m.set(Metric::Up, 1);
        m.set(Metric::Matches, 7);
        let stop = Arc::new(AtomicBool::new(false));
        let h = spawn_metrics(listener, m.clone(), stop.clone()).unwrap();
        let get = |path: &str| get(addr, path).unwrap();
        let r = get("/metrics");
        assert!(r.starts_with("HTTP/1.1 200 OK"));
        assert!(r.contains("relay_matches 7\n"));
        assert!(get("/health").starts_with("HTTP/1.1 200"));
        m.set(Metric::Draining, 1);
        assert!(get("/health").starts_with("HTTP/1.1 503"));
        assert!(get("/nope").starts_with("HTTP/1.1 404"));
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap();
    }

    /// The two listeners answer only their own routes; the shared one
    /// (`--http`) answers both.
    #[test]
    fn the_metrics_listener_serves_no_live_view_and_the_live_listener_no_health() {
        let m = Arc::new(Metrics::new());
        m.set(Metric::Up, 1);
        let stop = Arc::new(AtomicBool::new(false));
        let (ml, maddr) = listener();
        let (ll, laddr) = listener();
        let (sl, saddr) = listener();
        let handles = [
            spawn_metrics(ml, Arc::clone(&m), Arc::clone(&stop)).unwrap(),
            spawn_live(ll, live(), Arc::clone(&stop)).unwrap(),
            spawn_shared(sl, Arc::clone(&m), live(), Arc::clone(&stop)).unwrap(),
        ];
        let status = |addr, path| {
            let r = get(addr, path).unwrap();
            r.lines().next().unwrap_or_default().to_owned()
        };
        for path in ["/metrics", "/health", "/healthz"] {
            assert_eq!(status(maddr, path), "HTTP/1.1 200 OK", "{path}");
            assert_eq!(status(laddr, path), "HTTP/1.1 404 Not Found", "{path}");
            assert_eq!(status(saddr, path), "HTTP/1.1 200 OK", "{path}");
        }
        for path in ["/watch", "/matches.json"] {
            assert_eq!(status(maddr, path), "HTTP/1.1 404 Not Found", "{path}");
            assert_eq!(status(laddr, path), "HTTP/1.1 200 OK", "{path}");
            assert_eq!(status(saddr, path), "HTTP/1.1 200 OK", "{path}");
        }
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            h.join().unwrap();
        }
    }

    /// Slow browsers holding every request place of the live view's
    /// listener (each trickling a request head it never ends) take nothing
    /// from the metrics listener: `/health` is answered at once meanwhile.
    #[test]
    fn a_live_listener_full_of_slow_clients_does_not_delay_health() {
        let m = Arc::new(Metrics::new());
        m.set(Metric::Up, 1);
        let stop = Arc::new(AtomicBool::new(false));
        let (ml, maddr) = listener();
        let (ll, laddr) = listener();
        let handles = [
            spawn_metrics(ml, Arc::clone(&m), Arc::clone(&stop)).unwrap(),
            spawn_live(ll, live(), Arc::clone(&stop)).unwrap(),
        ];
        let slow: Vec<TcpStream> = (0..MAX_PAGE_REQUESTS + 4)
            .map(|_| {
                let mut s = TcpStream::connect(laddr).unwrap();
                s.write_all(b"GET /wat").unwrap();
                s
            })
            .collect();
        let t0 = std::time::Instant::now();
        let health = get(maddr, "/health").unwrap();
        assert!(health.starts_with("HTTP/1.1 200"), "{health}");
        assert!(
            t0.elapsed() < REQUEST_TIME,
            "health waited {:?} on the live view's clients",
            t0.elapsed()
        );
        drop(slow);
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            h.join().unwrap();
        }
    }
}
