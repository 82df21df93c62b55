//! The replay viewer in a real headless Chromium: every golden replay of
//! `replays/tests/data` re-simulated by the page's WebAssembly must give,
//! turn for turn, the hashes native `replays::verify` computes; the page
//! draws units, seeks, and shows the turn's hash as text.
//!
//! Needs Chromium, chromedriver and the viewer's module, so it is ignored
//! by `cargo test --workspace`; `tests/browser.sh` (run by CI) installs
//! them and runs it with `--ignored`.

use serde_json::Value;
use sim::Simulation;
use std::path::{Path, PathBuf};
use tests::browser::{Browser, BrowserBins, CANVAS_STATS, ViewerServer};
use tests::harness::{bins, scratch_dir};

/// Every turn's hash as native verification computes it, as the page lists
/// them (`[{turn, hash}]`), and whether it verified.
fn native(path: &Path) -> (Vec<Value>, bool) {
    fn run<S: Simulation>(path: &Path) -> (Vec<Value>, bool) {
        let reader = replays::Reader::open(path).expect("open fixture");
        let mut list = Vec::new();
        let report = replays::verify::<S, _>(reader, |p| {
            list.push(serde_json::json!({"turn": p.turn.0, "hash": p.hash.to_hex()}));
        });
        (list, report.is_ok_and(|r| r.verified()))
    }
    let header = replays::Reader::open(path)
        .expect("open fixture")
        .header()
        .clone();
    if header.game_id == sim::arena::Arena::GAME_ID {
        run::<sim::arena::Arena>(path)
    } else {
        run::<sim::game::World>(path)
    }
}

fn fixtures() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../replays/tests/data");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("fixtures directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "replay"))
        .collect();
    files.sort();
    files
}

#[test]
#[ignore = "needs Chromium, chromedriver and the viewer's wasm: run by tests/browser.sh"]
fn golden_replays_hash_the_same_in_the_browser_and_the_page_draws_and_seeks() {
    let b = BrowserBins::from_env().unwrap_or_else(|e| panic!("{e}"));
    b.require_wasm().unwrap_or_else(|e| panic!("{e}"));
    let dir = scratch_dir("browser");
    let browser =
        Browser::start(&b, &dir.join("profile"), 1280, 800).unwrap_or_else(|e| panic!("{e}"));
    let files = fixtures();
    assert!(
        files.len() >= 5,
        "the golden replays are missing: {files:?}"
    );
    for file in &files {
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (expected, verified) = native(file);
        assert!(
            !expected.is_empty(),
            "{name}: native verify computed no turn"
        );

        let server =
            ViewerServer::start(&bins().replay, file, &b.wasm).unwrap_or_else(|e| panic!("{e}"));
        browser.goto(&server.url).unwrap_or_else(|e| panic!("{e}"));
        let opened = browser
            .eval_async("viewer.ready")
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            opened,
            Value::Bool(true),
            "{name}: the page did not open the recording"
        );

        // 1. replays::verify in WebAssembly: the same hash after every turn.
        let page = browser
            .eval_async("viewer.verify()")
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            page["turn_hashes"].as_array(),
            Some(&expected),
            "{name}: per-turn hashes differ from native"
        );
        assert_eq!(
            page["verified"],
            Value::Bool(verified),
            "{name}: verdict differs from native"
        );

        // 2. The page's own background pass (what it draws from) agrees too.
        let indexed = browser
            .eval_async(
                "new Promise(resolve => { const wait = () => { const s = viewer.indexState(); \
                 s && s.done ? resolve(viewer.indexHashes()) : requestAnimationFrame(wait); }; wait(); })",
            )
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let indexed = indexed.as_array().cloned().unwrap_or_default();
        let common = indexed.len().min(expected.len());
        assert!(common > 0, "{name}: the page's pass computed no turn");
        assert_eq!(
            indexed[..common],
            expected[..common],
            "{name}: the page's pass differs from native"
        );

        // 3. Seeking lands on the turn, and the hash on screen is native's.
        let pick = &expected[expected.len() * 2 / 3];
        let turn = pick["turn"].as_u64().unwrap_or_default();
        let seeked = browser
            .eval(&format!("return viewer.seek({turn}).state"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            seeked["turn"].as_u64(),
            Some(turn),
            "{name}: seek landed elsewhere"
        );
        assert_eq!(
            seeked["hash"], pick["hash"],
            "{name}: the hash after seeking differs"
        );
        let shown = browser
            .eval("return document.getElementById('hash-value').textContent")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            shown, pick["hash"],
            "{name}: the hash on screen is not the turn's"
        );

        // 4. Units are drawn: coloured pixels of at least two players' colours.
        let pixels = browser
            .eval_async(CANVAS_STATS)
            .unwrap_or_else(|e| panic!("{e}"));
        let players = pixels["players"].as_u64().unwrap_or_default();
        assert!(
            players >= 2,
            "{name}: fewer than two players' colours drawn: {pixels}"
        );
        assert!(
            pixels["lit"].as_u64().unwrap_or_default() * 20
                > pixels["total"].as_u64().unwrap_or(u64::MAX),
            "{name}: under 5 % of the canvas drawn: {pixels}"
        );
        drop(server);
    }
}

/// Takes a live viewer place as a browser would (the WebSocket upgrade of
/// `/live` for the match `href` links to), held until the stream drops.
fn hold_live_place(addr: std::net::SocketAddr, href: &str) -> std::net::TcpStream {
    use std::io::{Read, Write};
    let id = href.rsplit('=').next().unwrap_or_default();
    let mut s = std::net::TcpStream::connect(addr).expect("connect to the relay's http");
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("timeout");
    write!(
        s,
        "GET /live?match={id} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    .expect("request");
    let mut head = [0u8; 12];
    s.read_exact(&mut head).expect("the relay's answer");
    assert_eq!(&head, b"HTTP/1.1 101", "the upgrade is accepted");
    s
}

/// What the page shows and knows, for a failure message.
fn page_status(browser: &Browser) -> String {
    browser
        .eval(
            "return JSON.stringify({meta: document.getElementById('meta').textContent, \
             error: document.getElementById('error').textContent, live: viewer.live(), \
             state: viewer.state(), index: viewer.indexState(), \
             turns: viewer.info() && viewer.info().turn_records, keyframes: viewer.info() && viewer.info().keyframes})",
        )
        .map_or_else(|e| e, |v| v.as_str().unwrap_or_default().to_owned())
}

/// Polls `f` until it gives `Some`, for at most `within`; panics naming `what`.
fn poll<T>(what: &str, within: std::time::Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let until = std::time::Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(std::time::Instant::now() < until, "timed out: {what}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// `relay serve --http` with a running match: the page lists it (name,
/// game, players, turn), its live view (a late spectator: it starts from
/// the agreed snapshot) draws the players' units, a closed tab frees the
/// spectator place at once, a refused feed says why on the page (no such
/// match; every live viewer place taken), and at the match's end the page shows the hash
/// the relay agreed for the last turn, seeks to an earlier turn with the
/// relay's hash for it, and every hash the page reported was verified by
/// the relay as a spectator's.
#[test]
#[ignore = "needs Chromium, chromedriver and the viewer's wasm: run by tests/browser.sh"]
fn a_running_match_is_listed_and_watched_live_with_the_relays_hashes() {
    use std::time::Duration;
    use tests::harness::{PeerSpec, Relay, finish_peer, http_get, metric, peer, scrape_metrics};
    let b = BrowserBins::from_env().unwrap_or_else(|e| panic!("{e}"));
    b.require_wasm().unwrap_or_else(|e| panic!("{e}"));
    let dir = scratch_dir("browser-live");
    let wasm = b.wasm.display().to_string();
    let mut relay = Relay::start(
        &dir.join("replays"),
        &[
            "--http",
            "127.0.0.1:0",
            "--viewer-wasm",
            &wasm,
            "--turn-ms",
            "50",
            "--snapshot-every",
            "40",
            "--spectator-delay-ms",
            "300",
            "--max-live-viewers",
            "1",
        ],
    );
    let http = relay.metrics_addr();
    let turns = 700;
    let mut peers: Vec<_> = (1..=2)
        .map(|seed| {
            peer(&PeerSpec {
                relay: relay.addr,
                match_name: "live-duel".into(),
                players: 2,
                turns,
                seed,
                extra: Vec::new(),
            })
        })
        .collect();
    let browser =
        Browser::start(&b, &dir.join("profile"), 1280, 800).unwrap_or_else(|e| panic!("{e}"));

    // 1. The list: the match with its game and players, its turn going up.
    let base = format!("http://{http}");
    browser
        .goto(&format!("{base}/"))
        .unwrap_or_else(|e| panic!("{e}"));
    let row = browser
        .wait_for(
            "the match listed past turn 60",
            Duration::from_secs(60),
            "(() => { const r = document.querySelector('#matches tr:nth-child(2)'); \
             return r && +r.cells[3].textContent > 60 && \
             {text: r.textContent, href: r.querySelector('a').getAttribute('href')}; })()",
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let text = row["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("live-duel") && text.contains("lockstep-rts"),
        "{row}"
    );
    poll("a snapshot agreed", Duration::from_secs(60), || {
        metric(
            &scrape_metrics(http),
            "relay_snapshots_total{outcome=\"agreed\"}",
        )
        .filter(|n| *n > 0)
    });
    let href = row["href"].as_str().unwrap_or_default().to_owned();
    assert!(href.starts_with("watch?match="), "{href}");
    let live_url = format!("{base}/{href}");

    // 2. The live view draws units, from the agreed snapshot (a keyframe).
    browser.goto(&live_url).unwrap_or_else(|e| panic!("{e}"));
    let first = browser
        .wait_for(
            "the live view's first turns",
            Duration::from_secs(60),
            "viewer.info() && viewer.state() && viewer.state().turn > 60 && viewer.units() > 0 && viewer.info()",
        )
        .unwrap_or_else(|e| panic!("{e}: {}", page_status(&browser)));
    assert!(
        first["keyframes"].as_array().is_some_and(|k| !k.is_empty()),
        "a late joiner starts from a keyframe: {}",
        first["keyframes"]
    );
    let pixels = browser
        .eval_async(CANVAS_STATS)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        pixels["players"].as_u64().unwrap_or_default() >= 2,
        "fewer than two players' colours drawn: {pixels}"
    );
    let viewers = |addr| {
        serde_json::from_str::<Value>(&http_get(addr, "/matches.json"))
            .ok()
            .and_then(|j| j["viewers"].as_u64())
    };
    assert_eq!(viewers(http), Some(1));

    // 3. Closing the tab frees the place at once; a new view joins again.
    browser
        .goto("about:blank")
        .unwrap_or_else(|e| panic!("{e}"));
    poll("the viewer place freed", Duration::from_secs(20), || {
        (viewers(http) == Some(0)).then_some(())
    });

    // 4. A refused live feed says why: no such match; every place taken.
    let why = |url: &str| {
        browser.goto(url).unwrap_or_else(|e| panic!("{e}"));
        let v = browser
            .wait_for(
                "the page's reason for a refused feed",
                Duration::from_secs(20),
                "viewer.live() && viewer.live().closed && viewer.live().closed.why",
            )
            .unwrap_or_else(|e| panic!("{e}: {}", page_status(&browser)));
        let shown = browser
            .eval("return document.getElementById('error').textContent")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v, shown, "the reason is shown on the page");
        v.as_str().unwrap_or_default().to_owned()
    };
    let missing = why(&format!("{base}/watch?match=987654"));
    assert!(missing.contains("987654 is not running"), "{missing}");
    let held = hold_live_place(http, &href);
    assert_eq!(viewers(http), Some(1));
    let full = why(&live_url);
    assert!(
        full.contains("all 1 live viewer places") && full.contains("--max-live-viewers"),
        "{full}"
    );
    drop(held);
    poll("the held place freed", Duration::from_secs(20), || {
        (viewers(http) == Some(0)).then_some(())
    });
    browser.goto(&live_url).unwrap_or_else(|e| panic!("{e}"));

    // 5. At the end the page shows the relay's agreed hash of the last turn.
    let done = browser
        .wait_for(
            "the match's end in the live view",
            Duration::from_secs(120),
            "(() => { const l = viewer.live(), s = viewer.state(), i = viewer.indexState(); \
             return l && l.ended && l.closed && s && s.at_end && i && i.done && \
             {state: s, shown_turn: document.getElementById('hash-turn').textContent, \
              shown: document.getElementById('hash-value').textContent, live: l}; })()",
        )
        .unwrap_or_else(|e| panic!("{e}: {}", page_status(&browser)));
    for p in &mut peers {
        let r = finish_peer(p, Duration::from_secs(120));
        assert_eq!(r.code, Some(0), "peer: {}", r.summary);
    }
    let recording = relay.wait_recorded(Duration::from_secs(60));
    let mut agreed = std::collections::BTreeMap::new();
    for rec in replays::Reader::open(&recording).expect("the relay's recording") {
        if let Ok(replays::Record::Hash { turn, hash }) = rec {
            agreed.insert(u64::from(turn.0), hash.to_hex());
        }
    }
    let last = done["state"]["turn"].as_u64().unwrap_or_default();
    assert_eq!(
        last,
        u64::from(turns) - 1,
        "the view followed to the last turn: {done}"
    );
    assert_eq!(done["shown_turn"], last.to_string());
    assert_eq!(
        done["shown"].as_str(),
        agreed.get(&last).map(String::as_str),
        "the page's final hash is the relay's agreed one"
    );

    // What the page says it checked: never a check mark over zero
    // comparisons (it said "every 0 recorded hashes ✓ equal" live, where
    // the stream carries no recorded hash), and how many of its hashes
    // went to the relay, which compares them.
    let check = browser
        .eval("return document.getElementById('check').textContent")
        .unwrap_or_else(|e| panic!("{e}"));
    let check = check.as_str().unwrap_or_default();
    assert!(!check.contains(" 0 recorded hash"), "{check}");
    assert!(check.contains("sent to the relay for checking"), "{check}");

    // 5. The timeline seeks, to the relay's hash of that turn.
    let mid = last * 3 / 4;
    let seeked = browser
        .eval(&format!(
            "viewer.seek({mid}); return document.getElementById('hash-value').textContent"
        ))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(seeked.as_str(), agreed.get(&mid).map(String::as_str));

    // The page's own frame figures (for the report, not asserted).
    if let Ok(stats) = browser.eval("return viewer.frameStats()") {
        eprintln!("live view frame stats: {stats}");
    }

    // 6. The relay checked the page's hashes as a spectator's: equal.
    let page = scrape_metrics(http);
    let verified = metric(&page, "relay_spectator_hashes_total{result=\"verified\"}");
    let mismatched = metric(&page, "relay_spectator_hashes_total{result=\"mismatch\"}");
    assert!(verified.unwrap_or_default() > 100, "verified {verified:?}");
    assert_eq!(mismatched, Some(0));
}
