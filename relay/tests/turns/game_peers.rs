//! Reference-game peers (the public `lockstep::peer::Peer` + bot) over a
//! fixed 20 ms network, recorded by the relay's recorder and verified by
//! re-simulation.

use super::netsim::{PeerNode, PeerSpec, RelayNode, run_match};
use super::*;
use lockstep::low_level::transport::{Server, TransportConfig};
use lockstep::netsim::harness::Harness;
use lockstep::netsim::{LinkConfig, Network};
use lockstep::peer::PeerSummary;
use relay::games::known_rules_hash;

/// Runs `n` reference-game peers (bot seeds 40, 41, ...) against a relay
/// over a perfect 20 ms network; `desync`: (peer index, turn) whose world
/// the fault switch perturbs.
fn game_peers(
    n: usize,
    turns: u32,
    desync: Option<(usize, u32)>,
) -> (Vec<PeerSummary>, Vec<RouterEvent>) {
    let start = Instant::from_millis(1);
    let server_addr = SocketAddr::from(([127, 0, 0, 1], 7000));
    let server = Server::new(TransportConfig::default(), [9; 32]);
    let mut relay = RelayNode::new(server, RelayConfig::default(), server_addr);
    let mut peers: Vec<PeerNode> = (0..n)
        .map(|i| {
            let spec = PeerSpec {
                match_name: "g",
                players: n as u8,
                turns,
                bot_seed: 40 + i as u64,
                apm: 300,
                name: format!("p{i}"),
                client_seed: 70 + i as u64,
                token: None,
                desync_at: desync.filter(|d| d.0 == i).map(|d| Turn(d.1)),
            };
            let addr = SocketAddr::from(([127, 0, 0, 1], 7001 + i as u16));
            PeerNode::new(start, spec, server_addr, addr)
        })
        .collect();
    let wire = LinkConfig::with_latency(Duration::from_millis(20));
    let mut harness = Harness::new(Network::new(0, wire)).with_start(start);
    let now = run_match(
        &mut harness,
        &mut relay,
        &mut peers,
        Instant::from_millis(120_000),
    );
    (
        peers.iter().map(|p| p.peer().summary(now)).collect(),
        relay.events,
    )
}

/// The reference game with bots on the generic peer over jittery, lossy,
/// reordering links: every peer simulates every turn with the same inputs,
/// and a peer whose world the fault switch perturbs at turn 80 agrees with
/// the others up to turn 79, differs from 80 on, and is the one the relay
/// names, with at most two differing sections.
#[test]
fn reference_game_with_bots_stays_in_sync_and_a_perturbed_peer_is_named() {
    let link = LinkConfig {
        latency: Duration::from_millis(15),
        jitter: Duration::from_millis(20),
        loss: 0.05,
        reorder: 0.05,
        ..LinkConfig::default()
    };
    let start = Instant::from_millis(1);
    let server_addr = SocketAddr::from(([127, 0, 0, 1], 7000));
    let server = Server::new(TransportConfig::default(), [21; 32]);
    let mut relay = RelayNode::new(server, RelayConfig::default(), server_addr);
    let mut peers: Vec<PeerNode> = (0..3)
        .map(|i| {
            let spec = PeerSpec {
                match_name: "rts",
                players: 3,
                turns: 120,
                bot_seed: 21 + i as u64,
                apm: 300,
                name: format!("p{i}"),
                client_seed: 210 + i as u64,
                token: None,
                desync_at: (i == 2).then_some(Turn(80)),
            };
            let addr = SocketAddr::from(([127, 0, 0, 1], 7001 + i as u16));
            PeerNode::new(start, spec, server_addr, addr)
        })
        .collect();
    let mut harness = Harness::new(Network::new(21, link)).with_start(start);
    run_match(
        &mut harness,
        &mut relay,
        &mut peers,
        Instant::from_millis(120_000),
    );
    let inputs =
        |k: usize| -> Vec<_> { peers[k].executed.iter().map(|(i, _)| i.clone()).collect() };
    let hashes = |k: usize| -> Vec<_> { peers[k].executed.iter().map(|(_, h)| *h).collect() };
    for (i, p) in peers.iter().enumerate() {
        assert_eq!(p.turns, (0..120).collect::<Vec<u32>>(), "peer {i}");
        assert!(inputs(i) == inputs(0), "peer {i} saw other bundles");
    }
    let commands: usize = inputs(0).iter().map(Vec::len).sum();
    assert!(commands > 20, "bots issued too little: {commands}");
    assert_eq!(hashes(0), hashes(1));
    assert_eq!(hashes(0)[..80], hashes(2)[..80]);
    assert_ne!(hashes(0)[80], hashes(2)[80]);
    let odd = peers[2].peer().player().unwrap();
    assert!(relay.events.iter().any(|e| matches!(
        e,
        RouterEvent::Desync { turn: Turn(80), odd_players, .. } if odd_players == &[odd]
    )));
    let sections = relay
        .events
        .iter()
        .find_map(|e| match e {
            RouterEvent::DesyncSections { turn, sections, .. } => Some((*turn, sections.clone())),
            _ => None,
        })
        .unwrap();
    assert_eq!(sections.0, Turn(80));
    assert!(
        !sections.1.is_empty() && sections.1.len() <= 2,
        "{sections:?}"
    );
}

/// The wall-clock time the tests hand the recorder (the driver's job).
const T0_UNIX_MS: u64 = 1_795_314_600_000;

/// Records `events` with the relay's recorder and verifies the replay by re-simulation.
pub(super) fn record_and_verify(events: &[RouterEvent], tag: &str) -> replays::VerifyReport {
    let dir = std::env::temp_dir().join(format!("turns-test-{}-{tag}", std::process::id()));
    let mut rec = relay::recorder::Recorder::new(&dir, known_rules_hash).unwrap();
    let mut done = None;
    for e in events {
        if let Some(r) = rec.handle(T0_UNIX_MS, e).unwrap() {
            done = Some(r);
        }
    }
    let done = done.unwrap();
    let reader = replays::Reader::open(&done.path).unwrap();
    let report = replays::verify::<sim::game::World, _>(reader, |_| {}).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    report
}

#[test]
fn game_peers_summaries_agree_and_report_a_forced_desync() {
    let (ok, events) = game_peers(3, 80, None);
    let report = record_and_verify(&events, "ok");
    assert!(report.first_divergence.is_none(), "{report:?}");
    assert_eq!(report.turns, 80);
    assert!(report.hashes_checked >= 80);
    for s in &ok {
        assert!(s.completed, "{s:?}");
        assert_eq!(s.final_turn, Some(79));
        assert_eq!(s.final_hash, ok[0].final_hash);
        assert!(s.desyncs.is_empty());
        // The relay's clock: a command takes its own RTT (40 ms of link,
        // plus the transport's packet pacing) and about half a 100 ms turn,
        // not the old policy's 3-turn starting delay.
        assert!(
            s.turn_latency_ms.p50 > 40.0 && s.turn_latency_ms.p50 < 200.0,
            "{s:?}"
        );
    }
    let (bad, events) = game_peers(3, 80, Some((1, 40)));
    // The relay's replay follows the majority: it still verifies.
    let report = record_and_verify(&events, "bad");
    assert!(report.first_divergence.is_none(), "{report:?}");
    let odd = bad[1].player.unwrap();
    for s in &bad {
        assert_eq!(s.desyncs.len(), 1, "{s:?}");
        assert_eq!(s.desyncs[0].turn, 40);
        assert_eq!(s.desyncs[0].odd_players, vec![odd]);
        assert!(!s.desyncs[0].sections.is_empty());
    }
}

/// After a desync the relay keeps recording: every turn has a hash record
/// (the majority's), every desynced turn a dispute record naming the odd
/// player and its hash, the trailer holds the last turn's majority hash, and
/// verification lists every desynced turn.
#[test]
fn a_desynced_match_is_recorded_turn_by_turn() {
    let (peers, events) = game_peers(3, 80, Some((1, 40)));
    let odd = sim::PlayerId(peers[1].player.unwrap());
    let honest = peers[0].final_hash.clone().unwrap();
    assert_eq!(peers[2].final_hash.as_deref(), Some(honest.as_str()));
    let dir = std::env::temp_dir().join(format!("turns-test-{}-disputed", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut rec = relay::recorder::Recorder::new(&dir, known_rules_hash).unwrap();
    let mut done = None;
    for e in &events {
        if let Some(r) = rec.handle(T0_UNIX_MS, e).unwrap() {
            done = Some(r);
        }
    }
    let done = done.unwrap();
    assert!(done.finished);
    let records: Vec<replays::Record> = replays::Reader::open(&done.path)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let hashed: std::collections::BTreeSet<u32> = records
        .iter()
        .filter_map(|r| match r {
            replays::Record::Hash { turn, .. } => Some(turn.0),
            _ => None,
        })
        .collect();
    assert_eq!(hashed, (0..80).collect(), "a hash record for every turn");
    let disputed: Vec<(u32, Vec<sim::PlayerId>)> = records
        .iter()
        .filter_map(|r| match r {
            replays::Record::Dispute {
                turn,
                majority: Some(_),
                dissent,
            } => Some((turn.0, dissent.iter().map(|(p, _)| *p).collect())),
            _ => None,
        })
        .collect();
    let expected: Vec<(u32, Vec<sim::PlayerId>)> = (40..80).map(|t| (t, vec![odd])).collect();
    assert_eq!(disputed, expected);
    let Some(replays::Record::Trailer {
        final_turn,
        final_hash,
        ..
    }) = records.last()
    else {
        panic!("no trailer");
    };
    assert_eq!(final_turn.0, 79);
    assert_eq!(
        final_hash.to_hex(),
        honest,
        "the trailer holds the majority's last hash"
    );

    let report =
        replays::verify::<sim::game::World, _>(replays::Reader::open(&done.path).unwrap(), |_| {})
            .unwrap();
    assert!(report.verified(), "{report:?}");
    assert!(!report.clean());
    assert!(report.hashes_checked >= 80);
    let turns: Vec<u32> = report.recorded_desyncs.iter().map(|d| d.turn.0).collect();
    assert_eq!(turns, (40..80).collect::<Vec<_>>());
    assert!(
        report
            .recorded_desyncs
            .iter()
            .all(|d| d.odd_players() == [odd])
    );
    assert!(!report.recorded_desyncs[0].sections.is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A sink that accepts `cap` bytes and then fails like a full disk.
struct FullDisk {
    data: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    cap: usize,
}

impl std::io::Write for FullDisk {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut d = self.data.lock().unwrap();
        let room = self.cap.saturating_sub(d.len());
        if room == 0 {
            return Err(std::io::Error::from(std::io::ErrorKind::StorageFull));
        }
        let n = room.min(buf.len());
        d.extend_from_slice(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl replays::Sink for FullDisk {
    fn sync(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_full_disk_or_vanished_directory_is_reported_once_and_recording_stops_cleanly() {
    use relay::recorder::{RecordSink, Recorder};
    let (summaries, events) = game_peers(2, 60, None);
    // The match itself never depends on the recorder: it completed.
    assert!(summaries.iter().all(|s| s.completed));
    let dir = std::env::temp_dir().join(format!("turns-test-{}-full", std::process::id()));
    let data = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink_data = data.clone();
    let mut rec = Recorder::new(&dir, known_rules_hash)
        .unwrap()
        .with_sink_opener(Box::new(move |_| {
            Ok(RecordSink::new(FullDisk {
                data: sink_data.clone(),
                cap: 4096,
            }))
        }));
    let errors = events
        .iter()
        .filter(|e| rec.handle(T0_UNIX_MS, e).is_err())
        .count();
    assert_eq!(errors, 1, "the failure is reported once");
    assert_eq!(rec.errors(), 1);
    assert_eq!(rec.live(), 0);
    // Everything before the failure reads back; the last record is torn or absent.
    let bytes = data.lock().unwrap().clone();
    let (_, summary) = replays::Reader::from_bytes(&bytes).unwrap().scan().unwrap();
    assert!(summary.turns > 0 && summary.turns < 60, "{summary:?}");
    assert!(summary.trailer.is_none());

    // The replay directory removed and replaced by a file before the match starts.
    let mut rec = Recorder::new(&dir, known_rules_hash).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::write(&dir, b"not a directory").unwrap();
    let errors: Vec<String> = events
        .iter()
        .filter_map(|e| rec.handle(T0_UNIX_MS, e).err().map(|e| e.to_string()))
        .collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    // The error names the file it could not create, in that directory.
    assert!(
        errors[0].contains(&dir.display().to_string()) && errors[0].contains(".lsr"),
        "{errors:?}"
    );
    assert_eq!(rec.errors(), 1);
    std::fs::remove_file(&dir).unwrap();
}
