//! Fuzzes the join-token handshake. A token-mode Server runs a script split on
//! 0xFE; each chunk is `op, who, rest`: raw datagram, a valid token request
//! mutated by `rest`, a response echoing the server's last challenge to that
//! address (mutated), a clock step, or a public-token decode. The server must
//! never panic, never send an address that was never admitted more bytes than
//! it received from it, and never remember more token ids than tokens exist.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lockstep::token::{ConnectToken, TokenClaims, TokenKey, issue_token};
use lockstep::low_level::transport::{AuthMode, Server, ServerEvent, TransportConfig};
use lockstep::low_level::wire::{self, Cookie, Packet};
use lockstep::{Duration, Instant};
use std::net::SocketAddr;

const UNIX0: u64 = 1_700_000_000;

fn mutate(bytes: &mut [u8], rest: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    for pair in rest.chunks_exact(2) {
        let at = usize::from(pair[0]) * 7 % bytes.len();
        bytes[at] ^= pair[1];
    }
}

fuzz_target!(|data: &[u8]| {
    let key = TokenKey::from_bytes([0x42; 32]);
    let cfg = TransportConfig::default();
    let mut server = Server::new(cfg, [9; 32]).with_auth(AuthMode::Tokens {
        key: key.clone(),
        unix_at_zero: UNIX0,
    });
    let claims = TokenClaims::new(cfg.protocol_id, "fuzz", 0, UNIX0, 60);
    let token = issue_token(&key, &claims, &[], &[1; 32]).expect("valid claims");
    let addrs: [SocketAddr; 4] = [
        "10.0.0.1:1".parse().unwrap(),
        "10.0.0.2:1".parse().unwrap(),
        "10.0.0.3:1".parse().unwrap(),
        "[::1]:9".parse().unwrap(),
    ];
    let (mut sent, mut got, mut admitted) = ([0usize; 4], [0usize; 4], [false; 4]);
    let mut challenge: [Option<Cookie>; 4] = [None; 4];
    let mut now = Instant::ZERO;
    let mut buf = Vec::new();
    for chunk in data.split(|&b| b == 0xFE) {
        let [op, who, rest @ ..] = chunk else {
            continue;
        };
        let a = usize::from(*who % 4);
        let datagram = match op % 5 {
            0 => Some(rest.to_vec()),
            1 => {
                let mut b = Vec::new();
                Packet::TokenRequest {
                    client_salt: u64::from(*who),
                    token: token.private,
                }
                .encode(&mut b);
                mutate(&mut b, rest);
                Some(b)
            }
            2 => challenge[a].map(|cookie| {
                let mut b = Vec::new();
                Packet::TokenResponse {
                    cookie,
                    token: token.private,
                }
                .encode(&mut b);
                mutate(&mut b, rest);
                b
            }),
            3 => {
                let steps = u64::from(rest.first().copied().unwrap_or(1));
                now += Duration::from_millis(steps * 100);
                server.handle_timeout(now);
                None
            }
            _ => {
                if let Ok(t) = ConnectToken::decode(rest) {
                    assert_eq!(t.to_bytes(), rest);
                }
                None
            }
        };
        if let Some(d) = datagram {
            sent[a] += d.len();
            server.handle_datagram(now, addrs[a], &d);
        }
        while let Some(to) = server.poll_transmit(now, &mut buf) {
            assert!(buf.len() <= wire::MAX_PACKET);
            if let Some(i) = addrs.iter().position(|x| *x == to) {
                got[i] += buf.len();
                if let Ok(Packet::Challenge(c)) = wire::decode(&buf) {
                    challenge[i] = Some(c);
                }
            }
        }
        while let Some(ev) = server.poll_event() {
            if let ServerEvent::Connected { addr, .. } = ev {
                if let Some(i) = addrs.iter().position(|x| *x == addr) {
                    admitted[i] = true;
                }
            }
        }
        for i in 0..4 {
            assert!(admitted[i] || got[i] <= sent[i], "amplified to {}", addrs[i]);
        }
        assert!(server.tracked_tokens() <= 1);
        assert!(server.connections().count() <= 4);
    }
});
