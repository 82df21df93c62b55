//! The relay binary's output: log levels, one line per event (JSON or
//! text), and the JSON form of router events and relay notes.

use relay::RouterEvent;
use relay::serve::RelayNote;

/// Log severity, most severe first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub(crate) enum Level {
    Error,
    Warn,
    Info,
    Debug,
}

impl Level {
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Self::Error => "error",
            Self::Warn => "warn",
            Self::Info => "info",
            Self::Debug => "debug",
        }
    }
}

pub(crate) fn log_note(n: &RelayNote<'_>, json: bool, level: Level) {
    let (at, value) = match n {
        RelayNote::Event(e, _) => {
            let at = event_level(e);
            if at > level {
                return;
            }
            match event_json(e, true) {
                Some(v) => (at, v),
                None => return,
            }
        }
        RelayNote::Recorded(r) => (
            Level::Info,
            serde_json::json!({
            "event": "recorded", "match": r.id.0, "path": r.path.display().to_string(),
            "turns": r.turns, "finished": r.finished,
            "desync_report": r.report.as_ref().map(|p| p.display().to_string()) }),
        ),
        RelayNote::RecordError(e) => (
            Level::Error,
            serde_json::json!({ "event": "record_error", "error": e }),
        ),
        RelayNote::Refused {
            conn,
            addr,
            match_name,
            reason,
            detail,
        } => (
            Level::Warn,
            serde_json::json!({
            "event": "join_refused", "conn": conn.map(|c| c.0), "addr": addr.to_string(),
            "match": match_name, "reason": reason.code(), "text": reason.to_string(),
            "detail": detail }),
        ),
        RelayNote::RefusalsSuppressed { count } => (
            Level::Warn,
            serde_json::json!({ "event": "refusals_suppressed", "count": count }),
        ),
        RelayNote::SendDropped { count, conn, drop } => (
            Level::Warn,
            serde_json::json!({
            "event": "send_dropped", "count": count, "conn": conn.0,
            "channel": format!("{:?}", drop.channel).to_lowercase(), "bytes": drop.len,
            "text": drop.to_string() }),
        ),
        RelayNote::CutOff { conn, reason } => (
            Level::Warn,
            serde_json::json!({
            "event": "cut_off", "conn": conn.0, "reason": format!("{reason:?}"),
            "text": reason.to_string() }),
        ),
        RelayNote::HandingOver { running } => (
            Level::Warn,
            serde_json::json!({ "event": "handing_over", "running": running,
                "text": "stopping without ending the running matches: a relay started on the same record directory and rejoin key resumes them" }),
        ),
        RelayNote::Draining { running, grace } => (
            Level::Warn,
            serde_json::json!({ "event": "draining", "running": running, "grace_s": grace.as_micros() / 1_000_000 }),
        ),
    };
    log_line(level, at, json, value);
}

/// The log line of an Agones note: its level and JSON.
pub(crate) fn agones_json(n: &relay::agones::AgonesNote) -> (Level, serde_json::Value) {
    use relay::agones::AgonesNote;
    use serde_json::json;
    match n {
        AgonesNote::Unreachable { call, port, error } => (
            Level::Warn,
            json!({ "event": "agones_unreachable", "call": call, "port": port, "error": error,
                "note": "the Agones SDK server does not answer: the relay keeps serving and retries" }),
        ),
        AgonesNote::Reachable => (Level::Info, json!({ "event": "agones_reachable" })),
        AgonesNote::Refused { text } => (
            Level::Warn,
            json!({ "event": "agones_refused", "text": text }),
        ),
        AgonesNote::ListFull { list, capacity } => (
            Level::Warn,
            json!({ "event": "agones_list_full", "list": list, "capacity": capacity }),
        ),
        AgonesNote::EventsLost { count } => (
            Level::Warn,
            json!({ "event": "agones_events_lost", "count": count }),
        ),
        AgonesNote::GameServer { state, metadata } => {
            let meta: serde_json::Map<String, serde_json::Value> = metadata
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().into()))
                .collect();
            (
                Level::Info,
                json!({ "event": "agones_gameserver", "state": state, "metadata": meta }),
            )
        }
    }
}

/// Writes one log line to stdout; a closed stdout (the log reader went
/// away) must not stop the relay, so write errors are ignored.
pub(crate) fn out_line(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// How severe a router event is.
const fn event_level(e: &RouterEvent) -> Level {
    match e {
        RouterEvent::TurnClosed { .. }
        | RouterEvent::HashAgreed { .. }
        | RouterEvent::HashDisputed { .. }
        | RouterEvent::PeerReport { .. } => Level::Debug,
        RouterEvent::Desync { .. }
        | RouterEvent::DesyncSections { .. }
        | RouterEvent::DesyncReport { .. } => Level::Error,
        RouterEvent::Dropped { .. } => Level::Warn,
        RouterEvent::LobbyOpened { .. }
        | RouterEvent::MatchStarted { .. }
        | RouterEvent::MatchResumed { .. }
        | RouterEvent::Rejoining { .. }
        | RouterEvent::Rejoined { .. }
        | RouterEvent::Healing { .. }
        | RouterEvent::Healed { .. }
        | RouterEvent::DelayChanged { .. }
        | RouterEvent::MatchEnded { .. } => Level::Info,
    }
}

/// Prints one log line if `at` is within `level`: JSON with a `level` field,
/// or text `kind {fields}` on stdout (errors and warnings also keep stdout,
/// so one stream holds the whole story).
pub(crate) fn log_line(level: Level, at: Level, json: bool, mut value: serde_json::Value) {
    if at > level {
        return;
    }
    if let Some(o) = value.as_object_mut() {
        o.insert("level".into(), at.name().into());
    }
    if json {
        out_line(&value.to_string());
    } else {
        let kind = value["event"].as_str().unwrap_or("?").to_owned();
        let mut rest = value;
        if let Some(o) = rest.as_object_mut() {
            o.remove("event");
            o.remove("level");
        }
        out_line(&format!("{:<5} {kind:<14} {rest}", at.name()));
    }
}

pub(crate) fn event_json(e: &RouterEvent, verbose: bool) -> Option<serde_json::Value> {
    use serde_json::json;
    let hex = |h: &sim::StateHash| h.to_hex();
    Some(match e {
        RouterEvent::LobbyOpened {
            id,
            match_name,
            slots,
            game_id,
        } => json!({
            "event": "lobby_opened", "match": id.0, "name": match_name, "slots": slots,
            "game": game_id }),
        RouterEvent::MatchStarted { id, info } => json!({
            "event": "match_started", "match": id.0, "name": info.match_name,
            "game": info.game_id, "seed": info.setup.seed, "players": info.players.iter().map(|p| &p.name).collect::<Vec<_>>(),
            "turn_length_us": info.turn_length_us, "input_delay": info.input_delay,
            "last_turn": info.last_turn.map(|t| t.0) }),
        RouterEvent::MatchResumed {
            id,
            info,
            next_turn,
        } => json!({
            "event": "match_resumed", "match": id.0, "name": info.match_name,
            "game": info.game_id, "players": info.players.iter().map(|p| &p.name).collect::<Vec<_>>(),
            "next_turn": next_turn.0, "last_turn": info.last_turn.map(|t| t.0) }),
        RouterEvent::TurnClosed {
            id,
            turn,
            inputs,
            missing,
        } if verbose => json!({
            "event": "turn_closed", "match": id.0, "turn": turn.0, "inputs": inputs.len(),
            "missing": missing.iter().map(|p| p.0).collect::<Vec<_>>() }),
        RouterEvent::HashAgreed { id, turn, hash } if verbose => json!({
            "event": "hash_agreed", "match": id.0, "turn": turn.0, "hash": hex(hash) }),
        RouterEvent::HashDisputed {
            id,
            turn,
            majority,
            dissent,
        } if verbose => json!({
            "event": "hash_disputed", "match": id.0, "turn": turn.0, "majority": majority.as_ref().map(hex),
            "dissent": dissent.iter().map(|(p, h)| json!({"player": p.0, "hash": hex(h)})).collect::<Vec<_>>() }),
        RouterEvent::TurnClosed { .. }
        | RouterEvent::HashAgreed { .. }
        | RouterEvent::HashDisputed { .. } => return None,
        RouterEvent::Desync {
            id,
            turn,
            hashes,
            odd_players,
        } => json!({
            "event": "desync", "match": id.0, "turn": turn.0,
            "hashes": hashes.iter().map(|(p, h)| json!({"player": p.0, "hash": hex(h)})).collect::<Vec<_>>(),
            "odd_players": odd_players.iter().map(|p| p.0).collect::<Vec<_>>() }),
        RouterEvent::DesyncSections {
            id,
            turn,
            players,
            sections,
        } => json!({
            "event": "desync_sections", "match": id.0, "turn": turn.0,
            "players": players.iter().map(|p| p.0).collect::<Vec<_>>(), "sections": sections }),
        RouterEvent::DesyncReport { id, report } => json!({
            "event": "desync_report", "match": id.0, "turn": report.turn,
            "complete": report.complete, "no_majority": report.no_majority,
            "odd_players": report.odd_players,
            "entities": report.entities.iter().map(|e| json!({
                "section": e.section, "id": e.id,
                "fields": e.fields.iter().map(|f| json!({"path": f.path, "majority": f.majority, "odd": f.odd})).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "notes": report.notes }),
        RouterEvent::Dropped {
            id,
            player,
            turn,
            reason,
        } => json!({
            "event": "dropped", "match": id.0, "player": player.0, "turn": turn.0, "reason": reason.to_string() }),
        RouterEvent::DelayChanged {
            id,
            delay,
            from_turn,
        } => json!({
            "event": "delay_changed", "match": id.0, "delay": delay, "from_turn": from_turn.0 }),
        RouterEvent::Rejoining {
            id,
            player,
            snapshot,
            bundles,
            kept_world,
        } => json!({
            "event": "rejoining", "match": id.0, "player": player.0, "snapshot_turn": snapshot.map(|t| t.0),
            "bundles": bundles, "kept_world": kept_world }),
        RouterEvent::Rejoined { id, player, turn } => json!({
            "event": "rejoined", "match": id.0, "player": player.0, "turn": turn.0 }),
        RouterEvent::Healing {
            id,
            desync_turn,
            players,
            snapshot,
        } => json!({
            "event": "healing", "match": id.0, "desync_turn": desync_turn.0,
            "players": players.iter().map(|p| p.0).collect::<Vec<_>>(), "snapshot_turn": snapshot.map(|t| t.0) }),
        RouterEvent::Healed {
            id,
            desync_turn,
            players,
            turn,
            took_us,
        } => json!({
            "event": "healed", "match": id.0, "desync_turn": desync_turn.0,
            "players": players.iter().map(|p| p.0).collect::<Vec<_>>(), "turn": turn.0, "took_ms": took_us / 1000 }),
        RouterEvent::PeerReport { .. } => return None,
        RouterEvent::MatchEnded { id, turn, reason } => json!({
            "event": "match_ended", "match": id.0, "turn": turn.map(|t| t.0), "reason": reason.to_string() }),
    })
}
