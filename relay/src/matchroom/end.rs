//! The end of a match: completion, abandonment and relay shutdown, and how
//! long to wait for the final hashes.

use super::{Game, MatchRoom, Phase};
use crate::config::RelayConfig;
use crate::event::{MatchId, RouterEvent};
use crate::outbox::Outbox;
use lockstep::low_level::proto::RejectReason;
use lockstep::low_level::proto::{EndReason, MAX_INPUT_DELAY, ToPeer};
use lockstep::{Duration, Instant};
use sim::Turn;

impl MatchRoom {
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
}

impl Game {
    /// Tells every connected player that the match ended after the last
    /// closed turn (`None`: no turn closed, nothing left to simulate) and
    /// emits the `MatchEnded` event.
    pub(super) fn end(&self, id: MatchId, reason: EndReason, out: &mut Outbox) {
        let turn = self.next_close.0.checked_sub(1).map(Turn);
        self.broadcast(out, &ToPeer::MatchEnd { turn, reason });
        for s in &self.spectators {
            out.send(s.conn, &ToPeer::MatchEnd { turn, reason });
        }
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
    pub(super) fn end_wait(&self, now: Instant, config: &RelayConfig) -> Duration {
        let last = self.last.unwrap_or(self.next_close);
        let n = u64::from(last.0.saturating_sub(self.clock_turn.0)) + u64::from(self.d0);
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
    pub(super) fn finished(&self, now: Instant) -> Option<EndReason> {
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

    pub(super) fn hashes_judged_through(&self, turn: Turn) -> bool {
        self.hashes.judged_up_to().is_some_and(|j| j >= turn)
    }
}
