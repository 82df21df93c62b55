//! Message latency and datagram rates under loss, measured on the virtual
//! clock: the figures the "no cliff for larger messages" and "send when
//! there is something to say" goals are judged by.

use super::*;

/// One-way delivery latencies and datagram rates of one run.
pub(super) struct Figures {
    /// Sorted one-way latencies (µs) of the messages after a warm-up.
    pub(super) latencies: Vec<u64>,
    /// Datagrams per second client → server and server → client.
    pub(super) pps: (f64, f64),
}

impl Figures {
    pub(super) fn pct(&self, q: usize) -> f64 {
        self.latencies[(self.latencies.len() * q / 100).min(self.latencies.len() - 1)] as f64
            / 1000.0
    }
}

/// The client sends a `len`-byte reliable message every `every` for `secs`
/// seconds over 25 ms one way with `loss` each way; the server sends
/// nothing. Latency is delivery time minus send time (virtual clock).
pub(super) fn stream(len: usize, every: Duration, loss: f64, secs: u64, seed: u64) -> Figures {
    let link = LinkConfig {
        latency: Duration::from_millis(25),
        loss,
        ..LinkConfig::default()
    };
    let mut h = Harness::new(1, link, TransportConfig::default(), seed);
    h.connect();
    let conn = h.conn_of(0);
    let start = h.now;
    let stop = start + Duration::from_secs(secs);
    let end = stop + Duration::from_secs(3);
    let mut next = start;
    let mut seen = 0;
    let mut latencies = Vec::new();
    let sent_before = (
        h.net.counters(client_addr(0), addr(SERVER)).sent,
        h.net.counters(addr(SERVER), client_addr(0)).sent,
    );
    h.run_until(end, |h| {
        let msgs = h.server_messages(conn);
        for m in &msgs[seen..] {
            let sent = u64::from_le_bytes(m[..8].try_into().unwrap());
            latencies.push(h.now.as_micros() - sent);
        }
        seen = msgs.len();
        while h.now >= next && next < stop {
            let mut msg = h.now.as_micros().to_le_bytes().to_vec();
            msg.resize(len.max(8), 0x5A);
            h.clients[0].send(Channel::Reliable, &msg).unwrap();
            next += every;
        }
    });
    let sent = (secs * 1_000_000 / every.as_micros()) as usize;
    assert_eq!(latencies.len(), sent, "every message delivered");
    let pps = (
        (h.net.counters(client_addr(0), addr(SERVER)).sent - sent_before.0) as f64 / secs as f64,
        (h.net.counters(addr(SERVER), client_addr(0)).sent - sent_before.1) as f64 / secs as f64,
    );
    // The first seconds measure loss and RTT; judge the steady state.
    let skip = latencies.len() / 10;
    let mut steady = latencies.split_off(skip);
    steady.sort_unstable();
    Figures {
        latencies: steady,
        pps,
    }
}

#[test]
fn print_figures() {
    for len in [8usize, 400] {
        let f = stream(len, Duration::from_millis(20), 0.05, 60, 41);
        eprintln!(
            "{len} B every 20 ms, 5% loss, 50 ms RTT: p50 {:.1} p90 {:.1} p99 {:.1} max {:.1} ms, datagrams/s up {:.1} down {:.1}",
            f.pct(50),
            f.pct(90),
            f.pct(99),
            f.pct(100),
            f.pps.0,
            f.pps.1
        );
    }
}
