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
use lockstep::low_level::proto::{Bundle, MAX_INPUT_DELAY, Notice, PlayerInfo, ToPeer};
use replays::{Record, Writer};
use sim::{MAX_PLAYERS, PlayerId, StateHash, Turn};
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
/// last turns. At most `max_resumed` are reopened (in file name order);
/// the others are skipped untouched, so a directory of forged recordings
/// cannot fill the relay ([`crate::limits::Limits::max_resumed`]).
#[must_use]
pub fn scan(dir: &Path, max_tail: usize, max_resumed: usize) -> (Vec<Unfinished>, Vec<Skipped>) {
    let (paths, mut skipped) = survey(dir);
    let mut found = Vec::new();
    for path in paths {
        if found.len() >= max_resumed {
            skipped.push(Skipped {
                path,
                reason: format!(
                    "the relay resumes at most {max_resumed} matches (half its match limit)"
                ),
            });
            continue;
        }
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
    let n = check_header(&header)?;
    let mut seen_turn = false;
    for record in reopened.records {
        if let Some(turn) = record.turn() {
            check_turn(turn, record.kind())?;
        }
        match record {
            Record::Match(f) => {
                if facts.is_some() || seen_turn {
                    return Err("a second match facts record, or one after a turn".into());
                }
                check_facts(&f)?;
                facts = Some(f);
            }
            Record::Drop { player, .. } | Record::Rejoin { player, .. }
                if usize::from(player.0) >= n =>
            {
                return Err(format!("a drop or rejoin of player {} of {n}", player.0));
            }
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
                let delay = u8::try_from(delay)
                    .ok()
                    .filter(|d| *d <= MAX_INPUT_DELAY)
                    .ok_or_else(|| {
                        format!("an input delay of {delay} (at most {MAX_INPUT_DELAY})")
                    })?;
                state.delay = Some(delay);
                notices.push(Notice::DelayChange { delay, from_turn });
            }
            Record::Hash { turn, hash } => state.last_hash = Some((turn, hash)),
            Record::Turn { turn, inputs } => {
                let Some(f) = &facts else {
                    return Err("a turn record before the match facts record".into());
                };
                // Turns rise from the first one and stay within its length.
                if turn < f.first_turn
                    || (seen_turn && turn < state.next_close)
                    || f.last_turn.is_some_and(|last| turn > last)
                {
                    return Err(format!("turn {turn} is out of order or outside the match"));
                }
                if let Some((p, _)) = inputs.iter().find(|(p, _)| usize::from(p.0) >= n) {
                    return Err(format!("turn {turn} holds inputs of player {} of {n}", p.0));
                }
                let (mine, later): (Vec<Notice>, Vec<Notice>) =
                    notices.drain(..).partition(|n| carried_by(n) <= turn);
                notices = later;
                let bundle = ToPeer::Bundle(Bundle {
                    turn,
                    inputs,
                    notices: in_bundle_order(mine),
                    tag: None,
                });
                seen_turn = true;
                state.bundles.push_back((turn, bundle.to_bytes()));
                while state.bundles.len() > max_tail {
                    state.bundles.pop_front();
                }
                // Checked: `check_turn` keeps turns far below the end.
                state.next_close = Turn(
                    turn.0
                        .checked_add(1)
                        .ok_or_else(|| format!("turn {turn} is the last of the range"))?,
                );
            }
            _ => {}
        }
    }
    let Some(facts) = facts else {
        return Err("no match facts record".into());
    };
    // Counted apart from the bundles kept: a tail of 0 keeps none.
    if !seen_turn {
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
        nonce: facts.nonce.map(crate::rejoin_config::MatchNonce),
        token: facts.token.map(|t| crate::event::TokenBinding {
            instance: lockstep::token::MatchInstance(t.instance),
            expire_unix: t.expire_unix,
        }),
    };
    Ok(Unfinished {
        path: path.to_owned(),
        cut_bytes: reopened.cut_bytes,
        id: MatchId(facts.match_id),
        info,
        writer: Some(writer),
        state,
    })
}

/// The last turn a resumed match may hold or name. Far below `u32::MAX`
/// (2^31: over two years of turns at 30 per second, more than any real
/// match plays) so that a resumed match's arithmetic (the next turn, a
/// delay ahead, a hand-back's [`MAX_HAND_BACK_TURNS`]) never reaches the
/// end of the range; a file naming a later turn is forged or damaged.
///
/// [`MAX_HAND_BACK_TURNS`]: lockstep::low_level::proto::MAX_HAND_BACK_TURNS
pub const MAX_RESUMABLE_TURN: u32 = 1 << 31;

/// The largest match number a resumed match may have (2^48): the relay
/// numbers its matches from 1 upwards, and the numbers after a resumed
/// one must not run out.
pub const MAX_RESUMABLE_MATCH_ID: u64 = 1 << 48;

/// The body of the `resume` fuzz target (`relay/fuzz`), here so that the
/// normal test suite runs every file of its corpus on stable Rust (no
/// libFuzzer, no nightly): use it for those two and nothing else.
///
/// `data` is framed as records (`kind: u8, len: u32 LE, payload`, repeated;
/// leftover bytes a torn tail) behind a valid checksum chain, so that
/// mutated inputs get past the checksums to the facts, turns, drops and
/// delays resume validates. The recording is written to `dir` (which
/// should hold nothing else) as `m.lsr`, [`scan`]ned as a starting relay
/// would, and removed. The promise checked: no panic, no hang, at most one
/// match found or skipped, and a resumed match's next turn and number
/// within the resumable range. Whether the match was resumed.
///
/// # Errors
/// A broken promise, or the recording could not be written.
pub fn check_fuzz_input(dir: &Path, data: &[u8]) -> Result<bool, String> {
    // A record the writer refuses to frame: not a recording.
    let Some(file) = replays::format::framed_for_fuzzing(data) else {
        return Ok(false);
    };
    let path = dir.join("m.lsr");
    std::fs::write(&path, &file).map_err(|e| format!("{}: {e}", path.display()))?;
    let (found, skipped) = scan(dir, 64, 4);
    let _ = std::fs::remove_file(&path);
    if found.len() + skipped.len() > 1 {
        return Err(format!(
            "one file gave {} matches and {} skipped",
            found.len(),
            skipped.len()
        ));
    }
    for m in &found {
        if m.next_turn().0 > MAX_RESUMABLE_TURN + 1 {
            return Err(format!("resumed at turn {}", m.next_turn()));
        }
        if m.match_id() > MAX_RESUMABLE_MATCH_ID {
            return Err(format!("resumed as match number {}", m.match_id()));
        }
    }
    Ok(!found.is_empty())
}

/// A turn a record names, refused past [`MAX_RESUMABLE_TURN`].
fn check_turn(turn: Turn, kind: u8) -> Result<(), String> {
    if turn.0 > MAX_RESUMABLE_TURN {
        return Err(format!(
            "a {} record names turn {turn}, past the last resumable turn {MAX_RESUMABLE_TURN}",
            replays::format::kind_name(kind)
        ));
    }
    Ok(())
}

/// The header's players, setup and turn length, within the protocol's
/// bounds: returns the number of players. Slots are indexed by player id,
/// so the players must be `0..n` in order.
fn check_header(header: &replays::Header) -> Result<usize, String> {
    let n = header.players.len();
    if n == 0 || n > usize::from(MAX_PLAYERS) {
        return Err(format!(
            "the header names {n} players (1 ..= {MAX_PLAYERS})"
        ));
    }
    if usize::from(header.setup.players) != n {
        return Err(format!(
            "the setup is for {} players, the header names {n}",
            header.setup.players
        ));
    }
    if let Some((i, p)) = header
        .players
        .iter()
        .enumerate()
        .find(|(i, p)| usize::from(p.id.0) != *i)
    {
        return Err(format!("player {} is listed in place {i}", p.id.0));
    }
    let max_us = crate::config::MAX_TURN_LENGTH.as_micros();
    if header.turn_length_us < 1_000 || header.turn_length_us > max_us {
        return Err(format!(
            "a turn length of {} µs (1 ms ..= {max_us} µs)",
            header.turn_length_us
        ));
    }
    Ok(n)
}

/// The match facts within bounds: its number, delay and turns.
fn check_facts(f: &replays::MatchFacts) -> Result<(), String> {
    if f.match_id == 0 || f.match_id > MAX_RESUMABLE_MATCH_ID {
        return Err(format!(
            "match number {} (1 ..= {MAX_RESUMABLE_MATCH_ID})",
            f.match_id
        ));
    }
    if f.input_delay > MAX_INPUT_DELAY {
        return Err(format!(
            "an input delay of {} (at most {MAX_INPUT_DELAY})",
            f.input_delay
        ));
    }
    check_turn(f.first_turn, replays::format::kind::MATCH)?;
    if let Some(last) = f.last_turn {
        check_turn(last, replays::format::kind::MATCH)?;
        if last < f.first_turn {
            return Err(format!(
                "the last turn {last} is before the first {}",
                f.first_turn
            ));
        }
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use replays::MatchFacts;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("relay_resume_{name}_{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn facts(id: u64) -> MatchFacts {
        MatchFacts {
            match_id: id,
            rules_fingerprint: StateHash([3; 32]),
            input_delay: 3,
            first_turn: Turn(0),
            last_turn: None,
            nonce: Some([9; 16]),
            token: None,
        }
    }

    /// A relay's unfinished recording of a two-player match: its facts,
    /// then `turns`, changed by `edit` before writing.
    fn recording(
        path: &Path,
        facts: &MatchFacts,
        turns: &[u32],
        edit: impl FnOnce(&mut replays::Header),
    ) {
        let info = MatchInfo::two_players("m", "g");
        let mut header = crate::recorder::header(&info, info.rules_hash, 0);
        edit(&mut header);
        let mut w = Writer::create(path, &header).unwrap();
        w.record_match(facts).unwrap();
        for &t in turns {
            w.record_turn(Turn(t), &[(PlayerId(0), vec![1]), (PlayerId(1), vec![2])])
                .unwrap();
        }
        drop(w);
    }

    fn reason(d: &Path) -> String {
        let (found, skipped) = scan(d, 64, 100);
        assert!(found.is_empty(), "{found:?}");
        assert_eq!(skipped.len(), 1, "{skipped:?}");
        skipped[0].reason.clone()
    }

    /// Before: a last turn of `u32::MAX` overflowed `Turn::next` and the
    /// relay panicked at start-up, again at every restart.
    #[test]
    fn a_recording_at_the_end_of_the_turn_range_is_skipped_not_a_panic() {
        for last in [u32::MAX, u32::MAX - 1, MAX_RESUMABLE_TURN + 1] {
            let d = dir(&format!("end_{last}"));
            let mut f = facts(1);
            f.first_turn = Turn(last - 1);
            recording(&d.join("a.lsr"), &f, &[last - 1, last], |_| {});
            let r = reason(&d);
            assert!(r.contains("past the last resumable turn"), "{r}");
        }
    }

    #[test]
    fn facts_and_header_outside_the_protocol_bounds_are_skipped() {
        type Case = (
            &'static str,
            MatchFacts,
            fn(&mut replays::Header),
            &'static str,
        );
        let cases: Vec<Case> = vec![
            (
                "delay",
                MatchFacts {
                    input_delay: 200,
                    ..facts(1)
                },
                |_| {},
                "input delay",
            ),
            ("id", facts(u64::MAX), |_| {}, "match number"),
            ("id0", facts(0), |_| {}, "match number"),
            (
                "last",
                MatchFacts {
                    first_turn: Turn(10),
                    last_turn: Some(Turn(5)),
                    ..facts(1)
                },
                |_| {},
                "before the first",
            ),
            ("noplayers", facts(1), |h| h.players.clear(), "players"),
            (
                "manyplayers",
                facts(1),
                |h| {
                    let p = h.players[0].clone();
                    h.players = vec![p; 9];
                },
                "players",
            ),
            ("setup", facts(1), |h| h.setup.players = 3, "setup"),
            ("order", facts(1), |h| h.players.swap(0, 1), "in place"),
            ("turnlen", facts(1), |h| h.turn_length_us = 0, "turn length"),
        ];
        for (name, f, edit, want) in cases {
            let d = dir(name);
            recording(&d.join("a.lsr"), &f, &[0, 1], edit);
            let r = reason(&d);
            assert!(r.contains(want), "{name}: {r}");
        }
    }

    #[test]
    fn records_inconsistent_with_the_setup_are_skipped() {
        // A player the header does not name.
        let d = dir("ghost");
        let path = d.join("a.lsr");
        recording(&path, &facts(1), &[0], |_| {});
        {
            let (mut w, _) = Writer::reopen(&path, replays::DEFAULT_SYNC).unwrap();
            w.record_drop(PlayerId(7), Turn(1)).unwrap();
        }
        assert!(reason(&d).contains("player 7"));
        // A delay change past the protocol's bound.
        let d = dir("bigdelay");
        let path = d.join("a.lsr");
        recording(&path, &facts(1), &[0], |_| {});
        {
            let (mut w, _) = Writer::reopen(&path, replays::DEFAULT_SYNC).unwrap();
            w.record_delay_change(300, Turn(2)).unwrap();
        }
        assert!(reason(&d).contains("input delay"));
        // Turns before the match's first turn.
        let d = dir("early");
        let f = MatchFacts {
            first_turn: Turn(100),
            ..facts(1)
        };
        recording(&d.join("a.lsr"), &f, &[3, 4], |_| {});
        assert!(reason(&d).contains("outside the match"));
    }

    /// Before: a flipped bit in the middle cut the file there, destroying
    /// the turns after it, and the match resumed from the cut.
    #[test]
    fn damage_inside_a_recording_leaves_its_bytes_and_is_not_resumed() {
        let d = dir("damaged");
        let path = d.join("a.lsr");
        let turns: Vec<u32> = (0..40).collect();
        recording(&path, &facts(1), &turns, |_| {});
        let mut bytes = std::fs::read(&path).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x01;
        std::fs::write(&path, &bytes).unwrap();
        let r = reason(&d);
        assert!(r.contains("damaged inside"), "{r}");
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
    }

    /// The instance's nonce is read back, so the resumed match gives the
    /// secrets its players hold; a recording without one (an earlier
    /// relay's) resumes with none.
    #[test]
    fn the_match_nonce_is_read_back() {
        let d = dir("nonce");
        recording(&d.join("a.lsr"), &facts(1), &[0, 1], |_| {});
        let (found, _) = scan(&d, 64, 100);
        assert_eq!(
            found[0].info.nonce,
            Some(crate::rejoin_config::MatchNonce([9; 16]))
        );
        let d = dir("no_nonce");
        let f = MatchFacts {
            nonce: None,
            ..facts(1)
        };
        recording(&d.join("a.lsr"), &f, &[0, 1], |_| {});
        let (found, _) = scan(&d, 64, 100);
        assert_eq!(found[0].info.nonce, None);
    }

    /// Every file of the `resume` fuzz target's corpus (`relay/fuzz/corpus/
    /// resume`) keeps the target's promise, checked on stable in every
    /// test run (the fuzz crate itself needs nightly and libFuzzer): the
    /// well-formed seeds resume, the forged or out-of-range ones are
    /// skipped, and no file (seeds, and whatever a local fuzzing run added)
    /// breaks the promise.
    #[test]
    fn the_resume_fuzz_corpus_keeps_the_targets_promise() {
        let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/resume");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&corpus)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        let d = dir("fuzz_corpus");
        let mut resumed = Vec::new();
        for f in &files {
            let data = std::fs::read(f).unwrap();
            let name = f.file_name().unwrap().to_string_lossy().into_owned();
            if check_fuzz_input(&d, &data).unwrap_or_else(|e| panic!("{name}: {e}")) {
                resumed.push(name);
            }
        }
        assert!(files.len() >= 6, "{files:?}");
        for seed in ["one_turn", "two_players_40_turns"] {
            assert!(resumed.iter().any(|r| r == seed), "{seed} resumes");
        }
        for seed in [
            "big_delay_change",
            "delay_out_of_bounds",
            "ghost_player_drop",
            "turn_past_range",
        ] {
            assert!(!resumed.iter().any(|r| r == seed), "{seed} is skipped");
        }
    }

    /// The token binding is read back, so a resumed relay keeps refusing
    /// other instances' tokens for the match (and remembers the instance
    /// after it ends); a recording without one resumes unbound.
    #[test]
    fn the_token_binding_is_read_back() {
        let d = dir("token");
        let f = MatchFacts {
            token: Some(replays::MatchToken {
                instance: [4; 16],
                expire_unix: 1_700_000_060,
            }),
            ..facts(1)
        };
        recording(&d.join("a.lsr"), &f, &[0, 1], |_| {});
        let (found, _) = scan(&d, 64, 100);
        assert_eq!(
            found[0].info.token,
            Some(crate::event::TokenBinding {
                instance: lockstep::token::MatchInstance([4; 16]),
                expire_unix: 1_700_000_060,
            })
        );
        let d = dir("no_token");
        recording(&d.join("a.lsr"), &facts(1), &[0, 1], |_| {});
        let (found, _) = scan(&d, 64, 100);
        assert_eq!(found[0].info.token, None);
    }

    /// Before: with no bundle kept (a tail of 0) the match resumed at its
    /// first turn, although turns were recorded.
    #[test]
    fn a_tail_of_zero_resumes_after_the_last_recorded_turn() {
        let d = dir("tail0");
        recording(&d.join("a.lsr"), &facts(1), &[0, 1, 2], |_| {});
        let (found, _) = scan(&d, 0, 100);
        assert_eq!(found[0].next_turn(), Turn(3));
    }

    /// Before: every unfinished recording was resumed, so a directory of
    /// forged ones filled every match place and refused every new join.
    #[test]
    fn at_most_half_the_match_limit_is_resumed() {
        let d = dir("many");
        for i in 0..12u64 {
            let name = format!("m{i}");
            recording(&d.join(format!("{i:02}.lsr")), &facts(i + 1), &[0], |h| {
                h.match_name = name;
            });
        }
        let (found, skipped) = scan(&d, 64, 5);
        assert_eq!(found.len(), 5);
        assert_eq!(skipped.len(), 7);
        assert!(skipped.iter().all(|s| s.reason.contains("at most 5")));
        // The router holds the same line on its own.
        let mut config = crate::config::RelayConfig::default();
        config.limits.max_matches = 6;
        let mut r = crate::router::Router::new(config);
        let now = lockstep::Instant::from_millis(1);
        let mut refused = 0;
        for m in found {
            if r.resume(now, m).is_err() {
                refused += 1;
            }
        }
        assert_eq!((r.match_count(), refused), (3, 2));
    }

    /// Before: the match number was stepped to one at a time, so a forged
    /// recording numbered near `u64::MAX` hung (or overflowed) the start.
    #[test]
    fn a_large_match_number_is_skipped_in_one_step() {
        let mut r = crate::router::Router::new(crate::config::RelayConfig::default());
        r.skip_match_ids_through(MAX_RESUMABLE_MATCH_ID);
        r.skip_match_ids_through(u64::MAX);
    }
}
