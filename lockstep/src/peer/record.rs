//! A peer's own replay of the match: bundles, its hashes, drops, delay
//! changes and a keyframe every K turns, through [`replays::Writer`].

use crate::proto::PlayerInfo;
use crate::time::Duration;
use sim::{MatchSetup, PlayerId, Simulation, StateHash, Turn};
use std::fs::File;
use std::path::PathBuf;

/// Where the recording goes: the file, created when the peer is built, and
/// once the match started its writer.
pub(super) struct Recording {
    pub(super) path: PathBuf,
    pub(super) keyframe_every: u32,
    /// Created before the join; the header goes in at the start.
    file: Option<File>,
    writer: Option<replays::Writer>,
}

impl std::fmt::Debug for Recording {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recording")
            .field("path", &self.path)
            .field("keyframe_every", &self.keyframe_every)
            .field("created", &self.file.is_some())
            .field("open", &self.writer.is_some())
            .finish()
    }
}

/// What the header needs beyond the world.
pub(super) struct StartInfo<'a> {
    pub(super) match_name: &'a str,
    pub(super) setup: &'a MatchSetup,
    pub(super) players: &'a [PlayerInfo],
    pub(super) turn_length: Duration,
    pub(super) start_time_unix_ms: u64,
}

impl Recording {
    /// Creates the file now, so that a path that cannot be written is
    /// known before the peer joins a match; an existing file is refused
    /// unless `overwrite`.
    pub(super) fn create(
        path: PathBuf,
        keyframe_every: u32,
        overwrite: bool,
    ) -> Result<Self, crate::builder::BuildError> {
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true);
        if overwrite {
            opts.create(true).truncate(true);
        } else {
            opts.create_new(true);
        }
        match opts.open(&path) {
            Ok(file) => Ok(Self {
                path,
                keyframe_every,
                file: Some(file),
                writer: None,
            }),
            Err(e) => Err(crate::builder::BuildError::Record {
                kind: e.kind(),
                reason: if e.kind() == std::io::ErrorKind::AlreadyExists {
                    "the file already exists".to_owned()
                } else {
                    e.to_string()
                },
                path,
            }),
        }
    }

    /// Opens the file with the match's header.
    pub(super) fn start<S: Simulation>(
        &mut self,
        world: &S,
        info: &StartInfo<'_>,
    ) -> Result<(), replays::ReplayError> {
        let mut header = replays::Header::for_game(world, info.setup);
        header.protocol_version = u32::from(crate::proto::PROTOCOL_VERSION);
        header.match_name = info.match_name.to_owned();
        header.turn_length_us = info.turn_length.as_micros();
        header.players = info
            .players
            .iter()
            .map(|p| replays::PlayerInfo {
                id: p.id,
                name: p.name.clone(),
            })
            .collect();
        header.start_time_unix_ms = info.start_time_unix_ms;
        // The file was created at build; a second start has none left.
        let file = self.file.take().ok_or(replays::ReplayError::Closed)?;
        self.writer = Some(replays::Writer::new(file, &header, replays::DEFAULT_SYNC)?);
        Ok(())
    }

    /// Whether `turn` gets a keyframe.
    pub(super) const fn keyframe_due(&self, turn: Turn) -> bool {
        self.writer.is_some()
            && self.keyframe_every > 0
            && turn.0 % self.keyframe_every == self.keyframe_every - 1
    }

    /// Runs `f` on the open writer; an error closes the recording.
    pub(super) fn write(
        &mut self,
        f: impl FnOnce(&mut replays::Writer) -> Result<(), replays::ReplayError>,
    ) -> Result<(), replays::ReplayError> {
        let Some(w) = self.writer.as_mut() else {
            return Ok(());
        };
        let r = f(w);
        if r.is_err() {
            self.writer = None;
        }
        r
    }

    pub(super) fn turn(
        &mut self,
        turn: Turn,
        inputs: &[(PlayerId, Vec<u8>)],
        hash: StateHash,
        keyframe: Option<&[u8]>,
    ) -> Result<(), replays::ReplayError> {
        self.write(|w| {
            w.record_turn(turn, inputs)?;
            w.record_hash(turn, hash)?;
            match keyframe {
                Some(snap) => w.record_keyframe(turn, snap, hash),
                None => Ok(()),
            }
        })
    }

    /// Closes the file: a trailer when the match completed at `last`, else
    /// left readable up to its last turn. A file the match never started
    /// in is empty, not a replay: it is removed.
    pub(super) fn close(
        &mut self,
        completed: Option<(Turn, StateHash)>,
    ) -> Result<(), replays::ReplayError> {
        if self.file.take().is_some() {
            std::fs::remove_file(&self.path)?;
        }
        let Some(mut w) = self.writer.take() else {
            return Ok(());
        };
        match completed {
            Some((turn, hash)) => w.finish(turn, hash),
            None => w.abandon(),
        }
    }
}
