//! Open turns of a running match: accepting inputs (own, late and carried)
//! within each player's budget, and closing turns by inputs or deadline.

use super::Game;
use super::seats::{PlayerSet, Seat};
use crate::config::RelayConfig;
use crate::event::{MatchId, RouterEvent};
use crate::outbox::Outbox;
use crate::turn_policy::TurnPolicy;
use lockstep::low_level::proto::{
    Bundle, Delivery, MAX_BUNDLE_ENTRIES, MAX_CARRY_BYTES, MAX_INPUT_BYTES, MAX_INPUT_CHUNKS,
    MAX_PLAYER_TURN_BYTES, MAX_PLAYER_TURN_ENTRIES, Notice, ToPeer,
};
use lockstep::{Duration, Instant};
use sim::{MAX_PLAYERS, PlayerId, Turn};

/// What may close a turn in one pass over the open turns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Closing {
    /// Complete inputs and passed deadlines: the driver's timer step.
    Clock,
    /// Only complete inputs: while the driver hands over a wake-up's
    /// messages, so that an input that arrived in the same wake-up as its
    /// turn's deadline is counted before the deadline closes the turn.
    InputsOnly,
}

/// Inputs received for a turn that has not closed yet.
#[derive(Debug, Default)]
pub(super) struct OpenTurn {
    pub(super) entries: Vec<(PlayerId, Vec<u8>)>,
    /// The players who sent their own input for this turn.
    pub(super) received: PlayerSet,
    /// Per player slot: entries and command bytes carried into this turn
    /// from that player's late inputs.
    pub(super) carried: [(usize, usize); MAX_PLAYERS as usize],
    pub(super) waiting_sent: bool,
}

impl OpenTurn {
    /// Whether `player` may add `commands` to this turn, as its own input
    /// (`late` false) or carried from a late one. Each player has its own
    /// budget, in entries and in bytes: its own input (at most
    /// `MAX_INPUT_CHUNKS` chunks, `MAX_INPUT_BYTES`, checked by the decoder)
    /// always fits, carried input fits up to the same again. So one player
    /// spamming late inputs can neither crowd out the others' input nor
    /// make the bundle larger than the transport can deliver
    /// (`MAX_BUNDLE_LEN`). `cap` is the player's share of the relay's
    /// bundle budget (`Limits::player_turn_bytes`), at most
    /// `MAX_PLAYER_TURN_BYTES`: bundles never outrun a connection's pacing.
    pub(super) fn has_room(
        &self,
        player: PlayerId,
        commands: &[Vec<u8>],
        late: bool,
        cap: usize,
    ) -> bool {
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
            && mine_bytes + bytes <= MAX_PLAYER_TURN_BYTES.min(cap)
            && self.entries.len() + n <= MAX_BUNDLE_ENTRIES
    }

    /// Adds `player`'s commands (checked with [`OpenTurn::has_room`]).
    pub(super) fn add(&mut self, player: PlayerId, commands: Vec<Vec<u8>>, late: bool) {
        if late && let Some(c) = self.carried.get_mut(usize::from(player.0)) {
            c.0 += commands.len();
            c.1 += commands.iter().map(Vec::len).sum::<usize>();
        }
        self.entries
            .extend(commands.into_iter().map(|c| (player, c)));
    }
}

impl Game {
    /// Each player's byte budget in one turn of this match.
    pub(super) fn turn_cap(&self, config: &RelayConfig) -> usize {
        let players = u8::try_from(self.slots.len()).unwrap_or(u8::MAX);
        config.limits.player_turn_bytes(players, config.turn_length)
    }

    /// A little before turn `t` is due at the peers (they use the same
    /// schedule from the moment the Start arrived); under `deadline` it closes then.
    pub(super) fn deadline(&self, t: Turn, config: &RelayConfig) -> Instant {
        if config.policy == TurnPolicy::Clock {
            return self.clock_close_at(t, config);
        }
        let n = u64::from(t.0.saturating_sub(self.clock_turn.0)) + u64::from(self.d0);
        let quarter = Duration::from_micros(config.turn_length.as_micros() / 4);
        let lead = config.deadline_lead.min(quarter);
        (self.start + config.turn_length.saturating_mul(n)) - lead
    }

    pub(super) fn on_input(
        &mut self,
        player: PlayerId,
        turn: Turn,
        commands: Vec<Vec<u8>>,
        config: &RelayConfig,
        out: &mut Outbox,
    ) {
        if config.policy == TurnPolicy::Clock {
            return self.on_clock_input(player, turn, commands, config, out);
        }
        let Some(seat) = Seat::new(player) else {
            return;
        };
        let Some(slot) = self.slots.get(seat.index()) else {
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
        // A late input is carried into the next turn to close; an on-time
        // one goes into its own turn. Either way it must fit its player's
        // budget there.
        let late = turn < self.next_close;
        let target = if late {
            out.counters.inputs_late += 1;
            let landed_in = self.next_close;
            if commands.is_empty() || self.last.is_some_and(|l| landed_in > l) {
                // Nothing to carry (or nowhere to put it): no effect on the game.
                return;
            }
            landed_in
        } else {
            if turn.0 - self.next_close.0 > config.limits.max_turns_ahead {
                out.counters.inputs_refused += 1;
                return;
            }
            turn
        };
        let cap = self.turn_cap(config);
        let open = self.open.entry(target).or_default();
        if !late {
            if open.received.contains(seat) {
                out.counters.inputs_duplicate += 1;
                return;
            }
            // The player's input for this turn is in, even if refused below:
            // the turn must not wait for an input it will never get.
            open.received.insert(seat);
        }
        if !open.has_room(player, &commands, late, cap) {
            out.counters.inputs_over_budget += 1;
            if let Some(conn) = slot.conn {
                out.send(conn, &ToPeer::InputRefused { turn });
            }
            return;
        }
        open.add(player, commands, late);
        if late {
            if let Some(conn) = slot.conn {
                out.send(
                    conn,
                    &ToPeer::LateInput {
                        turn,
                        landed_in: target,
                    },
                );
            }
        } else {
            out.counters.inputs += 1;
        }
    }
    /// The earliest instant turn `t` may close, even with every input in:
    /// `max_turns_ahead` turns before its deadline. Inputs are accepted that
    /// far ahead, so honest play never waits on it; it bounds the work of one
    /// step by the clock, whatever the players send or fail to send.
    pub(super) fn earliest_close(&self, t: Turn, config: &RelayConfig) -> Instant {
        let ahead = config
            .turn_length
            .saturating_mul(u64::from(config.limits.max_turns_ahead));
        self.deadline(t, config) - ahead
    }

    pub(super) fn close_turns(
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
            let received = self.open.get(&turn).map(|o| o.received).unwrap_or_default();
            // Under `clock` no input is expected for any turn: none is missing.
            let expects = config.policy != TurnPolicy::Clock;
            let missing: Vec<PlayerId> = self
                .seats()
                .filter(|(seat, s)| expects && s.live() && !received.contains(*seat))
                .map(|(seat, _)| seat.id())
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

    pub(super) fn close(
        &mut self,
        id: MatchId,
        turn: Turn,
        now: Instant,
        missing: Vec<PlayerId>,
        config: &RelayConfig,
        out: &mut Outbox,
    ) {
        let mut notices = Vec::new();
        for (seat, slot) in Seat::all().zip(self.slots.iter_mut()) {
            if std::mem::take(&mut slot.rejoin_pending) {
                notices.push(Notice::PlayerRejoined {
                    player: seat.id(),
                    turn,
                });
            }
            if let Some(reason) = slot.drop_pending.take() {
                slot.dropped_at = Some(turn);
                let player = seat.id();
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
        // Under `clock` there is no input delay to adapt.
        if config.adaptive_delay
            && config.policy != TurnPolicy::Clock
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
            tag: None,
        });
        self.request_snapshot(turn, config, out);
        // Encoded and tagged once: the same bytes go to every player and
        // to the tail.
        let mut bytes = bundle.to_bytes();
        if let Some(key) = &self.bundle_key {
            key.seal(&mut bytes);
        }
        self.broadcast_bytes(out, bundle.delivery(), &bytes);
        self.snapshots.push_tail(turn, now, bytes, &config.rejoin);
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

    pub(super) fn broadcast(&self, out: &mut Outbox, msg: &ToPeer) {
        self.broadcast_bytes(out, msg.delivery(), &msg.to_bytes());
    }

    /// [`Game::broadcast`] of a message already encoded.
    fn broadcast_bytes(&self, out: &mut Outbox, delivery: Delivery, bytes: &[u8]) {
        for s in &self.slots {
            if let Some(conn) = s.conn {
                out.push(conn, delivery, bytes.to_vec());
            }
        }
    }
}
