//! Simulation cost: one turn's step and one state hash of the reference game
//! at 1,000 and 10,000 live units, from `sim::scenarios::melee`.

use super::stats::Summary;
use sim::game::World;
use sim::{Simulation, Turn};
use std::time::Instant;

/// Step and hash cost at one army size.
#[derive(Clone, Debug)]
pub struct SimFigures {
    /// Units the scenario was built with.
    pub units: u32,
    /// Live units when measurement began (after the warm-up turns).
    pub live_units: u32,
    /// Milliseconds per turn step (median over runs of the per-run median).
    pub step_ms: Summary,
    /// Milliseconds per full state hash.
    pub hash_ms: Summary,
    /// Milliseconds per full snapshot (serialisation of the whole world).
    pub snapshot_ms: Summary,
}

/// Measures `turns` turns after `warmup` turns of a fresh melee, `runs` times.
#[must_use]
pub fn measure(units: u32, warmup: u32, turns: u32, runs: usize) -> SimFigures {
    measure_world(sim::scenarios::melee(units, 42), units, warmup, turns, runs)
}

/// [`measure`] for any world built with `units` units: `turns` turns after
/// `warmup` turns, `runs` times.
#[must_use]
pub fn measure_world(
    mut world: World,
    units: u32,
    warmup: u32,
    turns: u32,
    runs: usize,
) -> SimFigures {
    let mut step = Vec::new();
    let mut hash = Vec::new();
    let mut snap = Vec::new();
    // Warm up once (the armies need ~75 turns to meet), then start every run
    // from the same snapshot so each measures the same turns of combat.
    for t in 0..warmup {
        world.step(Turn(t), &[]);
    }
    let live_units = world.unit_count();
    let engaged = world.snapshot();
    for _ in 0..runs {
        let Ok(mut world) = World::restore(&engaged) else {
            break;
        };
        let mut step_runs = Vec::with_capacity(turns as usize);
        let mut hash_runs = Vec::with_capacity(turns as usize);
        for t in warmup..warmup + turns {
            let start = Instant::now();
            world.step(Turn(t), &[]);
            step_runs.push(start.elapsed().as_secs_f64() * 1e3);
            let start = Instant::now();
            std::hint::black_box(world.state_hash());
            hash_runs.push(start.elapsed().as_secs_f64() * 1e3);
        }
        let start = Instant::now();
        std::hint::black_box(world.snapshot());
        snap.push(start.elapsed().as_secs_f64() * 1e3);
        step.extend(Summary::of(&step_runs).map(|s| s.median));
        hash.extend(Summary::of(&hash_runs).map(|s| s.median));
    }
    let zero = Summary {
        median: f64::NAN,
        min: f64::NAN,
        max: f64::NAN,
        runs: 0,
    };
    SimFigures {
        units,
        live_units,
        step_ms: Summary::of(&step).unwrap_or(zero),
        hash_ms: Summary::of(&hash).unwrap_or(zero),
        snapshot_ms: Summary::of(&snap).unwrap_or(zero),
    }
}

/// The markdown table for `figures`, with the 1,000-unit row as the baseline
/// the ratios are taken against.
#[must_use]
pub fn table(figures: &[SimFigures]) -> String {
    let mut md = String::from(
        "| units (live at start) | step ms/turn | state hash ms | snapshot ms | step+hash vs 1,000 units | turn budget used (100 ms turn) |\n|---|---|---|---|---|---|\n",
    );
    let base = figures
        .first()
        .map_or(f64::NAN, |f| f.step_ms.median + f.hash_ms.median);
    for f in figures {
        let total = f.step_ms.median + f.hash_ms.median;
        md.push_str(&format!(
            "| {} ({}) | {} | {} | {} | {:.1}× | {:.1} % |\n",
            f.units,
            f.live_units,
            f.step_ms.cell(3),
            f.hash_ms.cell(3),
            f.snapshot_ms.cell(3),
            total / base,
            total / 100.0 * 100.0
        ));
    }
    md
}
