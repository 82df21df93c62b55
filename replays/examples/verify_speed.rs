//! Measures `replay verify` speed: records a 4-player bot match of the
//! reference game starting with about `UNITS` units, then times
//! re-simulating and checking it (the work `replay verify` does).
//!
//! ```sh
//! cargo run --release -p replays --example verify_speed -- 1000 600
//! cargo run --release -p replays --example verify_speed -- 10000 100 melee
//! ```
//! Arguments: approximate unit count (default 1000), turns (default 300),
//! and `melee` for `sim::scenarios::melee` (two armies already fighting;
//! the 4-player standard map has room for only ~2,400 starting units).

use replays::botmatch::{RecordOptions, record_bot_match};
use replays::{Reader, verify};
use sim::MatchSetup;
use sim::game::{DEFAULT_TICKS_PER_TURN, MapConfig, World};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let units: u32 = args.next().map_or(Ok(1000), |a| a.parse())?;
    let turns: u32 = args.next().map_or(Ok(300), |a| a.parse())?;
    let setup = MatchSetup {
        seed: 5,
        players: 4,
        ticks_per_turn: DEFAULT_TICKS_PER_TURN,
    };
    let mut config = MapConfig::standard(4);
    // Room for the armies: about four tiles per unit.
    let side = u16::try_from(sim::num::isqrt(u64::from(units) * 4).max(128)).unwrap_or(1024);
    config.width = side;
    config.height = side;
    let per_player = u16::try_from(units / 4).unwrap_or(u16::MAX);
    config.start_soldiers = per_player * 2 / 3;
    config.start_archers = per_player - config.start_soldiers;
    let melee = args.next().as_deref() == Some("melee");
    let world = if melee {
        sim::scenarios::melee(units, 5)
    } else {
        World::generate(&setup, &config)
    };
    let players = world.setup().players;
    let start_units = world.unit_count();
    let opts = RecordOptions {
        turns,
        keyframe_every: 0,
        hash_lag: 3,
        start_state: true,
        match_name: format!("verify speed {units}"),
        ..RecordOptions::default()
    };
    let t0 = Instant::now();
    let (bytes, _) = record_bot_match(Vec::new(), world, &opts)?;
    let record_s = t0.elapsed().as_secs_f64();

    let t1 = Instant::now();
    let report = verify::<World, _>(Reader::from_bytes(&bytes)?, |_| {})?;
    let verify_s = t1.elapsed().as_secs_f64();
    assert!(report.verified(), "the recording must verify");
    let tps = f64::from(report.turns) / verify_s;
    let game_s = f64::from(report.turns) * 0.1;
    println!(
        "{start_units} units at start, {players} players, {} turns ({} KiB replay, recorded in {record_s:.2} s)",
        report.turns,
        bytes.len() / 1024
    );
    println!(
        "verify: {verify_s:.3} s = {tps:.0} turns/s = {:.0}x real time at 100 ms turns ({} hashes checked)",
        game_s / verify_s,
        report.hashes_checked
    );
    Ok(())
}
