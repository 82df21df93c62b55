//! Per-client bounds through the real relay (`relay::serve::serve`) over
//! 127.0.0.1 sockets: one host opening more connections than its share
//! (each from another port) gets `RelayFull` with the reason on the extra
//! ones, while the ones within its share stay connected; a client that
//! keeps sending but acknowledges nothing is cut off and logged.

use super::*;
use lockstep::low_level::proto::RejectReason;
use lockstep::low_level::proto::{Join, ToRelay};
use lockstep::low_level::transport::DisconnectReason;
use lockstep::low_level::transport::{Client, ClientEvent, TransportConfig};
use relay::limits::Limits;
use relay::serve::RelayNote;
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};

/// What happened to one client.
#[derive(Debug, Default)]
struct Seen {
    connected: bool,
    refused: Option<String>,
    closed: bool,
}

#[test]
fn one_host_gets_only_its_share_of_the_relays_connections_over_real_sockets() {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let relay_addr = socket.local_addr().unwrap();
    let config = RelayConfig {
        limits: Limits {
            max_connections_per_host: 2,
            ..Limits::default()
        },
        ..RelayConfig::default()
    };
    let stop = AtomicBool::new(false);
    let seen = std::thread::scope(|scope| {
        let server = scope.spawn(|| {
            relay::serve::serve(
                &socket,
                config,
                TransportConfig::default(),
                None,
                &stop,
                |_| {},
            )
        });
        let start = std::time::Instant::now();
        let clock = || Instant::from_micros(start.elapsed().as_micros() as u64);
        let mut clients: Vec<(UdpSocket, Client, Seen)> = (0..4u64)
            .map(|i| {
                let s = UdpSocket::bind("127.0.0.1:0").unwrap();
                s.set_read_timeout(Some(std::time::Duration::from_millis(2)))
                    .unwrap();
                let c = Client::new(clock(), relay_addr, TransportConfig::default(), 90 + i);
                (s, c, Seen::default())
            })
            .collect();
        let mut buf = Vec::new();
        let mut datagram = [0u8; 2048];
        // Bounded: done once every client is either connected and quiet
        // for a moment or refused and closed; at most 10 s of wall time.
        let deadline = start + std::time::Duration::from_secs(10);
        let mut settled_since = None;
        while std::time::Instant::now() < deadline {
            for (s, c, seen) in &mut clients {
                let now = clock();
                c.handle_timeout(now);
                while let Some(to) = c.poll_transmit(now, &mut buf) {
                    let _ = s.send_to(&buf, to);
                }
                while let Ok((n, from)) = s.recv_from(&mut datagram) {
                    c.handle_datagram(clock(), from, &datagram[..n]);
                }
                while let Some(ev) = c.poll_event() {
                    match ev {
                        ClientEvent::Connected => seen.connected = true,
                        ClientEvent::Message(b) => {
                            if let Ok(ToPeer::Rejected {
                                reason: RejectReason::RelayFull,
                                detail,
                            }) = ToPeer::decode(&b)
                            {
                                seen.refused = Some(detail.unwrap_or_default());
                            }
                        }
                        ClientEvent::Disconnected(_) => seen.closed = true,
                        ClientEvent::Backpressure => {}
                    }
                }
            }
            let refused = clients.iter().filter(|(_, _, s)| s.closed).count();
            let up = clients
                .iter()
                .filter(|(_, c, s)| c.is_connected() && s.refused.is_none())
                .count();
            if refused == 2 && up == 2 {
                // Settled; watch a little longer that nothing else happens.
                let since = *settled_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() > std::time::Duration::from_millis(300) {
                    break;
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        server.join().unwrap().unwrap();
        clients.into_iter().map(|(_, _, s)| s).collect::<Vec<_>>()
    });
    assert!(seen.iter().all(|s| s.connected), "{seen:?}");
    let refused: Vec<&Seen> = seen.iter().filter(|s| s.refused.is_some()).collect();
    assert_eq!(refused.len(), 2, "two over the host's share: {seen:?}");
    for s in refused {
        assert_eq!(
            s.refused.as_deref(),
            Some("connection limit per host reached")
        );
        assert!(s.closed, "and closed after the reason: {seen:?}");
    }
    assert_eq!(seen.iter().filter(|s| !s.closed).count(), 2, "{seen:?}");
}

/// A client that joins a lobby, then hears nothing more (it reads its
/// socket and throws every datagram away, so it acknowledges nothing),
/// while its keep-alives still reach the relay: the relay cuts it off with
/// `NoAcks` within about the back-pressure timeout and logs it, having
/// sent it no more than the unconfirmed-bytes cap.
#[test]
fn a_client_that_acknowledges_nothing_is_cut_off_over_real_sockets() {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let relay_addr = socket.local_addr().unwrap();
    let stop = AtomicBool::new(false);
    let cut = std::sync::Mutex::new(Vec::new());
    let cfg = TransportConfig::default();
    let (cut_after, bytes_after) = std::thread::scope(|scope| {
        let server = scope.spawn(|| {
            relay::serve::serve(&socket, RelayConfig::default(), cfg, None, &stop, |n| {
                if let RelayNote::CutOff { conn, reason } = n {
                    cut.lock()
                        .unwrap()
                        .push((conn, reason, std::time::Instant::now()));
                }
            })
        });
        let start = std::time::Instant::now();
        let clock = || Instant::from_micros(start.elapsed().as_micros() as u64);
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_millis(2)))
            .unwrap();
        // Its own silence timeout is long: it keeps talking while deaf.
        let client_cfg = TransportConfig {
            timeout: Duration::from_secs(60),
            ..cfg
        };
        let mut c = Client::new(clock(), relay_addr, client_cfg, 77);
        let (mut buf, mut datagram) = (Vec::new(), [0u8; 2048]);
        let mut joined = false;
        let mut deaf: Option<std::time::Instant> = None;
        let mut bytes_while_deaf = 0usize;
        // Bounded: 20 s of wall time at most.
        let deadline = start + std::time::Duration::from_secs(20);
        while std::time::Instant::now() < deadline && cut.lock().unwrap().is_empty() {
            let now = clock();
            c.handle_timeout(now);
            if c.is_connected() && !joined {
                let join = ToRelay::Join(Join {
                    match_name: "deaf".into(),
                    slots: 2,
                    game_id: "g".into(),
                    game_version: 1,
                    rules_hash: StateHash([0; 32]),
                    name: "d".into(),
                    turns: 0,
                });
                c.send(
                    lockstep::low_level::transport::Channel::Reliable,
                    &join.to_bytes(),
                )
                .unwrap();
                joined = true;
            }
            while let Some(to) = c.poll_transmit(now, &mut buf) {
                let _ = s.send_to(&buf, to);
            }
            while let Ok((n, from)) = s.recv_from(&mut datagram) {
                if deaf.is_some() {
                    bytes_while_deaf += n;
                } else {
                    c.handle_datagram(clock(), from, &datagram[..n]);
                }
            }
            while let Some(ev) = c.poll_event() {
                // The relay's answer to the join: from now on, deaf.
                if matches!(ev, ClientEvent::Message(_)) && deaf.is_none() {
                    deaf = Some(std::time::Instant::now());
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        server.join().unwrap().unwrap();
        let deaf = deaf.expect("the relay answered the join");
        let cut = cut.lock().unwrap();
        let at = cut
            .first()
            .map(|&(_, _, at)| at.saturating_duration_since(deaf));
        (at, bytes_while_deaf)
    });
    let cut = cut.into_inner().unwrap();
    assert_eq!(cut.len(), 1, "cut off once");
    assert_eq!(cut[0].1, DisconnectReason::NoAcks);
    // Within the run's bound (the transport's is the back-pressure timeout
    // from the first unacknowledged packet, on the sans-IO tests' clock).
    assert!(cut_after.is_some(), "cut off within the run");
    assert!(
        bytes_after <= cfg.max_unconfirmed_bytes,
        "{bytes_after} bytes sent to a client that acked nothing"
    );
}
