//! A match rebuilt from its recording after a relay restart, and its pause:
//! it holds every seat, closes no turn until its players are back (each
//! proves its seat with a reconnect, gets the bundles it lacks and catches
//! up) or the relay's `resume_wait` has passed, then plays on with the
//! turn clock restarted where it stopped.

use super::{Game, MatchRoom, Phase, Slot};
use crate::config::RelayConfig;
use crate::delay::DelayController;
use crate::desync::HashBook;
use crate::event::{DropReason, MatchId, MatchInfo, RouterEvent};
use crate::outbox::Outbox;
use crate::resume::RecordedState;
use lockstep::Instant;
use lockstep::low_level::proto::Start;

impl MatchRoom {
    /// The match `id` described by `info`, rebuilt at the state its
    /// recording holds, waiting for its players until `now` plus the
    /// relay's `resume_wait`.
    pub(crate) fn resumed(
        now: Instant,
        id: MatchId,
        info: &MatchInfo,
        state: RecordedState,
        config: &RelayConfig,
        out: &mut Outbox,
    ) -> Self {
        let slots = info
            .players
            .iter()
            .map(|p| {
                let mut slot = Slot::new(None, now);
                slot.dropped_at = state
                    .dropped
                    .iter()
                    .find(|(d, _)| *d == p.id)
                    .map(|(_, t)| *t);
                // Held from now: its player proves the seat to come back.
                slot.held_since = Some(now);
                slot
            })
            .collect::<Vec<_>>();
        let n = slots.len();
        let start_msg = Start {
            your_player: sim::PlayerId(0),
            setup: info.setup.clone(),
            turn_length_us: info.turn_length_us,
            players: info.players.clone(),
            input_delay: info.input_delay,
            first_turn: info.first_turn,
            last_turn: info.last_turn,
        };
        let key = config.rejoin.bundle_key(id, info.nonce);
        let mut game = Game::new(now, start_msg, slots, key);
        // Where the recording stopped: the next turn, the delay in force,
        // the bundles a reconnecting player may lack.
        game.next_close = state.next_close;
        game.clock_turn = state.next_close;
        game.delay = DelayController::new(n, state.delay.unwrap_or(info.input_delay));
        for (turn, mut bytes) in state.bundles {
            // Rebuilt from the recording without a tag: tagged as the
            // crashed process tagged them, so a player that gets them now
            // can hand them back after another crash.
            if let Some(key) = &game.bundle_key {
                key.seal(&mut bytes);
            }
            game.snapshots.push_tail(turn, now, bytes, &config.rejoin);
        }
        // The bundles kept do not reach back to the first turn: a player
        // that lost its world waits for the next agreed snapshot.
        if !game.snapshots.holds_every_turn_from(info.first_turn)
            && state.next_close > info.first_turn
        {
            game.snapshots.lose_base(state.next_close);
        }
        // Turns before the resume are judged: reports of them that the old
        // process did not judge are lost with it.
        game.hashes = HashBook::judged_through(state.next_close.0.checked_sub(1).map(sim::Turn));
        game.paused_until = Some(now + config.rejoin.resume_wait);
        out.events.push_back(RouterEvent::MatchResumed {
            id,
            info: info.clone(),
            next_turn: state.next_close,
        });
        Self {
            id,
            name: info.match_name.clone(),
            slots: u8::try_from(n).unwrap_or(u8::MAX),
            game_id: info.game_id.clone(),
            game_version: info.game_version,
            rules_hash: info.rules_hash,
            phase: Phase::Running(Box::new(game)),
            resumed: true,
            nonce: info.nonce,
            token: info.token,
        }
    }
}

impl Game {
    /// A resumed match's pause: true while it still waits for its players.
    /// Ends once every seat not dropped before the restart is back and
    /// caught up and the turns the relay lost are handed back, or at the
    /// deadline, when the missing players are dropped (their slots stay
    /// held); the handed-back turns are adopted, and the turn clock
    /// restarts so that the next turn closes one turn length from now.
    pub(super) fn paused(
        &mut self,
        id: MatchId,
        now: Instant,
        config: &RelayConfig,
        out: &mut Outbox,
    ) -> bool {
        let Some(until) = self.paused_until else {
            return false;
        };
        let back = |s: &Slot| {
            s.dropped_at.is_some() || s.drop_pending.is_some() || (s.conn.is_some() && !s.rejoining)
        };
        if !self.slots.iter().all(back) || self.awaits_hand_back() {
            if now < until {
                return true;
            }
            let missing: Vec<sim::PlayerId> = super::seats::Seat::all()
                .zip(&self.slots)
                .filter(|(_, s)| !back(s))
                .map(|(seat, _)| seat.id())
                .collect();
            for player in missing {
                self.drop_player(now, player, DropReason::Timeout);
            }
        }
        self.adopt_handed_back(id, now, config, out);
        self.paused_until = None;
        // The clock restarts here: the next turn closes a turn length
        // from now, as the first turn of a match does.
        self.clock_turn = self.next_close;
        self.start = now;
        false
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use lockstep::Duration;
    use lockstep::low_level::transport::ConnId;
    use sim::Turn;

    /// A two-player match without a turn limit, tagging its bundles,
    /// resumed at 1 s on a fresh
    /// relay's clock from a recording whose next turn to close is
    /// `next_close`: the room, its config and outbox, and that instant.
    pub(in crate::matchroom) fn resumed_room(
        next_close: u32,
    ) -> (MatchRoom, RelayConfig, Outbox, Instant) {
        let mut config = RelayConfig::default();
        // Tagged, as a relay that records and keeps its key runs.
        config.rejoin.tag_bundles = true;
        let mut info = MatchInfo::two_players("m", "g");
        info.last_turn = None;
        info.nonce = Some(crate::rejoin_config::MatchNonce([1; 16]));
        let state = RecordedState {
            next_close: Turn(next_close),
            ..RecordedState::default()
        };
        let now = Instant::from_millis(1000);
        let mut out = Outbox::default();
        let room = MatchRoom::resumed(now, MatchId(1), &info, state, &config, &mut out);
        (room, config, out, now)
    }

    /// Before: the restarted clock was computed as `now` minus the turns
    /// played, which saturates at the process's clock zero, so a match
    /// resumed a few seconds after the relay started waited as long as it
    /// had run before its next turn closed.
    #[test]
    fn a_resumed_match_waits_for_its_players_then_closes_the_next_turn_a_turn_length_later() {
        // Early on the restarted process's clock; 500 turns were played.
        let (mut room, config, mut out, now) = resumed_room(500);
        // Paused: no turn is due, only the end of the wait.
        assert_eq!(
            room.poll_timeout(&config),
            Some(now + config.rejoin.resume_wait)
        );
        let back = now + Duration::from_secs(3);
        room.tick(back, &config, &mut out);
        assert!(room.is_running());
        let Phase::Running(g) = &mut room.phase else {
            panic!("not running");
        };
        assert!(g.paused_until.is_some(), "closed turns without its players");
        for (i, s) in g.slots.iter_mut().enumerate() {
            s.conn = Some(ConnId(u32::try_from(i).unwrap_or(0)));
            s.last_heard = back;
        }
        room.tick(back, &config, &mut out);
        let Phase::Running(g) = &room.phase else {
            panic!("not running");
        };
        assert!(g.paused_until.is_none());
        assert_eq!(g.next_close, Turn(500));
        assert_eq!(g.deadline(Turn(500), &config), back + config.turn_length);
        // A rejoining peer's schedule counts the turns played before.
        assert_eq!(
            g.elapsed(back + config.turn_length),
            config.turn_length.saturating_mul(501)
        );
    }

    #[test]
    fn players_who_never_return_are_dropped_at_the_end_of_the_wait() {
        let (mut room, config, mut out, now) = resumed_room(40);
        let end = now + config.rejoin.resume_wait;
        // Player 0 came back (and is heard); player 1 never does.
        if let Phase::Running(g) = &mut room.phase {
            g.slots[0].conn = Some(ConnId(0));
            g.slots[0].last_heard = end;
        }
        room.tick(end, &config, &mut out);
        let Phase::Running(g) = &room.phase else {
            panic!("not running");
        };
        assert!(g.paused_until.is_none());
        assert!(g.slots[1].drop_pending.is_some(), "player 1 is dropped");
        assert!(g.slots[1].held_since.is_some(), "its slot stays held");
        assert!(g.slots[0].drop_pending.is_none());
    }
}
