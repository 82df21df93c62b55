//! `replay`: inspect, verify, diff, seek into and export replay files of the
//! reference game (`sim::game::World`).
//!
//! Exit codes: 0 success (verified with no desync recorded / identical), 1
//! divergence, damaged file or any other failure, 2 bad usage, 3 (`verify`)
//! the recorded (majority) hashes verify but the recording holds desyncs.

use clap::{Parser, Subcommand};
use replays::reader::group_thousands;
use replays::verify::DivergenceSource;
use replays::{
    Ending, Header, ReadSummary, Reader, Record, RecordedDesync, ReplayError, VerifyReport,
};
use serde_json::{Value, json};
use sim::game::World;
use sim::{PlayerId, Simulation, StateHash, Turn};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

// Results on stdout, diagnostics on stderr, and no panic on a closed pipe
// (`| head`): these shadow the std macros for the whole binary.
use replays::{err_print as eprint, err_println as eprintln};
use replays::{out_print as print, out_println as println};

/// The game this tool re-simulates.
type Game = World;

#[derive(Parser)]
#[command(
    name = "replay",
    version,
    about = "Inspect, verify, diff and seek into lockstep replay files",
    after_help = "Exit codes: 0 success, 1 divergence / damaged file / difference / error, 2 bad usage, 3 (verify) hashes verify but the recording holds desyncs."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Header, players, turns, duration, final hash, and whether the file is complete.
    Info {
        /// The replay file.
        file: PathBuf,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Re-simulate the match, check every recorded hash (the majority's on a
    /// desynced turn) and list the desyncs the recording holds (exit 3).
    Verify {
        /// The replay file.
        file: PathBuf,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// Also print the re-simulated hash after every turn (for comparing
        /// builds, e.g. across CPU architectures).
        #[arg(long)]
        print_hashes: bool,
    },
    /// First turn where two recordings of a match differ in inputs or hashes.
    Diff {
        /// First replay (e.g. the relay's).
        a: PathBuf,
        /// Second replay (e.g. a peer's).
        b: PathBuf,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Summary of the world after a turn (units per player, resources, hash).
    State {
        /// The replay file.
        file: PathBuf,
        /// The turn (the state after stepping it).
        #[arg(long)]
        turn: u32,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// One JSON object per record, one per line.
    Export {
        /// The replay file.
        file: PathBuf,
    },
    /// Write a copy of a replay with a keyframe every K turns, so seeking is fast.
    Reindex {
        /// The replay file.
        file: PathBuf,
        /// Keyframe interval in turns.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
        every: u32,
        /// Output file (must differ from the input).
        #[arg(long, short)]
        out: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Info { file, json } => info(&file, json),
        Command::Verify {
            file,
            json,
            print_hashes,
        } => match verify(&file, json, print_hashes) {
            // Verified, but the players disagreed during the match.
            Ok(Verified::WithDesyncs) => return ExitCode::from(3),
            other => other.map(|v| v == Verified::Clean),
        },
        Command::Diff { a, b, json } => diff(&a, &b, json),
        Command::State { file, turn, json } => state(&file, Turn(turn), json),
        Command::Export { file } => export(&file),
        Command::Reindex { file, every, out } => reindex(&file, every, &out),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("replay: {e}");
            ExitCode::from(1)
        }
    }
}

fn open(path: &Path) -> Result<Reader, ReplayError> {
    Reader::open(path)
}

fn display_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// `"12:34.5"` (minutes:seconds.tenths) for a number of microseconds.
fn clock(us: u64) -> String {
    let tenths = us / 100_000;
    format!("{}:{:02}.{}", tenths / 600, (tenths / 10) % 60, tenths % 10)
}

/// `"100 ms"` or `"1500 µs"`.
fn micros(us: u64) -> String {
    if us % 1000 == 0 {
        format!("{} ms", us / 1000)
    } else {
        format!("{us} µs")
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

fn status_json(s: &ReadSummary) -> Value {
    let (kind, offset) = match &s.ending {
        Ending::Complete => ("complete", None),
        Ending::Unread => ("unread", None),
        Ending::NoTrailer => ("no_trailer", None),
        Ending::Torn { offset, .. } => ("torn", Some(*offset)),
        Ending::Corrupt { offset, .. } => ("corrupt", Some(*offset)),
    };
    json!({
        "complete": s.is_complete(),
        "ending": kind,
        "damage_offset": offset,
        "intact_bytes": s.intact_bytes,
        "status": s.to_string(),
    })
}

fn final_hash(s: &ReadSummary) -> Option<(Turn, StateHash, &'static str)> {
    s.trailer
        .map(|(t, h)| (t, h, "trailer"))
        .or_else(|| s.last_hash.map(|(t, h)| (t, h, "last recorded hash")))
}

/// `"P1, P2"`, or `"none (no majority: P0, P1 differ)"` style text for a desync.
fn odd_text(d: &RecordedDesync) -> String {
    let players: Vec<String> = d.odd_players().iter().map(ToString::to_string).collect();
    if d.majority.is_some() {
        format!("odd {}", players.join(", "))
    } else {
        format!("no majority ({} differ)", players.join(", "))
    }
}

fn desync_json(d: &RecordedDesync) -> Value {
    json!({
        "turn": d.turn.0,
        "majority": hash_opt(d.majority),
        "odd_players": d.odd_players().iter().map(|p| p.0).collect::<Vec<_>>(),
        "dissent": d.dissent.iter().map(|(p, h)| json!({"player": p.0, "hash": h.to_hex()})).collect::<Vec<_>>(),
        "sections": d.sections,
    })
}

/// Prints the recorded desyncs as text: runs of consecutive turns with the
/// same odd players on one line each, sections where they were recorded.
fn print_desyncs(list: &[RecordedDesync]) {
    let mut i = 0;
    while let Some(first) = list.get(i) {
        let odd = odd_text(first);
        let mut end = i;
        while list
            .get(end + 1)
            .is_some_and(|n| n.turn.0 == list[end].turn.0 + 1 && odd_text(n) == odd)
        {
            end += 1;
        }
        let last = &list[end];
        let span = if end == i {
            format!("turn {}", first.turn)
        } else {
            format!(
                "turns {}..={} ({} turns)",
                first.turn,
                last.turn,
                end - i + 1
            )
        };
        println!("  {span}: {odd}");
        for d in &list[i..=end] {
            if !d.sections.is_empty() {
                println!(
                    "    differing sections at turn {}: {}",
                    d.turn,
                    d.sections.join(", ")
                );
            }
        }
        i = end + 1;
    }
}

fn info(path: &Path, as_json: bool) -> Result<bool, ReplayError> {
    let (h, s, desyncs) = replays::verify::recorded_desyncs(open(path)?)?;
    let turns = s.last_turn.map_or(0, |t| u64::from(t.0) + 1);
    let game_us = turns * h.turn_length_us;
    let fin = final_hash(&s);
    if as_json {
        let out = json!({
            "file": display_name(path),
            "format_version": h.format_version,
            "engine_version": h.engine_version,
            "protocol_version": h.protocol_version,
            "game_id": h.game_id,
            "game_version": h.game_version,
            "rules_hash": h.rules_hash.to_hex(),
            "match_name": h.match_name,
            "start_time_unix_ms": h.start_time_unix_ms,
            "seed": h.setup.seed,
            "players": h.players.iter().map(|p| json!({"id": p.id.0, "name": p.name})).collect::<Vec<_>>(),
            "ticks_per_turn": h.setup.ticks_per_turn,
            "turn_length_us": h.turn_length_us,
            "turns": s.turns,
            "first_turn": s.first_turn.map(|t| t.0),
            "last_turn": s.last_turn.map(|t| t.0),
            "duration_us": game_us,
            "hashes": s.hashes,
            "keyframes": s.keyframes,
            "desyncs": s.desyncs,
            "disputed_turns": s.disputes,
            "recorded_desyncs": desyncs.iter().map(desync_json).collect::<Vec<_>>(),
            "drops": s.drops,
            "delay_changes": s.delay_changes,
            "start_state": s.started,
            "final_turn": fin.map(|f| f.0.0),
            "final_hash": fin.map(|f| f.1.to_hex()),
            "file_status": status_json(&s),
        });
        println!("{out:#}");
        return Ok(true);
    }
    let players: Vec<String> = h
        .players
        .iter()
        .map(|p| format!("{} {:?}", p.id, p.name))
        .collect();
    println!("file:        {}", display_name(path));
    println!("format:      version {}", h.format_version);
    println!(
        "engine:      {} (protocol {})",
        h.engine_version, h.protocol_version
    );
    println!("game:        {} version {}", h.game_id, h.game_version);
    println!("rules hash:  {}", h.rules_hash);
    println!(
        "match:       {:?}, started {}",
        h.match_name,
        replays::format::utc_string(h.start_time_unix_ms)
    );
    println!(
        "setup:       seed {}, {} players, {} ticks per turn, {} per turn{}",
        h.setup.seed,
        h.setup.players,
        h.setup.ticks_per_turn,
        micros(h.turn_length_us),
        if s.started {
            ", scenario start state"
        } else {
            ""
        }
    );
    println!("players:     {}", players.join(", "));
    match (s.first_turn, s.last_turn) {
        (Some(a), Some(b)) => println!(
            "turns:       {} recorded ({a}..={b})",
            group_thousands(u64::from(s.turns))
        ),
        _ => println!("turns:       none"),
    }
    println!("duration:    {} of game time", clock(game_us));
    let disputed = if s.disputes > 0 {
        format!(" ({} disputed turns)", s.disputes)
    } else {
        String::new()
    };
    println!(
        "records:     {} hashes, {} keyframes, {} desyncs{disputed}, {} drops, {} delay changes",
        s.hashes, s.keyframes, s.desyncs, s.drops, s.delay_changes
    );
    match fin {
        Some((t, hash, from)) => println!("final hash:  {hash} (turn {t}, {from})"),
        None => println!("final hash:  none recorded"),
    }
    if !desyncs.is_empty() {
        println!(
            "desyncs:     players disagreed on {} turns (hash records hold the majority's hash):",
            desyncs.len()
        );
        print_desyncs(&desyncs);
    }
    println!("status:      {s}");
    Ok(true)
}

struct ProgressBar {
    total: u64,
    shown: u64,
    on: bool,
}

impl ProgressBar {
    fn new(total: u64) -> Self {
        Self {
            total: total.max(1),
            shown: u64::MAX,
            on: std::io::stderr().is_terminal(),
        }
    }

    fn update(&mut self, turn: Turn, position: u64) {
        if !self.on {
            return;
        }
        let pct = position.min(self.total) * 100 / self.total;
        if pct == self.shown {
            return;
        }
        self.shown = pct;
        let filled = usize::try_from(pct * 30 / 100).unwrap_or(30);
        let bar = format!("{}{}", "#".repeat(filled), " ".repeat(30 - filled));
        eprint!("\r[{bar}] {pct:3}% turn {turn}");
        let _ = std::io::stderr().flush();
    }

    fn clear(&self) {
        if self.on && self.shown != u64::MAX {
            eprint!("\r{}\r", " ".repeat(60));
        }
    }
}

fn hash_opt(h: Option<StateHash>) -> Value {
    h.map_or(Value::Null, |h| Value::String(h.to_hex()))
}

/// How `replay verify` ended (failures are `Ok(Failed)` or an error).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verified {
    /// Every recorded hash matches and no desync is recorded (exit 0).
    Clean,
    /// Every recorded (majority) hash matches, but desyncs are recorded (exit 3).
    WithDesyncs,
    /// A divergence, or an incomplete or damaged file (exit 1).
    Failed,
}

fn verify(path: &Path, as_json: bool, print_hashes: bool) -> Result<Verified, ReplayError> {
    let mut turn_hashes: Vec<(Turn, StateHash)> = Vec::new();
    let mut run = || -> Result<VerifyReport, ReplayError> {
        let total = std::fs::metadata(path)?.len();
        let mut bar = ProgressBar::new(total);
        let report = replays::verify::<Game, _>(open(path)?, |p| {
            bar.update(p.turn, p.position);
            if print_hashes {
                turn_hashes.push((p.turn, p.hash));
            }
        });
        bar.clear();
        report
    };
    let report = match run() {
        Ok(r) => r,
        Err(e) if as_json => {
            let out = json!({
                "verified": false,
                "turns": 0,
                "final_hash": null,
                "first_divergence": null,
                "error": e.to_string(),
            });
            println!("{out:#}");
            return Ok(Verified::Failed);
        }
        Err(e) => return Err(e),
    };
    let ok = report.verified();
    let outcome = match (ok, report.recorded_desyncs.is_empty()) {
        (false, _) => Verified::Failed,
        (true, true) => Verified::Clean,
        (true, false) => Verified::WithDesyncs,
    };
    if as_json {
        let div = report.first_divergence.as_ref().map(|d| {
            json!({
                "turn": d.turn.0,
                "expected": d.expected.to_hex(),
                "actual": d.actual.to_hex(),
                "source": source_name(d.source),
                "sections": d.sections.iter().map(|s| json!({
                    "name": s.name,
                    "expected": hash_opt(s.expected),
                    "actual": hash_opt(s.actual),
                })).collect::<Vec<_>>(),
                "sections_turn": d.sections_turn.map(|t| t.0),
            })
        });
        let mut out = json!({
            "verified": ok,
            "turns": report.turns,
            "last_turn": report.last_turn.map(|t| t.0),
            "final_hash": hash_opt(report.final_hash),
            "hashes_checked": report.hashes_checked,
            "hashes_unchecked": report.hashes_unchecked,
            "keyframes_checked": report.keyframes_checked,
            "rejected_inputs": report.rejected_inputs,
            "clean": outcome == Verified::Clean,
            "recorded_desyncs": report.recorded_desyncs.iter().map(desync_json).collect::<Vec<_>>(),
            "first_divergence": div,
            "file_status": status_json(&report.summary),
        });
        if print_hashes && let Value::Object(map) = &mut out {
            let list = turn_hashes
                .iter()
                .map(|(t, h)| json!({"turn": t.0, "hash": h.to_hex()}))
                .collect();
            map.insert("turn_hashes".into(), Value::Array(list));
        }
        println!("{out:#}");
        return Ok(outcome);
    }
    for (t, h) in &turn_hashes {
        println!("turn {t}: {h}");
    }
    println!(
        "re-simulated {} turns; {} hashes and {} keyframes checked; {} rejected inputs",
        group_thousands(u64::from(report.turns)),
        report.hashes_checked,
        report.keyframes_checked,
        report.rejected_inputs
    );
    if let (Some(h), Some(t)) = (report.final_hash, report.last_turn) {
        println!("hash after turn {t}: {h}");
    }
    if !report.recorded_desyncs.is_empty() {
        println!(
            "desyncs recorded during the match: players disagreed on {} turns",
            report.recorded_desyncs.len()
        );
        print_desyncs(&report.recorded_desyncs);
    }
    println!("file: {}", report.summary);
    match &report.first_divergence {
        None if outcome == Verified::WithDesyncs => println!(
            "VERIFIED WITH DESYNCS: every recorded hash matches (the majority's on the {} desynced turns), but the players disagreed",
            report.recorded_desyncs.len()
        ),
        None if ok => println!("VERIFIED: every recorded hash matches"),
        None => println!("NOT VERIFIED: the hashes present match, but the file is incomplete"),
        Some(d) => {
            println!(
                "DIVERGED at turn {} ({})",
                d.turn,
                source_name(d.source).replace('_', " ")
            );
            println!("  expected {}", d.expected);
            println!("  actual   {}", d.actual);
            match d.sections_turn {
                Some(t) if !d.sections.is_empty() => {
                    println!("  differing sections (compared at turn {t}):");
                    for s in &d.sections {
                        let show =
                            |h: Option<StateHash>| h.map_or_else(|| "?".to_owned(), |h| h.short());
                        println!(
                            "    {}: expected {} actual {}",
                            s.name,
                            show(s.expected),
                            show(s.actual)
                        );
                    }
                }
                _ => println!(
                    "  differing sections unknown: no keyframe after the divergence (try a peer's recording)"
                ),
            }
        }
    }
    Ok(outcome)
}

const fn source_name(s: DivergenceSource) -> &'static str {
    match s {
        DivergenceSource::Hash => "hash_record",
        DivergenceSource::Keyframe => "keyframe",
        DivergenceSource::Trailer => "trailer",
    }
}

/// Decoded commands of one player's input bytes, for display.
fn commands_json(player: PlayerId, bytes: &[u8]) -> Value {
    match sim::decode_commands::<<Game as Simulation>::Command>(player, bytes) {
        Ok(cmds) => {
            let list: Vec<Value> = cmds
                .iter()
                .map(|c| serde_json::to_value(&c.command).unwrap_or(Value::Null))
                .collect();
            Value::Array(list)
        }
        Err(e) => json!({ "rejected": e.to_string() }),
    }
}

fn commands_text(player: PlayerId, bytes: Option<&Vec<u8>>) -> String {
    let Some(bytes) = bytes else {
        return "(none)".to_owned();
    };
    match sim::decode_commands::<<Game as Simulation>::Command>(player, bytes) {
        Ok(cmds) => format!(
            "{:?}",
            cmds.into_iter().map(|c| c.command).collect::<Vec<_>>()
        ),
        Err(e) => format!("(rejected: {e}; {} bytes)", bytes.len()),
    }
}

fn diff(a: &Path, b: &Path, as_json: bool) -> Result<bool, ReplayError> {
    let rep = replays::diff(open(a)?, open(b)?)?;
    let same = rep.same();
    if as_json {
        let first = rep.first.as_ref().map(|d| {
            json!({
                "turn": d.turn.0,
                "hash_a": hash_opt(d.hash_a),
                "hash_b": hash_opt(d.hash_b),
                "hashes_differ": d.hashes_differ(),
                "inputs": d.inputs.iter().map(|i| json!({
                    "player": i.player.0,
                    "a": i.a.as_ref().map(|x| commands_json(i.player, x)),
                    "b": i.b.as_ref().map(|x| commands_json(i.player, x)),
                })).collect::<Vec<_>>(),
            })
        });
        let out = json!({
            "same": same,
            "header_differences": rep.header_differences,
            "common_turns": rep.common_turns,
            "first_difference": first,
            "a": { "last_turn": rep.a.last_turn.map(|t| t.0), "file_status": status_json(&rep.a) },
            "b": { "last_turn": rep.b.last_turn.map(|t| t.0), "file_status": status_json(&rep.b) },
        });
        println!("{out:#}");
        return Ok(same);
    }
    let last = |s: &ReadSummary| {
        s.last_turn
            .map_or_else(|| "-".to_owned(), |t| t.to_string())
    };
    println!(
        "A: {} (last turn {}; {})",
        display_name(a),
        last(&rep.a),
        rep.a
    );
    println!(
        "B: {} (last turn {}; {})",
        display_name(b),
        last(&rep.b),
        rep.b
    );
    for d in &rep.header_differences {
        println!("header differs: {d}");
    }
    match &rep.first {
        None => println!(
            "no difference in {} common turns",
            group_thousands(u64::from(rep.common_turns))
        ),
        Some(d) => {
            println!("first difference at turn {}:", d.turn);
            for i in &d.inputs {
                println!("  {} inputs differ:", i.player);
                println!("    A: {}", commands_text(i.player, i.a.as_ref()));
                println!("    B: {}", commands_text(i.player, i.b.as_ref()));
            }
            let show = |h: Option<StateHash>| h.map_or_else(|| "none".to_owned(), |h| h.to_hex());
            if d.hashes_differ() {
                println!("  hashes differ:");
            } else {
                println!("  hashes:");
            }
            println!("    A: {}", show(d.hash_a));
            println!("    B: {}", show(d.hash_b));
        }
    }
    Ok(same)
}

fn state(path: &Path, turn: Turn, as_json: bool) -> Result<bool, ReplayError> {
    let s = replays::seek::<Game, _>(open(path)?, turn)?;
    let hash = s.world.state_hash();
    let matches = s.recorded_hash.is_none_or(|r| r == hash);
    let summary = s.world.summary();
    if as_json {
        let out = json!({
            "turn": turn.0,
            "hash": hash.to_hex(),
            "recorded_hash": hash_opt(s.recorded_hash),
            "matches_recorded": matches,
            "keyframe": s.keyframe.map(|t| t.0),
            "simulated_turns": s.simulated,
            "summary": serde_json::to_value(&summary).unwrap_or(Value::Null),
        });
        println!("{out:#}");
        return Ok(matches);
    }
    match s.keyframe {
        Some(k) => println!(
            "state after turn {turn} (from the keyframe at turn {k}, {} turns simulated)",
            s.simulated
        ),
        None => println!(
            "state after turn {turn} (simulated {} turns from the start; no keyframe before it)",
            s.simulated
        ),
    }
    match s.recorded_hash {
        Some(r) if r == hash => println!("hash: {hash} (matches the recorded hash)"),
        Some(r) => println!("hash: {hash} (DIFFERS from the recorded {r})"),
        None => println!("hash: {hash} (no hash recorded for this turn)"),
    }
    print!("{summary}");
    Ok(matches)
}

fn header_json(h: &Header) -> Value {
    json!({
        "kind": "header",
        "offset": 12,
        "format_version": h.format_version,
        "engine_version": h.engine_version,
        "protocol_version": h.protocol_version,
        "game_id": h.game_id,
        "game_version": h.game_version,
        "rules_hash": h.rules_hash.to_hex(),
        "seed": h.setup.seed,
        "players": h.players.iter().map(|p| json!({"id": p.id.0, "name": p.name})).collect::<Vec<_>>(),
        "ticks_per_turn": h.setup.ticks_per_turn,
        "turn_length_us": h.turn_length_us,
        "match_name": h.match_name,
        "start_time_unix_ms": h.start_time_unix_ms,
    })
}

fn record_json(offset: u64, r: &Record) -> Value {
    let mut v = match r {
        Record::Header(h) => header_json(h),
        Record::Turn { turn, inputs } => json!({
            "turn": turn.0,
            "inputs": inputs.iter().map(|(p, b)| json!({
                "player": p.0,
                "bytes": hex(b),
                "commands": commands_json(*p, b),
            })).collect::<Vec<_>>(),
        }),
        Record::Hash { turn, hash } => json!({"turn": turn.0, "hash": hash.to_hex()}),
        Record::Desync {
            turn,
            hashes,
            sections,
        } => json!({
            "turn": turn.0,
            "hashes": hashes.iter().map(|(p, h)| json!({"player": p.0, "hash": h.to_hex()})).collect::<Vec<_>>(),
            "sections": sections,
        }),
        Record::Dispute {
            turn,
            majority,
            dissent,
        } => json!({
            "turn": turn.0,
            "majority": hash_opt(*majority),
            "dissent": dissent.iter().map(|(p, h)| json!({"player": p.0, "hash": h.to_hex()})).collect::<Vec<_>>(),
        }),
        Record::Drop { player, turn } => json!({"player": player.0, "turn": turn.0}),
        Record::DelayChange { delay, from_turn } => {
            json!({"delay": delay, "from_turn": from_turn.0})
        }
        Record::Keyframe {
            turn,
            hash,
            snapshot,
        } => json!({
            "turn": turn.0,
            "hash": hash.to_hex(),
            "snapshot_len": snapshot.len(),
        }),
        Record::Start { hash, snapshot } => json!({
            "hash": hash.to_hex(),
            "snapshot_len": snapshot.len(),
        }),
        Record::KeyframeIndex(entries) => json!({
            "keyframes": entries.iter().map(|e| json!({
                "turn": e.turn.0, "offset": e.offset, "hash": e.hash.to_hex(),
            })).collect::<Vec<_>>(),
        }),
        Record::Trailer {
            final_turn,
            final_hash,
            turns,
        } => json!({
            "final_turn": final_turn.0,
            "final_hash": final_hash.to_hex(),
            "turns": turns,
        }),
    };
    if let Value::Object(map) = &mut v {
        map.insert("offset".into(), json!(offset));
        map.insert("kind".into(), json!(replays::format::kind_name(r.kind())));
    }
    v
}

fn export(path: &Path) -> Result<bool, ReplayError> {
    let mut reader = open(path)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    // A closed stdout (`| head`) is quiet, not an error (`replays::stdio`).
    let written = replays::stdio::check;
    written(writeln!(out, "{}", header_json(reader.header())));
    while let Some(item) = reader.next() {
        match item {
            Ok(r) => written(writeln!(out, "{}", record_json(reader.record_offset(), &r))),
            Err(e) if e.is_damage() => break,
            Err(e) => return Err(e),
        }
    }
    let s = reader.summary();
    written(writeln!(
        out,
        "{}",
        json!({"kind": "end", "offset": s.intact_bytes, "file_status": status_json(s)})
    ));
    written(out.flush());
    Ok(s.is_complete())
}

fn reindex(path: &Path, every: u32, out: &Path) -> Result<bool, ReplayError> {
    if std::fs::canonicalize(path).ok() == std::fs::canonicalize(out).ok() {
        eprintln!("replay: --out must be a different file than the input");
        return Ok(false);
    }
    let file = std::fs::File::create(out)?;
    let (_, rep) = replays::reindex::<Game, _, _>(open(path)?, file, every)?;
    println!(
        "wrote {}: {} turns, {} keyframes (every {every} turns); source {}",
        out.display(),
        rep.turns,
        rep.keyframes,
        rep.source
    );
    Ok(rep.source.is_complete())
}
