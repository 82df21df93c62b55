//! Golden per-turn state hashes of scripted scenarios. Any change to the
//! rules, the encoding or the hashing shows up here; CI also runs this file
//! under `--release`, proving debug and release builds compute the same game.

use sim::game::World;
use sim::{Simulation, Turn, scenarios};

/// Steps `world` through turns `0..=last`, with the bots' inputs if any,
/// and tabulates the hash (and unit count) after each turn in `marks`.
fn table(mut world: World, bot_seed: Option<u64>, last: u32, marks: &[u32]) -> String {
    let mut bots = bot_seed.map_or_else(Vec::new, |s| scenarios::bots(&world, s, 300));
    let mut out = String::new();
    out += &format!("rules {}", world.rules_hash().short());
    out.push('\n');
    out += &format!(
        "start {} units {}",
        world.state_hash().short(),
        world.unit_count()
    );
    out.push('\n');
    for t in 0..=last {
        let inputs = scenarios::bot_inputs(&world, &mut bots, Turn(t));
        world.step(Turn(t), &inputs);
        if marks.contains(&t) {
            out += &format!(
                "turn {t:>4} {} units {}",
                world.state_hash().short(),
                world.unit_count()
            );
            out.push('\n');
        }
    }
    out += &world.summary().to_string();
    out
}

const MARKS: &[u32] = &[0, 1, 2, 10, 50, 100, 250, 500, 750, 1000];

#[test]
fn skirmish_hashes() {
    insta::assert_snapshot!(table(scenarios::skirmish(1), Some(11), 1000, MARKS));
}

#[test]
fn economy_hashes() {
    insta::assert_snapshot!(table(scenarios::economy(2), Some(22), 1000, MARKS));
}

#[test]
fn melee_10k_hashes() {
    // 10,000 units fighting until one side's base falls.
    insta::assert_snapshot!(table(scenarios::melee(10_000, 3), None, 1000, MARKS));
}

/// 32 players: the 2-army battle cut into 32 armies (targeting must tell
/// 32 owners apart), and a 32-bot match on the 32-player standard map.
#[test]
fn thirty_two_players_hashes() {
    let marks = &[0, 1, 2, 10, 50, 100, 200, 300];
    let mut out = String::from("melee_armies(32, 2000)\n");
    out += &table(scenarios::melee_armies(32, 2_000, 3), None, 300, marks);
    out += "\narmies(32, 640) with bots\n";
    out += &table(scenarios::armies(32, 640, 7), Some(77), 300, marks);
    insta::assert_snapshot!(out);
}

/// The second game: a seeded 4-bot arena match, hash and scores at the
/// marks, until it ends by the score limit.
#[test]
fn arena_4_bots_hashes() {
    use sim::arena::{self, Arena};
    let setup = sim::MatchSetup {
        seed: 4,
        players: 4,
        ticks_per_turn: arena::DEFAULT_TICKS_PER_TURN,
    };
    let mut world = Arena::new(&setup);
    let mut bots = arena::bots(&world, 44, arena::BOT_APM);
    let mut out = format!("rules {}\n", world.rules_hash().short());
    out += &format!("start {}\n", world.state_hash().short());
    let marks = [
        0, 1, 2, 10, 50, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000,
    ];
    let mut t = 0;
    while !world.is_over() && t < 5_000 {
        let inputs = arena::bot_inputs(&world, &mut bots, Turn(t));
        world.step(Turn(t), &inputs);
        if marks.contains(&t) || world.is_over() {
            let scores: Vec<String> = world.ships().iter().map(|s| s.score.to_string()).collect();
            out += &format!(
                "turn {t:>4} {} scores {}\n",
                world.state_hash().short(),
                scores.join(" ")
            );
        }
        t += 1;
    }
    out += &world.summary().to_string();
    insta::assert_snapshot!(out);
}
