//! What a [`Peer`](super::Peer) reports at the end of a run: the `--json`
//! output of the `peer` binary and one row of `relay demo`'s table.

use crate::proto::{EndReason, RejectReason};
use serde::Serialize;

/// A desync as this peer learned it from the relay.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DesyncSummary {
    /// The first turn whose hashes disagreed.
    pub turn: u32,
    /// Players outside the majority (empty when the relay cannot tell).
    pub odd_players: Vec<u8>,
    /// Differing sections, once the relay compared them.
    pub sections: Vec<String>,
}

/// The relay refused this peer (its handshake or its join).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PeerRefusal {
    /// Why, typed.
    pub reason: RejectReason,
    /// Specifics the relay added, if any.
    pub detail: Option<String>,
}

impl std::fmt::Display for PeerRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.detail {
            Some(d) => write!(f, "{} ({d})", self.reason),
            None => write!(f, "{}", self.reason),
        }
    }
}

/// Latency percentiles in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct LatencyMs {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
}

/// What a peer's speculative view did (`peer --speculate`, `relay demo
/// --speculate`): see [`SpeculationStats`](super::SpeculationStats).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct SpeculationSummary {
    /// Frames rendered.
    pub frames: u64,
    /// Frames that fell back to the confirmed world (over budget).
    pub fallbacks: u64,
    /// Entities mispredicted, summed over confirmed turns.
    pub corrections: u64,
    /// Corrections per minute of confirmed turns compared.
    pub corrections_per_min: f64,
    /// Confirmed turns compared with the speculative world.
    pub compared_turns: u64,
    /// Of those, turns with at least one mispredicted entity.
    pub mispredicted_turns: u64,
    /// The largest correction of one entity, in consecutive mispredicted turns.
    pub max_correction_turns: u32,
    /// Own commands shown speculatively.
    pub shown: u64,
    /// Of those, the ones shown by the first frame after their submission.
    pub shown_next_frame: u64,
    /// The most frames an own command waited to be shown.
    pub most_frames_to_show: u32,
}

impl SpeculationSummary {
    /// The summary of `stats` for a match of `turn_length` turns.
    #[must_use]
    pub fn new(stats: super::SpeculationStats, turn_length: crate::time::Duration) -> Self {
        let minutes = stats.compared_turns as f64 * turn_length.as_secs_f64() / 60.0;
        Self {
            frames: stats.frames,
            fallbacks: stats.fallbacks,
            corrections: stats.corrections,
            corrections_per_min: if minutes > 0.0 {
                stats.corrections as f64 / minutes
            } else {
                0.0
            },
            compared_turns: stats.compared_turns,
            mispredicted_turns: stats.mispredicted_turns,
            max_correction_turns: stats.max_correction_turns,
            shown: stats.shown,
            shown_next_frame: stats.shown_next_frame,
            most_frames_to_show: stats.most_frames_to_show,
        }
    }
}

/// A peer's end-of-run summary; read it with [`Peer::summary`](super::Peer::summary)
/// when the run is over (or at any time, for a progress display).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PeerSummary {
    /// This peer's slot, once started.
    pub player: Option<u8>,
    /// The last simulated turn.
    pub final_turn: Option<u32>,
    /// State hash after it, hex.
    pub final_hash: Option<String>,
    /// Turns simulated.
    pub turns: u32,
    /// Total stall time.
    pub stall_ms: f64,
    /// Command → execution latency of the commands submitted after the
    /// match's first 5 s (steady state); of all commands if there are none.
    pub turn_latency_ms: LatencyMs,
    /// Transport RTT: the median of the figures sampled once a second over
    /// the match.
    pub rtt_ms: f64,
    /// Transport RTT tail: the median of the p99s of the last 64 raw RTT
    /// samples, sampled once a second over the match; with the turn and
    /// the jitter buffer, this peer's p99 latency budget.
    pub rtt_p99_ms: f64,
    /// This peer's latency floor: its RTT plus half a turn, the least a
    /// command can take to be decided by the relay and come back, on average.
    pub floor_ms: f64,
    /// Under the relay's clock: how long the jitter buffer holds a bundle
    /// that arrives as fast as the fastest recent one.
    pub jitter_buffer_ms: f64,
    /// Transport loss fraction.
    pub loss: f64,
    /// Message bytes per second, up plus down, over the match.
    pub bytes_per_s: f64,
    /// Message bytes per second sent.
    pub bytes_up_per_s: f64,
    /// Message bytes per second received.
    pub bytes_down_per_s: f64,
    /// Input delay at the end, in turns.
    pub input_delay: u8,
    /// Inputs of ours that arrived late.
    pub late_inputs: u32,
    /// Desyncs reported by the relay.
    pub desyncs: Vec<DesyncSummary>,
    /// Players dropped, with the turn.
    pub dropped: Vec<(u8, u32)>,
    /// Whether the match ended normally (all turns played).
    pub completed: bool,
    /// Why the match ended, as the relay announced it (`None`: no end was
    /// announced, e.g. the connection was lost first).
    pub ended: Option<EndReason>,
    /// Why the session ended early, if it did.
    pub error: Option<String>,
    /// Why the relay refused this peer, if it did (`peer` then exits 5).
    pub refused: Option<PeerRefusal>,
    /// Times this peer came back into its held slot (0 or 1 per process).
    pub rejoins: u32,
    /// From sending the rejoin to caught up with the live turn, in ms.
    pub rejoin_ms: Option<f64>,
    /// Turn latency of the commands submitted at least 5 s after the relay
    /// last took this peer back (a relay restart): next to `floor_ms`,
    /// whether latency came back to its floor. `None` without a reconnect.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_after_reconnect_ms: Option<LatencyMs>,
    /// Times this peer (player or spectator) lost its connection to the
    /// relay and opened a new one to come back keeping its world (the
    /// relay restarted, or the path broke).
    pub reconnects: u32,
    /// Snapshots the relay asked this peer for and it uploaded.
    pub snapshots_uploaded: u32,
    /// With speculation on: from each own command's submission to the end of
    /// the first frame whose speculative view showed it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub own_feedback_ms: Option<LatencyMs>,
    /// With speculation on: frames, fallbacks and corrections.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speculation: Option<SpeculationSummary>,
}

/// One human line about a peer that has not started playing yet: waiting
/// in the lobby of `match_name` with `lobby` = (joined, slots), or (`None`)
/// still waiting for the relay to seat it. Print it instead of
/// [`progress_line`] until the match starts.
#[must_use]
pub fn waiting_line(match_name: &str, lobby: Option<(u8, u8)>) -> String {
    match lobby {
        Some((joined, slots)) => format!(
            "waiting in the lobby of match {match_name:?}: {joined} of {slots} players joined"
        ),
        None => format!("waiting for the relay to seat this peer in match {match_name:?}"),
    }
}

/// One human progress line from a peer's figures (turn, RTT, loss, stall,
/// input delay), as the `peer` binary and `relay demo` print it about once
/// a second.
#[must_use]
pub fn progress_line(s: &crate::session::SessionStats) -> String {
    format!(
        "turn {:>5}  rtt {:>6.1} ms  loss {:>4.1}%  stall {:>6.0} ms  delay {}",
        s.last_turn.map_or(0, |t| t.0),
        s.link.rtt.as_millis_f64(),
        s.link.loss * 100.0,
        s.stall.as_millis_f64(),
        s.input_delay
    )
}
