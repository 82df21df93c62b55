//! How matches end: a long input delay still gets every final hash in, and
//! a relay shutting down ends its matches at once with the `Shutdown` reason.

use super::*;

fn hash_turns_agreed(sim: &Sim) -> Vec<u32> {
    sim.router_events
        .iter()
        .filter_map(|e| match e {
            RouterEvent::HashAgreed { turn, .. } => Some(turn.0),
            _ => None,
        })
        .collect()
}

fn end_of(sim: &Sim, i: usize) -> Option<(Option<Turn>, EndReason)> {
    sim.peers[i].events.iter().find_map(|e| match e {
        Event::MatchEnded { turn, reason } => Some((*turn, *reason)),
        _ => None,
    })
}

/// With a fixed 25-turn delay (2.5 s at 100 ms turns), turns close about
/// 2.5 s before the peers run them. The relay waits for the final hashes as
/// long as the delay and RTT need, so every peer reports every hash (the
/// harness unwraps `report_hash`) and the relay agrees on every turn.
#[test]
fn with_a_25_turn_delay_every_final_hash_reaches_the_relay() {
    let mut setup = Setup::new(2, 50, 3);
    setup.config = RelayConfig {
        adaptive_delay: false,
        initial_delay: 25,
        ..RelayConfig::default()
    };
    let mut sim = Sim::new(setup);
    sim.run(Duration::from_secs(60));
    for i in 0..2 {
        assert_eq!(assert_contiguous(&sim, i), 50);
        assert_eq!(
            end_of(&sim, i),
            Some((Some(Turn(49)), EndReason::Completed))
        );
        assert_eq!(sim.hashes(i), sim.hashes(0));
    }
    assert_eq!(hash_turns_agreed(&sim), (0..50).collect::<Vec<u32>>());
    // Agreed means every expected player's hash was in, not a forced verdict.
    assert_eq!(sim.router.counters().hash_reports, 2 * 50);
    assert_eq!(sim.router.counters().hashes_refused, 0);
    assert!(sim.router_events.iter().any(|e| matches!(
        e,
        RouterEvent::MatchEnded {
            turn: Some(Turn(49)),
            reason: EndReason::Completed,
            ..
        }
    )));
}

/// A relay shut down before any turn closed tells its players so (no last
/// turn, reason `Shutdown`); they end at once rather than waiting for a
/// first bundle that never comes.
#[test]
fn a_shutdown_before_the_first_turn_ends_every_peer_at_once() {
    let mut sim = Sim::new(Setup::new(2, 50, 5));
    // Shut down as soon as both peers started: their first inputs are still
    // on their way, so no turn has closed.
    while !sim.peers.iter().all(|p| p.session.is_running()) {
        let step = sim.now + Duration::from_millis(1);
        sim.run(Duration::from_millis(1));
        // `run` stops before the next event after its limit; nothing is skipped.
        sim.now = sim.now.max(step);
    }
    assert!(
        !sim.router_events
            .iter()
            .any(|e| matches!(e, RouterEvent::TurnClosed { .. }))
    );
    let shut_at = sim.now;
    sim.router.end_all();
    sim.run(Duration::from_secs(30));
    for i in 0..2 {
        assert!(sim.peers[i].ended && sim.peers[i].session.is_ended());
        assert!(sim.peers[i].executed.is_empty());
        assert_eq!(end_of(&sim, i), Some((None, EndReason::Shutdown)));
    }
    // Ended as soon as the message arrived: one pipe delay (at most 35 ms),
    // or a little more when the pipe keeps it in order behind a message
    // sent a few 1 ms steps earlier (the start's rejoin secret, a ping).
    assert!(sim.now.saturating_since(shut_at) <= Duration::from_millis(40));
    assert!(sim.router_events.iter().any(|e| matches!(
        e,
        RouterEvent::MatchEnded {
            turn: None,
            reason: EndReason::Shutdown,
            ..
        }
    )));
}

/// A shutdown mid-match: every turn the relay closed is played (and
/// hashed) at once, then the session ends with the `Shutdown` reason.
#[test]
fn a_shutdown_mid_match_plays_the_closed_turns_then_ends_with_shutdown() {
    let mut setup = Setup::new(2, 500, 9);
    setup.config = RelayConfig {
        adaptive_delay: false,
        initial_delay: 10,
        ..deadline_config()
    };
    let mut sim = Sim::new(setup);
    sim.run(Duration::from_secs(3));
    let shut_at = sim.now;
    let played_before = sim.peers[0].executed.len() as u32;
    sim.router.end_all();
    sim.drain();
    let last = sim
        .router_events
        .iter()
        .rev()
        .find_map(|e| match e {
            RouterEvent::MatchEnded { turn, .. } => Some(*turn),
            _ => None,
        })
        .flatten()
        .unwrap();
    // About ten closed turns were still ahead of the peers; they run as soon
    // as the end arrives (one pipe delay, at most 35 ms), not 1 s later.
    sim.run(Duration::from_millis(35));
    for i in 0..2 {
        assert!(sim.peers[i].session.is_ended(), "peer {i} still playing");
        assert_eq!(assert_contiguous(&sim, i), last.0 + 1);
        assert_eq!(end_of(&sim, i), Some((Some(last), EndReason::Shutdown)));
    }
    assert!(
        played_before + 5 < last.0 + 1,
        "{played_before} played, {} closed",
        last.0 + 1
    );
    assert!(sim.now.saturating_since(shut_at) <= Duration::from_millis(35));
}

/// The adaptive delay grows past 2 s for a player 1.2 s away each way; the
/// end wait follows the delay in force, so the last hashes still get in.
#[test]
fn after_the_delay_grew_past_2_s_every_final_hash_reaches_the_relay() {
    let mut setup = Setup::new(2, 80, 13);
    setup.config = deadline_config();
    setup.shapes[1] = vec![(
        Instant::ZERO,
        LinkShape {
            base_ms: 1_200,
            jitter_ms: 10,
        },
    )];
    let mut sim = Sim::new(setup);
    sim.run(Duration::from_secs(120));
    let delays = sim.delay_changes(0);
    assert!(delays.iter().any(|(d, _)| *d > 20), "{delays:?}");
    for i in 0..2 {
        assert_eq!(assert_contiguous(&sim, i), 80);
        assert_eq!(
            end_of(&sim, i),
            Some((Some(Turn(79)), EndReason::Completed))
        );
    }
    assert_eq!(hash_turns_agreed(&sim), (0..80).collect::<Vec<u32>>());
    assert_eq!(sim.router.counters().hash_reports, 2 * 80);
}
