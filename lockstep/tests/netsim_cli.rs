//! The `netsim` binary: help, argument errors, and a bounded run that
//! forwards real datagrams through the impaired proxy.

use std::net::UdpSocket;
use std::process::Command;
use std::time::Duration;

fn netsim() -> Command {
    Command::new(env!("CARGO_BIN_EXE_netsim"))
}

#[test]
fn help_and_clear_argument_errors() {
    let help = netsim().arg("--help").output().unwrap();
    assert!(help.status.success());
    let text = String::from_utf8_lossy(&help.stdout);
    for flag in [
        "--listen",
        "--upstream",
        "--loss",
        "--latency-ms",
        "--jitter-ms",
        "--dup",
        "--reorder",
        "--seed",
        "--duration-s",
    ] {
        assert!(text.contains(flag), "help mentions {flag}");
    }
    let bad = netsim()
        .args([
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "127.0.0.1:9",
            "--loss",
            "1.5",
        ])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not a probability"));
    let missing = netsim().args(["--listen", "127.0.0.1:0"]).output().unwrap();
    assert_eq!(missing.status.code(), Some(2));
}

#[test]
fn bounded_run_forwards_and_reports_counters() {
    let upstream = UdpSocket::bind("127.0.0.1:0").unwrap();
    upstream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    // Reserve a free port for the proxy by binding and releasing it.
    let listen = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let child = netsim()
        .args([
            "--listen",
            &listen.to_string(),
            "--upstream",
            &upstream.local_addr().unwrap().to_string(),
            "--latency-ms",
            "5",
            "--duration-s",
            "3",
            "--json",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    // The proxy may not be listening yet: resend until the upstream sees a datagram
    // (bounded by the upstream's read timeout and the proxy's duration).
    let mut got = None;
    let mut buf = [0u8; 64];
    for _ in 0..40 {
        client.send_to(b"ping", listen).unwrap();
        upstream
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        if let Ok((n, from)) = upstream.recv_from(&mut buf) {
            got = Some((buf[..n].to_vec(), from));
            break;
        }
    }
    let (bytes, proxy_side) = got.expect("datagram forwarded");
    assert_eq!(bytes, b"ping");
    upstream.send_to(b"pong", proxy_side).unwrap();
    let mut reply = None;
    for _ in 0..40 {
        if let Ok((n, _)) = client.recv_from(&mut buf) {
            reply = Some(buf[..n].to_vec());
            break;
        }
    }
    assert_eq!(reply.as_deref(), Some(&b"pong"[..]));
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["clients"], 1);
    assert!(report["upstream"]["delivered"].as_u64().unwrap() >= 1);
    assert!(report["downstream"]["delivered"].as_u64().unwrap() >= 1);
}
