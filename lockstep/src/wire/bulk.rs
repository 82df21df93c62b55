//! The bulk fragment grid: a bulk message of `total` bytes is cut every
//! [`BULK_CHUNK`] bytes, and a bulk frame is valid only on that grid.

use super::{DecodeError, Frame, MAX_HEADER_LEN, MAX_PACKET, Reader, TAG_LEN};

/// Payload bytes of one bulk fragment (the last one of a message may be
/// shorter): a bulk-only packet with a worst-case header is exactly
/// [`MAX_PACKET`] bytes.
pub(crate) const BULK_CHUNK: usize = MAX_PACKET - MAX_HEADER_LEN - TAG_LEN - BULK_FRAME_OVERHEAD;
/// Bulk frame overhead: tag, message id, total length, index, 2-byte length.
pub(crate) const BULK_FRAME_OVERHEAD: usize = 1 + 2 + 4 + 2 + 2;
/// Most fragments one bulk message may have (the index is 16 bits).
pub(crate) const MAX_BULK_FRAGMENTS: usize = 1 << 16;

/// Number of fragments of a `total`-byte bulk message (an empty one is one empty fragment).
#[must_use]
pub(crate) const fn bulk_fragments(total: usize) -> usize {
    if total == 0 {
        1
    } else {
        total.div_ceil(BULK_CHUNK)
    }
}

/// Byte range of fragment `index` in a `total`-byte bulk message, if it exists.
#[must_use]
pub(crate) fn bulk_range(total: usize, index: usize) -> Option<std::ops::Range<usize>> {
    if index >= bulk_fragments(total) {
        return None;
    }
    let start = index * BULK_CHUNK;
    Some(start..(start + BULK_CHUNK).min(total))
}

/// Reads the body of a bulk frame (after its tag), checking it lies on the grid.
pub(super) fn read_bulk<'a>(r: &mut Reader<'a>) -> Result<Frame<'a>, DecodeError> {
    let msg = r.u16()?;
    let t = r.take(4)?;
    let total = u32::from_le_bytes([t[0], t[1], t[2], t[3]]);
    let index = r.u16()?;
    let len_at = r.pos;
    let len = r.varint()?;
    // The fragment grid is fixed by `total`: a bad index or a length that is
    // not that fragment's length is no frame.
    match bulk_range(total as usize, usize::from(index)) {
        Some(range) if range.len() == len => {}
        _ => {
            return Err(DecodeError::NonCanonical {
                what: "bulk fragment (index or length off the grid)",
                at: len_at,
            });
        }
    }
    Ok(Frame::Bulk {
        msg,
        total,
        index,
        data: r.take(len)?,
    })
}
