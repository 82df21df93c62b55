//! A private network namespace in which the kernel drops packets at random
//! (`ip netns` + `iptables -m statistic --mode random`), so both carriers
//! meet real loss on loopback. The namespace is deleted when the value drops,
//! on success and on error alike.

use std::process::{Command, Stdio};

/// The lossy port range: rules match packets to or from these ports only
/// (the peer ↔ proxy hop), so each direction of each link loses `p` once.
pub const LOSSY_PORTS: (u16, u16) = (20_001, 20_099);

/// Ephemeral ports inside the namespace, kept clear of [`LOSSY_PORTS`] and
/// of the fixed relay ports so no other hop matches a loss rule.
const EPHEMERAL: &str = "40000 60999";

/// Why namespaces cannot be used here, if they cannot.
#[must_use]
pub fn unavailable() -> Option<String> {
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|e| e == "0"))
        })
        .unwrap_or(false);
    if !root {
        return Some("not running as root (ip netns needs CAP_SYS_ADMIN)".into());
    }
    for (tool, arg) in [("ip", "-V"), ("iptables", "--version")] {
        let ok = Command::new(tool)
            .arg(arg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return Some(format!("`{tool}` is not installed or does not run"));
        }
    }
    None
}

/// The iptables argument lists that drop a fraction `p` of packets to and
/// from the ports `lo..=hi`, for UDP and TCP.
#[must_use]
pub fn loss_rules(p: f64, (lo, hi): (u16, u16)) -> Vec<Vec<String>> {
    let mut rules = Vec::new();
    if p <= 0.0 {
        return rules;
    }
    for proto in ["udp", "tcp"] {
        for dir in ["--dport", "--sport"] {
            rules.push(
                [
                    "-A",
                    "INPUT",
                    "-p",
                    proto,
                    dir,
                    &format!("{lo}:{hi}"),
                    "-m",
                    "statistic",
                    "--mode",
                    "random",
                    "--probability",
                    &format!("{p}"),
                    "-j",
                    "DROP",
                ]
                .map(String::from)
                .to_vec(),
            );
        }
    }
    rules
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A network namespace owned by this process.
#[derive(Debug)]
pub struct Namespace {
    name: String,
}

impl Namespace {
    /// Creates the namespace with loopback up and no loss.
    pub fn create(name: &str) -> Result<Self, String> {
        // A leftover from a crashed run with the same name would make `add` fail.
        let _ = run(Command::new("ip").args(["netns", "del", name]));
        run(Command::new("ip").args(["netns", "add", name]))?;
        let ns = Self {
            name: name.to_owned(),
        };
        run(&mut ns.exec("ip", &["link", "set", "lo", "up"]))?;
        run(&mut ns.exec(
            "sh",
            &[
                "-c",
                &format!("echo {EPHEMERAL} > /proc/sys/net/ipv4/ip_local_port_range"),
            ],
        ))?;
        Ok(ns)
    }

    /// The namespace's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Drops a fraction `p` of the packets on [`LOSSY_PORTS`] (replacing earlier rules).
    pub fn set_loss(&self, p: f64) -> Result<(), String> {
        run(&mut self.exec("iptables", &["-F", "INPUT"]))?;
        for rule in loss_rules(p, LOSSY_PORTS) {
            let args: Vec<&str> = rule.iter().map(String::as_str).collect();
            run(&mut self.exec("iptables", &args))?;
        }
        Ok(())
    }

    /// A command that runs `program args` inside the namespace.
    #[must_use]
    pub fn exec(&self, program: &str, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]).args(args);
        c
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = run(Command::new("ip").args(["netns", "del", &self.name]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_drop_both_directions_of_both_protocols_on_the_proxy_ports() {
        assert!(loss_rules(0.0, (1, 2)).is_empty());
        let rules = loss_rules(0.05, (20_001, 20_099));
        assert_eq!(rules.len(), 4);
        assert_eq!(
            rules[0].join(" "),
            "-A INPUT -p udp --dport 20001:20099 -m statistic --mode random --probability 0.05 -j DROP"
        );
        assert!(rules[3].join(" ").contains("-p tcp --sport 20001:20099"));
    }
}
