//! Token mode: a token admits only the match instance it was issued for
//! (issue 38 item 5, the token half). Before, a token checked only the
//! match name and slot, so a player or spectator of an earlier match
//! "m" entered (or opened) a later "m" with its unexpired token.

use super::*;
use crate::event::{MatchInfo, TokenBinding};
use crate::resume::{RecordedState, Unfinished};
use lockstep::low_level::proto::{Join, Rejoin, RejoinSecret, ToPeer, ToRelay};
use lockstep::token::{MatchInstance, TokenClaims};
use sim::Turn;
use std::net::{Ipv4Addr, SocketAddr};

const EARLIER: MatchInstance = MatchInstance([0xE1; 16]);
const LATER: MatchInstance = MatchInstance([0x1A; 16]);
/// The tokens' expiry, in the router's Unix seconds (its `Instant` zero is
/// Unix 0 unless told otherwise).
const EXPIRE: u64 = 600;

fn join() -> Join {
    crate::test_support::join("m", "p")
}

fn player(instance: MatchInstance, slot: u8) -> TokenClaims {
    TokenClaims::new(1, "m", slot, 0, EXPIRE).with_instance(instance)
}

fn spectator(instance: MatchInstance) -> TokenClaims {
    TokenClaims::spectator(1, "m", 0, EXPIRE).with_instance(instance)
}

/// Connects `conn` with `claims` and sends `msg` at `at`; the token
/// refusal queued for it, if any, and whether it was let in (a `Start`,
/// or a `Resume` for a rejoin or a spectator).
fn send(
    r: &mut Router,
    at: Instant,
    conn: u32,
    claims: TokenClaims,
    msg: &ToRelay,
) -> (Option<Refusal>, bool) {
    while r.poll_outgoing().is_some() {}
    while r.poll_refusal().is_some() {}
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, 7000 + conn as u16));
    assert!(r.handle_connected_with_claims(at, ConnId(conn), addr, Some(claims)));
    r.handle_message(at, ConnId(conn), &msg.to_bytes());
    let refused = r.poll_refusal().and_then(|f| f.token);
    let entered = std::iter::from_fn(|| r.poll_outgoing()).any(|(c, _, b)| {
        c == ConnId(conn) && matches!(ToPeer::decode(&b), Ok(ToPeer::Start(_) | ToPeer::Resume(_)))
    });
    (refused, entered)
}

fn join_msg() -> ToRelay {
    ToRelay::Join(join())
}

fn rejoin_msg(slot: u8) -> ToRelay {
    ToRelay::Rejoin(Rejoin {
        join: join(),
        player: PlayerId(slot),
        secret: RejoinSecret([0; 16]),
    })
}

/// A router whose match "m" was started by `instance`'s tokens on
/// connections 0 and 1.
fn started(instance: MatchInstance) -> (Router, Instant) {
    let mut r = Router::new(RelayConfig::default());
    let now = Instant::from_millis(10);
    assert_eq!(
        send(&mut r, now, 0, player(instance, 0), &join_msg()).0,
        None
    );
    let (refused, started) = send(&mut r, now, 1, player(instance, 1), &join_msg());
    assert_eq!((refused, started), (None, true));
    (r, now)
}

/// Both players leave: the match ends and is reaped.
fn end(r: &mut Router, at: Instant) {
    for c in 0..2 {
        r.handle_message(at, ConnId(c), &ToRelay::Leave.to_bytes());
    }
    r.handle_timeout(at);
    assert_eq!(r.match_count(), 0, "the match ended");
}

#[test]
fn a_token_of_an_earlier_match_with_the_same_name_cannot_enter_a_running_one() {
    let mut r = Router::new(RelayConfig::default());
    let now = Instant::from_millis(10);
    // The lobby is bound to the instance of its first token.
    assert_eq!(send(&mut r, now, 0, player(LATER, 0), &join_msg()).0, None);
    let (refused, entered) = send(&mut r, now, 1, player(EARLIER, 1), &join_msg());
    assert_eq!((refused, entered), (Some(Refusal::WrongInstance), false));
    assert_eq!(r.counters().token_wrong_instance, 1);
    // The right instance's token is admitted and starts the match.
    assert_eq!(
        send(&mut r, now, 2, player(LATER, 1), &join_msg()),
        (None, true)
    );
    // The start carries the binding, for the recording (and a resume).
    let bound = std::iter::from_fn(|| r.poll_event()).find_map(|e| match e {
        RouterEvent::MatchStarted { info, .. } => Some(info.token),
        _ => None,
    });
    assert_eq!(
        bound,
        Some(Some(TokenBinding {
            instance: LATER,
            expire_unix: EXPIRE
        }))
    );
    // Slot 1 drops; the earlier match's token for that slot cannot take it
    // back, nor watch; the match's own tokens can.
    let at = now + Duration::from_millis(500);
    r.handle_disconnected(at, ConnId(2));
    assert_eq!(
        send(&mut r, at, 3, player(EARLIER, 1), &rejoin_msg(1)),
        (Some(Refusal::WrongInstance), false)
    );
    assert_eq!(
        send(
            &mut r,
            at,
            4,
            spectator(EARLIER),
            &ToRelay::Spectate(join())
        ),
        (Some(Refusal::WrongInstance), false)
    );
    assert_eq!(r.counters().token_wrong_instance, 3);
    assert_eq!(
        send(&mut r, at, 5, player(LATER, 1), &rejoin_msg(1)),
        (None, true)
    );
    assert_eq!(
        send(&mut r, at, 6, spectator(LATER), &ToRelay::Spectate(join())),
        (None, true)
    );
}

#[test]
fn a_token_of_an_ended_match_cannot_open_a_new_one_of_its_name_until_it_expires() {
    let (mut r, now) = started(EARLIER);
    let at = now + Duration::from_millis(500);
    end(&mut r, at);
    // The ended match's token, unexpired, opens nothing.
    assert_eq!(
        send(&mut r, at, 2, player(EARLIER, 0), &join_msg()),
        (Some(Refusal::WrongInstance), false)
    );
    assert_eq!(r.match_count(), 0, "no lobby was opened");
    // A new instance's tokens open the new match of that name.
    assert_eq!(send(&mut r, at, 3, player(LATER, 0), &join_msg()).0, None);
    assert_eq!(
        send(&mut r, at, 4, player(LATER, 1), &join_msg()),
        (None, true)
    );
    // Once the earlier tokens' expiry has passed the entry is forgotten (the
    // transport refuses such a token as expired by then anyway).
    assert_eq!(r.ended.len(), 1);
    let after = Instant::from_millis(EXPIRE * 1000);
    assert!(!r.wrong_instance(after, &player(EARLIER, 0), None));
    assert_eq!(r.ended.len(), 0);
}

/// The binding is on the wall clock the driver gives: a token's expiry is
/// in Unix seconds.
#[test]
fn the_ended_matches_are_kept_on_the_wall_clock() {
    let (mut r, now) = started(EARLIER);
    r.set_unix_time(now, 1_000);
    end(&mut r, now);
    // The tokens (expiring at Unix 600) had expired by Unix 1000.
    assert_eq!(
        send(&mut r, now, 2, player(EARLIER, 0), &join_msg()).0,
        None
    );
}

#[test]
fn a_resumed_match_keeps_its_binding_and_remembers_it_when_it_ends() {
    let mut info = MatchInfo::two_players("m", "g");
    info.last_turn = None;
    // The rules the test joins carry.
    info.rules_hash = join().rules_hash;
    info.token = Some(TokenBinding {
        instance: LATER,
        expire_unix: EXPIRE,
    });
    let state = RecordedState {
        next_close: Turn(0),
        ..RecordedState::default()
    };
    let mut r = Router::new(RelayConfig::default());
    let now = Instant::from_millis(10);
    r.resume(now, Unfinished::unrecorded(MatchId(1), info, state))
        .unwrap();
    assert_eq!(
        send(&mut r, now, 0, player(EARLIER, 0), &rejoin_msg(0)),
        (Some(Refusal::WrongInstance), false)
    );
    assert_eq!(
        send(&mut r, now, 1, player(LATER, 0), &rejoin_msg(0)).0,
        None
    );
    assert_eq!(r.counters().rejoins, 1);
    // After the resumed match ends, its tokens open no new match "m".
    let at = now + Duration::from_millis(100);
    r.handle_message(at, ConnId(1), &ToRelay::Leave.to_bytes());
    r.end_all();
    assert_eq!(r.match_count(), 0);
    assert!(r.wrong_instance(at, &player(LATER, 1), None));
    assert!(!r.wrong_instance(at, &player(EARLIER, 1), None));
}

/// The ended-match table holds at most the match limit; a full table
/// drops the entry expiring soonest.
#[test]
fn the_ended_match_table_is_bounded_by_the_match_limit() {
    let mut t = instances::EndedMatches::default();
    for i in 0..5u8 {
        let b = TokenBinding {
            instance: MatchInstance([i; 16]),
            expire_unix: 100 + u64::from(i),
        };
        t.remember("m", b, 3);
    }
    assert_eq!(t.len(), 3);
    // Instances 0 and 1 (expiring first) went; 2, 3 and 4 are kept.
    for i in 0..5u8 {
        assert_eq!(t.ended("m", MatchInstance([i; 16]), 50), i >= 2, "{i}");
    }
}
