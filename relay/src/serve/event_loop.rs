//! One event loop: a socket, a transport `Server`, a `Router` and its
//! recorder, on one thread. Each wake-up makes one blocking wait (epoll,
//! for the socket and the loop's mailbox), drains the socket in batches,
//! runs the sans-IO cores once and sends what they produced.

use super::handoff::{Handoff, Inbox, Mailbox};
use super::loop_core::LoopCore;
use super::socket::{BatchSocket, Outgoing, SendHeaders};
use super::{DropNotes, Io, RefusalNotes, RelayNote, ServeOptions, publish};
use crate::config::RelayConfig;
use crate::limits::{ConnectionQuota, MemoryBudget, MemoryUse};
use crate::metrics::{Metric, Metrics};
use crate::recorder::Recorder;
use crate::router::Router;
use crate::router_glue::RouterGlue;
use lockstep::low_level::transport::{Server, TransportConfig};
use lockstep::{Duration, Instant};
use mio::{Events, Interest, Poll, Token};
use replays::format::unix_now_ms;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Longest a loop sleeps before looking at its timers again.
const MAX_WAIT: Duration = Duration::from_millis(20);
/// Shortest time between two wake-ups of a loop. Each wake-up costs a
/// context switch and a round of system calls whatever it brings (about
/// 17 µs in a profile on the bench VM, two to three datagrams' worth), and
/// under load datagrams came a few at a time (17 a wake-up at 1,024
/// matches); waiting this long between wake-ups cuts the wake-ups about
/// fivefold for at most this much more latency (a turn is 100 ms).
const COALESCE: Duration = Duration::from_millis(1);
/// After ending matches at shutdown, how long to keep sending so the
/// players' `MatchEnd` gets through (or until every connection is gone).
const LINGER: Duration = Duration::from_millis(1000);
/// How long a hand-over keeps sending before the loop stops: the lobbies'
/// refusals leave; the running matches need nothing (their peers find the
/// next process on their own).
const HANDOVER_LINGER: Duration = Duration::from_millis(50);
/// How often a loop measures what it holds for the relay's memory budget:
/// each measure walks every connection and match, and nothing the budget
/// guards grows by much within it (per-connection caps bound each step).
const MEMORY_EVERY: Duration = Duration::from_millis(250);
/// How often a loop publishes the `/metrics` gauges that walk every match.
const GAUGES_EVERY: Duration = Duration::from_millis(100);

/// How long to sleep before a loop's blocking wait, and what is left of the
/// wait after it: a wake-up comes at most every [`COALESCE`] (what arrives
/// meanwhile waits in the socket buffer and is read in one batch), and never
/// later than the wait the loop's timers asked for (`wait`, from `now`).
pub(crate) fn coalesce(now: Instant, last_wake: Instant, wait: Duration) -> (Duration, Duration) {
    let nap = (last_wake + COALESCE).saturating_since(now).min(wait);
    (nap, wait.saturating_sub(nap))
}

/// Sleeps out the [`coalesce`] nap and returns the wait left for the
/// loop's blocking poll: what both the relay's loops and the echo floor
/// call before their one wait per wake-up.
pub(crate) fn pace(now: Instant, last_wake: Instant, wait: Duration) -> Duration {
    let (nap, wait) = coalesce(now, last_wake, wait);
    if nap > Duration::ZERO {
        std::thread::sleep(nap.to_std());
    }
    wait
}

const SOCKET: Token = Token(0);
/// What a loop returns when it stopped because another one failed.
pub(crate) const OTHER_LOOP_FAILED: &str = "another event loop stopped on an error";
/// The mailbox waker's token (see `handoff::Mailbox`).
pub(crate) const MAIL: Token = Token(1);

/// What every loop of one relay shares.
pub(crate) struct Shared<'a> {
    pub(crate) opts: &'a ServeOptions<'a>,
    pub(crate) config: RelayConfig,
    pub(crate) transport: TransportConfig,
    pub(crate) secret: [u8; 32],
    /// The key of the hash that places each match on a loop.
    pub(crate) home_key: [u8; 32],
    /// Loop 0's transport server before it starts: the others share its
    /// join-token ledger, so a token used through one loop is used for all.
    pub(crate) ledger: Server,
    pub(crate) epoch: std::time::Instant,
    /// Every loop's mailbox, by index.
    pub(crate) mail: Vec<Mailbox>,
    /// Loops that have not finished their shutdown yet.
    pub(crate) unfinished: AtomicUsize,
    /// Set when a loop stopped on an error: the others stop too, so the
    /// relay exits with the error instead of serving on a part of its port.
    pub(crate) failed: AtomicBool,
    /// `--max-connections` over all loops (each loop's transport server
    /// alone would admit that many).
    pub(crate) quota: Arc<ConnectionQuota>,
    /// `--max-memory-mib`, over all loops.
    pub(crate) memory: MemoryBudget,
}

/// One loop's state.
pub(crate) struct EventLoop<'a> {
    index: usize,
    shared: &'a Shared<'a>,
    socket: BatchSocket,
    poll: Poll,
    inbox: Inbox,
    core: LoopCore,
    recorder: Option<Recorder>,
    io: Io,
    /// Hand-overs of one wake-up, reused.
    handoffs: Vec<(usize, Handoff)>,
    /// When the gauges that walk every match are published next.
    next_gauges: Instant,
    /// When this loop's memory is measured and published to the budget next.
    next_memory: Instant,
    /// What this loop held when last measured.
    memory: MemoryUse,
}

impl<'a> EventLoop<'a> {
    /// Loop `index` on `socket`, receiving its mail on `inbox`.
    pub(crate) fn new(
        index: usize,
        shared: &'a Shared<'a>,
        socket: BatchSocket,
        poll: Poll,
        inbox: Inbox,
        recorder: Option<Recorder>,
    ) -> io::Result<Self> {
        let mut socket = socket;
        poll.registry()
            .register(socket.source(), SOCKET, Interest::READABLE)?;
        let loops = shared.mail.len();
        let mut server = Server::new(shared.transport, shared.secret)
            .with_auth(shared.opts.auth.clone())
            .with_token_ledger_of(&shared.ledger);
        let now = Instant::from_std(shared.epoch, std::time::Instant::now());
        server.set_unix_time(now, unix_now_ms() / 1000);
        let mut router =
            Router::new(shared.config.clone()).with_match_ids(index as u64 + 1, loops as u64);
        // Both on one wall clock: the router keeps ended matches' token
        // instances until the tokens' expiry, which the server checks.
        router.set_unix_time(now, unix_now_ms() / 1000);
        let glue = RouterGlue::new().with_quota(Arc::clone(&shared.quota));
        Ok(Self {
            index,
            shared,
            socket,
            poll,
            inbox,
            core: LoopCore::new(index, loops, shared.home_key, server, router, glue),
            recorder,
            io: Io::default(),
            handoffs: Vec::new(),
            next_gauges: Instant::ZERO,
            next_memory: Instant::ZERO,
            memory: MemoryUse::default(),
        })
    }

    /// Matches found unfinished at start-up that this loop's recorder holds
    /// for the driver to place.
    pub(crate) fn take_resumable(&mut self) -> Vec<crate::resume::Unfinished> {
        self.recorder
            .as_mut()
            .map(Recorder::take_resumable)
            .unwrap_or_default()
    }

    /// Resumes a match found unfinished at start-up on this loop (its
    /// home): the router rebuilds it and the recorder goes on writing its
    /// file.
    pub(crate) fn resume(&mut self, mut m: crate::resume::Unfinished) -> Result<(), String> {
        let now = self.clock();
        let (id, path, last_hash) = (m.id, m.path.clone(), m.state.last_hash);
        let writer = m.take_writer();
        self.core.router.resume(now, m)?;
        if let (Some(rec), Some(writer)) = (self.recorder.as_mut(), writer) {
            rec.adopt(id, &path, writer, last_hash)
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Numbers this loop's next matches after `id` (taken by a resumed match).
    pub(crate) fn skip_match_ids_through(&mut self, id: u64) {
        self.core.router.skip_match_ids_through(id);
    }

    fn clock(&self) -> Instant {
        Instant::from_std(self.shared.epoch, std::time::Instant::now())
    }

    /// Serves until the graceful shutdown of every loop is over.
    pub(crate) fn run(self, note: &mut impl FnMut(RelayNote<'_>)) -> io::Result<()> {
        let shared = self.shared;
        let index = self.index;
        let r = self.serve(note);
        if r.is_err() {
            shared.failed.store(true, Ordering::Release);
            for (i, m) in shared.mail.iter().enumerate() {
                if i != index {
                    m.wake();
                }
            }
        }
        r
    }

    fn serve(mut self, note: &mut impl FnMut(RelayNote<'_>)) -> io::Result<()> {
        let opts = self.shared.opts;
        let mut events = Events::with_capacity(8);
        let mut refusal_notes = RefusalNotes::default();
        let mut drop_notes = DropNotes::default();
        let mut buf = Vec::with_capacity(2048);
        let mut out = Outgoing::default();
        let mut headers = SendHeaders::new();
        let mut drain_until: Option<Instant> = None;
        let mut linger_until: Option<Instant> = None;
        let mut finished = false;
        let mut handing_over = false;
        let mut last_wake = Instant::ZERO;
        if let Some(m) = &opts.metrics {
            m.beat_loop(self.index);
        }
        loop {
            let now = self.clock();
            self.check_stop(now, opts, &mut drain_until, note);
            if !handing_over && opts.handover.is_some_and(|h| h.load(Ordering::Relaxed)) {
                // Joins refused and lobbies closed as in a drain; the
                // running matches are left to their recordings. One short
                // linger sends the lobbies' refusals.
                handing_over = true;
                self.core.router.begin_drain();
                note(RelayNote::HandingOver {
                    running: self.core.router.running_count(),
                });
                linger_until = Some(now + HANDOVER_LINGER);
            }
            if let Some(until) = drain_until
                && !handing_over
                && linger_until.is_none()
                && (now >= until || self.core.router.match_count() == 0)
            {
                let had = self.core.router.match_count();
                self.core.router.end_all();
                linger_until = Some(if had > 0 { now + LINGER } else { now });
            }
            if !finished
                && let Some(l) = linger_until
                && (now >= l || self.core.server.connections().next().is_none())
            {
                finished = true;
                // The last loop to finish wakes the others, which may be
                // waiting only to keep forwarding for it.
                if self.shared.unfinished.fetch_sub(1, Ordering::AcqRel) == 1 {
                    for (i, m) in self.shared.mail.iter().enumerate() {
                        if i != self.index {
                            m.wake();
                        }
                    }
                }
            }
            if finished && self.shared.unfinished.load(Ordering::Acquire) == 0 {
                break;
            }
            if self.shared.failed.load(Ordering::Acquire) {
                return Err(io::Error::other(OTHER_LOOP_FAILED));
            }
            let deadline = [
                self.core.server.poll_timeout(),
                self.core.router.poll_timeout(),
                linger_until.filter(|_| !finished),
            ]
            .into_iter()
            .flatten()
            .min();
            let wait = deadline
                .map_or(MAX_WAIT, |t| t.saturating_since(now))
                .min(MAX_WAIT);
            let wait = pace(now, last_wake, wait);
            // The one blocking wait of this wake-up.
            match self.poll.poll(&mut events, Some(wait.to_std())) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
            let now = self.clock();
            last_wake = now;
            // Again after the wait: a stop that came while this loop slept
            // (or waited for a core) must refuse the joins this wake-up
            // brings, e.g. a connection another, already draining loop
            // handed over with its Join.
            self.check_stop(now, opts, &mut drain_until, note);
            self.read_mail(now);
            self.read_socket(now)?;
            self.core.step(now);
            if now >= self.next_memory {
                self.next_memory = now + MEMORY_EVERY;
                self.measure_memory();
            }
            self.post_handoffs();
            // Before anything is sent: the recorder writes the turns this
            // wake-up closed to their files, so no peer ever holds a turn
            // its recording lacks (the recording is the match's log).
            self.notes(now, note, &mut refusal_notes, &mut drop_notes);
            while let Some(to) = self.core.server.poll_transmit(now, &mut buf) {
                out.push(to, &buf);
            }
            let (packets, bytes) = self.socket.send_all(&mut headers, &mut out);
            self.io.packets_out += packets;
            self.io.bytes_out += bytes;
            if let Some(m) = &opts.metrics {
                let gauges = now >= self.next_gauges;
                if gauges {
                    self.next_gauges = now + GAUGES_EVERY;
                }
                self.publish(m, drain_until.is_some(), gauges);
                m.beat_loop(self.index);
            }
        }
        if let Some(m) = &opts.metrics {
            self.publish(m, true, true);
            m.stop_beating_loop(self.index);
        }
        Ok(())
    }

    /// Begins this loop's drain (joins refused, lobbies closed, the grace
    /// period running) the first time it sees the stop flag.
    fn check_stop(
        &mut self,
        now: Instant,
        opts: &ServeOptions<'_>,
        drain_until: &mut Option<Instant>,
        note: &mut impl FnMut(RelayNote<'_>),
    ) {
        if drain_until.is_none() && opts.stop.load(Ordering::Relaxed) {
            *drain_until = Some(now + opts.grace);
            self.core.router.begin_drain();
            note(RelayNote::Draining {
                running: self.core.router.running_count(),
                grace: opts.grace,
            });
        }
    }

    fn publish(&self, m: &Metrics, draining: bool, gauges: bool) {
        let i = self.index;
        let core = &self.core;
        publish(
            m,
            i,
            &core.router,
            &core.server,
            &core.glue,
            self.recorder.as_ref(),
            &self.io,
            gauges,
        );
        let c = core.counts;
        m.set_loop(i, Metric::DropRateLimitedAddr, core.per_addr.dropped());
        m.set_loop(i, Metric::ConnectionsMoved, c.moved_out);
        m.set_loop(i, Metric::DatagramsForwarded, c.forwarded);
        m.set_loop(i, Metric::HandoffDatagramsDropped, c.datagrams_dropped);
        m.set_loop(i, Metric::HandoffConnectionsDropped, c.connections_dropped);
        let mem = self.memory;
        m.set_loop(i, Metric::MemoryConnections, mem.connections as u64);
        m.set_loop(i, Metric::MemoryBacklogs, mem.backlogs as u64);
        m.set_loop(i, Metric::MemorySnapshots, mem.snapshots as u64);
        m.set_loop(i, Metric::MemoryRecordings, mem.recordings as u64);
        let budget = &self.shared.memory;
        m.set(Metric::MemoryBudget, budget.max() as u64);
        m.set(Metric::MemoryFull, u64::from(budget.is_full()));
        if draining {
            m.set(Metric::Draining, 1);
        }
    }

    /// Measures what this loop holds, publishes it to the relay's budget
    /// and tells the router whether the relay is at it.
    fn measure_memory(&mut self) {
        let core = &self.core;
        let recordings = self.recorder.as_ref().map_or(0, Recorder::memory);
        self.memory = core.glue.memory_use(&core.router, &core.server, recordings);
        let pressure = self.shared.memory.publish(self.index, self.memory);
        self.core.router.set_memory(pressure);
    }

    /// Takes what other loops handed over.
    fn read_mail(&mut self, now: Instant) {
        while let Ok(h) = self.inbox.try_recv() {
            self.core.handle_handoff(now, h);
        }
    }

    /// Drains the socket, one `recvmmsg` batch at a time.
    fn read_socket(&mut self, now: Instant) -> io::Result<()> {
        loop {
            let Self {
                socket, core, io, ..
            } = self;
            let (_, drained) = socket.recv_batch(|from, d| {
                io.packets_in += 1;
                io.bytes_in += d.len() as u64;
                core.handle_datagram(now, from, d);
            })?;
            if drained {
                return Ok(());
            }
        }
    }

    /// Posts this wake-up's hand-overs; a full mailbox hands them back to
    /// the core, which drops or keeps them.
    fn post_handoffs(&mut self) {
        self.core.drain_handoffs(&mut self.handoffs);
        for (to, h) in self.handoffs.drain(..) {
            if let Err(h) = self.shared.mail[to].post(h) {
                self.core.handoff_refused(to, h);
            }
        }
    }

    fn notes(
        &mut self,
        now: Instant,
        note: &mut impl FnMut(RelayNote<'_>),
        refusal_notes: &mut RefusalNotes,
        drop_notes: &mut DropNotes,
    ) {
        let core = &mut self.core;
        drop_notes.note(now, std::iter::from_fn(|| core.glue.poll_drop()), note);
        for (conn, reason) in core.glue.take_cut_off() {
            note(RelayNote::CutOff { conn, reason });
        }
        for r in core.glue.take_refusals() {
            if refusal_notes.allow(now, note) {
                note(RelayNote::Refused {
                    conn: Some(r.conn),
                    addr: r.addr,
                    match_name: (!r.match_name.is_empty()).then_some(r.match_name.as_str()),
                    reason: r.reason,
                    detail: r.detail.as_deref(),
                });
            }
        }
        while let Some((addr, denied)) = core.server.poll_denied() {
            if refusal_notes.allow(now, note) {
                note(RelayNote::Refused {
                    conn: None,
                    addr,
                    match_name: None,
                    reason: denied.into(),
                    detail: None,
                });
            }
        }
        refusal_notes.flush(now, note);
        while let Some(ev) = core.router.poll_event() {
            // One reading for the log, the live list and the recorder.
            let unix_ms = unix_now_ms();
            note(RelayNote::Event(&ev, unix_ms));
            if let Some(rec) = self.recorder.as_mut() {
                // The recorder reads no clock: the wall-clock time comes from here.
                match rec.handle(unix_ms, &ev) {
                    Ok(Some(done)) => note(RelayNote::Recorded(&done)),
                    Ok(None) => {}
                    Err(e) => note(RelayNote::RecordError(e.to_string())),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_wake_up_right_after_the_last_naps_out_the_rest_of_the_interval() {
        let last = Instant::from_millis(100);
        let now = last + Duration::from_micros(300);
        let (nap, wait) = coalesce(now, last, ms(20));
        assert_eq!(nap, COALESCE.saturating_sub(Duration::from_micros(300)));
        assert_eq!(nap + wait, ms(20), "the timers' wait is kept in all");
    }

    #[test]
    fn a_timer_due_sooner_than_the_interval_is_not_made_late() {
        let last = Instant::from_millis(100);
        let (nap, wait) = coalesce(last, last, Duration::from_micros(200));
        assert_eq!(nap, Duration::from_micros(200));
        assert_eq!(wait, Duration::ZERO);
        assert_eq!(
            coalesce(last, last, Duration::ZERO),
            (Duration::ZERO, Duration::ZERO)
        );
    }

    #[test]
    fn a_loop_idle_for_longer_than_the_interval_waits_at_once() {
        let last = Instant::from_millis(100);
        let now = last + ms(5);
        assert_eq!(coalesce(now, last, ms(20)), (Duration::ZERO, ms(20)));
    }
}
