//! The relay's edges, driven through the public `Router` API on a virtual
//! clock: a match whose players all left ends at once and frees its memory,
//! no step closes more turns than the clock allows, and the per-player byte
//! budget keeps every bundle deliverable.

use lockstep::proto::{Join, ToRelay};
use lockstep::{Duration, Instant};
use relay::{ConnId, RelayConfig, Router, RouterEvent};
use sim::{StateHash, Turn};
use std::net::{Ipv4Addr, SocketAddr};

fn join(match_name: &str, slots: u8, name: &str, turns: u32) -> Vec<u8> {
    ToRelay::Join(Join {
        match_name: match_name.into(),
        slots,
        game_id: "g".into(),
        game_version: 1,
        rules_hash: StateHash([0; 32]),
        name: name.into(),
        turns,
    })
    .to_bytes()
}

fn addr(c: u32) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, 20_000 + u16::try_from(c).unwrap()))
}

/// Starts a match of `players` connections `0..players` at `now`.
fn start(r: &mut Router, now: Instant, players: u8, turns: u32) {
    for c in 0..u32::from(players) {
        assert!(r.handle_connected(now, ConnId(c), addr(c)));
        r.handle_message(now, ConnId(c), &join("m", players, &format!("p{c}"), turns));
    }
    assert_eq!(r.running_count(), 1);
}

fn turns_closed(r: &mut Router) -> usize {
    std::iter::from_fn(|| r.poll_event())
        .filter(|e| matches!(e, RouterEvent::TurnClosed { .. }))
        .count()
}

/// The reproduction of the wedge: a solo match whose only player leaves.
/// Before the fix the relay closed every remaining turn in one step (all
/// inputs of "no live player" are in): 100,000 bundles and events at once,
/// or an endless loop with an unbounded match.
#[test]
fn a_match_whose_players_all_left_ends_at_once_as_abandoned() {
    for turns in [100_000, 0] {
        let mut r = Router::new(RelayConfig::default());
        let now = Instant::from_millis(10);
        start(&mut r, now, 1, turns);
        let _ = turns_closed(&mut r);
        let later = now + Duration::from_millis(350);
        r.handle_timeout(later);
        r.handle_disconnected(later, ConnId(0));
        r.handle_timeout(later + Duration::from_millis(1));
        let events: Vec<RouterEvent> = std::iter::from_fn(|| r.poll_event()).collect();
        let closed = events
            .iter()
            .filter(|e| matches!(e, RouterEvent::TurnClosed { .. }))
            .count();
        assert!(
            closed <= 1,
            "turns={turns}: {closed} turns closed for nobody"
        );
        assert!(
            events.iter().any(|e| matches!(
                e,
                RouterEvent::MatchEnded {
                    reason: lockstep::proto::EndReason::Abandoned,
                    ..
                }
            )),
            "turns={turns}: no abandoned end in {events:?}"
        );
        // The match's memory is freed and the relay takes new matches.
        assert_eq!(r.match_count(), 0);
        assert_eq!(r.poll_timeout(), None);
        r.handle_connected(later, ConnId(7), addr(7));
        r.handle_message(later, ConnId(7), &join("next", 1, "q", 5));
        assert_eq!(r.running_count(), 1);
    }
}

/// Inputs sent as far ahead as the relay accepts, then one player leaves:
/// with every live input in, a turn still closes no earlier than
/// `max_turns_ahead` turns before its deadline, so a step does bounded work.
#[test]
fn no_step_closes_more_turns_than_the_clock_allows() {
    let config = RelayConfig::default();
    let turn = config.turn_length;
    let ahead = u64::from(config.limits.max_turns_ahead);
    let mut r = Router::new(config);
    let t0 = Instant::from_millis(10);
    start(&mut r, t0, 2, 0);
    let _ = turns_closed(&mut r);
    // Player 0 sends its inputs as far ahead as the relay accepts them, then
    // leaves; player 1 sends every input up front the same way. With every
    // live input in, turns still close no earlier than `max_turns_ahead`
    // turns before their deadline.
    let mut closed = 0;
    for c in 0..2u32 {
        for t in 0..=ahead {
            let input = ToRelay::Input {
                turn: Turn(u32::try_from(t).unwrap()),
                commands: vec![],
            };
            r.handle_message(t0, ConnId(c), &input.to_bytes());
        }
    }
    r.handle_message(t0, ConnId(0), &ToRelay::Leave.to_bytes());
    r.handle_timeout(t0);
    closed += turns_closed(&mut r);
    // Three deadlines later the clock allows (at most) three more turns,
    // although player 1 (the only one left) sent every input.
    let mut now = t0;
    for _ in 0..3 {
        now += turn;
        r.handle_timeout(now);
    }
    let after = turns_closed(&mut r);
    // Turn t is due at start + (t + initial delay) turns - lead; it may close
    // `max_turns_ahead` turns before that: turns 0..=125 at once, then one
    // per turn length.
    let d0 = u64::from(RelayConfig::default().initial_delay);
    assert_eq!(closed as u64, ahead - d0 + 1, "turns closed at the start");
    assert_eq!(after, 3, "turns closed in three turn lengths");
    assert_eq!(r.running_count(), 1);
}
