//! Join tokens end to end (sans-IO, virtual clock, a perfect 5 ms network
//! driven by `lockstep::netsim::harness`): a
//! token-mode transport `Server` + `RouterGlue` + `Router` and reference-game
//! peers connecting with `Client::with_token`. Valid tokens put each player
//! in the token's slot; a token for another match or an impossible or taken
//! slot is refused with its counted reason and allocates no match.

use super::netsim::{DoneWhen, PeerNode, PeerSpec, RelayNode, run_match};
use super::*;
use lockstep::low_level::transport::{AuthMode, Server, ServerCounters, TransportConfig};
use lockstep::netsim::harness::Harness;
use lockstep::netsim::{LinkConfig, Network};
use lockstep::token::{ConnectToken, TokenClaims, TokenKey, issue_token};

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

struct Outcome {
    peers: Vec<PeerNode>,
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
    let start = Instant::from_millis(1);
    let server_addr = SocketAddr::from(([127, 0, 0, 1], 7000));
    let server = Server::new(TransportConfig::default(), [3; 32]).with_auth(AuthMode::Tokens {
        key: TokenKey::from_bytes(KEY),
        unix_at_zero: UNIX_AT_ZERO,
    });
    let mut relay = RelayNode::new(server, RelayConfig::default(), server_addr);
    let mut peers: Vec<PeerNode> = players
        .iter()
        .enumerate()
        .map(|(i, (name, tok))| {
            let at = start + Duration::from_millis(50 * i as u64);
            let spec = PeerSpec {
                match_name: name,
                players: 2,
                turns,
                bot_seed: 40 + i as u64,
                apm: 400,
                name: format!("p{i}"),
                client_seed: 90 + i as u64,
                token: tok.clone(),
                desync_at: None,
            };
            let mut node = PeerNode::new(
                at,
                spec,
                server_addr,
                SocketAddr::from(([127, 0, 0, 1], 7001 + i as u16)),
            );
            // A refused peer is finished once the relay closed its connection
            // too, so the tests see that the refusal arrived before the close.
            node.done_when = DoneWhen::Settled;
            node
        })
        .collect();
    // A perfect network, 5 ms one way.
    let wire = LinkConfig::with_latency(Duration::from_millis(5));
    let mut harness = Harness::new(Network::new(0, wire)).with_start(start);
    let now = run_match(
        &mut harness,
        &mut relay,
        &mut peers,
        Instant::from_millis(120_000),
    );
    Outcome {
        refusals: relay.refusals,
        server: relay.server.counters().clone(),
        router: relay.router.counters().clone(),
        most_matches: relay.most_matches,
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
    let s: Vec<_> = o.peers.iter().map(|p| p.peer().summary(o.now)).collect();
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
    let summary = p.peer().summary(o.now);
    assert!(summary.player.is_none());
    assert_eq!(
        summary.refused.map(|r| r.reason),
        Some(lockstep::low_level::proto::RejectReason::WrongMatch),
        "the peer was told why"
    );
    assert_eq!(
        p.peer().disconnected(),
        Some(lockstep::low_level::transport::DisconnectReason::Remote),
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
    assert!(o.peers[0].peer().disconnected().is_some());
    assert_eq!(
        o.peers[0].peer().summary(o.now).refused.map(|r| r.reason),
        Some(lockstep::low_level::proto::RejectReason::WrongSlot)
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
    assert!(o.peers[1].peer().disconnected().is_some());
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
    assert!(o.peers[0].peer().summary(o.now).player.is_none());
    assert_eq!(o.most_matches, 0);
    assert_eq!(o.router.joins_refused, 0, "refused before any join");
    assert!(o.server.token_missing > 0, "{:?}", o.server);
}
