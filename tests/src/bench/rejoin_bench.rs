//! The `rejoin` section: a player of a 4-player reference-game match is
//! killed after 5 and after 30 minutes of play and restarted a few seconds
//! later; it rejoins from the relay's agreed snapshot. The match runs in
//! virtual time on the `netsim` harness (50 ms RTT; 5 % loss each way from
//! the kill on), with the real relay, transport and generic peers. Measured:
//! time from reconnecting to caught up, bytes the rejoiner received, the
//! other players' stall over the rejoin, and a spectator's join time.

use lockstep::netsim::harness::{Endpoint, Harness};
use lockstep::netsim::{LinkConfig, Network};
use lockstep::peer::{Autopilot, PeerBuilder, PeerEvent};
use lockstep::transport::{Server, TransportConfig};
use lockstep::{Duration, Instant};
use relay::RelayConfig;
use relay::endpoint::RelayEndpoint;
use sim::game::World;
use std::net::SocketAddr;

type Pilot = Autopilot<World, sim::bot::Bot>;

/// One rejoin measured.
#[derive(Clone, Debug)]
pub struct RejoinFigures {
    /// Minutes played before the kill.
    pub minutes: u32,
    /// From the restarted peer's connect to caught up with the live turn.
    pub rejoin_ms: f64,
    /// Bytes the rejoiner received until caught up (transport datagrams).
    pub bytes: u64,
    /// Turns it fast-forwarded (snapshot turn to the live turn).
    pub turns_replayed: u32,
    /// The largest stall of another player between the kill and the end.
    pub others_stall_ms: f64,
    /// From a spectator's connect to its first simulated turn.
    pub spectator_ms: f64,
    /// Whether the rejoiner's and the spectator's final hashes were the players'.
    pub agreed: bool,
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn pilot(at: Instant, i: u64, b: PeerBuilder<World>) -> Pilot {
    let b = b
        .with_turns(0)
        .with_seed(100 + i)
        .with_ticks_per_turn(sim::game::DEFAULT_TICKS_PER_TURN)
        .with_local_addr(addr(7001 + i as u16));
    Autopilot::new(b.build(at, addr(7000)).expect("valid peer"), move |p| {
        sim::bot::Bot::new(p, 40 + i, 300)
    })
    .with_log()
}

fn run_nodes(h: &mut Harness, relay: &mut RelayEndpoint, peers: &mut [&mut Pilot], until: Instant) {
    let mut nodes: Vec<&mut dyn Endpoint> = vec![relay];
    for p in peers.iter_mut() {
        nodes.push(&mut **p);
    }
    let _ = h.run_until(&mut nodes, until, |_, _| false);
}

/// Measures one rejoin after `minutes` of play.
#[must_use]
pub fn measure(minutes: u32) -> RejoinFigures {
    let start = Instant::from_millis(1);
    let config = RelayConfig {
        silence_timeout: Duration::from_secs(5),
        ..RelayConfig::default()
    };
    let mut relay = RelayEndpoint::new(
        Server::new(TransportConfig::default(), [7; 32]),
        config,
        addr(7000),
    );
    let mut players: Vec<Pilot> = (0..4)
        .map(|i| {
            pilot(
                start,
                i,
                PeerBuilder::new("bench", 4).with_name(&format!("p{i}")),
            )
        })
        .collect();
    let clean = LinkConfig::with_latency(Duration::from_millis(25));
    let mut h = Harness::new(Network::new(12, clean)).with_start(start);
    let kill_at = start + Duration::from_secs(u64::from(minutes) * 60);
    {
        let mut refs: Vec<&mut Pilot> = players.iter_mut().collect();
        run_nodes(&mut h, &mut relay, &mut refs, kill_at);
    }
    let secret = players[3]
        .take_log()
        .into_iter()
        .find_map(|e| match e {
            PeerEvent::RejoinSecret { player, secret } => Some((player, secret)),
            _ => None,
        })
        .expect("the relay gave a rejoin secret");
    let stall_before: Vec<f64> = players
        .iter()
        .map(|p| p.peer().summary(h.now()).stall_ms)
        .collect();
    h.network_mut().set_all(LinkConfig {
        loss: 0.05,
        ..clean
    });
    // The player is gone for 6 s: dropped after the 5 s silence, slot held.
    let back_at = h.now() + Duration::from_secs(6);
    {
        let mut refs: Vec<&mut Pilot> = players.iter_mut().take(3).collect();
        run_nodes(&mut h, &mut relay, &mut refs, back_at);
    }
    let rejoin_build = PeerBuilder::new("bench", 4).with_rejoin(secret.0, secret.1);
    let mut rejoiner = pilot(h.now(), 10, rejoin_build);
    let spectate = PeerBuilder::new("bench", 4).with_spectate();
    let mut spectator = pilot(h.now(), 11, spectate);
    let joined = h.now();
    let (mut caught, mut first_spectated, mut restored_turn, mut live_turn) =
        (None, None, None, None);
    let end = joined + Duration::from_secs(20);
    while h.now() < end && (caught.is_none() || first_spectated.is_none()) {
        let step_to = h.now() + Duration::from_millis(20);
        {
            let mut refs: Vec<&mut Pilot> = players.iter_mut().take(3).collect();
            refs.push(&mut rejoiner);
            refs.push(&mut spectator);
            run_nodes(&mut h, &mut relay, &mut refs, step_to);
        }
        for e in rejoiner.take_log() {
            match e {
                PeerEvent::Restored { turn } => restored_turn = turn,
                PeerEvent::CaughtUp { turn } => {
                    caught.get_or_insert(h.now());
                    live_turn = Some(turn);
                }
                _ => {}
            }
        }
        if spectator
            .take_log()
            .iter()
            .any(|e| matches!(e, PeerEvent::TurnReady { .. }))
        {
            first_spectated.get_or_insert(h.now());
        }
    }
    let bytes = h.sent_to(addr(7011)).delivered_bytes;
    // Play on a minute, then compare.
    let until = h.now() + Duration::from_secs(60);
    {
        let mut refs: Vec<&mut Pilot> = players.iter_mut().take(3).collect();
        refs.push(&mut rejoiner);
        refs.push(&mut spectator);
        run_nodes(&mut h, &mut relay, &mut refs, until);
    }
    let now = h.now();
    let others_stall_ms = players
        .iter()
        .take(3)
        .zip(&stall_before)
        .map(|(p, before)| p.peer().summary(now).stall_ms - before)
        .fold(0.0, f64::max);
    // Hashes agree if the rejoiner and spectator never saw a desync and the
    // relay recorded none.
    let agreed = rejoiner.peer().summary(now).desyncs.is_empty()
        && spectator.peer().summary(now).desyncs.is_empty()
        && !relay
            .events
            .iter()
            .any(|e| matches!(e, relay::RouterEvent::Desync { .. }))
        && relay.router.counters().spectator_hash_mismatches == 0;
    let ms =
        |t: Option<Instant>| t.map_or(f64::NAN, |t| t.saturating_since(joined).as_millis_f64());
    RejoinFigures {
        minutes,
        rejoin_ms: ms(caught),
        bytes,
        turns_replayed: live_turn
            .zip(restored_turn)
            .map_or(0, |(l, r)| l.0.saturating_sub(r.0)),
        others_stall_ms,
        spectator_ms: ms(first_spectated),
        agreed,
    }
}

/// The section's text.
#[must_use]
pub fn markdown(figures: &[RejoinFigures]) -> String {
    let mut s = String::from(
        "A player of a 4-player reference-game match (bots at 300 APM, 100 ms turns, agreed \
         snapshot every 100 turns) is killed after the given play time and restarted 6 s later \
         (dropped after the 5 s silence, slot held); it rejoins with its secret, restores the \
         relay's agreed snapshot and fast-forwards. A spectator joins at the same moment. \
         Virtual time on the `netsim` harness with the real relay, transport and generic peers: \
         25 ms each way (50 ms RTT), 5 % loss each way from the kill on. `caught up` is from \
         the restarted peer's connect to its `CaughtUp`; `bytes` what it received until then; \
         `others' stall` the largest extra stall of a remaining player from the kill to a \
         minute after the rejoin; `spectator` from its connect to its first simulated turn \
         (it then plays 3 s behind live).\n\n\
         | played | caught up | bytes | turns fast-forwarded | others' stall | spectator | hashes |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for f in figures {
        s.push_str(&format!(
            "| {} min | {:.0} ms | {} | {} | {:.0} ms | {:.0} ms | {} |\n",
            f.minutes,
            f.rejoin_ms,
            f.bytes,
            f.turns_replayed,
            f.others_stall_ms,
            f.spectator_ms,
            if f.agreed { "agree" } else { "DIFFER" }
        ));
    }
    s
}
