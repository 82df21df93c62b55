//! Watching live: `relay serve --live ADDR` serves the replay viewer's
//! page, a list of the running matches, and for each a live view fed over
//! a WebSocket. This module answers the routes ([`Live`]); the listener it
//! is mounted on is [`crate::http`]'s ([`crate::http::spawn_live`]), which
//! sits above it.
//!
//! Each browser watching is an ordinary spectator of the relay: the HTTP
//! side opens a transport connection of its own to the relay's UDP socket
//! over loopback (`ToRelay::Spectate`, with a spectator token it seals
//! itself in token mode), so it counts towards `--max-spectators`, watches
//! at the spectator delay, and is bounded like any client. What it receives
//! (the match's start, the agreed snapshot when it joins late, the turns)
//! it writes with [`replays::Writer`] into the bytes of a recording, sent to
//! the page as WebSocket binary messages; the page appends them to what it
//! plays. The page sends back the state hash it computes after every turn,
//! which the bridge reports as the spectator's hash: the relay checks it
//! against the agreed one like any spectator's.
//!
//! Bounds: at most [`LiveConfig::max_viewers`] browsers at once (each is a
//! connection from this host, so keep it within the relay's per-host
//! limit); each browser's unsent bytes are capped at [`SEND_QUEUE_BYTES`]
//! (a browser that reads slower is dropped: it never slows the match);
//! its frames at [`MAX_CLIENT_FRAME`] bytes; the request head as every
//! other route. Closing the tab closes the socket, and the bridge leaves
//! the match at once.

mod bridge;
mod websocket;

use crate::event::{MatchId, MatchInfo, RouterEvent};
use lockstep::low_level::transport::TransportConfig;
use lockstep::token::{ConnectToken, TokenClaims, TokenKey, TokenKind};
use replays::web::{Request, VIEWER_PAGE, check_request_origin, respond};
use serde_json::json;
use sim::Turn;
use std::collections::BTreeMap;
use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Default of [`LiveConfig::max_viewers`]: 4 browsers, well within the
/// relay's default of 16 connections per host (the bridge connects from
/// loopback, like players on the same machine).
pub const DEFAULT_MAX_VIEWERS: usize = 4;

/// Most bytes waiting to go to one browser. A late joiner's first message
/// holds the agreed snapshot (tens of KiB for the shipped games); a browser
/// further behind than this is dropped.
pub const SEND_QUEUE_BYTES: usize = 8 * 1024 * 1024;

/// Largest frame a browser may send (its hash reports: 36 bytes a turn).
pub const MAX_CLIENT_FRAME: usize = 64 * 1024;

/// What the live view needs to know beyond the matches.
#[derive(Clone)]
pub struct LiveConfig {
    /// The relay's UDP address as seen from this machine (loopback when it
    /// listens on all addresses): where each bridge connects.
    pub relay: SocketAddr,
    /// The viewer's WebAssembly module; `None` when it is not built (the
    /// page still lists the matches and says how to build it).
    pub wasm: Option<Vec<u8>>,
    /// Most browsers watching at once (default [`DEFAULT_MAX_VIEWERS`]).
    pub max_viewers: usize,
    /// Token mode: the relay's token key. `/matches.json` and `/live` then
    /// answer only a viewer who brings a spectator token this key sealed
    /// (`relay token --spectator`, in `?token=`); the bridge connects with
    /// that very token, never one it seals itself.
    pub token_key: Option<TokenKey>,
    /// The transport settings the relay's clients use (its protocol id).
    pub transport: TransportConfig,
    /// Host names the live view is published under (a reverse proxy's, a
    /// DNS name's), besides IP addresses and `localhost`: any other `Host`
    /// is refused (DNS rebinding; [`replays::web::check_request_origin`]).
    pub allowed_hosts: Vec<String>,
    /// The relay's spectator delay: a browser that reads nothing is cut
    /// after [`stall_limit`] of it.
    pub spectator_delay: std::time::Duration,
}

/// How long a browser may leave the live feed unread before it is cut:
/// the larger of 10 s and twice the spectator delay (a viewer that stopped
/// reading has lost its place in the match by then; before, it held its
/// place until 8 MiB had piled up, hours at a spectator's rate).
#[must_use]
pub fn stall_limit(spectator_delay: std::time::Duration) -> std::time::Duration {
    std::time::Duration::from_secs(10).max(spectator_delay.saturating_mul(2))
}

impl std::fmt::Debug for LiveConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveConfig")
            .field("relay", &self.relay)
            .field("wasm", &self.wasm.as_ref().map(Vec::len))
            .field("max_viewers", &self.max_viewers)
            .field("tokens", &self.token_key.is_some())
            .field("allowed_hosts", &self.allowed_hosts)
            .field("spectator_delay", &self.spectator_delay)
            .finish_non_exhaustive()
    }
}

/// A running match as the list shows it.
#[derive(Clone, Debug)]
struct Listed {
    info: MatchInfo,
    /// The last closed turn.
    turn: Option<Turn>,
    started_unix_ms: u64,
}

/// The live view's state, shared by the event loops (which tell it about
/// matches through [`Live::handle_event`]) and the HTTP threads. Build it
/// with [`Live::new`] and pass it to [`crate::http::spawn_live`].
#[derive(Debug)]
pub struct Live {
    config: LiveConfig,
    matches: Mutex<BTreeMap<MatchId, Listed>>,
    viewers: Arc<AtomicUsize>,
}

/// A browser's place among [`LiveConfig::max_viewers`], given back when dropped.
#[derive(Debug)]
struct ViewerSlot(Arc<AtomicUsize>);

impl ViewerSlot {
    /// Takes a place if fewer than `max` are taken.
    fn take(count: &Arc<AtomicUsize>, max: usize) -> Option<Self> {
        count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| Self(Arc::clone(count)))
    }
}

impl Drop for ViewerSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A viewer's credential (token mode): the spectator token it brought.
struct Viewer {
    claims: TokenClaims,
    token: ConnectToken,
}

/// Why a request for the match list or a feed was refused (token mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refusal {
    /// No `?token=`.
    NoCredential,
    /// A token that does not open under the key, is not a spectator's, is
    /// of another protocol or expired.
    BadCredential,
}

impl Refusal {
    fn respond(self, stream: &mut TcpStream) -> io::Result<()> {
        let (status, body): (&str, &[u8]) = match self {
            Self::NoCredential => (
                "401 Unauthorized",
                b"token mode: a spectator token is needed (relay token --spectator; open /watch?token=...)\n",
            ),
            Self::BadCredential => (
                "403 Forbidden",
                b"token mode: this is not a valid spectator token of this relay\n",
            ),
        };
        respond(stream, status, "text/plain", body)
    }
}

/// Whether a spectator token's `claims` admit watching the match `info`:
/// its name, and its instance when the match is bound to one (a token of an
/// earlier match of that name sees nothing of this one).
fn watches(claims: &TokenClaims, info: &MatchInfo) -> bool {
    claims.admits_spectator(&info.match_name).is_ok()
        && info.token.is_none_or(|t| t.instance == claims.instance)
}

/// Parses a query value as a connect token's hex.
trait HexToken {
    fn parse_hex_token(&self) -> Result<ConnectToken, Refusal>;
}

impl HexToken for str {
    fn parse_hex_token(&self) -> Result<ConnectToken, Refusal> {
        ConnectToken::from_hex(self).map_err(|_| Refusal::BadCredential)
    }
}

impl Live {
    /// The live view for `config`, with no match listed yet.
    #[must_use]
    pub fn new(config: LiveConfig) -> Self {
        Self {
            config,
            matches: Mutex::new(BTreeMap::new()),
            viewers: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Keeps the list of running matches: call it with every router event
    /// (`relay::serve::RelayNote::Event`) and the wall-clock time. A turn's
    /// update is skipped when an HTTP thread holds the list (the next turn
    /// brings it), so an event loop never waits here for more than a start
    /// or an end.
    pub fn handle_event(&self, ev: &RouterEvent, unix_ms: u64) {
        match ev {
            RouterEvent::MatchStarted { id, info } => {
                let listed = Listed {
                    info: info.clone(),
                    turn: None,
                    started_unix_ms: unix_ms,
                };
                if let Ok(mut m) = self.matches.lock() {
                    m.insert(*id, listed);
                }
            }
            RouterEvent::TurnClosed { id, turn, .. } => {
                if let Ok(mut m) = self.matches.try_lock()
                    && let Some(l) = m.get_mut(id)
                {
                    l.turn = Some(*turn);
                }
            }
            RouterEvent::MatchEnded { id, .. } => {
                if let Ok(mut m) = self.matches.lock() {
                    m.remove(id);
                }
            }
            _ => {}
        }
    }

    /// Browsers watching now.
    #[must_use]
    pub fn viewers(&self) -> usize {
        self.viewers.load(Ordering::Acquire)
    }

    fn listed(&self, id: MatchId) -> Option<Listed> {
        self.matches.lock().ok()?.get(&id).cloned()
    }

    /// The running matches as JSON (what `/matches.json` answers):
    /// `{"matches": [{id, name, game, players, turn, age_s}], viewers,
    /// max_viewers, wasm}`.
    #[must_use]
    pub fn matches_json(&self, now_unix_ms: u64) -> serde_json::Value {
        self.matches_json_for(now_unix_ms, None)
    }

    /// [`Self::matches_json`] with only the match `only` admits when given
    /// (a spectator token's match, in token mode).
    fn matches_json_for(&self, now_unix_ms: u64, only: Option<&TokenClaims>) -> serde_json::Value {
        // Copied out first: the event loops wait on this lock at a start or an end.
        let list: Vec<(MatchId, Listed)> = self
            .matches
            .lock()
            .map(|m| {
                m.iter()
                    .filter(|(_, l)| only.is_none_or(|c| watches(c, &l.info)))
                    .map(|(id, l)| (*id, l.clone()))
                    .collect()
            })
            .unwrap_or_default();
        json!({
            "matches": list.iter().map(|(id, l)| json!({
                "id": id.0,
                "name": l.info.match_name,
                "game": l.info.game_id,
                "players": l.info.players.iter().map(|p| p.name.clone()).collect::<Vec<_>>(),
                "turn": l.turn.map(|t| t.0),
                "age_s": now_unix_ms.saturating_sub(l.started_unix_ms) / 1000,
            })).collect::<Vec<_>>(),
            "viewers": self.viewers(),
            "max_viewers": self.config.max_viewers,
            "wasm": self.config.wasm.is_some(),
        })
    }

    /// The viewer's credential in token mode: the spectator token in
    /// `?token=` (hex, as `relay token --spectator` prints it), opened with
    /// the relay's key, of this relay's protocol, not expired. `Ok(None)`
    /// in open mode (anyone who reaches the address may watch).
    fn credential(&self, request: &Request) -> Result<Option<Viewer>, Refusal> {
        let Some(key) = &self.config.token_key else {
            return Ok(None);
        };
        let token = request
            .query("token")
            .ok_or(Refusal::NoCredential)?
            .parse_hex_token()?;
        let (claims, _) = token
            .private
            .open(key)
            .map_err(|_| Refusal::BadCredential)?;
        let now = replays::format::unix_now_ms() / 1000;
        if claims.kind != TokenKind::Spectator
            || claims.protocol_id != self.config.transport.protocol_id
            || claims.is_expired(now)
        {
            return Err(Refusal::BadCredential);
        }
        Ok(Some(Viewer { claims, token }))
    }

    /// Answers `request` if it is one of the live view's routes; `Ok(false)`
    /// for any other path (the caller answers it). Every route first checks
    /// `Host` and `Origin` ([`replays::web::check_request_origin`]); in
    /// token mode `/matches.json` and `/live` also need a credential
    /// ([`LiveConfig::token_key`]). The page and its module are public:
    /// they hold nothing about any match.
    pub(crate) fn answer(
        self: &Arc<Self>,
        stream: &mut TcpStream,
        request: &Request,
    ) -> io::Result<bool> {
        if !matches!(
            request.path(),
            "/" | "/watch" | "/viewer.wasm" | "/matches.json" | "/live"
        ) {
            return Ok(false);
        }
        if let Err(refused) = check_request_origin(request, &self.config.allowed_hosts) {
            respond(stream, refused.status(), "text/plain", refused.body())?;
            return Ok(true);
        }
        match request.path() {
            "/" => {
                stream.write_all(
                    b"HTTP/1.1 302 Found\r\nLocation: /watch\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                )?;
            }
            "/watch" => respond(
                stream,
                "200 OK",
                "text/html; charset=utf-8",
                VIEWER_PAGE.as_bytes(),
            )?,
            "/viewer.wasm" => match &self.config.wasm {
                Some(wasm) => respond(stream, "200 OK", "application/wasm", wasm)?,
                None => respond(
                    stream,
                    "404 Not Found",
                    "text/plain",
                    replays::web::missing_wasm_hint("relay serve --viewer-wasm").as_bytes(),
                )?,
            },
            "/matches.json" => match self.credential(request) {
                Ok(viewer) => {
                    let only = viewer.as_ref().map(|v| &v.claims);
                    let body = self
                        .matches_json_for(replays::format::unix_now_ms(), only)
                        .to_string();
                    respond(stream, "200 OK", "application/json", body.as_bytes())?;
                }
                Err(r) => r.respond(stream)?,
            },
            _ => self.upgrade(stream, request)?,
        }
        Ok(true)
    }

    /// Turns the request into a WebSocket fed by a bridge on a thread of
    /// its own, or refuses it (no such match, every viewer place taken, not
    /// a WebSocket request).
    fn upgrade(self: &Arc<Self>, stream: &mut TcpStream, request: &Request) -> io::Result<()> {
        let key = request.header("sec-websocket-key");
        let upgrade = request
            .header("upgrade")
            .is_some_and(|u| u.eq_ignore_ascii_case("websocket"));
        let (Some(key), true) = (key, upgrade) else {
            return respond(
                stream,
                "426 Upgrade Required",
                "text/plain",
                b"a WebSocket\n",
            );
        };
        let listed = request
            .query("match")
            .and_then(|m| m.parse().ok())
            .and_then(|id| self.listed(MatchId(id)));
        let viewer = match self.credential(request) {
            Ok(v) => v,
            Err(r) => return r.respond(stream),
        };
        // A token for another match learns nothing of this one, not even
        // whether it runs: the same 404 as no match.
        let listed = listed.filter(|l| viewer.as_ref().is_none_or(|v| watches(&v.claims, &l.info)));
        let Some(listed) = listed else {
            return respond(
                stream,
                "404 Not Found",
                "text/plain",
                b"no such running match\n",
            );
        };
        let Some(slot) = ViewerSlot::take(&self.viewers, self.config.max_viewers) else {
            let body = format!("{} live viewers already\n", self.config.max_viewers);
            return respond(
                stream,
                "503 Service Unavailable",
                "text/plain",
                body.as_bytes(),
            );
        };
        write!(
            stream,
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n\r\n",
            websocket::accept_key(key)
        )?;
        let ws = stream.try_clone()?;
        let live = Arc::clone(self);
        std::thread::Builder::new()
            .name("relay-live".into())
            .spawn(move || {
                let _slot = slot;
                // A failed bridge concerns only its browser.
                let _ = bridge::run(ws, &listed, &live.config, viewer.map(|v| v.token));
            })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(max_viewers: usize) -> Live {
        Live::new(LiveConfig {
            relay: "127.0.0.1:7777".parse().unwrap(),
            wasm: None,
            max_viewers,
            token_key: None,
            transport: TransportConfig::default(),
            allowed_hosts: Vec::new(),
            spectator_delay: std::time::Duration::from_secs(3),
        })
    }

    #[test]
    fn the_list_follows_starts_turns_and_ends() {
        let l = live(2);
        l.handle_event(
            &RouterEvent::MatchStarted {
                id: MatchId(3),
                info: MatchInfo::two_players("duel", "lockstep-rts"),
            },
            1_000,
        );
        l.handle_event(
            &RouterEvent::TurnClosed {
                id: MatchId(3),
                turn: Turn(41),
                inputs: Vec::new(),
                missing: Vec::new(),
            },
            2_000,
        );
        let j = l.matches_json(13_500);
        let m = &j["matches"][0];
        assert_eq!(m["id"], 3);
        assert_eq!(m["name"], "duel");
        assert_eq!(m["game"], "lockstep-rts");
        assert_eq!(m["players"], json!(["p0", "p1"]));
        assert_eq!(m["turn"], 41);
        assert_eq!(m["age_s"], 12);
        assert_eq!(j["wasm"], false);
        l.handle_event(
            &RouterEvent::MatchEnded {
                id: MatchId(3),
                turn: Some(Turn(41)),
                reason: lockstep::low_level::proto::EndReason::Completed,
            },
            3_000,
        );
        assert_eq!(l.matches_json(0)["matches"], json!([]));
    }

    #[test]
    fn viewer_places_are_bounded_and_given_back_when_dropped() {
        let l = live(2);
        let a = ViewerSlot::take(&l.viewers, 2);
        let b = ViewerSlot::take(&l.viewers, 2);
        assert!(a.is_some() && b.is_some());
        assert!(
            ViewerSlot::take(&l.viewers, 2).is_none(),
            "a third is refused"
        );
        assert_eq!(l.viewers(), 2);
        drop(a);
        assert_eq!(l.viewers(), 1);
        assert!(ViewerSlot::take(&l.viewers, 2).is_some());
        assert_eq!(l.viewers(), 1, "the new place was dropped at once");
        drop(b);
        assert_eq!(l.viewers(), 0);
    }
}
