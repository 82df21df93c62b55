//! The `rejoin` section: a player of a match is killed after some
//! play and restarted a few seconds later; it rejoins from the relay's
//! agreed snapshot. The match runs in virtual time on the `netsim` harness
//! (50 ms RTT; 5 % loss each way from the kill on), with the real relay,
//! transport and generic peers. Measured: time from reconnecting to caught
//! up, bytes the rejoiner received, the other players' stall over the rejoin
//! against a control run of the same match (same seeds, same loss, nobody
//! killed), and a spectator's join time; on the reference game after 5 and
//! 30 minutes (4 players) and on the 10,000-unit `melee` world (2 players,
//! snapshots of a few hundred KB). A second table shows what snapshot
//! uploads cost the players who upload them.

use super::scenario_game::{Scenario, ScenarioBot, Start};
use lockstep::low_level::transport::{Server, TransportConfig};
use lockstep::netsim::harness::{Endpoint, Harness};
use lockstep::netsim::{LinkConfig, Network};
use lockstep::peer::{Autopilot, PeerBuilder, PeerEvent};
use lockstep::{Duration, Instant};
use relay::RelayConfig;
use relay::endpoint::RelayEndpoint;
use sim::game::{Command, World};
use sim::{Agent, MatchSetup, PlayerId, Simulation};
use std::net::SocketAddr;

/// Units of the large world.
const ARMY_UNITS: u32 = 10_000;

/// The reference game's `melee` scenario with `ARMY_UNITS` units (two
/// armies attack-moving into each other, 2 players): a snapshot of about
/// 325 KB at the start, less as the armies die.
#[derive(Clone, Debug)]
pub struct MeleeStart;

impl Start for MeleeStart {
    const GAME_ID: &'static str = "lockstep-rts-melee-bench";
    fn world(setup: &MatchSetup) -> World {
        sim::scenarios::melee(ARMY_UNITS, setup.seed)
    }
}

/// The melee as a game of its own.
pub type Melee = Scenario<MeleeStart>;

/// A game the section plays: its world and its bot.
pub trait BenchGame: Simulation<Command = Command> + 'static {
    /// Players of its matches.
    const PLAYERS: u8;
    /// The bot playing it.
    type Bot: Agent<Self> + Send + 'static;
    /// The bot for `player`.
    fn bot(player: PlayerId, seed: u64) -> Self::Bot;
}

impl BenchGame for World {
    const PLAYERS: u8 = 4;
    type Bot = sim::bot::Bot;
    fn bot(player: PlayerId, seed: u64) -> Self::Bot {
        sim::bot::Bot::new(player, seed, 300)
    }
}

impl BenchGame for Melee {
    const PLAYERS: u8 = 2;
    type Bot = ScenarioBot<MeleeStart>;
    fn bot(player: PlayerId, seed: u64) -> Self::Bot {
        ScenarioBot::new(player, seed, 300)
    }
}

type Pilot<S> = Autopilot<S, <S as BenchGame>::Bot>;

/// One rejoin measured, with its control run.
#[derive(Clone, Debug)]
pub struct RejoinFigures {
    /// The world played.
    pub world: &'static str,
    /// Players of the match.
    pub players: u8,
    /// Seconds played before the kill.
    pub played_s: u64,
    /// The relay's agreed snapshot when the player came back (bytes).
    pub snapshot_bytes: usize,
    /// From the restarted peer's connect to caught up with the live turn.
    pub rejoin_ms: f64,
    /// Bytes the rejoiner received until caught up (transport datagrams).
    pub bytes: u64,
    /// Turns it fast-forwarded (snapshot turn to the live turn).
    pub turns_replayed: u32,
    /// The largest stall of another player between the kill and the end.
    pub others_stall_ms: f64,
    /// The same in the control run (nobody killed).
    pub control_stall_ms: f64,
    /// `others_stall_ms - control_stall_ms` on each of `NET_SEEDS`.
    pub stall_diffs: Vec<f64>,
    /// From a spectator's connect to its first simulated turn.
    pub spectator_ms: f64,
    /// Whether the rejoiner's and the spectator's final hashes were the players'.
    pub agreed: bool,
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn pilot<S: BenchGame>(at: Instant, i: u64, b: PeerBuilder<S>) -> Pilot<S> {
    let b = b
        .with_turns(0)
        .with_seed(100 + i)
        .with_ticks_per_turn(sim::game::DEFAULT_TICKS_PER_TURN)
        .with_local_addr(addr(7001 + i as u16));
    Autopilot::new(b.build(at, addr(7000)).expect("valid peer"), move |p| {
        S::bot(p, 40 + i)
    })
    // Orders at a random instant within the turn, as a player's clicks: a
    // bot answering at once would make every latency a whole number of turns.
    .with_reaction(Duration::from_millis(100), 900 + i)
    .with_log()
}

fn run_nodes<S: BenchGame>(
    h: &mut Harness,
    relay: &mut RelayEndpoint,
    peers: &mut [&mut Pilot<S>],
    until: Instant,
) {
    let mut nodes: Vec<&mut dyn Endpoint> = vec![relay];
    for p in peers.iter_mut() {
        nodes.push(&mut **p);
    }
    let _ = h.run_until(&mut nodes, until, |_, _| false);
}

fn relay_endpoint(snapshot_every: u32) -> RelayEndpoint {
    let mut config = RelayConfig {
        silence_timeout: Duration::from_secs(5),
        ..RelayConfig::default()
    };
    config.rejoin.snapshot_every = snapshot_every;
    RelayEndpoint::new(
        Server::new(TransportConfig::default(), [7; 32]),
        config,
        addr(7000),
    )
}

/// 25 ms each way: 50 ms RTT.
fn clean_link() -> LinkConfig {
    LinkConfig::with_latency(Duration::from_millis(25))
}

/// How long after the kill both runs are compared: the 6 s absence, up to
/// 20 s to catch up, then a minute of play.
const WINDOW: Duration = Duration::from_secs(6 + 20 + 60);

/// Network seeds of the runs: each gives the loss another pattern.
const NET_SEEDS: [u64; 3] = [12, 13, 14];

/// Measures one rejoin after `played` of play, and the same match without
/// it, on each of `NET_SEEDS`; the figures are the first seed's, the
/// stall difference is over all of them.
#[must_use]
pub fn measure<S: BenchGame>(world: &'static str, played: Duration) -> RejoinFigures {
    let mut runs = NET_SEEDS.iter().map(|&seed| {
        let control = run_rejoin::<S>(played, false, seed).others_stall_ms;
        (control, run_rejoin::<S>(played, true, seed))
    });
    let Some((control_stall_ms, first)) = runs.next() else {
        unreachable!("NET_SEEDS is not empty")
    };
    let mut stall_diffs = vec![first.others_stall_ms - control_stall_ms];
    let mut agreed = first.agreed;
    for (control, r) in runs {
        stall_diffs.push(r.others_stall_ms - control);
        agreed &= r.agreed;
    }
    RejoinFigures {
        world,
        control_stall_ms,
        stall_diffs,
        agreed,
        ..first
    }
}

/// One run: the last player is killed after `played` and (if `rejoin`)
/// comes back 6 s later with a spectator; otherwise it plays on (the control run).
fn run_rejoin<S: BenchGame>(played: Duration, rejoin: bool, net_seed: u64) -> RejoinFigures {
    let start = Instant::from_millis(1);
    let mut relay = relay_endpoint(relay::rejoin_config::DEFAULT_SNAPSHOT_EVERY);
    let n = S::PLAYERS;
    let last = usize::from(n - 1);
    let mut players: Vec<Pilot<S>> = (0..u64::from(n))
        .map(|i| {
            pilot(
                start,
                i,
                PeerBuilder::new("bench", n).with_name(&format!("p{i}")),
            )
        })
        .collect();
    let clean = clean_link();
    let mut h = Harness::new(Network::new(net_seed, clean)).with_start(start);
    let kill_at = start + played;
    {
        let mut refs: Vec<&mut Pilot<S>> = players.iter_mut().collect();
        run_nodes(&mut h, &mut relay, &mut refs, kill_at);
    }
    let secret = players[last]
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
    let end = h.now() + WINDOW;
    let others = if rejoin { last } else { last + 1 };
    // The player is gone for 6 s: dropped after the 5 s silence, slot held.
    let back_at = h.now() + Duration::from_secs(6);
    {
        let mut refs: Vec<&mut Pilot<S>> = players.iter_mut().take(others).collect();
        run_nodes(&mut h, &mut relay, &mut refs, back_at);
    }
    let snapshot_bytes = relay.router.snapshot_memory().0;
    let rejoin_build = PeerBuilder::new("bench", n).with_rejoin(secret.0, secret.1);
    let mut rejoiner = pilot(h.now(), 10, rejoin_build);
    let spectate = PeerBuilder::new("bench", n).with_spectate();
    let mut spectator = pilot(h.now(), 11, spectate);
    let joined = h.now();
    let (mut caught, mut first_spectated, mut restored_turn, mut live_turn) =
        (None, None, None, None);
    let catch_up_by = joined + Duration::from_secs(20);
    while rejoin && h.now() < catch_up_by && (caught.is_none() || first_spectated.is_none()) {
        let step_to = h.now() + Duration::from_millis(20);
        {
            let mut refs: Vec<&mut Pilot<S>> = players.iter_mut().take(last).collect();
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
    // Play on to the end of the window, then compare.
    {
        let mut refs: Vec<&mut Pilot<S>> = players.iter_mut().take(others).collect();
        if rejoin {
            refs.push(&mut rejoiner);
            refs.push(&mut spectator);
        }
        run_nodes(&mut h, &mut relay, &mut refs, end);
    }
    let now = h.now();
    let others_stall_ms = players
        .iter()
        .take(last)
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
        world: "",
        players: n,
        played_s: played.as_millis() / 1000,
        snapshot_bytes,
        rejoin_ms: ms(caught),
        bytes,
        turns_replayed: live_turn
            .zip(restored_turn)
            .map_or(0, |(l, r)| l.0.saturating_sub(r.0)),
        others_stall_ms,
        control_stall_ms: f64::NAN,
        stall_diffs: Vec::new(),
        spectator_ms: ms(first_spectated),
        agreed,
    }
}

/// What the snapshot uploads cost the players, in one configuration.
#[derive(Clone, Debug)]
pub struct UploadFigures {
    /// The configuration, as the table shows it.
    pub label: &'static str,
    /// Snapshots the relay asked for every this many turns (0: none).
    pub snapshot_every: u32,
    /// Snapshots uploaded by the players, all together.
    pub uploaded: u32,
    /// Snapshots the relay kept (their hash was the agreed one).
    pub agreed: u64,
    /// The size of the latest one it kept.
    pub last_agreed_bytes: usize,
    /// Turn latency of the players: the worst player's median.
    pub latency_p50_ms: f64,
    /// The worst player's 99th percentile.
    pub latency_p99_ms: f64,
    /// The largest stall of a player over the match.
    pub stall_ms: f64,
}

/// A 2-player match of [`Melee`] played for `played` at 5 % loss each way,
/// with snapshot uploads every `snapshot_every` turns (each player uploads
/// in turn) paced by `pacing` (`None`: the defaults).
#[must_use]
pub fn measure_uploads(
    label: &'static str,
    played: Duration,
    snapshot_every: u32,
    pacing: Option<(usize, Duration)>,
) -> UploadFigures {
    let start = Instant::from_millis(1);
    let mut relay = relay_endpoint(snapshot_every);
    let n = Melee::PLAYERS;
    let mut players: Vec<Pilot<Melee>> = (0..u64::from(n))
        .map(|i| {
            let mut b = PeerBuilder::new("bench", n).with_name(&format!("p{i}"));
            if let Some((chunk, interval)) = pacing {
                b = b.with_upload_pacing(chunk, interval);
            }
            pilot(start, i, b)
        })
        .collect();
    let lossy = LinkConfig {
        loss: 0.05,
        ..clean_link()
    };
    let mut h = Harness::new(Network::new(12, lossy)).with_start(start);
    {
        let mut refs: Vec<&mut Pilot<Melee>> = players.iter_mut().collect();
        run_nodes(&mut h, &mut relay, &mut refs, start + played);
    }
    let now = h.now();
    let summaries: Vec<_> = players.iter().map(|p| p.peer().summary(now)).collect();
    let max = |f: &dyn Fn(&lockstep::peer::PeerSummary) -> f64| {
        summaries.iter().map(f).fold(0.0, f64::max)
    };
    UploadFigures {
        label,
        snapshot_every,
        uploaded: summaries.iter().map(|s| s.snapshots_uploaded).sum(),
        agreed: relay.router.counters().snapshots_agreed,
        last_agreed_bytes: relay.router.snapshot_memory().0,
        latency_p50_ms: max(&|s| s.turn_latency_ms.p50),
        latency_p99_ms: max(&|s| s.turn_latency_ms.p99),
        stall_ms: max(&|s| s.stall_ms),
    }
}

/// Runs every measurement of the section (progress on stderr) and returns its text.
#[must_use]
pub fn section() -> String {
    let mut rejoins = Vec::new();
    for minutes in [5, 30] {
        eprintln!("[rejoin] a rejoin after {minutes} minutes of play and its control run");
        rejoins.push(measure::<World>(
            "reference game",
            Duration::from_secs(minutes * 60),
        ));
    }
    eprintln!("[rejoin] a rejoin into the 10,000-unit world and its control run");
    rejoins.push(measure::<Melee>(
        "10,000-unit melee",
        Duration::from_secs(30),
    ));
    let played = Duration::from_secs(60);
    let mut uploads = Vec::new();
    for (label, every, pacing) in [
        ("no snapshots", 0, None),
        (
            "every 100 turns, 32 KiB chunks at once (default)",
            100,
            None,
        ),
        ("every 20 turns, 32 KiB chunks at once", 20, None),
        (
            "every 100 turns, 960 B every 50 ms (old default)",
            100,
            Some((960, Duration::from_millis(50))),
        ),
    ] {
        eprintln!("[rejoin] uploads: {label}");
        uploads.push(measure_uploads(label, played, every, pacing));
    }
    markdown(&rejoins, &uploads, played)
}

/// The section's text.
#[must_use]
pub fn markdown(figures: &[RejoinFigures], uploads: &[UploadFigures], played: Duration) -> String {
    let mut s = String::from(
        "The last player of a match (reference-game bots at 300 APM answering at a random \
         instant within the turn, 100 ms turns, agreed snapshot every 100 turns) is killed \
         after the given play time and restarted 6 s later (dropped after the 5 s silence, slot \
         held); it rejoins with its secret, restores the relay's agreed snapshot and \
         fast-forwards. A spectator joins at the same moment. Worlds: the reference game's \
         standard map (4 players), and `sim::scenarios::melee(10_000, ..)` (2 players, two \
         armies of 5,000 units attack-moving into each other; the snapshot shrinks as they \
         die). Virtual time on the `netsim` harness with the real relay, transport and \
         generic peers: 25 ms each way (50 ms RTT), 5 % loss each way from the kill on. \
         `snapshot` is the agreed snapshot the rejoin started from; `caught up` is from the \
         restarted peer's connect to its `CaughtUp`; `bytes` what it received until then; \
         `others' stall` the largest stall of a remaining player from the kill to 86 s later; \
         `control` the same in a run of the same match (same seeds, same loss) where nobody is \
         killed, so `rejoin − control` is what the rejoin costs the others (goal: 0): the \
         median over 3 network seeds (min–max), the other columns are the first seed's (the \
         two runs send different packets, so the loss falls differently: a few hundred ms \
         either way over 86 s is that noise, of either sign); \
         `spectator` from its connect to its first simulated turn (it then plays 3 s behind \
         live).\n\n\
         | world | players | played | snapshot | caught up | bytes | turns fast-forwarded | others' stall | control | rejoin − control | spectator | hashes |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for f in figures {
        let played = if f.played_s % 60 == 0 {
            format!("{} min", f.played_s / 60)
        } else {
            format!("{} s", f.played_s)
        };
        s.push_str(&format!(
            "| {} | {} | {} | {} | {:.0} ms | {} | {} | {:.0} ms | {:.0} ms | {} | {:.0} ms | {} |\n",
            f.world,
            f.players,
            played,
            f.snapshot_bytes,
            f.rejoin_ms,
            f.bytes,
            f.turns_replayed,
            f.others_stall_ms,
            f.control_stall_ms,
            spread(&f.stall_diffs),
            f.spectator_ms,
            if f.agreed { "agree" } else { "DIFFER" }
        ));
    }
    s.push_str(&format!(
        "\n### What snapshot uploads cost the uploader\n\n\
         A 2-player match of the 10,000-unit melee played for {} s at 5 % loss each way \
         (50 ms RTT), same seeds in every row; the relay asks the players in turn for a \
         snapshot, so both upload (`last agreed`: the size of the latest snapshot the relay \
         kept; the first ones are larger, the armies are whole). Every 20 turns, a snapshot \
         upload is under way most of the time. The upload goes on the transport's bulk \
         path (turn traffic first, its own pacing budget); the old default cut it into 960-byte \
         chunks sent every 50 ms. Latency is from a command's submit to its turn being ready \
         on the same peer, the worst player's; stall the largest of a player over the match.\n\n\
         | uploads | snapshots uploaded | agreed | last agreed | turn latency p50 | turn latency p99 | stall |\n\
         |---|---|---|---|---|---|---|\n",
        played.as_millis() / 1000
    ));
    for u in uploads {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {:.1} ms | {:.1} ms | {:.0} ms |\n",
            u.label,
            u.uploaded,
            u.agreed,
            u.last_agreed_bytes,
            u.latency_p50_ms,
            u.latency_p99_ms,
            u.stall_ms
        ));
    }
    s
}

/// `median (min–max)` of signed milliseconds.
fn spread(v: &[f64]) -> String {
    // `+ 0.0` turns a negative zero into zero ("-0 ms" reads as a loss).
    let mut v: Vec<f64> = v.iter().map(|x| x.round() + 0.0).collect();
    v.sort_by(f64::total_cmp);
    match (v.first(), v.get(v.len() / 2), v.last()) {
        (Some(lo), Some(mid), Some(hi)) => format!("{mid:+.0} ms ({lo:+.0}–{hi:+.0})"),
        _ => "–".to_owned(),
    }
}
