//! Measures `replay verify` speed: records a 4-player bot match of the
//! reference game starting with about `UNITS` units, then times
//! re-simulating and checking it (the work `replay verify` does).
//!
//! ```sh
//! cargo run --release -p lockstep-replays --example verify_speed -- 1000 600
//! cargo run --release -p lockstep-replays --example verify_speed -- 10000 100 melee
//! ```
//! Arguments: approximate unit count (default 1000), turns (default 300),
//! and `melee` for `sim::scenarios::melee` (two armies already fighting;
//! the 4-player standard map has room for only ~2,400 starting units).

use replays::botmatch::{RecordOptions, record_bot_match};
use replays::{Reader, verify};
use sim::game::World;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let units: u32 = args.next().map_or(Ok(1000), |a| a.parse())?;
    let turns: u32 = args.next().map_or(Ok(300), |a| a.parse())?;
    let melee = args.next().as_deref() == Some("melee");
    let world = if melee {
        sim::scenarios::melee(units, 5)
    } else {
        sim::scenarios::armies(4, units, 5)
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
