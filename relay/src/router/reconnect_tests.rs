//! Coming back on a new connection with the world kept (the relay
//! restarted, or the path broke): a player's `Reconnect` and a spectator's
//! `Rewatch` are served from the bundle tail, from the first turn the peer
//! lacks, with no snapshot; a peer the tail cannot serve restores from the
//! agreed snapshot instead, and one that claims turns the relay never
//! closed is told so.

use super::scripted_match::*;
use super::*;
use crate::bundle_key::BundleKey;
use crate::event::{MatchId, MatchInfo};
use crate::resume::{RecordedState, Unfinished};
use lockstep::low_level::proto::{Bundle, Join, Reconnect, Rejoin, RejoinSecret, Rewatch};
use sim::{StateHash, Turn};
use std::net::Ipv4Addr;

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

/// The bundle of `turn` in a resumed match: player 0 moved.
fn lost_bundle(turn: u32, mark: u8) -> Bundle {
    Bundle {
        turn: Turn(turn),
        inputs: vec![(PlayerId(0), vec![mark, turn as u8])],
        notices: Vec::new(),
        tag: None,
    }
}

/// The instance nonce of the crashed match "m".
const NONCE: crate::rejoin_config::MatchNonce = crate::rejoin_config::MatchNonce([4; 16]);

/// A relay restarted after a machine crash: its recording of match "m"
/// ends at turn 99, while player 0 played up to 104 and player 1 up to
/// 101. Both come back on new connections, say so, and are asked for the
/// turns the relay lost. The relay records and kept its rejoin key, so it
/// tags its bundles, as the crashed process did.
fn crashed() -> (Router, Instant, [RejoinSecret; 2]) {
    crashed_with(true)
}

/// [`crashed`], tagging its bundles or not.
fn crashed_with(tag_bundles: bool) -> (Router, Instant, [RejoinSecret; 2]) {
    let config = RelayConfig {
        rejoin: crate::rejoin_config::RejoinConfig {
            key: crate::rejoin_config::RejoinKey::from_bytes(&[3; 32]).unwrap(),
            tag_bundles,
            ..crate::rejoin_config::RejoinConfig::default()
        },
        ..RelayConfig::default()
    };
    let mut info = MatchInfo::two_players("m", "g");
    info.last_turn = None;
    info.nonce = Some(NONCE);
    let state = RecordedState {
        next_close: Turn(100),
        bundles: (90..100)
            .map(|t| (Turn(t), ToPeer::Bundle(lost_bundle(t, 0)).to_bytes()))
            .collect(),
        ..RecordedState::default()
    };
    let secrets = [0, 1].map(|p| {
        config
            .rejoin
            .secret(MatchId(1), Some(NONCE), "m", PlayerId(p))
    });
    let mut r = Router::new(config);
    let now = Instant::from_millis(10);
    r.resume(now, Unfinished::unrecorded(MatchId(1), info, state))
        .unwrap();
    (r, now, secrets)
}

/// `bundle` as the crashed process sent it: tagged under the key of match
/// 1 instance [`NONCE`] and the relay's rejoin key.
fn as_sent(bundle: Bundle) -> Bundle {
    sealed(&BundleKey::derive(&[3; 32], MatchId(1), NONCE), bundle)
}

/// `bundle` tagged under `key`.
fn sealed(key: &BundleKey, bundle: Bundle) -> Bundle {
    let mut bytes = ToPeer::Bundle(bundle).to_bytes();
    key.seal(&mut bytes);
    match ToPeer::decode(&bytes) {
        Ok(ToPeer::Bundle(b)) => b,
        other => panic!("{other:?}"),
    }
}

fn reconnect_msg(player: u8, secret: RejoinSecret, from: u32) -> Vec<u8> {
    let join = Join {
        rules_hash: StateHash([3; 32]),
        ..crate::test_support::join("m", "p")
    };
    ToRelay::Reconnect(Reconnect {
        rejoin: Rejoin {
            join,
            player: PlayerId(player),
            secret,
        },
        from: Turn(from),
    })
    .to_bytes()
}

/// Player 0 (connection 0) comes back holding every turn up to 104,
/// player 1 (connection 1) up to 101.
fn come_back_ahead(r: &mut Router, now: Instant, secrets: &[RejoinSecret; 2]) {
    for (conn, player, from) in [(0u32, 0u8, 105u32), (1, 1, 102)] {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, 6000 + conn as u16));
        assert!(r.handle_connected(now, ConnId(conn), addr));
        let secret = secrets[usize::from(player)];
        r.handle_message(now, ConnId(conn), &reconnect_msg(player, secret, from));
    }
}

fn outgoing(r: &mut Router) -> Vec<(ConnId, ToPeer)> {
    std::iter::from_fn(|| r.poll_outgoing())
        .map(|(c, _, b)| (c, ToPeer::decode(&b).unwrap()))
        .collect()
}

/// Both players come back ahead of the crashed relay. Each is taken back
/// from its own turn and asked for the bundles from turn 100; each hands
/// back what it played. The match adopts turns 100-104 (every holder's
/// copy alike), sends 102-104 to player 1, which lacked them, records
/// them as closed turns, and plays on from 105.
#[test]
fn turns_the_relay_lost_are_handed_back_and_adopted() {
    let (mut r, now, secrets) = crashed();
    come_back_ahead(&mut r, now, &secrets);
    let got = outgoing(&mut r);
    for (conn, live) in [(0, 105), (1, 102)] {
        let mine: Vec<&ToPeer> = got
            .iter()
            .filter(|(c, _)| c.0 == conn)
            .map(|(_, m)| m)
            .collect();
        assert!(
            matches!(mine[..], [ToPeer::Reconnected(a), ToPeer::HandBack { from: Turn(100) }] if a.live == Turn(live)),
            "{mine:?}"
        );
    }
    // Caught up at once (nothing to receive), then the bundles go back.
    for (conn, last) in [(0u32, 104u32), (1, 101)] {
        let caught = ToRelay::CaughtUp { turn: Turn(last) };
        r.handle_message(now, ConnId(conn), &caught.to_bytes());
        for t in 100..=last {
            let back = ToRelay::HandedBack(as_sent(lost_bundle(t, 7)));
            r.handle_message(now, ConnId(conn), &back.to_bytes());
        }
    }
    let got = outgoing(&mut r);
    let sent_to = |conn: u32| -> Vec<u32> {
        got.iter()
            .filter(|(c, _)| c.0 == conn)
            .filter_map(|(_, m)| match m {
                ToPeer::Bundle(b) => Some(b.turn.0),
                _ => None,
            })
            .collect()
    };
    assert_eq!(sent_to(1), vec![102, 103, 104]);
    assert!(sent_to(0).is_empty());
    assert_eq!(r.counters().turns_handed_back, 5);
    let closed: Vec<u32> = std::iter::from_fn(|| r.poll_event())
        .filter_map(|e| match e {
            RouterEvent::TurnClosed { turn, inputs, .. } => {
                assert_eq!(inputs, lost_bundle(turn.0, 7).inputs);
                Some(turn.0)
            }
            _ => None,
        })
        .collect();
    assert_eq!(closed, (100..105).collect::<Vec<_>>());
    // The clock runs again from turn 105.
    let later = now + r.config().turn_length.saturating_mul(3);
    r.handle_timeout(later);
    let turns: Vec<u32> = outgoing(&mut r)
        .into_iter()
        .filter_map(|(_, m)| match m {
            ToPeer::Bundle(b) => Some(b.turn.0),
            _ => None,
        })
        .collect();
    assert_eq!(turns.first(), Some(&105), "{turns:?}");
}

/// Player 1's copy of turn 101 differs from player 0's: turn 100 is
/// adopted, 101 is not, and both players (each holds 101) are ahead of the
/// match: refused and dropped. A claim beyond the hand-back bound, and a
/// bundle nobody asked for, change nothing.
#[test]
fn copies_that_differ_are_not_adopted_and_their_holders_are_refused() {
    // Further ahead than a relay can have lost: refused at once.
    let (mut r, now, secrets) = crashed();
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, 6000));
    assert!(r.handle_connected(now, ConnId(0), addr));
    let far = 100 + lockstep::low_level::proto::MAX_HAND_BACK_TURNS + 1;
    r.handle_message(now, ConnId(0), &reconnect_msg(0, secrets[0], far));
    assert!(
        matches!(
            outgoing(&mut r)[..],
            [(
                _,
                ToPeer::Rejected {
                    reason: RejectReason::HoldExpired,
                    ..
                }
            )]
        ),
        "claimed turns up to {far}"
    );

    let (mut r, now, secrets) = crashed();
    come_back_ahead(&mut r, now, &secrets);
    for (conn, last) in [(0u32, 104u32), (1, 101)] {
        let caught = ToRelay::CaughtUp { turn: Turn(last) };
        r.handle_message(now, ConnId(conn), &caught.to_bytes());
        for t in 100..=last {
            let mark = if conn == 1 && t == 101 { 9 } else { 7 };
            let back = ToRelay::HandedBack(as_sent(lost_bundle(t, mark)));
            r.handle_message(now, ConnId(conn), &back.to_bytes());
        }
    }
    // Not asked for: beyond its claim.
    let bad = r.counters().bad_state;
    r.handle_message(
        now,
        ConnId(1),
        &ToRelay::HandedBack(as_sent(lost_bundle(103, 7))).to_bytes(),
    );
    assert_eq!(r.counters().bad_state, bad + 1);
    let got = outgoing(&mut r);
    assert_eq!(r.counters().turns_handed_back, 1);
    for conn in [0, 1] {
        assert!(
            got.iter().any(|(c, m)| c.0 == conn
                && matches!(
                    m,
                    ToPeer::Rejected {
                        reason: RejectReason::HoldExpired,
                        ..
                    }
                )),
            "{got:?}"
        );
    }
}

/// Whether `got` refuses connection `conn` as an unproven hand-back.
fn refused_unproven(got: &[(ConnId, ToPeer)], conn: u32) -> bool {
    got.iter().any(|(c, m)| {
        c.0 == conn
            && matches!(
                m,
                ToPeer::Rejected {
                    reason: RejectReason::UnprovenHandBack,
                    ..
                }
            )
    })
}

/// A forger's bundle of `turn`: commands in player 1's name (and its own).
fn forged(turn: u32) -> Bundle {
    Bundle {
        turn: Turn(turn),
        inputs: vec![(PlayerId(0), vec![0xEE]), (PlayerId(1), vec![0xEE, 0xEE])],
        notices: Vec::new(),
        tag: None,
    }
}

/// Before: only claimants were compared, so a lone claimant's bundles were
/// adopted, commands stamped with other players' ids included, and sent to
/// everyone as closed turns (64 of 64 forged turns). Now player 1 comes
/// back at the relay's own turn and player 0 claims the 64 turns after it,
/// handing back bundles in player 1's name: with no tag, with a tag copied
/// from a genuine bundle the relay sent (turn 99), with a made-up tag, and
/// a genuine bundle whose turn it moved into the lost range. Each time
/// player 0 is refused (`UnprovenHandBack`) at its first bundle, nothing
/// it handed back is adopted, recorded or delivered, and the match plays
/// on from the relay's own turn 100 with the relay's own bundles.
#[test]
fn a_lone_forger_is_refused_and_the_match_plays_on_from_the_relays_own_turn() {
    let genuine_99 = as_sent(lost_bundle(99, 0));
    let copied_tag = |t: u32| Bundle {
        tag: genuine_99.tag,
        ..forged(t)
    };
    let made_up = |t: u32| Bundle {
        tag: Some(lockstep::low_level::proto::BundleTag([0xAA; 16])),
        ..forged(t)
    };
    let moved = |t: u32| Bundle {
        turn: Turn(t),
        ..genuine_99.clone()
    };
    let forgeries: [&dyn Fn(u32) -> Bundle; 4] = [&forged, &copied_tag, &made_up, &moved];
    let claim = 100 + lockstep::low_level::proto::MAX_HAND_BACK_TURNS;
    for (kind, forge) in forgeries.iter().enumerate() {
        let (mut r, now, secrets) = crashed();
        for (conn, player, from) in [(0u32, 0u8, claim), (1, 1, 100)] {
            let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, 6000 + conn as u16));
            assert!(r.handle_connected(now, ConnId(conn), addr));
            let secret = secrets[usize::from(player)];
            r.handle_message(now, ConnId(conn), &reconnect_msg(player, secret, from));
        }
        let got = outgoing(&mut r);
        assert!(
            got.iter()
                .any(|(c, m)| c.0 == 0 && matches!(m, ToPeer::HandBack { from: Turn(100) })),
            "{got:?}"
        );
        r.handle_message(
            now,
            ConnId(1),
            &ToRelay::CaughtUp { turn: Turn(99) }.to_bytes(),
        );
        for t in 100..claim {
            let back = ToRelay::HandedBack(forge(t));
            r.handle_message(now, ConnId(0), &back.to_bytes());
        }
        let got = outgoing(&mut r);
        assert!(refused_unproven(&got, 0), "forgery {kind}: {got:?}");
        assert_eq!(
            bundle_turns(&got.iter().map(|(_, m)| m.clone()).collect::<Vec<_>>()),
            Vec::<u32>::new()
        );
        assert_eq!(r.counters().hand_backs_refused, 1, "forgery {kind}");
        // The pause ends (player 0 is dropped, player 1 is back) and the
        // relay closes turns from its own turn 100, with its own inputs.
        let later = now + r.config().turn_length.saturating_mul(3);
        r.handle_timeout(later);
        assert_eq!(r.counters().turns_handed_back, 0, "forgery {kind}");
        let to_1: Vec<Bundle> = outgoing(&mut r)
            .into_iter()
            .filter_map(|(c, m)| match m {
                ToPeer::Bundle(b) if c.0 == 1 => Some(b),
                _ => None,
            })
            .collect();
        assert_eq!(
            to_1.first().map(|b| b.turn),
            Some(Turn(100)),
            "forgery {kind}"
        );
        for b in &to_1 {
            assert!(b.inputs.is_empty(), "forgery {kind}: {b:?}");
            assert!(
                as_sent(Bundle {
                    tag: None,
                    ..b.clone()
                }) == *b,
                "untagged: {b:?}"
            );
        }
        // What the recorder would record: the relay's own turns only.
        let closed: Vec<u32> = std::iter::from_fn(|| r.poll_event())
            .filter_map(|e| match e {
                RouterEvent::TurnClosed { turn, inputs, .. } => {
                    assert!(inputs.is_empty(), "turn {turn}: {inputs:?}");
                    Some(turn.0)
                }
                _ => None,
            })
            .collect();
        assert_eq!(closed.first(), Some(&100), "forgery {kind}");
    }
}

/// Both players come back ahead; player 0 hands back the bundles the
/// relay sent, player 1 hands back turn 100 as sent and then turn 101 with
/// one bit of its tag flipped, or tagged by the same relay under the key
/// of another instance of the match (another nonce), or untagged. Player
/// 1 is refused (`UnprovenHandBack`) and its copies forgotten; player 0's
/// proven turns 100-104 are adopted. A relay that does not tag its bundles
/// refuses a player that comes back ahead of it at once: nothing it could
/// hand back would prove itself.
#[test]
fn a_tampered_tag_or_another_matchs_tag_is_refused() {
    let other_instance = BundleKey::derive(
        &[3; 32],
        MatchId(1),
        crate::rejoin_config::MatchNonce([5; 16]),
    );
    let flipped = |b: Bundle| {
        let mut b = as_sent(b);
        if let Some(t) = b.tag.as_mut() {
            t.0[0] ^= 0x80;
        }
        b
    };
    let elsewhere = |b: Bundle| sealed(&other_instance, b);
    let bare = |b: Bundle| b;
    let tamperings: [&dyn Fn(Bundle) -> Bundle; 3] = [&flipped, &elsewhere, &bare];
    for (kind, tamper) in tamperings.iter().enumerate() {
        let (mut r, now, secrets) = crashed();
        come_back_ahead(&mut r, now, &secrets);
        let _ = outgoing(&mut r);
        for (conn, last) in [(0u32, 104u32), (1, 101)] {
            let caught = ToRelay::CaughtUp { turn: Turn(last) };
            r.handle_message(now, ConnId(conn), &caught.to_bytes());
            for t in 100..=last {
                let b = if conn == 1 && t == 101 {
                    tamper(lost_bundle(t, 7))
                } else {
                    as_sent(lost_bundle(t, 7))
                };
                r.handle_message(now, ConnId(conn), &ToRelay::HandedBack(b).to_bytes());
            }
        }
        let got = outgoing(&mut r);
        assert!(refused_unproven(&got, 1), "tampering {kind}: {got:?}");
        assert!(!refused_unproven(&got, 0), "tampering {kind}: {got:?}");
        assert_eq!(r.counters().hand_backs_refused, 1);
        assert_eq!(r.counters().turns_handed_back, 5, "tampering {kind}");
        let closed: Vec<u32> = std::iter::from_fn(|| r.poll_event())
            .filter_map(|e| match e {
                RouterEvent::TurnClosed { turn, .. } => Some(turn.0),
                _ => None,
            })
            .collect();
        assert_eq!(closed, (100..105).collect::<Vec<_>>());
    }

    let (mut r, now, secrets) = crashed_with(false);
    come_back_ahead(&mut r, now, &secrets);
    let got = outgoing(&mut r);
    assert!(
        refused_unproven(&got, 0) && refused_unproven(&got, 1),
        "{got:?}"
    );
    assert!(
        !got.iter()
            .any(|(_, m)| matches!(m, ToPeer::HandBack { .. }))
    );
    assert_eq!(r.counters().hand_backs_refused, 2);
}

/// The tail a resumed match rebuilds from its recording is tagged as the
/// crashed process tagged it: a player that gets those turns now can hand
/// them back after another crash.
#[test]
fn a_resumed_match_tags_the_tail_it_rebuilds() {
    let (mut r, now, secrets) = crashed();
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, 6001));
    assert!(r.handle_connected(now, ConnId(1), addr));
    r.handle_message(now, ConnId(1), &reconnect_msg(1, secrets[1], 95));
    let got: Vec<Bundle> = outgoing(&mut r)
        .into_iter()
        .filter_map(|(_, m)| match m {
            ToPeer::Bundle(b) => Some(b),
            _ => None,
        })
        .collect();
    let want: Vec<Bundle> = (95..100).map(|t| as_sent(lost_bundle(t, 0))).collect();
    assert_eq!(got, want);
    assert!(got.iter().all(|b| b.tag.is_some()));
}
