//! Where and when a benchmark ran: CPU, cores, kernel, date, commit and the
//! exact command, stamped on every figure in `BENCHMARKS.md`.

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

/// A description of the machine and run that produced a set of figures.
#[derive(Clone, Debug)]
pub struct Machine {
    /// CPU model name from `/proc/cpuinfo`.
    pub cpu: String,
    /// Logical CPUs available to this process.
    pub cores: usize,
    /// Kernel release.
    pub kernel: String,
    /// Date and time of the run, UTC, ISO 8601.
    pub date_utc: String,
    /// Git commit of the working tree, if known.
    pub commit: String,
    /// The command that was run.
    pub command: String,
}

impl Machine {
    /// Reads the current machine's description.
    #[must_use]
    pub fn detect(command: String) -> Self {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split(':').nth(1))
                    .map(|m| m.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown CPU".to_owned());
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_owned())
            .unwrap_or_else(|_| std::env::consts::OS.to_owned());
        let commit = Command::new("git")
            .args(["rev-parse", "--short", "HEAD"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_else(|| "unknown".to_owned());
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Self {
            cpu,
            cores,
            kernel,
            date_utc: iso8601(secs),
            commit,
            command,
        }
    }

    /// One markdown line stating all of it.
    #[must_use]
    pub fn stamp(&self) -> String {
        format!(
            "Measured on {} ({} cores), Linux {}, {} UTC, commit `{}`, with `{}`.",
            self.cpu, self.cores, self.kernel, self.date_utc, self.commit, self.command
        )
    }
}

/// Formats Unix seconds as `YYYY-MM-DD HH:MM` (UTC), by the civil-from-days
/// algorithm, to avoid a date crate for one line.
#[must_use]
pub fn iso8601(unix_secs: u64) -> String {
    let days = i64::try_from(unix_secs / 86_400).unwrap_or(0);
    let rem = unix_secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}",
        rem / 3600,
        (rem % 3600) / 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(iso8601(0), "1970-01-01 00:00");
        assert_eq!(iso8601(951_782_400), "2000-02-29 00:00");
        assert_eq!(iso8601(1_795_314_600), "2026-11-22 02:30");
    }
}
