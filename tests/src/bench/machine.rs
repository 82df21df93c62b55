//! Where and when a benchmark ran: CPU, cores, kernel, date, commit and the
//! exact command, stamped on every figure in `BENCHMARKS.md`.

use std::process::Command;

/// A description of the machine and run that produced a set of figures.
#[derive(Clone, Debug)]
pub struct Machine {
    /// CPU model name from `/proc/cpuinfo`.
    pub cpu: String,
    /// Logical CPUs available to this process.
    pub cores: usize,
    /// Kernel release.
    pub kernel: String,
    /// Date and time of the run, UTC.
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
        let millis = replays::format::unix_now_ms();
        Self {
            cpu,
            cores,
            kernel,
            date_utc: replays::format::utc_string(millis),
            commit,
            command,
        }
    }

    /// One markdown line stating all of it.
    #[must_use]
    pub fn stamp(&self) -> String {
        format!(
            "Measured on {} ({} cores), Linux {}, {}, commit `{}`, with `{}`.",
            self.cpu, self.cores, self.kernel, self.date_utc, self.commit, self.command
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamp_names_the_machine_date_and_command() {
        let m = Machine::detect("bench --quick".to_owned());
        assert!(m.cores >= 1);
        assert!(m.date_utc.ends_with(" UTC"), "{}", m.date_utc);
        let s = m.stamp();
        assert!(
            s.contains("`bench --quick`") && s.contains(&m.date_utc),
            "{s}"
        );
    }
}
