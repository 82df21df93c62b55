//! The net section's report: the latency table, the ours ÷ TCP ratios, the
//! list of peers that did not finish, and the CDF plot.

use super::net_bench::{APM, Carrier, NetSection, PLAYERS};
use super::stats::Summary;
use super::svg::{Series, cdf_plot};
use std::fmt::Write as _;

fn cell(s: Option<Summary>, decimals: usize) -> String {
    s.map_or_else(|| "—".into(), |s| s.cell(decimals))
}

/// `a / b` as a table cell.
#[must_use]
pub fn ratio(a: Option<Summary>, b: Option<Summary>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b.median > 0.0 => format!("{:.2}", a.median / b.median),
        (Some(a), Some(b)) if a.median == 0.0 && b.median == 0.0 => "— (both 0)".into(),
        _ => "—".into(),
    }
}

/// The section's markdown; `svg_path` is where the plot is referenced from.
#[must_use]
pub fn markdown(n: &NetSection, svg_link: &str) -> String {
    let mut md = String::new();
    // The mode first: a reader must not mistake proxy-made loss for kernel loss.
    match &n.fallback {
        None => md.push_str(
            "**Mode: real sockets, real kernel loss** (iptables in network namespaces), \
             TCP baseline included.\n\n",
        ),
        Some(why) => {
            let _ = write!(
                md,
                "**Mode: real sockets, loss made in user space by the UDP proxy, no TCP \
                 baseline** (real kernel loss unavailable: {why}; see the README's \
                 Benchmarks chapter for the prerequisites).\n\n"
            );
        }
    }
    let _ = write!(
        md,
        "{PLAYERS} peers of the reference game (bots at {APM} APM), 100 ms turns, one relay, \
         {} turns per run, {} runs per row. Every peer's link goes through a user-space proxy adding \
         30 ms ± 10 ms (uniform) one-way delay each way (per datagram for UDP; per byte chunk, in \
         order, for TCP).",
        n.turns, n.runs
    );
    match &n.fallback {
        None => md.push_str(
            " Loss is real: each loss rate runs in its own network namespace where iptables \
             (`-m statistic --mode random`) drops that fraction of the packets on the peer ↔ proxy hop, \
             each direction once. The TCP baseline is the same session and relay logic with \
             length-prefixed messages on one `TCP_NODELAY` stream per peer; its relay takes RTT \
             samples from the protocol's own Ping/Pong (no transport RTT exists on TCP). Both \
             carriers of a loss rate run at the same time.\n\n",
        ),
        Some(why) => {
            let _ = writeln!(
                md,
                "\n\n**Real loss unavailable here ({why}):** the loss below is made by the UDP proxy \
                 in user space, and the TCP baseline was not run.\n"
            );
        }
    }
    md.push_str(
        "Turn latency is command submitted → the turn carrying it executed (input delay included). \
         Stall is time a due turn waited for its bundle, per minute of match. Bytes/s is per peer, \
         up + down, carrier payload (UDP datagrams; TCP stream bytes); \"with IP headers\" adds 28 bytes \
         per datagram for UDP and 52 bytes (IPv4 + TCP + timestamps) per TCP segment, segments and \
         retransmissions counted by the namespace's kernel (`/proc/net/snmp`, half of all segments: \
         each stream crosses two hops).\n\n",
    );
    md.push_str("| loss | carrier | p50 ms | p99 ms | max ms | stall ms/min | bytes/s per peer | with IP headers | TCP retransmits/min per link | matches completed |\n");
    md.push_str("|---|---|---|---|---|---|---|---|---|---|\n");
    for (u, t) in &n.points {
        for p in [u, t] {
            let name = match p.carrier {
                Some(Carrier::Udp) => "ours (UDP)",
                _ => "TCP",
            };
            if p.runs.is_empty() && p.errors.is_empty() {
                continue;
            }
            let completed: usize = p.runs.iter().map(|r| r.completed).sum();
            let peers: usize = p.runs.iter().map(|r| r.peers).sum();
            let _ = writeln!(
                md,
                "| {:.0} % | {name} | {} | {} | {} | {} | {} | {} | {} | {completed}/{peers} peers{} |",
                p.loss * 100.0,
                cell(p.p50(), 0),
                cell(p.p99(), 0),
                cell(p.max(), 0),
                cell(p.stall(), 0),
                cell(p.bytes(), 0),
                cell(p.wire_bytes(), 0),
                cell(p.retrans(), 0),
                if p.errors.is_empty() {
                    String::new()
                } else {
                    format!(", {} runs failed", p.errors.len())
                }
            );
        }
    }
    let failures: Vec<String> = n
        .points
        .iter()
        .flat_map(|(u, t)| [u, t])
        .flat_map(|p| {
            let name = p.carrier.map_or("?", Carrier::name);
            p.runs
                .iter()
                .flat_map(|r| r.errors.iter())
                .chain(p.errors.iter())
                .map(move |e| format!("{name} at {:.0} % loss: {e}", p.loss * 100.0))
        })
        .collect();
    let end_lost: Vec<String> = n
        .points
        .iter()
        .flat_map(|(u, t)| [u, t])
        .filter_map(|p| {
            let k: usize = p.runs.iter().map(|r| r.end_lost).sum();
            (k > 0).then(|| {
                format!(
                    "{k} {} peer(s) at {:.0} % loss",
                    p.carrier.map_or("?", Carrier::name),
                    p.loss * 100.0
                )
            })
        })
        .collect();
    if !end_lost.is_empty() {
        md.push_str(
            "\nPlayed every turn but never received the relay's end-of-match message (counted as \
             completed, measured up to their last turn; their transport timed out afterwards): ",
        );
        md.push_str(&end_lost.join(", "));
        md.push_str(".\n");
    }
    if !failures.is_empty() {
        md.push_str("\nPeers that did not complete: ");
        md.push_str(&failures.join("; "));
        md.push_str(".\n");
    }
    if n.fallback.is_none() {
        md.push_str("\nOurs ÷ TCP (medians; below 1 means ours is better):\n\n");
        md.push_str("| loss | p99 ratio | stall ratio |\n|---|---|---|\n");
        for (u, t) in &n.points {
            let _ = writeln!(
                md,
                "| {:.0} % | {} | {} |",
                u.loss * 100.0,
                ratio(u.p99(), t.p99()),
                ratio(u.stall(), t.stall())
            );
        }
    }
    let _ = writeln!(
        md,
        "\n![Turn latency CDFs]({svg_link})\n\nThe plot pools every run's samples: one colour per loss rate, solid lines ours, dashed TCP.\n"
    );
    md
}

/// The CDF plot of every point.
#[must_use]
pub fn plot(n: &NetSection) -> String {
    let mut series = Vec::new();
    for (k, (u, t)) in n.points.iter().enumerate() {
        for p in [u, t] {
            let samples: Vec<f64> = p
                .runs
                .iter()
                .flat_map(|r| r.latencies_ms.iter().copied())
                .collect();
            if samples.is_empty() {
                continue;
            }
            let tcp = p.carrier == Some(Carrier::Tcp);
            series.push(Series {
                label: format!(
                    "{} {:.0}%",
                    if tcp { "TCP" } else { "ours" },
                    p.loss * 100.0
                ),
                samples_ms: samples,
                dashed: tcp,
                colour: Some(k),
            });
        }
    }
    cdf_plot(
        "Turn latency (command → executed), 4 peers, 30±10 ms one way",
        &series,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_of_medians() {
        let s = |x| Summary::of(&[x]);
        assert_eq!(ratio(s(50.0), s(200.0)), "0.25");
        assert_eq!(ratio(s(0.0), s(0.0)), "— (both 0)");
        assert_eq!(ratio(None, s(1.0)), "—");
        assert_eq!(cell(None, 0), "—");
    }
}
