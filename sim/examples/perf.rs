//! Informal timing of the reference game: `cargo run --release -p lockstep-sim --example perf [units] [turns] [players]`.
//! Prints the median step and hash times for a melee, and how bot matches unfold.
// Wall-clock timing is this example's whole point; it never feeds the simulation.
#![allow(clippy::disallowed_types)]

use sim::Simulation;
use sim::scenarios;
use std::time::Instant;

fn median(mut v: Vec<u128>) -> u128 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let units: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let turns: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(300);
    let players: u8 = args.next().and_then(|a| a.parse().ok()).unwrap_or(2);
    let mut world = scenarios::melee_armies(players, units, 1);
    println!("melee_armies({players}, {units}): {}", world.summary());
    let a = Instant::now();
    let bytes = world.snapshot();
    let b = Instant::now();
    let back = sim::game::World::restore(&bytes).map(|w| w.state_hash());
    let c = Instant::now();
    println!(
        "snapshot {} bytes in {} us, restore in {} us, same hash: {}",
        bytes.len(),
        (b - a).as_micros(),
        (c - b).as_micros(),
        back == Ok(world.state_hash())
    );
    let (mut steps, mut hashes) = (Vec::new(), Vec::new());
    for t in 0..turns {
        let a = Instant::now();
        world.step(sim::Turn(t), &[]);
        let b = Instant::now();
        let h = world.state_hash();
        let c = Instant::now();
        steps.push((b - a).as_micros());
        hashes.push((c - b).as_micros());
        if t % 50 == 0 || t + 1 == turns {
            println!(
                "turn {t}: {} units, step {} us, hash {} us, {}",
                world.unit_count(),
                (b - a).as_micros(),
                (c - b).as_micros(),
                h.short()
            );
        }
    }
    let (worst_turn, worst) = steps
        .iter()
        .enumerate()
        .max_by_key(|(_, s)| **s)
        .map_or((0, 0), |(t, s)| (t, *s));
    println!(
        "median step {} us, median hash {} us, max step {worst} us (turn {worst_turn}), {} flow fields computed",
        median(steps.clone()),
        median(hashes),
        world.flow_fields_computed()
    );
    println!("{}", world.summary());
    // Worst case a hostile player can cause: every path command a new destination.
    let mut w = scenarios::economy(5);
    let mut cmds = Vec::new();
    let units: Vec<u32> = w
        .entities()
        .iter()
        .filter(|e| e.kind.is_mobile())
        .map(|e| e.id)
        .collect();
    for p in 0..4u8 {
        let own: Vec<u32> = units
            .iter()
            .copied()
            .filter(|&id| {
                w.entity(id)
                    .is_some_and(|e| e.owner == Some(sim::PlayerId(p)))
            })
            .collect();
        for k in 0..sim::game::MAX_PATH_COMMANDS_PER_TURN {
            let k = u16::try_from(k).unwrap_or(0);
            cmds.push(sim::Stamped {
                player: sim::PlayerId(p),
                seq: k,
                command: sim::game::Command::Move {
                    units: own.clone(),
                    x: 10 + 7 * k + u16::from(p),
                    y: 20 + 5 * k + 3 * u16::from(p),
                },
            });
        }
    }
    let before = w.flow_fields_computed();
    let a = Instant::now();
    w.step(sim::Turn(0), &cmds);
    println!(
        "hostile turn: {} path commands, {} new flow fields, {} us",
        cmds.len(),
        w.flow_fields_computed() - before,
        a.elapsed().as_micros()
    );
    for (name, mut w) in [
        ("skirmish", scenarios::skirmish(3)),
        ("economy", scenarios::economy(3)),
    ] {
        let mut bots = scenarios::bots(&w, 3, 200);
        let a = Instant::now();
        scenarios::play(&mut w, &mut bots, sim::Turn(0), 1000, |t, _, w| {
            if t.0 % 200 == 199 {
                print!("{name} turn {t}: {}", w.summary());
            }
        });
        println!("{name}: 1000 turns in {} ms", a.elapsed().as_millis());
    }
}
