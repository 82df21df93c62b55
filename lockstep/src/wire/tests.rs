//! Wire codec tests: canonical forms, typed errors, seeded fuzzing and round trips.

use super::*;
use crate::rng::Rng;
use crate::token::SealedToken;

#[test]
fn sequence_comparison_wraps_like_the_article() {
    assert!(sequence_greater_than(1, 0));
    assert!(!sequence_greater_than(0, 1));
    assert!(sequence_greater_than(0, 65535));
    assert!(sequence_greater_than(2, 65534));
    assert!(!sequence_greater_than(65535, 0));
    assert!(sequence_greater_than(32768, 0));
    assert!(!sequence_greater_than(32769, 0));
    assert!(!sequence_greater_than(7, 7));
}

fn data_header(seq: u16, ack: u16, ack_bits: u32) -> Header {
    Header {
        kind: AuthKind::Data,
        seq,
        ack,
        ack_bits,
        ack_delay: 0,
    }
}

#[test]
fn clean_link_header_is_five_bytes() {
    let h = data_header(1000, 999, u32::MAX);
    let mut out = Vec::new();
    encode_header(&h, &mut out);
    assert_eq!(out.len(), 5);
    assert_eq!(header_len(&h), 5);
    assert_eq!(decode_header(&out), Ok((h, 5)));
    let worst = data_header(1000, 20000, 0x1234_5678);
    out.clear();
    encode_header(&worst, &mut out);
    assert_eq!(out.len(), MAX_HEADER_LEN);
    assert_eq!(decode_header(&out), Ok((worst, MAX_HEADER_LEN)));
}

#[test]
fn non_canonical_forms_are_rejected() {
    // Full 2-byte ack although the difference fits one byte.
    let mut b = vec![0x0F, 10, 0, 9, 0, 0];
    assert!(matches!(
        decode_header(&b),
        Err(DecodeError::NonCanonical { .. })
    ));
    // An explicit 0xFF ack-bits byte.
    b = vec![0x10 | 0x0E, 10, 0, 1, 0xFF, 0];
    assert!(matches!(
        decode_header(&b),
        Err(DecodeError::NonCanonical { .. })
    ));
    // Overlong varint length.
    let mut p = vec![0x1F, 10, 0, 1, 0, TAG_RELIABLE, 0, 0, 0x80, 0x00];
    p.extend_from_slice(&[0; TAG_LEN]);
    assert!(matches!(decode(&p), Err(DecodeError::NonCanonical { .. })));
    // Non-zero padding in a ConnectRequest.
    let mut cr = Vec::new();
    Packet::ConnectRequest {
        protocol_id: 1,
        client_salt: 2,
    }
    .encode(&mut cr);
    assert_eq!(cr.len(), CONNECT_REQUEST_LEN);
    assert!(decode(&cr).is_ok());
    cr[500] = 1;
    assert!(matches!(decode(&cr), Err(DecodeError::NonCanonical { .. })));
    // Body on a Disconnect.
    let mut d = vec![0x40 | 0x1F, 10, 0, 1, 0, TAG_PING];
    d.extend_from_slice(&[0; TAG_LEN]);
    assert!(matches!(decode(&d), Err(DecodeError::Trailing { .. })));
}

#[test]
fn typed_errors_for_garbage() {
    assert_eq!(decode(&[]), Err(DecodeError::Empty));
    assert_eq!(
        decode(&[0; MAX_PACKET + 1]),
        Err(DecodeError::TooLong {
            len: MAX_PACKET + 1
        })
    );
    assert_eq!(decode(&[0xFF]), Err(DecodeError::UnknownKind(0xFF)));
    assert_eq!(decode(&[0x60]), Err(DecodeError::UnknownKind(0x60)));
    assert_eq!(decode(&[0x80, 9]), Err(DecodeError::Version { got: 9 }));
    assert!(matches!(
        decode(&[0x80]),
        Err(DecodeError::Truncated { .. })
    ));
    let mut f = vec![0x1F, 10, 0, 1, 0, 0x77];
    f.extend_from_slice(&[0; TAG_LEN]);
    assert_eq!(
        decode(&f),
        Err(DecodeError::UnknownFrame { tag: 0x77, at: 5 })
    );
    let mut g = vec![0x1F, 10, 0, 1, 0, TAG_FRAGMENT, 0, 0, 3, 3, 0];
    g.extend_from_slice(&[0; TAG_LEN]);
    assert!(matches!(decode(&g), Err(DecodeError::BadFragment { .. })));
}

#[test]
fn fuzz_seed_corpus_is_valid_and_canonical() {
    // The committed seed corpus doubles as golden packets pinning the format.
    let corpus: [&[u8]; 10] = [
        include_bytes!("../../fuzz/corpus/decode/connect_request"),
        include_bytes!("../../fuzz/corpus/decode/challenge"),
        include_bytes!("../../fuzz/corpus/decode/challenge_response"),
        include_bytes!("../../fuzz/corpus/decode/denied"),
        include_bytes!("../../fuzz/corpus/decode/data_frames"),
        include_bytes!("../../fuzz/corpus/decode/data_ack_bits"),
        include_bytes!("../../fuzz/corpus/decode/accepted"),
        include_bytes!("../../fuzz/corpus/decode/disconnect"),
        include_bytes!("../../fuzz/corpus/decode/token_request"),
        include_bytes!("../../fuzz/corpus/decode/token_response"),
    ];
    for bytes in corpus {
        let p = decode(bytes).unwrap();
        let mut again = Vec::new();
        p.encode(&mut again);
        assert_eq!(again, bytes);
    }
}

fn sample_token() -> SealedToken {
    SealedToken {
        protocol_id: 5,
        create_unix: 1_700_000_000,
        expire_unix: 1_700_000_060,
        nonce: [0xAB; crate::token::NONCE_LEN],
        sealed: [0xCD; crate::token::SEALED_LEN],
    }
}

#[test]
fn token_packets_have_fixed_sizes_and_reserved_prefixes_are_rejected() {
    let mut b = Vec::new();
    Packet::TokenRequest {
        client_salt: 1,
        token: sample_token(),
    }
    .encode(&mut b);
    assert_eq!(
        b.len(),
        CONNECT_REQUEST_LEN,
        "the token request is the largest packet"
    );
    assert_eq!(b[0], 0x84);
    // Non-zero padding, a missing byte and an extra byte are all refused.
    let mut p = b.clone();
    *p.last_mut().unwrap() = 1;
    assert!(matches!(decode(&p), Err(DecodeError::NonCanonical { .. })));
    assert!(matches!(
        decode(&b[..b.len() - 1]),
        Err(DecodeError::Truncated { .. })
    ));
    b.clear();
    let cookie = Cookie {
        protocol_id: 5,
        client_salt: 1,
        timestamp: 2,
        mac: [3; COOKIE_LEN],
    };
    Packet::TokenResponse {
        cookie,
        token: sample_token(),
    }
    .encode(&mut b);
    assert_eq!(b.len(), TOKEN_RESPONSE_LEN);
    // The other fixed-size handshake packets have the lengths their
    // constants state.
    let mut fixed = Vec::new();
    Packet::Challenge(cookie).encode(&mut fixed);
    assert_eq!(fixed.len(), CHALLENGE_LEN);
    fixed.clear();
    Packet::Denied {
        protocol_id: 5,
        client_salt: 6,
        reason: DenyReason::Full,
    }
    .encode(&mut fixed);
    assert_eq!(fixed.len(), DENIED_LEN);
    let mut long = b.clone();
    long.push(0);
    assert!(matches!(decode(&long), Err(DecodeError::Trailing { .. })));
    for prefix in [0x85u8, 0x87, 0x88, 0xC0] {
        b[0] = prefix;
        assert_eq!(decode(&b), Err(DecodeError::UnknownKind(prefix)));
    }
}

fn sample_packets() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let cookie = Cookie {
        protocol_id: 0xDEAD_BEEF,
        client_salt: 42,
        timestamp: 123_456,
        mac: [7; COOKIE_LEN],
    };
    let payload = [9u8; 300];
    let packets = vec![
        Packet::ConnectRequest {
            protocol_id: 5,
            client_salt: 6,
        },
        Packet::Challenge(cookie),
        Packet::ChallengeResponse(cookie),
        Packet::Denied {
            protocol_id: 5,
            client_salt: 6,
            reason: DenyReason::Full,
        },
        Packet::Denied {
            protocol_id: 5,
            client_salt: 6,
            reason: DenyReason::InvalidToken,
        },
        Packet::TokenRequest {
            client_salt: 8,
            token: sample_token(),
        },
        Packet::TokenResponse {
            cookie,
            token: SealedToken {
                protocol_id: cookie.protocol_id,
                ..sample_token()
            },
        },
        Packet::Authed {
            header: data_header(7, 3, 0xF0F0_FFFF),
            frames: vec![
                Frame::Reliable {
                    id: 1,
                    fragment: None,
                    data: b"hello",
                },
                Frame::Reliable {
                    id: 2,
                    fragment: Some(Fragment { index: 1, count: 3 }),
                    data: &payload,
                },
                Frame::Unreliable { id: 9, data: b"" },
                Frame::Ping,
                Frame::Bulk {
                    msg: 4,
                    total: (BULK_CHUNK + 100) as u32,
                    index: 1,
                    data: &payload[..100],
                },
            ],
            tag: [3; TAG_LEN],
        },
        Packet::Authed {
            header: Header {
                kind: AuthKind::Disconnect,
                ..data_header(60000, 1, 0)
            },
            frames: vec![],
            tag: [1; TAG_LEN],
        },
    ];
    for p in packets {
        let mut b = Vec::new();
        p.encode(&mut b);
        assert_eq!(decode(&b).as_ref(), Ok(&p));
        out.push(b);
    }
    out
}

#[test]
fn seeded_random_bytes_and_mutations_never_panic_and_reencode_exactly() {
    let samples = sample_packets();
    let mut rng = Rng::new(0x5EED);
    let mut ok = 0;
    for i in 0..20_000 {
        let bytes = if i % 2 == 0 {
            let len = rng.below(64) as usize;
            let mut b = vec![0u8; len];
            rng.fill(&mut b);
            b
        } else {
            let mut b = samples[rng.below(samples.len() as u64) as usize].clone();
            for _ in 0..=rng.below(3) {
                match rng.below(3) {
                    0 if !b.is_empty() => {
                        let at = rng.below(b.len() as u64) as usize;
                        b[at] ^= 1 << rng.below(8);
                    }
                    1 => b.truncate(rng.below(b.len() as u64 + 1) as usize),
                    _ => b.push(rng.below(256) as u8),
                }
            }
            b
        };
        if let Ok(p) = decode(&bytes) {
            ok += 1;
            let mut again = Vec::new();
            p.encode(&mut again);
            assert_eq!(again, bytes, "accepted packet must re-encode identically");
        }
    }
    assert!(ok > 100, "mutations should sometimes stay valid: {ok}");
}

// proptest! bodies are not recognised as tests by clippy's allow-unwrap-in-tests.
#[allow(clippy::unwrap_used)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    fn header() -> impl Strategy<Value = Header> {
        (
            0u8..3,
            any::<u16>(),
            any::<u16>(),
            any::<u32>(),
            any::<u8>(),
        )
            .prop_map(|(k, seq, ack, ack_bits, ack_delay)| Header {
                kind: [AuthKind::Data, AuthKind::Accepted, AuthKind::Disconnect][usize::from(k)],
                seq,
                ack,
                ack_bits,
                ack_delay,
            })
    }

    proptest! {
        #[test]
        fn authed_roundtrip(h in header(), chunks in proptest::collection::vec((0u8..5, any::<u16>(), proptest::collection::vec(any::<u8>(), 0..200), 2u8..=255), 0..5), tag in any::<[u8; 16]>()) {
            let frames: Vec<Frame<'_>> = if h.kind == AuthKind::Data {
                chunks.iter().map(|(t, id, data, count)| match t {
                    0 => Frame::Reliable { id: *id, fragment: None, data },
                    1 => Frame::Reliable { id: *id, fragment: Some(Fragment { index: count - 1, count: *count }), data },
                    2 => Frame::Unreliable { id: *id, data },
                    // The last fragment of a message whose tail is `data`.
                    3 if *count > 2 && !data.is_empty() => Frame::Bulk { msg: *id, total: (usize::from(*count) * BULK_CHUNK + data.len()) as u32, index: u16::from(*count), data },
                    _ => Frame::Ping,
                }).collect()
            } else { Vec::new() };
            let p = Packet::Authed { header: h, frames, tag };
            let mut a = Vec::new();
            p.encode(&mut a);
            let d = decode(&a).unwrap();
            prop_assert_eq!(&d, &p);
            let mut b = Vec::new();
            d.encode(&mut b);
            prop_assert_eq!(a, b);
        }

        #[test]
        fn handshake_roundtrip(pid in any::<u64>(), salt in any::<u64>(), ts in any::<u64>(), mac in any::<[u8; 16]>(), which in 0u8..4) {
            let c = Cookie { protocol_id: pid, client_salt: salt, timestamp: ts, mac };
            let p = match which {
                0 => Packet::ConnectRequest { protocol_id: pid, client_salt: salt },
                1 => Packet::Challenge(c),
                2 => Packet::ChallengeResponse(c),
                _ => Packet::Denied { protocol_id: pid, client_salt: salt, reason: DenyReason::WrongProtocol },
            };
            let mut a = Vec::new();
            p.encode(&mut a);
            prop_assert!(a.len() <= MAX_PACKET);
            let d = decode(&a).unwrap();
            prop_assert_eq!(&d, &p);
            let mut b = Vec::new();
            d.encode(&mut b);
            prop_assert_eq!(a, b);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..1300)) {
            if let Ok(p) = decode(&bytes) {
                let mut b = Vec::new();
                p.encode(&mut b);
                prop_assert_eq!(b, bytes);
            }
        }
    }
}

#[test]
fn bulk_fragments_off_their_grid_are_rejected() {
    let encode = |total: u32, index: u16, len: usize| {
        let mut p = Vec::new();
        encode_header(&data_header(7, 3, 0), &mut p);
        let data = vec![0xAB; len];
        encode_frame(
            &Frame::Bulk {
                msg: 1,
                total,
                index,
                data: &data,
            },
            &mut p,
        );
        p.extend_from_slice(&[0; TAG_LEN]);
        p
    };
    let total = (2 * BULK_CHUNK + 10) as u32;
    assert!(decode(&encode(total, 0, BULK_CHUNK)).is_ok());
    assert!(decode(&encode(total, 2, 10)).is_ok());
    assert!(
        decode(&encode(0, 0, 0)).is_ok(),
        "an empty message is one empty fragment"
    );
    for (total, index, len) in [
        (total, 3, 10),     // past the last fragment
        (total, 2, 11),     // longer than the last fragment
        (total, 1, 10),     // shorter than a full fragment
        (0, 1, 0),          // an empty message has one fragment
        (u32::MAX, 0, 100), // huge total, wrong length
    ] {
        assert!(
            matches!(
                decode(&encode(total, index, len)),
                Err(DecodeError::NonCanonical { .. })
            ),
            "{total}/{index}/{len}"
        );
    }
    // A full-size fragment in a worst-case header is exactly the largest packet.
    let mut p = Vec::new();
    encode_header(&data_header(1000, 0, 0x5555_5555), &mut p);
    assert_eq!(p.len(), MAX_HEADER_LEN);
    encode_frame(
        &Frame::Bulk {
            msg: 0,
            total: BULK_CHUNK as u32,
            index: 0,
            data: &[0; BULK_CHUNK],
        },
        &mut p,
    );
    assert_eq!(p.len() + TAG_LEN, MAX_PACKET);
}
