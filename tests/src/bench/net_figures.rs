//! The net section's figures: what a run prints (its peers' figures and
//! the namespace's TCP counters), each player against its own floor, and
//! runs pooled into the points the report tabulates.

use super::benchpeer::PeerFigures;
use super::net_bench::Carrier;
use super::stats::{Summary, percentile};

/// TCP segment counters of a namespace (`/proc/net/snmp`), over one run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TcpSegments {
    /// Segments sent (every hop, both directions).
    pub out: u64,
    /// Segments retransmitted.
    pub retrans: u64,
}

/// What a child run prints.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunOutput {
    /// Each peer's figures.
    pub peers: Vec<PeerFigures>,
    /// The namespace's TCP counters over the run (only TCP runs use TCP there).
    pub tcp: Option<TcpSegments>,
}

/// IPv4 + UDP header bytes per datagram.
pub const UDP_IP_HEADER: f64 = 28.0;
/// IPv4 + TCP header bytes per segment with Linux's default timestamp option.
pub const TCP_IP_HEADER: f64 = 52.0;

/// Reads one counter from the text of `/proc/net/snmp` (a header line of
/// names followed by a line of values, both starting with `group:`).
#[must_use]
pub fn snmp_counter(text: &str, group: &str, name: &str) -> Option<u64> {
    let prefix = format!("{group}:");
    let mut lines = text.lines().filter(|l| l.starts_with(&prefix));
    let names = lines.next()?;
    let values = lines.next()?;
    let i = names.split_whitespace().position(|n| n == name)?;
    values.split_whitespace().nth(i)?.parse().ok()
}

/// One player's figures over one run (commands submitted after the warm-up).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PlayerFigures {
    /// Median RTT to the relay, ms (`NaN` when unknown).
    pub rtt_ms: f64,
    /// Its floor: median RTT plus half a turn, ms.
    pub floor_ms: f64,
    /// Latency p50, ms.
    pub p50_ms: f64,
    /// Latency p99, ms.
    pub p99_ms: f64,
    /// The p99 budget: the RTT's p99 + one turn + the player's
    /// jitter buffer, ms (with the median RTT when no p99 was measured;
    /// `NaN` when the RTT is unknown).
    pub budget_ms: f64,
}

impl PlayerFigures {
    /// One peer's figures against its floor (`turn_ms` is the turn length).
    #[must_use]
    pub fn of(peer: &PeerFigures, turn_ms: f64) -> Self {
        // Zero means no RTT was measured: no floor rather than a floor of half a turn.
        let rtt_ms = if peer.rtt_p50_ms > 0.0 {
            peer.rtt_p50_ms
        } else {
            f64::NAN
        };
        let steady = peer.steady_latencies_ms();
        Self {
            rtt_ms,
            floor_ms: rtt_ms + turn_ms / 2.0,
            p50_ms: percentile(steady, 50.0),
            p99_ms: percentile(steady, 99.0),
            budget_ms: if peer.rtt_p99_ms > 0.0 {
                peer.rtt_p99_ms
            } else {
                rtt_ms
            } + turn_ms
                + peer.jitter_buffer_ms,
        }
    }

    /// p50 ÷ floor (`NaN` when either is unknown).
    #[must_use]
    pub fn ratio(&self) -> f64 {
        self.p50_ms / self.floor_ms
    }
}

/// One run's figures for one carrier at one loss rate, pooled over its peers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunFigures {
    /// Every latency sample after the warm-up of every peer, ms.
    pub latencies_ms: Vec<f64>,
    /// Each peer's figures, in peer order.
    pub players: Vec<PlayerFigures>,
    /// Mean over peers of stall time per minute, ms.
    pub stall_per_min_ms: f64,
    /// Mean over peers of carrier bytes per second (up + down).
    pub bytes_per_s: f64,
    /// Mean over peers of bytes per second with IP headers (TCP: from the
    /// namespace's segment count, one hop of two; `NaN` when unknown).
    pub wire_bytes_per_s: f64,
    /// TCP retransmitted segments per peer link per minute (`NaN` for UDP or unknown).
    pub retrans_per_min: f64,
    /// Peers whose match completed.
    pub completed: usize,
    /// Peers.
    pub peers: usize,
    /// Why peers failed.
    pub errors: Vec<String>,
    /// Peers that played every turn but never got the end-of-match message.
    pub end_lost: usize,
}

impl RunFigures {
    /// Pools the peers of one run of `carrier`.
    #[must_use]
    pub fn pool_run(carrier: Carrier, run: &RunOutput, turn_ms: f64) -> Self {
        let peers = &run.peers;
        let n = peers.len().max(1) as f64;
        let mut f = Self::pool(peers, turn_ms);
        let secs = peers.iter().map(|p| p.secs).sum::<f64>() / n;
        match (carrier, run.tcp) {
            (Carrier::Udp, _) => {
                f.wire_bytes_per_s = peers
                    .iter()
                    .map(|p| {
                        p.bytes_per_s()
                            + UDP_IP_HEADER * (p.packets_sent + p.packets_received) as f64
                                / p.secs.max(1e-9)
                    })
                    .sum::<f64>()
                    / n;
            }
            (Carrier::Tcp, Some(t)) if secs > 0.0 => {
                // Every stream crosses two hops (peer-proxy, proxy-relay) of about equal segments;
                // only the first one loses, so retransmissions all belong to it.
                f.wire_bytes_per_s = f.bytes_per_s + TCP_IP_HEADER * t.out as f64 / 2.0 / n / secs;
                f.retrans_per_min = t.retrans as f64 / n / secs * 60.0;
            }
            (Carrier::Tcp, _) => {}
        }
        f
    }

    /// Pools the peers of one run.
    #[must_use]
    pub fn pool(peers: &[PeerFigures], turn_ms: f64) -> Self {
        let n = peers.len().max(1) as f64;
        Self {
            wire_bytes_per_s: f64::NAN,
            retrans_per_min: f64::NAN,
            latencies_ms: peers
                .iter()
                .flat_map(|p| p.steady_latencies_ms().iter().copied())
                .collect(),
            players: peers
                .iter()
                .map(|p| PlayerFigures::of(p, turn_ms))
                .collect(),
            stall_per_min_ms: peers.iter().map(PeerFigures::stall_per_min_ms).sum::<f64>() / n,
            bytes_per_s: peers.iter().map(PeerFigures::bytes_per_s).sum::<f64>() / n,
            completed: peers.iter().filter(|p| p.completed).count(),
            peers: peers.len(),
            errors: peers
                .iter()
                .filter(|p| !p.completed)
                .filter_map(|p| p.error.clone())
                .collect(),
            end_lost: peers.iter().filter(|p| p.completed && !p.end_seen).count(),
        }
    }

    /// The mean over players of `f`, leaving out unknown (`NaN`) values.
    #[must_use]
    pub fn player_mean(&self, f: impl Fn(&PlayerFigures) -> f64) -> f64 {
        let v: Vec<f64> = self
            .players
            .iter()
            .map(f)
            .filter(|x| x.is_finite())
            .collect();
        if v.is_empty() {
            f64::NAN
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    }

    /// The worst (highest) player's p50 ÷ floor; `NaN` when no player has both.
    #[must_use]
    pub fn worst_ratio(&self) -> f64 {
        self.players
            .iter()
            .map(PlayerFigures::ratio)
            .filter(|x| x.is_finite())
            .fold(f64::NAN, f64::max)
    }
}

/// All runs of one carrier at one loss rate and player count.
#[derive(Clone, Debug, Default)]
pub struct Point {
    /// Players per match.
    pub players: u8,
    /// Loss fraction.
    pub loss: f64,
    /// Carrier.
    pub carrier: Option<Carrier>,
    /// Successful runs.
    pub runs: Vec<RunFigures>,
    /// Failed runs' errors.
    pub errors: Vec<String>,
}

impl Point {
    fn summary(&self, f: impl Fn(&RunFigures) -> f64) -> Option<Summary> {
        let v: Vec<f64> = self.runs.iter().map(f).filter(|x| x.is_finite()).collect();
        Summary::of(&v)
    }
    /// Mean player RTT over runs.
    #[must_use]
    pub fn rtt(&self) -> Option<Summary> {
        self.summary(|r| r.player_mean(|p| p.rtt_ms))
    }
    /// Mean player floor over runs.
    #[must_use]
    pub fn floor(&self) -> Option<Summary> {
        self.summary(|r| r.player_mean(|p| p.floor_ms))
    }
    /// Mean player p50 over runs.
    #[must_use]
    pub fn p50(&self) -> Option<Summary> {
        self.summary(|r| r.player_mean(|p| p.p50_ms))
    }
    /// Mean player p99 budget (RTT + turn + jitter buffer) over runs.
    #[must_use]
    pub fn budget(&self) -> Option<Summary> {
        self.summary(|r| r.player_mean(|p| p.budget_ms))
    }
    /// The worst player's p50 ÷ floor over runs.
    #[must_use]
    pub fn worst_ratio(&self) -> Option<Summary> {
        self.summary(RunFigures::worst_ratio)
    }
    /// p99 of every player's samples pooled, over runs.
    #[must_use]
    pub fn p99(&self) -> Option<Summary> {
        self.summary(|r| percentile(&r.latencies_ms, 99.0))
    }
    /// Max over runs.
    #[must_use]
    pub fn max(&self) -> Option<Summary> {
        self.summary(|r| r.latencies_ms.iter().copied().fold(f64::NAN, f64::max))
    }
    /// Stall per minute over runs.
    #[must_use]
    pub fn stall(&self) -> Option<Summary> {
        self.summary(|r| r.stall_per_min_ms)
    }
    /// Bytes per second per peer over runs.
    #[must_use]
    pub fn bytes(&self) -> Option<Summary> {
        self.summary(|r| r.bytes_per_s)
    }
    /// Bytes per second per peer with IP headers over runs.
    #[must_use]
    pub fn wire_bytes(&self) -> Option<Summary> {
        self.summary(|r| r.wire_bytes_per_s)
    }
    /// TCP retransmissions per link per minute over runs.
    #[must_use]
    pub fn retrans(&self) -> Option<Summary> {
        self.summary(|r| r.retrans_per_min)
    }
    /// Player `i`'s figure `f` over runs.
    #[must_use]
    pub fn player(&self, i: usize, f: impl Fn(&PlayerFigures) -> f64) -> Option<Summary> {
        self.summary(|r| r.players.get(i).map_or(f64::NAN, &f))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pooling_and_counters() {
        let a = PeerFigures {
            latencies_ms: vec![100.0, 200.0],
            stall_ms: 60.0,
            secs: 60.0,
            bytes_sent: 600,
            bytes_received: 600,
            completed: true,
            ..PeerFigures::default()
        };
        let b = PeerFigures {
            latencies_ms: vec![300.0],
            stall_ms: 0.0,
            ..a.clone()
        };
        let snmp = "Ip: A B\nIp: 1 2\nTcp: RtoAlgorithm OutSegs RetransSegs\nTcp: 1 500 7\n";
        assert_eq!(snmp_counter(snmp, "Tcp", "OutSegs"), Some(500));
        assert_eq!(snmp_counter(snmp, "Tcp", "RetransSegs"), Some(7));
        assert_eq!(snmp_counter(snmp, "Udp", "OutDatagrams"), None);
        let tcp = RunOutput {
            peers: vec![a.clone(), a.clone()],
            tcp: Some(TcpSegments {
                out: 480,
                retrans: 6,
            }),
        };
        let t = RunFigures::pool_run(Carrier::Tcp, &tcp, 100.0);
        // 20 B/s payload + 52 bytes × 480 / 2 hops / 2 peers / 60 s.
        assert_eq!(t.wire_bytes_per_s, 20.0 + 52.0 * 2.0);
        assert_eq!(t.retrans_per_min, 3.0);
        let r = RunFigures::pool(&[a, b], 100.0);
        assert_eq!(r.latencies_ms, vec![100.0, 200.0, 300.0]);
        assert_eq!(r.stall_per_min_ms, 30.0);
        assert_eq!(r.bytes_per_s, 20.0);
        assert_eq!((r.completed, r.peers), (2, 2));
        assert_eq!(Carrier::parse("tcp"), Some(Carrier::Tcp));
        assert_eq!(Carrier::parse("x"), None);
    }

    /// Each player is set against its own floor (median RTT + half a turn),
    /// from its samples after the warm-up only; a player with no RTT has no floor.
    #[test]
    fn each_player_against_its_own_floor_after_the_warm_up() {
        let near = PeerFigures {
            // Two warm-up samples (the old fixed delay), then steady ones.
            latencies_ms: vec![300.0, 300.0, 100.0, 110.0, 120.0],
            warmup_samples: 2,
            rtt_p50_ms: 60.0,
            jitter_buffer_ms: 10.0,
            completed: true,
            ..PeerFigures::default()
        };
        let far = PeerFigures {
            latencies_ms: vec![550.0, 560.0, 570.0],
            warmup_samples: 0,
            rtt_p50_ms: 500.0,
            rtt_p99_ms: 520.0,
            ..near.clone()
        };
        let unknown = PeerFigures {
            rtt_p50_ms: 0.0,
            ..near.clone()
        };
        let r = RunFigures::pool(&[near, far, unknown], 100.0);
        assert_eq!(r.latencies_ms.len(), 3 + 3 + 3, "warm-up samples left out");
        let p = &r.players;
        assert_eq!(
            (p[0].rtt_ms, p[0].floor_ms, p[0].p50_ms),
            (60.0, 110.0, 110.0)
        );
        assert_eq!(p[0].budget_ms, 60.0 + 100.0 + 10.0);
        assert_eq!((p[1].floor_ms, p[1].p50_ms), (550.0, 560.0));
        assert_eq!(
            p[1].budget_ms,
            520.0 + 100.0 + 10.0,
            "the p99 RTT when measured"
        );
        assert!(p[2].floor_ms.is_nan() && p[2].ratio().is_nan());
        // The near player sits at its floor (1.0); the far one just above (560 / 550).
        assert_eq!(r.worst_ratio(), 560.0 / 550.0);
        // Means leave the unknown player out.
        assert_eq!(r.player_mean(|p| p.rtt_ms), 280.0);
        let point = Point {
            players: 3,
            loss: 0.0,
            carrier: Some(Carrier::Udp),
            runs: vec![r],
            errors: Vec::new(),
        };
        assert_eq!(point.floor().map(|s| s.median), Some(330.0));
        assert_eq!(point.player(1, |p| p.p50_ms).map(|s| s.median), Some(560.0));
        assert_eq!(point.player(7, |p| p.p50_ms), None);
    }
}
