//! Session unit tests: ordering, pacing, input scheduling, stall accounting.

use super::*;
use crate::builder::SessionBuilder;
use crate::proto::PlayerInfo;
use sim::MatchSetup;

/// A 2-player match of 100 ms turns as `your_player` sees it.
fn start_msg(your_player: u8, input_delay: u8, last_turn: Option<Turn>) -> Start {
    Start {
        your_player: PlayerId(your_player),
        setup: MatchSetup {
            seed: 1,
            players: 2,
            ticks_per_turn: 4,
        },
        turn_length_us: 100_000,
        players: (0..2)
            .map(|i| PlayerInfo {
                id: PlayerId(i),
                name: format!("p{i}"),
            })
            .collect(),
        input_delay,
        first_turn: Turn(0),
        last_turn,
    }
}

fn started(now: Instant) -> Session {
    let mut s = SessionBuilder::new().with_match("m", 2).build(now).unwrap();
    let (_, join) = s.poll_outgoing().unwrap();
    assert!(matches!(ToRelay::decode(&join), Ok(ToRelay::Join(_))));
    let start = ToPeer::Start(start_msg(1, 2, Some(Turn(3))));
    s.handle_message(now, &start.to_bytes());
    s
}

fn bundle(turn: u32) -> Vec<u8> {
    ToPeer::Bundle(Bundle {
        turn: Turn(turn),
        inputs: vec![(PlayerId(0), vec![turn as u8])],
        notices: Vec::new(),
        tag: None,
    })
    .to_bytes()
}

fn drain(s: &mut Session) -> (Vec<ToRelay>, Vec<Event>) {
    let mut out = Vec::new();
    while let Some((_, b)) = s.poll_outgoing() {
        out.push(ToRelay::decode(&b).unwrap());
    }
    let mut ev = Vec::new();
    while let Some(e) = s.poll_event() {
        ev.push(e);
    }
    (out, ev)
}

#[test]
fn yields_each_turn_once_in_order_when_due_and_complete() {
    let t0 = Instant::from_millis(1000);
    let mut s = started(t0);
    let (out, ev) = drain(&mut s);
    assert!(matches!(ev[..], [Event::Started { .. }]));
    // The input for turn 0 goes out at the start (turn 0 is due 2 turns later).
    assert_eq!(
        out,
        vec![ToRelay::Input {
            turn: Turn(0),
            commands: vec![]
        }]
    );
    // Out of order and duplicated bundles, before anything is due.
    for t in [2, 1, 1, 0, 2] {
        s.handle_message(t0, &bundle(t));
    }
    assert_eq!(s.stats(t0).duplicate_bundles, 2);
    let (_, ev) = drain(&mut s);
    assert!(ev.is_empty(), "nothing is due yet: {ev:?}");
    let t = s.poll_timeout().unwrap();
    assert_eq!(t, t0 + Duration::from_millis(100));
    s.handle_timeout(t0 + Duration::from_millis(200));
    let (out, ev) = drain(&mut s);
    assert!(matches!(ev[..], [Event::TurnReady { turn: Turn(0), .. }]));
    assert_eq!(
        out,
        vec![ToRelay::Input {
            turn: Turn(1),
            commands: vec![]
        }]
    );
    // The game's answer to turn 0 goes into turn 0 + d = 2.
    s.submit(t0 + Duration::from_millis(200), vec![9]).unwrap();
    let (out, _) = drain(&mut s);
    assert_eq!(
        out,
        vec![ToRelay::Input {
            turn: Turn(2),
            commands: vec![vec![9]]
        }]
    );
    // Driven late (at 450 ms): turns 1 and 2 come out together.
    s.handle_timeout(t0 + Duration::from_millis(450));
    let (_, ev) = drain(&mut s);
    let turns: Vec<u32> = ev
        .iter()
        .filter_map(|e| match e {
            Event::TurnReady { turn, .. } => Some(turn.0),
            _ => None,
        })
        .collect();
    assert_eq!(turns, vec![1, 2]);
    let (out, _) = drain(&mut s);
    assert_eq!(
        out,
        vec![ToRelay::Input {
            turn: Turn(3),
            commands: vec![]
        }]
    );
    assert_eq!(
        s.stats(t0 + Duration::from_millis(450)).stall,
        Duration::ZERO
    );
    // Turn 3 was due at +500 ms; a stall is counted and reported.
    s.handle_timeout(t0 + Duration::from_millis(600));
    let (_, ev) = drain(&mut s);
    assert!(matches!(ev[..], [Event::Stalled { turn: Turn(3), .. }]));
    s.handle_message(t0 + Duration::from_millis(650), &bundle(3));
    s.handle_message(
        t0 + Duration::from_millis(650),
        &ToPeer::MatchEnd {
            turn: Some(Turn(3)),
            reason: crate::proto::EndReason::Completed,
        }
        .to_bytes(),
    );
    let (_, ev) = drain(&mut s);
    assert!(matches!(
        ev[..],
        [
            Event::TurnReady { turn: Turn(3), .. },
            Event::MatchEnded {
                turn: Some(Turn(3)),
                ..
            }
        ]
    ));
    let st = s.stats(t0 + Duration::from_millis(650));
    assert_eq!(st.stall, Duration::from_millis(150));
    assert_eq!(st.turns_executed, 4);
    assert!(s.is_ended());
}

fn match_end(turn: Option<u32>, reason: crate::proto::EndReason) -> Vec<u8> {
    ToPeer::MatchEnd {
        turn: turn.map(Turn),
        reason,
    }
    .to_bytes()
}

fn hashes_sent(out: &[ToRelay]) -> Vec<u32> {
    out.iter()
        .filter_map(|m| match m {
            ToRelay::Hash { turn, .. } => Some(turn.0),
            _ => None,
        })
        .collect()
}

/// With a long input delay the relay's `MatchEnd` arrives before the last
/// turns are due: they run at once, and their hashes are still accepted and
/// sent although the `MatchEnded` event is already queued.
#[test]
fn turns_yielded_around_the_match_end_still_report_their_hashes() {
    let t0 = Instant::from_millis(1000);
    let mut s = started(t0);
    drain(&mut s);
    for t in 0..4 {
        s.handle_message(t0, &bundle(t));
    }
    s.handle_message(t0, &match_end(Some(3), crate::proto::EndReason::Completed));
    let mut turns = Vec::new();
    let mut hashes = Vec::new();
    while let Some(ev) = s.poll_event() {
        match ev {
            Event::TurnReady { turn, .. } => {
                s.report_hash(turn, StateHash([turn.0 as u8; 32]), Vec::new())
                    .unwrap();
                turns.push(turn.0);
            }
            Event::MatchEnded { turn, reason } => {
                assert_eq!(
                    (turn, reason),
                    (Some(Turn(3)), crate::proto::EndReason::Completed)
                );
            }
            _ => {}
        }
        let (out, _) = {
            let mut out = Vec::new();
            while let Some((_, b)) = s.poll_outgoing() {
                out.push(ToRelay::decode(&b).unwrap());
            }
            (out, ())
        };
        hashes.extend(hashes_sent(&out));
    }
    assert!(s.is_ended());
    assert_eq!(turns, vec![0, 1, 2, 3]);
    assert_eq!(hashes, vec![0, 1, 2, 3]);
    // Only yielded turns, once each.
    assert_eq!(
        s.report_hash(Turn(3), StateHash([0; 32]), Vec::new()),
        Err(SessionError::BadTurn(Turn(3)))
    );
    assert_eq!(
        s.report_hash(Turn(4), StateHash([0; 32]), Vec::new()),
        Err(SessionError::BadTurn(Turn(4)))
    );
}

/// A relay that shuts down before any turn closed says so with no last
/// turn: the session ends at once instead of waiting for turn 0's bundle.
#[test]
fn a_shutdown_before_the_first_turn_ends_the_session_at_once() {
    let t0 = Instant::from_millis(1000);
    let mut s = started(t0);
    drain(&mut s);
    s.handle_message(
        t0 + Duration::from_millis(10),
        &match_end(None, crate::proto::EndReason::Shutdown),
    );
    let (_, ev) = drain(&mut s);
    assert_eq!(
        ev,
        vec![Event::MatchEnded {
            turn: None,
            reason: crate::proto::EndReason::Shutdown
        }]
    );
    assert!(s.is_ended());
    assert_eq!(s.poll_timeout(), None);
}

/// A peer waiting on a bundle that never comes reports the wait as it
/// passes, and still counts it after giving up (leaving).
#[test]
fn a_wait_for_a_missing_bundle_is_stall_in_reports_and_after_leaving() {
    let t0 = Instant::from_millis(1000);
    let mut s = started(t0);
    drain(&mut s);
    // Turn 0 is due at +200 ms; its bundle never comes.
    let t = t0 + Duration::from_secs(20);
    s.handle_timeout(t);
    let (out, _) = drain(&mut s);
    let reported = out
        .iter()
        .filter_map(|m| match m {
            ToRelay::Report(r) => Some(r.stall_us),
            _ => None,
        })
        .max()
        .unwrap();
    assert_eq!(reported, 19_800_000);
    assert_eq!(s.stats(t).stall, Duration::from_millis(19_800));
    s.leave(t + Duration::from_secs(1));
    assert_eq!(s.stats(t).stall, Duration::from_millis(20_800));
}

/// The relay's late-input notice can arrive while the intended turn is
/// still ahead (its bundle came early without our input): the chunk's
/// latency is then measured in the turn it landed in.
#[test]
fn a_late_notice_before_the_intended_turn_still_counts_the_latency() {
    let t0 = Instant::from_millis(1000);
    let mut s = started(t0);
    drain(&mut s);
    s.submit(t0, vec![7]).unwrap();
    s.handle_message(t0, &bundle(0));
    s.handle_timeout(t0 + Duration::from_millis(200));
    let (out, ev) = drain(&mut s);
    assert!(matches!(ev[..], [Event::TurnReady { turn: Turn(0), .. }]));
    assert!(out.contains(&ToRelay::Input {
        turn: Turn(1),
        commands: vec![vec![7]]
    }));
    // Turn 1 closed without our chunk; it landed in turn 2. Both bundles and
    // the notice arrive before turn 1 is due (+300 ms).
    let at = t0 + Duration::from_millis(210);
    s.handle_message(at, &bundle(1));
    s.handle_message(
        at,
        &ToPeer::LateInput {
            turn: Turn(1),
            landed_in: Turn(2),
        }
        .to_bytes(),
    );
    s.handle_message(
        at,
        &ToPeer::Bundle(Bundle {
            turn: Turn(2),
            inputs: vec![(PlayerId(1), vec![7])],
            notices: Vec::new(),
            tag: None,
        })
        .to_bytes(),
    );
    s.handle_timeout(t0 + Duration::from_millis(400));
    let (_, ev) = drain(&mut s);
    assert_eq!(
        ev.iter()
            .filter(|e| matches!(e, Event::TurnReady { .. }))
            .count(),
        2
    );
    let st = s.stats(t0 + Duration::from_millis(400));
    assert_eq!(st.late_inputs, 1);
    assert_eq!(st.latency_samples, 1);
    assert_eq!(st.latency_p50, Duration::from_millis(400));
}

/// A refused input's event names when its chunks were submitted, whether
/// the notice comes before the intended turn runs or after it ran without
/// them; those chunks then count neither as played nor as late.
#[test]
fn a_refused_input_names_its_chunks_submit_times() {
    for before_the_turn in [true, false] {
        let t0 = Instant::from_millis(1000);
        let mut s = started(t0);
        drain(&mut s);
        let (a, b) = (t0, t0 + Duration::from_millis(1));
        s.submit(a, vec![7]).unwrap();
        s.submit(b, vec![8]).unwrap();
        s.handle_message(t0, &bundle(0));
        s.handle_timeout(t0 + Duration::from_millis(200));
        drain(&mut s);
        let refused = ToPeer::InputRefused { turn: Turn(1) }.to_bytes();
        let at = t0 + Duration::from_millis(210);
        if before_the_turn {
            s.handle_message(at, &refused);
        }
        s.handle_message(at, &bundle(1));
        s.handle_timeout(t0 + Duration::from_millis(400));
        if !before_the_turn {
            s.handle_message(t0 + Duration::from_millis(400), &refused);
        }
        let (_, ev) = drain(&mut s);
        let submitted: Vec<Vec<Instant>> = ev
            .iter()
            .filter_map(|e| match e {
                Event::InputRefused { turn, submitted } if *turn == Turn(1) => {
                    Some(submitted.clone())
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            submitted,
            vec![vec![a, b]],
            "before the turn: {before_the_turn}"
        );
        let st = s.stats(t0 + Duration::from_millis(400));
        assert_eq!((st.inputs_refused, st.latency_samples), (1, 0));
    }
}

/// Under the relay's clock an input sent just before the relay died is
/// never in a bundle. Once the reconnect's catch-up is over it is
/// forgotten: the next command's latency is its own, not counted from the
/// lost input's submission (every later command would be that much later).
#[test]
fn an_input_the_lost_relay_never_bundled_does_not_delay_later_commands() {
    let t0 = Instant::from_millis(1000);
    let mut s = SessionBuilder::new()
        .with_match("m", 2)
        .with_rejoin(PlayerId(0), crate::proto::RejoinSecret([1; 16]))
        .build(t0)
        .unwrap();
    let resume = crate::proto::Resume {
        start: start_msg(0, 0, None),
        elapsed_us: 0,
        delay: 0,
        snapshot: None,
        live: Turn(0),
        spectator: false,
    };
    s.handle_message(t0, &ToPeer::Resume(resume).to_bytes());
    let empty = |turn: u32, ours: bool| {
        ToPeer::Bundle(Bundle {
            turn: Turn(turn),
            inputs: if ours {
                vec![(PlayerId(0), vec![1])]
            } else {
                vec![]
            },
            notices: Vec::new(),
            tag: None,
        })
        .to_bytes()
    };
    let ms = |x: u64| t0 + Duration::from_millis(x);
    for t in 0..5 {
        s.handle_message(ms(100 * (u64::from(t) + 1)), &empty(t, false));
        s.handle_timeout(ms(100 * (u64::from(t) + 1)));
    }
    drain(&mut s);
    // Sent to the relay that dies.
    s.submit(ms(550), vec![1]).unwrap();
    s.handle_timeout(ms(550));
    let (out, _) = drain(&mut s);
    assert!(
        out.iter().any(|m| matches!(m, ToRelay::Input { .. })),
        "{out:?}"
    );
    assert!(s.reconnect(PlayerId(0), crate::proto::RejoinSecret([1; 16])));
    let back = crate::proto::Reconnected {
        live: Turn(5),
        elapsed_us: 500_000,
        delay: 0,
    };
    s.handle_message(ms(3000), &ToPeer::Reconnected(back).to_bytes());
    s.handle_timeout(ms(3000));
    drain(&mut s);
    // A command after the restart, bundled at once.
    s.submit(ms(3010), vec![2]).unwrap();
    s.handle_timeout(ms(3010));
    drain(&mut s);
    s.handle_message(ms(3100), &empty(5, true));
    s.handle_timeout(ms(3400));
    let st = s.stats(ms(3400));
    assert_eq!(st.latency_samples, 1);
    assert!(
        st.latency_p99 < Duration::from_millis(500),
        "{:?}",
        st.latency_p99
    );
}
