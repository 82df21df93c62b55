//! Sessions and the router over the seeded in-memory pipe: ordering, delay
//! changes, closing policies, desync detection, drops.

use super::*;

#[test]
fn four_peers_play_identically_to_the_end() {
    let mut setup = Setup::new(4, 200, 7);
    setup.config = deadline_config();
    let mut sim = Sim::new(setup);
    sim.run(Duration::from_secs(60));
    for i in 0..4 {
        assert!(sim.peers[i].ended, "peer {i} did not see the match end");
        assert_eq!(assert_contiguous(&sim, i), 200);
        assert_eq!(sim.hashes(i), sim.hashes(0), "peer {i} diverged");
        assert!(sim.peers[i].executed == sim.peers[0].executed);
        assert!(matches!(
            sim.peers[i].events.last(),
            Some(Event::MatchEnded {
                turn: Some(Turn(199)),
                reason: EndReason::Completed
            })
        ));
    }
    // Every submitted command was simulated exactly once (commands issued
    // after the last schedulable turn never leave the peer).
    let submitted: u64 = sim.peers.iter().map(|p| p.submitted).sum();
    let executed = total_commands(&sim, 0);
    assert!(
        executed > 100 && executed <= submitted,
        "{executed} of {submitted}"
    );
    let agreed = sim
        .router_events
        .iter()
        .filter(|e| matches!(e, RouterEvent::HashAgreed { .. }))
        .count();
    assert_eq!(agreed, 200);
    assert!(
        !sim.router_events
            .iter()
            .any(|e| matches!(e, RouterEvent::Desync { .. }))
    );
    let s = sim.stats(0);
    assert!(s.latency_samples > 0);
    // With 15-35 ms one way and a 3-turn delay, turns are never late.
    assert_eq!(s.stall, Duration::ZERO, "{s:?}");
    // A command issued in answer to turn t runs at t + d: d turn lengths later.
    eprintln!("four peers: {s:?} delays {:?}", sim.delay_changes(0));
    assert_eq!(s.latency_p50, Duration::from_millis(200));
    assert_eq!(sim.router.counters().inputs_late, 0);
}

#[test]
fn input_delay_changes_apply_at_the_same_turn_everywhere() {
    let mut setup = Setup::new(3, 400, 11);
    // Player 1's link degrades to ~500 ms RTT at 10 s, then recovers at 20 s.
    setup.shapes[1] = vec![
        (
            Instant::ZERO,
            LinkShape {
                base_ms: 20,
                jitter_ms: 10,
            },
        ),
        (
            Instant::from_millis(10_000),
            LinkShape {
                base_ms: 240,
                jitter_ms: 20,
            },
        ),
        (
            Instant::from_millis(20_000),
            LinkShape {
                base_ms: 20,
                jitter_ms: 10,
            },
        ),
    ];
    setup.config = deadline_config();
    setup.config.shrink_hold = Duration::from_secs(3);
    let mut sim = Sim::new(setup);
    sim.run(Duration::from_secs(120));
    let changes = sim.delay_changes(0);
    eprintln!("delay changes {changes:?} stats {:?}", sim.stats(1));
    assert!(
        changes.iter().any(|&(d, _)| d >= 6),
        "delay should grow to cover ~500 ms RTT: {changes:?}"
    );
    assert!(
        changes.last().is_some_and(|&(d, _)| d <= 3),
        "delay should come back down: {changes:?}"
    );
    for i in 0..3 {
        assert_eq!(sim.delay_changes(i), changes, "peer {i} switched elsewhere");
        assert_eq!(assert_contiguous(&sim, i), 400);
        assert_eq!(sim.hashes(i), sim.hashes(0));
    }
    let router_changes: Vec<(u8, Turn)> = sim
        .router_events
        .iter()
        .filter_map(|e| match e {
            RouterEvent::DelayChanged {
                delay, from_turn, ..
            } => Some((*delay, *from_turn)),
            _ => None,
        })
        .collect();
    assert_eq!(router_changes, changes);
}

/// Virtual-time comparison of the two closing policies with one peer whose
/// messages take 500 ms each way.
fn lagging_match(policy: TurnPolicy) -> Sim {
    let mut setup = Setup::new(3, 0, 5);
    setup.config.policy = policy;
    setup.config.adaptive_delay = false;
    setup.config.silence_timeout = Duration::from_secs(60);
    setup.shapes[2] = vec![(
        Instant::ZERO,
        LinkShape {
            base_ms: 500,
            jitter_ms: 0,
        },
    )];
    let mut sim = Sim::new(setup);
    sim.run(Duration::from_secs(20));
    sim
}

#[test]
fn deadline_keeps_the_others_going_strict_stalls_everyone() {
    let deadline = lagging_match(TurnPolicy::Deadline);
    let strict = lagging_match(TurnPolicy::Strict);
    let fast_d = assert_contiguous(&deadline, 0);
    let fast_s = assert_contiguous(&strict, 0);
    let stall_d = deadline.stats(0).stall;
    let stall_s = strict.stats(0).stall;
    eprintln!(
        "deadline: {fast_d} turns, stall {stall_d}, lagger {:?}; strict: {fast_s} turns, stall {stall_s}",
        deadline.stats(2)
    );
    // 20 s of 100 ms turns minus the 0.3 s start: ~196 turns when nobody waits.
    assert!(fast_d >= 190, "deadline played {fast_d} turns");
    assert!(fast_s * 2 < fast_d, "strict {fast_s} vs deadline {fast_d}");
    // Turns closed by the deadline (a little before they are due) reach
    // the fast peers in time: they never wait.
    assert_eq!(stall_d, Duration::ZERO, "fast peer stalled under deadline");
    assert!(stall_s > Duration::from_secs(8), "strict stall {stall_s}");
    for sim in [&deadline, &strict] {
        for i in 0..3 {
            assert_contiguous(sim, i);
        }
        let n = sim.hashes(2).len();
        assert_eq!(sim.hashes(2)[..], sim.hashes(0)[..n]);
    }
    // Under deadline the laggard is told its inputs landed later; they still count.
    assert!(deadline.router.counters().turns_closed_by_deadline > 100);
    assert!(
        deadline.peers[2]
            .events
            .iter()
            .any(|e| matches!(e, Event::LateInput { turn, landed_in } if landed_in > turn))
    );
    // The laggard's commands take effect ~1 s after issue instead of 0.3-0.4 s.
    let lag = deadline.stats(2);
    assert!(
        lag.late_inputs > 20 && lag.latency_p50 > Duration::from_secs(1),
        "{lag:?}"
    );
    assert_eq!(strict.router.counters().inputs_late, 0);
    assert!(strict.peers[0].events.iter().any(|e| matches!(
        e,
        Event::Stalled { waiting_on, .. } if waiting_on == &[PlayerId(2)]
    )));
}

/// A match where peer 1 corrupts its own player's accumulator after turn 50;
/// also returns that peer's slot.
fn desync_match(peers: usize) -> (Sim, PlayerId) {
    let mut sim = Sim::new(Setup::new(peers, 120, 3));
    sim.peers[1].desync_at = Some(Turn(50));
    sim.run(Duration::from_secs(60));
    let odd = sim.peers[1]
        .events
        .iter()
        .find_map(|e| match e {
            Event::Started { your_player, .. } => Some(*your_player),
            _ => None,
        })
        .unwrap();
    (sim, odd)
}

#[test]
fn forced_desync_is_detected_at_that_turn_naming_that_peer_and_section() {
    let (sim, odd) = desync_match(3);
    let section = format!("player {}", odd.0);
    let desyncs: Vec<_> = sim
        .router_events
        .iter()
        .filter_map(|e| match e {
            RouterEvent::Desync {
                turn, odd_players, ..
            } => Some((*turn, odd_players.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(desyncs, vec![(Turn(50), vec![odd])]);
    let sections: Vec<_> = sim
        .router_events
        .iter()
        .filter_map(|e| match e {
            RouterEvent::DesyncSections {
                turn,
                players,
                sections,
                ..
            } => Some((*turn, players.clone(), sections.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(sections.len(), 1);
    assert_eq!(sections[0].0, Turn(50));
    assert!(sections[0].1.contains(&odd) && sections[0].1.len() == 2);
    assert_eq!(sections[0].2, vec![section.clone()]);
    for p in &sim.peers {
        assert!(p.events.iter().any(|e| matches!(
            e,
            Event::Desync { turn: Turn(50), odd_players, .. } if odd_players == &[odd]
        )));
        assert!(p.events.iter().any(|e| matches!(
            e,
            Event::DesyncSections { turn: Turn(50), sections, .. } if sections == std::slice::from_ref(&section)
        )));
    }
    // Hashes agree up to turn 49.
    let agreed = sim
        .router_events
        .iter()
        .filter(|e| matches!(e, RouterEvent::HashAgreed { .. }))
        .count();
    assert_eq!(agreed, 50);
}

#[test]
fn two_player_desync_says_it_cannot_tell_who() {
    let (sim, odd) = desync_match(2);
    let d = sim
        .router_events
        .iter()
        .find_map(|e| match e {
            RouterEvent::Desync {
                turn, odd_players, ..
            } => Some((*turn, odd_players.clone())),
            _ => None,
        })
        .unwrap();
    assert_eq!(d, (Turn(50), vec![]));
    assert!(sim.router_events.iter().any(|e| matches!(
        e,
        RouterEvent::DesyncSections { sections, .. } if sections == &[format!("player {}", odd.0)]
    )));
}

fn drop_turns(sim: &Sim, i: usize) -> Vec<(PlayerId, Turn)> {
    sim.peers[i]
        .events
        .iter()
        .filter_map(|e| match e {
            Event::PlayerDropped { player, turn } => Some((*player, *turn)),
            _ => None,
        })
        .collect()
}

#[test]
fn silent_peer_is_dropped_at_one_agreed_turn() {
    let mut setup = Setup::new(3, 150, 9);
    setup.config.silence_timeout = Duration::from_secs(2);
    setup.config.policy = TurnPolicy::Strict;
    let mut sim = Sim::new(setup);
    sim.peers[2].silent_from = Some(Instant::from_millis(5_000));
    sim.run(Duration::from_secs(60));
    let drops = drop_turns(&sim, 0);
    eprintln!("drops {drops:?} {:?}", sim.stats(0));
    assert_eq!(drops.len(), 1, "{drops:?}");
    let (player, turn) = drops[0];
    assert_eq!(player, PlayerId(2));
    assert_eq!(drop_turns(&sim, 1), drops);
    assert!(sim.router_events.iter().any(|e| matches!(
        e,
        RouterEvent::Dropped { player: PlayerId(2), turn: t, reason: relay::DropReason::Timeout, .. } if *t == turn
    )));
    for i in 0..2 {
        assert!(sim.peers[i].ended);
        assert_eq!(assert_contiguous(&sim, i), 150);
        assert_eq!(sim.hashes(i), sim.hashes(0));
        // From the drop turn on, the slot carries nothing.
        assert!(
            sim.peers[i]
                .executed
                .iter()
                .filter(|(t, _, _)| *t >= turn)
                .all(|(_, inputs, _)| inputs.iter().all(|(p, _)| *p != PlayerId(2)))
        );
    }
}

#[test]
fn clean_leave_is_dropped_at_one_agreed_turn() {
    let mut sim = Sim::new(Setup::new(3, 100, 13));
    sim.peers[0].leave_at = Some(Instant::from_millis(4_000));
    sim.run(Duration::from_secs(60));
    let drops = drop_turns(&sim, 1);
    assert_eq!(drops.len(), 1);
    assert_eq!(drops[0].0, PlayerId(0));
    assert_eq!(drop_turns(&sim, 2), drops);
    for i in 1..3 {
        assert_eq!(assert_contiguous(&sim, i), 100);
        assert_eq!(sim.hashes(i), sim.hashes(1));
    }
}
