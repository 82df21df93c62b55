//! One match on the relay: its lobby, then the running game: turn closing,
//! late inputs, drops at an agreed turn, input-delay announcements, hash
//! comparison and section diagnosis.

use crate::config::RelayConfig;
use crate::delay::DelayController;
use crate::desync::{HashBook, Verdict, differing_sections};
use crate::event::{DropReason, MatchId, MatchInfo, RouterEvent};
use crate::router::{ConnId, Outbox};
use lockstep::proto::RejectReason;
use lockstep::proto::{
    Bundle, DesyncReport, EndReason, Join, MAX_BUNDLE_ENTRIES, MAX_CARRY_BYTES, MAX_INPUT_BYTES,
    MAX_INPUT_CHUNKS, MAX_INPUT_DELAY, MAX_PLAYER_TURN_BYTES, MAX_PLAYER_TURN_ENTRIES, Notice,
    PlayerInfo, Start, ToPeer, ToRelay,
};
use lockstep::{Duration, Instant};
use sim::{MAX_PLAYERS, MatchSetup, PlayerId, SectionHash, StateHash, Turn};
use std::collections::BTreeMap;

/// What may close a turn in one pass over the open turns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Closing {
    /// Complete inputs and passed deadlines: the driver's timer step.
    Clock,
    /// Only complete inputs: while the driver hands over a wake-up's
    /// messages, so that an input that arrived in the same wake-up as its
    /// turn's deadline is counted before the deadline closes the turn.
    InputsOnly,
}

/// A player waiting in the lobby.
#[derive(Debug)]
struct Member {
    conn: ConnId,
    name: String,
    turns: u32,
    /// The slot a join token granted (token mode); `None`: the next free slot.
    slot: Option<u8>,
}

/// One player slot of a running match.
#[derive(Debug)]
struct Slot {
    conn: Option<ConnId>,
    dropped_at: Option<Turn>,
    drop_pending: Option<DropReason>,
    last_heard: Instant,
    next_ping: Instant,
    /// Stamps of the pings sent and not yet answered (oldest overwritten), so
    /// that only a pong echoing a real ping is taken as an RTT sample: a
    /// forged stamp would otherwise raise every player's input delay.
    pings: [u64; PINGS_KEPT],
    next_ping_slot: usize,
}

/// Pings remembered per player (4 s at the default 250 ms interval).
const PINGS_KEPT: usize = 16;

impl Slot {
    /// Still expected to send inputs.
    const fn live(&self) -> bool {
        self.conn.is_some() && self.drop_pending.is_none() && self.dropped_at.is_none()
    }
}

/// Inputs received for a turn that has not closed yet.
#[derive(Debug, Default)]
struct OpenTurn {
    entries: Vec<(PlayerId, Vec<u8>)>,
    /// Bit `p` set: player `p` sent its own input for this turn.
    received: u8,
    /// Per player slot: entries and command bytes carried into this turn
    /// from that player's late inputs.
    carried: [(usize, usize); MAX_PLAYERS as usize],
    waiting_sent: bool,
}

impl OpenTurn {
    /// Whether `player` may add `commands` to this turn, as its own input
    /// (`late` false) or carried from a late one. Each player has its own
    /// budget, in entries and in bytes: its own input (at most
    /// `MAX_INPUT_CHUNKS` chunks, `MAX_INPUT_BYTES`, checked by the decoder)
    /// always fits, carried input fits up to the same again. So one player
    /// spamming late inputs can neither crowd out the others' input nor
    /// make the bundle larger than the transport can deliver
    /// (`MAX_BUNDLE_LEN`).
    fn has_room(&self, player: PlayerId, commands: &[Vec<u8>], late: bool) -> bool {
        let n = commands.len();
        let bytes: usize = commands.iter().map(Vec::len).sum();
        let Some(&(carried_n, carried_bytes)) = self.carried.get(usize::from(player.0)) else {
            return false;
        };
        let (mine_n, mine_bytes) = self
            .entries
            .iter()
            .filter(|(p, _)| *p == player)
            .fold((0, 0), |(n, b), (_, c)| (n + 1, b + c.len()));
        let fits_share = if late {
            carried_n + n <= MAX_INPUT_CHUNKS && carried_bytes + bytes <= MAX_CARRY_BYTES
        } else {
            n <= MAX_INPUT_CHUNKS && bytes <= MAX_INPUT_BYTES
        };
        fits_share
            && mine_n + n <= MAX_PLAYER_TURN_ENTRIES
            && mine_bytes + bytes <= MAX_PLAYER_TURN_BYTES
            && self.entries.len() + n <= MAX_BUNDLE_ENTRIES
    }

    /// Adds `player`'s commands (checked with [`OpenTurn::has_room`]).
    fn add(&mut self, player: PlayerId, commands: Vec<Vec<u8>>, late: bool) {
        if late && let Some(c) = self.carried.get_mut(usize::from(player.0)) {
            c.0 += commands.len();
            c.1 += commands.iter().map(Vec::len).sum::<usize>();
        }
        self.entries
            .extend(commands.into_iter().map(|c| (player, c)));
    }
}

/// The section comparison of the first desync.
#[derive(Debug)]
struct Probe {
    turn: Turn,
    waiting: Vec<PlayerId>,
    got: Vec<(PlayerId, Vec<SectionHash>)>,
}

/// A running match.
#[derive(Debug)]
struct Game {
    start: Instant,
    first: Turn,
    last: Option<Turn>,
    d0: u8,
    slots: Vec<Slot>,
    next_close: Turn,
    open: BTreeMap<Turn, OpenTurn>,
    delay: DelayController,
    hashes: HashBook,
    probe: Option<Probe>,
    desynced: bool,
    end_by: Option<Instant>,
}

#[derive(Debug)]
enum Phase {
    Lobby(Vec<Member>),
    Running(Box<Game>),
    Ended,
}

/// A match: lobby, then game, then over.
#[derive(Debug)]
pub(crate) struct MatchRoom {
    pub(crate) id: MatchId,
    pub(crate) name: String,
    slots: u8,
    game_id: String,
    game_version: u32,
    rules_hash: StateHash,
    phase: Phase,
}

fn bit(p: PlayerId) -> u8 {
    1u8.checked_shl(u32::from(p.0)).unwrap_or(0)
}

/// Orders a full lobby by player slot: members a token gave a slot sit in
/// it, the others fill the free slots in join order.
fn seat(members: Vec<Member>) -> Vec<Member> {
    let n = members.len();
    let mut seats: Vec<Option<Member>> = (0..n).map(|_| None).collect();
    let mut rest = Vec::new();
    for m in members {
        match m.slot.map(usize::from) {
            Some(s) if s < n && seats[s].is_none() => seats[s] = Some(m),
            _ => rest.push(m),
        }
    }
    let mut rest = rest.into_iter();
    seats
        .into_iter()
        .filter_map(|s| s.or_else(|| rest.next()))
        .collect()
}

impl MatchRoom {
    /// A new lobby shaped by its first join.
    pub(crate) fn new(id: MatchId, join: &Join) -> Self {
        Self {
            id,
            name: join.match_name.clone(),
            slots: join.slots,
            game_id: join.game_id.clone(),
            game_version: join.game_version,
            rules_hash: join.rules_hash,
            phase: Phase::Lobby(Vec::new()),
        }
    }

    /// Why `join` cannot enter this match, if it cannot.
    pub(crate) fn refuse(&self, join: &Join) -> Option<(RejectReason, Option<String>)> {
        if !matches!(self.phase, Phase::Lobby(_)) {
            return Some((RejectReason::MatchRunning, None));
        }
        if join.slots != self.slots {
            let d = format!(
                "the lobby has {} slots, the join asked for {}",
                self.slots, join.slots
            );
            return Some((RejectReason::SlotCountDiffers, Some(d)));
        }
        if join.game_id != self.game_id || join.game_version != self.game_version {
            let d = format!("the lobby plays {} v{}", self.game_id, self.game_version);
            return Some((RejectReason::GameDiffers, Some(d)));
        }
        if join.rules_hash != self.rules_hash {
            return Some((RejectReason::RulesDiffer, None));
        }
        None
    }

    /// Whether a token-granted `slot` can be taken in this lobby: below the
    /// slot count and not held by another member.
    pub(crate) fn slot_free(&self, slot: u8) -> bool {
        match &self.phase {
            Phase::Lobby(members) => {
                slot < self.slots && members.iter().all(|m| m.slot != Some(slot))
            }
            _ => false,
        }
    }

    pub(crate) const fn is_running(&self) -> bool {
        matches!(self.phase, Phase::Running(_))
    }

    pub(crate) const fn is_ended(&self) -> bool {
        matches!(self.phase, Phase::Ended)
    }

    /// Adds a lobby member; when the lobby is full, starts the match and
    /// returns every connection's slot.
    pub(crate) fn join(
        &mut self,
        now: Instant,
        conn: ConnId,
        join: &Join,
        slot: Option<u8>,
        config: &RelayConfig,
        out: &mut Outbox,
    ) -> Option<Vec<(ConnId, PlayerId)>> {
        let Phase::Lobby(members) = &mut self.phase else {
            return None;
        };
        members.push(Member {
            conn,
            name: join.name.clone(),
            turns: join.turns,
            slot,
        });
        let joined = u8::try_from(members.len()).unwrap_or(u8::MAX);
        for m in members.iter() {
            out.send(
                m.conn,
                &ToPeer::Lobby {
                    match_name: self.name.clone(),
                    joined,
                    slots: self.slots,
                },
            );
        }
        if joined < self.slots {
            return None;
        }
        let members = std::mem::take(members);
        Some(self.start(now, members, config, out))
    }

    /// Removes a lobby member; true if the lobby is now empty.
    pub(crate) fn leave_lobby(&mut self, conn: ConnId) -> bool {
        match &mut self.phase {
            Phase::Lobby(members) => {
                members.retain(|m| m.conn != conn);
                members.is_empty()
            }
            _ => false,
        }
    }

    fn start(
        &mut self,
        now: Instant,
        members: Vec<Member>,
        config: &RelayConfig,
        out: &mut Outbox,
    ) -> Vec<(ConnId, PlayerId)> {
        let members = seat(members);
        let first = Turn(0);
        let turns = members.iter().map(|m| m.turns).filter(|&t| t > 0).min();
        let last = turns.map(|t| Turn(first.0 + t - 1));
        let seed = config
            .seed
            .unwrap_or_else(|| derive_seed(&self.name, self.id));
        let setup = MatchSetup {
            seed,
            players: self.slots,
            ticks_per_turn: config.ticks_per_turn,
        };
        let mut names: Vec<String> = members.iter().map(|m| m.name.clone()).collect();
        crate::names::make_unique(&mut names);
        let players: Vec<PlayerInfo> = names
            .into_iter()
            .enumerate()
            .map(|(i, name)| PlayerInfo {
                id: PlayerId(u8::try_from(i).unwrap_or(u8::MAX)),
                name,
            })
            .collect();
        let d0 = config.initial_delay;
        let turn_length_us = config.turn_length.as_micros();
        let mut assigned = Vec::new();
        for (m, info) in members.iter().zip(&players) {
            out.send(
                m.conn,
                &ToPeer::Start(Start {
                    your_player: info.id,
                    setup: setup.clone(),
                    turn_length_us,
                    players: players.clone(),
                    input_delay: d0,
                    first_turn: first,
                    last_turn: last,
                }),
            );
            assigned.push((m.conn, info.id));
        }
        out.events.push_back(RouterEvent::MatchStarted {
            id: self.id,
            info: MatchInfo {
                match_name: self.name.clone(),
                game_id: self.game_id.clone(),
                game_version: self.game_version,
                rules_hash: self.rules_hash,
                setup,
                turn_length_us,
                players,
                input_delay: d0,
                first_turn: first,
                last_turn: last,
            },
        });
        let slots = members
            .into_iter()
            .map(|m| Slot {
                conn: Some(m.conn),
                dropped_at: None,
                drop_pending: None,
                last_heard: now,
                next_ping: now,
                pings: [u64::MAX; PINGS_KEPT],
                next_ping_slot: 0,
            })
            .collect::<Vec<_>>();
        self.phase = Phase::Running(Box::new(Game {
            start: now,
            first,
            last,
            d0,
            delay: DelayController::new(slots.len(), d0),
            slots,
            next_close: first,
            open: BTreeMap::new(),
            hashes: HashBook::default(),
            probe: None,
            desynced: false,
            end_by: None,
        }));
        self.tick(now, config, out);
        assigned
    }

    /// Handles one message from `player` (already known to be in this match).
    pub(crate) fn handle(
        &mut self,
        now: Instant,
        player: PlayerId,
        msg: ToRelay,
        config: &RelayConfig,
        out: &mut Outbox,
    ) {
        let id = self.id;
        let Phase::Running(g) = &mut self.phase else {
            return;
        };
        let Some(slot) = g.slots.get_mut(usize::from(player.0)) else {
            return;
        };
        slot.last_heard = now;
        match msg {
            ToRelay::Input { turn, commands } => g.on_input(player, turn, commands, config, out),
            ToRelay::Hash { turn, hash } => {
                if turn >= g.next_close
                    || !g
                        .hashes
                        .report(turn, player, hash, config.limits.max_hash_turns)
                {
                    out.counters.hashes_refused += 1;
                } else {
                    out.counters.hash_reports += 1;
                }
            }
            ToRelay::Sections { turn, sections } => g.on_sections(id, player, turn, sections, out),
            ToRelay::Pong { stamp_us } => {
                let sent = Instant::from_micros(stamp_us);
                let pinged = slot.pings.iter_mut().find(|p| **p == stamp_us);
                if let Some(p) = pinged {
                    // Each ping answers once: a replayed pong is no new sample.
                    *p = u64::MAX;
                } else {
                    out.counters.bad_state += 1;
                    return;
                }
                if sent <= now && now.saturating_since(sent) < Duration::from_secs(30) {
                    g.delay
                        .sample(usize::from(player.0), now.saturating_since(sent));
                }
            }
            ToRelay::Report(report) => {
                out.events
                    .push_back(RouterEvent::PeerReport { id, player, report })
            }
            ToRelay::Leave => {
                g.drop_player(player, DropReason::Left);
            }
            ToRelay::Join(_) => out.counters.bad_state += 1,
        }
        self.tick_by(now, config, out, Closing::InputsOnly);
    }

    /// Transport-measured link figures for a player (fed to the delay choice).
    pub(crate) fn link_stats(&mut self, player: PlayerId, rtt: Duration, jitter: Duration) {
        if let Phase::Running(g) = &mut self.phase
            && g.slots.get(usize::from(player.0)).is_some_and(Slot::live)
        {
            g.delay
                .sample(usize::from(player.0), rtt + jitter.saturating_mul(2));
        }
    }

    /// The player's connection went away.
    pub(crate) fn disconnected(
        &mut self,
        now: Instant,
        player: PlayerId,
        config: &RelayConfig,
        out: &mut Outbox,
    ) {
        if let Phase::Running(g) = &mut self.phase {
            g.drop_player(player, DropReason::Disconnected);
        }
        self.tick(now, config, out);
    }

    /// Runs timers and closes every turn that can close.
    pub(crate) fn tick(&mut self, now: Instant, config: &RelayConfig, out: &mut Outbox) {
        self.tick_by(now, config, out, Closing::Clock);
    }

    /// [`MatchRoom::tick`], closing turns by their deadline only if `closing` says so.
    fn tick_by(&mut self, now: Instant, config: &RelayConfig, out: &mut Outbox, closing: Closing) {
        let id = self.id;
        let Phase::Running(g) = &mut self.phase else {
            return;
        };
        for slot in &mut g.slots {
            if let Some(conn) = slot.conn
                && now >= slot.next_ping
            {
                slot.next_ping = now + config.ping_interval;
                slot.pings[slot.next_ping_slot % PINGS_KEPT] = now.as_micros();
                slot.next_ping_slot = (slot.next_ping_slot + 1) % PINGS_KEPT;
                out.send(
                    conn,
                    &ToPeer::Ping {
                        stamp_us: now.as_micros(),
                    },
                );
            }
        }
        for p in 0..g.slots.len() {
            let slot = &g.slots[p];
            if slot.live() && now.saturating_since(slot.last_heard) >= config.silence_timeout {
                // The router forgets the connection's seat too, so nothing it
                // sends (or the transport measures) reaches the match again.
                if let Some(conn) = slot.conn {
                    out.detached.push(conn);
                }
                g.drop_player(
                    PlayerId(u8::try_from(p).unwrap_or(u8::MAX)),
                    DropReason::Timeout,
                );
            }
        }
        // With nobody left, no turn is closed for no one: `finished` ends
        // the match as abandoned below, and the router frees it.
        if g.slots.iter().any(|s| s.conn.is_some()) {
            g.close_turns(id, now, config, out, closing);
            g.judge_hashes(id, config, out, false);
            g.prune_probe(id, out);
        }
        if let Some(reason) = g.finished(now) {
            if reason == EndReason::Completed {
                // Judge whatever final reports arrived, so the replay gets them.
                while g.hashes.pending() > 0 {
                    g.judge_hashes(id, config, out, true);
                }
            }
            g.end(id, reason, out);
            self.phase = Phase::Ended;
        }
    }

    /// Ends the match at once because the relay is shutting down: a lobby's
    /// members are refused; a running match's players get `MatchEnd` at the
    /// last closed turn (`None` if none closed) with reason `Shutdown`, and
    /// a `MatchEnded` event lets the recorder finalise the replay.
    pub(crate) fn shut_down(&mut self, config: &RelayConfig, out: &mut Outbox) {
        let id = self.id;
        match &mut self.phase {
            Phase::Lobby(members) => {
                for m in members.iter() {
                    out.send(
                        m.conn,
                        &ToPeer::Rejected {
                            reason: RejectReason::ShuttingDown,
                            detail: None,
                        },
                    );
                }
            }
            Phase::Running(g) => {
                // Judge the reports already in, so the replay's trailer carries
                // the latest agreed hash.
                g.judge_hashes(id, config, out, false);
                g.end(id, EndReason::Shutdown, out);
            }
            Phase::Ended => return,
        }
        self.phase = Phase::Ended;
    }

    /// The next instant [`MatchRoom::tick`] has work to do.
    pub(crate) fn poll_timeout(&self, config: &RelayConfig) -> Option<Instant> {
        let Phase::Running(g) = &self.phase else {
            return None;
        };
        let mut t: Option<Instant> = None;
        let mut at = |x: Instant| t = Some(t.map_or(x, |t| t.min(x)));
        for s in &g.slots {
            if s.conn.is_some() {
                at(s.next_ping);
            }
            if s.live() {
                at(s.last_heard + config.silence_timeout);
            }
        }
        if g.last.is_none_or(|l| g.next_close <= l) {
            let waiting_sent = g.open.get(&g.next_close).is_some_and(|o| o.waiting_sent);
            if config.policy == crate::TurnPolicy::Deadline || !waiting_sent {
                at(g.deadline(g.next_close, config));
            }
        }
        if let Some(e) = g.end_by {
            at(e);
        }
        t
    }
}

impl Game {
    /// A little before turn `t` is due at the peers (they use the same
    /// schedule from the moment the Start arrived); under `deadline` it closes then.
    fn deadline(&self, t: Turn, config: &RelayConfig) -> Instant {
        let n = u64::from(t.0.saturating_sub(self.first.0)) + u64::from(self.d0);
        let quarter = Duration::from_micros(config.turn_length.as_micros() / 4);
        let lead = config.deadline_lead.min(quarter);
        (self.start + config.turn_length.saturating_mul(n)) - lead
    }

    fn on_input(
        &mut self,
        player: PlayerId,
        turn: Turn,
        commands: Vec<Vec<u8>>,
        config: &RelayConfig,
        out: &mut Outbox,
    ) {
        let Some(slot) = self.slots.get(usize::from(player.0)) else {
            return;
        };
        if !slot.live() {
            out.counters.inputs_refused += 1;
            return;
        }
        if self.last.is_some_and(|l| turn > l) {
            out.counters.inputs_refused += 1;
            return;
        }
        if turn < self.next_close {
            out.counters.inputs_late += 1;
            let landed_in = self.next_close;
            if commands.is_empty() || self.last.is_some_and(|l| landed_in > l) {
                // Nothing to carry (or nowhere to put it): no effect on the game.
                return;
            }
            let open = self.open.entry(landed_in).or_default();
            if !open.has_room(player, &commands, true) {
                out.counters.inputs_over_budget += 1;
                if let Some(conn) = slot.conn {
                    out.send(conn, &ToPeer::InputRefused { turn });
                }
                return;
            }
            open.add(player, commands, true);
            if let Some(conn) = slot.conn {
                out.send(conn, &ToPeer::LateInput { turn, landed_in });
            }
            return;
        }
        if turn.0 - self.next_close.0 > config.limits.max_turns_ahead {
            out.counters.inputs_refused += 1;
            return;
        }
        let open = self.open.entry(turn).or_default();
        if open.received & bit(player) != 0 {
            out.counters.inputs_duplicate += 1;
            return;
        }
        // The player's input for this turn is in, even if refused below:
        // the turn must not wait for an input it will never get.
        open.received |= bit(player);
        if !open.has_room(player, &commands, false) {
            out.counters.inputs_over_budget += 1;
            if let Some(conn) = slot.conn {
                out.send(conn, &ToPeer::InputRefused { turn });
            }
            return;
        }
        open.add(player, commands, false);
        out.counters.inputs += 1;
    }

    fn drop_player(&mut self, player: PlayerId, reason: DropReason) {
        let Some(slot) = self.slots.get_mut(usize::from(player.0)) else {
            return;
        };
        // The connection is detached now; the drop takes effect at the next
        // turn to close, which every peer learns from that turn's bundle.
        slot.conn = None;
        if slot.dropped_at.is_none() && slot.drop_pending.is_none() {
            slot.drop_pending = Some(reason);
        }
        self.delay.forget(usize::from(player.0));
    }

    /// The earliest instant turn `t` may close, even with every input in:
    /// `max_turns_ahead` turns before its deadline. Inputs are accepted that
    /// far ahead, so honest play never waits on it; it bounds the work of one
    /// step by the clock, whatever the players send or fail to send.
    fn earliest_close(&self, t: Turn, config: &RelayConfig) -> Instant {
        let ahead = config
            .turn_length
            .saturating_mul(u64::from(config.limits.max_turns_ahead));
        self.deadline(t, config) - ahead
    }

    fn close_turns(
        &mut self,
        id: MatchId,
        now: Instant,
        config: &RelayConfig,
        out: &mut Outbox,
        closing: Closing,
    ) {
        while self.last.is_none_or(|l| self.next_close <= l) {
            let turn = self.next_close;
            if now < self.earliest_close(turn, config) {
                return;
            }
            let deadline = self.deadline(turn, config);
            let received = self.open.get(&turn).map_or(0, |o| o.received);
            let missing: Vec<PlayerId> = (0..self.slots.len())
                .filter_map(|p| {
                    let pid = PlayerId(u8::try_from(p).ok()?);
                    (self.slots[p].live() && received & bit(pid) == 0).then_some(pid)
                })
                .collect();
            let passed = closing == Closing::Clock && now >= deadline;
            if !config.policy.should_close(missing.is_empty(), passed) {
                if passed {
                    let open = self.open.entry(turn).or_default();
                    if !open.waiting_sent {
                        open.waiting_sent = true;
                        out.counters.turns_waiting += 1;
                        self.broadcast(
                            out,
                            &ToPeer::Waiting {
                                turn,
                                players: missing,
                            },
                        );
                    }
                }
                return;
            }
            if passed && !missing.is_empty() {
                out.counters.turns_closed_by_deadline += 1;
            }
            self.close(id, turn, now, missing, config, out);
        }
    }

    fn close(
        &mut self,
        id: MatchId,
        turn: Turn,
        now: Instant,
        missing: Vec<PlayerId>,
        config: &RelayConfig,
        out: &mut Outbox,
    ) {
        let mut notices = Vec::new();
        for (p, slot) in self.slots.iter_mut().enumerate() {
            if let Some(reason) = slot.drop_pending.take() {
                slot.dropped_at = Some(turn);
                let player = PlayerId(u8::try_from(p).unwrap_or(u8::MAX));
                notices.push(Notice::PlayerDropped { player, turn });
                out.counters.drops += 1;
                out.events.push_back(RouterEvent::Dropped {
                    id,
                    player,
                    turn,
                    reason,
                });
            }
        }
        if config.adaptive_delay
            && let Some(delay) = self.delay.decide(now, config)
        {
            let from_turn = turn.next();
            notices.push(Notice::DelayChange { delay, from_turn });
            out.counters.delay_changes += 1;
            out.events.push_back(RouterEvent::DelayChanged {
                id,
                delay,
                from_turn,
            });
        }
        let mut inputs = self
            .open
            .remove(&turn)
            .map(|o| o.entries)
            .unwrap_or_default();
        let slots = &self.slots;
        inputs.retain(|(p, _)| {
            slots
                .get(usize::from(p.0))
                .is_some_and(|s| s.dropped_at.is_none_or(|d| d > turn))
        });
        // Stable: keeps each player's chunks in arrival order.
        inputs.sort_by_key(|(p, _)| *p);
        let bundle = ToPeer::Bundle(Bundle {
            turn,
            inputs: inputs.clone(),
            notices,
        });
        self.broadcast(out, &bundle);
        out.counters.turns_closed += 1;
        out.events.push_back(RouterEvent::TurnClosed {
            id,
            turn,
            inputs,
            missing,
        });
        self.next_close = turn.next();
        if self.last == Some(turn) {
            self.end_by = Some(now + self.end_wait(now, config));
        }
    }

    fn broadcast(&self, out: &mut Outbox, msg: &ToPeer) {
        let bytes = msg.to_bytes();
        for s in &self.slots {
            if let Some(conn) = s.conn {
                out.push(conn, msg.delivery(), bytes.clone());
            }
        }
    }

    /// Players expected to report `hash(turn)`: present at that turn and still connected.
    fn expected(&self, turn: Turn) -> Vec<PlayerId> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.conn.is_some() && s.dropped_at.is_none_or(|d| d > turn))
            .filter_map(|(p, _)| u8::try_from(p).ok().map(PlayerId))
            .collect()
    }

    fn judge_hashes(&mut self, id: MatchId, config: &RelayConfig, out: &mut Outbox, force: bool) {
        let force = force || self.hashes.pending() >= config.limits.max_hash_turns;
        let verdicts = {
            let mut book = std::mem::take(&mut self.hashes);
            let v = book.judge_ready(|t: Turn| self.expected(t), force);
            self.hashes = book;
            v
        };
        for (turn, verdict) in verdicts {
            match verdict {
                Verdict::Agreed(hash) => {
                    out.events
                        .push_back(RouterEvent::HashAgreed { id, turn, hash });
                }
                Verdict::Desync {
                    hashes,
                    odd,
                    majority_member,
                } => {
                    out.counters.desynced_turns += 1;
                    // Every disputed turn is reported (the recorder keeps a
                    // hash per turn); the announcement below only once.
                    let majority = majority_member
                        .and_then(|m| hashes.iter().find(|(p, _)| *p == m))
                        .map(|(_, h)| *h);
                    let dissent = hashes
                        .iter()
                        .filter(|(_, h)| majority != Some(*h))
                        .copied()
                        .collect();
                    out.events.push_back(RouterEvent::HashDisputed {
                        id,
                        turn,
                        majority,
                        dissent,
                    });
                    if self.desynced {
                        continue;
                    }
                    self.desynced = true;
                    self.broadcast(
                        out,
                        &ToPeer::Desync(DesyncReport {
                            turn,
                            hashes: hashes.clone(),
                            odd_players: odd.clone(),
                        }),
                    );
                    out.events.push_back(RouterEvent::Desync {
                        id,
                        turn,
                        hashes: hashes.clone(),
                        odd_players: odd.clone(),
                    });
                    // Compare the odd players with one majority member; with
                    // no majority, everyone who reported.
                    let mut ask: Vec<PlayerId> = match majority_member {
                        Some(m) => odd.iter().copied().chain([m]).collect(),
                        None => hashes.iter().map(|(p, _)| *p).collect(),
                    };
                    ask.sort();
                    for p in &ask {
                        if let Some(conn) = self.slots.get(usize::from(p.0)).and_then(|s| s.conn) {
                            out.send(conn, &ToPeer::SectionRequest { turn });
                        }
                    }
                    self.probe = Some(Probe {
                        turn,
                        waiting: ask,
                        got: Vec::new(),
                    });
                }
            }
        }
    }

    fn on_sections(
        &mut self,
        id: MatchId,
        player: PlayerId,
        turn: Turn,
        sections: Vec<SectionHash>,
        out: &mut Outbox,
    ) {
        let Some(probe) = &mut self.probe else {
            out.counters.bad_state += 1;
            return;
        };
        if probe.turn != turn || !probe.waiting.contains(&player) {
            out.counters.bad_state += 1;
            return;
        }
        probe.waiting.retain(|p| *p != player);
        probe.got.push((player, sections));
        self.finish_probe(id, out);
    }

    /// Forgets section requests to players who are gone, so a desync report
    /// still completes with the sections that did arrive.
    fn prune_probe(&mut self, id: MatchId, out: &mut Outbox) {
        let slots = &self.slots;
        if let Some(probe) = &mut self.probe {
            let before = probe.waiting.len();
            probe.waiting.retain(|p| {
                slots
                    .get(usize::from(p.0))
                    .is_some_and(|s| s.conn.is_some())
            });
            if probe.waiting.len() != before {
                self.finish_probe(id, out);
            }
        }
    }

    /// Reports the section diff once every requested peer answered.
    fn finish_probe(&mut self, id: MatchId, out: &mut Outbox) {
        let Some(probe) = &mut self.probe else {
            return;
        };
        if !probe.waiting.is_empty() {
            return;
        }
        let turn = probe.turn;
        let mut got = std::mem::take(&mut probe.got);
        got.sort_by_key(|(p, _)| *p);
        self.probe = None;
        let players: Vec<PlayerId> = got.iter().map(|(p, _)| *p).collect();
        let sections = differing_sections(&got);
        self.broadcast(
            out,
            &ToPeer::SectionDiff {
                turn,
                players: players.clone(),
                sections: sections.clone(),
            },
        );
        out.events.push_back(RouterEvent::DesyncSections {
            id,
            turn,
            players,
            sections,
        });
    }

    /// Tells every connected player that the match ended after the last
    /// closed turn (`None`: no turn closed, nothing left to simulate) and
    /// emits the `MatchEnded` event.
    fn end(&self, id: MatchId, reason: EndReason, out: &mut Outbox) {
        let turn = self.next_close.0.checked_sub(1).map(Turn);
        self.broadcast(out, &ToPeer::MatchEnd { turn, reason });
        out.events
            .push_back(RouterEvent::MatchEnded { id, turn, reason });
    }

    /// After the last turn closed at `now`, how long to wait for the final
    /// hashes: until that turn is due at the peers (the schedule, or the
    /// current input delay in turn lengths when turns close early, whichever
    /// is longer), plus the slowest player's RTT for the hash to come back,
    /// plus `end_grace` as a margin. A fixed wait cut matches with a long
    /// delay short before their last turns ran. Bounded by the longest
    /// delay peers accept, the silence timeout and the margin.
    fn end_wait(&self, now: Instant, config: &RelayConfig) -> Duration {
        let last = self.last.unwrap_or(self.next_close);
        let n = u64::from(last.0.saturating_sub(self.first.0)) + u64::from(self.d0);
        let schedule = (self.start + config.turn_length.saturating_mul(n)).saturating_since(now);
        let delay = config
            .turn_length
            .saturating_mul(u64::from(self.delay.current()));
        let rtt = self
            .delay
            .high_rtt()
            .unwrap_or(Duration::ZERO)
            .min(config.silence_timeout);
        let cap = config
            .turn_length
            .saturating_mul(u64::from(MAX_INPUT_DELAY))
            + config.silence_timeout
            + config.end_grace;
        (schedule.max(delay) + rtt + config.end_grace).min(cap)
    }

    /// Whether the match is over, and why.
    fn finished(&self, now: Instant) -> Option<EndReason> {
        if self.slots.iter().all(|s| s.conn.is_none()) {
            return Some(EndReason::Abandoned);
        }
        let last = self.last?;
        if self.next_close <= last {
            return None;
        }
        let all_hashed = self.hashes_judged_through(last);
        if all_hashed || self.end_by.is_some_and(|e| now >= e) {
            Some(EndReason::Completed)
        } else {
            None
        }
    }

    fn hashes_judged_through(&self, turn: Turn) -> bool {
        self.hashes.judged_through().is_some_and(|j| j >= turn)
    }
}

/// A match seed derived from its name and number, when the relay has no fixed seed.
fn derive_seed(name: &str, id: MatchId) -> u64 {
    // FNV-1a: stable across builds and platforms.
    let mut h = sim::hash::Fnv1a64::new();
    h.update(name.as_bytes());
    h.update(&id.0.to_le_bytes());
    h.finish()
}
