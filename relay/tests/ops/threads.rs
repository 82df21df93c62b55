//! The relay with several event loops (`--threads 2`, which every ops
//! test runs): matches on either loop, floods on either socket, and the
//! process-wide connection limit.

use super::*;

pub(crate) fn metric(page: &str, name: &str) -> u64 {
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("{name} missing"))
}

/// `--threads 2`: matches hosted by both loops (their names hash to
/// either), each with peers whose datagrams the kernel hands to either
/// loop's socket, so connections move to their match's loop and datagrams
/// are forwarded. Every match completes with agreeing hashes, every replay
/// verifies by re-simulation, and `/metrics` sums both loops.
#[test]
fn two_event_loops_run_matches_whose_peers_land_on_either_loop() {
    use relay::serve::home_of;
    let dir = scratch("threads");
    // A known placement key (hidden flag), so the test knows each match's loop.
    let key = [0x5a; 32];
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    let mut relay = Relay::start(&dir, &["--metrics", "127.0.0.1:0", "--home-key", &hex]);
    let http = relay.wait_for(|v| v["event"] == "metrics")["addr"]
        .as_str()
        .unwrap()
        .to_owned();
    // Two matches hosted by each loop.
    let names: Vec<String> = [0, 1]
        .into_iter()
        .flat_map(|home| {
            (0..)
                .map(|i| format!("t{i}"))
                .filter(move |n| home_of(n, 2, &key) == home)
                .take(2)
        })
        .collect();
    // 12 peers: all landing on their match's loop has odds 1 in 4096.
    let peers: Vec<Peers> = names
        .iter()
        .map(|n| Peers::start(&relay.addr, n, 3, 40))
        .collect();
    for _ in &names {
        let ended = relay.wait_for(|v| v["event"] == "match_ended");
        assert_eq!(ended["reason"], "completed", "{ended}");
    }
    for mut p in peers {
        for c in &mut p.0 {
            let status = wait_bounded(c);
            assert_eq!(status.code(), Some(0), "a peer failed or saw a desync");
        }
    }
    while relay
        .seen
        .iter()
        .filter(|v| v["event"] == "recorded")
        .count()
        < names.len()
    {
        relay.wait_for(|v| v["event"] == "recorded");
    }
    assert!(!relay.seen.iter().any(|v| v["event"] == "desync"));
    let ids: std::collections::BTreeSet<u64> = relay
        .seen
        .iter()
        .filter(|v| v["event"] == "recorded")
        .map(|v| v["match"].as_u64().unwrap())
        .collect();
    assert_eq!(ids.len(), names.len(), "match ids unique across loops");
    let files = replay_files(&dir);
    assert_eq!(files.len(), names.len());
    for f in &files {
        let reader = Reader::open(f).unwrap();
        let report = replays::verify::<sim::game::World, _>(reader, |_| {}).unwrap();
        assert!(report.recorded_desyncs.is_empty(), "{}", f.display());
        assert_eq!(report.turns, 40, "{}", f.display());
        assert!(report.hashes_checked >= 40, "{}", f.display());
    }
    let (_, page) = http_get(&http, "/metrics");
    assert_eq!(metric(&page, "relay_matches_ended_total"), 4, "{page}");
    assert_eq!(metric(&page, "relay_turns_closed_total"), 160, "{page}");
    assert!(metric(&page, "relay_connections_moved_total") > 0, "{page}");
    assert!(
        metric(&page, "relay_datagrams_forwarded_total") > 0,
        "{page}"
    );
    assert_eq!(metric(&page, "relay_up"), 1, "{page}");
    relay.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--threads 2`: datagram floods from several addresses (landing on either
/// loop's socket) are cut by the per-address limit where they land, counted
/// in `/metrics` summed over both loops, and a match played meanwhile
/// completes.
#[test]
fn floods_from_several_addresses_are_limited_on_every_loop() {
    let dir = scratch("flood");
    let mut relay = Relay::start(&dir, &["--metrics", "127.0.0.1:0"]);
    let http = relay.wait_for(|v| v["event"] == "metrics")["addr"]
        .as_str()
        .unwrap()
        .to_owned();
    let peers = Peers::start(&relay.addr, "calm", 2, 40);
    relay.wait_for(|v| v["event"] == "match_started");
    // Each flooder sends twice the burst (2000) back to back: whatever the
    // timing, at least the second half cannot all pass a 1000/s refill.
    let flooders: Vec<std::net::UdpSocket> = (0..6)
        .map(|_| std::net::UdpSocket::bind("127.0.0.1:0").unwrap())
        .collect();
    for s in &flooders {
        for i in 0..4000u32 {
            let _ = s.send_to(&i.to_le_bytes(), &relay.addr);
        }
    }
    let mut peers = peers;
    for c in &mut peers.0 {
        assert_eq!(wait_bounded(c).code(), Some(0), "the calm match completes");
    }
    let (_, page) = http_get(&http, "/metrics");
    let limited = metric(&page, "relay_drops_total{reason=\"rate_limited_address\"}");
    assert!(limited > 0, "{page}");
    let malformed = metric(&page, "relay_drops_total{reason=\"malformed\"}");
    assert!(malformed > 0, "what passed the limit is malformed: {page}");
    relay.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--max-connections 4` with two loops: four peers of one match are
/// admitted, and a fifth connection is refused with `RelayFull` (the peer
/// exits 5) whichever loop's socket the kernel hands it to; each loop alone
/// is under 4, so before the shared count the fifth was admitted.
#[test]
fn max_connections_counts_the_connections_of_every_loop() {
    let dir = scratch("maxconn");
    let mut relay = Relay::start(&dir, &["--max-connections", "4"]);
    let mut peers = Peers::start(&relay.addr, "four", 4, 40);
    relay.wait_for(|v| v["event"] == "match_started");
    let mut fifth = Command::new(peer_bin())
        .args(["--relay", &relay.addr, "--match", "fifth", "--players", "1"])
        .args(["--turns", "10", "--timeout-s", "20"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert_eq!(
        wait_bounded(&mut fifth).code(),
        Some(5),
        "refused: relay full"
    );
    for c in &mut peers.0 {
        assert_eq!(
            wait_bounded(c).code(),
            Some(0),
            "the admitted match completes"
        );
    }
    relay.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A second `relay serve --threads 2` on the port a relay holds (the same
/// address, or the wildcard address on that port) does not start: it says
/// which address is busy on stderr and exits 1 (before, `SO_REUSEPORT` let
/// it join the port silently and take part of every match's peers). The
/// first relay goes on serving a whole match.
#[test]
fn a_second_relay_on_a_busy_port_fails_naming_the_address() {
    let dir = scratch("busy");
    let mut first = Relay::start(&dir, &[]);
    let port = first.addr.rsplit(':').next().unwrap().to_owned();
    for bind in [first.addr.clone(), format!("0.0.0.0:{port}")] {
        // In a `Peers` so that it is killed if it wrongly keeps serving.
        let mut second = Peers(vec![
            Command::new(env!("CARGO_BIN_EXE_relay"))
                .args(["serve", "--bind", &bind, "--threads", "2"])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        ]);
        let second = &mut second.0[0];
        let status = wait_bounded(second);
        let mut err = String::new();
        std::io::Read::read_to_string(&mut second.stderr.take().unwrap(), &mut err).unwrap();
        assert_eq!(status.code(), Some(1), "{err}");
        assert!(err.contains(&bind), "{err}");
        assert!(err.contains("in use"), "{err}");
        assert!(!err.contains("listening"), "{err}");
    }
    let mut peers = Peers::start(&first.addr, "still", 2, 20);
    for c in &mut peers.0 {
        assert_eq!(wait_bounded(c).code(), Some(0), "the first relay serves");
    }
    first.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
