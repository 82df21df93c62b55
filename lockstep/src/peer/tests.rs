//! The peer core on its own: relay messages handed straight to its session
//! (the transport is covered elsewhere), a virtual clock, both shipped games.
#![allow(clippy::unwrap_used)] // tests may unwrap

use super::*;
use crate::Duration;
use crate::proto::{Bundle, EndReason, PlayerInfo, Start, ToPeer, ToRelay};
use sim::arena::Arena;
use sim::game::World;
use sim::{MatchSetup, StateHash};

const RELAY: ([u8; 4], u16) = ([127, 0, 0, 1], 7000);

fn start_msg(players: u8, last: u32) -> Vec<u8> {
    start_msg_as(PlayerId(0), players, last)
}

/// The relay's `Start` for a match of `players` ending after turn `last`,
/// seating this peer as `you`.
pub(super) fn start_msg_as(you: PlayerId, players: u8, last: u32) -> Vec<u8> {
    ToPeer::Start(Start {
        your_player: you,
        setup: MatchSetup {
            seed: 5,
            players,
            ticks_per_turn: 2,
        },
        turn_length_us: 100_000,
        players: (0..players)
            .map(|i| PlayerInfo {
                id: PlayerId(i),
                name: format!("p{i}"),
            })
            .collect(),
        input_delay: 3,
        first_turn: Turn(0),
        last_turn: Some(Turn(last)),
    })
    .to_bytes()
}

fn bundle<C: serde::Serialize>(turn: u32, player: u8, commands: &[C]) -> Vec<u8> {
    let mut bytes = Vec::new();
    sim::encode_commands(commands, &mut bytes);
    ToPeer::Bundle(Bundle {
        turn: Turn(turn),
        inputs: vec![(PlayerId(player), bytes)],
        notices: Vec::new(),
        tag: None,
    })
    .to_bytes()
}

/// Hands the peer's session a relay message (what the transport would deliver).
fn deliver<S: Simulation>(peer: &mut Peer<S>, now: Instant, bytes: &[u8]) {
    peer.game.handle_message(now, bytes);
}

fn events<S: Simulation>(peer: &mut Peer<S>) -> Vec<PeerEvent<S::Command>> {
    std::iter::from_fn(|| peer.poll_event()).collect()
}

/// A `TurnReady` steps the world as it is polled, not before: with two
/// bundles waiting, the world after polling the first is the world of the
/// first turn, and each event carries the decoded inputs and that turn's
/// hash, which matches an independent re-simulation (of the arena: the peer
/// is generic).
#[test]
fn turn_ready_steps_the_world_as_it_is_polled() {
    let t0 = Instant::from_millis(1_000);
    let mut peer = PeerBuilder::<Arena>::new("m", 2)
        .build(t0, RELAY.into())
        .unwrap();
    let cmd = sim::arena::Command::Fire;
    deliver(&mut peer, t0, &start_msg(2, 9));
    deliver(&mut peer, t0, &bundle(0, 1, &[cmd]));
    deliver(&mut peer, t0, &bundle(1, 0, &[cmd]));
    let later = t0 + Duration::from_secs(10);
    peer.handle_timeout(later);
    let (player, setup) = loop {
        match peer.poll_event() {
            Some(PeerEvent::Started { player, setup, .. }) => break (player, setup),
            Some(PeerEvent::TurnReady { .. }) | None => panic!("the start comes first"),
            Some(_) => {}
        }
    };
    assert_eq!(player, PlayerId(0));
    let mut expected = Arena::new(&setup);
    let next_turn = |peer: &mut Peer<Arena>| loop {
        match peer.poll_event() {
            Some(PeerEvent::TurnReady { turn, inputs, hash }) => break (turn, inputs, hash),
            Some(_) => {}
            None => panic!("no turn"),
        }
    };
    let (turn, inputs, hash) = next_turn(&mut peer);
    assert_eq!(turn, Turn(0));
    assert_eq!(inputs.len(), 1);
    assert_eq!(inputs[0].player, PlayerId(1));
    expected.step(Turn(0), &inputs);
    assert_eq!(hash, expected.state_hash());
    assert_eq!(
        peer.world().unwrap().state_hash(),
        hash,
        "turn 1 is not simulated before its event is polled"
    );
    let (turn, inputs, hash) = next_turn(&mut peer);
    assert_eq!(turn, Turn(1));
    expected.step(Turn(1), &inputs);
    assert_eq!(hash, expected.state_hash());
    let s = peer.summary(later);
    assert_eq!((s.final_turn, s.final_hash), (Some(1), Some(hash.to_hex())));
}

/// The fault switch perturbs exactly the given turn of any game: the hashes
/// before it agree with an honest peer's, from it on they differ. The fault
/// is a closure that captures its state (here a counter the test reads).
#[test]
fn the_fault_switch_desyncs_from_its_turn_on() {
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let seen = std::sync::Arc::clone(&calls);
    let break_arena: Fault<Arena> = Box::new(move |w: &mut Arena, t: Turn| {
        seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        w.perturb(t.0);
    });
    let t0 = Instant::from_millis(1);
    let hashes = |fault: Option<Fault<Arena>>| {
        let mut b = PeerBuilder::<Arena>::new("m", 1);
        if let Some(f) = fault {
            b = b.with_fault(Turn(2), f);
        }
        let mut peer = b.build(t0, RELAY.into()).unwrap();
        deliver(&mut peer, t0, &start_msg(1, 3));
        for t in 0..4 {
            deliver(&mut peer, t0, &bundle::<sim::arena::Command>(t, 0, &[]));
        }
        peer.handle_timeout(t0 + Duration::from_secs(10));
        events(&mut peer)
            .into_iter()
            .filter_map(|e| match e {
                PeerEvent::TurnReady { hash, .. } => Some(hash),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    let honest = hashes(None);
    let faulty = hashes(Some(break_arena));
    assert_eq!(
        calls.load(std::sync::atomic::Ordering::Relaxed),
        1,
        "once, at its turn"
    );
    assert_eq!(honest.len(), 4);
    assert_eq!(honest[..2], faulty[..2]);
    assert_ne!(honest[2], faulty[2]);
    assert_ne!(honest[3], faulty[3]);
}

/// The recording holds every turn, a keyframe every K turns as configured,
/// and a trailer once the match ended; it verifies by re-simulation.
#[test]
fn the_recording_has_keyframes_every_k_turns_and_verifies() {
    let dir = std::env::temp_dir().join(format!("peer-keyframes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("me.lsr");
    let t0 = Instant::from_millis(1);
    let mut peer = PeerBuilder::<World>::new("m", 1)
        .with_record(&path)
        .with_keyframes(4)
        .build(t0, RELAY.into())
        .unwrap();
    deliver(&mut peer, t0, &start_msg(1, 9));
    for t in 0..10 {
        deliver(&mut peer, t0, &bundle::<sim::game::Command>(t, 0, &[]));
    }
    let end = ToPeer::MatchEnd {
        turn: Some(Turn(9)),
        reason: EndReason::Completed,
    };
    deliver(&mut peer, t0, &end.to_bytes());
    peer.handle_timeout(t0 + Duration::from_secs(10));
    let evs = events(&mut peer);
    assert!(matches!(
        evs.last(),
        Some(PeerEvent::MatchEnded {
            reason: EndReason::Completed,
            ..
        })
    ));
    let records: Vec<replays::Record> = replays::Reader::open(&path)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let keyframes: Vec<u32> = records
        .iter()
        .filter_map(|r| match r {
            replays::Record::Keyframe { turn, .. } => Some(turn.0),
            _ => None,
        })
        .collect();
    assert_eq!(keyframes, vec![3, 7]);
    assert!(matches!(
        records.last(),
        Some(replays::Record::Trailer { .. })
    ));
    let report =
        replays::verify::<World, _>(replays::Reader::open(&path).unwrap(), |_| {}).unwrap();
    assert!(report.verified(), "{report:?}");
    assert_eq!(report.turns, 10);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The recording's start time comes from the wall clock the driver
/// anchored, advanced by the peer's clock to the moment the match began.
#[test]
fn the_recording_start_time_comes_from_the_anchored_wall_clock() {
    let dir = std::env::temp_dir().join(format!("peer-unix-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("me.lsr");
    let t0 = Instant::from_millis(1_000);
    let mut peer = PeerBuilder::<World>::new("m", 1)
        .with_turns(10)
        .with_record(&path)
        .build(t0, RELAY.into())
        .unwrap();
    peer.set_unix_time(t0, 1_700_000_000_000);
    let started = t0 + Duration::from_millis(2_500);
    peer.handle_timeout(started);
    deliver(&mut peer, started, &start_msg(1, 9));
    let _ = events(&mut peer);
    peer.close_recording();
    let reader = replays::Reader::open(&path).unwrap();
    assert_eq!(reader.header().start_time_unix_ms, 1_700_000_002_500);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A transport server that closes every connection as soon as it is made.
struct Slammer {
    server: crate::transport::Server,
    addr: SocketAddr,
}

impl Endpoint for Slammer {
    fn addr(&self) -> SocketAddr {
        self.addr
    }
    fn pump(&mut self, now: Instant) {
        while let Some(ev) = self.server.poll_event() {
            if let crate::transport::ServerEvent::Connected { conn, .. } = ev {
                self.server.disconnect(conn, now);
            }
        }
    }
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]) {
        self.server.handle_datagram(now, from, bytes);
    }
    fn handle_timeout(&mut self, now: Instant) {
        self.server.handle_timeout(now);
    }
    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<SocketAddr> {
        self.server.poll_transmit(now, buf)
    }
    fn poll_timeout(&mut self) -> Option<Instant> {
        self.server.poll_timeout()
    }
    fn is_done(&self) -> bool {
        true
    }
}

/// A connection the relay closes before the match ended is an event
/// (`ConnectionLost`, once) and the summary's error, not a silent stall; the
/// peer runs under the netsim harness as an endpoint of its own.
#[test]
fn a_connection_closed_before_the_match_ended_is_reported_once() {
    use crate::netsim::{Harness, LinkConfig, Network};
    let relay: SocketAddr = RELAY.into();
    let mut slammer = Slammer {
        server: crate::transport::Server::new(TransportConfig::default(), [1; 32]),
        addr: relay,
    };
    let mut peer = PeerBuilder::<Arena>::new("m", 2)
        .with_local_addr(([127, 0, 0, 1], 7001).into())
        .build(Instant::ZERO, relay)
        .unwrap();
    let mut harness = Harness::new(Network::new(
        1,
        LinkConfig::with_latency(Duration::from_millis(5)),
    ));
    let _ = harness.run_until(
        &mut [&mut slammer as &mut dyn Endpoint, &mut peer],
        Instant::from_millis(5_000),
        |_, _| false,
    );
    let lost: Vec<_> = events(&mut peer)
        .into_iter()
        .filter(|e| matches!(e, PeerEvent::ConnectionLost { .. }))
        .collect();
    assert_eq!(
        lost,
        vec![PeerEvent::ConnectionLost {
            reason: DisconnectReason::Remote
        }]
    );
    assert!(!peer.is_done(), "the session itself never ended");
    let error = peer.summary(harness.now()).error.unwrap();
    assert!(error.contains("connection to the relay ended"), "{error}");
}

/// The recording file is created at build, before the join: an existing
/// file is refused (unless overwriting is asked for), and a file the match
/// never started in is removed when the recording closes.
#[test]
fn the_recording_file_is_created_at_build_and_never_overwritten_by_default() {
    let dir = std::env::temp_dir().join(format!("peer-record-build-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("me.lsr");
    let t0 = Instant::from_millis(1);
    let mut peer = PeerBuilder::<World>::new("m", 2)
        .with_record(&path)
        .build(t0, RELAY.into())
        .unwrap();
    assert!(path.exists(), "created before any message");
    let again = PeerBuilder::<World>::new("m", 2)
        .with_record(&path)
        .build(t0, RELAY.into());
    assert!(
        matches!(&again, Err(crate::builder::BuildError::Record { kind: std::io::ErrorKind::AlreadyExists, path: p, .. }) if *p == path),
        "{again:?}"
    );
    let mut forced = PeerBuilder::<World>::new("m", 2)
        .with_record(&path)
        .with_record_overwrite(true)
        .build(t0, RELAY.into())
        .unwrap();
    forced.close_recording();
    peer.close_recording();
    assert!(!path.exists(), "no match, no file");
    let missing = dir.join("gone").join("me.lsr");
    let err = PeerBuilder::<World>::new("m", 2)
        .with_record(&missing)
        .build(t0, RELAY.into())
        .unwrap_err();
    assert!(
        err.to_string().contains(&missing.display().to_string()),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A spectator (or rejoiner) handed a snapshot that does not restore to the
/// agreed hash (its uploader sent garbage under the right hash) keeps its
/// place instead of leaving: it reports the snapshot, runs no turn from it,
/// and restores the relay's replacement, after which it simulates exactly
/// what an independent world does.
#[test]
fn a_garbage_snapshot_is_reported_and_the_replacement_restores() {
    let t0 = Instant::from_millis(1_000);
    let mut gs = PeerBuilder::<World>::new("m", 2)
        .with_spectate()
        .build_session(t0)
        .unwrap();
    while gs.poll_outgoing().is_some() {}
    let start = match ToPeer::decode(&start_msg(2, 100)) {
        Ok(ToPeer::Start(s)) => s,
        other => panic!("{other:?}"),
    };
    let mut truth = World::new(&start.setup);
    for t in 0..=4 {
        truth.step(Turn(t), &[]);
    }
    let (hash, bytes) = (truth.state_hash(), truth.snapshot());
    let garbage = vec![0xA5; 64];
    let resume = ToPeer::Resume(crate::proto::Resume {
        start: start.clone(),
        elapsed_us: 2_000_000,
        delay: 3,
        snapshot: Some((Turn(4), hash, garbage.len() as u32)),
        live: Turn(10),
        spectator: true,
    });
    let chunk = |bytes: &[u8]| {
        ToPeer::SnapshotChunk(crate::proto::SnapshotChunk {
            turn: Turn(4),
            hash,
            total: bytes.len() as u32,
            offset: 0,
            bytes: bytes.to_vec(),
        })
        .to_bytes()
    };
    gs.handle_message(t0, &resume.to_bytes());
    for t in 5..10 {
        gs.handle_message(t0, &bundle::<sim::game::Command>(t, 1, &[]));
    }
    gs.handle_message(t0, &chunk(&garbage));
    let later = t0 + Duration::from_secs(1);
    gs.handle_timeout(later);
    let evs: Vec<_> = std::iter::from_fn(|| gs.poll_event()).collect();
    assert!(
        !evs.iter()
            .any(|e| matches!(e, PeerEvent::TurnReady { .. } | PeerEvent::Restored { .. })),
        "{evs:?}"
    );
    let out: Vec<ToRelay> = std::iter::from_fn(|| gs.poll_outgoing())
        .filter_map(|(_, b)| ToRelay::decode(&b).ok())
        .collect();
    assert!(!out.contains(&ToRelay::Leave), "{out:?}");
    assert!(!gs.is_done());
    assert!(out.contains(&ToRelay::SnapshotFailed { turn: Turn(4) }));
    // The relay's replacement (here the true snapshot of the same turn).
    let reoffer = ToPeer::Reoffer(crate::proto::Reoffer {
        snapshot: Some((Turn(4), hash, bytes.len() as u32)),
        live: Turn(10),
    });
    gs.handle_message(later, &reoffer.to_bytes());
    gs.handle_message(later, &chunk(&bytes));
    for t in 5..10 {
        gs.handle_message(later, &bundle::<sim::game::Command>(t, 1, &[]));
    }
    gs.handle_timeout(later + Duration::from_secs(1));
    let evs: Vec<_> = std::iter::from_fn(|| gs.poll_event()).collect();
    assert!(
        matches!(
            evs.first(),
            Some(PeerEvent::Restored {
                turn: Some(Turn(4))
            })
        ),
        "{evs:?}"
    );
    let hashes: Vec<(Turn, StateHash)> = evs
        .iter()
        .filter_map(|e| match e {
            PeerEvent::TurnReady { turn, hash, .. } => Some((*turn, *hash)),
            _ => None,
        })
        .collect();
    let expected: Vec<(Turn, StateHash)> = (5..10)
        .map(|t| {
            truth.step(Turn(t), &[]);
            (Turn(t), truth.state_hash())
        })
        .collect();
    assert_eq!(hashes, expected);
}

/// A spectator has no slot and submits nothing, whatever its loop does: the
/// guide's peer loop run as a spectator once submitted as player 0 and
/// failed after the spectate window with "the match is not running". Now
/// `player()` is `None` before and after the start, `submit` is refused with
/// a typed error (empty or not), and no input ever leaves the peer.
#[test]
fn a_spectator_has_no_player_and_cannot_submit() {
    let t0 = Instant::from_millis(1_000);
    let mut gs = PeerBuilder::<World>::new("m", 2)
        .with_spectate()
        .build_session(t0)
        .unwrap();
    while gs.poll_outgoing().is_some() {}
    let start = match ToPeer::decode(&start_msg(2, 100)) {
        Ok(ToPeer::Start(s)) => s,
        other => panic!("{other:?}"),
    };
    let resume = ToPeer::Resume(crate::proto::Resume {
        start,
        elapsed_us: 0,
        delay: 3,
        snapshot: None,
        live: Turn(3),
        spectator: true,
    });
    gs.handle_message(t0, &resume.to_bytes());
    for t in 0..3 {
        gs.handle_message(t0, &bundle::<sim::game::Command>(t, 1, &[]));
    }
    gs.handle_timeout(t0 + Duration::from_secs(1));
    let evs: Vec<_> = std::iter::from_fn(|| gs.poll_event()).collect();
    assert!(
        evs.iter().any(|e| matches!(e, PeerEvent::TurnReady { .. })),
        "the spectator watches: {evs:?}"
    );
    assert!(gs.world().is_some());
    assert_eq!(gs.player(), None, "a spectator has no slot");
    let idle = sim::game::Command::Stop { units: Vec::new() };
    assert_eq!(
        gs.submit(t0, &[idle]),
        Err(crate::session::SessionError::Spectating)
    );
    assert_eq!(
        gs.submit(t0, &[]),
        Err(crate::session::SessionError::Spectating)
    );
    let out: Vec<ToRelay> = std::iter::from_fn(|| gs.poll_outgoing())
        .filter_map(|(_, b)| ToRelay::decode(&b).ok())
        .collect();
    assert!(
        !out.iter().any(|m| matches!(m, ToRelay::Input { .. })),
        "{out:?}"
    );
}

/// A game whose rules hash depends on the ticks per turn, to show the
/// fingerprint check at the start.
#[derive(Clone, Debug)]
struct TickRules(u16);

impl Simulation for TickRules {
    type Command = u8;
    const GAME_ID: &'static str = "tick-rules";
    const GAME_VERSION: u32 = 1;
    fn new(setup: &MatchSetup) -> Self {
        Self(setup.ticks_per_turn)
    }
    fn rules_hash(&self) -> StateHash {
        sim::hash::digest_of(&self.0, &mut Vec::new())
    }
    fn step(&mut self, _: Turn, _: &[sim::Stamped<u8>]) {}
    fn state_hash(&self) -> StateHash {
        self.rules_hash()
    }
    fn section_hashes(&self) -> Vec<sim::SectionHash> {
        Vec::new()
    }
    fn snapshot(&self) -> Vec<u8> {
        self.0.to_le_bytes().to_vec()
    }
    fn restore(bytes: &[u8]) -> Result<Self, sim::SnapshotError> {
        let b: [u8; 2] = bytes
            .try_into()
            .map_err(|_| sim::SnapshotError::Invalid("len".into()))?;
        Ok(Self(u16::from_le_bytes(b)))
    }
}

/// `ticks_per_turn` has one default for the relay and the builder, and a
/// peer whose rules fingerprint was computed for other ticks than the
/// relay's setup says (2 here) leaves at the start with a typed refusal
/// naming the relay's value, instead of playing a match whose recordings
/// would not verify; with matching ticks it plays.
#[test]
fn a_peer_built_for_other_ticks_than_the_relays_leaves_at_the_start() {
    assert_eq!(
        crate::peer::DEFAULT_TICKS_PER_TURN,
        2,
        "the relay's default (relay::config re-exports it)"
    );
    let t0 = Instant::from_millis(1);
    let run = |ticks: u16| {
        let mut peer = PeerBuilder::<TickRules>::new("m", 1)
            .with_ticks_per_turn(ticks)
            .build(t0, RELAY.into())
            .unwrap();
        deliver(&mut peer, t0, &start_msg(1, 3));
        deliver(&mut peer, t0, &bundle::<u8>(0, 0, &[]));
        peer.handle_timeout(t0 + Duration::from_secs(1));
        let evs = events(&mut peer);
        (evs, peer.is_done())
    };
    let (evs, done) = run(3);
    assert!(done, "{evs:?}");
    assert!(
        evs.iter().any(|e| matches!(
            e,
            PeerEvent::Refused { reason: crate::proto::RejectReason::RulesDiffer, detail: Some(d) }
                if d.contains("runs 2 ticks per turn")
        )),
        "{evs:?}"
    );
    assert!(!evs.iter().any(|e| matches!(e, PeerEvent::TurnReady { .. })));
    let (evs, _) = run(crate::peer::DEFAULT_TICKS_PER_TURN);
    assert!(
        evs.iter().any(|e| matches!(e, PeerEvent::TurnReady { .. })),
        "{evs:?}"
    );
}
