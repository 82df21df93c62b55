//! The session's side of agreed snapshots and rejoining: uploading the
//! snapshot the relay asked for in paced chunks behind turn traffic, and
//! coming back into a held slot (resume, receive the snapshot, fast-forward
//! through the bundle tail at full speed, then play live again).

use super::{Phase, Running, Session};
use crate::event::Event;
use crate::input_delay::DelaySchedule;
use crate::proto::{MAX_SNAPSHOT_CHUNK, Resume, SnapshotChunk, ToRelay};
use crate::time::{Duration, Instant};
use crate::turn_buffer::TurnBuffer;
use sim::{StateHash, Turn};
use std::collections::{BTreeMap, VecDeque};

/// A rejoining session between the relay's `Resume` and catching up.
#[derive(Debug)]
pub(super) struct Restoring {
    /// The snapshot announced (turn, hash, length); `None`: from the setup.
    snapshot: Option<(Turn, StateHash, u32)>,
    /// Snapshot bytes received so far.
    buf: Vec<u8>,
    /// Whether the world was handed over ([`Event::Restored`]).
    restored: bool,
    /// The relay's next turn to close when it accepted the rejoin: every
    /// turn before it comes as the tail.
    live: Turn,
}

/// Snapshot chunks waiting to be sent, one per pacing interval.
#[derive(Debug, Default)]
pub(super) struct Upload {
    chunks: VecDeque<SnapshotChunk>,
    next_at: Option<Instant>,
}

impl Upload {
    /// When the next chunk may leave, if one waits.
    pub(super) fn next_at(&self) -> Option<Instant> {
        self.chunks.front().and(self.next_at)
    }
}

impl Running {
    /// Whether the session is still restoring (no own inputs, no stall).
    pub(super) const fn restoring(&self) -> bool {
        self.restoring.is_some()
    }

    /// Whether the world may not step yet: a rejoin's snapshot is incomplete.
    pub(super) fn awaiting_snapshot(&self) -> bool {
        self.restoring.as_ref().is_some_and(|r| !r.restored)
    }
}

impl Session {
    /// Uploads the snapshot of the world after `turn` (asked for by
    /// [`Event::SnapshotWanted`]) with the world's hash after it. The bytes
    /// leave in chunks of at most [`MAX_SNAPSHOT_CHUNK`] on the bulk channel,
    /// one every [`SessionConfig::upload_interval`](crate::builder::SessionConfig),
    /// so the upload never crowds out this peer's own turn traffic.
    pub fn upload_snapshot(&mut self, turn: Turn, hash: StateHash, bytes: &[u8]) {
        let Phase::Running(r) = &mut self.phase else {
            return;
        };
        let Ok(total) = u32::try_from(bytes.len()) else {
            return;
        };
        // A newer request replaces an upload still under way.
        r.upload.chunks.clear();
        let mut offset = 0u32;
        for piece in bytes.chunks(MAX_SNAPSHOT_CHUNK) {
            r.upload.chunks.push_back(SnapshotChunk {
                turn,
                hash,
                total,
                offset,
                bytes: piece.to_vec(),
            });
            // At most MAX_SNAPSHOT_CHUNK: fits u32.
            offset += u32::try_from(piece.len()).unwrap_or(u32::MAX);
        }
        if bytes.is_empty() {
            r.upload.chunks.push_back(SnapshotChunk {
                turn,
                hash,
                total: 0,
                offset: 0,
                bytes: Vec::new(),
            });
        }
        r.upload.next_at = Some(r.now);
        self.stats.snapshots_uploaded += 1;
    }

    /// Sends the next upload chunk if its time has come.
    pub(super) fn pump_upload(&mut self, now: Instant) {
        let Phase::Running(r) = &mut self.phase else {
            return;
        };
        let Some(at) = r.upload.next_at() else {
            return;
        };
        if now < at {
            return;
        }
        let Some(chunk) = r.upload.chunks.pop_front() else {
            return;
        };
        r.upload.next_at = Some(now + self.config.upload_interval);
        self.send(&ToRelay::SnapshotChunk(chunk));
    }

    /// The relay accepted our rejoin: set the schedule from its clock, wait
    /// for the snapshot, then fast-forward.
    pub(super) fn resume(&mut self, now: Instant, resume: Resume) {
        if !matches!(self.phase, Phase::Joining) || self.config.rejoin.is_none() {
            self.stats.bad_messages += 1;
            return;
        }
        let s = resume.start;
        let turn_length = Duration::from_micros(s.turn_length_us);
        let start = now - Duration::from_micros(resume.elapsed_us);
        let epoch = start + turn_length.saturating_mul(u64::from(s.input_delay));
        let next_exec = resume.snapshot.map_or(s.first_turn, |(t, _, _)| t.next());
        self.events.push_back(Event::Started {
            your_player: s.your_player,
            setup: s.setup,
            players: s.players,
            first_turn: s.first_turn,
            last_turn: s.last_turn,
            input_delay: resume.delay,
            turn_length,
        });
        self.stats.input_delay = resume.delay;
        // The schedule's first entry is the starting delay: the clock turn
        // is counted from it, as at every other peer.
        let mut delay = DelaySchedule::new(s.first_turn, s.input_delay);
        delay.change(next_exec, resume.delay);
        let restored = resume.snapshot.is_none();
        if restored {
            self.events.push_back(Event::Restored { snapshot: None });
        }
        self.phase = Phase::Running(Box::new(Running {
            your_player: s.your_player,
            first_turn: s.first_turn,
            last_turn: s.last_turn,
            turn_length,
            start,
            now,
            epoch,
            next_exec,
            consumed: next_exec.0.checked_sub(1).map(Turn),
            buffer: TurnBuffer::default(),
            arrived: BTreeMap::new(),
            delay,
            next_input: next_exec,
            pending: VecDeque::new(),
            in_flight: BTreeMap::new(),
            awaiting_late: BTreeMap::new(),
            sections: VecDeque::new(),
            last_hashed: next_exec.0.checked_sub(1).map(Turn),
            stall_accounted: now,
            stall_notified: None,
            waiting: None,
            next_report: now + self.config.report_interval,
            end: None,
            restoring: Some(Restoring {
                snapshot: resume.snapshot,
                buf: Vec::new(),
                restored,
                live: resume.live,
            }),
            upload: Upload::default(),
        }));
    }

    /// A piece of the rejoin snapshot: appended in order; the whole, once
    /// here, goes to the game as [`Event::Restored`].
    pub(super) fn on_snapshot_chunk(&mut self, chunk: SnapshotChunk) {
        let Phase::Running(r) = &mut self.phase else {
            self.stats.bad_messages += 1;
            return;
        };
        let Some(rs) = r.restoring.as_mut() else {
            self.stats.bad_messages += 1;
            return;
        };
        let Some((turn, hash, total)) = rs.snapshot else {
            self.stats.bad_messages += 1;
            return;
        };
        if rs.restored
            || chunk.turn != turn
            || chunk.total != total
            || u64::from(chunk.offset) != rs.buf.len() as u64
        {
            self.stats.bad_messages += 1;
            return;
        }
        rs.buf.extend_from_slice(&chunk.bytes);
        if rs.buf.len() as u64 == u64::from(total) {
            rs.restored = true;
            let bytes = std::mem::take(&mut rs.buf);
            self.events.push_back(Event::Restored {
                snapshot: Some((turn, hash, bytes)),
            });
        }
    }

    /// Ends the catch-up once every turn the relay had closed at the rejoin
    /// is simulated and the next bundle is not here yet: from now on the
    /// peer sends inputs and the relay counts them.
    pub(super) fn check_caught_up(&mut self) {
        let Phase::Running(r) = &mut self.phase else {
            return;
        };
        let Some(rs) = &r.restoring else {
            return;
        };
        if !rs.restored || r.next_exec < rs.live || r.buffer.has(r.next_exec) {
            return;
        }
        r.restoring = None;
        r.next_input = r.next_input.max(r.next_exec);
        let Some(turn) = r.next_exec.0.checked_sub(1).map(Turn) else {
            return;
        };
        self.events.push_back(Event::CaughtUp { turn });
        self.send(&ToRelay::CaughtUp { turn });
    }
}
