//! Turns router events into one replay file per match (`replays::Writer`):
//! header at start, every closed turn's bundle, each agreed hash, drops,
//! delay changes and the first desync with its differing sections.

use crate::event::{MatchId, MatchInfo, RouterEvent};
use replays::{Header, PlayerInfo, ReplayError, Writer};
use sim::{PlayerId, Simulation, StateHash, Turn};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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
    writer: Writer,
    path: PathBuf,
    last_agreed: Option<(Turn, StateHash)>,
    desync: Option<(Turn, Vec<(PlayerId, StateHash)>)>,
}

/// Records every match a router runs into `dir/<match>-<id>.lsr`.
pub struct Recorder {
    dir: PathBuf,
    rules: RulesHashFn,
    start_unix_ms: fn() -> u64,
    live: BTreeMap<MatchId, Recording>,
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
            live: BTreeMap::new(),
        })
    }

    /// Where match `id` is being recorded, if it is.
    #[must_use]
    pub fn path(&self, id: MatchId) -> Option<&Path> {
        self.live.get(&id).map(|r| r.path.as_path())
    }

    /// Records one event; returns the recording when a match ends.
    pub fn handle(&mut self, ev: &RouterEvent) -> Result<Option<Recorded>, ReplayError> {
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
                let writer = Writer::create(&path, &header)?;
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
