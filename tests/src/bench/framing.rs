//! Length-prefixed framing of protocol messages over a TCP byte stream (the
//! TCP baseline carries exactly the messages our transport carries): a
//! little-endian `u32` length, then the message bytes.

/// Largest message a frame may carry; a larger length means a broken stream.
pub const MAX_FRAME: usize = 1 << 20;

/// Appends one frame holding `msg` to `out`.
pub fn encode_frame(msg: &[u8], out: &mut Vec<u8>) {
    // Messages are bounded far below 4 GiB by MAX_FRAME on the reading side.
    out.extend_from_slice(&(msg.len() as u32).to_le_bytes());
    out.extend_from_slice(msg);
}

/// A stream that announced a frame above [`MAX_FRAME`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("frame of {0} bytes exceeds the {MAX_FRAME}-byte limit")]
pub struct FrameTooLarge(pub usize);

/// Reassembles frames from stream chunks of any size.
#[derive(Debug, Default)]
pub struct FrameDecoder {
    buf: Vec<u8>,
}

impl FrameDecoder {
    /// An empty decoder.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete message, `Ok(None)` if more bytes are needed.
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, FrameTooLarge> {
        let Some(head) = self.buf.get(..4) else {
            return Ok(None);
        };
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
        if len > MAX_FRAME {
            return Err(FrameTooLarge(len));
        }
        if self.buf.len() < 4 + len {
            return Ok(None);
        }
        let msg = self.buf[4..4 + len].to_vec();
        self.buf.drain(..4 + len);
        Ok(Some(msg))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_survive_any_chunking() {
        let msgs: Vec<Vec<u8>> = (0..20u8).map(|i| vec![i; usize::from(i) * 7]).collect();
        let mut stream = Vec::new();
        for m in &msgs {
            encode_frame(m, &mut stream);
        }
        for chunk in [1, 2, 3, 5, 64, stream.len()] {
            let mut d = FrameDecoder::new();
            let mut got = Vec::new();
            for piece in stream.chunks(chunk) {
                d.push(piece);
                while let Some(m) = d.next_frame().unwrap() {
                    got.push(m);
                }
            }
            assert_eq!(got, msgs, "chunk size {chunk}");
        }
    }

    #[test]
    fn oversized_length_is_an_error_not_an_allocation() {
        let mut d = FrameDecoder::new();
        d.push(&u32::MAX.to_le_bytes());
        assert_eq!(d.next_frame(), Err(FrameTooLarge(u32::MAX as usize)));
        let mut d = FrameDecoder::new();
        d.push(&[3, 0, 0]);
        assert_eq!(d.next_frame(), Ok(None));
        d.push(&[0, 9, 9]);
        assert_eq!(d.next_frame(), Ok(None));
        d.push(&[9]);
        assert_eq!(d.next_frame(), Ok(Some(vec![9, 9, 9])));
    }
}
