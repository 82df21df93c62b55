//! `replay desync`: the relay's desync forensics reports a recording holds,
//! a table per differing entity for humans or JSON for tools (with the
//! inputs of the last turns decoded by the file's game when it is known).

use super::commands::CliError;
use super::console::{Console, errln, outln};
use super::games::Games;
use crate::{DesyncReport, Record};
use serde_json::{Value, json};
use std::path::Path;

/// Prints every forensics report of the file; `Ok(false)` when it has none.
pub(super) fn desync(
    games: &Games,
    c: &mut Console<'_>,
    path: &Path,
    as_json: bool,
) -> Result<bool, CliError> {
    let reader = super::commands::open(path)?;
    let header = reader.header().clone();
    let mut reports: Vec<DesyncReport> = Vec::new();
    for item in reader {
        match item {
            Ok(Record::Forensics(r)) => reports.push(*r),
            Ok(_) => {}
            Err(e) if e.is_damage() => break,
            Err(e) => return Err(e.into()),
        }
    }
    // The report is game-agnostic; the game, if known, decodes the inputs.
    let game = games.find(&header.game_id, header.game_version).ok();
    if as_json {
        let list: Vec<Value> = reports
            .iter()
            .map(|r| {
                let mut v = serde_json::to_value(r).unwrap_or(Value::Null);
                if let (Some(game), Some(inputs)) = (game, v.get_mut("inputs"))
                    && let Some(turns) = inputs.as_array_mut()
                {
                    for t in turns {
                        let Some(entries) = t.get_mut("inputs").and_then(Value::as_array_mut)
                        else {
                            continue;
                        };
                        for e in entries {
                            let player = e.get("player").and_then(Value::as_u64);
                            let bytes = e.get("bytes").and_then(Value::as_str).and_then(unhex);
                            if let (Some(p), Some(b)) = (player, bytes)
                                && let Ok(p) = u8::try_from(p)
                                && let Some(o) = e.as_object_mut()
                            {
                                o.insert(
                                    "commands".into(),
                                    game.commands_json(sim::PlayerId(p), &b),
                                );
                            }
                        }
                    }
                }
                v
            })
            .collect();
        outln!(
            c,
            "{}",
            serde_json::to_string_pretty(&json!({ "reports": list })).unwrap_or_default()
        );
    } else {
        for r in &reports {
            outln!(c, "{}", r.to_text());
        }
        if reports.is_empty() {
            errln!(c, "replay: {} holds no desync report", path.display());
        }
    }
    Ok(!reports.is_empty())
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}
