//! The versioned wire format of the transport: handshake packets, the compact
//! authenticated packet header (seq / ack / ack bits / ack delay), message
//! frames and the MAC trailer. Decoding is checked and canonical-only: any
//! byte string yields `Ok` or a typed [`DecodeError`], never a panic, and an
//! accepted packet re-encodes to exactly the same bytes.
//!
//! Layout (all integers little-endian):
//!
//! ```text
//! prefix byte, bit 7 = 1: handshake packet, bits 0..=1 = type, bits 2..=6 zero
//!   ConnectRequest    0x80 ver u8 | protocol_id u64 | client_salt u64 | zero padding to 1200
//!   Challenge         0x81 ver u8 | protocol_id u64 | client_salt u64 | timestamp u64 | cookie [16]
//!   ChallengeResponse 0x82 (same body as Challenge)
//!   Denied            0x83 ver u8 | protocol_id u64 | client_salt u64 | reason u8
//!   TokenRequest      0x84 ver u8 | protocol_id u64 | client_salt u64 | sealed token | zero padding to 1200
//!   TokenResponse     0x86 (Challenge body) | sealed token
//!   sealed token = create u64 | expire u64 | nonce [24] | ciphertext+tag [163] (see `crate::token`)
//! prefix byte, bit 7 = 0: authenticated packet
//!   bits 5..=6 kind (0 Data, 1 Accepted, 2 Disconnect), bit 4 = ack sent as one byte `seq - ack`,
//!   bit i (0..=3) = byte i of ack_bits is 0xFF and left out
//!   seq u16 | ack u8 or u16 | ack_bits bytes not left out | ack_delay u8 (ms, 255 = unknown)
//!   frames (Data only) | MAC [16]
//! frames: 0x01 reliable, 0x02 reliable fragment, 0x03 unreliable, 0x04 ping,
//!   0x05 bulk fragment: msg u16 | total u32 | index u16 | len varint | bytes
//!   (chunk `index` of a `total`-byte bulk message cut every [`BULK_CHUNK`] bytes)
//! ```

use crate::token::{SEALED_TOKEN_WIRE_LEN, SealedToken};

mod bulk;
use bulk::read_bulk;
pub(crate) use bulk::{
    BULK_CHUNK, BULK_FRAME_OVERHEAD, MAX_BULK_FRAGMENTS, bulk_fragments, bulk_range,
};

mod deny;
pub use deny::DenyReason;
use thiserror::Error;

/// Wire format version carried by handshake packets and folded into every connection key.
pub const VERSION: u8 = 1;
/// Largest UDP payload the transport ever sends or accepts.
pub const MAX_PACKET: usize = 1200;
/// Length of the truncated keyed-BLAKE3 MAC that ends every authenticated packet.
pub const TAG_LEN: usize = 16;
/// Length of a cookie MAC inside `Challenge` / `ChallengeResponse`.
pub(crate) const COOKIE_LEN: usize = 16;
/// Length of a `ConnectRequest`: padded to the maximum so no reply can amplify it.
pub const CONNECT_REQUEST_LEN: usize = MAX_PACKET;
/// Length of a `Challenge` or `ChallengeResponse`.
#[cfg(test)]
pub(crate) const CHALLENGE_LEN: usize = 1 + 1 + 8 + 8 + 8 + COOKIE_LEN;
/// Length of a `Denied`.
pub(crate) const DENIED_LEN: usize = 1 + 1 + 8 + 8 + 1;
/// Length of a `TokenResponse` (a `ChallengeResponse` plus the sealed token).
#[cfg(test)]
pub(crate) const TOKEN_RESPONSE_LEN: usize = CHALLENGE_LEN + SEALED_TOKEN_WIRE_LEN;
/// Largest authenticated header (prefix, seq, 2-byte ack, 4 ack-bit bytes, ack delay).
pub(crate) const MAX_HEADER_LEN: usize = 1 + 2 + 2 + 4 + 1;
/// Payload bytes of one message fragment; larger messages are split into chunks of this size.
pub(crate) const FRAGMENT_SIZE: usize = 1024;
/// Most fragments one message may be split into (a hard reassembly cap).
pub(crate) const MAX_FRAGMENTS: usize = 255;
/// Largest frame overhead (tag, id, fragment index/count, 2-byte length).
pub(crate) const MAX_FRAME_OVERHEAD: usize = 1 + 2 + 2 + 2;
/// Largest message that travels unfragmented.
pub(crate) const MAX_UNFRAGMENTED: usize = FRAGMENT_SIZE;
/// Ack delay byte value meaning "held too long to measure".
pub(crate) const ACK_DELAY_UNKNOWN: u8 = 255;

/// Why a byte string is not a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// Zero-length datagram.
    #[error("empty datagram")]
    Empty,
    /// The datagram exceeds [`MAX_PACKET`].
    #[error("datagram of {len} bytes exceeds the {MAX_PACKET}-byte limit")]
    TooLong {
        /// Datagram length.
        len: usize,
    },
    /// The datagram ended inside a field.
    #[error("truncated: needed {needed} more bytes at offset {at}")]
    Truncated {
        /// Offset of the field that did not fit.
        at: usize,
        /// Bytes missing.
        needed: usize,
    },
    /// The prefix byte names no packet type.
    #[error("unknown packet prefix {0:#04x}")]
    UnknownKind(u8),
    /// A handshake packet from another wire version.
    #[error("unsupported wire version {got} (this build speaks {VERSION})")]
    Version {
        /// Version found.
        got: u8,
    },
    /// A frame tag this version does not define.
    #[error("unknown frame tag {tag:#04x} at offset {at}")]
    UnknownFrame {
        /// The tag byte.
        tag: u8,
        /// Its offset.
        at: usize,
    },
    /// A fragment header with `index >= count` or `count < 2`.
    #[error("bad fragment {index}/{count} at offset {at}")]
    BadFragment {
        /// Fragment index.
        index: u8,
        /// Fragment count.
        count: u8,
        /// Offset of the frame.
        at: usize,
    },
    /// A field encoded in a form the encoder never produces.
    #[error("non-canonical {what} at offset {at}")]
    NonCanonical {
        /// Which field.
        what: &'static str,
        /// Its offset.
        at: usize,
    },
    /// Bytes after the last field of a fixed-size packet, or a body where none is allowed.
    #[error("unexpected trailing bytes at offset {at}")]
    Trailing {
        /// Offset of the first extra byte.
        at: usize,
    },
}

/// The stateless cookie the server hands out and the client echoes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cookie {
    /// Protocol id of the application.
    pub protocol_id: u64,
    /// Random value chosen by the client for this attempt.
    pub client_salt: u64,
    /// Server clock (µs) when the cookie was minted.
    pub timestamp: u64,
    /// Keyed BLAKE3 of address, time, salt and protocol under the server secret.
    pub mac: [u8; COOKIE_LEN],
}

/// The kind of an authenticated packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthKind {
    /// Ordinary traffic: acks and message frames.
    Data,
    /// The server's confirmation that the handshake completed.
    Accepted,
    /// A clean close, sent several times.
    Disconnect,
}

/// The compact header of an authenticated packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Packet kind.
    pub kind: AuthKind,
    /// Low 16 bits of the sender's 64-bit packet counter.
    pub seq: u16,
    /// Newest sequence received from the peer.
    pub ack: u16,
    /// Bit n set: packet `ack - 1 - n` was received.
    pub ack_bits: u32,
    /// Milliseconds the sender held packet `ack` before this packet acked it (255: unknown).
    pub ack_delay: u8,
}

/// Position of a fragment within a split message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fragment {
    /// Index of this fragment, `< count`.
    pub index: u8,
    /// Number of fragments, `>= 2`.
    pub count: u8,
}

/// One message (or piece of one) inside a Data packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A reliable-ordered message or fragment.
    Reliable {
        /// Message id (consecutive per fragment).
        id: u16,
        /// Set when the message was split.
        fragment: Option<Fragment>,
        /// Payload.
        data: &'a [u8],
    },
    /// An unreliable message; the id lets redundant copies be de-duplicated.
    Unreliable {
        /// Unreliable message id.
        id: u16,
        /// Payload.
        data: &'a [u8],
    },
    /// Asks for an ack (keep-alive); no payload.
    Ping,
    /// One fragment of a bulk message (the bulk path behind turn traffic).
    /// The decoder guarantees `index` names a fragment of a `total`-byte
    /// message and `data` is exactly that fragment's bytes.
    Bulk {
        /// Bulk message id (consecutive per bulk message).
        msg: u16,
        /// Length of the whole message.
        total: u32,
        /// Fragment index: bytes `index * BULK_CHUNK ..` of the message.
        index: u16,
        /// The fragment's bytes.
        data: &'a [u8],
    },
}

const TAG_RELIABLE: u8 = 0x01;
const TAG_FRAGMENT: u8 = 0x02;
const TAG_UNRELIABLE: u8 = 0x03;
const TAG_PING: u8 = 0x04;
const TAG_BULK: u8 = 0x05;

/// A decoded datagram.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Packet<'a> {
    /// Client asks to connect; always [`CONNECT_REQUEST_LEN`] bytes.
    ConnectRequest {
        /// Protocol id of the application.
        protocol_id: u64,
        /// Random value chosen by the client for this attempt.
        client_salt: u64,
    },
    /// Server answers with a stateless cookie.
    Challenge(Cookie),
    /// Client echoes the cookie, proving it owns its address.
    ChallengeResponse(Cookie),
    /// Server refuses.
    Denied {
        /// Protocol id of the request.
        protocol_id: u64,
        /// Salt of the request.
        client_salt: u64,
        /// Why.
        reason: DenyReason,
    },
    /// Client asks to connect with a join token; always [`CONNECT_REQUEST_LEN`] bytes.
    TokenRequest {
        /// Random value chosen by the client for this attempt.
        client_salt: u64,
        /// The token's sealed part (its protocol id is the request's).
        token: SealedToken,
    },
    /// Client echoes the cookie and forwards its token again (the server kept nothing).
    TokenResponse {
        /// The echoed cookie (its protocol id is the token's).
        cookie: Cookie,
        /// The token's sealed part.
        token: SealedToken,
    },
    /// A packet of an established connection.
    Authed {
        /// The compact header.
        header: Header,
        /// Message frames (empty for `Accepted`, `Disconnect` and ack-only packets).
        frames: Vec<Frame<'a>>,
        /// The MAC trailer.
        tag: [u8; TAG_LEN],
    },
}

/// The `a > b` comparison on 16-bit sequence numbers that treats 0 as newer than 65535.
#[must_use]
pub(crate) const fn sequence_greater_than(a: u16, b: u16) -> bool {
    (a > b && a - b <= 32768) || (a < b && b - a > 32768)
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let rest = self.bytes.len() - self.pos;
        if rest < n {
            return Err(DecodeError::Truncated {
                at: self.pos,
                needed: n - rest,
            });
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, DecodeError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let b = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(b);
        Ok(a)
    }
    /// LEB128 length, at most 2 bytes (values < 16384), shortest form only.
    fn varint(&mut self) -> Result<usize, DecodeError> {
        let at = self.pos;
        let b0 = self.u8()?;
        if b0 & 0x80 == 0 {
            return Ok(usize::from(b0));
        }
        let b1 = self.u8()?;
        if b1 & 0x80 != 0 {
            return Err(DecodeError::NonCanonical {
                what: "length (over 2 bytes)",
                at,
            });
        }
        if b1 == 0 {
            return Err(DecodeError::NonCanonical {
                what: "length (overlong)",
                at,
            });
        }
        Ok(usize::from(b0 & 0x7F) | (usize::from(b1) << 7))
    }
    fn done(&self) -> bool {
        self.pos == self.bytes.len()
    }
}

fn put_varint(out: &mut Vec<u8>, v: usize) {
    debug_assert!(v < 16384);
    if v < 128 {
        out.push(v as u8);
    } else {
        out.push((v & 0x7F) as u8 | 0x80);
        out.push((v >> 7) as u8);
    }
}

fn varint_len(v: usize) -> usize {
    if v < 128 { 1 } else { 2 }
}

/// Decodes one datagram. Never panics; rejects anything the encoder would not produce.
pub fn decode(bytes: &[u8]) -> Result<Packet<'_>, DecodeError> {
    if bytes.is_empty() {
        return Err(DecodeError::Empty);
    }
    if bytes.len() > MAX_PACKET {
        return Err(DecodeError::TooLong { len: bytes.len() });
    }
    let prefix = bytes[0];
    if prefix & 0x80 != 0 {
        decode_handshake(prefix, bytes)
    } else {
        decode_authed(prefix, bytes)
    }
}

fn decode_handshake(prefix: u8, bytes: &[u8]) -> Result<Packet<'_>, DecodeError> {
    // Bit 2 marks the token variants of the two client packets (0x84, 0x86).
    if prefix & 0x78 != 0 || matches!(prefix, 0x85 | 0x87) {
        return Err(DecodeError::UnknownKind(prefix));
    }
    let mut r = Reader { bytes, pos: 1 };
    let version = r.u8()?;
    if version != VERSION {
        return Err(DecodeError::Version { got: version });
    }
    let protocol_id = r.u64()?;
    let client_salt = r.u64()?;
    let packet = match prefix & 0x07 {
        4 => {
            let token = read_token(&mut r, protocol_id)?;
            read_padding(&mut r)?;
            Packet::TokenRequest { client_salt, token }
        }
        6 => {
            let timestamp = r.u64()?;
            let mac = r.array::<COOKIE_LEN>()?;
            let token = read_token(&mut r, protocol_id)?;
            let cookie = Cookie {
                protocol_id,
                client_salt,
                timestamp,
                mac,
            };
            Packet::TokenResponse { cookie, token }
        }
        0 => {
            read_padding(&mut r)?;
            Packet::ConnectRequest {
                protocol_id,
                client_salt,
            }
        }
        t @ (1 | 2) => {
            let timestamp = r.u64()?;
            let mac = r.array::<COOKIE_LEN>()?;
            let cookie = Cookie {
                protocol_id,
                client_salt,
                timestamp,
                mac,
            };
            if t == 1 {
                Packet::Challenge(cookie)
            } else {
                Packet::ChallengeResponse(cookie)
            }
        }
        _ => {
            let at = r.pos;
            let reason = DenyReason::from_byte(r.u8()?, at)?;
            Packet::Denied {
                protocol_id,
                client_salt,
                reason,
            }
        }
    };
    if !r.done() {
        return Err(DecodeError::Trailing { at: r.pos });
    }
    Ok(packet)
}

fn read_token(r: &mut Reader<'_>, protocol_id: u64) -> Result<SealedToken, DecodeError> {
    let at = r.pos;
    let body = r.take(SEALED_TOKEN_WIRE_LEN)?;
    SealedToken::decode_body(protocol_id, body).ok_or(DecodeError::Truncated { at, needed: 0 })
}

fn read_padding(r: &mut Reader<'_>) -> Result<(), DecodeError> {
    let pad_at = r.pos;
    let pad = r.take(CONNECT_REQUEST_LEN.saturating_sub(pad_at))?;
    if let Some(i) = pad.iter().position(|&b| b != 0) {
        return Err(DecodeError::NonCanonical {
            what: "padding",
            at: pad_at + i,
        });
    }
    Ok(())
}

/// Decodes only the header of an authenticated packet, returning it and the header length.
pub fn decode_header(bytes: &[u8]) -> Result<(Header, usize), DecodeError> {
    let Some(&prefix) = bytes.first() else {
        return Err(DecodeError::Empty);
    };
    if prefix & 0x80 != 0 {
        return Err(DecodeError::UnknownKind(prefix));
    }
    let kind = match (prefix >> 5) & 0x03 {
        0 => AuthKind::Data,
        1 => AuthKind::Accepted,
        2 => AuthKind::Disconnect,
        _ => return Err(DecodeError::UnknownKind(prefix)),
    };
    let mut r = Reader { bytes, pos: 1 };
    let seq = r.u16()?;
    let ack_at = r.pos;
    let ack = if prefix & 0x10 != 0 {
        seq.wrapping_sub(u16::from(r.u8()?))
    } else {
        let ack = r.u16()?;
        if seq.wrapping_sub(ack) < 256 {
            return Err(DecodeError::NonCanonical {
                what: "ack (fits in one byte)",
                at: ack_at,
            });
        }
        ack
    };
    let mut ack_bits = 0u32;
    for i in 0..4 {
        let byte = if prefix & (1 << i) != 0 {
            0xFF
        } else {
            let at = r.pos;
            let b = r.u8()?;
            if b == 0xFF {
                return Err(DecodeError::NonCanonical {
                    what: "ack bits (all-ones byte sent)",
                    at,
                });
            }
            b
        };
        ack_bits |= u32::from(byte) << (8 * i);
    }
    let ack_delay = r.u8()?;
    Ok((
        Header {
            kind,
            seq,
            ack,
            ack_bits,
            ack_delay,
        },
        r.pos,
    ))
}

fn decode_authed(prefix: u8, bytes: &[u8]) -> Result<Packet<'_>, DecodeError> {
    let _ = prefix;
    let (header, header_len) = decode_header(bytes)?;
    if bytes.len() < header_len + TAG_LEN {
        return Err(DecodeError::Truncated {
            at: header_len,
            needed: header_len + TAG_LEN - bytes.len(),
        });
    }
    let body_end = bytes.len() - TAG_LEN;
    let mut r = Reader {
        bytes: &bytes[..body_end],
        pos: header_len,
    };
    let mut frames = Vec::new();
    if header.kind != AuthKind::Data && !r.done() {
        return Err(DecodeError::Trailing { at: r.pos });
    }
    while !r.done() {
        let at = r.pos;
        let tag = r.u8()?;
        let frame = match tag {
            TAG_RELIABLE => {
                let id = r.u16()?;
                let len = r.varint()?;
                Frame::Reliable {
                    id,
                    fragment: None,
                    data: r.take(len)?,
                }
            }
            TAG_FRAGMENT => {
                let id = r.u16()?;
                let index = r.u8()?;
                let count = r.u8()?;
                if count < 2 || index >= count {
                    return Err(DecodeError::BadFragment { index, count, at });
                }
                let len = r.varint()?;
                Frame::Reliable {
                    id,
                    fragment: Some(Fragment { index, count }),
                    data: r.take(len)?,
                }
            }
            TAG_UNRELIABLE => {
                let id = r.u16()?;
                let len = r.varint()?;
                Frame::Unreliable {
                    id,
                    data: r.take(len)?,
                }
            }
            TAG_PING => Frame::Ping,
            TAG_BULK => read_bulk(&mut r)?,
            _ => return Err(DecodeError::UnknownFrame { tag, at }),
        };
        frames.push(frame);
    }
    let mut tag = [0u8; TAG_LEN];
    tag.copy_from_slice(&bytes[body_end..]);
    Ok(Packet::Authed {
        header,
        frames,
        tag,
    })
}

/// Appends the canonical encoding of `h`.
pub(crate) fn encode_header(h: &Header, out: &mut Vec<u8>) {
    let kind = match h.kind {
        AuthKind::Data => 0u8,
        AuthKind::Accepted => 1,
        AuthKind::Disconnect => 2,
    };
    let diff = h.seq.wrapping_sub(h.ack);
    let mut prefix = kind << 5;
    if diff < 256 {
        prefix |= 0x10;
    }
    let bits = h.ack_bits.to_le_bytes();
    for (i, b) in bits.iter().enumerate() {
        if *b == 0xFF {
            prefix |= 1 << i;
        }
    }
    out.push(prefix);
    out.extend_from_slice(&h.seq.to_le_bytes());
    if diff < 256 {
        out.push(diff as u8);
    } else {
        out.extend_from_slice(&h.ack.to_le_bytes());
    }
    out.extend(bits.iter().copied().filter(|&b| b != 0xFF));
    out.push(h.ack_delay);
}

/// Encoded length of `h`.
#[must_use]
pub fn header_len(h: &Header) -> usize {
    let diff = h.seq.wrapping_sub(h.ack);
    let ack = if diff < 256 { 1 } else { 2 };
    let bits = h
        .ack_bits
        .to_le_bytes()
        .iter()
        .filter(|&&b| b != 0xFF)
        .count();
    1 + 2 + ack + bits + 1
}

/// Appends the encoding of one frame.
pub fn encode_frame(f: &Frame<'_>, out: &mut Vec<u8>) {
    match f {
        Frame::Reliable {
            id,
            fragment: None,
            data,
        } => {
            out.push(TAG_RELIABLE);
            out.extend_from_slice(&id.to_le_bytes());
            put_varint(out, data.len());
            out.extend_from_slice(data);
        }
        Frame::Reliable {
            id,
            fragment: Some(fr),
            data,
        } => {
            out.push(TAG_FRAGMENT);
            out.extend_from_slice(&id.to_le_bytes());
            out.push(fr.index);
            out.push(fr.count);
            put_varint(out, data.len());
            out.extend_from_slice(data);
        }
        Frame::Unreliable { id, data } => {
            out.push(TAG_UNRELIABLE);
            out.extend_from_slice(&id.to_le_bytes());
            put_varint(out, data.len());
            out.extend_from_slice(data);
        }
        Frame::Ping => out.push(TAG_PING),
        Frame::Bulk {
            msg,
            total,
            index,
            data,
        } => {
            out.push(TAG_BULK);
            out.extend_from_slice(&msg.to_le_bytes());
            out.extend_from_slice(&total.to_le_bytes());
            out.extend_from_slice(&index.to_le_bytes());
            put_varint(out, data.len());
            out.extend_from_slice(data);
        }
    }
}

/// Encoded length of one frame.
#[must_use]
pub(crate) fn frame_len(f: &Frame<'_>) -> usize {
    match f {
        Frame::Reliable {
            fragment: None,
            data,
            ..
        }
        | Frame::Unreliable { data, .. } => 3 + varint_len(data.len()) + data.len(),
        Frame::Reliable {
            fragment: Some(_),
            data,
            ..
        } => 5 + varint_len(data.len()) + data.len(),
        Frame::Ping => 1,
        Frame::Bulk { data, .. } => 9 + varint_len(data.len()) + data.len(),
    }
}

fn encode_hs_head(prefix: u8, protocol_id: u64, client_salt: u64, out: &mut Vec<u8>) {
    out.push(prefix);
    out.push(VERSION);
    out.extend_from_slice(&protocol_id.to_le_bytes());
    out.extend_from_slice(&client_salt.to_le_bytes());
}

impl Packet<'_> {
    /// Appends the canonical encoding (for `Authed`, the stored tag is written as is).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::ConnectRequest {
                protocol_id,
                client_salt,
            } => {
                let start = out.len();
                encode_hs_head(0x80, *protocol_id, *client_salt, out);
                out.resize(start + CONNECT_REQUEST_LEN, 0);
            }
            Self::Challenge(c) | Self::ChallengeResponse(c) => {
                let prefix = if matches!(self, Self::Challenge(_)) {
                    0x81
                } else {
                    0x82
                };
                encode_hs_head(prefix, c.protocol_id, c.client_salt, out);
                out.extend_from_slice(&c.timestamp.to_le_bytes());
                out.extend_from_slice(&c.mac);
            }
            Self::Denied {
                protocol_id,
                client_salt,
                reason,
            } => {
                encode_hs_head(0x83, *protocol_id, *client_salt, out);
                out.push(reason.to_byte());
            }
            Self::TokenRequest { client_salt, token } => {
                let start = out.len();
                encode_hs_head(0x84, token.protocol_id, *client_salt, out);
                token.encode_body(out);
                out.resize(start + CONNECT_REQUEST_LEN, 0);
            }
            Self::TokenResponse { cookie, token } => {
                encode_hs_head(0x86, cookie.protocol_id, cookie.client_salt, out);
                out.extend_from_slice(&cookie.timestamp.to_le_bytes());
                out.extend_from_slice(&cookie.mac);
                token.encode_body(out);
            }
            Self::Authed {
                header,
                frames,
                tag,
            } => {
                encode_header(header, out);
                for f in frames {
                    encode_frame(f, out);
                }
                out.extend_from_slice(tag);
            }
        }
    }
}

#[cfg(test)]
mod tests;
