//! `seal` never sends a token-mode payload in the clear.

use super::*;
use crate::transport::auth::ConnKeys;

const SECRET: &[u8] = b"a rejoin secret that must never cross in the clear";

fn token_conn() -> Connection {
    let keys = ConnKeys {
        c2s: [1; 32],
        s2c: [2; 32],
    };
    Connection::new(
        TransportConfig::default(),
        Role::Server,
        keys,
        true,
        Instant::ZERO,
    )
}

/// A packet whose own header does not decode (kind 3 is not a kind) is
/// never sent: before, the payload went out in the clear under a valid
/// MAC. Now nothing is sent and the connection closes.
#[test]
fn a_packet_whose_header_does_not_decode_is_not_sent_and_closes_the_connection() {
    let mut conn = token_conn();
    let mut buf = vec![0x60, 0, 0, 0, 0xFF];
    buf.extend_from_slice(SECRET);
    assert!(wire::decode_header(&buf).is_err());
    assert!(!conn.seal(Instant::ZERO, &mut buf, true));
    assert!(!buf.windows(SECRET.len()).any(|w| w == SECRET));
    assert!(buf.is_empty());
    assert_eq!(
        conn.poll_event(),
        Some(ConnEvent::Closed(DisconnectReason::Internal))
    );
    assert!(!conn.poll_transmit(Instant::ZERO, &mut buf));
    assert_eq!(conn.packets_sent, 0);
}

/// `encrypt_payload` encrypts after a good header and leaves it be;
/// with a bad header it refuses and touches nothing.
#[test]
fn encrypt_payload_refuses_a_header_it_cannot_read() {
    let cipher = PayloadCipher::new(&[3; 32]);
    let h = Header {
        kind: AuthKind::Data,
        seq: 7,
        ack: 0,
        ack_bits: 0,
        ack_delay: wire::ACK_DELAY_UNKNOWN,
    };
    let mut good = Vec::new();
    wire::encode_header(&h, &mut good);
    let header_len = good.len();
    good.extend_from_slice(SECRET);
    assert_eq!(encrypt_payload(&cipher, 7, &mut good), Ok(()));
    assert_eq!(wire::decode_header(&good).map(|(_, n)| n), Ok(header_len));
    assert!(!good.windows(SECRET.len()).any(|w| w == SECRET));
    let mut bad = vec![0x60];
    bad.extend_from_slice(SECRET);
    let before = bad.clone();
    assert_eq!(encrypt_payload(&cipher, 7, &mut bad), Err(Unsealable));
    assert_eq!(bad, before);
}
