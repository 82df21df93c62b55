//! Join tokens end to end (sans-IO, virtual clock, direct delivery): a
//! token-mode transport `Server` + `RouterGlue` + `Router` and reference-game
//! peers connecting with `Client::with_token`. Valid tokens put each player
//! in the token's slot; a token for another match or an impossible or taken
//! slot is refused with its counted reason and allocates no match.

use super::*;
use lockstep::token::{ConnectToken, TokenClaims, TokenKey, issue_token};
use lockstep::transport::{AuthMode, Client, Server, ServerCounters, TransportConfig};
use relay::peer::{GamePeer, PeerConfig};

const UNIX_AT_ZERO: u64 = 1_800_000_000;
const KEY: [u8; 32] = [7; 32];

fn token(match_name: &str, slot: u8, entropy: u8) -> ConnectToken {
    let claims = TokenClaims::new(
        TransportConfig::default().protocol_id,
        match_name,
        slot,
        UNIX_AT_ZERO,
        3600,
    );
    let server = SocketAddr::from(([127, 0, 0, 1], 7000));
    issue_token(
        &TokenKey::from_bytes(KEY),
        &claims,
        &[server],
        &[entropy; 32],
    )
    .unwrap()
}

struct TokenPeer {
    peer: GamePeer,
    client: Client,
    glue: lockstep::peer_glue::PeerGlue,
    addr: SocketAddr,
}

struct Outcome {
    peers: Vec<TokenPeer>,
    server: ServerCounters,
    router: relay::RouterCounters,
    /// Most matches (lobbies included) the router held at once.
    most_matches: usize,
    /// Every refused join, as the driver would log it.
    refusals: Vec<relay::router::JoinRefusal>,
    now: Instant,
}

/// Each entry: (match name the peer asks for, its token or none); every peer
/// asks for a 2-player match of `turns` turns. Peers start in list order,
/// 50 ms apart, so the join order is the list order.
fn run(players: &[(&str, Option<ConnectToken>)], turns: u32) -> Outcome {
    let mut now = Instant::from_millis(1);
    let server_addr = SocketAddr::from(([127, 0, 0, 1], 7000));
    let mut server = Server::new(TransportConfig::default(), [3; 32]).with_auth(AuthMode::Tokens {
        key: TokenKey::from_bytes(KEY),
        unix_at_zero: UNIX_AT_ZERO,
    });
    let mut router = Router::new(RelayConfig::default());
    let mut rglue = relay::server::RouterGlue::new();
    let mut peers: Vec<TokenPeer> = players
        .iter()
        .enumerate()
        .map(|(i, (name, tok))| {
            let start = now + Duration::from_millis(50 * i as u64);
            let config = TransportConfig::default();
            TokenPeer {
                peer: GamePeer::new(
                    start,
                    PeerConfig {
                        match_name: (*name).into(),
                        players: 2,
                        turns,
                        seed: 40 + i as u64,
                        apm: 400,
                        name: format!("p{i}"),
                        desync_at: None,
                    },
                )
                .unwrap(),
                client: match tok {
                    Some(t) => Client::with_token(start, server_addr, config, t, 90 + i as u64),
                    None => Client::new(start, server_addr, config, 90 + i as u64),
                },
                glue: lockstep::peer_glue::PeerGlue::new(),
                addr: SocketAddr::from(([127, 0, 0, 1], 7001 + i as u16)),
            }
        })
        .collect();
    let mut most_matches = 0;
    let mut refusals = Vec::new();
    let mut buf = Vec::new();
    // Datagrams in flight: (deliver at, seq) -> (from, to, bytes); 5 ms one way.
    let mut wire: BTreeMap<(Instant, u64), (SocketAddr, SocketAddr, Vec<u8>)> = BTreeMap::new();
    let mut seq = 0u64;
    let one_way = Duration::from_millis(5);
    // A refused peer is finished once the relay closed its connection too,
    // so the tests see that the refusal arrived before the close.
    let finished = |p: &TokenPeer| {
        p.glue.disconnected().is_some()
            || (p.peer.is_done() && p.peer.summary(Instant::ZERO).refused.is_none())
    };
    let limit = Instant::from_millis(120_000);
    while now < limit && !peers.iter().all(finished) {
        rglue.pump(now, &mut router, &mut server);
        while router.poll_event().is_some() {}
        for p in &mut peers {
            if finished(p) {
                continue;
            }
            p.glue.pump(now, p.peer.session(), &mut p.client);
            p.peer.pump(now);
            p.glue.pump(now, p.peer.session(), &mut p.client);
        }
        refusals.extend(rglue.take_refusals());
        rglue.pump(now, &mut router, &mut server);
        while router.poll_event().is_some() {}
        most_matches = most_matches.max(router.match_count());
        while let Some(to) = server.poll_transmit(now, &mut buf) {
            seq += 1;
            wire.insert((now + one_way, seq), (server_addr, to, buf.clone()));
        }
        for p in &mut peers {
            while let Some(to) = p.client.poll_transmit(now, &mut buf) {
                seq += 1;
                wire.insert((now + one_way, seq), (p.addr, to, buf.clone()));
            }
        }
        let mut next = wire.keys().next().map(|(t, _)| *t);
        let mut at = |t: Option<Instant>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n: Instant| n.min(t)));
            }
        };
        at(server.poll_timeout());
        at(router.poll_timeout());
        for p in &mut peers {
            at(p.client.poll_timeout());
            at(p.peer.session().poll_timeout());
        }
        let Some(next) = next else { break };
        now = next.max(now + Duration::from_micros(100));
        while let Some((&key, _)) = wire.first_key_value() {
            if key.0 > now {
                break;
            }
            let (from, to, bytes) = wire.remove(&key).unwrap();
            if to == server_addr {
                server.handle_datagram(now, from, &bytes);
            } else if let Some(p) = peers.iter_mut().find(|p| p.addr == to) {
                p.client.handle_datagram(now, from, &bytes);
            }
        }
        server.handle_timeout(now);
        router.handle_timeout(now);
        for p in &mut peers {
            p.client.handle_timeout(now);
            p.peer.session().handle_timeout(now);
        }
    }
    rglue.pump(now, &mut router, &mut server);
    for p in &mut peers {
        p.glue.pump(now, p.peer.session(), &mut p.client);
        p.peer.pump(now);
    }
    refusals.extend(rglue.take_refusals());
    Outcome {
        refusals,
        server: server.counters().clone(),
        router: router.counters().clone(),
        most_matches,
        peers,
        now,
    }
}

#[test]
fn valid_tokens_play_a_match_in_the_tokens_slots() {
    // The first to join holds the slot-1 token: it must still play as player 1.
    let o = run(
        &[
            ("ranked", Some(token("ranked", 1, 1))),
            ("ranked", Some(token("ranked", 0, 2))),
        ],
        60,
    );
    let s: Vec<_> = o.peers.iter().map(|p| p.peer.summary(o.now)).collect();
    for x in &s {
        assert!(x.completed, "{x:?}");
        assert_eq!(x.final_hash, s[0].final_hash);
    }
    assert_eq!(
        s[0].player,
        Some(1),
        "first joiner sits in its token's slot 1"
    );
    assert_eq!(s[1].player, Some(0));
    assert_eq!(o.router.matches_started, 1);
    assert_eq!(o.router.token_wrong_match + o.router.token_wrong_slot, 0);
    assert_eq!(o.server.token_wrong_match + o.server.token_wrong_slot, 0);
}

#[test]
fn token_for_another_match_is_refused_and_allocates_nothing() {
    let o = run(&[("ranked", Some(token("casual", 0, 3)))], 30);
    let p = &o.peers[0];
    let summary = p.peer.summary(o.now);
    assert!(summary.player.is_none());
    assert_eq!(
        summary.refused.map(|r| r.reason),
        Some(lockstep::proto::RejectReason::WrongMatch),
        "the peer was told why"
    );
    assert_eq!(
        p.glue.disconnected(),
        Some(lockstep::transport::DisconnectReason::Remote),
        "then the relay closed the connection"
    );
    assert_eq!(o.refusals.len(), 1);
    assert_eq!(
        (o.router.token_wrong_match, o.server.token_wrong_match),
        (1, 1)
    );
    assert_eq!(o.router.joins_refused, 1);
    assert_eq!(o.most_matches, 0, "no lobby was created");
    assert_eq!(o.router.matches_started, 0);
}

#[test]
fn token_slot_outside_the_match_is_refused_and_allocates_nothing() {
    let o = run(&[("ranked", Some(token("ranked", 2, 4)))], 30);
    assert!(o.peers[0].glue.disconnected().is_some());
    assert_eq!(
        o.peers[0].peer.summary(o.now).refused.map(|r| r.reason),
        Some(lockstep::proto::RejectReason::WrongSlot)
    );
    assert_eq!(
        (o.router.token_wrong_slot, o.server.token_wrong_slot),
        (1, 1)
    );
    assert_eq!(o.most_matches, 0, "no lobby was created");
}

#[test]
fn token_slot_taken_by_another_connection_is_refused() {
    // Two different tokens for the same slot: the second joiner is refused;
    // the lobby never fills, so no match starts.
    let o = run(
        &[
            ("ranked", Some(token("ranked", 0, 5))),
            ("ranked", Some(token("ranked", 0, 6))),
        ],
        30,
    );
    assert!(o.peers[1].glue.disconnected().is_some());
    assert_eq!(
        (o.router.token_wrong_slot, o.server.token_wrong_slot),
        (1, 1)
    );
    assert_eq!(o.router.matches_started, 0);
    assert_eq!(o.most_matches, 1, "only the first joiner's lobby");
}

#[test]
fn peer_without_a_token_never_connects() {
    let o = run(&[("ranked", None)], 30);
    assert!(o.peers[0].peer.summary(o.now).player.is_none());
    assert_eq!(o.most_matches, 0);
    assert_eq!(o.router.joins_refused, 0, "refused before any join");
    assert!(o.server.token_missing > 0, "{:?}", o.server);
}
