//! The state of a started match at a peer: its schedule (when each turn is
//! due, under an input delay or the relay's clock), its buffered bundles,
//! our commands in flight, and the stall accounting.

use super::playout::{Ledger, Playout};
use super::snapshot_sync::{Restoring, Upload};
use crate::input_delay::DelaySchedule;
use crate::proto::{Bundle, EndReason, MAX_INPUT_BYTES, MAX_INPUT_CHUNKS, ToRelay};
use crate::time::{Duration, Instant};
use crate::turn_buffer::TurnBuffer;
use sim::{PlayerId, SectionHash, Turn};
use std::collections::{BTreeMap, VecDeque};

/// State of a started match.
#[derive(Debug)]
pub(super) struct Running {
    pub(super) your_player: PlayerId,
    pub(super) first_turn: Turn,
    pub(super) last_turn: Option<Turn>,
    pub(super) turn_length: Duration,
    /// When the Start message arrived.
    pub(super) start: Instant,
    /// The latest time passed in.
    pub(super) now: Instant,
    /// When turn `first_turn` is due (before subtracting `lead`).
    pub(super) epoch: Instant,
    /// How long the match had run at the relay when this session started
    /// (a rejoin; zero otherwise): the schedule is this far ahead of the
    /// session's clock, which cannot go below zero.
    pub(super) lead: Duration,
    pub(super) next_exec: Turn,
    /// The last turn whose TurnReady the game has polled.
    pub(super) consumed: Option<Turn>,
    pub(super) buffer: TurnBuffer,
    /// When each buffered bundle arrived (stall time ends there, not when the driver polls).
    pub(super) arrived: BTreeMap<Turn, Instant>,
    pub(super) delay: DelaySchedule,
    pub(super) next_input: Turn,
    /// Submitted chunks not yet sent, with their submit time.
    pub(super) pending: VecDeque<(Instant, Vec<u8>)>,
    /// Submit times of our chunks, by the turn they will be simulated in.
    pub(super) in_flight: BTreeMap<Turn, Vec<InFlight>>,
    /// Our chunks that were missing from their turn's bundle: the relay will
    /// say where they landed. By intended turn.
    pub(super) awaiting_late: BTreeMap<Turn, Vec<Instant>>,
    /// Section hashes of recent turns, oldest first.
    pub(super) sections: VecDeque<(Turn, Vec<SectionHash>)>,
    pub(super) last_hashed: Option<Turn>,
    pub(super) stall_accounted: Instant,
    pub(super) stall_notified: Option<Turn>,
    pub(super) waiting: Option<(Turn, Vec<PlayerId>)>,
    pub(super) next_report: Instant,
    /// The relay's `MatchEnd`: the last turn (`None`: no turn closed) and why.
    pub(super) end: Option<(Option<Turn>, EndReason)>,
    /// Under the relay's clock: the playout schedule (`None`: input delay).
    pub(super) playout: Option<Playout>,
    /// Under the relay's clock: our inputs on their way into bundles.
    pub(super) ledger: Ledger,
    /// A rejoin between the relay's resume and catching up.
    pub(super) restoring: Option<Restoring>,
    /// A snapshot upload under way.
    pub(super) upload: Upload,
    /// The last [`MAX_HAND_BACK_TURNS`](crate::proto::MAX_HAND_BACK_TURNS)
    /// bundles this player played, oldest first: what it hands back to a
    /// relay that restarted without them.
    pub(super) played: VecDeque<Bundle>,
}

impl Running {
    pub(super) fn due(&self, turn: Turn) -> Instant {
        if let Some(p) = &self.playout {
            return p.due(turn);
        }
        let n = u64::from(turn.0.saturating_sub(self.first_turn.0));
        (self.epoch + self.turn_length.saturating_mul(n)) - self.lead
    }

    /// Takes the submit times of our chunks meant for `turn` that the relay
    /// reported late or refused: those waiting as late (the turn ran
    /// without them), and those still in flight for it (the notice came
    /// before the turn ran: its bundle arrived early, without them).
    pub(super) fn take_own_chunks(&mut self, turn: Turn) -> Vec<Instant> {
        let mut times = self.awaiting_late.remove(&turn).unwrap_or_default();
        if turn >= self.next_exec
            && let Some(list) = self.in_flight.get_mut(&turn)
        {
            times.extend(list.iter().filter(|f| f.own).map(|f| f.at));
            list.retain(|f| !f.own);
            if list.is_empty() {
                self.in_flight.remove(&turn);
            }
        }
        times
    }

    /// Whether the relay's `MatchEnd` came and every turn up to its last
    /// one has been yielded.
    pub(super) fn end_reached(&self) -> bool {
        self.end
            .is_some_and(|(last, _)| last.is_none_or(|l| self.next_exec > l))
    }

    /// Whether `next_exec` is due and cannot run for want of its bundle.
    pub(super) fn stalled(&self, now: Instant) -> bool {
        // A rejoining peer fast-forwards through turns long due: not a stall.
        !self.restoring()
            && now > self.due(self.next_exec)
            && !self.buffer.has(self.next_exec)
            && self.end.is_none()
            && self.last_turn.is_none_or(|l| self.next_exec <= l)
    }

    /// Stall time from the last accounting to `now`, if the due turn is stalled.
    pub(super) fn stall_since_accounted(&self, now: Instant) -> Duration {
        if self.stalled(now) {
            now.saturating_since(self.due(self.next_exec).max(self.stall_accounted))
        } else {
            Duration::ZERO
        }
    }

    /// Whole turn lengths elapsed since the start message arrived.
    pub(super) fn ticks(&self, now: Instant) -> u64 {
        (now.saturating_since(self.start) + self.lead).as_micros()
            / self.turn_length.as_micros().max(1)
    }

    /// The next turn-length boundary after `now`: turns become due and
    /// inputs get scheduled only on these.
    pub(super) fn next_boundary(&self, now: Instant) -> Instant {
        self.start
            + (self
                .turn_length
                .saturating_mul(self.ticks(now).saturating_add(1))
                - self.lead)
    }
}

/// One of our command chunks on its way to being simulated.
#[derive(Clone, Copy, Debug)]
pub(super) struct InFlight {
    /// When the game submitted it.
    pub(super) at: Instant,
    /// Sent for this turn (false: a late chunk the relay moved here).
    pub(super) own: bool,
}

/// Under the relay's clock: every pending chunk leaves at once, in inputs
/// within the per-input bounds, each numbered by the ledger.
pub(super) fn clock_inputs(r: &mut Running) -> Vec<ToRelay> {
    let mut msgs = Vec::new();
    while !r.pending.is_empty() {
        let (mut commands, mut times, mut bytes) = (Vec::new(), VecDeque::new(), 0);
        while let Some((_, c)) = r.pending.front() {
            if commands.len() >= MAX_INPUT_CHUNKS || bytes + c.len() > MAX_INPUT_BYTES {
                break;
            }
            bytes += c.len();
            if let Some((at, c)) = r.pending.pop_front() {
                times.push_back(at);
                commands.push(c);
            }
        }
        let seq = r.ledger.record(times);
        msgs.push(ToRelay::Input {
            turn: Turn(seq),
            commands,
        });
    }
    msgs
}
