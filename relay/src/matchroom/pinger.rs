//! Pings of a running match: each connected player is pinged every
//! `ping_interval`, and a pong that echoes a ping really sent (once) is an
//! RTT sample for the input-delay choice.

use super::Game;
use super::turns::Closing;
use crate::config::RelayConfig;
use crate::outbox::Outbox;
use lockstep::low_level::proto::ToPeer;
use lockstep::{Duration, Instant};
use sim::PlayerId;

/// Pings remembered per player (4 s at the default 250 ms interval).
const PINGS_KEPT: usize = 16;

/// Stamps of the pings sent to one player and not yet answered, the oldest
/// overwritten, so that only a pong echoing a real ping is taken as an RTT
/// sample: a forged stamp would otherwise raise every player's input delay.
#[derive(Debug, Default)]
pub(super) struct PingTable {
    sent: [Option<u64>; PINGS_KEPT],
    next: usize,
}

impl PingTable {
    /// Remembers a ping stamped `stamp_us`, forgetting the oldest if full.
    pub(super) fn record(&mut self, stamp_us: u64) {
        if let Some(s) = self.sent.get_mut(self.next) {
            *s = Some(stamp_us);
        }
        self.next = (self.next + 1) % PINGS_KEPT;
    }

    /// Whether `stamp_us` echoes a remembered ping; each ping answers once,
    /// so a replayed pong is no new sample.
    pub(super) fn answer(&mut self, stamp_us: u64) -> bool {
        match self.sent.iter_mut().find(|s| **s == Some(stamp_us)) {
            Some(s) => {
                *s = None;
                true
            }
            None => false,
        }
    }
}

impl Game {
    /// Whether pings wait for the next turn to close (under the clock
    /// policy, after the first ping at the start and while turns remain):
    /// then a ping's own due time is no deadline of the match.
    pub(super) fn pings_ride_on_turns(&self, config: &RelayConfig) -> bool {
        config.policy == crate::TurnPolicy::Clock
            && self.next_close > self.first
            && self.last.is_none_or(|l| self.next_close <= l)
    }

    /// Handles `player`'s pong; false if it echoes no ping sent to it (counted
    /// as `bad_state`), in which case nothing else happens for this message.
    pub(super) fn on_pong(
        &mut self,
        now: Instant,
        player: PlayerId,
        stamp_us: u64,
        out: &mut Outbox,
    ) -> bool {
        let Some(slot) = self.slots.get_mut(usize::from(player.0)) else {
            return false;
        };
        if !slot.pings.answer(stamp_us) {
            out.counters.bad_state += 1;
            return false;
        }
        let sent = Instant::from_micros(stamp_us);
        // After a silence (a freeze), the answer measured the backlog.
        if now < slot.rtt_hold_until {
            return true;
        }
        if sent <= now && now.saturating_since(sent) < Duration::from_secs(30) {
            self.delay
                .sample(usize::from(player.0), now.saturating_since(sent));
        }
        true
    }

    /// Pings every connected player whose ping is due.
    pub(super) fn send_pings(
        &mut self,
        now: Instant,
        config: &RelayConfig,
        out: &mut Outbox,
        closing: Closing,
    ) {
        // Under the clock policy no input delay is chosen from these
        // samples (they are figures for stats), and the turn traffic keeps
        // the link alive: one ping per four intervals, so a busy match does
        // not spend a datagram each way on every ping (bandwidth, #13).
        let every = if config.policy == crate::TurnPolicy::Clock {
            config.ping_interval.saturating_mul(4)
        } else {
            config.ping_interval
        };
        // And they leave with the next turn's bundle (only the timer step
        // at its deadline closes it, after this), in the same packet,
        // instead of a packet of their own each way.
        if self.pings_ride_on_turns(config)
            && (closing != Closing::Clock || now < self.deadline(self.next_close, config))
        {
            return;
        }
        for slot in &mut self.slots {
            if let Some(conn) = slot.conn
                && now >= slot.next_ping
            {
                slot.next_ping = now + every;
                slot.pings.record(now.as_micros());
                out.send(
                    conn,
                    &ToPeer::Ping {
                        stamp_us: now.as_micros(),
                    },
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ConnId, RelayConfig, Router};
    use lockstep::low_level::proto::ToRelay;
    use std::net::SocketAddr;

    /// A router with a started two-player match; the pings each connection got.
    fn started() -> (Router, Instant, Vec<(ConnId, u64)>) {
        started_with(RelayConfig::default())
    }

    fn started_with(config: RelayConfig) -> (Router, Instant, Vec<(ConnId, u64)>) {
        let mut r = Router::new(config);
        let now = Instant::from_millis(10);
        for c in 0..2u32 {
            let addr = SocketAddr::from(([127, 0, 0, 1], 5000 + c as u16));
            assert!(r.handle_connected(now, ConnId(c), addr));
            let join = crate::test_support::join_bytes("m", &format!("p{c}"));
            r.handle_message(now, ConnId(c), &join);
        }
        let pings = std::iter::from_fn(|| r.poll_outgoing())
            .filter_map(|(c, _, b)| match ToPeer::decode(&b) {
                Ok(ToPeer::Ping { stamp_us }) => Some((c, stamp_us)),
                _ => None,
            })
            .collect();
        (r, now, pings)
    }

    #[test]
    fn a_pong_echoing_no_ping_is_refused_whatever_its_stamp() {
        let (mut r, now, pings) = started();
        assert_eq!(pings.len(), 2, "{pings:?}");
        let pong = |s| ToRelay::Pong { stamp_us: s }.to_bytes();
        // u64::MAX was the "no ping" mark of the old table: echoing it must
        // not pass for an answer.
        for stamp in [u64::MAX, 0, 12_345] {
            let before = r.counters().bad_state;
            r.handle_message(now, ConnId(0), &pong(stamp));
            assert_eq!(r.counters().bad_state, before + 1, "stamp {stamp}");
        }
        let (conn, stamp) = pings[0];
        let before = r.counters().bad_state;
        r.handle_message(now, conn, &pong(stamp));
        assert_eq!(r.counters().bad_state, before, "a real ping's pong");
        r.handle_message(now, conn, &pong(stamp));
        assert_eq!(r.counters().bad_state, before + 1, "answered twice");
    }

    /// Pings to connection 0 in the first 4 s of a match, a millisecond
    /// step at a time, everything else (bundles) drained.
    fn pings_in_4_s(policy: crate::TurnPolicy) -> usize {
        let (mut r, start, pings) = started_with(RelayConfig {
            policy,
            ..RelayConfig::default()
        });
        let mut n = pings.iter().filter(|(c, _)| *c == ConnId(0)).count();
        for ms in 1..=4000 {
            r.handle_timeout(start + Duration::from_millis(ms));
            while let Some((c, _, b)) = r.poll_outgoing() {
                if c == ConnId(0) && matches!(ToPeer::decode(&b), Ok(ToPeer::Ping { .. })) {
                    n += 1;
                }
            }
        }
        n
    }

    #[test]
    fn under_the_clock_policy_pings_go_every_four_intervals() {
        // 250 ms interval: 1 + 16 pings in 4 s under deadline, 1 + 4 under
        // clock (bandwidth: no input delay is chosen from them).
        assert_eq!(pings_in_4_s(crate::TurnPolicy::Deadline), 17);
        assert_eq!(pings_in_4_s(crate::TurnPolicy::Clock), 5);
    }

    /// Under the clock policy a ping after the first leaves in the same
    /// step as a bundle to the same player, so the transport packs both
    /// into one packet (a ping of its own was a datagram each way, a few
    /// percent of a busy relay's traffic).
    #[test]
    fn under_the_clock_policy_pings_leave_with_a_bundle() {
        let (mut r, start, _) = started();
        let mut pings = 0;
        // What one step sent to player 0: whether a ping left, and whether
        // a bundle went with it.
        let drain = |r: &mut Router, ms: u64, pings: &mut usize| {
            let (mut ping, mut bundle) = (false, false);
            while let Some((c, _, b)) = r.poll_outgoing() {
                match ToPeer::decode(&b) {
                    Ok(ToPeer::Ping { .. }) if c == ConnId(0) => ping = true,
                    Ok(ToPeer::Bundle(_)) if c == ConnId(0) => bundle = true,
                    _ => {}
                }
            }
            if ping {
                *pings += 1;
                assert!(bundle, "the ping at {ms} ms left without a bundle");
            }
        };
        for ms in 1..=4000u64 {
            let now = start + Duration::from_millis(ms);
            // Player 0 sends an input every 10 ms, each handled (and its
            // match ticked) before the step's timers, as a driver does.
            if ms % 10 == 0 {
                let input = ToRelay::Input {
                    turn: sim::Turn(u32::try_from(ms / 10).unwrap()),
                    commands: Vec::new(),
                };
                r.handle_message(now, ConnId(0), &input.to_bytes());
                drain(&mut r, ms, &mut pings);
            }
            r.handle_timeout(now);
            drain(&mut r, ms, &mut pings);
        }
        assert_eq!(pings, 4);
    }

    #[test]
    fn a_ping_answers_once() {
        let mut t = PingTable::default();
        t.record(7);
        assert!(t.answer(7));
        assert!(!t.answer(7));
    }

    #[test]
    fn an_unsent_stamp_answers_nothing_even_the_old_sentinel() {
        let mut t = PingTable::default();
        assert!(!t.answer(u64::MAX));
        assert!(!t.answer(0));
        t.record(5);
        assert!(!t.answer(u64::MAX));
    }

    #[test]
    fn the_oldest_ping_is_forgotten_when_full() {
        let mut t = PingTable::default();
        for s in 0..=PINGS_KEPT as u64 {
            t.record(s);
        }
        assert!(!t.answer(0), "overwritten by the 17th ping");
        assert!((1..=PINGS_KEPT as u64).all(|s| t.answer(s)));
    }
}
