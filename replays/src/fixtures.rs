//! The recipes of the golden replays in `tests/data/`, shared by the
//! `make_fixtures` example that writes them and the tests that re-record them.

use crate::botmatch::RecordOptions;
use crate::error::ReplayError;
use crate::format::{Header, PlayerInfo};
use crate::writer::{SyncPolicy, Writer};
use sim::arena::{self, Arena};
use sim::game::{DEFAULT_TICKS_PER_TURN, World};
use sim::{MatchSetup, PlayerId, Simulation, Turn};

/// Every fixture of the reference game: file name, initial world, recording
/// options (the arena's is [`record_arena`]).
#[must_use]
pub fn all() -> Vec<(&'static str, World, RecordOptions)> {
    vec![
        // A peer's recording (`peer --record`): keyframes, hash every turn, a scenario start.
        (
            "peer_skirmish_2p.replay",
            sim::scenarios::skirmish(11),
            RecordOptions {
                turns: 300,
                keyframe_every: 100,
                start_state: true,
                bot_seed: 11,
                match_name: "golden skirmish".into(),
                ..RecordOptions::default()
            },
        ),
        // A relay's recording: no keyframes, agreed hashes trail by 3 turns,
        // an input-delay change and a player who leaves.
        (
            "relay_economy_4p.replay",
            sim::scenarios::economy(12),
            RecordOptions {
                turns: 240,
                keyframe_every: 0,
                hash_lag: 3,
                bot_seed: 12,
                delay: Some(3),
                drop: Some((PlayerId(3), Turn(200))),
                match_name: "golden economy".into(),
                ..RecordOptions::default()
            },
        ),
        // A peer whose world was corrupted after turn 110: the replay diverges there.
        (
            "peer_desync_3p.replay",
            World::new(&MatchSetup {
                seed: 13,
                players: 3,
                ticks_per_turn: DEFAULT_TICKS_PER_TURN,
            }),
            RecordOptions {
                turns: 200,
                keyframe_every: 50,
                bot_seed: 13,
                perturb_at: Some(Turn(110)),
                match_name: "golden desync".into(),
                ..RecordOptions::default()
            },
        ),
        // A relay's recording of a desynced match: player 2 diverged after
        // turn 60; every later turn has the majority's hash and a dispute
        // record (record kind 11), the first one also a desync record.
        (
            "relay_dispute_3p.replay",
            World::new(&MatchSetup {
                seed: 14,
                players: 3,
                ticks_per_turn: DEFAULT_TICKS_PER_TURN,
            }),
            RecordOptions {
                turns: 100,
                keyframe_every: 0,
                bot_seed: 14,
                dissent_from: Some((PlayerId(2), Turn(60))),
                match_name: "golden dispute".into(),
                ..RecordOptions::default()
            },
        ),
    ]
}

/// File name of the arena fixture written by [`record_arena`].
pub const ARENA: &str = "peer_arena_3p.replay";

/// The golden replay of the second game (`sim::arena`): a peer's recording
/// of a seeded 3-player bot match, 200 turns, a keyframe every 50 turns and
/// a hash every turn. It is recorded the way any game outside the workspace
/// would record one, with [`Writer`] and the game's public API only.
///
/// # Errors
/// None in practice (the sink is memory); the writer's errors are passed on.
pub fn record_arena() -> Result<Vec<u8>, ReplayError> {
    let setup = MatchSetup {
        seed: 21,
        players: 3,
        ticks_per_turn: arena::DEFAULT_TICKS_PER_TURN,
    };
    let mut world = Arena::new(&setup);
    let mut header = Header::for_game(&world, &setup);
    header.protocol_version = 1;
    header.match_name = "golden arena".into();
    header.start_time_unix_ms = 1_767_225_600_000;
    header.players = (0..setup.players)
        .map(|p| PlayerInfo {
            id: PlayerId(p),
            name: format!("bot-{p}"),
        })
        .collect();
    let mut w = Writer::new(Vec::new(), &header, SyncPolicy::AtFinish)?;
    let mut bots = arena::bots(&world, 21, arena::BOT_APM);
    let mut last = Turn(0);
    for t in 0..200 {
        let turn = Turn(t);
        let mut inputs: Vec<(PlayerId, Vec<u8>)> = Vec::new();
        for bot in &mut bots {
            let mut bytes = Vec::new();
            sim::encode_commands(&bot.think(&world, turn), &mut bytes);
            inputs.push((bot.player(), bytes));
        }
        w.record_turn(turn, &inputs)?;
        // Step with what was recorded, decoded as every peer decodes it.
        let stamped: Vec<_> = inputs
            .iter()
            .flat_map(|(p, b)| sim::decode_commands::<arena::Command>(*p, b).unwrap_or_default())
            .collect();
        world.step(turn, &stamped);
        let hash = world.state_hash();
        w.record_hash(turn, hash)?;
        if t % 50 == 0 {
            w.record_keyframe(turn, &world.snapshot(), hash)?;
        }
        last = turn;
    }
    w.finish(last, world.state_hash())?;
    w.into_inner()
}
