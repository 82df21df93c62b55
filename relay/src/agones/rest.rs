//! The Agones SDK's REST gateway on the wire: the calls the relay makes
//! ([`SdkCall`]) as HTTP/1.1 requests, the answers parsed (64-bit integers
//! travel as JSON strings), and the watch stream's lines. Pure: no socket,
//! no clock.

use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;

/// One call of the SDK the relay makes, in the REST gateway's terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum SdkCall {
    /// `POST /ready`: the relay takes players.
    Ready,
    /// `POST /health`: one health ping.
    Health,
    /// `POST /shutdown`: the relay has drained; Agones may delete the pod.
    Shutdown,
    /// `PUT /metadata/label`: a label (its key gets [`super::labels::SDK_PREFIX`]).
    SetLabel {
        /// The key's name part (see [`super::labels::check_label_key`]).
        key: String,
        /// The value (see [`super::labels::check_label_value`]).
        value: String,
    },
    /// `PATCH /v1beta1/counters/{name}` with `capacity`.
    CounterCapacity {
        /// The counter.
        name: String,
        /// Its new capacity.
        capacity: i64,
    },
    /// `PATCH /v1beta1/counters/{name}` with `count` (a set, not a
    /// difference: repeating it after a lost answer changes nothing).
    CounterCount {
        /// The counter.
        name: String,
        /// Its new count.
        count: i64,
    },
    /// `GET /v1beta1/lists/{name}`: the list's values and capacity.
    ListGet {
        /// The list.
        name: String,
    },
    /// `PATCH /v1beta1/lists/{name}` with `capacity` only (the gateway
    /// derives the field mask from the body, so the values stay).
    ListCapacity {
        /// The list.
        name: String,
        /// Its new capacity.
        capacity: i64,
    },
    /// `POST /v1beta1/lists/{name}:addValue`.
    ListAdd {
        /// The list.
        name: String,
        /// The value added.
        value: String,
    },
    /// `POST /v1beta1/lists/{name}:removeValue`.
    ListRemove {
        /// The list.
        name: String,
        /// The value removed.
        value: String,
    },
}

impl SdkCall {
    /// The call's short name in logs (the SDK's own name for it).
    pub(super) const fn name(&self) -> &'static str {
        match self {
            Self::Ready => "Ready",
            Self::Health => "Health",
            Self::Shutdown => "Shutdown",
            Self::SetLabel { .. } => "SetLabel",
            Self::CounterCapacity { .. } | Self::CounterCount { .. } => "UpdateCounter",
            Self::ListGet { .. } => "GetList",
            Self::ListCapacity { .. } => "UpdateList",
            Self::ListAdd { .. } => "AddListValue",
            Self::ListRemove { .. } => "RemoveListValue",
        }
    }

    /// The HTTP request for this call.
    pub(super) fn request(&self) -> RestRequest {
        let obj = |pairs: &[(&str, Value)]| {
            Value::Object(
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), v.clone()))
                    .collect(),
            )
            .to_string()
        };
        // int64 fields are JSON strings in the gateway's protojson mapping.
        let int64 = |n: i64| Value::String(n.to_string());
        let (method, path, body) = match self {
            Self::Ready => ("POST", "/ready".to_owned(), "{}".to_owned()),
            Self::Health => ("POST", "/health".to_owned(), "{}".to_owned()),
            Self::Shutdown => ("POST", "/shutdown".to_owned(), "{}".to_owned()),
            Self::SetLabel { key, value } => (
                "PUT",
                "/metadata/label".to_owned(),
                obj(&[
                    ("key", key.as_str().into()),
                    ("value", value.as_str().into()),
                ]),
            ),
            Self::CounterCapacity { name, capacity } => (
                "PATCH",
                format!("/v1beta1/counters/{}", path_segment(name)),
                obj(&[("capacity", int64(*capacity))]),
            ),
            Self::CounterCount { name, count } => (
                "PATCH",
                format!("/v1beta1/counters/{}", path_segment(name)),
                obj(&[("count", int64(*count))]),
            ),
            Self::ListGet { name } => (
                "GET",
                format!("/v1beta1/lists/{}", path_segment(name)),
                String::new(),
            ),
            Self::ListCapacity { name, capacity } => (
                "PATCH",
                format!("/v1beta1/lists/{}", path_segment(name)),
                obj(&[("capacity", int64(*capacity))]),
            ),
            Self::ListAdd { name, value } => (
                "POST",
                format!("/v1beta1/lists/{}:addValue", path_segment(name)),
                obj(&[("value", value.as_str().into())]),
            ),
            Self::ListRemove { name, value } => (
                "POST",
                format!("/v1beta1/lists/{}:removeValue", path_segment(name)),
                obj(&[("value", value.as_str().into())]),
            ),
        };
        RestRequest { method, path, body }
    }
}

impl fmt::Display for SdkCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self.request();
        write!(f, "{} {} {}", r.method, r.path, r.body)
    }
}

/// A path segment with everything but unreserved characters
/// percent-encoded (counter and list names are plain words; this keeps a
/// stray `/` or space from changing the route).
fn path_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// One HTTP request to the SDK server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct RestRequest {
    /// `GET`, `POST`, `PUT` or `PATCH`.
    pub method: &'static str,
    /// The path (and query).
    pub path: String,
    /// The JSON body (empty for a `GET`).
    pub body: String,
}

impl RestRequest {
    /// A `GET` of `path` (no body).
    pub(super) fn get(path: &str) -> Self {
        Self {
            method: "GET",
            path: path.to_owned(),
            body: String::new(),
        }
    }

    /// The request's bytes for the SDK server on `127.0.0.1:port`, one
    /// request per connection (`Connection: close`), appended to `out`.
    pub(super) fn encode(&self, port: u16, out: &mut Vec<u8>) {
        let mut head = format!(
            "{} {} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nAccept: application/json\r\n",
            self.method, self.path
        );
        if self.method != "GET" {
            head.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                self.body.len()
            ));
        }
        head.push_str("\r\n");
        out.extend_from_slice(head.as_bytes());
        out.extend_from_slice(self.body.as_bytes());
    }
}

/// What is wrong with an answer of the SDK server.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum RestError {
    /// The status line or headers are not HTTP/1.1.
    #[error("malformed HTTP answer: {0}")]
    Malformed(&'static str),
    /// The answer ended before its body did.
    #[error("the answer was cut short")]
    Truncated,
    /// The body is not the JSON expected.
    #[error("unexpected JSON: {0}")]
    Json(String),
}

/// An HTTP answer: the status and the (de-chunked) body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct RestResponse {
    /// The status code.
    pub status: u16,
    /// The body.
    pub body: Vec<u8>,
}

impl RestResponse {
    /// Whether the status is 2xx.
    pub(super) const fn is_success(&self) -> bool {
        self.status >= 200 && self.status < 300
    }

    /// The error message of a gateway error body (`{"code": 5, "message":
    /// "..."}`), else the body as text, shortened.
    pub(super) fn message(&self) -> String {
        let text = String::from_utf8_lossy(&self.body);
        match serde_json::from_str::<Value>(&text) {
            Ok(v) if v["message"].is_string() => v["message"].as_str().unwrap_or("").to_owned(),
            _ => text.chars().take(200).collect(),
        }
    }
}

/// The head of an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Head {
    /// The status code.
    pub status: u16,
    /// `Transfer-Encoding: chunked`.
    pub chunked: bool,
    /// `Content-Length`, if given.
    pub length: Option<usize>,
    /// Where the body starts.
    pub start: usize,
}

/// The head of an answer; `None` while it is incomplete.
pub(super) fn parse_head(raw: &[u8]) -> Result<Option<Head>, RestError> {
    let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = std::str::from_utf8(&raw[..end]).map_err(|_| RestError::Malformed("not text"))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.") {
        return Err(RestError::Malformed("no HTTP/1.x status line"));
    }
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or(RestError::Malformed("no status code"))?;
    let mut chunked = false;
    let mut length = None;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Err(RestError::Malformed("a header without a colon"));
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.eq_ignore_ascii_case("chunked");
        } else if name.eq_ignore_ascii_case("content-length") {
            length = Some(
                value
                    .parse()
                    .map_err(|_| RestError::Malformed("a bad Content-Length"))?,
            );
        }
    }
    Ok(Some(Head {
        status,
        chunked,
        length,
        start: end + 4,
    }))
}

/// A whole answer read until the server closed the connection.
pub(super) fn parse_response(raw: &[u8]) -> Result<RestResponse, RestError> {
    let Head {
        status,
        chunked,
        length,
        start,
    } = parse_head(raw)?.ok_or(RestError::Truncated)?;
    let rest = &raw[start..];
    let body = if chunked {
        let mut d = Dechunker::default();
        let mut body = Vec::new();
        if !d.push(rest, &mut body)? {
            return Err(RestError::Truncated);
        }
        body
    } else if let Some(n) = length {
        rest.get(..n).ok_or(RestError::Truncated)?.to_vec()
    } else {
        rest.to_vec()
    };
    Ok(RestResponse { status, body })
}

/// Decodes a chunked body as it arrives (the watch stream never ends, so
/// its bytes are decoded piece by piece).
#[derive(Debug, Default)]
pub(super) struct Dechunker {
    /// Bytes received and not decoded yet.
    pending: Vec<u8>,
    /// Bytes left of the current chunk's data.
    left: usize,
    /// The CRLF after a chunk's data is still to come.
    crlf: bool,
    /// The last (zero-size) chunk arrived; its trailer lines are read.
    trailer: bool,
    /// The trailer's empty line arrived: the body is over.
    done: bool,
}

impl Dechunker {
    /// Decodes what `input` completes into `out`; returns whether the body
    /// has ended (the zero-length chunk).
    pub(super) fn push(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<bool, RestError> {
        self.pending.extend_from_slice(input);
        let mut at = 0;
        while !self.done {
            if self.left > 0 {
                let take = self.left.min(self.pending.len() - at);
                if take == 0 {
                    break;
                }
                out.extend_from_slice(&self.pending[at..at + take]);
                at += take;
                self.left -= take;
                if self.left == 0 {
                    self.crlf = true;
                }
            } else if self.crlf {
                if self.pending.len() - at < 2 {
                    break;
                }
                if &self.pending[at..at + 2] != b"\r\n" {
                    return Err(RestError::Malformed("no CRLF after a chunk"));
                }
                at += 2;
                self.crlf = false;
            } else if self.trailer {
                let Some(eol) = self.pending[at..].windows(2).position(|w| w == b"\r\n") else {
                    break;
                };
                at += eol + 2;
                self.done = eol == 0;
            } else {
                let Some(eol) = self.pending[at..].windows(2).position(|w| w == b"\r\n") else {
                    if self.pending.len() - at > 64 {
                        return Err(RestError::Malformed("a chunk size line too long"));
                    }
                    break;
                };
                let line = std::str::from_utf8(&self.pending[at..at + eol])
                    .map_err(|_| RestError::Malformed("a chunk size not text"))?;
                let size = line.split(';').next().unwrap_or_default().trim();
                let size = usize::from_str_radix(size, 16)
                    .map_err(|_| RestError::Malformed("a bad chunk size"))?;
                at += eol + 2;
                if size == 0 {
                    self.trailer = true;
                } else {
                    self.left = size;
                }
            }
        }
        self.pending.drain(..at);
        Ok(self.done)
    }
}

/// A 64-bit integer as the gateway writes it: a JSON string of decimal
/// digits (protojson's int64 mapping). A JSON number is accepted too (the
/// mapping allows it on input); anything else is `None`.
pub(super) fn int64(v: &Value) -> Option<i64> {
    match v {
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.as_i64(),
        _ => None,
    }
}

/// A counter as `UpdateCounter` answers it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Counter {
    /// Its name.
    pub name: String,
    /// Its count.
    pub count: i64,
    /// Its capacity.
    pub capacity: i64,
}

impl Counter {
    /// Parses an `UpdateCounter`/`GetCounter` answer's body. A missing
    /// `count` or `capacity` is 0 (proto3 leaves zeros out).
    pub(super) fn parse(body: &[u8]) -> Result<Self, RestError> {
        let v: Value = serde_json::from_slice(body).map_err(|e| RestError::Json(e.to_string()))?;
        let field = |k: &str| match &v[k] {
            Value::Null => Ok(0),
            x => int64(x).ok_or_else(|| RestError::Json(format!("{k} is not an int64: {x}"))),
        };
        Ok(Self {
            name: v["name"].as_str().unwrap_or_default().to_owned(),
            count: field("count")?,
            capacity: field("capacity")?,
        })
    }
}

/// What the relay reads of its GameServer on the watch stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct GameServerView {
    /// `Scheduled`, `Ready`, `Allocated`, `Shutdown`, ...
    pub state: String,
    /// The labels, keys in full.
    pub labels: BTreeMap<String, String>,
    /// The annotations, keys in full.
    pub annotations: BTreeMap<String, String>,
}

impl GameServerView {
    /// Parses one line of `GET /watch/gameserver`: `{"result": GameServer}`
    /// (or `{"error": {..}}`, returned as an error). Field names are the
    /// proto names the gateway writes (`object_meta`); the JSON names
    /// (`objectMeta`) are read too.
    pub(super) fn parse_watch_line(line: &[u8]) -> Result<Self, RestError> {
        let v: Value = serde_json::from_slice(line).map_err(|e| RestError::Json(e.to_string()))?;
        if !v["error"].is_null() {
            let msg = v["error"]["message"].as_str().unwrap_or("?");
            return Err(RestError::Json(format!("the stream reported: {msg}")));
        }
        let gs = &v["result"];
        if !gs.is_object() {
            return Err(RestError::Json("no result object".to_owned()));
        }
        Ok(Self::from_game_server(gs))
    }

    /// The view of a `GameServer` object (as `GET /gameserver` answers).
    pub(super) fn from_game_server(gs: &Value) -> Self {
        let either = |o: &Value, a: &str, b: &str| {
            if o[a].is_null() {
                o[b].clone()
            } else {
                o[a].clone()
            }
        };
        let meta = either(gs, "object_meta", "objectMeta");
        let map = |m: &Value| -> BTreeMap<String, String> {
            m.as_object()
                .map(|o| {
                    o.iter()
                        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                        .collect()
                })
                .unwrap_or_default()
        };
        Self {
            state: gs["status"]["state"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            labels: map(&meta["labels"]),
            annotations: map(&meta["annotations"]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(call: &SdkCall) -> String {
        let mut out = Vec::new();
        call.request().encode(9358, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn lifecycle_calls_post_an_empty_object() {
        for (call, path) in [
            (SdkCall::Ready, "/ready"),
            (SdkCall::Health, "/health"),
            (SdkCall::Shutdown, "/shutdown"),
        ] {
            assert_eq!(
                encoded(&call),
                format!(
                    "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:9358\r\nConnection: close\r\nAccept: application/json\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}"
                )
            );
        }
    }

    #[test]
    fn counters_and_lists_use_the_beta_routes_with_int64_as_strings() {
        let r = SdkCall::CounterCount {
            name: "matches".into(),
            count: 3,
        }
        .request();
        assert_eq!(
            (r.method, r.path.as_str()),
            ("PATCH", "/v1beta1/counters/matches")
        );
        assert_eq!(r.body, r#"{"count":"3"}"#);
        let r = SdkCall::CounterCapacity {
            name: "matches".into(),
            capacity: i64::MAX,
        }
        .request();
        assert_eq!(r.body, format!(r#"{{"capacity":"{}"}}"#, i64::MAX));
        let r = SdkCall::ListCapacity {
            name: "players".into(),
            capacity: 1000,
        }
        .request();
        assert_eq!(
            (r.method, r.path.as_str()),
            ("PATCH", "/v1beta1/lists/players")
        );
        assert_eq!(r.body, r#"{"capacity":"1000"}"#);
        let r = SdkCall::ListAdd {
            name: "players".into(),
            value: "m \"1\"/0".into(),
        }
        .request();
        assert_eq!(
            (r.method, r.path.as_str()),
            ("POST", "/v1beta1/lists/players:addValue")
        );
        assert_eq!(r.body, r#"{"value":"m \"1\"/0"}"#);
        let r = SdkCall::ListRemove {
            name: "a b/c".into(),
            value: "x".into(),
        }
        .request();
        assert_eq!(r.path, "/v1beta1/lists/a%20b%2Fc:removeValue");
        let r = SdkCall::SetLabel {
            key: "relay-version".into(),
            value: "0.1.0".into(),
        }
        .request();
        assert_eq!((r.method, r.path.as_str()), ("PUT", "/metadata/label"));
        assert_eq!(r.body, r#"{"key":"relay-version","value":"0.1.0"}"#);
    }

    #[test]
    fn a_get_has_no_body_headers() {
        let mut out = Vec::new();
        RestRequest::get("/watch/gameserver").encode(1, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "GET /watch/gameserver HTTP/1.1\r\nHost: 127.0.0.1:1\r\nConnection: close\r\nAccept: application/json\r\n\r\n"
        );
    }

    #[test]
    fn int64_fields_are_read_from_strings_and_numbers_only() {
        let v: Value = serde_json::from_str(
            r#"{"a":"9223372036854775807","b":-4,"c":"-9223372036854775808","d":"1e3","e":1.5,"f":null,"g":"99999999999999999999"}"#,
        )
        .unwrap();
        assert_eq!(int64(&v["a"]), Some(i64::MAX));
        assert_eq!(int64(&v["b"]), Some(-4));
        assert_eq!(int64(&v["c"]), Some(i64::MIN));
        for k in ["d", "e", "f", "g"] {
            assert_eq!(int64(&v[k]), None, "{k}");
        }
        let c = Counter::parse(br#"{"name":"matches","count":"2","capacity":"9007199254740993"}"#)
            .unwrap();
        assert_eq!(
            c.capacity, 9_007_199_254_740_993,
            "beyond f64's exact range"
        );
        assert_eq!(c.count, 2);
        assert_eq!(
            Counter::parse(br#"{"name":"matches","capacity":"4"}"#)
                .unwrap()
                .count,
            0,
            "a zero count is left out"
        );
        assert!(Counter::parse(br#"{"count":true}"#).is_err());
    }

    #[test]
    fn answers_parse_with_a_length_chunked_or_until_close() {
        let r = parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}").unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"{}"[..]));
        let r = parse_response(
            b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"mes\r\n12\r\nsage\":\"not found\"}\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!(r.status, 404);
        assert_eq!(r.message(), "not found");
        assert!(!r.is_success());
        let r = parse_response(b"HTTP/1.0 200 OK\r\n\r\nbody").unwrap();
        assert_eq!(r.body, b"body");
        assert_eq!(
            parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n{}"),
            Err(RestError::Truncated)
        );
        assert!(parse_response(b"SSH-2.0\r\n\r\n").is_err());
        assert_eq!(
            parse_response(b"HTTP/1.1 200 OK\r\n"),
            Err(RestError::Truncated)
        );
    }

    #[test]
    fn the_dechunker_takes_a_stream_byte_by_byte() {
        let stream = b"7\r\n{\"a\":1}\r\n2\r\n\n{\r\n3\r\n}\n\n\r\n0\r\n\r\n";
        let mut d = Dechunker::default();
        let mut out = Vec::new();
        let mut done = false;
        for b in stream {
            assert!(!done);
            done = d.push(&[*b], &mut out).unwrap();
        }
        assert!(done);
        assert_eq!(out, b"{\"a\":1}\n{}\n\n");
        let mut d = Dechunker::default();
        assert!(d.push(b"zz\r\n", &mut Vec::new()).is_err());
    }

    #[test]
    fn watch_lines_give_state_labels_and_annotations() {
        let line = br#"{"result":{"object_meta":{"name":"relay-x","generation":"3","labels":{"agones.dev/sdk-relay-version":"0.1.0"},"annotations":{"lockstep.dev/token-key-id":"k1"}},"status":{"state":"Allocated","counters":{"matches":{"count":"1","capacity":"8"}}}}}"#;
        let v = GameServerView::parse_watch_line(line).unwrap();
        assert_eq!(v.state, "Allocated");
        assert_eq!(v.labels["agones.dev/sdk-relay-version"], "0.1.0");
        assert_eq!(v.annotations["lockstep.dev/token-key-id"], "k1");
        let camel =
            br#"{"result":{"objectMeta":{"annotations":{"a":"b"}},"status":{"state":"Ready"}}}"#;
        assert_eq!(
            GameServerView::parse_watch_line(camel).unwrap().annotations["a"],
            "b"
        );
        assert!(GameServerView::parse_watch_line(br#"{"error":{"message":"gone"}}"#).is_err());
        assert!(GameServerView::parse_watch_line(b"not json").is_err());
    }
}
