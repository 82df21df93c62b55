//! Replay verification speed: record a bot match of the reference game in
//! memory, then time `replays::verify` re-simulating it and checking every
//! hash (the work `replay verify` does), as turns/s and × real time.

use super::stats::Summary;
use replays::botmatch::{RecordOptions, record_bot_match};
use replays::{Reader, verify};
use sim::game::World;
use std::time::Instant;

/// Verification speed of one recorded match.
#[derive(Clone, Debug)]
pub struct ReplayFigures {
    /// What was recorded.
    pub label: String,
    /// Players in the match.
    pub players: u8,
    /// Live units at the start.
    pub start_units: u32,
    /// Turns in the recording.
    pub turns: u32,
    /// Size of the replay file in bytes.
    pub bytes: usize,
    /// Turns verified per second.
    pub turns_per_s: Summary,
}

/// Records `world` played by bots for `turns` turns, then verifies it `runs` times.
///
/// # Errors
/// A recording or verification failure (which would be a bug) as text.
pub fn measure(
    label: &str,
    world: World,
    turns: u32,
    runs: usize,
) -> Result<ReplayFigures, String> {
    let players = world.setup().players;
    let start_units = world.unit_count();
    let opts = RecordOptions {
        turns,
        keyframe_every: 0,
        hash_lag: 3,
        start_state: true,
        match_name: label.to_owned(),
        ..RecordOptions::default()
    };
    let (bytes, _) = record_bot_match(Vec::new(), world, &opts).map_err(|e| e.to_string())?;
    let mut tps = Vec::new();
    for _ in 0..runs {
        let reader = Reader::from_bytes(&bytes).map_err(|e| e.to_string())?;
        let start = Instant::now();
        let report = verify::<World, _>(reader, |_| {}).map_err(|e| e.to_string())?;
        let secs = start.elapsed().as_secs_f64();
        if !report.verified() {
            return Err(format!("{label}: the recording did not verify"));
        }
        tps.push(f64::from(report.turns) / secs);
    }
    Ok(ReplayFigures {
        label: label.to_owned(),
        players,
        start_units,
        turns,
        bytes: bytes.len(),
        turns_per_s: Summary::of(&tps).ok_or("no runs")?,
    })
}

/// The standard pair: a 4-player ~1,000-unit bot match and a ~10,000-unit battle.
///
/// # Errors
/// As [`measure`].
pub fn standard(quick: bool) -> Result<Vec<ReplayFigures>, String> {
    let (turns, big_turns, runs) = if quick { (300, 150, 3) } else { (1200, 300, 5) };
    Ok(vec![
        measure(
            "4-player bot match, ~1,000 units",
            sim::scenarios::armies(4, 1000, 5),
            turns,
            runs,
        )?,
        measure(
            "2-army melee, ~10,000 units",
            sim::scenarios::melee(10_000, 5),
            big_turns,
            runs,
        )?,
    ])
}

/// The markdown table; the 1,000-unit match is the baseline for the ratio column.
#[must_use]
pub fn table(figures: &[ReplayFigures], turn_ms: f64) -> String {
    let mut md = String::from(
        "| recording | players | units at start | turns | file KiB | verify turns/s | × real time | speed vs first row |\n|---|---|---|---|---|---|---|---|\n",
    );
    let base = figures.first().map_or(f64::NAN, |f| f.turns_per_s.median);
    for f in figures {
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {:.0}× | {:.2}× |\n",
            f.label,
            f.players,
            f.start_units,
            f.turns,
            f.bytes / 1024,
            f.turns_per_s.cell(0),
            f.turns_per_s.median * turn_ms / 1000.0,
            f.turns_per_s.median / base
        ));
    }
    md
}
