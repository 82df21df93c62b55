//! Issue 42 in real processes: a 32-player match of release `peer`
//! processes (each from its own 127.0.0.x) through the release `relay
//! serve`, played in rounds on the same seeds: without spectators, with
//! waves of `peer --spectate` processes joining and being SIGKILLed
//! through the match, and with the same waves at idle CPU priority.
//! Measured per run: the players' turn latency (`peer --json`'s
//! `turn_latency_ms`), the relay's CPU and peak resident set, the
//! players', the spectators' and the machine's CPU, completions and
//! whether the final hashes agreed.

use super::relay_procs::{clock_ticks_per_sec, process_ticks, read_machine_ticks};
use super::stats::{Summary, percentile};
use crate::harness::{
    Bins, PeerSpec, Proc, Relay, peer_args, proc_status_kib, progress_turn, try_finish_peer,
    try_peer,
};
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

/// Players per match: the engine's most.
pub const PLAYERS: u8 = sim::MAX_PLAYERS;
/// Turn length (the relay's default).
pub const TURN_MS: u64 = 100;
/// The first wave of spectators joins once the relay closed this turn
/// (after the first 5 s, from which `peer` counts its steady-state latency).
pub const FIRST_WAVE_TURN: u32 = 60;
/// The last wave joins at least this many turns before the end, so that it
/// watches to the end.
const LAST_WAVE_TAIL: u32 = 40;
/// The CPU window: from this turn closed to `turns - CPU_TAIL` closed.
const CPU_FROM_TURN: u32 = 50;
const CPU_TAIL: u32 = 10;
/// How long any one wait may take before the run is reported failed.
const WAIT: Duration = Duration::from_secs(180);
/// CPU (percent of one core) from which a side counts as saturated.
const SATURATED: f64 = 90.0;

/// The shape of a run: turns and spectator waves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Turns of the match.
    pub turns: u32,
    /// Spectator processes per wave.
    pub per_wave: usize,
    /// Turns between two waves.
    pub wave_turns: u32,
    /// Runs of each condition, alternating (without, with, without, ...),
    /// so that each pair shares the machine's load of its minute.
    pub pairs: usize,
}

impl Plan {
    /// `quick`: 300 turns (30 s), a wave of 16 every 60 turns, 2 pairs of
    /// runs; otherwise 600 turns (60 s), a wave of 24 every 100 turns, 3 pairs.
    #[must_use]
    pub const fn new(quick: bool) -> Self {
        if quick {
            Self {
                turns: 300,
                per_wave: 16,
                wave_turns: 60,
                pairs: 2,
            }
        } else {
            Self {
                turns: 600,
                per_wave: 24,
                wave_turns: 100,
                pairs: 3,
            }
        }
    }

    /// The turns at which the waves join (each wave but the last is
    /// SIGKILLed when the next one joins; the last stays to the end).
    #[must_use]
    pub fn wave_turns(&self) -> Vec<u32> {
        (0..)
            .map(|w| FIRST_WAVE_TURN + w * self.wave_turns)
            .take_while(|t| t + LAST_WAVE_TAIL < self.turns)
            .collect()
    }
}

/// What one condition (with or without spectators) measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConditionFigures {
    /// Spectator processes started.
    pub spectators_started: usize,
    /// Of those, SIGKILLed before the end.
    pub spectators_killed: usize,
    /// Of the killed ones, those that had been watching (stepping turns).
    pub killed_while_watching: usize,
    /// Spectators of the last wave that exited 0 having watched every turn.
    pub spectators_completed: usize,
    /// Players that exited 0 having played every turn.
    pub players_completed: usize,
    /// Distinct final hashes among the players and the spectators that
    /// completed (one that did not ended on an earlier turn's hash).
    pub distinct_hashes: usize,
    /// Players the relay dropped.
    pub players_dropped: usize,
    /// Each drop as the relay logged it: `P<player> at turn <t>: <reason>`.
    pub drops: Vec<String>,
    /// Per player: turn latency p50 (commands after the first 5 s), ms.
    pub p50_ms: Vec<f64>,
    /// Per player: turn latency p99, ms.
    pub p99_ms: Vec<f64>,
    /// Per player: total stall over the match, ms.
    pub stall_ms: Vec<f64>,
    /// The relay's CPU over the window, percent of one core.
    pub relay_cpu_pct: f64,
    /// The 32 players' CPU over the window, summed, percent of one core.
    pub players_cpu_pct: f64,
    /// The spectators' CPU over the window (all of them joined within it),
    /// summed, percent of one core.
    pub spectators_cpu_pct: f64,
    /// The bench's own process over the window (its threads reading the
    /// children's output), percent of one core.
    pub bench_cpu_pct: f64,
    /// The machine's CPU over the window, percent of all its cores (other
    /// work included).
    pub machine_cpu_pct: f64,
    /// The relay's peak resident set (`VmHWM`) at the end, KiB.
    pub relay_peak_rss_kib: Option<u64>,
    /// From starting the first player to the last player's exit, s.
    pub wall_s: f64,
}

impl ConditionFigures {
    /// Whether every player completed and all (with the stayed
    /// spectators) ended on one hash.
    #[must_use]
    pub fn agreed(&self) -> bool {
        self.players_completed == usize::from(PLAYERS) && self.distinct_hashes == 1
    }

    /// The median over players of their p99, ms.
    #[must_use]
    pub fn median_p99(&self) -> f64 {
        percentile(&self.p99_ms, 50.0)
    }

    /// The worst player's p99, ms.
    #[must_use]
    pub fn worst_p99(&self) -> f64 {
        self.p99_ms.iter().copied().fold(f64::NAN, f64::max)
    }

    /// The machine's CPU that was neither the relay's, the players', the
    /// spectators' nor the bench's (other jobs on the machine), percent of
    /// one core, on a machine of `cores` cores.
    #[must_use]
    pub fn other_cpu_pct(&self, cores: f64) -> f64 {
        (self.machine_cpu_pct * cores
            - self.relay_cpu_pct
            - self.players_cpu_pct
            - self.spectators_cpu_pct
            - self.bench_cpu_pct)
            .max(0.0)
    }
}

/// Both conditions of one run.
#[derive(Clone, Debug, PartialEq)]
pub struct BigProcsFigures {
    /// Turns, waves and spectators per wave.
    pub plan: Plan,
    /// The relay's event loops (one per core).
    pub relay_threads: usize,
    /// Without spectators, one per pair.
    pub quiet: Vec<ConditionFigures>,
    /// With waves of spectators joining and leaving, one per pair (the
    /// run right after the same index of `quiet`).
    pub churn: Vec<ConditionFigures>,
    /// The same waves under `SCHED_IDLE`, one per pair (the run right
    /// after the same index of `churn`); empty where `chrt --idle` fails.
    pub churn_idle: Vec<ConditionFigures>,
}

impl BigProcsFigures {
    /// Per pair, how far the spectators (`runs`: [`Self::churn`] or
    /// [`Self::churn_idle`]) moved the players' p99, in turns: (median over
    /// players, worst player).
    #[must_use]
    pub fn p99_moved_turns(&self, runs: &[ConditionFigures]) -> Vec<(f64, f64)> {
        let t = TURN_MS as f64;
        self.quiet
            .iter()
            .zip(runs)
            .map(|(q, c)| {
                (
                    (c.median_p99() - q.median_p99()) / t,
                    (c.worst_p99() - q.worst_p99()) / t,
                )
            })
            .collect()
    }
}

/// Player `i`'s source address: 127.0.0.10 to 127.0.0.41.
fn player_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, 10 + (i % 200) as u8)
}

/// Spectator `k` of wave `w`: 127.0.(1 + w).(10 + k), a host of its own,
/// so that killed spectators not yet timed out never fill a host's quota.
fn spectator_ip(w: usize, k: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 1 + (w % 250) as u8, 10 + (k % 240) as u8)
}

fn spec(relay: SocketAddr, turns: u32, seed: u64, bind: Ipv4Addr, spectate: bool) -> PeerSpec {
    PeerSpec {
        relay,
        match_name: "big".to_owned(),
        players: PLAYERS,
        turns,
        seed,
        extra: Vec::new(),
    }
    .from_address(bind, spectate)
}

/// Whether spectator `p` has printed a progress line past turn 0 (it had
/// its world and stepped it), reading only what it printed so far.
fn was_watching(p: &mut Proc) -> bool {
    p.try_wait_line("a progress line past turn 0", Duration::ZERO, |l| {
        (progress_turn(&l.text)? > 0).then_some(())
    })
    .is_ok()
}

/// CPU ticks of the relay, of the players (summed) and of the machine
/// (busy, total) at one moment.
struct Ticks {
    relay: u64,
    players: u64,
    bench: u64,
    machine: (u64, u64),
    at: Instant,
}

impl Ticks {
    fn read(relay: &Relay, players: &[Proc]) -> Self {
        Self {
            relay: process_ticks(relay.proc.pid()).unwrap_or(0),
            players: players
                .iter()
                .map(|p| process_ticks(p.pid()).unwrap_or(0))
                .sum(),
            bench: process_ticks(std::process::id()).unwrap_or(0),
            machine: read_machine_ticks().unwrap_or((0, 0)),
            at: Instant::now(),
        }
    }
}

/// Whether a run has spectators, and how they share the CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spectators {
    /// No spectators.
    None,
    /// Waves of spectators at the players' own priority: on these 2 cores
    /// their simulation competes with the players'.
    Equal,
    /// The same waves under `chrt --idle 0` (`SCHED_IDLE`): they run only
    /// on CPU the players leave, as if they were on other machines; what
    /// they still cost the players is the relay's work for them.
    Idle,
}

impl Spectators {
    fn tag(self) -> &'static str {
        match self {
            Self::None => "quiet",
            Self::Equal => "churn",
            Self::Idle => "churn-idle",
        }
    }
}

/// Starts spectator `sp`, under `chrt --idle 0` when `idle`.
fn spectator(bins: &Bins, sp: &PeerSpec, idle: bool) -> Result<Proc, String> {
    if !idle {
        return try_peer(&bins.peer, sp);
    }
    let mut args = vec!["--idle".to_owned(), "0".to_owned()];
    args.push(bins.peer.display().to_string());
    args.extend(peer_args(sp));
    Proc::try_spawn(
        &format!("peer{}", sp.seed),
        std::path::Path::new("chrt"),
        &args,
    )
}

/// Whether `chrt --idle` can start a program here.
fn chrt_idle_works() -> bool {
    std::process::Command::new("chrt")
        .args(["--idle", "0", "true"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// One match: 32 players, and the plan's waves of spectators unless
/// `spectators` is [`Spectators::None`].
fn run(bins: &Bins, plan: Plan, spectators: Spectators) -> Result<ConditionFigures, String> {
    let tag = spectators.tag();
    let dir = std::env::temp_dir().join(format!("lockstep-bench-big-{}-{tag}", std::process::id()));
    // A leftover of an earlier run with the same pid is stale.
    let _ = std::fs::remove_dir_all(&dir);
    let turn_ms = TURN_MS.to_string();
    let mut relay = Relay::try_start(&bins.relay, &dir, &["--turn-ms", &turn_ms])?;
    let started = Instant::now();
    let mut players = Vec::new();
    for i in 0..usize::from(PLAYERS) {
        let sp = spec(relay.addr, plan.turns, i as u64 + 1, player_ip(i), false);
        players.push(try_peer(&bins.peer, &sp)?);
    }
    let mut f = ConditionFigures::default();
    relay.try_wait_turn_closed(u64::from(CPU_FROM_TURN), WAIT)?;
    let before = Ticks::read(&relay, &players);
    let mut alive: Vec<Proc> = Vec::new();
    // CPU ticks of the spectators killed so far (each read just before its kill).
    let mut spectator_ticks = 0;
    if spectators != Spectators::None {
        for (w, at) in plan.wave_turns().into_iter().enumerate() {
            relay.try_wait_turn_closed(u64::from(at), WAIT)?;
            for mut p in alive.drain(..) {
                f.killed_while_watching += usize::from(was_watching(&mut p));
                spectator_ticks += process_ticks(p.pid()).unwrap_or(0);
                p.kill();
                f.spectators_killed += 1;
            }
            for k in 0..plan.per_wave {
                let seed = 1000 + (w * plan.per_wave + k) as u64;
                let sp = spec(relay.addr, plan.turns, seed, spectator_ip(w, k), true);
                alive.push(spectator(bins, &sp, spectators == Spectators::Idle)?);
                f.spectators_started += 1;
            }
            replays::err_println!(
                "[big] wave {} of {} spectators joined at turn {at}",
                w + 1,
                plan.per_wave
            );
        }
    }
    relay.try_wait_turn_closed(u64::from(plan.turns - CPU_TAIL), WAIT)?;
    let after = Ticks::read(&relay, &players);
    spectator_ticks += alive
        .iter()
        .map(|p| process_ticks(p.pid()).unwrap_or(0))
        .sum::<u64>();
    let secs = after.at.duration_since(before.at).as_secs_f64().max(1e-9);
    let hz = clock_ticks_per_sec();
    let pct = |ticks: u64| ticks as f64 / hz / secs * 100.0;
    f.relay_cpu_pct = pct(after.relay.saturating_sub(before.relay));
    f.players_cpu_pct = pct(after.players.saturating_sub(before.players));
    f.spectators_cpu_pct = pct(spectator_ticks);
    f.bench_cpu_pct = pct(after.bench.saturating_sub(before.bench));
    let busy = after.machine.0.saturating_sub(before.machine.0) as f64;
    let total = after.machine.1.saturating_sub(before.machine.1) as f64;
    f.machine_cpu_pct = if total > 0.0 {
        busy / total * 100.0
    } else {
        0.0
    };

    let mut hashes = BTreeSet::new();
    for p in &mut players {
        let r = try_finish_peer(p, WAIT)?;
        let s = &r.summary;
        if r.code == Some(0)
            && s["completed"] == true
            && s["turns"].as_u64() == Some(u64::from(plan.turns))
        {
            f.players_completed += 1;
            hashes.insert(s["final_hash"].to_string());
        }
        f.p50_ms.extend(s["turn_latency_ms"]["p50"].as_f64());
        f.p99_ms.extend(s["turn_latency_ms"]["p99"].as_f64());
        f.stall_ms.extend(s["stall_ms"].as_f64());
    }
    f.wall_s = started.elapsed().as_secs_f64();
    for p in &mut alive {
        let r = try_finish_peer(p, WAIT)?;
        let s = &r.summary;
        if r.code == Some(0)
            && s["completed"] == true
            && s["final_turn"].as_u64() == Some(u64::from(plan.turns - 1))
        {
            f.spectators_completed += 1;
            hashes.insert(s["final_hash"].to_string());
        } else {
            replays::err_println!("[big] a spectator did not complete: {s}");
        }
    }
    f.distinct_hashes = hashes.len();
    relay.try_wait_event("the recording closed", WAIT, |v| v["event"] == "recorded")?;
    let dropped = relay.events_of("dropped");
    f.players_dropped = dropped.len();
    f.drops = dropped
        .iter()
        .map(|v| format!("P{} at turn {}: {}", v["player"], v["turn"], v["reason"]))
        .collect();
    for d in &f.drops {
        replays::err_println!("[big] {tag}: dropped {d}");
    }
    f.relay_peak_rss_kib = proc_status_kib(relay.proc.pid(), "VmHWM");
    relay.proc.kill();
    let _ = std::fs::remove_dir_all(&dir);
    replays::err_println!(
        "[big] {tag}: {}/{} players completed, {} hash(es), relay {:.0} % CPU, p99 median {:.0} ms",
        f.players_completed,
        PLAYERS,
        f.distinct_hashes,
        f.relay_cpu_pct,
        f.median_p99()
    );
    Ok(f)
}

/// Plays the 32-player match without spectators, then with waves of them,
/// then with the same waves under `SCHED_IDLE` (where `chrt --idle`
/// works), `plan.pairs` times.
///
/// # Errors
/// When the binaries cannot be found or built, a process does not start,
/// or a wait times out.
pub fn measure(quick: bool) -> Result<BigProcsFigures, String> {
    let bins = super::relay_procs::release_bins()?;
    let plan = Plan::new(quick);
    let idle = chrt_idle_works();
    let (mut quiet, mut churn, mut churn_idle) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..plan.pairs {
        quiet.push(run(&bins, plan, Spectators::None)?);
        churn.push(run(&bins, plan, Spectators::Equal)?);
        if idle {
            churn_idle.push(run(&bins, plan, Spectators::Idle)?);
        }
    }
    Ok(BigProcsFigures {
        plan,
        relay_threads: relay::serve::default_threads(),
        quiet,
        churn,
        churn_idle,
    })
}

/// Which side used the cores, from the runs with spectators (medians).
fn saturation(f: &BigProcsFigures) -> String {
    let cores = f.relay_threads as f64;
    let median = |runs: &[ConditionFigures], v: &dyn Fn(&ConditionFigures) -> f64| {
        Summary::of(&runs.iter().map(v).collect::<Vec<_>>()).map_or(f64::NAN, |s| s.median)
    };
    let machine = median(&f.churn, &|c| c.machine_cpu_pct);
    let relay = median(&f.churn, &|c| c.relay_cpu_pct);
    let players = median(&f.churn, &|c| c.players_cpu_pct);
    let spectators = median(&f.churn, &|c| c.spectators_cpu_pct);
    let bench = median(&f.churn, &|c| c.bench_cpu_pct);
    let other = median(&f.churn, &|c| c.other_cpu_pct(cores));
    let mut text = format!(
        "With spectators the machine was {machine:.0} % busy (of {cores:.0} cores, {:.0} % \
         of one core; medians of the runs): the 32 players {players:.0} % together, the \
         spectators {spectators:.0} %, the relay {relay:.0} %, the bench process {bench:.0} %, \
         other jobs on the machine about {other:.0} %. ",
        machine * cores,
    );
    if relay >= SATURATED * cores {
        text.push_str("The relay saturated its event loops.");
    } else if machine >= SATURATED && other > players + spectators {
        text.push_str(
            "The cores were saturated, mostly by work outside the bench's processes (the \
             machine is shared): the latency figures carry that noise, which the alternating \
             pairs share; the relay was far from saturated.",
        );
    } else if machine >= SATURATED {
        text.push_str(
            "The cores were saturated by the peer processes (each player and each spectator \
             simulates the whole 32-player world; a spectator also fast-forwards from the \
             relay's snapshot when it joins), not by the relay.",
        );
    } else {
        text.push_str("No side saturated the cores.");
    }
    text
}

/// One row of the table.
fn row(md: &mut String, run: usize, label: &str, c: &ConditionFigures, cores: f64) {
    let median = |v: &[f64]| Summary::of(v).map_or(f64::NAN, |s| s.median);
    let stayed = if c.spectators_started > 0 {
        format!(
            "{}/{}",
            c.spectators_completed,
            c.spectators_started - c.spectators_killed
        )
    } else {
        "-".to_owned()
    };
    let _ = writeln!(
        md,
        "| {run} | {label} | {} ({}, {}) | {}/{PLAYERS} | {stayed} | {} | {} | {:.1} | {:.1} | \
         {:.1} | {:.0} | {:.1} | {:.0} | {:.0} | {:.1} | {:.0} | {:.0} | {} | {:.1} |",
        c.spectators_started,
        c.spectators_killed,
        c.killed_while_watching,
        c.players_completed,
        if c.agreed() { "yes" } else { "no" },
        c.players_dropped,
        median(&c.p50_ms),
        c.median_p99(),
        c.worst_p99(),
        median(&c.stall_ms),
        c.relay_cpu_pct,
        c.players_cpu_pct,
        c.spectators_cpu_pct,
        c.bench_cpu_pct,
        c.other_cpu_pct(cores),
        c.machine_cpu_pct,
        c.relay_peak_rss_kib
            .map_or_else(|| "-".to_owned(), |k| format!("{:.1}", k as f64 / 1024.0)),
        c.wall_s,
    );
}

/// One sentence: how far `runs` moved the players' p99, pair by pair.
fn shift(f: &BigProcsFigures, runs: &[ConditionFigures], what: &str) -> String {
    let moved = f.p99_moved_turns(runs);
    let list = |v: fn(&(f64, f64)) -> f64| {
        moved
            .iter()
            .map(|m| format!("{:+.2}", v(m)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let within = |v: fn(&(f64, f64)) -> f64| {
        let n = moved.iter().filter(|m| v(m) <= 1.0).count();
        format!("{n} of {} pairs within", moved.len())
    };
    format!(
        "{what} moved the players' p99, pair by pair, by {} turns (median of players; {} the \
         issue's bound of one turn) and {} turns (worst player; {} it).",
        list(|m| m.0),
        within(|m| m.0),
        list(|m| m.1),
        within(|m| m.1),
    )
}

/// Markdown subsection: the setup, a row per run, the p99 shifts, which
/// side used the cores.
#[must_use]
pub fn render(f: &BigProcsFigures) -> String {
    let plan = f.plan;
    let waves = plan.wave_turns();
    let with_idle = !f.churn_idle.is_empty();
    let per_pair = if with_idle { 3 } else { 2 };
    let mut md = String::from("### Real processes: 32 players, spectators joining and leaving\n\n");
    let _ = writeln!(
        md,
        "One release `relay serve --turn-ms {TURN_MS} --json --verbose --record-dir DIR` \
         ({} event loops, every other setting its default: 5 s silence timeout, spectators 3 s \
         behind live, a snapshot every 100 turns) and {PLAYERS} release `peer --players \
         {PLAYERS} --turns {} --bind 127.0.0.X:0 --json` processes, one per player, each bound \
         to its own source address 127.0.0.10 to 127.0.0.41 on loopback, bots at their default \
         300 APM: a {}-turn match ({} s of play), all on this one machine. The match is played \
         {} times with the same seeds, in {} rounds of: without spectators; with {} waves of {} \
         `peer --spectate` processes; {}. The waves join at turns {} (each spectator from a \
         host of its own, 127.0.W.10 and on); each wave is SIGKILLed as the next one joins (no \
         goodbye: the relay lets it go after its silence timeout), the last wave watches to the \
         end. A run is compared with the run without spectators of its round, which shared the \
         machine's load of the same minutes.\n",
        f.relay_threads,
        plan.turns,
        plan.turns,
        u64::from(plan.turns) * TURN_MS / 1000,
        per_pair * plan.pairs,
        plan.pairs,
        waves.len(),
        plan.per_wave,
        if with_idle {
            "the same waves started under `chrt --idle 0` (`SCHED_IDLE`): the spectators run \
             only on CPU the players leave, as they would on machines of their own, so what \
             they still cost the players is the relay's work for them"
        } else {
            "(`chrt --idle` failed here: no run with idle-priority spectators)"
        },
        waves
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", "),
    );
    let _ = writeln!(
        md,
        "Turn latency is `peer --json`'s `turn_latency_ms`: each player's command-to-execution \
         latency of the commands it submitted after the match's first 5 s; the table gives the \
         median over the 32 players of their p50 and of their p99, and the worst player's p99. \
         The stall is `peer --json`'s `stall_ms`: summed over the turns, how long after its due \
         time on the peer's own clock each turn's bundle arrived. CPU is from \
         `/proc/<pid>/stat` from turn {CPU_FROM_TURN} to turn {} closed, percent of one core \
         (the spectators': each read just before its kill, the last wave's at the window's \
         end; bench: the process running the bench, which reads every child's output; other: \
         the machine's busy time from `/proc/stat` less all of those, i.e. other jobs on this \
         shared machine; machine: percent of all its cores); peak RSS is the relay's `VmHWM` at the end.\n",
        plan.turns - CPU_TAIL,
    );
    md.push_str(
        "| run | condition | spectator processes (killed, of them watching) | players completed | \
         stayed spectators completed | one final hash | players dropped | turn latency p50 ms \
         (median of players) | p99 ms (median of players) | p99 ms (worst player) | stall ms \
         (median of players) | relay CPU % | players' CPU % (sum) | spectators' CPU % (sum) | \
         bench CPU % | other CPU % | machine CPU % | relay peak RSS MiB | wall s |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let cores = f.relay_threads as f64;
    let mut run = 0;
    for (i, q) in f.quiet.iter().enumerate() {
        let runs = [
            ("no spectators", Some(q)),
            ("spectators joining and leaving", f.churn.get(i)),
            ("the same, spectators at idle priority", f.churn_idle.get(i)),
        ];
        for (label, c) in runs {
            if let Some(c) = c {
                run += 1;
                row(&mut md, run, label, c, cores);
            }
        }
    }
    md.push('\n');
    let runs = f
        .quiet
        .iter()
        .zip(&f.churn)
        .enumerate()
        .flat_map(|(i, (q, c))| {
            [Some(q), Some(c), f.churn_idle.get(i)]
                .into_iter()
                .flatten()
                .enumerate()
                .map(move |(k, r)| (i * per_pair + k + 1, r))
        });
    for (run, c) in runs {
        if let (Some(first), Some(last)) = (c.drops.first(), c.drops.last()) {
            let _ = writeln!(
                md,
                "Run {run}: the relay dropped {} players, the first {first}, the last {last}.\n",
                c.drops.len()
            );
        }
    }
    md.push_str(&shift(f, &f.churn, "Spectators at the players' priority"));
    if with_idle {
        md.push(' ');
        md.push_str(&shift(f, &f.churn_idle, "Spectators at idle priority"));
    }
    md.push(' ');
    md.push_str(&saturation(f));
    md.push('\n');
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waves_leave_the_last_one_time_to_watch_to_the_end() {
        assert_eq!(Plan::new(true).wave_turns(), [60, 120, 180, 240]);
        assert_eq!(Plan::new(false).wave_turns(), [60, 160, 260, 360, 460]);
        assert_eq!(spectator_ip(1, 3), Ipv4Addr::new(127, 0, 2, 13));
        assert_eq!(player_ip(31), Ipv4Addr::new(127, 0, 0, 41));
    }

    #[test]
    fn the_p99_shift_is_counted_in_turns() {
        let quiet = ConditionFigures {
            p99_ms: vec![150.0, 160.0, 170.0],
            ..ConditionFigures::default()
        };
        let churn = ConditionFigures {
            p99_ms: vec![200.0, 210.0, 400.0],
            drops: vec!["P3 at turn 120: \"silent\"".to_owned()],
            ..ConditionFigures::default()
        };
        let f = BigProcsFigures {
            plan: Plan::new(true),
            relay_threads: 2,
            quiet: vec![quiet],
            churn: vec![churn],
            churn_idle: Vec::new(),
        };
        let (median, worst) = f.p99_moved_turns(&f.churn)[0];
        assert!((median - 0.5).abs() < 1e-9, "{median}");
        assert!((worst - 2.3).abs() < 1e-9, "{worst}");
        let md = render(&f);
        assert!(md.starts_with("### Real processes: 32 players, spectators joining and leaving\n"));
        assert!(
            md.contains("by +0.50 turns (median of players; 1 of 1 pairs within"),
            "{md}"
        );
        assert!(
            md.contains("+2.30 turns (worst player; 0 of 1 pairs within"),
            "{md}"
        );
        assert!(
            md.contains("Run 2: the relay dropped 1 players, the first P3 at turn 120"),
            "{md}"
        );
    }
}
