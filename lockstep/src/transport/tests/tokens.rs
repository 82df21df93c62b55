//! Join-token handshakes: valid tokens connect with secret keys; expired,
//! forged, reused, wrong-protocol and missing tokens are refused, counted and
//! allocate nothing; a connect flood from thousands of spoofed addresses is
//! never amplified and does not disturb an established connection.

use super::*;
use crate::rng::Rng;
use crate::token::{ConnectToken, Refusal, TokenClaims, TokenKey, issue_token};
use crate::transport::auth::{conn_keys, packet_mac, token_conn_keys};
use std::collections::BTreeMap;

/// Unix time at the server's `Instant::ZERO`.
const UNIX0: u64 = 1_700_000_000;

fn key() -> TokenKey {
    TokenKey::from_bytes([0xA5; 32])
}

fn cfg() -> TransportConfig {
    TransportConfig::default()
}

fn token_server() -> Server {
    Server::new(cfg(), [7; 32]).with_auth(AuthMode::Tokens {
        key: key(),
        unix_at_zero: UNIX0,
    })
}

fn token_for(slot: u8, entropy: u8, create: u64, valid_for: u64) -> ConnectToken {
    let claims = TokenClaims::new(cfg().protocol_id, "match-1", slot, create, valid_for);
    issue_token(&key(), &claims, &[addr(SERVER)], &[entropy; 32]).unwrap()
}

fn token(slot: u8) -> ConnectToken {
    token_for(slot, slot, UNIX0, 60)
}

/// A server and a client for it: with `tokens`, a token server and a
/// client holding `t`; otherwise an open-mode pair (`t` unused).
fn server_and_client(tokens: bool, t: &ConnectToken, seed: u64) -> (Server, Client) {
    if tokens {
        let c = Client::with_token(Instant::ZERO, addr(SERVER), cfg(), t, seed);
        (token_server(), c)
    } else {
        let c = Client::new(Instant::ZERO, addr(SERVER), cfg(), seed);
        (Server::new(cfg(), [7; 32]), c)
    }
}

fn request(t: &ConnectToken, salt: u64) -> Vec<u8> {
    let mut b = Vec::new();
    wire::Packet::TokenRequest {
        client_salt: salt,
        token: t.private,
    }
    .encode(&mut b);
    b
}

fn drain(server: &mut Server, now: Instant) -> Vec<(SocketAddr, Vec<u8>)> {
    let mut out = Vec::new();
    let mut buf = Vec::new();
    while let Some(to) = server.poll_transmit(now, &mut buf) {
        out.push((to, buf.clone()));
    }
    out
}

/// Sends `t`'s request from `from`; returns the single reply.
fn ask(server: &mut Server, now: Instant, from: SocketAddr, t: &ConnectToken) -> Vec<u8> {
    let req = request(t, 77);
    server.handle_datagram(now, from, &req);
    let replies = drain(server, now);
    assert_eq!(replies.len(), 1, "one reply per request");
    assert_eq!(replies[0].0, from);
    assert!(replies[0].1.len() < req.len());
    replies[0].1.clone()
}

fn denied(reply: &[u8]) -> Option<wire::DenyReason> {
    match wire::decode(reply) {
        Ok(wire::Packet::Denied { reason, .. }) => Some(reason),
        _ => None,
    }
}

/// Request then response from `from`; returns the server's reply to the response, if any.
fn handshake(
    server: &mut Server,
    now: Instant,
    from: SocketAddr,
    t: &ConnectToken,
) -> Option<Vec<u8>> {
    let reply = ask(server, now, from, t);
    let Ok(wire::Packet::Challenge(cookie)) = wire::decode(&reply) else {
        panic!("challenge expected, got {reply:?}");
    };
    let mut resp = Vec::new();
    wire::Packet::TokenResponse {
        cookie,
        token: t.private,
    }
    .encode(&mut resp);
    assert_eq!(resp.len(), wire::TOKEN_RESPONSE_LEN);
    server.handle_datagram(now, from, &resp);
    let replies = drain(server, now);
    assert!(replies.iter().all(|(_, b)| b.len() <= resp.len()));
    replies.into_iter().next().map(|(_, b)| b)
}

fn assert_nothing_for(server: &Server, conns: usize, tracked: usize) {
    assert_eq!(server.connections().count(), conns, "connections");
    assert_eq!(server.tracked_tokens(), tracked, "remembered token ids");
}

#[test]
fn valid_tokens_connect_exchange_messages_and_expose_claims() {
    let link = LinkConfig::with_latency(Duration::from_millis(15));
    let tokens = [token(0), token(1)];
    let clients = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| Client::with_token(Instant::ZERO, addr(SERVER), cfg(), t, 40 + i as u64))
        .collect();
    let mut h = Harness::from_parts(link, 41, token_server(), clients);
    h.connect();
    for (i, t) in tokens.iter().enumerate() {
        let conn = h.conn_of(i);
        let claims = h.server.claims(conn).expect("token claims").clone();
        assert_eq!(claims, t.private.open(&key()).unwrap().0);
        assert_eq!(claims.admits("match-1", i as u8), Ok(()));
        h.clients[i]
            .send(Channel::Reliable, &[b'c', i as u8])
            .unwrap();
        h.server
            .send(conn, Channel::Reliable, &[b's', i as u8])
            .unwrap();
    }
    assert_eq!(h.server.tracked_tokens(), 2);
    let end = h.now + Duration::from_secs(1);
    h.run_until(end, |_| {});
    for i in 0..2 {
        assert_eq!(h.client_messages(i), vec![vec![b's', i as u8]]);
        assert_eq!(h.server_messages(h.conn_of(i)), vec![vec![b'c', i as u8]]);
    }
    assert_eq!(h.server.counters().accepted, 2);
    // The first request was the padded token request: the largest packet.
    let first = h
        .sizes
        .iter()
        .find(|(f, _, _)| *f == client_addr(0))
        .unwrap();
    assert_eq!(first.2, wire::CONNECT_REQUEST_LEN);
    assert!(h.sizes.iter().all(|s| s.2 <= wire::CONNECT_REQUEST_LEN));
}

#[test]
fn token_keys_are_secret_from_an_observer_of_the_handshake() {
    let mut server = token_server();
    let t = token(0);
    let from = client_addr(0);
    let challenge = ask(&mut server, Instant::ZERO, from, &t);
    let Ok(wire::Packet::Challenge(cookie)) = wire::decode(&challenge) else {
        panic!("challenge expected")
    };
    let mut resp = Vec::new();
    wire::Packet::TokenResponse {
        cookie,
        token: t.private,
    }
    .encode(&mut resp);
    server.handle_datagram(Instant::ZERO, from, &resp);
    let accepted = drain(&mut server, Instant::ZERO).remove(0).1;
    let (body, tag) = accepted.split_at(accepted.len() - wire::TAG_LEN);
    let (header, _) = wire::decode_header(&accepted).unwrap();
    assert_eq!(header.kind, wire::AuthKind::Accepted);
    let counter = u64::from(header.seq);
    // Only the token holder's keys verify the server's packet; the keys open
    // mode would derive from the cookie an observer saw do not.
    assert_eq!(
        packet_mac(&token_conn_keys(&t.keys, &cookie).s2c, counter, body),
        tag
    );
    assert_ne!(packet_mac(&conn_keys(&cookie).s2c, counter, body), tag);
    assert_ne!(packet_mac(&t.keys.s2c, counter, body), tag);
}

/// Token mode encrypts every payload (the keys are secret): an observer on
/// the path never sees a message's bytes, while both ends get them. Open
/// mode (no secret to encrypt with) leaves them readable, which is what
/// shows the observer would have seen them.
#[test]
fn payloads_are_encrypted_in_token_mode_and_in_the_clear_in_open_mode() {
    const SECRET: &[u8] = b"rejoin secret 0123456789abcdef and a command";
    for tokens in [true, false] {
        let link = LinkConfig::with_latency(Duration::from_millis(15));
        let t = token(0);
        let (server, client) = server_and_client(tokens, &t, 40);
        let mut h = Harness::from_parts(link, 43, server, vec![client]);
        h.tap = Some(Vec::new());
        h.connect();
        let conn = h.conn_of(0);
        h.clients[0].send(Channel::Reliable, SECRET).unwrap();
        h.server.send(conn, Channel::Reliable, SECRET).unwrap();
        let end = h.now + Duration::from_secs(1);
        h.run_until(end, |_| {});
        assert_eq!(h.client_messages(0), vec![SECRET.to_vec()]);
        assert_eq!(h.server_messages(conn), vec![SECRET.to_vec()]);
        let tap = h.tap.take().unwrap();
        let seen = tap
            .iter()
            .filter(|d| d.windows(SECRET.len()).any(|w| w == SECRET))
            .count();
        if tokens {
            assert_eq!(seen, 0, "token mode leaked a payload in the clear");
        } else {
            assert!(seen >= 2, "open mode: the tap saw {seen} copies");
        }
    }
}

/// The payload cipher's nonce is the packet counter, which never repeats:
/// resends put the same frames in new packets, and both directions carry
/// the same bytes. Under 30 % loss (so every message is resent), in token
/// mode no two packets on the wire carry the same encrypted payload, while
/// in open mode, for the same traffic, equal payloads do repeat: a
/// keystream used twice would show up exactly so (equal frames, equal
/// ciphertext), so the check can fail.
#[test]
fn no_keystream_is_used_twice_across_resends_and_directions() {
    const MSG: &[u8] = b"the same command, resent until acked";
    for tokens in [true, false] {
        let mut link = LinkConfig::with_latency(Duration::from_millis(20));
        link.loss = 0.3;
        let t = token(0);
        let (server, client) = server_and_client(tokens, &t, 40);
        let mut h = Harness::from_parts(link, 47, server, vec![client]);
        h.connect();
        h.tap = Some(Vec::new());
        let conn = h.conn_of(0);
        for _ in 0..50 {
            h.clients[0].send(Channel::Reliable, MSG).unwrap();
            h.server.send(conn, Channel::Reliable, MSG).unwrap();
            let end = h.now + Duration::from_millis(200);
            h.run_until(end, |_| {});
        }
        assert_eq!(h.server_messages(conn).len(), 50);
        assert_eq!(h.client_messages(0).len(), 50);
        let mut payloads = std::collections::HashMap::<Vec<u8>, usize>::new();
        for d in h.tap.take().unwrap() {
            let Ok((_, header_len)) = wire::decode_header(&d) else {
                continue;
            };
            let payload = &d[header_len..d.len() - crate::wire::TAG_LEN];
            if payload.len() >= MSG.len() {
                *payloads.entry(payload.to_vec()).or_default() += 1;
            }
        }
        let repeated = payloads.values().filter(|&&n| n > 1).count();
        assert!(payloads.len() >= 50, "{} payloads", payloads.len());
        if tokens {
            assert_eq!(repeated, 0, "token mode: a keystream was used twice");
        } else {
            assert!(
                repeated > 0,
                "open mode: no payload repeated, the check is blind"
            );
        }
    }
}

#[test]
fn refused_tokens_are_counted_by_reason_and_allocate_nothing() {
    let mut s = token_server();
    let now = Instant::from_millis(500);
    let a = addr("10.7.0.1:4000");

    // Expired: issued two minutes ago for one minute.
    let expired = token_for(0, 10, UNIX0 - 120, 60);
    assert_eq!(
        denied(&ask(&mut s, now, a, &expired)),
        Some(wire::DenyReason::TokenExpired)
    );
    assert_eq!(s.counters().token_expired, 1);

    // Forged: one bit flipped in the sealed part; sealed under another key.
    let mut flipped = token(0);
    flipped.private.sealed[40] ^= 0x10;
    assert_eq!(
        denied(&ask(&mut s, now, a, &flipped)),
        Some(wire::DenyReason::InvalidToken)
    );
    let claims = TokenClaims::new(cfg().protocol_id, "match-1", 0, UNIX0, 60);
    let other_key = issue_token(&TokenKey::from_bytes([1; 32]), &claims, &[], &[3; 32]).unwrap();
    assert_eq!(
        denied(&ask(&mut s, now, a, &other_key)),
        Some(wire::DenyReason::InvalidToken)
    );
    // A longer life written into the clear expiry field does not open either.
    let mut stretched = expired.clone();
    stretched.private.expire_unix = UNIX0 + 3600;
    ask(&mut s, now, a, &stretched);
    assert_eq!(s.counters().token_forged, 3);

    // Wrong protocol: answered as such, counted with the open-mode wrong protocol.
    let claims = TokenClaims::new(cfg().protocol_id ^ 1, "match-1", 0, UNIX0, 60);
    let foreign = issue_token(&key(), &claims, &[], &[4; 32]).unwrap();
    assert_eq!(
        denied(&ask(&mut s, now, a, &foreign)),
        Some(wire::DenyReason::WrongProtocol)
    );
    assert_eq!(s.counters().wrong_protocol, 1);

    // Missing: an open-mode request or response to a token server.
    let mut plain = Vec::new();
    wire::Packet::ConnectRequest {
        protocol_id: cfg().protocol_id,
        client_salt: 1,
    }
    .encode(&mut plain);
    s.handle_datagram(now, a, &plain);
    assert_eq!(
        denied(&drain(&mut s, now).remove(0).1),
        Some(wire::DenyReason::TokenMissing)
    );
    let mut plain_resp = Vec::new();
    wire::Packet::ChallengeResponse(wire::Cookie {
        protocol_id: cfg().protocol_id,
        client_salt: 1,
        timestamp: 0,
        mac: [0; wire::COOKIE_LEN],
    })
    .encode(&mut plain_resp);
    s.handle_datagram(now, a, &plain_resp);
    assert!(drain(&mut s, now).is_empty());
    assert_eq!(s.counters().token_missing, 2);
    assert_nothing_for(&s, 0, 0);
    assert_eq!(s.counters().challenges_sent, 0);

    // A token that expires between the request and the response.
    let short = token_for(0, 11, UNIX0, 1);
    let reply = ask(&mut s, now, a, &short);
    let Ok(wire::Packet::Challenge(cookie)) = wire::decode(&reply) else {
        panic!("challenge expected")
    };
    let mut resp = Vec::new();
    wire::Packet::TokenResponse {
        cookie,
        token: short.private,
    }
    .encode(&mut resp);
    s.handle_datagram(Instant::from_millis(1_500), a, &resp);
    assert_eq!(
        denied(&drain(&mut s, now).remove(0).1),
        Some(wire::DenyReason::TokenExpired)
    );
    assert_eq!(s.counters().token_expired, 2);
    // A valid cookie with a tampered token in the response.
    let good = token(5);
    let reply = ask(&mut s, now, a, &good);
    let Ok(wire::Packet::Challenge(cookie)) = wire::decode(&reply) else {
        panic!("challenge expected")
    };
    let mut tampered = good.private;
    tampered.sealed[0] ^= 1;
    resp.clear();
    wire::Packet::TokenResponse {
        cookie,
        token: tampered,
    }
    .encode(&mut resp);
    s.handle_datagram(now, a, &resp);
    assert_eq!(s.counters().token_forged, 4);
    // The cookie binds the token id: a cookie earned with one token cannot admit another.
    resp.clear();
    wire::Packet::TokenResponse {
        cookie,
        token: token(6).private,
    }
    .encode(&mut resp);
    s.handle_datagram(now, a, &resp);
    assert_eq!(s.counters().bad_cookie, 1);
    drain(&mut s, now);
    assert_nothing_for(&s, 0, 0);
    assert_eq!(s.counters().accepted, 0);
}

#[test]
fn a_token_used_from_one_address_is_refused_from_another_until_it_expires() {
    let mut s = token_server();
    let now = Instant::from_millis(100);
    let (a, b) = (addr("10.7.0.1:4000"), addr("10.7.0.2:4000"));
    let t = token(2);
    // B asks first (a stolen copy) and holds a valid cookie for its own address.
    let b_challenge = ask(&mut s, now, b, &t);
    // A completes the handshake: connection and token id remembered.
    let accepted = handshake(&mut s, now, a, &t).expect("accepted");
    assert!(wire::decode(&accepted).is_ok());
    assert_nothing_for(&s, 1, 1);
    let conn = s.connections().next().unwrap();
    // B's fresh request and B's pending response are both refused as reused.
    assert_eq!(
        denied(&ask(&mut s, now, b, &t)),
        Some(wire::DenyReason::TokenReused)
    );
    let Ok(wire::Packet::Challenge(cookie)) = wire::decode(&b_challenge) else {
        panic!("challenge expected")
    };
    let mut resp = Vec::new();
    wire::Packet::TokenResponse {
        cookie,
        token: t.private,
    }
    .encode(&mut resp);
    s.handle_datagram(now, b, &resp);
    drain(&mut s, now);
    assert_eq!(s.counters().token_reused, 2);
    assert_nothing_for(&s, 1, 1);
    // The same address may reconnect with it (a restarted client) once
    // the old connection has not been heard for `STILL_HEARD`; it replaces
    // the old one. (This also pins the round-robin fix: the cursor named
    // the replaced connection.)
    assert!(handshake(&mut s, now + STILL_HEARD, a, &t).is_some());
    assert_nothing_for(&s, 1, 1);
    assert_ne!(s.connections().next(), Some(conn));
    // After expiry the id is forgotten and the token is refused as expired.
    let later = Instant::from_millis(61_000);
    s.handle_timeout(later);
    assert_eq!(
        denied(&ask(&mut s, later, b, &t)),
        Some(wire::DenyReason::TokenExpired)
    );
    assert_eq!(s.counters().token_expired, 1);
    assert_eq!(s.tracked_tokens(), 0);
}

#[test]
fn relay_layer_refusals_are_counted_and_close_the_connection() {
    let mut s = token_server();
    let now = Instant::from_millis(100);
    let from = addr("10.7.0.3:4000");
    let t = token(1);
    handshake(&mut s, now, from, &t).expect("accepted");
    let conn = s.connections().next().unwrap();
    while s.poll_event().is_some() {}
    let claims = s.claims(conn).unwrap().clone();
    // The client's Join named another slot: the relay refuses it.
    let refusal = claims.admits("match-1", 3).unwrap_err();
    assert_eq!(refusal, Refusal::WrongSlot);
    s.refuse(conn, refusal, now);
    assert_eq!(claims.admits("match-2", 1), Err(Refusal::WrongMatch));
    s.count_refusal(Refusal::WrongMatch);
    assert_eq!(s.counters().token_wrong_slot, 1);
    assert_eq!(s.counters().token_wrong_match, 1);
    // The disconnect packets go out, then the connection is gone.
    let mut t_now = now;
    for _ in 0..20 {
        drain(&mut s, t_now);
        s.handle_timeout(t_now);
        t_now += Duration::from_millis(100);
    }
    assert!(matches!(
        s.poll_event(),
        Some(ServerEvent::Disconnected {
            reason: DisconnectReason::Local,
            ..
        })
    ));
    assert_eq!(s.connections().count(), 0);
}

#[test]
fn mismatched_modes_are_denied_with_a_reason_the_client_reports() {
    let link = LinkConfig::with_latency(Duration::from_millis(10));
    // A token client against an open server.
    let c = Client::with_token(Instant::ZERO, addr(SERVER), cfg(), &token(0), 1);
    let mut h = Harness::from_parts(link, 5, Server::new(cfg(), [7; 32]), vec![c]);
    h.run_until(Instant::from_millis(500), |_| {});
    assert!(
        h.seen.client[0].contains(&ClientEvent::Disconnected(DisconnectReason::Denied(
            wire::DenyReason::TokenUnexpected
        )))
    );
    assert_eq!(h.server.connections().count(), 0);
    // An open client against a token server.
    let c = Client::new(Instant::ZERO, addr(SERVER), cfg(), 2);
    let mut h = Harness::from_parts(link, 6, token_server(), vec![c]);
    h.run_until(Instant::from_millis(500), |_| {});
    assert!(
        h.seen.client[0].contains(&ClientEvent::Disconnected(DisconnectReason::Denied(
            wire::DenyReason::TokenMissing
        )))
    );
    assert_eq!(h.server.counters().token_missing, 1);
    assert_eq!(h.server.connections().count(), 0);
    // An expired token: the client hears why at once instead of timing out.
    let c = Client::with_token(
        Instant::ZERO,
        addr(SERVER),
        cfg(),
        &token_for(0, 9, 1, 60),
        3,
    );
    let mut h = Harness::from_parts(link, 7, token_server(), vec![c]);
    h.run_until(Instant::from_millis(500), |_| {});
    assert_eq!(h.server.counters().token_expired, 1);
    assert!(!h.clients[0].is_connected());
    assert!(
        h.seen.client[0].contains(&ClientEvent::Disconnected(DisconnectReason::Denied(
            wire::DenyReason::TokenExpired
        )))
    );
    // The driver hears of every denial, with the address and the reason.
    assert_eq!(
        h.server.poll_denied(),
        Some((client_addr(0), wire::DenyReason::TokenExpired))
    );
    assert_eq!(h.server.poll_denied(), None);
}

/// The datagram kinds a connect flood mixes.
fn flood_datagram(i: usize, rng: &mut Rng, stolen: &ConnectToken, fresh: &ConnectToken) -> Vec<u8> {
    let proto = cfg().protocol_id;
    let mut b = Vec::new();
    let random_cookie = |rng: &mut Rng| {
        let mut mac = [0u8; wire::COOKIE_LEN];
        rng.fill(&mut mac);
        wire::Cookie {
            protocol_id: proto,
            client_salt: rng.next_u64(),
            timestamp: rng.below(10_000_000),
            mac,
        }
    };
    match i % 9 {
        0 => {
            let mut forged = fresh.private;
            rng.fill(&mut forged.sealed);
            rng.fill(&mut forged.nonce);
            wire::Packet::TokenRequest {
                client_salt: rng.next_u64(),
                token: forged,
            }
            .encode(&mut b);
        }
        1 => b = request(stolen, rng.next_u64()),
        2 => b = request(fresh, rng.next_u64()),
        3 => wire::Packet::ConnectRequest {
            protocol_id: proto,
            client_salt: rng.next_u64(),
        }
        .encode(&mut b),
        4 => wire::Packet::ChallengeResponse(random_cookie(rng)).encode(&mut b),
        5 => wire::Packet::TokenResponse {
            cookie: random_cookie(rng),
            token: fresh.private,
        }
        .encode(&mut b),
        6 => {
            b.resize(rng.below(1300) as usize, 0);
            rng.fill(&mut b);
        }
        7 => {
            // Handshake-looking: a real request cut short, or with non-zero padding.
            b = request(fresh, rng.next_u64());
            if rng.chance(0.5) {
                b.truncate(rng.below(b.len() as u64) as usize);
            } else if let Some(last) = b.last_mut() {
                *last = 1;
            }
        }
        _ => {
            // Authenticated-looking packets from addresses with no connection.
            b.resize(5 + rng.below(200) as usize + wire::TAG_LEN, 0);
            rng.fill(&mut b);
            b[0] &= 0x7F;
        }
    }
    b
}

/// One established connection exchanges a reliable message every 100 ms each
/// way while 6000 datagrams from 6000 spoofed addresses arrive.
fn connect_flood(tokens: bool) {
    const SPOOFED: usize = 6_000;
    let link = LinkConfig::with_latency(Duration::from_millis(20));
    let stolen = token(0);
    let fresh = token(1);
    let (server, client) = server_and_client(tokens, &stolen, 3);
    let mut h = Harness::from_parts(link, 57, server, vec![client]);
    h.connect();
    let conn = h.conn_of(0);
    let mut rng = Rng::new(58);
    let mut sent_to_server: BTreeMap<SocketAddr, u64> = BTreeMap::new();
    let mut injected = 0usize;
    let start = h.now;
    let stop = start + Duration::from_secs(4);
    let mut next_msg = start;
    let mut count = 0u32;
    h.run_until(stop, |h| {
        while h.now >= next_msg && next_msg < stop {
            h.clients[0]
                .send(Channel::Reliable, &numbered(b'c', count, 40))
                .unwrap();
            h.server
                .send(conn, Channel::Reliable, &numbered(b's', count, 40))
                .unwrap();
            count += 1;
            next_msg += Duration::from_millis(100);
        }
        for _ in 0..40 {
            if injected == SPOOFED {
                break;
            }
            let from = addr(&format!(
                "10.{}.{}.{}:{}",
                100 + injected / 62_500,
                (injected / 250) % 250,
                injected % 250 + 1,
                1024 + injected % 60_000
            ));
            let d = flood_datagram(injected, &mut rng, &stolen, &fresh);
            *sent_to_server.entry(from).or_default() += d.len() as u64;
            h.server.handle_datagram(h.now, from, &d);
            injected += 1;
        }
    });
    let end = h.now + Duration::from_secs(2);
    h.run_until(end, |_| {});
    assert_eq!(injected, SPOOFED);
    assert_eq!(
        sent_to_server.len(),
        SPOOFED,
        "every datagram from its own address"
    );

    // Amplification ≤ 1, in total and for every spoofed address.
    let mut replied: BTreeMap<SocketAddr, u64> = BTreeMap::new();
    for &(from, to, len) in &h.sizes {
        if from == addr(SERVER) && sent_to_server.contains_key(&to) {
            *replied.entry(to).or_default() += len as u64;
        }
    }
    let total_in: u64 = sent_to_server.values().sum();
    let total_out: u64 = replied.values().sum();
    assert!(total_out > 0, "the flood got some (small) replies");
    assert!(
        total_out <= total_in,
        "amplification {total_out} > {total_in}"
    );
    for (a, out) in &replied {
        assert!(*out <= sent_to_server[a], "{a} got {out} bytes");
    }
    eprintln!(
        "flood ({}): {SPOOFED} spoofed datagrams, {total_in} bytes in, {total_out} bytes out (ratio {:.4})",
        if tokens { "tokens" } else { "open" },
        total_out as f64 / total_in as f64
    );

    // Nothing allocated for any of them; the real connection kept exchanging messages.
    assert_eq!(h.server.connections().collect::<Vec<_>>(), vec![conn]);
    assert_eq!(h.server.tracked_tokens(), usize::from(tokens));
    let ctr = h.server.counters().clone();
    assert_eq!(ctr.accepted, 1);
    assert!(ctr.unknown_sender > 0 && ctr.malformed > 0 && ctr.bad_cookie > 0);
    assert_eq!(ctr.replies_dropped, 0);
    if tokens {
        assert!(ctr.token_reused > 0 && ctr.token_forged > 0 && ctr.token_missing > 0);
    }
    // One every 100 ms for 4 s; the harness steps only when something is
    // due, so the last one or two may fall after its final step.
    assert!(count >= 38, "{count} messages");
    assert_eq!(h.client_messages(0).len(), count as usize);
    assert_eq!(h.server_messages(conn).len(), count as usize);
    for (i, m) in h.client_messages(0).iter().enumerate() {
        assert_eq!(*m, numbered(b's', i as u32, 40));
    }
    assert!(h.clients[0].is_connected());
}

#[test]
fn connect_flood_in_token_mode_is_not_amplified_and_matches_keep_playing() {
    connect_flood(true);
}

#[test]
fn connect_flood_in_open_mode_is_not_amplified_and_matches_keep_playing() {
    connect_flood(false);
}

/// `relay serve --threads`: servers on one port share one ledger, so a
/// token used through one of them is refused as reused through another
/// (each client's datagrams reach the server its address hashes to).
#[test]
fn servers_sharing_a_ledger_refuse_a_token_used_through_another() {
    let mut one = token_server();
    let mut two = token_server().with_token_ledger_of(&one);
    let now = Instant::from_millis(100);
    let (a, b) = (addr("10.7.0.1:4000"), addr("10.7.0.2:4000"));
    let t = token(2);
    // B (a stolen copy) holds a cookie from the second server first.
    let b_challenge = ask(&mut two, now, b, &t);
    assert!(handshake(&mut one, now, a, &t).is_some(), "accepted");
    assert_eq!(two.tracked_tokens(), 1);
    assert_eq!(
        denied(&ask(&mut two, now, b, &t)),
        Some(wire::DenyReason::TokenReused)
    );
    let Ok(wire::Packet::Challenge(cookie)) = wire::decode(&b_challenge) else {
        panic!("challenge expected")
    };
    let mut resp = Vec::new();
    wire::Packet::TokenResponse {
        cookie,
        token: t.private,
    }
    .encode(&mut resp);
    two.handle_datagram(now, b, &resp);
    drain(&mut two, now);
    assert_eq!(two.counters().token_reused, 2);
    assert!(two.connections().next().is_none());
}
