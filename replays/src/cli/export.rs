//! `replay export`: one JSON object per record, commands decoded by the
//! file's game.

use super::commands::{CliError, hash_opt, open_game, status_json};
use super::console::{Console, outln};
use super::games::{Games, Registered};
use crate::{Header, Record};
use serde_json::{Value, json};
use std::path::Path;

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
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

fn record_json(game: &dyn Registered, offset: u64, r: &Record) -> Value {
    let mut v = match r {
        Record::Header(h) => header_json(h),
        Record::Turn { turn, inputs } => json!({
            "turn": turn.0,
            "inputs": inputs.iter().map(|(p, b)| json!({
                "player": p.0,
                "bytes": hex(b),
                "commands": game.commands_json(*p, b),
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
        Record::Drop { player, turn } | Record::Rejoin { player, turn } => {
            json!({"player": player.0, "turn": turn.0})
        }
        Record::Forensics(report) => serde_json::to_value(report).unwrap_or(Value::Null),
        Record::End { reason } => json!({ "reason": reason }),
        Record::Match(facts) => json!({
            "match_id": facts.match_id,
            "rules_fingerprint": facts.rules_fingerprint.to_hex(),
            "input_delay": facts.input_delay,
            "first_turn": facts.first_turn.0,
            "last_turn": facts.last_turn.map(|t| t.0),
        }),
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
        map.insert("kind".into(), json!(crate::format::kind_name(r.kind())));
    }
    v
}

pub(super) fn export(games: &Games, c: &mut Console<'_>, path: &Path) -> Result<bool, CliError> {
    let (mut reader, game) = open_game(games, path)?;
    outln!(c, "{}", header_json(reader.header()));
    while let Some(item) = reader.next() {
        match item {
            Ok(r) => outln!(c, "{}", record_json(game, reader.record_offset(), &r)),
            Err(e) if e.is_damage() => break,
            Err(e) => return Err(e.into()),
        }
    }
    let s = reader.summary();
    outln!(
        c,
        "{}",
        json!({"kind": "end", "offset": s.intact_bytes, "file_status": status_json(s)})
    );
    Ok(s.is_complete())
}
