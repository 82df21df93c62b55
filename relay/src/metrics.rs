//! Relay health and counters: atomics the event loops store into
//! ([`Metrics::set`]) and readers load, rendered in Prometheus text format
//! ([`Metrics::render`]), and the loops' heartbeats for the watchdog
//! ([`Metrics::watch`]). Pure counters: serving them over HTTP is
//! [`crate::http`]'s, so a slow or hostile scraper can never block a loop.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration as StdDuration;

/// One exported series.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[allow(missing_docs)] // each variant is documented by its HELP text in `DEFS`
pub enum Metric {
    Up,
    Draining,
    Matches,
    MatchesRunning,
    MatchesStarted,
    MatchesEnded,
    Peers,
    PacketsIn,
    PacketsOut,
    BytesIn,
    BytesOut,
    MessagesIn,
    DropMalformed,
    DropWrongVersion,
    DropWrongProtocol,
    DropServerFull,
    DropBadCookie,
    DropExpiredCookie,
    DropUnknownSender,
    DropAuthFailed,
    DropReplayed,
    DropRepliesQueueFull,
    DropMessageUndecodable,
    DropMessageBadState,
    DropInputLate,
    DropInputDuplicate,
    DropInputRefused,
    DropHashRefused,
    DropSendQueue,
    DropConnectionsRefused,
    DropJoinsRefused,
    DropRateLimitedConn,
    DropRateLimitedAddr,
    DropTokenMissing,
    DropTokenExpired,
    DropTokenForged,
    DropTokenReused,
    DropTokenTableFull,
    DropTokenWrongMatch,
    DropTokenWrongSlot,
    DropTokenWrongKind,
    DropTokenWrongInstance,
    DropCookieReplayed,
    DropHandshakeWhileHeard,
    Desyncs,
    StallTurnsDeadline,
    StallTurnsWaiting,
    TurnsClosed,
    PlayersDropped,
    RecordErrors,
    RecordingsLive,
    LoopStalled,
    WatchdogTrips,
    DropInputOverBudget,
    ConnectionsMoved,
    DatagramsForwarded,
    SnapshotBytes,
    SnapshotUploadBytes,
    SnapshotTailBytes,
    SnapshotTailTurns,
    SnapshotsAgreed,
    SnapshotsRefused,
    Rejoins,
    RejoinsRefused,
    HandoffDatagramsDropped,
    HandoffConnectionsDropped,
    ClockSeqRepeated,
    ClockSeqJumped,
    DropBulkRefused,
    DropBulkExpired,
    DropReorderRefused,
    ConnectionsCutOff,
    SnapshotRestoresFailed,
    SnapshotsReoffered,
    SnapshotCopiesRefused,
    MemoryConnections,
    MemoryBacklogs,
    MemorySnapshots,
    MemoryRecordings,
    MemoryBudget,
    MemoryFull,
    MemoryRefused,
    SpectatorHashesVerified,
    SpectatorHashMismatches,
    SpectatorHashesUnchecked,
    MatchesResumed,
    Reconnects,
    TurnsHandedBack,
    HandBacksRefused,
}

/// How many series there are.
const COUNT: usize = Metric::HandBacksRefused as usize + 1;

/// Name (with labels), type, help; in [`Metric`] order.
const DEFS: [(&str, &str, &str); COUNT] = [
    ("relay_up", "gauge", "1 while the relay loop runs"),
    (
        "relay_draining",
        "gauge",
        "1 after SIGTERM: no new matches, running ones finishing",
    ),
    ("relay_matches", "gauge", "Matches in lobby or running"),
    (
        "relay_matches_running",
        "gauge",
        "Matches whose game is running",
    ),
    ("relay_matches_started_total", "counter", "Matches started"),
    ("relay_matches_ended_total", "counter", "Matches ended"),
    ("relay_peers", "gauge", "Connections tracked by the router"),
    (
        "relay_packets_in_total",
        "counter",
        "UDP datagrams received",
    ),
    ("relay_packets_out_total", "counter", "UDP datagrams sent"),
    (
        "relay_bytes_in_total",
        "counter",
        "UDP payload bytes received",
    ),
    ("relay_bytes_out_total", "counter", "UDP payload bytes sent"),
    (
        "relay_messages_in_total",
        "counter",
        "Turn-protocol messages received",
    ),
    (
        "relay_drops_total{reason=\"malformed\"}",
        "counter",
        "Datagrams or messages dropped, by reason",
    ),
    ("relay_drops_total{reason=\"wrong_version\"}", "", ""),
    ("relay_drops_total{reason=\"wrong_protocol\"}", "", ""),
    ("relay_drops_total{reason=\"server_full\"}", "", ""),
    ("relay_drops_total{reason=\"bad_cookie\"}", "", ""),
    ("relay_drops_total{reason=\"expired_cookie\"}", "", ""),
    ("relay_drops_total{reason=\"unknown_sender\"}", "", ""),
    ("relay_drops_total{reason=\"auth_failed\"}", "", ""),
    ("relay_drops_total{reason=\"replayed\"}", "", ""),
    ("relay_drops_total{reason=\"reply_queue_full\"}", "", ""),
    ("relay_drops_total{reason=\"undecodable_message\"}", "", ""),
    ("relay_drops_total{reason=\"bad_state\"}", "", ""),
    ("relay_drops_total{reason=\"input_late\"}", "", ""),
    ("relay_drops_total{reason=\"input_duplicate\"}", "", ""),
    ("relay_drops_total{reason=\"input_refused\"}", "", ""),
    ("relay_drops_total{reason=\"hash_refused\"}", "", ""),
    ("relay_drops_total{reason=\"send_queue\"}", "", ""),
    ("relay_drops_total{reason=\"connection_refused\"}", "", ""),
    ("relay_drops_total{reason=\"join_refused\"}", "", ""),
    (
        "relay_drops_total{reason=\"rate_limited_connection\"}",
        "",
        "",
    ),
    ("relay_drops_total{reason=\"rate_limited_address\"}", "", ""),
    ("relay_drops_total{reason=\"token_missing\"}", "", ""),
    ("relay_drops_total{reason=\"token_expired\"}", "", ""),
    ("relay_drops_total{reason=\"token_forged\"}", "", ""),
    ("relay_drops_total{reason=\"token_reused\"}", "", ""),
    ("relay_drops_total{reason=\"token_table_full\"}", "", ""),
    ("relay_drops_total{reason=\"token_wrong_match\"}", "", ""),
    ("relay_drops_total{reason=\"token_wrong_slot\"}", "", ""),
    ("relay_drops_total{reason=\"token_wrong_kind\"}", "", ""),
    ("relay_drops_total{reason=\"token_wrong_instance\"}", "", ""),
    ("relay_drops_total{reason=\"cookie_replayed\"}", "", ""),
    (
        "relay_drops_total{reason=\"handshake_while_heard\"}",
        "",
        "",
    ),
    (
        "relay_desyncs_total",
        "counter",
        "Turns whose hashes disagreed",
    ),
    (
        "relay_stalls_total{kind=\"deadline_closed\"}",
        "counter",
        "Turns closed by the deadline with inputs missing, or waiting past it",
    ),
    ("relay_stalls_total{kind=\"waiting\"}", "", ""),
    ("relay_turns_closed_total", "counter", "Turns closed"),
    ("relay_players_dropped_total", "counter", "Players dropped"),
    (
        "relay_record_errors_total",
        "counter",
        "Replay recordings that failed (each reported once)",
    ),
    ("relay_recordings", "gauge", "Replays being written"),
    (
        "relay_loop_stalled",
        "gauge",
        "1 while the event loop has not completed an iteration within the watchdog time",
    ),
    (
        "relay_watchdog_trips_total",
        "counter",
        "Times the watchdog found the event loop stalled",
    ),
    (
        "relay_input_over_budget_total",
        "counter",
        "Inputs refused because they would exceed the player's byte budget for the turn",
    ),
    (
        "relay_connections_moved_total",
        "counter",
        "Connections moved to the event loop hosting the match they joined (--threads)",
    ),
    (
        "relay_datagrams_forwarded_total",
        "counter",
        "Datagrams received by one event loop and handed to the loop serving their sender",
    ),
    (
        "relay_snapshot_bytes{kind=\"agreed\"}",
        "gauge",
        "Bytes the snapshot stores of all matches hold: agreed snapshots, uploads under way, bundle tails",
    ),
    ("relay_snapshot_bytes{kind=\"upload\"}", "", ""),
    ("relay_snapshot_bytes{kind=\"tail\"}", "", ""),
    (
        "relay_snapshot_tail_turns",
        "gauge",
        "Bundles held after the agreed snapshots, all matches",
    ),
    (
        "relay_snapshots_total{outcome=\"agreed\"}",
        "counter",
        "Uploaded snapshots kept (hash agreed) or thrown away",
    ),
    ("relay_snapshots_total{outcome=\"refused\"}", "", ""),
    (
        "relay_rejoins_total{outcome=\"accepted\"}",
        "counter",
        "Rejoins into held slots, accepted or refused",
    ),
    ("relay_rejoins_total{outcome=\"refused\"}", "", ""),
    (
        "relay_handoffs_dropped_total{kind=\"datagram\"}",
        "counter",
        "Hand-overs between event loops lost: forwarded datagrams (the receiving loop's mailbox was full), connections (its mailbox or connection table was full)",
    ),
    ("relay_handoffs_dropped_total{kind=\"connection\"}", "", ""),
    (
        "relay_clock_inputs_odd_total{kind=\"seq_repeated\"}",
        "counter",
        "Clock policy: inputs stamped anyway whose sequence number repeated or went back, or jumped far ahead",
    ),
    ("relay_clock_inputs_odd_total{kind=\"seq_jumped\"}", "", ""),
    (
        "relay_transport_drops_total{reason=\"bulk_refused\"}",
        "counter",
        "Bulk messages refused unread (not asked for) or thrown away after a stall, and reliable frames refused by the reorder cap (resent by the peer)",
    ),
    (
        "relay_transport_drops_total{reason=\"bulk_expired\"}",
        "",
        "",
    ),
    (
        "relay_transport_drops_total{reason=\"reorder_refused\"}",
        "",
        "",
    ),
    (
        "relay_connections_cut_off_total",
        "counter",
        "Connections the transport cut off for acknowledging nothing or leaving their window full",
    ),
    (
        "relay_snapshot_receivers_total{event=\"restore_failed\"}",
        "counter",
        "Snapshot receivers whose restore failed (reported SnapshotFailed), receivers sent a Reoffer, and second snapshot copies refused to a receiver that had one queued",
    ),
    (
        "relay_snapshot_receivers_total{event=\"reoffered\"}",
        "",
        "",
    ),
    (
        "relay_snapshot_receivers_total{event=\"copy_refused\"}",
        "",
        "",
    ),
    (
        "relay_memory_bytes{part=\"connections\"}",
        "gauge",
        "Bytes the relay holds, by part, as its memory budget counts them (measured every 250 ms): transport connections, send backlogs, snapshots with uploads and rejoin tails, recordings",
    ),
    ("relay_memory_bytes{part=\"backlogs\"}", "", ""),
    ("relay_memory_bytes{part=\"snapshots\"}", "", ""),
    ("relay_memory_bytes{part=\"recordings\"}", "", ""),
    (
        "relay_memory_budget_bytes",
        "gauge",
        "The relay's memory budget (--max-memory-mib)",
    ),
    (
        "relay_memory_full",
        "gauge",
        "1 while a part of the relay's memory budget (connections, snapshots, recordings) is at its share: what would add to it is refused (memory_full), running matches play on",
    ),
    (
        "relay_memory_refused_total",
        "counter",
        "New connections, joins and spectators refused at the memory budget",
    ),
    (
        "relay_spectator_hashes_total{result=\"verified\"}",
        "counter",
        "Spectators' hash reports (live viewers' included): equal to the turn's agreed hash, different, or for a turn not judged yet or forgotten",
    ),
    ("relay_spectator_hashes_total{result=\"mismatch\"}", "", ""),
    ("relay_spectator_hashes_total{result=\"unchecked\"}", "", ""),
    (
        "relay_matches_resumed_total",
        "counter",
        "Matches resumed from their recordings after a restart",
    ),
    (
        "relay_reconnects_total",
        "counter",
        "Players and spectators back on a new connection with their world kept",
    ),
    (
        "relay_turns_handed_back_total",
        "counter",
        "Turns a restart had lost, adopted from the copies the players handed back",
    ),
    (
        "relay_hand_backs_refused_total",
        "counter",
        "Players refused after a restart for handing back a bundle without the relay's tag",
    ),
];

/// Default for [`Metrics::with_watchdog`]: a loop iteration normally takes
/// well under 20 ms (its longest wait), so 5 s without one is a wedge.
pub const DEFAULT_WATCHDOG: StdDuration = StdDuration::from_secs(5);

/// Counters shared between the relay loop (writer) and the HTTP thread
/// (reader), and the loop's heartbeat for the watchdog.
#[derive(Debug)]
pub struct Metrics {
    /// Process-wide series (`relay_up`, `relay_draining`, the watchdog's).
    values: [AtomicU64; COUNT],
    /// One set per event loop (`relay serve --threads N`): each loop stores
    /// its own totals into its own set, and a read sums the sets, so loops
    /// never write to the same atomic.
    loops: Box<[[AtomicU64; COUNT]]>,
    /// Origin of the heartbeat clock.
    epoch: std::time::Instant,
    /// Per loop, when it last completed an iteration: microseconds since
    /// `epoch`, plus one (0: it never did, or it stopped).
    heartbeats: Box<[AtomicU64]>,
    /// How long without a heartbeat means stalled.
    watchdog: StdDuration,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            values: std::array::from_fn(|_| AtomicU64::new(0)),
            loops: Box::new([]),
            epoch: std::time::Instant::now(),
            heartbeats: Box::new([AtomicU64::new(0)]),
            watchdog: DEFAULT_WATCHDOG,
        }
    }
}

impl Metrics {
    /// All zero, with the default watchdog time.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The same with a watchdog time of `after`: `/health` answers 503 once
    /// the loop has not completed an iteration for that long.
    #[must_use]
    pub fn with_watchdog(mut self, after: StdDuration) -> Self {
        self.watchdog = after;
        self
    }

    /// The same with room for `n` event loops (at least one), each with its
    /// own counters ([`Metrics::set_loop`]) and heartbeat
    /// ([`Metrics::beat_loop`]); `/metrics` shows their sums and `/health`
    /// is `stalled` when any loop is. `relay serve --threads N` needs `n >= N`.
    #[must_use]
    pub fn with_loops(mut self, n: usize) -> Self {
        let n = n.max(1);
        self.loops = (0..n)
            .map(|_| std::array::from_fn(|_| AtomicU64::new(0)))
            .collect();
        self.heartbeats = (0..n).map(|_| AtomicU64::new(0)).collect();
        self
    }

    /// How many event loops this can take (see [`Metrics::with_loops`]).
    #[must_use]
    pub fn loop_slots(&self) -> usize {
        self.loops.len().max(1)
    }

    /// Called by the event loop at the end of every iteration.
    pub fn beat(&self) {
        self.beat_loop(0);
    }

    /// Called by event loop `i` at the end of every iteration.
    pub fn beat_loop(&self, i: usize) {
        self.beat_at(i, std::time::Instant::now());
    }

    /// Called by the event loop when it stops: a stopped loop is down
    /// (`relay_up` 0), not stalled.
    pub fn stop_beating(&self) {
        self.stop_beating_loop(0);
    }

    /// Called by event loop `i` when it stops.
    pub fn stop_beating_loop(&self, i: usize) {
        if let Some(h) = self.heartbeats.get(i) {
            h.store(0, Ordering::Relaxed);
        }
    }

    fn beat_at(&self, i: usize, now: std::time::Instant) {
        let us = now.saturating_duration_since(self.epoch).as_micros();
        let us = u64::try_from(us).unwrap_or(u64::MAX - 1);
        if let Some(h) = self.heartbeats.get(i) {
            h.store(us + 1, Ordering::Relaxed);
        }
    }

    /// Whether a loop is stalled at `now`: it is running (it has beaten at
    /// least once and not stopped) and has not beaten within the watchdog time.
    #[must_use]
    pub fn stalled_at(&self, now: std::time::Instant) -> bool {
        self.heartbeats.iter().any(|h| {
            let beat = h.load(Ordering::Relaxed);
            beat != 0
                && now.saturating_duration_since(self.epoch + StdDuration::from_micros(beat - 1))
                    > self.watchdog
        })
    }

    /// The watchdog's check, run by the HTTP thread: updates the
    /// `relay_loop_stalled` gauge and counts each new stall once in
    /// `relay_watchdog_trips_total`. Returns whether the loop is stalled.
    pub fn watch(&self, now: std::time::Instant) -> bool {
        let stalled = self.stalled_at(now);
        let was =
            self.values[Metric::LoopStalled as usize].swap(u64::from(stalled), Ordering::Relaxed);
        if stalled && was == 0 {
            self.add(Metric::WatchdogTrips, 1);
        }
        stalled
    }

    /// Whether `/health` answers 200 at `now`: up, not draining and no
    /// loop stalled (without counting a watchdog trip: that is
    /// [`Metrics::watch`]'s, on the HTTP thread).
    #[must_use]
    pub fn healthy(&self, now: std::time::Instant) -> bool {
        !self.stalled_at(now) && self.get(Metric::Up) == 1 && self.get(Metric::Draining) == 0
    }

    /// Sets one series (the loop publishes totals, so a store is enough).
    pub fn set(&self, m: Metric, v: u64) {
        self.values[m as usize].store(v, Ordering::Relaxed);
    }

    /// Sets event loop `i`'s share of one series (its own total); readers
    /// see the sum over loops plus the process-wide value. Without room for
    /// loop `i` (see [`Metrics::with_loops`]) the process-wide value is set.
    pub fn set_loop(&self, i: usize, m: Metric, v: u64) {
        match self.loops.get(i) {
            Some(l) => l[m as usize].store(v, Ordering::Relaxed),
            None => self.set(m, v),
        }
    }

    /// Adds to one series.
    pub fn add(&self, m: Metric, v: u64) {
        self.values[m as usize].fetch_add(v, Ordering::Relaxed);
    }

    /// Reads one series.
    #[must_use]
    pub fn get(&self, m: Metric) -> u64 {
        self.value(m as usize)
    }

    fn value(&self, i: usize) -> u64 {
        self.loops
            .iter()
            .fold(self.values[i].load(Ordering::Relaxed), |sum, l| {
                sum.saturating_add(l[i].load(Ordering::Relaxed))
            })
    }

    /// Everything in Prometheus text exposition format (version 0.0.4).
    #[must_use]
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        for (i, (name, kind, help)) in DEFS.iter().enumerate() {
            if !kind.is_empty() {
                let base = name.split('{').next().unwrap_or(name);
                out.push_str(&format!("# HELP {base} {help}\n# TYPE {base} {kind}\n"));
            }
            let v = self.value(i);
            out.push_str(&format!("{name} {v}\n"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn render_lists_every_series_once_with_help_per_family() {
        let m = Metrics::new();
        m.set(Metric::Up, 1);
        m.add(Metric::DropReplayed, 3);
        let text = m.render();
        assert!(text.contains("relay_up 1\n"));
        assert!(text.contains("relay_drops_total{reason=\"replayed\"} 3\n"));
        assert_eq!(text.matches("# TYPE relay_drops_total counter").count(), 1);
        let samples = text.lines().filter(|l| !l.starts_with('#')).count();
        assert_eq!(samples, COUNT);
    }

    /// The documentation users read: README.md and every markdown file
    /// under a `docs/` folder of the workspace or of one of its crates.
    fn documentation() -> Vec<(std::path::PathBuf, String)> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut files = vec![root.join("README.md")];
        for dir in [
            "docs",
            "relay/docs",
            "lockstep/docs",
            "replays/docs",
            "sim/docs",
            "tests/docs",
        ] {
            let mut stack = vec![root.join(dir)];
            while let Some(d) = stack.pop() {
                let Ok(entries) = std::fs::read_dir(&d) else {
                    continue;
                };
                for e in entries.flatten() {
                    let path = e.path();
                    if path.is_dir() {
                        stack.push(path);
                    } else if path.extension().is_some_and(|x| x == "md") {
                        files.push(path);
                    }
                }
            }
        }
        files
            .into_iter()
            .filter_map(|f| Some((f.clone(), std::fs::read_to_string(&f).ok()?)))
            .collect()
    }

    /// The series a documented label set names: `{kind="a"|"b"}` (pipes
    /// may be escaped in tables) is `Ok` of each exact series; `{kind}` or
    /// `{kind=...}` is `Err(kind)`: some series with that label.
    fn label_series(family: &str, labels: &str) -> Vec<Result<String, String>> {
        let inner = labels.trim_start_matches('{').trim_end_matches('}');
        let (key, values) = inner.split_once('=').unwrap_or((inner, "..."));
        if values == "..." {
            return vec![Err(key.to_owned())];
        }
        values
            .replace("\\|", "|")
            .split('|')
            .map(|v| Ok(format!("{family}{{{key}={v}}}")))
            .collect()
    }

    /// Every metric the documentation names is exported, and every metric
    /// family exported is documented. A name counts as a metric when it
    /// starts with `relay_` and ends in `_total`, carries labels
    /// (`relay_x{kind="y"}`, checked as that exact series), or is one of
    /// the exported gauge families; other `relay_` words (variables, test
    /// names) are not metrics.
    #[test]
    fn every_metric_the_documentation_names_is_exported_and_every_family_documented() {
        let series: BTreeSet<&str> = DEFS.iter().map(|d| d.0).collect();
        let family = |name: &str| name.split('{').next().unwrap_or(name).to_owned();
        let families: BTreeSet<String> = DEFS.iter().map(|d| family(d.0)).collect();
        let docs = documentation();
        let mut missing = Vec::new();
        let mut mentioned = BTreeSet::new();
        for (path, text) in &docs {
            for (i, line) in text.lines().enumerate() {
                let mut rest = line;
                while let Some(at) = rest.find("relay_") {
                    let word = &rest[at..];
                    let name_len = word
                        .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
                        .unwrap_or(word.len());
                    let name = &word[..name_len];
                    // Part of a longer identifier (`token_mode_relay_...`).
                    let glued = rest[..at]
                        .chars()
                        .last()
                        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
                    let labels = word[name_len..]
                        .starts_with('{')
                        .then(|| word[name_len..].find('}').map(|e| &word[..=name_len + e]))
                        .flatten();
                    rest = &word[name_len..];
                    if glued {
                        continue;
                    }
                    let is_metric =
                        name.ends_with("_total") || labels.is_some() || families.contains(name);
                    if !is_metric {
                        continue;
                    }
                    mentioned.insert(name.to_owned());
                    let known = match labels {
                        Some(l) => {
                            label_series(name, &l[name.len()..])
                                .iter()
                                .all(|want| match want {
                                    Ok(exact) => series.contains(exact.as_str()),
                                    Err(key) => series
                                        .iter()
                                        .any(|s| s.starts_with(&format!("{name}{{{key}="))),
                                })
                        }
                        None => families.contains(name),
                    };
                    if !known {
                        missing.push(format!(
                            "{}:{}: {}",
                            path.display(),
                            i + 1,
                            labels.unwrap_or(name)
                        ));
                    }
                }
            }
        }
        assert!(
            missing.is_empty(),
            "documented but not exported:\n{}",
            missing.join("\n")
        );
        let undocumented: Vec<&String> = families
            .iter()
            .filter(|f| !mentioned.contains(*f))
            .collect();
        assert!(
            undocumented.is_empty(),
            "exported but never documented: {undocumented:?}"
        );
    }

    #[test]
    fn watchdog_trips_once_per_stall_and_clears_on_the_next_beat() {
        let m = Metrics::new().with_watchdog(StdDuration::from_secs(3));
        let t0 = m.epoch + StdDuration::from_secs(1);
        // A relay still starting (no iteration yet) is not stalled.
        assert!(!m.watch(t0 + StdDuration::from_secs(60)));
        m.beat_at(0, t0);
        assert!(!m.watch(t0 + StdDuration::from_secs(3)));
        assert!(m.watch(t0 + StdDuration::from_millis(3_001)));
        assert!(m.watch(t0 + StdDuration::from_secs(10)));
        assert_eq!(m.get(Metric::WatchdogTrips), 1);
        assert_eq!(m.get(Metric::LoopStalled), 1);
        m.beat_at(0, t0 + StdDuration::from_secs(11));
        assert!(!m.watch(t0 + StdDuration::from_secs(12)));
        assert_eq!(m.get(Metric::LoopStalled), 0);
        assert!(m.watch(t0 + StdDuration::from_secs(20)));
        assert_eq!(m.get(Metric::WatchdogTrips), 2);
    }
}
