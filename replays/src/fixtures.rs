//! The recipes of the golden replays in `tests/data/`, shared by the
//! `make_fixtures` example that writes them and the tests that re-record them.

use crate::botmatch::RecordOptions;
use sim::game::{DEFAULT_TICKS_PER_TURN, World};
use sim::{MatchSetup, PlayerId, Simulation, Turn};

/// Every fixture: file name, initial world, recording options.
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
