//! A captured token-mode handshake and its data, replayed through the real
//! `Server` on a frozen virtual clock (it moves only when the test moves
//! it, so the cookie's 10 s window is covered to the microsecond): no
//! second connection is ever built from one cookie, a live connection is
//! not replaced, and no captured datagram is accepted twice.

use super::*;
use crate::token::{ConnectToken, TokenClaims, TokenKey, issue_token};

const UNIX0: u64 = 1_700_000_000;

fn key() -> TokenKey {
    TokenKey::from_bytes([0x5A; 32])
}

fn token_server() -> Server {
    Server::new(TransportConfig::default(), [9; 32]).with_auth(AuthMode::Tokens {
        key: key(),
        unix_at_zero: UNIX0,
    })
}

fn token() -> ConnectToken {
    let claims = TokenClaims::new(
        TransportConfig::default().protocol_id,
        "match-1",
        0,
        UNIX0,
        60,
    );
    issue_token(&key(), &claims, &[addr(SERVER)], &[3; 32]).unwrap()
}

/// What crossed the path, as an observer captured it.
#[derive(Default)]
struct Capture {
    from_client: Vec<Vec<u8>>,
    from_server: Vec<Vec<u8>>,
}

/// Moves datagrams both ways at `now` (no time passes) until neither side
/// has one to send.
fn exchange(server: &mut Server, client: &mut Client, from: SocketAddr, now: Instant) -> Capture {
    let mut cap = Capture::default();
    let mut buf = Vec::new();
    for _ in 0..1000 {
        let mut moved = false;
        while client.poll_transmit(now, &mut buf).is_some() {
            cap.from_client.push(buf.clone());
            server.handle_datagram(now, from, &buf);
            moved = true;
        }
        while let Some(to) = server.poll_transmit(now, &mut buf) {
            if to == from {
                cap.from_server.push(buf.clone());
                client.handle_datagram(now, addr(SERVER), &buf);
            }
            moved = true;
        }
        if !moved {
            break;
        }
    }
    cap
}

fn connected(server: &mut Server) -> usize {
    let mut n = 0;
    while let Some(e) = server.poll_event() {
        if matches!(e, ServerEvent::Connected { .. }) {
            n += 1;
        }
    }
    n
}

fn messages(server: &mut Server) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while let Some(e) = server.poll_event() {
        if let ServerEvent::Message { bytes, .. } = e {
            out.push(bytes);
        }
    }
    out
}

const TOKEN_RESPONSE: u8 = 0x86;

/// The old behaviour this pins: the same `TokenResponse`, re-sent from the
/// client's address while its cookie was valid, built a second connection
/// with the same keys and counters from 0, which repeated the relay's
/// keystream and accepted every captured client datagram again.
#[test]
fn a_captured_handshake_and_its_data_never_rebuild_a_session() {
    let t0 = Instant::ZERO;
    let from = client_addr(0);
    let mut server = token_server();
    let mut client = Client::with_token(t0, addr(SERVER), TransportConfig::default(), &token(), 40);
    let mut cap = exchange(&mut server, &mut client, from, t0);
    assert!(client.is_connected());
    assert_eq!(connected(&mut server), 1);
    client.send(Channel::Reliable, b"join").unwrap();
    let conn = server.connections().next().unwrap();
    server
        .send(conn, Channel::Reliable, b"rejoin secret")
        .unwrap();
    let more = exchange(&mut server, &mut client, from, t0);
    cap.from_client.extend(more.from_client);
    cap.from_server.extend(more.from_server);
    assert_eq!(messages(&mut server), vec![b"join".to_vec()]);
    let response = cap
        .from_client
        .iter()
        .find(|d| d[0] == TOKEN_RESPONSE)
        .expect("the client sent a token response")
        .clone();
    let data: Vec<Vec<u8>> = cap
        .from_client
        .iter()
        .filter(|d| d[0] & 0x80 == 0)
        .cloned()
        .collect();
    assert!(!data.is_empty());

    // The connection is gone (its client closed it); the cookie is still
    // valid until t0 + 10 s, inclusive.
    client.disconnect(t0);
    let _ = exchange(&mut server, &mut client, from, t0);
    assert_eq!(server.connections().count(), 0);
    let last_valid = t0 + TransportConfig::default().cookie_lifetime;
    for at in [t0, last_valid] {
        server.handle_datagram(at, from, &response);
        // Every captured client datagram, again.
        for d in &data {
            server.handle_datagram(at, from, d);
        }
        // At most "not a connection" notices go back: nothing authenticated.
        let mut buf = Vec::new();
        while server.poll_transmit(at, &mut buf).is_some() {
            assert!(buf[0] & 0x80 != 0, "an authenticated reply at {at:?}");
        }
        assert_eq!(server.connections().count(), 0, "at {at:?}");
        assert_eq!(connected(&mut server), 0, "at {at:?}");
        assert!(messages(&mut server).is_empty(), "a Join delivered twice");
    }
    assert_eq!(server.counters().cookie_replayed, 2);
    assert_eq!(server.counters().accepted, 1);
    // One microsecond later the cookie has expired (and is forgotten).
    let expired = last_valid + Duration::from_micros(1);
    server.handle_datagram(expired, from, &response);
    assert_eq!(server.counters().expired_cookie, 1);
    server.handle_timeout(expired);
    assert_eq!(server.admitted_cookies(), 0);
    assert_eq!(server.connections().count(), 0);
}

/// netcode.io's rule: a handshake from an address whose connection was
/// heard within `STILL_HEARD` does not replace it; after that silence it
/// does (a client that restarted on the same address gets back in).
#[test]
fn a_handshake_does_not_replace_a_connection_that_is_still_heard() {
    let t0 = Instant::ZERO;
    let from = client_addr(0);
    let cfg = TransportConfig::default();
    let mut server = token_server();
    let mut first = Client::with_token(t0, addr(SERVER), cfg, &token(), 40);
    let _ = exchange(&mut server, &mut first, from, t0);
    assert!(first.is_connected());
    let conn = server.connections().next().unwrap();
    let _ = connected(&mut server);
    // A second handshake (another salt, the same token and address) while
    // the first connection talks: ignored, the first one stays.
    let mut second = Client::with_token(t0, addr(SERVER), cfg, &token(), 41);
    let _ = exchange(&mut server, &mut second, from, t0);
    assert!(!second.is_connected());
    assert_eq!(server.connections().collect::<Vec<_>>(), vec![conn]);
    assert_eq!(server.counters().handshake_while_heard, 1);
    // Just under STILL_HEARD of silence: still ignored.
    let almost = t0 + STILL_HEARD - Duration::from_micros(1);
    let mut third = Client::with_token(almost, addr(SERVER), cfg, &token(), 42);
    let _ = exchange(&mut server, &mut third, from, almost);
    assert!(!third.is_connected());
    assert_eq!(server.counters().handshake_while_heard, 2);
    // After STILL_HEARD of silence the old connection is presumed gone.
    let later = t0 + STILL_HEARD;
    let mut fourth = Client::with_token(later, addr(SERVER), cfg, &token(), 43);
    let _ = exchange(&mut server, &mut fourth, from, later);
    assert!(fourth.is_connected());
    assert_eq!(server.connections().count(), 1);
    assert_ne!(server.connections().next(), Some(conn));
}
