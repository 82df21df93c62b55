//! Measures what the writer's fsync policy costs on this machine: records
//! 2,000 relay-sized turns (4 players, a hash record each) under each policy
//! and prints wall time per turn.
//!
//! ```sh
//! cargo run --release -p lockstep-replays --example fsync_cost [DIR]
//! ```
//! DIR defaults to the system temp dir; point it at the disk replays go to.

use replays::{Header, PlayerInfo, SyncPolicy, Writer};
use sim::{MatchSetup, PlayerId, StateHash, Turn};
use std::time::Instant;

const TURNS: u32 = 2000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args()
        .nth(1)
        .map_or_else(std::env::temp_dir, std::path::PathBuf::from);
    let header = Header {
        format_version: replays::FORMAT_VERSION,
        engine_version: "bench".into(),
        protocol_version: 1,
        game_id: "bench".into(),
        game_version: 1,
        rules_hash: StateHash([0; 32]),
        setup: MatchSetup {
            seed: 1,
            players: 4,
            ticks_per_turn: 2,
        },
        turn_length_us: 100_000,
        players: (0..4)
            .map(|i| PlayerInfo {
                id: PlayerId(i),
                name: format!("p{i}"),
            })
            .collect(),
        match_name: "fsync".into(),
        start_time_unix_ms: 0,
    };
    // About what a bot player sends per turn: one or two small commands.
    let inputs: Vec<(PlayerId, Vec<u8>)> = (0..4).map(|i| (PlayerId(i), vec![7u8; 24])).collect();
    println!("{TURNS} turns of 4 players, file in {}", dir.display());
    for (name, policy) in [
        ("no fsync until finish", SyncPolicy::AtFinish),
        ("fsync every 50 turns", SyncPolicy::EveryTurns(50)),
        ("fsync every 10 turns", SyncPolicy::EveryTurns(10)),
        ("fsync every turn", SyncPolicy::EveryTurn),
    ] {
        let path = dir.join("fsync_cost.replay");
        let start = Instant::now();
        let mut w = Writer::create_with(&path, &header, policy)?;
        for t in 0..TURNS {
            w.record_turn(Turn(t), &inputs)?;
            w.record_hash(Turn(t), StateHash([t as u8; 32]))?;
        }
        w.finish(Turn(TURNS - 1), StateHash([0; 32]))?;
        let elapsed = start.elapsed();
        std::fs::remove_file(&path)?;
        println!(
            "{name:24} total {:8.1} ms   {:7.1} µs per turn",
            elapsed.as_secs_f64() * 1e3,
            elapsed.as_secs_f64() * 1e6 / f64::from(TURNS)
        );
    }
    Ok(())
}
