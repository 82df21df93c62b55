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
use crate::web::{
    VIEWER_PAGE, check_request_origin, find_viewer_wasm, missing_wasm_hint, read_request, respond,
};
use std::io::{Read, Seek, SeekFrom};
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
    /// What `/recording` answers, read once at start: the file as it was,
    /// or a copy with keyframes for a file that has none (a relay's
    /// recording), so the page seeks anywhere at once. Reading the file at
    /// every request let any page that can reach the server make this
    /// process read the whole file from disk as often as it asks, and
    /// served whatever the path named by then (another file swapped in).
    recording_bytes: Vec<u8>,
    wasm: Vec<u8>,
}

/// A copy of `file` with a keyframe every [`SERVED_KEYFRAME_EVERY`] turns
/// when it has no keyframe index and this tool knows its game; `None`
/// otherwise (the file is served as it is). Native re-simulation is several
/// times faster than the page's, and a seek then restores a keyframe
/// instead of simulating from turn 0. The copy is written to a file of
/// its own in `tmp_dir` ([`exclusive_temp`]) and read back through the
/// same handle.
fn keyframed_copy(games: &Games, file: &Path, tmp_dir: &Path) -> Option<Vec<u8>> {
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
    let (tmp, out) = exclusive_temp(tmp_dir).ok()?;
    let copy = out.try_clone();
    let report = game.reindex(reader, out, SERVED_KEYFRAME_EVERY);
    let bytes = copy.ok().and_then(|mut f| {
        f.seek(SeekFrom::Start(0)).ok()?;
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes).ok()?;
        Some(bytes)
    });
    let _ = std::fs::remove_file(&tmp);
    report.ok()?;
    bytes
}

/// Creates a new file in `dir` that no one else can have prepared: a name
/// with this process's id and a tag hashed from the clock (not guessable
/// in advance, though not secret: the exclusive open is the guarantee),
/// opened with `create_new`
/// (`O_CREAT | O_EXCL`: an existing file or a planted symlink fails the
/// open instead of being followed and truncated) and, on Unix, readable by
/// this user only. The former name (`replay-view-PID.lsr`) was predictable
/// and opened with `File::create`, so anyone on the machine could point it
/// at a file of the user's to have it overwritten.
fn exclusive_temp(dir: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    let mut last = None;
    for attempt in 0u32..16 {
        let random = blake3::hash(
            format!(
                "{:?}{attempt}{:p}",
                std::time::SystemTime::now(),
                &attempt as *const u32
            )
            .as_bytes(),
        );
        let mut tag = [0u8; 8];
        tag.copy_from_slice(&random.as_bytes()[..8]);
        let name = format!(
            "replay-view-{}-{:016x}.lsr",
            std::process::id(),
            u64::from_le_bytes(tag)
        );
        let path = dir.join(name);
        let mut options = std::fs::OpenOptions::new();
        options.read(true).write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        match options.open(&path) {
            Ok(f) => return Ok((path, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no free temporary name")))
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
    let indexed = keyframed_copy(games, file, &std::env::temp_dir());
    if indexed.is_some() {
        outln!(
            c,
            "replay view: serving a copy with a keyframe every {SERVED_KEYFRAME_EVERY} turns for seeking (made in {} ms; the file is untouched)",
            started.elapsed().as_millis()
        );
    }
    let recording_bytes = match indexed {
        Some(bytes) => bytes,
        None => std::fs::read(file).map_err(|e| file_error(file, e))?,
    };
    outln!(
        c,
        "replay view: {} at http://{addr}/ (Ctrl-C to stop; restart it to see a recording that grew)",
        file.display()
    );
    c.flush_out();
    let served = Arc::new(Served {
        recording: file.to_owned(),
        recording_bytes,
        wasm,
    });
    serve(&listener, &served, |e| {
        errln!(c, "replay view: accept failed: {e}");
    });
    Ok(true)
}

/// Accepts on `listener` for ever, each connection on a thread of its own
/// (at most [`MAX_CONNECTIONS`]); `on_error` hears of failed accepts.
fn serve(listener: &TcpListener, served: &Arc<Served>, mut on_error: impl FnMut(std::io::Error)) {
    let busy = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                on_error(e);
                continue;
            }
        };
        if busy.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            busy.fetch_sub(1, Ordering::SeqCst);
            continue;
        }
        let (served, busy) = (Arc::clone(served), Arc::clone(&busy));
        std::thread::spawn(move || {
            let _ = serve_one(stream, &served);
            busy.fetch_sub(1, Ordering::SeqCst);
        });
    }
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
    // Every route: the recording is the user's, not any page's the
    // browser happens to show (DNS rebinding, another site's script).
    if let Err(refused) = check_request_origin(&request, &[]) {
        return respond(&mut stream, refused.status(), "text/plain", refused.body());
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
        "/recording" => respond(
            &mut stream,
            "200 OK",
            "application/octet-stream",
            &served.recording_bytes,
        ),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A directory of this test's own under the target's temporary dir.
    fn test_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("replay-view-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    const RELAY_RECORDING: &[u8] = include_bytes!("../../tests/data/relay_economy_4p.replay");

    fn games() -> Games {
        Games::new().with::<sim::game::World>()
    }

    /// A symlink planted at the temporary file's former, predictable name
    /// (`replay-view-PID.lsr`) pointing at a file of the user's: the copy
    /// is still made, and the user's file is untouched. Before,
    /// `File::create` followed the link and overwrote it with the copy.
    #[cfg(unix)]
    #[test]
    fn the_keyframed_copy_never_follows_a_planted_temporary_path() {
        let dir = test_dir("planted");
        let file = dir.join("relay.replay");
        std::fs::write(&file, RELAY_RECORDING).unwrap();
        let victim = dir.join("victim.txt");
        std::fs::write(&victim, b"precious").unwrap();
        let planted = dir.join(format!("replay-view-{}.lsr", std::process::id()));
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        let copy = keyframed_copy(&games(), &file, &dir).expect("a copy with keyframes");
        assert!(copy.len() > RELAY_RECORDING.len(), "keyframes were added");
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(left.len(), 3, "the copy's own file is removed: {left:?}");
        let (p1, _f1) = exclusive_temp(&dir).unwrap();
        let (p2, _f2) = exclusive_temp(&dir).unwrap();
        assert_ne!(p1, p2);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Serves `file` as `replay view` does, on a loopback port.
    fn start(file: &Path) -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let served = Arc::new(Served {
            recording: file.to_owned(),
            recording_bytes: std::fs::read(file).unwrap(),
            wasm: b"\0asm".to_vec(),
        });
        // The server runs until the test binary exits, as `replay view`
        // runs until Ctrl-C.
        std::thread::spawn(move || serve(&listener, &served, |_| {}));
        addr
    }

    /// Sends `head` and returns the whole answer (bounded by a timeout).
    fn ask(addr: std::net::SocketAddr, head: &str) -> Vec<u8> {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(head.as_bytes()).unwrap();
        let mut r = Vec::new();
        let _ = s.read_to_end(&mut r);
        r
    }

    fn status(answer: &[u8]) -> String {
        String::from_utf8_lossy(answer)
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned()
    }

    /// `/recording` answers what was read at start: the file replaced on
    /// disk afterwards (or grown, or removed) is not read again. Before,
    /// every request read the path anew.
    #[test]
    fn the_recording_is_read_once_at_start() {
        let dir = test_dir("once");
        let file = dir.join("a.replay");
        std::fs::write(&file, b"first bytes").unwrap();
        let addr = start(&file);
        std::fs::write(&file, b"swapped in later").unwrap();
        let r = ask(addr, "GET /recording HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
        assert!(
            r.ends_with(b"\r\n\r\nfirst bytes"),
            "{}",
            String::from_utf8_lossy(&r)
        );
        std::fs::remove_file(&file).unwrap();
        let r = ask(addr, "GET /recording HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
        assert!(r.ends_with(b"first bytes"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The Origin and Host matrix on `replay view`'s routes, over a real
    /// socket: same origin, no origin → 200; another site's origin → 403;
    /// a rebinding host → 421. Before, every case was 200.
    #[test]
    fn replay_view_checks_origin_and_host() {
        let dir = test_dir("origin");
        let file = dir.join("a.replay");
        std::fs::write(&file, b"bytes").unwrap();
        let addr = start(&file);
        let host = addr.to_string();
        let cases = [
            (
                host.clone(),
                Some(format!("http://{host}")),
                "HTTP/1.1 200 OK",
            ),
            (
                host.clone(),
                Some("http://evil.example".to_owned()),
                "HTTP/1.1 403 Forbidden",
            ),
            (host.clone(), None, "HTTP/1.1 200 OK"),
            (
                format!("evil.example:{}", addr.port()),
                Some(format!("http://evil.example:{}", addr.port())),
                "HTTP/1.1 421 Misdirected Request",
            ),
        ];
        for path in ["/", "/recording", "/viewer.wasm", "/name"] {
            for (host, origin, want) in &cases {
                let origin = origin
                    .as_ref()
                    .map(|o| format!("Origin: {o}\r\n"))
                    .unwrap_or_default();
                let r = ask(
                    addr,
                    &format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{origin}\r\n"),
                );
                assert_eq!(status(&r), *want, "{path} Host {host} {origin}");
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
