//! Random access into a finished file: [`Reader::keyframe_index`] finds the
//! keyframe index from the file's end (the trailer, then the record before
//! it), checking both records' guards and chained checksums, and
//! [`Reader::jump_to`] continues reading at a listed keyframe. Together they
//! let a seek start at the nearest keyframe without reading the records
//! before it, so its cost does not grow with the match's length.

use crate::error::ReplayError;
use crate::format::{
    self, CHECKSUM_LEN, Checksum, KeyframeEntry, MAX_RECORD_LEN, PREAMBLE_LEN, RECORD_HEAD_LEN,
    Record, kind,
};
use crate::reader::Reader;
use std::io::{Read, Seek, SeekFrom};

/// Bytes a record adds around its payload.
const FRAME: u64 = RECORD_HEAD_LEN + CHECKSUM_LEN as u64;
/// The largest trailer payload: final turn (varint u32, ≤ 5 bytes), hash
/// (32), turn count (varint u32, ≤ 5).
const MAX_TRAILER_PAYLOAD: u64 = 42;
/// First window read back from the trailer while looking for the index;
/// doubled until the index is found or the window reaches the header.
const FIRST_WINDOW: u64 = 4 * 1024;

/// A record located from the end of the file.
struct Found {
    start: u64,
    kind: u8,
    payload: Vec<u8>,
    checksum: Checksum,
}

/// Where in `window` (which ends at file offset `end`) a record of `kind`
/// starts that ends exactly at `end`: its length and guard must match and
/// its length must span the rest of the window. The latest such start wins
/// (the record right before `end` is the one whose frame reaches it).
fn locate(window: &[u8], window_start: u64, end: u64, want: u8) -> Option<Found> {
    let head = RECORD_HEAD_LEN as usize;
    let n = window.len();
    for i in (0..n.checked_sub(FRAME as usize)? + 1).rev() {
        let h = window.get(i..i + head)?;
        let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let guard = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
        if guard != !len || len > MAX_RECORD_LEN || h[8] != want {
            continue;
        }
        let start = window_start + i as u64;
        if start + FRAME + u64::from(len) != end {
            continue;
        }
        let payload = window.get(i + head..i + head + len as usize)?.to_vec();
        let sum = window.get(n - CHECKSUM_LEN..)?;
        let mut checksum = [0u8; CHECKSUM_LEN];
        checksum.copy_from_slice(sum);
        return Some(Found {
            start,
            kind: want,
            payload,
            checksum,
        });
    }
    None
}

fn read_at<R: Read + Seek>(inner: &mut R, at: u64, len: u64) -> Result<Vec<u8>, ReplayError> {
    inner.seek(SeekFrom::Start(at))?;
    let mut buf = Vec::new();
    inner.take(len).read_to_end(&mut buf)?;
    if buf.len() as u64 != len {
        return Err(ReplayError::Torn {
            offset: at,
            lost_bytes: buf.len() as u64,
        });
    }
    Ok(buf)
}

impl<R: Read + Seek> Reader<R> {
    /// The keyframe index of a finished file, read from its end without
    /// reading the records before it. `Ok(None)` when the file has no
    /// trailer (still being written, or cut) or no index before it; the
    /// caller then reads from the start. The reader's position is kept.
    ///
    /// The index and the trailer are checked like every record (length
    /// guard, and the checksum chain from the checksum stored just before
    /// the index), so a damaged tail is an error, never a wrong offset.
    pub fn keyframe_index(&mut self) -> Result<Option<Vec<KeyframeEntry>>, ReplayError> {
        let here = Self::position(self);
        let found = self.find_index();
        self.inner_mut().seek(SeekFrom::Start(here))?;
        let Some((index, trailer)) = found? else {
            return Ok(None);
        };
        // The chain: the checksum stored before the index, then the index,
        // then the trailer.
        let prev = read_at(self.inner_mut(), index.start - CHECKSUM_LEN as u64, 16)?;
        self.inner_mut().seek(SeekFrom::Start(here))?;
        let mut prev_sum = [0u8; CHECKSUM_LEN];
        prev_sum.copy_from_slice(&prev);
        let bad = |offset, what| ReplayError::Checksum { offset, what };
        if format::record_checksum(&prev_sum, index.kind, &index.payload) != index.checksum {
            return Err(bad(index.start, "keyframe index checksum does not match"));
        }
        if format::record_checksum(&index.checksum, trailer.kind, &trailer.payload)
            != trailer.checksum
        {
            return Err(bad(trailer.start, "trailer checksum does not match"));
        }
        match Record::decode_payload(
            kind::KEYFRAME_INDEX,
            &index.payload,
            index.start,
            self.version(),
        )? {
            Record::KeyframeIndex(entries) => {
                // Offsets must point before the index, turns increase: a
                // listed keyframe is then re-checked when it is read.
                let sane = entries.windows(2).all(|w| w[0].turn < w[1].turn)
                    && entries
                        .iter()
                        .all(|e| e.offset >= PREAMBLE_LEN + FRAME && e.offset < index.start);
                if sane {
                    Ok(Some(entries))
                } else {
                    Err(ReplayError::Malformed {
                        offset: index.start,
                        kind: "keyframe_index",
                        reason: "entries out of order or pointing outside the file".into(),
                    })
                }
            }
            _ => Ok(None),
        }
    }

    /// Finds the trailer and the index before it (unchecked).
    fn find_index(&mut self) -> Result<Option<(Found, Found)>, ReplayError> {
        let inner = self.inner_mut();
        let len = inner.seek(SeekFrom::End(0))?;
        let tail = (FRAME + MAX_TRAILER_PAYLOAD).min(len.saturating_sub(PREAMBLE_LEN));
        let bytes = read_at(inner, len - tail, tail)?;
        let Some(trailer) = locate(&bytes, len - tail, len, kind::TRAILER) else {
            return Ok(None);
        };
        let end = trailer.start;
        let mut window = FIRST_WINDOW;
        loop {
            let w = window.min(end.saturating_sub(PREAMBLE_LEN));
            let bytes = read_at(inner, end - w, w)?;
            if let Some(index) = locate(&bytes, end - w, end, kind::KEYFRAME_INDEX) {
                return Ok(Some((index, trailer)));
            }
            if w == end.saturating_sub(PREAMBLE_LEN) || w >= u64::from(MAX_RECORD_LEN) + FRAME {
                return Ok(None);
            }
            window = window.saturating_mul(4);
        }
    }

    /// Continues reading at the record at `offset`, a keyframe listed by
    /// [`Reader::keyframe_index`]: the chain is checked from the checksum
    /// stored just before it. The summary then counts from there.
    pub fn jump_to(&mut self, offset: u64) -> Result<(), ReplayError> {
        if offset < PREAMBLE_LEN + FRAME {
            return Err(ReplayError::Sequence {
                offset,
                reason: "a jump before the first record".into(),
            });
        }
        let prev = read_at(self.inner_mut(), offset - CHECKSUM_LEN as u64, 16)?;
        let mut sum = [0u8; CHECKSUM_LEN];
        sum.copy_from_slice(&prev);
        self.resume(offset, sum);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locate_wants_the_frame_to_end_exactly_at_the_end() {
        // A record of kind 9 with a 3-byte payload, preceded by junk.
        let mut bytes = vec![0xAA; 5];
        bytes.extend_from_slice(&3u32.to_le_bytes());
        bytes.extend_from_slice(&(!3u32).to_le_bytes());
        bytes.push(kind::TRAILER);
        bytes.extend_from_slice(&[1, 2, 3]);
        bytes.extend_from_slice(&[7; CHECKSUM_LEN]);
        let end = 100 + bytes.len() as u64;
        let f = locate(&bytes, 100, end, kind::TRAILER).map(|f| (f.start, f.payload));
        assert_eq!(f, Some((105, vec![1, 2, 3])));
        assert!(locate(&bytes, 100, end + 1, kind::TRAILER).is_none());
        assert!(locate(&bytes, 100, end, kind::KEYFRAME_INDEX).is_none());
    }
}
