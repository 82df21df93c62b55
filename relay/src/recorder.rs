//! Turns router events into one replay file per match (`replays::Writer`):
//! header at start, every closed turn's bundle, each agreed hash, drops,
//! delay changes and the first desync with its differing sections.
//!
//! Storage failures (directory removed or unwritable, disk full) never stop
//! a match: the first error of a match is returned once, that match's
//! recording stops, and [`Recorder::errors`] counts it.

use crate::event::{MatchId, MatchInfo, RouterEvent};
use replays::{DEFAULT_SYNC, Header, PlayerInfo, ReplayError, Sink, Writer};
use sim::{PlayerId, Simulation, StateHash, Turn};
use std::collections::{BTreeMap, BTreeSet};
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

/// Opens the sink for a replay path (the default creates the file).
pub type OpenSinkFn = Box<dyn FnMut(&Path) -> std::io::Result<RecordSink> + Send>;

fn open_file(path: &Path) -> std::io::Result<RecordSink> {
    std::fs::File::create(path).map(RecordSink::new)
}

/// Computes the rules hash a replay header needs from the match parameters.
pub type RulesHashFn = fn(&MatchInfo) -> StateHash;

/// The reference game's rules hash for the match's real setup (the join only
/// carries a fingerprint for a canonical setup); other games keep the join's.
#[must_use]
pub fn reference_rules_hash(info: &MatchInfo) -> StateHash {
    if info.game_id == sim::game::World::GAME_ID {
        sim::game::World::new(&info.setup).rules_hash()
    } else {
        info.rules_hash
    }
}

/// The match an event belongs to.
const fn event_match(ev: &RouterEvent) -> MatchId {
    match ev {
        RouterEvent::MatchStarted { id, .. }
        | RouterEvent::TurnClosed { id, .. }
        | RouterEvent::HashAgreed { id, .. }
        | RouterEvent::Desync { id, .. }
        | RouterEvent::DesyncSections { id, .. }
        | RouterEvent::Dropped { id, .. }
        | RouterEvent::DelayChanged { id, .. }
        | RouterEvent::PeerReport { id, .. }
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
    /// Whether a trailer was written (false: no agreed hash, file left recoverable).
    pub finished: bool,
}

struct Recording {
    writer: Writer<RecordSink>,
    path: PathBuf,
    last_agreed: Option<(Turn, StateHash)>,
    desync: Option<(Turn, Vec<(PlayerId, StateHash)>)>,
}

/// Records every match a router runs into `dir/<match>-<id>.lsr`.
pub struct Recorder {
    dir: PathBuf,
    rules: RulesHashFn,
    start_unix_ms: fn() -> u64,
    open: OpenSinkFn,
    live: BTreeMap<MatchId, Recording>,
    /// Matches whose recording failed: their later events are ignored.
    failed: BTreeSet<MatchId>,
    errors: u64,
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

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn file_name(info: &MatchInfo, id: MatchId) -> String {
    let clean: String = info
        .match_name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{clean}-{}.lsr", id.0)
}

impl Recorder {
    /// A recorder writing into `dir` (created if missing).
    pub fn new(dir: &Path, rules: RulesHashFn) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        Ok(Self {
            dir: dir.to_owned(),
            rules,
            start_unix_ms: unix_ms,
            open: Box::new(open_file),
            live: BTreeMap::new(),
            failed: BTreeSet::new(),
            errors: 0,
        })
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

    /// Records one event; returns the recording when a match ends. The first
    /// storage error of a match is returned once; that match's recording is
    /// then abandoned (the file keeps every turn written before the error)
    /// and its later events are ignored.
    pub fn handle(&mut self, ev: &RouterEvent) -> Result<Option<Recorded>, ReplayError> {
        let id = event_match(ev);
        if self.failed.contains(&id) {
            if matches!(ev, RouterEvent::MatchEnded { .. }) {
                self.failed.remove(&id);
            }
            return Ok(None);
        }
        match self.record(ev) {
            Ok(r) => Ok(r),
            Err(e) => {
                self.errors += 1;
                self.live.remove(&id);
                if !matches!(ev, RouterEvent::MatchEnded { .. }) {
                    self.failed.insert(id);
                }
                Err(e)
            }
        }
    }

    /// Where match `id` is being recorded, if it is.
    #[must_use]
    pub fn path(&self, id: MatchId) -> Option<&Path> {
        self.live.get(&id).map(|r| r.path.as_path())
    }

    fn record(&mut self, ev: &RouterEvent) -> Result<Option<Recorded>, ReplayError> {
        match ev {
            RouterEvent::MatchStarted { id, info } => {
                let header = Header {
                    format_version: replays::FORMAT_VERSION,
                    engine_version: env!("CARGO_PKG_VERSION").to_owned(),
                    protocol_version: u32::from(lockstep::proto::PROTOCOL_VERSION),
                    game_id: info.game_id.clone(),
                    game_version: info.game_version,
                    rules_hash: (self.rules)(info),
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
                    start_time_unix_ms: (self.start_unix_ms)(),
                };
                let path = self.dir.join(file_name(info, *id));
                let sink = (self.open)(&path)?;
                let writer = Writer::new(sink, &header, DEFAULT_SYNC)?;
                self.live.insert(
                    *id,
                    Recording {
                        writer,
                        path,
                        last_agreed: None,
                        desync: None,
                    },
                );
            }
            RouterEvent::TurnClosed {
                id, turn, inputs, ..
            } => {
                if let Some(r) = self.live.get_mut(id) {
                    r.writer.record_turn(*turn, inputs)?;
                }
            }
            RouterEvent::HashAgreed { id, turn, hash } => {
                if let Some(r) = self.live.get_mut(id) {
                    r.writer.record_hash(*turn, *hash)?;
                    r.last_agreed = Some((*turn, *hash));
                }
            }
            RouterEvent::Desync {
                id, turn, hashes, ..
            } => {
                if let Some(r) = self.live.get_mut(id) {
                    r.desync = Some((*turn, hashes.clone()));
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
            RouterEvent::Dropped {
                id, player, turn, ..
            } => {
                if let Some(r) = self.live.get_mut(id) {
                    r.writer.record_drop(*player, *turn)?;
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
            RouterEvent::MatchEnded { id, .. } => {
                let Some(mut r) = self.live.remove(id) else {
                    return Ok(None);
                };
                if let Some((t, hashes)) = r.desync.take() {
                    r.writer.record_desync(t, &hashes, &[])?;
                }
                let finished = if let Some((turn, hash)) = r.last_agreed {
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
                }));
            }
            RouterEvent::PeerReport { .. } => {}
        }
        Ok(None)
    }
}
