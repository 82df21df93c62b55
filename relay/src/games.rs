//! The shipped games, as far as the relay must know them: the rules hash a
//! replay's header needs ([`known_rules_hash`]). The relay hosts any game
//! and routes its commands as opaque bytes; this is the one place of the
//! library below `demo` that names a game, so the recorder's callers (the
//! `relay serve` binary, the live view, the demo) share it without
//! importing one another.

use crate::event::MatchInfo;
use sim::{Simulation, StateHash};

/// The rules hash a replay header needs, for the games this binary knows:
/// the join carries a fingerprint for a canonical setup (the seed is only
/// drawn at the start), so a known game's hash is recomputed for the match's
/// real setup; any other game keeps the join's. Pass it to
/// [`Recorder::new`](crate::recorder::Recorder::new).
#[must_use]
pub fn known_rules_hash(info: &MatchInfo) -> StateHash {
    use sim::arena::Arena;
    use sim::game::World;
    if info.game_id == World::GAME_ID && info.game_version == World::GAME_VERSION {
        World::new(&info.setup).rules_hash()
    } else if info.game_id == Arena::GAME_ID && info.game_version == Arena::GAME_VERSION {
        Arena::new(&info.setup).rules_hash()
    } else {
        info.rules_hash
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_game_keeps_the_joins_rules_hash() {
        let mut info = MatchInfo::two_players("duel", "not-a-shipped-game");
        info.rules_hash = StateHash([7; 32]);
        assert_eq!(known_rules_hash(&info), StateHash([7; 32]));
    }
}
