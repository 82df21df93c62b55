//! One match on the relay: its lobby and seating, then the running game, then
//! its end. The running game's concerns live in submodules: `turns` (open
//! turns, input budgets, turn closing), `hashes` (hash judging and the
//! desync section probe), `clock` (the `clock` policy: closing by the
//! relay's clock, stamping inputs into the turn it closes next), `pinger`
//! (pings and RTT samples), `seats` (player
//! ids and sets of them) and `end` (end of match and shutdown).

mod clock;
mod end;
mod forensics;
mod handback;
mod hashes;
mod heal;
mod held_slots;
mod pinger;
mod resumed;
mod seats;
mod snapshots;
mod spectators;
mod turns;

use crate::config::RelayConfig;
use crate::delay::DelayController;
use crate::desync::HashBook;
use crate::event::{DropReason, MatchId, MatchInfo, RouterEvent, TokenBinding};
use crate::outbox::Outbox;
use hashes::Probe;
use lockstep::low_level::proto::RejectReason;
use lockstep::low_level::proto::{EndReason, Join, PlayerInfo, Start, ToPeer, ToRelay};
use lockstep::low_level::transport::ConnId;
use lockstep::{Duration, Instant};
use pinger::PingTable;
use seats::Seat;
use sim::{MatchSetup, PlayerId, StateHash, Turn};
use std::collections::{BTreeMap, VecDeque};
use turns::{Closing, OpenTurn};

/// How long after a silence RTT samples are not taken (the transport's
/// smoothed RTT needs about this long to forget the backlog).
const RTT_HOLD: Duration = Duration::from_secs(2);

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
    pings: PingTable,
    /// RTT samples taken before this are not link RTT: the player had been
    /// silent (frozen, or its path backlogged) and its answers queued.
    rtt_hold_until: Instant,
    /// `clock` policy: the sequence number of the player's latest input.
    last_seq: Option<Turn>,
    /// Since when the slot is held for a rejoin (its player dropped).
    held_since: Option<Instant>,
    /// Its player came back and is catching up (not live yet).
    rejoining: bool,
    /// When its connection took the slot by a rejoin: a second rejoin
    /// soon after is the loser of a race between two processes.
    rejoined_at: Option<Instant>,
    /// The turn its player came back at: hashes are expected from there.
    back_from: Option<Turn>,
    /// A `PlayerRejoined` notice goes into the next bundle.
    rejoin_pending: bool,
    /// The turns its player was healed at (`--on-desync heal`), the
    /// recent ones only: bounded by `RelayConfig::heal_limit`.
    heals: VecDeque<Turn>,
}

impl Slot {
    /// A slot played by `conn` (`None`: held, its player away) from `now`.
    fn new(conn: Option<ConnId>, now: Instant) -> Self {
        Self {
            conn,
            dropped_at: None,
            drop_pending: None,
            last_heard: now,
            next_ping: now,
            pings: PingTable::default(),
            rtt_hold_until: now,
            last_seq: None,
            held_since: None,
            rejoining: false,
            rejoined_at: None,
            back_from: None,
            rejoin_pending: false,
            heals: VecDeque::new(),
        }
    }

    /// A message from the player at `now`. After a silence much longer than
    /// its messages' usual spacing (a hash every turn, a pong every ping),
    /// the RTT samples of the next 2 s measure the backlog, not the link:
    /// a pong queued behind a freeze would otherwise read as seconds of RTT.
    fn heard(&mut self, now: Instant, config: &RelayConfig) {
        let gap = config
            .ping_interval
            .max(config.turn_length)
            .saturating_mul(2);
        if now.saturating_since(self.last_heard) > gap {
            self.rtt_hold_until = now + RTT_HOLD;
        }
        self.last_heard = now;
    }

    /// Still expected to send inputs.
    const fn live(&self) -> bool {
        self.conn.is_some() && self.drop_pending.is_none() && self.dropped_at.is_none()
    }
}

/// A running match.
#[derive(Debug)]
struct Game {
    /// When turn `clock_turn` opened: the turn clock counts from here.
    start: Instant,
    /// The turn the clock counts from: the first turn, or where a match
    /// resumed after a relay restart picked up (its clock stood still).
    clock_turn: Turn,
    first: Turn,
    last: Option<Turn>,
    d0: u8,
    slots: Vec<Slot>,
    next_close: Turn,
    open: BTreeMap<Turn, OpenTurn>,
    delay: DelayController,
    hashes: HashBook,
    probe: Option<Probe>,
    /// The narrowing of the first desync to entities, while it runs.
    forensics: Option<Box<forensics::Forensics>>,
    desynced: bool,
    /// `--on-desync end`: end the match once the desync's report is done.
    desync_end: bool,
    /// `--on-desync heal`: the heal of the first desync, while it runs.
    healing: Option<heal::Healing>,
    /// Odd players a heal refused because they were healed too often: they
    /// are dropped on the next tick (`DropReason::TooManyHeals`).
    overhealed: Vec<PlayerId>,
    /// When a `desync_end` match ends at the latest (the report's deadline).
    desync_end_by: Option<Instant>,
    end_by: Option<Instant>,
    /// The Start every player got (`your_player` aside): a rejoin's resume.
    start_msg: Start,
    snapshots: snapshots::SnapshotStore,
    /// The player asked for a snapshot and its connection, while the relay
    /// accepts bulk data (the chunks) from it.
    upload_grant: Option<(PlayerId, ConnId)>,
    /// Receivers whose restore failed, waiting for the next agreed snapshot.
    awaiting: Vec<held_slots::Receiver>,
    spectators: Vec<spectators::Spectator>,
    /// Agreed hashes of recent turns, for the spectators' late reports.
    agreed: spectators::AgreedHashes,
    /// A match resumed after a relay restart closes no turn before its
    /// players are back or this passed (see `resumed`).
    paused_until: Option<Instant>,
    /// Turns the restart lost, handed back by the players (see `handback`).
    hand_back: handback::HandBack,
    /// The key of the tags on this match's bundles, when the relay tags
    /// them (`RejoinConfig::tag_bundles`): every closed turn is sealed with
    /// it, and a handed-back bundle is adopted only if it proves itself.
    bundle_key: Option<crate::bundle_key::BundleKey>,
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
    /// Rebuilt from a recording at start-up: counts against the limit on
    /// resumed matches for as long as it lasts.
    resumed: bool,
    /// The instance's nonce, drawn when it starts (`None` before, and for
    /// a match resumed from an earlier relay's recording).
    nonce: Option<crate::rejoin_config::MatchNonce>,
    /// Token mode: the match instance of the first token admitted, and the
    /// latest expiry of those admitted since (see [`TokenBinding`]).
    token: Option<TokenBinding>,
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
            resumed: false,
            nonce: None,
            token: None,
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

    /// The join-token instance the match is bound to, if a token was
    /// admitted to it (token mode).
    pub(crate) const fn token(&self) -> Option<TokenBinding> {
        self.token
    }

    /// Binds the match to the instance of `claims` if it is unbound, and
    /// keeps the latest expiry among the tokens admitted. The caller has
    /// checked the instance against [`Self::token`] first.
    pub(crate) fn admit_token(&mut self, claims: &lockstep::token::TokenClaims) {
        self.token = Some(match self.token {
            Some(t) => t.admitting(claims),
            None => TokenBinding::of(claims),
        });
    }

    /// The instance's nonce, once started (`None` for a match resumed from
    /// an earlier relay's recording).
    #[cfg(test)]
    pub(crate) const fn nonce(&self) -> Option<crate::rejoin_config::MatchNonce> {
        self.nonce
    }

    /// Whether it was rebuilt from a recording at start-up.
    pub(crate) const fn was_resumed(&self) -> bool {
        self.resumed
    }

    /// Whether its game is running (not a lobby).
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
        let nonce = config.rejoin.match_nonce(self.id, &self.name);
        self.nonce = Some(nonce);
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
        // At most `MAX_PLAYERS` members: the decoder refuses joins for more slots.
        let players: Vec<PlayerInfo> = Seat::all()
            .zip(names)
            .map(|(seat, name)| PlayerInfo {
                id: seat.id(),
                name,
            })
            .collect();
        // Under `clock` the relay stamps inputs into the turn it closes
        // next: no input delay, which `Start` says with `input_delay` 0.
        let d0 = if config.policy == crate::TurnPolicy::Clock {
            0
        } else {
            config.initial_delay
        };
        let turn_length_us = config.turn_length.as_micros();
        let mut assigned = Vec::new();
        let start_msg = Start {
            your_player: PlayerId(0),
            setup: setup.clone(),
            turn_length_us,
            players: players.clone(),
            input_delay: d0,
            first_turn: first,
            last_turn: last,
        };
        for (m, info) in members.iter().zip(&players) {
            let mut start = start_msg.clone();
            start.your_player = info.id;
            out.send(m.conn, &ToPeer::Start(start));
            let secret = config
                .rejoin
                .secret(self.id, self.nonce, &self.name, info.id);
            out.send(m.conn, &ToPeer::RejoinSecret(secret));
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
                nonce: Some(nonce),
                token: self.token,
            },
        });
        let slots = members
            .into_iter()
            .map(|m| Slot::new(Some(m.conn), now))
            .collect::<Vec<_>>();
        let key = config.rejoin.bundle_key(self.id, self.nonce);
        self.phase = Phase::Running(Box::new(Game::new(now, start_msg, slots, key)));
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
        slot.heard(now, config);
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
            ToRelay::Sections { turn, sections } => {
                g.on_sections(now, id, player, turn, sections, config, out);
            }
            ToRelay::EntityHashes {
                turn,
                section,
                entities,
            } => g.on_forensics(
                id,
                player,
                turn,
                &section,
                forensics::Answer::Hashes(entities),
                out,
            ),
            ToRelay::EntityDumps {
                turn,
                section,
                dumps,
            } => g.on_forensics(
                id,
                player,
                turn,
                &section,
                forensics::Answer::Dumps(dumps),
                out,
            ),
            ToRelay::Pong { stamp_us } => {
                if !g.on_pong(now, player, stamp_us, out) {
                    return;
                }
            }
            ToRelay::Report(report) => {
                out.events
                    .push_back(RouterEvent::PeerReport { id, player, report })
            }
            ToRelay::Leave => {
                g.drop_player(now, player, DropReason::Left);
            }
            ToRelay::SnapshotChunk(chunk) => g.on_snapshot_chunk(player, chunk, config, out),
            ToRelay::CaughtUp { .. } => g.caught_up(id, player, out),
            ToRelay::HandedBack(bundle) => g.on_handed_back(now, player, bundle, out),
            ToRelay::SnapshotFailed { turn } => {
                g.on_restore_failed(held_slots::Receiver::Player(player), turn, config, out);
            }
            ToRelay::Join(_)
            | ToRelay::Rejoin(_)
            | ToRelay::Spectate(_)
            | ToRelay::Reconnect(_)
            | ToRelay::Rewatch(_) => {
                out.counters.bad_state += 1;
            }
        }
        self.tick_by(now, config, out, Closing::InputsOnly);
    }

    /// Transport-measured link figures for a player (fed to the delay choice).
    pub(crate) fn link_stats(&mut self, player: PlayerId, rtt: Duration, jitter: Duration) {
        if let Phase::Running(g) = &mut self.phase
            && g.slots
                .get(usize::from(player.0))
                .is_some_and(|s| s.live() && s.last_heard >= s.rtt_hold_until)
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
            g.drop_player(now, player, DropReason::Disconnected);
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
        g.send_pings(now, config, out, closing);
        if g.paused(id, now, config, out) {
            return;
        }
        let silent: Vec<(PlayerId, Option<ConnId>)> = g
            .seats()
            .filter(|(_, s)| {
                s.live() && now.saturating_since(s.last_heard) >= config.silence_timeout
            })
            .map(|(seat, s)| (seat.id(), s.conn))
            .collect();
        for (player, conn) in silent {
            // The router forgets the connection's seat too, so nothing it
            // sends (or the transport measures) reaches the match again.
            if let Some(conn) = conn {
                out.detached.push(conn);
            }
            g.drop_player(now, player, DropReason::Timeout);
        }
        // With nobody left, no turn is closed for no one: `finished` ends
        // the match as abandoned below, and the router frees it.
        if g.slots.iter().any(|s| s.conn.is_some()) {
            g.close_turns(id, now, config, out, closing);
            g.judge_hashes(id, config, out, false);
            g.heal_tick(now, id, out);
            g.drop_overhealed(now, out);
            g.prune_probe(now, id, config, out);
            g.probe_timeout(now, id, config, out);
            g.forensics_timeout(now, id, out);
        }
        if g.desync_end {
            // `--on-desync end`: once the report is done (or its deadline
            // passed), the match ends for everyone.
            let by = *g
                .desync_end_by
                .get_or_insert(now + config.forensics_timeout);
            if now >= by {
                // Out of time: report what is in before the end.
                g.cut_probe(now, id, config, out);
                g.finish_forensics(id, out, true);
            }
            if g.probe.is_none() && g.forensics.is_none() {
                g.end(id, EndReason::Desync, out);
                self.phase = Phase::Ended;
                return;
            }
        }
        g.feed_spectators(now, config, out);
        if let Some(reason) = g.finished(now) {
            if reason == EndReason::Completed {
                // Judge whatever final reports arrived, so the replay gets them.
                while g.hashes.pending() > 0 {
                    g.judge_hashes(id, config, out, true);
                }
            }
            // The match is over: spectators get the rest at once.
            g.feed_spectators_by(now, config, out, true);
            g.end(id, reason, out);
            self.phase = Phase::Ended;
        }
    }

    /// The next instant [`MatchRoom::tick`] has work to do.
    pub(crate) fn poll_timeout(&self, config: &RelayConfig) -> Option<Instant> {
        let Phase::Running(g) = &self.phase else {
            return None;
        };
        let mut t: Option<Instant> = None;
        let mut at = |x: Instant| t = Some(t.map_or(x, |t| t.min(x)));
        if let Some(until) = g.paused_until {
            // Paused: only the deadline (a player's return ticks the match).
            at(until);
            for s in g.slots.iter().filter(|s| s.conn.is_some()) {
                at(s.next_ping);
            }
            return t;
        }
        let pings_wait = g.pings_ride_on_turns(config);
        for s in &g.slots {
            if s.conn.is_some() && !pings_wait {
                at(s.next_ping);
            }
            if s.live() {
                at(s.last_heard + config.silence_timeout);
            }
        }
        if g.last.is_none_or(|l| g.next_close <= l) {
            let waiting_sent = g.open.get(&g.next_close).is_some_and(|o| o.waiting_sent);
            if config.policy != crate::TurnPolicy::Strict || !waiting_sent {
                at(g.deadline(g.next_close, config));
            }
        }
        if let Some(e) = g.end_by {
            at(e);
        }
        if let Some(e) = g.forensics_deadline().or(g.probe_deadline()) {
            at(e);
        }
        if let Some(e) = g.desync_end_by {
            at(e);
        }
        if let Some(s) = g.spectator_timeout(config) {
            at(s);
        }
        t
    }
}
impl Game {
    /// A match that starts at `now` as `start_msg` describes it (its first
    /// turn, last turn and starting delay), its players in `slots`.
    fn new(
        now: Instant,
        start_msg: Start,
        slots: Vec<Slot>,
        bundle_key: Option<crate::bundle_key::BundleKey>,
    ) -> Self {
        let (first, last, d0) = (
            start_msg.first_turn,
            start_msg.last_turn,
            start_msg.input_delay,
        );
        Self {
            start: now,
            clock_turn: first,
            first,
            last,
            d0,
            delay: DelayController::new(slots.len(), d0),
            slots,
            next_close: first,
            open: BTreeMap::new(),
            hashes: HashBook::default(),
            probe: None,
            forensics: None,
            desynced: false,
            desync_end: false,
            healing: None,
            overhealed: Vec::new(),
            desync_end_by: None,
            end_by: None,
            start_msg,
            snapshots: snapshots::SnapshotStore::default(),
            upload_grant: None,
            awaiting: Vec::new(),
            spectators: Vec::new(),
            agreed: spectators::AgreedHashes::default(),
            paused_until: None,
            hand_back: handback::HandBack::default(),
            bundle_key,
        }
    }

    pub(super) fn drop_player(&mut self, now: Instant, player: PlayerId, reason: DropReason) {
        let Some(slot) = self.slots.get_mut(usize::from(player.0)) else {
            return;
        };
        // The connection is detached now; the drop takes effect at the next
        // turn to close, which every peer learns from that turn's bundle.
        slot.conn = None;
        slot.rejoining = false;
        // Its upload will never complete: someone else is asked next time.
        self.snapshots.uploader_gone(player);
        // A replacement snapshot must not reach a later rejoin of the slot.
        self.awaiting
            .retain(|w| *w != held_slots::Receiver::Player(player));
        // A clean leave gives the slot up, and so does a player healed too
        // often (it would only desync again); any other drop holds it.
        if !matches!(reason, DropReason::Left | DropReason::TooManyHeals) {
            slot.held_since.get_or_insert(now);
        }
        if slot.dropped_at.is_none() && slot.drop_pending.is_none() {
            slot.drop_pending = Some(reason);
        }
        self.delay.forget(usize::from(player.0));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(now: Instant) -> Slot {
        Slot::new(Some(ConnId(0)), now)
    }

    #[test]
    fn rtt_samples_are_held_after_a_silence_not_during_steady_play() {
        let config = RelayConfig::default();
        let t0 = Instant::from_millis(1000);
        let mut s = slot(t0);
        // A message every turn: no hold.
        for i in 1..=20 {
            s.heard(t0 + Duration::from_millis(100 * i), &config);
        }
        assert!(s.rtt_hold_until <= t0);
        // Three seconds of silence (a frozen peer), then its queued answers:
        // RTT samples of the next 2 s are the backlog's, not the link's.
        let thaw = t0 + Duration::from_millis(5000);
        s.heard(thaw, &config);
        assert_eq!(s.rtt_hold_until, thaw + RTT_HOLD);
        s.heard(thaw + Duration::from_millis(100), &config);
        assert_eq!(s.rtt_hold_until, thaw + RTT_HOLD);
    }
}
