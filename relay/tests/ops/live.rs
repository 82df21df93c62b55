//! `relay serve --http` live view without a browser: a WebSocket client
//! written here stands in for the page, in token mode and over two event
//! loops. It reads the recording bytes the relay streams, re-simulates them
//! with the replay code the page runs, and reports its hashes back as the
//! page does; the relay must check them as a spectator's and agree.

use super::*;
use replays::{Record, Replayer, restore_checked};
use sim::{PlayerId, Simulation, StateHash};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

/// A WebSocket request for `/live?match={id}`: the whole answer (a refusal).
fn refused_upgrade(addr: SocketAddr, id: u64, token: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(BOUND)).unwrap();
    write!(
        s,
        "GET /live?match={id}&token={token} HTTP/1.1\r\nUpgrade: websocket\r\nSec-WebSocket-Key: x\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// A masked frame, as a browser sends it.
fn client_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mask = [0x5a, 0xa5, 0x0f, 0xf0];
    let mut out = vec![0x80 | opcode];
    if payload.len() < 126 {
        out.push(0x80 | payload.len() as u8);
    } else {
        out.push(0x80 | 126);
        out.extend_from_slice(&u16::try_from(payload.len()).unwrap().to_be_bytes());
    }
    out.extend_from_slice(&mask);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    out
}

/// Reads one server frame (unmasked): its opcode and payload.
fn read_frame(s: &mut TcpStream) -> (u8, Vec<u8>) {
    let mut head = [0u8; 2];
    s.read_exact(&mut head).unwrap();
    assert_eq!(head[0] & 0x80, 0x80, "FIN");
    assert_eq!(head[1] & 0x80, 0, "a server frame is not masked");
    let len = match head[1] & 0x7f {
        126 => {
            let mut b = [0u8; 2];
            s.read_exact(&mut b).unwrap();
            u64::from(u16::from_be_bytes(b))
        }
        127 => {
            let mut b = [0u8; 8];
            s.read_exact(&mut b).unwrap();
            u64::from_be_bytes(b)
        }
        n => u64::from(n),
    };
    let mut payload = vec![0u8; usize::try_from(len).unwrap()];
    s.read_exact(&mut payload).unwrap();
    (head[0] & 0x0f, payload)
}

/// Opens the live view's WebSocket of match `id` with a spectator token.
fn open_live(addr: SocketAddr, id: u64, token: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(BOUND)).unwrap();
    write!(
        s,
        "GET /live?match={id}&token={token} HTTP/1.1\r\nHost: {addr}\r\nOrigin: http://{addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    .unwrap();
    // The answer's head, byte by byte: the first frame follows at once.
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut b).unwrap();
        head.push(b[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert!(
        head.contains("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo="),
        "{head}"
    );
    s
}

fn metric(page: &str, name: &str) -> Option<u64> {
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Turns a peer plays here: 15 s of 50 ms turns.
const TURNS: u32 = 300;

#[test]
fn a_live_view_in_token_mode_streams_the_match_and_its_hashes_are_checked() {
    let dir = scratch("live");
    let key = dir.join("relay.key");
    let t0 = issue(&key, "tok", 0, true);
    let t1 = issue(&key, "tok", 1, false);
    let mut relay = Relay::start(
        &dir,
        &[
            "--token-key-file",
            key.to_str().unwrap(),
            "--http",
            "127.0.0.1:0",
            "--snapshot-every",
            "20",
            "--spectator-delay-ms",
            "200",
            "--max-live-viewers",
            "1",
        ],
    );
    let http: SocketAddr = relay.seen_or_wait(|v| v["event"] == "metrics")["addr"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let peers: Vec<Child> = [t0, t1]
        .iter()
        .enumerate()
        .map(|(i, t)| {
            Command::new(peer_bin())
                .args(["--relay", &relay.addr, "--match", "tok", "--players", "2"])
                .args([
                    "--turns",
                    &TURNS.to_string(),
                    "--seed",
                    &(i + 1).to_string(),
                ])
                .args(["--timeout-s", "60", "--token", t])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let peers = Peers(peers);

    // Join once a snapshot was agreed: a late view starts from it.
    relay.wait_for(turn_closed_at_least(40));
    let until = Instant::now() + BOUND;
    while metric(
        &http_get(http, "/metrics").1,
        "relay_snapshots_total{outcome=\"agreed\"}",
    )
    .unwrap_or_default()
        == 0
    {
        assert!(Instant::now() < until, "no snapshot agreed in time");
        // Paces the polling of a counter; the condition is the counter.
        std::thread::sleep(Duration::from_millis(20));
    }
    // Token mode: the list and the feed need a spectator token.
    let (status, _) = http_get(http, "/matches.json");
    assert!(status.contains("401"), "{status}");
    let player = issue(&key, "tok", 1, false);
    let (status, _) = http_get(http, &format!("/matches.json?token={player}"));
    assert!(status.contains("403"), "a player's token: {status}");
    let watch = issue_spectator(&key, "tok");
    let (status, body) = http_get(http, &format!("/matches.json?token={watch}"));
    assert!(status.contains("200"), "{status}");
    let list: Value = serde_json::from_str(&body).unwrap();
    let m = &list["matches"][0];
    assert_eq!(m["name"], "tok", "{list}");
    assert_eq!(m["game"], "lockstep-rts");
    assert_eq!(m["players"].as_array().map(Vec::len), Some(2));
    let id = m["id"].as_u64().unwrap();
    assert_eq!(http_get(http, "/watch").0, "HTTP/1.1 200 OK");
    assert!(http_get(http, "/").0.contains("302"));
    let none = refused_upgrade(http, 999_999, &watch);
    assert!(none.starts_with("HTTP/1.1 404"), "{none}");
    let no_credential = refused_upgrade(http, id, "");
    assert!(no_credential.starts_with("HTTP/1.1 403"), "{no_credential}");

    let mut ws = open_live(http, id, &watch);
    // One viewer at most: a second is refused while the first watches.
    let (second, _) = http_get(http, &format!("/live?match={id}"));
    assert!(second.contains("426"), "not a WebSocket: {second}");
    let refused = refused_upgrade(http, id, &watch);
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");

    // Read the stream, re-simulate it as the page does, report every hash.
    let mut bytes = Vec::new();
    let mut statuses = Vec::new();
    let mut ours: BTreeMap<u32, StateHash> = BTreeMap::new();
    let mut replayer: Option<Replayer<sim::game::World>> = None;
    let mut stepped = 0;
    let close = loop {
        let (op, payload) = read_frame(&mut ws);
        match op {
            0x2 => bytes.extend_from_slice(&payload),
            0x1 => {
                statuses.push(serde_json::from_slice::<Value>(&payload).unwrap());
                continue;
            }
            0x8 => break payload,
            // The relay's read check: answered as a browser does.
            0x9 => {
                ws.write_all(&client_frame(0xA, &payload)).unwrap();
                continue;
            }
            other => panic!("opcode {other}"),
        }
        let mut turns = Vec::new();
        let reader = Reader::from_bytes(&bytes).unwrap();
        let header = reader.header().clone();
        for rec in reader {
            match rec {
                Ok(Record::Keyframe {
                    turn,
                    hash,
                    snapshot,
                }) if replayer.is_none() => {
                    let world = restore_checked::<sim::game::World>(turn, &snapshot, hash).unwrap();
                    replayer = Some(Replayer::from_world(
                        world,
                        turn.0 + 1,
                        header.setup.players,
                    ));
                }
                Ok(Record::Turn { turn, inputs }) => turns.push((turn, inputs)),
                Ok(_) => {}
                Err(_) => break,
            }
        }
        let rp = replayer
            .as_mut()
            .expect("a late view starts with the agreed snapshot");
        let mut report = Vec::new();
        for (turn, inputs) in turns.iter().skip(stepped) {
            let inputs: &[(PlayerId, Vec<u8>)] = inputs;
            rp.step(*turn, inputs, |t, w| {
                let h = w.state_hash();
                ours.insert(t.0, h);
                report.extend_from_slice(&t.0.to_le_bytes());
                report.extend_from_slice(&h.0);
            })
            .unwrap();
        }
        stepped = turns.len();
        // Once the match ended the bridge closes after its last bytes: a
        // report racing that close finds the socket shut (the relay no
        // longer checks hashes after the end), and the close frame is
        // still there to read.
        if !report.is_empty()
            && let Err(e) = ws.write_all(&client_frame(0x2, &report))
        {
            let closed = matches!(
                e.kind(),
                std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
            );
            assert!(closed, "report: {e}");
        }
    };
    assert_eq!(u16::from_be_bytes([close[0], close[1]]), 1000, "{close:?}");
    let ended = statuses
        .iter()
        .find(|s| s["event"] == "ended")
        .unwrap_or_else(|| panic!("{statuses:?}"));
    assert_eq!(ended["turn"], TURNS - 1);
    assert_eq!(ended["reason"], "Completed");
    drop(peers);

    // The page's header is the relay recording's; every hash equals it.
    let recorded = relay.wait_for(|v| v["event"] == "recorded");
    let path = PathBuf::from(recorded["path"].as_str().unwrap());
    let file = Reader::open(&path).unwrap();
    let streamed = Reader::from_bytes(&bytes).unwrap();
    assert_eq!(streamed.header(), file.header());
    let mut agreed = BTreeMap::new();
    for rec in file {
        if let Ok(Record::Hash { turn, hash }) = rec {
            agreed.insert(turn.0, hash);
        }
    }
    let first = *ours.keys().next().unwrap();
    assert!(
        first > 20,
        "started from a snapshot after turn 20, at {first}"
    );
    assert_eq!(ours.keys().last(), Some(&(TURNS - 1)));
    for (t, h) in &ours {
        assert_eq!(agreed.get(t), Some(h), "turn {t}");
    }

    // The relay checked those hashes as a spectator's, and the place is free.
    let (_, page) = http_get(http, "/metrics");
    let verified = metric(&page, "relay_spectator_hashes_total{result=\"verified\"}");
    assert!(verified.unwrap_or_default() > 100, "{verified:?}");
    assert_eq!(
        metric(&page, "relay_spectator_hashes_total{result=\"mismatch\"}"),
        Some(0)
    );
    // As a browser does: our close answers the bridge's, which then lets
    // its place go (polled, bounded).
    let _ = ws.write_all(&client_frame(0x8, &1000u16.to_be_bytes()));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let list: Value =
            serde_json::from_str(&http_get(http, &format!("/matches.json?token={watch}")).1)
                .unwrap();
        if list["viewers"] == 0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{list}");
        std::thread::sleep(Duration::from_millis(20));
    }
    relay.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
