//! The relay capacity bench's processes: starting and stopping the relay and
//! echo workers, waiting for the load generators while sampling CPU ticks,
//! and reading those ticks from `/proc` (a process's, the machine's).

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
