//! Turns router events into one replay file per match (`replays::Writer`):
//! header at start, every closed turn's bundle, a hash for every judged turn
//! (the agreed one, or the majority's on a desynced turn, next to a dispute
//! record naming each dissenting player's hash), drops, delay changes and
//! the first desync with its differing sections, and its forensics report
//! (a record in the replay and `<replay stem>.desync.json` next to it, with
//! the inputs of the last [`REPORT_INPUT_TURNS`] turns up to the desync).
//!
//! Storage failures (directory removed or unwritable, disk full) never stop
//! a match: the first error of a match is returned once, that match's
//! recording stops, and [`Recorder::errors`] counts it.
//!
//! A recording never destroys another: files are opened with create-new
//! semantics, named after the match, its UTC start time and its number, and a
//! name already taken (a previous run of the relay on the same directory, a
//! crash-recovered file, another relay) gets a `~2`, `~3`, ... suffix instead
//! of being replaced. The wall-clock time comes in with each event from the
//! driver; the recorder reads no clock.

use crate::event::{MatchId, MatchInfo, RouterEvent};
use replays::forensics::{PlayerInput, REPORT_INPUT_TURNS, TurnInputs, hex};
use replays::{DEFAULT_SYNC, Header, PlayerInfo, ReplayError, Sink, Writer};
use sim::{PlayerId, StateHash, Turn};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Where a recording's bytes go: a file, or any sink a test injects.
pub struct RecordSink(Box<dyn Sink + Send>);

impl RecordSink {
    /// Wraps any sink.
    #[must_use]
    pub fn new(sink: impl Sink + Send + 'static) -> Self {
        Self(Box::new(sink))
    }
}

impl std::fmt::Debug for RecordSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RecordSink")
    }
}

impl Write for RecordSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl Sink for RecordSink {
    fn sync(&mut self) -> std::io::Result<()> {
        self.0.sync()
    }
}

/// Opens the sink for a replay path. It must not replace an existing file:
/// it fails with [`std::io::ErrorKind::AlreadyExists`] instead, and the
/// recorder tries the next free name.
pub type OpenSinkFn = Box<dyn FnMut(&Path) -> std::io::Result<RecordSink> + Send>;

/// Creates a new file; an existing one is left alone (`AlreadyExists`), so a
/// restarted relay can never truncate the recordings of an earlier run.
fn open_file(path: &Path) -> std::io::Result<RecordSink> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map(RecordSink::new)
}

/// Closed turns kept beyond the turns of inputs a desync report
/// carries: a desync is judged once every hash of its turn is in, some turns
/// after it closed.
const RECENT_MARGIN: usize = 64;

/// How many suffixed names (`~2`, `~3`, ...) are tried when a name is taken
/// before the recording gives up with the `AlreadyExists` error.
const MAX_NAME_CLASHES: u32 = 1000;

/// Longest match-name part of a file name, in bytes (file systems allow 255
/// per name; the rest is the time, the number and the suffix).
const MAX_NAME_PART: usize = 64;

/// Computes the rules hash a replay header needs from the match parameters
/// (the game id, version and the join's rules fingerprint all travel in
/// [`MatchInfo`]). `|info| info.rules_hash` takes the join's as it is; a
/// binary that knows the games it hosts can recompute it for the match's
/// real setup (see [`crate::games::known_rules_hash`]).
pub type RulesHashFn = fn(&MatchInfo) -> StateHash;

/// The match an event belongs to.
const fn event_match(ev: &RouterEvent) -> MatchId {
    match ev {
        RouterEvent::LobbyOpened { id, .. }
        | RouterEvent::MatchStarted { id, .. }
        | RouterEvent::TurnClosed { id, .. }
        | RouterEvent::HashAgreed { id, .. }
        | RouterEvent::HashDisputed { id, .. }
        | RouterEvent::Desync { id, .. }
        | RouterEvent::DesyncSections { id, .. }
        | RouterEvent::DesyncReport { id, .. }
        | RouterEvent::Dropped { id, .. }
        | RouterEvent::DelayChanged { id, .. }
        | RouterEvent::PeerReport { id, .. }
        | RouterEvent::Rejoining { id, .. }
        | RouterEvent::Rejoined { id, .. }
        | RouterEvent::Healing { id, .. }
        | RouterEvent::Healed { id, .. }
        | RouterEvent::MatchResumed { id, .. }
        | RouterEvent::MatchEnded { id, .. } => *id,
    }
}

/// A finished recording.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded {
    /// Which match.
    pub id: MatchId,
    /// The replay file.
    pub path: PathBuf,
    /// Turns recorded.
    pub turns: u32,
    /// Whether a trailer was written (false: no agreed or majority hash, file
    /// left recoverable).
    pub finished: bool,
    /// The desync forensics report written next to the replay, if any.
    pub report: Option<PathBuf>,
}

struct Recording {
    writer: Writer<RecordSink>,
    path: PathBuf,
    /// The latest turn's agreed (or majority) hash: the trailer's final hash.
    last_hash: Option<(Turn, StateHash)>,
    desync: Option<(Turn, Vec<(PlayerId, StateHash)>)>,
    /// The inputs of the last turns, for the desync report.
    recent: VecDeque<TurnInputs>,
    /// The inputs up to the desynced turn, kept when the desync is judged.
    report_inputs: Vec<TurnInputs>,
    report: Option<PathBuf>,
}

/// Records every match a router runs into
/// `dir/<match>-<YYYYMMDD>T<HHMMSS>Z-<id>.lsr` (see the module docs).
pub struct Recorder {
    dir: PathBuf,
    rules: RulesHashFn,
    open: OpenSinkFn,
    live: BTreeMap<MatchId, Recording>,
    /// Matches whose recording failed: their later events are ignored.
    failed: BTreeSet<MatchId>,
    errors: u64,
    /// Turns of inputs a desync report carries.
    report_turns: usize,
    /// The file last tried to create, for an error naming it.
    tried: Option<PathBuf>,
    /// Unfinished matches found at start-up, until the driver takes them.
    resumable: Vec<crate::resume::Unfinished>,
}

impl Recorder {
    /// Bytes the open recordings hold in memory: the input history a desync
    /// report carries and each file's write buffer.
    #[must_use]
    pub fn memory(&self) -> usize {
        self.live
            .values()
            .map(|r| {
                let inputs = |t: &TurnInputs| {
                    std::mem::size_of::<TurnInputs>()
                        + t.inputs
                            .iter()
                            .map(|i| std::mem::size_of::<PlayerInput>() + i.bytes.capacity())
                            .sum::<usize>()
                };
                std::mem::size_of::<Recording>()
                    + WRITE_BUFFER
                    + r.recent.iter().map(inputs).sum::<usize>()
                    + r.report_inputs.iter().map(inputs).sum::<usize>()
            })
            .sum()
    }
}

/// A recording's write buffer (`std::io::BufWriter`'s default capacity).
const WRITE_BUFFER: usize = 8 * 1024;

/// A storage error of one match's recording, naming the file.
#[derive(Debug, thiserror::Error)]
#[error("recording {}: {source}", path.display())]
pub struct RecordError {
    /// The replay file (the directory when no file was made yet).
    pub path: PathBuf,
    /// What failed.
    pub source: ReplayError,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("dir", &self.dir)
            .field("live", &self.live.len())
            .field("failed", &self.failed)
            .field("errors", &self.errors)
            .finish_non_exhaustive()
    }
}

/// The file name of match `id` started at `unix_ms`; `clash` > 1 is the
/// suffix used when the plain name is taken. The match name is reduced to
/// ASCII letters, digits, `-` and `_` (no separators, no `..`, no hidden
/// files) and bounded in length, so any name a client sends is a safe file name.
fn file_name(match_name: &str, unix_ms: u64, id: MatchId, clash: u32) -> String {
    let mut clean: String = match_name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(MAX_NAME_PART)
        .collect();
    if clean.is_empty() {
        clean.push_str("match");
    }
    // "2026-11-22 15:42:03 UTC" -> "20261122T154203Z" (no ':' for Windows).
    let digits: String = replays::format::utc_string(unix_ms)
        .chars()
        .filter(char::is_ascii_digit)
        .collect();
    let (date, time) = digits.split_at(digits.len().saturating_sub(6));
    let suffix = if clash > 1 {
        format!("~{clash}")
    } else {
        String::new()
    };
    format!("{clean}-{date}T{time}Z-{}{suffix}.lsr", id.0)
}

/// The replay header of a match: what the relay's recording of it starts
/// with, and what a live view's stream starts with (`crate::live`), so both
/// read the same.
pub(crate) fn header(info: &MatchInfo, rules_hash: StateHash, unix_ms: u64) -> Header {
    Header {
        format_version: replays::FORMAT_VERSION,
        engine_version: env!("CARGO_PKG_VERSION").to_owned(),
        protocol_version: u32::from(lockstep::low_level::proto::PROTOCOL_VERSION),
        game_id: info.game_id.clone(),
        game_version: info.game_version,
        rules_hash,
        setup: info.setup.clone(),
        turn_length_us: info.turn_length_us,
        players: info
            .players
            .iter()
            .map(|p| PlayerInfo {
                id: p.id,
                name: p.name.clone(),
            })
            .collect(),
        match_name: info.match_name.clone(),
        start_time_unix_ms: unix_ms,
    }
}

impl Recorder {
    /// A recorder writing into `dir` (created if missing).
    pub fn new(dir: &Path, rules: RulesHashFn) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        Ok(Self {
            dir: dir.to_owned(),
            rules,
            open: Box::new(open_file),
            live: BTreeMap::new(),
            failed: BTreeSet::new(),
            errors: 0,
            report_turns: REPORT_INPUT_TURNS as usize,
            tried: None,
            resumable: Vec::new(),
        })
    }

    /// How many turns of inputs, up to the desynced one, a desync report
    /// carries (default [`REPORT_INPUT_TURNS`], 20; at most 256).
    #[must_use]
    pub fn with_report_inputs(mut self, turns: u32) -> Self {
        self.report_turns = (turns as usize).min(256);
        self
    }

    /// Opens each replay's sink with `open` instead of creating a file (tests
    /// inject failing sinks this way).
    #[must_use]
    pub fn with_sink_opener(mut self, open: OpenSinkFn) -> Self {
        self.open = open;
        self
    }

    /// Recordings that failed (each counted once, when it failed).
    #[must_use]
    pub const fn errors(&self) -> u64 {
        self.errors
    }

    /// Matches being recorded now.
    #[must_use]
    pub fn live(&self) -> usize {
        self.live.len()
    }

    /// Records one event that happened at wall-clock time `unix_ms` (Unix
    /// milliseconds, read by the driver: it becomes the header's start time
    /// and part of the file name); returns the recording when a match ends.
    /// The first storage error of a match is returned once; that match's
    /// recording is then abandoned (the file keeps every turn written before
    /// the error) and its later events are ignored.
    pub fn handle(
        &mut self,
        unix_ms: u64,
        ev: &RouterEvent,
    ) -> Result<Option<Recorded>, RecordError> {
        let id = event_match(ev);
        // Taken first: a failed write removes the live recording.
        let live_path = self.path(id).map(Path::to_owned);
        if self.failed.contains(&id) {
            if matches!(ev, RouterEvent::MatchEnded { .. }) {
                self.failed.remove(&id);
            }
            return Ok(None);
        }
        match self.record(unix_ms, ev) {
            Ok(r) => Ok(r),
            Err(e) => {
                self.errors += 1;
                self.live.remove(&id);
                if !matches!(ev, RouterEvent::MatchEnded { .. }) {
                    self.failed.insert(id);
                }
                let path = live_path
                    .or_else(|| self.tried.take())
                    .unwrap_or_else(|| self.dir.clone());
                Err(RecordError { path, source: e })
            }
        }
    }

    /// Matches found unfinished in the record directory at start-up, for
    /// the driver to resume ([`crate::resume::scan`]); given once.
    #[must_use]
    pub fn with_resumable(mut self, found: Vec<crate::resume::Unfinished>) -> Self {
        self.resumable = found;
        self
    }

    /// Takes the matches given by [`Recorder::with_resumable`].
    pub fn take_resumable(&mut self) -> Vec<crate::resume::Unfinished> {
        std::mem::take(&mut self.resumable)
    }

    /// Goes on recording match `id`, resumed after a relay restart, into
    /// its reopened file at `path` (see [`crate::resume`]).
    pub fn adopt(
        &mut self,
        id: MatchId,
        path: &Path,
        writer: Writer<std::fs::File>,
        last_hash: Option<(Turn, StateHash)>,
    ) -> Result<(), RecordError> {
        let writer = writer
            .into_sink(RecordSink::new)
            .map_err(|source| RecordError {
                path: path.to_owned(),
                source,
            })?;
        self.failed.remove(&id);
        self.live.insert(
            id,
            Recording {
                writer,
                path: path.to_owned(),
                last_hash,
                desync: None,
                recent: VecDeque::new(),
                report_inputs: Vec::new(),
                report: None,
            },
        );
        Ok(())
    }

    /// Where match `id` is being recorded, if it is.
    #[must_use]
    pub fn path(&self, id: MatchId) -> Option<&Path> {
        self.live.get(&id).map(|r| r.path.as_path())
    }

    /// Creates the replay file of a match under the first free name.
    fn create(
        &mut self,
        info: &MatchInfo,
        unix_ms: u64,
        id: MatchId,
    ) -> Result<(PathBuf, RecordSink), ReplayError> {
        let mut clash = 1;
        loop {
            let path = self
                .dir
                .join(file_name(&info.match_name, unix_ms, id, clash));
            self.tried = Some(path.clone());
            match (self.open)(&path) {
                Ok(sink) => return Ok((path, sink)),
                Err(e)
                    if e.kind() == std::io::ErrorKind::AlreadyExists
                        && clash < MAX_NAME_CLASHES =>
                {
                    clash += 1;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn record(&mut self, unix_ms: u64, ev: &RouterEvent) -> Result<Option<Recorded>, ReplayError> {
        match ev {
            RouterEvent::MatchStarted { id, info } => {
                let header = header(info, (self.rules)(info), unix_ms);
                let (path, sink) = self.create(info, unix_ms, *id)?;
                let mut writer = Writer::new(sink, &header, DEFAULT_SYNC)?;
                // What a restarted relay resumes the match from.
                writer.record_match(&replays::MatchFacts {
                    match_id: id.0,
                    rules_fingerprint: info.rules_hash,
                    input_delay: info.input_delay,
                    first_turn: info.first_turn,
                    last_turn: info.last_turn,
                    nonce: info.nonce.map(|n| n.0),
                    token: info.token.map(|t| replays::MatchToken {
                        instance: t.instance.0,
                        expire_unix: t.expire_unix,
                    }),
                })?;
                self.live.insert(
                    *id,
                    Recording {
                        writer,
                        path,
                        last_hash: None,
                        desync: None,
                        recent: VecDeque::new(),
                        report_inputs: Vec::new(),
                        report: None,
                    },
                );
            }
            RouterEvent::TurnClosed {
                id, turn, inputs, ..
            } => {
                if let Some(r) = self.live.get_mut(id) {
                    r.writer.record_turn(*turn, inputs)?;
                    // The desync is judged some turns after it closed:
                    // keep a margin beyond the turns a report carries.
                    if r.recent.len() >= self.report_turns + RECENT_MARGIN {
                        r.recent.pop_front();
                    }
                    r.recent.push_back(TurnInputs {
                        turn: turn.0,
                        inputs: inputs
                            .iter()
                            .map(|(p, b)| PlayerInput {
                                player: p.0,
                                bytes: hex(b),
                            })
                            .collect(),
                    });
                }
            }
            RouterEvent::HashAgreed { id, turn, hash } => {
                if let Some(r) = self.live.get_mut(id) {
                    r.writer.record_hash(*turn, *hash)?;
                    r.last_hash = Some((*turn, *hash));
                }
            }
            RouterEvent::HashDisputed {
                id,
                turn,
                majority,
                dissent,
            } => {
                if let Some(r) = self.live.get_mut(id) {
                    // The majority's hash is the turn's hash record, so the
                    // file keeps one hash per turn and verifies against it.
                    if let Some(hash) = majority {
                        r.writer.record_hash(*turn, *hash)?;
                        r.last_hash = Some((*turn, *hash));
                    }
                    r.writer.record_dispute(*turn, *majority, dissent)?;
                }
            }
            RouterEvent::Desync {
                id, turn, hashes, ..
            } => {
                if let Some(r) = self.live.get_mut(id) {
                    r.desync = Some((*turn, hashes.clone()));
                    // The desynced turn closed before its hashes were judged:
                    // its inputs and those before it are in `recent`.
                    let upto: Vec<&TurnInputs> =
                        r.recent.iter().filter(|t| t.turn <= turn.0).collect();
                    let skip = upto.len().saturating_sub(self.report_turns);
                    r.report_inputs = upto.into_iter().skip(skip).cloned().collect();
                }
            }
            RouterEvent::DesyncSections {
                id, turn, sections, ..
            } => {
                if let Some(r) = self.live.get_mut(id)
                    && let Some((t, hashes)) = r.desync.take()
                    && t == *turn
                {
                    r.writer.record_desync(t, &hashes, sections)?;
                }
            }
            RouterEvent::DesyncReport { id, report } => {
                if let Some(r) = self.live.get_mut(id) {
                    let mut report = (**report).clone();
                    report.inputs = std::mem::take(&mut r.report_inputs);
                    r.writer.record_forensics(&report)?;
                    let path = r.path.with_extension("desync.json");
                    // The replay holds the report too: a failed JSON file
                    // is counted, never fatal to the recording.
                    match (self.open)(&path).and_then(|mut sink| {
                        let json =
                            serde_json::to_vec_pretty(&report).map_err(std::io::Error::other)?;
                        sink.write_all(&json)?;
                        sink.write_all(b"\n")?;
                        sink.flush()
                    }) {
                        Ok(()) => r.report = Some(path),
                        Err(_) => self.errors += 1,
                    }
                }
            }
            RouterEvent::Dropped {
                id, player, turn, ..
            } => {
                if let Some(r) = self.live.get_mut(id) {
                    r.writer.record_drop(*player, *turn)?;
                }
            }
            RouterEvent::Rejoined { id, player, turn } => {
                if let Some(r) = self.live.get_mut(id) {
                    r.writer.record_rejoin(*player, *turn)?;
                }
            }
            RouterEvent::DelayChanged {
                id,
                delay,
                from_turn,
            } => {
                if let Some(r) = self.live.get_mut(id) {
                    r.writer
                        .record_delay_change(u32::from(*delay), *from_turn)?;
                }
            }
            RouterEvent::MatchEnded { id, reason, .. } => {
                let Some(mut r) = self.live.remove(id) else {
                    return Ok(None);
                };
                if let Some((t, hashes)) = r.desync.take() {
                    r.writer.record_desync(t, &hashes, &[])?;
                }
                r.writer.record_end(&reason.to_string())?;
                let finished = if let Some((turn, hash)) = r.last_hash {
                    r.writer.finish(turn, hash)?;
                    true
                } else {
                    r.writer.abandon()?;
                    false
                };
                return Ok(Some(Recorded {
                    id: *id,
                    path: r.path,
                    turns: r.writer.turns_written(),
                    finished,
                    report: r.report,
                }));
            }
            // A heal is recorded as the desync report's note.
            RouterEvent::LobbyOpened { .. }
            | RouterEvent::PeerReport { .. }
            | RouterEvent::Rejoining { .. }
            | RouterEvent::Healing { .. }
            | RouterEvent::Healed { .. }
            // A resumed match's recording is adopted (`Recorder::adopt`).
            | RouterEvent::MatchResumed { .. } => {}
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests may unwrap
    use super::*;
    use lockstep::low_level::proto::EndReason;

    /// 2026-11-22 02:30:00 UTC.
    const T0: u64 = 1_795_314_600_000;

    fn info(name: &str) -> MatchInfo {
        MatchInfo::two_players(name, "toy")
    }

    /// A whole two-turn match of match number `id`.
    fn a_match(id: u64, name: &str) -> Vec<RouterEvent> {
        let id = MatchId(id);
        let mut evs = vec![RouterEvent::MatchStarted {
            id,
            info: info(name),
        }];
        for t in 0..2 {
            evs.push(RouterEvent::TurnClosed {
                id,
                turn: Turn(t),
                inputs: vec![(PlayerId(0), vec![1, 2, 3])],
                missing: Vec::new(),
            });
            evs.push(RouterEvent::HashAgreed {
                id,
                turn: Turn(t),
                hash: StateHash([10 + t as u8; 32]),
            });
        }
        evs.push(RouterEvent::MatchEnded {
            id,
            turn: Some(Turn(1)),
            reason: EndReason::Completed,
        });
        evs
    }

    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("recorder-unit-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn record_all(rec: &mut Recorder, unix_ms: u64, evs: &[RouterEvent]) -> Recorded {
        let mut done = None;
        for e in evs {
            if let Some(r) = rec.handle(unix_ms, e).unwrap() {
                done = Some(r);
            }
        }
        done.unwrap()
    }

    #[test]
    fn file_names_carry_time_and_number_and_are_safe() {
        assert_eq!(
            file_name("duel", T0, MatchId(7), 1),
            "duel-20261122T023000Z-7.lsr"
        );
        assert_eq!(
            file_name("../../etc/passwd", T0, MatchId(1), 3),
            "______etc_passwd-20261122T023000Z-1~3.lsr"
        );
        assert_eq!(
            file_name("", 0, MatchId(1), 1),
            "match-19700101T000000Z-1.lsr"
        );
        let long = file_name(&"é".repeat(500), T0, MatchId(1), 1);
        assert!(long.len() < 100, "{long}");
    }

    /// The match's join-token binding (and nonce) go into the recording's
    /// facts, where a resuming relay reads them back.
    #[test]
    fn the_token_binding_is_recorded_in_the_match_facts() {
        let dir = scratch("token");
        let mut rec = Recorder::new(&dir, |i| i.rules_hash).unwrap();
        let mut evs = a_match(3, "bound");
        let binding = crate::event::TokenBinding {
            instance: lockstep::token::MatchInstance([6; 16]),
            expire_unix: 1_795_314_660,
        };
        if let RouterEvent::MatchStarted { info, .. } = &mut evs[0] {
            info.nonce = Some(crate::rejoin_config::MatchNonce([5; 16]));
            info.token = Some(binding);
        }
        let done = record_all(&mut rec, T0, &evs);
        let facts = replays::Reader::open(&done.path)
            .unwrap()
            .find_map(|r| match r.unwrap() {
                replays::Record::Match(f) => Some(f),
                _ => None,
            })
            .unwrap();
        assert_eq!(facts.nonce, Some([5; 16]));
        assert_eq!(
            facts.token,
            Some(replays::MatchToken {
                instance: [6; 16],
                expire_unix: 1_795_314_660,
            })
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_existing_file_is_never_overwritten() {
        let dir = scratch("clash");
        std::fs::create_dir_all(&dir).unwrap();
        // Files a previous run may have left: the old naming scheme's name and
        // the name this run picks first.
        let taken = [
            dir.join("g-1.lsr"),
            dir.join(file_name("g", T0, MatchId(1), 1)),
        ];
        for p in &taken {
            std::fs::write(p, b"an earlier recording").unwrap();
        }
        let mut rec = Recorder::new(&dir, |i| i.rules_hash).unwrap();
        let done = record_all(&mut rec, T0, &a_match(1, "g"));
        for p in &taken {
            assert_eq!(std::fs::read(p).unwrap(), b"an earlier recording");
        }
        assert!(!taken.contains(&done.path));
        assert_eq!(done.path, dir.join(file_name("g", T0, MatchId(1), 2)));
        let (header, summary) = replays::Reader::open(&done.path).unwrap().scan().unwrap();
        assert!(summary.is_complete(), "{summary}");
        // The time the driver passed in is the header's start time.
        assert_eq!(header.start_time_unix_ms, T0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_second_recorder_on_the_same_directory_keeps_the_first_runs_files() {
        let dir = scratch("restart");
        // Same match numbers, same match name, same second: a relay restarted at once.
        let first = record_all(
            &mut Recorder::new(&dir, |i| i.rules_hash).unwrap(),
            T0,
            &a_match(1, "g"),
        );
        let before = std::fs::read(&first.path).unwrap();
        let second = record_all(
            &mut Recorder::new(&dir, |i| i.rules_hash).unwrap(),
            T0,
            &a_match(1, "g"),
        );
        assert_ne!(first.path, second.path);
        assert_eq!(std::fs::read(&first.path).unwrap(), before);
        assert!(second.finished);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A desync's report goes into the replay (a forensics record) and next
    /// to it as JSON, with the inputs of the last turns up to the desync
    /// even when the desync is judged many turns after it closed.
    #[test]
    fn a_desync_report_is_recorded_and_written_next_to_the_replay() {
        let dir = scratch("report");
        let id = MatchId(4);
        let mut evs = vec![RouterEvent::MatchStarted {
            id,
            info: info("r"),
        }];
        for t in 0..=60u32 {
            evs.push(RouterEvent::TurnClosed {
                id,
                turn: Turn(t),
                inputs: vec![(PlayerId(1), vec![t as u8])],
                missing: Vec::new(),
            });
        }
        let hashes = vec![
            (PlayerId(0), StateHash([1; 32])),
            (PlayerId(1), StateHash([2; 32])),
        ];
        evs.push(RouterEvent::Desync {
            id,
            turn: Turn(30),
            hashes,
            odd_players: Vec::new(),
        });
        let report = replays::DesyncReport {
            turn: 30,
            no_majority: true,
            ..replays::DesyncReport::default()
        };
        evs.push(RouterEvent::DesyncReport {
            id,
            report: Box::new(report),
        });
        evs.push(RouterEvent::MatchEnded {
            id,
            turn: Some(Turn(60)),
            reason: EndReason::Desync,
        });
        let mut rec = Recorder::new(&dir, |i| i.rules_hash)
            .unwrap()
            .with_report_inputs(5);
        let done = record_all(&mut rec, T0, &evs);
        let json_path = done.report.clone().unwrap();
        assert_eq!(json_path, done.path.with_extension("desync.json"));
        let json: replays::DesyncReport =
            serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();
        let turns: Vec<u32> = json.inputs.iter().map(|t| t.turn).collect();
        assert_eq!(turns, vec![26, 27, 28, 29, 30]);
        assert_eq!(json.inputs[4].inputs[0].bytes, "1e");
        let in_replay: Vec<replays::DesyncReport> = replays::Reader::open(&done.path)
            .unwrap()
            .filter_map(|r| match r.unwrap() {
                replays::Record::Forensics(r) => Some(*r),
                _ => None,
            })
            .collect();
        assert_eq!(in_replay, vec![json]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
