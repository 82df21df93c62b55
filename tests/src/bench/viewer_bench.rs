//! The replay viewer in headless Chromium (`bench --only viewer`): a
//! 30-minute 4-player recording of about 1,000 units, as the relay writes it
//! (no keyframes), served by `replay view` and measured in the page: how
//! long the background pass takes to cover it, how long a seek to a random
//! turn takes before and after that pass, and the work and interval of each
//! frame while it plays at 1× and 16×. Then the live view (`relay serve
//! --http`) of a running 4-player match of about 1,000 units, watched as a
//! late spectator: the work and interval of each frame.

use super::stats::Summary;
use crate::browser::{Browser, BrowserBins, ViewerServer};
use crate::harness::Bins;
use replays::botmatch::{RecordOptions, record_bot_match};
use serde_json::Value;
use std::path::Path;

/// 30 minutes of 100 ms turns.
pub const TURNS: u32 = 18_000;
/// Army units at the start (a quarter per player).
pub const UNITS: u32 = 1_000;
/// Seeks measured at seeded random turns after the pass.
const SEEKS: usize = 20;

/// What one run measured.
#[derive(Clone, Debug)]
pub struct ViewerFigures {
    /// Turns in the recording and its size in bytes.
    pub turns: u32,
    /// Bytes of the recording.
    pub bytes: usize,
    /// Bytes of the WebAssembly module.
    pub wasm_bytes: u64,
    /// Chromium's version line.
    pub browser: String,
    /// How long `replay view` took to make its keyframed copy (ms), if it made one.
    pub copy_ms: Option<u64>,
    /// Wall time for the page's background pass over the whole recording (ms).
    pub index_ms: f64,
    /// Seeks right after opening, before the pass covered their turn (ms).
    pub cold_seeks: Summary,
    /// Seeks after the pass (ms).
    pub seeks: Summary,
    /// Units drawn in the frames measured while playing.
    pub units_drawn: u64,
    /// Per speed (1×, 16×): frame work p50 and p99 (ms), frame interval p50 and p99 (ms), frames.
    pub playing: Vec<(f64, [f64; 4], u64)>,
    /// The live view of a running match.
    pub live: LiveFigures,
}

/// What the live view measured.
#[derive(Clone, Debug)]
pub struct LiveFigures {
    /// Units drawn in the frames measured.
    pub units_drawn: u64,
    /// Frame work p50 and p99 (ms), frame interval p50 and p99 (ms).
    pub frame: [f64; 4],
    /// Frames measured.
    pub frames: u64,
    /// Turns the page received while it was measured.
    pub turns: u64,
}

fn num(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or(f64::NAN)
}

/// The page's `viewer.frameStats()`: frame work p50 and p99, frame
/// interval p50 and p99 (ms).
pub(super) fn frame_figures(stats: &Value) -> [f64; 4] {
    ["work_p50_ms", "work_p99_ms", "gap_p50_ms", "gap_p99_ms"].map(|k| num(stats, k))
}

/// Builds the module if it is missing (the bench may run before `tests/browser.sh`).
fn ensure_wasm(bins: &BrowserBins) -> Result<(), String> {
    if bins.require_wasm().is_ok() {
        return Ok(());
    }
    let status = std::process::Command::new("cargo")
        .args([
            "build",
            "--profile",
            "wasm",
            "-p",
            "lockstep-viewer",
            "--target",
            "wasm32-unknown-unknown",
        ])
        .status()
        .map_err(|e| format!("cargo: {e}"))?;
    if status.success() && bins.wasm.is_file() {
        Ok(())
    } else {
        Err(format!(
            "building the viewer's module failed ({status}); is the wasm32-unknown-unknown target installed?"
        ))
    }
}

/// Records the match, serves it and measures it in the browser.
///
/// # Errors
/// Chromium, chromedriver or the module is missing, or a step fails.
pub fn measure(quick: bool, bench_dir: &Path) -> Result<ViewerFigures, String> {
    let mut browser_bins = BrowserBins::from_env()?;
    ensure_wasm(&browser_bins)?;
    browser_bins.wasm = browser_bins
        .wasm
        .canonicalize()
        .map_err(|e| e.to_string())?;
    let bins = Bins::in_dir(bench_dir, false)?;

    let dir = std::env::temp_dir().join(format!("lockstep-bench-viewer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let file = dir.join("thirty-minutes.lsr");
    let opts = RecordOptions {
        turns: TURNS,
        keyframe_every: 0,
        // The armies are not `World::new(setup)`: the start state is recorded.
        start_state: true,
        match_name: "30 minutes, 4 players, 1,000 units".to_owned(),
        ..RecordOptions::default()
    };
    let world = sim::scenarios::armies(4, UNITS, 7);
    let (bytes, _) = record_bot_match(Vec::new(), world, &opts).map_err(|e| e.to_string())?;
    std::fs::write(&file, &bytes).map_err(|e| format!("{}: {e}", file.display()))?;

    let browser_version = std::process::Command::new(&browser_bins.chromium)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let server = ViewerServer::start(&bins.replay, &file, &browser_bins.wasm)?;
    let copy_ms = server.notes.iter().find_map(|n| {
        n.split("(made in ")
            .nth(1)
            .and_then(|r| r.split(" ms").next())
            .and_then(|v| v.parse().ok())
    });
    let browser = Browser::start(&browser_bins, &dir.join("profile"), 1280, 800)?;
    browser.goto(&server.url)?;
    if browser.eval_async("viewer.ready")? != Value::Bool(true) {
        return Err("the page did not open the recording".to_owned());
    }
    // Seeded turns, the same every run.
    let mut rng = crate::harness::SplitMix(0x5eed_u64);
    let turns: Vec<u32> = (0..SEEKS)
        .map(|_| u32::try_from(rng.next_u64() % u64::from(TURNS)).unwrap_or(0))
        .collect();
    let seek_all = |list: &[u32]| -> Result<Vec<f64>, String> {
        list.iter()
            .map(|t| {
                let v = browser.eval(&format!("return viewer.seek({t})"))?;
                if v["state"]["turn"].as_u64() != Some(u64::from(*t)) {
                    return Err(format!("seek to {t} landed at {}", v["state"]["turn"]));
                }
                Ok(num(&v, "ms"))
            })
            .collect()
    };
    let cold_count = if quick { 2 } else { 4 };
    let cold = seek_all(&turns[..cold_count])?;
    let index_ms = browser
        .eval_async(
            "new Promise(resolve => { const t0 = performance.now(); const wait = () => { const s = viewer.indexState(); \
             s && s.done ? resolve(performance.now() - t0) : requestAnimationFrame(wait); }; wait(); })",
        )?
        .as_f64()
        .unwrap_or(f64::NAN);
    let index_state = browser.eval("return viewer.indexState()")?;
    if !index_state["first_mismatch"].is_null() || !index_state["error"].is_null() {
        return Err(format!(
            "the page's pass disagreed with the recording: {index_state}"
        ));
    }
    let seeks = seek_all(&turns)?;

    // Playing from a busy turn: the armies are engaged early on.
    let play_ms = if quick { 3000 } else { 8000 };
    let mut playing = Vec::new();
    let mut units_drawn = 0;
    for speed in [1.0, 16.0] {
        browser.eval(&format!(
            "viewer.seek(40); viewer.setSpeed({speed}); return true"
        ))?;
        let stats = browser.eval_async(&format!(
            "new Promise(r => {{ viewer.resetFrameStats(); viewer.play(); const f0 = viewer.frameStats().frames; setTimeout(() => {{ \
             viewer.pause(); const s = viewer.frameStats(); s.units = viewer.units(); s.measured = s.frames - f0; r(s); }}, {play_ms}); }})"
        ))?;
        units_drawn = units_drawn.max(stats["units"].as_u64().unwrap_or(0));
        playing.push((
            speed,
            frame_figures(&stats),
            stats["measured"].as_u64().unwrap_or(0),
        ));
    }
    drop(server);
    let live = super::live_view_bench::measure(&browser, &bins, &browser_bins.wasm, &dir, play_ms);
    drop(browser);
    let _ = std::fs::remove_dir_all(&dir);
    let live = live?;
    Ok(ViewerFigures {
        turns: TURNS,
        bytes: bytes.len(),
        wasm_bytes: std::fs::metadata(&browser_bins.wasm)
            .map(|m| m.len())
            .unwrap_or(0),
        browser: browser_version,
        copy_ms,
        index_ms,
        cold_seeks: Summary::of(&cold).ok_or("no cold seek")?,
        seeks: Summary::of(&seeks).ok_or("no seek")?,
        units_drawn,
        playing,
        live,
    })
}

/// The section's markdown.
#[must_use]
pub fn markdown(f: &ViewerFigures) -> String {
    let mut md = format!(
        "`replay view` of a recording of {} turns (30 minutes of 100 ms turns; 4 bot players, {} army units at the start; no keyframes, as the relay writes it; {} KiB), measured inside the page in headless {} (software rendering, no GPU) on this machine; the viewer's module is {} KiB.\n\n",
        f.turns,
        UNITS,
        f.bytes / 1024,
        if f.browser.is_empty() {
            "Chromium"
        } else {
            &f.browser
        },
        f.wasm_bytes / 1024,
    );
    md.push_str("| what | figure |\n|---|---|\n");
    if let Some(ms) = f.copy_ms {
        md.push_str(&format!(
            "| `replay view` adds a keyframe every 100 turns (native, before serving) | {:.1} s |\n",
            ms as f64 / 1000.0
        ));
    }
    md.push_str(&format!(
        "| background pass over the whole recording (a slice of every frame, hashes checked) | {:.1} s |\n",
        f.index_ms / 1000.0
    ));
    md.push_str(&format!(
        "| seek to a random turn right after opening (from the served keyframes, before the pass reached it) | median {:.0} ms, max {:.0} ms ({} seeks) |\n",
        f.cold_seeks.median, f.cold_seeks.max, f.cold_seeks.runs
    ));
    md.push_str(&format!(
        "| seek to a random turn after the pass | median {:.1} ms, max {:.1} ms ({} seeks) |\n",
        f.seeks.median, f.seeks.max, f.seeks.runs
    ));
    for (speed, [w50, w99, g50, g99], frames) in &f.playing {
        md.push_str(&format!(
            "| playing at {speed}× with up to {} units drawn: work per frame (step, draw) | p50 {w50:.2} ms, p99 {w99:.2} ms; frame interval p50 {g50:.1} ms, p99 {g99:.1} ms ({frames} frames) |\n",
            f.units_drawn
        ));
    }
    let l = &f.live;
    md.push_str(&format!(
        "| live view (`relay serve --http`, a running match of 4 bot players with {} army units at the start, watched as a late spectator) with up to {} units drawn: work per frame (append, step, draw) | p50 {:.2} ms, p99 {:.2} ms; frame interval p50 {:.1} ms, p99 {:.1} ms ({} frames, {} turns) |\n",
        UNITS, l.units_drawn, l.frame[0], l.frame[1], l.frame[2], l.frame[3], l.frames, l.turns
    ));
    md.push_str(
        "\nA seek restores the nearest keyframe or snapshot the pass left (every 50 turns) and simulates the rest: at most 99 turns before the pass, 49 after it. The frame interval is the browser's own pacing (60 frames per second is 16.7 ms); the work is what the page does in a frame (step, hash, draw, the entity table and plot when due). Both are taken over the played frames only, from turn 40, once the background pass is over (while it runs, it takes a slice of up to 4 ms of every frame that plays, 12 ms of every paused one). The live match is the reference game started from `sim::scenarios::armies` instead of the standard map (a `Simulation` wrapper in the benchmark, as any game would bring its own): 4 in-process peers with bots at 300 APM play 100 ms turns through the release relay over loopback, on the same two cores as the browser; the page joins once a snapshot is agreed (every 20 turns), starts from it, and plays each turn as it arrives, 300 ms behind the players (`--spectator-delay-ms`).\n",
    );
    md
}
