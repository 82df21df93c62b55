//! Agreed snapshots under attack, at the router: players that never upload,
//! upload garbage under the right hash or lie about their hash after every
//! heal, and receivers whose restore fails.

use super::scripted_match::*;
use super::*;
use lockstep::low_level::proto::Rejoin;
use sim::Turn;
use std::collections::BTreeSet;
use std::sync::Arc;

/// With 2 or 4 players, the seat the relay used to ask every time (1)
/// never uploads: the relay asks every live player in turn and skips the
/// one whose upload failed, so snapshots are agreed all match long and a
/// spectator arriving after 450 turns (past the 400-turn tail) is admitted
/// with a recent snapshot instead of `NoSnapshot`. With one player the
/// only player is asked again.
#[test]
fn a_player_that_never_uploads_is_skipped_and_every_live_player_is_asked() {
    for n in [2usize, 4] {
        let mut uploads = vec![Uploads::Honest; n];
        uploads[1] = Uploads::Never;
        let mut m = Match::start(config(10), &uploads);
        m.run(450);
        let asked: BTreeSet<PlayerId> = m.requests.iter().map(|r| r.1).collect();
        let all: BTreeSet<PlayerId> = (0..n as u8).map(PlayerId).collect();
        assert_eq!(asked, all, "{n} players: {:?}", m.requests);
        // Asked once, failed, then skipped while others can upload.
        let silent = m.requests.iter().filter(|r| r.1 == PlayerId(1)).count();
        assert_eq!(silent, 1, "{n} players: {:?}", m.requests);
        let got = m.spectate(100);
        let (snapshot, bytes) = resumed(&got);
        let (turn, hash, _) = snapshot.unwrap_or_else(|| panic!("{n} players: {got:?}"));
        assert!(turn >= Turn(420), "{n} players: snapshot of {turn:?}");
        assert_eq!((hash, bytes), (world_hash(turn), true_snapshot(turn)));
    }
    let mut m = Match::start(config(10), &[Uploads::Never]);
    m.run(100);
    assert!(m.requests.len() >= 2, "{:?}", m.requests);
}

/// What a receiver restores from the messages it got since a `Resume` or
/// `Reoffer`: the last base announced and the chunk bytes after it.
fn last_offer(got: &[ToPeer]) -> Option<(Offer, Vec<u8>)> {
    let at = got
        .iter()
        .rposition(|m| matches!(m, ToPeer::Resume(_) | ToPeer::Reoffer(_)))?;
    let base = match &got[at] {
        ToPeer::Resume(r) => r.snapshot,
        ToPeer::Reoffer(r) => r.snapshot,
        _ => None,
    };
    let (_, bytes) = resumed(&got[at..]);
    Some((base, bytes))
}

/// Whether a receiver's world restores from `base` and `bytes`: what the
/// game checks (its world's hash after restoring is the agreed hash).
fn restores(base: Offer, bytes: &[u8]) -> bool {
    base.is_none_or(|(t, h, _)| h == world_hash(t) && bytes == true_snapshot(t))
}

/// Player 0 uploads garbage under the right declared hash: the relay agrees
/// it (it cannot check bytes), a spectator and a rejoining player are sent
/// it and their restores fail. Both keep their place: the relay asks
/// another player for a replacement at once (not at the next 10th turn),
/// sends them that one, the rejoiner catches up and counts again, and
/// player 0 is not asked again while the others can upload.
#[test]
fn a_garbage_snapshot_costs_its_receivers_only_time_and_its_uploader_its_turn() {
    let uploads = [Uploads::Garbage, Uploads::Honest, Uploads::Honest];
    let mut m = Match::start(config(10), &uploads);
    m.run(15);
    assert_eq!(m.requests, vec![(Turn(10), PlayerId(0))]);
    assert_eq!(m.r.counters().snapshots_agreed, 1);
    // A spectator gets the garbage and reports it.
    let got = m.spectate(100);
    let (base, bytes) = last_offer(&got).unwrap();
    assert_eq!(base.map(|b| b.0), Some(Turn(10)));
    assert!(!restores(base, &bytes));
    m.send(100, &ToRelay::SnapshotFailed { turn: Turn(10) });
    // Player 2 drops and comes back into its slot: the garbage too.
    m.gone.insert(ConnId(2));
    m.r.handle_disconnected(m.now, ConnId(2));
    m.act();
    let secret = m.r.config().rejoin.secret(
        MatchId(1),
        Some(m.r.config().rejoin.match_nonce(MatchId(1), "m")),
        "m",
        PlayerId(2),
    );
    m.connect(9);
    let rejoin = ToRelay::Rejoin(Rejoin {
        join: join(3),
        player: PlayerId(2),
        secret,
    });
    m.send(9, &rejoin);
    m.act();
    let (base, bytes) = last_offer(m.inbox(9, 0)).unwrap();
    assert_eq!(base.map(|b| b.0), Some(Turn(10)));
    assert!(!restores(base, &bytes));
    m.send(9, &ToRelay::SnapshotFailed { turn: Turn(10) });
    let before = (m.inbox_len(100), m.inbox_len(9));
    // The next turn's request goes to player 1, whose upload is agreed.
    m.run(3);
    assert_eq!(m.requests.len(), 2, "{:?}", m.requests);
    let (turn, asked) = m.requests[1];
    assert_eq!(asked, PlayerId(1));
    assert!(
        turn < Turn(20),
        "asked at {turn:?}, not at the next 10th turn"
    );
    assert_eq!(m.r.counters().snapshot_restores_failed, 2);
    for conn in [100, 9] {
        let from = if conn == 100 { before.0 } else { before.1 };
        let got = m.inbox(conn, from);
        let (base, bytes) = last_offer(got).unwrap_or_else(|| panic!("{conn}: {got:?}"));
        assert_eq!(base.map(|b| b.0), Some(turn), "{conn}");
        assert!(restores(base, &bytes), "{conn}");
        assert!(
            !got.iter().any(|m| matches!(m, ToPeer::Rejected { .. })),
            "{conn}: {got:?}"
        );
    }
    // The rejoiner's tail after the new base, then it catches up and counts.
    let got = m.inbox(9, before.1);
    let reoffered = got
        .iter()
        .position(|m| matches!(m, ToPeer::Reoffer(_)))
        .unwrap();
    let tail: Vec<Turn> = got[reoffered..]
        .iter()
        .filter_map(|m| match m {
            ToPeer::Bundle(b) => Some(b.turn),
            _ => None,
        })
        .collect();
    assert_eq!(tail.first(), Some(&turn.next()), "{tail:?}");
    let last = *tail.last().unwrap();
    m.send(9, &ToRelay::CaughtUp { turn: last });
    let rejoined = std::iter::from_fn(|| m.r.poll_event())
        .any(|e| matches!(e, RouterEvent::Rejoined { player, .. } if player == PlayerId(2)));
    assert!(rejoined);
    // Player 0 is skipped from now on.
    m.run(60);
    assert!(
        m.requests[1..].iter().all(|r| r.1 != PlayerId(0)),
        "{:?}",
        m.requests
    );
    // A second report of the same restore is refused; an unknown turn too.
    let bad = m.r.counters().bad_state;
    m.send(100, &ToRelay::SnapshotFailed { turn: Turn(3) });
    assert_eq!(m.r.counters().bad_state, bad + 1);
}

/// `--on-desync heal`: player 3 of 4 reports a wrong hash for every turn,
/// so every heal is followed by a new desync. It is healed as often as the
/// default limit allows (3 times a minute), then the next desync drops it:
/// `too_many_heals`, its slot given up, the reason in the report's notes
/// (the replay and the log carry both); the others play on and agree.
#[test]
fn a_player_that_desyncs_after_every_heal_is_dropped_past_the_heal_limit() {
    let mut config = config(10);
    config.on_desync = crate::config::DesyncPolicy::Heal;
    // Nobody answers the section probe: the report goes out at its deadline.
    config.forensics_timeout = Duration::from_millis(300);
    let mut m = Match::start(config, &[Uploads::Honest; 4]);
    m.run(20);
    m.liars.insert(ConnId(3));
    let mut events = Vec::new();
    for _ in 0..600 {
        m.run(1);
        events.extend(std::iter::from_fn(|| m.r.poll_event()));
    }
    let heals = events
        .iter()
        .filter(|e| matches!(e, RouterEvent::Healing { players, .. } if players == &[PlayerId(3)]))
        .count();
    assert_eq!(heals, 3, "healed within a minute of match time");
    let dropped: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            RouterEvent::Dropped { player, reason, .. } if *player == PlayerId(3) => {
                Some(reason.to_string())
            }
            _ => None,
        })
        .collect();
    assert_eq!(dropped, vec!["too_many_heals".to_owned()]);
    let noted = events.iter().any(|e| match e {
        RouterEvent::DesyncReport { report, .. } => report
            .notes
            .iter()
            .any(|n| n.starts_with("heal refused: P3") && n.contains("too_many_heals")),
        _ => false,
    });
    assert!(noted);
    // Its slot is given up: no rejoin into it.
    let secret = m.r.config().rejoin.secret(
        MatchId(1),
        Some(m.r.config().rejoin.match_nonce(MatchId(1), "m")),
        "m",
        PlayerId(3),
    );
    m.connect(9);
    let rejoin = ToRelay::Rejoin(Rejoin {
        join: join(4),
        player: PlayerId(3),
        secret,
    });
    m.send(9, &rejoin);
    m.act();
    assert!(
        m.inbox(9, 0)
            .iter()
            .any(|m| matches!(m, ToPeer::Rejected { .. })),
        "{:?}",
        m.inbox(9, 0)
    );
    // The others play on: the last turns agree.
    let agreed = events
        .iter()
        .filter(|e| matches!(e, RouterEvent::HashAgreed { .. }))
        .count();
    assert!(agreed > 400, "{agreed} turns agreed");
}

/// A spectator that leaves and spectates again 120 times a second on one
/// connection (never acking what it is sent) gets one copy of the snapshot
/// queued, not one per request: the copy in flight serves them all.
#[test]
fn a_spectator_asking_again_gets_no_second_snapshot_copy() {
    let mut m = Match::start(config(10), &[Uploads::Honest; 3]);
    m.run(15);
    let got = m.spectate(100);
    let (base, bytes) = resumed(&got);
    let (turn, _, _) = base.unwrap();
    assert_eq!(bytes, true_snapshot(turn));
    let size = bytes.len() as u64;
    for _ in 0..10 {
        for _ in 0..12 {
            m.send(100, &ToRelay::Leave);
            m.send(100, &ToRelay::Spectate(join(3)));
        }
        m.run(1);
    }
    let chunks: usize = m
        .inbox(100, 0)
        .iter()
        .filter_map(|m| match m {
            ToPeer::SnapshotChunk(c) => Some(c.bytes.len()),
            _ => None,
        })
        .sum();
    assert_eq!(chunks as u64, size);
    assert_eq!(m.r.counters().snapshot_bytes_out, size);
    assert_eq!(m.r.counters().snapshot_copies_refused, 120);
    // Once its connection closes, a new one gets its own copy.
    m.r.handle_disconnected(m.now, ConnId(100));
    let got = m.spectate(101);
    let (base, bytes) = resumed(&got);
    assert_eq!(bytes, true_snapshot(base.unwrap().0));
}

/// Many receivers of one snapshot share the match's one copy: the router
/// queues no chunk for them, each stream hands out a chunk only when the
/// driver takes it (a receiver whose bulk path is full costs nothing more),
/// and every stream points at the agreed base's bytes.
#[test]
fn every_receiver_streams_the_snapshot_from_the_matchs_one_copy() {
    let mut config = config(10);
    config.rejoin.max_spectators = 8;
    let mut m = Match::start(config, &[Uploads::Honest; 3]);
    m.run(15);
    for conn in 100..108 {
        m.connect(conn);
        m.send(conn, &ToRelay::Spectate(join(3)));
    }
    while let Some((conn, _, b)) = m.r.poll_outgoing() {
        let msg = ToPeer::decode(&b).unwrap();
        assert!(
            !matches!(msg, ToPeer::SnapshotChunk(_)),
            "no chunk is queued per receiver"
        );
        m.got.entry(conn).or_default().push(msg);
    }
    let receivers = m.r.snapshot_receivers();
    assert_eq!(receivers, (100..108).map(ConnId).collect::<Vec<_>>());
    // A driver with no room takes nothing, and the stream waits.
    for &conn in &receivers {
        m.r.stream_snapshot(conn, |_| false);
    }
    assert_eq!(m.r.snapshot_receivers().len(), 8);
    let shared: Vec<_> =
        m.r.out
            .in_flight
            .values()
            .map(|s| s.bytes.clone())
            .collect();
    assert!(shared.windows(2).all(|w| Arc::ptr_eq(&w[0], &w[1])));
    // The base, the spectator base (the same snapshot, no delay here) and
    // eight streams hold the one allocation.
    assert_eq!(Arc::strong_count(&shared[0]), 2 + 8 + shared.len());
    // Room again: each gets the whole snapshot, then is done.
    m.drain();
    assert!(m.r.snapshot_receivers().is_empty());
    let (base, bytes) = resumed(m.inbox(105, 0));
    assert_eq!(bytes, true_snapshot(base.unwrap().0));
}

/// With the snapshots' share of the memory budget full no player is asked
/// for a snapshot upload (it would hold a second snapshot beside the base)
/// while the match plays on; with only the other parts full, and below the
/// budget again, uploads are asked for at the next interval.
#[test]
fn at_the_memory_budget_no_upload_is_asked_for_and_turns_go_on() {
    use crate::limits::MemoryPressure;
    let mut m = Match::start(config(10), &[Uploads::Honest, Uploads::Honest]);
    m.r.set_memory(MemoryPressure {
        snapshots: true,
        ..MemoryPressure::default()
    });
    let closed = m.r.counters().turns_closed;
    m.run(60);
    assert!(
        m.requests.is_empty(),
        "asked at the budget: {:?}",
        m.requests
    );
    assert!(
        m.r.counters().turns_closed >= closed + 50,
        "turns kept closing"
    );
    // Connections and recordings full: snapshots still have room.
    m.r.set_memory(MemoryPressure {
        snapshots: false,
        ..MemoryPressure::ALL
    });
    m.run(30);
    assert!(
        !m.requests.is_empty(),
        "never asked with snapshots' share free"
    );
}

/// Before: a new spectator got the latest agreed snapshot, as little as
/// half a second old against a 3 s spectator delay, so it saw the match
/// seconds ahead of its delay. Now, joining at any turn, it starts from a
/// snapshot whose turn closed at least the delay ago, or from the setup's
/// world (and every bundle from the first turn) while none is that old.
/// The older copy the relay keeps for that counts in the snapshot memory.
#[test]
fn a_new_spectator_never_starts_from_a_snapshot_newer_than_the_delay() {
    let mut config = config(10);
    config.rejoin.spectator_delay = Duration::from_secs(3);
    let delay = config.rejoin.spectator_delay;
    let mut m = Match::start(config, &[Uploads::Honest; 2]);
    // When each turn closed: its bundle reached player 0.
    let mut closed: BTreeMap<Turn, Instant> = BTreeMap::new();
    let mut seen = 0;
    let mut from_snapshot = 0;
    let mut extra_copy_counted = false;
    for conn in 100..200 {
        m.run(1);
        for msg in m.inbox(0, seen) {
            if let ToPeer::Bundle(b) = msg {
                closed.entry(b.turn).or_insert(m.now);
            }
        }
        seen = m.inbox_len(0);
        let got = m.spectate(conn);
        let (snapshot, bytes) = resumed(&got);
        match snapshot {
            Some((turn, hash, _)) => {
                let at = closed[&turn];
                assert!(
                    m.now.saturating_since(at) >= delay,
                    "at {:?} a snapshot of {turn:?}, closed at {at:?}",
                    m.now
                );
                assert_eq!((hash, bytes), (world_hash(turn), true_snapshot(turn)));
                from_snapshot += 1;
            }
            None => {
                // Only while the first snapshot (turn 10) is not that old.
                assert!(
                    closed
                        .get(&Turn(10))
                        .is_none_or(|&at| m.now.saturating_since(at) < delay),
                    "at {:?}: {got:?}",
                    m.now
                );
                // The setup's world: every bundle from the first turn on,
                // as soon as they are the delay old.
                let first = got.iter().find_map(|m| match m {
                    ToPeer::Bundle(b) => Some(b.turn),
                    _ => None,
                });
                if m.now.saturating_since(closed[&Turn(0)]) >= delay {
                    assert_eq!(first, Some(Turn(0)), "at {:?}: {got:?}", m.now);
                } else {
                    assert_eq!(first, None, "at {:?}: {got:?}", m.now);
                }
            }
        }
        // The base (honest players: every 10th turn is agreed in order)
        // and the spectators' older snapshot are two copies, both counted;
        // the waiting candidate may be a third.
        let (snap, ..) = m.r.snapshot_memory();
        let size = true_snapshot(Turn(0)).len();
        let latest = Turn(10 * m.r.counters().snapshots_agreed as u32);
        if let Some((turn, _, _)) = snapshot
            && turn < latest
        {
            assert!((2 * size..=3 * size).contains(&snap), "{snap} bytes");
            extra_copy_counted = true;
        }
        m.send(conn, &ToRelay::Leave);
    }
    assert!(from_snapshot > 50, "{from_snapshot} joins from a snapshot");
    assert!(extra_copy_counted, "the older copy counts in the memory");
}
