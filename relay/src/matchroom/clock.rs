//! The `clock` policy: the relay is the match clock. It closes turn `T` at
//! `start + (T - first + 1) * turn_length` on its own clock, whatever has
//! arrived, and stamps every input into the turn it closes next. A command
//! therefore waits only for its own trip to the relay and the next turn
//! boundary (half a turn on average) before it is decided, and for the trip
//! back before it is played: each player's latency is its own RTT plus half
//! a turn, and nobody else's link enters into it. The peers learn the policy
//! from `input_delay` 0 in `Start` ("no input delay: the relay stamps").
//!
//! In this mode `Input::turn` is the peer's input sequence number, not a
//! turn: the relay echoes it in `InputRefused` so the peer can tell which
//! input was refused.

use super::Game;
use super::seats::Seat;
use crate::config::RelayConfig;
use crate::outbox::Outbox;
use lockstep::Instant;
use lockstep::low_level::proto::ToPeer;
use sim::{PlayerId, Turn};

/// `turns` turn lengths of `turn_length_us` each.
const fn turn_lengths(turns: u64, turn_length_us: u64) -> lockstep::Duration {
    lockstep::Duration::from_micros(turns.saturating_mul(turn_length_us))
}

impl Game {
    /// When the relay closes turn `t` under the `clock` policy: one turn
    /// length after it opened (turn `first` opens at the start).
    pub(super) fn clock_close_at(&self, t: Turn, config: &RelayConfig) -> Instant {
        let n = u64::from(t.0.saturating_sub(self.clock_turn.0)) + 1;
        self.start + config.turn_length.saturating_mul(n)
    }

    /// How long the match has run at the relay (a resumed match counts
    /// none of the relay's downtime): a rejoining peer's schedule starts
    /// from it.
    pub(super) fn elapsed(&self, now: Instant) -> lockstep::Duration {
        let before = u64::from(self.clock_turn.0.saturating_sub(self.first.0));
        now.saturating_since(self.start) + turn_lengths(before, self.start_msg.turn_length_us)
    }

    /// Stamps `player`'s input (sequence number `seq`) into the turn the
    /// relay closes next, if it fits the player's budget there; otherwise
    /// the player gets `InputRefused { turn: seq }`, as it does for an input
    /// refused because the match has no turn left or the player is not live
    /// (catching up after a rejoin): every refusal is announced, so the
    /// peer's latency ledger never waits on an input that will not come
    /// back. The sequence number only names the input: one that repeats,
    /// goes back or jumps far ahead is stamped by arrival all the same (its
    /// commands count against its sender's budget only) and counted.
    pub(super) fn on_clock_input(
        &mut self,
        player: PlayerId,
        seq: Turn,
        commands: Vec<Vec<u8>>,
        config: &RelayConfig,
        out: &mut Outbox,
    ) {
        let Some(seat) = Seat::new(player) else {
            return;
        };
        let Some(slot) = self.slots.get_mut(seat.index()) else {
            return;
        };
        let refuse = |conn: Option<lockstep::low_level::transport::ConnId>, out: &mut Outbox| {
            if let Some(conn) = conn {
                out.send(conn, &ToPeer::InputRefused { turn: seq });
            }
        };
        let target = self.next_close;
        // Not live (catching up), or the match has no turn left to put it in.
        if !slot.live() || self.last.is_some_and(|l| target > l) {
            out.counters.inputs_refused += 1;
            refuse(slot.conn, out);
            return;
        }
        match slot.last_seq {
            Some(prev) if seq <= prev => out.counters.clock_seq_repeated += 1,
            Some(prev) if seq.0 - prev.0 > config.limits.max_turns_ahead => {
                out.counters.clock_seq_jumped += 1;
            }
            _ => {}
        }
        slot.last_seq = Some(slot.last_seq.map_or(seq, |p| p.max(seq)));
        if commands.is_empty() {
            return;
        }
        let conn = slot.conn;
        let cap = self.turn_cap(config);
        let open = self.open.entry(target).or_default();
        open.received.insert(seat);
        if !open.has_room(player, &commands, false, cap) {
            out.counters.inputs_over_budget += 1;
            refuse(conn, out);
            return;
        }
        open.add(player, commands, false);
        out.counters.inputs += 1;
    }
}
