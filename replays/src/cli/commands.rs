//! The replay tool's subcommands: each reads a file, asks the game its
//! header names to re-simulate it where needed, and prints the result.

use super::args::Command;
use super::console::{Console, errln, outln};
use super::export::export;
use super::games::{FileReader, Games, Registered, UnknownGame};
use super::verify::{Verified, verify};
use crate::reader::group_thousands;
use crate::{Ending, ReadSummary, Reader, RecordedDesync, ReplayError};
use serde_json::{Value, json};
use sim::{PlayerId, StateHash, Turn};
use std::path::{Path, PathBuf};

/// Why a subcommand failed (`replay: {error}` on stderr; exit 2 for
/// [`CliError::Usage`], else 1).
#[derive(Debug, thiserror::Error)]
pub(crate) enum CliError {
    /// Re-simulating the file failed.
    #[error(transparent)]
    Replay(#[from] ReplayError),
    /// A file could not be opened, read or created: the path comes first,
    /// so the user knows which of the files it was.
    #[error("{}: {source}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: ReplayError,
    },
    /// The arguments cannot work together (exit 2, nothing touched).
    #[error("{0}")]
    Usage(String),
    /// The file is of a game this tool does not know.
    #[error(transparent)]
    UnknownGame(#[from] UnknownGame),
}

/// Runs one subcommand; returns the exit status.
pub(crate) fn dispatch(games: &Games, command: Command, c: &mut Console<'_>, progress: bool) -> u8 {
    let result = match command {
        Command::Info { file, json } => info(c, &file, json),
        Command::Verify {
            file,
            json,
            print_hashes,
        } => match verify(games, c, &file, json, print_hashes, progress) {
            // Verified, but the players disagreed during the match.
            Ok(Verified::WithDesyncs) => return 3,
            other => other.map(|v| v == Verified::Clean),
        },
        Command::Diff { a, b, json } => diff(games, c, &a, &b, json),
        Command::State { file, turn, json } => state(games, c, &file, Turn(turn), json),
        Command::Export { file } => export(games, c, &file),
        Command::Desync { file, json } => super::desync::desync(games, c, &file, json),
        Command::Reindex { file, every, out } => reindex(games, c, &file, every, &out),
        Command::View { file, bind, wasm } => {
            super::view::view(games, c, &file, &bind, wasm.as_deref())
        }
    };
    match result {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => {
            // Results printed before the failure come first.
            c.flush_out();
            errln!(c, "replay: {e}");
            if matches!(e, CliError::Usage(_)) {
                2
            } else {
                1
            }
        }
    }
}

/// Opens a replay file; an error names it.
pub(super) fn open(path: &Path) -> Result<FileReader, CliError> {
    Reader::open(path).map_err(|source| file_error(path, source))
}

/// An error about the file at `path`.
pub(super) fn file_error(path: &Path, source: impl Into<ReplayError>) -> CliError {
    CliError::File {
        path: path.to_owned(),
        source: source.into(),
    }
}

/// Whether `a` and `b` are one file (the same inode on Unix, so a hard
/// link or another spelling of the path counts); false when either is missing.
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        #[cfg(unix)]
        (Ok(x), Ok(y)) => {
            use std::os::unix::fs::MetadataExt;
            x.dev() == y.dev() && x.ino() == y.ino()
        }
        #[cfg(not(unix))]
        (Ok(_), Ok(_)) => std::fs::canonicalize(a).ok() == std::fs::canonicalize(b).ok(),
        _ => false,
    }
}

/// Opens a file and finds the game that plays it.
pub(super) fn open_game<'g>(
    games: &'g Games,
    path: &Path,
) -> Result<(FileReader, &'g dyn Registered), CliError> {
    let reader = open(path)?;
    let h = reader.header();
    let game = games.find(&h.game_id, h.game_version)?;
    Ok((reader, game))
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

pub(super) fn status_json(s: &ReadSummary) -> Value {
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
        "match_end": s.end,
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

pub(super) fn desync_json(d: &RecordedDesync) -> Value {
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
pub(super) fn print_desyncs(c: &mut Console<'_>, list: &[RecordedDesync]) {
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
        outln!(c, "  {span}: {odd}");
        for d in &list[i..=end] {
            if !d.sections.is_empty() {
                outln!(
                    c,
                    "    differing sections at turn {}: {}",
                    d.turn,
                    d.sections.join(", ")
                );
            }
        }
        i = end + 1;
    }
}

/// Prints the file's header and contents; `Ok(false)` (exit 1, as
/// `verify`) when the file is torn, damaged or has no trailer.
fn info(c: &mut Console<'_>, path: &Path, as_json: bool) -> Result<bool, CliError> {
    let (h, s, desyncs) =
        crate::verify::recorded_desyncs(open(path)?).map_err(|e| file_error(path, e))?;
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
            "rejoins": s.rejoins,
            "delay_changes": s.delay_changes,
            "start_state": s.started,
            "final_turn": fin.map(|f| f.0.0),
            "final_hash": fin.map(|f| f.1.to_hex()),
            "file_status": status_json(&s),
        });
        outln!(c, "{out:#}");
        return Ok(s.is_complete());
    }
    let players: Vec<String> = h
        .players
        .iter()
        .map(|p| format!("{} {:?}", p.id, p.name))
        .collect();
    outln!(c, "file:        {}", display_name(path));
    outln!(c, "format:      version {}", h.format_version);
    outln!(
        c,
        "engine:      {} (protocol {})",
        h.engine_version,
        h.protocol_version
    );
    outln!(c, "game:        {} version {}", h.game_id, h.game_version);
    outln!(c, "rules hash:  {}", h.rules_hash);
    outln!(
        c,
        "match:       {:?}, started {}",
        h.match_name,
        crate::format::utc_string(h.start_time_unix_ms)
    );
    outln!(
        c,
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
    outln!(c, "players:     {}", players.join(", "));
    match (s.first_turn, s.last_turn) {
        (Some(a), Some(b)) => outln!(
            c,
            "turns:       {} recorded ({a}..={b})",
            group_thousands(u64::from(s.turns))
        ),
        _ => outln!(c, "turns:       none"),
    }
    outln!(c, "duration:    {} of game time", clock(game_us));
    let disputed = if s.disputes > 0 {
        format!(" ({} disputed turns)", s.disputes)
    } else {
        String::new()
    };
    outln!(
        c,
        "records:     {} hashes, {} keyframes, {} desyncs{disputed}, {} drops, {} rejoins, {} delay changes",
        s.hashes,
        s.keyframes,
        s.desyncs,
        s.drops,
        s.rejoins,
        s.delay_changes
    );
    match fin {
        Some((t, hash, from)) => outln!(c, "final hash:  {hash} (turn {t}, {from})"),
        None => outln!(c, "final hash:  none recorded"),
    }
    if !desyncs.is_empty() {
        outln!(
            c,
            "desyncs:     players disagreed on {} turns (hash records hold the majority's hash):",
            desyncs.len()
        );
        print_desyncs(c, &desyncs);
    }
    outln!(c, "status:      {s}");
    Ok(s.is_complete())
}

pub(super) fn hash_opt(h: Option<StateHash>) -> Value {
    h.map_or(Value::Null, |h| Value::String(h.to_hex()))
}

fn commands_text(game: &dyn Registered, player: PlayerId, bytes: Option<&Vec<u8>>) -> String {
    bytes.map_or_else(
        || "(none)".to_owned(),
        |bytes| game.commands_text(player, bytes),
    )
}

fn diff(
    games: &Games,
    c: &mut Console<'_>,
    a: &Path,
    b: &Path,
    as_json: bool,
) -> Result<bool, CliError> {
    let (ra, rb) = (open(a)?, open(b)?);
    let game_of = |r: &FileReader| (r.header().game_id.clone(), r.header().game_version);
    let (ga, gb) = (game_of(&ra), game_of(&rb));
    if ga != gb {
        // Recordings of different games have nothing in common to compare.
        if as_json {
            let out = json!({
                "same": false,
                "different_games": true,
                "a": { "game_id": ga.0, "game_version": ga.1 },
                "b": { "game_id": gb.0, "game_version": gb.1 },
            });
            outln!(c, "{out:#}");
        } else {
            outln!(
                c,
                "A ({}) is game {} version {}, B ({}) is game {} version {}: recordings of different games",
                display_name(a),
                ga.0,
                ga.1,
                display_name(b),
                gb.0,
                gb.1
            );
        }
        return Ok(false);
    }
    let game = games.find(&ga.0, ga.1)?;
    let rep = crate::diff(ra, rb)?;
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
                    "a": i.a.as_ref().map(|x| game.commands_json(i.player, x)),
                    "b": i.b.as_ref().map(|x| game.commands_json(i.player, x)),
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
        outln!(c, "{out:#}");
        return Ok(same);
    }
    let last = |s: &ReadSummary| {
        s.last_turn
            .map_or_else(|| "-".to_owned(), |t| t.to_string())
    };
    outln!(
        c,
        "A: {} (last turn {}; {})",
        display_name(a),
        last(&rep.a),
        rep.a
    );
    outln!(
        c,
        "B: {} (last turn {}; {})",
        display_name(b),
        last(&rep.b),
        rep.b
    );
    for d in &rep.header_differences {
        outln!(c, "header differs: {d}");
    }
    match &rep.first {
        None => outln!(
            c,
            "no difference in {} common turns",
            group_thousands(u64::from(rep.common_turns))
        ),
        Some(d) => {
            outln!(c, "first difference at turn {}:", d.turn);
            for i in &d.inputs {
                outln!(c, "  {} inputs differ:", i.player);
                outln!(c, "    A: {}", commands_text(game, i.player, i.a.as_ref()));
                outln!(c, "    B: {}", commands_text(game, i.player, i.b.as_ref()));
            }
            let show = |h: Option<StateHash>| h.map_or_else(|| "none".to_owned(), |h| h.to_hex());
            if d.hashes_differ() {
                outln!(c, "  hashes differ:");
            } else {
                outln!(c, "  hashes:");
            }
            outln!(c, "    A: {}", show(d.hash_a));
            outln!(c, "    B: {}", show(d.hash_b));
        }
    }
    Ok(same)
}

fn state(
    games: &Games,
    c: &mut Console<'_>,
    path: &Path,
    turn: Turn,
    as_json: bool,
) -> Result<bool, CliError> {
    let (reader, game) = open_game(games, path)?;
    let s = game.state(reader, turn)?;
    let hash = s.hash;
    let matches = s.recorded_hash.is_none_or(|r| r == hash);
    if as_json {
        let out = json!({
            "turn": turn.0,
            "hash": hash.to_hex(),
            "recorded_hash": hash_opt(s.recorded_hash),
            "matches_recorded": matches,
            "keyframe": s.keyframe.map(|t| t.0),
            "simulated_turns": s.simulated,
            "summary": s.json,
        });
        outln!(c, "{out:#}");
        return Ok(matches);
    }
    match s.keyframe {
        Some(k) => outln!(
            c,
            "state after turn {turn} (from the keyframe at turn {k}, {} turns simulated)",
            s.simulated
        ),
        None => outln!(
            c,
            "state after turn {turn} (simulated {} turns from the start; no keyframe before it)",
            s.simulated
        ),
    }
    match s.recorded_hash {
        Some(r) if r == hash => outln!(c, "hash: {hash} (matches the recorded hash)"),
        Some(r) => outln!(c, "hash: {hash} (DIFFERS from the recorded {r})"),
        None => outln!(c, "hash: {hash} (no hash recorded for this turn)"),
    }
    c.out(format_args!("{}", s.text));
    Ok(matches)
}

fn reindex(
    games: &Games,
    c: &mut Console<'_>,
    path: &Path,
    every: u32,
    out: &Path,
) -> Result<bool, CliError> {
    // Creating the output truncates it: checked before anything is opened.
    if same_file(path, out) {
        return Err(CliError::Usage(format!(
            "--out {} is the input file; write the copy to another file",
            out.display()
        )));
    }
    let (reader, game) = open_game(games, path)?;
    let file = std::fs::File::create(out).map_err(|e| file_error(out, e))?;
    let rep = game.reindex(reader, file, every)?;
    outln!(
        c,
        "wrote {}: {} turns, {} keyframes (every {every} turns); source {}",
        out.display(),
        rep.turns,
        rep.keyframes,
        rep.source
    );
    Ok(rep.source.is_complete())
}
