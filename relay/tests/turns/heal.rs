//! `--on-desync heal` on the seeded virtual network: a peer whose world the
//! fault switch perturbs is re-synchronised from the agreed snapshot and the
//! bundle tail on its live connection, under 10 % loss, and agrees on every
//! turn from the heal turn to the end; with two players (no majority) the
//! heal is refused, the report says so and the match plays on.

use super::forensics::{report, run};
use super::*;
use relay::config::DesyncPolicy;

fn heal_config(snapshot_every: u32) -> RelayConfig {
    let mut config = RelayConfig {
        on_desync: DesyncPolicy::Heal,
        ..RelayConfig::default()
    };
    config.rejoin.snapshot_every = snapshot_every;
    config
}

/// Judged turns from `from` on: (agreed, disputed).
fn verdicts_from(events: &[RouterEvent], from: Turn) -> (Vec<u32>, Vec<u32>) {
    let mut agreed = Vec::new();
    let mut disputed = Vec::new();
    for e in events {
        match e {
            RouterEvent::HashAgreed { turn, .. } if *turn >= from => agreed.push(turn.0),
            RouterEvent::HashDisputed { turn, .. } if *turn >= from => disputed.push(turn.0),
            _ => {}
        }
    }
    (agreed, disputed)
}

fn rts(
    players: u8,
    turns: u32,
    desync_at: u32,
    loss: f64,
    config: RelayConfig,
) -> super::forensics::Run {
    run::<sim::game::World, sim::bot::Bot>(
        players,
        turns,
        desync_at,
        loss,
        config,
        sim::game::DEFAULT_TICKS_PER_TURN,
        |p, seed| sim::bot::Bot::new(p, seed, 300),
        |w, t| w.perturb(t.0),
        sim::game::World::perturb_target,
    )
}

/// Three players, 10 % loss each way, a snapshot every 10 turns: the
/// perturbed peer is healed from the latest agreed snapshot before the
/// desync, every turn from the heal turn to the last one agrees (none is
/// disputed), the report records the heal, and every peer ends the match
/// with the same final hash.
#[test]
fn a_perturbed_peer_is_healed_and_agrees_on_every_later_turn_under_loss() {
    let r = rts(3, 150, 40, 0.10, heal_config(10));
    let odd = PlayerId(r.perturbed);
    let rep = report(&r.events);
    assert_eq!(rep.odd_players, vec![odd.0]);
    assert!(
        rep.notes
            .iter()
            .any(|n| n.starts_with(&format!("healed: P{}", odd.0))),
        "{:?}",
        rep.notes
    );
    let healing = r.events.iter().find_map(|e| match e {
        RouterEvent::Healing {
            desync_turn,
            players,
            snapshot,
            ..
        } => Some((*desync_turn, players.clone(), *snapshot)),
        _ => None,
    });
    let (desync_turn, players, snapshot) = healing.expect("a heal");
    assert_eq!((desync_turn, players), (Turn(40), vec![odd]));
    let base = snapshot.expect("an agreed snapshot");
    // The latest agreed snapshot: the desync turn's own one qualifies when
    // the majority's upload of it is in before the heal starts (its hash is
    // the majority's).
    assert!(base <= Turn(40) && base.0 % 10 == 0, "{base:?}");
    let healed = r.events.iter().find_map(|e| match e {
        RouterEvent::Healed { turn, players, .. } => Some((*turn, players.clone())),
        _ => None,
    });
    let (from, players) = healed.expect("the heal completed");
    assert_eq!(players, vec![odd]);
    assert!(from > Turn(40) && from < Turn(100), "{from:?}");
    let (agreed, disputed) = verdicts_from(&r.events, from);
    assert!(disputed.is_empty(), "disputed after the heal: {disputed:?}");
    assert_eq!(agreed, (from.0..150).collect::<Vec<_>>());
    // One desync: nothing after the heal was judged a new one.
    let desyncs = r
        .events
        .iter()
        .filter(|e| matches!(e, RouterEvent::Desync { .. }))
        .count();
    assert_eq!(desyncs, 1);
    assert!(
        r.ends.iter().all(|e| *e == Some(EndReason::Completed)),
        "{:?}",
        r.ends
    );
    assert!(
        r.finals.iter().all(|f| f == &r.finals[0]) && r.finals[0].0 == Some(149),
        "{:?}",
        r.finals
    );
    eprintln!(
        "heal: desync at 40, healed from snapshot {base:?}, agreeing from {from:?}; stall {:?} ms",
        r.stall_ms
    );
}

/// A desync before the first agreed snapshot heals from the setup's world
/// and the whole tail.
#[test]
fn a_desync_before_any_snapshot_heals_from_the_setup() {
    let r = rts(3, 80, 12, 0.0, heal_config(0));
    let snapshot = r.events.iter().find_map(|e| match e {
        RouterEvent::Healing { snapshot, .. } => Some(*snapshot),
        _ => None,
    });
    assert_eq!(snapshot, Some(None));
    let from = r
        .events
        .iter()
        .find_map(|e| match e {
            RouterEvent::Healed { turn, .. } => Some(*turn),
            _ => None,
        })
        .expect("the heal completed");
    let (agreed, disputed) = verdicts_from(&r.events, from);
    assert!(disputed.is_empty(), "{disputed:?}");
    assert_eq!(agreed, (from.0..80).collect::<Vec<_>>());
    assert!(r.finals.iter().all(|f| f == &r.finals[0]), "{:?}", r.finals);
}

/// Two players: no majority, so nobody is healed. The report says the heal
/// was refused; the match plays to its end as with `continue` (the two
/// worlds stay apart).
#[test]
fn two_players_refuse_the_heal_and_play_on() {
    let r = rts(2, 80, 30, 0.0, heal_config(10));
    let rep = report(&r.events);
    assert!(rep.no_majority);
    assert!(
        rep.notes
            .iter()
            .any(|n| n.starts_with("heal refused: no majority")),
        "{:?}",
        rep.notes
    );
    assert!(
        !r.events
            .iter()
            .any(|e| matches!(e, RouterEvent::Healing { .. } | RouterEvent::Healed { .. }))
    );
    assert!(r.ends.iter().all(|e| *e == Some(EndReason::Completed)));
    let (_, disputed) = verdicts_from(&r.events, Turn(30));
    assert!(disputed.contains(&79), "{disputed:?}");
    assert_ne!(r.finals[0].1, r.finals[1].1);
}
