//! A recording read whole into memory for random access: its turns, the
//! recorded hashes and keyframes, and the events a timeline marks (drops,
//! rejoins, delay changes, desyncs, disputes, forensics, the end). A viewer
//! holds the file's bytes anyway; indexing them once makes every seek a
//! lookup instead of a read from the start.

use replays::forensics::DesyncReport;
use replays::{Header, Reader, Record, ReplayError};
use serde_json::{Value, json};
use sim::{PlayerId, StateHash, Turn};
use std::collections::BTreeMap;

/// One player's input bytes of one turn, as recorded.
pub type TurnInputs = Vec<(PlayerId, Vec<u8>)>;

/// Something the timeline marks at a turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Marker {
    /// The turn it happened at (for a drop or rejoin, the first turn it applies to).
    pub turn: Turn,
    /// What kind: `drop`, `rejoin`, `delay`, `desync`, `dispute`, `keyframe`, `end`.
    pub kind: &'static str,
    /// A line for a person, e.g. "player 2 dropped".
    pub text: String,
}

/// A recording indexed for a viewer. Build it with [`Recording::parse`].
#[derive(Clone, Debug)]
pub struct Recording {
    /// The file's header.
    pub header: Header,
    /// Turn records in file order (strictly increasing turns).
    pub turns: Vec<(Turn, TurnInputs)>,
    /// The agreed hash of every turn that has one.
    pub hashes: BTreeMap<Turn, StateHash>,
    /// Keyframes by turn: the world's hash and snapshot after that turn.
    pub keyframes: BTreeMap<Turn, (StateHash, Vec<u8>)>,
    /// The world before turn 0, for a match started from a scenario.
    pub start: Option<(StateHash, Vec<u8>)>,
    /// The timeline's events, in turn order.
    pub markers: Vec<Marker>,
    /// The relay's forensics reports (entities and fields that differed).
    pub forensics: Vec<DesyncReport>,
    /// How the file ends: complete, or what was recovered from a cut or damaged one.
    pub ending: String,
    /// Offset just past the last whole record read: where [`Recording::extend`] resumes.
    read_to: u64,
    /// Whether a trailer was read.
    finished: bool,
}

impl Recording {
    /// Reads every record of a recording. A file cut short or damaged after
    /// its header still opens, with what was read before the damage (the
    /// ending says so): a viewer shows what there is.
    ///
    /// # Errors
    /// The bytes are not a recording (no readable header).
    pub fn parse(bytes: &[u8]) -> Result<Self, ReplayError> {
        let reader = Reader::from_bytes(bytes)?;
        let mut rec = Self {
            header: reader.header().clone(),
            turns: Vec::new(),
            hashes: BTreeMap::new(),
            keyframes: BTreeMap::new(),
            start: None,
            markers: Vec::new(),
            forensics: Vec::new(),
            ending: String::new(),
            read_to: reader.position(),
            finished: false,
        };
        rec.read(reader);
        Ok(rec)
    }

    /// Reads the records `bytes` holds beyond those read before: `bytes` is
    /// this recording grown at its end (a live view receives it a few
    /// records at a time). Reading resumes at the end of the last whole
    /// record, with the checksum chain checked from there, so each call
    /// costs what is new, not the whole file; a record cut short is read
    /// again, whole, by the next call.
    ///
    /// # Errors
    /// The bytes are not a recording, or not the one read so far (the
    /// record at the resume point does not continue the chain).
    pub fn extend(&mut self, bytes: &[u8]) -> Result<(), ReplayError> {
        let mut reader = Reader::from_bytes(bytes)?;
        if self.read_to > reader.position() {
            reader.jump_to(self.read_to)?;
        }
        self.read(reader);
        Ok(())
    }

    /// Reads records to the end of what `reader` holds, from where it stands.
    fn read(&mut self, mut reader: Reader<std::io::Cursor<&[u8]>>) {
        "complete".clone_into(&mut self.ending);
        for record in reader.by_ref() {
            let record = match record {
                Ok(r) => r,
                Err(e) => {
                    self.ending = format!("damaged: {e}");
                    break;
                }
            };
            match record {
                Record::Header(_) | Record::KeyframeIndex(_) | Record::Match(_) => {}
                Record::Turn { turn, inputs } => self.turns.push((turn, inputs)),
                Record::Hash { turn, hash } => {
                    self.hashes.insert(turn, hash);
                }
                Record::Desync { turn, hashes, .. } => self.mark(
                    turn,
                    "desync",
                    format!("desync: {} players' hashes differ", hashes.len()),
                ),
                Record::Dispute { turn, dissent, .. } => {
                    let who: Vec<String> = dissent.iter().map(|(p, _)| p.to_string()).collect();
                    self.mark(turn, "dispute", format!("odd: {}", who.join(", ")));
                }
                Record::Drop { player, turn } => {
                    self.mark(turn, "drop", format!("{} dropped", self.name(player)));
                }
                Record::Rejoin { player, turn } => {
                    self.mark(turn, "rejoin", format!("{} rejoined", self.name(player)));
                }
                Record::DelayChange { delay, from_turn } => {
                    self.mark(from_turn, "delay", format!("input delay {delay} turns"))
                }
                Record::Keyframe {
                    turn,
                    hash,
                    snapshot,
                } => {
                    self.keyframes.insert(turn, (hash, snapshot));
                }
                Record::Start { hash, snapshot } => self.start = Some((hash, snapshot)),
                Record::Forensics(report) => self.forensics.push(*report),
                // An early end shows at the last turn.
                Record::End { reason } => {
                    if let Some(&(turn, _)) = self.turns.last()
                        && reason != "completed"
                    {
                        self.mark(turn, "end", format!("the match ended: {reason}"));
                    }
                }
                Record::Trailer { final_turn, .. } => {
                    self.finished = true;
                    self.mark(final_turn, "end", "match end".to_owned());
                }
            }
        }
        self.read_to = self.read_to.max(reader.summary().intact_bytes);
        if !self.finished && self.ending == "complete" {
            "unfinished (no trailer)".clone_into(&mut self.ending);
        }
        // Stable: markers of one turn keep the order they were recorded in.
        self.markers.sort_by_key(|m| m.turn);
    }

    fn mark(&mut self, turn: Turn, kind: &'static str, text: String) {
        self.markers.push(Marker { turn, kind, text });
    }

    fn name(&self, player: PlayerId) -> String {
        self.header
            .players
            .iter()
            .find(|p| p.id == player)
            .map_or_else(|| player.to_string(), |p| format!("{} ({player})", p.name))
    }

    /// The last turn the recording holds (its last turn record), if any.
    #[must_use]
    pub fn last_turn(&self) -> Option<Turn> {
        self.turns.last().map(|(t, _)| *t)
    }

    /// Index of the first turn record after `turn` (all of them for `None`).
    #[must_use]
    pub fn first_after(&self, turn: Option<Turn>) -> usize {
        turn.map_or(0, |t| self.turns.partition_point(|(r, _)| *r <= t))
    }

    /// The header, markers, keyframes and forensics as JSON for the page.
    #[must_use]
    pub fn info_json(&self) -> Value {
        let h = &self.header;
        json!({
            "game": h.game_id,
            "game_version": h.game_version,
            "match": h.match_name,
            "seed": h.setup.seed,
            "players": h.players.iter().map(|p| json!({"id": p.id.0, "name": p.name})).collect::<Vec<_>>(),
            "turn_length_us": h.turn_length_us,
            "first_turn": self.turns.first().map(|(t, _)| t.0),
            "last_turn": self.last_turn().map(|t| t.0),
            "turn_records": self.turns.len(),
            "hashes": self.hashes.len(),
            "keyframes": self.keyframes.keys().map(|t| t.0).collect::<Vec<_>>(),
            "markers": self.markers.iter().map(|m| json!({"turn": m.turn.0, "kind": m.kind, "text": m.text})).collect::<Vec<_>>(),
            "forensics": self.forensics.iter().map(|r| serde_json::to_value(r).unwrap_or(Value::Null)).collect::<Vec<_>>(),
            "commands_per_minute": self.commands_per_minute(),
            "ending": self.ending,
        })
    }

    /// Each player's commands per minute, over windows of ten seconds of
    /// match time (so a short match still draws a curve); the count is the
    /// one each input's bytes start with, no game type needed.
    fn commands_per_minute(&self) -> Value {
        const WINDOW_US: u64 = 10_000_000;
        let turn_us = self.header.turn_length_us.max(1);
        let per_window = u32::try_from((WINDOW_US / turn_us).max(1)).unwrap_or(u32::MAX);
        let per_minute = 60_000_000 / (u64::from(per_window) * turn_us).max(1);
        let mut windows: BTreeMap<u32, BTreeMap<u8, u64>> = BTreeMap::new();
        for (turn, inputs) in &self.turns {
            let w = windows.entry(turn.0 / per_window).or_default();
            for (player, bytes) in inputs {
                *w.entry(player.0).or_default() += command_count(bytes) * per_minute;
            }
        }
        json!({
            "window_turns": per_window,
            "windows": windows.iter().map(|(w, counts)| json!({
                "turn": w * per_window,
                "counts": counts.iter().map(|(p, n)| json!([p, n])).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })
    }
}

/// How many commands one player's input bytes hold: `sim::encode_commands`
/// writes a varint count first (0 for bytes that do not start with one).
fn command_count(bytes: &[u8]) -> u64 {
    let mut n = 0u64;
    for (i, b) in bytes.iter().take(10).enumerate() {
        n |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return n;
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_count_reads_the_varint_prefix() {
        let mut out = Vec::new();
        sim::encode_commands(&[1u8, 2, 3], &mut out);
        assert_eq!(command_count(&out), 3);
        let many: Vec<u8> = vec![0; 200];
        out.clear();
        sim::encode_commands(&many, &mut out);
        assert_eq!(command_count(&out), 200);
        assert_eq!(command_count(&[]), 0);
    }
}
