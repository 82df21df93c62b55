//! What a restarted relay reads back from its record directory. A relay's
//! recording is its match's write-ahead log: each turn reaches the file
//! before its bundle leaves the relay, and the recording starts with the
//! relay's facts about the match ([`replays::MatchFacts`]: its number, the
//! players' rules fingerprint, the starting delay, the last turn). So every
//! unfinished recording (no trailer) is a match the relay can rebuild at
//! its last recorded turn: [`scan`] finds them, cuts a torn last record,
//! reopens each for appending and rebuilds the bundles its players may
//! still lack from the recorded turns, drops, rejoins and delay changes.
//!
//! Files that cannot be resumed (another format version, a recording that
//! predates the facts record, a damaged header) are left as they are and
//! named with the reason: `replay verify` still reads what they hold.

use crate::event::{MatchId, MatchInfo};
use lockstep::low_level::proto::{Bundle, Notice, PlayerInfo, ToPeer};
use replays::{Record, Writer};
use sim::{PlayerId, StateHash, Turn};
use std::collections::VecDeque;
use std::fs::File;
use std::path::{Path, PathBuf};

/// A match found unfinished in the record directory, ready to be rebuilt.
pub struct Unfinished {
    /// The recording, reopened for appending.
    pub path: PathBuf,
    /// Bytes of a torn last record cut off the file.
    pub cut_bytes: u64,
    pub(crate) id: MatchId,
    pub(crate) info: MatchInfo,
    writer: Option<Writer<File>>,
    pub(crate) state: RecordedState,
}

impl std::fmt::Debug for Unfinished {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unfinished")
            .field("path", &self.path)
            .field("id", &self.id)
            .field("next_turn", &self.state.next_close)
            .finish_non_exhaustive()
    }
}

impl Unfinished {
    /// The match's name.
    #[must_use]
    pub fn match_name(&self) -> &str {
        &self.info.match_name
    }

    /// The relay's number of the match.
    #[must_use]
    pub const fn match_id(&self) -> u64 {
        self.id.0
    }

    /// The reopened recording, once (the recorder takes it over).
    pub(crate) fn take_writer(&mut self) -> Option<Writer<File>> {
        self.writer.take()
    }

    /// The next turn the resumed match closes.
    #[must_use]
    pub const fn next_turn(&self) -> Turn {
        self.state.next_close
    }
}

#[cfg(test)]
impl Unfinished {
    /// A match to resume without a file behind it, for unit tests.
    pub(crate) fn unrecorded(id: MatchId, info: MatchInfo, state: RecordedState) -> Self {
        Self {
            path: PathBuf::new(),
            cut_bytes: 0,
            id,
            info,
            writer: None,
            state,
        }
    }
}

/// The running state a recording holds, as of its last turn record.
#[derive(Debug, Default)]
pub(crate) struct RecordedState {
    /// The turn after the last recorded one.
    pub(crate) next_close: Turn,
    /// The input delay in force.
    pub(crate) delay: Option<u8>,
    /// Players dropped and not back, with the first turn without them.
    pub(crate) dropped: Vec<(PlayerId, Turn)>,
    /// The last turns' bundles as the relay sent them, oldest first.
    pub(crate) bundles: VecDeque<(Turn, Vec<u8>)>,
    /// The last recorded hash.
    pub(crate) last_hash: Option<(Turn, StateHash)>,
}

/// A recording in the record directory that is not resumed, and why.
#[derive(Debug)]
pub struct Skipped {
    /// The file.
    pub path: PathBuf,
    /// Why it is left as it is.
    pub reason: String,
}

/// Finds the unfinished recordings of `dir` (files ending `.lsr`) a relay
/// could resume, reading only: nothing is written. Finished files are
/// passed over after reading their end only.
#[must_use]
pub fn survey(dir: &Path) -> (Vec<PathBuf>, Vec<Skipped>) {
    let mut found = Vec::new();
    let mut skipped = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (found, skipped);
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "lsr"))
        .collect();
    paths.sort();
    for path in paths {
        match unfinished(&path) {
            Ok(true) => found.push(path),
            Ok(false) => {}
            Err(reason) => skipped.push(Skipped { path, reason }),
        }
    }
    (found, skipped)
}

/// [`survey`]s `dir` and reopens each unfinished recording for appending
/// (cutting a torn last record), keeping the bundles of at most `max_tail`
/// last turns.
#[must_use]
pub fn scan(dir: &Path, max_tail: usize) -> (Vec<Unfinished>, Vec<Skipped>) {
    let (paths, mut skipped) = survey(dir);
    let mut found = Vec::new();
    for path in paths {
        match open(&path, max_tail) {
            Ok(u) => found.push(u),
            Err(reason) => skipped.push(Skipped { path, reason }),
        }
    }
    (found, skipped)
}

/// Whether the file is a relay's recording of a match that did not finish.
fn unfinished(path: &Path) -> Result<bool, String> {
    let mut reader = replays::Reader::open(path).map_err(|e| e.to_string())?;
    if matches!(reader.keyframe_index(), Ok(Some(_))) {
        return Ok(false);
    }
    // Only a relay's recording says how to resume it: checked before the
    // whole file is read (the index lookup kept the reader after the header).
    match reader.next() {
        Some(Ok(Record::Match(_))) => Ok(true),
        _ => Err("no match facts record (not a relay's recording, or an older relay's)".into()),
    }
}

/// One unfinished file, reopened and read back.
fn open(path: &Path, max_tail: usize) -> Result<Unfinished, String> {
    let (writer, reopened) =
        Writer::reopen(path, replays::DEFAULT_SYNC).map_err(|e| e.to_string())?;
    let header = reopened.header;
    let mut facts = None;
    let mut state = RecordedState::default();
    // Notices recorded before the turn record whose bundle carried them.
    let mut notices: Vec<Notice> = Vec::new();
    for record in reopened.records {
        match record {
            Record::Match(f) => facts = Some(f),
            Record::Drop { player, turn } => {
                state.dropped.retain(|(p, _)| *p != player);
                state.dropped.push((player, turn));
                notices.push(Notice::PlayerDropped { player, turn });
            }
            Record::Rejoin { player, turn } => {
                state.dropped.retain(|(p, _)| *p != player);
                notices.push(Notice::PlayerRejoined { player, turn });
            }
            Record::DelayChange { delay, from_turn } => {
                let delay = u8::try_from(delay).unwrap_or(u8::MAX);
                state.delay = Some(delay);
                notices.push(Notice::DelayChange { delay, from_turn });
            }
            Record::Hash { turn, hash } => state.last_hash = Some((turn, hash)),
            Record::Turn { turn, inputs } => {
                let (mine, later): (Vec<Notice>, Vec<Notice>) =
                    notices.drain(..).partition(|n| carried_by(n) <= turn);
                notices = later;
                let bundle = ToPeer::Bundle(Bundle {
                    turn,
                    inputs,
                    notices: in_bundle_order(mine),
                });
                state.bundles.push_back((turn, bundle.to_bytes()));
                while state.bundles.len() > max_tail {
                    state.bundles.pop_front();
                }
                state.next_close = turn.next();
            }
            _ => {}
        }
    }
    let Some(facts) = facts else {
        return Err("no match facts record".into());
    };
    if state.bundles.is_empty() {
        state.next_close = facts.first_turn;
    }
    let info = MatchInfo {
        match_name: header.match_name,
        game_id: header.game_id,
        game_version: header.game_version,
        rules_hash: facts.rules_fingerprint,
        setup: header.setup,
        turn_length_us: header.turn_length_us,
        players: header
            .players
            .into_iter()
            .map(|p| PlayerInfo {
                id: p.id,
                name: p.name,
            })
            .collect(),
        input_delay: facts.input_delay,
        first_turn: facts.first_turn,
        last_turn: facts.last_turn,
    };
    if info.turn_length_us == 0 || info.players.is_empty() {
        return Err("the header names no players or no turn length".into());
    }
    Ok(Unfinished {
        path: path.to_owned(),
        cut_bytes: reopened.cut_bytes,
        id: MatchId(facts.match_id),
        info,
        writer: Some(writer),
        state,
    })
}

/// The turn whose bundle carried a notice: a drop's or a rejoin's own turn,
/// the turn before a delay change takes effect.
const fn carried_by(n: &Notice) -> Turn {
    match n {
        Notice::PlayerDropped { turn, .. } | Notice::PlayerRejoined { turn, .. } => *turn,
        Notice::DelayChange { from_turn, .. } => Turn(from_turn.0.saturating_sub(1)),
    }
}

/// The order a relay puts notices in a bundle: per slot a rejoin then a
/// drop, then the delay change.
fn in_bundle_order(mut notices: Vec<Notice>) -> Vec<Notice> {
    notices.sort_by_key(|n| match n {
        Notice::PlayerRejoined { player, .. } => (0, player.0, 0),
        Notice::PlayerDropped { player, .. } => (0, player.0, 1),
        Notice::DelayChange { .. } => (1, 0, 0),
    });
    notices
}
