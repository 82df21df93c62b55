//! Ready-made worlds for tests, benchmarks and demos, plus helpers to let
//! bots play them turn by turn.

use crate::bot::Bot;
use crate::contract::{MatchSetup, PlayerId, Simulation, Stamped, Turn};
use crate::game::{Command, DEFAULT_TICKS_PER_TURN, MapConfig, Order, UnitKind, World};
use crate::num::Vec2;

fn setup(seed: u64, players: u8) -> MatchSetup {
    MatchSetup {
        seed,
        players,
        ticks_per_turn: DEFAULT_TICKS_PER_TURN,
    }
}

/// Two players on the standard map, each with a base, 4 workers, 8 soldiers
/// and 4 archers: a small war once bots take over.
#[must_use]
pub fn skirmish(seed: u64) -> World {
    let mut config = MapConfig::standard(2);
    config.start_soldiers = 8;
    config.start_archers = 4;
    World::generate(&setup(seed, 2), &config)
}

/// Four players on the larger standard map with only workers: an economy
/// race (gathering, training, expanding) until the bots' armies meet.
#[must_use]
pub fn economy(seed: u64) -> World {
    World::generate(&setup(seed, 4), &MapConfig::standard(4))
}

/// Two armies of about `units / 2` soldiers and archers each, in wide blocks
/// facing each other on an open map, already attack-moving to the enemy
/// base: a mass battle for benchmarks (about `units` live units).
#[must_use]
pub fn melee(units: u32, seed: u64) -> World {
    melee_armies(2, units, seed)
}

/// Empty columns between two armies of a block in [`melee_armies`].
pub const STRIP_GAP: u16 = 10;

/// The battle of [`melee`] fought by `players` armies (`players` is rounded
/// down to an even number in `2..=MAX_PLAYERS`): the same two blocks of
/// about `units` units, each cut into `players / 2` strips of columns, a
/// strip per player (even ids in the first block, odd ids in the second),
/// [`STRIP_GAP`] empty columns apart: more than any unit's sight, so a
/// strip first meets the strip facing it, then (every player being against
/// every other) whoever is near. Use it to measure what many owners cost
/// the simulation against [`melee`]'s two (the same world when `players`
/// is 2).
#[must_use]
pub fn melee_armies(players: u8, units: u32, seed: u64) -> World {
    let players = players.clamp(2, crate::MAX_PLAYERS) & !1;
    let per_team = u32::from(players / 2);
    let units = units.clamp(2, 100_000);
    let per_side = units / 2;
    // A front twice as wide as it is deep, one unit per tile.
    let cols = u16::try_from(crate::num::isqrt(u64::from(per_side) * 2).max(1)).unwrap_or(1);
    let rows = u16::try_from((units - per_side).div_ceil(u32::from(cols))).unwrap_or(1);
    let gap = 24;
    let strips = u16::from(players / 2);
    let width = cols + 16 + (strips - 1) * STRIP_GAP;
    let height = 2 * rows + gap + 24;
    let config = MapConfig {
        width,
        height,
        obstacles: 0,
        mines_per_base: 0,
        center_mines: 0,
        start_workers: 0,
        start_soldiers: 0,
        start_archers: 0,
    };
    let mut world = World::generate(&setup(seed, players), &config);
    let homes = [(width / 2, 4), (width / 2, height - 5)];
    for e in world.entities_mut() {
        if let (UnitKind::Base, Some(o)) = (e.kind, e.owner) {
            let h = homes[usize::from(o.0 % 2)];
            e.pos = Vec2::tile_center(h.0, h.1);
        }
    }
    let top = 12;
    let sides = [
        (0u8, per_side, top, homes[1]),
        (1, units - per_side, top + rows + gap, homes[0]),
    ];
    for (side, count, y0, enemy) in sides {
        for k in 0..count {
            let col = u16::try_from(k % u32::from(cols)).unwrap_or(0);
            // `col < cols`, so the member stays below `players / 2`.
            let member = u32::from(col) * per_team / u32::from(cols);
            let player = PlayerId(side + 2 * u8::try_from(member).unwrap_or(0));
            let row = u16::try_from(k / u32::from(cols)).unwrap_or(0);
            let kind = if k % 3 == 2 {
                UnitKind::Archer
            } else {
                UnitKind::Soldier
            };
            // Mirror-symmetric blocks: each side's first (full) rows face the enemy.
            let y = if side == 0 {
                y0 + rows - 1 - row
            } else {
                y0 + row
            };
            let t = (8 + col + u16::try_from(member).unwrap_or(0) * STRIP_GAP, y);
            let id = world.spawn_at(Some(player), kind, t);
            if let Some(i) = world.index_of(id) {
                world.entities_mut()[i].order = Order::AttackMove {
                    dest: enemy,
                    slot: Vec2::tile_center(t.0, enemy.1),
                };
            }
        }
    }
    world
}

/// `players` players on a square standard map sized for about `units`
/// starting army units (about four tiles per unit), split evenly between the
/// players, two thirds soldiers and one third archers: a large bot match for
/// replay and verification benchmarks.
#[must_use]
pub fn armies(players: u8, units: u32, seed: u64) -> World {
    let setup = setup(seed, players);
    let mut config = MapConfig::standard(players);
    let side = u16::try_from(crate::num::isqrt(u64::from(units) * 4).max(128)).unwrap_or(1024);
    config.width = side;
    config.height = side;
    let per_player = u16::try_from(units / u32::from(players.max(1))).unwrap_or(u16::MAX);
    config.start_soldiers = u16::try_from(u32::from(per_player) * 2 / 3).unwrap_or(u16::MAX);
    config.start_archers = per_player - config.start_soldiers;
    World::generate(&setup, &config)
}

/// One bot per player of `world`, seeded from `seed`.
#[must_use]
pub fn bots(world: &World, seed: u64, apm: u32) -> Vec<Bot> {
    (0..world.setup().players)
        .map(|p| Bot::new(PlayerId(p), seed, apm))
        .collect()
}

/// The stamped inputs the bots produce for `turn` (player order, seq order).
pub fn bot_inputs(world: &World, bots: &mut [Bot], turn: Turn) -> Vec<Stamped<Command>> {
    crate::agent_inputs(world, bots, turn)
}

/// Lets the bots play `turns` turns starting at `first`, calling `each` with
/// every turn's number, its inputs and the world after stepping it.
pub fn play(
    world: &mut World,
    bots: &mut [Bot],
    first: Turn,
    turns: u32,
    mut each: impl FnMut(Turn, &[Stamped<Command>], &World),
) {
    for t in 0..turns {
        let turn = Turn(first.0 + t);
        let inputs = bot_inputs(world, bots, turn);
        world.step(turn, &inputs);
        each(turn, &inputs, world);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn armies_seats_the_requested_army_on_a_map_sized_for_it() {
        let world = armies(4, 1000, 5);
        assert_eq!(world.setup().players, 4);
        // 250 army units per player plus each player's base and starting workers.
        assert_eq!(world.unit_count(), 1020);
        assert_eq!(world.map().width(), 128);
        assert_eq!(armies(2, 40_000, 5).map().width(), 400);
    }
}
