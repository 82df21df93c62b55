//! Relay restarts: the release relay is SIGKILLed while matches run and
//! started again after a seeded 0.5–5 s on the same address, record
//! directory and rejoin key; it resumes every match from its recording and
//! its peers (release `peer` processes) reconnect with their worlds kept.
//! One kill is a simulated machine crash: every recording also loses its
//! last turns, which the players hand back. Each match has a spectator.
//! Measured per kill and match: the pause (from the kill to the match's
//! next turn closing), the relay's downtime, and the bundles re-sent to
//! each reconnecting peer; per player the turn latency of the commands
//! submitted 5 s or more after the relay came back, next to its floor; and
//! at the end whether every peer completed with its match's hash and every
//! recording verifies as one match.

use crate::bench::stats::Summary;
use crate::harness::{
    Bins, PeerSpec, Proc, Relay, SplitMix, cut_last_turns, try_finish_peer, try_peer,
};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// Matches played at once on the relay.
const MATCHES: usize = 4;
/// Players per match.
const PLAYERS: u8 = 4;
/// Kills of the relay per run: every kill interrupts every match, so the
/// run has `MATCHES * KILLS` kill points.
const KILLS: usize = 5;
/// Turns per match and their length: a minute, so that each kill is
/// followed by at least 5 s of play after the recovery window.
const TURNS: u32 = 1200;
const TURN_MS: u64 = 50;
/// How long any one wait may take before the run is reported failed.
const WAIT: Duration = Duration::from_secs(120);
/// The kill (0-based) that is a machine crash, and the turns each
/// recording loses with it.
const CRASH: usize = 2;
const CRASH_LOST: usize = 10;

/// What one run measured.
#[derive(Debug)]
pub struct RestartFigures {
    /// Kill points (kills times matches).
    pub kill_points: usize,
    /// Per kill point: from the kill to the match's next turn, seconds.
    pub pauses: Vec<f64>,
    /// Per kill: from the kill to the new process listening, seconds.
    pub downtimes: Vec<f64>,
    /// Per kill point: its pause beyond its kill's downtime, seconds.
    pub beyond: Vec<f64>,
    /// Per reconnect: bundles the relay re-sent.
    pub resent: Vec<f64>,
    /// Reconnects that needed a snapshot (the peer's world was not kept).
    pub snapshots: usize,
    /// Per player: p50 turn latency of the commands submitted 5 s or more
    /// after the relay last came back, ms.
    pub recovered_p50: Vec<f64>,
    /// The same, p99.
    pub recovered_p99: Vec<f64>,
    /// Per player: its floor (RTT + half a turn), ms.
    pub floor: Vec<f64>,
    /// Per player: its turn latency after the first 5 s, p50, ms.
    pub steady_p50: Vec<f64>,
    /// Turns the machine crash took from the recordings (all matches).
    pub crash_lost: usize,
    /// Spectators that exited 0 having watched every turn.
    pub spectators_completed: usize,
    /// Peers that exited 0 having played every turn.
    pub completed: usize,
    /// Peers in all.
    pub peers: usize,
    /// Matches whose players all ended with one hash.
    pub agreed: usize,
    /// Recordings `replay verify` passed as complete.
    pub verified: usize,
}

/// Runs the matches, kills and restarts the relay `KILLS` times, and
/// collects the figures.
///
/// # Errors
/// A process that does not start, or a wait that times out.
pub fn measure(bins: &Bins, seed: u64) -> Result<RestartFigures, String> {
    let dir = std::env::temp_dir().join(format!("lockstep-bench-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let records = dir.join("records");
    let key = dir.join("rejoin.key");
    let key_arg = key.display().to_string();
    let turn_ms = TURN_MS.to_string();
    // Every peer connects from 127.0.0.1: 16 players and 4 spectators.
    let flags = [
        "--turn-ms",
        turn_ms.as_str(),
        "--rejoin-key-file",
        &key_arg,
        "--max-connections-per-host",
        "64",
    ];
    let mut relay = Relay::try_start(&bins.relay, &records, &flags)?;
    let mut peers: Vec<(usize, Proc)> = Vec::new();
    for m in 0..MATCHES {
        for p in 0..usize::from(PLAYERS) {
            let spec = PeerSpec {
                relay: relay.addr,
                match_name: format!("restart{m}"),
                players: PLAYERS,
                turns: TURNS,
                seed: (m * usize::from(PLAYERS) + p + 1) as u64,
                extra: vec![],
            };
            peers.push((m, try_peer(&bins.peer, &spec)?));
        }
    }
    // A spectator per match, once the matches run.
    let mut started = BTreeSet::new();
    relay.try_wait_event("every match's first turn", WAIT, |v| {
        if v["event"] == "turn_closed" {
            started.insert(v["match"].as_u64());
        }
        started.len() == MATCHES
    })?;
    let mut spectators: Vec<(usize, Proc)> = Vec::new();
    for m in 0..MATCHES {
        let spec = PeerSpec {
            relay: relay.addr,
            match_name: format!("restart{m}"),
            players: PLAYERS,
            turns: TURNS,
            seed: 1000 + m as u64,
            extra: vec!["--spectate".to_owned()],
        };
        spectators.push((m, try_peer(&bins.peer, &spec)?));
    }
    let mut rng = SplitMix(seed);
    let mut figures = RestartFigures {
        kill_points: 0,
        pauses: Vec::new(),
        downtimes: Vec::new(),
        beyond: Vec::new(),
        resent: Vec::new(),
        snapshots: 0,
        recovered_p50: Vec::new(),
        recovered_p99: Vec::new(),
        floor: Vec::new(),
        steady_p50: Vec::new(),
        crash_lost: 0,
        spectators_completed: 0,
        completed: 0,
        peers: peers.len(),
        agreed: 0,
        verified: 0,
    };
    let span = TURNS / (KILLS as u32 + 1);
    for k in 0..KILLS {
        let at = span * (k as u32 + 1) - span / 4 + rng.range(0, span / 2);
        // Every match past the kill turn (they started within a moment).
        let mut past = BTreeSet::new();
        relay.try_wait_event("the kill turn", WAIT, |v| {
            if v["event"] == "turn_closed" && v["turn"].as_u64() >= Some(u64::from(at)) {
                past.insert(v["match"].as_u64());
            }
            past.len() == MATCHES
        })?;
        relay.proc.kill();
        let killed = Instant::now();
        if k == CRASH {
            for e in std::fs::read_dir(&records).map_err(|e| e.to_string())? {
                let path = e.map_err(|e| e.to_string())?.path();
                if path.extension().is_some_and(|x| x == "lsr")
                    && cut_last_turns(&path, CRASH_LOST).is_some()
                {
                    figures.crash_lost += CRASH_LOST;
                }
            }
        }
        let down = Duration::from_millis(u64::from(rng.range(500, 5000)));
        std::thread::sleep(down);
        relay = relay.try_restart(&bins.relay, &flags)?;
        let downtime = killed.elapsed().as_secs_f64();
        figures.downtimes.push(downtime);
        eprintln!(
            "[restart] kill {} at turn {at}: relay back after {:.1} s",
            k + 1,
            killed.elapsed().as_secs_f64()
        );
        // Each match resumes at a turn; its pause ends when that turn closes.
        let mut next: BTreeMap<u64, u64> = BTreeMap::new();
        let mut resumed_at: BTreeMap<u64, Duration> = BTreeMap::new();
        let mut rejoins: Vec<Value> = Vec::new();
        relay.try_wait_event("every match's first turn after the restart", WAIT, |v| {
            match v["event"].as_str() {
                Some("match_resumed") => {
                    if let (Some(m), Some(t)) = (v["match"].as_u64(), v["next_turn"].as_u64()) {
                        next.insert(m, t);
                    }
                }
                Some("rejoining") => rejoins.push(v.clone()),
                Some("turn_closed") => {
                    if let Some(m) = v["match"].as_u64()
                        && next.get(&m) == v["turn"].as_u64().as_ref()
                    {
                        resumed_at.entry(m).or_insert_with(|| killed.elapsed());
                    }
                }
                _ => {}
            }
            resumed_at.len() == MATCHES
        })?;
        figures.kill_points += MATCHES;
        for pause in resumed_at.values().map(Duration::as_secs_f64) {
            figures.pauses.push(pause);
            figures.beyond.push(pause - downtime);
        }
        for r in &rejoins {
            if r["kept_world"] == true {
                figures.resent.push(r["bundles"].as_f64().unwrap_or(0.0));
            } else {
                figures.snapshots += 1;
            }
        }
    }
    let mut hashes: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
    for (m, p) in &mut peers {
        let r = try_finish_peer(p, WAIT)?;
        if r.code == Some(0) && r.summary["turns"].as_u64() == Some(u64::from(TURNS)) {
            figures.completed += 1;
        }
        hashes
            .entry(*m)
            .or_default()
            .insert(r.summary["final_hash"].to_string());
        let ms = |v: &Value| v.as_f64();
        if let Some(p50) = ms(&r.summary["latency_after_reconnect_ms"]["p50"]) {
            figures.recovered_p50.push(p50);
        }
        if let Some(p99) = ms(&r.summary["latency_after_reconnect_ms"]["p99"]) {
            figures.recovered_p99.push(p99);
        }
        figures.floor.extend(ms(&r.summary["floor_ms"]));
        figures
            .steady_p50
            .extend(ms(&r.summary["turn_latency_ms"]["p50"]));
    }
    for (m, p) in &mut spectators {
        let r = try_finish_peer(p, WAIT)?;
        if r.code == Some(0) && r.summary["turns"].as_u64() == Some(u64::from(TURNS)) {
            figures.spectators_completed += 1;
        } else {
            eprintln!(
                "[restart] the spectator of match {m} did not complete: {}",
                r.summary
            );
        }
        hashes
            .entry(*m)
            .or_default()
            .insert(r.summary["final_hash"].to_string());
    }
    figures.agreed = hashes.values().filter(|h| h.len() == 1).count();
    for _ in 0..MATCHES {
        let v = relay.try_wait_event("a recording closed", WAIT, |v| v["event"] == "recorded")?;
        let path = v["path"].as_str().unwrap_or_default().to_owned();
        let args = vec!["verify".to_owned(), path, "--json".to_owned()];
        let mut verify = Proc::try_spawn("replay verify", &bins.replay, &args)?;
        let (status, out) = verify.try_wait_exit(WAIT)?;
        let report: Value = serde_json::from_str(&out).unwrap_or(Value::Null);
        if status.success() && report["turns"].as_u64() == Some(u64::from(TURNS)) {
            figures.verified += 1;
        }
    }
    relay.proc.kill();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(figures)
}

/// The section's markdown.
#[must_use]
pub fn markdown(f: &RestartFigures) -> String {
    let cell = |v: &[f64], d: usize| Summary::of(v).map_or_else(|| "-".to_owned(), |s| s.cell(d));
    let worst = |v: &[f64]| v.iter().copied().fold(f64::NAN, f64::max);
    let mut s = format!(
        "{MATCHES} matches of {PLAYERS} release `peer` processes ({TURNS} turns of {TURN_MS} ms) and a \
         spectator each on one release relay (`--record-dir`, `--rejoin-key-file`) over loopback. The relay is SIGKILLed {KILLS} \
         times at seeded turns and started again after a seeded 0.5–5 s on the same address: {} kill points. \
         Medians with the range (min–max).\n\n",
        f.kill_points
    );
    s.push_str(&format!(
        "Kill {} is a simulated machine crash: each recording also loses its last {CRASH_LOST} turns \
         ({} in all), which the players hand back.\n\n",
        CRASH + 1,
        f.crash_lost
    ));
    s.push_str("| figure | median (min–max) | worst |\n|---|---|---|\n");
    let rows: [(&str, &[f64], usize); 8] = [
        (
            "relay downtime (kill to listening again), s",
            &f.downtimes,
            2,
        ),
        (
            "pause per match (kill to its next turn closed), s",
            &f.pauses,
            2,
        ),
        ("pause beyond the downtime, s", &f.beyond, 2),
        ("bundles re-sent per reconnecting peer", &f.resent, 0),
        (
            "turn latency 5 s after the relay came back, p50 per player, ms",
            &f.recovered_p50,
            1,
        ),
        (
            "turn latency 5 s after the relay came back, p99 per player, ms",
            &f.recovered_p99,
            1,
        ),
        ("the player's floor (RTT + half a turn), ms", &f.floor, 1),
        (
            "the player's turn latency outside the first 5 s after its start and each reconnect, p50, ms",
            &f.steady_p50,
            1,
        ),
    ];
    for (label, v, d) in rows {
        s.push_str(&format!(
            "| {label} | {} | {:.*} |\n",
            cell(v, d),
            d,
            worst(v)
        ));
    }
    s.push('\n');
    s.push_str(&format!(
        "{} of {} players and {} of {MATCHES} spectators completed every turn; {} of {MATCHES} \
         matches ended with one hash (spectators included); {} of {MATCHES} recordings verified as \
         one complete match; {} reconnects needed a snapshot (the others kept their worlds).\n\n",
        f.completed, f.peers, f.spectators_completed, f.agreed, f.verified, f.snapshots
    ));
    s.push_str(
        "The restarted relay answers the old connections' packets with \"unknown connection\"; a \
         peer that has heard nothing for 1 s takes it as the restart and reconnects at once (a \
         healthy link ignores it), so the pause is the downtime plus the reconnect, and at least \
         that 1 s of silence when the relay is back sooner. Bundles re-sent is 0 when every peer \
         had played every turn the relay closed before the kill (no loss on loopback). The turn \
         latency of the commands submitted 5 s or more after each restart is compared with the \
         player's latency outside those windows: under the relay's clock a player's usual latency \
         is its floor plus the jitter buffer (about half a turn here).\n",
    );
    s
}
