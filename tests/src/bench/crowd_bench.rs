//! The `crowd` section: the worst-case memory of the release `relay serve`
//! binary with every connection slot held by a hostile client while an
//! honest match plays ([`crate::crowd`], the driver the `hostile_crowd`
//! test asserts on), at the test's 256 slots and at 1024, repeated; the
//! peak resident set in total and per connection, the relay's own
//! accounting, and how the peak compares with the memory budget and with
//! the bound the caps promise.

use super::stats::Summary;
use crate::crowd::{
    self, CONNECTION_KIB, CrowdOptions, CrowdReport, EXTRA, HONEST, MEMORY_PARTS,
    PLAYER_BACKLOG_KIB, SPECTATORS, TURN_MS,
};
use std::fmt::Write as _;

/// Connection slots measured: the test's, and four times as many.
pub const SLOT_COUNTS: [usize; 2] = [256, 1024];

/// Turns of the honest match in the bench: 15 s at 25 ms, the crowd in for
/// the last 11 s of it (two rounds of hostility, one cut-off in between),
/// so that the whole section stays under three minutes.
pub const TURNS: u32 = 600;

/// The runs at one slot count.
#[derive(Debug)]
pub struct SlotRuns {
    /// `--max-connections`.
    pub slots: usize,
    /// One report per repetition.
    pub runs: Vec<CrowdReport>,
}

/// Runs the crowd `reps` times at each of [`SLOT_COUNTS`] (once each with
/// `quick`, three times otherwise).
///
/// # Errors
/// When the binaries cannot be found or built, or a run could not measure
/// (a process that did not start, the relay dying, the honest match not
/// ending): the section must fail the run, not print a partial table.
pub fn measure(quick: bool) -> Result<Vec<SlotRuns>, String> {
    let bins = super::relay_procs::release_bins()?;
    let reps = if quick { 1 } else { 3 };
    let mut out = Vec::new();
    for slots in SLOT_COUNTS {
        let mut runs = Vec::new();
        for rep in 0..reps {
            let dir = std::env::temp_dir().join(format!(
                "lockstep-bench-{}-crowd-{slots}-{rep}",
                std::process::id()
            ));
            // A leftover of an earlier run with the same pid is stale.
            let _ = std::fs::remove_dir_all(&dir);
            let opts = CrowdOptions::new(&bins, slots, dir.clone()).with_turns(TURNS);
            let r = crowd::run(&opts).map_err(|e| format!("{slots} slots, run {rep}: {e}"))?;
            let _ = std::fs::remove_dir_all(&dir);
            replays::err_println!("[crowd] {slots} slots, run {rep}: {}", r.summary());
            if !r.relay_alive {
                return Err(format!("{slots} slots, run {rep}: the relay died"));
            }
            runs.push(r);
        }
        out.push(SlotRuns { slots, runs });
    }
    Ok(out)
}

/// KiB as MiB with one decimal.
fn mib(kib: f64) -> f64 {
    kib / 1024.0
}

/// The median (min–max) of `f` over the runs.
fn cell(runs: &[CrowdReport], decimals: usize, f: impl Fn(&CrowdReport) -> f64) -> String {
    let v: Vec<f64> = runs.iter().map(f).collect();
    Summary::of(&v).map_or_else(|| "-".to_owned(), |s| s.cell(decimals))
}

/// CPU (percent of one core) from which a side counts as saturated.
pub const SATURATED: f64 = 90.0;

/// Which side limited the runs: the crowd's driver (one thread), the relay
/// (one event loop per core), the machine's cores as a whole (shared with
/// the honest peers and any other work), or none, by the median CPU of
/// each; and whether the driver kept up with one turn of hostility per
/// client every turn.
fn saturation(runs: &[CrowdReport]) -> String {
    let median = |f: fn(&CrowdReport) -> f64| {
        Summary::of(&runs.iter().map(f).collect::<Vec<_>>()).map_or(0.0, |s| s.median)
    };
    let driver = median(|r| r.crowd_cpu_pct);
    let relay = median(|r| r.relay_cpu_pct);
    let machine = median(|r| r.machine_cpu_pct);
    let period = median(|r| r.loop_mean_ms);
    let cores = relay::serve::default_threads() as f64;
    let mut sides = Vec::new();
    if driver >= SATURATED {
        sides.push(format!(
            "the crowd's driver saturated its core ({driver:.0} %)"
        ));
    }
    if relay >= SATURATED * cores {
        sides.push(format!(
            "the relay saturated its {cores:.0} loops ({relay:.0} %)"
        ));
    }
    if machine >= SATURATED {
        sides.push(format!(
            "the machine's cores were saturated ({machine:.0} % busy, other work included)"
        ));
    }
    let mut text = if sides.is_empty() {
        format!(
            "no side saturated (driver {driver:.0} % of its one core, relay {relay:.0} % of \
             {cores:.0} cores, machine {machine:.0} % busy)"
        )
    } else {
        format!(
            "{} (driver {driver:.0} %, relay {relay:.0} %, machine {machine:.0} %)",
            sides.join(" and ")
        )
    };
    if period > TURN_MS as f64 {
        text.push_str(&format!(
            "; the driver's loop ({period:.0} ms) was slower than the {TURN_MS} ms turn, so each \
             hostile client sent less than a turn's worth of hostility per turn"
        ));
    }
    text
}

/// The section's text.
#[must_use]
pub fn markdown(figures: &[SlotRuns]) -> String {
    let budget_kib = relay::limits::DEFAULT_MAX_MEMORY_BYTES as f64 / 1024.0;
    let mut md = String::new();
    let _ = writeln!(
        md,
        "The worst case of the relay's memory: the release `relay serve --max-connections N \
         --turn-ms {TURN_MS}` binary with every connection slot held by a hostile client (and \
         {EXTRA} more knocking, so a slot freed by a cut-off is taken again at once) while an \
         honest {HONEST}-player match of `peer` bots plays {TURNS} turns through it, the crowd \
         coming in at its turn {}. Each hostile client takes router state, then never \
         acknowledges anything again: half play 8-player matches sending the largest input a \
         turn takes, three eighths squat lobbies flooding reliable messages at the rate limit \
         behind holes they leave on purpose plus the largest bulk message, an eighth spectate \
         the honest match (the relay admits {SPECTATORS}) and flood the same way; the relay \
         cuts each off after 5 s of acking nothing and it comes back. This is the driver the \
         `hostile_crowd` test asserts on (`tests::crowd`); the hostile clients run on one \
         thread of the bench process, the relay in its own (default threads: one event loop \
         per core). Memory is the relay process's resident set from `/proc/<pid>/status`: \
         idle (before anyone connects), peak (`VmHWM` at the end, or the highest `VmRSS` \
         sampled every 500 ms if higher); per connection is (peak − idle) / slots. \
         \"Accounted\" is the relay's own count (`relay_memory_bytes{{part}}` on `/metrics`, \
         the figure its memory budget acts on) at the sample of the highest RSS. The budget is \
         `relay serve --max-memory-mib`'s default, {} MiB \
         (`relay::limits::DEFAULT_MAX_MEMORY_BYTES`); the bound is the test's: idle + slots × \
         {CONNECTION_KIB} KiB (a connection at its transport caps) + hostile players × \
         {PLAYER_BACKLOG_KIB} KiB (their send backlogs and rejoin tail) + {SPECTATORS} \
         spectators × what a late spectator is sent. CPU is from `/proc/<pid>/stat` while the \
         crowd is in, percent of one core (the machine's from `/proc/stat`, percent of all its \
         cores, other work included): the crowd's driver near 100 % means the driver, not the \
         relay, limited how hard the relay was pushed. The stall is the total time the honest peer \
         that stalled most waited for turns over its whole match (`peer --json`'s `stall_ms`). Medians of runs, (min–max).\n",
        crowd::CROWD_FROM_TURN,
        relay::limits::DEFAULT_MAX_MEMORY_BYTES >> 20,
    );
    md.push_str(
        "| slots | runs | idle RSS MiB | peak RSS MiB | (peak − idle) per connection KiB | \
         accounted at the peak MiB (connections / backlogs / snapshots / recordings) | \
         peak / budget | peak / bound | honest match | honest stall ms | cut off | relay CPU % | \
         crowd driver CPU % | machine CPU % |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for f in figures {
        let runs = &f.runs;
        let part = |p: &str| {
            cell(runs, 1, |r| {
                r.memory_at_peak.get(p).copied().unwrap_or(0) as f64 / f64::from(1 << 20)
            })
        };
        let parts: Vec<String> = MEMORY_PARTS.iter().map(|p| part(p)).collect();
        let agreed = runs.iter().filter(|r| r.honest_agreed(TURNS)).count();
        let completed = runs.iter().filter(|r| r.end_reason == "completed").count();
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {completed}/{} completed, {agreed}/{} \
             with agreeing hashes | {} | {} | {} | {} | {} |",
            f.slots,
            runs.len(),
            cell(runs, 1, |r| mib(r.idle_hwm_kib as f64)),
            cell(runs, 1, |r| mib(r.peak_kib as f64)),
            cell(runs, 0, |r| r.per_connection_kib() as f64),
            parts.join(" / "),
            cell(runs, 3, |r| r.peak_kib as f64 / budget_kib),
            cell(runs, 2, |r| r.peak_kib as f64 / r.bound.kib.max(1) as f64),
            runs.len(),
            runs.len(),
            cell(runs, 0, CrowdReport::max_stall_ms),
            cell(runs, 0, |r| r.metric("relay_connections_cut_off_total")
                as f64),
            cell(runs, 0, |r| r.relay_cpu_pct),
            cell(runs, 0, |r| r.crowd_cpu_pct),
            cell(runs, 0, |r| r.machine_cpu_pct),
        );
    }
    md.push('\n');
    for f in figures {
        if let Some(r) = f.runs.first() {
            let _ = writeln!(
                md,
                "- {} slots: {} hostile clients; bound {} MiB ({} slots × {CONNECTION_KIB} KiB \
                 + {} players × {PLAYER_BACKLOG_KIB} KiB + {} spectators × {} KiB over an idle \
                 {:.1} MiB); the most connections the relay held at once: {}; the highest \
                 accounted total: {:.1} MiB; the crowd's driver looped every {} ms (it polls \
                 with a 5 ms timeout); {}.",
                f.slots,
                r.crowd,
                cell(&f.runs, 1, |r| mib(r.bound.kib as f64)),
                f.slots,
                r.bound.players,
                r.bound.spectators,
                r.bound.spectator_kib,
                mib(r.idle_hwm_kib as f64),
                cell(&f.runs, 0, |r| r.max_peers as f64),
                f.runs.iter().map(|r| r.memory_max_bytes).max().unwrap_or(0) as f64
                    / f64::from(1 << 20),
                cell(&f.runs, 1, |r| r.loop_mean_ms),
                saturation(&f.runs),
            );
        }
    }
    md
}
