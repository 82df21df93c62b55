//! `replay verify`: re-simulates a file with its game, checks every recorded
//! hash and reports the first divergence and the recorded desyncs.

use super::commands::{CliError, desync_json, hash_opt, open_game, print_desyncs, status_json};
use super::console::{Console, errln, outln};
use super::games::Games;
use crate::VerifyReport;
use crate::reader::group_thousands;
use crate::verify::DivergenceSource;
use serde_json::{Value, json};
use sim::{StateHash, Turn};
use std::path::Path;

/// A progress bar on stderr (only when it is a terminal).
struct ProgressBar {
    total: u64,
    shown: u64,
    on: bool,
}

impl ProgressBar {
    fn new(total: u64, on: bool) -> Self {
        Self {
            total: total.max(1),
            shown: u64::MAX,
            on,
        }
    }

    fn update(&mut self, c: &mut Console<'_>, turn: Turn, position: u64) {
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
        c.err(format_args!("\r[{bar}] {pct:3}% turn {turn}"));
    }

    fn clear(&self, c: &mut Console<'_>) {
        if self.on && self.shown != u64::MAX {
            c.err(format_args!("\r{}\r", " ".repeat(60)));
        }
    }
}

/// How `replay verify` ended (failures are `Ok(Failed)` or an error).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Verified {
    /// Every recorded hash matches and no desync is recorded (exit 0).
    Clean,
    /// Every recorded (majority) hash matches, but desyncs are recorded (exit 3).
    WithDesyncs,
    /// A divergence, or an incomplete or damaged file (exit 1).
    Failed,
}

pub(super) fn verify(
    games: &Games,
    c: &mut Console<'_>,
    path: &Path,
    as_json: bool,
    print_hashes: bool,
    progress: bool,
) -> Result<Verified, CliError> {
    let mut turn_hashes: Vec<(Turn, StateHash)> = Vec::new();
    let mut run = |c: &mut Console<'_>| -> Result<VerifyReport, CliError> {
        let total = std::fs::metadata(path)
            .map_err(|e| super::commands::file_error(path, e))?
            .len();
        let (reader, game) = open_game(games, path)?;
        let mut bar = ProgressBar::new(total, progress);
        let report = game.verify(reader, &mut |p| {
            bar.update(c, p.turn, p.position);
            if print_hashes {
                turn_hashes.push((p.turn, p.hash));
            }
        });
        bar.clear(c);
        Ok(report?)
    };
    let report = match run(c) {
        Ok(r) => r,
        Err(e) if as_json => {
            // Every `verify --json` prints one object; an unknown game is
            // also named on stderr, like in every other mode.
            if let CliError::UnknownGame(u) = &e {
                errln!(c, "replay: {u}");
            }
            let out = json!({
                "verified": false,
                "turns": 0,
                "final_hash": null,
                "first_divergence": null,
                "error": e.to_string(),
            });
            outln!(c, "{out:#}");
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
        outln!(c, "{out:#}");
        return Ok(outcome);
    }
    for (t, h) in &turn_hashes {
        outln!(c, "turn {t}: {h}");
    }
    outln!(
        c,
        "re-simulated {} turns; {} hashes and {} keyframes checked; {} rejected inputs",
        group_thousands(u64::from(report.turns)),
        report.hashes_checked,
        report.keyframes_checked,
        report.rejected_inputs
    );
    if let (Some(h), Some(t)) = (report.final_hash, report.last_turn) {
        outln!(c, "hash after turn {t}: {h}");
    }
    if !report.recorded_desyncs.is_empty() {
        outln!(
            c,
            "desyncs recorded during the match: players disagreed on {} turns",
            report.recorded_desyncs.len()
        );
        print_desyncs(c, &report.recorded_desyncs);
    }
    outln!(c, "file: {}", report.summary);
    match &report.first_divergence {
        None if outcome == Verified::WithDesyncs => outln!(
            c,
            "VERIFIED WITH DESYNCS: every recorded hash matches (the majority's on the {} desynced turns), but the players disagreed",
            report.recorded_desyncs.len()
        ),
        None if ok => outln!(c, "VERIFIED: every recorded hash matches"),
        None => outln!(
            c,
            "NOT VERIFIED: the hashes present match, but the file is incomplete"
        ),
        Some(d) => {
            outln!(
                c,
                "DIVERGED at turn {} ({})",
                d.turn,
                source_name(d.source).replace('_', " ")
            );
            outln!(c, "  expected {}", d.expected);
            outln!(c, "  actual   {}", d.actual);
            match d.sections_turn {
                Some(t) if !d.sections.is_empty() => {
                    outln!(c, "  differing sections (compared at turn {t}):");
                    for s in &d.sections {
                        let show =
                            |h: Option<StateHash>| h.map_or_else(|| "?".to_owned(), |h| h.short());
                        outln!(
                            c,
                            "    {}: expected {} actual {}",
                            s.name,
                            show(s.expected),
                            show(s.actual)
                        );
                    }
                }
                _ => outln!(
                    c,
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
