//! Desync forensics end to end on the seeded virtual network: a peer whose
//! world the fault switch perturbs is narrowed to exactly the entity and
//! field it changed, with both values, in both shipped games, under 10 %
//! loss, within a bounded number of turns, without stalling anyone; with two
//! players the report says there is no majority; `--on-desync end` ends the
//! match after the report. Every player gets the narrowed entities and
//! fields too (`PeerEvent::DesyncDetails`).

use super::netsim::RelayNode;
use super::*;
use lockstep::low_level::transport::{Server, TransportConfig};
use lockstep::netsim::harness::{Endpoint, Harness};
use lockstep::netsim::{LinkConfig, Network};
use lockstep::peer::{Agent, Autopilot, PeerBuilder, PeerEvent};
use relay::config::DesyncPolicy;
use replays::DesyncReport;
use sim::Simulation;

/// A game's `perturb_target`.
type PerturbTarget<S> = fn(&S, u32) -> Option<(String, u64, &'static str)>;

/// The truth: (section, id, field, majority value, odd value).
type Truth = (String, u64, String, Option<String>, Option<String>);

/// What a run of one game gives back (also for the heal tests).
pub(super) struct Run {
    pub(super) events: Vec<RouterEvent>,
    /// Every peer's (setup, executed turns' inputs) from its event log.
    logs: Vec<Vec<PeerEvent<()>>>,
    /// The truth: what the fault switch changed at the desync turn
    /// (section, id, field, majority value, odd value), from re-simulating a
    /// majority peer's inputs and perturbing a copy.
    truth: Option<Truth>,
    pub(super) ends: Vec<Option<EndReason>>,
    pub(super) stall_ms: Vec<f64>,
    /// Every peer's (last turn, hash) at the end.
    pub(super) finals: Vec<(Option<u32>, Option<String>)>,
    /// The perturbed peer's player id (seats follow join order).
    pub(super) perturbed: u8,
}

/// Runs `players` peers of game `S` (bots from `bot`), the last one
/// perturbed at `desync_at` by `perturb`, over links with `loss` each way.
#[allow(clippy::too_many_arguments)] // a test driver: every knob is used
pub(super) fn run<S, A>(
    players: u8,
    turns: u32,
    desync_at: u32,
    loss: f64,
    config: RelayConfig,
    ticks: u16,
    bot: fn(PlayerId, u64) -> A,
    perturb: fn(&mut S, Turn),
    target: PerturbTarget<S>,
) -> Run
where
    S: Simulation + Clone + 'static,
    A: Agent<S> + 'static,
{
    let start = Instant::from_millis(1);
    let server_addr = SocketAddr::from(([127, 0, 0, 1], 7000));
    let server = Server::new(TransportConfig::default(), [5; 32]);
    let mut relay = RelayNode::new(server, config, server_addr);
    let mut pilots: Vec<Autopilot<S, A>> = (0..players)
        .map(|i| {
            let mut b = PeerBuilder::<S>::new("f", players)
                .with_name(&format!("p{i}"))
                .with_turns(turns)
                .with_seed(90 + u64::from(i))
                .with_ticks_per_turn(ticks)
                .with_local_addr(SocketAddr::from(([127, 0, 0, 1], 7001 + u16::from(i))));
            if i + 1 == players {
                b = b.with_fault(Turn(desync_at), perturb);
            }
            let seed = 30 + u64::from(i);
            Autopilot::new(b.build(start, server_addr).unwrap(), move |p| bot(p, seed)).with_log()
        })
        .collect();
    let link = LinkConfig {
        latency: Duration::from_millis(20),
        jitter: Duration::from_millis(10),
        loss,
        ..LinkConfig::default()
    };
    let mut harness = Harness::new(Network::new(77, link)).with_start(start);
    {
        let mut nodes: Vec<&mut dyn Endpoint> = vec![&mut relay];
        nodes.extend(pilots.iter_mut().map(|p| p as &mut dyn Endpoint));
        let _ = harness.run(&mut nodes, Instant::from_millis(300_000));
    }
    let now = harness.now();
    relay.settle(now);
    let mut setup = None;
    let mut inputs: Vec<Vec<sim::Stamped<S::Command>>> = Vec::new();
    let mut logs = Vec::new();
    for (i, p) in pilots.iter_mut().enumerate() {
        p.pump(now);
        let log = p.take_log();
        let mut plain = Vec::new();
        for ev in log {
            match ev {
                PeerEvent::Started { setup: s, .. } if i == 0 => setup = Some(s),
                PeerEvent::TurnReady { inputs: got, .. } if i == 0 => inputs.push(got),
                PeerEvent::ForensicsAnswered { turn, kept } => {
                    plain.push(PeerEvent::ForensicsAnswered { turn, kept });
                }
                PeerEvent::DesyncDetails {
                    turn,
                    complete,
                    entities,
                } => plain.push(PeerEvent::DesyncDetails {
                    turn,
                    complete,
                    entities,
                }),
                _ => {}
            }
        }
        logs.push(plain);
    }
    let truth = setup.and_then(|setup| {
        let mut world = S::new(&setup);
        for (t, got) in inputs.iter().enumerate().take(desync_at as usize + 1) {
            world.step(Turn(t as u32), got);
        }
        let (section, id, field) = target(&world, desync_at)?;
        let mut odd = world.clone();
        perturb(&mut odd, Turn(desync_at));
        let value = |w: &S| {
            w.entity_fields(&section, id)?
                .into_iter()
                .find(|f| f.path == field)
                .map(|f| f.value)
        };
        Some((
            section.clone(),
            id,
            field.to_owned(),
            value(&world),
            value(&odd),
        ))
    });
    Run {
        perturbed: pilots.last().and_then(|p| p.peer().player()).unwrap().0,
        events: relay.events.clone(),
        logs,
        truth,
        ends: pilots.iter().map(|p| p.peer().summary(now).ended).collect(),
        stall_ms: pilots
            .iter()
            .map(|p| p.peer().summary(now).stall_ms)
            .collect(),
        finals: pilots
            .iter()
            .map(|p| {
                let s = p.peer().summary(now);
                (s.final_turn, s.final_hash)
            })
            .collect(),
    }
}

pub(super) fn report(events: &[RouterEvent]) -> &DesyncReport {
    events
        .iter()
        .find_map(|e| match e {
            RouterEvent::DesyncReport { report, .. } => Some(&**report),
            _ => None,
        })
        .expect("a desync report")
}

/// Turns closed between the desync being judged and its report: how long
/// the narrowing took, counted in turns the match went on meanwhile.
fn turns_to_report(events: &[RouterEvent]) -> usize {
    let judged = events
        .iter()
        .position(|e| matches!(e, RouterEvent::Desync { .. }))
        .expect("a desync");
    let done = events
        .iter()
        .position(|e| matches!(e, RouterEvent::DesyncReport { .. }))
        .expect("a report");
    events[judged..done]
        .iter()
        .filter(|e| matches!(e, RouterEvent::TurnClosed { .. }))
        .count()
}

/// The report names exactly one entity, the one the fault switch changed,
/// with exactly one field and both values.
fn assert_names_the_fault(r: &Run) {
    let odd = r.perturbed;
    let rep = report(&r.events);
    let (section, id, field, majority, odd_value) = r.truth.clone().expect("the truth");
    assert_eq!(rep.odd_players, vec![odd], "{rep:?}");
    assert!(!rep.no_majority);
    assert!(rep.complete, "{:?}", rep.notes);
    assert_eq!(rep.entities.len(), 1, "{:?}", rep.entities);
    let e = &rep.entities[0];
    assert_eq!((e.section.as_str(), e.id), (section.as_str(), id));
    assert_eq!(e.odd_player, odd);
    assert_eq!(e.fields.len(), 1, "{:?}", e.fields);
    assert_eq!(e.fields[0].path, field);
    assert_eq!(e.fields[0].majority, majority);
    assert_eq!(e.fields[0].odd, odd_value);
    assert_ne!(majority, odd_value);
    // The values are each peer's word (a dump is not its hash's preimage):
    // the report says so, in its JSON and its text alike.
    let marked = |n: &String| n.contains("not verified");
    assert_eq!(
        rep.notes.iter().filter(|n| marked(n)).count(),
        1,
        "{:?}",
        rep.notes
    );
    assert!(rep.to_text().contains("not verified"), "{}", rep.to_text());
    assert_every_peer_got_the_details(r);
}

/// Every player, the odd one too, got the narrowed entity and field as a
/// `PeerEvent::DesyncDetails`, exactly as the relay's report has them.
fn assert_every_peer_got_the_details(r: &Run) {
    let rep = report(&r.events);
    for (i, log) in r.logs.iter().enumerate() {
        let got: Vec<_> = log
            .iter()
            .filter_map(|e| match e {
                PeerEvent::DesyncDetails {
                    turn,
                    complete,
                    entities,
                } => Some((*turn, *complete, entities)),
                _ => None,
            })
            .collect();
        assert_eq!(got.len(), 1, "peer {i}: {got:?}");
        let (turn, complete, entities) = got[0];
        assert_eq!((turn, complete), (Turn(rep.turn), rep.complete), "peer {i}");
        let shown: Vec<_> = entities
            .iter()
            .map(|e| {
                let fields: Vec<_> = e
                    .fields
                    .iter()
                    .map(|f| (f.path.clone(), f.majority.clone(), f.odd.clone()))
                    .collect();
                (e.section.clone(), e.id, e.odd_player.0, fields)
            })
            .collect();
        let reported: Vec<_> = rep
            .entities
            .iter()
            .map(|e| {
                let fields: Vec<_> = e
                    .fields
                    .iter()
                    .map(|f| (f.path.clone(), f.majority.clone(), f.odd.clone()))
                    .collect();
                (e.section.clone(), e.id, e.odd_player, fields)
            })
            .collect();
        assert_eq!(shown, reported, "peer {i}");
    }
}

/// Under 10 % loss each way, the RTS's perturbed `hp` is reported exactly
/// within 30 turns of the desync being judged, the match plays to its end
/// (`continue`), and nobody stalls for the narrowing.
#[test]
fn rts_perturbed_field_is_reported_exactly_under_loss() {
    let r = run::<sim::game::World, sim::bot::Bot>(
        3,
        120,
        40,
        0.10,
        RelayConfig::default(),
        sim::game::DEFAULT_TICKS_PER_TURN,
        |p, seed| sim::bot::Bot::new(p, seed, 300),
        |w, t| w.perturb(t.0),
        sim::game::World::perturb_target,
    );
    assert_names_the_fault(&r);
    let n = turns_to_report(&r.events);
    assert!(n <= 30, "narrowing took {n} turns");
    eprintln!(
        "rts: narrowing took {n} turns under 10% loss; stall {:?} ms",
        r.stall_ms
    );
    assert!(
        r.ends.iter().all(|e| *e == Some(EndReason::Completed)),
        "{:?}",
        r.ends
    );
    // Two peers answered (the odd one and one majority member), from their history.
    let answered: Vec<usize> = r
        .logs
        .iter()
        .map(|l| {
            l.iter()
                .filter(|e| matches!(e, PeerEvent::ForensicsAnswered { kept: true, .. }))
                .count()
        })
        .collect();
    // The perturbed peer and one majority member: entity hashes, then dumps.
    let mut answered = answered;
    answered.sort_unstable();
    assert_eq!(answered, vec![0, 2, 2], "hash and dump answers per peer");
}

/// The arena (the second game, its own entities: ships by player) under
/// 10 % loss: the perturbed ship's field is reported exactly.
#[test]
fn arena_perturbed_field_is_reported_exactly_under_loss() {
    let r = run::<sim::arena::Arena, sim::arena::Bot>(
        3,
        120,
        50,
        0.10,
        RelayConfig::default(),
        sim::arena::DEFAULT_TICKS_PER_TURN,
        |p, seed| sim::arena::Bot::new(p, seed, sim::arena::BOT_APM),
        |w, t| w.perturb(t.0),
        sim::arena::Arena::perturb_target,
    );
    assert_names_the_fault(&r);
    assert!(turns_to_report(&r.events) <= 30);
}

/// Two players: no majority. The report says so, and still names the
/// entity and field that differ between the two sides.
#[test]
fn two_players_report_no_majority() {
    let r = run::<sim::game::World, sim::bot::Bot>(
        2,
        80,
        30,
        0.0,
        RelayConfig::default(),
        sim::game::DEFAULT_TICKS_PER_TURN,
        |p, seed| sim::bot::Bot::new(p, seed, 300),
        |w, t| w.perturb(t.0),
        sim::game::World::perturb_target,
    );
    let rep = report(&r.events);
    assert!(rep.no_majority);
    // With no majority, the "majority" side is the lowest player's.
    assert_eq!(
        (rep.majority_players.clone(), rep.odd_players.clone()),
        (vec![0], vec![1])
    );
    assert!(
        rep.to_text()
            .contains("no majority: the relay cannot tell who is odd")
    );
    assert_every_peer_got_the_details(&r);
    let (section, id, field, unperturbed, perturbed) = r.truth.clone().unwrap();
    assert_eq!(rep.entities.len(), 1);
    let e = &rep.entities[0];
    assert_eq!(
        (e.section.clone(), e.id, e.fields[0].path.clone()),
        (section, id, field)
    );
    let sides = (e.fields[0].majority.clone(), e.fields[0].odd.clone());
    if r.perturbed == 0 {
        assert_eq!(sides, (perturbed, unperturbed));
    } else {
        assert_eq!(sides, (unperturbed, perturbed));
    }
}

/// `--on-desync end`: the match ends for everyone with reason `Desync`,
/// after the report (which is complete), long before its 300 turns.
#[test]
fn on_desync_end_ends_the_match_after_the_report() {
    let config = RelayConfig {
        on_desync: DesyncPolicy::End,
        ..RelayConfig::default()
    };
    let r = run::<sim::game::World, sim::bot::Bot>(
        3,
        300,
        40,
        0.0,
        config,
        sim::game::DEFAULT_TICKS_PER_TURN,
        |p, seed| sim::bot::Bot::new(p, seed, 300),
        |w, t| w.perturb(t.0),
        sim::game::World::perturb_target,
    );
    assert_names_the_fault(&r);
    let report_at = r
        .events
        .iter()
        .position(|e| matches!(e, RouterEvent::DesyncReport { .. }))
        .unwrap();
    let end = r
        .events
        .iter()
        .position(|e| matches!(e, RouterEvent::MatchEnded { .. }))
        .unwrap();
    assert!(end > report_at);
    let RouterEvent::MatchEnded { turn, reason, .. } = &r.events[end] else {
        unreachable!()
    };
    assert_eq!(*reason, EndReason::Desync);
    assert!(turn.unwrap().0 < 100, "{turn:?}");
    assert!(
        r.ends.iter().all(|e| *e == Some(EndReason::Desync)),
        "{:?}",
        r.ends
    );
}
