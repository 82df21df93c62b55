//! Coming back on a new connection with the world kept (the relay
//! restarted, or the path broke): a player's `Reconnect` and a spectator's
//! `Rewatch` are served from the bundle tail, from the first turn the peer
//! lacks, with no snapshot; a peer the tail cannot serve restores from the
//! agreed snapshot instead, and one that claims turns the relay never
//! closed is told so.

use super::scripted_match::*;
use super::*;
use lockstep::low_level::proto::{Reconnect, Rejoin, RejoinSecret, Rewatch};
use sim::Turn;

/// The turns of the bundles in `got`, in order.
fn bundle_turns(got: &[ToPeer]) -> Vec<u32> {
    got.iter()
        .filter_map(|m| match m {
            ToPeer::Bundle(b) => Some(b.turn.0),
            _ => None,
        })
        .collect()
}

/// Whether `got` holds a message of the snapshot path (a resume or a chunk).
fn restores_from_a_snapshot(got: &[ToPeer]) -> bool {
    got.iter()
        .any(|m| matches!(m, ToPeer::Resume(_) | ToPeer::SnapshotChunk(_)))
}

fn secret_of(m: &Match, conn: u32) -> RejoinSecret {
    m.inbox(conn, 0)
        .iter()
        .find_map(|msg| match msg {
            ToPeer::RejoinSecret(s) => Some(*s),
            _ => None,
        })
        .unwrap()
}

/// Player 1's connection breaks after turn 30 while the match plays on; a
/// new connection reconnects from the first turn it had no bundle for. It
/// gets `Reconnected` and exactly the turns it lacks up to the live one,
/// with no snapshot; it counts again once caught up. A second reconnect
/// that claims a turn the relay never closed is refused, and one from a
/// turn the tail no longer holds restores from the agreed snapshot.
#[test]
fn a_reconnecting_player_gets_only_the_bundles_it_lacks() {
    // The first snapshot is agreed at turn 100: until then the tail holds
    // every turn (after it, the turns after the snapshot).
    let mut m = Match::start(config(100), &[Uploads::Honest; 2]);
    m.run(30);
    let secret = secret_of(&m, 1);
    let had = bundle_turns(m.inbox(1, 0));
    let from = Turn(had.last().unwrap() + 1);
    m.gone.insert(ConnId(1));
    m.r.handle_disconnected(m.now, ConnId(1));
    m.run(8);
    let rejoin = Rejoin {
        join: join(2),
        player: PlayerId(1),
        secret,
    };
    m.connect(50);
    m.send(
        50,
        &ToRelay::Reconnect(Reconnect {
            rejoin: rejoin.clone(),
            from,
        }),
    );
    m.act();
    let got = m.inbox(50, 0).to_vec();
    let ToPeer::Reconnected(answer) = &got[0] else {
        panic!("{:?}", got[0]);
    };
    assert!(!restores_from_a_snapshot(&got), "{got:?}");
    let expected: Vec<u32> = (from.0..answer.live.0).collect();
    assert_eq!(bundle_turns(&got), expected);
    assert_eq!(m.r.counters().reconnects, 1);

    // Ahead of the relay: it cannot have closed those turns.
    m.r.handle_disconnected(m.now, ConnId(50));
    m.connect(51);
    let ahead = Turn(answer.live.0 + 20);
    m.send(
        51,
        &ToRelay::Reconnect(Reconnect {
            rejoin: rejoin.clone(),
            from: ahead,
        }),
    );
    m.act();
    assert!(
        matches!(
            m.inbox(51, 0),
            [ToPeer::Rejected {
                reason: RejectReason::HoldExpired,
                ..
            }]
        ),
        "{:?}",
        m.inbox(51, 0)
    );

    // Past the 400-turn tail: the agreed snapshot and the bundles after it.
    m.run(450);
    m.connect(52);
    m.send(52, &ToRelay::Reconnect(Reconnect { rejoin, from }));
    m.act();
    let got = m.inbox(52, 0);
    let Some(ToPeer::Resume(resume)) = got.first() else {
        panic!("{got:?}");
    };
    let (base, _, _) = resume.snapshot.unwrap();
    assert!(!resume.spectator);
    assert_eq!(resume.start.your_player, PlayerId(1));
    assert_eq!(bundle_turns(got).first(), Some(&(base.0 + 1)));
    assert_eq!(m.r.counters().reconnects, 1);
}

/// A spectator's connection breaks; a new connection rewatches from the
/// first turn it had no bundle for. It gets `Reconnected`, no snapshot,
/// and from then on every turn exactly once, in order, from that one: the
/// world it kept plays on as if the connection had never broken. A
/// rewatch from a turn the tail no longer holds is a new spectator's
/// start (the snapshot); so is one ahead of the relay.
#[test]
fn a_rewatching_spectator_keeps_its_world_and_gets_only_the_bundles_it_lacks() {
    let mut m = Match::start(config(100), &[Uploads::Honest; 3]);
    m.run(15);
    m.spectate(100);
    m.run(60);
    let had = bundle_turns(m.inbox(100, 0));
    let from = Turn(had.last().unwrap() + 1);
    m.r.handle_disconnected(m.now, ConnId(100));
    m.run(10);
    m.connect(101);
    let rewatch = |from| {
        ToRelay::Rewatch(Rewatch {
            join: join(3),
            from,
        })
    };
    m.send(101, &rewatch(from));
    m.act();
    m.run(100);
    let got = m.inbox(101, 0).to_vec();
    assert!(matches!(got[0], ToPeer::Reconnected(_)), "{:?}", got[0]);
    assert!(!restores_from_a_snapshot(&got), "{got:?}");
    let turns = bundle_turns(&got);
    let expected: Vec<u32> = (from.0..from.0 + turns.len() as u32).collect();
    assert_eq!(turns, expected);
    assert!(turns.len() > 100, "it watches on: {} turns", turns.len());
    assert_eq!(m.r.counters().reconnects, 1);

    for (conn, from) in [
        (102, Turn(m.r.counters().turns_closed as u32 + 50)),
        (103, Turn(1)),
    ] {
        if from == Turn(1) {
            m.run(450);
        }
        m.connect(conn);
        m.send(conn, &rewatch(from));
        m.act();
        let got = m.inbox(conn, 0);
        let Some(ToPeer::Resume(resume)) = got.first() else {
            panic!("from {from:?}: {got:?}");
        };
        assert!(resume.spectator);
        assert!(resume.snapshot.is_some(), "from {from:?}");
    }
    assert_eq!(m.r.counters().reconnects, 1);
}
