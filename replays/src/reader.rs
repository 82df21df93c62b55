//! The [`Reader`]: an iterator over a replay's records that checks every
//! length guard and chained checksum, and says exactly how a damaged file ends.

use crate::error::ReplayError;
use crate::format::{
    self, CHECKSUM_LEN, Checksum, FORMAT_VERSION, Header, MAGIC, MAX_RECORD_LEN,
    OLDEST_READABLE_VERSION, PREAMBLE_LEN, RECORD_HEAD_LEN, Record, kind,
};
use sim::{StateHash, Turn};
use std::fmt;
use std::fs::File;
use std::io::{BufReader, Cursor, Read};
use std::path::Path;

/// How the readable part of a file ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    /// Not known yet: the reader has not reached the end.
    Unread,
    /// A trailer closed the file: the match was recorded to the end.
    Complete,
    /// The file stops cleanly between records but has no trailer (the writer
    /// stopped: crash, kill, or [`crate::Writer::abandon`]).
    NoTrailer,
    /// The file stops inside a record (a crash or full disk mid-write).
    Torn {
        /// Offset where the incomplete record starts.
        offset: u64,
        /// Bytes of it present and discarded.
        lost_bytes: u64,
    },
    /// A record failed its checks: reading stopped at `offset`.
    Corrupt {
        /// Offset of the bad record.
        offset: u64,
        /// The error, as text.
        error: String,
    },
}

/// Counts gathered while reading, and how the file ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadSummary {
    /// Records read after the header.
    pub records: u64,
    /// Turn records read.
    pub turns: u32,
    /// First turn recorded.
    pub first_turn: Option<Turn>,
    /// Last turn recorded.
    pub last_turn: Option<Turn>,
    /// Hash records read.
    pub hashes: u32,
    /// Last turn with a recorded hash, and that hash.
    pub last_hash: Option<(Turn, StateHash)>,
    /// Keyframe records read.
    pub keyframes: u32,
    /// Desync records read (the first desync of a match, with its sections).
    pub desyncs: u32,
    /// Dispute records read: turns whose hash reports disagreed.
    pub disputes: u32,
    /// Forensics report records read (the relay's narrowing of a desync).
    pub forensics: u32,
    /// Drop records read.
    pub drops: u32,
    /// Rejoin records (players back after a drop).
    pub rejoins: u32,
    /// Delay-change records read.
    pub delay_changes: u32,
    /// True when the file holds a start state (a scenario match).
    pub started: bool,
    /// How the match ended, as its relay recorded it (`completed`,
    /// `abandoned`, `shutdown`, `desync`); `None` in a file without an end
    /// record (a peer's recording, or one that stopped early).
    pub end: Option<String>,
    /// The trailer's final turn and hash, when the file has one.
    pub trailer: Option<(Turn, StateHash)>,
    /// Bytes of intact records (the whole file when complete).
    pub intact_bytes: u64,
    /// How the file ends.
    pub ending: Ending,
}

impl ReadSummary {
    /// Nothing read yet; the intact part ends at `intact_bytes`.
    const fn fresh(intact_bytes: u64) -> Self {
        Self {
            records: 0,
            turns: 0,
            first_turn: None,
            last_turn: None,
            hashes: 0,
            last_hash: None,
            keyframes: 0,
            desyncs: 0,
            disputes: 0,
            forensics: 0,
            drops: 0,
            rejoins: 0,
            delay_changes: 0,
            started: false,
            end: None,
            trailer: None,
            intact_bytes,
            ending: Ending::Unread,
        }
    }

    /// True when a trailer closed the file and nothing is damaged.
    #[must_use]
    pub fn is_complete(&self) -> bool {
        self.ending == Ending::Complete
    }
}

impl fmt::Display for ReadSummary {
    /// "complete", or what was recovered and what was lost.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let turns = group_thousands(u64::from(self.turns));
        match &self.ending {
            Ending::Complete => match self.end.as_deref() {
                Some(end) if end != "completed" => {
                    write!(f, "complete ({turns} turns; the match ended {end})")
                }
                _ => write!(f, "complete ({turns} turns)"),
            },
            Ending::Unread => write!(f, "not read to the end ({turns} turns so far)"),
            Ending::NoTrailer => write!(
                f,
                "recovered {turns} turns; the file ends between records without a trailer (recording stopped)"
            ),
            Ending::Torn { offset, lost_bytes } => write!(
                f,
                "recovered {turns} turns; the last record was torn ({lost_bytes} bytes lost at byte {offset})"
            ),
            Ending::Corrupt { offset, error } => write!(
                f,
                "recovered {turns} turns; damaged at byte {offset}: {error}"
            ),
        }
    }
}

/// `1412` -> `"1,412"`.
#[must_use]
pub fn group_thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Reads a replay record by record. Iterating yields each record after the
/// header; a damaged or torn ending is yielded once as an `Err`, after which
/// the iterator ends and [`Reader::summary`] tells what was recovered.
pub struct Reader<R: Read = BufReader<File>> {
    inner: R,
    version: u32,
    header: Header,
    prev: Checksum,
    /// The chain's checksum after the last record returned intact: `prev`
    /// already moves past a record whose checksum holds but which is then
    /// refused (malformed, out of place), and an append must not chain on that.
    intact_prev: Checksum,
    offset: u64,
    last_offset: u64,
    done: bool,
    summary: ReadSummary,
    payload: Vec<u8>,
}

impl Reader<BufReader<File>> {
    /// Opens a replay file and reads its header.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, ReplayError> {
        Self::new(BufReader::with_capacity(64 * 1024, File::open(path)?))
    }
}

impl<'a> Reader<Cursor<&'a [u8]>> {
    /// Reads a replay held in memory (seekable, like a file).
    pub fn from_bytes(bytes: &'a [u8]) -> Result<Self, ReplayError> {
        Self::new(Cursor::new(bytes))
    }
}

enum Fill {
    Full,
    Short(usize),
}

fn fill<R: Read>(r: &mut R, buf: &mut [u8]) -> Result<Fill, ReplayError> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => return Ok(Fill::Short(n)),
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Fill::Full)
}

impl<R: Read> Reader<R> {
    /// Reads the preamble and header from `inner`.
    pub fn new(mut inner: R) -> Result<Self, ReplayError> {
        let mut pre = [0u8; PREAMBLE_LEN as usize];
        if let Fill::Short(n) = fill(&mut inner, &mut pre)? {
            let k = n.min(MAGIC.len());
            return Err(if pre[..k] == MAGIC[..k] {
                ReplayError::Torn {
                    offset: 0,
                    lost_bytes: n as u64,
                }
            } else {
                ReplayError::NotAReplay
            });
        }
        if pre[..8] != MAGIC {
            return Err(ReplayError::NotAReplay);
        }
        let version = u32::from_le_bytes([pre[8], pre[9], pre[10], pre[11]]);
        if !(OLDEST_READABLE_VERSION..=FORMAT_VERSION).contains(&version) {
            return Err(ReplayError::UnsupportedVersion {
                found: version,
                oldest: OLDEST_READABLE_VERSION,
                newest: FORMAT_VERSION,
            });
        }
        let mut r = Self {
            inner,
            version,
            header: Header {
                format_version: version,
                engine_version: String::new(),
                protocol_version: 0,
                game_id: String::new(),
                game_version: 0,
                rules_hash: StateHash([0; 32]),
                setup: sim::MatchSetup {
                    seed: 0,
                    players: 0,
                    ticks_per_turn: 0,
                },
                turn_length_us: 0,
                players: Vec::new(),
                match_name: String::new(),
                start_time_unix_ms: 0,
            },
            prev: format::chain_seed(version),
            intact_prev: format::chain_seed(version),
            offset: PREAMBLE_LEN,
            last_offset: PREAMBLE_LEN,
            done: false,
            summary: ReadSummary::fresh(PREAMBLE_LEN),
            payload: Vec::new(),
        };
        match r.read_record()? {
            Some((kind::HEADER, offset)) => {
                match Record::decode_payload(kind::HEADER, &r.payload, offset, version)? {
                    Record::Header(h) => r.header = h,
                    _ => unreachable_header(offset)?,
                }
            }
            Some((other, offset)) => {
                return Err(ReplayError::Sequence {
                    offset,
                    reason: format!(
                        "first record is {}, not the header",
                        format::kind_name(other)
                    ),
                });
            }
            None => {
                return Err(ReplayError::Torn {
                    offset: PREAMBLE_LEN,
                    lost_bytes: 0,
                });
            }
        }
        r.summary.intact_bytes = r.offset;
        r.intact_prev = r.prev;
        Ok(r)
    }

    /// The file's header.
    #[must_use]
    pub const fn header(&self) -> &Header {
        &self.header
    }

    /// The file's format version.
    #[must_use]
    pub const fn version(&self) -> u32 {
        self.version
    }

    /// Byte offset of the record most recently returned.
    #[must_use]
    pub const fn record_offset(&self) -> u64 {
        self.last_offset
    }

    /// Bytes consumed so far (for progress bars).
    #[must_use]
    pub const fn position(&self) -> u64 {
        self.offset
    }

    /// What has been read so far and, once the iterator ended, how the file ends.
    #[must_use]
    pub const fn summary(&self) -> &ReadSummary {
        &self.summary
    }

    /// The underlying reader, for [`crate::index`]'s positioned reads.
    pub(crate) fn inner_mut(&mut self) -> &mut R {
        &mut self.inner
    }

    /// The chain checksum after the last intact record (the header, before
    /// any record was returned): what [`crate::Writer::reopen`] chains the
    /// next record on, at [`ReadSummary::intact_bytes`].
    pub(crate) const fn intact_checksum(&self) -> Checksum {
        self.intact_prev
    }

    /// Continues at the record at `offset` (the inner reader is already
    /// there) with `prev` as the chain's previous checksum; the summary
    /// restarts, so it describes what is read from here on.
    pub(crate) fn resume(&mut self, offset: u64, prev: Checksum) {
        self.prev = prev;
        self.intact_prev = prev;
        self.offset = offset;
        self.last_offset = offset;
        self.done = false;
        self.summary = ReadSummary::fresh(offset);
    }

    /// Reads to the end, discarding records, and returns the summary.
    pub fn scan(mut self) -> Result<(Header, ReadSummary), ReplayError> {
        for item in self.by_ref() {
            if let Err(e) = item
                && !e.is_damage()
            {
                return Err(e);
            }
        }
        Ok((self.header, self.summary))
    }

    /// Reads one framed record into `self.payload`; returns its kind and offset,
    /// or `None` at a clean end of file.
    fn read_record(&mut self) -> Result<Option<(u8, u64)>, ReplayError> {
        let start = self.offset;
        let mut head = [0u8; RECORD_HEAD_LEN as usize];
        match fill(&mut self.inner, &mut head)? {
            Fill::Full => {}
            Fill::Short(0) => return Ok(None),
            Fill::Short(n) => {
                return Err(ReplayError::Torn {
                    offset: start,
                    lost_bytes: n as u64,
                });
            }
        }
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        let guard = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
        if guard != !len {
            // A crash can leave a zero-filled tail (the size grew before the
            // data landed): that is a torn write, not an edit.
            if head.iter().all(|b| *b == 0) {
                let (rest, all_zero) = self.drain_zeros()?;
                if all_zero {
                    return Err(ReplayError::Torn {
                        offset: start,
                        lost_bytes: RECORD_HEAD_LEN + rest,
                    });
                }
            }
            return Err(ReplayError::Checksum {
                offset: start,
                what: "length guard does not match",
            });
        }
        if len > MAX_RECORD_LEN {
            return Err(ReplayError::Checksum {
                offset: start,
                what: "length out of range",
            });
        }
        let kind = head[8];
        self.payload.clear();
        let got = (&mut self.inner)
            .take(u64::from(len))
            .read_to_end(&mut self.payload)? as u64;
        if got < u64::from(len) {
            return Err(ReplayError::Torn {
                offset: start,
                lost_bytes: RECORD_HEAD_LEN + got,
            });
        }
        let mut sum = [0u8; CHECKSUM_LEN];
        if let Fill::Short(n) = fill(&mut self.inner, &mut sum)? {
            return Err(ReplayError::Torn {
                offset: start,
                lost_bytes: RECORD_HEAD_LEN + got + n as u64,
            });
        }
        if format::record_checksum(&self.prev, kind, &self.payload) != sum {
            return Err(ReplayError::Checksum {
                offset: start,
                what: "checksum does not match (damaged, or edited at or before this record)",
            });
        }
        self.prev = sum;
        self.offset = start + RECORD_HEAD_LEN + u64::from(len) + CHECKSUM_LEN as u64;
        Ok(Some((kind, start)))
    }

    /// Consumes the rest of the input; returns its length and whether it was all zero.
    fn drain_zeros(&mut self) -> Result<(u64, bool), ReplayError> {
        let mut buf = [0u8; 4096];
        let mut total = 0u64;
        let mut all_zero = true;
        loop {
            match self.inner.read(&mut buf) {
                Ok(0) => return Ok((total, all_zero)),
                Ok(k) => {
                    total += k as u64;
                    all_zero &= buf[..k].iter().all(|b| *b == 0);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn next_inner(&mut self) -> Result<Option<Record>, ReplayError> {
        let Some((kind, offset)) = self.read_record()? else {
            self.summary.ending = if self.summary.trailer.is_some() {
                Ending::Complete
            } else {
                Ending::NoTrailer
            };
            return Ok(None);
        };
        self.last_offset = offset;
        let seq = |reason: String| ReplayError::Sequence { offset, reason };
        if self.summary.trailer.is_some() {
            return Err(seq("record after the trailer".into()));
        }
        let record = Record::decode_payload(kind, &self.payload, offset, self.version)?;
        let s = &mut self.summary;
        match &record {
            Record::Header(_) => return Err(seq("a second header".into())),
            Record::Turn { turn, .. } => {
                if let Some(last) = s.last_turn
                    && *turn <= last
                {
                    return Err(seq(format!("turn {turn} after turn {last}")));
                }
                s.first_turn.get_or_insert(*turn);
                s.last_turn = Some(*turn);
                s.turns += 1;
            }
            Record::Hash { turn, hash } => {
                s.hashes += 1;
                s.last_hash = Some((*turn, *hash));
            }
            Record::Keyframe { .. } => s.keyframes += 1,
            Record::Desync { .. } => s.desyncs += 1,
            Record::Dispute { .. } => s.disputes += 1,
            Record::Forensics(_) => s.forensics += 1,
            Record::Drop { .. } => s.drops += 1,
            Record::Rejoin { .. } => s.rejoins += 1,
            Record::DelayChange { .. } => s.delay_changes += 1,
            Record::KeyframeIndex(_) | Record::Match(_) => {}
            Record::End { reason } => s.end = Some(reason.clone()),
            Record::Start { .. } => {
                if s.turns > 0 || s.started {
                    return Err(seq("a start state after the first turn or twice".into()));
                }
                s.started = true;
            }
            Record::Trailer {
                final_turn,
                final_hash,
                turns,
            } => {
                if *turns != s.turns {
                    return Err(seq(format!(
                        "trailer counts {turns} turns, the file holds {}",
                        s.turns
                    )));
                }
                s.trailer = Some((*final_turn, *final_hash));
            }
        }
        s.records += 1;
        s.intact_bytes = self.offset;
        self.intact_prev = self.prev;
        Ok(Some(record))
    }
}

fn unreachable_header(offset: u64) -> Result<(), ReplayError> {
    Err(ReplayError::Malformed {
        offset,
        kind: "header",
        reason: "decoded to another record kind".into(),
    })
}

impl<R: Read> Iterator for Reader<R> {
    type Item = Result<Record, ReplayError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.next_inner() {
            Ok(Some(r)) => Some(Ok(r)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                self.summary.ending = match &e {
                    ReplayError::Torn { offset, lost_bytes } => Ending::Torn {
                        offset: *offset,
                        lost_bytes: *lost_bytes,
                    },
                    other => Ending::Corrupt {
                        offset: self.summary.intact_bytes,
                        error: other.to_string(),
                    },
                };
                Some(Err(e))
            }
        }
    }
}
