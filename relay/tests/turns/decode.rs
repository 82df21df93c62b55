//! Hostile turn entries end to end: peers of the reference game, a router
//! and its recorder; the recording must verify against what the peers
//! simulated, because peers and `replays::verify` decode a turn the one same
//! way (`sim::decode_turn` with the match's player count).

use super::*;
use lockstep::low_level::proto::ToRelay;
use sim::Simulation;
use sim::game::{Command, World};

/// The reference RTS with its seeded bot, as a game of the session-level
/// pipe harness: this test needs the harness's hostile-relay hook
/// (`Sim::tamper`), which the generic peer's transport-level runs do not
/// have.
struct Rts {
    world: World,
    bot: sim::bot::Bot,
    commands: u64,
}

fn rts(setup: &sim::MatchSetup, me: PlayerId, seed: u64) -> Box<dyn TestGame> {
    Box::new(Rts {
        world: World::new(setup),
        bot: sim::bot::Bot::new(me, seed, 300),
        commands: 0,
    })
}

impl TestGame for Rts {
    fn step(&mut self, turn: Turn, inputs: &[(PlayerId, Vec<u8>)]) {
        let players = self.world.setup().players;
        let commands = sim::decode_turn::<Command>(inputs, players).commands;
        self.commands += commands.len() as u64;
        self.world.step(turn, &commands);
    }
    fn hash(&self) -> StateHash {
        self.world.state_hash()
    }
    fn sections(&self) -> Vec<SectionHash> {
        self.world.section_hashes()
    }
    fn perturb(&mut self, me: PlayerId) {
        self.world.perturb(u32::from(me.0) * 7 + 3);
    }
    fn think(&mut self, turn: Turn, _rng: &mut Rng) -> Option<Vec<u8>> {
        let commands = self.bot.think(&self.world, turn);
        (!commands.is_empty()).then(|| {
            let mut bytes = Vec::new();
            sim::encode_commands(&commands, &mut bytes);
            bytes
        })
    }
    fn commands(&self) -> u64 {
        self.commands
    }
}

/// One hostile player's extra inputs: undecodable bytes, a command list with
/// trailing bytes and commands for units it does not own, each as its own
/// chunk, for a turn a little ahead (the relay stamps and records them all).
fn junk(now: Instant, step: u64) -> Vec<Vec<u8>> {
    if now < Instant::from_millis(500) || step % 5 != 0 {
        return Vec::new();
    }
    let near = Turn(u32::try_from(now.as_micros() / 100_000).unwrap_or(0));
    let mut trailing = Vec::new();
    sim::encode_commands(&[Command::Stop { units: vec![1] }], &mut trailing);
    trailing.push(0);
    let mut foreign = Vec::new();
    sim::encode_commands(&[Command::Stop { units: vec![2, 3] }], &mut foreign);
    vec![
        ToRelay::Input {
            turn: Turn(near.0 + 3),
            commands: vec![vec![0xff, 0xff, 0x01], trailing, foreign],
        }
        .to_bytes(),
    ]
}

/// A hostile relay's additions to every bundle: entries stamped with players
/// outside a three-player match, and the entries in reverse order.
fn outsiders(b: &mut Bundle) {
    let mut stop = Vec::new();
    sim::encode_commands(&[Command::Stop { units: vec![1] }], &mut stop);
    b.inputs.push((PlayerId(3), stop.clone()));
    b.inputs.push((PlayerId(7), stop));
    b.inputs.reverse();
}

/// Records the router's events and verifies the replay as the reference game.
fn record_and_verify(events: &[RouterEvent]) -> replays::VerifyReport {
    let dir = std::env::temp_dir().join(format!("turns-test-{}-decode", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut rec = relay::recorder::Recorder::new(&dir, relay::games::known_rules_hash).unwrap();
    let mut done = None;
    for e in events {
        if let Some(r) = rec.handle(1_795_314_600_000, e).unwrap() {
            done = Some(r);
        }
    }
    let reader = replays::Reader::open(&done.unwrap().path).unwrap();
    let report = replays::verify::<World, _>(reader, |_| {}).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    report
}

/// The relay records a hostile player's undecodable and over-long chunks;
/// a hostile relay adds entries of players outside the match to what the
/// peers receive (not to its recording) and reverses their order. Every
/// peer still simulates exactly what the recording re-simulates: the replay
/// verifies turn by turn and counts the same rejected chunks. (Peers that
/// bounded players by the protocol's 8 instead of the match's 3 applied the
/// outsiders' commands, and the recording no longer verified.)
#[test]
fn peers_and_replay_verification_agree_on_hostile_entries() {
    let turns = 60;
    let mut setup = Setup::new(3, turns, 5);
    setup.factory = rts;
    setup.game = (World::GAME_ID, World::GAME_VERSION);
    let mut sim = Sim::new(setup);
    sim.flood = Some((0, junk));
    sim.tamper = Some(outsiders);
    sim.run(Duration::from_secs(60));

    for i in 0..3 {
        assert_eq!(assert_contiguous(&sim, i), turns, "peer {i}");
        assert_eq!(sim.hashes(i), sim.hashes(0), "peer {i}");
        assert!(
            sim.peers[i]
                .executed
                .iter()
                .all(|(_, inputs, _)| inputs.iter().any(|(p, _)| p.0 == 3)),
            "every bundle a peer got held an outsider's entry"
        );
    }
    let report = record_and_verify(&sim.router_events);
    assert!(report.verified(), "{report:?}");
    assert!(report.clean(), "{report:?}");
    assert_eq!(report.turns, turns);
    assert!(report.hashes_checked >= turns, "{report:?}");
    // The garbage reached the recording: two rejected chunks per junk input.
    assert!(report.rejected_inputs >= 10, "{report:?}");
    assert_eq!(report.rejected_inputs % 2, 0, "{report:?}");
    assert_eq!(report.invalid_player_inputs, 0, "{report:?}");
    assert_eq!(
        report.final_hash,
        sim.hashes(0).last().map(|(_, h)| *h),
        "{report:?}"
    );
}

/// One random turn entry: a command list (maybe with a trailing byte) or
/// garbage, stamped with any player up to 9 (a three-player match).
fn random_entry(rng: &mut Rng) -> (PlayerId, Vec<u8>) {
    // Mostly seated players; a quarter anywhere up to 9.
    let bound = if rng.below(4) == 0 { 10 } else { 3 };
    let player = PlayerId(rng.below(bound) as u8);
    let mut bytes = Vec::new();
    match rng.below(4) {
        0 => bytes = (0..rng.below(8)).map(|_| rng.next() as u8).collect(),
        k => {
            let units = (0..rng.below(3)).map(|_| rng.below(40) as u32).collect();
            let cmds = vec![Command::Stop { units }; rng.below(3) as usize];
            sim::encode_commands(&cmds, &mut bytes);
            if k == 3 {
                bytes.push(rng.next() as u8);
            }
        }
    }
    (player, bytes)
}

/// Seeded random bundles with hostile entries (garbage, trailing bytes,
/// players outside the match or the protocol, duplicates) in any order
/// decode identically through every path: `sim::decode_turn` whatever the
/// order, the peers' `lockstep::low_level::proto::decode_turn` on what an honest relay
/// stamps, and `replays::verify` re-simulating a recording of the bundle to
/// the hash a peer computed.
#[test]
fn a_hostile_bundle_decodes_identically_through_every_path() {
    let setup = sim::MatchSetup {
        seed: 3,
        players: 3,
        ticks_per_turn: sim::game::DEFAULT_TICKS_PER_TURN,
    };
    let mut header = replays::Header::for_game(&World::new(&setup), &setup);
    header.players = (0..3)
        .map(|p| replays::PlayerInfo {
            id: PlayerId(p),
            name: format!("p{p}"),
        })
        .collect();
    let mut rng = Rng(0x5eed);
    let mut seen = (0, 0, 0);
    for case in 0..150 {
        let mut inputs: Vec<(PlayerId, Vec<u8>)> =
            (0..rng.below(9)).map(|_| random_entry(&mut rng)).collect();
        if let Some(first) = inputs.first().cloned() {
            inputs.push(first);
        }
        let want = sim::decode_turn::<Command>(&inputs, 3);
        seen.0 += want.commands.len();
        seen.1 += want.rejected;
        seen.2 += want.invalid_players;
        // Any arrival order.
        let mut shuffled = inputs.clone();
        for i in (1..shuffled.len()).rev() {
            shuffled.swap(i, rng.below(i as u64 + 1) as usize);
        }
        assert_eq!(
            sim::decode_turn::<Command>(&shuffled, 3),
            want,
            "case {case}"
        );
        // The peers' wrapper, on the entries an honest relay could stamp.
        let stamped: Vec<_> = shuffled.iter().filter(|(p, _)| p.0 < 3).cloned().collect();
        assert_eq!(
            lockstep::low_level::proto::decode_turn::<Command>(&stamped),
            want.commands,
            "case {case}"
        );
        // A recording of the bundle verifies to the hash of `want`.
        let mut world = World::new(&setup);
        world.step(Turn(0), &want.commands);
        let mut w =
            replays::Writer::new(Vec::new(), &header, replays::SyncPolicy::AtFinish).unwrap();
        w.record_turn(Turn(0), &inputs).unwrap();
        w.finish(Turn(0), world.state_hash()).unwrap();
        let bytes = w.into_inner().unwrap();
        let report =
            replays::verify::<World, _>(replays::Reader::from_bytes(&bytes).unwrap(), |_| {})
                .unwrap();
        assert!(report.verified(), "case {case}: {report:?}");
        assert_eq!(
            (report.rejected_inputs, report.invalid_player_inputs),
            (want.rejected, want.invalid_players),
            "case {case}"
        );
    }
    // The cases exercised every outcome.
    assert!(seen.0 > 200 && seen.1 > 50 && seen.2 > 50, "{seen:?}");
}
