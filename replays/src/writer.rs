//! The streaming [`Writer`]: appends checksummed records, flushes each turn to
//! the operating system and syncs to disk on a measured schedule.

use crate::error::ReplayError;
use crate::format::{
    self, Checksum, FORMAT_VERSION, Header, KeyframeEntry, PREAMBLE_LEN, Record, kind,
};
use crate::reader::Reader;
use sim::{PlayerId, StateHash, Turn};
use std::fs::{File, OpenOptions};
use std::io::{BufReader, BufWriter, Seek, SeekFrom, Write};
use std::path::Path;

/// A byte sink that can also force its data onto stable storage.
pub trait Sink: Write {
    /// Makes everything written so far durable (`fdatasync` for a file).
    fn sync(&mut self) -> std::io::Result<()>;
}

impl Sink for File {
    fn sync(&mut self) -> std::io::Result<()> {
        self.sync_data()
    }
}

impl Sink for Vec<u8> {
    fn sync(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// When the writer forces data to disk with fsync.
///
/// Every turn is always flushed to the operating system (so a crash of the
/// process loses nothing); this only governs protection against a power loss
/// or kernel crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncPolicy {
    /// fsync after every turn record.
    EveryTurn,
    /// fsync after every `n`th turn record (and at finish).
    EveryTurns(u32),
    /// fsync only at finish.
    AtFinish,
}

/// The default: fsync every 10 turns (1 s of game at 100 ms turns).
///
/// Measured on the development machine (ext4 on a virtual disk, example
/// `fsync_cost`, 2,000 turns of 4 players): ~3 µs per turn without fsync,
/// ~8 µs every 50 turns, ~22 µs every 10 turns, ~210 µs every turn. Every
/// turn is flushed to the OS regardless, so a crash of the recording process
/// loses nothing; fsync only guards against power loss. Once per second
/// bounds that loss to 1 s of play while keeping the relay's thread out of
/// 90 % of the fsync stalls (which reach several ms on spinning or busy disks).
pub const DEFAULT_SYNC: SyncPolicy = SyncPolicy::EveryTurns(10);

/// Streams one match to a replay file. Memory stays bounded: one record buffer
/// plus one 32-byte index entry per keyframe.
pub struct Writer<W: Sink = File> {
    out: Option<BufWriter<W>>,
    prev: Checksum,
    offset: u64,
    buf: Vec<u8>,
    frame: Vec<u8>,
    last_turn: Option<Turn>,
    turns: u32,
    keyframes: Vec<KeyframeEntry>,
    sync: SyncPolicy,
    unsynced_turns: u32,
    closed: bool,
    started: bool,
}

impl Writer<File> {
    /// Creates (or truncates) `path` and writes the preamble and header.
    pub fn create(path: impl AsRef<Path>, header: &Header) -> Result<Self, ReplayError> {
        Self::create_with(path, header, DEFAULT_SYNC)
    }

    /// Like [`Writer::create`] with an explicit fsync policy.
    pub fn create_with(
        path: impl AsRef<Path>,
        header: &Header,
        sync: SyncPolicy,
    ) -> Result<Self, ReplayError> {
        Self::new(File::create(path)?, header, sync)
    }

    /// Reopens an unfinished recording (no trailer) to append to it: use it
    /// when the recording process restarts after a crash and the match goes
    /// on, so the match stays one file.
    ///
    /// Every intact record is kept. A torn or damaged tail (from the first
    /// record whose framing or checksum fails) is cut off the file, which is
    /// then appended to: the writer continues the checksum chain, the turn
    /// count and the keyframe list, so after more records and
    /// [`Writer::finish`] the file reads as one complete replay. The records
    /// kept are returned, for the caller to pick up where it stopped (last
    /// turn, last agreed hash, last keyframe).
    ///
    /// # Errors
    /// [`ReplayError::Finished`] for a file with a trailer; the [`Reader`]'s
    /// error when the preamble or header cannot be read; an intact record
    /// this build refuses (unknown kind, malformed payload, out of place:
    /// written by another build, not torn by a crash) is returned as its
    /// error rather than cut; I/O errors. The file is changed only on success.
    pub fn reopen(
        path: impl AsRef<Path>,
        sync: SyncPolicy,
    ) -> Result<(Self, Reopened), ReplayError> {
        // One handle for reading, cutting and appending: the file checked is
        // the file written.
        let mut file = OpenOptions::new().read(true).write(true).open(path)?;
        let mut reader = Reader::new(BufReader::with_capacity(64 * 1024, &file))?;
        if reader.version() != FORMAT_VERSION {
            // Appended records would be in this build's format, not the file's.
            return Err(ReplayError::UnsupportedVersion {
                found: reader.version(),
                oldest: FORMAT_VERSION,
                newest: FORMAT_VERSION,
            });
        }
        let mut records = Vec::new();
        let mut keyframes = Vec::new();
        while let Some(item) = reader.next() {
            let record = match item {
                Ok(record) => record,
                // The bytes stop inside a record: a crash's tail.
                Err(ReplayError::Torn { .. }) => break,
                // A bad checksum is a crash's tail only on the file's last
                // record (its data had not landed). Anywhere else the bytes
                // after it are records a cut would destroy: the file is
                // left as it is and not continued.
                Err(ReplayError::Checksum { offset, what }) => {
                    let len = file.metadata()?.len();
                    if last_record_at(&file, offset, len)? {
                        break;
                    }
                    return Err(ReplayError::DamagedInside { offset, what });
                }
                Err(e) => return Err(e),
            };
            match &record {
                Record::Trailer { .. } => return Err(ReplayError::Finished),
                Record::Keyframe { turn, hash, .. } => keyframes.push(KeyframeEntry {
                    turn: *turn,
                    offset: reader.record_offset(),
                    hash: *hash,
                }),
                _ => {}
            }
            records.push(record);
        }
        let summary = reader.summary();
        let (end, last_turn, turns, started) = (
            summary.intact_bytes,
            summary.last_turn,
            summary.turns,
            summary.started,
        );
        let prev = reader.intact_checksum();
        let header = reader.header().clone();
        drop(reader);

        let cut_bytes = file.metadata()?.len().saturating_sub(end);
        if cut_bytes > 0 {
            file.set_len(end)?;
            // The cut is durable before anything lands after it.
            file.sync_data()?;
        }
        file.seek(SeekFrom::Start(end))?;
        let mut w = Self::at(file, prev, end, sync);
        w.last_turn = last_turn;
        w.turns = turns;
        w.keyframes = keyframes;
        w.started = started;
        Ok((
            w,
            Reopened {
                header,
                records,
                cut_bytes,
            },
        ))
    }
}

/// Whether the record starting at `offset` is the file's last: its length
/// guard holds and the record reaches the end of the file (or beyond it).
/// A record whose guard is broken counts as the last only when nothing but
/// its head is left (`len - offset` is at most a head), since its length
/// says nothing then.
fn last_record_at(mut file: &File, offset: u64, len: u64) -> Result<bool, ReplayError> {
    let left = len.saturating_sub(offset);
    if left <= format::RECORD_HEAD_LEN {
        return Ok(true);
    }
    let mut head = [0u8; format::RECORD_HEAD_LEN as usize];
    file.seek(SeekFrom::Start(offset))?;
    std::io::Read::read_exact(&mut file, &mut head)?;
    let n = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
    let guard = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
    if guard != !n || n > crate::format::MAX_RECORD_LEN {
        return Ok(false);
    }
    let whole = format::RECORD_HEAD_LEN + u64::from(n) + crate::format::CHECKSUM_LEN as u64;
    Ok(whole >= left)
}

/// What [`Writer::reopen`] found in the file it continues: read it to resume
/// the match where the recording stopped.
#[derive(Debug, Clone)]
pub struct Reopened {
    /// The file's header.
    pub header: Header,
    /// Every intact record after the header, in file order.
    pub records: Vec<Record>,
    /// Bytes of a torn or damaged tail cut off the file (0 when it ended
    /// cleanly between records).
    pub cut_bytes: u64,
}

impl<W: Sink> Writer<W> {
    /// Starts a replay on any sink (a `Vec<u8>` in tests).
    ///
    /// The header's `format_version` is ignored: the writer always writes
    /// [`FORMAT_VERSION`].
    pub fn new(sink: W, header: &Header, sync: SyncPolicy) -> Result<Self, ReplayError> {
        let mut w = Self::at(sink, format::chain_seed(FORMAT_VERSION), 0, sync);
        w.write_raw(&format::preamble())?;
        debug_assert_eq!(w.offset, PREAMBLE_LEN);
        let mut h = header.clone();
        h.format_version = FORMAT_VERSION;
        w.buf.clear();
        Record::Header(h).encode_payload(&mut w.buf)?;
        w.emit(kind::HEADER)?;
        w.flush()?;
        Ok(w)
    }

    /// Records one closed turn: each player's opaque input bytes, as bundled.
    /// Turns must strictly increase. Flushed to the OS before returning.
    pub fn record_turn(
        &mut self,
        turn: Turn,
        inputs: &[(PlayerId, Vec<u8>)],
    ) -> Result<(), ReplayError> {
        if let Some(last) = self.last_turn
            && turn <= last
        {
            return Err(ReplayError::TurnOrder { last, got: turn });
        }
        self.buf.clear();
        format::encode_turn(
            turn,
            inputs.iter().map(|(p, b)| (*p, b.as_slice())),
            &mut self.buf,
        )?;
        self.emit(kind::TURN)?;
        self.last_turn = Some(turn);
        self.turns = self.turns.saturating_add(1);
        self.flush()?;
        self.unsynced_turns = self.unsynced_turns.saturating_add(1);
        let due = match self.sync {
            SyncPolicy::EveryTurn => true,
            SyncPolicy::EveryTurns(n) => self.unsynced_turns >= n.max(1),
            SyncPolicy::AtFinish => false,
        };
        if due {
            self.sync_now()?;
        }
        Ok(())
    }

    /// Records the state hash the peers agreed on for `turn`.
    pub fn record_hash(&mut self, turn: Turn, hash: StateHash) -> Result<(), ReplayError> {
        self.record(&Record::Hash { turn, hash })
    }

    /// Records a hash disagreement at `turn` and the sections known to differ.
    pub fn record_desync(
        &mut self,
        turn: Turn,
        hashes: &[(PlayerId, StateHash)],
        sections: &[String],
    ) -> Result<(), ReplayError> {
        self.record(&Record::Desync {
            turn,
            hashes: hashes.to_vec(),
            sections: sections.to_vec(),
        })
    }

    /// Records that the hash reports for `turn` disagreed: the majority's
    /// hash (`None`: no majority) and each dissenting player's hash. Write
    /// the majority hash with [`Writer::record_hash`] too: verification and
    /// the trailer use hash records.
    pub fn record_dispute(
        &mut self,
        turn: Turn,
        majority: Option<StateHash>,
        dissent: &[(PlayerId, StateHash)],
    ) -> Result<(), ReplayError> {
        self.record(&Record::Dispute {
            turn,
            majority,
            dissent: dissent.to_vec(),
        })
    }

    /// Records the relay's desync forensics report.
    ///
    /// # Errors
    /// I/O errors of the sink.
    pub fn record_forensics(&mut self, report: &crate::DesyncReport) -> Result<(), ReplayError> {
        self.record(&Record::Forensics(Box::new(report.clone())))
    }

    /// Records that `player` left; from `turn` on they send nothing.
    pub fn record_drop(&mut self, player: PlayerId, turn: Turn) -> Result<(), ReplayError> {
        self.record(&Record::Drop { player, turn })
    }

    /// Records that a dropped `player` came back; its inputs count from `turn` on.
    pub fn record_rejoin(&mut self, player: PlayerId, turn: Turn) -> Result<(), ReplayError> {
        self.record(&Record::Rejoin { player, turn })
    }

    /// Records the relay's facts about the match (right after the header),
    /// so that a restarted relay can resume it from this file.
    pub fn record_match(&mut self, facts: &crate::format::MatchFacts) -> Result<(), ReplayError> {
        self.record(&Record::Match(facts.clone()))
    }

    /// Records how the match ended (the relay's end reason, at most
    /// [`MAX_END_REASON`](crate::format::MAX_END_REASON) bytes: longer is
    /// cut), before [`Writer::finish`] or [`Writer::abandon`].
    pub fn record_end(&mut self, reason: &str) -> Result<(), ReplayError> {
        let mut end = crate::format::MAX_END_REASON.min(reason.len());
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        self.record(&Record::End {
            reason: reason[..end].to_owned(),
        })
    }

    /// Records an input-delay change effective from `from_turn`.
    pub fn record_delay_change(&mut self, delay: u32, from_turn: Turn) -> Result<(), ReplayError> {
        self.record(&Record::DelayChange { delay, from_turn })
    }

    /// Records the world before turn 0 when the match does not start from
    /// `Simulation::new(setup)` (a scenario). Only before the first turn.
    pub fn record_start(&mut self, snapshot: &[u8], hash: StateHash) -> Result<(), ReplayError> {
        if self.last_turn.is_some() || self.started {
            return Err(ReplayError::Sequence {
                offset: self.offset,
                reason: "a start state must come once, before the first turn".into(),
            });
        }
        self.buf.clear();
        format::encode_start(hash, snapshot, &mut self.buf)?;
        self.emit(kind::START)?;
        self.started = true;
        self.flush()
    }

    /// Records a full snapshot of the world after stepping `turn`.
    pub fn record_keyframe(
        &mut self,
        turn: Turn,
        snapshot: &[u8],
        hash: StateHash,
    ) -> Result<(), ReplayError> {
        self.buf.clear();
        format::encode_keyframe(turn, hash, snapshot, &mut self.buf)?;
        let offset = self.offset;
        self.emit(kind::KEYFRAME)?;
        self.keyframes.push(KeyframeEntry { turn, offset, hash });
        self.flush()
    }

    /// Writes the keyframe index and the trailer, then flushes and syncs.
    /// The writer is closed afterwards.
    pub fn finish(&mut self, final_turn: Turn, final_hash: StateHash) -> Result<(), ReplayError> {
        let index = Record::KeyframeIndex(std::mem::take(&mut self.keyframes));
        self.record(&index)?;
        self.record(&Record::Trailer {
            final_turn,
            final_hash,
            turns: self.turns,
        })?;
        self.sync_now()?;
        self.closed = true;
        Ok(())
    }

    /// Flushes and syncs what was written, then closes the writer without a
    /// trailer: the file reads as a recovered (incomplete) replay.
    pub fn abandon(&mut self) -> Result<(), ReplayError> {
        self.sync_now()?;
        self.closed = true;
        Ok(())
    }

    /// Bytes written so far.
    #[must_use]
    pub const fn bytes_written(&self) -> u64 {
        self.offset
    }

    /// Turn records written so far.
    #[must_use]
    pub const fn turns_written(&self) -> u32 {
        self.turns
    }

    /// Returns the sink, flushed (for in-memory replays). Call
    /// [`Writer::finish`] first for a complete file.
    pub fn into_inner(mut self) -> Result<W, ReplayError> {
        let out = self.out.take().ok_or(ReplayError::Closed)?;
        out.into_inner()
            .map_err(|e| ReplayError::Io(e.into_error()))
    }

    /// A writer whose next record goes at `offset` of `sink` and chains on
    /// `prev`, with nothing recorded yet.
    fn at(sink: W, prev: Checksum, offset: u64, sync: SyncPolicy) -> Self {
        Self {
            out: Some(BufWriter::with_capacity(64 * 1024, sink)),
            prev,
            offset,
            buf: Vec::with_capacity(1024),
            frame: Vec::with_capacity(1024),
            last_turn: None,
            turns: 0,
            keyframes: Vec::new(),
            sync,
            unsynced_turns: 0,
            closed: false,
            started: false,
        }
    }

    /// The same writer on another sink wrapping this one (`wrap` gets the
    /// flushed sink): a recorder that keeps its files behind one sink type
    /// adopts a [`Writer::reopen`]ed file this way.
    pub fn into_sink<V: Sink>(
        mut self,
        wrap: impl FnOnce(W) -> V,
    ) -> Result<Writer<V>, ReplayError> {
        let out = self.out.take().ok_or(ReplayError::Closed)?;
        let sink = out
            .into_inner()
            .map_err(|e| ReplayError::Io(e.into_error()))?;
        Ok(Writer {
            out: Some(BufWriter::with_capacity(64 * 1024, wrap(sink))),
            prev: self.prev,
            offset: self.offset,
            buf: std::mem::take(&mut self.buf),
            frame: std::mem::take(&mut self.frame),
            last_turn: self.last_turn,
            turns: self.turns,
            keyframes: std::mem::take(&mut self.keyframes),
            sync: self.sync,
            unsynced_turns: self.unsynced_turns,
            closed: self.closed,
            started: self.started,
        })
    }

    fn record(&mut self, record: &Record) -> Result<(), ReplayError> {
        self.buf.clear();
        record.encode_payload(&mut self.buf)?;
        self.emit(record.kind())?;
        self.flush()
    }

    fn emit(&mut self, kind: u8) -> Result<(), ReplayError> {
        self.frame.clear();
        let sum = format::frame_record(&self.prev, kind, &self.buf, &mut self.frame)?;
        let frame = std::mem::take(&mut self.frame);
        let res = self.write_raw(&frame);
        self.frame = frame;
        res?;
        self.prev = sum;
        Ok(())
    }

    fn write_raw(&mut self, bytes: &[u8]) -> Result<(), ReplayError> {
        if self.closed {
            return Err(ReplayError::Closed);
        }
        let out = self.out.as_mut().ok_or(ReplayError::Closed)?;
        if let Err(e) = out.write_all(bytes) {
            // A partial write leaves a torn record: later records would not chain.
            self.out = None;
            return Err(e.into());
        }
        self.offset += bytes.len() as u64;
        Ok(())
    }

    fn flush(&mut self) -> Result<(), ReplayError> {
        let out = self.out.as_mut().ok_or(ReplayError::Closed)?;
        out.flush()?;
        Ok(())
    }

    fn sync_now(&mut self) -> Result<(), ReplayError> {
        let out = self.out.as_mut().ok_or(ReplayError::Closed)?;
        out.flush()?;
        out.get_mut().sync()?;
        self.unsynced_turns = 0;
        Ok(())
    }
}
