//! Session unit tests: ordering, pacing, input scheduling, stall accounting.

use super::*;
use crate::builder::SessionBuilder;
use crate::proto::PlayerInfo;
use sim::MatchSetup;

fn started(now: Instant) -> Session {
    let mut s = SessionBuilder::new().with_match("m", 2).build(now).unwrap();
    let (_, join) = s.poll_outgoing().unwrap();
    assert!(matches!(ToRelay::decode(&join), Ok(ToRelay::Join(_))));
    let start = ToPeer::Start(Start {
        your_player: PlayerId(1),
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
        input_delay: 2,
        first_turn: Turn(0),
        last_turn: Some(Turn(3)),
    });
    s.handle_message(now, &start.to_bytes());
    s
}

fn bundle(turn: u32) -> Vec<u8> {
    ToPeer::Bundle(Bundle {
        turn: Turn(turn),
        inputs: vec![(PlayerId(0), vec![turn as u8])],
        notices: Vec::new(),
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
            turn: Turn(3),
            reason: crate::proto::EndReason::Completed,
        }
        .to_bytes(),
    );
    let (_, ev) = drain(&mut s);
    assert!(matches!(
        ev[..],
        [
            Event::TurnReady { turn: Turn(3), .. },
            Event::MatchEnded { turn: Turn(3), .. }
        ]
    ));
    let st = s.stats(t0 + Duration::from_millis(650));
    assert_eq!(st.stall, Duration::from_millis(150));
    assert_eq!(st.turns_executed, 4);
    assert!(s.is_ended());
}
