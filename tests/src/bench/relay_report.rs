//! The relay capacity section's markdown, from [`Capacity`].

use super::relay_bench::{CPU_SATURATED, Capacity, EVERY};
use std::fmt::Write as _;

/// The section's markdown.
#[must_use]
pub fn markdown(cap: &Capacity) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "The relay's real serve loops (`relay::serve`, as `relay serve --threads N` runs them: \
         `recvmmsg` batches through quinn-udp, one epoll wait per wake-up and at most one \
         wake-up a millisecond, one event loop per thread with its own `SO_REUSEPORT` socket) in their own process, against {} load \
         generator process(es) (`bench relay-load`, one per core) together playing M concurrent \
         4-player matches of fake-game peers over our UDP transport on 127.0.0.1: real \
         handshakes, MACs, acks, inputs (one small command every {EVERY} turns per peer, the \
         bench bots' 300 APM) and a fake but agreeing hash per turn, {} turns per match at 10 \
         turns/s. M steps up until p99 turn latency exceeds the unloaded p99 by more than one \
         turn (100 ms), a peer fails, or a side saturates its cores ({CPU_SATURATED:.0} % each); \
         each side's CPU is from `/proc/<pid>/stat` over the whole run (joins included), in \
         percent of one core, the relay's also over its busiest second (sampled every 50 ms), \
         once over the whole run (the step's thousands of handshakes land in its first second) \
         and once within steady play (from the last match's start to the end of the first \
         one's play, as the load generators report them, less half a second at each end: \
         every match running, no handshakes; the per-core figures below are planned with it), \
         and the machine's (every process, other work included) from `/proc/stat`. Each load generator runs all its peers on one event loop (one socket \
         each, one `mio` poller, `recvmmsg` batches, a timer heap). The echo baseline is the same socket code doing nothing but \
         sending each datagram back (`relay::serve::serve_echo`), fed by `bench echo-load` at the \
         rate (datagrams in + out per second) of the ladder's largest step that held, 60-byte \
         datagrams from up to 1024 sockets.",
        cap.procs, cap.turns
    );
    if let Some(l) = cap.load_average {
        let _ = writeln!(
            md,
            "\nThe machine has {} cores; its 1-minute load average when this section started: \
             {l:.1} (other work competes for the same cores). A step that does not hold is run \
             once more and must fail twice; both runs are listed.",
            cap.cores
        );
    }
    md.push_str("\n| threads | matches | peers | p50 ms | p99 ms | stall ms/min | relay CPU % (run / busiest 1 s / busiest 1 s of steady play) | relay µs/datagram | load gen CPU % | machine CPU % | pkts/s in | pkts/s out | relay peak RSS MiB |\n");
    md.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for lad in &cap.ladders {
        for s in &lad.steps {
            let _ = writeln!(
                md,
                "| {} | {} | {}/{} completed | {:.0} | {:.0} | {:.0} | {:.0} / {:.0} / {} | {:.1} | {:.0} | {:.0} | {:.0} | {:.0} | {:.1} |",
                s.threads,
                s.matches,
                s.load.completed,
                s.load.peers,
                s.load.p50_ms,
                s.load.p99_ms,
                s.load.stall_per_min_ms,
                s.relay_cpu,
                s.relay_cpu_peak,
                s.relay_cpu_steady
                    .map_or_else(|| "-".to_owned(), |c| format!("{c:.0}")),
                s.relay_ns_per_datagram() / 1000.0,
                s.loadgen_cpu,
                s.machine_cpu,
                s.pps_in,
                s.pps_out,
                s.peak_rss_kib as f64 / 1024.0
            );
        }
    }
    md.push('\n');
    stages(&mut md, cap);
    for lad in &cap.ladders {
        let Some(h) = &lad.held else {
            let _ = writeln!(
                md,
                "- **--threads {}**: no step held: {}.",
                lad.threads, lad.stopped
            );
            continue;
        };
        let base_rss = lad.steps.first().map_or(0, |s| s.peak_rss_kib);
        let per_match = h.peak_rss_kib.saturating_sub(base_rss) as f64 / h.matches.max(1) as f64;
        // Steady play when it lasted a second; else the whole run's peak.
        let (busiest, when) = h.relay_cpu_steady.map_or(
            (
                h.relay_cpu_peak.max(h.relay_cpu),
                "of the run, joins included",
            ),
            |c| (c, "of steady play"),
        );
        let per_core = h.matches as f64 / (busiest / 100.0).max(1e-9);
        let _ = write!(
            md,
            "- **--threads {}: held {} concurrent matches** ({} peers) at {:.0} datagrams/s in, \
             {:.0} out, relay CPU {:.0} % of one core in its busiest second {when} ({:.0} % per \
             loop; {:.1} µs per datagram moved over the run), i.e. **{:.0} matches per fully used \
             relay core** at this load (linear extrapolation of matches / relay CPU in that \
             second); peak RSS {:.1} MiB, {:.1} KiB per match above the one-match \
             step. {}.",
            lad.threads,
            h.matches,
            h.load.peers,
            h.pps_in,
            h.pps_out,
            busiest,
            busiest / lad.threads.max(1) as f64,
            h.relay_ns_per_datagram() / 1000.0,
            per_core,
            h.peak_rss_kib as f64 / 1024.0,
            per_match,
            lad.stopped
        );
        if let Some(e) = &lad.echo {
            let _ = write!(
                md,
                " Echo baseline ({} loop(s)) at {:.0} datagrams/s: {:.1} µs CPU per datagram \
                 ({:.0} % of a core); the relay's per datagram is **{:.1}x** the echo's.",
                e.threads,
                e.pps,
                e.ns_per_datagram / 1000.0,
                e.cpu,
                h.relay_ns_per_datagram() / e.ns_per_datagram.max(1e-9)
            );
        }
        md.push('\n');
    }
    md
}

/// The in-process table: the relay's CPU per datagram by stage.
fn stages(md: &mut String, cap: &Capacity) {
    if cap.stages.is_empty() {
        return;
    }
    md.push_str(
        "Where the relay's CPU goes, per datagram moved (in + out), by stage: the same relay \
         (transport `Server`, glue, `Router`) in process on the deterministic netsim with a \
         virtual clock and no socket (`bench --internal-hotpath M T`), each entry point timed \
         with the real clock. The protocol's own cost, to which the serve loop adds the \
         kernel's.\n\n| matches | peers completed | receive ns | route ns | transmit ns | \
         poll_timeout ns | total ns |\n|---|---|---|---|---|---|---|\n",
    );
    for s in &cap.stages {
        let _ = writeln!(
            md,
            "| {} | {}/{} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} |",
            s.matches,
            s.completed,
            s.matches * 4,
            s.per_datagram(s.receive_ns),
            s.per_datagram(s.route_ns),
            s.per_datagram(s.transmit_ns),
            s.per_datagram(s.timeout_ns),
            s.total_per_datagram()
        );
    }
    md.push('\n');
}
