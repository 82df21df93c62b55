//! The relay capacity bench's processes: starting and stopping the relay and
//! echo workers, waiting for the load generators while sampling CPU ticks,
//! and reading those ticks from `/proc` (a process's, the machine's); and
//! the release binaries the process benches start.

use super::relay_load::WorkerCounters;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// CPU time (user + system) in clock ticks from the text of `/proc/<pid>/stat`.
#[must_use]
pub fn cpu_ticks(stat: &str) -> Option<u64> {
    // The command name may contain spaces and parentheses: fields start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Field 3 (state) is fields[0]; utime is field 14, stime field 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Busy and total ticks of the whole machine, all cores, from the text of `/proc/stat`.
#[must_use]
pub fn machine_ticks(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    // user nice system idle iowait irq softirq steal (guest time is in user).
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3)? + v.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

pub(crate) fn read_machine_ticks() -> Option<(u64, u64)> {
    machine_ticks(&std::fs::read_to_string("/proc/stat").ok()?)
}

pub(crate) fn process_ticks(pid: u32) -> Option<u64> {
    cpu_ticks(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

pub(crate) fn clock_ticks_per_sec() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .unwrap_or(100.0)
}

/// A worker process that prints its address, serves until its stdin
/// closes, then prints its counters.
pub(crate) struct Worker {
    pub(crate) child: Child,
    pub(crate) lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
    pub(crate) addr: String,
    pub(crate) pid: u32,
}

pub(crate) fn start_worker(exe: &str, mode: &str, threads: usize) -> Result<Worker, String> {
    let mut child = Command::new(exe)
        .args([mode, &threads.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot start {mode}: {e}"))?;
    let stdout = child.stdout.take().ok_or("worker has no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let addr = lines
        .next()
        .and_then(Result::ok)
        .ok_or("worker printed no address")?;
    let pid = child.id();
    Ok(Worker {
        child,
        lines,
        addr,
        pid,
    })
}

pub(crate) fn stop_worker(mut w: Worker) -> Result<WorkerCounters, String> {
    drop(w.child.stdin.take());
    let c = w
        .lines
        .next()
        .and_then(Result::ok)
        .and_then(|l| serde_json::from_str(&l).ok())
        .ok_or_else(|| "worker printed no counters".to_owned());
    let _ = w.child.wait();
    c
}

/// What [`wait_sampling`] returns: the children's outputs, the CPU ticks
/// they used, and the watched process's (time, CPU ticks) samples.
pub(crate) type Sampled = (
    Vec<std::process::Output>,
    u64,
    Vec<(std::time::Instant, u64)>,
);

/// The highest CPU (percent of one core) over any window of at least one
/// second in `samples` of (time, CPU ticks) of one process.
pub(crate) fn busiest_second(samples: &[(std::time::Instant, u64)]) -> f64 {
    let hz = clock_ticks_per_sec();
    let mut best = 0.0f64;
    for (i, &(t0, c0)) in samples.iter().enumerate() {
        let later = samples[i..]
            .iter()
            .find(|(t, _)| t.duration_since(t0).as_secs_f64() >= 1.0);
        if let Some(&(t1, c1)) = later {
            let secs = t1.duration_since(t0).as_secs_f64();
            best = best.max(c1.saturating_sub(c0) as f64 / hz / secs * 100.0);
        }
    }
    best
}

/// Kept off each end of the load generators' steady window: they measure
/// it from their own start, a little after the bench spawned them, so its
/// first moments may still hold the last handshakes.
const STEADY_MARGIN: std::time::Duration = std::time::Duration::from_millis(500);

/// The busiest second of the relay's CPU `samples` within steady play:
/// `window` is in seconds since `t0` (when the load generators were
/// spawned), less [`STEADY_MARGIN`] at each end. `None` if that leaves
/// no whole second.
pub(crate) fn busiest_steady_second(
    samples: &[(std::time::Instant, u64)],
    t0: std::time::Instant,
    (from, to): (f64, f64),
) -> Option<f64> {
    let secs = |s: f64| std::time::Duration::try_from_secs_f64(s).ok();
    let a = t0 + secs(from)? + STEADY_MARGIN;
    let b = (t0 + secs(to)?).checked_sub(STEADY_MARGIN)?;
    let inside: Vec<_> = samples
        .iter()
        .filter(|(t, _)| *t >= a && *t <= b)
        .copied()
        .collect();
    Some(busiest_second(&inside)).filter(|&c| c > 0.0)
}

/// Waits for `children`, sampling each one's CPU ticks until it exits, and
/// the watched process's (the relay's) as (time, ticks); returns their
/// outputs, the ticks they used and the watched process's samples.
pub(crate) fn wait_sampling(children: Vec<Child>, watch: u32) -> Result<Sampled, String> {
    let mut watched = Vec::new();
    let mut last: Vec<u64> = vec![0; children.len()];
    let mut pending: Vec<Option<Child>> = children.into_iter().map(Some).collect();
    let mut outs: Vec<Option<std::process::Output>> = pending.iter().map(|_| None).collect();
    while pending.iter().any(Option::is_some) {
        if let Some(t) = process_ticks(watch) {
            watched.push((std::time::Instant::now(), t));
        }
        for (i, slot) in pending.iter_mut().enumerate() {
            let Some(c) = slot else { continue };
            if let Some(t) = process_ticks(c.id()) {
                last[i] = t;
            }
            match c.try_wait() {
                Ok(Some(_)) => {
                    if let Some(c) = slot.take() {
                        outs[i] = Some(c.wait_with_output().map_err(|e| e.to_string())?);
                    }
                }
                Ok(None) => {}
                Err(e) => return Err(e.to_string()),
            }
        }
        // Pacing the sampling, not synchronisation: the children run on their own.
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Ok((
        outs.into_iter().flatten().collect(),
        last.iter().sum(),
        watched,
    ))
}

/// The release binaries beside the running program: `target/<profile>/`
/// for the `bench` binary, its parent for a test (`target/<profile>/deps/`);
/// rebuilt first when run through cargo (so they are never stale).
pub fn release_bins() -> Result<crate::harness::Bins, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find own binary: {e}"))?;
    let mut dir = exe
        .parent()
        .ok_or_else(|| format!("{} has no directory", exe.display()))?;
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir = dir
            .parent()
            .ok_or_else(|| format!("{} has no parent", dir.display()))?;
    }
    crate::harness::Bins::in_dir(dir, std::env::var_os("CARGO").is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The busiest second is the steepest rise of the CPU ticks over any
    /// window of a second or more, not the run's average.
    #[test]
    fn the_busiest_second_is_the_steepest_window() {
        let t0 = std::time::Instant::now();
        let at = |ms: u64| t0 + std::time::Duration::from_millis(ms);
        let hz = clock_ticks_per_sec();
        // Ticks: quiet for a second (joins), busy for one, quiet again.
        let samples = [
            (at(0), 0),
            (at(500), 5),
            (at(1000), 10),
            (at(1500), 40),
            (at(2000), 80),
            (at(3000), 85),
        ];
        let want = 70.0 / hz * 100.0;
        assert!(
            (busiest_second(&samples) - want).abs() < 1e-9,
            "{}",
            busiest_second(&samples)
        );
        let run = 85.0 / hz / 3.0 * 100.0;
        assert!(busiest_second(&samples) > 2.0 * run);
        assert_eq!(busiest_second(&samples[..2]), 0.0, "no window of a second");
    }

    /// The handshakes' burst at a step's start is not steady play: the
    /// steady figure comes from inside the load generators' window only.
    #[test]
    fn the_steady_second_leaves_out_the_join_burst() {
        let t0 = std::time::Instant::now();
        let at = |ms: u64| t0 + std::time::Duration::from_millis(ms);
        let hz = clock_ticks_per_sec();
        // 100 ticks in the first second (joins), then 20 a second.
        let mut samples = vec![(at(0), 0), (at(1000), 100)];
        for k in 1..=6u64 {
            samples.push((at(1000 + 1000 * k), 100 + 20 * k));
        }
        let all = busiest_second(&samples);
        assert!((all - 100.0 / hz * 100.0).abs() < 1e-9, "{all}");
        // Steady from 1.2 s to 6.5 s (the margins take it to 1.7-6.0 s).
        let steady = busiest_steady_second(&samples, t0, (1.2, 6.5)).unwrap();
        assert!((steady - 20.0 / hz * 100.0).abs() < 1e-9, "{steady}");
        assert_eq!(
            busiest_steady_second(&samples, t0, (1.2, 2.5)),
            None,
            "under a second of steady play"
        );
    }

    #[test]
    fn stat_parsing_survives_odd_command_names() {
        let stat = "1234 (my (odd) name) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 37 0 0 20 0 3 0 99 1000 50";
        assert_eq!(cpu_ticks(stat), Some(287));
        assert_eq!(cpu_ticks("garbage"), None);
        let own = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert!(cpu_ticks(&own).is_some());
    }

    #[test]
    fn machine_cpu_is_busy_over_total_ticks_of_every_core() {
        let stat = "cpu  100 5 50 800 40 3 2 0 0 0\ncpu0 50 2 25 400 20 1 1 0 0 0\n";
        assert_eq!(machine_ticks(stat), Some((160, 1000)));
        assert_eq!(machine_ticks("intr 1 2 3"), None);
    }
}
