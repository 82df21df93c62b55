//! The WebSocket protocol (RFC 6455) as far as a live view needs it, sans-IO:
//! the handshake's accept key, server frames (unmasked) and client frames
//! (masked, checked, bounded). Fragmented messages are refused: a browser
//! sends each small message as one frame.

use std::collections::VecDeque;

/// The GUID every accept key is derived with (RFC 6455, section 1.3).
const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// Continuation frame (a fragment: refused).
pub(crate) const OP_CONTINUATION: u8 = 0x0;
/// A text message.
pub(crate) const OP_TEXT: u8 = 0x1;
/// A binary message.
pub(crate) const OP_BINARY: u8 = 0x2;
/// The closing handshake.
pub(crate) const OP_CLOSE: u8 = 0x8;
/// Ping (answered with a pong carrying the same payload).
pub(crate) const OP_PING: u8 = 0x9;
/// Pong.
pub(crate) const OP_PONG: u8 = 0xA;

/// The `Sec-WebSocket-Accept` value for a client's `Sec-WebSocket-Key`.
pub(crate) fn accept_key(key: &str) -> String {
    let mut h = sha1_smol::Sha1::new();
    h.update(key.trim().as_bytes());
    h.update(GUID.as_bytes());
    base64(&h.digest().bytes())
}

/// Standard base64 with padding (what the accept key is written in).
fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ABC[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Appends one unmasked frame (a server's) with FIN set.
pub(crate) fn encode_frame(opcode: u8, payload: &[u8], out: &mut Vec<u8>) {
    out.push(0x80 | (opcode & 0x0f));
    let len = payload.len();
    if len < 126 {
        out.push(len as u8);
    } else if let Ok(short) = u16::try_from(len) {
        out.push(126);
        out.extend_from_slice(&short.to_be_bytes());
    } else {
        out.push(127);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    }
    out.extend_from_slice(payload);
}

/// One frame from the browser, unmasked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Frame {
    /// The opcode (`OP_*`).
    pub(crate) opcode: u8,
    /// The payload, unmasked.
    pub(crate) payload: Vec<u8>,
}

/// Why a client's frame is refused; each closes the connection with its code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FrameError {
    /// Not masked, reserved bits set, an unknown opcode or a fragment (1002).
    Protocol,
    /// Longer than the cap (1009).
    TooBig,
}

impl FrameError {
    /// The close code that says why.
    pub(crate) const fn close_code(self) -> u16 {
        match self {
            Self::Protocol => 1002,
            Self::TooBig => 1009,
        }
    }
}

/// Decodes the first frame of `buf`: `Ok(None)` when it is not all there
/// yet, else the frame and the bytes it took. A payload over `max` bytes is
/// refused from its header, before it is read.
pub(crate) fn decode_frame(buf: &[u8], max: usize) -> Result<Option<(Frame, usize)>, FrameError> {
    let (Some(&b0), Some(&b1)) = (buf.first(), buf.get(1)) else {
        return Ok(None);
    };
    let fin = b0 & 0x80 != 0;
    let opcode = b0 & 0x0f;
    if b0 & 0x70 != 0 || b1 & 0x80 == 0 || !fin || opcode == OP_CONTINUATION {
        return Err(FrameError::Protocol);
    }
    if !matches!(opcode, OP_TEXT | OP_BINARY | OP_CLOSE | OP_PING | OP_PONG) {
        return Err(FrameError::Protocol);
    }
    let (len, mut at) = match b1 & 0x7f {
        126 => match buf.get(2..4) {
            Some(b) => (u64::from(u16::from_be_bytes([b[0], b[1]])), 4),
            None => return Ok(None),
        },
        127 => match buf.get(2..10) {
            Some(b) => {
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                (u64::from_be_bytes(a), 10)
            }
            None => return Ok(None),
        },
        n => (u64::from(n), 2),
    };
    // Control frames carry at most 125 bytes (RFC 6455, 5.5).
    if opcode >= OP_CLOSE && len > 125 {
        return Err(FrameError::Protocol);
    }
    let len = usize::try_from(len).map_err(|_| FrameError::TooBig)?;
    if len > max {
        return Err(FrameError::TooBig);
    }
    let Some(mask) = buf.get(at..at + 4) else {
        return Ok(None);
    };
    let mask = [mask[0], mask[1], mask[2], mask[3]];
    at += 4;
    let Some(data) = buf.get(at..at + len) else {
        return Ok(None);
    };
    let payload = data
        .iter()
        .enumerate()
        .map(|(i, b)| b ^ mask[i % 4])
        .collect();
    Ok(Some((Frame { opcode, payload }, at + len)))
}

/// Bytes waiting to go to one browser, bounded: a browser that does not
/// read fast enough overflows it and is dropped, so it never holds memory
/// or the match back.
#[derive(Debug)]
pub(crate) struct SendQueue {
    bytes: VecDeque<u8>,
    max: usize,
}

/// The queue would go over its bound: drop the browser.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Overflow;

impl SendQueue {
    /// An empty queue holding at most `max` bytes.
    pub(crate) fn new(max: usize) -> Self {
        Self {
            bytes: VecDeque::new(),
            max,
        }
    }

    /// Queues one frame of `opcode` with `payload`, or refuses it whole.
    pub(crate) fn push(&mut self, opcode: u8, payload: &[u8]) -> Result<(), Overflow> {
        let mut frame = Vec::with_capacity(payload.len() + 10);
        encode_frame(opcode, payload, &mut frame);
        if self.bytes.len() + frame.len() > self.max {
            return Err(Overflow);
        }
        self.bytes.extend(frame);
        Ok(())
    }

    /// Bytes queued.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether everything was written.
    pub(crate) fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The bytes to write next (the front of the queue).
    pub(crate) fn front(&self) -> &[u8] {
        self.bytes.as_slices().0
    }

    /// `n` bytes of the front were written.
    pub(crate) fn consume(&mut self, n: usize) {
        self.bytes.drain(..n.min(self.bytes.len()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A masked client frame, as a browser sends it.
    fn client_frame(opcode: u8, payload: &[u8], mask: [u8; 4]) -> Vec<u8> {
        let mut out = vec![0x80 | opcode];
        if payload.len() < 126 {
            out.push(0x80 | payload.len() as u8);
        } else if payload.len() <= 0xffff {
            out.push(0x80 | 126);
            out.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        } else {
            out.push(0x80 | 127);
            out.extend_from_slice(&(payload.len() as u64).to_be_bytes());
        }
        out.extend_from_slice(&mask);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        out
    }

    #[test]
    fn the_accept_key_is_rfc_6455s_example() {
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn server_frames_carry_each_length_form_unmasked() {
        for len in [0usize, 5, 125, 126, 65_535, 65_536, 200_000] {
            let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut out = Vec::new();
            encode_frame(OP_BINARY, &payload, &mut out);
            assert_eq!(out[0], 0x82, "FIN and binary");
            assert_eq!(out[1] & 0x80, 0, "a server never masks");
            let head = match len {
                0..=125 => 2,
                126..=65_535 => 4,
                _ => 10,
            };
            assert_eq!(out.len(), head + len, "length {len}");
            assert_eq!(&out[head..], &payload[..]);
        }
    }

    #[test]
    fn client_frames_decode_whole_or_wait_for_the_rest() {
        let payload: Vec<u8> = (0..300).map(|i| (i * 7) as u8).collect();
        let bytes = client_frame(OP_BINARY, &payload, [1, 2, 3, 4]);
        for cut in 0..bytes.len() {
            assert_eq!(decode_frame(&bytes[..cut], 1024), Ok(None), "cut at {cut}");
        }
        let mut two = bytes.clone();
        two.extend(client_frame(OP_PING, b"hi", [9, 9, 9, 9]));
        let (f, used) = decode_frame(&two, 1024).unwrap().unwrap();
        assert_eq!((f.opcode, f.payload), (OP_BINARY, payload));
        assert_eq!(used, bytes.len());
        let (f, _) = decode_frame(&two[used..], 1024).unwrap().unwrap();
        assert_eq!((f.opcode, f.payload.as_slice()), (OP_PING, &b"hi"[..]));
    }

    #[test]
    fn bad_client_frames_are_refused_with_their_close_code() {
        // Unmasked.
        assert_eq!(
            decode_frame(&[0x82, 0x01, 0xff], 16),
            Err(FrameError::Protocol)
        );
        // A fragment, and a continuation.
        let mut frag = client_frame(OP_BINARY, b"ab", [0; 4]);
        frag[0] &= 0x7f;
        assert_eq!(decode_frame(&frag, 16), Err(FrameError::Protocol));
        assert_eq!(
            decode_frame(&client_frame(OP_CONTINUATION, b"ab", [0; 4]), 16),
            Err(FrameError::Protocol)
        );
        // Reserved bits, an unknown opcode, a long control frame.
        let mut rsv = client_frame(OP_BINARY, b"ab", [0; 4]);
        rsv[0] |= 0x40;
        assert_eq!(decode_frame(&rsv, 16), Err(FrameError::Protocol));
        assert_eq!(
            decode_frame(&client_frame(0x3, b"ab", [0; 4]), 16),
            Err(FrameError::Protocol)
        );
        assert_eq!(
            decode_frame(&client_frame(OP_PING, &[0; 126], [0; 4]), 1024),
            Err(FrameError::Protocol)
        );
        // Over the cap: refused from the header alone, before the payload is here.
        let big = client_frame(OP_BINARY, &[0; 70_000], [0; 4]);
        assert_eq!(decode_frame(&big[..10], 65_536), Err(FrameError::TooBig));
        assert_eq!(FrameError::TooBig.close_code(), 1009);
        assert_eq!(FrameError::Protocol.close_code(), 1002);
    }

    #[test]
    fn the_send_queue_refuses_a_frame_that_would_go_over_its_bound() {
        let mut q = SendQueue::new(100);
        assert!(q.push(OP_BINARY, &[0; 50]).is_ok());
        assert_eq!(q.len(), 52);
        assert_eq!(q.push(OP_BINARY, &[0; 50]), Err(Overflow), "52 + 52 > 100");
        assert_eq!(q.len(), 52, "a refused frame leaves nothing behind");
        q.consume(40);
        assert_eq!(q.front().len(), 12);
        assert!(q.push(OP_BINARY, &[0; 50]).is_ok());
        q.consume(1000);
        assert!(q.is_empty());
    }
}
