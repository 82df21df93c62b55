//! Per-host connection limits through the real relay (`relay::udp::serve`)
//! over 127.0.0.1 sockets: one host opening more connections than its
//! share (each from another port) gets `RelayFull` with the reason on the
//! extra ones, while the ones within its share stay connected.

use super::*;
use lockstep::proto::RejectReason;
use lockstep::transport::{Client, ClientEvent, TransportConfig};
use relay::limits::Limits;
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
            relay::udp::serve(
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
