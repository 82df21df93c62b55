//! A stand-in for the Agones SDK server's REST gateway (Agones 1.57), for
//! the relay's Agones tests: there is no Kubernetes here. It is written
//! from the documented REST API (`sdk.swagger.json`, `beta.swagger.json`)
//! and strict where the real one is:
//!
//! - routes: `POST /ready`, `/health`, `/shutdown` (body: an empty JSON
//!   object), `PUT /metadata/label` (`{key, value}`, Kubernetes label
//!   syntax once prefixed `agones.dev/sdk-`), `GET /gameserver`,
//!   `GET /watch/gameserver` (chunked, one JSON object per line:
//!   `{"result": GameServer}`), `GET`/`PATCH /v1beta1/counters/{name}`,
//!   `GET`/`PATCH /v1beta1/lists/{name}`,
//!   `POST /v1beta1/lists/{name}:addValue` / `:removeValue`;
//!   anything else is 404 and counted as a protocol error;
//! - 64-bit integers are JSON strings both ways (a JSON number for an
//!   int64 field is refused, 400);
//! - counters and lists exist only if declared (404 otherwise), counts stay
//!   within `[0, capacity]` and lists within their capacity (400
//!   OUT_OF_RANGE), list capacity at most 1000, a value added twice is 409
//!   ALREADY_EXISTS and removing a missing one 404;
//! - errors are the gateway's JSON (`{"code", "message", "details"}`).
//!
//! Two behaviours beside the faithful one: [`Behaviour::Hang`] accepts
//! connections and never answers (a wedged sidecar), and a test can start
//! the stand-in late on a port reserved before (a sidecar that starts
//! after the game server).

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How the stand-in behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Behaviour {
    /// As the documented API says.
    Faithful,
    /// Accepts every connection and never reads or answers.
    Hang,
}

/// One request the stand-in received and what it answered.
#[derive(Clone, Debug)]
pub(crate) struct Call {
    pub(crate) method: String,
    pub(crate) path: String,
    pub(crate) body: Value,
    pub(crate) status: u16,
}

impl Call {
    /// A short form for sequence checks: `POST /ready`,
    /// `PATCH /v1beta1/counters/matches count=1`, `PUT /metadata/label k=v`, ...
    pub(crate) fn short(&self) -> String {
        let mut s = format!("{} {}", self.method, self.path);
        if let Some(o) = self.body.as_object() {
            if let (Some(k), Some(v)) = (o.get("key"), o.get("value")) {
                s.push_str(&format!(
                    " {}={}",
                    k.as_str().unwrap_or("?"),
                    v.as_str().unwrap_or("?")
                ));
            } else {
                for (k, v) in o {
                    s.push_str(&format!(" {k}={}", v.as_str().unwrap_or("?")));
                }
            }
        }
        if self.status != 200 {
            s.push_str(&format!(" -> {}", self.status));
        }
        s
    }
}

/// What the SDK holds.
#[derive(Default)]
struct State {
    calls: Vec<Call>,
    /// Requests to unknown routes or with malformed bodies.
    protocol_errors: Vec<String>,
    game_state: String,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    counters: BTreeMap<String, (i64, i64)>,
    lists: BTreeMap<String, (i64, Vec<String>)>,
    watchers: Vec<TcpStream>,
    /// Connections accepted (all behaviours).
    accepted: usize,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

/// The stand-in SDK server on `127.0.0.1:port`.
pub(crate) struct StandIn {
    pub(crate) port: u16,
    shared: Arc<Shared>,
}

/// Upper bound on any wait for a call.
const BOUND: Duration = Duration::from_secs(60);

impl StandIn {
    /// A faithful stand-in on a fresh port with the Fleet's declarations.
    pub(crate) fn start(counters: &[(&str, i64)], lists: &[(&str, i64)]) -> Self {
        Self::start_on(0, Behaviour::Faithful, counters, lists)
    }

    /// One on `port` (0: a fresh one).
    pub(crate) fn start_on(
        port: u16,
        behaviour: Behaviour,
        counters: &[(&str, i64)],
        lists: &[(&str, i64)],
    ) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = State {
            game_state: "Scheduled".into(),
            counters: counters
                .iter()
                .map(|(n, cap)| ((*n).to_owned(), (0, *cap)))
                .collect(),
            lists: lists
                .iter()
                .map(|(n, cap)| ((*n).to_owned(), (*cap, Vec::new())))
                .collect(),
            ..State::default()
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            changed: Condvar::new(),
        });
        let s = Arc::clone(&shared);
        std::thread::spawn(move || {
            // Hung connections are kept open here, never read.
            let mut hung = Vec::new();
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                s.lock().accepted += 1;
                s.changed.notify_all();
                match behaviour {
                    Behaviour::Hang => hung.push(stream),
                    Behaviour::Faithful => {
                        let s = Arc::clone(&s);
                        std::thread::spawn(move || serve(&s, stream));
                    }
                }
            }
        });
        Self { port, shared }
    }

    /// Every call so far.
    pub(crate) fn calls(&self) -> Vec<Call> {
        self.shared.lock().calls.clone()
    }

    /// Requests the stand-in could not make sense of.
    pub(crate) fn protocol_errors(&self) -> Vec<String> {
        self.shared.lock().protocol_errors.clone()
    }

    /// A counter's (count, capacity).
    pub(crate) fn counter(&self, name: &str) -> (i64, i64) {
        self.shared.lock().counters[name]
    }

    /// A list's values.
    pub(crate) fn list(&self, name: &str) -> Vec<String> {
        self.shared.lock().lists[name].1.clone()
    }

    /// The GameServer's labels.
    pub(crate) fn labels(&self) -> BTreeMap<String, String> {
        self.shared.lock().labels.clone()
    }

    /// The GameServer's state.
    pub(crate) fn game_state(&self) -> String {
        self.shared.lock().game_state.clone()
    }

    /// Waits (bounded) until `pred` holds of the calls so far.
    pub(crate) fn wait_calls(&self, what: &str, pred: impl Fn(&[Call]) -> bool) -> Vec<Call> {
        self.wait(what, |s| pred(&s.calls).then(|| s.calls.clone()))
    }

    /// Waits (bounded) until at least `n` connections were accepted.
    pub(crate) fn wait_accepted(&self, n: usize) {
        self.wait("connections", |s| (s.accepted >= n).then_some(()));
    }

    fn wait<T>(&self, what: &str, f: impl Fn(&State) -> Option<T>) -> T {
        let end = Instant::now() + BOUND;
        let mut g = self.shared.lock();
        loop {
            if let Some(t) = f(&g) {
                return t;
            }
            let left = end.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "the stand-in SDK did not see {what} in time; calls: {:#?}",
                g.calls.iter().map(Call::short).collect::<Vec<_>>()
            );
            g = self
                .shared
                .changed
                .wait_timeout(g, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }

    /// What an allocation does to the GameServer: state `Allocated` and
    /// the allocator's metadata (annotations), pushed to every watcher.
    pub(crate) fn allocate(&self, annotations: &[(&str, &str)]) {
        let mut g = self.shared.lock();
        g.game_state = "Allocated".into();
        for (k, v) in annotations {
            g.annotations.insert((*k).to_owned(), (*v).to_owned());
        }
        push_watchers(&mut g);
        drop(g);
        self.shared.changed.notify_all();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The GameServer object as the gateway writes it (proto field names,
/// int64 as strings).
fn game_server(s: &State) -> Value {
    let counters: serde_json::Map<String, Value> = s
        .counters
        .iter()
        .map(|(k, (count, cap))| {
            (
                k.clone(),
                json!({ "count": count.to_string(), "capacity": cap.to_string() }),
            )
        })
        .collect();
    let lists: serde_json::Map<String, Value> = s
        .lists
        .iter()
        .map(|(k, (cap, values))| {
            (
                k.clone(),
                json!({ "capacity": cap.to_string(), "values": values }),
            )
        })
        .collect();
    json!({
        "object_meta": {
            "name": "lockstep-relay-x7k2p", "namespace": "default", "uid": "0e5c",
            "resource_version": "1", "generation": "1", "creation_timestamp": "1764400000",
            "labels": s.labels, "annotations": s.annotations,
        },
        "spec": { "health": { "period_seconds": 5, "failure_threshold": 3, "initial_delay_seconds": 5 } },
        "status": { "state": s.game_state, "address": "127.0.0.1",
            "ports": [{ "name": "game", "port": 7777 }], "counters": counters, "lists": lists },
    })
}

/// Sends the GameServer to every watcher (a chunk holding one line);
/// watchers that went away are dropped.
fn push_watchers(s: &mut State) {
    let line = format!("{}\n", json!({ "result": game_server(s) }));
    let chunk = format!("{:x}\r\n{line}\r\n", line.len());
    s.watchers.retain_mut(|w| {
        w.write_all(chunk.as_bytes())
            .and_then(|()| w.flush())
            .is_ok()
    });
}

/// Kubernetes name syntax: `[-A-Za-z0-9_.]`, alphanumeric at both ends.
fn name_syntax(s: &str) -> bool {
    let b = s.as_bytes();
    b.iter()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b.first().is_none_or(u8::is_ascii_alphanumeric)
        && b.last().is_none_or(u8::is_ascii_alphanumeric)
}

/// An int64 field: a JSON string of digits, nothing else.
fn int64_field(body: &Value, k: &str) -> Result<Option<i64>, String> {
    match &body[k] {
        Value::Null => Ok(None),
        Value::String(s) => s
            .parse()
            .map(Some)
            .map_err(|_| format!("{k}: {s:?} is not an int64")),
        other => Err(format!("{k}: int64 must be a JSON string, got {other}")),
    }
}

/// An answer: status, body.
type Answer = (u16, Value);

fn error(status: u16, code: u32, message: &str) -> Answer {
    (
        status,
        json!({ "code": code, "message": message, "details": [] }),
    )
}

const INVALID_ARGUMENT: (u16, u32) = (400, 3);
const NOT_FOUND: (u16, u32) = (404, 5);
const ALREADY_EXISTS: (u16, u32) = (409, 6);
const OUT_OF_RANGE: (u16, u32) = (400, 11);

fn err(kind: (u16, u32), message: &str) -> Answer {
    error(kind.0, kind.1, message)
}

/// Reads one request, answers it (or registers a watcher).
fn serve(shared: &Shared, mut stream: TcpStream) {
    let _ = stream.set_read_timeout(Some(BOUND));
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or_default().split(' ');
    let (method, path, version) = (
        first.next().unwrap_or_default().to_owned(),
        first.next().unwrap_or_default().to_owned(),
        first.next().unwrap_or_default().to_owned(),
    );
    let headers: BTreeMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = raw[head_end + 4..].to_vec();
    while body.len() < length {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => body.extend_from_slice(&buf[..n]),
        }
    }
    let mut g = shared.lock();
    let protocol = |g: &mut State, e: String| g.protocol_errors.push(e);
    if version != "HTTP/1.1" || !headers.contains_key("host") {
        protocol(
            &mut g,
            format!("not an HTTP/1.1 request with Host: {head:?}"),
        );
    }
    let json_body: Value = if method == "GET" {
        if length != 0 {
            protocol(&mut g, format!("a GET with a body: {path}"));
        }
        Value::Null
    } else {
        if headers.get("content-type").map(String::as_str) != Some("application/json") {
            protocol(
                &mut g,
                format!("{method} {path} without Content-Type: application/json"),
            );
        }
        match serde_json::from_slice(&body) {
            Ok(v @ Value::Object(_)) => v,
            _ => {
                protocol(
                    &mut g,
                    format!(
                        "{method} {path}: body not a JSON object: {:?}",
                        String::from_utf8_lossy(&body)
                    ),
                );
                Value::Null
            }
        }
    };
    if method == "GET" && path == "/watch/gameserver" {
        // A stream: the head, then the GameServer now and at every change.
        let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
        if stream.write_all(head.as_bytes()).is_ok() {
            g.watchers.push(stream);
            push_watchers(&mut g);
        }
        g.calls.push(Call {
            method,
            path,
            body: Value::Null,
            status: 200,
        });
        drop(g);
        shared.changed.notify_all();
        return;
    }
    let (status, answer) = route(&mut g, &method, &path, &json_body);
    if status == 404 && answer["message"] == "no such route" {
        protocol(&mut g, format!("unknown route {method} {path}"));
    }
    g.calls.push(Call {
        method,
        path,
        body: json_body,
        status,
    });
    drop(g);
    shared.changed.notify_all();
    let text = answer.to_string();
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        409 => "Conflict",
        _ => "Error",
    };
    let _ = write!(
        stream,
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    );
    let _ = stream.flush();
}

/// The documented routes.
fn route(g: &mut State, method: &str, path: &str, body: &Value) -> Answer {
    let empty = || body.as_object().is_some_and(serde_json::Map::is_empty);
    match (method, path) {
        ("POST", "/ready" | "/health" | "/shutdown" | "/allocate") => {
            if !empty() {
                return err(INVALID_ARGUMENT, "body must be an empty object");
            }
            match path {
                "/ready" => g.game_state = "Ready".into(),
                "/shutdown" => g.game_state = "Shutdown".into(),
                "/allocate" => g.game_state = "Allocated".into(),
                _ => {}
            }
            if path != "/health" {
                push_watchers(g);
            }
            (200, json!({}))
        }
        ("PUT", "/metadata/label" | "/metadata/annotation") => {
            let (Some(key), Some(value)) = (body["key"].as_str(), body["value"].as_str()) else {
                return err(INVALID_ARGUMENT, "key and value must be strings");
            };
            let name = format!("sdk-{key}");
            if path == "/metadata/label"
                && (key.is_empty()
                    || name.len() > 63
                    || !name_syntax(&name)
                    || value.len() > 63
                    || !name_syntax(value))
            {
                return err(INVALID_ARGUMENT, "invalid label");
            }
            let full = format!("agones.dev/sdk-{key}");
            if path == "/metadata/label" {
                g.labels.insert(full, value.to_owned());
            } else {
                g.annotations.insert(full, value.to_owned());
            }
            push_watchers(g);
            (200, json!({}))
        }
        ("GET", "/gameserver") => (200, game_server(g)),
        _ => route_beta(g, method, path, body),
    }
}

/// The `/v1beta1` counters and lists.
fn route_beta(g: &mut State, method: &str, path: &str, body: &Value) -> Answer {
    let counter_json = |name: &str, (count, cap): (i64, i64)| json!({ "name": name, "count": count.to_string(), "capacity": cap.to_string() });
    let list_json = |name: &str, (cap, values): &(i64, Vec<String>)| json!({ "name": name, "capacity": cap.to_string(), "values": values });
    if let Some(name) = path.strip_prefix("/v1beta1/counters/") {
        let Some(&(count, cap)) = g.counters.get(name) else {
            return err(NOT_FOUND, &format!("counter not found: {name}"));
        };
        return match method {
            "GET" => (200, counter_json(name, (count, cap))),
            "PATCH" => {
                let allowed = ["count", "capacity", "countDiff", "count_diff"];
                if let Some(k) = body
                    .as_object()
                    .and_then(|o| o.keys().find(|k| !allowed.contains(&k.as_str())))
                {
                    return err(INVALID_ARGUMENT, &format!("unknown field {k}"));
                }
                let parsed = (|| {
                    Ok::<_, String>((
                        int64_field(body, "capacity")?,
                        int64_field(body, "count")?,
                        match int64_field(body, "countDiff")? {
                            Some(d) => Some(d),
                            None => int64_field(body, "count_diff")?,
                        },
                    ))
                })();
                let (new_cap, new_count, diff) = match parsed {
                    Ok(p) => p,
                    Err(e) => return err(INVALID_ARGUMENT, &e),
                };
                let cap = new_cap.unwrap_or(cap);
                if cap < 0 {
                    return err(OUT_OF_RANGE, "capacity must be at least 0");
                }
                let count = new_count.unwrap_or(count) + diff.unwrap_or(0);
                if count < 0 || count > cap {
                    return err(
                        OUT_OF_RANGE,
                        &format!("count {count} out of range [0, {cap}]"),
                    );
                }
                g.counters.insert(name.to_owned(), (count, cap));
                push_watchers(g);
                (200, counter_json(name, (count, cap)))
            }
            _ => err(NOT_FOUND, "no such route"),
        };
    }
    let Some(rest) = path.strip_prefix("/v1beta1/lists/") else {
        return err(NOT_FOUND, "no such route");
    };
    let (name, action) = rest.split_once(':').unwrap_or((rest, ""));
    let Some(list) = g.lists.get_mut(name) else {
        return err(NOT_FOUND, &format!("list not found: {name}"));
    };
    let value = body["value"].as_str();
    let answer = match (method, action) {
        ("GET", "") => return (200, list_json(name, list)),
        ("PATCH", "") => {
            if let Some(k) = body.as_object().and_then(|o| {
                o.keys()
                    .find(|k| !["capacity", "values"].contains(&k.as_str()))
            }) {
                return err(INVALID_ARGUMENT, &format!("unknown field {k}"));
            }
            match int64_field(body, "capacity") {
                Err(e) => return err(INVALID_ARGUMENT, &e),
                Ok(Some(c)) if !(0..=1000).contains(&c) => {
                    return err(OUT_OF_RANGE, "list capacity must be within [0, 1000]");
                }
                Ok(Some(c)) => {
                    list.0 = c;
                    list.1.truncate(usize::try_from(c).unwrap_or(0));
                }
                Ok(None) => {}
            }
            list_json(name, list)
        }
        ("POST", "addValue") => {
            let Some(v) = value else {
                return err(INVALID_ARGUMENT, "value must be a string");
            };
            if list.1.iter().any(|x| x == v) {
                return err(ALREADY_EXISTS, &format!("{v} already in list {name}"));
            }
            if i64::try_from(list.1.len()).unwrap_or(i64::MAX) >= list.0 {
                return err(OUT_OF_RANGE, &format!("list {name} at capacity"));
            }
            list.1.push(v.to_owned());
            list_json(name, list)
        }
        ("POST", "removeValue") => {
            let Some(v) = value else {
                return err(INVALID_ARGUMENT, "value must be a string");
            };
            let Some(i) = list.1.iter().position(|x| x == v) else {
                return err(NOT_FOUND, &format!("{v} not in list {name}"));
            };
            list.1.remove(i);
            list_json(name, list)
        }
        _ => return err(NOT_FOUND, "no such route"),
    };
    push_watchers(g);
    (200, answer)
}
