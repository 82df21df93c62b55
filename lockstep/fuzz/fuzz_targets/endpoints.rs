//! Fuzzes the endpoints: arbitrary datagrams (split on 0xFF 0xFE markers) fed
//! to a Server and a Client, interleaved with timeouts and transmits, never
//! panic and never produce a datagram over the size limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lockstep::low_level::transport::{Client, Server, TransportConfig};
use lockstep::{Duration, Instant};

fuzz_target!(|data: &[u8]| {
    let cfg = TransportConfig::default();
    let server_addr = "127.0.0.1:4000".parse().unwrap();
    let client_addr = "127.0.0.1:5000".parse().unwrap();
    let mut server = Server::new(cfg, [9; 32]);
    let mut client = Client::new(Instant::ZERO, server_addr, cfg, 1);
    let mut now = Instant::ZERO;
    let mut buf = Vec::new();
    for (i, chunk) in data.split(|&b| b == 0xFE).enumerate() {
        now += Duration::from_millis(u64::from(chunk.first().copied().unwrap_or(0)));
        server.handle_datagram(now, client_addr, chunk);
        client.handle_datagram(now, server_addr, chunk);
        if i % 3 == 0 {
            server.handle_timeout(now);
            client.handle_timeout(now);
        }
        while server.poll_transmit(now, &mut buf).is_some() {
            assert!(buf.len() <= lockstep::low_level::wire::MAX_PACKET);
        }
        while client.poll_transmit(now, &mut buf).is_some() {
            assert!(buf.len() <= lockstep::low_level::wire::MAX_PACKET);
            // Feed the client's own handshake to the server: real packets reach deeper states.
            let own = buf.clone();
            server.handle_datagram(now, client_addr, &own);
        }
        while server.poll_event().is_some() {}
        while client.poll_event().is_some() {}
    }
});
