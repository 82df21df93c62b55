//! Headless Chromium driven over W3C WebDriver (the system's `chromedriver`),
//! and the replay viewer served by `replay view`: what the browser test and
//! the viewer's bench section share.
//!
//! The WebDriver client is a few JSON requests over `std::net` (new session,
//! navigate, execute script, delete session): a full client crate would
//! bring an async runtime for four calls.

use crate::harness::Proc;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long one WebDriver call may take (a whole-recording verify in the
/// page included).
const CALL_TIMEOUT: Duration = Duration::from_secs(300);

/// The programs the browser tests need, from the environment or Debian's
/// packages (`apt-get install chromium chromium-driver`).
#[derive(Clone, Debug)]
pub struct BrowserBins {
    /// `chromedriver` (`CHROMEDRIVER`, default `/usr/bin/chromedriver`).
    pub chromedriver: PathBuf,
    /// The browser (`CHROMIUM`, default `/usr/bin/chromium`).
    pub chromium: PathBuf,
    /// The viewer's WebAssembly module (`LOCKSTEP_VIEWER_WASM`, default
    /// `target/wasm32-unknown-unknown/wasm/viewer.wasm` in the workspace).
    pub wasm: PathBuf,
}

impl BrowserBins {
    /// The programs from the environment, with the defaults above (the
    /// module is checked by [`BrowserBins::require_wasm`]).
    ///
    /// # Errors
    /// A program is missing (the message says how to get it).
    pub fn from_env() -> Result<Self, String> {
        let env =
            |k: &str, d: &str| std::env::var_os(k).map_or_else(|| PathBuf::from(d), PathBuf::from);
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let bins = Self {
            chromedriver: env("CHROMEDRIVER", "/usr/bin/chromedriver"),
            chromium: env("CHROMIUM", "/usr/bin/chromium"),
            wasm: std::env::var_os("LOCKSTEP_VIEWER_WASM").map_or_else(
                || workspace.join("target/wasm32-unknown-unknown/wasm/viewer.wasm"),
                PathBuf::from,
            ),
        };
        for (p, how) in [
            (
                &bins.chromedriver,
                "apt-get install chromium-driver (or set CHROMEDRIVER)",
            ),
            (&bins.chromium, "apt-get install chromium (or set CHROMIUM)"),
        ] {
            if !p.is_file() {
                return Err(format!("{} is missing: {how}", p.display()));
            }
        }
        Ok(bins)
    }

    /// Checks that the viewer's module is built.
    ///
    /// # Errors
    /// It is missing (the message says how to build it).
    pub fn require_wasm(&self) -> Result<(), String> {
        if self.wasm.is_file() {
            Ok(())
        } else {
            Err(format!(
                "{} is missing: cargo build --profile wasm -p lockstep-viewer --target wasm32-unknown-unknown (or set LOCKSTEP_VIEWER_WASM)",
                self.wasm.display()
            ))
        }
    }
}

/// A headless Chromium session; the session and both processes end on drop.
pub struct Browser {
    driver: Proc,
    addr: SocketAddr,
    session: String,
}

impl Browser {
    /// Starts `chromedriver` on a free loopback port and opens a headless
    /// session of `bins.chromium` with a fresh profile in `profile_dir`,
    /// `width` × `height` pixels.
    ///
    /// # Errors
    /// A program does not start, or the session is refused.
    pub fn start(
        bins: &BrowserBins,
        profile_dir: &Path,
        width: u32,
        height: u32,
    ) -> Result<Self, String> {
        let mut driver = Proc::try_spawn(
            "chromedriver",
            &bins.chromedriver,
            &["--port=0".to_owned(), "--allowed-ips=127.0.0.1".to_owned()],
        )?;
        let port: u16 = driver.try_wait_line("its port", Duration::from_secs(30), |l| {
            l.text
                .split("started successfully on port ")
                .nth(1)
                .and_then(|rest| rest.trim_end_matches('.').trim().parse().ok())
        })?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        // The flags a closed network and a root sandbox need (see the env notes):
        // no background traffic, no sandbox, no GPU, a new empty profile.
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .chain([
            format!("--user-data-dir={}", profile_dir.display()),
            format!("--window-size={width},{height}"),
        ])
        .collect::<Vec<_>>();
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "timeouts": {"script": CALL_TIMEOUT.as_millis(), "pageLoad": 60_000},
            "goog:chromeOptions": {"binary": bins.chromium, "args": args},
        }}});
        let answer = request(addr, "POST", "/session", Some(&caps))?;
        let session = answer["value"]["sessionId"]
            .as_str()
            .ok_or_else(|| format!("chromedriver refused the session: {answer}"))?
            .to_owned();
        Ok(Self {
            driver,
            addr,
            session,
        })
    }

    /// Loads `url` and waits for the page's load event.
    ///
    /// # Errors
    /// The navigation fails.
    pub fn goto(&self, url: &str) -> Result<(), String> {
        self.call("url", &json!({"url": url})).map(|_| ())
    }

    /// Runs `script` (a function body; `return` gives the value) in the page.
    ///
    /// # Errors
    /// The script throws or the call fails.
    pub fn eval(&self, script: &str) -> Result<Value, String> {
        self.call("execute/sync", &json!({"script": script, "args": []}))
    }

    /// Runs `expr`, a JavaScript expression giving a promise, and returns
    /// what it resolves to.
    ///
    /// # Errors
    /// The promise rejects or the call fails.
    pub fn eval_async(&self, expr: &str) -> Result<Value, String> {
        let script = format!(
            "const done = arguments[arguments.length - 1];\n\
             Promise.resolve().then(() => ({expr})).then(v => done({{ok: v}}), e => done({{err: String(e && e.stack || e)}}));"
        );
        let v = self.call("execute/async", &json!({"script": script, "args": []}))?;
        match v.get("err") {
            Some(e) => Err(format!("in the page: {}", e.as_str().unwrap_or_default())),
            None => Ok(v.get("ok").cloned().unwrap_or(Value::Null)),
        }
    }

    /// Evaluates the JavaScript expression `cond` in the page every 50 ms
    /// until it gives a truthy value, which is returned; an error naming
    /// `what` once `within` passed (the deadline is kept by the page).
    ///
    /// # Errors
    /// The deadline passed, the expression threw, or the call failed.
    pub fn wait_for(&self, what: &str, within: Duration, cond: &str) -> Result<Value, String> {
        let what = what.replace(['\\', '"'], " ");
        self.eval_async(&format!(
            "new Promise((resolve, reject) => {{ const t0 = performance.now(); \
             const tick = () => {{ let v; try {{ v = ({cond}); }} catch (e) {{ reject(e); return; }} \
             if (v) resolve(v); else if (performance.now() - t0 > {ms}) reject(new Error(\"timed out waiting for {what}\")); \
             else setTimeout(tick, 50); }}; tick(); }})",
            ms = within.as_millis()
        ))
    }

    fn call(&self, what: &str, body: &Value) -> Result<Value, String> {
        let path = format!("/session/{}/{what}", self.session);
        let answer = request(self.addr, "POST", &path, Some(body))?;
        // A W3C error is an object with a string `error` code and a
        // message; a script's own result may hold an `error` field too.
        if let Some(err) = answer["value"].get("error").and_then(Value::as_str)
            && answer["value"].get("message").is_some()
        {
            return Err(format!(
                "webdriver {what}: {err}: {}",
                answer["value"]["message"]
            ));
        }
        Ok(answer["value"].clone())
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = request(
            self.addr,
            "DELETE",
            &format!("/session/{}", self.session),
            None,
        );
        self.driver.kill();
    }
}

/// One HTTP/1.1 request with a JSON body to chromedriver; the JSON answer.
fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<Value, String> {
    let fail = |e: std::io::Error| format!("webdriver {method} {path}: {e}");
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).map_err(fail)?;
    stream.set_read_timeout(Some(CALL_TIMEOUT)).map_err(fail)?;
    let body = body.map(Value::to_string).unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).map_err(fail)?;
    stream.write_all(body.as_bytes()).map_err(fail)?;
    let mut reader = BufReader::new(stream);
    let mut length = None;
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).map_err(fail)? == 0 {
            break;
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            length = v.trim().parse::<usize>().ok();
        }
    }
    let mut raw = Vec::new();
    match length {
        Some(n) => {
            raw.resize(n, 0);
            reader.read_exact(&mut raw).map_err(fail)?;
        }
        None => {
            reader.read_to_end(&mut raw).map_err(fail)?;
        }
    }
    serde_json::from_slice(&raw).map_err(|e| format!("webdriver {method} {path}: not JSON ({e})"))
}

/// A JavaScript expression giving a promise of what the viewer's canvas
/// shows two frames from now: `{lit, players, total}`, the pixels brighter
/// than the background, how many of the eight players' colours appear
/// exactly, and all pixels. Units are drawn when at least two players'
/// colours are there and a good part of the canvas is lit.
pub const CANVAS_STATS: &str = "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => { \
     const c = document.getElementById('world'); const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; \
     const colours = [[0xe6,0x19,0x4b],[0x3c,0xb4,0x4b],[0x43,0x63,0xd8],[0xf5,0x82,0x31],[0xb1,0x5c,0xe6],[0x42,0xd4,0xf4],[0xf0,0x32,0xe6],[0xbf,0xef,0x45]]; \
     const seen = colours.map(() => 0); let lit = 0; \
     for (let i = 0; i < d.length; i += 4) { if (d[i] + d[i+1] + d[i+2] > 60) lit++; \
       colours.forEach((c, k) => { if (d[i] === c[0] && d[i+1] === c[1] && d[i+2] === c[2]) seen[k]++; }); } \
     r({lit, players: seen.filter(n => n > 0).length, total: d.length / 4}); })))";

/// `replay view FILE` on a free loopback port, stopped on drop.
pub struct ViewerServer {
    proc: Proc,
    /// The page's address, e.g. `http://127.0.0.1:41234/`.
    pub url: String,
    /// What it printed before the address (e.g. the keyframed copy it made).
    pub notes: Vec<String>,
}

impl ViewerServer {
    /// Starts `replay` (the binary at `replay`) serving `file` with the module `wasm`.
    ///
    /// # Errors
    /// It does not start or print its address.
    pub fn start(replay: &Path, file: &Path, wasm: &Path) -> Result<Self, String> {
        let args = [
            "view".to_owned(),
            file.display().to_string(),
            "--bind".to_owned(),
            "127.0.0.1:0".to_owned(),
            "--wasm".to_owned(),
            wasm.display().to_string(),
        ];
        let mut proc = Proc::try_spawn("replay view", replay, &args)?;
        let mut notes = Vec::new();
        let url = proc.try_wait_line("its address", Duration::from_secs(120), |l| {
            if !l.text.contains(" at http") {
                notes.push(l.text.clone());
            }
            l.text
                .split(" at ")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
                .map(str::to_owned)
        })?;
        Ok(Self { proc, url, notes })
    }
}

impl Drop for ViewerServer {
    fn drop(&mut self) {
        self.proc.kill();
    }
}
