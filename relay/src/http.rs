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
//! one listener, as the relay did before the split: one accept thread and
//! one cap of [`MAX_SCRAPERS`] requests for all, so a crowd of viewers can
//! delay a health probe. It stays for setups and scripts that use one
//! address; production uses the two flags.
//!
//! Every listener reads a request head up to [`MAX_REQUEST`] bytes and
//! answers within [`REQUEST_TIME`] of the accept, each request on its own
//! thread, so a slow or hostile client blocks no other client.

use crate::live::Live;
use crate::metrics::{Metric, Metrics};
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration as StdDuration;

/// Longest request (request line and headers) a listener reads; a longer
/// one is cut off. A scrape's request is a few hundred bytes.
pub const MAX_REQUEST: usize = 8 * 1024;
/// Longest a request may take from accept to the last byte of the answer,
/// however slowly its client sends (one byte a second would never trip a
/// per-read timeout). A WebSocket's upgrade answer counts; the stream
/// that follows runs on the live view's own thread.
pub const REQUEST_TIME: StdDuration = StdDuration::from_secs(2);
/// Most requests the metrics listener (or the shared one of
/// [`spawn_shared`]) answers at once, each on its own thread; more are
/// closed unanswered, so a flood of slow clients costs a bounded number
/// of threads for at most [`REQUEST_TIME`] each.
pub const MAX_SCRAPERS: usize = 16;
/// Most requests the live view's listener ([`spawn_live`]) answers at once,
/// counted apart from [`MAX_SCRAPERS`]; a WebSocket leaves this count once
/// upgraded (its viewer place bounds it from then on).
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
/// `listener` until `stop` is set; any other path is 404. Each request is
/// answered on its own thread (at most [`MAX_SCRAPERS`] at once), read up
/// to [`MAX_REQUEST`] bytes and within [`REQUEST_TIME`], so a slow or
/// hostile client never delays another's `/health`; the watchdog
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
/// listener (`relay serve --http`), sharing one accept thread and the cap
/// of [`MAX_SCRAPERS`] requests; the watchdog still runs on its own thread.
/// Prefer the two listeners: here a crowd of browsers can delay `/health`.
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

/// Accepts on `listener` until `stop`, each request on a thread of its own
/// (at most `cap` at once; over it a connection is closed unread), then
/// joins `then` (the watchdog, if this listener started one).
fn spawn_listener(
    listener: TcpListener,
    routes: Routes,
    cap: usize,
    name: &str,
    then: Option<std::thread::JoinHandle<()>>,
    stop: Arc<AtomicBool>,
) -> io::Result<std::thread::JoinHandle<()>> {
    listener.set_nonblocking(true)?;
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let active = Arc::new(AtomicUsize::new(0));
            while !stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        // Over the limit the connection is closed unread.
                        if active.load(Ordering::Acquire) >= cap {
                            continue;
                        }
                        let busy = Busy::new(&active);
                        let routes = routes.clone();
                        // A failed request concerns only that client; a
                        // thread that cannot start drops its connection.
                        let _ = std::thread::Builder::new()
                            .name("relay-request".into())
                            .spawn(move || {
                                let _busy = busy;
                                let _ = answer(stream, &routes);
                            });
                    }
                    Err(_) => std::thread::sleep(StdDuration::from_millis(50)),
                }
            }
            if let Some(h) = then {
                let _ = h.join();
            }
        })
}

/// One request being answered; counted in `active` while it lives.
struct Busy(Arc<AtomicUsize>);

impl Busy {
    fn new(active: &Arc<AtomicUsize>) -> Self {
        active.fetch_add(1, Ordering::AcqRel);
        Self(Arc::clone(active))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
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

/// Reads one request from `stream` and answers it by `routes`.
fn answer(mut stream: TcpStream, routes: &Routes) -> io::Result<()> {
    let deadline = std::time::Instant::now() + REQUEST_TIME;
    stream.set_nonblocking(false)?;
    let request = replays::web::read_request(&mut stream, deadline, MAX_REQUEST)?;
    let left = deadline.saturating_duration_since(std::time::Instant::now());
    // A zero timeout means none: at least a millisecond.
    stream.set_write_timeout(Some(left.max(StdDuration::from_millis(1))))?;
    let text = "text/plain; version=0.0.4";
    if let Some(metrics) = routes.metrics() {
        match request.path() {
            "/metrics" => {
                return replays::web::respond(
                    &mut stream,
                    "200 OK",
                    text,
                    metrics.render().as_bytes(),
                );
            }
            "/health" | "/healthz" => {
                let (status, body) = health(metrics);
                return replays::web::respond(&mut stream, status, text, body.as_bytes());
            }
            _ => {}
        }
    }
    if let Some(live) = routes.live()
        && live.answer(&mut stream, &request)?
    {
        return Ok(());
    }
    replays::web::respond(&mut stream, "404 Not Found", text, b"not found\n")
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
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
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
        Arc::new(Live::new(LiveConfig {
            relay: "127.0.0.1:7777".parse().unwrap(),
            wasm: None,
            max_viewers: 1,
            token_key: None,
            transport: lockstep::low_level::transport::TransportConfig::default(),
        }))
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
