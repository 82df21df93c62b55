//! Builders the relay's unit tests share: one copy of the `Join` a test
//! peer sends (router, rooms, pinger, names, rejoin and glue tests).

use lockstep::low_level::proto::{Join, ToRelay};
use sim::StateHash;

/// A 2-slot `Join` of match `match_name` as player `name`: game `g` v1, a
/// zero rules hash, no turn limit.
pub(crate) fn join(match_name: &str, name: &str) -> Join {
    Join {
        match_name: match_name.into(),
        slots: 2,
        game_id: "g".into(),
        game_version: 1,
        rules_hash: StateHash([0; 32]),
        name: name.into(),
        turns: 0,
    }
}

/// [`join`] as the bytes a peer sends.
pub(crate) fn join_bytes(match_name: &str, name: &str) -> Vec<u8> {
    ToRelay::Join(join(match_name, name)).to_bytes()
}
