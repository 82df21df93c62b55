//! One peer's lockstep turn session, sans-IO at the message level.
//!
//! The session owns the peer side of the turn protocol: it joins a match,
//! schedules local commands for turn `t + d`, sends an input for every turn
//! (empty ones too, so the relay can close turns early), buffers the relay's
//! bundles and yields [`Event::TurnReady`] for each turn exactly once, in
//! order, only when that turn's bundle is here and the turn is due by the
//! local clock. It never touches a socket or reads a clock: feed it
//! [`Session::handle_message`] / [`Session::handle_timeout`] and drain
//! [`Session::poll_outgoing`] / [`Session::poll_event`].
//!
//! Pacing: turn `T` is due at `start + (T - first_turn + d0) * turn_length`
//! where `start` is when the Start message arrived and `d0` the starting delay
//! (the relay uses the same schedule for its deadlines). The local turn `c`
//! used for scheduling is `min(clock turn, next turn to simulate)`, so a
//! stalled peer stops issuing inputs for ever-further turns (Age of Empires'
//! communications turn pauses too).
//!
//! Under the relay's clock (`input_delay` 0 in `Start`, the relay's default
//! `clock` policy) there is no input delay: commands leave at once and the
//! relay stamps them into the turn it closes next, and turns are due on a
//! schedule kept in step with the relay's bundles ([`playout`]).

use crate::builder::SessionConfig;
use crate::event::Event;
use crate::input_delay::DelaySchedule;
use crate::proto::{
    Bundle, Delivery, MAX_HAND_BACK_TURNS, MAX_INPUT_BYTES, MAX_INPUT_CHUNKS, Notice, PeerReport,
    RejectReason, Start, ToPeer, ToRelay,
};
use crate::time::{Duration, Instant};
use crate::turn_buffer::TurnBuffer;
pub use forensics::{ForensicsAnswer, ForensicsRequest};
use playout::{Ledger, Playout};
use sim::{PlayerId, SectionHash, StateHash, Turn};
use std::collections::{BTreeMap, VecDeque};

pub(crate) mod playout;
pub use playout::PlayoutConfig;
mod running;
mod snapshot_sync;
mod stats;
use running::{InFlight, Running, clock_inputs};
pub use stats::{LinkFigures, SessionError, SessionStats};

/// How many turn-latency samples are kept for percentiles.
const LATENCY_SAMPLES: usize = 4096;
/// Commands submitted this long after the start count as steady state.
const WARM_UP: Duration = Duration::from_secs(5);
/// Most submitted command chunks waiting for their turn; more are refused.
const MAX_PENDING_CHUNKS: usize = 256;
/// How long a rejoin refused with [`RejectReason::SlotInUse`] is retried: the
/// relay takes a slot over once its old connection has been silent for its
/// `takeover_after` (1 s by default) and drops it after its silence timeout
/// (5 s by default), so a restarted peer is back within this bound.
const REJOIN_RETRY_FOR: Duration = Duration::from_secs(10);
/// Between two rejoin attempts while the slot is still in use.
const REJOIN_RETRY_EVERY: Duration = Duration::from_millis(250);

/// Where the session is in its life.
#[derive(Debug)]
enum Phase {
    /// Join sent, waiting for the match to start.
    Joining,
    /// Playing.
    Running(Box<Running>),
    /// Rejected, left, or the match ended.
    Ended,
}

/// A peer's lockstep session; see the module docs.
#[derive(Debug)]
pub struct Session {
    config: SessionConfig,
    phase: Phase,
    /// The state of a match that ended, kept so the game can still report
    /// the hashes of the turns it was yielded (the last ones are typically
    /// simulated after the `MatchEnded` event was queued).
    finished: Option<Box<Running>>,
    outgoing: VecDeque<(Delivery, Vec<u8>)>,
    events: VecDeque<Event>,
    stats: SessionStats,
    latencies: VecDeque<Duration>,
    /// Latencies of commands submitted after the warm-up.
    steady: VecDeque<Duration>,
    /// Turn latencies of commands submitted at least [`WARM_UP`] after the
    /// latest reconnect (see `SessionStats::recovered_latency_p50`).
    recovered: VecDeque<Duration>,
    /// When the relay last took this session back on a new connection.
    reconnected_at: Option<Instant>,
    /// The transport's RTT, sampled once a report interval.
    rtts: VecDeque<Duration>,
    /// The transport's RTT p99, sampled like `rtts`.
    rtt_p99s: VecDeque<Duration>,
    /// A rejoin refused because the slot's old connection still counts as
    /// playing: when to ask again, and when to stop asking.
    rejoin_retry: Option<RejoinRetry>,
    /// The reconnect, rewatch (or, without a whole world, rejoin or
    /// spectate) sent on a new connection, until the relay answers: sent
    /// again if it is refused for a passing reason.
    reconnect_msg: Option<ToRelay>,
}

/// See [`Session::rejoin_retry`].
#[derive(Clone, Copy, Debug)]
struct RejoinRetry {
    next: Option<Instant>,
    until: Instant,
}

impl Session {
    pub(crate) fn new(_now: Instant, config: SessionConfig) -> Self {
        let mut s = Self {
            config,
            phase: Phase::Joining,
            finished: None,
            outgoing: VecDeque::new(),
            events: VecDeque::new(),
            stats: SessionStats::default(),
            latencies: VecDeque::new(),
            steady: VecDeque::new(),
            recovered: VecDeque::new(),
            reconnected_at: None,
            rtts: VecDeque::new(),
            rtt_p99s: VecDeque::new(),
            rejoin_retry: None,
            reconnect_msg: None,
        };
        s.send(&s.first_message());
        s
    }

    /// The join, rejoin or spectate request the session opens with.
    fn first_message(&self) -> ToRelay {
        match self.config.rejoin {
            Some((player, secret)) => ToRelay::Rejoin(crate::proto::Rejoin {
                join: self.config.join.clone(),
                player,
                secret,
            }),
            None if self.config.spectate => ToRelay::Spectate(self.config.join.clone()),
            None => ToRelay::Join(self.config.join.clone()),
        }
    }

    /// A rejoin or reconnect was refused for a passing reason: the slot's
    /// old connection still counts as playing (this peer's own crashed
    /// process, not yet noticed by the relay), or the relay has no agreed
    /// snapshot yet (a restarted relay asks for one as soon as its match
    /// runs again). Ask again shortly, for a bounded time. Whether it will.
    fn retry_rejoin(&mut self, now: Instant) -> bool {
        let joining = self.config.rejoin.is_some() && matches!(self.phase, Phase::Joining);
        if !joining && self.reconnect_msg.is_none() {
            return false;
        }
        let retry = self.rejoin_retry.get_or_insert(RejoinRetry {
            next: None,
            until: now + REJOIN_RETRY_FOR,
        });
        if now >= retry.until {
            return false;
        }
        retry.next = Some(now + REJOIN_RETRY_EVERY);
        true
    }

    /// Whether a [`Session::reconnect`] or [`Session::rewatch`] waits for
    /// the relay's answer.
    #[must_use]
    pub fn is_reconnecting(&self) -> bool {
        matches!(self.phase, Phase::Running(_)) && self.reconnect_msg.is_some()
    }

    /// Whether the match is being played.
    #[must_use]
    pub fn is_running(&self) -> bool {
        matches!(self.phase, Phase::Running(_))
    }

    /// The connection to the relay was lost before the match started for
    /// this session (in a lobby, or with a rejoin or spectate not answered
    /// yet) and a new one is open: ask again, as at the start. False
    /// (nothing sent) once the match started or the session ended.
    pub fn request_again(&mut self) -> bool {
        if !matches!(self.phase, Phase::Joining) {
            return false;
        }
        self.outgoing.clear();
        self.rejoin_retry = None;
        self.send(&self.first_message());
        true
    }

    /// Whether the session is over (rejected, left, or the match ended).
    #[must_use]
    pub fn is_ended(&self) -> bool {
        matches!(self.phase, Phase::Ended)
    }

    /// This peer's slot once the match started; `None` for a spectator,
    /// which has none.
    #[must_use]
    pub fn player(&self) -> Option<PlayerId> {
        match &self.phase {
            Phase::Running(_) if self.config.spectate => None,
            Phase::Running(r) => Some(r.your_player),
            _ => None,
        }
    }

    /// The next turn that will be yielded.
    #[must_use]
    pub fn next_turn(&self) -> Option<Turn> {
        match &self.phase {
            Phase::Running(r) => Some(r.next_exec),
            _ => None,
        }
    }

    /// The turn a command submitted at `now` is expected to be played in:
    /// where a speculative view places it. Under the relay's clock the relay
    /// stamps an input into the turn it closes next after the input arrives
    /// (half a round trip from now), and bundle `T` is due here a down-link
    /// delay after the relay closed `T`: so it is the first turn due at
    /// least one RTT from now. Under an input delay it is the turn the
    /// session will send it for. `None` outside a running match.
    #[must_use]
    pub fn landing_turn(&self, now: Instant) -> Option<Turn> {
        let Phase::Running(r) = &self.phase else {
            return None;
        };
        if let Some(p) = &r.playout {
            let at = now + self.stats.link.rtt;
            let first = r.next_exec;
            let due = p.due(first);
            if due >= at {
                return Some(first);
            }
            let len = r.turn_length.as_micros().max(1);
            let n = at.saturating_since(due).as_micros().div_ceil(len);
            return Some(Turn(
                first.0.saturating_add(u32::try_from(n).unwrap_or(u32::MAX)),
            ));
        }
        // As `pump_inputs` schedules: local turn + delay, or the next turn
        // an input is still to be sent for.
        let target = u32::try_from(input_target(r, now)).unwrap_or(0);
        Some(Turn(target.max(r.next_input.0)))
    }

    /// Queues one encoded command list (`sim::encode_commands`) for turn `t + d`.
    ///
    /// # Errors
    /// [`SessionError::Spectating`] for a spectator (checked first: it is
    /// never right), [`SessionError::NotRunning`] outside the match,
    /// [`SessionError::Overloaded`] when the queue is full.
    pub fn submit(&mut self, now: Instant, commands: Vec<u8>) -> Result<(), SessionError> {
        if self.config.spectate {
            return Err(SessionError::Spectating);
        }
        let Phase::Running(r) = &mut self.phase else {
            return Err(SessionError::NotRunning);
        };
        if commands.len() > MAX_INPUT_BYTES || r.pending.len() >= MAX_PENDING_CHUNKS {
            return Err(SessionError::Overloaded(commands.len()));
        }
        r.pending.push_back((now, commands));
        self.advance(now);
        Ok(())
    }

    /// Encodes and queues game commands for turn `t + d`; an empty slice is
    /// a no-op (except for a spectator: [`SessionError::Spectating`]).
    pub fn submit_commands<C: serde::Serialize>(
        &mut self,
        now: Instant,
        commands: &[C],
    ) -> Result<(), SessionError> {
        if self.config.spectate {
            return Err(SessionError::Spectating);
        }
        if commands.is_empty() {
            return Ok(());
        }
        let mut bytes = Vec::new();
        sim::encode_commands(commands, &mut bytes);
        self.submit(now, bytes)
    }

    /// Reports the state hash after simulating `turn` (and keeps its sections
    /// for a possible desync diagnosis). Also accepted after the match ended,
    /// for every yielded turn: the relay waits for the final hashes, and the
    /// driver should keep sending until they are acknowledged.
    pub fn report_hash(
        &mut self,
        turn: Turn,
        hash: StateHash,
        sections: Vec<SectionHash>,
    ) -> Result<(), SessionError> {
        let r = match &mut self.phase {
            Phase::Running(r) => r,
            _ => self.finished.as_mut().ok_or(SessionError::NotRunning)?,
        };
        if turn >= r.next_exec || r.last_hashed.is_some_and(|h| turn <= h) {
            return Err(SessionError::BadTurn(turn));
        }
        r.last_hashed = Some(turn);
        r.sections.push_back((turn, sections));
        while r.sections.len() > self.config.section_history {
            r.sections.pop_front();
        }
        self.send(&ToRelay::Hash { turn, hash });
        Ok(())
    }

    /// Link figures measured by the transport, for stats and reports.
    pub fn handle_link_stats(&mut self, rtt: Duration, jitter: Duration, loss: f64) {
        let rtt_p99 = self.stats.link.rtt_p99;
        self.stats.link = LinkFigures {
            rtt,
            jitter,
            rtt_p99,
            loss,
        };
    }

    /// The transport's RTT tail (`LinkStats::rtt_p99`), passed in by the
    /// driver beside [`Session::handle_link_stats`]; feeds
    /// `SessionStats::rtt_p99`.
    pub fn handle_rtt_p99(&mut self, rtt_p99: Duration) {
        self.stats.link.rtt_p99 = rtt_p99;
    }

    /// Leaves the match cleanly.
    pub fn leave(&mut self, now: Instant) {
        if let Phase::Running(r) = &self.phase {
            // A wait cut short by leaving (e.g. the peer gives up) still counts.
            self.stats.stall += r.stall_since_accounted(now);
        }
        if !self.is_ended() {
            self.send(&ToRelay::Leave);
            self.phase = Phase::Ended;
        }
    }

    /// The transport refused the connection before any join (its handshake
    /// was denied): reported as [`Event::Rejected`] like a refused join, so a
    /// game handles every refusal in one place.
    pub fn handle_denied(&mut self, reason: RejectReason) {
        self.refused(reason, None);
    }

    fn refused(&mut self, reason: RejectReason, detail: Option<String>) {
        // A refused reconnect ends the match for this peer as a refused
        // join does: it has no seat to play or watch from.
        if matches!(self.phase, Phase::Joining) || self.reconnect_msg.is_some() {
            self.reconnect_msg = None;
            self.events.push_back(Event::Rejected { reason, detail });
            self.phase = Phase::Ended;
        }
    }

    /// Handles one message from the relay.
    pub fn handle_message(&mut self, now: Instant, bytes: &[u8]) {
        self.wake(now);
        self.accept_restore();
        self.stats.bytes_received += bytes.len() as u64;
        let Ok(msg) = ToPeer::decode(bytes) else {
            self.stats.bad_messages += 1;
            return;
        };
        match msg {
            ToPeer::Lobby { joined, slots, .. } => {
                if matches!(self.phase, Phase::Joining) {
                    self.events.push_back(Event::Lobby { joined, slots });
                }
            }
            ToPeer::Rejected {
                reason: RejectReason::SlotInUse | RejectReason::NoSnapshot,
                ..
            } if self.retry_rejoin(now) => {}
            ToPeer::Rejected { reason, detail } => self.refused(reason, detail),
            ToPeer::Start(start) => self.start(now, start),
            ToPeer::Bundle(bundle) => self.on_bundle(now, bundle),
            ToPeer::HandBack { from } => self.hand_back(from),
            ToPeer::Desync(d) => self.events.push_back(Event::Desync {
                turn: d.turn,
                hashes: d.hashes,
                odd_players: d.odd_players,
            }),
            ToPeer::SectionRequest { turn } => {
                if let Phase::Running(r) = &self.phase {
                    let sections = r
                        .sections
                        .iter()
                        .find(|(t, _)| *t == turn)
                        .map(|(_, s)| s.clone())
                        .unwrap_or_default();
                    self.send(&ToRelay::Sections { turn, sections });
                }
            }
            ToPeer::SectionDiff {
                turn,
                players,
                sections,
            } => self.events.push_back(Event::DesyncSections {
                turn,
                players,
                sections,
            }),
            ToPeer::DesyncDetails(d) => self.events.push_back(Event::DesyncDetails {
                turn: d.turn,
                complete: d.complete,
                entities: d.entities,
            }),
            ToPeer::LateInput { turn, landed_in } => {
                if let Phase::Running(r) = &mut self.phase {
                    self.stats.late_inputs += 1;
                    let times = r.take_own_chunks(turn);
                    r.in_flight
                        .entry(landed_in)
                        .or_default()
                        .extend(times.into_iter().map(|at| InFlight { at, own: false }));
                    self.events.push_back(Event::LateInput { turn, landed_in });
                }
            }
            ToPeer::InputRefused { turn } => {
                if let Phase::Running(r) = &mut self.phase {
                    self.stats.inputs_refused += 1;
                    // Its commands are never played: no latency sample.
                    let submitted = if r.playout.is_some() {
                        // Under the relay's clock `turn` is our input's sequence.
                        r.ledger.refuse(turn.0)
                    } else {
                        r.take_own_chunks(turn)
                    };
                    self.events
                        .push_back(Event::InputRefused { turn, submitted });
                }
            }
            ToPeer::Waiting { turn, players } => {
                if let Phase::Running(r) = &mut self.phase {
                    r.waiting = Some((turn, players));
                }
            }
            ToPeer::Ping { stamp_us } => self.send(&ToRelay::Pong { stamp_us }),
            ToPeer::MatchEnd { turn, reason } => {
                if let Phase::Running(r) = &mut self.phase {
                    r.end = Some((turn, reason));
                }
            }
            ToPeer::EntityHashRequest { turn, section } => {
                self.events
                    .push_back(Event::Forensics(ForensicsRequest::EntityHashes {
                        turn,
                        section,
                    }))
            }
            ToPeer::EntityDumpRequest { turn, section, ids } => {
                self.events
                    .push_back(Event::Forensics(ForensicsRequest::EntityDumps {
                        turn,
                        section,
                        ids,
                    }))
            }
            ToPeer::RejoinSecret(secret) => {
                self.events.push_back(Event::RejoinSecret { secret });
            }
            ToPeer::SnapshotRequest { turn } => {
                if let Phase::Running(r) = &self.phase
                    && turn >= r.next_exec
                {
                    self.events.push_back(Event::SnapshotWanted { turn });
                } else {
                    self.stats.bad_messages += 1;
                }
            }
            ToPeer::Resume(resume) => self.resume(now, resume),
            ToPeer::SnapshotChunk(chunk) => self.on_snapshot_chunk(chunk),
            ToPeer::Heal(heal) => self.heal(heal),
            ToPeer::Reoffer(reoffer) => self.reoffer(reoffer),
            ToPeer::Reconnected(answer) => self.reconnected(now, &answer),
        }
        self.advance(now);
    }

    /// Advances timers: due turns, input scheduling, stall notices, reports.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.wake(now);
        self.accept_restore();
        if let Some(retry) = &mut self.rejoin_retry
            && retry.next.is_some_and(|t| t <= now)
        {
            retry.next = None;
            if matches!(self.phase, Phase::Joining) {
                self.send(&self.first_message());
            } else if let Some(m) = self.reconnect_msg.clone() {
                self.send(&m);
            }
        }
        self.advance(now);
    }

    /// Control came back at `now`: under the relay's clock, a gap far longer
    /// than any timer we asked for means this peer was not running (frozen,
    /// descheduled), so what arrives now was queued, not timed by the link.
    fn wake(&mut self, now: Instant) {
        if let Phase::Running(r) = &mut self.phase
            && let Some(p) = &mut r.playout
        {
            p.handle_wakeup(r.now, now);
            r.now = r.now.max(now);
        }
    }

    /// The next instant [`Session::handle_timeout`] has work to do.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let Phase::Running(r) = &self.phase else {
            return self
                .rejoin_retry
                .filter(|_| matches!(self.phase, Phase::Joining))
                .and_then(|r| r.next);
        };
        if r.playout.is_some() {
            // The next due turn, or its stall notice; at least once a turn
            // so that a long gap means this peer was not running.
            let due = r.due(r.next_exec);
            let at = [due, due + r.turn_length]
                .into_iter()
                .find(|&t| t > r.now)
                .unwrap_or(r.now + r.turn_length);
            let t = r.next_report.min(at).min(r.now + r.turn_length);
            return Some(self.reconnect_retry_at().map_or(t, |u| u.min(t)));
        }
        // Turns become due, inputs get scheduled and stall notices fire only
        // on turn-length boundaries; upload chunks leave on their own pace.
        let t = r.next_report.min(r.next_boundary(r.now));
        let t = r.upload.next_at().map_or(t, |u| u.min(t));
        Some(self.reconnect_retry_at().map_or(t, |u| u.min(t)))
    }

    /// When a refused reconnect is asked again.
    fn reconnect_retry_at(&self) -> Option<Instant> {
        self.reconnect_msg
            .as_ref()
            .and(self.rejoin_retry)
            .and_then(|r| r.next)
    }

    /// The next message to send to the relay.
    #[must_use]
    pub fn poll_outgoing(&mut self) -> Option<(Delivery, Vec<u8>)> {
        // The input for `c + d` leaves once the game has taken turn `c`'s
        // TurnReady (and had its chance to submit in response).
        if let Phase::Running(r) = &self.phase {
            let now = r.now;
            self.pump_inputs(now);
        }
        self.outgoing.pop_front()
    }

    /// The next event for the game loop.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        if let Phase::Running(r) = &mut self.phase
            && r.restore_accepted()
        {
            // The game polled the snapshot and did not report it failed:
            // the tail runs now, not at the next message or timer.
            let now = r.now;
            self.advance(now);
        }
        let ev = self.events.pop_front();
        if let Phase::Running(r) = &mut self.phase {
            match &ev {
                Some(Event::TurnReady { turn, .. }) => r.consumed = Some(*turn),
                Some(Event::Restored { snapshot: Some(_) }) => r.restore_polled(),
                _ => {}
            }
        }
        ev
    }

    /// The game came back after polling a restored snapshot without
    /// reporting it failed: the restore stands.
    fn accept_restore(&mut self) {
        if let Phase::Running(r) = &mut self.phase {
            r.restore_accepted();
        }
    }

    fn send(&mut self, msg: &ToRelay) {
        let bytes = msg.to_bytes();
        self.stats.bytes_sent += bytes.len() as u64;
        self.outgoing.push_back((msg.delivery(), bytes));
    }

    fn start(&mut self, now: Instant, start: Start) {
        if !matches!(self.phase, Phase::Joining) {
            self.stats.bad_messages += 1;
            return;
        }
        let turn_length = Duration::from_micros(start.turn_length_us);
        // The first turn is due one starting delay after the start, like the
        // relay's deadline for it, so the empty inputs for the first `d0`
        // turns have that long to arrive.
        let epoch = now + turn_length.saturating_mul(u64::from(start.input_delay));
        // `input_delay` 0: the relay is the clock and stamps our inputs.
        let playout = (start.input_delay == 0)
            .then(|| Playout::new(self.config.playout, now, start.first_turn, turn_length));
        let stall_accounted = playout.as_ref().map_or(epoch, |p| p.due(start.first_turn));
        self.events.push_back(Event::Started {
            your_player: start.your_player,
            setup: start.setup,
            players: start.players,
            first_turn: start.first_turn,
            last_turn: start.last_turn,
            input_delay: start.input_delay,
            turn_length,
        });
        self.stats.input_delay = start.input_delay;
        self.phase = Phase::Running(Box::new(Running {
            your_player: start.your_player,
            first_turn: start.first_turn,
            last_turn: start.last_turn,
            turn_length,
            start: now,
            now,
            epoch,
            lead: Duration::ZERO,
            next_exec: start.first_turn,
            consumed: None,
            buffer: TurnBuffer::default(),
            arrived: BTreeMap::new(),
            delay: DelaySchedule::new(start.first_turn, start.input_delay),
            next_input: start.first_turn,
            pending: VecDeque::new(),
            in_flight: BTreeMap::new(),
            awaiting_late: BTreeMap::new(),
            sections: VecDeque::new(),
            last_hashed: None,
            stall_accounted,
            stall_notified: None,
            waiting: None,
            next_report: now + self.config.report_interval,
            end: None,
            playout,
            ledger: Ledger::default(),
            restoring: None,
            upload: snapshot_sync::Upload::default(),
            played: VecDeque::new(),
        }));
    }

    fn on_bundle(&mut self, now: Instant, bundle: Bundle) {
        let Phase::Running(r) = &mut self.phase else {
            self.stats.bad_messages += 1;
            return;
        };
        if r.last_turn.is_some_and(|l| bundle.turn > l) {
            self.stats.bad_messages += 1;
            return;
        }
        let turn = bundle.turn;
        if r.buffer.insert(r.next_exec, bundle).is_err() {
            self.stats.duplicate_bundles += 1;
        } else {
            r.arrived.insert(turn, now);
            if let Some(p) = &mut r.playout {
                p.handle_arrival(now, turn);
            }
        }
    }

    /// Runs everything that is due at `now`, in order: schedule inputs, yield
    /// due turns whose bundles are here, then timers.
    fn advance(&mut self, now: Instant) {
        if let Phase::Running(r) = &mut self.phase {
            r.now = r.now.max(now);
        }
        loop {
            self.pump_inputs(now);
            if !self.execute_one(now) {
                break;
            }
        }
        self.check_caught_up();
        self.pump_upload(now);
        let Phase::Running(r) = &mut self.phase else {
            return;
        };
        // Count the wait for a missing bundle as it passes, not only once
        // the bundle arrives: the reports and a peer that gives up see it.
        self.stats.stall += r.stall_since_accounted(now);
        if r.stalled(now) {
            r.stall_accounted = r.stall_accounted.max(now);
        }
        // Stall notice: the due turn missing a turn length (restoring: the tail is coming).
        if !r.buffer.has(r.next_exec)
            && !r.restoring()
            && r.end.is_none()
            && r.stall_notified != Some(r.next_exec)
            && now >= r.due(r.next_exec) + r.turn_length
        {
            r.stall_notified = Some(r.next_exec);
            let waiting_on = match &r.waiting {
                Some((t, p)) if *t == r.next_exec => p.clone(),
                _ => Vec::new(),
            };
            self.events.push_back(Event::Stalled {
                turn: r.next_exec,
                waiting_on,
            });
        }
        if let Some((end, reason)) = r.end
            && r.end_reached()
        {
            self.events
                .push_back(Event::MatchEnded { turn: end, reason });
            if let Phase::Running(r) = std::mem::replace(&mut self.phase, Phase::Ended) {
                self.finished = Some(r);
            }
            return;
        }
        if now >= r.next_report {
            r.next_report = now + self.config.report_interval;
            let link = self.stats.link;
            if link.rtt > Duration::ZERO {
                stats::push_sample(&mut self.rtts, link.rtt);
            }
            if link.rtt_p99 > Duration::ZERO {
                stats::push_sample(&mut self.rtt_p99s, link.rtt_p99);
            }
            let report = PeerReport {
                rtt_us: u32::try_from(link.rtt.as_micros()).unwrap_or(u32::MAX),
                jitter_us: u32::try_from(link.jitter.as_micros()).unwrap_or(u32::MAX),
                // Clamped to 0..=1000 before the cast, so it cannot truncate.
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                loss_permille: (link.loss.clamp(0.0, 1.0) * 1000.0) as u16,
                stall_us: self.stats.stall.as_micros(),
                executed: self.stats.last_turn,
            };
            self.send(&ToRelay::Report(report));
        }
    }

    /// Sends inputs for every turn up to `c + d(c)` where `c` is the local turn.
    fn pump_inputs(&mut self, now: Instant) {
        let Phase::Running(r) = &mut self.phase else {
            return;
        };
        if r.restoring() {
            // A rejoining peer's inputs count only once it caught up.
            return;
        }
        if r.playout.is_some() {
            let msgs = clock_inputs(r);
            for m in msgs {
                self.send(&m);
            }
            return;
        }
        let Ok(target) = u32::try_from(input_target(r, now)) else {
            return;
        };
        let target = Turn(target);
        let mut msgs = Vec::new();
        while r.next_input <= target && r.last_turn.is_none_or(|l| r.next_input <= l) {
            let turn = r.next_input;
            let mut commands = Vec::new();
            if turn == target {
                let mut bytes = 0;
                while let Some((_, c)) = r.pending.front() {
                    if commands.len() >= MAX_INPUT_CHUNKS || bytes + c.len() > MAX_INPUT_BYTES {
                        break;
                    }
                    bytes += c.len();
                    if let Some((at, c)) = r.pending.pop_front() {
                        r.in_flight
                            .entry(turn)
                            .or_default()
                            .push(InFlight { at, own: true });
                        commands.push(c);
                    }
                }
            }
            msgs.push(ToRelay::Input { turn, commands });
            r.next_input = turn.next();
        }
        for m in msgs {
            self.send(&m);
        }
    }

    /// Yields the next turn if it is due and its bundle is here.
    fn execute_one(&mut self, now: Instant) -> bool {
        let Phase::Running(r) = &mut self.phase else {
            return false;
        };
        if r.last_turn.is_some_and(|l| r.next_exec > l) || r.end_reached() || r.awaiting_snapshot()
        {
            return false;
        }
        let due = r.due(r.next_exec);
        // Once the relay ended the match, the turns up to its last one run at
        // once: pacing only gives inputs time to arrive, and no input counts
        // any more (a relay shutting down must not leave its players waiting).
        if now < due && r.end.is_none() {
            return false;
        }
        let Some(bundle) = r.buffer.take(r.next_exec) else {
            return false;
        };
        // A player keeps the last bundles it played, for a relay that
        // restarts without them.
        if !self.config.spectate {
            if r.played.len() >= MAX_HAND_BACK_TURNS as usize {
                r.played.pop_front();
            }
            r.played.push_back(bundle.clone());
        }
        let turn = bundle.turn;
        for n in bundle.notices {
            match n {
                Notice::PlayerDropped { player, turn } => {
                    self.events.push_back(Event::PlayerDropped { player, turn });
                }
                Notice::DelayChange { delay, from_turn } => {
                    if r.delay.change(from_turn, delay) {
                        self.stats.input_delay = delay;
                        self.events
                            .push_back(Event::InputDelayChanged { delay, from_turn });
                    }
                }
                Notice::PlayerRejoined { player, turn } => {
                    self.events
                        .push_back(Event::PlayerRejoined { player, turn });
                }
            }
        }
        // Stall: from when the turn was due until its bundle arrived, not
        // counting time already counted for an earlier turn.
        let arrived = r.arrived.remove(&turn).unwrap_or(now);
        // A rejoining peer fast-forwards through turns long due: not a stall.
        if arrived > due && !r.restoring() {
            let from = due.max(r.stall_accounted);
            self.stats.stall += arrived.saturating_since(from);
            self.stats.stalled_turns += 1;
        }
        r.stall_accounted = r.stall_accounted.max(arrived);
        if r.playout.is_some() {
            let ours = bundle
                .inputs
                .iter()
                .filter(|(p, _)| *p == r.your_player)
                .count();
            let start = r.start;
            let times = r.ledger.take(ours);
            for at in times {
                self.record_latency(start, at, now);
            }
            return self.finish_turn(turn, bundle.inputs);
        }
        // Turn latency. Our chunks in this bundle are the ones we sent for it
        // (if they arrived in time) plus late ones the relay said landed here;
        // if ours are missing, they are late and wait for the relay's notice.
        let keep = r.in_flight.split_off(&turn.next());
        let due_here: Vec<InFlight> = std::mem::replace(&mut r.in_flight, keep)
            .into_values()
            .flatten()
            .collect();
        let ours_in_bundle = bundle
            .inputs
            .iter()
            .filter(|(p, _)| *p == r.your_player)
            .count();
        let all_arrived = ours_in_bundle >= due_here.len();
        let mut played = Vec::new();
        for f in due_here {
            if f.own && !all_arrived {
                r.awaiting_late.entry(turn).or_default().push(f.at);
                continue;
            }
            played.push(f.at);
        }
        let start = r.start;
        for at in played {
            self.record_latency(start, at, now);
        }
        let Phase::Running(r) = &mut self.phase else {
            return false;
        };
        // A late notice comes within a few hundred turns or never (dropped);
        // forget older ones so the map stays bounded.
        let horizon = Turn(
            turn.0
                .saturating_sub(crate::turn_buffer::MAX_BUFFERED_AHEAD),
        );
        r.awaiting_late = r.awaiting_late.split_off(&horizon);
        self.finish_turn(turn, bundle.inputs)
    }

    /// Counts `turn` as executed and yields it.
    fn finish_turn(&mut self, turn: Turn, inputs: Vec<(PlayerId, Vec<u8>)>) -> bool {
        if let Phase::Running(r) = &mut self.phase {
            r.next_exec = turn.next();
        }
        self.stats.turns_executed += 1;
        self.stats.last_turn = Some(turn);
        self.events.push_back(Event::TurnReady { turn, inputs });
        true
    }
}

/// The turn an input issued at `now` is for under an input delay (not the
/// clock policy): local turn c + the delay d in force at c. The local turn
/// is the turn the clock is in, counted so that the start is turn
/// `first - d0`, so the input for turn T goes out d turns before T is due;
/// it never passes the last turn the game has taken, because the game's
/// response to TurnReady(c) goes into turn c + d, and a stalled peer stops
/// issuing inputs for ever-further turns.
fn input_target(r: &Running, now: Instant) -> i64 {
    let d0 = i64::from(r.delay.delay_at(r.first_turn));
    let ticks = i64::try_from(r.ticks(now)).unwrap_or(i64::MAX / 2);
    let clock = i64::from(r.first_turn.0) + ticks - d0;
    let consumed = r
        .consumed
        .map_or(i64::from(r.first_turn.0) - 1, |t| i64::from(t.0));
    let local = clock.min(consumed);
    let d = i64::from(
        r.delay
            .delay_at(Turn(u32::try_from(local.max(0)).unwrap_or(u32::MAX))),
    );
    local + d
}

#[cfg(test)]
mod tests;

mod forensics;
