//! `relay serve --agones` against the stand-in SDK server
//! ([`super::agones_sdk`]): the exact sequence of SDK calls from start to
//! exit, a sidecar that is missing and then starts late, and one that hangs.
//! Every wait is on a log line or a call, bounded.

use super::agones_sdk::{Behaviour, Call, StandIn};
use super::{Peers, Relay, http_get, scratch, turn_closed_at_least};

/// The Fleet's declarations the stand-in starts with (the relay sets its
/// own capacities).
const COUNTERS: [(&str, i64); 1] = [("matches", 10)];
const LISTS: [(&str, i64); 1] = [("players", 10)];

fn port_env(port: u16) -> [(&'static str, String); 1] {
    [("AGONES_SDK_HTTP_PORT", port.to_string())]
}

/// A port nothing listens on (bound, then released).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn is_health(c: &Call) -> bool {
    c.path == "/health"
}

fn is_watch(c: &Call) -> bool {
    c.path == "/watch/gameserver"
}

fn count(calls: &[Call], path_end: &str) -> usize {
    calls.iter().filter(|c| c.path.ends_with(path_end)).count()
}

/// The calls before the first match, with `Health` and the watch left out:
/// labels, the list's values, the capacities (2 loops x 1024 matches;
/// 1024 connections capped at Agones' 1000 list values), Ready.
fn start_up_calls() -> Vec<String> {
    vec![
        format!(
            "PUT /metadata/label relay-version={}",
            env!("CARGO_PKG_VERSION")
        ),
        "PUT /metadata/label resumes=false".into(),
        "GET /v1beta1/lists/players".into(),
        "PATCH /v1beta1/counters/matches capacity=2048".into(),
        "PATCH /v1beta1/lists/players capacity=1000".into(),
        "POST /ready".into(),
    ]
}

/// The calls as a match of players `m/0` and `m/1` starts.
fn match_start_calls() -> Vec<String> {
    vec![
        "PATCH /v1beta1/counters/matches count=1".into(),
        "POST /v1beta1/lists/players:addValue value=m/0".into(),
        "POST /v1beta1/lists/players:addValue value=m/1".into(),
    ]
}

fn shorts(calls: &[Call]) -> Vec<String> {
    calls
        .iter()
        .filter(|c| !is_health(c) && !is_watch(c))
        .map(Call::short)
        .collect()
}

#[test]
fn an_agones_relay_makes_the_documented_sdk_calls_from_start_to_exit() {
    let sdk = StandIn::start(&COUNTERS, &LISTS);
    let dir = scratch("agones-sequence");
    let mut relay = Relay::start_with_env(
        &dir,
        "50",
        &port_env(sdk.port),
        &["--agones", "--agones-health-s", "1", "--grace-s", "0"],
    );
    // Ready (after `listening`: the socket is bound), then Health pings.
    sdk.wait_calls("Ready, then a Health ping", |c| {
        c.iter().skip_while(|c| c.path != "/ready").any(is_health)
    });
    // The matchmaker allocates this GameServer with its metadata: the
    // relay reads it from the watch stream.
    sdk.allocate(&[("lockstep.dev/token-key-id", "k1"), ("other/x", "y")]);
    let v = relay.wait_for(|v| v["event"] == "agones_gameserver" && v["state"] == "Allocated");
    assert_eq!(
        v["metadata"],
        serde_json::json!({ "lockstep.dev/token-key-id": "k1" })
    );
    let _peers = Peers::start(&relay.addr, "m", 2, 100_000);
    relay.wait_for(|v| v["event"] == "match_started");
    sdk.wait_calls("the match's players listed", |c| {
        count(c, "players:addValue") == 2
    });
    assert_eq!(sdk.counter("matches"), (1, 2048));
    assert_eq!(sdk.list("players"), ["m/0", "m/1"]);
    relay.stop();

    let calls = sdk.calls();
    let seq = shorts(&calls);
    let mut expected = start_up_calls();
    expected.extend(match_start_calls());
    let drained = [
        "POST /v1beta1/lists/players:removeValue value=m/0",
        "POST /v1beta1/lists/players:removeValue value=m/1",
        "PATCH /v1beta1/counters/matches count=0",
        "PATCH /v1beta1/counters/matches capacity=0",
        "POST /shutdown",
    ];
    // The drain: the counter's capacity follows the running count down.
    // With `--grace-s 0` the match ends at once, so whether the worker
    // saw the drain begin before the match end (capacity 1 first) is a
    // race; both orders are what the contract allows.
    let mut early = expected.clone();
    early.push("PATCH /v1beta1/counters/matches capacity=1".into());
    early.extend(drained.iter().map(|s| (*s).to_owned()));
    expected.extend(drained.iter().map(|s| (*s).to_owned()));
    assert!(seq == expected || seq == early, "calls: {seq:#?}");

    // Health: only after Ready, never once the drain's first call went out.
    let ready = calls.iter().position(|c| c.path == "/ready").unwrap();
    let first_health = calls.iter().position(is_health).unwrap();
    assert!(first_health > ready, "Health before Ready");
    let last_add = calls
        .iter()
        .rposition(|c| c.path.ends_with(":addValue"))
        .unwrap();
    let drain_start = calls
        .iter()
        .enumerate()
        .skip(last_add + 1)
        .find(|(_, c)| !is_health(c) && !is_watch(c))
        .map(|(i, _)| i)
        .unwrap();
    assert!(
        calls[drain_start..].iter().all(|c| !is_health(c)),
        "a Health ping during the drain: {:#?}",
        calls.iter().map(Call::short).collect::<Vec<_>>()
    );
    assert!(calls.iter().all(|c| c.status == 200), "{seq:#?}");
    assert_eq!(sdk.protocol_errors(), Vec::<String>::new());
    assert_eq!(sdk.counter("matches"), (0, 0));
    assert!(sdk.list("players").is_empty());
    assert_eq!(sdk.game_state(), "Shutdown");
    let labels = sdk.labels();
    assert_eq!(
        labels["agones.dev/sdk-relay-version"],
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(labels["agones.dev/sdk-resumes"], "false");
    assert!(
        relay
            .seen
            .iter()
            .any(|v| v["event"] == "agones_shutdown" && v["answered"] == true)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_sdk_is_logged_the_relay_serves_and_a_late_sidecar_gets_the_running_match() {
    let port = free_port();
    let dir = scratch("agones-late");
    let mut relay =
        Relay::start_with_env(&dir, "50", &port_env(port), &["--agones", "--grace-s", "0"]);
    let warn = relay.wait_for(|v| v["event"] == "agones_unreachable");
    assert_eq!(warn["level"], "warn");
    assert_eq!(warn["port"], port);
    // Nothing listens: the relay serves all the same.
    let _peers = Peers::start(&relay.addr, "m", 2, 100_000);
    relay.wait_for(|v| v["event"] == "match_started");
    relay.wait_for(turn_closed_at_least(20));
    // The sidecar comes up late, on the port Agones gave: it gets the
    // whole state, the running match included.
    let sdk = StandIn::start_on(port, Behaviour::Faithful, &COUNTERS, &LISTS);
    relay.wait_for(|v| v["event"] == "agones_reachable");
    sdk.wait_calls("the running match listed", |c| {
        count(c, "/ready") == 1 && count(c, "players:addValue") == 2
    });
    let mut expected = start_up_calls();
    // The match is already running when the ledger reaches the count.
    let ready = expected.pop().unwrap();
    expected.extend(match_start_calls());
    expected.push(ready);
    assert_eq!(shorts(&sdk.calls()), expected);
    assert_eq!(sdk.counter("matches"), (1, 2048));
    assert_eq!(sdk.list("players"), ["m/0", "m/1"]);
    relay.stop();
    assert_eq!(sdk.game_state(), "Shutdown");
    assert_eq!(sdk.counter("matches"), (0, 0));
    assert_eq!(sdk.protocol_errors(), Vec::<String>::new());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_hung_sdk_never_stalls_the_matches_or_health_and_the_relay_still_exits_zero() {
    let sdk = StandIn::start_on(0, Behaviour::Hang, &[], &[]);
    let dir = scratch("agones-hang");
    let mut relay = Relay::start_with_env(
        &dir,
        "50",
        &port_env(sdk.port),
        &["--agones", "--grace-s", "0", "--metrics", "127.0.0.1:0"],
    );
    let metrics = relay.seen_or_wait(|v| v["event"] == "metrics")["addr"]
        .as_str()
        .unwrap()
        .to_owned();
    // The relay's first call (and the watch) are stuck in the SDK.
    sdk.wait_accepted(1);
    let _peers = Peers::start(&relay.addr, "m", 2, 100_000);
    relay.wait_for(|v| v["event"] == "match_started");
    relay.wait_for(turn_closed_at_least(20));
    let (status, body) = http_get(&metrics, "/health");
    assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
    let warn = relay.seen_or_wait(|v| v["event"] == "agones_unreachable");
    assert!(
        warn["error"].as_str().unwrap().contains("no answer"),
        "{warn}"
    );
    relay.wait_for(turn_closed_at_least(40));
    // SIGTERM: the drain, and an exit 0 without the Shutdown answered.
    relay.stop();
    assert!(
        relay
            .seen
            .iter()
            .any(|v| v["event"] == "agones_shutdown" && v["answered"] == false),
        "{:?}",
        relay.seen.last()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// One request to the stand-in, as raw HTTP: the status code and body.
fn request(port: u16, method: &str, path: &str, body: &str) -> (u16, serde_json::Value) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, serde_json::from_str(body).unwrap())
}

/// The stand-in refuses what the real gateway refuses, so a relay that
/// passes against it sends what Agones takes.
#[test]
fn the_stand_in_sdk_is_as_strict_as_the_documented_api() {
    let sdk = StandIn::start(&[("matches", 2)], &[("players", 1)]);
    let p = sdk.port;
    let counters = "/v1beta1/counters/matches";
    assert_eq!(
        request(p, "PATCH", counters, r#"{"count":1}"#).0,
        400,
        "int64 as a number"
    );
    let (status, body) = request(p, "PATCH", counters, r#"{"count":"1"}"#);
    assert_eq!(status, 200);
    assert_eq!(
        body,
        serde_json::json!({"name": "matches", "count": "1", "capacity": "2"})
    );
    assert_eq!(
        request(p, "PATCH", counters, r#"{"count":"3"}"#).0,
        400,
        "over capacity"
    );
    assert_eq!(
        request(p, "PATCH", counters, r#"{"countDiff":"-2"}"#).0,
        400,
        "below 0"
    );
    assert_eq!(
        request(p, "PATCH", "/v1beta1/counters/rooms", r#"{"count":"1"}"#).0,
        404,
        "undeclared"
    );
    let list = "/v1beta1/lists/players";
    assert_eq!(
        request(p, "POST", &format!("{list}:addValue"), r#"{"value":"a"}"#).0,
        200
    );
    assert_eq!(
        request(p, "POST", &format!("{list}:addValue"), r#"{"value":"a"}"#).0,
        409
    );
    assert_eq!(
        request(p, "POST", &format!("{list}:addValue"), r#"{"value":"b"}"#).0,
        400,
        "full"
    );
    assert_eq!(
        request(
            p,
            "POST",
            &format!("{list}:removeValue"),
            r#"{"value":"b"}"#
        )
        .0,
        404
    );
    assert_eq!(
        request(p, "PATCH", list, r#"{"capacity":"1001"}"#).0,
        400,
        "Agones' list limit"
    );
    assert_eq!(
        request(p, "GET", "/v1beta1/lists/teams", "").0,
        404,
        "undeclared"
    );
    let label = "/metadata/label";
    assert_eq!(
        request(
            p,
            "PUT",
            label,
            r#"{"key":"relay-version","value":"0.1.0"}"#
        )
        .0,
        200
    );
    assert_eq!(
        request(p, "PUT", label, r#"{"key":"a/b","value":"x"}"#).0,
        400
    );
    assert_eq!(
        request(p, "PUT", label, r#"{"key":"k","value":"0.1.0+x"}"#).0,
        400
    );
    assert_eq!(
        request(
            p,
            "PUT",
            label,
            &format!(r#"{{"key":"{}","value":"x"}}"#, "k".repeat(60))
        )
        .0,
        400
    );
    assert_eq!(
        request(p, "POST", "/ready", r#"{"x":1}"#).0,
        400,
        "Empty takes no field"
    );
    assert_eq!(request(p, "POST", "/ready", "{}").0, 200);
    assert_eq!(request(p, "POST", "/nonsense", "{}").0, 404);
    assert_eq!(sdk.protocol_errors(), ["unknown route POST /nonsense"]);
    assert_eq!(sdk.labels()["agones.dev/sdk-relay-version"], "0.1.0");
}

#[test]
fn undeclared_counters_and_lists_are_refused_once_and_the_relay_goes_on() {
    let sdk = StandIn::start(&[], &[]);
    let dir = scratch("agones-undeclared");
    let mut relay = Relay::start_with_env(
        &dir,
        "50",
        &port_env(sdk.port),
        &["--agones", "--agones-health-s", "1", "--grace-s", "0"],
    );
    let list = relay.wait_for(|v| v["event"] == "agones_refused");
    assert!(
        list["text"].as_str().unwrap().contains("spec.lists"),
        "{list}"
    );
    let counter = relay.wait_for(|v| v["event"] == "agones_refused");
    assert!(
        counter["text"].as_str().unwrap().contains("spec.counters"),
        "{counter}"
    );
    sdk.wait_calls("Ready and a Health ping", |c| {
        c.iter().skip_while(|c| c.path != "/ready").any(is_health)
    });
    let _peers = Peers::start(&relay.addr, "m", 2, 100_000);
    relay.wait_for(|v| v["event"] == "match_started");
    relay.wait_for(turn_closed_at_least(20));
    relay.stop();
    let seq = shorts(&sdk.calls());
    assert_eq!(
        seq,
        [
            format!(
                "PUT /metadata/label relay-version={}",
                env!("CARGO_PKG_VERSION")
            ),
            "PUT /metadata/label resumes=false".into(),
            "GET /v1beta1/lists/players -> 404".into(),
            "PATCH /v1beta1/counters/matches capacity=2048 -> 404".into(),
            "POST /ready".into(),
            "POST /shutdown".into(),
        ],
        "the counter and the list are left alone after one refusal each"
    );
    assert_eq!(
        relay
            .seen
            .iter()
            .filter(|v| v["event"] == "agones_refused")
            .count(),
        2
    );
    let _ = std::fs::remove_dir_all(&dir);
}
