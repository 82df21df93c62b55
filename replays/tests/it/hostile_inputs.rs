//! A recording whose turns hold hostile entries (undecodable bytes, players
//! outside the match, duplicate entries, any order) verifies against the
//! hashes the peers computed: `replays::verify` re-simulates exactly what
//! every peer's `sim::decode_turn` gave it.

use proptest::prelude::*;
use replays::format::{Header, PlayerInfo};
use replays::{Reader, SyncPolicy, Writer, verify};
use sim::game::{Command, DEFAULT_TICKS_PER_TURN, World};
use sim::{MatchSetup, PlayerId, Simulation, StateHash, Turn};

/// One hostile entry added to a turn, besides the bots' honest ones.
#[derive(Clone, Debug)]
enum Junk {
    /// Bytes that are no command list.
    Garbage(Vec<u8>),
    /// A valid command list stamped with a player outside the match.
    Outsider(u8),
    /// A copy of an honest entry (a player's second chunk this turn).
    Duplicate,
    /// An honest entry with a trailing byte.
    Trailing,
}

fn junk() -> impl Strategy<Value = Junk> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..12).prop_map(Junk::Garbage),
        (3u8..=255).prop_map(Junk::Outsider),
        Just(Junk::Duplicate),
        Just(Junk::Trailing),
    ]
}

const PLAYERS: u8 = 3;

/// Plays a bot match with `junk[t]` added to turn `t`, as the relay would
/// record it; each turn's hash is what a peer computes after decoding the
/// entries in another order (`rotate`). Returns the file and how many
/// entries a peer rejected and dropped as outsiders.
fn record(seed: u64, junk: &[Vec<Junk>], rotate: usize) -> (Vec<u8>, u32, u32) {
    let setup = MatchSetup {
        seed,
        players: PLAYERS,
        ticks_per_turn: DEFAULT_TICKS_PER_TURN,
    };
    let mut world = World::new(&setup);
    let mut header = Header::for_game(&world, &setup);
    header.players = (0..PLAYERS)
        .map(|p| PlayerInfo {
            id: PlayerId(p),
            name: format!("bot-{p}"),
        })
        .collect();
    let mut w = Writer::new(Vec::new(), &header, SyncPolicy::AtFinish).unwrap();
    let mut bots = sim::scenarios::bots(&world, seed, 600);
    let (mut rejected, mut outsiders) = (0, 0);
    let mut last = StateHash([0; 32]);
    for (t, extra) in junk.iter().enumerate() {
        let turn = Turn(t as u32);
        let mut inputs: Vec<(PlayerId, Vec<u8>)> = Vec::new();
        for bot in &mut bots {
            let mut bytes = Vec::new();
            sim::encode_commands(&bot.think(&world, turn), &mut bytes);
            inputs.push((bot.player(), bytes));
        }
        for (k, j) in extra.iter().enumerate() {
            let honest = inputs[k % usize::from(PLAYERS)].clone();
            inputs.push(match j {
                Junk::Garbage(bytes) => (PlayerId(k as u8 % PLAYERS), bytes.clone()),
                Junk::Outsider(p) => (PlayerId(*p), honest.1),
                Junk::Duplicate => honest,
                Junk::Trailing => (honest.0, [honest.1, vec![0]].concat()),
            });
        }
        w.record_turn(turn, &inputs).unwrap();
        // A peer received the same entries in another order.
        let mut arrived = inputs;
        let n = arrived.len();
        arrived.rotate_left(rotate % n);
        arrived.reverse();
        let decoded = sim::decode_turn::<Command>(&arrived, PLAYERS);
        rejected += decoded.rejected;
        outsiders += decoded.invalid_players;
        world.step(turn, &decoded.commands);
        last = world.state_hash();
        w.record_hash(turn, last).unwrap();
    }
    w.finish(Turn(junk.len() as u32 - 1), last).unwrap();
    (w.into_inner().unwrap(), rejected, outsiders)
}

fn check(seed: u64, junk: &[Vec<Junk>], rotate: usize) {
    let (bytes, rejected, outsiders) = record(seed, junk, rotate);
    let report = verify::<World, _>(Reader::from_bytes(&bytes).unwrap(), |_| {}).unwrap();
    assert!(report.verified(), "{report:?}");
    assert_eq!(report.turns, junk.len() as u32);
    assert_eq!(report.hashes_checked, junk.len() as u32 + 1);
    assert_eq!(report.rejected_inputs, rejected);
    assert_eq!(report.invalid_player_inputs, outsiders);
}

/// Every kind of hostile entry in one match, pinned (the property below
/// draws them at random): the old verifier applied the outsiders' commands,
/// which the world counts as rejected, so its hashes left the peers' at turn 2.
#[test]
fn a_recording_with_every_kind_of_hostile_entry_verifies_against_the_peers_hashes() {
    let mut junk = vec![Vec::new(); 30];
    junk[2] = vec![Junk::Outsider(PLAYERS), Junk::Garbage(vec![0xff, 1])];
    junk[5] = vec![Junk::Duplicate, Junk::Trailing, Junk::Outsider(200)];
    junk[9] = vec![Junk::Garbage(Vec::new()), Junk::Duplicate, Junk::Duplicate];
    let (bytes, rejected, outsiders) = record(7, &junk, 1);
    assert_eq!((rejected, outsiders), (3, 2));
    check(7, &junk, 1);
    let report = verify::<World, _>(Reader::from_bytes(&bytes).unwrap(), |_| {}).unwrap();
    assert!(report.clean(), "{report:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn hostile_entries_in_any_order_verify_against_the_peers_hashes(
        seed in any::<u64>(),
        junk in prop::collection::vec(prop::collection::vec(junk(), 0..4), 1..25),
        rotate in 0usize..16,
    ) {
        check(seed, &junk, rotate);
    }
}
