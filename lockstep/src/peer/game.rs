//! The game half of a peer at the message level: a [`Session`] plus the
//! game's world, hash reporting, recording and the summary, for any carrier
//! of the session's messages. [`Peer`](super::Peer) puts it on the UDP
//! transport; use a [`GameSession`] directly for another carrier (a TCP
//! stream, an in-memory pipe in tests).

use super::record::{Recording, StartInfo};
use super::speculation::Speculation;
use super::{
    DesyncSummary, Fault, LatencyMs, PeerEvent, PeerRefusal, PeerSummary, SpeculationSummary,
};
use crate::event::Event;
use crate::proto::{Delivery, EndReason, decode_turn};
use crate::session::{ForensicsAnswer, Session, SessionError, SessionStats};
use crate::time::{Duration, Instant};
use sim::{MatchSetup, PlayerId, Simulation, StateHash, Turn};

/// A session playing game `S` at the message level (see
/// [`Peer`](super::Peer) for the events and the loop). Build it with
/// [`PeerBuilder::build_session`](super::PeerBuilder::build_session).
pub struct GameSession<S: Simulation> {
    pub(super) session: Session,
    pub(super) match_name: String,
    pub(super) world: Option<S>,
    pub(super) player: Option<PlayerId>,
    pub(super) fault: Option<(Turn, Fault<S>)>,
    /// The rules fingerprint this peer joined with.
    pub(super) fingerprint: StateHash,
    /// The world after each recent turn, for desync forensics.
    pub(super) history: super::forensics::History,
    pub(super) record: Option<Recording>,
    /// The latest time handed in (events carry no time of their own).
    pub(super) now: Instant,
    pub(super) started_at: Option<Instant>,
    pub(super) last: Option<(Turn, StateHash)>,
    pub(super) desyncs: Vec<DesyncSummary>,
    pub(super) dropped: Vec<(u8, u32)>,
    pub(super) completed: bool,
    pub(super) ended: Option<EndReason>,
    pub(super) error: Option<String>,
    pub(super) refused: Option<PeerRefusal>,
    /// The wall clock at one instant (`now`, Unix ms), given by the driver.
    pub(super) unix_anchor: Option<(Instant, u64)>,
    /// Snapshot turns the relay asked for, not simulated yet.
    pub(super) snapshot_wanted: Vec<Turn>,
    /// When this session sent its rejoin (`None`: it joined).
    pub(super) rejoin_sent: Option<Instant>,
    /// From the rejoin to caught up.
    pub(super) rejoin_took: Option<Duration>,
    /// The relay's rejoin secret for this slot, once given.
    pub(super) secret: Option<(PlayerId, crate::proto::RejoinSecret)>,
    /// Watching, not playing.
    pub(super) spectating: bool,
    /// The match's setup, once started: a heal without a snapshot rebuilds
    /// the world from it.
    pub(super) setup: Option<MatchSetup>,
    /// After a heal: the last turn already recorded (turns up to it run
    /// again and are not written twice).
    pub(super) recorded_through: Option<Turn>,
    /// Players joined and slots, from the relay's last lobby message
    /// before the start.
    pub(super) lobby: Option<(u8, u8)>,
    /// The speculative view, if opted in.
    pub(super) speculation: Option<Speculation<S>>,
}

impl<S: Simulation> std::fmt::Debug for GameSession<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GameSession")
            .field("match_name", &self.match_name)
            .field("player", &self.player())
            .field("last", &self.last)
            .field("record", &self.record)
            .finish_non_exhaustive()
    }
}

impl<S: Simulation> GameSession<S> {
    /// A message from the relay arrived at `now`.
    pub fn handle_message(&mut self, now: Instant, bytes: &[u8]) {
        self.now = now;
        self.session.handle_message(now, bytes);
    }

    /// The clock reached `now`: run the session's due timers.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = now;
        self.session.handle_timeout(now);
    }

    /// When the session next needs [`handle_timeout`](Self::handle_timeout).
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.session.poll_timeout()
    }

    /// The next message for the relay and how it must travel.
    pub fn poll_outgoing(&mut self) -> Option<(Delivery, Vec<u8>)> {
        self.session.poll_outgoing()
    }

    /// The session, read-only.
    pub(crate) const fn session(&self) -> &Session {
        &self.session
    }

    /// The session, for glue to a transport (feed it messages and drain its
    /// outgoing ones, as [`PeerGlue`](crate::peer_glue::PeerGlue) does).
    /// Poll events through [`poll_event`](Self::poll_event), never from the
    /// session: the world steps there.
    pub const fn session_mut(&mut self) -> &mut Session {
        &mut self.session
    }

    /// Queues the local player's commands for the next open turn.
    ///
    /// # Errors
    /// [`SessionError::Spectating`] for a spectator (it has no
    /// [`player`](Self::player)); before the match started or after it
    /// ended, or when the local queue is full.
    pub fn submit(&mut self, now: Instant, commands: &[S::Command]) -> Result<(), SessionError> {
        self.now = now;
        // Where the relay will stamp it, asked before the session sends it.
        let landing = self.session.landing_turn(now);
        self.session.submit_commands(now, commands)?;
        let player = self.player();
        if let (Some(spec), Some(player), Some(turn)) = (self.speculation.as_mut(), player, landing)
        {
            spec.handle_submit(now, player, turn, commands.to_vec());
        }
        Ok(())
    }

    /// One rendered frame at `now`; see [`Peer::handle_frame`](super::Peer::handle_frame).
    pub fn handle_frame(&mut self, now: Instant, clock: &mut dyn FnMut() -> Instant) -> bool {
        let (Some(spec), Some(world)) = (self.speculation.as_mut(), self.world.as_ref()) else {
            return false;
        };
        let (Some(next), Some(horizon)) =
            (self.session.next_turn(), self.session.landing_turn(now))
        else {
            return false;
        };
        spec.handle_frame(now, world, next, horizon, clock)
    }

    /// The world to draw: see [`Peer::speculative_world`](super::Peer::speculative_world).
    #[must_use]
    pub fn speculative_world(&self) -> Option<&S> {
        let world = self.world.as_ref()?;
        Some(self.speculation.as_ref().map_or(world, |s| s.view(world)))
    }

    /// The speculative view, if speculation is on.
    #[must_use]
    pub const fn speculation(&self) -> Option<&Speculation<S>> {
        self.speculation.as_ref()
    }

    /// The next event; a [`PeerEvent::TurnReady`] steps the world as it is
    /// polled (see [`Peer::poll_event`](super::Peer::poll_event)).
    #[must_use]
    pub fn poll_event(&mut self) -> Option<PeerEvent<S::Command>> {
        loop {
            let ev = self.session.poll_event()?;
            if let Some(ev) = self.on_event(ev) {
                return Some(ev);
            }
        }
    }

    /// The world, once the match started.
    #[must_use]
    pub const fn world(&self) -> Option<&S> {
        self.world.as_ref()
    }

    /// This peer's slot, once started; always `None` for a spectator (it
    /// has no slot: a loop that submits only `if let Some(me) = player()`
    /// is right for players and spectators alike).
    #[must_use]
    pub fn player(&self) -> Option<PlayerId> {
        if self.spectating {
            return None;
        }
        self.session.player().or(self.player)
    }

    /// Whether the session is over (match ended, refused, or left).
    #[must_use]
    pub fn is_done(&self) -> bool {
        self.session.is_ended()
    }

    /// This slot's rejoin secret, once the relay gave it (or the one a
    /// rejoining peer was built with): what a restarted
    /// peer needs for [`PeerBuilder::with_rejoin`](super::PeerBuilder::with_rejoin).
    #[must_use]
    pub const fn rejoin_secret(&self) -> Option<(PlayerId, crate::proto::RejoinSecret)> {
        self.secret
    }

    /// Whether this peer rejoined and is still fast-forwarding to the live
    /// turn, or only watches (its commands would be late or refused: an
    /// agent should not think).
    #[must_use]
    pub const fn is_catching_up(&self) -> bool {
        self.spectating || (self.rejoin_sent.is_some() && self.rejoin_took.is_none())
    }

    /// While the match has not started: how many players have joined its
    /// lobby and how many slots it has, from the relay's last lobby message
    /// (`None` before the first one, and from the start on). Show it while
    /// waiting ("1 of 2 players joined").
    #[must_use]
    pub const fn lobby(&self) -> Option<(u8, u8)> {
        match self.started_at {
            Some(_) => None,
            None => self.lobby,
        }
    }

    /// Whether this session watches the match instead of playing.
    #[must_use]
    pub const fn is_spectating(&self) -> bool {
        self.spectating
    }

    /// Anchors the wall clock: `now` is `unix_ms` ms after the Unix epoch.
    /// Nothing here reads a clock; without this a recording's start time is
    /// 0 (unknown).
    pub const fn set_unix_time(&mut self, now: Instant, unix_ms: u64) {
        self.unix_anchor = Some((now, unix_ms));
    }

    /// Leaves the match at once (the relay frees the slot without waiting
    /// for a timeout).
    pub fn leave(&mut self, now: Instant) {
        self.now = now;
        if !self.session.is_ended() {
            self.session.leave(now);
        }
    }

    /// Closes the recording, if one is open: with a trailer when the match
    /// completed, else readable up to its last turn. Done by itself when
    /// [`PeerEvent::MatchEnded`] is polled; call it when giving up early.
    pub fn close_recording(&mut self) {
        let completed = self.last.filter(|_| self.completed);
        if let Some(rec) = self.record.as_mut()
            && let Err(e) = rec.close(completed)
        {
            self.error = Some(format!("recording {}: {e}", rec.path.display()));
        }
    }

    /// Session figures (for a progress line).
    #[must_use]
    pub fn stats(&self, now: Instant) -> SessionStats {
        self.session.stats(now)
    }

    /// The run's summary so far (final at the end).
    #[must_use]
    pub fn summary(&self, now: Instant) -> PeerSummary {
        let s = self.session.stats(now);
        let elapsed = self
            .started_at
            .map_or(Duration::ZERO, |t| now.saturating_since(t));
        let secs = elapsed.as_secs_f64();
        let rate = |b: u64| if secs > 0.0 { b as f64 / secs } else { 0.0 };
        PeerSummary {
            player: self.player().map(|p| p.0),
            final_turn: self.last.map(|(t, _)| t.0),
            final_hash: self.last.map(|(_, h)| h.to_hex()),
            turns: s.turns_executed,
            stall_ms: s.stall.as_millis_f64(),
            turn_latency_ms: if s.steady_latency_samples > 0 {
                LatencyMs {
                    p50: s.steady_latency_p50.as_millis_f64(),
                    p99: s.steady_latency_p99.as_millis_f64(),
                }
            } else {
                LatencyMs {
                    p50: s.latency_p50.as_millis_f64(),
                    p99: s.latency_p99.as_millis_f64(),
                }
            },
            rtt_ms: s.rtt_p50.as_millis_f64(),
            rtt_p99_ms: s.rtt_p99.as_millis_f64(),
            floor_ms: s.rtt_p50.as_millis_f64() + s.turn_length.as_millis_f64() / 2.0,
            jitter_buffer_ms: s.jitter_buffer.as_millis_f64(),
            loss: s.link.loss,
            bytes_per_s: rate(s.bytes_sent + s.bytes_received),
            bytes_up_per_s: rate(s.bytes_sent),
            bytes_down_per_s: rate(s.bytes_received),
            input_delay: s.input_delay,
            late_inputs: s.late_inputs,
            desyncs: self.desyncs.clone(),
            dropped: self.dropped.clone(),
            completed: self.completed,
            ended: self.ended,
            error: self.error.clone(),
            refused: self.refused.clone(),
            rejoins: u32::from(self.rejoin_took.is_some()),
            rejoin_ms: self.rejoin_took.map(Duration::as_millis_f64),
            reconnects: s.reconnects,
            latency_after_reconnect_ms: (s.recovered_latency_samples > 0).then(|| LatencyMs {
                p50: s.recovered_latency_p50.as_millis_f64(),
                p99: s.recovered_latency_p99.as_millis_f64(),
            }),
            snapshots_uploaded: s.snapshots_uploaded,
            own_feedback_ms: self.speculation.as_ref().and_then(|sp| {
                sp.feedback().map(|(p50, p99)| LatencyMs {
                    p50: p50.as_millis_f64(),
                    p99: p99.as_millis_f64(),
                })
            }),
            speculation: self
                .speculation
                .as_ref()
                .map(|sp| SpeculationSummary::new(sp.stats(), s.turn_length)),
        }
    }

    /// Notes an error for the summary (the first one wins).
    pub fn note_error(&mut self, error: impl Into<String>) {
        if self.error.is_none() {
            self.error = Some(error.into());
        }
    }

    fn unix_ms(&self, now: Instant) -> u64 {
        self.unix_anchor.map_or(0, |(at, ms)| {
            if now >= at {
                ms.saturating_add(now.saturating_since(at).as_millis())
            } else {
                ms.saturating_sub(at.saturating_since(now).as_millis())
            }
        })
    }

    /// The game-facing event for a session event; `None` for one the game
    /// session handles itself (a snapshot request).
    fn on_event(&mut self, ev: Event) -> Option<PeerEvent<S::Command>> {
        let now = self.now;
        Some(match ev {
            Event::Lobby { joined, slots } => {
                self.lobby = Some((joined, slots));
                PeerEvent::Lobby { joined, slots }
            }
            Event::Started {
                your_player,
                setup,
                players,
                turn_length,
                ..
            } => {
                if let Some(refused) = self.check_fingerprint(&setup) {
                    return Some(refused);
                }
                let world = S::new(&setup);
                self.setup = Some(setup.clone());
                self.player = Some(your_player);
                self.started_at = Some(now);
                if self.rejoin_sent.is_none() && !self.spectating {
                    // A rejoined peer's recording would lack the turns it
                    // missed: the relay's recording is the match's record.
                    self.start_recording(now, &world, &setup, &players, turn_length);
                }
                self.world = Some(world);
                PeerEvent::Started {
                    player: your_player,
                    setup,
                    players,
                    turn_length,
                }
            }
            // No world: the peer left at the start (a refused fingerprint).
            Event::TurnReady { .. } if self.world.is_none() => return None,
            Event::TurnReady { turn, inputs } => self.turn_ready(turn, &inputs),
            Event::Stalled { turn, waiting_on } => PeerEvent::Stalled { turn, waiting_on },
            Event::Desync {
                turn,
                hashes,
                odd_players,
            } => {
                self.desyncs.push(DesyncSummary {
                    turn: turn.0,
                    odd_players: odd_players.iter().map(|p| p.0).collect(),
                    sections: Vec::new(),
                });
                PeerEvent::Desync {
                    turn,
                    hashes,
                    odd_players,
                }
            }
            Event::DesyncSections {
                turn,
                players,
                sections,
            } => {
                if let Some(d) = self.desyncs.iter_mut().find(|d| d.turn == turn.0) {
                    d.sections.clone_from(&sections);
                }
                PeerEvent::DesyncSections {
                    turn,
                    players,
                    sections,
                }
            }
            Event::DesyncDetails {
                turn,
                complete,
                entities,
            } => PeerEvent::DesyncDetails {
                turn,
                complete,
                entities,
            },
            Event::PlayerDropped { player, turn } => {
                self.dropped.push((player.0, turn.0));
                self.record_with(|w| w.record_drop(player, turn));
                PeerEvent::PlayerDropped { player, turn }
            }
            Event::InputDelayChanged { delay, from_turn } => {
                self.record_with(|w| w.record_delay_change(u32::from(delay), from_turn));
                PeerEvent::DelayChanged { delay, from_turn }
            }
            Event::Forensics(request) => {
                let answer = self.history.answer::<S>(&request);
                let kept = match &answer {
                    ForensicsAnswer::EntityHashes(e) => !e.is_empty(),
                    ForensicsAnswer::EntityDumps(d) => !d.is_empty(),
                };
                self.session.answer_forensics(&request, answer);
                PeerEvent::ForensicsAnswered {
                    turn: request.turn(),
                    kept,
                }
            }
            Event::LateInput { turn, landed_in } => PeerEvent::LateInput { turn, landed_in },
            Event::InputRefused { turn, submitted } => {
                if let Some(spec) = self.speculation.as_mut() {
                    // The view must not keep showing commands that will never play.
                    spec.handle_refused(&submitted);
                }
                PeerEvent::InputRefused { turn }
            }
            Event::MatchEnded { turn, reason } => {
                self.completed = reason == EndReason::Completed;
                self.ended = Some(reason);
                self.close_recording();
                PeerEvent::MatchEnded { turn, reason }
            }
            Event::Rejected { reason, detail } => {
                self.refused = Some(PeerRefusal {
                    reason,
                    detail: detail.clone(),
                });
                PeerEvent::Refused { reason, detail }
            }
            Event::RejoinSecret { secret } => {
                let player = self.player()?;
                self.secret = Some((player, secret));
                PeerEvent::RejoinSecret { player, secret }
            }
            Event::SnapshotWanted { turn } => {
                self.snapshot_wanted.push(turn);
                return None;
            }
            Event::Restored { snapshot } => return self.restored(snapshot),
            Event::CaughtUp { turn } => {
                self.rejoin_took = self.rejoin_sent.map(|t| now.saturating_since(t));
                PeerEvent::CaughtUp { turn }
            }
            Event::PlayerRejoined { player, turn } => {
                self.record_with(|w| w.record_rejoin(player, turn));
                PeerEvent::PlayerRejoined { player, turn }
            }
            Event::Healing { .. } => {
                // The diverged world goes; the setup's world stands in until
                // the snapshot (if any) replaces it.
                let recorded = self.last.map(|(t, _)| t);
                self.recorded_through = self.recorded_through.max(recorded);
                self.world = self.setup.as_ref().map(S::new);
                self.last = None;
                if let Some(spec) = self.speculation.as_mut() {
                    spec.reset();
                }
                return None;
            }
        })
    }

    /// Rebuilds the world from the relay's agreed snapshot (`None`: the
    /// setup's world). One that does not decode or whose world's hash is not
    /// the agreed one (its uploader lied: the relay cannot check the bytes)
    /// costs only time: the session reports it and keeps this peer's place,
    /// and the relay sends a replacement.
    fn restored(
        &mut self,
        snapshot: Option<(Turn, StateHash, Vec<u8>)>,
    ) -> Option<PeerEvent<S::Command>> {
        let Some((turn, hash, bytes)) = snapshot else {
            // The world is the setup's: a failed restore never replaced it.
            return Some(PeerEvent::Restored { turn: None });
        };
        match S::restore(&bytes) {
            Ok(world) if world.state_hash() == hash => {
                self.last = Some((turn, hash));
                self.world = Some(world);
                if let Some(spec) = self.speculation.as_mut() {
                    spec.reset();
                }
                Some(PeerEvent::Restored { turn: Some(turn) })
            }
            Ok(_) | Err(_) => {
                self.session.snapshot_failed();
                None
            }
        }
    }

    fn start_recording(
        &mut self,
        now: Instant,
        world: &S,
        setup: &MatchSetup,
        players: &[crate::proto::PlayerInfo],
        turn_length: Duration,
    ) {
        let start_time_unix_ms = self.unix_ms(now);
        let Some(rec) = self.record.as_mut() else {
            return;
        };
        let info = StartInfo {
            match_name: &self.match_name,
            setup,
            players,
            turn_length,
            start_time_unix_ms,
        };
        if let Err(e) = rec.start(world, &info) {
            let text = format!("recording {}: {e}", rec.path.display());
            self.note_error(text);
        }
    }

    fn record_with(
        &mut self,
        f: impl FnOnce(&mut replays::Writer) -> Result<(), replays::ReplayError>,
    ) {
        if let Some(rec) = self.record.as_mut()
            && let Err(e) = rec.write(f)
        {
            let text = format!("recording {}: {e}", rec.path.display());
            self.note_error(text);
        }
    }

    /// At the start: the join's rules fingerprint must be the one of the
    /// relay's setup (`ticks_per_turn` is the relay's to choose). If the game's
    /// fingerprint depends on the ticks and the builder assumed other ones,
    /// the peer leaves: playing on would make recordings that do not verify.
    fn check_fingerprint(&mut self, setup: &MatchSetup) -> Option<PeerEvent<S::Command>> {
        if self.rejoin_sent.is_some() || self.spectating {
            // The relay checked the fingerprint against the match's own.
            return None;
        }
        if sim::rules_fingerprint::<S>(setup.players, setup.ticks_per_turn) == self.fingerprint {
            return None;
        }
        let detail = format!(
            "the relay runs {} ticks per turn; this peer's rules fingerprint is for other ticks (PeerBuilder::with_ticks_per_turn)",
            setup.ticks_per_turn
        );
        let reason = crate::proto::RejectReason::RulesDiffer;
        self.refused = Some(PeerRefusal {
            reason,
            detail: Some(detail.clone()),
        });
        self.note_error(detail.clone());
        self.leave(self.now);
        Some(PeerEvent::Refused {
            reason,
            detail: Some(detail),
        })
    }

    /// Steps the world through `turn`, reports and records its hash.
    fn turn_ready(&mut self, turn: Turn, raw: &[(PlayerId, Vec<u8>)]) -> PeerEvent<S::Command> {
        let inputs = decode_turn::<S::Command>(raw);
        let Some(world) = self.world.as_mut() else {
            // Not reachable: the session yields turns only after the start.
            return PeerEvent::TurnReady {
                turn,
                inputs,
                hash: StateHash([0; 32]),
            };
        };
        world.step(turn, &inputs);
        if self.fault.as_ref().is_some_and(|(at, _)| *at == turn)
            && let Some((_, mut fault)) = self.fault.take()
        {
            // Once: a healed peer runs the turn again and must agree then.
            fault(world, turn);
        }
        let hash = world.state_hash();
        let sections = world.section_hashes();
        if let Some(spec) = self.speculation.as_mut() {
            // Only this player's own chunks retire own commands.
            let me = (!self.spectating).then_some(self.player).flatten();
            let ours = raw.iter().filter(|(p, _)| Some(*p) == me).count();
            spec.handle_confirmed(self.now, turn, world, &sections, ours);
        }
        self.history.record(turn, &*world);
        let keyframe = self
            .record
            .as_ref()
            .is_some_and(|r| r.keyframe_due(turn))
            .then(|| world.snapshot());
        self.last = Some((turn, hash));
        if let Some(i) = self.snapshot_wanted.iter().position(|t| *t == turn) {
            self.snapshot_wanted.swap_remove(i);
            self.session.upload_snapshot(turn, hash, &world.snapshot());
        }
        // Not reachable for a yielded turn; noted rather than fatal.
        if self.session.report_hash(turn, hash, sections).is_err() {
            self.note_error(format!("could not report hash of turn {turn}"));
        }
        let rerun = self.recorded_through.is_some_and(|r| turn <= r);
        if let Some(rec) = self.record.as_mut().filter(|_| !rerun)
            && let Err(e) = rec.turn(turn, raw, hash, keyframe.as_deref())
        {
            let text = format!("recording {}: {e}", rec.path.display());
            self.note_error(text);
        }
        PeerEvent::TurnReady { turn, inputs, hash }
    }
}
