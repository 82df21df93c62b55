//! A crowd of hostile clients holds every connection slot of a real
//! `relay serve` while an honest 2-player match plays through it: the
//! driver is [`tests::crowd`] (what each hostile client does, and how the
//! relay's memory is read), shared with the `crowd` section of the
//! benchmark command. Each hostile client is the worst the protocol lets a
//! client be: it takes router state, then never acknowledges anything
//! again while it sends the largest inputs, bulk messages and floods of
//! reliable messages behind holes; the relay cuts each one off after 5 s
//! and it comes back, so the slots stay full.
//!
//! The honest match must finish with agreeing hashes, the relay must stay
//! up, and its peak resident set must stay under a bound derived from its
//! per-connection caps (see [`CONNECTION_KIB`] and
//! [`tests::crowd::PLAYER_BACKLOG_KIB`]).
#![allow(clippy::unwrap_used)] // tests may unwrap

use lockstep::low_level::proto::{Join, ToPeer, ToRelay};
use lockstep::low_level::transport::{Channel, Client, ClientEvent, TransportConfig};
use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Token};
use sim::{StateHash, Turn};
use std::time::{Duration, Instant};
use tests::crowd::{
    self, CONNECTION_KIB, CrowdOptions, HONEST, HOSTILE_SLOTS, MATCH, TURN_MS, clock,
};
use tests::harness::{Relay, bins, metric, proc_status_kib, scrape_metrics, scratch_dir};

/// `--max-connections`: enough slots for the per-connection cost to dwarf
/// the relay's fixed footprint, few enough for two busy cores.
const SLOTS: usize = 256;
/// Turns of the honest match: 20 s, four cut-off rounds of the crowd.
const TURNS: u32 = 800;

#[test]
fn a_hostile_crowd_in_every_slot_leaves_the_honest_match_and_the_relays_memory_intact() {
    let _serial = tests::harness::heavy_alone();
    let dir = scratch_dir("hostile-crowd");
    let opts = CrowdOptions::new(bins(), SLOTS, dir).with_turns(TURNS);
    let r = crowd::run(&opts).unwrap_or_else(|e| panic!("{e}"));
    // Still hostile to the end: the relay is measured with the crowd in.
    assert!(r.relay_alive, "relay died");

    assert_eq!(r.honest.len(), HONEST);
    let hash = r.honest[0].summary["final_hash"]
        .as_str()
        .unwrap()
        .to_owned();
    for p in &r.honest {
        assert_eq!(p.code, Some(0), "{}", p.summary);
        assert_eq!(p.summary["final_turn"], TURNS - 1, "{}", p.summary);
        assert_eq!(p.summary["final_hash"], hash.as_str(), "{}", p.summary);
        assert_eq!(p.summary["desyncs"], serde_json::json!([]), "{}", p.summary);
        eprintln!(
            "hostile_crowd: honest peer: stall {} ms, turn latency {}, rtt {} ms",
            p.summary["stall_ms"], p.summary["turn_latency_ms"], p.summary["rtt_ms"]
        );
    }
    assert!(r.honest_agreed(TURNS));

    // What the relay saw of the crowd (the lines up to the honest end).
    assert_eq!(r.end_reason, "completed");
    for l in r
        .metrics
        .lines()
        .filter(|l| l.starts_with("relay_") && !l.ends_with(" 0"))
    {
        eprintln!("hostile_crowd: {l}");
    }
    eprintln!("hostile_crowd: {}", r.summary());
    // Every slot was taken (the router tracks each connection), and more
    // clients than slots were turned away.
    assert_eq!(
        r.max_peers, SLOTS as u64,
        "relay_peers peaked at {}",
        r.max_peers
    );
    assert!(
        r.relay_full_refusals() > 0,
        "the crowd never found the relay full"
    );
    assert!(
        r.full_lines > 0,
        "the relay logged no refusal for being full"
    );
    // The relay cut off clients that acknowledged nothing: at least one
    // round of the whole crowd.
    let cut_off = r.metric("relay_connections_cut_off_total");
    assert!(cut_off >= (SLOTS - HONEST) as u64, "only {cut_off} cut off");
    assert!(r.cut_off_lines > 0, "no cut_off line");
    let bulk_refused = r.metric("relay_transport_drops_total{reason=\"bulk_refused\"}");
    assert!(bulk_refused > 0, "no bulk data was refused");
    // Clients the full relay turned away at establishment are counted.
    let conn_refused = r.metric("relay_drops_total{reason=\"connection_refused\"}");
    assert!(conn_refused > 0, "no refused connection counted");
    assert!(
        r.peak_kib <= r.bound.kib,
        "relay peak RSS {} KiB over the bound {} KiB",
        r.peak_kib,
        r.bound.kib
    );
}

/// Turns the budget match below plays before the relay is measured.
const BUDGET_TURNS: u64 = 400;

/// The relay's memory when eight players that acknowledge everything all
/// send half the input the relay accepts every turn (their own and a late
/// one carried beside it make the whole share). The protocol allows
/// 4 KiB a player a turn: ~33 KB bundles 40 times a second, 1.3 MB/s per
/// connection, several times what a connection's paced window delivers, so
/// the relay's send backlogs grew ~6 MB/s (past 100 MB within 15 s) before
/// each player's share was cut to the relay's bundle budget
/// (`Limits::player_turn_bytes`). The bound is the crowd test's: every
/// connection at its caps, plus the match's rejoin tail (`max_tail_turns`
/// bundles of the largest size this match makes).
#[test]
fn eight_acking_players_at_their_input_budget_keep_the_relays_memory_bounded() {
    let _serial = tests::harness::heavy_alone();
    let dir = scratch_dir("budget-match");
    let mut relay = Relay::start(
        &dir,
        &[
            "--turn-ms",
            &TURN_MS.to_string(),
            "--metrics",
            "127.0.0.1:0",
        ],
    );
    let pid = relay.proc.pid();
    let metrics_addr = relay.metrics_addr();
    let idle_hwm = proc_status_kib(pid, "VmHWM").unwrap();
    let epoch = Instant::now();
    let mut poll = Poll::new().unwrap();
    let mut players: Vec<(UdpSocket, Client)> = (0..HOSTILE_SLOTS)
        .map(|i| {
            let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            s.set_nonblocking(true).unwrap();
            let mut socket = UdpSocket::from_std(s);
            poll.registry()
                .register(&mut socket, Token(usize::from(i)), Interest::READABLE)
                .unwrap();
            let now = clock(epoch, Instant::now());
            let mut c = Client::new(now, relay.addr, TransportConfig::default(), u64::from(i));
            let join = Join {
                match_name: "budget".into(),
                slots: HOSTILE_SLOTS,
                game_id: "g".into(),
                game_version: 1,
                rules_hash: StateHash([0; 32]),
                name: format!("p{i}"),
                turns: 0,
            };
            c.send(Channel::Reliable, &ToRelay::Join(join).to_bytes())
                .unwrap();
            (socket, c)
        })
        .collect();
    // Half of each player's share of a turn (a late input carried into the
    // next turn then fits beside that turn's own), in as many chunks as
    // allowed.
    let share = relay::Limits::default()
        .player_turn_bytes(HOSTILE_SLOTS, lockstep::Duration::from_millis(TURN_MS));
    let chunks = lockstep::low_level::proto::MAX_INPUT_CHUNKS;
    let input = |seq| {
        ToRelay::Input {
            turn: Turn(seq),
            commands: vec![vec![0x5a; share / 2 / chunks]; chunks],
        }
        .to_bytes()
    };
    let (mut seq, mut next_input, mut started) = (0, Instant::now(), 0);
    let (mut max_rss, mut scraped_at, mut closed) = (0, Instant::now(), 0);
    let mut events = Events::with_capacity(64);
    let (mut rx, mut tx) = (vec![0u8; 2048], Vec::new());
    let deadline = Instant::now() + MATCH;
    while closed < BUDGET_TURNS {
        assert!(Instant::now() < deadline, "{closed} turns closed");
        poll.poll(&mut events, Some(Duration::from_millis(5)))
            .unwrap();
        let now = Instant::now();
        let t = clock(epoch, now);
        for (socket, c) in &mut players {
            while let Ok((n, from)) = socket.recv_from(&mut rx) {
                c.handle_datagram(t, from, &rx[..n]);
            }
            if c.poll_timeout().is_some_and(|d| d <= t) {
                c.handle_timeout(t);
            }
            while let Some(ev) = c.poll_event() {
                if let ClientEvent::Message(m) = ev
                    && matches!(ToPeer::decode(&m), Ok(ToPeer::Start(_)))
                {
                    started += 1;
                }
            }
        }
        if started == players.len() && now >= next_input {
            next_input = now + Duration::from_millis(TURN_MS);
            seq += 1;
            for (_, c) in &mut players {
                // A full window waits for acks, as a peer's backlog would.
                let _ = c.send(Channel::Urgent, &input(seq));
            }
        }
        for (socket, c) in &mut players {
            while let Some(to) = c.poll_transmit(t, &mut tx) {
                let _ = socket.send_to(&tx, to);
            }
        }
        if now >= scraped_at + Duration::from_millis(500) {
            scraped_at = now;
            let page = scrape_metrics(metrics_addr);
            closed = metric(&page, "relay_turns_closed_total").unwrap_or(0);
            max_rss = max_rss.max(proc_status_kib(pid, "VmRSS").unwrap_or(0));
        }
    }
    assert!(
        relay.proc.is_running(),
        "relay died:\n{}",
        relay.proc.tail()
    );
    // Input at the share is taken: the cap is what the relay's bundle
    // budget promises, not a guess. A datagram that arrives a turn late
    // lands beside the next one's, and when this process is starved of CPU
    // two late ones can exceed the share: that refuses a few, never most.
    let page = scrape_metrics(metrics_addr);
    let over = metric(&page, "relay_input_over_budget_total").unwrap_or(u64::MAX);
    let sent = u64::from(seq) * players.len() as u64;
    assert!(
        over * 20 <= sent,
        "{over} of {sent} inputs refused as over budget"
    );
    let peak = proc_status_kib(pid, "VmHWM").unwrap().max(max_rss);
    // The largest bundle this match makes: eight players at their whole
    // share and the framing, kept `max_tail_turns` times in the rejoin tail.
    let bundle_kib = (u64::from(HOSTILE_SLOTS) * 2 * input(0).len() as u64).div_ceil(1024) + 1;
    let tail_kib =
        u64::from(relay::rejoin_config::RejoinConfig::default().max_tail_turns) * bundle_kib;
    let bound = idle_hwm + u64::from(HOSTILE_SLOTS) * CONNECTION_KIB + tail_kib;
    eprintln!(
        "budget_match: relay RSS idle {idle_hwm} KiB, peak {peak} KiB after {closed} turns; \
         bound {bound} KiB (8 x {CONNECTION_KIB} + a tail of {tail_kib})"
    );
    assert!(
        peak <= bound,
        "relay peak RSS {peak} KiB over the bound {bound} KiB"
    );
}

/// A relay at its memory budget (`--max-memory-mib 1`) turns new
/// connections away with `MemoryFull` (counted, and shown by
/// `relay_memory_full`), through the real binary and real sockets: 300
/// clients from one host (the per-host limit lifted) connect and hold
/// their connections; the relay admits them until what it holds reaches
/// the budget, then refuses the rest.
#[test]
fn a_relay_at_its_memory_budget_refuses_new_connections_with_memory_full() {
    let _serial = tests::harness::heavy_alone();
    const CLIENTS: usize = 300;
    let dir = scratch_dir("memory-budget");
    let mut relay = Relay::start(
        &dir,
        &[
            "--max-memory-mib",
            "1",
            "--max-connections-per-host",
            "1024",
            "--metrics",
            "127.0.0.1:0",
        ],
    );
    let metrics_addr = relay.metrics_addr();
    let epoch = Instant::now();
    let mut clients: Vec<(std::net::UdpSocket, Client, Option<ToPeer>)> = Vec::new();
    let (mut rx, mut tx) = (vec![0u8; 2048], Vec::new());
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut memory_full = 0;
    while memory_full == 0 {
        assert!(Instant::now() < deadline, "never refused at the budget");
        // A batch of new connections at a time, so the relay measures
        // itself (every 250 ms) between batches.
        if clients.len() < CLIENTS {
            for i in 0..20 {
                let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
                s.set_nonblocking(true).unwrap();
                let now = clock(epoch, Instant::now());
                let seed = (clients.len() + i) as u64;
                let c = Client::new(now, relay.addr, TransportConfig::default(), seed);
                clients.push((s, c, None));
            }
        }
        let until = Instant::now() + Duration::from_millis(300);
        while Instant::now() < until {
            let t = clock(epoch, Instant::now());
            for (s, c, got) in &mut clients {
                while let Ok((n, from)) = s.recv_from(&mut rx) {
                    c.handle_datagram(t, from, &rx[..n]);
                }
                c.handle_timeout(t);
                while let Some(ev) = c.poll_event() {
                    if let ClientEvent::Message(m) = ev
                        && let Ok(msg @ ToPeer::Rejected { .. }) = ToPeer::decode(&m)
                    {
                        *got = Some(msg);
                    }
                }
                while let Some(to) = c.poll_transmit(t, &mut tx) {
                    let _ = s.send_to(&tx, to);
                }
            }
            std::thread::yield_now();
        }
        memory_full = clients
            .iter()
            .filter(|(_, _, got)| {
                matches!(
                    got,
                    Some(ToPeer::Rejected {
                        reason: lockstep::low_level::proto::RejectReason::MemoryFull,
                        ..
                    })
                )
            })
            .count();
        if clients.len() >= CLIENTS && memory_full == 0 {
            break;
        }
    }
    assert!(memory_full > 0, "no connection was refused at the budget");
    let admitted = clients
        .iter()
        .filter(|(_, c, got)| got.is_none() && c.is_connected())
        .count();
    assert!(
        admitted > 0,
        "the relay admitted connections below its budget"
    );
    let page = scrape_metrics(metrics_addr);
    assert_eq!(metric(&page, "relay_memory_full"), Some(1));
    assert_eq!(metric(&page, "relay_memory_budget_bytes"), Some(1 << 20));
    assert!(metric(&page, "relay_memory_refused_total").unwrap_or(0) >= memory_full as u64);
    let held = metric(&page, "relay_memory_bytes{part=\"connections\"}").unwrap_or(0);
    // Connections (with their backlogs) are held to their share of it.
    let share = (1u64 << 20) * u64::from(relay::limits::MEMORY_SHARES.connections) / 100;
    let backlogs = metric(&page, "relay_memory_bytes{part=\"backlogs\"}").unwrap_or(0);
    assert!(
        held + backlogs >= share,
        "{held} + {backlogs} bytes held at the budget"
    );
    eprintln!("memory_budget: {admitted} admitted, {memory_full} refused, {held} bytes held");
    assert!(
        relay.proc.is_running(),
        "relay died:\n{}",
        relay.proc.tail()
    );
}
