//! Every refusal reaches the client with its typed reason, and the relay
//! reports it for its log (sans-IO, virtual clock, direct delivery): a
//! transport `Server` (open or token mode) + `RouterGlue` + `Router`, and
//! plain `Session`s behind `Client`s. One test per refusal kind, at the
//! handshake (missing, expired, reused, forged or unexpected token, another
//! protocol, a full server) and at the join (wrong match or slot, running
//! match, another slot count, game or rules, full or draining relay).

use super::*;
use lockstep::low_level::peer_glue::PeerGlue;
use lockstep::low_level::proto::RejectReason;
use lockstep::low_level::transport::{AuthMode, Client, DisconnectReason, Server, TransportConfig};
use lockstep::token::{ConnectToken, TokenClaims, TokenKey, issue_token};
use relay::router::JoinRefusal;
use relay::router_glue::RouterGlue;

const UNIX_AT_ZERO: u64 = 1_800_000_000;
const KEY: [u8; 32] = [9; 32];
const SERVER: ([u8; 4], u16) = ([127, 0, 0, 1], 7100);

fn token(match_name: &str, slot: u8, entropy: u8, created: u64, valid_for: u64) -> ConnectToken {
    let claims = TokenClaims::new(
        TransportConfig::default().protocol_id,
        match_name,
        slot,
        created,
        valid_for,
    );
    issue_token(
        &TokenKey::from_bytes(KEY),
        &claims,
        &[SocketAddr::from(SERVER)],
        &[entropy; 32],
    )
    .unwrap()
}

fn valid(match_name: &str, slot: u8, entropy: u8) -> ConnectToken {
    token(match_name, slot, entropy, UNIX_AT_ZERO, 3600)
}

/// One peer: what it asks for and how it connects.
#[derive(Clone)]
struct Spec {
    match_name: &'static str,
    slots: u8,
    game: &'static str,
    version: u32,
    rules: u8,
    token: Option<ConnectToken>,
    /// XORed into the transport protocol id (another game or build).
    protocol_xor: u64,
}

fn spec(match_name: &'static str) -> Spec {
    Spec {
        match_name,
        slots: 2,
        game: "g",
        version: 1,
        rules: 0,
        token: None,
        protocol_xor: 0,
    }
}

fn with_token(match_name: &'static str, t: ConnectToken) -> Spec {
    Spec {
        token: Some(t),
        ..spec(match_name)
    }
}

/// The relay: who it admits and its limits.
struct RelaySpec {
    tokens: bool,
    config: RelayConfig,
    max_connections: usize,
    /// Begin a graceful drain at this time.
    drain_at: Option<Instant>,
}

fn open_relay() -> RelaySpec {
    RelaySpec {
        tokens: false,
        config: RelayConfig::default(),
        max_connections: 64,
        drain_at: None,
    }
}

fn token_relay() -> RelaySpec {
    RelaySpec {
        tokens: true,
        ..open_relay()
    }
}

struct Seen {
    /// Each peer's `Event::Rejected`, if it got one.
    rejected: Vec<Option<(RejectReason, Option<String>)>>,
    /// How each peer's connection ended, if it did.
    ended: Vec<Option<DisconnectReason>>,
    /// What the relay reported: refused joins, and denied handshakes (by address).
    joins: Vec<JoinRefusal>,
    denied: Vec<(SocketAddr, RejectReason)>,
    addrs: Vec<SocketAddr>,
}

impl Seen {
    /// The reason the relay reported for peer `i`, from either layer.
    fn logged(&self, i: usize) -> Vec<RejectReason> {
        let addr = self.addrs[i];
        let joins = self
            .joins
            .iter()
            .filter(|r| r.addr == addr)
            .map(|r| r.reason);
        let denied = self.denied.iter().filter(|d| d.0 == addr).map(|d| d.1);
        joins.chain(denied).collect()
    }

    /// Peer `i` got exactly `reason`, and the relay logged exactly that for it.
    fn assert_refused(&self, i: usize, reason: RejectReason) {
        assert_eq!(
            self.rejected[i].as_ref().map(|r| r.0),
            Some(reason),
            "peer {i}"
        );
        assert_eq!(self.logged(i), vec![reason], "relay log for peer {i}");
    }
}

/// Peers start 50 ms apart in list order; runs 8 s of virtual time (longer
/// than a refused connection's flush and close can take).
fn run(relay: RelaySpec, peers: &[Spec]) -> Seen {
    let mut now = Instant::from_millis(1);
    let server_addr = SocketAddr::from(SERVER);
    let transport = TransportConfig {
        max_connections: relay.max_connections,
        ..TransportConfig::default()
    };
    let mut server = Server::new(transport, [3; 32]);
    if relay.tokens {
        server = server.with_auth(AuthMode::Tokens {
            key: TokenKey::from_bytes(KEY),
            unix_at_zero: UNIX_AT_ZERO,
        });
    }
    let mut router = Router::new(relay.config);
    let mut rglue = RouterGlue::new();
    struct P {
        session: Session,
        client: Client,
        glue: PeerGlue,
        addr: SocketAddr,
    }
    let mut ps: Vec<P> = peers
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let start = now + Duration::from_millis(50 * i as u64);
            let config = TransportConfig {
                protocol_id: TransportConfig::default().protocol_id ^ s.protocol_xor,
                ..TransportConfig::default()
            };
            let session = SessionBuilder::new()
                .with_match(s.match_name, s.slots)
                .with_game(s.game, s.version, StateHash([s.rules; 32]))
                .with_name(&format!("p{i}"))
                .build(start)
                .unwrap();
            let seed = 300 + i as u64;
            P {
                session,
                client: match &s.token {
                    Some(t) => Client::with_token(start, server_addr, config, t, seed),
                    None => Client::new(start, server_addr, config, seed),
                },
                glue: PeerGlue::new(),
                addr: SocketAddr::from(([127, 0, 0, 1], 7200 + i as u16)),
            }
        })
        .collect();
    let mut seen = Seen {
        rejected: vec![None; peers.len()],
        ended: vec![None; peers.len()],
        joins: Vec::new(),
        denied: Vec::new(),
        addrs: ps.iter().map(|p| p.addr).collect(),
    };
    let mut buf = Vec::new();
    let mut wire: BTreeMap<(Instant, u64), (SocketAddr, SocketAddr, Vec<u8>)> = BTreeMap::new();
    let mut seq = 0u64;
    let one_way = Duration::from_millis(5);
    let end = Instant::from_millis(8_000);
    let mut drain_at = relay.drain_at;
    while now < end {
        if drain_at.is_some_and(|t| now >= t) {
            drain_at = None;
            router.begin_drain();
        }
        for _ in 0..2 {
            rglue.pump(now, &mut router, &mut server);
            while router.poll_event().is_some() {}
            for (i, p) in ps.iter_mut().enumerate() {
                p.glue.pump(now, &mut p.session, &mut p.client);
                while let Some(ev) = p.session.poll_event() {
                    if let Event::Rejected { reason, detail } = ev {
                        assert!(seen.rejected[i].is_none(), "one refusal per peer");
                        seen.rejected[i] = Some((reason, detail));
                    }
                }
                seen.ended[i] = p.glue.disconnected();
            }
        }
        seen.joins.extend(rglue.take_refusals());
        while let Some((addr, d)) = server.poll_denied() {
            seen.denied.push((addr, d.into()));
        }
        while let Some(to) = server.poll_transmit(now, &mut buf) {
            seq += 1;
            wire.insert((now + one_way, seq), (server_addr, to, buf.clone()));
        }
        for p in &mut ps {
            while let Some(to) = p.client.poll_transmit(now, &mut buf) {
                seq += 1;
                wire.insert((now + one_way, seq), (p.addr, to, buf.clone()));
            }
        }
        let mut next = end;
        let timers = [server.poll_timeout(), router.poll_timeout(), drain_at]
            .into_iter()
            .chain([wire.keys().next().map(|k| k.0)])
            .chain(ps.iter().map(|p| p.client.poll_timeout()))
            .chain(ps.iter().map(|p| p.session.poll_timeout()))
            .flatten();
        for t in timers {
            next = next.min(t);
        }
        now = next.max(now + Duration::from_micros(100));
        while let Some((&key, _)) = wire.first_key_value() {
            if key.0 > now {
                break;
            }
            let (from, to, bytes) = wire.remove(&key).unwrap();
            if to == server_addr {
                server.handle_datagram(now, from, &bytes);
            } else if let Some(p) = ps.iter_mut().find(|p| p.addr == to) {
                p.client.handle_datagram(now, from, &bytes);
            }
        }
        server.handle_timeout(now);
        router.handle_timeout(now);
        for p in &mut ps {
            p.client.handle_timeout(now);
            p.session.handle_timeout(now);
        }
    }
    seen
}

#[test]
fn a_token_for_another_match_is_refused_with_its_reason_before_the_close() {
    let s = run(
        token_relay(),
        &[with_token("ranked", valid("casual", 0, 1))],
    );
    s.assert_refused(0, RejectReason::WrongMatch);
    let detail = s.rejected[0].as_ref().and_then(|r| r.1.clone());
    assert_eq!(detail.as_deref(), Some("the token admits match \"casual\""));
    // The refusal came first, then the relay closed the connection.
    assert_eq!(s.ended[0], Some(DisconnectReason::Remote));
    assert_eq!(s.joins[0].match_name, "ranked");
}

#[test]
fn a_token_slot_outside_the_match_or_taken_is_refused_with_its_reason() {
    let s = run(
        token_relay(),
        &[
            with_token("ranked", valid("ranked", 2, 1)),
            with_token("ranked", valid("ranked", 0, 2)),
            with_token("ranked", valid("ranked", 0, 3)),
        ],
    );
    s.assert_refused(0, RejectReason::WrongSlot);
    assert_eq!(
        s.rejected[1], None,
        "the first holder of slot 0 waits in the lobby"
    );
    s.assert_refused(2, RejectReason::WrongSlot);
    assert_eq!(s.ended[0], Some(DisconnectReason::Remote));
    assert_eq!(s.ended[2], Some(DisconnectReason::Remote));
}

#[test]
fn token_handshake_denials_reach_the_client_typed() {
    let forged = {
        let mut t = valid("ranked", 0, 4);
        t.private.sealed[10] ^= 1;
        t
    };
    let s = run(
        token_relay(),
        &[
            spec("ranked"),
            with_token("ranked", token("ranked", 0, 1, UNIX_AT_ZERO - 120, 60)),
            with_token("ranked", forged),
            with_token("ranked", valid("ranked", 1, 5)),
            // The same token again, from another address.
            with_token("ranked", valid("ranked", 1, 5)),
        ],
    );
    s.assert_refused(0, RejectReason::TokenMissing);
    s.assert_refused(1, RejectReason::TokenExpired);
    s.assert_refused(2, RejectReason::TokenInvalid);
    assert_eq!(s.rejected[3], None);
    s.assert_refused(4, RejectReason::TokenReused);
    for i in [0, 1, 2, 4] {
        assert!(
            matches!(s.ended[i], Some(DisconnectReason::Denied(_))),
            "peer {i}: {:?}",
            s.ended[i]
        );
    }
}

#[test]
fn open_relay_handshake_denials_reach_the_client_typed() {
    let s = run(
        RelaySpec {
            max_connections: 1,
            ..open_relay()
        },
        &[
            spec("a"),
            with_token("a", valid("a", 0, 1)),
            Spec {
                protocol_xor: 1,
                ..spec("a")
            },
            spec("a"),
        ],
    );
    assert_eq!(s.rejected[0], None);
    s.assert_refused(1, RejectReason::TokenUnexpected);
    s.assert_refused(2, RejectReason::WrongProtocol);
    s.assert_refused(3, RejectReason::RelayFull);
}

#[test]
fn joins_that_do_not_fit_the_lobby_or_the_match_are_refused_with_their_reason() {
    let s = run(
        open_relay(),
        &[
            spec("m"),
            Spec {
                slots: 3,
                ..spec("m")
            },
            Spec {
                game: "other",
                ..spec("m")
            },
            Spec {
                version: 2,
                ..spec("m")
            },
            Spec {
                rules: 1,
                ..spec("m")
            },
            spec("m"),
            // The lobby is full and the match started: too late.
            spec("m"),
        ],
    );
    assert_eq!(s.rejected[0], None);
    s.assert_refused(1, RejectReason::SlotCountDiffers);
    let detail = s.rejected[1].as_ref().and_then(|r| r.1.clone());
    assert_eq!(
        detail.as_deref(),
        Some("the lobby has 2 slots, the join asked for 3")
    );
    s.assert_refused(2, RejectReason::GameDiffers);
    s.assert_refused(3, RejectReason::GameDiffers);
    s.assert_refused(4, RejectReason::RulesDiffer);
    assert_eq!(s.rejected[5], None);
    s.assert_refused(6, RejectReason::MatchRunning);
}

#[test]
fn a_full_relay_refuses_matches_and_connections_with_its_reason() {
    let mut config = RelayConfig::default();
    config.limits.max_matches = 1;
    config.limits.max_connections = 2;
    let s = run(
        RelaySpec {
            config,
            ..open_relay()
        },
        &[spec("a"), spec("b"), spec("c")],
    );
    assert_eq!(s.rejected[0], None);
    s.assert_refused(1, RejectReason::RelayFull);
    assert_eq!(s.joins[0].detail.as_deref(), Some("match limit 1 reached"));
    // Over the router's connection limit: told why, then closed.
    s.assert_refused(2, RejectReason::RelayFull);
    assert_eq!(s.ended[2], Some(DisconnectReason::Remote));
}

#[test]
fn a_draining_relay_refuses_joins_and_lobbies_with_its_reason() {
    let s = run(
        RelaySpec {
            drain_at: Some(Instant::from_millis(40)),
            ..open_relay()
        },
        &[spec("lobby"), spec("late")],
    );
    // The lobby the drain closed and the join after it: both told why, both logged.
    s.assert_refused(0, RejectReason::ShuttingDown);
    s.assert_refused(1, RejectReason::ShuttingDown);
    assert_eq!(s.joins[0].match_name, "lobby");
}
