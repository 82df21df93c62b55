//! The net section's report: each player against its own floor (means and
//! the worst player per row, then every player), the ours ÷ TCP ratios, the
//! traffic, the peers that did not finish, and the CDF plot.

use super::benchpeer::WARMUP;
use super::net_bench::{APM, CLICKS_PER_MIN, Carrier, NetSection, PLAYER_COUNTS};
use super::net_figures::{PlayerFigures, Point};
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
                 baseline** (real kernel loss unavailable: {why}; see \
                 `tests::development`, \"Benchmarks\", for the prerequisites).\n\n"
            );
        }
    }
    let counts: Vec<String> = PLAYER_COUNTS.iter().map(u8::to_string).collect();
    let _ = write!(
        md,
        "{} peers of the reference game: bots at {APM} APM, each turn's orders submitted after a \
         random reaction time within the turn, and {CLICKS_PER_MIN} clicks a minute (a small \
         command each) at random instants, as a player's clicks fall anywhere in a turn (a bot \
         answering at once would be in phase with the turn clock); {:.0} ms turns, one relay with its \
         default turn policy (`clock`){}, {} turns ({:.0} s) per run, {} runs per \
         row; each player count runs as its own batch. Every peer's link goes through a \
         user-space proxy adding 30 ms ± 10 ms (uniform) one-way delay each way (per datagram \
         for UDP; per byte chunk, in order, for TCP).",
        counts.join(" and "),
        n.turn_ms,
        if n.fallback.is_none() {
            " on both carriers"
        } else {
            ""
        },
        n.turns,
        f64::from(n.turns) * n.turn_ms / 1000.0,
        n.runs
    );
    match &n.fallback {
        None => md.push_str(
            " Loss is real: each loss rate runs in its own network namespace where iptables \
             (`-m statistic --mode random`) drops that fraction of the packets on the peer ↔ proxy hop, \
             each direction once. The TCP baseline is the same session, relay and turn logic with \
             length-prefixed messages on one `TCP_NODELAY` stream per peer. Both carriers of a \
             loss rate run at the same time.\n\n",
        ),
        Some(why) => {
            let _ = writeln!(
                md,
                "\n\n**Real loss unavailable here ({why}):** the loss below is made by the UDP proxy \
                 in user space, and the TCP baseline was not run.\n"
            );
        }
    }
    let _ = write!(
        md,
        "Latency is a command's submission → the turn carrying it executed, for commands \
         submitted after the first {} s. A player's **floor** is its median RTT to the relay plus \
         half a turn: on UDP the transport's RTT (as the session samples it, like the `latency` \
         section), on TCP the relay's own Ping/Pong timed by the TCP relay driver (a pong held \
         behind a lost segment counts, as it would for any app-level ping). RTT, floor and p50 \
         are means over players, the ratio is the worst player's, p99 and max pool every \
         player's samples; each player's own figures are in the table below it. The issue's p99 \
         budget is the p99 RTT + one turn + the player's jitter buffer (UDP: the p99 of the \
         transport's raw RTT samples; TCP: of the relay's Ping/Pong samples), a mean over \
         players in the table. Stall is time \
         a due turn waited for its bundle, per minute of match.\n\n",
        WARMUP.as_secs_f64()
    );
    md.push_str(
        "| players | loss | carrier | RTT p50 (ms) | floor (ms) | latency p50 (ms) | p50 / floor (worst player) | latency p99 (ms) | RTT p99 + turn + jitter buffer (ms) | max (ms) | stall ms/min | matches completed |\n\
         |---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for p in points(n) {
        let completed: usize = p.runs.iter().map(|r| r.completed).sum();
        let peers: usize = p.runs.iter().map(|r| r.peers).sum();
        let _ = writeln!(
            md,
            "| {} | {:.0} % | {} | {} | {} | {} | {} | {} | {} | {} | {} | {completed}/{peers} peers{} |",
            p.players,
            p.loss * 100.0,
            carrier_name(p),
            cell(p.rtt(), 1),
            cell(p.floor(), 1),
            cell(p.p50(), 1),
            cell(p.worst_ratio(), 2),
            cell(p.p99(), 0),
            cell(p.budget(), 0),
            cell(p.max(), 0),
            cell(p.stall(), 0),
            if p.errors.is_empty() {
                String::new()
            } else {
                format!(", {} runs failed", p.errors.len())
            }
        );
    }
    if n.fallback.is_none() {
        md.push_str("\nOurs ÷ TCP (medians; below 1 means ours is better):\n\n");
        md.push_str(
            "| players | loss | p50 ratio | p99 ratio | stall ratio |\n|---:|---:|---|---|---|\n",
        );
        for (u, t) in &n.points {
            let _ = writeln!(
                md,
                "| {} | {:.0} % | {} | {} | {} |",
                u.players,
                u.loss * 100.0,
                ratio(u.p50(), t.p50()),
                ratio(u.p99(), t.p99()),
                ratio(u.stall(), t.stall())
            );
        }
    }
    md.push_str(&players_table(n));
    md.push_str(
        "\nTraffic. Bytes/s is per peer, up + down, carrier payload (UDP datagrams; TCP stream \
         bytes); \"with IP headers\" adds 28 bytes per datagram for UDP and 52 bytes (IPv4 + TCP + \
         timestamps) per TCP segment, segments and retransmissions counted by the namespace's \
         kernel (`/proc/net/snmp`, half of all segments: each stream crosses two hops).\n\n\
         | players | loss | carrier | bytes/s per peer | with IP headers | TCP retransmits/min per link |\n\
         |---:|---:|---|---:|---:|---:|\n",
    );
    for p in points(n) {
        let _ = writeln!(
            md,
            "| {} | {:.0} % | {} | {} | {} | {} |",
            p.players,
            p.loss * 100.0,
            carrier_name(p),
            cell(p.bytes(), 0),
            cell(p.wire_bytes(), 0),
            cell(p.retrans(), 0),
        );
    }
    md.push_str(&problems(n));
    let _ = writeln!(
        md,
        "\n![Turn latency CDFs]({svg_link})\n\nThe plot pools the 4-player runs' samples: one colour per loss rate, solid lines ours, dashed TCP.\n"
    );
    md
}

/// Every point that ran (or failed), ours before TCP, in table order.
fn points(n: &NetSection) -> impl Iterator<Item = &Point> {
    n.points
        .iter()
        .flat_map(|(u, t)| [u, t])
        .filter(|p| !p.runs.is_empty() || !p.errors.is_empty())
}

fn carrier_name(p: &Point) -> &'static str {
    match p.carrier {
        Some(Carrier::Udp) => "ours (UDP)",
        _ => "TCP",
    }
}

/// Each player's floor beside its p50 and p99, folded away (it is long).
fn players_table(n: &NetSection) -> String {
    let mut md = String::from(
        "\n<details><summary>Each player: RTT, floor, p50, p50 / floor, p99 (medians over runs)</summary>\n\n\
         | players | loss | carrier | player | RTT p50 (ms) | floor (ms) | latency p50 (ms) | p50 / floor | latency p99 (ms) |\n\
         |---:|---:|---|---:|---:|---:|---:|---:|---:|\n",
    );
    for p in points(n) {
        for i in 0..usize::from(p.players) {
            let _ = writeln!(
                md,
                "| {} | {:.0} % | {} | {i} | {} | {} | {} | {} | {} |",
                p.players,
                p.loss * 100.0,
                carrier_name(p),
                cell(p.player(i, |f| f.rtt_ms), 1),
                cell(p.player(i, |f| f.floor_ms), 1),
                cell(p.player(i, |f| f.p50_ms), 1),
                cell(p.player(i, PlayerFigures::ratio), 2),
                cell(p.player(i, |f| f.p99_ms), 0),
            );
        }
    }
    md.push_str("\n</details>\n");
    md
}

/// Peers that lost the end-of-match message or did not complete.
fn problems(n: &NetSection) -> String {
    let mut md = String::new();
    let failures: Vec<String> = points(n)
        .flat_map(|p| {
            let name = p.carrier.map_or("?", Carrier::name);
            p.runs
                .iter()
                .flat_map(|r| r.errors.iter())
                .chain(p.errors.iter())
                .map(move |e| {
                    format!(
                        "{name}, {} players, at {:.0} % loss: {e}",
                        p.players,
                        p.loss * 100.0
                    )
                })
        })
        .collect();
    let end_lost: Vec<String> = points(n)
        .filter_map(|p| {
            let k: usize = p.runs.iter().map(|r| r.end_lost).sum();
            (k > 0).then(|| {
                format!(
                    "{k} {} peer(s) of {} at {:.0} % loss",
                    p.carrier.map_or("?", Carrier::name),
                    p.players,
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
    md
}

/// The CDF plot of every point.
#[must_use]
pub fn plot(n: &NetSection) -> String {
    let mut series = Vec::new();
    // The 4-player rows only: one colour per loss rate stays readable.
    let four = n.points.iter().filter(|(u, _)| u.players == 4);
    for (k, (u, t)) in four.enumerate() {
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

    /// A section with one 4-player loss rate: the mode comes first, each
    /// player's floor stands beside its p50 and p99, the worst ratio is the
    /// row's, and the ours ÷ TCP table has the p50 ratio.
    #[test]
    fn each_player_is_reported_against_its_floor() {
        use crate::bench::net_figures::{PlayerFigures, RunFigures};
        let player = |rtt: f64, p50: f64| PlayerFigures {
            rtt_ms: rtt,
            floor_ms: rtt + 50.0,
            p50_ms: p50,
            p99_ms: p50 + 40.0,
            budget_ms: rtt + 110.0,
        };
        let run = |players: Vec<PlayerFigures>| RunFigures {
            latencies_ms: vec![100.0, 120.0],
            players,
            completed: 4,
            peers: 4,
            ..RunFigures::default()
        };
        let point = |carrier, run| Point {
            players: 4,
            loss: 0.05,
            carrier: Some(carrier),
            runs: vec![run],
            errors: Vec::new(),
        };
        let udp = run(vec![
            player(60.0, 115.5),
            player(60.0, 110.0),
            player(60.0, 110.0),
            player(60.0, 110.0),
        ]);
        let tcp = run(vec![player(62.0, 224.0); 4]);
        let n = NetSection {
            points: vec![(point(Carrier::Udp, udp), point(Carrier::Tcp, tcp))],
            fallback: None,
            turns: 300,
            runs: 1,
            turn_ms: 100.0,
        };
        let md = markdown(&n, "x.svg");
        assert!(
            md.starts_with("**Mode: real sockets, real kernel loss**"),
            "{md}"
        );
        assert!(
            md.contains("(`clock`) on both carriers, 300 turns (30 s) per run"),
            "{md}"
        );
        assert!(
            md.contains("| 4 | 5 % | ours (UDP) | 60.0 | 110.0 | 111.4 | 1.05 | 120 | 170 |"),
            "{md}"
        );
        assert!(
            md.contains("| 4 | 5 % | TCP | 62.0 | 112.0 | 224.0 | 2.00 |"),
            "{md}"
        );
        assert!(
            md.contains("| 4 | 5 % | ours (UDP) | 0 | 60.0 | 110.0 | 115.5 | 1.05 | 156 |"),
            "{md}"
        );
        assert!(
            md.contains("| 4 | 5 % | TCP | 3 | 62.0 | 112.0 | 224.0 | 2.00 | 264 |"),
            "{md}"
        );
        assert!(md.contains("| 4 | 5 % | 0.50 |"), "{md}");
        let fallback = NetSection {
            fallback: Some("no iptables".into()),
            ..n
        };
        assert!(markdown(&fallback, "x.svg").starts_with(
            "**Mode: real sockets, loss made in user space by the UDP proxy, no TCP baseline**"
        ));
    }
}
