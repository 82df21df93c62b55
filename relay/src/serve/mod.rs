//! The relay's serve loop, the only relay code that touches sockets and the
//! real clock: a transport `Server`, a [`Router`](crate::Router) and an
//! optional [`Recorder`] per event loop. [`serve`] and [`serve_with`] run
//! one loop on the calling thread; [`serve_loops`] runs `N`, each with its
//! own socket on the same port (`SO_REUSEPORT`, [`bind_reuseport`]), its own
//! transport `Server`, `Router` and recorder. A match lives on one loop, its
//! *home* ([`home_of`] its name), so its turn closing, hash judging and
//! recording never cross threads; a connection whose `Join` names a match
//! hosted elsewhere moves there
//! ([`lockstep::low_level::transport::Server::detach`]), and the loop whose
//! socket the kernel gives that client's datagrams to (it hashes by address)
//! forwards them, batched once per wake-up. The sans-IO cores are
//! unchanged: threads are this driver's concern. What a loop reports comes
//! back as [`RelayNote`]s; its counters go into
//! [`Metrics`](crate::metrics::Metrics) atomics. It never imports the HTTP
//! side (`relay::http`), which sits above it. Peers run on
//! `lockstep::peer::udp`.

mod bind;
mod echo;
mod event_loop;
mod handoff;
mod loop_core;
mod notes;
mod options;
mod publish;
mod socket;

pub use bind::bind_reuseport;
pub use echo::{EchoCounts, serve_echo};
pub use handoff::home_of;
pub(crate) use notes::{DropNotes, RefusalNotes};
pub use notes::{REFUSAL_NOTES_PER_SEC, RelayNote};
pub use options::ServeOptions;
pub(crate) use publish::{Io, publish};

use crate::config::RelayConfig;
use crate::limits::{ConnectionQuota, MemoryBudget};
use crate::metrics::Metric;
use crate::recorder::Recorder;
use event_loop::{EventLoop, Shared};
use handoff::Mailbox;
use lockstep::Duration;
use lockstep::low_level::transport::{AuthMode, Server, TransportConfig};
use mio::{Poll, Waker};
use socket::BatchSocket;
use std::io;
use std::net::UdpSocket;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize};

/// The per-process server secret for the stateless handshake cookies, from
/// the OS CSPRNG ([`crate::entropy::os_random`]): whoever could guess it
/// could forge cookies for any address.
///
/// # Errors
/// When the OS has no random source.
pub fn process_secret() -> io::Result<[u8; 32]> {
    crate::entropy::os_random("the handshake cookie secret")
}

/// Serves matches on `socket` until `stop` is set, then ends every match at
/// once (finalising its replay). Every router event (and every finished
/// recording) is passed to `note`.
pub fn serve(
    socket: &UdpSocket,
    config: RelayConfig,
    transport: TransportConfig,
    recorder: Option<Recorder>,
    stop: &AtomicBool,
    note: impl FnMut(RelayNote<'_>),
) -> io::Result<()> {
    let opts = ServeOptions {
        stop,
        handover: None,
        grace: Duration::ZERO,
        metrics: None,
        auth: AuthMode::Open,
        home_key: None,
        max_memory: crate::limits::DEFAULT_MAX_MEMORY_BYTES,
    };
    serve_with(socket, config, transport, recorder, &opts, note)
}

/// Serves matches on `socket` until a graceful shutdown completes (see
/// [`ServeOptions::stop`]); returns `Ok` once every match has ended and every
/// replay is finalised. One event loop on the calling thread; see
/// [`serve_loops`] for several.
pub fn serve_with(
    socket: &UdpSocket,
    config: RelayConfig,
    transport: TransportConfig,
    recorder: Option<Recorder>,
    opts: &ServeOptions<'_>,
    note: impl FnMut(RelayNote<'_>),
) -> io::Result<()> {
    serve_one(socket.try_clone()?, config, transport, recorder, opts, note)
}

/// The number of event loops `relay serve` runs by default: one per core.
#[must_use]
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

/// Serves matches with one event loop per socket in `sockets` (see
/// [`bind_reuseport`]), each on its own thread, until a graceful shutdown
/// completes on every loop (see [`ServeOptions::stop`]). `recorders` gives
/// each loop its recorder (missing ones record nothing). Every loop passes
/// its notes to `note`.
///
/// # Errors
/// An invalid `config`, no OS randomness, metrics without room for every
/// loop ([`crate::metrics::Metrics::with_loops`]), or a socket error that
/// stops a loop.
pub fn serve_loops(
    sockets: Vec<UdpSocket>,
    config: RelayConfig,
    transport: TransportConfig,
    recorders: Vec<Option<Recorder>>,
    opts: &ServeOptions<'_>,
    note: &(dyn Fn(RelayNote<'_>) + Sync),
) -> io::Result<()> {
    with_loops(sockets, config, transport, recorders, opts, |loops| {
        std::thread::scope(|scope| {
            let handles: Vec<_> = loops
                .into_iter()
                .map(|l| scope.spawn(move || l.run(&mut |x: RelayNote<'_>| note(x))))
                .collect();
            let results: Vec<io::Result<()>> = handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(io::Error::other("an event loop panicked")))
                })
                .collect();
            // The error that stopped the relay, not the others' echo of it.
            let mut errors: Vec<io::Error> = results.into_iter().filter_map(Result::err).collect();
            let real = errors
                .iter()
                .position(|e| e.to_string() != event_loop::OTHER_LOOP_FAILED)
                .unwrap_or(0);
            if errors.is_empty() {
                Ok(())
            } else {
                Err(errors.swap_remove(real))
            }
        })
    })
}

/// One event loop on the calling thread (what [`serve_with`] runs).
pub(crate) fn serve_one(
    socket: UdpSocket,
    config: RelayConfig,
    transport: TransportConfig,
    recorder: Option<Recorder>,
    opts: &ServeOptions<'_>,
    mut note: impl FnMut(RelayNote<'_>),
) -> io::Result<()> {
    with_loops(
        vec![socket],
        config,
        transport,
        vec![recorder],
        opts,
        |mut loops| loops.pop().map_or(Ok(()), |l| l.run(&mut note)),
    )
}

/// A match found unfinished could not be resumed: said on stderr (the
/// loops' notes do not run yet), its file left as it is.
fn resume_failed(path: &std::path::Path, why: &str) {
    eprintln!("relay: not resuming {}: {why}", path.display());
}

/// Checks the settings, builds one loop per socket and hands them to `run`.
fn with_loops(
    sockets: Vec<UdpSocket>,
    config: RelayConfig,
    transport: TransportConfig,
    recorders: Vec<Option<Recorder>>,
    opts: &ServeOptions<'_>,
    run: impl FnOnce(Vec<EventLoop<'_>>) -> io::Result<()>,
) -> io::Result<()> {
    config
        .validate()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let n = sockets.len();
    if n == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "no socket to serve",
        ));
    }
    if let Some(m) = &opts.metrics
        && m.loop_slots() < n
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "metrics have room for {} event loops, not {n}",
                m.loop_slots()
            ),
        ));
    }
    let mut parts = Vec::with_capacity(n);
    let mut mail = Vec::with_capacity(n);
    for s in sockets {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), event_loop::MAIL)?);
        // Room for every connection the relay admits (each moves at most
        // once) beside `MAILBOX` messages of datagrams and routes.
        let (tx, rx) = crossbeam_channel::bounded(handoff::MAILBOX + transport.max_connections);
        mail.push(Mailbox { tx, waker });
        parts.push((BatchSocket::new(s)?, poll, rx));
    }
    let per_host = config.limits.max_connections_per_host;
    let shared = Shared {
        opts,
        config,
        transport,
        secret: process_secret()?,
        home_key: match opts.home_key {
            Some(k) => k,
            None => crate::entropy::os_random("the key that places matches on event loops")?,
        },
        ledger: Server::new(transport, [0; 32]),
        epoch: std::time::Instant::now(),
        mail,
        unfinished: AtomicUsize::new(n),
        failed: AtomicBool::new(false),
        quota: Arc::new(ConnectionQuota::new(transport.max_connections).with_per_host(per_host)),
        memory: MemoryBudget::new(opts.max_memory, n),
    };
    let mut recorders = recorders.into_iter();
    let mut loops = Vec::with_capacity(n);
    for (i, (socket, poll, inbox)) in parts.into_iter().enumerate() {
        let rec = recorders.next().flatten();
        loops.push(EventLoop::new(i, &shared, socket, poll, inbox, rec)?);
    }
    // Matches a previous process left unfinished go to their home loops.
    let resumable: Vec<_> = loops
        .iter_mut()
        .flat_map(EventLoop::take_resumable)
        .collect();
    if let Some(max) = resumable
        .iter()
        .map(crate::resume::Unfinished::match_id)
        .max()
    {
        for l in &mut loops {
            l.skip_match_ids_through(max);
        }
    }
    for m in resumable {
        let home = home_of(m.match_name(), n, &shared.home_key);
        let path = m.path.clone();
        if let Some(l) = loops.get_mut(home)
            && let Err(e) = l.resume(m)
        {
            resume_failed(&path, &e);
        }
    }
    if let Some(m) = &opts.metrics {
        m.set(Metric::Up, 1);
    }
    let result = run(loops);
    if let Some(m) = &opts.metrics {
        m.set(Metric::Up, 0);
    }
    result
}

#[cfg(test)]
mod tests {
    /// The cookie secret of `relay serve` is drawn from the OS
    /// ([`crate::entropy::os_random`]): two relays started in the same
    /// instant by the same pid still differ.
    #[test]
    fn each_process_secret_is_fresh_from_the_os() {
        let a = super::process_secret().unwrap();
        assert_ne!(a, super::process_secret().unwrap());
        assert_ne!(a, [0; 32]);
    }
}
