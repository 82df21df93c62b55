//! The relay's edges, driven through the public `Router` API on a virtual
//! clock: a match whose players all left ends at once and frees its memory,
//! no step closes more turns than the clock allows, and the per-player byte
//! budget keeps every bundle deliverable.

use lockstep::low_level::proto::{Join, ToPeer, ToRelay};
use lockstep::{Duration, Instant};
use relay::{ConnId, RelayConfig, Router, RouterEvent};
use sim::{StateHash, Turn};
use std::net::{Ipv4Addr, SocketAddr};

fn join(match_name: &str, slots: u8, name: &str, turns: u32) -> Vec<u8> {
    ToRelay::Join(Join {
        match_name: match_name.into(),
        slots,
        game_id: "g".into(),
        game_version: 1,
        rules_hash: StateHash([0; 32]),
        name: name.into(),
        turns,
    })
    .to_bytes()
}

fn addr(c: u32) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, 20_000 + u16::try_from(c).unwrap()))
}

/// Starts a match of `players` connections `0..players` at `now`.
fn start(r: &mut Router, now: Instant, players: u8, turns: u32) {
    for c in 0..u32::from(players) {
        assert!(r.handle_connected(now, ConnId(c), addr(c)));
        r.handle_message(now, ConnId(c), &join("m", players, &format!("p{c}"), turns));
    }
    assert_eq!(r.running_count(), 1);
}

fn turns_closed(r: &mut Router) -> usize {
    std::iter::from_fn(|| r.poll_event())
        .filter(|e| matches!(e, RouterEvent::TurnClosed { .. }))
        .count()
}

/// The reproduction of the wedge: a solo match whose only player leaves.
/// Before the fix the relay closed every remaining turn in one step (all
/// inputs of "no live player" are in): 100,000 bundles and events at once,
/// or an endless loop with an unbounded match.
#[test]
fn a_match_whose_players_all_left_ends_at_once_as_abandoned() {
    for turns in [100_000, 0] {
        let mut r = Router::new(RelayConfig::default());
        let now = Instant::from_millis(10);
        start(&mut r, now, 1, turns);
        let later = now + Duration::from_millis(350);
        r.handle_timeout(later);
        // The turns the clock closed while the player was there.
        let _ = turns_closed(&mut r);
        r.handle_disconnected(later, ConnId(0));
        r.handle_timeout(later + Duration::from_millis(1));
        let events: Vec<RouterEvent> = std::iter::from_fn(|| r.poll_event()).collect();
        let closed = events
            .iter()
            .filter(|e| matches!(e, RouterEvent::TurnClosed { .. }))
            .count();
        assert!(
            closed <= 1,
            "turns={turns}: {closed} turns closed for nobody"
        );
        assert!(
            events.iter().any(|e| matches!(
                e,
                RouterEvent::MatchEnded {
                    reason: lockstep::low_level::proto::EndReason::Abandoned,
                    ..
                }
            )),
            "turns={turns}: no abandoned end in {events:?}"
        );
        // The match's memory is freed and the relay takes new matches.
        assert_eq!(r.match_count(), 0);
        assert_eq!(r.poll_timeout(), None);
        r.handle_connected(later, ConnId(7), addr(7));
        r.handle_message(later, ConnId(7), &join("next", 1, "q", 5));
        assert_eq!(r.running_count(), 1);
    }
}

/// Inputs sent as far ahead as the relay accepts, then one player leaves:
/// with every live input in, a turn still closes no earlier than
/// `max_turns_ahead` turns before its deadline, so a step does bounded work.
#[test]
fn no_step_closes_more_turns_than_the_clock_allows() {
    // `deadline` closes turns early when every input is in (`clock` never does).
    let config = RelayConfig {
        policy: relay::TurnPolicy::Deadline,
        ..RelayConfig::default()
    };
    let turn = config.turn_length;
    let ahead = u64::from(config.limits.max_turns_ahead);
    let mut r = Router::new(config);
    let t0 = Instant::from_millis(10);
    start(&mut r, t0, 2, 0);
    let _ = turns_closed(&mut r);
    // Player 0 sends its inputs as far ahead as the relay accepts them, then
    // leaves; player 1 sends every input up front the same way. With every
    // live input in, turns still close no earlier than `max_turns_ahead`
    // turns before their deadline.
    let mut closed = 0;
    for c in 0..2u32 {
        for t in 0..=ahead {
            let input = ToRelay::Input {
                turn: Turn(u32::try_from(t).unwrap()),
                commands: vec![],
            };
            r.handle_message(t0, ConnId(c), &input.to_bytes());
        }
    }
    r.handle_message(t0, ConnId(0), &ToRelay::Leave.to_bytes());
    r.handle_timeout(t0);
    closed += turns_closed(&mut r);
    // Three deadlines later the clock allows (at most) three more turns,
    // although player 1 (the only one left) sent every input.
    let mut now = t0;
    for _ in 0..3 {
        now += turn;
        r.handle_timeout(now);
    }
    let after = turns_closed(&mut r);
    // Turn t is due at start + (t + initial delay) turns - lead; it may close
    // `max_turns_ahead` turns before that: turns 0..=125 at once, then one
    // per turn length.
    let d0 = u64::from(RelayConfig::default().initial_delay);
    assert_eq!(closed as u64, ahead - d0 + 1, "turns closed at the start");
    assert_eq!(after, 3, "turns closed in three turn lengths");
    assert_eq!(r.running_count(), 1);
}

/// A transport server + router + glue and two transport clients, passing
/// datagrams by hand so a test decides which wake-up each one arrives in.
struct Wire {
    server: lockstep::low_level::transport::Server,
    router: Router,
    glue: relay::router_glue::RouterGlue,
    clients: Vec<(SocketAddr, lockstep::low_level::transport::Client)>,
    server_addr: SocketAddr,
}

impl Wire {
    fn new(players: u8, config: RelayConfig, now: Instant) -> Self {
        use lockstep::low_level::transport::{Client, Server, TransportConfig};
        let server_addr = addr(999);
        let clients = (0..u32::from(players))
            .map(|i| {
                let c = Client::new(
                    now,
                    server_addr,
                    TransportConfig::default(),
                    7 + u64::from(i),
                );
                (addr(i), c)
            })
            .collect();
        Self {
            server: Server::new(TransportConfig::default(), [3; 32]),
            router: Router::new(config),
            glue: relay::router_glue::RouterGlue::new(),
            clients,
            server_addr,
        }
    }

    /// Datagrams the clients have to send now.
    fn client_datagrams(&mut self, now: Instant) -> Vec<(SocketAddr, Vec<u8>)> {
        let mut out = Vec::new();
        let mut buf = Vec::new();
        for (a, c) in &mut self.clients {
            c.handle_timeout(now);
            while c.poll_transmit(now, &mut buf).is_some() {
                out.push((*a, buf.clone()));
            }
        }
        out
    }

    /// One relay wake-up at `now` with `datagrams`, as the serve loop does
    /// it, then the relay's answers delivered to the clients.
    fn wake(&mut self, now: Instant, datagrams: Vec<(SocketAddr, Vec<u8>)>) {
        for (from, bytes) in datagrams {
            self.server.handle_datagram(now, from, &bytes);
        }
        self.glue.step(now, &mut self.router, &mut self.server);
        let mut buf = Vec::new();
        while let Some(to) = self.server.poll_transmit(now, &mut buf) {
            if let Some((_, c)) = self.clients.iter_mut().find(|(a, _)| *a == to) {
                c.handle_datagram(now, self.server_addr, &buf);
            }
        }
    }

    /// Messages the clients received so far.
    fn received(&mut self) -> Vec<(usize, ToPeer)> {
        let mut out = Vec::new();
        for (i, (_, c)) in self.clients.iter_mut().enumerate() {
            while let Some(ev) = c.poll_event() {
                if let lockstep::low_level::transport::ClientEvent::Message(bytes) = ev
                    && let Ok(msg) = ToPeer::decode(&bytes)
                {
                    out.push((i, msg));
                }
            }
        }
        out
    }

    fn send_all(&mut self, msg: &ToRelay) {
        for (_, c) in &mut self.clients {
            c.send(
                lockstep::low_level::transport::Channel::Reliable,
                &msg.to_bytes(),
            )
            .unwrap();
        }
    }

    /// Connects every client and starts a match; returns the start time.
    fn start(&mut self, mut now: Instant, turns: u32) -> Instant {
        for _ in 0..20 {
            let d = self.client_datagrams(now);
            self.wake(now, d);
            now += Duration::from_millis(1);
        }
        let n = u8::try_from(self.clients.len()).unwrap();
        for (i, (_, c)) in self.clients.iter_mut().enumerate() {
            assert!(c.is_connected(), "client {i} not connected");
            c.send(
                lockstep::low_level::transport::Channel::Reliable,
                &ToRelay::Join(Join {
                    match_name: "w".into(),
                    slots: n,
                    game_id: "g".into(),
                    game_version: 1,
                    rules_hash: StateHash([0; 32]),
                    name: format!("p{i}"),
                    turns,
                })
                .to_bytes(),
            )
            .unwrap();
        }
        let d = self.client_datagrams(now);
        self.wake(now, d);
        assert_eq!(self.router.running_count(), 1);
        assert!(
            self.received()
                .iter()
                .any(|(_, m)| matches!(m, ToPeer::Start(_)))
        );
        now
    }
}

/// Inputs that reach the relay in the same wake-up in which their turn's
/// deadline passes are on time: the driver hands the router the wake-up's
/// messages before it runs the router's timers. (It ran the timers first,
/// so the turn closed without them and both inputs were counted late.)
#[test]
fn inputs_arriving_in_the_wake_up_of_their_deadline_are_on_time() {
    let config = RelayConfig {
        adaptive_delay: false,
        ..RelayConfig::default()
    };
    let (turn, d0, lead) = (
        config.turn_length,
        u64::from(config.initial_delay),
        config.deadline_lead,
    );
    let mut w = Wire::new(2, config, Instant::from_millis(1));
    let started = w.start(Instant::from_millis(1), 10);
    let deadline = started + turn.saturating_mul(d0) - lead;
    // Both inputs for turn 0 leave the clients just before the deadline and
    // arrive with it.
    w.send_all(&ToRelay::Input {
        turn: Turn(0),
        commands: vec![vec![1, 2, 3]],
    });
    // (Clients pace their packets: collect what they send over the last
    // 50 ms before the deadline; the network holds it until the deadline.)
    let mut d = Vec::new();
    for ms in (1..=50).rev() {
        d.extend(w.client_datagrams(deadline - Duration::from_millis(ms)));
    }
    w.wake(deadline, d);
    let closed = std::iter::from_fn(|| w.router.poll_event())
        .find_map(|e| match e {
            RouterEvent::TurnClosed {
                turn,
                inputs,
                missing,
                ..
            } => Some((turn, inputs.len(), missing)),
            _ => None,
        })
        .expect("turn 0 closed");
    assert_eq!(closed, (Turn(0), 2, vec![]));
    assert_eq!(w.router.counters().inputs_late, 0);
}

/// `GET path` on the metrics endpoint: the whole HTTP response.
fn http_get(addr: SocketAddr, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    r
}

/// Polls `GET path` until `want` holds, for at most 20 s.
fn http_until(addr: SocketAddr, path: &str, want: impl Fn(&str) -> bool) -> String {
    let bound = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let r = http_get(addr, path);
        if want(&r) || std::time::Instant::now() > bound {
            return r;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A deliberately stalled event loop (the driver's callback blocks) turns
/// `/health` into 503 "stalled" and counts one watchdog trip; once the loop
/// runs again the relay finishes normally.
#[test]
fn health_is_503_while_the_event_loop_is_stalled() {
    use relay::http::spawn_metrics;
    use relay::metrics::{Metric, Metrics};
    use relay::serve::{RelayNote, ServeOptions, serve_with};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let listener = relay::http::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let http = listener.local_addr().unwrap();
    let metrics = Arc::new(Metrics::new().with_watchdog(std::time::Duration::from_millis(200)));
    let http_stop = Arc::new(AtomicBool::new(false));
    let h = spawn_metrics(listener, Arc::clone(&metrics), Arc::clone(&http_stop)).unwrap();
    let stop = AtomicBool::new(false);
    let (entered_tx, entered) = std::sync::mpsc::channel();
    let (release, released) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|scope| {
        let opts = ServeOptions {
            stop: &stop,
            handover: None,
            grace: Duration::ZERO,
            metrics: Some(Arc::clone(&metrics)),
            auth: lockstep::low_level::transport::AuthMode::Open,
            home_key: None,
            max_memory: relay::limits::DEFAULT_MAX_MEMORY_BYTES,
        };
        let served = scope.spawn(move || {
            serve_with(
                &socket,
                RelayConfig::default(),
                lockstep::low_level::transport::TransportConfig::default(),
                None,
                &opts,
                |n| {
                    if let RelayNote::Draining { .. } = n {
                        // The stall: the loop waits here until the test says so.
                        let _ = entered_tx.send(());
                        let _ = released.recv();
                    }
                },
            )
        });
        let r = http_until(http, "/health", |r| r.starts_with("HTTP/1.1 200"));
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        stop.store(true, Ordering::Relaxed);
        entered
            .recv_timeout(std::time::Duration::from_secs(20))
            .unwrap();
        let r = http_until(http, "/health", |r| r.contains("stalled"));
        assert!(
            r.starts_with("HTTP/1.1 503") && r.contains("stalled"),
            "{r}"
        );
        let m = http_get(http, "/metrics");
        assert!(m.contains("relay_loop_stalled 1\n"), "{m}");
        assert!(m.contains("relay_watchdog_trips_total 1\n"), "{m}");
        release.send(()).unwrap();
        served.join().unwrap().unwrap();
    });
    // The loop ran again before it stopped: no longer stalled.
    assert!(!metrics.stalled_at(std::time::Instant::now()));
    assert_eq!(metrics.get(Metric::WatchdogTrips), 1);
    http_stop.store(true, Ordering::Relaxed);
    h.join().unwrap();
}

/// `n` chunks of `len` bytes.
fn chunks(n: usize, len: usize, fill: u8) -> Vec<Vec<u8>> {
    (0..n).map(|_| vec![fill; len]).collect()
}

/// The worst bundle hostile players can force is delivered. After turn 0
/// closed, eight players each send 20 late inputs for turn 0 (one of 16
/// chunks, 4 KiB, carried into turn 1, and 19 of one 4 KiB chunk each) and
/// then a full own input for turn 1 (16 chunks, 4 KiB), every message
/// within the documented per-message limits. The relay carries each player's first
/// late input and refuses the rest with `InputRefused` (counted); bundle 1,
/// at 8 KiB per player more than the old 64 KiB limit, reaches every
/// client. Before the per-player byte budget the relay carried all 20 late
/// inputs and its glue dropped the oversize bundle: every peer waited on
/// turn 1 until it gave up. The relay's bundle budget is lifted here, so
/// each player's share is the protocol's whole `MAX_PLAYER_TURN_BYTES`.
#[test]
fn the_worst_bundle_hostile_players_can_force_is_delivered() {
    use lockstep::low_level::proto::{MAX_INPUT_BYTES, MAX_INPUT_CHUNKS, MAX_MESSAGE_LEN};
    let small = MAX_INPUT_BYTES / MAX_INPUT_CHUNKS;
    let (w, got) = spam_late_inputs(
        8,
        &chunks(MAX_INPUT_CHUNKS, small, 2),
        &[vec![3; MAX_INPUT_BYTES]],
        &chunks(MAX_INPUT_CHUNKS, small, 1),
    );
    for i in 0..8 {
        let (b, refused) = bundle_1_and_refusals(&got, i);
        // Every player's own input and its first late input, nothing more.
        assert_eq!(b.inputs.len(), 8 * 2 * MAX_INPUT_CHUNKS);
        let len = ToPeer::Bundle(b.clone()).to_bytes().len();
        assert!(len > 64 * 1024 && len <= MAX_MESSAGE_LEN, "{len}");
        assert_eq!(refused, 19, "client {i}");
    }
    let c = w.router.counters();
    assert_eq!(c.inputs_over_budget, 8 * 19, "{c:?}");
}

/// The late-input spam both worst-bundle tests play: `players` clients, the
/// relay's bundle budget lifted (each player's share is the protocol's
/// `player_turn_bytes`). Once bundle 0 has arrived, every client sends
/// `first_late` for turn 0 (carried into turn 1), `each_late` 19 times for
/// turn 0, and last its own input `own` for turn 1 (turn 1 closes once
/// every own input is in). Returns the wire and what the clients received,
/// once every client has bundle 1 or after 10 s of virtual time.
fn spam_late_inputs(
    players: u8,
    first_late: &[Vec<u8>],
    each_late: &[Vec<u8>],
    own: &[Vec<u8>],
) -> (Wire, Vec<(usize, ToPeer)>) {
    let mut config = RelayConfig {
        policy: relay::TurnPolicy::Deadline,
        adaptive_delay: false,
        initial_delay: 30,
        ..RelayConfig::default()
    };
    config.limits.bundle_bytes_per_sec = usize::MAX;
    let mut w = Wire::new(players, config, Instant::from_millis(1));
    let mut now = w.start(Instant::from_millis(1), 10);
    w.send_all(&ToRelay::Input {
        turn: Turn(0),
        commands: vec![],
    });
    let mut got = Vec::new();
    let mut late_sent = false;
    let end = now + Duration::from_secs(10);
    while now < end {
        now += Duration::from_millis(5);
        let d = w.client_datagrams(now);
        w.wake(now, d);
        got.extend(w.received());
        if !late_sent
            && got
                .iter()
                .any(|(_, m)| matches!(m, ToPeer::Bundle(b) if b.turn == Turn(0)))
        {
            late_sent = true;
            w.send_all(&ToRelay::Input {
                turn: Turn(0),
                commands: first_late.to_vec(),
            });
            for _ in 0..19 {
                w.send_all(&ToRelay::Input {
                    turn: Turn(0),
                    commands: each_late.to_vec(),
                });
            }
            w.send_all(&ToRelay::Input {
                turn: Turn(1),
                commands: own.to_vec(),
            });
        }
        let have_1 = got
            .iter()
            .filter(|(_, m)| matches!(m, ToPeer::Bundle(b) if b.turn == Turn(1)))
            .count();
        if have_1 == usize::from(players) {
            break;
        }
    }
    (w, got)
}

/// Client `i`'s bundle 1 and how many of its late inputs for turn 0 were
/// refused.
fn bundle_1_and_refusals(
    got: &[(usize, ToPeer)],
    i: usize,
) -> (&lockstep::low_level::proto::Bundle, usize) {
    let b = got
        .iter()
        .find_map(|(c, m)| match m {
            ToPeer::Bundle(b) if *c == i && b.turn == Turn(1) => Some(b),
            _ => None,
        })
        .unwrap_or_else(|| panic!("client {i} never got bundle 1"));
    let refused = got
        .iter()
        .filter(|(c, m)| *c == i && matches!(m, ToPeer::InputRefused { turn: Turn(0) }))
        .count();
    (b, refused)
}

/// At 32 players the worst bundle is still delivered: each player's share
/// is the protocol's `player_turn_bytes(32)` (2 KiB), not the eight-player
/// 8 KiB, even with the relay's bundle budget lifted. After turn 0 closed,
/// every player sends a late input of half its share (carried into turn 1),
/// 19 late inputs of one chunk of half its share and a byte (within the
/// carry budget, over the share: refused) and an own input for turn 1 of
/// the other half. Bundle 1 holds every player's full share, 64 KiB of
/// commands, and reaches every client in one message. With the
/// eight-player share (8 KiB) the relay would carry two more late inputs a
/// player, a bundle of 131 KB, over the message limit.
#[test]
fn at_32_players_the_worst_bundle_is_cut_to_each_share_and_delivered() {
    use lockstep::low_level::proto::{MAX_BUNDLE_INPUT_BYTES, MAX_MESSAGE_LEN, player_turn_bytes};
    let n = usize::from(sim::MAX_PLAYERS);
    let share = player_turn_bytes(sim::MAX_PLAYERS);
    assert_eq!(share, 2048);
    // Each late one fits the carry budget (4 KiB) twice over with the
    // first, but not the share.
    let (w, got) = spam_late_inputs(
        sim::MAX_PLAYERS,
        &chunks(8, share / 16, 2),
        &[vec![3; share / 2 + 1]],
        &chunks(8, share / 16, 1),
    );
    for i in 0..n {
        let (b, refused) = bundle_1_and_refusals(&got, i);
        assert_eq!(b.inputs.len(), n * 16);
        let bytes: usize = b.inputs.iter().map(|(_, c)| c.len()).sum();
        assert_eq!(bytes, MAX_BUNDLE_INPUT_BYTES);
        let len = ToPeer::Bundle(b.clone()).to_bytes().len();
        assert!(len > 64 * 1024 && len <= MAX_MESSAGE_LEN, "{len}");
        assert_eq!(refused, 19, "client {i}");
    }
    let c = w.router.counters();
    assert_eq!(c.inputs_over_budget, 32 * 19, "{c:?}");
}

/// A player dropped by the silence timeout is let go by the router too:
/// what its connection sends is refused as out of state, and the link
/// figures the transport still measures for it (here a 2 s RTT) no longer
/// feed the match's input delay. (Only `Leave` cleared the seat, so a
/// dropped player's bad link kept raising everyone's delay.)
#[test]
fn a_player_dropped_by_silence_no_longer_reaches_the_match() {
    let config = RelayConfig::default();
    let silence = config.silence_timeout;
    let mut r = Router::new(config);
    let t0 = Instant::from_millis(10);
    start(&mut r, t0, 2, 0);
    let mut dropped_at = None;
    let mut delays_after = Vec::new();
    let mut now = t0;
    for k in 0..150u32 {
        now += Duration::from_millis(100);
        // Player 0 plays: an input for a turn ahead, and a good link.
        let input = ToRelay::Input {
            turn: Turn(k + 3),
            commands: vec![],
        };
        r.handle_message(now, ConnId(0), &input.to_bytes());
        r.handle_link_stats(ConnId(0), Duration::from_millis(10), Duration::ZERO, 0.0);
        if dropped_at.is_some() {
            r.handle_link_stats(ConnId(1), Duration::from_secs(2), Duration::ZERO, 0.0);
        }
        r.handle_timeout(now);
        for e in std::iter::from_fn(|| r.poll_event()) {
            match e {
                RouterEvent::Dropped { reason, .. } => {
                    assert_eq!(reason, relay::DropReason::Timeout);
                    dropped_at = Some(now);
                }
                RouterEvent::DelayChanged { delay, .. } if dropped_at.is_some() => {
                    delays_after.push(delay);
                }
                _ => {}
            }
        }
    }
    let dropped_at = dropped_at.expect("player 1 dropped");
    assert!(dropped_at >= t0 + silence);
    assert!(
        delays_after.iter().all(|&d| d <= 3),
        "a dropped player's link raised the delay: {delays_after:?}"
    );
    let bad = r.counters().bad_state;
    r.handle_message(
        now,
        ConnId(1),
        &ToRelay::Hash {
            turn: Turn(1),
            hash: StateHash([1; 32]),
        }
        .to_bytes(),
    );
    assert_eq!(r.counters().bad_state, bad + 1);
}
