//! What every server of the replay viewer shares (`replay view`, and
//! `relay serve --http` for live matches): the page, where the viewer's
//! WebAssembly module is found, and a minimal HTTP/1.1 request reader and
//! answer writer on `std::net`, bounded in size and time.
//!
//! Use it to serve the viewer from your own tool; the page and module are
//! the same files either way.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The viewer page: markup, style and script in one file
/// (`replays/web/index.html`). Served as it is at `/` by `replay view` and
/// at `/watch` by the relay, which it tells apart by its path.
pub const VIEWER_PAGE: &str = include_str!("../web/index.html");

/// The command that builds the viewer's module, for error messages and docs.
pub const BUILD_VIEWER_WASM: &str =
    "cargo build --profile wasm -p lockstep-viewer --target wasm32-unknown-unknown";

/// Where [`BUILD_VIEWER_WASM`] leaves the module, relative to the directory
/// of a binary of the same workspace (`target/<profile>/`).
const WASM_NEAR_EXE: [&str; 2] = [
    "../wasm32-unknown-unknown/wasm/viewer.wasm",
    "../wasm32-unknown-unknown/release/viewer.wasm",
];

/// Finds the viewer's WebAssembly module: `given` (a `--wasm` flag), else
/// the `LOCKSTEP_VIEWER_WASM` environment variable, else next to the
/// running binary's target directory. `None` when none of them names a
/// file; the caller says how to build it ([`missing_wasm_hint`]).
#[must_use]
pub fn find_viewer_wasm(given: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = given {
        return Some(p.to_owned());
    }
    if let Some(p) = std::env::var_os("LOCKSTEP_VIEWER_WASM") {
        return Some(PathBuf::from(p));
    }
    let dir = std::env::current_exe().ok()?.parent()?.to_owned();
    WASM_NEAR_EXE
        .iter()
        .map(|rel| dir.join(rel))
        .find(|p| p.is_file())
}

/// The line that tells a person how to get the module (with the name of
/// the flag that points at one).
#[must_use]
pub fn missing_wasm_hint(flag: &str) -> String {
    format!(
        "the viewer's WebAssembly module is not built: run `rustup target add wasm32-unknown-unknown && {BUILD_VIEWER_WASM}` (or pass {flag} PATH)"
    )
}

/// One HTTP request's line and headers (no body: every route is a `GET`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The path with its query, as sent (`/watch?match=3`).
    pub target: String,
    /// Header names (lower case) and values, in order.
    pub headers: Vec<(String, String)>,
}

impl Request {
    /// The target without its query.
    #[must_use]
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }

    /// The value of query parameter `key`, if the target has it.
    #[must_use]
    pub fn query(&self, key: &str) -> Option<&str> {
        let (_, query) = self.target.split_once('?')?;
        query
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v)
    }

    /// The first value of header `name` (case-insensitive).
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Parses a request's line and headers (up to the blank line).
    #[must_use]
    pub fn parse(head: &[u8]) -> Self {
        let text = String::from_utf8_lossy(head);
        let mut lines = text.lines();
        let mut first = lines.next().unwrap_or("").split_whitespace();
        let method = first.next().unwrap_or("").to_owned();
        let target = first.next().unwrap_or("").to_owned();
        let headers = lines
            .take_while(|l| !l.is_empty())
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        Self {
            method,
            target,
            headers,
        }
    }
}

/// Reads a request's line and headers (to the blank line, or the end of
/// the stream) by `deadline` and within `max` bytes, reading no byte past
/// the blank line, so what follows (a WebSocket's first frame) stays in
/// the stream.
///
/// # Errors
/// `InvalidData` over `max` bytes, `TimedOut` past the deadline, and the
/// stream's own errors.
pub fn read_request(stream: &mut TcpStream, deadline: Instant, max: usize) -> io::Result<Request> {
    let mut buf: Vec<u8> = Vec::with_capacity(512);
    let ended = |b: &[u8]| b.ends_with(b"\r\n\r\n") || b.ends_with(b"\n\n");
    let mut byte = [0u8; 1];
    while !ended(&buf) {
        if buf.len() >= max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "request too large",
            ));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "request too slow"));
        }
        stream.set_read_timeout(Some(left))?;
        // Byte by byte: a request head is a few hundred bytes, and nothing
        // after it may be swallowed.
        if stream.read(&mut byte)? == 0 {
            break;
        }
        buf.push(byte[0]);
    }
    Ok(Request::parse(&buf))
}

/// Writes a whole answer (`Connection: close`, not cached) and flushes it.
///
/// # Errors
/// The stream's write errors.
pub fn respond(stream: &mut TcpStream, status: &str, kind: &str, body: &[u8]) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    stream.flush()
}

/// Why [`check_request_origin`] refused a request: the status line and the
/// body to answer with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// `Host` names neither an IP address, `localhost`, nor an allowed name:
    /// a page on another site that rebound its DNS name to this server
    /// (DNS rebinding). Answered `421 Misdirected Request`.
    Host,
    /// `Origin` is another site's (or `null`): browsers do not apply CORS
    /// to WebSockets, nor hide a page's `GET`s from the server, so this is
    /// how a page elsewhere is kept from reading what this server shows.
    /// Answered `403 Forbidden`.
    Origin,
}

impl Refused {
    /// The status line to answer with.
    #[must_use]
    pub const fn status(self) -> &'static str {
        match self {
            Self::Host => "421 Misdirected Request",
            Self::Origin => "403 Forbidden",
        }
    }

    /// A body saying why, for a person.
    #[must_use]
    pub const fn body(self) -> &'static [u8] {
        match self {
            Self::Host => b"this server does not answer for that Host name\n",
            Self::Origin => b"requests from another site's pages are refused\n",
        }
    }
}

/// The host part of a `Host` or origin authority (`name`, `1.2.3.4`,
/// `[::1]`, each with an optional port), in lower case.
fn host_name(authority: &str) -> String {
    let name = if let Some(rest) = authority.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        match authority.rsplit_once(':') {
            // One colon: a port. More: an IPv6 address without brackets.
            Some((h, _)) if !h.contains(':') => h,
            _ => authority,
        }
    };
    name.to_ascii_lowercase()
}

/// Checks a browser's request against DNS rebinding and other sites'
/// pages: `Host`, when present, must name an IP address, `localhost`, or
/// one of `allowed_hosts` (the names the server is published under,
/// compared without port and case); `Origin`, when present, must be this
/// very server (`http://` or `https://` followed by the `Host` value). No
/// `Origin` is accepted: browsers send one with every WebSocket and every
/// cross-site request, so its absence means a same-site navigation or a
/// tool such as `curl`.
///
/// # Errors
/// [`Refused`] says which header failed.
pub fn check_request_origin(request: &Request, allowed_hosts: &[String]) -> Result<(), Refused> {
    let host = request.header("host");
    if let Some(host) = host {
        let name = host_name(host.trim());
        let literal = name.parse::<std::net::IpAddr>().is_ok();
        let allowed = allowed_hosts.iter().any(|a| host_name(a) == name);
        if !(literal || name == "localhost" || allowed) {
            return Err(Refused::Host);
        }
    }
    if let Some(origin) = request.header("origin") {
        let origin = origin.trim();
        let authority = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"));
        let same = match (authority, host) {
            (Some(a), Some(h)) => a.trim_end_matches('/').eq_ignore_ascii_case(h.trim()),
            // An origin with no Host to compare it to cannot be shown same.
            _ => false,
        };
        if !same {
            return Err(Refused::Origin);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The page has a colour for each of the 32 players a match can hold,
    /// all distinct (a player's units, legend entry and plot line), and
    /// picks it by the whole id: with eight colours picked modulo 8,
    /// players 0 and 8 looked alike.
    #[test]
    fn the_page_gives_every_player_of_a_full_match_its_own_colour() {
        let start = VIEWER_PAGE.find("const COLOURS = [").unwrap() + "const COLOURS = [".len();
        let list = &VIEWER_PAGE[start..start + VIEWER_PAGE[start..].find(']').unwrap()];
        let colours: Vec<&str> = list
            .split(',')
            .map(|c| c.trim().trim_matches('"'))
            .collect();
        assert_eq!(colours.len(), usize::from(sim::MAX_PLAYERS));
        assert!(
            colours.iter().all(|c| c.len() == 7
                && c.starts_with('#')
                && c[1..].chars().all(|d| d.is_ascii_hexdigit())),
            "{colours:?}"
        );
        let distinct: std::collections::BTreeSet<String> =
            colours.iter().map(|c| c.to_ascii_lowercase()).collect();
        assert_eq!(distinct.len(), colours.len(), "{colours:?}");
        // Every use picks by the whole id (`MARK_COLOURS` is by marker kind).
        let uses =
            VIEWER_PAGE.matches("COLOURS[").count() - VIEWER_PAGE.matches("MARK_COLOURS[").count();
        assert!(uses >= 3, "{uses}");
        let by_id = VIEWER_PAGE.matches("[owner % COLOURS.length]").count()
            + VIEWER_PAGE.matches("[p.id % COLOURS.length]").count();
        assert_eq!(uses, by_id);
    }

    /// The matrix of the issue, as `replay view` and the relay's live view
    /// see it (both call this): same origin, other origin, no origin and a
    /// rebinding host.
    #[test]
    fn origin_and_host_matrix() {
        let req = |host: Option<&str>, origin: Option<&str>| {
            let mut head = String::from("GET /live?match=1 HTTP/1.1\r\n");
            if let Some(h) = host {
                head += &format!("Host: {h}\r\n");
            }
            if let Some(o) = origin {
                head += &format!("Origin: {o}\r\n");
            }
            head += "\r\n";
            Request::parse(head.as_bytes())
        };
        let none: &[String] = &[];
        let named = &["watch.example.org".to_owned()];
        type Case<'a> = (
            Option<&'a str>,
            Option<&'a str>,
            &'a [String],
            Result<(), Refused>,
        );
        let cases: [Case<'_>; 12] = [
            // same origin
            (
                Some("127.0.0.1:9001"),
                Some("http://127.0.0.1:9001"),
                none,
                Ok(()),
            ),
            (Some("[::1]:9001"), Some("http://[::1]:9001"), none, Ok(())),
            (
                Some("localhost:9001"),
                Some("http://localhost:9001"),
                none,
                Ok(()),
            ),
            (
                Some("Watch.Example.org"),
                Some("https://watch.example.org"),
                named,
                Ok(()),
            ),
            // other origin
            (
                Some("127.0.0.1:9001"),
                Some("http://evil.example"),
                none,
                Err(Refused::Origin),
            ),
            (
                Some("127.0.0.1:9001"),
                Some("http://127.0.0.1:9002"),
                none,
                Err(Refused::Origin),
            ),
            (
                Some("127.0.0.1:9001"),
                Some("null"),
                none,
                Err(Refused::Origin),
            ),
            // no origin
            (Some("127.0.0.1:9001"), None, none, Ok(())),
            (None, None, none, Ok(())),
            // rebinding host: a name this server is not published under
            (
                Some("evil.example:9001"),
                Some("http://evil.example:9001"),
                none,
                Err(Refused::Host),
            ),
            (Some("evil.example:9001"), None, named, Err(Refused::Host)),
            (
                Some("127.0.0.1.evil.example"),
                None,
                none,
                Err(Refused::Host),
            ),
        ];
        for (host, origin, allowed, want) in cases {
            assert_eq!(
                check_request_origin(&req(host, origin), allowed),
                want,
                "Host {host:?} Origin {origin:?}"
            );
        }
        assert_eq!(Refused::Host.status(), "421 Misdirected Request");
        assert_eq!(Refused::Origin.status(), "403 Forbidden");
    }

    #[test]
    fn a_request_head_parses_into_path_query_and_headers() {
        let r = Request::parse(
            b"GET /live?match=12&x=y HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nSec-WebSocket-Key: abc==\r\n\r\n",
        );
        assert_eq!(r.method, "GET");
        assert_eq!(r.path(), "/live");
        assert_eq!(r.query("match"), Some("12"));
        assert_eq!(r.query("x"), Some("y"));
        assert_eq!(r.query("y"), None);
        assert_eq!(r.header("upgrade"), Some("websocket"));
        assert_eq!(r.header("SEC-WEBSOCKET-KEY"), Some("abc=="));
        assert_eq!(Request::parse(b"").path(), "");
    }
}
