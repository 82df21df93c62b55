//! Process harness for the end-to-end tests: spawns the real `relay`,
//! `peer`, `netsim` and `replay` binaries on 127.0.0.1, reads their output
//! line by line, and kills every child when its guard drops, so a failing
//! test never leaks processes. Every wait is bounded by a deadline and
//! panics with the child's recent output.

use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Paths of the workspace binaries the end-to-end tests run.
#[derive(Debug)]
pub struct Bins {
    /// `relay` (relay crate).
    pub relay: PathBuf,
    /// `peer` (lockstep crate).
    pub peer: PathBuf,
    /// `netsim` (lockstep crate).
    pub netsim: PathBuf,
    /// `replay` (replays crate).
    pub replay: PathBuf,
}

/// The binaries next to the running test executable (`target/<profile>/`),
/// built once with `cargo build` if any is missing (e.g. after
/// `cargo test -p lockstep-tests`, which builds only this crate's targets) or if
/// `E2E_REBUILD` is set.
///
/// # Panics
/// If the binaries are missing and cannot be built.
pub fn bins() -> &'static Bins {
    static BINS: OnceLock<Bins> = OnceLock::new();
    BINS.get_or_init(|| {
        let exe = std::env::current_exe().expect("test executable path");
        // target/<profile>/deps/<test> -> target/<profile>
        let dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("test executable lives in target/<profile>/deps");
        // `E2E_REBUILD=1`: rebuild even if present (they may be stale when
        // only this crate was tested after editing the others).
        let rebuild = std::env::var_os("E2E_REBUILD").is_some_and(|v| v != "0");
        Bins::in_dir(dir, rebuild).unwrap_or_else(|e| panic!("{e}"))
    })
}

impl Bins {
    /// The binaries in `dir` (a `target/<profile>` directory), built there
    /// with `cargo build` first if any is missing or `rebuild` is set. Use
    /// it where [`bins`] does not fit: a program that is not a test (the
    /// `bench` binary, which lives in `target/<profile>` itself).
    ///
    /// # Errors
    /// If the build fails or a binary is still missing after it.
    pub fn in_dir(dir: &Path, rebuild: bool) -> Result<Self, String> {
        let bins = Self {
            relay: dir.join(exe_name("relay")),
            peer: dir.join(exe_name("peer")),
            netsim: dir.join(exe_name("netsim")),
            replay: dir.join(exe_name("replay")),
        };
        let all = [&bins.relay, &bins.peer, &bins.netsim, &bins.replay];
        if rebuild || !all.iter().all(|p| p.exists()) {
            build_bins(dir)?;
        }
        match all.iter().find(|p| !p.exists()) {
            Some(p) => Err(format!("{} is missing after building", p.display())),
            None => Ok(bins),
        }
    }
}

fn exe_name(name: &str) -> String {
    format!("{name}{}", std::env::consts::EXE_SUFFIX)
}

/// Builds the binaries into `profile_dir` (same target dir, same profile).
fn build_bins(profile_dir: &Path) -> Result<(), String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let target_dir = profile_dir
        .parent()
        .ok_or_else(|| format!("{} has no parent (the target dir)", profile_dir.display()))?;
    let mut cmd = Command::new(cargo);
    cmd.args([
        "build",
        "-p",
        "lockstep-relay",
        "-p",
        "lockstep-net",
        "-p",
        "lockstep-replays",
        "--bins",
    ])
    .arg("--target-dir")
    .arg(target_dir)
    .current_dir(env!("CARGO_MANIFEST_DIR"));
    match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => {}
        Some("release") => {
            cmd.arg("--release");
        }
        Some(other) => {
            cmd.args(["--profile", other]);
        }
    }
    eprintln!("e2e: building the binaries: {cmd:?}");
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run cargo build for the binaries: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("cargo build of the binaries failed: {status}"))
    }
}

/// One line a child printed.
#[derive(Clone, Debug)]
pub struct Line {
    /// True for stderr, false for stdout.
    pub stderr: bool,
    /// The text, without the newline.
    pub text: String,
}

/// A running child process; killed (and reaped) on drop.
#[derive(Debug)]
pub struct Proc {
    name: String,
    child: Child,
    lines: Receiver<Line>,
    /// Everything printed so far, both streams, for diagnostics.
    log: Arc<Mutex<Vec<Line>>>,
    readers: Vec<JoinHandle<()>>,
    status: Option<ExitStatus>,
}

/// How many recent lines a panic message shows.
const TAIL: usize = 40;

impl Proc {
    /// Spawns `program args` with both output streams read line by line.
    ///
    /// # Panics
    /// If the program cannot be started.
    pub fn spawn(name: &str, program: &Path, args: &[String]) -> Self {
        Self::try_spawn(name, program, args).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Proc::spawn`] for callers that report rather than panic (benches).
    ///
    /// # Errors
    /// If the program cannot be started.
    pub fn try_spawn(name: &str, program: &Path, args: &[String]) -> Result<Self, String> {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{name}: cannot start {}: {e}", program.display()))?;
        let (tx, rx) = channel();
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut readers = Vec::new();
        if let Some(out) = child.stdout.take() {
            readers.push(reader(out, false, tx.clone(), Arc::clone(&log)));
        }
        if let Some(err) = child.stderr.take() {
            readers.push(reader(err, true, tx, Arc::clone(&log)));
        }
        Ok(Self {
            name: name.to_owned(),
            child,
            lines: rx,
            log,
            readers,
            status: None,
        })
    }

    /// The name given at spawn.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The child's process id (for `/proc/<pid>/status`).
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the child has not exited (yet); an exit seen here is kept.
    pub fn is_running(&mut self) -> bool {
        if self.status.is_none() {
            self.status = self.child.try_wait().expect("try_wait");
        }
        self.status.is_none()
    }

    /// The last lines printed, for a panic message.
    #[must_use]
    pub fn tail(&self) -> String {
        let log = self.log.lock().expect("log lock");
        let start = log.len().saturating_sub(TAIL);
        log[start..]
            .iter()
            .map(|l| format!("  {}{}\n", if l.stderr { "! " } else { "" }, l.text))
            .collect()
    }

    /// Waits for the next line (either stream) for which `pred` returns
    /// `Some`, up to `within`.
    ///
    /// # Panics
    /// If no such line comes in time or the child closes its output first.
    pub fn wait_line<T>(
        &mut self,
        what: &str,
        within: Duration,
        pred: impl FnMut(&Line) -> Option<T>,
    ) -> T {
        self.try_wait_line(what, within, pred)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Proc::wait_line`] for callers that report rather than panic.
    ///
    /// # Errors
    /// If no such line comes in time or the child closes its output first
    /// (the message carries the child's last output).
    pub fn try_wait_line<T>(
        &mut self,
        what: &str,
        within: Duration,
        mut pred: impl FnMut(&Line) -> Option<T>,
    ) -> Result<T, String> {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(v) = pred(&line) {
                        return Ok(v);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    return Err(format!(
                        "{}: no {what} within {within:?}; last output:\n{}",
                        self.name,
                        self.tail()
                    ));
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(format!(
                        "{}: output ended before {what}; last output:\n{}",
                        self.name,
                        self.tail()
                    ));
                }
            }
        }
    }

    /// Waits for the next JSON line on stdout matching `pred`.
    pub fn wait_json(
        &mut self,
        what: &str,
        within: Duration,
        pred: impl FnMut(&Value) -> bool,
    ) -> Value {
        self.try_wait_json(what, within, pred)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Proc::wait_json`] for callers that report rather than panic.
    ///
    /// # Errors
    /// As [`Proc::try_wait_line`].
    pub fn try_wait_json(
        &mut self,
        what: &str,
        within: Duration,
        mut pred: impl FnMut(&Value) -> bool,
    ) -> Result<Value, String> {
        self.try_wait_line(what, within, |l| {
            if l.stderr {
                return None;
            }
            let v: Value = serde_json::from_str(&l.text).ok()?;
            pred(&v).then_some(v)
        })
    }

    /// Waits for the child to exit (polling, bounded by `within`), then for
    /// its output to drain; returns the status and the whole stdout.
    ///
    /// # Panics
    /// If the child is still running at the deadline.
    pub fn wait_exit(&mut self, within: Duration) -> (ExitStatus, String) {
        self.try_wait_exit(within).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Proc::wait_exit`] for callers that report rather than panic.
    ///
    /// # Errors
    /// If the child is still running at the deadline or cannot be waited for.
    pub fn try_wait_exit(&mut self, within: Duration) -> Result<(ExitStatus, String), String> {
        let deadline = Instant::now() + within;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) if Instant::now() >= deadline => {
                    return Err(format!(
                        "{}: still running after {within:?}; last output:\n{}",
                        self.name,
                        self.tail()
                    ));
                }
                // Polling the child's state, not synchronising on time.
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => return Err(format!("{}: cannot wait: {e}", self.name)),
            }
        };
        self.status = Some(status);
        for r in self.readers.drain(..) {
            // The pipes close when the process is gone; a panicked reader only loses lines.
            let _ = r.join();
        }
        let stdout = self
            .log
            .lock()
            .expect("log lock")
            .iter()
            .filter(|l| !l.stderr)
            .map(|l| format!("{}\n", l.text))
            .collect();
        Ok((status, stdout))
    }

    /// SIGKILLs the child now (a crash: no goodbye) and reaps it.
    pub fn kill(&mut self) {
        if self.status.is_none() {
            // Already exited is fine: the error only says so.
            let _ = self.child.kill();
            self.status = self.child.wait().ok();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

fn reader(
    stream: impl Read + Send + 'static,
    stderr: bool,
    tx: Sender<Line>,
    log: Arc<Mutex<Vec<Line>>>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        for text in BufReader::new(stream).lines() {
            let Ok(text) = text else { break };
            let line = Line { stderr, text };
            if let Ok(mut l) = log.lock() {
                l.push(line.clone());
            }
            // Nobody listening any more is fine: the log still has it.
            let _ = tx.send(line);
        }
    })
}

/// How long a child may take to start and report its address.
pub const STARTUP: Duration = Duration::from_secs(20);

/// A relay process (`relay serve --json --verbose` on 127.0.0.1:0).
#[derive(Debug)]
pub struct Relay {
    /// The process.
    pub proc: Proc,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its replay directory.
    pub record_dir: PathBuf,
    /// Every JSON event line read so far, in order.
    pub events: Vec<Value>,
}

impl Relay {
    /// Starts a relay recording into `record_dir` with extra flags
    /// (`--policy`, `--turn-ms`, ...), and waits for its address.
    pub fn start(record_dir: &Path, extra: &[&str]) -> Self {
        Self::try_start(&bins().relay, record_dir, extra).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Relay::start`] with the relay binary `program`, for callers that
    /// report rather than panic (the `bench` binary runs the release relay).
    ///
    /// # Errors
    /// If the directory cannot be made, the relay cannot start or prints no
    /// valid listening line in time.
    pub fn try_start(program: &Path, record_dir: &Path, extra: &[&str]) -> Result<Self, String> {
        Self::try_start_on(program, "127.0.0.1:0", record_dir, extra)
    }

    /// A relay started again where this one listened, on the same record
    /// directory, with `extra` flags (a restart after a kill).
    pub fn restart(&self, extra: &[&str]) -> Self {
        self.try_restart(&bins().relay, extra)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Relay::restart`] with the relay binary `program`.
    ///
    /// # Errors
    /// As [`Relay::try_start`].
    pub fn try_restart(&self, program: &Path, extra: &[&str]) -> Result<Self, String> {
        let bind = self.addr.to_string();
        Self::try_start_on(program, &bind, &self.record_dir, extra)
    }

    /// [`Relay::try_start`] on the address `bind`.
    ///
    /// # Errors
    /// As [`Relay::try_start`].
    pub fn try_start_on(
        program: &Path,
        bind: &str,
        record_dir: &Path,
        extra: &[&str],
    ) -> Result<Self, String> {
        std::fs::create_dir_all(record_dir)
            .map_err(|e| format!("cannot create {}: {e}", record_dir.display()))?;
        let mut args: Vec<String> = [
            "serve",
            "--bind",
            bind,
            "--json",
            "--verbose",
            "--record-dir",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        args.push(record_dir.display().to_string());
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        let mut proc = Proc::try_spawn("relay", program, &args)?;
        // Start-up lines before it (matches resumed or not) are kept.
        let mut events = Vec::new();
        let v = proc.try_wait_json("listening line", STARTUP, |v| {
            events.push(v.clone());
            v["event"] == "listening"
        })?;
        let addr = v["addr"]
            .as_str()
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| format!("relay: bad listening line {v}"))?;
        Ok(Self {
            proc,
            addr,
            record_dir: record_dir.to_owned(),
            events,
        })
    }

    /// The `/metrics` address of a relay started with `--metrics ADDR`
    /// (its `metrics` line, waited for if not read yet).
    ///
    /// # Panics
    /// If no such line comes (started without `--metrics`).
    pub fn metrics_addr(&mut self) -> SocketAddr {
        self.try_metrics_addr().unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Relay::metrics_addr`] for callers that report rather than panic.
    ///
    /// # Errors
    /// If no valid `metrics` line comes in time.
    pub fn try_metrics_addr(&mut self) -> Result<SocketAddr, String> {
        let seen = self.events_of("metrics").first().map(|v| (*v).clone());
        let v = match seen {
            Some(v) => v,
            None => self.try_wait_event("metrics line", STARTUP, |v| v["event"] == "metrics")?,
        };
        v["addr"]
            .as_str()
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| format!("relay: bad metrics line {v}"))
    }

    /// Waits for the next event matching `pred`, keeping every event read.
    pub fn wait_event(
        &mut self,
        what: &str,
        within: Duration,
        pred: impl FnMut(&Value) -> bool,
    ) -> Value {
        self.try_wait_event(what, within, pred)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Waits until the relay logged `turn_closed` for turn `at` or a later
    /// one (`relay serve --verbose`); returns that event.
    ///
    /// # Errors
    /// As [`Proc::try_wait_line`].
    pub fn try_wait_turn_closed(&mut self, at: u64, within: Duration) -> Result<Value, String> {
        self.try_wait_event(&format!("turn {at} closed"), within, |v| {
            v["event"] == "turn_closed" && v["turn"].as_u64() >= Some(at)
        })
    }

    /// [`Relay::try_wait_turn_closed`], panicking on a timeout.
    pub fn wait_turn_closed(&mut self, at: u64, within: Duration) -> Value {
        self.try_wait_turn_closed(at, within)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Relay::wait_event`] for callers that report rather than panic.
    ///
    /// # Errors
    /// As [`Proc::try_wait_line`].
    pub fn try_wait_event(
        &mut self,
        what: &str,
        within: Duration,
        mut pred: impl FnMut(&Value) -> bool,
    ) -> Result<Value, String> {
        let mut seen = Vec::new();
        let v = self.proc.try_wait_json(what, within, |v| {
            seen.push(v.clone());
            pred(v)
        });
        self.events.extend(seen);
        v
    }

    /// Waits for the replay of a match to be closed; returns its path.
    pub fn wait_recorded(&mut self, within: Duration) -> PathBuf {
        let v = self.wait_event("recorded event", within, |v| v["event"] == "recorded");
        assert_eq!(v["finished"], true, "relay: recording not finished: {v}");
        PathBuf::from(v["path"].as_str().expect("recorded path"))
    }

    /// Events read so far of one kind.
    #[must_use]
    pub fn events_of(&self, kind: &str) -> Vec<&Value> {
        self.events.iter().filter(|v| v["event"] == kind).collect()
    }
}

/// Cuts the last `n` turn records (and what follows them) off the
/// recording `file`, as a machine crash loses what had not reached the
/// disk; returns the first turn lost (`None`: fewer than `n` turns, or the
/// file cannot be read or written).
#[must_use]
pub fn cut_last_turns(file: &Path, n: usize) -> Option<u32> {
    let mut reader = replays::Reader::open(file).ok()?;
    // (turn, bytes before its record)
    let mut starts = Vec::new();
    let mut before = reader.summary().intact_bytes;
    while let Some(Ok(record)) = reader.next() {
        if let replays::Record::Turn { turn, .. } = record {
            starts.push((turn.0, before));
        }
        before = reader.summary().intact_bytes;
    }
    let &(first_lost, keep) = starts.get(starts.len().checked_sub(n)?)?;
    let bytes = std::fs::read(file).ok()?;
    std::fs::write(file, bytes.get(..usize::try_from(keep).ok()?)?).ok()?;
    Some(first_lost)
}

/// A netsim proxy process in front of `upstream`; returns it and its address.
pub fn netsim(upstream: SocketAddr, extra: &[&str]) -> (Proc, SocketAddr) {
    let mut args: Vec<String> = vec![
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--upstream".into(),
        upstream.to_string(),
    ];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    let mut proc = Proc::spawn("netsim", &bins().netsim, &args);
    // `netsim: 127.0.0.1:PORT -> UPSTREAM (seed S)` on stderr.
    let addr = proc.wait_line("listening line", STARTUP, |l| {
        let rest = l.text.strip_prefix("netsim: ")?;
        rest.split_whitespace().next()?.parse().ok()
    });
    (proc, addr)
}

/// What one peer is asked to do.
#[derive(Clone, Debug)]
pub struct PeerSpec {
    /// Address to send to (the relay or a proxy in front of it).
    pub relay: SocketAddr,
    /// Match name.
    pub match_name: String,
    /// Players in the match.
    pub players: u8,
    /// Turns to play.
    pub turns: u32,
    /// Bot seed.
    pub seed: u64,
    /// Further flags (`--desync-at`, `--latency-ms`, ...).
    pub extra: Vec<String>,
}

impl PeerSpec {
    /// Asks the peer to send from `bind` (`--bind IP:0`), and to watch
    /// instead of playing when `spectate`: for tests that need each peer
    /// on a source address of its own (127.0.0.x on loopback).
    #[must_use]
    pub fn from_address(mut self, bind: std::net::Ipv4Addr, spectate: bool) -> Self {
        self.extra
            .extend(["--bind".to_owned(), format!("{bind}:0")]);
        if spectate {
            self.extra.push("--spectate".to_owned());
        }
        self
    }
}

/// The turn of a `peer` progress line on stderr (`turn   42  rtt ...`, see
/// `lockstep::peer::progress_line`), `None` for any other line.
#[must_use]
pub fn progress_turn(line: &str) -> Option<u64> {
    line.strip_prefix("turn")?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Starts a `peer --json` process.
#[must_use]
pub fn peer(spec: &PeerSpec) -> Proc {
    try_peer(&bins().peer, spec).unwrap_or_else(|e| panic!("{e}"))
}

/// [`peer`] with the peer binary `program`, for callers that report
/// rather than panic.
///
/// # Errors
/// If the peer cannot be started.
pub fn try_peer(program: &Path, spec: &PeerSpec) -> Result<Proc, String> {
    Proc::try_spawn(&format!("peer{}", spec.seed), program, &peer_args(spec))
}

/// The `peer` command line [`peer`] runs for `spec` (without the program),
/// for callers that start it through another program (`chrt`, `nice`).
#[must_use]
pub fn peer_args(spec: &PeerSpec) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "--relay".into(),
        spec.relay.to_string(),
        "--match".into(),
        spec.match_name.clone(),
        "--players".into(),
        spec.players.to_string(),
        "--turns".into(),
        spec.turns.to_string(),
        "--seed".into(),
        spec.seed.to_string(),
        "--timeout-s".into(),
        "120".into(),
        "--json".into(),
    ];
    args.extend(spec.extra.iter().cloned());
    args
}

/// A peer's exit code and its parsed `--json` summary.
#[derive(Debug)]
pub struct PeerResult {
    /// Exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    /// The summary object.
    pub summary: Value,
}

/// Waits for a peer to exit and parses its summary.
///
/// # Panics
/// If it does not exit in time or prints no JSON summary.
pub fn finish_peer(p: &mut Proc, within: Duration) -> PeerResult {
    try_finish_peer(p, within).unwrap_or_else(|e| panic!("{e}"))
}

/// [`finish_peer`] for callers that report rather than panic.
///
/// # Errors
/// If the peer does not exit in time or prints no JSON summary.
pub fn try_finish_peer(p: &mut Proc, within: Duration) -> Result<PeerResult, String> {
    let (status, out) = p.try_wait_exit(within)?;
    let summary = serde_json::from_str(&out).map_err(|e| {
        format!(
            "{}: no JSON summary ({e}); exit {status}; output:\n{}",
            p.name(),
            p.tail()
        )
    })?;
    Ok(PeerResult {
        code: status.code(),
        summary,
    })
}

/// `replay verify FILE --json`: its exit code and report.
#[must_use]
pub fn replay_verify(path: &Path) -> (Option<i32>, Value) {
    let args = vec![
        "verify".to_owned(),
        path.display().to_string(),
        "--json".to_owned(),
    ];
    let mut p = Proc::spawn("replay verify", &bins().replay, &args);
    let (status, out) = p.wait_exit(Duration::from_secs(60));
    let v = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("replay verify: bad JSON ({e}):\n{}", p.tail()));
    (status.code(), v)
}

/// The body of `GET path` from a relay's HTTP address (empty if it cannot
/// be reached: a request is a diagnostic, the caller asserts).
#[must_use]
pub fn http_get(addr: SocketAddr, path: &str) -> String {
    use std::io::Write;
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else {
        return String::new();
    };
    // The relay answers each request within 2 s of its accept.
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    // An IP address as Host: the live view refuses other names (DNS rebinding).
    let _ = write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    let mut r = String::new();
    let _ = s.read_to_string(&mut r);
    r.split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default()
}

/// The body of `GET /metrics` from a relay's metrics address ([`http_get`]).
#[must_use]
pub fn scrape_metrics(addr: SocketAddr) -> String {
    http_get(addr, "/metrics")
}

/// The value of the sample `name` (with its labels, e.g.
/// `relay_transport_drops_total{reason="bulk_refused"}`) in a metrics page.
#[must_use]
pub fn metric(page: &str, name: &str) -> Option<u64> {
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// A `kB` field (`VmRSS`, `VmHWM`, ...) of a `/proc/<pid>/status` text.
#[must_use]
pub fn status_field_kib(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|l| {
        l.strip_prefix(field)?
            .strip_prefix(':')?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    })
}

/// A `kB` field (`VmRSS`: resident now, `VmHWM`: peak resident) of process
/// `pid`, from `/proc/<pid>/status` (Linux); `None` if it cannot be read.
#[must_use]
pub fn proc_status_kib(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status_field_kib(&text, field)
}

/// How many of the tests that start several processes each (the end-to-end
/// matches, the hostile crowds) run at once. They wait on timers and sockets
/// far more than they compute (the seven `e2e` tests: 38 s of wall time for
/// under 8 s of CPU, measured on the 2-core machine), so several share the
/// cores well; a bound still keeps a crowd of them from starving a peer
/// until it looks crashed.
pub const HEAVY_AT_ONCE: usize = 4;

/// A place among the [`HEAVY_AT_ONCE`] process-heavy tests: hold it for the
/// whole test. The integration tests are one binary, so this one static
/// covers every module.
pub fn heavy() -> HeavyPermit {
    HeavyPermit::acquire()
}

/// Every place among the process-heavy tests at once: for a test whose
/// own process must keep up in real time (the hostile crowds drive eight
/// clients from one thread against the relay's per-turn budget: starved
/// beside four other process tests and a background build, late inputs
/// were refused as over budget, 280 of 2,944 in one CI run). Waits until
/// no other heavy test runs.
pub fn heavy_alone() -> HeavyPermit {
    let mut running = HEAVY_RUNNING.lock().unwrap_or_else(PoisonError::into_inner);
    while *running > 0 {
        running = HEAVY_FREED
            .wait(running)
            .unwrap_or_else(PoisonError::into_inner);
    }
    *running = HEAVY_AT_ONCE;
    HeavyPermit(HEAVY_AT_ONCE)
}

/// Held places among the process-heavy tests, given back on drop.
#[must_use = "the places are given back when this is dropped"]
pub struct HeavyPermit(usize);

static HEAVY_RUNNING: Mutex<usize> = Mutex::new(0);
static HEAVY_FREED: Condvar = Condvar::new();

impl HeavyPermit {
    fn acquire() -> Self {
        // A panicked test poisons the lock; the count is still right, as
        // the panicking test's permit was dropped while unwinding.
        let mut running = HEAVY_RUNNING.lock().unwrap_or_else(PoisonError::into_inner);
        while *running >= HEAVY_AT_ONCE {
            running = HEAVY_FREED
                .wait(running)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *running += 1;
        Self(1)
    }
}

impl Drop for HeavyPermit {
    fn drop(&mut self) {
        let mut running = HEAVY_RUNNING.lock().unwrap_or_else(PoisonError::into_inner);
        *running -= self.0;
        HEAVY_FREED.notify_all();
    }
}

/// A fresh scratch directory for one test, removed first if left over.
#[must_use]
pub fn scratch_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lockstep-e2e-{}-{test}", std::process::id()));
    // A leftover from an earlier run with the same pid is stale.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// SplitMix64: a tiny seeded generator for picking fault turns.
#[derive(Clone, Debug)]
pub struct SplitMix(pub u64);

impl SplitMix {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A value in `lo..hi`.
    pub fn range(&mut self, lo: u32, hi: u32) -> u32 {
        let span = u64::from(hi.saturating_sub(lo).max(1));
        lo + u32::try_from(self.next_u64() % span).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A peer's progress line gives its turn; no other line does.
    #[test]
    fn progress_turn_reads_only_progress_lines() {
        let line = "turn    42  rtt   12.3 ms  loss  0.0%  stall      0 ms  delay 2";
        assert_eq!(progress_turn(line), Some(42));
        assert_eq!(progress_turn("turned 5"), None);
        assert_eq!(progress_turn("peer 2 error: turn 5"), None);
    }

    #[test]
    fn status_fields_and_metrics_are_read_by_their_exact_name() {
        let status = "Name:\trelay\nVmHWM:\t  183204 kB\nVmRSS:\t   91696 kB\n";
        assert_eq!(status_field_kib(status, "VmHWM"), Some(183_204));
        assert_eq!(status_field_kib(status, "VmRSS"), Some(91_696));
        assert_eq!(status_field_kib(status, "VmRS"), None);
        let page = "# TYPE relay_peers gauge\nrelay_peers 256\nrelay_peers_max 9\n\
                    relay_drops_total{reason=\"bulk_refused\"} 17\n";
        assert_eq!(metric(page, "relay_peers"), Some(256));
        assert_eq!(
            metric(page, "relay_drops_total{reason=\"bulk_refused\"}"),
            Some(17)
        );
        assert_eq!(metric(page, "relay_drops_total"), None);
        let me = proc_status_kib(std::process::id(), "VmRSS");
        assert!(me.is_some_and(|k| k > 0), "{me:?}");
    }
}
