//! What protecting payloads costs the relay per datagram: the transport
//! `Server`'s work to receive one datagram (a player's input) and to send
//! one (a bundle), in open mode (keyed-BLAKE3 MAC, payload in the clear) and
//! in token mode (the payload encrypted with a keyed-BLAKE3 keystream, then
//! MACed the same way),
//! over one in-memory client/server pair with a virtual clock: no socket, so
//! the figure is the protocol's own cost, all of which the relay pays. Then
//! the whole relay (transport, glue, router) with many fake matches in each
//! mode, alternating in one run ([`super::hotpath`]): the CPU per datagram
//! the relay's capacity is planned on, so the ratio is what token mode
//! costs in matches per core.

use super::stats::Summary;
use lockstep::low_level::transport::{
    AuthMode, Channel, Client, ConnId, Server, ServerEvent, TransportConfig,
};
use lockstep::token::{TokenClaims, TokenKey, issue_token};
use lockstep::{Duration, Instant};
use std::net::SocketAddr;
use std::time::Instant as Clock;

/// Unix time at the server's `Instant::ZERO` (any fixed value: the tokens
/// are issued for it).
const UNIX0: u64 = 1_700_000_000;

/// The figures of one payload size.
#[derive(Clone, Copy, Debug)]
pub struct Figures {
    /// Message bytes per datagram.
    pub payload: usize,
    /// ns to receive one datagram, open mode.
    pub open_rx: Summary,
    /// ns to build and seal one datagram, open mode.
    pub open_tx: Summary,
    /// ns to receive one datagram, token mode.
    pub token_rx: Summary,
    /// ns to build and seal one datagram, token mode.
    pub token_tx: Summary,
}

fn addrs() -> (SocketAddr, SocketAddr) {
    (
        SocketAddr::from(([127, 0, 0, 1], 7777)),
        SocketAddr::from(([127, 0, 0, 1], 40_000)),
    )
}

/// A connected pair; `None` if the handshake does not complete (a bug the
/// caller reports).
fn pair(tokens: bool) -> Option<(Client, Server, ConnId, Instant)> {
    let (server_addr, client_addr) = addrs();
    let cfg = TransportConfig::default();
    let mut now = Instant::ZERO;
    let (mut client, mut server) = if tokens {
        let key = TokenKey::from_bytes([0x5a; 32]);
        let claims = TokenClaims::new(cfg.protocol_id, "bench", 0, UNIX0, 3600);
        let token = issue_token(&key, &claims, &[server_addr], &[1; 32]).ok()?;
        let server = Server::new(cfg, [7; 32]).with_auth(AuthMode::Tokens {
            key,
            unix_at_zero: UNIX0,
        });
        (Client::with_token(now, server_addr, cfg, &token, 1), server)
    } else {
        (
            Client::new(now, server_addr, cfg, 1),
            Server::new(cfg, [7; 32]),
        )
    };
    let mut buf = Vec::new();
    let mut conn = None;
    for _ in 0..100 {
        while client.poll_transmit(now, &mut buf).is_some() {
            server.handle_datagram(now, client_addr, &buf);
        }
        while server.poll_transmit(now, &mut buf).is_some() {
            client.handle_datagram(now, server_addr, &buf);
        }
        while let Some(e) = server.poll_event() {
            if let ServerEvent::Connected { conn: c, .. } = e {
                conn = Some(c);
            }
        }
        while client.poll_event().is_some() {}
        if client.is_connected() && conn.is_some() {
            return Some((client, server, conn?, now));
        }
        now += Duration::from_millis(10);
    }
    None
}

/// ns per datagram received and per datagram sent by the server over
/// `rounds` exchanges of `payload`-byte messages each way.
fn run(tokens: bool, payload: usize, rounds: usize) -> Option<(f64, f64)> {
    let (server_addr, client_addr) = addrs();
    let (mut client, mut server, conn, mut now) = pair(tokens)?;
    let msg = vec![0x42; payload];
    let mut buf = Vec::new();
    let (mut rx, mut rx_n, mut tx, mut tx_n) = (0u128, 0u64, 0u128, 0u64);
    for _ in 0..rounds {
        // 100 ms turns: one input up, one bundle down, as in a match.
        now += Duration::from_millis(100);
        client.handle_timeout(now);
        server.handle_timeout(now);
        client.send(Channel::Reliable, &msg).ok()?;
        while client.poll_transmit(now, &mut buf).is_some() {
            let t = Clock::now();
            server.handle_datagram(now, client_addr, &buf);
            rx += t.elapsed().as_nanos();
            rx_n += 1;
        }
        while server.poll_event().is_some() {}
        server.send(conn, Channel::Reliable, &msg).ok()?;
        loop {
            let t = Clock::now();
            let sent = server.poll_transmit(now, &mut buf).is_some();
            if !sent {
                break;
            }
            tx += t.elapsed().as_nanos();
            tx_n += 1;
            client.handle_datagram(now, server_addr, &buf);
        }
        while client.poll_event().is_some() {}
    }
    (rx_n > 0 && tx_n > 0).then(|| (rx as f64 / rx_n as f64, tx as f64 / tx_n as f64))
}

/// The whole relay's CPU per datagram moved, open and token mode, over
/// alternating runs of the same fake matches.
#[derive(Clone, Copy, Debug)]
pub struct RelayFigures {
    /// 4-player matches per run.
    pub matches: usize,
    /// Turns per match.
    pub turns: u32,
    /// ns per datagram moved (in + out), every stage, open mode.
    pub open: Summary,
    /// The same in token mode.
    pub token: Summary,
    /// Peers that completed in the last run of each mode (open, token), of
    /// `4 * matches`.
    pub completed: (usize, usize),
}

/// Everything the section reports.
#[derive(Clone, Debug)]
pub struct Crypto {
    /// The transport alone, per payload size.
    pub sizes: Vec<Figures>,
    /// The whole relay.
    pub relay: RelayFigures,
}

/// Runs the whole relay in both modes, alternating, `runs` times each.
fn measure_relay(runs: usize, matches: usize, turns: u32) -> Result<RelayFigures, String> {
    use super::hotpath::{Auth, measure};
    let (mut open, mut token, mut completed) = (Vec::new(), Vec::new(), (0, 0));
    for run in 0..runs {
        for auth in [Auth::Open, Auth::Tokens] {
            let s = measure(matches, turns, 7 + run as u64, auth);
            if s.completed != 4 * matches {
                return Err(format!(
                    "{auth:?}: {} of {} peers completed",
                    s.completed,
                    4 * matches
                ));
            }
            let ns = s.total_per_datagram();
            match auth {
                Auth::Open => (open.push(ns), completed.0 = s.completed),
                Auth::Tokens => (token.push(ns), completed.1 = s.completed),
            };
        }
    }
    Ok(RelayFigures {
        matches,
        turns,
        open: Summary::of(&open).ok_or("no samples")?,
        token: Summary::of(&token).ok_or("no samples")?,
        completed,
    })
}

/// Measures every payload size, `runs` times each, then the whole relay.
///
/// # Errors
/// When a pair does not connect or stops exchanging, or a relay run does
/// not complete (the section cannot measure: the run must fail, not print
/// an empty table).
pub fn measure(quick: bool) -> Result<Crypto, String> {
    let sizes = measure_sizes(quick)?;
    let relay = if quick {
        measure_relay(3, 64, 60)?
    } else {
        measure_relay(7, 256, 100)?
    };
    Ok(Crypto { sizes, relay })
}

fn measure_sizes(quick: bool) -> Result<Vec<Figures>, String> {
    let (runs, rounds) = if quick { (3, 5_000) } else { (7, 20_000) };
    let mut out = Vec::new();
    for payload in [32, 200, 1000] {
        let mut samples: [Vec<f64>; 4] = Default::default();
        for _ in 0..runs {
            for (i, tokens) in [false, true].into_iter().enumerate() {
                let (rx, tx) = run(tokens, payload, rounds)
                    .ok_or_else(|| format!("the {payload}-byte pair did not exchange"))?;
                samples[2 * i].push(rx);
                samples[2 * i + 1].push(tx);
            }
        }
        let s = |i: usize| Summary::of(&samples[i]).ok_or("no samples".to_owned());
        out.push(Figures {
            payload,
            open_rx: s(0)?,
            open_tx: s(1)?,
            token_rx: s(2)?,
            token_tx: s(3)?,
        });
    }
    Ok(out)
}

/// The section's text.
#[must_use]
pub fn markdown(c: &Crypto) -> String {
    let mut md = sizes_markdown(&c.sizes);
    let r = &c.relay;
    let extra = r.token.median / r.open.median - 1.0;
    md.push_str(&format!(
        "\nThe whole relay (transport `Server`, glue and `Router`, as `relay serve` runs them) \
         with {} fake 4-player matches of {} turns in process on the seeded netsim with a \
         virtual clock (`bench --internal-hotpath`'s setup: one small command every 2 turns per \
         peer), the same matches once in open mode and once in token mode (every peer joining \
         with a token for its match and slot), alternating, {} runs each. CPU per datagram moved \
         (in + out, every stage) is what the relay capacity section's matches per core follow; \
         medians (min–max):\n\n\
         | mode | relay ns per datagram | peers completed | against open mode |\n|---|---|---|---|\n\
         | open | {} | {}/{} | 1.00x |\n\
         | token | {} | {}/{} | {:.2}x ({:+.1} %) |\n\n\
         So a relay in token mode holds about {:.0} % of the matches per core that it holds in \
         open mode; turn latency is the link's and the turn's, to which encryption adds {:+.0} ns \
         per datagram at the relay ({:.4} ms a hop, against turns of 100 ms).\n",
        r.matches,
        r.turns,
        r.open.runs,
        r.open.cell(0),
        r.completed.0,
        4 * r.matches,
        r.token.cell(0),
        r.completed.1,
        4 * r.matches,
        r.token.median / r.open.median,
        100.0 * extra,
        100.0 / (1.0 + extra),
        r.token.median - r.open.median,
        (r.token.median - r.open.median) / 1e6,
    ));
    md
}

fn sizes_markdown(figures: &[Figures]) -> String {
    let mut md = String::from(
        "What encrypting every payload in token mode costs the relay: the transport `Server`'s \
         CPU per datagram received (a player's message) and per datagram built and sealed (the \
         relay's answer), one reliable message of the given size each way every 100 ms turn, \
         over an in-memory client/server pair with a virtual clock (no socket: the protocol's \
         own cost; the kernel's share, the relay section's echo baseline, comes on top in \
         both modes). Open mode authenticates with a keyed-BLAKE3 MAC and \
         leaves payloads readable; token mode, where the connection keys are secret, first \
         encrypts the payload with a keyed-BLAKE3 keystream of the packet counter \
         (encrypt-then-MAC, `transport::auth`), so it pays the keystream on top of the same \
         MAC. Medians of runs, ns per datagram.\n\n\
         | payload bytes | receive, open | receive, token | send, open | send, token | \
         token mode costs, per datagram in + out |\n|---|---|---|---|---|---|\n",
    );
    for f in figures {
        let extra = (f.token_rx.median - f.open_rx.median) + (f.token_tx.median - f.open_tx.median);
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {:+.0} ns ({:.2}x) |\n",
            f.payload,
            f.open_rx.cell(0),
            f.token_rx.cell(0),
            f.open_tx.cell(0),
            f.token_tx.cell(0),
            extra / 2.0,
            (f.token_rx.median + f.token_tx.median) / (f.open_rx.median + f.open_tx.median),
        ));
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_modes_connect_and_exchange() {
        for tokens in [false, true] {
            let (rx, tx) = run(tokens, 200, 20).unwrap();
            assert!(rx > 0.0 && tx > 0.0);
        }
    }
}
