//! `replay view`: serves the replay viewer (one web page and the viewer's
//! WebAssembly module, `replays/viewer`) and the recording to a browser on
//! this machine. The page re-simulates the match itself, with the same code
//! `replay verify` runs, so nothing but bytes crosses the socket.
//!
//! A plain HTTP/1.1 server on `std::net`: a handful of GET routes, one
//! short-lived thread per connection (at most [`MAX_CONNECTIONS`]), requests
//! read with a size and time cap, every answer `Connection: close`.

use super::commands::{CliError, file_error, open_game};
use super::console::{Console, errln, outln};
use super::games::Games;
use crate::web::{VIEWER_PAGE, find_viewer_wasm, missing_wasm_hint, read_request, respond};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Connections served at once; more wait in the listen queue.
const MAX_CONNECTIONS: usize = 32;

/// A request line and headers larger than this are refused.
const MAX_REQUEST: usize = 8 * 1024;

/// How long a request's line and headers may take to arrive.
const REQUEST_TIME: Duration = Duration::from_secs(5);

/// Keyframe interval of the copy served for a recording without keyframes.
const SERVED_KEYFRAME_EVERY: u32 = 100;

struct Served {
    recording: PathBuf,
    /// A copy with keyframes, for a file that has none (a relay's recording):
    /// served instead of the file, so the page seeks anywhere at once.
    indexed: Option<Vec<u8>>,
    wasm: Vec<u8>,
}

/// A copy of `file` with a keyframe every [`SERVED_KEYFRAME_EVERY`] turns
/// when it has no keyframe index and this tool knows its game; `None`
/// otherwise (the file is served as it is). Native re-simulation is several
/// times faster than the page's, and a seek then restores a keyframe
/// instead of simulating from turn 0.
fn keyframed_copy(games: &Games, file: &Path) -> Option<Vec<u8>> {
    // One reader: `keyframe_index` puts it back where it was.
    let (mut reader, game) = open_game(games, file).ok()?;
    if reader
        .keyframe_index()
        .ok()
        .flatten()
        .is_some_and(|index| !index.is_empty())
    {
        return None;
    }
    let tmp = std::env::temp_dir().join(format!("replay-view-{}.lsr", std::process::id()));
    let out = std::fs::File::create(&tmp).ok()?;
    let report = game.reindex(reader, out, SERVED_KEYFRAME_EVERY);
    let bytes = std::fs::read(&tmp).ok();
    let _ = std::fs::remove_file(&tmp);
    report.ok()?;
    bytes
}

/// Finds the viewer's WebAssembly module ([`find_viewer_wasm`]).
fn find_wasm(given: Option<&Path>) -> Result<PathBuf, CliError> {
    find_viewer_wasm(given).ok_or_else(|| CliError::Usage(missing_wasm_hint("--wasm")))
}

pub(super) fn view(
    games: &Games,
    c: &mut Console<'_>,
    file: &Path,
    bind: &str,
    wasm: Option<&Path>,
) -> Result<bool, CliError> {
    // The file must be a readable recording before anything is served.
    super::commands::open(file)?;
    let wasm_path = find_wasm(wasm)?;
    let wasm = std::fs::read(&wasm_path).map_err(|e| file_error(&wasm_path, e))?;
    let listener = TcpListener::bind(bind)
        .map_err(|e| CliError::Usage(format!("cannot listen on {bind}: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| CliError::Usage(format!("cannot listen on {bind}: {e}")))?;
    let started = std::time::Instant::now();
    let indexed = keyframed_copy(games, file);
    if indexed.is_some() {
        outln!(
            c,
            "replay view: serving a copy with a keyframe every {SERVED_KEYFRAME_EVERY} turns for seeking (made in {} ms; the file is untouched)",
            started.elapsed().as_millis()
        );
    }
    outln!(
        c,
        "replay view: {} at http://{addr}/ (Ctrl-C to stop)",
        file.display()
    );
    c.flush_out();
    let served = Arc::new(Served {
        recording: file.to_owned(),
        indexed,
        wasm,
    });
    let busy = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                errln!(c, "replay view: accept failed: {e}");
                continue;
            }
        };
        if busy.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            busy.fetch_sub(1, Ordering::SeqCst);
            continue;
        }
        let (served, busy) = (Arc::clone(&served), Arc::clone(&busy));
        std::thread::spawn(move || {
            let _ = serve_one(stream, &served);
            busy.fetch_sub(1, Ordering::SeqCst);
        });
    }
    Ok(true)
}

/// Reads one request (bounded in size and time) and answers it.
fn serve_one(mut stream: TcpStream, served: &Served) -> std::io::Result<()> {
    stream.set_write_timeout(Some(Duration::from_secs(30)))?;
    let request = match read_request(
        &mut stream,
        std::time::Instant::now() + REQUEST_TIME,
        MAX_REQUEST,
    ) {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            return respond(
                &mut stream,
                "431 Request Header Fields Too Large",
                "text/plain",
                b"request too large\n",
            );
        }
        Err(e) => return Err(e),
    };
    if request.method.is_empty() {
        return Ok(());
    }
    if request.method != "GET" {
        return respond(
            &mut stream,
            "405 Method Not Allowed",
            "text/plain",
            b"GET only\n",
        );
    }
    match request.path() {
        "/" | "/index.html" => respond(
            &mut stream,
            "200 OK",
            "text/html; charset=utf-8",
            VIEWER_PAGE.as_bytes(),
        ),
        "/viewer.wasm" => respond(&mut stream, "200 OK", "application/wasm", &served.wasm),
        "/recording" if served.indexed.is_some() => {
            let bytes = served.indexed.as_deref().unwrap_or_default();
            respond(&mut stream, "200 OK", "application/octet-stream", bytes)
        }
        // Read at each request: reloading the page shows a recording that grew.
        "/recording" => match std::fs::read(&served.recording) {
            Ok(bytes) => respond(&mut stream, "200 OK", "application/octet-stream", &bytes),
            Err(e) => respond(
                &mut stream,
                "500 Internal Server Error",
                "text/plain",
                e.to_string().as_bytes(),
            ),
        },
        "/desync.json" => match std::fs::read(served.recording.with_extension("desync.json")) {
            Ok(bytes) => respond(&mut stream, "200 OK", "application/json", &bytes),
            Err(_) => respond(
                &mut stream,
                "404 Not Found",
                "text/plain",
                b"no desync report next to the recording\n",
            ),
        },
        "/name" => {
            let name = served
                .recording
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            respond(
                &mut stream,
                "200 OK",
                "text/plain; charset=utf-8",
                name.as_bytes(),
            )
        }
        _ => respond(&mut stream, "404 Not Found", "text/plain", b"not found\n"),
    }
}
