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

/// Seek times into one long recording.
#[derive(Clone, Debug)]
pub struct SeekFigures {
    /// Turns in the recording (100 ms each).
    pub turns: u32,
    /// Keyframe interval of the indexed recording.
    pub keyframe_every: u32,
    /// File size of the indexed recording.
    pub bytes: u64,
    /// `replays::seek` to the last turn: index, nearest keyframe, the rest (ms).
    pub indexed_ms: Summary,
    /// `replays::seek_stream` to the last turn: reads every record, simulates from the last keyframe (ms).
    pub stream_ms: Summary,
    /// The same match recorded without keyframes: seek simulates from turn 0 (ms).
    pub from_start_ms: Summary,
}

fn time_ms<T>(runs: usize, mut f: impl FnMut() -> Result<T, String>) -> Result<Summary, String> {
    let mut ms = Vec::new();
    for _ in 0..runs {
        let start = Instant::now();
        f()?;
        ms.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    Summary::of(&ms).ok_or_else(|| "no runs".to_owned())
}

/// Records a 4-player ~1,000-unit bot match of `turns` turns to a file (a
/// keyframe every 100 turns, as `peer --record` writes) and times seeking
/// to its last turn: through the keyframe index, by reading the whole
/// file, and on the same match recorded without keyframes.
///
/// # Errors
/// A recording, file or seek failure as text.
pub fn seek_figures(quick: bool) -> Result<SeekFigures, String> {
    let (turns, runs) = if quick { (18_000, 5) } else { (18_000, 9) };
    let keyframe_every = 100;
    let dir = std::env::temp_dir().join(format!("lockstep-seek-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let record = |every: u32, name: &str| -> Result<std::path::PathBuf, String> {
        let opts = RecordOptions {
            turns,
            keyframe_every: every,
            hash_lag: 3,
            start_state: true,
            match_name: name.to_owned(),
            ..RecordOptions::default()
        };
        let path = dir.join(name);
        let file = std::fs::File::create(&path).map_err(|e| e.to_string())?;
        record_bot_match(file, sim::scenarios::armies(4, 1000, 5), &opts)
            .map_err(|e| e.to_string())?;
        Ok(path)
    };
    let last = sim::Turn(turns - 1);
    let seek_file = |path: &std::path::Path, indexed: bool| -> Result<u32, String> {
        let reader = Reader::open(path).map_err(|e| e.to_string())?;
        let s = if indexed {
            replays::seek::<World, _>(reader, last)
        } else {
            replays::seek_stream::<World, _>(reader, last)
        }
        .map_err(|e| e.to_string())?;
        Ok(s.simulated)
    };
    let result = (|| {
        eprintln!("[replay] seek: recording {turns} turns twice (with and without keyframes)");
        let indexed = record(keyframe_every, "keyframes.replay")?;
        let plain = record(0, "plain.replay")?;
        let bytes = std::fs::metadata(&indexed)
            .map_err(|e| e.to_string())?
            .len();
        Ok(SeekFigures {
            turns,
            keyframe_every,
            bytes,
            indexed_ms: time_ms(runs, || seek_file(&indexed, true))?,
            stream_ms: time_ms(runs, || seek_file(&indexed, false))?,
            from_start_ms: time_ms(if quick { 1 } else { 3 }, || seek_file(&plain, true))?,
        })
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// The markdown table of [`seek_figures`], with the ratio to the indexed seek.
#[must_use]
pub fn seek_table(f: &SeekFigures) -> String {
    let base = f.indexed_ms.median;
    let minutes = f64::from(f.turns) / 600.0;
    let mut md = format!(
        "Seek to the last turn of a {minutes:.0}-minute recording ({} turns, 4 players, ~1,000 units, \
         {} KiB with a keyframe every {} turns), from a file on disk:\n\n\
         | seek | ms | × indexed |\n|---|---|---|\n",
        f.turns,
        f.bytes / 1024,
        f.keyframe_every
    );
    for (label, s) in [
        (
            "`replays::seek`: keyframe index, nearest keyframe, the rest",
            &f.indexed_ms,
        ),
        (
            "`replays::seek_stream`: every record read, simulated from the last keyframe",
            &f.stream_ms,
        ),
        (
            "same match without keyframes: simulated from turn 0",
            &f.from_start_ms,
        ),
    ] {
        md.push_str(&format!(
            "| {label} | {} | {:.1}× |\n",
            s.cell(1),
            s.median / base
        ));
    }
    md
}
